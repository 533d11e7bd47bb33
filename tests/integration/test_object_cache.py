"""The apiserver's watch-fed object cache (`ephemera.apiserver.informers`) as the admission
plugins read it: ServiceAccounts, LimitRanges and ResourceQuotas come from the cache, not the
store, and a request sees every write this apiserver answered before it started, even when the
cache's watch delivers late (the watches here are slowed down on purpose): a LimitRange or
quota created just before applies, a deleted one stops applying, a deleted ServiceAccount is
not found. (Quota charging under concurrent creates through the cache:
test_quota_limitranger.py's `test_concurrent_creates_*`.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, serve

from ephemera.apiserver.app import OBJECT_CACHE, REGISTRY
from ephemera.apiserver.informers import ObjectCache, Reflector
from ephemera.apiserver.resources import core_resource
from ephemera.store import Event, KeyValue, Store, open_store

NS = "/api/v1/namespaces/default"
WATCH_DELAY = 0.3
SLOWED = ("/registry/limitranges/", "/registry/resourcequotas/", "/registry/serviceaccounts/")


class SlowWatcher:
    """A store watcher whose items each arrive `WATCH_DELAY` seconds late."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for item in self.inner:
            await asyncio.sleep(WATCH_DELAY)
            yield item

    async def close(self) -> None:
        await self.inner.close()


def slow_watches(store: Store) -> None:
    real_watch = store.watch

    async def watch(prefix: str, after_revision: int, **options: Any) -> Any:
        watcher = await real_watch(prefix, after_revision, **options)
        return SlowWatcher(watcher) if prefix.startswith(SLOWED) else watcher

    store.watch = watch  # type: ignore[method-assign]


def count_reads(store: Store) -> list[str]:
    """The prefixes and keys of every store list and get from now on."""
    seen: list[str] = []
    real_list, real_get = store.list, store.get

    async def list_(prefix: str, **kw: Any) -> Any:
        seen.append(prefix)
        return await real_list(prefix, **kw)

    async def get(key: str) -> KeyValue | None:
        seen.append(key)
        return await real_get(key)

    store.list = list_  # type: ignore[method-assign]
    store.get = get  # type: ignore[method-assign]
    return seen


@pytest.fixture
async def slow_api(tmp_path: Path) -> AsyncIterator[Api]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    slow_watches(store)
    try:
        async for served in serve(store):
            yield served
    finally:
        await store.close()


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], **spec}}


def limit_range(name: str, defaults: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name},
            "spec": {"limits": [{"type": "Container", "default": defaults}]}}


async def created(api: Api, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, out = await api.post(path, body)
    assert status == 201, out
    return dict(out)


def limits(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["spec"]["containers"][0]["resources"].get("limits", {}))


async def test_limit_ranges_written_just_before_a_create_apply_and_deleted_ones_do_not(
        slow_api: Api) -> None:
    await created(slow_api, f"{NS}/limitranges", limit_range("a", {"memory": "64Mi"}))
    await created(slow_api, f"{NS}/limitranges", limit_range("b", {"cpu": "100m"}))
    first = await created(slow_api, f"{NS}/pods", pod("p1"))
    assert limits(first) == {"memory": "64Mi", "cpu": "100m"}

    status, _ = await slow_api.delete(f"{NS}/limitranges/a")
    assert status == 200
    second = await created(slow_api, f"{NS}/pods", pod("p2"))
    assert limits(second) == {"cpu": "100m"}

    status, _ = await slow_api.delete(f"{NS}/limitranges/b")
    assert status == 200
    third = await created(slow_api, f"{NS}/pods", pod("p3"))
    assert limits(third) == {}
    assert "kubernetes.io/limit-ranger" not in third["metadata"].get("annotations", {})


async def quota_with_status(api: Api, name: str, hard: dict[str, str]) -> None:
    """A quota with the status the quota controller would write (nothing used)."""
    quota = await created(api, f"{NS}/resourcequotas", {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
        "spec": {"hard": hard}})
    quota["status"] = {"hard": hard, "used": {k: "0" for k in hard}}
    status, out = await api.put(f"{NS}/resourcequotas/{name}/status", quota)
    assert status == 200, out


async def test_a_quota_written_just_before_a_create_counts(slow_api: Api) -> None:
    await quota_with_status(slow_api, "roomy", {"pods": "5"})
    await created(slow_api, f"{NS}/pods", pod("p1"))
    await quota_with_status(slow_api, "full", {"pods": "0"})
    status, out = await slow_api.post(f"{NS}/pods", pod("p2"))
    assert (status, out["message"]) == (
        403, 'pods "p2" is forbidden: exceeded quota: full, requested: pods=1, used: pods=0, '
             "limited: pods=0")

    status, _ = await slow_api.delete(f"{NS}/resourcequotas/full")
    assert status == 200
    await created(slow_api, f"{NS}/pods", pod("p3"))
    status, out = await slow_api.get(f"{NS}/resourcequotas/roomy")
    assert out["status"]["used"] == {"pods": "2"}


async def test_a_service_account_created_or_deleted_just_before_a_pod(slow_api: Api) -> None:
    await created(slow_api, f"{NS}/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"},
        "imagePullSecrets": [{"name": "pull"}]})
    first = await created(slow_api, f"{NS}/pods", pod("p1", serviceAccountName="robot"))
    assert first["spec"]["imagePullSecrets"] == [{"name": "pull"}]
    cache = slow_api.app[OBJECT_CACHE]
    mirror = cache.informers[core_resource("serviceaccounts")].mirror

    async def robot_cached() -> None:  # a stale cache would then admit p2
        while mirror.get("default", "robot") is None:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(robot_cached(), 10)

    status, _ = await slow_api.delete(f"{NS}/serviceaccounts/robot")
    assert status == 200
    status, out = await slow_api.post(f"{NS}/pods", pod("p2", serviceAccountName="robot"))
    assert (status, out["message"]) == (
        403, 'pods "p2" is forbidden: error looking up service account default/robot: '
             'serviceaccount "robot" not found')


async def test_a_pod_create_reads_no_admission_objects_from_the_store(api: Api) -> None:
    await created(api, f"{NS}/limitranges", limit_range("a", {"memory": "64Mi"}))
    await created(api, f"{NS}/pods", pod("warm-up"))  # a live lookup of the empty quotas
    reads = count_reads(api.store)
    await created(api, f"{NS}/pods", pod("p1"))
    assert [r for r in reads if not r.startswith("/registry/pods/")] == []


async def test_the_cache_reads_the_store_until_it_is_ready(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    try:
        async for api in serve(store):
            registry = api.app[REGISTRY]
            limit_ranges = core_resource("limitranges")
            cache = ObjectCache(registry, [limit_ranges])
            await created(api, f"{NS}/limitranges", limit_range("a", {"memory": "1Gi"}))
            assert [lr["metadata"]["name"] for lr in
                    await cache.list(limit_ranges, "default")] == ["a"]
            assert await cache.synced(limit_ranges) is None
            await cache.start()
            try:
                mirror = await cache.synced(limit_ranges)
                assert mirror is not None
                assert [lr["metadata"]["name"] for lr in mirror.in_namespace("default")] == ["a"]
            finally:
                await cache.close()
            assert await cache.synced(limit_ranges) is None
    finally:
        await store.close()


async def test_a_reflector_waits_for_a_revision_and_gives_up_after_its_timeout(
        tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    applied: list[int] = []

    class Sink:
        def replace(self, kvs: Any, revision: int) -> None:
            applied.clear()

        def apply(self, event: Event) -> None:
            applied.append(event.revision)

    reflector = Reflector(store, "/things/", Sink(), name="things")
    try:
        await reflector.start()
        listed = reflector.revision
        assert not await reflector.wait_for(listed + 1, timeout=0.05)
        waiting = asyncio.create_task(reflector.wait_for(listed + 1, timeout=10))
        kv = await store.create("/things/a", b"{}")
        assert await waiting
        assert applied == [kv.mod_revision] and reflector.revision >= kv.mod_revision
    finally:
        await reflector.close()
        await store.close()
    assert not reflector.ready

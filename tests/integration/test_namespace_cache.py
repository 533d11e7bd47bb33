"""The namespace cache of the NamespaceLifecycle admission plugin
(`ephemera.apiserver.namespaces.NamespaceCache`): it follows the namespaces through a watch,
spares the store read on creates and updates in namespaces it holds, and leaves every refusal
and every namespace deleted here (for a while) to a live read."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from apiserver_fixtures import Api, configmap, eventually, serve

from ephemera.apiserver.app import LIFECYCLE, REGISTRY
from ephemera.apiserver.namespaces import NAMESPACES, NamespaceCache
from ephemera.apiserver.registry import Registry
from ephemera.store import KeyValue
from ephemera.store.sqlite import SqliteStore

CMS = "/api/v1/namespaces/{}/configmaps"


class CountingStore(SqliteStore):
    """The sqlite store, remembering the keys read one at a time."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.gets: list[str] = []

    async def get(self, key: str) -> KeyValue | None:
        self.gets.append(key)
        return await super().get(key)


@pytest.fixture
async def counted(tmp_path: Path) -> AsyncIterator[tuple[Api, CountingStore]]:
    store = CountingStore(tmp_path / "data")
    try:
        async for api in serve(store):
            yield api, store
    finally:
        await store.close()


def _cache(api: Api) -> NamespaceCache:
    return api.app[LIFECYCLE].cache


async def test_creates_and_updates_in_a_cached_namespace_read_no_namespace(
        counted: tuple[Api, CountingStore]) -> None:
    api, store = counted
    assert _cache(api).admits("default", "CREATE")
    key = NAMESPACES.key("", "default")
    before = store.gets.count(key)
    for i in range(3):
        status, _ = await api.post(CMS.format("default"), configmap(f"c{i}"))
        assert status == 201
    status, _ = await api.put(f"{CMS.format('default')}/c0", configmap("c0", {"k": "w"}))
    assert status == 200
    assert store.gets.count(key) == before


async def test_a_namespace_deleted_here_is_read_live(counted: tuple[Api, CountingStore]) -> None:
    api, store = counted
    status, _ = await api.post("/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert status == 201
    cache = _cache(api)
    await eventually(lambda: cache.admits("team", "CREATE"))
    await api.create_pod("p1", namespace="team", node="n1")  # holds the namespace a while
    status, _ = await api.delete("/api/v1/namespaces/team")
    assert status == 200
    assert not cache.admits("team", "UPDATE")  # forced live, whatever the watch says yet
    key = NAMESPACES.key("", "team")
    before = store.gets.count(key)
    status, body = await api.post(CMS.format("team"), configmap("c1"))
    assert (status, body["reason"]) == (403, "Forbidden")
    assert store.gets.count(key) == before + 1


async def test_a_namespace_gone_and_made_again(api: Api) -> None:
    status, _ = await api.post("/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert status == 201
    status, _ = await api.delete("/api/v1/namespaces/team")
    assert status == 200
    await api.settle_namespaces()
    status, body = await api.post(CMS.format("team"), configmap("c1"))
    assert (status, body["message"]) == (404, 'namespaces "team" not found')
    status, _ = await api.post("/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert status == 201
    status, _ = await api.post(CMS.format("team"), configmap("c1"))
    assert status == 201


async def test_the_cache_follows_the_store_and_forced_lookups_expire(api: Api) -> None:
    now = [100.0]
    cache = NamespaceCache(api.store, api.app[REGISTRY].codec(NAMESPACES), force_live_ttl=30,
                           clock=lambda: now[0])
    assert not cache.ready and not cache.admits("default", "UPDATE")
    await cache.start()
    try:
        assert cache.ready
        assert cache.admits("kube-system", "CREATE")
        assert not cache.admits("team", "UPDATE")
        await api.post("/api/v1/namespaces", {"metadata": {"name": "team"}})
        await api.create_pod("p1", namespace="team", node="n1")
        await eventually(lambda: cache.admits("team", "CREATE"))
        await api.delete("/api/v1/namespaces/team")
        await eventually(lambda: not cache.admits("team", "CREATE"))
        assert cache.admits("team", "UPDATE")  # Terminating: still there

        cache.force_live_lookup("default")
        assert not cache.admits("default", "UPDATE")
        now[0] += 29.9
        assert not cache.admits("default", "UPDATE")
        now[0] += 0.2
        assert cache.admits("default", "CREATE")
    finally:
        await cache.close()
    assert not cache.ready and not cache.admits("default", "CREATE")


async def test_the_cache_watches_again_from_its_version_after_its_watch_is_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ephemera.apiserver")
    caplog.set_level(logging.INFO, logger="ephemera.reflector")
    store = SqliteStore(tmp_path / "data", watch_capacity=1)
    codec = Registry(store).codec(NAMESPACES)
    cache = NamespaceCache(store, codec, retry_interval=0.05)
    try:
        await cache.start()
        names = [f"ns{i}" for i in range(20)]
        await asyncio.gather(*(store.create(NAMESPACES.key("", n), codec.encode(
            {"metadata": {"name": n}})) for n in names))
        await eventually(lambda: all(cache.admits(n, "CREATE") for n in names))
        assert "namespace cache: watch failed: watch ended" in caplog.text
        assert "watching again from resourceVersion" in caplog.text
        assert cache._reflector.relists == 0  # the store still had the version: no list
    finally:
        await cache.close()
        await store.close()

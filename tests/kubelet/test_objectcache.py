"""The kubelet's watch-based Secret and ConfigMap cache (`ephemera.kubelet.objectcache`,
upstream's Watch change-detection strategy) against an in-process apiserver: reads of a
referenced object come from its single-object watch (updates seen, a deletion reads as not
found, the watch restarted after the server ends it), unreferenced or over-budget objects are
read with a GET; in a kubelet on the fake runtime, a Secret change reaches the volume's files
without waiting for the periodic resync. Also the pod worker's runtime view that answers
KEP-6395's `IsVolumeInUseByPod` (`PodRuntimeCache`)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from kubelet_harness import FAST, pod, running_kubelet, wait_until

from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, ClientConfig, resource_path
from ephemera.kubelet.objectcache import PodObjects, pod_object_references
from ephemera.kubelet.podactions import PodRuntimeCache
from ephemera.kubelet.runtime.base import ContainerState, ContainerStatus, Mount
from ephemera.pods.references import CONFIGMAP, SECRET
from ephemera.store import open_store

Obj = dict[str, Any]
NS = "default"


@contextlib.asynccontextmanager
async def apiserver(tmp_path: Path) -> AsyncIterator[ApiClient]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    app = create_app(store, ApiserverConfig(watch_bookmark_interval=0.2,
                                            namespace_retry_interval=0.05))
    server = TestServer(app)
    await server.start_server()
    try:
        url = str(server.make_url("")).rstrip("/")
        async with ApiClient(ClientConfig(server=url), user_agent="objectcache-test") as api:
            yield api
    finally:
        await server.close()
        await store.close()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def _create_secret(api: ApiClient, name: str, value: str) -> Obj:
    return await api.create(resource_path("secrets", NS), {
        "metadata": {"name": name}, "data": {"key": _b64(value)}})


async def _set_secret(api: ApiClient, name: str, value: str) -> None:
    await api.patch(resource_path("secrets", NS, name), {"data": {"key": _b64(value)}},
                    patch_type="merge")


def _pod_with(uid: str, *, secrets: tuple[str, ...] = (), configmaps: tuple[str, ...] = ()
              ) -> Obj:
    volumes = [{"name": f"s-{s}", "secret": {"secretName": s}} for s in secrets]
    volumes += [{"name": f"c-{c}", "configMap": {"name": c}} for c in configmaps]
    return {"metadata": {"name": f"pod-{uid}", "namespace": NS, "uid": uid},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "volumes": volumes}}


def _value(obj: Obj | None) -> str | None:
    if obj is None:
        return None
    return base64.b64decode(obj["data"]["key"]).decode()


class CountingWatches:
    """Counts the watch requests an `ApiClient` makes."""

    def __init__(self, api: ApiClient) -> None:
        self.count = 0
        original = api.watch

        def watch(path: str, **kw: Any) -> Any:
            self.count += 1
            return original(path, **kw)

        api.watch = watch  # type: ignore[method-assign]


def test_references_are_the_secrets_and_configmaps_of_volumes_env_and_pull_secrets() -> None:
    body = _pod_with("u", secrets=("vol-secret",), configmaps=("vol-cm",))
    body["spec"]["volumes"].append({"name": "p", "projected": {"sources": [
        {"secret": {"name": "proj-secret"}}, {"configMap": {"name": "proj-cm"}}]}})
    body["spec"]["imagePullSecrets"] = [{"name": "pull"}]
    body["spec"]["serviceAccountName"] = "sa"
    body["spec"]["containers"][0]["env"] = [
        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}}]
    body["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "env-cm"}}]
    assert pod_object_references(body) == {
        (SECRET, NS, "vol-secret"), (CONFIGMAP, NS, "vol-cm"), (SECRET, NS, "proj-secret"),
        (CONFIGMAP, NS, "proj-cm"), (SECRET, NS, "pull"), (SECRET, NS, "env-secret"),
        (CONFIGMAP, NS, "env-cm")}


async def test_a_watched_secret_is_read_from_the_cache_updates_seen_deletion_not_found(
        tmp_path: Path) -> None:
    async with apiserver(tmp_path) as api:
        await _create_secret(api, "s1", "one")
        changes: list[tuple[str, str, str, frozenset[str]]] = []
        objects = PodObjects(api, on_change=lambda *change: changes.append(change))
        try:
            objects.register_pod("u1", _pod_with("u1", secrets=("s1",)))
            assert objects.secrets.watched() == [(NS, "s1")]
            assert _value(await objects.get_secret(NS, "s1")) == "one"
            assert (objects.secrets.cache_reads, objects.secrets.api_reads) == (1, 0)

            await _set_secret(api, "s1", "two")

            async def updated() -> bool:
                return _value(await objects.get_secret(NS, "s1")) == "two"
            await wait_until(updated)
            await wait_until(lambda: bool(changes))
            assert changes[0] == (SECRET, NS, "s1", frozenset({"u1"}))

            await api.delete(resource_path("secrets", NS, "s1"))

            async def gone() -> bool:
                return await objects.get_secret(NS, "s1") is None
            await wait_until(gone)
            assert objects.secrets.api_reads == 0  # never a GET: the watch said so
        finally:
            await objects.close()


async def test_a_missing_object_reads_none_and_is_seen_once_created(tmp_path: Path) -> None:
    async with apiserver(tmp_path) as api:
        objects = PodObjects(api)
        try:
            objects.register_pod("u1", _pod_with("u1", configmaps=("later",)))
            assert await objects.get_configmap(NS, "later") is None
            await api.create(resource_path("configmaps", NS),
                             {"metadata": {"name": "later"}, "data": {"k": "v"}})

            async def created() -> bool:
                return (await objects.get_configmap(NS, "later") or {}).get("data") == \
                    {"k": "v"}
            await wait_until(created)
            assert objects.configmaps.api_reads == 0
        finally:
            await objects.close()


async def test_the_watch_is_restarted_after_the_server_ends_it(tmp_path: Path) -> None:
    async with apiserver(tmp_path) as api:
        await _create_secret(api, "s1", "one")
        watches = CountingWatches(api)
        objects = PodObjects(api, watch_timeout=1)
        try:
            objects.register_pod("u1", _pod_with("u1", secrets=("s1",)))
            assert _value(await objects.get_secret(NS, "s1")) == "one"
            await wait_until(lambda: watches.count >= 2, timeout=15)  # the first one ended
            await _set_secret(api, "s1", "two")

            async def updated() -> bool:
                return _value(await objects.get_secret(NS, "s1")) == "two"
            await wait_until(updated)
            assert objects.secrets.api_reads == 0
        finally:
            await objects.close()


async def test_references_start_and_stop_watches_and_unreferenced_reads_get(
        tmp_path: Path) -> None:
    async with apiserver(tmp_path) as api:
        for name in ("a", "b"):
            await _create_secret(api, name, name)
        objects = PodObjects(api, max_watched=1)
        try:
            # not referenced: a GET, and a missing one reads None
            assert _value(await objects.get_secret(NS, "a")) == "a"
            assert await objects.get_secret(NS, "nope") is None
            assert objects.secrets.api_reads == 2
            objects.register_pod("u1", _pod_with("u1", secrets=("a",)))
            objects.register_pod("u2", _pod_with("u2", secrets=("a", "b")))
            # over the budget of one watch: b is read with a GET
            assert objects.secrets.watched() == [(NS, "a")]
            assert _value(await objects.get_secret(NS, "b")) == "b"
            assert objects.secrets.api_reads == 3
            task = objects.secrets._items[(NS, "a")].task
            objects.register_pod("u2", _pod_with("u2", secrets=("b",)))  # u1 still has a
            assert objects.secrets.watched() == [(NS, "a")]
            objects.unregister_pod("u1")  # a is no longer referenced: its watch stops
            assert task is not None
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert objects.secrets.watched() == [(NS, "b")]  # the freed watch
            assert objects.secrets.referenced() == [(NS, "b")]
            assert _value(await objects.get_secret(NS, "b")) == "b"
            assert objects.secrets.api_reads == 3
            objects.unregister_pod("u2")
            assert objects.secrets.referenced() == []
        finally:
            await objects.close()


async def test_a_kubelet_refreshes_a_secret_volume_when_the_secret_changes(
        tmp_path: Path) -> None:
    # No periodic volume resync within the test: the change comes from the watch.
    settings = dataclasses.replace(FAST, resync_period=3600.0)
    async with running_kubelet(tmp_path, settings) as h:
        await _create_secret(h.api, "creds", "v1")
        body = pod("p", argv=["sleep", "3600"],
                   volumes=[{"name": "creds", "secret": {"secretName": "creds"}}])
        body["spec"]["containers"][0]["volumeMounts"] = [{"name": "creds",
                                                          "mountPath": "/creds"}]
        created = await h.create(body)
        uid = created["metadata"]["uid"]
        await h.wait_pod("p", lambda p: p["status"].get("phase") == "Running")
        assert h.kubelet.objects.references(uid) == {(SECRET, NS, "creds")}
        key_file = h.root / "pods" / uid / "volumes" / "kubernetes.io~secret" / "creds" / "key"
        assert key_file.read_text() == "v1"
        reads = h.kubelet.objects.secrets.api_reads
        await _set_secret(h.api, "creds", "v2")
        await wait_until(lambda: key_file.read_text() == "v2")
        assert h.kubelet.objects.secrets.api_reads == reads  # from the cache
        # deleted through the kubelet (which tears the tmpfs down before the pod is gone)
        await h.api.delete(resource_path("pods", NS, "p"))
        await h.wait_gone("p")
        assert not key_file.parent.exists()
        assert h.kubelet.objects.references(uid) == frozenset()
        assert h.kubelet.objects.secrets.referenced() == []


async def test_a_swap_reads_its_secret_once_and_its_in_use_checks_never_relist(
        tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        for name in ("old", "new"):
            await _create_secret(h.api, name, name)
        body = pod("w", argv=["sleep", "3600"],
                   volumes=[{"name": "creds", "secret": {"secretName": "old"}}])
        main = body["spec"]["containers"][0]
        main["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}
        main["volumeMounts"] = [{"name": "creds", "mountPath": "/creds"}]
        created = await h.create(body)
        uid = created["metadata"]["uid"]
        running = await h.wait_pod("w", lambda p: p["status"].get("phase") == "Running")
        old_id = running["status"]["containerStatuses"][0]["containerID"]
        relists = 0
        relist_shared = h.kubelet.relister.relist_shared

        async def counting_relist() -> None:
            nonlocal relists
            relists += 1
            await relist_shared()
        h.kubelet.relister.relist_shared = counting_relist  # type: ignore[method-assign]
        assert await h.kubelet._in_use(uid, "creds") is True
        assert await h.kubelet._in_use(uid, "other") is False
        assert relists == 0  # answered by the pod worker's view
        gets = h.kubelet.objects.secrets.api_reads

        path = resource_path("pods", NS, "w") + "/dynamic"
        current = await h.api.get(path)
        current["spec"]["volumes"] = [{"name": "creds2", "secret": {"secretName": "new"}}]
        current["spec"]["containers"][0]["volumeMounts"] = [{"name": "creds2",
                                                             "mountPath": "/creds"}]
        await h.api.update(path, current)
        swapped = await h.wait_pod("w", lambda p: p["status"]["containerStatuses"][0].get(
            "volumeMounts") == [{"name": "creds2", "mountPath": "/creds"}] and "running" in
            p["status"]["containerStatuses"][0]["state"])
        assert swapped["status"]["containerStatuses"][0]["containerID"] != old_id
        secrets_dir = h.root / "pods" / uid / "volumes" / "kubernetes.io~secret"
        assert (secrets_dir / "creds2" / "key").read_text() == "new"
        await wait_until(lambda: not (secrets_dir / "creds").exists())  # torn down
        assert relists == 0
        # the allocation check and the setup both read "new" from its watch
        assert h.kubelet.objects.secrets.api_reads == gets
        assert h.kubelet.objects.references(uid) == {(SECRET, NS, "new")}
        assert h.kubelet.objects.secrets.referenced() == [(NS, "new")]
        # unknown to the pod workers: asked of the runtime
        assert await h.kubelet._in_use("no-such-pod", "creds") is False
        assert relists == 1
        await h.api.delete(resource_path("pods", NS, "w"))
        await h.wait_gone("w")
        assert not secrets_dir.exists()


# --- the pod worker's runtime view (IsVolumeInUseByPod) ---------------------------------------


def _container(cid: str, state: ContainerState, *volumes: str) -> ContainerStatus:
    return ContainerStatus(id=cid, sandbox_id="s", name=cid, attempt=0, image="busybox",
                           image_id="i", state=state, created_at=0.0,
                           mounts=tuple(Mount(container_path=f"/{v}", host_path=f"/h/{v}",
                                              volume_name=v) for v in volumes))


def test_the_runtime_view_is_unknown_until_listed_then_follows_the_worker() -> None:
    view = PodRuntimeCache()
    assert view.volume_in_use("old") is None
    listing = view.listing_begins()
    view.listed(listing, [_container("c1", ContainerState.RUNNING, "old"),
                          _container("c0", ContainerState.EXITED, "older")])
    assert view.volume_in_use("old") is True
    assert view.volume_in_use("older") is False
    # a listing begun before the stop ends after it: the stop still counts
    stale = view.listing_begins()
    view.stopped("c1")
    view.listed(stale, [_container("c1", ContainerState.RUNNING, "old")])
    assert view.volume_in_use("old") is False
    # a start: its volumes are in use from before the create until a later listing shows it
    token = view.starting(frozenset({"new"}))
    assert view.volume_in_use("new") is True
    during = view.listing_begins()
    view.listed(during, [_container("c1", ContainerState.EXITED, "old")])
    assert view.volume_in_use("new") is True  # that listing may have missed the create
    view.started(token)
    assert view.volume_in_use("new") is True
    after = view.listing_begins()
    view.listed(after, [_container("c1", ContainerState.EXITED, "old"),
                        _container("c2", ContainerState.RUNNING, "new")])
    assert view.volume_in_use("new") is True
    assert view.volume_in_use("old") is False
    final = view.listing_begins()
    view.listed(final, [_container("c2", ContainerState.EXITED, "new")])
    assert view.volume_in_use("new") is False


@pytest.mark.parametrize("state", [ContainerState.RUNNING, ContainerState.CREATED])
def test_a_created_or_running_container_holds_its_volumes(state: ContainerState) -> None:
    view = PodRuntimeCache()
    view.listed(view.listing_begins(), [_container("c", state, "v")])
    assert view.volume_in_use("v") is True
    assert view.volume_in_use("w") is False

"""The garbage collector against an in-process apiserver: what each propagation policy
leaves, dangling and mismatched owner references, ownerless objects, an owner that is
still there, and a cluster-scoped dependent naming a namespaced owner."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from apiserver_fixtures import eventually

from ephemera.api.errors import StatusError
from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, resource_path
from ephemera.client.kubeconfig import ClientConfig
from ephemera.controllers.garbagecollector import GarbageCollector
from ephemera.store import open_store

CMS = resource_path("configmaps", "default")
HOLD = "example.com/hold"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[ApiClient]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    server = TestServer(create_app(store, ApiserverConfig(watch_bookmark_interval=0.2)))
    await server.start_server()
    try:
        async with ApiClient(ClientConfig(server=str(server.make_url("")).rstrip("/")),
                             user_agent="gc-test") as client:
            task = asyncio.create_task(GarbageCollector(client, discovery_period=3600).run())
            try:
                yield client
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await server.close()
        await store.close()


def ref(owner: dict[str, Any], *, block: bool = False, kind: str = "ConfigMap",
        uid: str | None = None) -> dict[str, Any]:
    md = owner["metadata"]
    out = {"apiVersion": "v1", "kind": kind, "name": md["name"], "uid": uid or md["uid"]}
    if block:
        out["blockOwnerDeletion"] = True
    return out


async def cm(api: ApiClient, name: str, owners: list[dict[str, Any]] | None = None,
             finalizers: list[str] | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if owners:
        md["ownerReferences"] = owners
    if finalizers:
        md["finalizers"] = finalizers
    return await api.create(CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md})


async def names(api: ApiClient) -> set[str]:
    listed = await api.get(CMS)
    return {i["metadata"]["name"] for i in listed["items"]} - {"kube-root-ca.crt"}


async def gone(api: ApiClient, name: str) -> bool:
    try:
        await api.get(f"{CMS}/{name}")
    except StatusError as err:
        return err.code == 404
    return False


async def release(api: ApiClient, name: str) -> None:
    await api.patch(f"{CMS}/{name}", {"metadata": {"finalizers": None}}, patch_type="merge")


async def test_background_deletes_the_dependents_and_leaves_the_rest(api: ApiClient) -> None:
    owner = await cm(api, "owner")
    other = await cm(api, "other")
    await cm(api, "dep-a", [ref(owner)])
    await cm(api, "dep-b", [ref(owner, block=True)])
    await cm(api, "shared", [ref(owner), ref(other)])
    await cm(api, "ownerless")
    await api.delete(f"{CMS}/owner", {"propagationPolicy": "Background"})
    await eventually(lambda: _expect(api, {"other", "shared", "ownerless"}))

    async def only_other() -> bool:
        shared = await api.get(f"{CMS}/shared")
        return [r["name"] for r in shared["metadata"]["ownerReferences"]] == ["other"]
    await eventually(only_other)


async def _expect(api: ApiClient, wanted: set[str]) -> bool:
    return await names(api) == wanted


async def test_foreground_deletes_the_owner_after_its_blocking_dependents(
        api: ApiClient) -> None:
    owner = await cm(api, "owner")
    await cm(api, "blocker", [ref(owner, block=True)], finalizers=[HOLD])
    await cm(api, "plain", [ref(owner)])
    deleting = await api.delete(f"{CMS}/owner", {"propagationPolicy": "Foreground"})
    assert deleting["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert deleting["metadata"]["deletionTimestamp"]
    # the dependents are deleted; the owner waits for the blocking one, held by a finalizer
    await eventually(lambda: gone(api, "plain"))
    blocker = await api.get(f"{CMS}/blocker")
    assert blocker["metadata"]["deletionTimestamp"]
    assert not await gone(api, "owner")
    await release(api, "blocker")
    await eventually(lambda: gone(api, "owner"))
    assert await names(api) == set()


async def test_orphan_keeps_the_dependents_without_the_reference(api: ApiClient) -> None:
    owner = await cm(api, "owner")
    other = await cm(api, "other")
    await cm(api, "dep", [ref(owner, block=True)])
    await cm(api, "shared", [ref(owner), ref(other)])
    deleting = await api.delete(f"{CMS}/owner", {"propagationPolicy": "Orphan"})
    assert deleting["metadata"]["finalizers"] == ["orphan"]
    await eventually(lambda: gone(api, "owner"))

    async def orphaned() -> bool:
        dep = await api.get(f"{CMS}/dep")
        shared = await api.get(f"{CMS}/shared")
        return "ownerReferences" not in dep["metadata"] and \
            [r["name"] for r in shared["metadata"]["ownerReferences"]] == ["other"]
    await eventually(orphaned)
    assert await names(api) == {"other", "dep", "shared"}


async def test_legacy_orphan_dependents_orphans(api: ApiClient) -> None:
    owner = await cm(api, "owner")
    await cm(api, "dep", [ref(owner)])
    await api.delete(f"{CMS}/owner", {"orphanDependents": True})
    await eventually(lambda: gone(api, "owner"))
    assert await names(api) == {"dep"}


async def test_dangling_references_are_collected(api: ApiClient) -> None:
    owner = await cm(api, "owner")
    # a reference to an object that never existed, and one to the right name but another UID
    await cm(api, "never", [{"apiVersion": "v1", "kind": "ConfigMap", "name": "nobody",
                             "uid": "00000000-0000-0000-0000-000000000001"}])
    await cm(api, "mismatch", [ref(owner, uid="00000000-0000-0000-0000-000000000002")])
    await cm(api, "kept", [ref(owner)])
    await eventually(lambda: _expect(api, {"owner", "kept"}))


async def test_a_cluster_scoped_dependent_of_a_namespaced_owner_is_left_with_an_event(
        api: ApiClient) -> None:
    owner = await cm(api, "owner")
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "gc-test-role", "ownerReferences": [ref(owner)]},
            "rules": []}
    roles = resource_path("clusterroles", group="rbac.authorization.k8s.io")
    await api.create(roles, role)

    async def warned() -> bool:
        events = await api.get(resource_path("events", "default"))
        return any(e["reason"] == "OwnerRefInvalidNamespace" for e in events["items"])

    await eventually(warned)
    events = await api.get(resource_path("events", "default"))
    event = next(e for e in events["items"] if e["reason"] == "OwnerRefInvalidNamespace")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "gc-test-role"
    assert event["message"] == (
        f"ownerRef [v1/ConfigMap, namespace: , name: owner, uid: {owner['metadata']['uid']}] "
        'does not exist in namespace ""')
    await api.get(f"{roles}/gc-test-role")  # still there

"""The RBAC cache (`ephemera.apiserver.authz.rbac.PolicyCache` over
`ephemera.apiserver.informers`): a relist that runs ahead of the watch never lets the watch's
older events bring a deleted binding back, and a denial waits for the watch to show this
apiserver's own RBAC writes instead of listing the store again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Users, serve_users

from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz.rbac import POLICY_RESOURCES, ROLE_BINDINGS
from ephemera.apiserver.informers import Informer
from ephemera.apiserver.registry import DeleteOptions, Registry
from ephemera.store import Event, ListResult
from ephemera.store.sqlite import SqliteStore

ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))
JANE = UserInfo("jane", ("system:authenticated",))
RBAC = "/apis/rbac.authorization.k8s.io/v1"
POLICY_PREFIXES = tuple(r.key_prefix() for r in POLICY_RESOURCES)


def binding(name: str, user: str = "jane", role: str = "view") -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": user}]}


class CountingStore(SqliteStore):
    """The sqlite store, remembering the prefixes it listed."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.listed: list[str] = []

    async def list(self, prefix: str, **kw: Any) -> ListResult:
        self.listed.append(prefix)
        return await super().list(prefix, **kw)

    def policy_lists(self) -> int:
        return sum(1 for p in self.listed if p.startswith(POLICY_PREFIXES))


async def test_a_watch_behind_a_relist_never_brings_a_deleted_binding_back(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "data")
    try:
        registry = Registry(store)
        informer = Informer(store, registry.codec(ROLE_BINDINGS))
        mirror = informer.mirror
        changes: list[list[str]] = []
        mirror.listeners.append(
            lambda namespace: changes.append([b["metadata"]["name"] for b in mirror.all()]))
        behind = await informer.relist()  # where the (paused) watch stands
        await registry.create(ROLE_BINDINGS, binding("gone"))
        await registry.create(ROLE_BINDINGS, binding("kept"))
        await registry.delete(ROLE_BINDINGS, "default", "gone", DeleteOptions())
        listed = await informer.relist()  # a relist overtakes the watch
        assert [b["metadata"]["name"] for b in mirror.all()] == ["kept"]
        await registry.create(ROLE_BINDINGS, binding("later"))

        # The watch catches up: the history the relist already settled, then what is new.
        events: list[Event] = []
        watcher = await store.watch(ROLE_BINDINGS.key_prefix(), behind)
        try:
            async for item in watcher:
                if isinstance(item, Event):
                    events.append(item)
                    if item.kv.key.endswith("/later"):
                        break
        finally:
            await watcher.close()
        assert [(e.type, e.kv.key.rsplit("/", 1)[1]) for e in events] == [
            ("PUT", "gone"), ("PUT", "kept"), ("DELETE", "gone"), ("PUT", "later")]
        assert events[2].revision <= listed < events[3].revision
        changes.clear()
        for event in events:
            mirror.apply(event)
            assert mirror.get("default", "gone") is None
        assert changes == [["kept", "later"]]  # one change: the binding made after the list
    finally:
        await store.close()


@pytest.fixture
async def users(tmp_path: Path) -> AsyncIterator[Users[CountingStore]]:
    async for served in serve_users(CountingStore(tmp_path / "data"),
                                    {"admin": ADMIN, "jane": JANE}):
        yield served


async def test_denials_wait_for_the_watch_not_for_a_relist(users: Users) -> None:
    configmaps = "/api/v1/namespaces/default/configmaps"
    lists = users.store.policy_lists()
    for _ in range(3):
        status, _ = await users.call("jane", "GET", configmaps)
        assert status == 403
    assert users.store.policy_lists() == lists
    # A binding written just before a request counts for it (no waiting in the test).
    status, body = await users.call("admin", "POST",
                                    f"{RBAC}/namespaces/default/rolebindings",
                                    binding("jane-view"))
    assert status == 201, body
    status, body = await users.call("jane", "GET", configmaps)
    assert status == 200, body
    status, _ = await users.call("admin", "DELETE",
                                 f"{RBAC}/namespaces/default/rolebindings/jane-view")
    assert status == 200
    status, _ = await users.call("jane", "GET", configmaps)
    assert status == 403
    assert users.store.policy_lists() == lists

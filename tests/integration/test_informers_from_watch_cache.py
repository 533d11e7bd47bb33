"""The apiserver's own informers (the namespace cache, the admission plugins' object cache,
the RBAC cache, the Node authorizer's pod graph, the CRDs) read through its watch cache, as
upstream's are fed from its cacher (`ephemera.apiserver.informers.CachedListerWatcher`): the
store has one watch per resource, the cache's, on SQLite and on a real etcd; and when a
cache starts over (its own store watch ended), the informers it fed list again from it and
go on seeing every write."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, eventually, serve

from ephemera.apiserver.app import OBJECT_CACHE, REGISTRY
from ephemera.apiserver.authn import Authenticator, UserInfo
from ephemera.apiserver.informers import CachedListerWatcher
from ephemera.apiserver.resources import core_resource
from ephemera.client.reflector import Expired
from ephemera.store import Store, StoreError, Watcher, open_store

ADMIN = UserInfo("admin", ("system:masters",))
SERVICE_ACCOUNTS = core_resource("serviceaccounts")
# The prefixes both the watch cache and an informer of the apiserver follow.
SHARED = ("/registry/pods/", "/registry/namespaces/", "/registry/serviceaccounts/",
          "/registry/limitranges/", "/registry/resourcequotas/", "/registry/roles/",
          "/registry/rolebindings/", "/registry/clusterroles/",
          "/registry/clusterrolebindings/",
          "/registry/apiextensions.k8s.io/customresourcedefinitions/")


def _record_watches(store: Store) -> dict[str, list[Watcher]]:
    """Keep the store watches opened from now on, by prefix."""
    opened: dict[str, list[Watcher]] = collections.defaultdict(list)
    watch: Callable[..., Any] = store.watch

    async def recording(prefix: str, after_revision: int, **options: Any) -> Watcher:
        watcher: Watcher = await watch(prefix, after_revision, **options)
        opened[prefix].append(watcher)
        return watcher

    store.watch = recording  # type: ignore[method-assign]
    return opened


@pytest.fixture(params=["sqlite", "etcd"])
async def served(request: pytest.FixtureRequest, tmp_path: Path
                 ) -> AsyncIterator[tuple[Api, dict[str, list[Watcher]]]]:
    if request.param == "sqlite":
        store = open_store("sqlite", data_dir=tmp_path / "data")
    else:
        endpoint = request.getfixturevalue("etcd_endpoint")
        store = open_store("etcd", endpoints=[endpoint], prefix=f"/t-{tmp_path.name}")
    opened = _record_watches(store)
    try:
        # with an authenticator: the Node and RBAC authorizers, and their informers
        async for api in serve(store, authenticator=Authenticator({"admin": ADMIN})):
            yield api, opened
    finally:
        await store.close()


def _headers() -> dict[str, str]:
    return {"Authorization": "Bearer admin"}


async def test_the_store_has_one_watch_per_resource(
        served: tuple[Api, dict[str, list[Watcher]]]) -> None:
    api, opened = served
    status, body, _ = await api.request(
        "POST", "/api/v1/namespaces/default/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "one"}},
        headers=_headers())
    assert status == 201, body
    informer = api.app[OBJECT_CACHE].informers[SERVICE_ACCOUNTS]
    await eventually(lambda: informer.mirror.get("default", "one") is not None)
    assert {prefix: len(opened[prefix]) for prefix in SHARED} == dict.fromkeys(SHARED, 1)


async def test_informers_list_again_from_a_cache_that_started_over(
        served: tuple[Api, dict[str, list[Watcher]]]) -> None:
    api, opened = served
    informer = api.app[OBJECT_CACHE].informers[SERVICE_ACCOUNTS]
    watch_cache = api.app[REGISTRY].watch_cache
    assert watch_cache is not None
    prefix = SERVICE_ACCOUNTS.key_prefix()
    cache = await watch_cache.ready(prefix)
    assert cache is not None
    [store_watch] = opened[prefix]
    # the cache's store watch fails: the cache ends its watchers and lists again
    store_watch.fail(StoreError("the test ends this watch"))  # type: ignore[attr-defined]
    await eventually(lambda: not cache.ready.is_set())
    status, body, _ = await api.request(
        "POST", "/api/v1/namespaces/default/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "after"}},
        headers=_headers())
    assert status == 201, body
    await eventually(lambda: informer.mirror.get("default", "after") is not None)
    assert informer.ready
    assert len(opened[prefix]) == 2  # the cache's first store watch and its next: no other

    # a watch from a revision the cache's history no longer holds is Expired (list again)
    source = CachedListerWatcher(api.store, prefix, watch_cache)
    listed = await source.list(0, "")
    assert {kv.key for kv in listed.items} >= {f"{prefix}default/after"}
    cache.history_limit = 1
    for name in ("x", "y"):
        status, body, _ = await api.request(
            "POST", "/api/v1/namespaces/default/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            headers=_headers())
        assert status == 201, body
    await eventually(lambda: informer.mirror.get("default", "y") is not None)
    with pytest.raises(Expired):
        async for _ in source.watch(listed.resource_version):
            pass

"""What a worker does with each event it follows, counted: the watch cache routes a pod event
by its previous state's node as found when it routed that state's own event (kept per key,
forgotten with the key, the cache's list or a route-less stretch), so it parses the new
object only; that parse is the one decode the watch streams and the Node authorizer share
(`watchcache.decoded`); the authorizer finds a deleted pod by its key and does not decode a
pod that cannot be bound (`nodegraph.may_be_bound`)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from ephemera.apiserver import registry as registry_module
from ephemera.apiserver.authz.node import NodeAuthorizer
from ephemera.apiserver.authz.nodegraph import may_be_bound
from ephemera.apiserver.registry import Codec, Registry
from ephemera.apiserver.resources import core_resource
from ephemera.apiserver.watchcache import FieldIndex, ResourceCache, SharedEvent, decoded
from ephemera.store import Event, KeyValue, Store
from ephemera.store.watchhub import BufferedWatcher

PODS = core_resource("pods")
CODEC = Codec(PODS)
PREFIX = PODS.key_prefix()
KEY = f"{PREFIX}ns/p"


def stored(node: str = "", **metadata: Any) -> bytes:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}],
                            "volumes": [{"name": "s", "secret": {"secretName": "s1"}}]}
    if node:
        spec["nodeName"] = node
    return CODEC.encode({"metadata": {"name": "p", "namespace": "ns", "uid": "u", **metadata},
                         "spec": spec})


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The revisions of the stored values parsed (by the index, or by a decode)."""
    seen: list[int] = []
    parse, decode = FieldIndex.parse, Codec.decode

    def counting_parse(kv: KeyValue) -> dict[str, Any]:
        seen.append(kv.mod_revision)
        return parse(kv)

    def counting_decode(self: Codec, kv: KeyValue,
                        parsed: dict[str, Any] | None = None) -> dict[str, Any]:
        if parsed is None:
            seen.append(kv.mod_revision)
        return decode(self, kv, parsed)

    monkeypatch.setattr(FieldIndex, "parse", staticmethod(counting_parse))
    monkeypatch.setattr(registry_module.Codec, "decode", counting_decode)
    return seen


def pod_cache() -> ResourceCache:
    return ResourceCache(cast(Store, None), PREFIX, index=FieldIndex("Pod", "spec.nodeName"))


def routed(cache: ResourceCache, *nodes: str) -> dict[str, BufferedWatcher]:
    watchers = {}
    for node in nodes:
        watcher = cache.watch(PREFIX, cache.revision, route=node)
        assert isinstance(watcher, BufferedWatcher)
        watchers[node] = watcher
    return watchers


def revisions(watcher: BufferedWatcher) -> list[int]:
    return [item.revision for item in watcher.take_ready(100)]


def put(revision: int, value: bytes, created: int = 1) -> Event:
    return Event("PUT", KeyValue(KEY, value, created, revision), None)


def delete(revision: int) -> Event:
    return Event("DELETE", KeyValue(KEY, b"", 0, revision), None)


async def test_only_the_new_object_is_parsed_once_the_cache_routed_the_previous_one(
        parses: list[int]) -> None:
    cache = pod_cache()
    watchers = routed(cache, "", "a", "b")
    cache.apply(put(1, stored()))  # created unbound
    cache.apply(put(2, stored("a")))  # bound: "" sees it leave, a sees it come
    cache.apply(put(3, stored("a", labels={"x": "y"})))
    cache.apply(put(4, stored("b")))  # moved (not a pod's life, but an index's)
    cache.apply(delete(5))
    assert parses == [1, 2, 3, 4]  # each object once; the DELETE's is its previous state's
    assert {node: revisions(w) for node, w in watchers.items()} == {
        "": [1, 2], "a": [2, 3, 4], "b": [4, 5]}
    assert not cache._index_values  # the deleted key is forgotten
    await cache.hub.close()


async def test_an_event_whose_previous_state_was_never_routed_goes_to_both_nodes(
        parses: list[int]) -> None:
    cache = pod_cache()
    cache.apply(put(1, stored("a")))  # no routed watcher yet: not routed, nothing parsed
    assert parses == [] and not cache._index_values
    watchers = routed(cache, "a", "b")
    cache.apply(put(2, stored("b")))
    assert sorted(parses) == [1, 2]  # the previous state is parsed, as it was not known
    assert {node: revisions(w) for node, w in watchers.items()} == {"a": [2], "b": [2]}
    await cache.hub.close()


async def test_a_value_of_an_older_state_is_not_taken_for_the_previous_one(
        parses: list[int]) -> None:
    cache = pod_cache()
    watchers = routed(cache, "a", "b")
    cache.apply(put(1, stored("a")))
    assert cache._index_values == {KEY: (1, "a")}
    await watchers["a"].close()
    await watchers["b"].close()
    assert not cache.hub.routed
    cache.apply(put(2, stored("b")))  # nobody routed: the value is not followed
    assert not cache._index_values
    watchers = routed(cache, "a", "b")
    cache.apply(put(3, stored("a")))  # from b (parsed again), to a
    assert parses == [1, 2, 3]
    assert {node: revisions(w) for node, w in watchers.items()} == {"a": [3], "b": [3]}
    await cache.hub.close()


async def test_a_relist_forgets_the_values() -> None:
    class Listed:
        async def list(self, prefix: str) -> Any:
            return SimpleNamespace(kvs=[KeyValue(KEY, stored("b"), 1, 7)], revision=7)

        async def watch(self, *args: Any, **kwargs: Any) -> Any:
            raise asyncio.CancelledError

    cache = ResourceCache(cast(Store, Listed()), PREFIX, index=FieldIndex("Pod", "spec.nodeName"))
    routed(cache, "a")
    cache.apply(put(1, stored("a")))
    assert cache._index_values
    with pytest.raises(asyncio.CancelledError):
        await cache._follow()
    assert not cache._index_values and cache.items[KEY].mod_revision == 7
    await cache.hub.close()


def test_a_shared_event_is_decoded_once_for_its_consumers(parses: list[int]) -> None:
    kv = KeyValue(KEY, stored("a"), 1, 2)
    shared = SharedEvent("PUT", kv, None)
    assert FieldIndex("Pod", "spec.nodeName").event_value(shared) == "a"
    first = decoded(shared, CODEC)
    assert decoded(shared, CODEC) is first and first["metadata"]["resourceVersion"] == "2"
    assert parses == [2]  # the routing's parse became the decoded object
    plain = Event("PUT", kv, None)
    assert decoded(plain, CODEC) == first and decoded(plain, CODEC) is not first
    assert parses == [2, 2, 2]


def authorizer() -> NodeAuthorizer:
    registry = SimpleNamespace(store=None, watch_cache=None, codec=Codec)
    return NodeAuthorizer(cast(Registry, registry))


def test_the_node_authorizer_decodes_only_bound_pods(parses: list[int]) -> None:
    authz = authorizer()
    authz.apply(SharedEvent("PUT", KeyValue(KEY, stored(), 1, 1), None))
    assert parses == [] and len(authz.graph) == 0
    bound = SharedEvent("PUT", KeyValue(KEY, stored("a"), 1, 2), None)
    authz.apply(bound)
    assert parses == [2] and authz.graph.has_path("a", ("secret", "ns", "s1"))
    decoded(bound, CODEC)  # a watch stream of the same event: decoded already
    assert parses == [2]
    # deleted: found by its key, not decoded (the value may even be gone)
    authz.apply(SharedEvent("DELETE", KeyValue(KEY, b"", 0, 3), None))
    assert parses == [2] and len(authz.graph) == 0


def test_a_pod_that_may_be_bound() -> None:
    assert not may_be_bound(stored())
    assert may_be_bound(stored("a"))
    escaped = stored("a").replace(b'"nodeName"', b'"node\\u004eame"')
    assert orjson.loads(escaped)["spec"]["nodeName"] == "a" and may_be_bound(escaped)
    # an unbound pod that merely mentions the name is decoded: never the other way round
    assert may_be_bound(stored(labels={"nodeName": "x"}))
    assert not may_be_bound(stored(labels={"x": "spec.nodeName"}))

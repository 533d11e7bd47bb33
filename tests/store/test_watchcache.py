"""The watch cache (`ephemera.apiserver.watchcache`) against the store it caches, on both
backends: after a random history of creates, updates and deletes under several prefixes,
every list (whole, by sub-prefix, in pages) and every watch (from each revision of the
window) the cache answers equals the store's answer at the same revision; a watch from
before the window is refused (the registry then goes to the store); a slow watcher is cut
off while the others keep receiving; the cache lists again when its store watch ends; a
watcher routed by the pod index (`spec.nodeName`) is pushed exactly the events of pods that
were or are on its node, and an unrouted one every event."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from store_fixtures import StoreFactory

from ephemera.apiserver.watchcache import FieldIndex, ResourceCache, SharedEvent, WatchCache
from ephemera.store import Store, open_store
from ephemera.store.base import (
    Event,
    KeyNotFound,
    KeyValue,
    ListResult,
    Progress,
    Watcher,
    WatcherDropped,
)
from ephemera.store.watchhub import WatchHub

PREFIX = "/registry/things/"
NAMESPACES = ("a", "b", "c")


async def random_history(store: Store, writes: int, seed: int, tag: str) -> None:
    """Creates, updates and deletes of keys under PREFIX (three namespaces) and of keys
    outside it, in a seeded random order."""
    rng = random.Random(seed)
    live: dict[str, int] = {}
    for i in range(writes):
        choice = rng.random()
        if choice < 0.1:
            await store.create(f"/registry/other/{tag}{i}", b"x")
        elif choice < 0.5 or not live:
            key = f"{PREFIX}{rng.choice(NAMESPACES)}/{tag}{i}"
            live[key] = (await store.create(key, f"v{i}".encode())).mod_revision
        elif choice < 0.8:
            key = rng.choice(sorted(live))
            live[key] = (await store.update(key, f"u{i}".encode(), live[key])).mod_revision
        else:
            key = rng.choice(sorted(live))
            await store.delete(key, live.pop(key))


async def caught_up(cache: ResourceCache, store: Store) -> None:
    """Wait until the cache has applied everything the store has committed (a progress
    notification carries it past writes outside its prefix)."""
    target = await store.current_revision()
    async with asyncio.timeout(10):
        while cache.revision < target:
            await asyncio.sleep(0.01)


async def drain(watcher: Watcher, until_revision: int) -> list[tuple[Any, ...]]:
    """The events of `watcher` up to `until_revision`, as comparable tuples (with the
    previous value, which the cache takes from its own objects, not from the store)."""
    seen: list[tuple[Any, ...]] = []
    if until_revision <= 0:
        return seen
    async with asyncio.timeout(10):
        async for item in watcher:
            if isinstance(item, Event):
                seen.append((item.type, item.kv, item.prev))
            if item.revision >= until_revision:
                break
    return seen


@pytest.mark.parametrize("seed", [1, 2])
async def test_lists_and_watches_equal_the_stores(make_store: StoreFactory, seed: int) -> None:
    store = await make_store()
    await random_history(store, 40, seed, "first")  # before the cache: its initial list
    cache = WatchCache(store)
    resource = await cache.ready(PREFIX)
    assert resource is not None
    start = resource.window_start
    await random_history(store, 80, seed + 100, "then")  # after: its watch
    await caught_up(resource, store)
    revision = resource.revision
    try:
        for prefix in (PREFIX, *(f"{PREFIX}{ns}/" for ns in NAMESPACES)):
            from_store = await store.list(prefix, revision=revision)
            from_cache = resource.list(prefix)
            assert from_cache.revision == revision
            assert from_cache.kvs == from_store.kvs, prefix
            # in pages of 3, each continuing after the last key
            pages: list[bytes] = []
            after = ""
            while True:
                page = resource.list(prefix, limit=3, start_after=after)
                stored = await store.list(prefix, limit=3, start_after=after, revision=revision)
                assert (page.kvs, page.more, page.remaining) == (
                    stored.kvs, stored.more, stored.remaining)
                pages += [kv.value for kv in page.kvs]
                if not page.more:
                    break
                after = page.kvs[-1].key
            assert pages == [kv.value for kv in from_store.kvs]
        # every watch from inside the window sees what the store's watch sees
        for after_revision in range(start, revision + 1, 7):
            for prefix in (PREFIX, f"{PREFIX}b/"):
                cached = resource.watch(prefix, after_revision)
                assert cached is not None
                stored_watch = await store.watch(prefix, after_revision)
                try:
                    expected = await drain(stored_watch, revision)
                    assert await drain(cached, revision) == expected, (prefix, after_revision)
                finally:
                    await cached.close()
                    await stored_watch.close()
    finally:
        await cache.close()


async def test_a_watch_from_before_the_window_is_refused(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.create(f"{PREFIX}a/first", b"1")
    cache = WatchCache(store, history=3)
    resource = await cache.ready(PREFIX)
    assert resource is not None
    listed_at = resource.window_start
    try:
        assert resource.watch(PREFIX, listed_at - 1) is None  # before the cache listed
        for i in range(5):
            await store.create(f"{PREFIX}a/o{i}", b"v")
        await caught_up(resource, store)
        assert len(resource.history) == 3
        assert resource.window_start > listed_at
        assert resource.watch(PREFIX, listed_at) is None
        inside = resource.watch(PREFIX, resource.window_start)
        assert inside is not None
        events = await drain(inside, resource.revision)
        assert [kv.key for _, kv, _ in events] == [f"{PREFIX}a/o{i}" for i in (2, 3, 4)]
        await inside.close()
    finally:
        await cache.close()


async def fast_keeps_up_slow_is_dropped(store: Store, fast: Watcher, slow: Watcher,
                                        writes: list[tuple[str, bytes]]) -> None:
    """Creates `writes` while `fast` is read and `slow` never: `fast` gets every one, in
    order, and `slow` (past its buffer's capacity) is dropped."""
    received: list[str] = []

    async def consume() -> None:
        async for item in fast:
            if isinstance(item, Event):
                received.append(item.kv.key)
                if len(received) == len(writes):
                    return

    consumer = asyncio.create_task(consume())
    for key, value in writes:
        await store.create(key, value)
        await asyncio.sleep(0)  # the fast one keeps up; the slow one never reads
    async with asyncio.timeout(10):
        await consumer
    assert received == [key for key, _ in writes]
    with pytest.raises(WatcherDropped):
        async for _item in slow:
            pass


async def test_a_slow_watcher_is_cut_off_and_the_others_keep_receiving(
        make_store: StoreFactory) -> None:
    store = await make_store()
    cache = WatchCache(store)
    resource = await cache.ready(PREFIX)
    assert resource is not None
    resource.hub.capacity = 5
    slow = resource.watch(PREFIX, resource.revision)
    fast = resource.watch(PREFIX, resource.revision)
    assert slow is not None and fast is not None
    try:
        await fast_keeps_up_slow_is_dropped(
            store, fast, slow, [(f"{PREFIX}a/o{i:02}", b"v") for i in range(20)])
    finally:
        await slow.close()
        await fast.close()
        await cache.close()


class BreakableStore:
    """The store, whose watches `break_watches()` ends with WatcherDropped (as a store
    drops a watcher that fell behind)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.broken = asyncio.Event()
        self.watches = 0

    async def list(self, prefix: str, **kw: Any) -> ListResult:
        return await self.store.list(prefix, **kw)

    async def watch(self, prefix: str, after_revision: int, *, prev: bool = True) -> Watcher:
        self.watches += 1
        self.broken.clear()
        return Breakable(await self.store.watch(prefix, after_revision, prev=prev), self.broken)

    def break_watches(self) -> None:
        self.broken.set()


class Breakable(Watcher):
    def __init__(self, inner: Watcher, broken: asyncio.Event) -> None:
        self.inner = inner
        self.broken = broken

    def __aiter__(self) -> AsyncIterator[Event | Progress]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event | Progress]:
        items = self.inner.__aiter__()
        while True:
            following = asyncio.ensure_future(items.__anext__())
            breaking = asyncio.ensure_future(self.broken.wait())
            done, _ = await asyncio.wait({following, breaking},
                                         return_when=asyncio.FIRST_COMPLETED)
            breaking.cancel()
            if following not in done:
                following.cancel()
                raise WatcherDropped("fell behind")
            try:
                yield following.result()
            except StopAsyncIteration:
                return

    async def close(self) -> None:
        await self.inner.close()


async def test_the_cache_lists_again_when_its_store_watch_ends(make_store: StoreFactory) -> None:
    store = await make_store()
    kv = await store.create(f"{PREFIX}a/x", b"1")
    breakable = BreakableStore(store)
    cache = WatchCache(cast(Store, breakable))
    resource = await cache.ready(PREFIX)
    assert resource is not None
    watcher = resource.watch(PREFIX, resource.revision)
    assert watcher is not None
    try:
        # The cache ends its watchers (their clients watch again) and lists again.
        breakable.break_watches()
        async with asyncio.timeout(10):
            async for item in watcher:
                assert isinstance(item, Progress)
        async with asyncio.timeout(10):
            while breakable.watches < 2 or not resource.ready.is_set():
                await asyncio.sleep(0.02)
        await store.update(kv.key, b"2", kv.mod_revision)
        await caught_up(resource, store)
        assert [k.value for k in resource.list(PREFIX).kvs] == [b"2"]
    finally:
        await watcher.close()
        await cache.close()


async def test_deletes_leave_the_list(make_store: StoreFactory) -> None:
    store = await make_store()
    cache = WatchCache(store)
    resource = await cache.ready(PREFIX)
    assert resource is not None
    try:
        kv = await store.create(f"{PREFIX}a/gone", b"1")
        await store.create(f"{PREFIX}a/kept", b"2")
        await store.delete(kv.key, kv.mod_revision)
        await caught_up(resource, store)
        assert [k.key for k in resource.list(PREFIX).kvs] == [f"{PREFIX}a/kept"]
        with pytest.raises(KeyNotFound):
            await store.delete(kv.key)
    finally:
        await cache.close()


PODS = "/registry/pods/"


def pod(name: str, node: str = "") -> bytes:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if node:
        spec["nodeName"] = node
    return json.dumps({"kind": "Pod", "apiVersion": "v1",
                       "metadata": {"name": name, "namespace": "ns"}, "spec": spec}).encode()


async def pod_cache(store: Store) -> tuple[WatchCache, ResourceCache]:
    """A watch cache with the pods' node index, and its ready pod cache."""
    cache = WatchCache(store, indexes={PODS: FieldIndex("Pod", "spec.nodeName")})
    resource = await cache.ready(PODS)
    assert resource is not None
    return cache, resource


async def test_routed_watchers_get_the_events_of_their_node_only(
        make_store: StoreFactory) -> None:
    store = await make_store()
    cache, resource = await pod_cache(store)
    resource.hub.progress_interval = 0.05  # a quiet watcher learns the end soon
    start = resource.revision
    watchers = {route: resource.watch(PODS, start, route=route)
                for route in ("node-a", "node-b", "")}
    everything = resource.watch(PODS, start)
    assert everything is not None and len(resource.hub) == 4
    try:
        p1 = await store.create(f"{PODS}ns/p1", pod("p1"))  # unscheduled
        p2 = await store.create(f"{PODS}ns/p2", pod("p2", "node-a"))
        p1 = await store.update(f"{PODS}ns/p1", pod("p1", "node-b"), p1.mod_revision)  # bound
        p2 = await store.update(f"{PODS}ns/p2", pod("p2", "node-a") + b" ", p2.mod_revision)
        gone = await store.delete(f"{PODS}ns/p2", p2.mod_revision)
        end = gone.mod_revision
        await caught_up(resource, store)
        assert len(await drain(everything, end)) == 5

        async def keys(route: str) -> list[tuple[str, str]]:
            watcher = watchers[route]
            assert watcher is not None
            got: list[tuple[str, str]] = []
            async with asyncio.timeout(10):
                async for item in watcher:
                    if isinstance(item, Event):
                        assert isinstance(item, SharedEvent)
                        got.append((item.type, item.kv.key.rsplit("/", 1)[1]))
                    if item.revision >= end:
                        break
            return got

        assert await keys("node-a") == [("PUT", "p2"), ("PUT", "p2"), ("DELETE", "p2")]
        assert await keys("node-b") == [("PUT", "p1")]  # bound to it
        assert await keys("") == [("PUT", "p1"), ("PUT", "p1")]  # created, then bound away
        for watcher in watchers.values():
            assert watcher is not None
            await watcher.close()
        assert len(resource.hub) == 1 and not resource.hub.routed
    finally:
        await everything.close()
        await cache.close()


async def test_a_slow_routed_watcher_is_cut_off_without_holding_its_node_back(
        make_store: StoreFactory) -> None:
    store = await make_store()
    cache, resource = await pod_cache(store)
    resource.hub.capacity = 3
    slow = resource.watch(PODS, resource.revision, route="n")
    fast = resource.watch(PODS, resource.revision, route="n")
    assert slow is not None and fast is not None
    try:
        await fast_keeps_up_slow_is_dropped(
            store, fast, slow, [(f"{PODS}ns/p{i}", pod(f"p{i}", "n")) for i in range(10)])
        assert len(resource.hub) == 1  # the dropped one left the index
    finally:
        await slow.close()
        await fast.close()
        await cache.close()


async def test_a_routed_watcher_is_woken_first() -> None:
    """An event is pushed to the routed watchers (the kubelet of the pod's node, which acts
    on it) before the unrouted ones, so their streams run first."""
    hub = WatchHub(0, capacity=10, progress_interval=60.0)
    names = ["informer-1", "informer-2", "kubelet", "informer-3"]
    watchers = {name: hub.register(PODS, 0, route="n" if name == "kubelet" else None)
                for name in names}
    woken: list[str] = []

    async def consume(name: str) -> None:
        async for item in watchers[name]:
            if isinstance(item, Event):
                woken.append(name)
                return

    tasks = [asyncio.create_task(consume(name)) for name in names]
    try:
        for _ in range(3):
            await asyncio.sleep(0)  # every consumer waits in its watcher
        hub.publish([Event("PUT", KeyValue(f"{PODS}ns/p", b"{}", 1, 1), None)],
                    routes=lambda event: ("n",))
        async with asyncio.timeout(10):
            await asyncio.gather(*tasks)
        assert woken[0] == "kubelet" and sorted(woken) == sorted(names)
    finally:
        await hub.close()


async def test_a_write_is_answered_after_the_watch_cache_s_watchers_have_its_event(
        tmp_path: Path) -> None:
    """sqlite: the streams of the watch cache's watchers (woken by the cache, itself woken by
    the store) get a write's event before the writer is answered, and the cache holds it."""
    store = open_store("sqlite", data_dir=tmp_path / "data")
    cache, resource = await pod_cache(store)
    watcher = resource.watch(PODS, resource.revision)
    assert watcher is not None
    seen: list[int] = []

    async def consume() -> None:
        async for item in watcher:
            if isinstance(item, Event):
                seen.append(item.revision)

    task = asyncio.create_task(consume())
    try:
        for i in range(3):
            written = await store.create(f"{PODS}ns/p{i}", pod(f"p{i}", "n"))
            assert seen[-1:] == [written.mod_revision]
            assert resource.revision == written.mod_revision
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await watcher.close()
        await cache.close()
        await store.close()

"""The apiserver's watch cache, as upstream's cacher: per resource, the objects of the store
held in memory and a window of recent events, fed by one store watch, from which the reads
that may be served from a cache are served.

- `ResourceCache` lists the resource's prefix once, then follows one store watch from that
  revision: each event updates the objects, is appended to the history (the newest
  `history` events; `window_start` is the revision after which the history is complete) and
  is fanned out to the cache's watchers (a `WatchHub`: bounded buffers, so a slow watcher is
  cut off (`WatcherDropped`) without holding the others back; idle watchers get progress
  notifications at the cache's revision). When the store watch ends (dropped, compacted,
  the store unreachable), the cache ends its watchers (their clients watch again from their
  last resourceVersion) and lists again.
- Fan-out costs per event, not per watcher where it can: the watchers are pushed a
  `SharedEvent`, whose `memo` lets the watch streams decode and encode the event once for
  all of them (`ephemera.apiserver.watch`); and a resource may have an index field, as
  upstream's cacher has trigger functions (pods: `spec.nodeName`): a watcher whose selector
  requires one value of it (each kubelet's `spec.nodeName=NAME`) is registered under that
  value and offered only the events whose object had or has it (`WatchHub` routes), instead
  of every pod watcher testing every pod event. The value an object had is the one the cache
  found when it routed that object's event (kept per key), so routing parses an event's new
  object only, and that parse is the watch streams' and in-process informers' decode
  (`decoded`).
- `WatchCache` holds one `ResourceCache` per resource prefix. The apiserver starts the
  caches of its built-in resources with itself (`start`), as upstream's storage factory
  creates a cacher per resource at startup: an informer's first list (consistent, from the
  store) then meets a cache already past that revision, and its watch is served from the
  cache's history instead of from a second store watch for as long as it lasts. Events
  have none, ever (`uncached`: upstream's default watch cache size for them is 0, written
  often, seldom watched): their reads go to the store, so one `kubectl get events -w` does
  not leave every apiserver worker holding and decoding every Event for the rest of its
  life. Custom resources' caches start on first use.

Which reads it serves is `ephemera.api.listoptions`' decision (`ListRead.consistent`,
`WatchRead`) and the registry's: lists with `resourceVersion=0` and "not older than" lists
the cache has reached, and every watch from a revision inside the window. Consistent reads
(no resourceVersion) still go to the store, as upstream does without
ConsistentListFromCache; so do exact-revision lists and continued pages.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.selectors import field_values
from ephemera.store.base import (
    Event,
    KeyValue,
    ListResult,
    Progress,
    Store,
    StoreError,
    Watcher,
)
from ephemera.store.watchhub import (
    DEFAULT_PROGRESS_INTERVAL,
    DEFAULT_WATCH_CAPACITY,
    WatchHub,
)

if TYPE_CHECKING:
    from ephemera.apiserver.registry import Codec

log = logging.getLogger("ephemera.apiserver.watchcache")

# Events kept per resource: upstream's cacher keeps between 100 and 100,000, sized by the
# event rate; a fixed window is enough here (a watch from older than it goes to the store).
DEFAULT_HISTORY = 10_000
# How long a read waits for a cache that is (re)listing before it goes to the store.
READY_TIMEOUT = 5.0
RETRY_INTERVAL = 1.0
# Above every character of a key: the end of a key prefix's range.
_PREFIX_END = "\U0010ffff"


@dataclass(frozen=True, slots=True)
class SharedEvent(Event):
    """An event as the cache pushes it to its watchers: `memo` holds what one watch stream
    computed from it (the decoded objects, the encoded line) for the others. Whatever is put
    there is shared: read it, never change it. One exception: the stored object (`prev`:
    its previous state) the routing parsed, under `parsed_key(prev)`, is handed to the first
    stream that decodes it, which takes it out (and makes it its decoded object)."""

    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def parsed_key(prev: bool) -> tuple[str, bool]:
        return ("parsed", prev)


def decoded(event: Event, codec: Codec, *, prev: bool = False) -> dict[str, Any]:
    """The event's object (`prev`: its previous state) as `codec` decodes it: once per shared
    event for every consumer (the watch streams, the in-process informers; the object is
    then shared: read it, never change it), keyed by the apiVersion decoded to (the versions
    of a custom resource share one cache); the routing's parse of it, when there was one, is
    taken by the first decode. A plain event is decoded for each caller."""
    kv = event.prev if prev else event.kv
    assert kv is not None
    if not isinstance(event, SharedEvent):
        return codec.decode(kv)
    key = ("object", codec.resource.api_version, prev)
    obj: dict[str, Any] | None = event.memo.get(key)
    if obj is None:
        parsed = event.memo.pop(SharedEvent.parsed_key(prev), None)
        obj = event.memo[key] = codec.decode(kv, parsed)
    return obj


@dataclass(frozen=True)
class FieldIndex:
    """A selectable field of a kind by whose value watchers may be routed (upstream's
    cacher trigger functions: pods by `spec.nodeName`)."""

    kind: str
    field: str

    def value(self, obj: Mapping[str, Any]) -> str:
        """The field's value in a stored object (parsed), as field selectors see it (""
        when unset: an unscheduled pod's `spec.nodeName`)."""
        return field_values(self.kind, obj, frozenset((self.field,)))[self.field]

    def routes(self, event: Event, previous: str | None = None) -> tuple[str, ...]:
        """The field's values in the event's object and in its previous state (a watcher
        of either must see it: one that stops matching gets a DELETED); for a PUT the new
        value first. `previous`: the previous state's value when the caller knows it (the
        watch cache keeps it per key), else parsed; a DELETE's object is its previous state.
        The objects parsed for it are left on a shared event, for the consumers' decode."""
        old = None
        if event.prev is not None:
            old = previous if previous is not None else self.event_value(event, prev=True)
        if event.type == "DELETE" and old is not None:
            return (old,)
        new = self.event_value(event)
        return (new,) if old is None or old == new else (new, old)

    def event_value(self, event: Event, *, prev: bool = False) -> str:
        """The field's value in the event's object (`prev`: its previous state), parsed
        (the parse left on a shared event)."""
        return self.value(self._parsed(event, prev=prev))

    def _parsed(self, event: Event, *, prev: bool) -> dict[str, Any]:
        kv = event.prev if prev else event.kv
        assert kv is not None
        obj = self.parse(kv)
        if isinstance(event, SharedEvent):
            event.memo[SharedEvent.parsed_key(prev)] = obj
        return obj

    @staticmethod
    def parse(kv: KeyValue) -> dict[str, Any]:
        """A stored value, parsed."""
        obj: dict[str, Any] = orjson.loads(kv.value)
        return obj


class ResourceCache:
    """The objects under one key prefix and their recent events (see the module's doc).
    `index`: watchers may be routed by the value of one field (`watch(route=...)`)."""

    def __init__(self, store: Store, prefix: str, *, history: int = DEFAULT_HISTORY,
                 watch_capacity: int = DEFAULT_WATCH_CAPACITY,
                 progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
                 index: FieldIndex | None = None) -> None:
        self.store = store
        self.prefix = prefix
        self.index = index
        self.history_limit = history
        self.items: dict[str, KeyValue] = {}
        # key -> (mod_revision, the index field's value) of the object the cache holds, as
        # found when its event was routed: the previous value of the key's next event
        self._index_values: dict[str, tuple[int, str]] = {}
        self._sorted_keys: list[str] | None = None
        self.history: collections.deque[Event] = collections.deque()
        self.window_start = 0  # the history holds every event with a revision above this
        self.hub = WatchHub(0, capacity=watch_capacity, progress_interval=progress_interval)
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def revision(self) -> int:
        """Every event of the prefix up to this revision has been applied."""
        return self.hub.revision

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"watch-cache {self.prefix}")

    async def wait_ready(self, timeout: float = READY_TIMEOUT) -> bool:
        self.start()
        if self.ready.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.ready.wait()
        return self.ready.is_set()

    async def _run(self) -> None:
        while True:
            try:
                await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the store's errors and its transport's
                log.warning("watch cache of %s: %s; listing again", self.prefix,
                            err if isinstance(err, StoreError) else type(err).__name__)
            self.ready.clear()
            await self.hub.close()  # their clients watch again from their resourceVersion
            await asyncio.sleep(RETRY_INTERVAL)

    async def _follow(self) -> None:
        listed = await self.store.list(self.prefix)
        self.items = {kv.key: kv for kv in listed.kvs}
        self._index_values.clear()
        self._sorted_keys = None
        self.history.clear()
        self.window_start = listed.revision
        self.hub.revision = listed.revision
        watcher = await self.store.watch(self.prefix, listed.revision, prev=False)
        log.info("watch cache of %s: %d objects at revision %d", self.prefix,
                 len(self.items), listed.revision)
        self.ready.set()
        # Events reach the cache's watchers in the store's publish (one loop turn less on
        # every event's way to the watch streams); what the store replays comes through
        # the iteration first, and the iteration reports the watch's end.
        watcher.deliver_to(self._take)
        try:
            async for item in watcher:
                self._take(item)
        finally:
            await watcher.close()
        raise StoreError("the store's watch ended")

    def _take(self, item: Event | Progress) -> None:
        if isinstance(item, Progress):
            self.hub.revision = max(self.hub.revision, item.revision)
        else:
            self.apply(item)

    def apply(self, event: Event) -> None:
        """One committed event: the objects, the history, the watchers. The event's previous
        value (and a DELETE's value) is the one the cache holds, as upstream's watch cache
        takes it from its own store: the store is not asked for it (`watch(prev=False)`)."""
        key = event.kv.key
        kv = event.kv
        if event.type == "PUT":
            prev = self.items.get(key)
            if prev is None:
                self._sorted_keys = None
            self.items[key] = kv
        else:
            prev = self.items.pop(key, None)
            if prev is not None:
                self._sorted_keys = None
                kv = KeyValue(key, prev.value, prev.create_revision, kv.mod_revision)
        event = Event(event.type, kv, prev)
        self.history.append(event)
        if len(self.history) > self.history_limit:
            self.window_start = self.history.popleft().revision
        shared = SharedEvent(event.type, kv, prev)
        routes = None
        if self.index is not None:
            if self.hub.routed:
                routes = self._routes(shared)
            elif self._index_values:  # not followed while no watcher is routed
                self._index_values.pop(key, None)
        self.hub.publish_event(shared, routes)

    def _routes(self, event: SharedEvent) -> tuple[str, ...]:
        """`FieldIndex.routes` of an event the cache applies, with the previous state's
        value from `_index_values` when that holds it: only the new object is parsed, and
        its value kept for the key's next event."""
        assert self.index is not None
        key, prev = event.kv.key, event.prev
        known = self._index_values.pop(key, None)
        previous = (known[1] if known is not None and prev is not None
                    and known[0] == prev.mod_revision else None)
        routes = self.index.routes(event, previous)
        if event.type == "PUT":
            self._index_values[key] = (event.kv.mod_revision, routes[0])
        return routes

    def list(self, prefix: str, *, limit: int = 0, start_after: str = "") -> ListResult:
        """The keys under `prefix` (which lies under the cache's) after `start_after`, at
        most `limit` (0: all), at the cache's revision; as `Store.list`."""
        if self._sorted_keys is None:
            self._sorted_keys = sorted(self.items)
        keys = self._sorted_keys
        low = bisect.bisect_left(keys, prefix)
        if start_after:
            low = max(low, bisect.bisect_right(keys, start_after))
        high = bisect.bisect_left(keys, prefix + _PREFIX_END, low)
        end = min(high, low + limit) if limit else high
        kvs = [self.items[key] for key in keys[low:end]]
        return ListResult(kvs, self.revision, end < high, high - end)

    def watch(self, prefix: str, after_revision: int, *,
              route: str | None = None) -> Watcher | None:
        """A watcher of the events under `prefix` after `after_revision`, or None when the
        history no longer holds them all (the caller goes to the store). With `route` (only
        with an `index`): only the events whose object had or has that value there
        are pushed (the history replayed is not filtered)."""
        if after_revision < self.window_start:
            return None
        if route is not None and self.index is None:
            raise ValueError(f"the watch cache of {self.prefix} has no index")
        watcher = self.hub.register(prefix, after_revision, route=route)
        missed = []  # already published: replayed from the history, newest last
        for event in reversed(self.history):
            if event.revision <= after_revision:
                break
            if event.kv.key.startswith(prefix):
                missed.append(event)
        if missed:
            missed.reverse()
            watcher.set_replay(ReplayOnce(missed))
        return watcher

    async def close(self) -> None:
        self.ready.clear()  # not serving: a later use lists again first
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        await self.hub.close()


class ReplayOnce:
    """A `BufferedWatcher` replay source that hands over one batch, then nothing."""

    def __init__(self, events: list[Event]) -> None:
        self._events: list[Event] | None = events

    async def __call__(self) -> list[Event]:
        events, self._events = self._events or [], None
        return events


class WatchCache:
    """One `ResourceCache` per resource key prefix, started by `start` or on first use;
    `indexes`: the index of a prefix's cache (`ResourceCache.index`)."""

    def __init__(self, store: Store, *, history: int = DEFAULT_HISTORY,
                 indexes: Mapping[str, FieldIndex] | None = None,
                 uncached: Iterable[str] = ()) -> None:
        self.store = store
        self.history = history
        self.indexes = dict(indexes or {})
        self.uncached = frozenset(uncached)  # prefixes never cached: their reads go to the store
        self._caches: dict[str, ResourceCache] = {}

    def start(self, prefixes: Iterable[str]) -> None:
        """Start the caches of these resource key prefixes (listing and watching in the
        background; a read waits for its cache as on first use)."""
        for prefix in prefixes:
            if prefix not in self.uncached:
                self._cache(prefix).start()

    async def ready(self, prefix: str) -> ResourceCache | None:
        """The cache of the resource whose key prefix is `prefix`, once it has listed; None
        when it has not within `READY_TIMEOUT`, or the resource is never cached (the read
        goes to the store)."""
        if prefix in self.uncached:
            return None
        cache = self._cache(prefix)
        return cache if await cache.wait_ready() else None

    def _cache(self, prefix: str) -> ResourceCache:
        cache = self._caches.get(prefix)
        if cache is None:
            cache = self._caches[prefix] = ResourceCache(
                self.store, prefix, history=self.history, index=self.indexes.get(prefix))
        return cache

    def cached(self, prefix: str, key: str) -> KeyValue | None:
        """The cache's copy of `key` (under the resource prefix `prefix`) when that cache is
        serving, without waiting or starting it; it may be older than the store's (the
        starting point of an update, as upstream's cacher hands GuaranteedUpdate)."""
        cache = self._caches.get(prefix)
        if cache is None or not cache.ready.is_set():
            return None
        return cache.items.get(key)

    def watchers(self) -> int:
        return sum(len(cache.hub) for cache in self._caches.values())

    async def close(self) -> None:
        caches, self._caches = self._caches, {}
        for cache in caches.values():
            await cache.close()

"""Watch-fed caches of stored objects inside the apiserver: upstream's reflectors, informers
and listers, for the apiserver's own readers (the admission plugins, the RBAC cache, the
namespace cache, the Node authorizer's graph).

- `Reflector`: the shared list-then-watch loop (`ephemera.client.reflector.Reflector`, the
  same one the HTTP informers run) over a key prefix of the store (`StoreListerWatcher`:
  pages of 500 keys read at one revision, then a watch from it; a compacted revision is
  `Expired`, other store errors a `ListWatchError`) or, given the apiserver's watch cache,
  over that cache (`CachedListerWatcher`: as upstream's apiserver feeds its own informers
  from its cacher, the store keeps one watch per resource and its events are read and
  decoded once), feeding a `Sink` that takes integer
  revisions. It knows the store revision it has caught up with (`revision`: the list's,
  then every event's and progress notification's) and lets a reader wait for a revision
  (`wait_for`).
- `Mirror`: a `Sink` holding one resource's decoded objects by namespace and name, with the
  revision each was seen at, the revisions of deletions and the revision of its latest list,
  so that a list (a `relist` from another task) and the watch merge in any order: a watch
  event at or below the latest list's revision for an object the mirror does not hold is
  history that list already settled (the object was gone by then), so a watch running behind
  a relist never brings a deleted object back. It calls its `listeners` with the namespace of
  every change.
- `Informer`: a `Reflector` feeding a `Mirror`, for one resource.
- `ObjectCache`: the informers of the kinds the admission plugins read (ServiceAccounts,
  LimitRanges, ResourceQuotas), read through the plugins' context
  (`ephemera.apiserver.admissioncontext`) with the rules of `get` and `list` (see those). It
  reads its own writes: the registry records
  the revision of its last write of each resource (`Registry.write_revision`), and a read
  first waits until the informer has seen that revision (upstream's consistent reads from
  the watch cache; at most `SYNC_TIMEOUT` seconds, then the read goes to the store), so an
  object written through this apiserver before a request started is always seen by it.
  Writes by another apiserver sharing the store reach the cache when its watch delivers
  them, as upstream's informers do.

Objects handed out by a `Mirror` are shared: readers must not change them (an event's object
is the one the watch cache's other consumers decoded, `ephemera.apiserver.watchcache.decoded`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ephemera.apiserver.resources import Resource
from ephemera.apiserver.watchcache import WatchCache, decoded
from ephemera.client import reflector as shared
from ephemera.client.reflector import Expired, ListChunk, ListWatchError
from ephemera.store import Compacted, Event, KeyValue, Store, StoreError

if TYPE_CHECKING:
    from ephemera.apiserver.registry import Codec, Registry

log = logging.getLogger("ephemera.apiserver")

# How long a read waits for an informer to see this apiserver's own last write of the kind
# before it reads the store instead (upstream's watch cache waits up to 3 s).
SYNC_TIMEOUT = 3.0
# upstream's LimitRanger and ResourceQuota live lookups: a namespace the informer holds no
# objects of is listed live, and that answer kept this long, for at most this many namespaces.
LIVE_LOOKUP_TTL = 30.0
LIVE_LOOKUP_ENTRIES = 10000


class Sink(Protocol):
    """Where a `Reflector` puts what it reads."""

    def replace(self, kvs: Sequence[KeyValue], revision: int) -> None:
        """Everything under the prefix, as listed at `revision`."""

    def apply(self, event: Event) -> None:
        """One watch event, in revision order."""


class StoreListerWatcher:
    """The shared reflector's source over a key prefix of the store. A continue token is
    `<revision>/<last key read>` (the revision pins the later pages to the first one's)."""

    def __init__(self, store: Store, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    async def list(self, limit: int, continue_token: str, resource_version: str = ""
                   ) -> ListChunk[KeyValue]:
        """The store's newest state (every `resource_version` is satisfied by it)."""
        revision, start_after = 0, ""
        if continue_token:
            pinned, _, start_after = continue_token.partition("/")
            revision = int(pinned)
        try:
            page = await self.store.list(self.prefix, limit=limit, start_after=start_after,
                                         revision=revision)
        except Compacted as err:
            raise Expired(str(err)) from None
        except StoreError as err:
            raise ListWatchError(str(err)) from None
        token = f"{page.revision}/{page.kvs[-1].key}" if page.more and page.kvs else ""
        return ListChunk(page.kvs, str(page.revision), token)

    async def watch(self, resource_version: str
                    ) -> AsyncGenerator[tuple[str, Event | None], None]:
        try:
            watcher = await self.store.watch(self.prefix, int(resource_version or 0))
            try:
                async for item in watcher:
                    yield str(item.revision), item if isinstance(item, Event) else None
            finally:
                await watcher.close()
        except Compacted as err:
            raise Expired(str(err)) from None
        except StoreError as err:
            raise ListWatchError(f"watch ended ({err})") from None


class CachedListerWatcher(StoreListerWatcher):
    """`StoreListerWatcher` through the apiserver's watch cache of the prefix: a list is the
    cache's (whole, at the revision it has applied), a watch is one of its watchers. A watch
    from a revision the cache's history no longer holds is `Expired` (the reflector lists
    again, from the cache), as upstream's cacher answers 410. Until the cache serves (it
    lists after a start or a failure of its own store watch), the store answers."""

    def __init__(self, store: Store, prefix: str, watch_cache: WatchCache) -> None:
        super().__init__(store, prefix)
        self.watch_cache = watch_cache

    async def list(self, limit: int, continue_token: str, resource_version: str = ""
                   ) -> ListChunk[KeyValue]:
        if not continue_token:  # (a continue token is the store's, from its first page)
            cache = await self.watch_cache.ready(self.prefix)
            if cache is not None:
                listed = cache.list(self.prefix)
                return ListChunk(listed.kvs, str(listed.revision), "")
        return await super().list(limit, continue_token, resource_version)

    async def watch(self, resource_version: str
                    ) -> AsyncGenerator[tuple[str, Event | None], None]:
        cache = await self.watch_cache.ready(self.prefix)
        if cache is None:
            async for item in super().watch(resource_version):
                yield item
            return
        after = int(resource_version or 0)
        watcher = cache.watch(self.prefix, after)
        if watcher is None:
            raise Expired(f"the watch cache of {self.prefix} no longer holds revision {after}")
        try:
            async for event in watcher:
                yield str(event.revision), event if isinstance(event, Event) else None
        except StoreError as err:
            raise ListWatchError(f"watch ended ({err})") from None
        finally:
            await watcher.close()


class _RevisionSink:
    """A `Sink` of integer revisions as the shared reflector's sink (string versions)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def replace(self, items: Sequence[KeyValue], resource_version: str) -> None:
        self.sink.replace(items, int(resource_version))

    def apply(self, event: Event) -> None:
        self.sink.apply(event)


class Reflector(shared.Reflector[KeyValue, Event]):
    """Lists `prefix` into `sink`, then follows it with a watch (see the module docstring).
    `start` lists once and starts the background task; `close` stops it."""

    def __init__(self, store: Store, prefix: str, sink: Sink, *, name: str,
                 retry_interval: float = 1.0, watch_cache: WatchCache | None = None) -> None:
        source = (StoreListerWatcher(store, prefix) if watch_cache is None
                  else CachedListerWatcher(store, prefix, watch_cache))
        super().__init__(source, _RevisionSink(sink), name=name,
                         initial_backoff=retry_interval / 4, max_backoff=retry_interval * 5)
        self.store = store
        self.prefix = prefix
        self.revision = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def close(self) -> None:
        await super().close()
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def wait_for(self, revision: int, timeout: float) -> bool:
        """Wait until the sink reflects every write up to `revision` (at most `timeout`
        seconds); whether it does and the reflector is ready."""
        if self.revision < revision:
            waiter = asyncio.get_running_loop().create_future()
            entry = (revision, waiter)
            self._waiters.append(entry)
            try:
                async with asyncio.timeout(timeout):
                    await waiter
            except TimeoutError:
                pass
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(entry)
        return self.ready and self.revision >= revision

    def progressed(self, resource_version: str) -> None:
        revision = int(resource_version)
        if revision <= self.revision:
            return
        self.revision = revision
        if self._waiters:
            for wanted, waiter in self._waiters:
                if wanted <= revision and not waiter.done():
                    waiter.set_result(None)


class Mirror:
    """One resource's objects by namespace and name (see the module docstring)."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self.resource: Resource = codec.resource
        self.prefix = self.resource.key_prefix()
        self.objects: dict[str, dict[str, tuple[int, dict[str, Any]]]] = {}
        self.deleted: dict[tuple[str, str], int] = {}
        # The revision of the latest list merged: what it lacked was gone by then.
        self.listed_revision = 0
        self.listeners: list[Callable[[str], None]] = []
        # The sorted answers of `in_namespace` and `all`, until the next change.
        self._in_namespace: dict[str, list[dict[str, Any]]] = {}
        self._all: list[dict[str, Any]] | None = None

    # -- reads (the lists are shared too: read only)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        entry = self.objects.get(namespace, {}).get(name)
        return entry[1] if entry is not None else None

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        """The objects of `namespace` in name order."""
        listed = self._in_namespace.get(namespace)
        if listed is None:
            bucket = self.objects.get(namespace)
            if not bucket:
                return []
            listed = self._in_namespace[namespace] = [bucket[name][1] for name in sorted(bucket)]
        return listed

    def all(self) -> list[dict[str, Any]]:
        """Every object, by namespace and name."""
        if self._all is None:
            self._all = [obj for namespace in sorted(self.objects)
                         for obj in self.in_namespace(namespace)]
        return self._all

    # -- the sink

    def split(self, key: str) -> tuple[str, str]:
        rest = key[len(self.prefix):]
        if self.resource.namespaced:
            namespace, _, name = rest.partition("/")
            return namespace, name
        return "", rest

    def replace(self, kvs: Sequence[KeyValue], revision: int) -> None:
        self.merge_list(((*self.split(kv.key), kv.mod_revision, self.codec.decode(kv))
                         for kv in kvs), revision)

    def apply(self, event: Event) -> None:
        namespace, name = self.split(event.kv.key)
        if event.type == "DELETE":
            self.delete(namespace, name, event.revision)
        else:
            self.put(namespace, name, event.revision, decoded(event, self.codec))

    def put(self, namespace: str, name: str, revision: int, obj: dict[str, Any]) -> bool:
        """The object as written at `revision`, unless the mirror knows better: a newer
        version, a later deletion, or a list at or after `revision` that did not have it."""
        if revision <= self.deleted.get((namespace, name), 0):
            return False
        bucket = self.objects.get(namespace, {})
        current = bucket.get(name)
        if current is None and revision <= self.listed_revision:
            return False
        if current is not None and current[0] >= revision:
            return False
        self.objects.setdefault(namespace, bucket)[name] = (revision, obj)
        self._changed(namespace)
        return True

    def delete(self, namespace: str, name: str, revision: int) -> bool:
        key = (namespace, name)
        self.deleted[key] = max(revision, self.deleted.get(key, 0))
        bucket = self.objects.get(namespace, {})
        current = bucket.get(name)
        if current is None or current[0] >= revision:
            return False
        del bucket[name]
        if not bucket:
            self.objects.pop(namespace, None)
        self._changed(namespace)
        return True

    def merge_list(self, listed: Iterable[tuple[str, str, int, dict[str, Any]]],
                   revision: int) -> bool:
        """Merge a list read at `revision`: what it lacks and was last seen before it is gone."""
        changed = False
        seen: set[tuple[str, str]] = set()
        for namespace, name, rev, obj in listed:
            seen.add((namespace, name))
            changed = self.put(namespace, name, rev, obj) or changed
        for namespace, bucket in list(self.objects.items()):
            for name, (rev, _) in list(bucket.items()):
                if (namespace, name) not in seen and rev <= revision:
                    del bucket[name]
                    self._changed(namespace)
                    changed = True
            if not bucket:
                del self.objects[namespace]
        self.deleted = {k: d for k, d in self.deleted.items() if d > revision}
        self.listed_revision = max(self.listed_revision, revision)
        return changed

    def _changed(self, namespace: str) -> None:
        self._in_namespace.pop(namespace, None)
        self._all = None
        for listener in self.listeners:
            try:
                listener(namespace)
            except Exception:
                log.exception("%s cache: listener failed", self.resource.plural)


class Informer:
    """A `Reflector` feeding a `Mirror` of one resource."""

    def __init__(self, store: Store, codec: Codec, *, retry_interval: float = 1.0,
                 watch_cache: WatchCache | None = None) -> None:
        self.mirror = Mirror(codec)
        self.resource = codec.resource
        self.reflector = Reflector(store, self.mirror.prefix, self.mirror,
                                   name=f"{self.resource.plural} informer",
                                   retry_interval=retry_interval, watch_cache=watch_cache)

    @property
    def ready(self) -> bool:
        return self.reflector.ready

    async def start(self) -> None:
        await self.reflector.start()

    async def close(self) -> None:
        await self.reflector.close()

    async def relist(self) -> int:
        """List into the mirror now (it merges with the watch by revision); the list's
        revision."""
        return int(await self.reflector.relist())


class ObjectCache:
    """The informers of `resources` over the registry's store, read with the rules of
    `get` and `list` (see the module docstring)."""

    def __init__(self, registry: Registry, resources: Iterable[Resource], *,
                 sync_timeout: float = SYNC_TIMEOUT, live_ttl: float = LIVE_LOOKUP_TTL,
                 clock: Callable[[], float] = time.monotonic,
                 retry_interval: float = 1.0) -> None:
        self.registry = registry
        self.sync_timeout = sync_timeout
        self.live_ttl = live_ttl
        self.clock = clock
        self.informers = {r: Informer(registry.store, registry.codec(r),
                                      retry_interval=retry_interval,
                                      watch_cache=registry.watch_cache) for r in resources}
        # (resource, namespace) -> (expiry, the live list), oldest first
        self._live: OrderedDict[tuple[Resource, str], tuple[float, list[dict[str, Any]]]] = (
            OrderedDict())
        for resource, informer in self.informers.items():
            informer.mirror.listeners.append(functools.partial(self._forget_live, resource))

    def _forget_live(self, resource: Resource, namespace: str) -> None:
        self._live.pop((resource, namespace), None)

    async def start(self) -> None:
        for informer in self.informers.values():
            await informer.start()

    async def close(self) -> None:
        for informer in self.informers.values():
            await informer.close()
        self._live.clear()

    async def synced(self, resource: Resource) -> Mirror | None:
        """The mirror of `resource` once it reflects this apiserver's own last write of it;
        None when there is none to read (not cached, not ready, or not caught up in time)."""
        informer = self.informers.get(resource)
        if informer is None or not informer.ready:
            return None
        wanted = self.registry.write_revision(resource)
        if informer.reflector.revision >= wanted:
            return informer.mirror
        if await informer.reflector.wait_for(wanted, self.sync_timeout):
            return informer.mirror
        return None

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        """upstream's ServiceAccount plugin: the cached object, else a live GET (404 as the
        registry's StatusError)."""
        mirror = await self.synced(resource)
        if mirror is not None:
            obj = mirror.get(namespace, name)
            if obj is not None:
                return obj
        return await self.registry.get(resource, namespace, name)

    async def list(self, resource: Resource, namespace: str) -> list[dict[str, Any]]:
        """upstream's LimitRanger and ResourceQuota: the cached objects of `namespace` in name
        order; when the cache holds none, a live list, kept `live_ttl` seconds (dropped as
        soon as the informer sees a change in that namespace)."""
        mirror = await self.synced(resource)
        if mirror is None:
            return await live_list(self.registry, resource, namespace)
        objects = mirror.in_namespace(namespace)
        if objects:
            return objects
        key = (resource, namespace)
        entry = self._live.get(key)
        now = self.clock()
        if entry is not None and entry[0] > now:
            return entry[1]
        objects = await live_list(self.registry, resource, namespace)
        self._live[key] = (now + self.live_ttl, objects)
        self._live.move_to_end(key)
        while len(self._live) > LIVE_LOOKUP_ENTRIES:
            self._live.popitem(last=False)
        return objects


async def live_list(registry: Registry, resource: Resource, namespace: str
                    ) -> list[dict[str, Any]]:
    """The objects of `resource` in `namespace`, in name order, read from the store."""
    page = await registry.list(resource, namespace)
    codec = registry.codec(resource)
    return [obj if obj is not None else codec.decode(kv)
            for kv, obj in zip(page.kvs, page.objects, strict=True)]


__all__ = ["LIVE_LOOKUP_TTL", "SYNC_TIMEOUT", "Informer", "Mirror", "ObjectCache", "Reflector",
           "Sink", "live_list"]

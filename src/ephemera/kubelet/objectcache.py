"""The kubelet's watch-based cache of the Secrets and ConfigMaps its pods reference:
upstream's `configMapAndSecretChangeDetectionStrategy: Watch`
(`pkg/kubelet/util/manager/watch_based_manager.go`, with `cache_based_manager.go`'s pod
registration).

- `PodObjects(api)`: `register_pod(uid, *pods)` records what the pods (the API's version of
  one pod and its allocated version) reference (`ephemera.pods.references`: volumes,
  projected sources, env, envFrom, imagePullSecrets), replacing that pod's previous
  registration; `unregister_pod(uid)` drops it. `get_secret` / `get_configmap` read through
  the cache of the kind.
- `ObjectCache(api, plural)`: one kind. While some pod references an object, a single-object
  informer (`ephemera.client.Informer` on the namespace with `fieldSelector=metadata.name=
  NAME`: a list, then a watch from its resourceVersion, watched again when the server ends
  the watch, listed again after `410 Gone` or a broken stream) keeps it current; the last
  reference stops it. The Node authorizer lets a node list and watch, by that selector, the
  Secrets and ConfigMaps of its pods.
- `await get(namespace, name)`: the object (shared: do not modify it), or None when it does
  not exist. A watched object is read from the cache once the informer's first list is in
  (waiting up to `sync_timeout`, 1 s as upstream); a deleted one reads None at once (no stale
  copy is served). An object no pod references, one over the `max_watched` budget, and a cache
  not synced in time are read with a GET instead (upstream fails those reads with `object
  "ns"/"name" not registered` / `failed to sync secret cache`). Unlike upstream, an
  `immutable: true` object stays watched, so that its deletion is seen too.
- `on_change(kind, namespace, name, pod_uids)`: called (on the event loop, keep it quick)
  when a watched object is added, modified or deleted after its first list, with the pods
  referencing it; the kubelet refreshes those pods' volumes (upstream waits for the next pod
  sync).

`max_watched` (default 48, shared by both kinds) bounds the watches: each holds one HTTP/1.1
connection of the kubelet's `ApiClient` (aiohttp's pool has 100), where upstream multiplexes
its watches over HTTP/2. A watch freed (its object no longer referenced) goes to the object
that has waited longest for one, Secret or ConfigMap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, Informer, resource_path
from ephemera.pods.references import (
    CONFIGMAP,
    SECRET,
    Ref,
    pod_level_references,
    pod_volume_references,
)

__all__ = ["MAX_WATCHED", "SYNC_TIMEOUT", "ObjectCache", "PodObjects", "pod_object_references"]

log = logging.getLogger(__name__)

SYNC_TIMEOUT = 1.0
MAX_WATCHED = 48

Obj = dict[str, Any]
ChangeHandler = Callable[[str, str, str, frozenset[str]], None]


def pod_object_references(pod: Mapping[str, Any]) -> frozenset[Ref]:
    """The Secrets and ConfigMaps a pod references (upstream's `VisitPodSecretNames` and
    `VisitPodConfigmapNames`)."""
    refs = set(pod_level_references(pod))
    for volume_refs in pod_volume_references(pod).values():
        refs.update(volume_refs)
    return frozenset(ref for ref in refs if ref[0] in (SECRET, CONFIGMAP))


@dataclass
class _WatchBudget:
    """How many informers may run at once, across the kinds: a freed watch goes to the
    object waiting longest for one, whatever its kind."""

    limit: int
    used: int = 0
    caches: list[ObjectCache] = field(default_factory=list)
    _tickets: int = 0

    def ticket(self) -> int:
        """The place in line of an object that starts waiting for a watch."""
        self._tickets += 1
        return self._tickets

    def free(self) -> None:
        """A watch stopped: start the one of the longest waiter, of either kind."""
        self.used -= 1
        waiters = [(item.waiting_since, cache, key) for cache in self.caches
                   for key, item in cache.waiting()]
        if waiters:
            _, cache, key = min(waiters, key=lambda waiter: waiter[0])
            cache.start_watch(key)


@dataclass
class _Item:
    """One referenced object: the pods referencing it and its informer (None: read by
    GET, waiting for a watch since `waiting_since`)."""

    pods: set[str] = field(default_factory=set)
    informer: Informer | None = None
    task: asyncio.Task[None] | None = None
    waiting_since: int = 0


class ObjectCache:
    """The watched objects of one kind (see the module docstring)."""

    def __init__(self, api: ApiClient, plural: str, *, kind: str = "",
                 sync_timeout: float = SYNC_TIMEOUT, budget: _WatchBudget | None = None,
                 watch_timeout: int | None = None,
                 on_change: ChangeHandler | None = None) -> None:
        self.api = api
        self.plural = plural
        self.kind = kind or plural
        self.sync_timeout = sync_timeout
        self.budget = budget if budget is not None else _WatchBudget(MAX_WATCHED)
        self.watch_timeout = watch_timeout
        self.on_change = on_change
        self.cache_reads = 0  # answered from a synced informer
        self.api_reads = 0  # answered by a GET
        self._items: dict[tuple[str, str], _Item] = {}
        self.budget.caches.append(self)

    # -- references -------------------------------------------------------------------------

    def add_reference(self, namespace: str, name: str, pod_uid: str) -> None:
        key = (namespace, name)
        item = self._items.get(key)
        if item is None:
            item = self._items[key] = _Item()
            self._watch(key, item)
        item.pods.add(pod_uid)

    def delete_reference(self, namespace: str, name: str, pod_uid: str) -> None:
        key = (namespace, name)
        item = self._items.get(key)
        if item is None:
            return
        item.pods.discard(pod_uid)
        if item.pods:
            return
        del self._items[key]
        if item.informer is not None:
            self._stop(item)
            self.budget.free()  # a freed watch goes to a waiter, of either kind

    def waiting(self) -> list[tuple[tuple[str, str], _Item]]:
        """The referenced objects without a watch (over the budget)."""
        return [(key, item) for key, item in self._items.items() if item.informer is None]

    def start_watch(self, key: tuple[str, str]) -> None:
        """Watch a waiting object (the budget freed a watch for it)."""
        item = self._items.get(key)
        if item is not None and item.informer is None:
            self._watch(key, item)

    def watched(self) -> list[tuple[str, str]]:
        """(namespace, name) of the objects with a running informer."""
        return [key for key, item in self._items.items()
                if item.task is not None and not item.task.done()]

    def referenced(self) -> list[tuple[str, str]]:
        return list(self._items)

    def _watch(self, key: tuple[str, str], item: _Item) -> None:
        if self.budget.used >= self.budget.limit:
            item.waiting_since = self.budget.ticket()
            return
        namespace, name = key
        informer = Informer(self.api, resource_path(self.plural, namespace),
                            field_selector=f"metadata.name={name}",
                            name=f"{self.kind} {namespace}/{name}",
                            watch_timeout=self.watch_timeout)

        def changed(*objs: Obj) -> None:
            # The handlers of the first list run before it counts as synced: only later
            # adds, updates and deletes are changes.
            if informer.has_synced and self.on_change is not None and item.pods:
                self.on_change(self.kind, namespace, name, frozenset(item.pods))

        informer.add_handler(on_add=changed, on_update=changed, on_delete=changed)
        item.informer = informer
        item.task = asyncio.get_running_loop().create_task(
            informer.run(), name=f"object-cache {self.kind} {namespace}/{name}")
        self.budget.used += 1

    @staticmethod
    def _stop(item: _Item) -> None:
        if item.task is not None and not item.task.done():
            item.task.cancel()

    # -- reads ------------------------------------------------------------------------------

    async def get(self, namespace: str, name: str) -> Obj | None:
        """The object, or None when it does not exist (see the module docstring)."""
        item = self._items.get((namespace, name))
        informer = item.informer if item is not None else None
        if informer is not None:
            if not informer.has_synced:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.sync_timeout):
                        await informer.wait_synced()
            if informer.has_synced:
                self.cache_reads += 1
                return informer.get(f"{namespace}/{name}")
        self.api_reads += 1
        try:
            return await self.api.get(resource_path(self.plural, namespace, name))
        except StatusError as err:
            if err.code == 404:
                return None
            raise

    async def close(self) -> None:
        """Stop every informer."""
        tasks = [item.task for item in self._items.values() if item.task is not None]
        for item in self._items.values():
            self._stop(item)
        self._items.clear()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class PodObjects:
    """The Secrets and ConfigMaps of the kubelet's pods (see the module docstring)."""

    def __init__(self, api: ApiClient, *, sync_timeout: float = SYNC_TIMEOUT,
                 max_watched: int = MAX_WATCHED, watch_timeout: int | None = None,
                 on_change: ChangeHandler | None = None) -> None:
        budget = _WatchBudget(max_watched)
        options: dict[str, Any] = {"sync_timeout": sync_timeout, "budget": budget,
                                   "watch_timeout": watch_timeout, "on_change": on_change}
        self.secrets = ObjectCache(api, "secrets", kind=SECRET, **options)
        self.configmaps = ObjectCache(api, "configmaps", kind=CONFIGMAP, **options)
        self._registered: dict[str, frozenset[Ref]] = {}

    def _cache(self, kind: str) -> ObjectCache:
        return self.secrets if kind == SECRET else self.configmaps

    def register_pod(self, uid: str, *pods: Mapping[str, Any] | None) -> None:
        """The pod `uid` now references what `pods` (its versions) reference."""
        refs = frozenset().union(*(pod_object_references(p) for p in pods if p))
        previous = self._registered.get(uid, frozenset())
        for kind, namespace, name in refs - previous:
            self._cache(kind).add_reference(namespace, name, uid)
        for kind, namespace, name in previous - refs:
            self._cache(kind).delete_reference(namespace, name, uid)
        if refs:
            self._registered[uid] = refs
        else:
            self._registered.pop(uid, None)

    def unregister_pod(self, uid: str) -> None:
        self.register_pod(uid)

    def references(self, uid: str) -> frozenset[Ref]:
        return self._registered.get(uid, frozenset())

    async def get_secret(self, namespace: str, name: str) -> Obj | None:
        return await self.secrets.get(namespace, name)

    async def get_configmap(self, namespace: str, name: str) -> Obj | None:
        return await self.configmaps.get(namespace, name)

    async def close(self) -> None:
        await asyncio.gather(self.secrets.close(), self.configmaps.close())
        self._registered.clear()

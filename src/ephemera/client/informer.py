"""`Informer`: a local, always-current copy of one collection, as client-go's reflector and
informer keep it.

`run()` lists the collection, then watches from the list's `resourceVersion`; each event
updates the in-memory cache (keyed `namespace/name`, or `name` for cluster objects) and then
calls the registered handlers. When the watch ends cleanly (the server's timeout) it watches
again from the last resourceVersion seen (bookmarks included). It lists again, replacing the
cache, when the watch answers `410 Gone/Expired` (the revision was compacted) or the stream
breaks; a re-list reports what changed meanwhile to the handlers as adds, updates and deletes.
Failures are retried with exponential back-off (0.2 s doubling up to 5 s).

Handlers are plain (synchronous) callables run on the event loop, in event order:
`on_add(obj)`, `on_update(old, new)`, `on_delete(obj)` (the last state known). A handler that
raises is logged and does not stop the informer. Keep them quick; hand real work to a queue.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.client.api import ApiClient, ApiUnavailable

__all__ = ["Informer", "object_key"]

log = logging.getLogger(__name__)

INITIAL_BACKOFF = 0.2
MAX_BACKOFF = 5.0
# Watches ask the server to end after a random time in [MIN, 2 * MIN) seconds, as client-go's
# reflector does, so that many clients do not reconnect at once.
MIN_WATCH_TIMEOUT = 300

Obj = dict[str, Any]


def object_key(obj: Mapping[str, Any]) -> str:
    """`namespace/name`, or `name` for a cluster-scoped object (client-go's
    `MetaNamespaceKeyFunc`)."""
    md = obj.get("metadata") or {}
    namespace, name = md.get("namespace") or "", md.get("name") or ""
    return f"{namespace}/{name}" if namespace else str(name)


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass
class _Handler:
    on_add: Callable[[Obj], None] | None
    on_update: Callable[[Obj, Obj], None] | None
    on_delete: Callable[[Obj], None] | None


class Informer:
    """A cache of the objects at `path` (optionally filtered by selectors), kept current by a
    list and a watch, with event handlers."""

    def __init__(self, api: ApiClient, path: str, *, label_selector: str | None = None,
                 field_selector: str | None = None, name: str = "",
                 watch_timeout: int | None = None, allow_bookmarks: bool = True) -> None:
        """`watch_timeout`: seconds each watch asks the server for (default: random in
        [300, 600)); `allow_bookmarks`: ask for BOOKMARK events (they keep the
        resourceVersion fresh, so that a re-watch rarely finds it compacted)."""
        self.api = api
        self.path = path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.name = name or path
        self.watch_timeout = watch_timeout
        self.allow_bookmarks = allow_bookmarks
        self.resource_version = ""
        self._cache: dict[str, Obj] = {}
        self._handlers: list[_Handler] = []
        self._synced = asyncio.Event()

    # -- reading --------------------------------------------------------------------------

    def get(self, key: str) -> Obj | None:
        """The cached object of `key` (`namespace/name` or `name`); do not modify it."""
        return self._cache.get(key)

    def list(self) -> list[Obj]:
        """All cached objects (the dicts themselves: do not modify them)."""
        return list(self._cache.values())

    def keys(self) -> Iterator[str]:
        return iter(list(self._cache))

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def has_synced(self) -> bool:
        """Whether the first list has been loaded into the cache."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    # -- handlers -------------------------------------------------------------------------

    def add_handler(self, *, on_add: Callable[[Obj], None] | None = None,
                    on_update: Callable[[Obj, Obj], None] | None = None,
                    on_delete: Callable[[Obj], None] | None = None) -> None:
        """Register handlers. Registered after the first sync, `on_add` is first called for
        every cached object, so that no handler misses an object."""
        handler = _Handler(on_add, on_update, on_delete)
        self._handlers.append(handler)
        if self.has_synced and on_add is not None:
            for obj in self.list():
                self._call(on_add, obj)

    def _call(self, fn: Callable[..., None] | None, *args: Obj) -> None:
        if fn is None:
            return
        try:
            fn(*args)
        except Exception:
            log.exception("%s: an event handler failed", self.name)

    def _added(self, obj: Obj) -> None:
        for h in self._handlers:
            self._call(h.on_add, obj)

    def _updated(self, old: Obj, new: Obj) -> None:
        for h in self._handlers:
            self._call(h.on_update, old, new)

    def _deleted(self, obj: Obj) -> None:
        for h in self._handlers:
            self._call(h.on_delete, obj)

    # -- list and watch -------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled."""
        backoff = INITIAL_BACKOFF
        while True:
            try:
                await self._list()
                backoff = INITIAL_BACKOFF
                while await self._watch():
                    pass
                await asyncio.sleep(INITIAL_BACKOFF)  # the stream broke: list again
            except StatusError as err:
                if err.code == 410:
                    log.info("%s: %s; listing again", self.name, err.message)
                    continue
                log.warning("%s: %s (%s); retrying in %.1fs", self.name, err.message,
                            err.code, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            except ApiUnavailable as err:
                log.warning("%s: %s; retrying in %.1fs", self.name, err, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    async def _list(self) -> None:
        """List and replace the cache, telling the handlers what changed."""
        result = await self.api.list(self.path, label_selector=self.label_selector,
                                     field_selector=self.field_selector)
        fresh: dict[str, Obj] = {}
        for item in result.get("items") or []:
            fresh[object_key(item)] = item
        old = self._cache
        self._cache = fresh
        self.resource_version = str((result.get("metadata") or {}).get("resourceVersion") or "")
        for key, obj in old.items():
            if key not in fresh:
                self._deleted(obj)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._added(obj)
            elif _rv(before) != _rv(obj):
                self._updated(before, obj)
        self._synced.set()

    async def _watch(self) -> bool:
        """Watch from `resource_version`; True when the stream ended cleanly (watch again),
        False when it broke (list again)."""
        timeout = self.watch_timeout or int(MIN_WATCH_TIMEOUT * (1 + random.random()))
        try:
            async for event in self.api.watch(
                    self.path, resource_version=self.resource_version,
                    label_selector=self.label_selector, field_selector=self.field_selector,
                    timeout_seconds=timeout, allow_bookmarks=self.allow_bookmarks):
                self._apply(event.type, event.object)
        except ApiUnavailable as err:
            log.info("%s: watch ended: %s", self.name, err)
            return False
        return True

    def _apply(self, kind: str, obj: Obj) -> None:
        rv = _rv(obj)
        if rv:
            self.resource_version = rv
        if kind == "BOOKMARK":
            return
        key = object_key(obj)
        if kind == "DELETED":
            gone = self._cache.pop(key, None)
            self._deleted(gone if gone is not None else obj)
            return
        before = self._cache.get(key)
        self._cache[key] = obj
        if before is None:
            self._added(obj)
        else:
            self._updated(before, obj)

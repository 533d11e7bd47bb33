"""`Informer`: a local, always-current copy of one collection, as client-go's reflector and
informer keep it.

`run()` runs the shared list-then-watch loop (`ephemera.client.reflector.Reflector`) over the
HTTP API: it lists the collection in pages of 500 (`limit` and `continue`), then watches from
the list's `resourceVersion`; each event updates the in-memory cache (keyed `namespace/name`,
or `name` for cluster objects) and then calls the registered handlers. When the watch ends
cleanly (the server's timeout) it watches again from the last resourceVersion seen
(bookmarks included), and also when the stream breaks or the apiserver cannot be reached
(with several apiservers the client moves to the next one: no relist). It lists again,
replacing the cache, when the watch answers `410 Gone/Expired` (the revision was compacted)
or any other failure; a re-list reports what
changed meanwhile to the handlers as adds, updates and deletes. Failures are retried with
exponential back-off (0.2 s doubling up to 5 s).

One informer may be shared by several controllers (one cache and one watch for all, as
upstream's shared informer factory): each of them calls `run()`; the first call starts the
list and watch, the others wait on it, and it stops when the last caller is cancelled.

Handlers are plain (synchronous) callables run on the event loop, in event order:
`on_add(obj)`, `on_update(old, new)`, `on_delete(obj)` (the last state known). A handler that
raises is logged and does not stop the informer. Keep them quick; hand real work to a queue.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.client.api import ApiClient, ApiUnavailable, WatchEvent
from ephemera.client.reflector import (
    DEFAULT_PAGE_SIZE,
    Expired,
    ListChunk,
    ListWatchError,
    Reflector,
)

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


def _namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _failure(err: StatusError | ApiUnavailable) -> Exception:
    """A list or watch failure as the reflector takes it: 410 is `Expired`."""
    if isinstance(err, StatusError):
        if err.code == 410:
            return Expired(err.message)
        return ListWatchError(f"{err.message} ({err.code})")
    return ListWatchError(str(err))


class ApiListerWatcher:
    """The reflector's source over the HTTP API: pages of `GET path` and `GET path?watch`."""

    def __init__(self, api: ApiClient, path: str, *, label_selector: str | None,
                 field_selector: str | None, watch_timeout: int | None,
                 allow_bookmarks: bool) -> None:
        self.api = api
        self.path = path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout = watch_timeout
        self.allow_bookmarks = allow_bookmarks

    async def list(self, limit: int, continue_token: str, resource_version: str = ""
                   ) -> ListChunk[Obj]:
        params: dict[str, Any] = {"labelSelector": self.label_selector,
                                  "fieldSelector": self.field_selector,
                                  "limit": limit or None, "continue": continue_token or None,
                                  "resourceVersion": resource_version or None}
        try:
            page = await self.api.get(self.path, **params)
        except (StatusError, ApiUnavailable) as err:
            raise _failure(err) from None
        md = page.get("metadata") or {}
        return ListChunk(page.get("items") or [], str(md.get("resourceVersion") or ""),
                         str(md.get("continue") or ""))

    async def watch(self, resource_version: str
                    ) -> AsyncGenerator[tuple[str, WatchEvent | None], None]:
        timeout = self.watch_timeout or int(MIN_WATCH_TIMEOUT * (1 + random.random()))
        try:
            async for event in self.api.watch(
                    self.path, resource_version=resource_version,
                    label_selector=self.label_selector, field_selector=self.field_selector,
                    timeout_seconds=timeout, allow_bookmarks=self.allow_bookmarks):
                yield event.resource_version, None if event.type == "BOOKMARK" else event
        except (StatusError, ApiUnavailable) as err:
            raise _failure(err) from None


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
                 watch_timeout: int | None = None, allow_bookmarks: bool = True,
                 page_size: int = DEFAULT_PAGE_SIZE) -> None:
        """`watch_timeout`: seconds each watch asks the server for (default: random in
        [300, 600)); `allow_bookmarks`: ask for BOOKMARK events (they keep the
        resourceVersion fresh, so that a re-watch rarely finds it compacted); `page_size`:
        items per list request (0: the whole list in one)."""
        self.api = api
        self.path = path
        self.name = name or path
        self._cache: dict[str, Obj] = {}
        # namespace -> key -> object: upstream's NamespaceIndex, kept with the cache
        self._by_namespace: dict[str, dict[str, Obj]] = {}
        self._handlers: list[_Handler] = []
        self._synced = asyncio.Event()
        self._runner: asyncio.Future[None] | None = None  # the list and watch (`run`)
        self._runs = 0  # callers of `run` waiting on it
        self.reflector: Reflector[Obj, WatchEvent] = Reflector(
            ApiListerWatcher(api, path, label_selector=label_selector,
                             field_selector=field_selector, watch_timeout=watch_timeout,
                             allow_bookmarks=allow_bookmarks),
            self, name=self.name, page_size=page_size, initial_backoff=INITIAL_BACKOFF,
            max_backoff=MAX_BACKOFF)

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (the list's, then every watch event's)."""
        return self.reflector.resource_version

    # -- reading --------------------------------------------------------------------------

    def get(self, key: str) -> Obj | None:
        """The cached object of `key` (`namespace/name` or `name`); do not modify it."""
        return self._cache.get(key)

    def list(self, namespace: str | None = None) -> list[Obj]:
        """All cached objects, or those of one namespace (through the namespace index, not a
        scan); the dicts themselves: do not modify them."""
        if namespace is None:
            return list(self._cache.values())
        return list(self._by_namespace.get(namespace, {}).values())

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

    # -- list and watch: the reflector feeds the cache ----------------------------------

    async def run(self) -> None:
        """List and watch until cancelled. An informer shared by several controllers (one
        cache and one watch for all, as upstream's shared informers) is run by each of
        them: the first call starts the list and watch, the others wait on it, and it stops
        when the last caller is cancelled."""
        if self._runner is None or self._runner.done():
            self._runner = asyncio.ensure_future(self.reflector.run())
        runner = self._runner
        self._runs += 1
        try:
            await asyncio.shield(runner)
        finally:
            self._runs -= 1
            if self._runs == 0 and not runner.done():
                if self._runner is runner:  # a caller from now on starts a new one
                    self._runner = None
                await cancel_and_wait(runner)

    def replace(self, items: Sequence[Obj], resource_version: str) -> None:
        """A list: replace the cache, telling the handlers what changed."""
        fresh: dict[str, Obj] = {object_key(item): item for item in items}
        old = self._cache
        self._cache = fresh
        self._by_namespace = {}
        for key, obj in fresh.items():
            self._by_namespace.setdefault(_namespace(obj), {})[key] = obj
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

    def apply(self, event: WatchEvent) -> None:
        """A watch event: update the cache, then tell the handlers."""
        obj = event.object
        key = object_key(obj)
        namespace = _namespace(obj)
        if event.type == "DELETED":
            gone = self._cache.pop(key, None)
            in_namespace = self._by_namespace.get(namespace)
            if in_namespace is not None:
                in_namespace.pop(key, None)
                if not in_namespace:
                    del self._by_namespace[namespace]
            self._deleted(gone if gone is not None else obj)
            return
        before = self._cache.get(key)
        self._cache[key] = obj
        self._by_namespace.setdefault(namespace, {})[key] = obj
        if before is None:
            self._added(obj)
        else:
            self._updated(before, obj)

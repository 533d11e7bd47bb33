"""`Reflector`: the one list-then-watch loop of ephemera, as client-go's reflector
(`k8s.io/client-go/tools/cache`) runs it. It speaks no protocol: a `ListerWatcher` gives it
pages of a list and a stream of watch items, and it feeds a `Sink`. `ephemera.client.informer`
runs it over the HTTP API; `ephemera.apiserver.informers` runs it over the store, as
upstream's apiserver runs client-go's reflector over its storage in the watch cache. So it
lives here, in `client/`, below the apiserver, and imports no transport (an import-linter
contract keeps it so).

The loop:

- **List** at the resource version client-go's `relistResourceVersion` picks: `0` the first
  time (any: the apiserver's watch cache answers, ignoring the limit), then the last one
  seen ("not older than", in one request: no limit), or "" (the newest, a consistent read)
  after a watch answered 410 Expired, since that version is gone. Consistent lists come in
  pages of `page_size` items (client-go's pager: `limit=500`, then `continue`;
  0: one request), every page read at the first page's resource version; when a continue
  token expires mid-list (`Expired`), the whole list is read again in one request (the
  pager's fallback to a full list). The sink gets everything at once
  (`Sink.replace(items, resource_version)`).
- **Watch** from the list's resource version. Each item is `(resource_version, event)`, the
  event None for a bookmark or progress notification; events go to `Sink.apply` in order.
  A watch that ends cleanly (the server's timeout) is watched again from the last resource
  version seen, unless it ended within a second with nothing in it (client-go's "very short
  watch"), which counts as a failure.
- **Failures.** `Expired` from a watch (410: the resource version was compacted) lists again
  at once. A watch that breaks or cannot be opened (`ListWatchError`: the apiserver died,
  the connection broke) is opened again from the last resource version seen, without a
  list, as client-go's reflector does for a broken stream or a refused connection: behind
  several apiservers on one store the next one serves the same resource versions, so a
  failover costs no relist unless that version is gone (then `Expired` lists again). Any
  other failure, and a very short watch, lists again. Every retry waits a back-off that
  doubles from `initial_backoff` to `max_backoff` and starts over once a watch delivers
  something. `relists` and `watch_resumes` count what happened (for logs and tests).
  `ListWatchError` is an expected failure (a connection, a store error) and is logged in a
  line; anything else is logged with its traceback. The loop only ends when cancelled.

State: `resource_version` (the last seen: the list's, then every watch item's),
`has_synced` (the first list is in the sink), `ready` (listed and watching: False again from
a failure until the next list). `progressed(resource_version)` is called after the list and
after every watch item, for subclasses that let readers wait for a resource version.
`start()` lists once (raising what the list raises) and then runs in the background;
`run()` lists and watches in the caller's task; `close()` stops the background task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ephemera.aiotasks import cancel_and_wait

__all__ = ["DEFAULT_PAGE_SIZE", "Expired", "ListChunk", "ListWatchError", "ListerWatcher",
           "Reflector", "Sink"]

log = logging.getLogger("ephemera.reflector")

# client-go's pager: lists are read 500 items at a time.
DEFAULT_PAGE_SIZE = 500
# client-go's reflector: a watch that ends cleanly this soon with no event is a failure.
SHORT_WATCH_SECONDS = 1.0

T = TypeVar("T")
E = TypeVar("E")
T_co = TypeVar("T_co", covariant=True)
E_co = TypeVar("E_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)
E_contra = TypeVar("E_contra", contravariant=True)


class Expired(Exception):
    """The resource version (or continue token) asked for is gone (upstream's 410): list
    again."""


class ListWatchError(Exception):
    """An expected failure of a list or a watch (the server or store could not be reached,
    answered an error, or the stream broke): list again after the back-off."""


class _WatchBroke(Exception):
    """A watch failed with a `ListWatchError`: open it again from the last version."""

    def __init__(self, cause: ListWatchError) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(frozen=True)
class ListChunk(Generic[T_co]):
    """One page of a list: its items, the resource version it was read at, and the token
    that reads the next page ("" on the last)."""

    items: Sequence[T_co]
    resource_version: str
    continue_token: str = ""


class ListerWatcher(Protocol[T_co, E_co]):
    """Where a `Reflector` reads from."""

    async def list(self, limit: int, continue_token: str, resource_version: str = ""
                   ) -> ListChunk[T_co]:
        """One page of at most `limit` items (0: all), after `continue_token` ("": the
        first page), read at `resource_version` as a list's query reads it ("": the newest;
        "0": any; N: not older than N). Raises `Expired` for an expired token,
        `ListWatchError` otherwise."""
        ...

    def watch(self, resource_version: str) -> AsyncGenerator[tuple[str, E_co | None], None]:
        """The changes after `resource_version`, as `(resource_version, event or None)`;
        ends when the server ends the watch. Raises `Expired` when `resource_version` is
        gone, `ListWatchError` for other failures."""
        ...


class Sink(Protocol[T_contra, E_contra]):
    """Where a `Reflector` puts what it reads."""

    def replace(self, items: Sequence[T_contra], resource_version: str) -> None:
        """Everything there is, as listed at `resource_version`."""

    def apply(self, event: E_contra) -> None:
        """One watch event, in order."""


class Reflector(Generic[T, E]):
    """Lists from `source` into `sink`, then follows the watch (see the module docstring)."""

    def __init__(self, source: ListerWatcher[T, E], sink: Sink[T, E], *, name: str,
                 page_size: int = DEFAULT_PAGE_SIZE, initial_backoff: float = 0.2,
                 max_backoff: float = 5.0) -> None:
        self.source = source
        self.sink = sink
        self.name = name
        self.page_size = page_size
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.resource_version = ""
        # The last resource version is gone (a watch answered 410): list the newest.
        self._version_gone = False
        self._synced = False
        self._ready = False
        # A watch delivered something since the last failure: the back-off starts over.
        self._delivered = False
        self._task: asyncio.Task[None] | None = None
        self.relists = 0  # lists after the first
        self.watch_resumes = 0  # watches opened again from the last version after a failure

    @property
    def has_synced(self) -> bool:
        """Whether the first list is in the sink."""
        return self._synced

    @property
    def ready(self) -> bool:
        """Listed and watching (False before the first list, after `close` and from a failure
        until the next list)."""
        return self._ready

    async def pause(self, seconds: float) -> None:
        """The back-off wait before listing again."""
        await asyncio.sleep(seconds)

    def progressed(self, resource_version: str) -> None:
        """Called once the sink reflects `resource_version` (after a list and after every
        watch item); subclasses may wake readers waiting for it."""

    async def start(self) -> None:
        """List (raising what the list raises), then keep following in the background."""
        if self._task is not None:
            return
        await self.relist()
        self._ready = True
        self._task = asyncio.get_running_loop().create_task(self._loop(listed=True),
                                                            name=self.name)

    async def run(self) -> None:
        """List and watch until cancelled, retrying every failure."""
        await self._loop(listed=False)

    async def close(self) -> None:
        self._ready = False
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def relist(self) -> str:
        """List into the sink now (also while the watch runs: the sink must then merge by
        resource version); the list's resource version."""
        items: list[T] = []
        token = ""
        resource_version = ""
        at = self.relist_resource_version()
        limit = self.page_size if at in ("", "0") else 0
        try:
            while True:
                chunk = await self.source.list(limit, token, at if not token else "")
                if not token:
                    resource_version = chunk.resource_version
                items.extend(chunk.items)
                token = chunk.continue_token
                if not token:
                    break
        except Expired as err:
            if not token:
                raise
            log.info("%s: %s; listing again in one request", self.name, err)
            chunk = await self.source.list(0, "")
            items, resource_version = list(chunk.items), chunk.resource_version
        self.sink.replace(items, resource_version)
        if self._synced:
            self.relists += 1
        self._synced = True
        self._version_gone = False
        self._seen(resource_version)
        return resource_version

    def relist_resource_version(self) -> str:
        """client-go's `relistResourceVersion`: `0` before the first list, "" once the last
        version is gone, else the last version seen."""
        if self._version_gone:
            return ""
        return self.resource_version or "0"

    def _seen(self, resource_version: str) -> None:
        if resource_version:
            self.resource_version = resource_version
            self.progressed(resource_version)

    async def _loop(self, *, listed: bool) -> None:
        backoff = self.initial_backoff
        while True:
            try:
                if not listed:
                    await self.relist()
                listed = False
                self._ready = True
                while True:
                    await self._watch()
            except Expired as err:
                log.info("%s: %s; listing again", self.name, err)
                self._ready = False
                self._version_gone = True
                continue
            except _WatchBroke as broke:
                backoff = self._restarted(backoff)
                log.warning("%s: watch failed: %s; watching again from resourceVersion %s "
                            "in %.1fs", self.name, broke.cause, self.resource_version, backoff)
                self._ready = False
                backoff = await self._back_off(backoff)
                self.watch_resumes += 1
                listed = True  # resume the watch; an Expired from it lists again
                continue
            except ListWatchError as err:
                backoff = self._restarted(backoff)
                log.warning("%s: %s; listing again in %.1fs", self.name, err, backoff)
            except Exception:
                backoff = self._restarted(backoff)
                log.exception("%s: list and watch failed; listing again in %.1fs", self.name,
                              backoff)
            self._ready = False
            backoff = await self._back_off(backoff)

    def _restarted(self, backoff: float) -> float:
        """The back-off, from the start again when a watch delivered something since the
        last failure."""
        if self._delivered:
            self._delivered = False
            return self.initial_backoff
        return backoff

    async def _back_off(self, backoff: float) -> float:
        """Wait the back-off; the next one."""
        await self.pause(backoff)
        return min(backoff * 2, self.max_backoff)

    async def _watch(self) -> None:
        """One watch from `resource_version` until it ends cleanly (a very short empty watch
        raises `ListWatchError`; a watch that breaks or cannot be opened, `_WatchBroke`)."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        count = 0
        try:
            async with contextlib.aclosing(self.source.watch(self.resource_version)) as stream:
                async for resource_version, event in stream:
                    if event is not None:
                        self.sink.apply(event)
                    count += 1
                    self._delivered = True
                    self._seen(resource_version)
        except ListWatchError as err:
            if not self.resource_version:
                raise
            raise _WatchBroke(err) from err
        if count == 0 and loop.time() - began < SHORT_WATCH_SECONDS:
            raise ListWatchError("very short watch: the watch ended at once with no event")

"""The loop a queue-driven controller runs, as client-go's `processNextWorkItem` and
`wait.Until(worker)`: informers synced first, then workers that take a key from the
`WorkQueue`, sync it, `forget` it on success and add it back rate-limited on any error (an
API error or a `Retry` logged as a retry, anything else with its traceback in the log), and
a queue of events posted off the sync path. A controller keeps only its own sync and event handlers.

`run_workers` returns only by raising: when a worker, an event poster or an informer the
controller runs itself ends with an error (before its first sync too), the others are
cancelled and the error goes up (the controller-manager exits 1 when a controller task
ends). When cancelled it cancels its tasks and closes the queue (its pending `add_after`
timers). `QueueController` is the base
of the controllers on shared informers (ReplicaSet, Deployment, DaemonSet, StatefulSet):
their queue, recorder, event poster, clock and `run()`."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer
from ephemera.controllers.objects import queue_key
from ephemera.controllers.workqueue import WorkQueue

__all__ = ["EventQueue", "QueueController", "Retry", "run_workers", "worker"]


class Retry(Exception):
    """Raised by a sync that left its work undone for a cause it has logged already (a write
    the API refused): the key is retried, rate-limited, as after an API error, with one
    line in the log and no traceback."""


async def worker(queue: WorkQueue[str], sync: Callable[[str], Awaitable[None]], *,
                 what: str, log: logging.Logger) -> None:
    """Sync keys from `queue` until cancelled; `what` names a key's object in the log."""
    while True:
        key = await queue.get()
        try:
            await sync(key)
            queue.forget(key)
        except (StatusError, ApiUnavailable, Retry) as err:
            log.info("%s %s: sync failed, retrying: %s", what, key,
                     getattr(err, "message", err))
            queue.add_rate_limited(key)
        except Exception:
            log.exception("%s %s: sync failed", what, key)
            queue.add_rate_limited(key)
        finally:
            queue.done(key)


async def run_workers(queue: WorkQueue[str], sync: Callable[[str], Awaitable[None]], *,
                      what: str, log: logging.Logger, workers: int = 1,
                      informers: Iterable[Informer] = (), runs: Iterable[Informer] = (),
                      also: Iterable[Callable[[], Coroutine[Any, Any, None]]] = ()) -> None:
    """Run the informers in `runs` (those the controller owns), wait until they and the
    `informers` it shares have synced, then run `workers` workers and the `also` loops until
    one fails or this is cancelled. Task names start with `what`."""
    owned = list(runs)
    tasks = [asyncio.create_task(i.run(), name=f"{what}-informer-{i.name}") for i in owned]
    try:
        await _synced((*informers, *owned), tasks)
        tasks += [asyncio.create_task(worker(queue, sync, what=what, log=log),
                                      name=f"{what}-worker-{i}") for i in range(workers)]
        tasks += [asyncio.create_task(loop(), name=f"{what}-loop-{i}")
                  for i, loop in enumerate(also)]
        await asyncio.gather(*tasks)
    finally:
        queue.close()
        await cancel_and_wait(*tasks)


async def _synced(informers: Sequence[Informer], running: Sequence[asyncio.Task[None]]) -> None:
    """Wait until every informer has synced; an informer task of `running` that ends first
    (with an error, or at all: it never syncs then) ends the wait with its error."""

    async def all_synced() -> None:
        for informer in informers:
            await informer.wait_synced()

    waiting = asyncio.create_task(all_synced())
    try:
        done, _ = await asyncio.wait([waiting, *running],
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not waiting.done():
            await cancel_and_wait(waiting)
    if waiting in done:
        return
    ended = next(iter(done))
    ended.result()  # its error, if it ended with one
    raise RuntimeError(f"informer task {ended.get_name()} ended before its informer synced")


class EventQueue:
    """Events of one kind, posted in order by `run()` so that a sync never waits on the
    event recorder: `post()` only queues."""

    def __init__(self, recorder: EventRecorder, kind: str, api_version: str) -> None:
        self.recorder = recorder
        self.kind = kind
        self.api_version = api_version
        self._queue: asyncio.Queue[tuple[Mapping[str, Any], str, str, str]] = asyncio.Queue()

    def post(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self._queue.put_nowait((obj, type_, reason, message))

    async def run(self) -> None:
        while True:
            obj, type_, reason, message = await self._queue.get()
            await self.recorder.record(obj, type_, reason, message, kind=self.kind,
                                       api_version=self.api_version)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class QueueController:
    """A controller of one kind on informers its caller runs: `run()` waits for them, then
    runs `workers` workers on `sync(key)` and posts the events of `events`."""

    def __init__(self, api: ApiClient, *, kind: str, api_version: str, component: str,
                 informers: Sequence[Informer], log: logging.Logger, workers: int,
                 recorder: EventRecorder | None = None,
                 clock: Callable[[], datetime] = _utc_now) -> None:
        self.api = api
        self.recorder = recorder or EventRecorder(api, component)
        self.workers = workers
        self.clock = clock
        self.queue: WorkQueue[str] = WorkQueue()
        self.events = EventQueue(self.recorder, kind, api_version)
        self._kind = kind
        self._informers = tuple(informers)
        self._log = log

    async def run(self) -> None:
        await run_workers(self.queue, self.sync, what=self._kind, log=self._log,
                          workers=self.workers, informers=self._informers,
                          also=[self.events.run])

    async def sync(self, key: str) -> None:
        raise NotImplementedError

    async def write_status(self, obj: Mapping[str, Any], status: dict[str, Any],
                           path: str) -> None:
        """Write `status` to the object's `/status` at `path` unless it has it already; on a
        conflict its key is synced again shortly (the informer brings the newer object), an
        object gone (404) needs none."""
        if status == (obj.get("status") or {}):
            return
        body = copy.deepcopy(dict(obj))
        body["status"] = status
        try:
            await self.api.update(path, body)
        except StatusError as err:
            if err.code == 409:
                self.queue.add_after(queue_key(obj), 0.1)
            elif err.code != 404:
                raise

"""The shared controller loop (`ephemera.controllers.runner`): failed syncs come back
rate-limited, a success forgets the key's failures, and a loop that fails ends the run
(so the controller-manager sees its controller stop) with the queue closed."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from ephemera.api.errors import conflict
from ephemera.controllers.runner import EventQueue, Retry, run_workers, worker
from ephemera.controllers.workqueue import WorkQueue


class _Synced:
    """An informer stand-in: synced once `ready` is set; `run` waits forever."""

    name = "things"

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.runs = 0

    async def wait_synced(self) -> None:
        await self.ready.wait()

    async def run(self) -> None:
        self.runs += 1
        await asyncio.Event().wait()


async def test_a_retry_comes_back_with_one_line_and_no_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """A sync that raises `Retry` (its cause logged already) is retried, rate-limited, and
    the log has the one line an API error gets, not a traceback."""
    queue: WorkQueue[str] = WorkQueue(base_delay=0.001, max_delay=0.001)
    calls: list[str] = []
    done = asyncio.Event()

    async def sync(key: str) -> None:
        calls.append(key)
        if len(calls) == 1:
            raise Retry("could not mark it not ready")
        done.set()

    queue.add("ns/a")
    caplog.set_level(logging.INFO, logger="test")
    task = asyncio.create_task(worker(queue, sync, what="pod", log=logging.getLogger("test")))
    await asyncio.wait_for(done.wait(), 5)
    task.cancel()
    assert calls == ["ns/a", "ns/a"]
    [record] = [r for r in caplog.records if r.name == "test"]
    assert record.getMessage() == "pod ns/a: sync failed, retrying: could not mark it not ready"
    assert record.exc_info is None


async def test_a_failed_sync_comes_back_rate_limited_and_a_success_forgets_it() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.001, max_delay=0.001)
    calls: list[str] = []
    done = asyncio.Event()

    async def sync(key: str) -> None:
        calls.append(key)
        if len(calls) == 1:
            raise conflict("things", "a")
        if len(calls) == 2:
            raise ValueError("a bug")
        done.set()

    informer = _Synced()
    queue.add("ns/a")
    run = asyncio.create_task(run_workers(queue, sync, what="thing",
                                          log=logging.getLogger("test"),
                                          runs=[informer]))  # type: ignore[list-item]
    await asyncio.sleep(0.01)
    assert calls == []  # nothing runs before the informers synced
    informer.ready.set()
    await asyncio.wait_for(done.wait(), 5)
    assert calls == ["ns/a", "ns/a", "ns/a"]
    assert informer.runs == 1
    assert queue._failures == {}  # forgotten after the success
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


async def test_a_loop_that_fails_ends_the_run_and_closes_the_queue() -> None:
    queue: WorkQueue[str] = WorkQueue()
    informer = _Synced()
    informer.ready.set()

    async def sync(key: str) -> None:
        return None

    async def broken() -> None:
        raise RuntimeError("the event poster broke")

    queue.add_after("ns/later", 60)
    assert queue._timers
    with pytest.raises(RuntimeError, match="event poster broke"):
        await asyncio.wait_for(run_workers(queue, sync, what="thing",
                                           log=logging.getLogger("test"),
                                           informers=[informer],  # type: ignore[list-item]
                                           also=[broken]), 5)
    assert not queue._timers


async def test_events_are_posted_in_order_off_the_sync_path() -> None:
    posted: list[tuple[Any, ...]] = []

    class Recorder:
        async def record(self, obj: Any, type_: str, reason: str, message: str, *,
                         kind: str, api_version: str) -> None:
            posted.append((obj["metadata"]["name"], type_, reason, message, kind, api_version))

    events = EventQueue(Recorder(), "DaemonSet", "apps/v1")  # type: ignore[arg-type]
    events.post({"metadata": {"name": "a"}}, "Normal", "SuccessfulCreate", "Created pod: p1")
    events.post({"metadata": {"name": "a"}}, "Warning", "FailedCreate", "Error creating: x")
    assert posted == []  # post() only queues
    task = asyncio.create_task(events.run())
    for _ in range(10):
        await asyncio.sleep(0)
    task.cancel()
    assert posted == [("a", "Normal", "SuccessfulCreate", "Created pod: p1", "DaemonSet",
                       "apps/v1"),
                      ("a", "Warning", "FailedCreate", "Error creating: x", "DaemonSet",
                       "apps/v1")]


async def test_an_informer_that_fails_before_its_first_sync_ends_the_run() -> None:
    """Not a wait for a sync that never comes: the controller-manager sees the error."""
    queue: WorkQueue[str] = WorkQueue()

    class Broken(_Synced):
        async def run(self) -> None:
            raise RuntimeError("the reflector broke")

    async def sync(key: str) -> None:
        raise AssertionError("no sync before the informers synced")

    with pytest.raises(RuntimeError, match="reflector broke"):
        await asyncio.wait_for(run_workers(queue, sync, what="thing",
                                           log=logging.getLogger("test"),
                                           runs=[Broken()]), 5)  # type: ignore[list-item]

"""`BufferedWatcher.next_within`: the next item awaited in the consumer's own task (the watch
streams' way), a limited wait that loses nothing, idle progress as iteration gives it, and
`interrupt` ending the watch for a consumer waiting or not."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from ephemera.apiserver.watchcache import ReplayOnce
from ephemera.store.base import Event, KeyValue, Progress, WatcherDropped
from ephemera.store.watchhub import BufferedWatcher


def event(revision: int) -> Event:
    return Event("PUT", KeyValue(f"/p/{revision}", b"{}", revision, revision), None)


def watcher(progress_interval: float = 60.0, revision: int = 0) -> BufferedWatcher:
    return BufferedWatcher("/p/", 0, capacity=2, progress_interval=progress_interval,
                           progress_revision=lambda: revision)


async def test_items_in_order_then_false_when_none_comes_in_time() -> None:
    w = watcher()
    w.set_replay(ReplayOnce([event(1)]))
    w.push(event(2))
    assert await w.next_within(0) == event(1)
    assert await w.next_within(0) == event(2)
    assert await w.next_within(0) is False
    assert await w.next_within(0.01) is False
    assert w.delivered_revision == 2


async def test_an_item_pushed_while_waiting_is_returned_and_a_timed_out_wait_loses_none() -> None:
    w = watcher()
    assert await w.next_within(0.005) is False
    waiting = asyncio.ensure_future(w.next_within(5))
    await asyncio.sleep(0)
    assert not waiting.done()
    w.push(event(1))
    assert await waiting == event(1)
    w.push(event(2))
    assert await w.next_within(0) == event(2)


async def test_cancelled_while_waiting_then_the_next_call_gets_the_item() -> None:
    w = watcher()
    waiting = asyncio.ensure_future(w.next_within(5))
    await asyncio.sleep(0)
    waiting.cancel()
    w.push(event(1))
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await w.next_within(0) == event(1)


async def test_progress_when_idle_for_the_interval() -> None:
    w = watcher(progress_interval=0.01, revision=7)
    assert await w.next_within(5) == Progress(7)


async def test_interrupt_ends_a_waiting_call_and_the_next_ones() -> None:
    w = watcher()
    waiting = asyncio.ensure_future(w.next_within(5))
    await asyncio.sleep(0)
    w.interrupt()
    assert await waiting is None
    w.push(event(1))
    assert await w.next_within(0) is None


async def test_a_drop_is_raised() -> None:
    w = watcher()
    for revision in (1, 2, 3):  # capacity 2: dropped
        w.push(event(revision))
    with pytest.raises(WatcherDropped):
        await w.next_within(0)


async def test_a_timer_that_fires_early_is_waited_again_not_taken_for_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's clock (uvloop's is cached at each turn, in ms) may fire the progress timer
    a little before `time.monotonic()` says the interval is over: iteration must wait again
    and then yield the progress, never end or return 'nothing in time'."""
    import ephemera.store.watchhub as watchhub

    real = time.monotonic
    calls = [0]

    class Clock:
        @staticmethod
        def monotonic() -> float:
            calls[0] += 1  # the wait's length is computed at the first call: on time;
            # the next, after the timer, reads 15 ms short of the interval's end
            return real() - (0.015 if calls[0] == 2 else 0.0)

    w = watcher(progress_interval=0.02, revision=4)
    monkeypatch.setattr(watchhub, "time", Clock)
    iterator = w.__aiter__()
    first = asyncio.ensure_future(iterator.__anext__())
    await asyncio.sleep(0.005)
    assert not first.done()
    assert await asyncio.wait_for(first, 2) == Progress(4)


async def test_items_one_at_a_time_cost_no_timer_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer waiting for items pushed one at a time keeps one idle timer for all its
    waits, not one a wait (a timer a watch event, for every watcher, was measurable)."""
    loop = asyncio.get_running_loop()
    timers = 0
    call_at = loop.call_at

    def counting_call_at(when: float, callback: Any, *args: Any, **kwargs: Any
                         ) -> asyncio.TimerHandle:
        nonlocal timers
        timers += 1
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting_call_at)
    w = watcher()
    received = []

    async def consume() -> None:
        async for item in w:
            received.append(item)
            if len(received) == 100:
                return

    consumer = asyncio.ensure_future(consume())
    for revision in range(1, 101):
        await asyncio.sleep(0)  # the consumer waits again before each push
        w.push(event(revision))
    async with asyncio.timeout(5):
        await consumer
    assert [item.revision for item in received] == list(range(1, 101))
    assert timers <= 2
    await w.close()

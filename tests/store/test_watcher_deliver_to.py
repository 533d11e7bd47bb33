"""`BufferedWatcher.deliver_to`: items pushed while nothing waits for iteration go straight to
the sink, in the producer's call; what was buffered or is to be replayed comes through the
iteration first, in order; a sink that fails ends the watch with a StoreError."""

from __future__ import annotations

import asyncio

import pytest

from ephemera.apiserver.watchcache import ReplayOnce
from ephemera.store.base import Event, KeyValue, Progress, StoreError
from ephemera.store.watchhub import BufferedWatcher


def event(revision: int) -> Event:
    return Event("PUT", KeyValue(f"/p/{revision}", b"{}", revision, revision), None)


def watcher() -> BufferedWatcher:
    return BufferedWatcher("/p/", 0, capacity=10, progress_interval=60.0,
                           progress_revision=lambda: 0)


async def test_pushed_items_reach_the_sink_at_once() -> None:
    w = watcher()
    got: list[object] = []
    assert w.deliver_to(got.append)
    w.push(event(1))
    w.push(Progress(1))  # nothing new: not handed over
    w.push(Progress(3))
    assert got == [event(1), Progress(3)]
    assert w.delivered_revision == 3
    assert w.take_ready(10) == []


async def test_replayed_and_buffered_items_come_through_iteration_first_in_order() -> None:
    w = watcher()
    w.set_replay(ReplayOnce([event(1)]))
    w.push(event(2))
    got: list[object] = []
    w.deliver_to(got.append)
    w.push(event(3))  # the replay is not read yet: buffered behind it
    assert got == []

    async def consume() -> None:
        async for item in w:
            got.append(item)

    task = asyncio.ensure_future(consume())
    await asyncio.sleep(0.01)
    assert got == [event(1), event(2), event(3)]
    w.push(event(4))  # nothing waits now: straight to the sink
    assert got[-1] == event(4)
    await w.close()
    await asyncio.wait_for(task, 2)


async def test_a_failing_sink_ends_the_watch_with_a_store_error() -> None:
    w = watcher()

    def broken(item: object) -> None:
        raise KeyError("bug")

    w.deliver_to(broken)
    assert not w.push(event(1))
    with pytest.raises(StoreError, match="its consumer failed: KeyError"):
        async for _ in w:
            pass

"""`BufferedWatcher.take_ready`: what iteration would yield without waiting, taken at once
(the watch streams write it in one go), in order; never past a replay page still to fetch
or the end of the watch."""

from __future__ import annotations

import pytest

from ephemera.apiserver.watchcache import ReplayOnce
from ephemera.store.base import Event, KeyValue, Progress, WatcherDropped
from ephemera.store.watchhub import BufferedWatcher


def event(revision: int) -> Event:
    return Event("PUT", KeyValue(f"/p/{revision}", b"{}", revision, revision), None)


def watcher(capacity: int = 10) -> BufferedWatcher:
    return BufferedWatcher("/p/", 0, capacity=capacity, progress_interval=60.0,
                           progress_revision=lambda: 0)


async def test_takes_the_buffered_items_in_order_up_to_the_limit() -> None:
    w = watcher()
    for revision in (1, 2, 3, 4):
        w.push(event(revision))
    w.push(Progress(3))  # says nothing new once 4 is delivered: skipped
    w.push(Progress(9))
    assert [item.revision for item in w.take_ready(3)] == [1, 2, 3]
    assert w.take_ready(10) == [event(4), Progress(9)]
    assert w.delivered_revision == 9
    assert w.take_ready(10) == []


async def test_replayed_history_first_and_never_past_a_page_to_fetch() -> None:
    w = watcher()
    w.set_replay(ReplayOnce([event(1), event(2), event(3)]))
    w.push(event(4))
    assert w.take_ready(10) == []  # the page is not read yet: iteration reads it
    iterator = w.__aiter__()
    assert await iterator.__anext__() == event(1)
    assert w.take_ready(10) == [event(2), event(3)]
    assert w.take_ready(10) == []  # the replay has not said it is done
    assert await iterator.__anext__() == event(4)
    await w.close()


async def test_a_dropped_watcher_gives_nothing_and_iteration_reports_it() -> None:
    w = watcher(capacity=2)
    for revision in (1, 2, 3):
        w.push(event(revision))
    assert w.dropped
    assert w.take_ready(10) == []
    with pytest.raises(WatcherDropped):
        await w.__aiter__().__anext__()

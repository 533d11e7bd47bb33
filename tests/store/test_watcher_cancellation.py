"""A consumer waiting on a watcher can always be cancelled, even when an event arrives in
the same loop iteration as the cancellation (Python 3.11's `asyncio.wait_for` returns the
result then and loses the cancellation; an informer's task would never stop)."""

from __future__ import annotations

import asyncio

import pytest

from ephemera.store.base import Event, KeyValue
from ephemera.store.watchhub import BufferedWatcher


async def test_cancel_while_an_event_arrives_stops_the_consumer() -> None:
    watcher = BufferedWatcher("/p/", 0, capacity=10, progress_interval=60.0,
                              progress_revision=lambda: 0)
    received: list[object] = []

    async def consume() -> None:
        async for item in watcher:
            received.append(item)

    task = asyncio.get_running_loop().create_task(consume())
    await asyncio.sleep(0.01)  # the consumer waits for the next item
    event = Event("PUT", KeyValue("/p/a", b"{}", 1, 1), None)
    watcher.push(event)  # wakes the consumer ...
    task.cancel()  # ... in the same loop iteration as the cancellation
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)
    assert task.cancelled()

"""The scheduling queue (pure bookkeeping on a fake clock): priority order, back-off, the
unschedulable set and what moves pods out of it, changes that come while a pod is in
flight."""

from __future__ import annotations

import asyncio

import pytest

from ephemera.scheduler.queue import SchedulingQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def queue(clock: Clock) -> SchedulingQueue:
    return SchedulingQueue(clock=clock, initial_backoff=1.0, max_backoff=10.0,
                           max_unschedulable=300.0)


def test_higher_priority_first_then_arrival_order(queue: SchedulingQueue) -> None:
    queue.add("ns/a")
    queue.add("ns/b", priority=10)
    queue.add("ns/c")
    queue.add("ns/a")  # already queued: stays where it is
    assert [queue.pop_nowait() for _ in range(4)] == ["ns/b", "ns/a", "ns/c", None]


def test_unschedulable_waits_for_a_move_and_then_for_its_backoff(
        queue: SchedulingQueue, clock: Clock) -> None:
    queue.add("ns/p")
    assert queue.pop_nowait() == "ns/p"
    queue.unschedulable("ns/p")
    assert queue.unschedulable_pods == ["ns/p"]
    assert queue.pop_nowait() is None
    queue.move_all_unschedulable()  # right after the attempt: 1 s of back-off first
    assert queue.backing_off == ["ns/p"]
    assert queue.pop_nowait() is None
    clock.now += 1.0
    assert queue.pop_nowait() == "ns/p"


def test_backoff_doubles_up_to_the_maximum(queue: SchedulingQueue, clock: Clock) -> None:
    queue.add("ns/p")
    assert queue.pop_nowait() == "ns/p"
    waits = []
    for _ in range(6):
        queue.retry_later("ns/p")
        waited = 0.0
        while queue.pop_nowait() is None:  # back in flight once it pops
            clock.now += 0.5
            waited += 0.5
        waits.append(waited)
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert queue.attempts("ns/p") == 6


def test_a_pod_change_moves_it_out_of_unschedulable(queue: SchedulingQueue,
                                                    clock: Clock) -> None:
    queue.add("ns/p")
    queue.pop_nowait()
    queue.unschedulable("ns/p")
    clock.now += 5
    queue.add("ns/p")
    assert queue.pop_nowait() == "ns/p"


def test_stale_unschedulable_pods_are_flushed(queue: SchedulingQueue, clock: Clock) -> None:
    queue.add("ns/p")
    queue.pop_nowait()
    queue.unschedulable("ns/p")
    clock.now += 299
    queue.flush_stale()
    assert queue.unschedulable_pods == ["ns/p"]
    clock.now += 1
    queue.flush_stale()
    assert queue.pop_nowait() == "ns/p"


def test_a_change_while_in_flight_is_not_lost(queue: SchedulingQueue, clock: Clock) -> None:
    queue.add("ns/p")
    assert queue.pop_nowait() == "ns/p"
    queue.move_all_unschedulable()  # a node was added while the pod was being tried
    queue.unschedulable("ns/p")
    assert queue.unschedulable_pods == []
    assert queue.backing_off == ["ns/p"]
    clock.now += 1
    assert queue.pop_nowait() == "ns/p"


def test_removed_pods_are_forgotten_even_in_flight(queue: SchedulingQueue) -> None:
    queue.add("ns/p")
    queue.pop_nowait()
    queue.remove("ns/p")  # deleted while being tried
    queue.unschedulable("ns/p")
    assert "ns/p" not in queue
    assert queue.pop_nowait() is None
    queue.add("ns/q")
    queue.pop_nowait()
    queue.done("ns/q")
    assert queue.attempts("ns/q") == 0 and "ns/q" not in queue


async def test_pop_waits_for_a_pod() -> None:
    queue = SchedulingQueue(initial_backoff=0.01)
    waiter = asyncio.create_task(queue.pop())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    queue.add("ns/p")
    assert await asyncio.wait_for(waiter, 5) == "ns/p"
    # a backed-off pod is returned once its back-off passes, with nothing else happening
    queue.retry_later("ns/p")
    assert await asyncio.wait_for(queue.pop(), 5) == "ns/p"

"""`ephemera.cli.gctuning`: the survivors of each full collection are frozen, and a full
collection at most every sweep interval walks the frozen objects too."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from ephemera.cli.gctuning import OLDEST_GENERATION, FreezeSurvivors


@pytest.fixture
def unfrozen_after() -> Iterator[None]:
    """This test's freezes are undone after it (the other tests' collector as it was)."""
    yield
    gc.unfreeze()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def full_collection(hook: FreezeSurvivors) -> None:
    hook.on_collection("start", {"generation": OLDEST_GENERATION})
    hook.on_collection("stop", {"generation": OLDEST_GENERATION, "collected": 0,
                                "uncollectable": 0})


def test_survivors_are_frozen_and_swept_once_an_interval(unfrozen_after: None) -> None:
    clock = Clock()
    hook = FreezeSurvivors(sweep_interval=600.0, clock=clock)
    survivor = [object() for _ in range(1000)]
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    hook.on_collection("stop", {"generation": 1, "collected": 0, "uncollectable": 0})
    assert gc.get_freeze_count() == 0  # young collections freeze nothing
    full_collection(hook)
    frozen = gc.get_freeze_count()
    assert frozen >= len(survivor)
    clock.now += 599.0
    full_collection(hook)
    assert gc.get_freeze_count() >= frozen and not hook.sweeping
    clock.now += 1.0  # the interval is over: the frozen objects go back to the collector
    full_collection(hook)
    assert gc.get_freeze_count() == 0 and hook.sweeping
    full_collection(hook)  # the sweep: its survivors frozen, the next sweep an interval on
    assert gc.get_freeze_count() >= len(survivor) and not hook.sweeping
    clock.now += 599.0
    full_collection(hook)
    assert not hook.sweeping


class Node:
    """An object in a reference cycle with itself."""

    def __init__(self) -> None:
        self.me = self


def test_cyclic_garbage_that_was_frozen_is_collected_by_the_sweep(
        unfrozen_after: None) -> None:
    clock = Clock()
    hook = FreezeSurvivors(sweep_interval=600.0, clock=clock)
    gc.callbacks.append(hook.on_collection)
    try:
        cycle = Node()
        alive = weakref.ref(cycle)
        gc.collect()  # a full collection: the cycle survives it and is frozen
        del cycle  # garbage now, but frozen: full collections do not walk it
        gc.collect()
        assert alive() is not None
        clock.now += 600.0
        gc.collect()  # the interval is over: this one hands the frozen objects back
        gc.collect()  # and this one walks them
        assert alive() is None
    finally:
        gc.callbacks.remove(hook.on_collection)

"""How far a process's event loop falls behind, in its log: what this module owns is the
one probe and the one log line.

`async with watching(component):` around a command's serving runs `watch(component)`, which
sleeps `interval` seconds again and
again and notes how much later than asked each sleep ended (the loop was busy with other
work, or blocked). When a sleep ends more than `threshold` late, it logs one WARNING, then at
most one a `report_every` seconds with the worst lag since the last line and how many sleeps
ended that late:

    apiserver: event loop behind by up to 3.2 s (41 times over 1 s since the last report)

When the cyclic garbage collector held the process for a tenth of a second or more in all
since the last report (`GcPauses`, through `gc.callbacks`), the line says so, as its part of
the lag: `...; garbage collection 2.9 s (1.1 s of CPU), the longest 2.7 s (generation 2))`
(the CPU seconds are the collecting thread's own: fewer when other processes had the core).

A saturated apiserver answers late for reasons a request's own timing cannot tell apart (it
waited in its client, on the loop before the priority filter, in the filter's queue); this
line says whether the loop itself was the queue. It costs one timer a quarter second, and
four clock reads a collection.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from ephemera.aiotasks import cancel_and_wait

__all__ = ["GcPauses", "GcShare", "LoopLag", "watch", "watching"]

log = logging.getLogger("ephemera.looplag")

INTERVAL = 0.25
THRESHOLD = 1.0
REPORT_EVERY = 60.0
# Collections adding up to less than this since the last report go unmentioned.
GC_WORTH_TELLING = 0.1


@dataclass(frozen=True)
class GcShare:
    """What the collector took since the last report: wall seconds in all (`total`), the
    CPU seconds of the threads that ran the collections (`cpu`: less than `total` when the
    machine's other processes took the core meanwhile), and the longest collection's wall
    seconds and generation."""

    total: float = 0.0
    cpu: float = 0.0
    longest: float = 0.0
    generation: int = 0


class GcPauses:
    """The time the cyclic garbage collector held the process since the last `take`
    (`GcShare`), measured from `gc.callbacks` while installed."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._started = (0.0, 0.0)
        self._share = GcShare()

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self.on_collection)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self.on_collection)

    def on_collection(self, phase: str, info: dict[str, int]) -> None:
        """`gc.callbacks`' hook: called with "start" and "stop" around each collection (on
        the thread that runs it, with the GIL held)."""
        if phase == "start":
            self._started = (self._clock(), self._cpu_clock())
            return
        paused = self._clock() - self._started[0]
        cpu = self._cpu_clock() - self._started[1]
        was = self._share
        longest = paused > was.longest
        self._share = GcShare(was.total + paused, was.cpu + cpu,
                              paused if longest else was.longest,
                              info["generation"] if longest else was.generation)

    def take(self) -> GcShare:
        """What was collected since the last take; counted afresh from now. (The fresh
        share is made first: making it may start a collection, which must not be lost.)"""
        fresh = GcShare()
        taken, self._share = self._share, fresh
        return taken


class LoopLag:
    """The worst lag and the count of late sleeps since the last report (and what the
    garbage collector took of that time, given `collector`)."""

    def __init__(self, component: str, *, threshold: float = THRESHOLD,
                 report_every: float = REPORT_EVERY,
                 collector: GcPauses | None = None) -> None:
        self.component = component
        self.threshold = threshold
        self.report_every = report_every
        self.collector = collector
        self.worst = 0.0
        self.late = 0
        self._next_report = 0.0  # the first late sleep is reported at once

    def observe(self, lag: float, now: float) -> str | None:
        """Note one sleep's lag; the line to log now, if any."""
        if lag <= self.threshold:
            return None
        self.worst = max(self.worst, lag)
        self.late += 1
        if now < self._next_report:
            return None
        times = "1 time" if self.late == 1 else f"{self.late} times"
        collected = ""
        if self.collector is not None:
            share = self.collector.take()
            if share.total >= GC_WORTH_TELLING:
                collected = (f"; garbage collection {share.total:.1f} s ({share.cpu:.1f} s "
                             f"of CPU), the longest {share.longest:.1f} s "
                             f"(generation {share.generation})")
        line = (f"{self.component}: event loop behind by up to {self.worst:.1f} s "
                f"({times} over {self.threshold:g} s since the last report{collected})")
        self.worst, self.late = 0.0, 0
        self._next_report = now + self.report_every
        return line


async def watch(component: str, *, interval: float = INTERVAL,
                threshold: float = THRESHOLD, report_every: float = REPORT_EVERY) -> None:
    """Watch the running loop until cancelled (see the module docstring)."""
    with GcPauses() as collector:
        lag = LoopLag(component, threshold=threshold, report_every=report_every,
                      collector=collector)
        while True:
            asked = time.monotonic() + interval
            await asyncio.sleep(interval)
            now = time.monotonic()
            line = lag.observe(now - asked, now)
            if line is not None:
                log.warning("%s", line)


@contextlib.asynccontextmanager
async def watching(component: str) -> AsyncIterator[None]:
    """`watch(component)` for the duration of the block."""
    task = asyncio.create_task(watch(component), name=f"{component} loop lag")
    try:
        yield
    finally:
        await cancel_and_wait(task)

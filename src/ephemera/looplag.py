"""How far a process's event loop falls behind, in its log: what this module owns is the
one probe and the one log line.

`async with watching(component):` around a command's serving runs `watch(component)`, which
sleeps `interval` seconds again and
again and notes how much later than asked each sleep ended (the loop was busy with other
work, or blocked). When a sleep ends more than `threshold` late, it logs one WARNING, then at
most one a `report_every` seconds with the worst lag since the last line and how many sleeps
ended that late:

    apiserver: event loop behind by up to 3.2 s (41 times over 1 s since the last report)

A saturated apiserver answers late for reasons a request's own timing cannot tell apart (it
waited in its client, on the loop before the priority filter, in the filter's queue); this
line says whether the loop itself was the queue. It costs one timer a quarter second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

__all__ = ["LoopLag", "watch", "watching"]

log = logging.getLogger("ephemera.looplag")

INTERVAL = 0.25
THRESHOLD = 1.0
REPORT_EVERY = 60.0


class LoopLag:
    """The worst lag and the count of late sleeps since the last report."""

    def __init__(self, component: str, *, threshold: float = THRESHOLD,
                 report_every: float = REPORT_EVERY) -> None:
        self.component = component
        self.threshold = threshold
        self.report_every = report_every
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
        line = (f"{self.component}: event loop behind by up to {self.worst:.1f} s "
                f"({times} over {self.threshold:g} s since the last report)")
        self.worst, self.late = 0.0, 0
        self._next_report = now + self.report_every
        return line


async def watch(component: str, *, interval: float = INTERVAL,
                threshold: float = THRESHOLD, report_every: float = REPORT_EVERY) -> None:
    """Watch the running loop until cancelled (see the module docstring)."""
    lag = LoopLag(component, threshold=threshold, report_every=report_every)
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
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

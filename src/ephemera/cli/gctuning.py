"""The components' cyclic garbage collector settings: what this module owns is the one
policy every `ephemera` command runs with (`tune_gc`, from `ephemera.cli.main`).

- What the imports made lives as long as the process: it is frozen at start (`gc.freeze`),
  out of every collection's walk.
- Young collections run far less often than Python's default (`GC_YOUNG_THRESHOLD`
  allocations apart, not 700): the components hold every object their informers list, and
  with the default, objects that would have died young were promoted and walked again by
  every full collection.
- The survivors of each full collection are frozen too (`FreezeSurvivors`). Python starts a
  full collection each time the objects promoted since the last one reach a quarter of
  those that survived it, so a process whose caches grow to a large heap (the hollow nodes'
  30,000 pods: 1.8 GiB) walked its whole heap again at every quarter of growth, holding
  the GIL throughout: 7 s at once at 1,000 nodes on a busy 2-core machine, 44 s of its CPU
  in a 10-minute run (measured by `ephemera.looplag`'s line; docs/benchmarks.md). Frozen
  objects are still freed when nothing refers to them; what freezing gives up is finding
  the reference cycles among them that became garbage. So every `SWEEP_INTERVAL` the
  frozen objects are handed back before the next full collection (`gc.unfreeze`), which
  then walks and sweeps the whole heap once: cyclic garbage that was frozen is freed at
  most that late.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

__all__ = ["GC_YOUNG_THRESHOLD", "SWEEP_INTERVAL", "FreezeSurvivors", "tune_gc"]

# The cyclic garbage collector's first threshold (allocations between young collections;
# Python's default is 700). With the default, full collections walking the whole heap took
# 35% of the hollow nodes' CPU and 88% of the controller-manager's at 3,000 pods (measured
# with `gc.callbacks`; docs/benchmarks.md).
GC_YOUNG_THRESHOLD = 50_000
# How often, at most, a full collection walks the frozen objects too (seconds).
SWEEP_INTERVAL = 600.0
# The generation a full collection collects (Python has three: 0, 1, 2).
OLDEST_GENERATION = 2


class FreezeSurvivors:
    """A `gc.callbacks` hook: after each full collection, freezes what survived it; the
    first full collection `sweep_interval` seconds after the last sweep walks everything."""

    def __init__(self, sweep_interval: float = SWEEP_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sweep_interval = sweep_interval
        self._clock = clock
        self._next_sweep = clock() + sweep_interval
        self.sweeping = False  # the next full collection walks the frozen objects too

    def on_collection(self, phase: str, info: dict[str, int]) -> None:
        if phase != "stop" or info["generation"] != OLDEST_GENERATION:
            return
        now = self._clock()
        if self.sweeping:  # this one walked everything: its survivors are frozen anew
            self.sweeping = False
            self._next_sweep = now + self.sweep_interval
        elif now >= self._next_sweep:
            gc.unfreeze()  # into the oldest generation: the next full collection sweeps
            self.sweeping = True
            return
        gc.freeze()


def tune_gc(*, sweep_interval: float = SWEEP_INTERVAL) -> FreezeSurvivors:
    """The policy of the module's doc, for this process; the hook it installed."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
    hook = FreezeSurvivors(sweep_interval)
    gc.callbacks.append(hook.on_collection)
    return hook

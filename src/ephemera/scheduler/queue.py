"""The scheduling queue: which pending pod to try next, and when to try a failed one again.

Three places a pending pod (by `namespace/name` key) can be, as in upstream's
`PriorityQueue`:

- **active**: ready to be tried, highest `spec.priority` first, then first come first served;
- **backoff**: failed before and waiting `1 s * 2^(attempts-1)` (at most 10 s) since its last
  attempt, then active;
- **unschedulable**: no node fitted at the last attempt; it stays until something changes
  that could make it fit (`move_all_unschedulable()`: a node added or changed, a pod removed
  from a node, an assumed pod forgotten) or the pod itself changes (`add()`), and at most
  `max_unschedulable` seconds (`flush_stale()`), then goes to backoff or active.

A pod being tried is "in flight": a change that would have moved it sends it to backoff
instead of unschedulable when its attempt fails, so no event is lost while it was out.
Pure bookkeeping with an injectable clock; `pop()` is the only coroutine.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable

__all__ = ["SchedulingQueue"]

INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 10.0
# upstream's podMaxInUnschedulablePodsDuration
MAX_UNSCHEDULABLE = 300.0


class SchedulingQueue:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 initial_backoff: float = INITIAL_BACKOFF, max_backoff: float = MAX_BACKOFF,
                 max_unschedulable: float = MAX_UNSCHEDULABLE) -> None:
        self.clock = clock
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self._seq = itertools.count()
        self._active: list[tuple[int, int, str]] = []  # (-priority, arrival, key)
        self._active_keys: set[str] = set()
        self._backoff: dict[str, float] = {}  # key -> when it may be tried again
        self._unschedulable: dict[str, float] = {}  # key -> since when
        self._priority: dict[str, int] = {}
        self._attempts: dict[str, int] = {}
        self._last_attempt: dict[str, float] = {}
        self._in_flight: set[str] = set()
        self._changed_in_flight: set[str] = set()
        self._wakeup = asyncio.Event()

    # -- what is where ------------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        return (key in self._active_keys or key in self._backoff or key in self._unschedulable
                or key in self._in_flight)

    @property
    def active(self) -> list[str]:
        return [key for _, _, key in sorted(self._active) if key in self._active_keys]

    @property
    def backing_off(self) -> list[str]:
        return sorted(self._backoff)

    @property
    def unschedulable_pods(self) -> list[str]:
        return sorted(self._unschedulable)

    def attempts(self, key: str) -> int:
        return self._attempts.get(key, 0)

    # -- moves ----------------------------------------------------------------------------

    def _push_active(self, key: str) -> None:
        self._backoff.pop(key, None)
        self._unschedulable.pop(key, None)
        if key not in self._active_keys:
            self._active_keys.add(key)
            heapq.heappush(self._active, (-self._priority.get(key, 0), next(self._seq), key))
        self._wakeup.set()

    def _backoff_until(self, key: str) -> float:
        attempts = self._attempts.get(key, 0)
        if attempts == 0:
            return 0.0
        delay = min(self.initial_backoff * 2 ** (attempts - 1), self.max_backoff)
        return self._last_attempt.get(key, 0.0) + delay

    def _requeue(self, key: str) -> None:
        """To backoff if its back-off has not passed, else active."""
        self._unschedulable.pop(key, None)
        until = self._backoff_until(key)
        if until > self.clock():
            self._backoff[key] = until
            self._wakeup.set()
        else:
            self._push_active(key)

    def add(self, key: str, priority: int = 0) -> None:
        """A pending pod appeared or changed (its spec, labels...): try it (again)."""
        self._priority[key] = priority
        if key in self._in_flight:
            self._changed_in_flight.add(key)
        elif key in self._unschedulable:
            self._requeue(key)
        elif key not in self._active_keys and key not in self._backoff:
            self._push_active(key)

    def remove(self, key: str) -> None:
        """The pod is bound, gone or not ours: forget it."""
        self._active_keys.discard(key)
        self._backoff.pop(key, None)
        self._unschedulable.pop(key, None)
        self._in_flight.discard(key)
        self._changed_in_flight.discard(key)
        self._priority.pop(key, None)
        self._attempts.pop(key, None)
        self._last_attempt.pop(key, None)

    def move_all_unschedulable(self) -> None:
        """Something changed that may make unschedulable pods fit."""
        for key in list(self._unschedulable):
            self._requeue(key)
        self._changed_in_flight.update(self._in_flight)

    def flush_stale(self) -> None:
        """Unschedulable pods waiting longer than `max_unschedulable` are tried again."""
        now = self.clock()
        for key, since in list(self._unschedulable.items()):
            if now - since >= self.max_unschedulable:
                self._requeue(key)

    # -- one attempt ----------------------------------------------------------------------

    def _promote_ready(self) -> float | None:
        """Move backed-off pods whose time came to active; seconds until the next one."""
        now = self.clock()
        wait: float | None = None
        for key, until in list(self._backoff.items()):
            if until <= now:
                self._push_active(key)
            else:
                wait = until - now if wait is None else min(wait, until - now)
        return wait

    def pop_nowait(self) -> str | None:
        """The next pod to try, or None if none is ready now."""
        self._promote_ready()
        while self._active:
            _, _, key = heapq.heappop(self._active)
            if key in self._active_keys:
                self._active_keys.discard(key)
                self._in_flight.add(key)
                self._changed_in_flight.discard(key)
                return key
        return None

    async def pop(self) -> str:
        """Wait for the next pod to try; it is in flight until `done`, `unschedulable`,
        `retry_later` or `remove`."""
        while True:
            key = self.pop_nowait()
            if key is not None:
                return key
            self._wakeup.clear()
            wait = self._promote_ready()
            if self._active_keys:
                continue
            try:
                async with asyncio.timeout(wait):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    def _attempted(self, key: str) -> bool | None:
        """Count the attempt; whether a change came while it was in flight (None: the pod
        was removed meanwhile)."""
        if key not in self._in_flight:
            return None
        self._in_flight.discard(key)
        self._attempts[key] = self._attempts.get(key, 0) + 1
        self._last_attempt[key] = self.clock()
        changed = key in self._changed_in_flight
        self._changed_in_flight.discard(key)
        return changed

    def done(self, key: str) -> None:
        """Scheduled: forget its attempts."""
        self.remove(key)

    def unschedulable(self, key: str) -> None:
        """No node fitted: wait for a change (or for backoff, if one came meanwhile)."""
        changed = self._attempted(key)
        if changed:
            self._requeue(key)
        elif changed is not None:
            self._unschedulable[key] = self.clock()

    def retry_later(self, key: str) -> None:
        """An error (binding failed, API unreachable): try again after the back-off."""
        if self._attempted(key) is not None:
            self._requeue(key)

"""A work queue of keys as client-go's rate-limited `workqueue`: a key waits at most once, a
key being processed that is added again is processed again once it is done (never by two
workers at once), a key can be added after a delay, and failed keys come back after a
per-key exponential back-off (by default 5 ms doubling up to 1000 s, the default controller
rate limiter's per-item part; `forget` resets it)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

__all__ = ["WorkQueue"]


class WorkQueue(Generic[K]):
    def __init__(self, *, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._waiting: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: set[asyncio.TimerHandle] = set()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, key: K) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._waiting:
            return
        self._waiting.add(key)
        self._queue.put_nowait(key)

    async def get(self) -> K:
        key = await self._queue.get()
        self._waiting.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def add_rate_limited(self, key: K) -> None:
        """Add `key` again after its back-off (doubling from `base_delay` per failure)."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        # the exponent capped: 2**64 base delays are past any max_delay, and a bigger int
        # would overflow the float conversion
        self.add_after(key, min(self.base_delay * (2.0 ** min(failures, 64)), self.max_delay))

    def add_after(self, key: K, delay: float) -> None:
        """Add `key` once `delay` seconds have passed."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._timers.discard(handle)
            self.add(key)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    def close(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()

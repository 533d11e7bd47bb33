"""client-go's rate-limited work queue for controllers: a key is queued at most once
however often it is added, is never handed to two workers at once (an add while it is being
processed queues it again after `done`), can be added after a delay, and is retried with a
per-key exponential back-off (5 ms doubling up to 1000 s, `forget` resets it), as
`workqueue.NewTypedRateLimitingQueue` with the default controller rate limiter's per-item
part."""

from __future__ import annotations

import asyncio
from collections import deque

BASE_DELAY = 0.005
MAX_DELAY = 1000.0


class WorkQueue:
    def __init__(self) -> None:
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._failures: dict[str, int] = {}
        self._ready = asyncio.Event()
        self._timers: set[asyncio.TimerHandle] = set()

    def add(self, key: str) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._ready.set()

    def add_after(self, key: str, delay: float) -> None:
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

    def add_rate_limited(self, key: str) -> None:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        self.add_after(key, min(BASE_DELAY * (2 ** failures), MAX_DELAY))

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    async def get(self) -> str:
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        key = self._queue.popleft()
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._ready.set()

    def __len__(self) -> int:
        return len(self._queue)

    def shut_down(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()

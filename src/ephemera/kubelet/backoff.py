"""Upstream's `flowcontrol.Backoff` as the kubelet uses it for crash loops
(CrashLoopBackOff) and image pulls (ImagePullBackOff): per key, the first restart is
immediate, then `initial` doubling up to `maximum`; an entry is forgotten when the next event
comes more than twice the maximum after the last one."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BackOff", "BackOffPolicy"]


@dataclass(frozen=True)
class BackOffPolicy:
    initial: float = 10.0
    maximum: float = 300.0

    @property
    def stable_after(self) -> float:
        """An entry is forgotten when the event comes this long after the last restart
        (upstream: twice the maximum)."""
        return 2 * self.maximum


@dataclass
class _BackOffEntry:
    delay: float
    last_update: float


class BackOff:
    """Upstream's `flowcontrol.Backoff`, keyed by string, on wall-clock seconds."""

    def __init__(self, policy: BackOffPolicy,
                 clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.clock = clock
        self._entries: dict[str, _BackOffEntry] = {}

    def _expired(self, entry: _BackOffEntry, event_time: float) -> bool:
        return event_time - entry.last_update > self.policy.stable_after

    def remaining(self, key: str, event_time: float) -> float:
        """Seconds left of the back-off window that started at `event_time` (0: not in
        back-off)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event_time):
            return 0.0
        left = entry.delay - (self.clock() - event_time)
        return left if left > 0 else 0.0

    def next(self, key: str, event_time: float) -> None:
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event_time):
            self._entries[key] = _BackOffEntry(self.policy.initial, self.clock())
        else:
            entry.delay = min(entry.delay * 2, self.policy.maximum)
            entry.last_update = self.clock()

    def get(self, key: str) -> float:
        entry = self._entries.get(key)
        return entry.delay if entry is not None else 0.0

    def forget_prefix(self, prefix: str) -> None:
        for key in [k for k in self._entries if k.startswith(prefix)]:
            del self._entries[key]

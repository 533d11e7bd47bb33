"""upstream's `UIDTrackingControllerExpectations` (`pkg/controller/controller_utils.go`): what
a controller has asked for and not yet seen in its informers. A controller that created N
pods expects N adds; one that deleted pods expects their deletions (by pod key), so a burst
of pod events never makes it act on a cache that lags its own writes: it syncs again only
when every expectation was observed, or when they are older than 5 minutes (a lost event)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

EXPECTATIONS_TIMEOUT = 5 * 60.0


@dataclass
class _Expectation:
    add: int = 0
    delete: int = 0
    timestamp: float = 0.0
    deleting: set[str] = field(default_factory=set)

    def fulfilled(self) -> bool:
        return self.add <= 0 and self.delete <= 0


class Expectations:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_key: dict[str, _Expectation] = {}

    def satisfied(self, key: str) -> bool:
        """Whether the controller of `key` may act on its cache (`SatisfiedExpectations`)."""
        exp = self._by_key.get(key)
        if exp is None:
            return True
        return exp.fulfilled() or self._clock() - exp.timestamp > EXPECTATIONS_TIMEOUT

    def expires_in(self, key: str) -> float | None:
        """Seconds until the unmet expectations of `key` time out; None when it has none
        unmet (a controller looks again then, should the events never come)."""
        exp = self._by_key.get(key)
        if exp is None or exp.fulfilled():
            return None
        return max(0.0, exp.timestamp + EXPECTATIONS_TIMEOUT - self._clock())

    def expect(self, key: str, creations: int, pod_keys: Iterable[str] = ()) -> None:
        """`SetExpectations`: `creations` adds and the deletion of the pods `pod_keys`."""
        keys = set(pod_keys)
        self._by_key[key] = _Expectation(add=creations, delete=len(keys),
                                         timestamp=self._clock(), deleting=keys)

    def expect_creations(self, key: str, count: int) -> None:
        self.expect(key, count)

    def expect_deletions(self, key: str, pod_keys: Iterable[str]) -> None:
        self.expect(key, 0, pod_keys)

    def creation_observed(self, key: str) -> None:
        exp = self._by_key.get(key)
        if exp is not None:
            exp.add -= 1

    def deletion_observed(self, key: str, pod_key: str) -> None:
        exp = self._by_key.get(key)
        if exp is not None and pod_key in exp.deleting:
            exp.deleting.discard(pod_key)
            exp.delete -= 1

    def delete(self, key: str) -> None:
        self._by_key.pop(key, None)

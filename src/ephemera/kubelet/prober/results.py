"""The probe results cache (upstream's `prober/results`): the latest result of one kind of
probe (liveness, readiness or startup) for each container instance, keyed by container id.

Workers write it; the status generation (`started`, `ready`) and the pod sync (restart on a
liveness or startup failure) read it. Each change of a container's result is reported to
`on_update(pod_uid, container_id, result)`, as upstream's `Updates()` channel feeds the
kubelet's sync loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Result", "ResultsCache"]


class Result(StrEnum):
    """A probe result as the kubelet keeps it (upstream's `results.Result`)."""

    UNKNOWN = "Unknown"
    SUCCESS = "Success"
    FAILURE = "Failure"


@dataclass(frozen=True)
class _Entry:
    result: Result
    pod_uid: str


class ResultsCache:
    """The results of one probe kind, per container id."""

    def __init__(self, on_update: Callable[[str, str, Result], None] | None = None) -> None:
        self._entries: dict[str, _Entry] = {}
        self.on_update = on_update or (lambda uid, cid, result: None)

    def get(self, container_id: str) -> Result | None:
        entry = self._entries.get(container_id)
        return entry.result if entry is not None else None

    def set(self, container_id: str, result: Result, pod_uid: str) -> None:
        """Record `result`; a change is reported to `on_update`."""
        previous = self._entries.get(container_id)
        self._entries[container_id] = _Entry(result, pod_uid)
        if previous is None or previous.result != result:
            self.on_update(pod_uid, container_id, result)

    def remove(self, container_id: str) -> None:
        self._entries.pop(container_id, None)

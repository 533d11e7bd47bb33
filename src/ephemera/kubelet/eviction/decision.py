"""One eviction-manager pass as a pure decision (upstream `synchronize`, reference 4.1),
for the eviction manager's loop (`manager.py`) to act on.

`decide(active_pods, summary, thresholds, gates)`:

1. observes the signals and finds the thresholds met now (`met`) and the node conditions
   they set (`conditions`; the caller keeps a condition for the pressure transition period
   and feeds it to admission);
2. local-storage eviction first (`local_evictions`); when it evicts any pod the pass ends
   there (`to_reclaim` is None);
3. otherwise `to_reclaim` is the first met memory or disk threshold (memory ones first, as
   upstream sorts). The caller then reclaims node-level resources for a disk signal (dead
   containers, unused images; nothing for memory, as upstream), takes a new summary, and if
   `thresholds_met(thresholds, observe(new_summary))` is still non-empty evicts
   `node_pressure_eviction(active_pods, new_summary, met_again, observe(new_summary))`:
   at most one pod per pass.

`PressureConditions` keeps a condition reported for the pressure transition period after it
was last observed (what the node status and `admit_under_pressure` use).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ephemera.kubelet.eviction.api import Eviction
from ephemera.kubelet.eviction.localstorage import local_storage_eviction
from ephemera.kubelet.eviction.ranking import RECLAIMABLE_RESOURCES
from ephemera.kubelet.eviction.thresholds import (
    Observation,
    Threshold,
    node_conditions,
    observe,
    thresholds_met,
)
from ephemera.kubelet.stats.provider import Summary

__all__ = [
    "DEFAULT_PRESSURE_TRANSITION_PERIOD",
    "PassDecision",
    "PressureConditions",
    "by_eviction_priority",
    "decide",
]


@dataclass(frozen=True)
class PassDecision:
    observations: Mapping[str, Observation]
    met: list[Threshold] = field(default_factory=list)
    conditions: list[str] = field(default_factory=list)
    local_evictions: list[Eviction] = field(default_factory=list)
    to_reclaim: Threshold | None = None


def by_eviction_priority(thresholds: Sequence[Threshold]) -> list[Threshold]:
    """Upstream's `byEvictionPriority`: memory thresholds first (stable)."""
    return sorted(thresholds, key=lambda t: 0 if t.resource == "memory" else 1)


def decide(
    active_pods: Sequence[Mapping[str, Any]],
    summary: Summary,
    thresholds: Sequence[Threshold],
    gates: Mapping[str, bool] | None = None,
    *,
    local_storage_capacity_isolation: bool = True,
) -> PassDecision:
    """One pass (see the module docstring)."""
    observations = observe(summary)
    met = thresholds_met(thresholds, observations)
    conditions = node_conditions(met)
    local: list[Eviction] = []
    if local_storage_capacity_isolation:
        local = local_storage_eviction(active_pods, summary, gates)
    if local:
        return PassDecision(observations, met, conditions, local, None)
    ordered = by_eviction_priority(met)
    to_reclaim = next((t for t in ordered if t.resource in RECLAIMABLE_RESOURCES), None)
    return PassDecision(observations, ordered, conditions, [], to_reclaim)


DEFAULT_PRESSURE_TRANSITION_PERIOD = 300.0  # upstream's --eviction-pressure-transition-period


@dataclass
class PressureConditions:
    """The node conditions to report: a condition stays True until it has not been observed
    for `transition_period` seconds (upstream `nodeConditionsLastObservedAt` /
    `nodeConditionsObservedSince`), so the node does not flap. Pure: the caller passes
    `now` (monotonic seconds)."""

    transition_period: float = DEFAULT_PRESSURE_TRANSITION_PERIOD
    last_observed: dict[str, float] = field(default_factory=dict)

    def update(self, observed: Sequence[str], now: float) -> list[str]:
        """Record the conditions `observed` in this pass; return those to report, sorted."""
        for condition in observed:
            self.last_observed[condition] = now
        return sorted(c for c, at in self.last_observed.items()
                      if now - at < self.transition_period)

"""Kubelet admission under node pressure (upstream's eviction admit handler). The kubelet
runs it before the resource fit (`ephemera.kubelet.allocation.fit`), as upstream registers
the handlers.

- `admit_under_pressure(pod, node_conditions)`: with no condition, admit; a critical pod is
  always admitted; with `MemoryPressure` alone, only a BestEffort pod not tolerating
  `node.kubernetes.io/memory-pressure:NoSchedule` is rejected; any other condition
  (`DiskPressure`, ...) rejects: reason `Evicted`, message
  `The node had condition: [DiskPressure]. ` (Go's `%v` of the condition list).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ephemera.kubelet.eviction.api import NODE_CONDITION_MESSAGE, REASON, is_critical_pod
from ephemera.kubelet.eviction.thresholds import MEMORY_PRESSURE
from ephemera.pods.resources import QOS_BEST_EFFORT, qos_class

__all__ = ["AdmitDecision", "admit_under_pressure"]

_MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"


@dataclass(frozen=True)
class AdmitDecision:
    admit: bool
    reason: str = ""
    message: str = ""


def _tolerates_memory_pressure(pod: Mapping[str, Any]) -> bool:
    """`TolerationsTolerateTaint` for `node.kubernetes.io/memory-pressure:NoSchedule`."""
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        if not isinstance(toleration, Mapping):
            continue
        effect = toleration.get("effect") or ""
        if effect and effect != "NoSchedule":
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists" and (not key or key == _MEMORY_PRESSURE_TAINT):
            return True
        if operator == "Equal" and key == _MEMORY_PRESSURE_TAINT and not toleration.get("value"):
            return True
    return False


def admit_under_pressure(pod: Mapping[str, Any], node_conditions: Sequence[str],
                         gates: Mapping[str, bool] | None = None) -> AdmitDecision:
    """The eviction manager's `Admit` (see the module docstring)."""
    if not node_conditions or is_critical_pod(pod):
        return AdmitDecision(True)
    if list(node_conditions) == [MEMORY_PRESSURE] and (
        qos_class(pod, gates=gates) != QOS_BEST_EFFORT or _tolerates_memory_pressure(pod)
    ):
        return AdmitDecision(True)
    return AdmitDecision(False, REASON, NODE_CONDITION_MESSAGE.format(
        conditions="[" + " ".join(node_conditions) + "]"))

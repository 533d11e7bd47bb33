"""Kubelet admission for local ephemeral storage (upstream's eviction admit handler, and the
ephemeral-storage part of the predicate admit handler, `pkg/kubelet/lifecycle/predicate.go`).

Order as upstream registers the handlers: the pressure check first, then resource fit.

- `admit_under_pressure(pod, node_conditions)`: with no condition, admit; a critical pod is
  always admitted; with `MemoryPressure` alone, only a BestEffort pod not tolerating
  `node.kubernetes.io/memory-pressure:NoSchedule` is rejected; any other condition
  (`DiskPressure`, ...) rejects: reason `Evicted`, message
  `The node had condition: [DiskPressure]. ` (Go's `%v` of the condition list).
- `ephemeral_storage_fit(pod, others, allocatable, gates)`: the pod's effective
  ephemeral-storage request (`pod_requests`, pod-level aware) plus the admitted `others`'
  against allocatable ephemeral-storage: reason `OutOfephemeral-storage`, message
  `Node didn't have enough resource: ephemeral-storage, requested: N, used: N, capacity: N`
  (bytes). The status message is `Pod was rejected: ` + that message (the agent's
  `rejected_status` adds the prefix).
- `admit(pod, others, allocatable, node_conditions, gates)`: both, in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ephemera.api.quantity import QuantityError, quantity_from_json
from ephemera.kubelet.eviction.api import NODE_CONDITION_MESSAGE, REASON, is_critical_pod
from ephemera.kubelet.eviction.thresholds import MEMORY_PRESSURE
from ephemera.pods.resources import (
    QOS_BEST_EFFORT,
    RESOURCE_EPHEMERAL_STORAGE,
    pod_requests,
    qos_class,
)

__all__ = [
    "OUT_OF_EPHEMERAL_STORAGE",
    "AdmitDecision",
    "admit",
    "admit_under_pressure",
    "ephemeral_storage_fit",
]

OUT_OF_EPHEMERAL_STORAGE = "OutOfephemeral-storage"
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


def _bytes(value: Any) -> int | None:
    try:
        return int(quantity_from_json(value).value())
    except (QuantityError, TypeError):
        return None


def ephemeral_storage_fit(
    pod: Mapping[str, Any],
    others: Sequence[Mapping[str, Any]],
    allocatable: Mapping[str, Any],
    gates: Mapping[str, bool] | None = None,
) -> AdmitDecision:
    """Resource fit for ephemeral-storage (see the module docstring)."""
    request = pod_requests(pod, gates=gates).get(RESOURCE_EPHEMERAL_STORAGE)
    capacity = _bytes(allocatable.get(RESOURCE_EPHEMERAL_STORAGE))
    if request is None or request.is_zero() or capacity is None:
        return AdmitDecision(True)
    used = 0
    for other in others:
        q = pod_requests(other, gates=gates).get(RESOURCE_EPHEMERAL_STORAGE)
        if q is not None:
            used += int(q.value())
    requested = int(request.value())
    if requested + used > capacity:
        return AdmitDecision(False, OUT_OF_EPHEMERAL_STORAGE,
                             f"Node didn't have enough resource: {RESOURCE_EPHEMERAL_STORAGE}, "
                             f"requested: {requested}, used: {used}, capacity: {capacity}")
    return AdmitDecision(True)


def admit(
    pod: Mapping[str, Any],
    others: Sequence[Mapping[str, Any]],
    allocatable: Mapping[str, Any],
    node_conditions: Sequence[str],
    gates: Mapping[str, bool] | None = None,
) -> AdmitDecision:
    """Pressure check, then ephemeral-storage fit."""
    decision = admit_under_pressure(pod, node_conditions, gates)
    if not decision.admit:
        return decision
    return ephemeral_storage_fit(pod, others, allocatable, gates)

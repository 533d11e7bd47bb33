"""Pod conditions, as upstream's `podutil.UpdatePodCondition` sets them, and the
`DisruptionTarget` condition (PodDisruptionConditions, GA in 1.31) that whoever deletes a pod
on purpose adds first: the Eviction API, the taint eviction controller, the kubelet's
eviction manager. A Job's `podFailurePolicy` reads it (`onPodConditions`). Pure: no I/O."""

from __future__ import annotations

from typing import Any, Final

DISRUPTION_TARGET: Final = "DisruptionTarget"

# pkg/registry/core/pod/storage/eviction.go, addConditionAndDeletePod
EVICTION_API_REASON: Final = "EvictionByEvictionAPI"
EVICTION_API_MESSAGE: Final = "Eviction API: evicting"


def disruption_target(reason: str, message: str) -> dict[str, Any]:
    """A `DisruptionTarget` condition, status True, without its times."""
    return {"type": DISRUPTION_TARGET, "status": "True", "reason": reason, "message": message}


def update_pod_condition(status: dict[str, Any], condition: dict[str, Any],
                         now: str) -> bool:
    """`UpdatePodCondition`: put `condition` (type, status, reason, message) into
    `status.conditions`, replacing the one of its type whole, with `lastTransitionTime` `now`
    unless the status is the one it had (then its old time). Returns whether anything
    changed."""
    fresh = {**condition, "lastTransitionTime": now}
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        conditions = []
    index = next((i for i, c in enumerate(conditions)
                  if isinstance(c, dict) and c.get("type") == condition.get("type")), None)
    if index is None:
        status["conditions"] = [*conditions, fresh]
        return True
    old = conditions[index]
    if old.get("status") == fresh.get("status"):
        fresh.pop("lastTransitionTime")
        if old.get("lastTransitionTime") is not None:
            fresh["lastTransitionTime"] = old["lastTransitionTime"]
    changed = any(old.get(k) != fresh.get(k) for k in
                  ("status", "reason", "message", "lastProbeTime", "lastTransitionTime"))
    status["conditions"] = [fresh if i == index else c for i, c in enumerate(conditions)]
    return changed

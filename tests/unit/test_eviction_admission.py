"""Kubelet admission for ephemeral storage: rejected under DiskPressure (reason `Evicted`,
upstream message), critical pods admitted, MemoryPressure rules, and the ephemeral-storage
fit against allocatable (pod-level request aware) with upstream's message."""

from __future__ import annotations

from typing import Any

from ephemera.kubelet.allocation.fit import insufficient
from ephemera.kubelet.eviction import admit_under_pressure

GATES_ON = {"PodLevelResourcesEphemeralStorage": True, "PodLevelResources": True}


def pod(*, request: str | None = None, pod_request: str | None = None,
        cpu: bool = False, priority: int | None = None,
        tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "resources": {"requests": {}}}
    if request is not None:
        container["resources"]["requests"]["ephemeral-storage"] = request
    if cpu:
        container["resources"]["requests"]["cpu"] = "100m"
    spec: dict[str, Any] = {"containers": [container]}
    if pod_request is not None:
        spec["resources"] = {"requests": {"ephemeral-storage": pod_request}}
    if priority is not None:
        spec["priority"] = priority
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}


def test_disk_pressure_rejects_every_non_critical_pod() -> None:
    decision = admit_under_pressure(pod(cpu=True), ["DiskPressure"])
    assert (decision.admit, decision.reason, decision.message) == (
        False, "Evicted", "The node had condition: [DiskPressure]. ")
    both = admit_under_pressure(pod(), ["MemoryPressure", "DiskPressure"])
    assert both.message == "The node had condition: [MemoryPressure DiskPressure]. "
    assert admit_under_pressure(pod(priority=2_000_000_000), ["DiskPressure"]).admit
    assert admit_under_pressure(pod(), []).admit


def test_memory_pressure_rejects_only_best_effort_without_toleration() -> None:
    assert admit_under_pressure(pod(cpu=True), ["MemoryPressure"]).admit
    rejected = admit_under_pressure(pod(), ["MemoryPressure"])
    assert (rejected.admit, rejected.message) == (
        False, "The node had condition: [MemoryPressure]. ")
    tolerating = pod(tolerations=[{"key": "node.kubernetes.io/memory-pressure",
                                   "operator": "Exists", "effect": "NoSchedule"}])
    assert admit_under_pressure(tolerating, ["MemoryPressure"]).admit
    other = pod(tolerations=[{"key": "node.kubernetes.io/disk-pressure", "operator": "Exists"}])
    assert not admit_under_pressure(other, ["MemoryPressure"]).admit


def test_ephemeral_storage_fit() -> None:
    allocatable = {"ephemeral-storage": "1Gi", "cpu": "2"}
    others = [pod(request="600Mi")]
    shortage = insufficient(pod(request="500Mi"), others, allocatable, GATES_ON)
    assert shortage is not None
    assert (shortage.resource, shortage.message) == (
        "ephemeral-storage",
        "Node didn't have enough resource: ephemeral-storage, requested: 524288000, "
        "used: 629145600, capacity: 1073741824")
    assert insufficient(pod(request="400Mi"), others, allocatable, GATES_ON) is None
    assert insufficient(pod(), others, allocatable, GATES_ON) is None


def test_ephemeral_storage_fit_uses_pod_level_request() -> None:
    allocatable = {"ephemeral-storage": "1Gi"}
    big = pod(request="100Mi", pod_request="2Gi")
    shortage = insufficient(big, [], allocatable, GATES_ON)
    assert shortage is not None
    assert shortage.message == ("Node didn't have enough resource: ephemeral-storage, "
                                "requested: 2147483648, used: 0, capacity: 1073741824")
    off = insufficient(big, [], allocatable, {**GATES_ON, "PodLevelResourcesEphemeralStorage":
                                              False})
    assert off is None  # the gate off: the 100Mi container request

"""Kubelet admission for ephemeral storage: rejected under DiskPressure (reason `Evicted`,
upstream message), critical pods admitted, MemoryPressure rules, and the ephemeral-storage
fit against allocatable (pod-level request aware) with upstream's reason and message."""

from __future__ import annotations

from typing import Any

from ephemera.kubelet.eviction import admit, admit_under_pressure, ephemeral_storage_fit


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
    decision = ephemeral_storage_fit(pod(request="500Mi"), others, allocatable)
    assert (decision.admit, decision.reason, decision.message) == (
        False, "OutOfephemeral-storage",
        "Node didn't have enough resource: ephemeral-storage, requested: 524288000, "
        "used: 629145600, capacity: 1073741824")
    assert ephemeral_storage_fit(pod(request="400Mi"), others, allocatable).admit
    assert ephemeral_storage_fit(pod(), others, allocatable).admit


def test_ephemeral_storage_fit_uses_pod_level_request() -> None:
    allocatable = {"ephemeral-storage": "1Gi"}
    big = pod(request="100Mi", pod_request="2Gi")
    decision = ephemeral_storage_fit(big, [], allocatable)
    assert decision.message == ("Node didn't have enough resource: ephemeral-storage, "
                                "requested: 2147483648, used: 0, capacity: 1073741824")
    off = ephemeral_storage_fit(big, [], allocatable,
                                gates={"PodLevelResourcesEphemeralStorage": False})
    assert off.admit  # the gate off: the 100Mi container request


def test_admit_checks_pressure_before_fit() -> None:
    too_big = pod(request="2Gi")
    decision = admit(too_big, [], {"ephemeral-storage": "1Gi"}, ["DiskPressure"])
    assert decision.reason == "Evicted"
    assert admit(too_big, [], {"ephemeral-storage": "1Gi"}, []).reason == (
        "OutOfephemeral-storage")
    assert admit(pod(request="1Mi"), [], {"ephemeral-storage": "1Gi"}, []).admit

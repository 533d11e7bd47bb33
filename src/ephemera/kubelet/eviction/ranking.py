"""Node-pressure eviction: ranking for disk signals (reference k8s-semantics.md 4.5,
upstream `rankDiskPressureFunc`), memory signals (`rankMemoryPressure`) and `pid.available`
(`rankPIDPressure`), and the eviction message (`evictionMessage`).

`rank_for_memory_pressure(pods, summary, gates)` orders pods, first to evict first, by the
first comparator that differs: pods without stats first, then pods whose working set (the
pod's `memory.workingSetBytes`, 0 when unknown) is above their memory request
(`GetResourceRequestQuantity`); lower `spec.priority`; larger working set minus the memory
request. `rank_for_pid_pressure(pods, summary)`: lower `spec.priority` first, then pods without
stats, then more tasks (`process_stats.process_count`).

`rank_for_disk_pressure(pods, summary, signal, gates)` orders pods, first to evict first, by
the first comparator that differs:

1. pods without stats first; then pods whose usage is above their request
   (`GetResourceRequestQuantity`, `ephemera.pods.resources.resource_request_quantity`: the
   pod-level request when pod-level resources are set) before those within it;
2. lower `spec.priority` first;
3. larger usage minus the ephemeral-storage request first (the inode variant subtracts the
   ephemeral-storage request too, as upstream does).

Usage is measured over the stats the signal ranks by: one filesystem -> writable layers,
logs and local volumes (emptyDir on disk, configMap, hostPath names). ephemera keeps the
writable layers under the kubelet root, so an image store on a filesystem of its own is
upstream's split layout (`KubeletSeparateDiskGC`): `nodefs.*` still ranks by writable
layers, logs and local volumes, `imagefs.*` by images, which no pod's stats hold (so the
usage is zero: priority, then the smaller request, decide). The sort is stable (upstream's
is not: ties may come out in either order there).

`node_pressure_eviction(pods, summary, thresholds, signal_met, gates)` picks the first
non-critical pod of the ranking (one pod per pass) and builds upstream's message:
`The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 9Gi. `
followed by `Container c was using 60Mi, request is 0, has larger consumption of
ephemeral-storage. ` for each container (regular, then init) whose rootfs + logs exceed its
request, with the `offending_containers`, `offending_containers_usage` and
`starved_resource` event annotations and the `DisruptionTarget` condition (reason
`TerminationByKubelet`). Grace period 1 s for hard thresholds. For memory the containers'
usage is their working set (`Container c was using 300Mi, request is 0, has larger
consumption of memory. `), and a pod with a pod-level memory request (PodLevelResources)
first gets `Pod p was using 310Mi, request is 256Mi, has larger consumption of memory. `
with the `offending_pod` and `offending_pod_usage` annotations.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ephemera.api.featuregates import POD_LEVEL_RESOURCES, gate_enabled
from ephemera.api.quantity import Quantity, QuantityError, QuantityFormat, quantity_from_json
from ephemera.kubelet.eviction.api import (
    IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS,
    Eviction,
    is_critical_pod,
    pod_priority,
    pod_uid,
)
from ephemera.kubelet.eviction.thresholds import (
    RESOURCE_INODES,
    SIGNAL_IMAGE_FS_AVAILABLE,
    SIGNAL_IMAGE_FS_INODES_FREE,
    Observation,
    Threshold,
    signal_resource,
    threshold_quantity,
)
from ephemera.kubelet.stats.provider import (
    FsStats,
    MemoryStats,
    PodStats,
    Summary,
    is_local_ephemeral_volume,
)
from ephemera.pods.conditions import disruption_target
from ephemera.pods.resources import (
    RESOURCE_EPHEMERAL_STORAGE,
    RESOURCE_MEMORY,
    container_requests,
    is_pod_level_resources_set,
    resource_request_quantity,
)

__all__ = [
    "CONTAINER_USAGE_MESSAGE",
    "NODE_LOW_MESSAGE",
    "POD_USAGE_MESSAGE",
    "THRESHOLD_MET_MESSAGE",
    "eviction_message",
    "memory_usage",
    "node_pressure_eviction",
    "pod_disk_usage",
    "rank_for_disk_pressure",
    "rank_for_memory_pressure",
    "rank_for_pid_pressure",
]

NODE_LOW_MESSAGE: Final = "The node was low on resource: {resource}. "
THRESHOLD_MET_MESSAGE: Final = "Threshold quantity: {quantity}, available: {available}. "
CONTAINER_USAGE_MESSAGE: Final = (
    "Container {container} was using {usage}, request is {request}, "
    "has larger consumption of {resource}. ")
POD_USAGE_MESSAGE: Final = (
    "Pod {pod} was using {usage}, request is {request}, has larger consumption of {resource}. ")
TERMINATION_BY_KUBELET: Final = "TerminationByKubelet"

# The resources a node-pressure eviction reclaims (every signal's).
RESOURCE_PIDS: Final = "pids"
RECLAIMABLE_RESOURCES: Final = (RESOURCE_MEMORY, RESOURCE_EPHEMERAL_STORAGE, RESOURCE_INODES,
                                RESOURCE_PIDS)

_ROOT, _LOGS, _LOCAL_VOLUMES = "root", "logs", "localVolumes"


def _measured(signal: str, dedicated_image_fs: bool) -> frozenset[str]:
    if dedicated_image_fs and signal in (SIGNAL_IMAGE_FS_AVAILABLE,
                                         SIGNAL_IMAGE_FS_INODES_FREE):
        return frozenset()  # images: not in any pod's stats
    return frozenset({_ROOT, _LOGS, _LOCAL_VOLUMES})


def _local_volume_names(pod: Mapping[str, Any]) -> list[str]:
    """`localVolumeNames`: hostPath and local ephemeral volumes."""
    spec = pod.get("spec") or {}
    return [str(v.get("name")) for v in spec.get("volumes") or []
            if isinstance(v, Mapping) and (v.get("hostPath") is not None
                                           or is_local_ephemeral_volume(v))]


def _fs_amount(fs: FsStats | None, resource: str) -> int:
    if fs is None:
        return 0
    value = fs.inodes_used if resource == RESOURCE_INODES else fs.used_bytes
    return value or 0


def pod_disk_usage(pod: Mapping[str, Any], stats: PodStats, resource: str,
                   measured: frozenset[str]) -> Quantity:
    """`podDiskUsage`: bytes (BinarySI) or inodes (DecimalSI) over the measured stats."""
    total = 0
    for container in stats.containers:
        if _ROOT in measured:
            total += _fs_amount(container.rootfs, resource)
        if _LOGS in measured:
            total += _fs_amount(container.logs, resource)
    if _LOCAL_VOLUMES in measured:
        for name in _local_volume_names(pod):
            volume = stats.volume(name)
            if volume is not None:
                total += _fs_amount(volume.fs, resource)
    fmt = QuantityFormat.DECIMAL_SI if resource == RESOURCE_INODES else QuantityFormat.BINARY_SI
    return Quantity.from_int(total, fmt)


def _cmp_bool(a: bool, b: bool) -> int:
    """True sorts first."""
    if a == b:
        return 0
    return -1 if a else 1


def rank_for_disk_pressure(
    pods: Sequence[Mapping[str, Any]],
    summary: Summary,
    signal: str,
    gates: Mapping[str, bool] | None = None,
) -> list[Mapping[str, Any]]:
    """`pods` in eviction order for disk `signal` (see the module docstring)."""
    resource = signal_resource(signal)
    measured = _measured(signal, summary.dedicated_image_fs)

    def usage(pod: Mapping[str, Any]) -> Quantity | None:
        stats = summary.pod(pod_uid(pod))
        return None if stats is None else pod_disk_usage(pod, stats, resource, measured)

    usages = {id(pod): usage(pod) for pod in pods}

    def compare(p1: Mapping[str, Any], p2: Mapping[str, Any]) -> int:
        u1, u2 = usages[id(p1)], usages[id(p2)]
        if u1 is None or u2 is None:
            return _cmp_bool(u1 is None, u2 is None)
        exceeds1 = u1 > resource_request_quantity(p1, resource, gates=gates)
        exceeds2 = u2 > resource_request_quantity(p2, resource, gates=gates)
        result = _cmp_bool(exceeds1, exceeds2)
        if result:
            return result
        pr1, pr2 = pod_priority(p1), pod_priority(p2)
        if pr1 != pr2:
            return -1 if pr1 < pr2 else 1
        over1 = u1 - resource_request_quantity(p1, RESOURCE_EPHEMERAL_STORAGE, gates=gates)
        over2 = u2 - resource_request_quantity(p2, RESOURCE_EPHEMERAL_STORAGE, gates=gates)
        return over2.cmp(over1)

    return sorted(pods, key=functools.cmp_to_key(compare))


def memory_usage(memory: MemoryStats | None) -> Quantity:
    """`memoryUsage`: the working set as a BinarySI quantity (zero when unknown)."""
    if memory is None or memory.working_set_bytes is None:
        return Quantity(0, 0, QuantityFormat.BINARY_SI)
    return Quantity.from_int(memory.working_set_bytes, QuantityFormat.BINARY_SI)


def rank_for_memory_pressure(
    pods: Sequence[Mapping[str, Any]],
    summary: Summary,
    gates: Mapping[str, bool] | None = None,
) -> list[Mapping[str, Any]]:
    """`pods` in eviction order under memory pressure (see the module docstring)."""
    def usage(pod: Mapping[str, Any]) -> Quantity | None:
        stats = summary.pod(pod_uid(pod))
        return None if stats is None else memory_usage(stats.memory)

    usages = {id(pod): usage(pod) for pod in pods}
    requests = {id(pod): resource_request_quantity(pod, RESOURCE_MEMORY, gates=gates)
                for pod in pods}

    def compare(p1: Mapping[str, Any], p2: Mapping[str, Any]) -> int:
        u1, u2 = usages[id(p1)], usages[id(p2)]
        if u1 is None or u2 is None:
            return _cmp_bool(u1 is None, u2 is None)
        r1, r2 = requests[id(p1)], requests[id(p2)]
        result = _cmp_bool(u1 > r1, u2 > r2)
        if result:
            return result
        pr1, pr2 = pod_priority(p1), pod_priority(p2)
        if pr1 != pr2:
            return -1 if pr1 < pr2 else 1
        return (u2 - r2).cmp(u1 - r1)

    return sorted(pods, key=functools.cmp_to_key(compare))


def rank_for_pid_pressure(pods: Sequence[Mapping[str, Any]],
                          summary: Summary) -> list[Mapping[str, Any]]:
    """`pods` in eviction order under PID pressure (see the module docstring)."""
    def compare(p1: Mapping[str, Any], p2: Mapping[str, Any]) -> int:
        pr1, pr2 = pod_priority(p1), pod_priority(p2)
        if pr1 != pr2:
            return -1 if pr1 < pr2 else 1
        s1, s2 = summary.pod(pod_uid(p1)), summary.pod(pod_uid(p2))
        if s1 is None or s2 is None:
            return _cmp_bool(s1 is None, s2 is None)
        return (s2.process_count or 0) - (s1.process_count or 0)

    return sorted(pods, key=functools.cmp_to_key(compare))


def _pod_level_memory_request(pod: Mapping[str, Any],
                              gates: Mapping[str, bool] | None) -> Quantity | None:
    """The pod-level memory request when PodLevelResources is on and the pod sets
    pod-level resources, else None."""
    if not (gate_enabled(gates, POD_LEVEL_RESOURCES) and is_pod_level_resources_set(pod, gates)):
        return None
    resources = (pod.get("spec") or {}).get("resources") or {}
    requests = resources.get("requests") if isinstance(resources, Mapping) else None
    if not isinstance(requests, Mapping) or RESOURCE_MEMORY not in requests:
        return None
    try:
        return quantity_from_json(requests[RESOURCE_MEMORY])
    except (QuantityError, ValueError):
        return None


def eviction_message(
    resource: str,
    pod: Mapping[str, Any],
    summary: Summary,
    thresholds: Sequence[Threshold],
    observations: Mapping[str, Observation],
    gates: Mapping[str, bool] | None = None,
) -> tuple[str, dict[str, str]]:
    """`evictionMessage`: the message and the event annotations."""
    message = NODE_LOW_MESSAGE.format(resource=resource)
    for threshold in thresholds:
        if threshold.resource != resource:
            continue
        observed = observations.get(threshold.signal)
        if observed is not None:
            message += THRESHOLD_MET_MESSAGE.format(
                quantity=threshold_quantity(threshold, observed.capacity),
                available=observed.available)
            break
    annotations: dict[str, str] = {}
    stats = summary.pod(pod_uid(pod))
    if stats is None:
        return message, annotations
    if resource == RESOURCE_MEMORY:
        pod_request = _pod_level_memory_request(pod, gates)
        if pod_request is not None and stats.memory is not None:
            pod_usage = memory_usage(stats.memory)
            name = str((pod.get("metadata") or {}).get("name") or "")
            message += POD_USAGE_MESSAGE.format(pod=name, usage=pod_usage,
                                                request=pod_request, resource=resource)
            annotations["offending_pod"] = name
            annotations["offending_pod_usage"] = str(pod_usage)
    spec = pod.get("spec") or {}
    containers = [c for key in ("containers", "initContainers") for c in spec.get(key) or []
                  if isinstance(c, Mapping)]
    offending: list[str] = []
    usages: list[str] = []
    for container_stats in stats.containers:
        for container in containers:
            if container.get("name") != container_stats.name:
                continue
            request = container_requests(container).get(resource, Quantity())
            rootfs, logs = container_stats.rootfs, container_stats.logs
            used: Quantity | None = None
            if (resource == RESOURCE_EPHEMERAL_STORAGE and rootfs is not None
                    and rootfs.used_bytes is not None and logs is not None
                    and logs.used_bytes is not None):
                used = Quantity.from_int(rootfs.used_bytes + logs.used_bytes,
                                         QuantityFormat.BINARY_SI)
            elif (resource == RESOURCE_MEMORY and container_stats.memory is not None
                    and container_stats.memory.working_set_bytes is not None):
                used = memory_usage(container_stats.memory)
            if used is not None and used > request:
                message += CONTAINER_USAGE_MESSAGE.format(
                    container=container_stats.name, usage=used, request=request,
                    resource=resource)
                offending.append(container_stats.name)
                usages.append(str(used))
            break
    annotations["offending_containers"] = ",".join(offending)
    annotations["offending_containers_usage"] = ",".join(usages)
    annotations["starved_resource"] = resource
    return message, annotations


def node_pressure_eviction(
    pods: Sequence[Mapping[str, Any]],
    summary: Summary,
    thresholds: Sequence[Threshold],
    observations: Mapping[str, Observation],
    gates: Mapping[str, bool] | None = None,
) -> Eviction | None:
    """The one pod to evict for the met `thresholds` (already sorted, memory first; the
    first memory or disk signal is reclaimed), or None (no such threshold, no pods, or only
    critical pods)."""
    to_reclaim = next((t for t in thresholds if t.resource in RECLAIMABLE_RESOURCES), None)
    if to_reclaim is None or not pods:
        return None
    resource = to_reclaim.resource
    if resource == RESOURCE_MEMORY:
        ranked = rank_for_memory_pressure(pods, summary, gates)
    elif resource == RESOURCE_PIDS:
        ranked = rank_for_pid_pressure(pods, summary)
    else:
        ranked = rank_for_disk_pressure(pods, summary, to_reclaim.signal, gates)
    for pod in ranked:
        if is_critical_pod(pod):
            continue
        message, annotations = eviction_message(resource, pod, summary, thresholds,
                                                observations, gates)
        grace = (IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS
                 if to_reclaim.grace_period_seconds == 0 else 30)
        condition = disruption_target(TERMINATION_BY_KUBELET, message)
        return Eviction(pod, to_reclaim.signal, message, grace, annotations, condition)
    return None

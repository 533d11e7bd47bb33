"""Local-storage eviction: the per-pod limit checks of upstream's `localStorageEviction`
(reference k8s-semantics.md 4.2), pod-level aware (KEP-6386). Pure: pods and a `Summary` in,
`Eviction`s out.

For each active pod with stats, the first hit of, in order:

1. **emptyDir sizeLimit**: a `spec.volumes[].emptyDir` with `sizeLimit > 0` whose volume
   usage (`volume[]` stats by name) is `> sizeLimit` (any medium):
   `Usage of EmptyDir volume "cache" exceeds the limit "5Gi". ` (signal `emptydirfs.limit`);
2. **pod limit**: `PodLimits(pod)[ephemeral-storage]` (`ephemera.pods.resources.pod_limits`,
   so a pod-level limit replaces the container aggregate when the gates allow it) against
   `ephemeral-storage.usedBytes`, strictly greater. When the limit comes from
   `spec.resources.limits` the message is KEP-6386's, its `Evicted: ` prefix included,
   `Evicted: Pod ephemeral local storage usage (<used>) exceeds pod-level limit (<limit>)`
   (quantities as upstream prints them: the usage as a BinarySI quantity, the limit as
   written), else
   upstream's `Pod ephemeral local storage usage exceeds the total limit of containers
   <limit>. ` (signal `ephemeralpodfs.limit`);
3. **container limit**: for each container stat (in stats order) of a `spec.containers`
   entry with a non-zero ephemeral-storage limit, usage = logs + rootfs (rootfs only when
   the image filesystem is not dedicated), `limit < usage`:
   `Container app exceeded its local ephemeral storage limit "1Gi". ` (signal
   `ephemeralcontainerfs.limit`).

Critical pods are never evicted. Grace period 1 s, no condition, no annotations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ephemera.api.featuregates import POD_LEVEL_RESOURCES, gate_enabled
from ephemera.api.goformat import go_quote
from ephemera.api.quantity import Quantity, QuantityError, QuantityFormat, quantity_from_json
from ephemera.kubelet.eviction.api import (
    CONTAINER_EPHEMERAL_STORAGE_MESSAGE,
    EMPTY_DIR_MESSAGE,
    POD_EPHEMERAL_STORAGE_MESSAGE,
    POD_LEVEL_EPHEMERAL_STORAGE_MESSAGE,
    SIGNAL_EMPTY_DIR_FS_LIMIT,
    SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT,
    SIGNAL_EPHEMERAL_POD_FS_LIMIT,
    Eviction,
    is_critical_pod,
    pod_uid,
)
from ephemera.kubelet.stats.provider import FsStats, PodStats, Summary
from ephemera.pods.resources import (
    RESOURCE_EPHEMERAL_STORAGE,
    container_limits,
    is_pod_level_resources_set,
    is_supported_pod_level_resource,
    pod_limits,
)

__all__ = [
    "container_limit_eviction",
    "disk_usage_quantity",
    "empty_dir_limit_eviction",
    "local_storage_eviction",
    "pod_limit_eviction",
    "pod_limit_is_pod_level",
]


def disk_usage_quantity(fs: FsStats | None) -> Quantity:
    """Upstream's `diskUsage`: usedBytes as a BinarySI quantity (zero when unknown)."""
    if fs is None or fs.used_bytes is None:
        return Quantity(0, 0, QuantityFormat.BINARY_SI)
    return Quantity.from_int(fs.used_bytes, QuantityFormat.BINARY_SI)


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def empty_dir_limit_eviction(pod: Mapping[str, Any], stats: PodStats) -> Eviction | None:
    """Check 1: an emptyDir over its `sizeLimit`."""
    used_by_name = {v.name: v.fs.used_bytes for v in stats.volumes if v.fs.used_bytes is not None}
    for volume in _spec(pod).get("volumes") or []:
        if not isinstance(volume, Mapping) or not isinstance(volume.get("emptyDir"), Mapping):
            continue
        raw = volume["emptyDir"].get("sizeLimit")
        if raw is None:
            continue
        try:
            size = quantity_from_json(raw)
        except (QuantityError, TypeError):
            continue
        name = str(volume.get("name"))
        used = used_by_name.get(name)
        if used is None or size.sign() != 1:
            continue
        if Quantity.from_int(used, QuantityFormat.BINARY_SI) > size:
            return Eviction(pod, SIGNAL_EMPTY_DIR_FS_LIMIT, EMPTY_DIR_MESSAGE.format(
                volume=go_quote(name), limit=go_quote(str(size))))
    return None


def pod_limit_is_pod_level(pod: Mapping[str, Any], gates: Mapping[str, bool] | None) -> bool:
    """Whether `PodLimits(pod)[ephemeral-storage]` comes from `spec.resources.limits`."""
    limits = ((_spec(pod).get("resources") or {}).get("limits")) or {}
    return (
        RESOURCE_EPHEMERAL_STORAGE in limits
        and gate_enabled(gates, POD_LEVEL_RESOURCES)
        and is_supported_pod_level_resource(RESOURCE_EPHEMERAL_STORAGE, gates)
        and is_pod_level_resources_set(pod, gates)
    )


def pod_limit_eviction(
    pod: Mapping[str, Any], stats: PodStats, gates: Mapping[str, bool] | None
) -> Eviction | None:
    """Check 2: the pod's total usage over `PodLimits(pod)[ephemeral-storage]`."""
    limit = pod_limits(pod, gates=gates).get(RESOURCE_EPHEMERAL_STORAGE)
    if limit is None:
        return None
    used = disk_usage_quantity(stats.ephemeral_storage)
    if not used > limit:
        return None
    if pod_limit_is_pod_level(pod, gates):
        message = POD_LEVEL_EPHEMERAL_STORAGE_MESSAGE.format(used=used, limit=limit)
    else:
        message = POD_EPHEMERAL_STORAGE_MESSAGE.format(limit=limit)
    return Eviction(pod, SIGNAL_EPHEMERAL_POD_FS_LIMIT, message)


def container_limit_eviction(
    pod: Mapping[str, Any], stats: PodStats, dedicated_image_fs: bool = False
) -> Eviction | None:
    """Check 3: a regular container's logs (+ writable layer) over its own limit."""
    thresholds: dict[str, Quantity] = {}
    for container in _spec(pod).get("containers") or []:
        if not isinstance(container, Mapping):
            continue
        limit = container_limits(container).get(RESOURCE_EPHEMERAL_STORAGE)
        if limit is not None and limit.value() != 0:
            thresholds[str(container.get("name"))] = limit
    for container_stats in stats.containers:
        used = disk_usage_quantity(container_stats.logs)
        if not dedicated_image_fs:
            used = used + disk_usage_quantity(container_stats.rootfs)
        limit = thresholds.get(container_stats.name)
        if limit is not None and limit < used:
            return Eviction(pod, SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT,
                            CONTAINER_EPHEMERAL_STORAGE_MESSAGE.format(
                                container=container_stats.name, limit=go_quote(str(limit))))
    return None


def local_storage_eviction(
    pods: Sequence[Mapping[str, Any]],
    stats: Summary,
    gates: Mapping[str, bool] | None = None,
) -> list[Eviction]:
    """The evictions `localStorageEviction` decides for the active `pods` (at most one per
    pod, the first check that hits). Pods without stats and critical pods are skipped."""
    evictions: list[Eviction] = []
    for pod in pods:
        pod_stats = stats.pod(pod_uid(pod))
        if pod_stats is None or is_critical_pod(pod):
            continue
        eviction = (
            empty_dir_limit_eviction(pod, pod_stats)
            or pod_limit_eviction(pod, pod_stats, gates)
            or container_limit_eviction(pod, pod_stats, stats.dedicated_image_fs)
        )
        if eviction is not None:
            evictions.append(eviction)
    return evictions

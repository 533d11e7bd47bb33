"""Shared eviction vocabulary: the `Eviction` decision, upstream's reason, message formats,
metric signal names and the critical-pod rule (`pkg/kubelet/eviction/helpers.go`,
`eviction_manager.go`, `pkg/kubelet/types/pod_update.go`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "CONTAINER_EPHEMERAL_STORAGE_MESSAGE",
    "EMPTY_DIR_MESSAGE",
    "IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS",
    "NODE_CONDITION_MESSAGE",
    "POD_EPHEMERAL_STORAGE_MESSAGE",
    "POD_LEVEL_EPHEMERAL_STORAGE_MESSAGE",
    "REASON",
    "SIGNAL_EMPTY_DIR_FS_LIMIT",
    "SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT",
    "SIGNAL_EPHEMERAL_POD_FS_LIMIT",
    "SYSTEM_CRITICAL_PRIORITY",
    "Eviction",
    "is_critical_pod",
    "pod_priority",
    "pod_uid",
]

REASON: Final = "Evicted"  # status.reason and event reason
IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS: Final = 1

EMPTY_DIR_MESSAGE: Final = "Usage of EmptyDir volume {volume} exceeds the limit {limit}. "
POD_EPHEMERAL_STORAGE_MESSAGE: Final = (
    "Pod ephemeral local storage usage exceeds the total limit of containers {limit}. ")
# KEP-6386's text, "Evicted: " included (reference k8s-semantics.md 1).
POD_LEVEL_EPHEMERAL_STORAGE_MESSAGE: Final = (
    "Evicted: Pod ephemeral local storage usage ({used}) exceeds pod-level limit ({limit})")
CONTAINER_EPHEMERAL_STORAGE_MESSAGE: Final = (
    "Container {container} exceeded its local ephemeral storage limit {limit}. ")
NODE_CONDITION_MESSAGE: Final = "The node had condition: {conditions}. "

# kubelet_evictions{eviction_signal=...} labels of the local-storage checks.
SIGNAL_EMPTY_DIR_FS_LIMIT: Final = "emptydirfs.limit"
SIGNAL_EPHEMERAL_POD_FS_LIMIT: Final = "ephemeralpodfs.limit"
SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT: Final = "ephemeralcontainerfs.limit"

SYSTEM_CRITICAL_PRIORITY: Final = 2 * 1_000_000_000
_CONFIG_SOURCE: Final = "kubernetes.io/config.source"
_CONFIG_MIRROR: Final = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class Eviction:
    """One pod to evict: kill its containers (grace `grace_period_seconds`), set `phase:
    Failed`, `reason: Evicted`, `message`, add `condition` (if any) to its status, emit a
    Warning `Evicted` event with `message` and `annotations`, and count
    `kubelet_evictions{eviction_signal=signal}`."""

    pod: Mapping[str, Any]
    signal: str
    message: str
    grace_period_seconds: int = IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS
    annotations: Mapping[str, str] = field(default_factory=dict)
    condition: Mapping[str, str] | None = None

    @property
    def reason(self) -> str:
        return REASON


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    md = pod.get("metadata")
    annotations = md.get("annotations") if isinstance(md, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def pod_uid(pod: Mapping[str, Any]) -> str:
    md = pod.get("metadata")
    return str((md.get("uid") if isinstance(md, Mapping) else "") or "")


def pod_priority(pod: Mapping[str, Any]) -> int:
    """`corev1helpers.PodPriority`: `spec.priority`, 0 when unset."""
    spec = pod.get("spec")
    priority = spec.get("priority") if isinstance(spec, Mapping) else None
    return priority if isinstance(priority, int) and not isinstance(priority, bool) else 0


def is_critical_pod(pod: Mapping[str, Any]) -> bool:
    """`IsCriticalPod`: a static pod (config source other than the API), a mirror pod, or a
    priority of at least system-cluster-critical's 2000000000. Never evicted; admitted under
    pressure."""
    annotations = _annotations(pod)
    source = annotations.get(_CONFIG_SOURCE)
    if source is not None and source != "api":
        return True
    if _CONFIG_MIRROR in annotations:
        return True
    return pod_priority(pod) >= SYSTEM_CRITICAL_PRIORITY

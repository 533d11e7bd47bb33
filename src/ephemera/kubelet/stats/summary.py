"""The kubelet Summary API document (`GET /stats/summary`), with upstream's JSON field names
(`k8s.io/kubelet/pkg/apis/stats/v1alpha1` `Summary`, `NodeStats`, `PodStats`,
`ContainerStats`, `VolumeStats`, `FsStats`).

`summary_json(summary)` gives `{"node": {"nodeName", "startTime", "fs", "runtime":
{"imageFs"}}, "pods": [{"podRef": {"name", "namespace", "uid"}, "startTime", "containers":
[{"name", "startTime", "rootfs", "logs"}], "volume": [{"name", <FsStats fields inline>}],
"ephemeral-storage": {...}}]}`. FsStats fields: `time`, `availableBytes`, `capacityBytes`,
`usedBytes`, `inodesFree`, `inodes`, `inodesUsed`; absent values are omitted (Go's
`omitempty` on pointers). Times are RFC 3339 in UTC, to the second (`metav1.Time`).
Memory (`MemoryStats`: `time`, `availableBytes`, `usageBytes`, `workingSetBytes`,
`rssBytes`) on the node, its `systemContainers` (`pods`), each pod and each running
container; the node's `rlimit` (`time`, `maxpid`, `curproc`) and each pod's
`process_stats.process_count`. ephemera reports no cpu or network stats: those fields are
absent, as upstream omits them when unknown.

Seam: the kubelet server's `/stats/summary` handler answers
`web.json_response(summary_json(await provider.get(pods, update=False)))`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ephemera.kubelet.stats.provider import (
    ContainerStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodStats,
    Summary,
    VolumeStats,
)

__all__ = ["fs_stats_json", "memory_stats_json", "rfc3339", "summary_json"]


def rfc3339(seconds: float) -> str:
    """`metav1.Time` JSON: RFC 3339, UTC, whole seconds."""
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fs_stats_json(fs: FsStats) -> dict[str, Any]:
    out: dict[str, Any] = {"time": rfc3339(fs.time)}
    for key, value in (
        ("availableBytes", fs.available_bytes),
        ("capacityBytes", fs.capacity_bytes),
        ("usedBytes", fs.used_bytes),
        ("inodesFree", fs.inodes_free),
        ("inodes", fs.inodes),
        ("inodesUsed", fs.inodes_used),
    ):
        if value is not None:
            out[key] = value
    return out


def memory_stats_json(memory: MemoryStats) -> dict[str, Any]:
    out: dict[str, Any] = {"time": rfc3339(memory.time)}
    for key, value in (
        ("availableBytes", memory.available_bytes),
        ("usageBytes", memory.usage_bytes),
        ("workingSetBytes", memory.working_set_bytes),
        ("rssBytes", memory.rss_bytes),
    ):
        if value is not None:
            out[key] = value
    return out


def _node_json(node: NodeStats) -> dict[str, Any]:
    out: dict[str, Any] = {"nodeName": node.node_name}
    if node.system_containers:
        out["systemContainers"] = [_container_json(c) for c in node.system_containers]
    out["startTime"] = rfc3339(node.start_time)
    if node.memory is not None:
        out["memory"] = memory_stats_json(node.memory)
    if node.fs is not None:
        out["fs"] = fs_stats_json(node.fs)
    if node.image_fs is not None:
        out["runtime"] = {"imageFs": fs_stats_json(node.image_fs)}
    if node.rlimit is not None:
        out["rlimit"] = {"time": rfc3339(node.rlimit.time), "maxpid": node.rlimit.maxpid,
                         "curproc": node.rlimit.curproc}
    return out


def _container_json(container: ContainerStats) -> dict[str, Any]:
    out: dict[str, Any] = {"name": container.name, "startTime": rfc3339(container.start_time)}
    if container.memory is not None:
        out["memory"] = memory_stats_json(container.memory)
    if container.rootfs is not None:
        out["rootfs"] = fs_stats_json(container.rootfs)
    if container.logs is not None:
        out["logs"] = fs_stats_json(container.logs)
    return out


def _volume_json(volume: VolumeStats) -> dict[str, Any]:
    return {**fs_stats_json(volume.fs), "name": volume.name}


def _pod_json(pod: PodStats) -> dict[str, Any]:
    out: dict[str, Any] = {
        "podRef": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "startTime": rfc3339(pod.start_time),
        "containers": [_container_json(c) for c in pod.containers],
    }
    if pod.memory is not None:
        out["memory"] = memory_stats_json(pod.memory)
    if pod.volumes:
        out["volume"] = [_volume_json(v) for v in pod.volumes]
    if pod.ephemeral_storage is not None:
        out["ephemeral-storage"] = fs_stats_json(pod.ephemeral_storage)
    if pod.process_count:  # omitempty
        out["process_stats"] = {"process_count": pod.process_count}
    return out


def summary_json(summary: Summary) -> dict[str, Any]:
    """The `/stats/summary` document for `summary`."""
    return {"node": _node_json(summary.node), "pods": [_pod_json(p) for p in summary.pods]}

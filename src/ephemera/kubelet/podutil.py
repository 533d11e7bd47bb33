"""Small facts about a pod that the kubelet's parts share: upstream's `format.Pod`
(`name_namespace(uid)`), Go's duration text, the labels the kubelet puts on its sandboxes and
containers (kuberuntime's `labels.go`), where a pod's CRI logs live (and the restart count
they tell), and the mounts left under a directory. No I/O but `mounts_under` (a read of
/proc/self/mountinfo) and `restart_count_from_log_dir` (a directory listing)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "LABEL_CONTAINER_NAME",
    "LABEL_CONTAINER_TYPE",
    "LABEL_POD_NAME",
    "LABEL_POD_NAMESPACE",
    "LABEL_POD_UID",
    "container_log_path",
    "format_pod",
    "go_duration",
    "metadata",
    "mounts_under",
    "pod_log_dir",
    "pod_spec",
    "pod_terminal",
    "pod_uid",
    "restart_count_from_log_dir",
]

# Labels the kubelet puts on its sandboxes and containers (upstream's names).
LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_POD_NAME = "io.kubernetes.pod.name"
LABEL_POD_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"
LABEL_CONTAINER_TYPE = "ephemera.io/container-type"  # "init" or "regular"


def go_duration(seconds: float) -> str:
    """A duration as Go's `time.Duration.String` prints it (`10s`, `1m20s`, `5m0s`,
    `500ms`)."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms" if ms >= 1 else f"{seconds * 1e6:g}µs"
    total = round(seconds, 9)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    sec_text = f"{secs:.9f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{sec_text}"
    if minutes:
        return f"{int(minutes)}m{sec_text}"
    return sec_text


def format_pod(pod: Mapping[str, Any]) -> str:
    """`name_namespace(uid)`, upstream's `format.Pod`."""
    md = pod.get("metadata") or {}
    return f"{md.get('name')}_{md.get('namespace')}({md.get('uid')})"


def metadata(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    md = pod.get("metadata")
    return md if isinstance(md, dict) else {}


def pod_spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, dict) else {}


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str(metadata(pod).get("uid") or "")


def pod_terminal(pod: Mapping[str, Any]) -> bool:
    """The pod's phase is terminal (Succeeded or Failed)."""
    status = pod.get("status")
    return isinstance(status, dict) and status.get("phase") in ("Succeeded", "Failed")


def pod_log_dir(root_dir: Path, pod: Mapping[str, Any]) -> Path:
    md = metadata(pod)
    # One join (the same path as three: `logs`, `pods`, the pod's directory).
    return root_dir / f"logs/pods/{md.get('namespace')}_{md.get('name')}_{md.get('uid')}"


def container_log_path(root_dir: Path, pod: Mapping[str, Any], container: str,
                       attempt: int) -> Path:
    """The CRI log file of one container instance:
    `<root>/logs/pods/<ns>_<name>_<uid>/<container>/<attempt>.log`."""
    return pod_log_dir(root_dir, pod) / container / f"{attempt}.log"


_ATTEMPT_LOG = re.compile(r"^(\d+)\.log(\..*)?")


def restart_count_from_log_dir(log_dir: Path) -> int:
    """The restart count of a container the runtime has no instance of: one past the newest
    `<attempt>.log` (or rotated `<attempt>.log.*`) in its log directory, 0 when there is none
    (upstream's `calcRestartCountByLogDir`, which keeps counting across a node reboot)."""
    count = 0
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(log_dir):
            match = _ATTEMPT_LOG.match(entry.name)
            if match is not None and not entry.is_dir():
                count = max(count, int(match.group(1)) + 1)
    return count


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` (from /proc/self/mountinfo)."""
    prefix = str(path)
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 4:
                point = parts[4].replace("\\040", " ")
                if point == prefix or point.startswith(prefix + "/"):
                    found.append(point)
    return found

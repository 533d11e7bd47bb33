"""cgroup placement for the OCI backend: every container goes under a per-node parent,
`<own cgroup>/ephemera_<node>_<root hash>/pod<uid>/<container id>`, in each hierarchy.

"Own cgroup" is the kubelet's cgroup in that hierarchy, so containers stay inside whatever
the kubelet runs in (runc's semantics for a relative `cgroupsPath`, which the runc path
uses as is). crun refuses this host's hybrid v1+v2 layout, so for crun the backend runs it
with `--cgroup-manager=disabled` and prepares the v1 cgroups here instead (cpuset copied
down level by level, the default device allow-list, the memory limit); the shim moves the
runtime process into them before exec'ing it, so the container inherits them.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ephemera.kubelet.runtime.base import MemoryUsage

# runc's default device allow-list (libcontainer/specconv AllowedDevices), after "deny all".
ALLOWED_DEVICES = (
    "c *:* m", "b *:* m",
    # null, zero, full, random, urandom
    "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
    "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm",  # tty ptmx pts
)


@dataclass(frozen=True)
class Hierarchy:
    controllers: str  # as in /proc/self/cgroup: "memory", "cpu", "name=systemd", "" for v2
    mount: Path
    own: str  # this process's path in it, e.g. "/" or "/process_api/abc"

    def path(self, relative: str) -> Path:
        return self.mount / self.own.lstrip("/") / relative


def hierarchies() -> list[Hierarchy]:
    """The mounted cgroup hierarchies (v1 and the v2 one) with this process's place in each."""
    mounts: list[tuple[set[str], str, Path]] = []  # (super options, fstype, mount point)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = right.split()
            if len(fields) >= 3 and fields[0] in ("cgroup", "cgroup2"):
                mounts.append((set(fields[2].split(",")), fields[0], Path(left.split()[4])))
    result: list[Hierarchy] = []
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, own = line.rstrip("\n").split(":", 2)
            wanted = set(controllers.split(",")) if controllers else set()
            for options, fstype, mount in mounts:
                if (fstype == "cgroup2") if not controllers else (wanted <= options):
                    result.append(Hierarchy(controllers, mount, own))
                    break
    return result


def is_hybrid() -> bool:
    """cgroup v1 controllers plus a cgroup2 mount at /sys/fs/cgroup/unified (crun refuses
    this layout unless the cgroup2 mount is hidden from it)."""
    return os.path.ismount("/sys/fs/cgroup/unified")


def node_parent_name(node_name: str, root: Path) -> str:
    import hashlib

    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", node_name)[:63]
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:8]
    return f"ephemera_{safe}_{digest}"


def pod_relative(node_parent: str, pod_uid: str) -> str:
    return f"{node_parent}/pod{pod_uid}"


def pod_dirs(node_parent: str, pod_uid: str) -> list[str]:
    """The pod-level cgroup directories in every hierarchy (for cleanup)."""
    return [str(h.path(pod_relative(node_parent, pod_uid))) for h in hierarchies()]


def container_memory_dir(node_parent: str, pod_uid: str, container_id: str) -> str:
    """Where the container's memory cgroup is (or will be), for the OOM-kill count."""
    for hierarchy in hierarchies():
        if "memory" in hierarchy.controllers.split(","):
            relative = f"{pod_relative(node_parent, pod_uid)}/{container_id}"
            return str(hierarchy.path(relative))
    return ""


def _copy_cpuset(directory: Path) -> None:
    for name in ("cpuset.cpus", "cpuset.mems"):
        target = directory / name
        if target.exists() and not target.read_text().strip():
            target.write_text((directory.parent / name).read_text().strip() or "0")


def prepare_container(node_parent: str, pod_uid: str, container_id: str,
                      memory_limit: int) -> list[str]:
    """Create the container's v1 cgroups (for crun) and return their cgroup.procs files."""
    procs: list[str] = []
    relative = f"{pod_relative(node_parent, pod_uid)}/{container_id}"
    for hierarchy in hierarchies():
        if not hierarchy.controllers:
            continue  # the v2 part of a hybrid host: crun is kept away from it
        base = hierarchy.path("")
        current = base
        for part in relative.split("/"):
            current = current / part
            with contextlib.suppress(FileExistsError):
                current.mkdir()
            if "cpuset" in hierarchy.controllers.split(","):
                _copy_cpuset(current)
        controllers = hierarchy.controllers.split(",")
        if "devices" in controllers:
            (current / "devices.deny").write_text("a")
            for rule in ALLOWED_DEVICES:
                (current / "devices.allow").write_text(rule)
        if "memory" in controllers and memory_limit > 0:
            (current / "memory.limit_in_bytes").write_text(str(memory_limit))
            memsw = current / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                memsw.write_text(str(memory_limit))
        procs.append(str(current / "cgroup.procs"))
    return procs


def remove_dirs(dirs: list[str]) -> None:
    """rmdir each (deepest first); missing or still busy ones are left alone."""
    for directory in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def remove_pod(dirs: list[str]) -> None:
    """Remove a pod's cgroup dirs (and their leftover container children), then the node
    parent if it became empty."""
    for directory in dirs:
        path = Path(directory)
        if path.is_dir():
            children = [str(child) for child in path.iterdir() if child.is_dir()]
            remove_dirs(children)
        remove_dirs([directory])
        with contextlib.suppress(OSError):
            os.rmdir(path.parent)


# --- memory usage (what the eviction manager measures) ---------------------------------------


def _memory_stat(directory: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    with contextlib.suppress(OSError), open(directory / "memory.stat") as f:
        for line in f:
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                values[key] = int(value)
    return values


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def memory_usage(directory: str | Path) -> MemoryUsage | None:
    """The memory usage of the cgroup at `directory` (v1 or v2), as cAdvisor reads it:
    usage (`memory.usage_in_bytes` / `memory.current`), the working set (usage minus the
    inactive file pages, `total_inactive_file` / `inactive_file`, never below 0) and the rss
    (`total_rss` / `anon`). None when the cgroup does not exist (yet, or any more)."""
    path = Path(directory)
    v1 = _read_int(path / "memory.usage_in_bytes")
    usage = v1 if v1 is not None else _read_int(path / "memory.current")
    if usage is None:
        return None
    stat = _memory_stat(path)
    inactive = stat.get("total_inactive_file" if v1 is not None else "inactive_file", 0)
    rss = stat.get("total_rss" if v1 is not None else "anon", 0)
    return MemoryUsage(usage, max(0, usage - inactive), rss)


def root_memory_usage() -> MemoryUsage | None:
    """The whole machine's memory usage (the root memory cgroup; upstream's node
    `memory.workingSetBytes`). On cgroup v2 the root has no `memory.current`: the usage is
    `MemTotal - MemFree` from /proc/meminfo, the inactive file pages from the root's
    `memory.stat`, as runc's libcontainer does."""
    for hierarchy in hierarchies():
        if "memory" in hierarchy.controllers.split(","):
            return memory_usage(hierarchy.mount)
    meminfo: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                meminfo[key] = int(parts[0]) * 1024
    if "MemTotal" not in meminfo or "MemFree" not in meminfo:
        return None
    usage = meminfo["MemTotal"] - meminfo["MemFree"]
    stat = _memory_stat(Path("/sys/fs/cgroup"))
    return MemoryUsage(usage, max(0, usage - stat.get("inactive_file", 0)),
                       stat.get("anon", 0))


def controller_dir(controller: str, relative: str) -> Path | None:
    """`relative` (e.g. the node parent, a pod's cgroup) in the hierarchy of `controller`
    (`memory`, `pids`: its v1 hierarchy, else the v2 one), or None without that
    controller."""
    v2: Hierarchy | None = None
    for hierarchy in hierarchies():
        if controller in hierarchy.controllers.split(","):
            return hierarchy.path(relative)
        if not hierarchy.controllers:
            v2 = hierarchy
    if v2 is not None and controller in _read_controllers(v2.mount):
        return v2.path(relative)
    return None


def memory_dir(relative: str) -> Path | None:
    """`relative` in the memory hierarchy (see `controller_dir`)."""
    return controller_dir("memory", relative)


def pids_current(relative: str) -> int | None:
    """The tasks in cgroup `relative` and below (`pids.current`), or None (no pids
    controller, no such cgroup)."""
    directory = controller_dir("pids", relative)
    return None if directory is None else _read_int(directory / "pids.current")


def _read_controllers(mount: Path) -> list[str]:
    try:
        return (mount / "cgroup.controllers").read_text().split()
    except OSError:
        return []

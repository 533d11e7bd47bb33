"""The kubelet's stats provider: local ephemeral storage usage per container, volume, pod and
node, in the shape of upstream's Summary API (`pkg/kubelet/apis/stats/v1alpha1`).

What is measured (reference k8s-semantics.md 4.3, upstream `calcEphemeralStorage`):

- per container that the runtime created (as upstream keeps the latest container per name):
  `rootfs` = its writable layer, the overlay upper dir of its latest instance
  (`<root>/pods/<uid>/containers/<name>/<attempt>/upper`, runtime/oci.py), and `logs` = its
  log directory (`<root>/logs/pods/<ns>_<name>_<uid>/<container>/`, every attempt);
- per volume: every mounted volume with a host directory (not `image`, not `hostPath`), with
  `usedBytes`/`inodesUsed` from the backend and capacity/available/inodes from `statvfs` of
  the volume's filesystem;
- per pod: `ephemeral-storage` = the sum over containers of rootfs + logs (logs only when the
  rootfs stat exists), plus the **local ephemeral volumes** (`emptyDir` with the default
  medium, `configMap`, upstream's newest `IsLocalEphemeralVolume`; memory-backed emptyDirs,
  secrets, projected and downwardAPI volumes live on tmpfs and count as memory), plus the
  pod's `/etc/hosts` file when given;
- per node: `fs` = `statvfs` of the kubelet root (capacity, available, inodes, inodes free,
  used), `runtime.imageFs` = `statvfs` of the image store with `usedBytes` = the image
  store's usage (`dedicated_image_fs` tells whether it is another filesystem).

Memory (what the eviction manager's memory signals read, upstream's cAdvisor figures), from
`runtime_memory()` (the runtime's `memory_stats`, read through the `MemoryReadings` shape so
this package stays independent of the runtime's): the node's `memory` = the machine's
working set (`.node`: the root memory cgroup, usage minus inactive file pages) with
`availableBytes` = `memory_capacity` minus it; the `pods` system container = the node's pods
cgroup (`.pods`) with `availableBytes` =
`pods_memory_limit` (capacity minus the system and kube reservations, upstream's node
allocatable cgroup limit) minus its working set; each pod's and running container's working
set from the runtime (`RuntimeService.memory_stats`). Tasks: the node's `rlimit` (`maxpid`,
`curproc`: `rlimit.node_tasks`) and each pod's `process_count` (`runtime_processes`, the
runtime's `process_counts`), for `pid.available`. Read at every `get`.

Usage comes from a `UsageBackend`: `DuBackend` (du.py, a bounded directory walk run in a
thread) or any other implementation. A backend answers the last complete measurement of a
directory; a directory not measured yet has no stat (its `FsStats` is None), as upstream's
cached metrics do. `pod_totals(uid)`, when given (the loop-image backend of
`accounting.py`), answers a pod's whole usage in O(1); it then replaces the sum as the
pod's `ephemeral-storage` usedBytes/inodesUsed.

Seam for the kubelet (wired by the agent, not here): build one `PodPaths` per admitted,
non-terminal pod with `pod_paths(root_dir, pod, mounted_volumes, pod_log_dir)`, where
`mounted_volumes` is `VolumeManager.mounted_volumes(uid)` and `pod_log_dir` is
`podutil.pod_log_dir(root_dir, pod)`; then `summary = await provider.get(pods)`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from ephemera.api.meta import parse_time
from ephemera.kubelet.stats.du import DiskUsage
from ephemera.kubelet.stats.rlimit import node_tasks

__all__ = [
    "SYSTEM_CONTAINER_PODS",
    "VOLUME_DISK",
    "VOLUME_MEMORY",
    "VOLUME_UNMEASURED",
    "ContainerPaths",
    "ContainerStats",
    "FsStats",
    "MemoryStats",
    "NodeStats",
    "PodPaths",
    "PodStats",
    "RlimitStats",
    "StatsProvider",
    "Summary",
    "UsageBackend",
    "VolumePaths",
    "VolumeStats",
    "is_local_ephemeral_volume",
    "latest_instance_dir",
    "memory_stats",
    "pod_paths",
    "statvfs_stats",
    "volume_kind",
]

log = logging.getLogger(__name__)

# How a pod volume is accounted.
VOLUME_DISK: Final = "disk"  # local ephemeral storage: counts toward the pod's ephemeral-storage
VOLUME_MEMORY: Final = "memory"  # tmpfs: reported in volume[], counts as memory
VOLUME_UNMEASURED: Final = "unmeasured"  # no metrics (hostPath, image, unknown)


# --- the Summary data (upstream stats/v1alpha1 types; JSON in summary.py) ---------------------


@dataclass(frozen=True)
class FsStats:
    """`FsStats`: None means the field is absent."""

    time: float
    available_bytes: int | None = None
    capacity_bytes: int | None = None
    used_bytes: int | None = None
    inodes_free: int | None = None
    inodes: int | None = None
    inodes_used: int | None = None


class MemoryReading(Protocol):
    """A cgroup's memory as the runtime reads it (`runtime.base.MemoryUsage`)."""

    @property
    def usage_bytes(self) -> int: ...

    @property
    def working_set_bytes(self) -> int: ...

    @property
    def rss_bytes(self) -> int: ...


class PodMemoryReading(Protocol):
    """A pod's (`runtime.base.PodMemory`): its cgroup and its running containers by name."""

    @property
    def pod(self) -> MemoryReading | None: ...

    @property
    def containers(self) -> Mapping[str, MemoryReading]: ...


class MemoryReadings(Protocol):
    """One reading of the runtime (`runtime.base.MemorySnapshot`)."""

    @property
    def time(self) -> float: ...

    @property
    def node(self) -> MemoryReading | None: ...

    @property
    def pods(self) -> MemoryReading | None: ...

    @property
    def by_pod(self) -> Mapping[str, PodMemoryReading]: ...


@dataclass(frozen=True)
class MemoryStats:
    """`MemoryStats`: None means the field is absent."""

    time: float
    available_bytes: int | None = None
    usage_bytes: int | None = None
    working_set_bytes: int | None = None
    rss_bytes: int | None = None


def memory_stats(usage: MemoryReading, at: float, limit: int | None = None) -> MemoryStats:
    """`MemoryStats` of a cgroup's `usage`; `availableBytes` = `limit` - working set when
    the cgroup has a limit (as upstream's `cadvisorInfoToContainerStats`)."""
    return MemoryStats(
        time=at,
        available_bytes=None if limit is None else limit - usage.working_set_bytes,
        usage_bytes=usage.usage_bytes,
        working_set_bytes=usage.working_set_bytes,
        rss_bytes=usage.rss_bytes,
    )


@dataclass(frozen=True)
class RlimitStats:
    """`RlimitStats`: the node's task limit and the tasks that exist."""

    time: float
    maxpid: int
    curproc: int


@dataclass(frozen=True)
class ContainerStats:
    name: str
    start_time: float
    rootfs: FsStats | None = None
    logs: FsStats | None = None
    memory: MemoryStats | None = None


@dataclass(frozen=True)
class VolumeStats:
    name: str
    fs: FsStats


@dataclass(frozen=True)
class PodStats:
    uid: str
    namespace: str
    name: str
    start_time: float
    containers: tuple[ContainerStats, ...] = ()
    volumes: tuple[VolumeStats, ...] = ()
    ephemeral_storage: FsStats | None = None
    memory: MemoryStats | None = None
    process_count: int | None = None  # `process_stats.process_count`

    def volume(self, name: str) -> VolumeStats | None:
        for volume in self.volumes:
            if volume.name == name:
                return volume
        return None


@dataclass(frozen=True)
class NodeStats:
    node_name: str
    start_time: float
    fs: FsStats | None = None
    image_fs: FsStats | None = None
    memory: MemoryStats | None = None
    system_containers: tuple[ContainerStats, ...] = ()  # "pods": the node's pods cgroup
    rlimit: RlimitStats | None = None

    def system_container(self, name: str) -> ContainerStats | None:
        for container in self.system_containers:
            if container.name == name:
                return container
        return None


SYSTEM_CONTAINER_PODS: Final = "pods"


@dataclass(frozen=True)
class Summary:
    node: NodeStats
    pods: tuple[PodStats, ...] = ()
    dedicated_image_fs: bool = False  # not part of the JSON; the eviction manager needs it

    def pod(self, uid: str) -> PodStats | None:
        for pod in self.pods:
            if pod.uid == uid:
                return pod
        return None


# --- what to measure ------------------------------------------------------------------------


@dataclass(frozen=True)
class ContainerPaths:
    name: str
    start_time: float = 0.0
    writable_layer: Path | None = None  # the overlay upper dir of the latest instance
    log_dir: Path | None = None  # the container's log directory (all attempts)


@dataclass(frozen=True)
class VolumePaths:
    name: str
    host_dir: Path
    kind: str = VOLUME_DISK  # VOLUME_DISK / VOLUME_MEMORY / VOLUME_UNMEASURED


@dataclass(frozen=True)
class PodPaths:
    uid: str
    namespace: str
    name: str
    start_time: float = 0.0
    containers: tuple[ContainerPaths, ...] = ()
    volumes: tuple[VolumePaths, ...] = ()
    etc_hosts: Path | None = None  # counted into ephemeral-storage (newer upstream)

    def directories(self) -> list[Path]:
        """Every path a backend must measure for this pod."""
        paths: list[Path] = []
        for container in self.containers:
            if container.writable_layer is not None:
                paths.append(container.writable_layer)
            if container.log_dir is not None:
                paths.append(container.log_dir)
        paths.extend(v.host_dir for v in self.volumes if v.kind != VOLUME_UNMEASURED)
        if self.etc_hosts is not None:
            paths.append(self.etc_hosts)
        return paths


def is_local_ephemeral_volume(volume: Mapping[str, Any]) -> bool:
    """Upstream's newest `IsLocalEphemeralVolume`: gitRepo, emptyDir with the default medium,
    configMap."""
    if volume.get("gitRepo") is not None or volume.get("configMap") is not None:
        return True
    empty_dir = volume.get("emptyDir")
    return isinstance(empty_dir, Mapping) and not empty_dir.get("medium")


def volume_kind(volume: Mapping[str, Any]) -> str:
    """How the pod volume `volume` (a `spec.volumes[]` item) is accounted."""
    if is_local_ephemeral_volume(volume):
        return VOLUME_DISK
    for key in ("emptyDir", "secret", "projected", "downwardAPI"):
        if volume.get(key) is not None:
            return VOLUME_MEMORY
    return VOLUME_UNMEASURED


def latest_instance_dir(pod_dir: Path, container: str) -> Path | None:
    """`<pod_dir>/containers/<container>/<attempt>` with the highest attempt, or None."""
    try:
        attempts = [int(p.name) for p in (pod_dir / "containers" / container).iterdir()
                    if p.name.isdigit()]
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not attempts:
        return None
    return pod_dir / "containers" / container / str(max(attempts))


def _parse_time(value: Any) -> float:
    moment = parse_time(value)
    return moment.timestamp() if moment is not None else 0.0


def pod_paths(
    root_dir: Path,
    pod: Mapping[str, Any],
    mounted_volumes: Mapping[str, Path],
    pod_log_dir: Path,
    *,
    etc_hosts: Path | None = None,
) -> PodPaths:
    """The directories to measure for `pod` (a pod object) on a kubelet rooted at `root_dir`:
    each container of `spec.initContainers` and `spec.containers` that has an instance
    directory, each volume of `mounted_volumes` (name -> host dir) classified by its spec."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    uid = str(md.get("uid") or "")
    pod_dir = Path(root_dir) / "pods" / uid
    starts: dict[str, float] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            running = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
            starts[str(cs.get("name"))] = _parse_time(running)
    containers: list[ContainerPaths] = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            name = str(c.get("name") or "")
            instance = latest_instance_dir(pod_dir, name)
            containers.append(ContainerPaths(
                name=name,
                start_time=starts.get(name, 0.0),
                writable_layer=None if instance is None else instance / "upper",
                log_dir=Path(pod_log_dir) / name,
            ))
    volumes: list[VolumePaths] = []
    specs = {str(v.get("name")): v for v in spec.get("volumes") or [] if isinstance(v, Mapping)}
    for name, host_dir in mounted_volumes.items():
        volume = specs.get(name)
        kind = VOLUME_UNMEASURED if volume is None else volume_kind(volume)
        if kind != VOLUME_UNMEASURED:
            volumes.append(VolumePaths(name, Path(host_dir), kind))
    return PodPaths(
        uid=uid,
        namespace=str(md.get("namespace") or ""),
        name=str(md.get("name") or ""),
        start_time=_parse_time(status.get("startTime")),
        containers=tuple(containers),
        volumes=tuple(volumes),
        etc_hosts=etc_hosts,
    )


# --- backends -------------------------------------------------------------------------------


class UsageBackend(Protocol):
    """Measures directory trees (allocated bytes and inodes); `DuBackend` is one."""

    async def measure(self, paths: Sequence[Path]) -> None:
        """Bring the measurements of `paths` up to date (one bounded pass; never blocks the
        event loop)."""

    def usage(self, path: Path) -> DiskUsage | None:
        """The last complete measurement of `path`, or None."""


def statvfs_stats(path: Path, now: float | None = None) -> FsStats | None:
    """Capacity, available bytes and inodes of the filesystem holding `path` (None when
    `path` does not exist). `used_bytes` is (blocks - free blocks) * fragment size."""
    try:
        st = os.statvfs(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return FsStats(
        time=time.time() if now is None else now,
        available_bytes=st.f_bavail * st.f_frsize,
        capacity_bytes=st.f_blocks * st.f_frsize,
        used_bytes=(st.f_blocks - st.f_bfree) * st.f_frsize,
        inodes_free=st.f_ffree,
        inodes=st.f_files,
        inodes_used=st.f_files - st.f_ffree,
    )


def _device(path: Path) -> int | None:
    try:
        return os.stat(path).st_dev
    except FileNotFoundError:
        return None


def _add(total: int | None, more: int | None) -> int | None:
    if more is None:
        return total
    return more if total is None else total + more


@dataclass
class StatsProvider:
    """Builds the `Summary` from a `UsageBackend` (see the module docstring)."""

    node_name: str
    root_dir: Path
    backend: UsageBackend
    image_dir: Path | None = None  # the image store's root (imageFs); None: no imageFs stats
    start_time: float = field(default_factory=time.time)
    # A pod's whole usage in O(1) (accounting.py's loop images), None: sum the directories.
    pod_totals: Callable[[str], DiskUsage | None] | None = None
    # Memory (see the module docstring); 0 / None: no memory stats.
    memory_capacity: int = 0
    pods_memory_limit: int = 0
    runtime_memory: Callable[[], Awaitable[MemoryReadings | None]] | None = None
    runtime_processes: Callable[[], Awaitable[Mapping[str, int] | None]] | None = None
    _memory: MemoryReadings | None = field(default=None, init=False, repr=False)
    _processes: Mapping[str, int] | None = field(default=None, init=False, repr=False)
    _rlimit: RlimitStats | None = field(default=None, init=False, repr=False)

    @property
    def dedicated_image_fs(self) -> bool:
        if self.image_dir is None:
            return False
        image_dev, root_dev = _device(self.image_dir), _device(self.root_dir)
        return image_dev is not None and root_dev is not None and image_dev != root_dev

    async def get(self, pods: Sequence[PodPaths], update: bool = True) -> Summary:
        """The Summary for `pods`; with `update`, one measuring pass of the disk usage first.
        Memory is read every time (a few cgroup files)."""
        if update:
            paths = [p for pod in pods for p in pod.directories()]
            if self.image_dir is not None:
                paths.append(self.image_dir)
            await self.backend.measure(paths)
        await self.measure_runtime()
        return self.build(pods)

    async def measure_runtime(self) -> None:
        """Read the machine's and the pods' memory and tasks (kept for `build`); a failed
        reading leaves the Summary without those stats, not without a Summary."""
        tasks = node_tasks()
        self._rlimit = None if tasks is None else RlimitStats(time.time(), *tasks)
        if self.runtime_memory is not None:
            try:
                self._memory = await self.runtime_memory()
            except Exception as err:  # the runtime's error, whatever it is: logged
                log.warning("stats: reading the memory failed: %s", err)
                self._memory = None
        if self.runtime_processes is not None:
            try:
                self._processes = await self.runtime_processes()
            except Exception as err:
                log.warning("stats: counting the pods' tasks failed: %s", err)
                self._processes = None

    def _usage_stats(self, path: Path | None, fs: FsStats | None) -> FsStats | None:
        if path is None:
            return None
        usage = self.backend.usage(path)
        if usage is None:
            return None
        return FsStats(
            time=usage.time,
            available_bytes=None if fs is None else fs.available_bytes,
            capacity_bytes=None if fs is None else fs.capacity_bytes,
            used_bytes=usage.bytes,
            inodes_free=None if fs is None else fs.inodes_free,
            inodes=None if fs is None else fs.inodes,
            inodes_used=usage.inodes,
        )

    def build(self, pods: Sequence[PodPaths]) -> Summary:
        """The Summary from the backend's current measurements (no measuring)."""
        now = time.time()
        node_fs = statvfs_stats(self.root_dir, now)
        image_fs: FsStats | None = None
        if self.image_dir is not None:
            image_fs = statvfs_stats(self.image_dir, now)
            usage = self.backend.usage(self.image_dir)
            if image_fs is not None and usage is not None:
                image_fs = FsStats(
                    time=now, available_bytes=image_fs.available_bytes,
                    capacity_bytes=image_fs.capacity_bytes, used_bytes=usage.bytes,
                    inodes_free=image_fs.inodes_free, inodes=image_fs.inodes,
                    inodes_used=usage.inodes)
        pod_stats = tuple(self._pod_stats(pod, node_fs, now) for pod in pods)
        node_memory: MemoryStats | None = None
        system: tuple[ContainerStats, ...] = ()
        snapshot = self._memory
        if snapshot is not None:
            if snapshot.node is not None and self.memory_capacity > 0:
                node_memory = memory_stats(snapshot.node, snapshot.time, self.memory_capacity)
            if snapshot.pods is not None:
                limit = self.pods_memory_limit if self.pods_memory_limit > 0 else None
                system = (ContainerStats(SYSTEM_CONTAINER_PODS, self.start_time,
                                         memory=memory_stats(snapshot.pods, snapshot.time,
                                                             limit)),)
        return Summary(
            node=NodeStats(self.node_name, self.start_time, node_fs, image_fs, node_memory,
                           system, self._rlimit),
            pods=pod_stats,
            dedicated_image_fs=self.dedicated_image_fs,
        )

    def _pod_stats(self, pod: PodPaths, node_fs: FsStats | None, now: float) -> PodStats:
        # Upstream: rootfs on the container (image) fs, logs and volumes on the node fs; one
        # filesystem here unless the image store is elsewhere (the writable layers are under
        # the kubelet root either way).
        snapshot = self._memory
        memory = snapshot.by_pod.get(pod.uid) if snapshot is not None else None
        containers = tuple(
            ContainerStats(
                name=c.name,
                start_time=c.start_time,
                rootfs=self._usage_stats(c.writable_layer, node_fs),
                logs=self._usage_stats(c.log_dir, node_fs),
                memory=(None if memory is None or c.name not in memory.containers
                        or snapshot is None
                        else memory_stats(memory.containers[c.name], snapshot.time)),
            )
            for c in pod.containers
            # not created by the runtime yet (no writable layer, not running): no stats
            if c.writable_layer is not None or (memory is not None
                                                and c.name in memory.containers)
        )
        volumes: list[VolumeStats] = []
        for volume in pod.volumes:
            if volume.kind == VOLUME_UNMEASURED:
                continue
            fs = statvfs_stats(volume.host_dir, now)
            stats = self._usage_stats(volume.host_dir, fs)
            if stats is not None:
                volumes.append(VolumeStats(volume.name, stats))
        return PodStats(
            uid=pod.uid,
            namespace=pod.namespace,
            name=pod.name,
            start_time=pod.start_time,
            containers=containers,
            volumes=tuple(volumes),
            ephemeral_storage=self._ephemeral_storage(pod, containers, volumes, node_fs, now),
            memory=(None if memory is None or memory.pod is None or snapshot is None
                    else memory_stats(memory.pod, snapshot.time)),
            process_count=(self._processes or {}).get(pod.uid),
        )

    def _ephemeral_storage(
        self,
        pod: PodPaths,
        containers: Sequence[ContainerStats],
        volumes: Sequence[VolumeStats],
        node_fs: FsStats | None,
        now: float,
    ) -> FsStats:
        """Upstream's `calcEphemeralStorage`."""
        used: int | None = None
        inodes_used: int | None = None
        latest = 0.0
        for container in containers:
            if container.rootfs is None:
                continue
            used = _add(used, container.rootfs.used_bytes)
            inodes_used = _add(inodes_used, container.rootfs.inodes_used)
            latest = max(latest, container.rootfs.time)
            if container.logs is not None:
                used = _add(used, container.logs.used_bytes)
                inodes_used = _add(inodes_used, container.logs.inodes_used)
                latest = max(latest, container.logs.time)
        disk_volumes = {v.name for v in pod.volumes if v.kind == VOLUME_DISK}
        for volume in volumes:
            if volume.name in disk_volumes:
                used = _add(used, volume.fs.used_bytes)
                inodes_used = _add(inodes_used, volume.fs.inodes_used)
                latest = max(latest, volume.fs.time)
        hosts = self._usage_stats(pod.etc_hosts, None)
        if hosts is not None:
            used = _add(used, hosts.used_bytes)
            inodes_used = _add(inodes_used, hosts.inodes_used)
            latest = max(latest, hosts.time)
        total = self.pod_totals(pod.uid) if self.pod_totals is not None else None
        if total is not None:
            used, inodes_used, latest = total.bytes, total.inodes, total.time
        return FsStats(
            time=latest or now,
            available_bytes=None if node_fs is None else node_fs.available_bytes,
            capacity_bytes=None if node_fs is None else node_fs.capacity_bytes,
            used_bytes=used,
            inodes_free=None if node_fs is None else node_fs.inodes_free,
            inodes=None if node_fs is None else node_fs.inodes,
            inodes_used=inodes_used,
        )

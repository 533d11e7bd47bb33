"""Pod workers: one asyncio task per pod, each running the pod's sync loop (upstream's
`pod_workers.go` + `kubelet.SyncPod` + `kuberuntime_manager.SyncPod`), and the runtime
relister that wakes them (upstream's PLEG).

A pod's sync:

0. **Storage** (first sync only, with `WorkerDeps.pod_storage`): the accounting backend
   sets up the pod's storage (e.g. a loop-mounted image on its directory) before anything
   is written for it; the volume manager sees the pod only then. It is released after the
   volumes are torn down, before the pod's directories are removed.
1. **Volumes** (first start only): `VolumeManager.wait_for_pod_volumes`, in short slices so
   that a deletion is seen at once. Until they are mounted the containers wait in
   `ContainerCreating`; after `mount_timeout` (upstream's 2m3s) the `FailedMount` event
   `Unable to attach or mount volumes: ...` is posted and the wait starts again. Per-volume
   failures (`MountVolume.SetUp failed for volume "x" : ...`) are posted as `FailedMount` events
   as the volume manager reports them.
2. **Sandbox**: `run_pod_sandbox` (idempotent per pod UID, so a restarted kubelet adopts the
   sandbox it finds).
3. **Init containers** in order (each must exit 0 before the next starts; a failed one is
   restarted unless `restartPolicy: Never`, which fails the pod; sidecars
   (`restartPolicy: Always` init containers) are started and kept running), then the **main
   containers**: a container with no instance is started; an exited one is restarted as the
   restart policy says (`Always`; `OnFailure` when it failed; never for `Never`), subject to
   the CrashLoopBackOff back-off (upstream's `flowcontrol.Backoff`: the first restart is
   immediate, then 10 s doubling up to 300 s, reset when the container ran for twice the
   maximum, i.e. 10 minutes; `BackOffPolicy` shrinks it for tests). Waiting containers show
   `CrashLoopBackOff` with `back-off 10s restarting failed container=c pod=p_ns(uid)`, and a
   `BackOff` event. Running containers are never touched, so a restarted kubelet adopts them.
4. **Images** from the local store (`ImageStore.resolve`): `imagePullPolicy: Never` with a
   missing image gives `ErrImageNeverPull`; `Always`/`IfNotPresent` with a missing image
   "pulls" (ephemera pulls from no registry), fails with `ErrImagePull`, and is retried with
   the same back-off, showing `ImagePullBackOff` meanwhile; events `Pulling`, `Failed`,
   `BackOff`, `Pulled` (`Container image "x" already present on machine`) as upstream's.
5. **Container config** (`containerconfig`): env (ConfigMaps, Secrets, downward API), argv,
   working dir, mounts (host dirs of the volume manager, subPath), the CRI log file
   `<root>/logs/pods/<ns>_<name>_<uid>/<container>/<attempt>.log`; a config error is
   `CreateContainerConfigError`, a runtime create error `CreateContainerError`, a start error
   `RunContainerError`, each with a `Failed` event (`Error: <message>`). Events `Created`
   (`Created container: c`) and `Started` (`Started container c`). The two newest instances
   of each container are kept (the latest and the one `lastState` and `--previous` show).
6. **Status** (`status.generate_pod_status`) handed to the status manager.

**Dynamic changes** (KEP-6395 actuation; the worker's pod carries the *allocated* spec, see
`ephemera.kubelet.allocation`): after the first start, a container whose volumes are not all
set up yet waits alone (`ContainerCreating`) while the others keep running, and the volume
manager's notification wakes the worker when they are; a running container whose pod-volume
mounts differ from its spec and whose `dynamicVolumePolicy.restartPolicy` is
`RestartContainer` is stopped with the pod's grace period (a `Killing` event `Container c
definition changed, will be restarted`, upstream's text) and recreated with the new mounts
(no crash back-off); an added container starts; a removed one is stopped and its status kept
(at most `MAX_REMOVED_CONTAINER_STATUSES`, the oldest dropped with its runtime containers;
without `volumeMounts` once stopped, so the names of the volumes it mounted can be reused).
Before a container is stopped for a change, the status is published, so a removed volume
shows `Unmounting` while it stops.
Containers the API has but the node has not allocated show `waiting` `Unallocated`
(`Container addition pending node allocation`); `status.volumeStatuses` comes from the volume
manager, plus `Pending` for volumes not allocated yet.

A pod whose containers are all done for good (`Never`, or `OnFailure` with every container
succeeded, or a failed init container under `Never`) is terminal: its status says
`Succeeded`/`Failed`, its sandbox is stopped; its containers and logs stay (for
`kubectl logs`) until the pod is deleted.

**Termination** (the pod has a `deletionTimestamp`, or is gone from the API): every running
container gets SIGTERM, then SIGKILL after the grace period (`deletionGracePeriodSeconds`,
else `terminationGracePeriodSeconds`, at least 2 s as upstream's
`minimumGracePeriodInSeconds`; preStop hooks are not run: out of scope), the final status is
written (`Succeeded` or `Failed` from the exit codes), the containers and the sandbox are
removed, the volumes torn down (`VolumeManager.teardown_pod`), the pod's directories and logs
removed (only when no mount is left under them), and the pod is deleted with grace 0 (with a
UID precondition). A step that fails is retried.

The relister (`Relister`) lists the runtime's sandboxes and containers every
`relist_period` (1 s) and wakes the worker of every pod whose containers changed (started,
exited, appeared, vanished); workers also resync every `resync_period`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, resource_path
from ephemera.kubelet import containerconfig, events
from ephemera.kubelet.events import KubeletEvents
from ephemera.kubelet.runtime.base import (
    ContainerConfig,
    ContainerState,
    ContainerStatus,
    RuntimeError_,
    RuntimeService,
    SandboxConfig,
    SandboxStatus,
)
from ephemera.kubelet.status import (
    PodRuntimeView,
    StatusManager,
    container_status,
    generate_pod_status,
    rfc3339,
)
from ephemera.kubelet.volumes.manager import VolumeMountTimeout

__all__ = [
    "BackOff",
    "BackOffPolicy",
    "PodWorkers",
    "Relister",
    "WorkerDeps",
    "WorkerSettings",
    "format_pod",
    "go_duration",
    "pod_log_dir",
]

log = logging.getLogger(__name__)

MINIMUM_GRACE_PERIOD = 2.0
DEADLINE_EXCEEDED = "context deadline exceeded"
DEFAULT_GRACE_PERIOD = 30
# Labels the kubelet puts on its sandboxes and containers (upstream's names).
LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_POD_NAME = "io.kubernetes.pod.name"
LABEL_POD_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"
LABEL_CONTAINER_TYPE = "ephemera.io/container-type"  # "init" or "regular"
# KEP-5972: statuses of removed containers kept in the pod status (upstream keeps about 10).
MAX_REMOVED_CONTAINER_STATUSES = 10
UNALLOCATED_REASON = "Unallocated"
UNALLOCATED_MESSAGE = "Container addition pending node allocation"
RESTART_CONTAINER = "RestartContainer"

Obj = dict[str, Any]


# --- helpers ---------------------------------------------------------------------------------


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


def _md(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    md = pod.get("metadata")
    return md if isinstance(md, dict) else {}


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, dict) else {}


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str(_md(pod).get("uid") or "")


def pod_log_dir(root_dir: Path, pod: Mapping[str, Any]) -> Path:
    md = _md(pod)
    return root_dir / "logs" / "pods" / f"{md.get('namespace')}_{md.get('name')}_{md.get('uid')}"


def container_log_path(root_dir: Path, pod: Mapping[str, Any], container: str,
                       attempt: int) -> Path:
    return pod_log_dir(root_dir, pod) / container / f"{attempt}.log"


def _mounts_under(path: Path) -> list[str]:
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


def _container_names(pod: Mapping[str, Any]) -> set[str]:
    return {str(c.get("name")) for kind in ("initContainers", "containers", "ephemeralContainers")
            for c in _spec(pod).get(kind) or []}


def _mounts_differ(container: Mapping[str, Any], instance: ContainerStatus) -> bool:
    """The running instance's pod-volume mounts are not the ones the spec asks for."""
    wanted = {(str(m.get("name")), str(m.get("mountPath")))
              for m in container.get("volumeMounts") or []}
    have = {(m.volume_name, m.container_path) for m in instance.mounts if m.volume_name}
    return wanted != have


# --- back-off --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackOffPolicy:
    initial: float = 10.0
    maximum: float = 300.0

    @property
    def stable_after(self) -> float:
        """An entry is forgotten when the event comes this long after the last restart
        (upstream: twice the maximum)."""
        return 2 * self.maximum


@dataclass
class _BackOffEntry:
    delay: float
    last_update: float


class BackOff:
    """Upstream's `flowcontrol.Backoff`, keyed by string, on wall-clock seconds."""

    def __init__(self, policy: BackOffPolicy,
                 clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.clock = clock
        self._entries: dict[str, _BackOffEntry] = {}

    def _expired(self, entry: _BackOffEntry, event_time: float) -> bool:
        return event_time - entry.last_update > self.policy.stable_after

    def remaining(self, key: str, event_time: float) -> float:
        """Seconds left of the back-off window that started at `event_time` (0: not in
        back-off)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event_time):
            return 0.0
        left = entry.delay - (self.clock() - event_time)
        return left if left > 0 else 0.0

    def next(self, key: str, event_time: float) -> None:
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event_time):
            self._entries[key] = _BackOffEntry(self.policy.initial, self.clock())
        else:
            entry.delay = min(entry.delay * 2, self.policy.maximum)
            entry.last_update = self.clock()

    def get(self, key: str) -> float:
        entry = self._entries.get(key)
        return entry.delay if entry is not None else 0.0

    def forget_prefix(self, prefix: str) -> None:
        for key in [k for k in self._entries if k.startswith(prefix)]:
            del self._entries[key]


# --- what workers need -----------------------------------------------------------------------


class ImageLookup(Protocol):
    def resolve(self, ref: str) -> Any: ...


class VolumesLike(Protocol):
    async def wait_for_pod_volumes(self, pod: Mapping[str, Any], timeout: float) -> None: ...

    def mounted_volumes(self, pod_uid: str) -> dict[str, Path]: ...

    def volume_errors(self, pod_uid: str) -> dict[str, str]: ...

    async def teardown_pod(self, pod_uid: str) -> None: ...


class PodStorage(Protocol):
    """The pod's storage set-up (`ephemera.kubelet.stats.accounting`: e.g. a loop-mounted
    image on the pod directory): prepared before anything is written for the pod, released
    once its containers and volumes are gone."""

    async def prepare_pod(self, pod: Mapping[str, Any], log_dir: Path) -> None: ...

    async def release_pod(self, uid: str) -> None: ...


@dataclass(frozen=True)
class WorkerSettings:
    backoff: BackOffPolicy = BackOffPolicy()
    image_backoff: BackOffPolicy = BackOffPolicy()
    mount_timeout: float = 123.0  # upstream's 2m3s
    mount_wait_slice: float = 0.5
    resync_period: float = 10.0
    relist_period: float = 1.0
    retry_delay: float = 1.0
    minimum_grace_period: float = MINIMUM_GRACE_PERIOD
    # Instances kept per container (the latest and the previous one).
    keep_instances: int = 2


@dataclass
class WorkerDeps:
    api: ApiClient
    runtime: RuntimeService
    images: ImageLookup
    volumes: VolumesLike
    status: StatusManager
    events: KubeletEvents
    root_dir: Path
    node_name: str
    host_ip: str
    get_configmap: Callable[[str, str], Awaitable[dict[str, Any] | None]]
    get_secret: Callable[[str, str], Awaitable[dict[str, Any] | None]]
    node_allocatable: Mapping[str, Any] = field(default_factory=dict)
    settings: WorkerSettings = field(default_factory=WorkerSettings)
    # Called when the set of pods whose volumes are needed changes.
    on_volumes_changed: Callable[[], None] = lambda: None
    # Called with (container type, error code or "") on every container start attempt.
    on_container_started: Callable[[str, str], None] = lambda kind, code: None
    # Called with seconds from first seeing the pod to its containers running.
    on_pod_started: Callable[[float], None] = lambda seconds: None
    on_sync_done: Callable[[str, float], None] = lambda operation, seconds: None
    # Prepares and releases the pod's storage (None: plain directories).
    pod_storage: PodStorage | None = None


# --- a pod worker's runtime view (KEP-6395's IsVolumeInUseByPod) -----------------------------


class PodRuntimeCache:
    """A pod worker's in-memory view of its pod's containers, so that KEP-6395's
    `IsVolumeInUseByPod` needs no runtime call: the worker's last listing of its sandbox's
    containers, less the containers it has stopped since, plus the volumes of the containers
    it is starting (counted from before the create until a listing begun after the start
    shows the container). Unknown (None) until the worker has listed once."""

    def __init__(self) -> None:
        self._listings = 0  # listings begun
        self._containers: list[ContainerStatus] | None = None
        self._listed = 0  # the listing `_containers` came from
        self._next_token = 0
        # start token -> (volume names, listings begun when the start ended; inf: running)
        self._starting: dict[int, tuple[frozenset[str], float]] = {}
        self._stopped: dict[str, int] = {}  # container id -> listings begun when stopped

    def listing_begins(self) -> int:
        self._listings += 1
        return self._listings

    def listed(self, number: int, containers: Sequence[ContainerStatus]) -> None:
        """The listing `number` (from `listing_begins`) found these containers."""
        if number > self._listed:
            self._containers, self._listed = list(containers), number
        self._starting = {t: e for t, e in self._starting.items() if number <= e[1]}
        self._stopped = {c: n for c, n in self._stopped.items() if number <= n}

    def starting(self, volume_names: frozenset[str]) -> int:
        self._next_token += 1
        self._starting[self._next_token] = (volume_names, math.inf)
        return self._next_token

    def started(self, token: int) -> None:
        """The start `token` ended (the container created and started, or not)."""
        if token in self._starting:
            self._starting[token] = (self._starting[token][0], self._listings)

    def stopped(self, container_id: str) -> None:
        self._stopped[container_id] = self._listings

    def volume_in_use(self, volume_name: str) -> bool | None:
        if self._containers is None:
            return None
        if any(volume_name in names for names, _ in self._starting.values()):
            return True
        return any(c.state in (ContainerState.RUNNING, ContainerState.CREATED)
                   and c.id not in self._stopped
                   and any(m.volume_name == volume_name for m in c.mounts)
                   for c in self._containers)


# --- the relister (PLEG) ---------------------------------------------------------------------


@dataclass
class RuntimeSnapshot:
    sandboxes: dict[str, SandboxStatus] = field(default_factory=dict)  # id -> status
    containers: dict[str, ContainerStatus] = field(default_factory=dict)  # id -> status

    def pod_sandboxes(self, uid: str) -> list[SandboxStatus]:
        return [s for s in self.sandboxes.values() if s.pod_uid == uid]

    def pod_containers(self, uid: str) -> list[ContainerStatus]:
        ids = {s.id for s in self.pod_sandboxes(uid)}
        return [c for c in self.containers.values() if c.sandbox_id in ids]

    def pod_uids(self) -> set[str]:
        return {s.pod_uid for s in self.sandboxes.values()}


class Relister:
    """Lists the runtime periodically and reports the pods whose containers changed."""

    def __init__(self, runtime: RuntimeService, on_changed: Callable[[str], None],
                 period: float = 1.0,
                 on_duration: Callable[[float], None] | None = None) -> None:
        self.runtime = runtime
        self.on_changed = on_changed
        self.period = period
        self.on_duration = on_duration
        self.snapshot = RuntimeSnapshot()
        self.healthy = True
        self._synced = asyncio.Event()
        self._shared: asyncio.Future[None] | None = None

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def relist_shared(self) -> None:
        """A relist, shared by the callers that ask while it runs (so that the in-use checks
        of one volume reconciler pass list the runtime once)."""
        if self._shared is None or self._shared.done():
            self._shared = asyncio.ensure_future(self.relist())
            self._shared.add_done_callback(lambda f: f.cancelled() or f.exception())
        await asyncio.shield(self._shared)

    async def relist(self) -> None:
        started = time.monotonic()
        sandboxes = await self.runtime.list_pod_sandboxes()
        containers = await self.runtime.list_containers()
        fresh = RuntimeSnapshot({s.id: s for s in sandboxes}, {c.id: c for c in containers})
        old = self.snapshot
        self.snapshot = fresh
        changed: set[str] = set()
        owner = {s.id: s.pod_uid for s in [*old.sandboxes.values(), *fresh.sandboxes.values()]}
        for cid in set(old.containers) | set(fresh.containers):
            before, after = old.containers.get(cid), fresh.containers.get(cid)
            if before is None or after is None or before.state != after.state:
                ref = after or before
                assert ref is not None
                uid = owner.get(ref.sandbox_id)
                if uid:
                    changed.add(uid)
        for sid in set(old.sandboxes) | set(fresh.sandboxes):
            before_s, after_s = old.sandboxes.get(sid), fresh.sandboxes.get(sid)
            if before_s is None or after_s is None or before_s.ready != after_s.ready:
                changed.add((after_s or before_s).pod_uid)  # type: ignore[union-attr]
        self._synced.set()
        if self.on_duration is not None:
            self.on_duration(time.monotonic() - started)
        for uid in changed:
            self.on_changed(uid)

    async def run(self) -> None:
        while True:
            try:
                await self.relist()
                self.healthy = True
            except Exception as err:
                self.healthy = False
                log.warning("relisting the runtime failed: %s", err)
            await asyncio.sleep(self.period)


# --- one pod ---------------------------------------------------------------------------------


class _Restart(Exception):
    """Raised inside a sync to end it early and resync after `delay` seconds."""

    def __init__(self, delay: float | None) -> None:
        self.delay = delay


IDLE: float = math.inf  # resync only when woken


class PodWorker:
    def __init__(self, workers: PodWorkers, pod: Obj) -> None:
        self.workers = workers
        self.deps = workers.deps
        self.pod = pod
        self.uid = pod_uid(pod)
        self.removed = False  # gone from the API
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.sandbox_id: str | None = None
        self.waiting: dict[str, tuple[str, str]] = {}
        self.volumes_ready = False
        self.mount_wait_started: float | None = None
        self.first_seen = time.monotonic()
        self.start_reported = False
        self.terminal = False
        self.terminal_cleaned = False
        self.done = False
        self.needs_volumes = True
        # The pod's storage is set up (the volume manager waits for it).
        self.storage_ready = self.deps.pod_storage is None
        self.failed_mount_reported: dict[str, str] = {}
        # Containers and volumes the API has but the node has not allocated yet (KEP-6395).
        self.unallocated: list[Obj] = []
        self.unallocated_volumes: list[str] = []
        self._removed: list[Obj] = []  # statuses of removed containers
        # Set by `PodWorkers.evict`: (grace seconds, reason, message, condition or None).
        self.eviction: tuple[float, str, str, Mapping[str, str] | None] | None = None
        self.evicted = False
        self.runtime_cache = PodRuntimeCache()

    # -- loop --

    def _spawn(self, work: Awaitable[Any]) -> None:
        """Run `work` in the background; its failure is logged with the pod named."""
        self.workers.spawn(work, pod=self.pod)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(),
                                                           name=f"pod-worker-{self.uid}")

    async def _run(self) -> None:
        settings = self.deps.settings
        while not self.done:
            self.wake.clear()
            began = time.monotonic()
            try:
                delay = await self.sync()
            except asyncio.CancelledError:
                raise
            except _Restart as restart:
                delay = restart.delay if restart.delay is not None else IDLE
            except Exception:
                log.exception("syncing pod %s failed", format_pod(self.pod))
                delay = settings.retry_delay
            self.deps.on_sync_done("sync", time.monotonic() - began)
            if self.done:
                break
            wait = min(delay, settings.resync_period) if not self.terminal else delay
            if wait == IDLE:
                await self.wake.wait()
            elif wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self.wake.wait()
        self.workers._worker_done(self)

    # -- sync --

    def _deleting(self) -> bool:
        return self.removed or bool(_md(self.pod).get("deletionTimestamp"))

    async def sync(self) -> float:
        if self._deleting():
            return await self.terminate()
        if self.eviction is not None and not self.evicted:
            await self._evict()
            return IDLE
        phase = (self.pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") or self.terminal:
            await self._finish_terminal()
            return IDLE
        return await self._sync_running()

    async def _sync_running(self) -> float:
        deps = self.deps
        pod = self.pod
        if not self.storage_ready:
            await self._prepare_storage()
        await asyncio.to_thread(self._ensure_dirs)
        self._report_volume_errors()
        if not self.volumes_ready and not await self._wait_volumes():
            self._publish_status()
            return 0.0
        sandbox = await self._ensure_sandbox()
        instances = await self._instances()
        next_delay = IDLE
        init_done = True
        restart_policy = _spec(pod).get("restartPolicy") or "Always"
        for c in _spec(pod).get("initContainers") or []:
            name = str(c.get("name"))
            mine = instances.get(name, [])
            latest = mine[-1] if mine else None
            if c.get("restartPolicy") == "Always":  # a sidecar: keep it running
                if latest is not None and latest.state == ContainerState.RUNNING:
                    continue
                next_delay = min(next_delay, await self._start(c, latest, True))
                init_done = False
                break
            if latest is None:
                next_delay = min(next_delay, await self._start(c, None, True))
                init_done = False
                break
            if latest.state == ContainerState.RUNNING:
                init_done = False
                break
            if latest.state == ContainerState.EXITED and latest.exit_code == 0:
                continue
            if latest.state == ContainerState.EXITED and restart_policy == "Never":
                self.terminal = True
                init_done = False
                break
            next_delay = min(next_delay, await self._start(c, latest, True))
            init_done = False
            break
        if init_done and not self.terminal:
            for c in _spec(pod).get("containers") or []:
                name = str(c.get("name"))
                mine = instances.get(name, [])
                latest = mine[-1] if mine else None
                if latest is None:
                    if not self._volumes_ready_for(c):
                        continue  # an added container waits for its dynamic volumes
                    next_delay = min(next_delay, await self._start(c, None, False))
                    continue
                if latest.state == ContainerState.RUNNING:
                    self.waiting.pop(name, None)
                    if _mounts_differ(c, latest) and \
                            (c.get("dynamicVolumePolicy") or {}).get("restartPolicy") == \
                            RESTART_CONTAINER and self._volumes_ready_for(c):
                        # KEP-6395 actuation: recreate it with the allocated mounts. The
                        # status first, so that a removed volume shows `Unmounting` while
                        # the container stops (within its grace period).
                        self._publish_status(instances, sandbox)
                        await self._kill(latest, self._container_grace_period(),
                                         events.definition_changed_message(name))
                        next_delay = min(next_delay, await self._start(c, latest, False,
                                                                       actuation=True))
                    continue
                if not self._volumes_ready_for(c):
                    # A dynamic volume it needs is still being set up: only it waits.
                    self.waiting.setdefault(name, ("ContainerCreating", ""))
                    continue
                if latest.state == ContainerState.EXITED:
                    if self._should_restart(latest, restart_policy):
                        next_delay = min(next_delay, await self._start(c, latest, False))
                    else:
                        self.waiting.pop(name, None)
                    continue
                # Created but never started (a start that failed): try again.
                next_delay = min(next_delay, await self._start(c, latest, False))
            await self._stop_removed_containers(instances, sandbox)
            instances = await self._instances()
            if self._all_done(instances, restart_policy):
                self.terminal = True
        else:
            instances = await self._instances()
        sandbox = await self._sandbox_status() or sandbox
        self._removed = await self._removed_statuses(instances)
        self._publish_status(instances, sandbox)
        self._maybe_report_started(instances)
        if self.terminal:
            await deps.status.write(self.uid)
            await self._finish_terminal()
            return IDLE
        return next_delay

    def _volumes_ready_for(self, container: Mapping[str, Any]) -> bool:
        """Every pod volume the container mounts is set up on the host."""
        wanted = {str(m.get("name")) for m in container.get("volumeMounts") or []}
        if not wanted:
            return True
        mounted = self.deps.volumes.mounted_volumes(self.uid)
        return wanted.issubset(mounted)

    def _container_grace_period(self) -> float:
        grace = _spec(self.pod).get("terminationGracePeriodSeconds")
        if grace is None:
            grace = DEFAULT_GRACE_PERIOD
        return max(float(grace), self.deps.settings.minimum_grace_period)

    async def _stop_removed_containers(
            self, instances: Mapping[str, Sequence[ContainerStatus]],
            sandbox: SandboxStatus | None = None) -> None:
        """KEP-5972: a container removed from the allocated spec is stopped (with its grace
        period); its status is kept until garbage-collected (`_removed_statuses`). The status
        is published before the stop, so volumes that leave with it show `Unmounting` while
        it stops (KEP-6395)."""
        names = _container_names(self.pod)
        for name, mine in instances.items():
            if name in names:
                continue
            running = [c for c in mine if c.state in (ContainerState.RUNNING,
                                                       ContainerState.CREATED)]
            if running:
                self._removed = await self._removed_statuses(instances)
                self._publish_status(instances, sandbox)
                await asyncio.gather(*(self._kill(c, self._container_grace_period())
                                       for c in running))
            self.waiting.pop(name, None)

    async def _removed_statuses(
            self, instances: Mapping[str, Sequence[ContainerStatus]]) -> list[Obj]:
        """Statuses of removed containers, newest last, at most
        `MAX_REMOVED_CONTAINER_STATUSES`; the runtime containers of older ones are removed."""
        names = _container_names(self.pod)
        removed = [(name, mine) for name, mine in instances.items()
                   if name not in names and mine and mine[-1].labels.get(
                       LABEL_CONTAINER_TYPE) != "init"]
        removed.sort(key=lambda pair: (pair[1][-1].finished_at or math.inf,
                                       pair[1][-1].created_at))
        dropped = removed[:-MAX_REMOVED_CONTAINER_STATUSES] if \
            len(removed) > MAX_REMOVED_CONTAINER_STATUSES else []
        for _, mine in dropped:
            for c in mine:
                if c.state == ContainerState.EXITED:
                    with contextlib.suppress(RuntimeError_):
                        await self.deps.runtime.remove_container(c.id)
        kept = removed[len(dropped):]
        statuses = [container_status({"name": name, "image": mine[-1].image}, mine, None,
                                     "ContainerCreating", self.deps.runtime.name)
                    for name, mine in kept]
        for status, (_, mine) in zip(statuses, kept, strict=True):
            if mine[-1].state != ContainerState.RUNNING:
                # KEP-6395: a stopped container holds no mount; its kept status must not
                # keep the volume names from being reused (the API's anti-race rule).
                status.pop("volumeMounts", None)
        return statuses

    @staticmethod
    def _should_restart(latest: ContainerStatus, restart_policy: str) -> bool:
        if restart_policy == "Always":
            return True
        return restart_policy == "OnFailure" and latest.exit_code != 0

    def _all_done(self, instances: Mapping[str, Sequence[ContainerStatus]],
                  restart_policy: str) -> bool:
        if restart_policy == "Always":
            return False
        for c in _spec(self.pod).get("containers") or []:
            mine = instances.get(str(c.get("name")), [])
            if not mine:
                return False
            latest = mine[-1]
            if latest.state != ContainerState.EXITED:
                return False
            if self._should_restart(latest, restart_policy):
                return False
        return True

    def _maybe_report_started(self, instances: Mapping[str, Sequence[ContainerStatus]]) -> None:
        if self.start_reported:
            return
        regular = [str(c.get("name")) for c in _spec(self.pod).get("containers") or []]
        if regular and all(instances.get(n) and instances[n][-1].state in
                           (ContainerState.RUNNING, ContainerState.EXITED) for n in regular):
            self.start_reported = True
            self.deps.on_pod_started(time.monotonic() - self.first_seen)

    # -- pieces of a sync --

    async def _prepare_storage(self) -> None:
        """Set up the pod's storage before its directories; on failure the pod runs on
        plain directories."""
        assert self.deps.pod_storage is not None
        try:
            await self.deps.pod_storage.prepare_pod(self.pod,
                                                    pod_log_dir(self.deps.root_dir, self.pod))
        except Exception as err:
            log.warning("pod %s: setting up its storage: %s; using plain directories",
                        format_pod(self.pod), err)
        self.storage_ready = True
        self.deps.on_volumes_changed()

    def _ensure_dirs(self) -> None:
        root = self.deps.root_dir
        (root / "pods" / self.uid).mkdir(parents=True, exist_ok=True)
        pod_log_dir(root, self.pod).mkdir(parents=True, exist_ok=True)

    def _report_volume_errors(self) -> None:
        errors = self.deps.volumes.volume_errors(self.uid)
        for name, message in errors.items():
            if self.failed_mount_reported.get(name) == message:
                continue
            self.failed_mount_reported[name] = message
            if message.startswith("MountVolume.") or "failed" in message.lower():
                reason = events.FAILED_UNMOUNT if message.startswith("UnmountVolume.") else \
                    events.FAILED_MOUNT
                self._spawn(self.deps.events.pod(self.pod, events.WARNING, reason,
                                                        message))

    async def _wait_volumes(self) -> bool:
        """True once every volume is mounted; False after one slice of waiting."""
        settings = self.deps.settings
        now = time.monotonic()
        if self.mount_wait_started is None:
            self.mount_wait_started = now
        try:
            await self.deps.volumes.wait_for_pod_volumes(
                self.pod, timeout=max(0.01, min(settings.mount_wait_slice,
                                                settings.mount_timeout)))
        except VolumeMountTimeout as err:
            processing = err.cause != DEADLINE_EXCEEDED
            if processing or time.monotonic() - self.mount_wait_started >= \
                    settings.mount_timeout:
                await self.deps.events.pod(self.pod, events.WARNING, events.FAILED_MOUNT,
                                           str(err))
                self.mount_wait_started = None
                if processing:
                    self._publish_status()  # the containers wait: ContainerCreating
                    raise _Restart(settings.retry_delay) from None
            return False
        self.volumes_ready = True
        self.mount_wait_started = None
        return True

    def _sandbox_config(self) -> SandboxConfig:
        md = _md(self.pod)
        spec = _spec(self.pod)
        hostname = str(spec.get("hostname") or md.get("name") or "")[:63]
        return SandboxConfig(pod_uid=self.uid, namespace=str(md.get("namespace") or ""),
                             name=str(md.get("name") or ""), hostname=hostname,
                             host_network=bool(spec.get("hostNetwork")),
                             labels={LABEL_POD_UID: self.uid,
                                     LABEL_POD_NAME: str(md.get("name") or ""),
                                     LABEL_POD_NAMESPACE: str(md.get("namespace") or "")})

    async def _sandbox_status(self) -> SandboxStatus | None:
        if self.sandbox_id is None:
            return None
        for s in await self.deps.runtime.list_pod_sandboxes():
            if s.id == self.sandbox_id:
                return s
        return None

    async def _ensure_sandbox(self) -> SandboxStatus | None:
        runtime = self.deps.runtime
        if self.sandbox_id is not None:
            current = await self._sandbox_status()
            if current is not None and current.ready:
                return current
            if current is not None:
                # The sandbox died under its containers: start over, as upstream does.
                await self.deps.events.pod(self.pod, events.NORMAL, events.SANDBOX_CHANGED,
                                           "Pod sandbox changed, it will be killed and "
                                           "re-created.")
                await self._remove_runtime_state(grace=0)
            self.sandbox_id = None
        try:
            self.sandbox_id = await runtime.run_pod_sandbox(self._sandbox_config())
        except RuntimeError_ as err:
            await self.deps.events.pod(self.pod, events.WARNING,
                                       events.FAILED_CREATE_POD_SANDBOX,
                                       f"Failed to create pod sandbox: {err}")
            self._publish_status()
            raise _Restart(self.deps.settings.retry_delay) from err
        return await self._sandbox_status()

    async def _instances(self) -> dict[str, list[ContainerStatus]]:
        if self.sandbox_id is None:
            return {}
        listing = self.runtime_cache.listing_begins()
        containers = await self.deps.runtime.list_containers(self.sandbox_id)
        self.runtime_cache.listed(listing, containers)
        grouped: dict[str, list[ContainerStatus]] = {}
        for c in containers:
            grouped.setdefault(c.name, []).append(c)
        for mine in grouped.values():
            mine.sort(key=lambda c: (c.attempt, c.created_at))
        return grouped

    def _publish_status(self, instances: Mapping[str, Sequence[ContainerStatus]] | None = None,
                        sandbox: SandboxStatus | None = None, *,
                        terminal: bool | None = None) -> None:
        deps = self.deps
        terminal_now = self.terminal if terminal is None else terminal
        view = PodRuntimeView(sandbox=sandbox, containers=instances or {},
                              waiting=dict(self.waiting), runtime_name=deps.runtime.name,
                              terminal=terminal_now)
        old = deps.status.get(self.uid)
        if old is None:
            old = dict(self.pod.get("status") or {})
        status = generate_pod_status(self.pod, view, host_ip=deps.host_ip, old_status=old)
        statuses = status.setdefault("containerStatuses", [])
        statuses.extend(self._removed)
        for c in self.unallocated:
            statuses.append({"name": str(c.get("name")), "image": c.get("image") or "",
                             "imageID": "", "ready": False, "restartCount": 0,
                             "started": False, "lastState": {},
                             "state": {"waiting": {"reason": UNALLOCATED_REASON,
                                                   "message": UNALLOCATED_MESSAGE}}})
        volume_statuses = getattr(deps.volumes, "volume_statuses", None)
        entries: list[Obj] = list(volume_statuses(self.uid)) if volume_statuses else []
        known = {e.get("name") for e in entries}
        entries += [{"name": name, "hostPhase": "Pending"}
                    for name in self.unallocated_volumes if name not in known]
        if entries and not terminal_now:
            status["volumeStatuses"] = entries
        deps.status.set_pod_status(self.pod, status)

    def _container_kind(self, init: bool) -> str:
        return "init_container" if init else "container"

    async def _start(self, container: Mapping[str, Any], latest: ContainerStatus | None,
                     init: bool, *, actuation: bool = False) -> float:
        """Start (or restart) a container; the delay until the worker should look again
        (`IDLE` when the runtime's events will tell). The volumes it mounts count as in use
        (`runtime_cache`) from now on."""
        names = frozenset(str(m.get("name")) for m in container.get("volumeMounts") or [])
        token = self.runtime_cache.starting(names)
        try:
            return await self._create_and_start(container, latest, init, actuation=actuation)
        finally:
            self.runtime_cache.started(token)

    async def _create_and_start(self, container: Mapping[str, Any],
                                latest: ContainerStatus | None, init: bool, *,
                                actuation: bool = False) -> float:
        deps = self.deps
        pod = self.pod
        name = str(container.get("name"))
        key = f"{self.uid}/{name}"
        if latest is not None and latest.state == ContainerState.EXITED and not actuation:
            finished = latest.finished_at or time.time()
            left = self.workers.crash_backoff.remaining(key, finished)
            if left > 0:
                delay = self.workers.crash_backoff.get(key)
                self.waiting[name] = (
                    "CrashLoopBackOff",
                    f"back-off {go_duration(delay)} restarting failed container={name} "
                    f"pod={format_pod(pod)}")
                self._spawn(deps.events.container(
                    pod, name, events.WARNING, events.BACK_OFF,
                    f"Back-off restarting failed container {name} in pod {format_pod(pod)}",
                    init=init))
                return left
            self.workers.crash_backoff.next(key, finished)
        image = await self._ensure_image(container, init)
        if image is None:
            left = self.workers.image_backoff.remaining(
                f"{key}/{container.get('image')}", time.time())
            if self.waiting.get(name, ("",))[0] == "ErrImagePull":
                # Look again within the back-off, to show ImagePullBackOff meanwhile.
                return min(left, deps.settings.retry_delay) or deps.settings.retry_delay
            return left if left > 0 else deps.settings.retry_delay
        sandbox = await self._sandbox_status()
        pod_ip = sandbox.ip if sandbox is not None else ""
        attempt = latest.attempt + 1 if latest is not None else 0
        try:
            env = await containerconfig.build_env(
                pod, container, image.env, get_configmap=deps.get_configmap,
                get_secret=deps.get_secret, host_ip=deps.host_ip, pod_ip=pod_ip,
                node_allocatable=deps.node_allocatable)
            env_map = dict(env)
            volume_dirs = deps.volumes.mounted_volumes(self.uid)
            mounts = await asyncio.to_thread(containerconfig.build_mounts, pod, container,
                                             volume_dirs, env_map)
            argv = containerconfig.build_argv(container, image.entrypoint, image.cmd, env_map)
        except containerconfig.ContainerConfigError as err:
            return await self._start_failed(name, init, "CreateContainerConfigError", str(err))
        except (StatusError, ApiUnavailable) as err:
            return await self._start_failed(name, init, "CreateContainerConfigError",
                                            getattr(err, "message", str(err)))
        if not argv:
            return await self._start_failed(name, init, "CreateContainerError",
                                            "no command specified")
        log_path = container_log_path(deps.root_dir, pod, name, attempt)
        await asyncio.to_thread(log_path.parent.mkdir, parents=True, exist_ok=True)
        config = ContainerConfig(
            name=name, attempt=attempt, image=str(container.get("image") or ""),
            image_id=image.id, rootfs_layers=tuple(image.layers), argv=tuple(argv),
            env=tuple(env), working_dir=str(container.get("workingDir") or image.working_dir
                                            or "/"),
            mounts=tuple(mounts), log_path=log_path, tty=bool(container.get("tty")),
            stdin=bool(container.get("stdin")), stdin_once=bool(container.get("stdinOnce")),
            labels={LABEL_POD_UID: self.uid, LABEL_CONTAINER_NAME: name,
                    LABEL_CONTAINER_TYPE: "init" if init else "regular"})
        assert self.sandbox_id is not None
        try:
            cid = await deps.runtime.create_container(self.sandbox_id, config,
                                                      self._sandbox_config())
        except RuntimeError_ as err:
            return await self._start_failed(name, init, "CreateContainerError", str(err))
        # Events are posted in the background (upstream's recorder is asynchronous too): the
        # start does not wait for the apiserver.
        self._spawn(deps.events.container(pod, name, events.NORMAL, events.CREATED,
                                                 f"Created container: {name}", init=init))
        try:
            await deps.runtime.start_container(cid)
        except RuntimeError_ as err:
            return await self._start_failed(name, init, "RunContainerError", str(err))
        self.waiting.pop(name, None)
        deps.on_container_started(self._container_kind(init), "")
        self._spawn(deps.events.container(pod, name, events.NORMAL, events.STARTED,
                                                 f"Started container {name}", init=init))
        # Older instances go in the background, so the new one's status is not held up.
        self._spawn(self._prune_instances(name, attempt))
        return IDLE

    async def _start_failed(self, name: str, init: bool, reason: str, message: str) -> float:
        self.waiting[name] = (reason, message)
        self.deps.on_container_started(self._container_kind(init), reason)
        await self.deps.events.container(self.pod, name, events.WARNING, events.FAILED,
                                         f"Error: {message}", init=init)
        return self.deps.settings.retry_delay

    async def _ensure_image(self, container: Mapping[str, Any], init: bool) -> Any:
        """The image of the container from the store, or None (waiting reason set)."""
        deps = self.deps
        pod = self.pod
        name = str(container.get("name"))
        ref = str(container.get("image") or "")
        policy = str(container.get("imagePullPolicy") or "IfNotPresent")
        try:
            image = await asyncio.to_thread(deps.images.resolve, ref)
        except Exception as err:  # an unparsable reference
            image = None
            resolve_error = str(err)
        else:
            resolve_error = ""
        if image is not None:
            self._spawn(deps.events.container(
                pod, name, events.NORMAL, events.PULLED,
                f'Container image "{ref}" already present on machine', init=init))
            return image
        if policy == "Never":
            message = f'Container image "{ref}" is not present with pull policy of Never'
            self.waiting[name] = ("ErrImageNeverPull", message)
            await deps.events.container(pod, name, events.WARNING, events.ERR_IMAGE_NEVER_PULL,
                                        message, init=init)
            await deps.events.container(pod, name, events.WARNING, events.FAILED,
                                        "Error: ErrImageNeverPull", init=init)
            return None
        key = f"{self.uid}/{name}/{ref}"
        backoff = self.workers.image_backoff
        if backoff.remaining(key, time.time()) > 0:
            message = f'Back-off pulling image "{ref}"'
            self.waiting[name] = ("ImagePullBackOff", message)
            await deps.events.container(pod, name, events.NORMAL, events.BACK_OFF, message,
                                        init=init)
            return None
        await deps.events.container(pod, name, events.NORMAL, events.PULLING,
                                    f'Pulling image "{ref}"', init=init)
        error = resolve_error or (
            f'image "{ref}" is not in the node\'s image store and ephemera pulls from no '
            f'registry (add it with "ephemera images import")')
        self.waiting[name] = ("ErrImagePull", error)
        backoff.next(key, time.time())
        await deps.events.container(pod, name, events.WARNING, events.FAILED,
                                    f'Failed to pull image "{ref}": {error}', init=init)
        await deps.events.container(pod, name, events.WARNING, events.FAILED,
                                    "Error: ErrImagePull", init=init)
        return None

    async def _prune_instances(self, name: str, newest_attempt: int) -> None:
        """Remove instances older than the ones kept, and their logs."""
        keep = self.deps.settings.keep_instances
        instances = (await self._instances()).get(name, [])
        for old in instances:
            if old.attempt <= newest_attempt - keep and old.state != ContainerState.RUNNING:
                with contextlib.suppress(RuntimeError_):
                    await self.deps.runtime.remove_container(old.id)
                path = old.log_path or container_log_path(self.deps.root_dir, self.pod, name,
                                                          old.attempt)
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(Path(path).unlink, True)

    # -- terminal pods --

    async def _finish_terminal(self) -> None:
        """A pod whose containers are done for good: stop what still runs (sidecars) and
        the sandbox; its containers and logs stay until it is deleted."""
        if self.terminal_cleaned:
            return
        self.terminal = True
        runtime = self.deps.runtime
        grace = self._grace_period()
        sandboxes = [s for s in await runtime.list_pod_sandboxes() if s.pod_uid == self.uid]
        for s in sandboxes:
            running = [c for c in await runtime.list_containers(s.id)
                       if c.state == ContainerState.RUNNING]
            await asyncio.gather(*(self._kill(c, grace) for c in running))
            if s.ready:
                await runtime.stop_pod_sandbox(s.id)
        self.terminal_cleaned = True
        self.needs_volumes = False
        self.deps.on_volumes_changed()

    async def _evict(self) -> None:
        """The eviction manager evicts the pod: kill its containers with the eviction's grace
        period, stop the sandbox, and write the terminal status `Failed` with the eviction's
        reason, message and condition (kept by every later status)."""
        assert self.eviction is not None
        grace, reason, message, condition = self.eviction
        self.terminal = True
        runtime = self.deps.runtime
        for s in [s for s in await runtime.list_pod_sandboxes() if s.pod_uid == self.uid]:
            running = [c for c in await runtime.list_containers(s.id)
                       if c.state == ContainerState.RUNNING]
            await asyncio.gather(*(self._kill(c, grace) for c in running))
            if s.ready:
                await runtime.stop_pod_sandbox(s.id)
        self.evicted = True
        self.terminal_cleaned = True
        self.needs_volumes = False
        # The killed containers' states first: no await between the phase and the container
        # states below, so no status write shows `Failed` with a container still running.
        instances = await self._instances()
        old = dict(self.deps.status.get(self.uid) or self.pod.get("status") or {})
        old.update({"phase": "Failed", "reason": reason, "message": message})
        if condition is not None:
            old["conditions"] = [c for c in old.get("conditions") or []
                                 if c.get("type") != condition.get("type")]
            old["conditions"].append({**condition, "lastTransitionTime": rfc3339(time.time())})
        self.deps.status.set_pod_status(self.pod, old)
        self._publish_status(instances, None, terminal=True)
        self.deps.on_volumes_changed()

    # -- termination --

    def _grace_period(self) -> float:
        md = _md(self.pod)
        grace = md.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = _spec(self.pod).get("terminationGracePeriodSeconds")
        if grace is None:
            grace = DEFAULT_GRACE_PERIOD
        return max(float(grace), self.deps.settings.minimum_grace_period)

    async def _kill(self, container: ContainerStatus, grace: float, message: str = "") -> None:
        init = container.labels.get(LABEL_CONTAINER_TYPE) == "init"
        self._spawn(self.deps.events.container(
            self.pod, container.name, events.NORMAL, events.KILLING,
            message or f"Stopping container {container.name}", init=init))
        try:
            await self.deps.runtime.stop_container(container.id, grace)
        except RuntimeError_ as err:
            log.warning("stopping container %s of pod %s: %s", container.name,
                        format_pod(self.pod), err)
        else:
            self.runtime_cache.stopped(container.id)

    async def _remove_runtime_state(self, grace: float) -> None:
        runtime = self.deps.runtime
        sandboxes = [s for s in await runtime.list_pod_sandboxes() if s.pod_uid == self.uid]
        for s in sandboxes:
            containers = await runtime.list_containers(s.id)
            running = [c for c in containers if c.state == ContainerState.RUNNING]
            await asyncio.gather(*(self._kill(c, grace) for c in running))
            await runtime.stop_pod_sandbox(s.id)
            for c in containers:
                await runtime.remove_container(c.id)
            await runtime.remove_pod_sandbox(s.id)

    async def terminate(self) -> float:
        """Kill, write the final status, clean up, delete the pod object."""
        deps = self.deps
        runtime = deps.runtime
        grace = self._grace_period()
        try:
            sandboxes = [s for s in await runtime.list_pod_sandboxes()
                         if s.pod_uid == self.uid]
            instances: dict[str, list[ContainerStatus]] = {}
            for s in sandboxes:
                containers = await runtime.list_containers(s.id)
                running = [c for c in containers if c.state == ContainerState.RUNNING]
                await asyncio.gather(*(self._kill(c, grace) for c in running))
                if s.ready:
                    await runtime.stop_pod_sandbox(s.id)
            if not self.removed and sandboxes:
                for s in sandboxes:
                    for c in await runtime.list_containers(s.id):
                        instances.setdefault(c.name, []).append(c)
                for mine in instances.values():
                    mine.sort(key=lambda c: (c.attempt, c.created_at))
                self.waiting.clear()
                self._publish_status(instances, None, terminal=True)
                await deps.status.write(self.uid)
            for s in sandboxes:
                for c in await runtime.list_containers(s.id):
                    await runtime.remove_container(c.id)
                await runtime.remove_pod_sandbox(s.id)
            self.sandbox_id = None
        except RuntimeError_ as err:
            log.warning("terminating pod %s: %s; retrying", format_pod(self.pod), err)
            return deps.settings.retry_delay
        self.needs_volumes = False
        deps.on_volumes_changed()
        try:
            await deps.volumes.teardown_pod(self.uid)
        except Exception as err:
            log.warning("tearing down the volumes of pod %s: %s; retrying",
                        format_pod(self.pod), err)
            return deps.settings.retry_delay
        if deps.pod_storage is not None:
            try:
                await deps.pod_storage.release_pod(self.uid)
            except Exception as err:
                log.warning("releasing the storage of pod %s: %s; retrying",
                            format_pod(self.pod), err)
                return deps.settings.retry_delay
        if not await asyncio.to_thread(self._remove_dirs):
            return deps.settings.retry_delay
        if not self.removed:
            md = _md(self.pod)
            try:
                await deps.api.delete(resource_path("pods", str(md.get("namespace")),
                                                    str(md.get("name"))),
                                      {"apiVersion": "v1", "kind": "DeleteOptions",
                                       "gracePeriodSeconds": 0,
                                       "preconditions": {"uid": self.uid}})
            except StatusError as err:
                if err.code not in (404, 409):
                    log.warning("deleting pod %s: %s; retrying", format_pod(self.pod),
                                err.message)
                    return deps.settings.retry_delay
            except ApiUnavailable as err:
                log.warning("deleting pod %s: %s; retrying", format_pod(self.pod), err)
                return deps.settings.retry_delay
        self.workers.crash_backoff.forget_prefix(f"{self.uid}/")
        self.workers.image_backoff.forget_prefix(f"{self.uid}/")
        self.done = True
        return IDLE

    def _remove_dirs(self) -> bool:
        """Remove the pod's directory and logs; False when a mount is still under it."""
        pod_dir = self.deps.root_dir / "pods" / self.uid
        left = _mounts_under(pod_dir)
        if left:
            log.warning("pod %s: mounts left under %s: %s", format_pod(self.pod), pod_dir,
                        left)
            return False
        shutil.rmtree(pod_dir, ignore_errors=True)
        shutil.rmtree(pod_log_dir(self.deps.root_dir, self.pod), ignore_errors=True)
        return not pod_dir.exists()


# --- all pods --------------------------------------------------------------------------------


class PodWorkers:
    """The pod workers of one kubelet."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self.crash_backoff = BackOff(deps.settings.backoff)
        self.image_backoff = BackOff(deps.settings.image_backoff)
        self._workers: dict[str, PodWorker] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.on_worker_done: Callable[[str], None] = lambda uid: None

    def spawn(self, work: Awaitable[Any], *, pod: Mapping[str, Any] | None = None) -> None:
        """Run `work` (an event post, the pruning of old instances) in the background; an
        exception it ends with is logged, naming `pod`."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        about = f" for pod {format_pod(pod)}" if pod is not None else ""

        def done(finished: asyncio.Future[Any]) -> None:
            self._background.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                log.error("background work%s failed", about, exc_info=finished.exception())

        task.add_done_callback(done)

    def is_terminal(self, uid: str) -> bool | None:
        """Whether the pod is terminal in its worker's view (a terminal phase, or its
        containers stopped for good: terminated, evicted); None when it has no worker."""
        worker = self._workers.get(uid)
        if worker is None:
            return None
        phases = ((worker.pod.get("status") or {}).get("phase"),
                  (self.deps.status.get(uid) or {}).get("phase"))
        return worker.terminal_cleaned or any(p in ("Succeeded", "Failed") for p in phases)

    def is_terminating(self, uid: str) -> bool:
        """The pod's worker is terminating it (deleted or being deleted)."""
        worker = self._workers.get(uid)
        return worker is not None and worker._deleting()

    def get(self, uid: str) -> PodWorker | None:
        return self._workers.get(uid)

    def uids(self) -> list[str]:
        return list(self._workers)

    def pods(self) -> list[Obj]:
        return [w.pod for w in self._workers.values()]

    def pods_needing_volumes(self) -> list[Obj]:
        return [w.pod for w in self._workers.values() if w.needs_volumes and w.storage_ready]

    def volume_in_use(self, uid: str, volume_name: str) -> bool | None:
        """Whether a running (or starting) container of the pod mounts the volume, from its
        worker's runtime view; None when the pod has no worker or it has not listed yet."""
        worker = self._workers.get(uid)
        return worker.runtime_cache.volume_in_use(volume_name) if worker is not None else None

    def update(self, pod: Obj, *, unallocated: Sequence[Obj] = (),
               unallocated_volumes: Sequence[str] = ()) -> None:
        """The pod as the node has allocated it (the API's metadata, the allocated spec),
        and the containers and volumes the API has that are not allocated yet."""
        uid = pod_uid(pod)
        worker = self._workers.get(uid)
        if worker is None:
            worker = self._workers[uid] = PodWorker(self, pod)
            worker.unallocated = list(unallocated)
            worker.unallocated_volumes = list(unallocated_volumes)
            worker.start()
            self.deps.on_volumes_changed()
            return
        old = worker.pod
        worker.pod = pod
        if worker.unallocated != list(unallocated) or \
                worker.unallocated_volumes != list(unallocated_volumes):
            worker.unallocated = list(unallocated)
            worker.unallocated_volumes = list(unallocated_volumes)
            worker.wake.set()
        if old.get("spec") != pod.get("spec") or _md(old).get("deletionTimestamp") != \
                _md(pod).get("deletionTimestamp") or (old.get("status") or {}).get("phase") \
                != (pod.get("status") or {}).get("phase"):
            worker.wake.set()

    def remove(self, pod: Obj) -> None:
        """The pod is gone from the API: stop it and clean up."""
        uid = pod_uid(pod)
        worker = self._workers.get(uid)
        if worker is None:
            worker = self._workers[uid] = PodWorker(self, pod)
            worker.removed = True
            worker.start()
            return
        worker.removed = True
        worker.wake.set()

    def evict(self, uid: str, grace_period_seconds: float, reason: str, message: str,
              condition: Mapping[str, str] | None = None) -> bool:
        """Evict the pod `uid` (the eviction manager's kill): its worker kills the
        containers with `grace_period_seconds` and writes `phase: Failed` with `reason` and
        `message` (and `condition`). False when the pod has no worker or is already done."""
        worker = self._workers.get(uid)
        if worker is None or worker.removed or worker.eviction is not None or worker.terminal:
            return False
        worker.eviction = (float(grace_period_seconds), reason, message, condition)
        worker.wake.set()
        return True

    def is_evicted(self, uid: str) -> bool:
        worker = self._workers.get(uid)
        return worker is not None and worker.eviction is not None

    def wake(self, uid: str) -> None:
        worker = self._workers.get(uid)
        if worker is not None:
            worker.wake.set()

    def _worker_done(self, worker: PodWorker) -> None:
        if self._workers.get(worker.uid) is worker:
            del self._workers[worker.uid]
        self.deps.status.forget(worker.uid)
        self.deps.on_volumes_changed()
        self.on_worker_done(worker.uid)

    async def close(self) -> None:
        """Stop the workers (not the containers: they outlive the kubelet)."""
        tasks = [w.task for w in self._workers.values() if w.task is not None]
        tasks += list(self._background)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def remove_orphan_dirs(root_dir: Path, known_uids: set[str]) -> list[str]:
    """Pod directories of pods this kubelet no longer knows, without mounts: removed; the
    UIDs removed."""
    removed = []
    pods_dir = root_dir / "pods"
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir(pods_dir):
            if entry in known_uids:
                continue
            path = pods_dir / entry
            if _mounts_under(path):
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(entry)
    logs_dir = root_dir / "logs" / "pods"
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir(logs_dir):
            uid = entry.rsplit("_", 1)[-1]
            if uid not in known_uids:
                shutil.rmtree(logs_dir / entry, ignore_errors=True)
    return removed

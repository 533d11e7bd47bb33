"""A pod's container actions, upstream's kuberuntime `computePodActions` and `SyncPod`:
what to start, restart and stop for one pod given its allocated spec and its containers in
the runtime (`compute_pod_actions`, pure), and their execution through the runtime seam
(`PodRuntime`: the pod's sandbox, its containers' instances, starting and killing them).
The pod worker (`podworkers`) decides when to sync and what else a sync does (storage,
volumes, status, termination).

**Sandbox**: `run_pod_sandbox` (idempotent per pod UID, so a restarted kubelet adopts the
sandbox it finds); a sandbox that died under its containers is removed with them and created
again (`SandboxChanged`).

**Init containers** in order (each must exit 0 before the next starts; a failed one is
restarted unless `restartPolicy: Never`, which fails the pod; sidecars (`restartPolicy:
Always` init containers) are started and kept running), then the **main containers**: a
container with no instance is started; an exited one is restarted as the restart policy says
(`Always`; `OnFailure` when it failed; never for `Never`), subject to the CrashLoopBackOff
back-off (`ephemera.kubelet.backoff`: the first restart is immediate, then 10 s doubling up to
300 s, reset when the container ran for twice the maximum, i.e. 10 minutes; `BackOffPolicy`
shrinks it for tests). Waiting containers show `CrashLoopBackOff` with `back-off 10s
restarting failed container=c pod=p_ns(uid)`, and a `BackOff` event. Running containers are
never touched (a restarted kubelet adopts them), unless their liveness or startup probe
failed (`ephemera.kubelet.prober`): such a container is killed with a `Killing` event
`Container c failed liveness probe, will be restarted` (without `, will be restarted` under
`restartPolicy: Never`; `Init container s failed liveness probe` for a sidecar), within the
probe's `terminationGracePeriodSeconds` if it sets one, and started again at once (no crash
back-off), as upstream's `computePodActions` does. The containers after a sidecar with a
startup probe wait until it has succeeded.

**Images** from the local store (`ImageStore.resolve`): `imagePullPolicy: Never` with a
missing image gives `ErrImageNeverPull`; `Always`/`IfNotPresent` with a missing image "pulls"
(ephemera pulls from no registry), fails with `ErrImagePull`, and is retried with the same
back-off, showing `ImagePullBackOff` meanwhile; events `Pulling`, `Failed`, `BackOff`,
`Pulled` (`Container image "x" already present on machine`) as upstream's. A running main
container whose spec names another image (`kubectl set image` on a pod) is stopped with the
pod's grace period (`Killing`: `Container c definition changed, will be restarted`) and
started again from the new image whatever the restart policy, as upstream's
`containerChanged` does (its hash covers a container's name and image only); until then
its status shows the image it runs. The kubelet allocates such an update first
(`ephemera.kubelet.allocation`, which does not look at images): a new image the node does not
have stops the container all the same, which then goes `ErrImagePull` / `ImagePullBackOff`,
as upstream's (an added container likewise, while the others keep running).

**Container config** (`containerconfig`): env (ConfigMaps, Secrets, downward API), argv,
working dir, mounts (host dirs of the volume manager, subPath), the CRI log file
`<root>/logs/pods/<ns>_<name>_<uid>/<container>/<attempt>.log`; a config error is
`CreateContainerConfigError`, a runtime create error `CreateContainerError`, a start error
`RunContainerError`, each with a `Failed` event (`Error: <message>`). Events `Created`
(`Created container: c`) and `Started` (`Started container c`). The two newest instances of
each container are kept (the latest and the one `lastState` and `--previous` show).

**Dynamic changes** (KEP-6395 actuation; the pod carries the *allocated* spec, see
`ephemera.kubelet.allocation`): after the first start, a container whose volumes are not all
set up yet waits alone (`ContainerCreating`) while the others keep running; a running
container whose pod-volume mounts differ from its spec and whose
`dynamicVolumePolicy.restartPolicy` is `RestartContainer` is stopped, once every volume it
now mounts is set up (until then, a volume `ErrorMounting` among them, it keeps running as it
is: KEP-6395's State 4), with the pod's grace period (a `Killing` event `Container c
definition changed, will be restarted`, upstream's text) and recreated with the new mounts
(no crash back-off); an added container starts; a removed one is stopped (KEP-5972: it stays
`Running`, with its `volumeMounts`, until it is killed) and, once stopped, leaves
`containerStatuses` with its runtime containers and logs, so a healthy pod never shows the
exit of a container it no longer has (`Error` in `kubectl get pods`) and the container's name
and the volumes it mounted can be reused at once. (KEP-5972 keeps up to 10 terminated
statuses of removed containers; ephemera drops them, see docs/design.md.) Before a container
is stopped for a change, the status is published, so a removed volume shows `Unmounting`
while it stops.
A running container whose policy is `NotRequired` (DynamicVolumeHotPlug) is not stopped: its
changed mounts are attached and detached while it runs, once its volumes are set up
(`LiveMountChange`, `ephemera.kubelet.hotplug`). Live changes run before the sync's other
actions, and the statuses published on the way (before a stop) show them: a container
restarted by the same update does not hold up its neighbour's live mounts or their report for
its grace period.

`PodRuntimeCache` is the pod's runtime view KEP-6395's `IsVolumeInUseByPod` reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ephemera.api.errors import StatusError
from ephemera.client import ApiUnavailable
from ephemera.kubelet import containerconfig, events, hotplug
from ephemera.kubelet.backoff import BackOff
from ephemera.kubelet.dnsconfig import DnsConfigError
from ephemera.kubelet.podutil import (
    LABEL_CONTAINER_NAME,
    LABEL_CONTAINER_TYPE,
    LABEL_POD_NAME,
    LABEL_POD_NAMESPACE,
    LABEL_POD_UID,
    container_log_path,
    format_pod,
    go_duration,
    metadata,
    pod_log_dir,
    pod_spec,
    pod_uid,
    restart_count_from_log_dir,
)
from ephemera.kubelet.runtime.base import (
    ContainerConfig,
    ContainerState,
    ContainerStatus,
    DnsConfig,
    RuntimeError_,
    SandboxConfig,
    SandboxStatus,
)
from ephemera.kubelet.status import container_status
from ephemera.kubelet.workerdeps import QUIET_WAIT, WorkerDeps

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "IDLE",
    "Action",
    "ClearWaiting",
    "KillForProbe",
    "LiveMountChange",
    "PodActions",
    "PodRuntime",
    "PodRuntimeCache",
    "RestartForChange",
    "StartContainer",
    "SyncRetry",
    "WaitForVolumes",
    "all_done",
    "changes_no_container_state",
    "compute_pod_actions",
    "container_names",
    "image_changed",
    "mounts_differ",
    "should_restart",
]

log = logging.getLogger(__name__)

DEFAULT_GRACE_PERIOD = 30
RESTART_CONTAINER = "RestartContainer"
IDLE: float = math.inf  # resync only when woken

Obj = dict[str, Any]
Instances = Mapping[str, Sequence[ContainerStatus]]


class SyncRetry(Exception):
    """Raised inside a sync to end it early and resync after `delay` seconds (None: only
    when woken)."""

    def __init__(self, delay: float | None) -> None:
        self.delay = delay


# --- computePodActions (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class StartContainer:
    """Start a container with no instance, or restart its `latest` instance (back-off
    applies to an exited one)."""

    container: Mapping[str, Any]
    latest: ContainerStatus | None
    init: bool


@dataclass(frozen=True)
class RestartForChange:
    """Stop the running instance and start it again from the allocated spec, no crash
    back-off, regardless of the restart policy: its image is not the spec's (upstream's
    `definition changed`), or its mounts are not (KEP-6395 actuation, `RestartContainer`)."""

    container: Mapping[str, Any]
    running: ContainerStatus


@dataclass(frozen=True)
class KillForProbe:
    """The running instance failed its liveness or startup probe: kill it (`message` is the
    `Killing` event's; `grace` the probe's grace period, None for the pod's) and start it
    again at once when `restart`."""

    container: Mapping[str, Any]
    running: ContainerStatus
    init: bool
    message: str
    grace: float | None
    restart: bool


@dataclass(frozen=True)
class WaitForVolumes:
    """A dynamic volume the container needs is still being set up: only it waits
    (`ContainerCreating`)."""

    name: str


@dataclass(frozen=True)
class ClearWaiting:
    """The container runs or is done for good: no waiting reason is shown for it.
    `volumes_pending`: it runs, and a change of its mounts waits for its volumes' setup."""

    name: str
    volumes_pending: bool = False


@dataclass(frozen=True)
class LiveMountChange:
    """KEP-6395 live hot-plug (`restartPolicy: NotRequired`, `hotplug`): attach and detach
    the running instance's changed mounts without stopping it."""

    container: Mapping[str, Any]
    running: ContainerStatus


Action = (StartContainer | RestartForChange | KillForProbe | LiveMountChange | WaitForVolumes
          | ClearWaiting)

# (container name, running instance id) -> the probe it failed (`liveness`, `startup`) and
# the probe's grace period, or None (the prober manager's `failed_probe`, bound to the pod).
FailedProbe = Callable[[str, str], tuple[str, float | None] | None]
# (container name, running instance id) -> its startup probe has succeeded (or it has none).
Started = Callable[[str, str], bool]


def _no_failed_probe(name: str, container_id: str) -> tuple[str, float | None] | None:
    return None


def _always_started(name: str, container_id: str) -> bool:
    return True


@dataclass
class PodActions:
    """What one sync does to a pod's containers, in order."""

    actions: list[Action] = field(default_factory=list)
    # Every init container is done, so the main containers were considered (and removed
    # containers are to be stopped).
    init_done: bool = True
    # An init container failed under `restartPolicy: Never`: the pod is terminal.
    init_failed: bool = False


def container_names(pod: Mapping[str, Any]) -> set[str]:
    return {str(c.get("name")) for kind in ("initContainers", "containers", "ephemeralContainers")
            for c in pod_spec(pod).get(kind) or []}


def mounts_differ(container: Mapping[str, Any], instance: ContainerStatus) -> bool:
    """The running instance's pod-volume mounts are not the ones the spec asks for."""
    wanted = {(str(m.get("name")), str(m.get("mountPath")))
              for m in container.get("volumeMounts") or []}
    have = {(m.volume_name, m.container_path) for m in instance.mounts if m.volume_name}
    return wanted != have


def image_changed(container: Mapping[str, Any], instance: ContainerStatus) -> bool:
    """The spec names another image than the instance was created from: upstream's
    `containerChanged`, whose hash (`HashContainer`) covers a container's name and image
    only, so an image is the one change to a running container that restarts it."""
    return str(container.get("image") or "") != instance.image


def should_restart(latest: ContainerStatus, restart_policy: str) -> bool:
    if restart_policy == "Always":
        return True
    return restart_policy == "OnFailure" and latest.exit_code != 0


def restart_policy_of(pod: Mapping[str, Any]) -> str:
    return str(pod_spec(pod).get("restartPolicy") or "Always")


def all_done(pod: Mapping[str, Any], instances: Instances) -> bool:
    """Every main container exited for good under the pod's restart policy."""
    restart_policy = restart_policy_of(pod)
    if restart_policy == "Always":
        return False
    for c in pod_spec(pod).get("containers") or []:
        mine = instances.get(str(c.get("name")), [])
        if not mine:
            return False
        latest = mine[-1]
        if latest.state != ContainerState.EXITED:
            return False
        if should_restart(latest, restart_policy):
            return False
    return True


def _kill_for_probe(container: Mapping[str, Any], running: ContainerStatus, init: bool,
                    restart: bool, failed_probe: FailedProbe) -> KillForProbe | None:
    """Upstream's messages: `Container c failed liveness probe, will be restarted` (no
    `, will be restarted` when it will not be), `Init container s failed startup probe` for
    a sidecar."""
    name = str(container.get("name"))
    failed = failed_probe(name, running.id)
    if failed is None:
        return None
    kind, grace = failed
    if init:
        message = f"Init container {name} failed {kind} probe"
    else:
        message = f"Container {name} failed {kind} probe"
        if restart:
            message += ", will be restarted"
    return KillForProbe(container, running, init, message, grace, restart)


def compute_pod_actions(pod: Mapping[str, Any], instances: Instances,
                        volumes_ready_for: Callable[[Mapping[str, Any]], bool],
                        failed_probe: FailedProbe = _no_failed_probe,
                        started: Started = _always_started, *,
                        hot_plug: bool = True) -> PodActions:
    """The actions of one sync (see the module docstring): the next init container to
    start, else what each main container needs. `volumes_ready_for(container)`: every pod
    volume it mounts is set up on the host; `failed_probe(name, id)`: the running instance
    failed its liveness or startup probe; `started(name, id)`: its startup probe succeeded
    (the containers after a sidecar wait for it). `hot_plug` (DynamicVolumeHotPlug):
    `NotRequired` containers get their mount changes live (else they are restarted for
    them)."""
    result = PodActions()
    restart_policy = restart_policy_of(pod)
    for c in pod_spec(pod).get("initContainers") or []:
        name = str(c.get("name"))
        mine = instances.get(name, [])
        latest = mine[-1] if mine else None
        if c.get("restartPolicy") == "Always":  # a sidecar: keep it running
            if latest is not None and latest.state == ContainerState.RUNNING:
                kill = _kill_for_probe(c, latest, True, True, failed_probe)
                if kill is None and started(name, latest.id):
                    continue
                if kill is not None:
                    result.actions.append(kill)
                result.init_done = False  # killed, or not started yet: the rest wait
                return result
            result.actions.append(StartContainer(c, latest, True))
            result.init_done = False
            return result
        if latest is None:
            result.actions.append(StartContainer(c, None, True))
            result.init_done = False
            return result
        if latest.state == ContainerState.RUNNING:
            result.init_done = False
            return result
        if latest.state == ContainerState.EXITED and latest.exit_code == 0:
            continue
        if latest.state == ContainerState.EXITED and restart_policy == "Never":
            result.init_done = False
            result.init_failed = True
            return result
        result.actions.append(StartContainer(c, latest, True))
        result.init_done = False
        return result
    for c in pod_spec(pod).get("containers") or []:
        name = str(c.get("name"))
        mine = instances.get(name, [])
        latest = mine[-1] if mine else None
        if latest is None:
            if volumes_ready_for(c):  # an added container waits for its dynamic volumes
                result.actions.append(StartContainer(c, None, False))
            continue
        if latest.state == ContainerState.RUNNING:
            if image_changed(c, latest):  # upstream's containerChanged, before the probes
                if volumes_ready_for(c):
                    result.actions.append(RestartForChange(c, latest))
                else:
                    result.actions.append(ClearWaiting(name, volumes_pending=True))
                continue
            kill = _kill_for_probe(c, latest, False, restart_policy != "Never", failed_probe)
            if kill is not None:
                result.actions.append(kill)
                continue
            if hot_plug and hotplug.wants_live(c):
                if hotplug.mounts_stale(pod, c, latest):
                    if volumes_ready_for(c):
                        result.actions.append(LiveMountChange(c, latest))
                    else:
                        result.actions.append(ClearWaiting(name, volumes_pending=True))
                else:
                    result.actions.append(ClearWaiting(name))
                continue
            if mounts_differ(c, latest) and (c.get("dynamicVolumePolicy") or {}).get(
                    "restartPolicy") in (RESTART_CONTAINER, hotplug.NOT_REQUIRED):
                if volumes_ready_for(c):
                    result.actions.append(RestartForChange(c, latest))
                else:
                    result.actions.append(ClearWaiting(name, volumes_pending=True))
            else:
                result.actions.append(ClearWaiting(name))
            continue
        if not volumes_ready_for(c):
            result.actions.append(WaitForVolumes(name))
            continue
        if latest.state == ContainerState.EXITED:
            if should_restart(latest, restart_policy):
                result.actions.append(StartContainer(c, latest, False))
            else:
                result.actions.append(ClearWaiting(name))
            continue
        # Created but never started (a start that failed, or a kubelet stopped between the
        # create and the start): a new instance replaces it (`_remove_never_started`).
        result.actions.append(StartContainer(c, latest, False))
    return result


# --- the pod's runtime view (KEP-6395's IsVolumeInUseByPod) ----------------------------------


def attempt_after_reported(pod: Mapping[str, Any], name: str) -> int:
    """The attempt that follows the last one the pod's status reports for container `name`
    (0: none was). Beside the container logs (`restart_count_from_log_dir`), it keeps the
    count going where no logs are, as for a hollow node's fake runtime after its process
    restarted: a status with a `containerID` had `restartCount` as its attempt; one already
    reported as `ContainerStatusUnknown` (no instance found) counted that restart already."""
    status = pod.get("status") or {}
    for kind in ("containerStatuses", "initContainerStatuses"):
        for reported in status.get(kind) or []:
            if not isinstance(reported, dict) or reported.get("name") != name:
                continue
            count = int(reported.get("restartCount") or 0)
            if reported.get("containerID"):
                return count + 1
            last = (reported.get("lastState") or {}).get("terminated") or {}
            return count if last.get("reason") == "ContainerStatusUnknown" else 0
    return 0


def changes_no_container_state(actions: Sequence[Action]) -> bool:
    """The actions (none at all, as in a periodic resync of a settled pod) change no
    container's state, at most its mounts live: after them a worker knows its containers
    without listing them again (`PodRuntime.with_live_changes`)."""
    return all(isinstance(a, LiveMountChange | ClearWaiting | WaitForVolumes)
               for a in actions)


def _grouped(containers: Sequence[ContainerStatus]) -> dict[str, list[ContainerStatus]]:
    """The instances of each container name, oldest first."""
    grouped: dict[str, list[ContainerStatus]] = {}
    for c in containers:
        grouped.setdefault(c.name, []).append(c)
    for mine in grouped.values():
        mine.sort(key=lambda c: (c.attempt, c.created_at))
    return grouped


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

    def replaced(self, container: ContainerStatus) -> None:
        """The worker changed the listed `container` (its mounts, live): as listed now."""
        if self._containers is not None:
            self._containers = [container if c.id == container.id else c
                                for c in self._containers]

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


# --- SyncPod: the actions through the runtime seam -------------------------------------------


class PodHost(Protocol):
    """What `PodRuntime` asks of the pod's worker."""

    @property
    def pod(self) -> Obj: ...

    def spawn(self, work: Awaitable[Any]) -> None: ...

    def publish_status(self, instances: Instances | None = None,
                       sandbox: SandboxStatus | None = None) -> None: ...


class PodRuntime:
    """One pod's side of the runtime seam: its sandbox, its containers' instances, the
    waiting reasons its status shows, the statuses of its removed containers, and the
    execution of its `PodActions`."""

    def __init__(self, host: PodHost, deps: WorkerDeps, crash_backoff: BackOff,
                 image_backoff: BackOff, live_mounts: hotplug.LiveMounts | None = None
                 ) -> None:
        self.host = host
        self.deps = deps
        self.crash_backoff = crash_backoff
        self.image_backoff = image_backoff
        self.live_mounts = live_mounts
        self.uid = pod_uid(host.pod)
        self.sandbox_id: str | None = None
        # Container name -> (reason, message) of its `waiting` state.
        self.waiting: dict[str, tuple[str, str]] = {}
        self.removed_statuses: list[Obj] = []  # statuses of removed containers
        # The last `execute` left a container waiting for its dynamic volumes, which the
        # volume manager is setting up (its notification wakes the worker).
        self.awaiting_volumes = False
        self.cache = PodRuntimeCache()
        # The containers whose mounts the last `execute` changed live, as changed (by id).
        self.live_changed: dict[str, ContainerStatus] = {}

    @property
    def pod(self) -> Obj:
        return self.host.pod

    # -- sandbox and instances --

    def sandbox_config(self) -> SandboxConfig:
        md = metadata(self.pod)
        spec = pod_spec(self.pod)
        hostname = str(spec.get("hostname") or md.get("name") or "")[:63]
        domain = self.deps.dns.cluster_domain if self.deps.dns is not None else ""
        subdomain = str(spec.get("subdomain") or "")
        return SandboxConfig(pod_uid=self.uid, namespace=str(md.get("namespace") or ""),
                             name=str(md.get("name") or ""), hostname=hostname,
                             host_network=bool(spec.get("hostNetwork")),
                             hostname_domain=f"{subdomain}.{md.get('namespace')}.svc.{domain}"
                             if subdomain and domain else "",
                             labels={LABEL_POD_UID: self.uid,
                                     LABEL_POD_NAME: str(md.get("name") or ""),
                                     LABEL_POD_NAMESPACE: str(md.get("namespace") or "")})

    def pod_dns(self) -> DnsConfig | None:
        """The sandbox's resolv.conf settings by the pod's dnsPolicy (`dnsconfig`), its
        events posted in the background; None without a configurer (the host's file)."""
        configurer = self.deps.dns
        if configurer is None:
            return None
        config, dns_events = configurer.pod_dns(self.pod)
        for event in dns_events:
            if event.node:
                self.host.spawn(self.deps.events.node({"metadata": {
                    "name": self.deps.node_name}}, events.WARNING, event.reason,
                    event.message))
            else:
                self.host.spawn(self.deps.events.pod(self.pod, events.WARNING, event.reason,
                                                     event.message))
        return config

    async def sandbox_status(self) -> SandboxStatus | None:
        if self.sandbox_id is None:
            return None
        return await self.deps.runtime.pod_sandbox_status(self.sandbox_id)

    async def sandbox_and_instances(self) -> tuple[SandboxStatus | None, Instances]:
        """`ensure_sandbox` and `instances`: with a sandbox already there, both runtime
        reads at once (one wait instead of two; a sandbox not ready is handled as
        `ensure_sandbox` does, and the instances are listed again after)."""
        if self.sandbox_id is not None:
            current, listed = await self.sandbox_status_and_instances()
            if current is not None and current.ready:
                return current, listed
        sandbox = await self.ensure_sandbox()
        return sandbox, await self.instances()

    def with_live_changes(self, instances: Instances) -> dict[str, list[ContainerStatus]]:
        """`instances` with the containers the last `execute` changed live as changed."""
        return {name: [self.live_changed.get(c.id, c) for c in mine]
                for name, mine in instances.items()}

    async def sandbox_status_and_instances(
            self) -> tuple[SandboxStatus | None, dict[str, list[ContainerStatus]]]:
        """`sandbox_status` and `instances`, read together (`pod_sandbox_and_containers`)."""
        if self.sandbox_id is None:
            return None, {}
        listing = self.cache.listing_begins()
        sandbox, containers = await self.deps.runtime.pod_sandbox_and_containers(
            self.sandbox_id)
        self.cache.listed(listing, containers)
        return sandbox, _grouped(containers)

    async def ensure_sandbox(self) -> SandboxStatus | None:
        runtime = self.deps.runtime
        if self.sandbox_id is not None:
            current = await self.sandbox_status()
            if current is not None and current.ready:
                return current
            if current is not None:
                # The sandbox died under its containers: start over, as upstream does.
                await self.deps.events.pod(self.pod, events.NORMAL, events.SANDBOX_CHANGED,
                                           "Pod sandbox changed, it will be killed and "
                                           "re-created.")
                await self.remove_runtime_state(grace=0)
            self.sandbox_id = None
        try:
            config = dataclasses.replace(self.sandbox_config(), dns=self.pod_dns())
            self.sandbox_id = await runtime.run_pod_sandbox(config)
        except (RuntimeError_, DnsConfigError) as err:
            await self.deps.events.pod(self.pod, events.WARNING,
                                       events.FAILED_CREATE_POD_SANDBOX,
                                       f"Failed to create pod sandbox: {err}")
            self.host.publish_status()
            raise SyncRetry(self.deps.settings.retry_delay) from err
        return await self.sandbox_status()

    async def instances(self) -> dict[str, list[ContainerStatus]]:
        """The instances of each container in the pod's sandbox, oldest first."""
        if self.sandbox_id is None:
            return {}
        listing = self.cache.listing_begins()
        containers = await self.deps.runtime.list_containers(self.sandbox_id)
        self.cache.listed(listing, containers)
        return _grouped(containers)

    def _allocated_container(self, name: str) -> Mapping[str, Any] | None:
        """The regular container `name` as the pod's allocated spec has it now."""
        for container in pod_spec(self.pod).get("containers") or []:
            if container.get("name") == name:
                return dict(container)
        return None

    def volumes_ready_for(self, container: Mapping[str, Any]) -> bool:
        """Every pod volume the container mounts is set up on the host."""
        wanted = {str(m.get("name")) for m in container.get("volumeMounts") or []}
        if not wanted:
            return True
        mounted = self.deps.volumes.mounted_volumes(self.uid)
        return wanted.issubset(mounted)

    def container_grace_period(self) -> float:
        grace = pod_spec(self.pod).get("terminationGracePeriodSeconds")
        if grace is None:
            grace = DEFAULT_GRACE_PERIOD
        return max(float(grace), self.deps.settings.minimum_grace_period)

    # -- executing the actions --

    async def execute(self, actions: Sequence[Action], instances: Instances,
                      sandbox: SandboxStatus | None) -> float:
        """Run `actions` in order; the delay until the pod should be synced again (`IDLE`
        when the runtime's events will tell)."""
        next_delay = IDLE
        self.awaiting_volumes = False
        self.live_changed = {}
        # Live mount changes first: they take milliseconds and depend on no other container,
        # so a container restarted in the same change (its grace period, its start) does not
        # hold them up, and the status published before that stop shows them.
        live = [a for a in actions if isinstance(a, LiveMountChange)]
        for action in [*live, *(a for a in actions if not isinstance(a, LiveMountChange))]:
            if isinstance(action, StartContainer):
                next_delay = min(next_delay, await self.start(action.container,
                                                              action.latest, action.init))
            elif isinstance(action, RestartForChange):
                name = str(action.container.get("name"))
                self.waiting.pop(name, None)
                # The status first, so that a removed volume shows `Unmounting` while the
                # container stops (within its grace period).
                self.host.publish_status(self.with_live_changes(instances), sandbox)
                await self.kill(action.running, self.container_grace_period(),
                                events.definition_changed_message(name))
                # The allocated spec may have changed while the container stopped (a volume
                # removed right after it was added, within the grace period): start it as
                # it is now, or sync again at once when a volume it now mounts is not set
                # up yet, rather than with mounts that are gone.
                current = self._allocated_container(name)
                if current is None or not self.volumes_ready_for(current):
                    next_delay = 0.0
                    continue
                next_delay = min(next_delay, await self.start(current, action.running,
                                                              False, actuation=True))
            elif isinstance(action, KillForProbe):
                self.host.publish_status(self.with_live_changes(instances), sandbox)
                grace = self.container_grace_period() if action.grace is None else \
                    max(action.grace, self.deps.settings.minimum_grace_period)
                await self.kill(action.running, grace, action.message)
                if action.restart:
                    # Upstream's doBackOff looks at the container's last exited instance as
                    # the sync saw it: the first restart is immediate, repeated ones back off.
                    name = str(action.container.get("name"))
                    exited = [c for c in instances.get(name, ())
                              if c.state == ContainerState.EXITED and c.id != action.running.id]
                    next_delay = min(next_delay, await self.start(
                        action.container, action.running, action.init, actuation=True,
                        crashed=exited[-1] if exited else None))
            elif isinstance(action, LiveMountChange):
                self.waiting.pop(str(action.container.get("name")), None)
                next_delay = min(next_delay, await self.change_live(
                    action.container, action.running, sandbox))
            elif isinstance(action, WaitForVolumes):
                self.waiting.setdefault(action.name, ("ContainerCreating", ""))
                self.awaiting_volumes = True
            else:
                self.waiting.pop(action.name, None)
                self.awaiting_volumes |= action.volumes_pending
        return next_delay

    async def change_live(self, container: Mapping[str, Any], running: ContainerStatus,
                          sandbox: SandboxStatus | None) -> float:
        """Attach and detach the changed mounts of a running `NotRequired` container
        (`hotplug`); the delay until a failed change is retried (IDLE: all done)."""
        if self.live_mounts is None:
            return IDLE
        deps = self.deps
        env: dict[str, str] = {}
        if any(m.get("subPathExpr") for m in container.get("volumeMounts") or []):
            with contextlib.suppress(containerconfig.ContainerConfigError, StatusError,
                                     ApiUnavailable):
                env = dict(await containerconfig.build_env(
                    self.pod, container, (), get_configmap=deps.get_configmap,
                    get_secret=deps.get_secret, host_ip=deps.host_ip,
                    pod_ip=sandbox.ip if sandbox is not None else "",
                    node_allocatable=deps.node_allocatable,
                    service_env=deps.service_env(self.pod)))
        delay, mounts = await self.live_mounts.actuate(
            self.pod, container, running, deps.volumes.mounted_volumes(self.uid), env)
        if mounts != running.mounts:
            changed = self.live_changed[running.id] = dataclasses.replace(running, mounts=mounts)
            self.cache.replaced(changed)
        return delay if delay > 0 else IDLE

    async def stop_removed_containers(self, instances: Instances,
                                      sandbox: SandboxStatus | None = None) -> None:
        """KEP-5972: a container removed from the allocated spec is stopped (with its grace
        period); its status shows it until it has stopped (`removed_container_statuses`).
        The status is published before the stop, so volumes that leave with it show
        `Unmounting` while it stops (KEP-6395)."""
        names = container_names(self.pod)
        for name, mine in instances.items():
            if name in names:
                continue
            running = [c for c in mine if c.state in (ContainerState.RUNNING,
                                                       ContainerState.CREATED)]
            if running:
                self.removed_statuses = await self.removed_container_statuses(instances)
                self.host.publish_status(self.with_live_changes(instances), sandbox)
                await asyncio.gather(*(self.kill(c, self.container_grace_period())
                                       for c in running))
            self.waiting.pop(name, None)

    async def removed_container_statuses(self, instances: Instances) -> list[Obj]:
        """Statuses of the removed containers still running (being stopped), oldest first.
        A removed container that has stopped leaves the status: its runtime containers and
        their logs are removed (a container added later under its name starts afresh)."""
        names = container_names(self.pod)
        removed = sorted(((name, mine) for name, mine in instances.items()
                          if name not in names and mine
                          and mine[-1].labels.get(LABEL_CONTAINER_TYPE) != "init"),
                         key=lambda pair: pair[1][-1].created_at)
        statuses: list[Obj] = []
        for name, mine in removed:
            if any(c.state in (ContainerState.RUNNING, ContainerState.CREATED) for c in mine):
                status = container_status({"name": name, "image": mine[-1].image}, mine,
                                          None, "ContainerCreating", self.deps.runtime.name)
                if mine[-1].state != ContainerState.RUNNING:
                    # KEP-6395: a container not running holds no mount; its status must not
                    # keep the volume names from being reused (the API's anti-race rule).
                    status.pop("volumeMounts", None)
                statuses.append(status)
            else:
                await self._remove_instances(name, mine)
        return statuses

    async def _remove_instances(self, name: str, instances: Sequence[ContainerStatus]) -> None:
        """Remove a stopped removed container's runtime containers and its logs."""
        for c in instances:
            with contextlib.suppress(RuntimeError_):
                await self.deps.runtime.remove_container(c.id)
        log_dir = pod_log_dir(self.deps.root_dir, self.pod) / name
        await asyncio.to_thread(shutil.rmtree, log_dir, True)

    # -- starting a container --

    @staticmethod
    def _container_kind(init: bool) -> str:
        return "init_container" if init else "container"

    async def start(self, container: Mapping[str, Any], latest: ContainerStatus | None,
                    init: bool, *, actuation: bool = False,
                    crashed: ContainerStatus | None = None) -> float:
        """Start (or restart) a container; the delay until the worker should look again
        (`IDLE` when the runtime's events will tell). The volumes it mounts count as in use
        (`cache`) from now on. `crashed`: with `actuation`, an exited instance whose crash
        back-off still applies (a restart after a failed liveness probe)."""
        names = frozenset(str(m.get("name")) for m in container.get("volumeMounts") or [])
        token = self.cache.starting(names)
        try:
            return await self._create_and_start(container, latest, init, actuation=actuation,
                                                crashed=crashed)
        finally:
            self.cache.started(token)

    async def _create_and_start(self, container: Mapping[str, Any],
                                latest: ContainerStatus | None, init: bool, *,
                                actuation: bool = False,
                                crashed: ContainerStatus | None = None) -> float:
        deps = self.deps
        pod = self.pod
        name = str(container.get("name"))
        key = f"{self.uid}/{name}"
        if latest is not None and latest.state == ContainerState.EXITED and not actuation:
            crashed = latest
        if crashed is not None:
            finished = crashed.finished_at or time.time()
            left = self.crash_backoff.remaining(key, finished)
            if left > 0:
                delay = self.crash_backoff.get(key)
                self.waiting[name] = (
                    "CrashLoopBackOff",
                    f"back-off {go_duration(delay)} restarting failed container={name} "
                    f"pod={format_pod(pod)}")
                self.host.spawn(deps.events.container(
                    pod, name, events.WARNING, events.BACK_OFF,
                    f"Back-off restarting failed container {name} in pod {format_pod(pod)}",
                    init=init))
                return left
            self.crash_backoff.next(key, finished)
        image = await self._ensure_image(container, init)
        if image is None:
            left = self.image_backoff.remaining(
                f"{key}/{container.get('image')}", time.time())
            if self.waiting.get(name, ("",))[0] == "ErrImagePull":
                # Look again within the back-off, to show ImagePullBackOff meanwhile.
                return min(left, deps.settings.retry_delay) or deps.settings.retry_delay
            return left if left > 0 else deps.settings.retry_delay
        sandbox = await self.sandbox_status()
        pod_ip = sandbox.ip if sandbox is not None else ""
        if latest is not None:
            attempt = latest.attempt + 1
        else:  # e.g. after a node shutdown: the runtime forgot the earlier instances
            attempt = max(await deps.offload(
                restart_count_from_log_dir,
                container_log_path(deps.root_dir, pod, name, 0).parent),
                attempt_after_reported(pod, name))
        try:
            env = await containerconfig.build_env(
                pod, container, image.env, get_configmap=deps.get_configmap,
                get_secret=deps.get_secret, host_ip=deps.host_ip, pod_ip=pod_ip,
                node_allocatable=deps.node_allocatable, service_env=deps.service_env(pod))
            env_map = dict(env)
            volume_dirs = deps.volumes.mounted_volumes(self.uid)
            mounts = await deps.offload(containerconfig.build_mounts, pod, container,
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
        if deps.settings.pod_dirs:
            await deps.offload(log_path.parent.mkdir, parents=True, exist_ok=True)
        config = ContainerConfig(
            name=name, attempt=attempt, image=str(container.get("image") or ""),
            image_id=image.id, rootfs_layers=tuple(image.layers), argv=tuple(argv),
            env=tuple(env), working_dir=str(container.get("workingDir") or image.working_dir
                                            or "/"),
            mounts=tuple(mounts), log_path=log_path, tty=bool(container.get("tty")),
            stdin=bool(container.get("stdin")), stdin_once=bool(container.get("stdinOnce")),
            read_only_root=containerconfig.read_only_root(container),
            labels={LABEL_POD_UID: self.uid, LABEL_CONTAINER_NAME: name,
                    LABEL_CONTAINER_TYPE: "init" if init else "regular"})
        assert self.sandbox_id is not None
        if latest is not None and latest.state == ContainerState.CREATED:
            await self._remove_never_started(latest)
        try:
            cid = await deps.runtime.create_container(self.sandbox_id, config,
                                                      self.sandbox_config())
        except RuntimeError_ as err:
            return await self._start_failed(name, init, "CreateContainerError", str(err))
        # Events are posted in the background (upstream's recorder is asynchronous too) and
        # deferred until the kubelet is quiet: the start does not wait for the apiserver, nor
        # share it with them.
        self.host.spawn(deps.events.container(pod, name, events.NORMAL, events.CREATED,
                                              f"Created container: {name}", init=init,
                                              deferred=True))
        try:
            await deps.runtime.start_container(cid)
        except RuntimeError_ as err:
            return await self._start_failed(name, init, "RunContainerError", str(err))
        self.waiting.pop(name, None)
        deps.on_container_started(self._container_kind(init), "")
        self.host.spawn(deps.events.container(pod, name, events.NORMAL, events.STARTED,
                                              f"Started container {name}", init=init,
                                              deferred=True))
        # Older instances go in the background, so the new one's status is not held up.
        self.host.spawn(self._prune_instances(name, attempt))
        return IDLE

    async def _remove_never_started(self, created: ContainerStatus) -> None:
        """The instance this start replaces was created and never started (its start failed,
        or a kubelet was killed between the two): removed first. It would never run, yet
        its mount namespace holds the volumes it was created with, and a volume a swap
        removed meanwhile would count as in use by it for ever (KEP-6395's
        `IsVolumeInUseByPod`), never torn down. It has no logs to keep."""
        try:
            await self.deps.runtime.remove_container(created.id)
        except RuntimeError_ as err:
            log.warning("removing the never-started instance %s of container %s of pod %s: "
                        "%s", created.id, created.name, format_pod(self.pod), err)
        else:
            self.cache.stopped(created.id)

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
            image = await deps.offload(deps.images.resolve, ref)
        except Exception as err:  # an unparsable reference
            image = None
            resolve_error = str(err)
        else:
            resolve_error = ""
        if image is not None:
            self.host.spawn(deps.events.container(
                pod, name, events.NORMAL, events.PULLED,
                f'Container image "{ref}" already present on machine', init=init,
                deferred=True))
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
        backoff = self.image_backoff
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
        """Remove instances older than the ones kept, and their logs: once the kubelet is
        quiet (the new instance's status written; at most `QUIET_WAIT` seconds), so that the
        runtime's delete (a process), the unmount and the removal of the old writable layer
        do not share the CPUs with the start's status write. Upstream leaves dead
        containers to its garbage collector, which runs every minute."""
        if self.deps.quiet is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(QUIET_WAIT):
                    await self.deps.quiet()
        keep = self.deps.settings.keep_instances
        instances = (await self.instances()).get(name, [])
        for old in instances:
            if old.attempt <= newest_attempt - keep and old.state != ContainerState.RUNNING:
                with contextlib.suppress(RuntimeError_):
                    await self.deps.runtime.remove_container(old.id)
                path = old.log_path or container_log_path(self.deps.root_dir, self.pod, name,
                                                          old.attempt)
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(Path(path).unlink, True)

    # -- stopping --

    async def kill(self, container: ContainerStatus, grace: float, message: str = "") -> None:
        """Stop one container (SIGTERM, SIGKILL after `grace`), with a `Killing` event."""
        init = container.labels.get(LABEL_CONTAINER_TYPE) == "init"
        self.host.spawn(self.deps.events.container(
            self.pod, container.name, events.NORMAL, events.KILLING,
            message or f"Stopping container {container.name}", init=init, deferred=True))
        try:
            await self.deps.runtime.stop_container(container.id, grace)
        except RuntimeError_ as err:
            log.warning("stopping container %s of pod %s: %s", container.name,
                        format_pod(self.pod), err)
        else:
            self.cache.stopped(container.id)

    async def kill_pod(self, grace: float) -> list[SandboxStatus]:
        """Stop every running container of the pod's sandboxes (with `grace`) and the ready
        sandboxes (upstream's `KillPod`); the sandboxes."""
        runtime = self.deps.runtime
        sandboxes = [s for s in await runtime.list_pod_sandboxes() if s.pod_uid == self.uid]
        for s in sandboxes:
            running = [c for c in await runtime.list_containers(s.id)
                       if c.state == ContainerState.RUNNING]
            await asyncio.gather(*(self.kill(c, grace) for c in running))
            if s.ready:
                await runtime.stop_pod_sandbox(s.id)
        return sandboxes

    async def remove_runtime_state(self, grace: float) -> None:
        """Stop and remove every container and sandbox of the pod."""
        runtime = self.deps.runtime
        sandboxes = [s for s in await runtime.list_pod_sandboxes() if s.pod_uid == self.uid]
        for s in sandboxes:
            containers = await runtime.list_containers(s.id)
            running = [c for c in containers if c.state == ContainerState.RUNNING]
            await asyncio.gather(*(self.kill(c, grace) for c in running))
            await runtime.stop_pod_sandbox(s.id)
            for c in containers:
                await runtime.remove_container(c.id)
            await runtime.remove_pod_sandbox(s.id)

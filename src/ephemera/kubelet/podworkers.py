"""Pod workers: one asyncio task per pod, each running the pod's sync loop (upstream's
`pod_workers.go` and `kubelet.SyncPod`/`SyncTerminatingPod`). What a sync does to the pod's
containers (sandbox, init and main containers, images, back-off, KEP-6395 actuation) is
computed and executed by `ephemera.kubelet.podactions` (kuberuntime's `computePodActions` and
`SyncPod`); the runtime relister that wakes the workers is `ephemera.kubelet.pleg`.

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
   as the volume manager reports them. After the first start, a container whose dynamic
   volumes are not all set up waits alone, and the volume manager's notification wakes the
   worker when they are.
2. **Containers**: `compute_pod_actions` on the sandbox's instances, executed by the pod's
   `PodRuntime`; then removed containers are stopped (KEP-5972). The instances are read at
   the sync's start, or earlier: while a change's allocation checkpoint is written (nothing
   of it is actuated before), the idle worker reads them ahead (`prefetch_listing`), and the
   sync that actuates the change uses that read if no runtime (or probe) event for the pod
   came after it began (as upstream's pod cache, newer than the last sync, which only the
   relister updates).
3. **Status** (`status.generate_pod_status`) handed to the status manager (which merges
   what one sync publishes into one write: `StatusManager.hold`), with the statuses
   of removed containers still being stopped, `waiting` `Unallocated` (`Container addition
   pending node allocation`) for containers the API has but the node has not allocated, and
   `status.volumeStatuses` from the volume manager (plus `Pending` for volumes not allocated
   yet).

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

Workers also resync every `resync_period` plus up to half of it at random (upstream's
`wait.Jitter(resyncInterval, workerResyncIntervalJitterFactor)`), so that pods started
together do not keep resyncing together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ephemera import trace
from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.client import ApiUnavailable, resource_path
from ephemera.kubelet import events, hotplug
from ephemera.kubelet.backoff import BackOff, BackOffPolicy
from ephemera.kubelet.podactions import (
    DEFAULT_GRACE_PERIOD,
    IDLE,
    ClearWaiting,
    Instances,
    PodRuntime,
    SyncRetry,
    all_done,
    changes_no_container_state,
    compute_pod_actions,
    container_names,
)
from ephemera.kubelet.podutil import (
    format_pod,
    metadata,
    mounts_under,
    pod_log_dir,
    pod_spec,
    pod_uid,
)
from ephemera.kubelet.runtime.base import (
    ContainerState,
    ContainerStatus,
    RuntimeError_,
    SandboxStatus,
)
from ephemera.kubelet.status import PodRuntimeView, generate_pod_status, rfc3339
from ephemera.kubelet.volumes.manager import VolumeMountTimeout
from ephemera.kubelet.workerdeps import WorkerDeps

__all__ = ["PodWorker", "PodWorkers", "remove_orphan_dirs"]

log = logging.getLogger(__name__)

DEADLINE_EXCEEDED = "context deadline exceeded"
# upstream's workerResyncIntervalJitterFactor: a resync comes 1 to 1.5 periods after a sync
RESYNC_JITTER_FACTOR = 0.5
UNALLOCATED_REASON = "Unallocated"
UNALLOCATED_MESSAGE = "Container addition pending node allocation"

Obj = dict[str, Any]
SandboxListing = tuple[SandboxStatus | None, dict[str, list[ContainerStatus]]]
StatusBasis = tuple[Obj, SandboxStatus | None, Instances, dict[str, tuple[str, str]]]


def resync_interval(period: float, rand: Callable[[], float] = random.random) -> float:
    """How long after a sync a worker resyncs: `period` jittered as upstream's pod workers
    jitter theirs (`wait.Jitter(period, 0.5)`: between 1 and 1.5 periods)."""
    return period * (1 + RESYNC_JITTER_FACTOR * rand())


def _retrieved(read: asyncio.Future[Any]) -> None:
    """A read ahead nobody awaited: its failure is not reported (the sync reads again)."""
    if not read.cancelled():
        read.exception()


# --- one pod ---------------------------------------------------------------------------------


class PodWorker:
    def __init__(self, workers: PodWorkers, pod: Obj) -> None:
        self.workers = workers
        self.deps = workers.deps
        self.pod = pod
        self.uid = pod_uid(pod)
        self.removed = False  # gone from the API
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
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
        # Statuses published are merged until the sync (or the volume wait) ends.
        self.status_held = False
        # The pod's allocated spec (or what is not allocated) changed since the sync began
        # (reset as each sync begins).
        self.changed_in_sync = False
        # Containers and volumes the API has but the node has not allocated yet (KEP-6395).
        self.unallocated: list[Obj] = []
        self.unallocated_volumes: list[str] = []
        # Set by `PodWorkers.evict`: (grace seconds, reason, message, condition or None).
        self.eviction: tuple[float, str, str, Mapping[str, str] | None] | None = None
        self.evicted = False
        # Whether this worker has acted on the pod's containers yet (see `_sync_running`).
        self.acted = False
        # The pod's sandbox and containers in the runtime (`podactions`).
        self.pod_runtime = PodRuntime(self, self.deps, workers.crash_backoff,
                                      workers.image_backoff, workers.live_mounts)
        self.syncing = False
        self.runtime_events = 0  # `PodWorkers.runtime_changed` calls (relister, probes)
        # A listing read ahead while the pod's change is checkpointed (`prefetch_listing`):
        # the runtime event count when it began, and the read.
        self._prefetched: tuple[int, asyncio.Future[SandboxListing]] | None = None
        self._pod_dirs: tuple[Path, Path] | None = None
        # This sync began because the resync period (or a back-off) ran out, not because
        # anything woke the worker (set by `_run`).
        self.periodic = False
        # What the last status a sync published was built from: the pod object, its
        # sandbox, containers and waiting reasons (`_sync_running`); None once anything
        # else published one.
        self._status_basis: StatusBasis | None = None

    # -- loop --

    def spawn(self, work: Awaitable[Any]) -> None:
        """Run `work` in the background; its failure is logged with the pod named."""
        self.workers.spawn(work, pod=self.pod)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(),
                                                           name=f"pod-worker-{self.uid}")

    async def _run(self) -> None:
        settings = self.deps.settings
        try:
            while not self.done:
                self.wake.clear()
                began = time.monotonic()
                self.syncing = True
                self.workers.sync_began()
                if not self.status_held:
                    self.deps.status.hold(self.uid)
                    self.status_held = True
                self.changed_in_sync = False
                try:
                    delay = await self.sync()
                except asyncio.CancelledError:
                    raise
                except SyncRetry as restart:
                    delay = restart.delay if restart.delay is not None else IDLE
                except Exception:
                    log.exception("syncing pod %s failed", format_pod(self.pod))
                    delay = settings.retry_delay
                finally:
                    # A change waiting for its allocation or its volumes keeps the hold: its
                    # `Pending` status and the restarted container's are one write when these
                    # are quick (else it is written after `max_hold`). So does a sync during
                    # which the pod's allocated spec changed (the change was allocated while it
                    # ran): the next sync, at once, actuates the change, and its status is the
                    # one written. Else the status is written now, whatever wakes the worker.
                    if self.done or not (self.pod_runtime.awaiting_volumes or self.unallocated
                                         or self.unallocated_volumes or self.changed_in_sync):
                        self.deps.status.release(self.uid)
                        self.status_held = False
                    self.syncing = False
                    self._drop_prefetched()  # read before this sync acted: stale now
                    self.workers.sync_ended()
                self.deps.on_sync_done("sync", time.monotonic() - began)
                if self.done:
                    break
                wait = (min(delay, resync_interval(settings.resync_period))
                        if not self.terminal else delay)
                if wait == IDLE:
                    await self.wake.wait()
                elif wait > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self.wake.wait()
                self.periodic = wait > 0 and not self.wake.is_set()
        finally:
            self._drop_prefetched()  # the worker ends, or the kubelet stops
        self.workers._worker_done(self)

    # -- sync --

    def deleting(self) -> bool:
        return self.removed or bool(metadata(self.pod).get("deletionTimestamp"))

    async def sync(self) -> float:
        trace.mark("kubelet.sync", trace.name_of(self.pod))
        self.pod_runtime.awaiting_volumes = False  # set again by this sync's actions
        if self.deleting():
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
        pod_runtime = self.pod_runtime
        if not self.storage_ready:
            await self._prepare_storage()
        if deps.settings.pod_dirs and not self._dirs_exist():  # two stats; a thread to make
            await deps.offload(self._ensure_dirs)
        self._report_volume_errors()
        if not self.volumes_ready and not await self._wait_volumes():
            self.publish_status()
            return 0.0
        sandbox, instances = await self._listing()
        if not self.acted and not any(instances.values()) and \
                (pod.get("status") or {}).get("containerStatuses"):
            # A pod from before this kubelet's start whose containers are gone (a node
            # reboot): as upstream's syncPod, set the status found before acting, so that
            # Ready turns False here and True again once the containers run.
            self.publish_status(instances, sandbox)
        actions = compute_pod_actions(pod, instances, pod_runtime.volumes_ready_for,
                                      self._failed_probe, self._started,
                                      hot_plug=self.deps.settings.hot_plug)
        next_delay = await pod_runtime.execute(actions.actions, instances, sandbox)
        self.acted = True
        if actions.init_failed:
            self.terminal = True
        if actions.init_done:
            await pod_runtime.stop_removed_containers(instances, sandbox)
        if changes_no_container_state(actions.actions) and \
                set(instances) <= container_names(pod):
            # Nothing changed, or only mounts, live, and the worker knows how: its
            # containers as listed at the sync's start with those changes, no listing on
            # the way to the status (a container that changed state meanwhile wakes the
            # worker again; upstream's sync builds its status from the pod cache as it was
            # when the sync began).
            fresh, instances = sandbox, pod_runtime.with_live_changes(instances)
        else:  # both runtime reads at once: the status goes out as soon as they are in
            fresh, instances = await pod_runtime.sandbox_status_and_instances()
        sandbox = fresh or sandbox
        if actions.init_done and all_done(self.pod, instances):
            self.terminal = True
        if not self._unchanged_since_last_status(actions.actions, sandbox, instances):
            pod_runtime.removed_statuses = await pod_runtime.removed_container_statuses(
                instances)
            if trace.ENABLED:
                trace.mark("kubelet.status_build", format_pod(pod))
            self.publish_status(instances, sandbox)
            self._status_basis = (pod, sandbox, instances, dict(pod_runtime.waiting))
            if trace.ENABLED:
                trace.mark("kubelet.status_published", format_pod(pod))
        self._maybe_report_started(instances)
        if self.terminal:
            await deps.status.write(self.uid)
            await self._finish_terminal()
            return IDLE
        return next_delay

    def _unchanged_since_last_status(self, actions: Sequence[Any],
                                     sandbox: SandboxStatus | None,
                                     instances: Instances) -> bool:
        """A periodic sync that did nothing (at most cleared waiting reasons there were
        none of) and found the pod object, its sandbox, its containers and their waiting
        reasons as the last published status was built from them: that status stands, and
        building it again would cost the sync most of its time. Whatever else a status is
        made of (volumes, probes, allocation) changes only by waking the worker, so a sync
        the timer began has seen none of it."""
        basis = self._status_basis
        return (self.periodic and not self.terminal and basis is not None
                and all(isinstance(a, ClearWaiting) and not a.volumes_pending
                        for a in actions)
                and basis[0] is self.pod and basis[1] == sandbox and basis[2] == instances
                and basis[3] == self.pod_runtime.waiting)

    def _drop_prefetched(self) -> None:
        """Forget a listing read ahead (cancelled if still under way: nobody will use it)."""
        if self._prefetched is not None:
            self._prefetched[1].cancel()
            self._prefetched = None

    def prefetch_listing(self) -> None:
        """A change of the pod is being checkpointed (nothing of it may be actuated yet):
        read its sandbox and containers meanwhile, so the sync that actuates the change
        need not wait for the listing. Only between syncs (nothing this worker does can
        then change them before the next sync begins), and only for a running pod."""
        if self.syncing or self.done or self._prefetched is not None or self.terminal or \
                self.deleting() or self.pod_runtime.sandbox_id is None:
            return
        read = asyncio.ensure_future(self.pod_runtime.sandbox_status_and_instances())
        read.add_done_callback(_retrieved)
        self._prefetched = (self.runtime_events, read)

    async def _listing(self) -> tuple[SandboxStatus | None, Instances]:
        """The sandbox and the containers for this sync: the listing read ahead when it
        began after the last sync ended and no runtime (or probe) event for the pod has come
        since (as upstream's pod cache, newer than the last sync, which only the relister
        updates), else read now. A volume event changes no container: it leaves the read
        valid."""
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and prefetched[0] == self.runtime_events:
            with contextlib.suppress(Exception):
                sandbox, listed = await prefetched[1]
                if sandbox is not None and sandbox.ready and \
                        prefetched[0] == self.runtime_events:
                    return sandbox, listed
        return await self.pod_runtime.sandbox_and_instances()

    def _failed_probe(self, name: str, container_id: str) -> tuple[str, float | None] | None:
        probes = self.deps.probes
        return probes.failed_probe(self.uid, name, container_id) if probes is not None \
            else None

    def _started(self, name: str, container_id: str) -> bool:
        probes = self.deps.probes
        return probes.started(self.uid, name, container_id) if probes is not None else True

    def _maybe_report_started(self, instances: Instances) -> None:
        if self.start_reported:
            return
        regular = [str(c.get("name")) for c in pod_spec(self.pod).get("containers") or []]
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

    def _dirs(self) -> tuple[Path, Path]:
        """The pod's directory and its log directory (named by its uid, namespace and name,
        which never change: made once)."""
        if self._pod_dirs is None:
            root = self.deps.root_dir
            self._pod_dirs = (root / "pods" / self.uid, pod_log_dir(root, self.pod))
        return self._pod_dirs

    def _dirs_exist(self) -> bool:
        pod_dir, log_dir = self._dirs()
        return os.path.isdir(pod_dir) and os.path.isdir(log_dir)

    def _ensure_dirs(self) -> None:
        for path in self._dirs():
            path.mkdir(parents=True, exist_ok=True)

    def _report_volume_errors(self) -> None:
        errors = self.deps.volumes.volume_errors(self.uid)
        for name, message in errors.items():
            if self.failed_mount_reported.get(name) == message:
                continue
            self.failed_mount_reported[name] = message
            if message.startswith("MountVolume.") or "failed" in message.lower():
                reason = events.FAILED_UNMOUNT if message.startswith("UnmountVolume.") else \
                    events.FAILED_MOUNT
                self.spawn(self.deps.events.pod(self.pod, events.WARNING, reason, message))

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
                    self.publish_status()  # the containers wait: ContainerCreating
                    raise SyncRetry(settings.retry_delay) from None
            return False
        self.volumes_ready = True
        self.mount_wait_started = None
        return True

    def publish_status(self, instances: Instances | None = None,
                       sandbox: SandboxStatus | None = None, *,
                       terminal: bool | None = None) -> None:
        deps = self.deps
        self._status_basis = None  # `_sync_running` sets it again when it published this
        terminal_now = self.terminal if terminal is None else terminal
        view = PodRuntimeView(sandbox=sandbox, containers=instances or {},
                              waiting=dict(self.pod_runtime.waiting),
                              runtime_name=deps.runtime.name, terminal=terminal_now,
                              probes=deps.probes.probe_states(self.uid)
                              if deps.probes is not None else None)
        old = deps.status.get(self.uid)
        if old is None:
            old = dict(self.pod.get("status") or {})
        status = generate_pod_status(self.pod, view, host_ip=deps.host_ip, old_status=old)
        statuses = status.setdefault("containerStatuses", [])
        statuses.extend(self.pod_runtime.removed_statuses)
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

    # -- terminal pods --

    async def _finish_terminal(self) -> None:
        """A pod whose containers are done for good: stop what still runs (sidecars) and
        the sandbox; its containers and logs stay until it is deleted."""
        if self.terminal_cleaned:
            return
        self.terminal = True
        await self.pod_runtime.kill_pod(self._grace_period())
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
        await self.pod_runtime.kill_pod(grace)
        self.evicted = True
        self.terminal_cleaned = True
        self.needs_volumes = False
        # The killed containers' states first: no await between the phase and the container
        # states below, so no status write shows `Failed` with a container still running.
        instances = await self.pod_runtime.instances()
        old = dict(self.deps.status.get(self.uid) or self.pod.get("status") or {})
        old.update({"phase": "Failed", "reason": reason, "message": message})
        if condition is not None:
            old["conditions"] = [c for c in old.get("conditions") or []
                                 if c.get("type") != condition.get("type")]
            old["conditions"].append({**condition, "lastTransitionTime": rfc3339(time.time())})
        self.deps.status.set_pod_status(self.pod, old)
        self.publish_status(instances, None, terminal=True)
        self.deps.on_volumes_changed()

    # -- termination --

    def _grace_period(self) -> float:
        md = metadata(self.pod)
        grace = md.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = pod_spec(self.pod).get("terminationGracePeriodSeconds")
        if grace is None:
            grace = DEFAULT_GRACE_PERIOD
        return max(float(grace), self.deps.settings.minimum_grace_period)

    async def terminate(self) -> float:
        """Kill, write the final status, clean up, delete the pod object."""
        deps = self.deps
        runtime = deps.runtime
        grace = self._grace_period()
        try:
            sandboxes = await self.pod_runtime.kill_pod(grace)
            instances: dict[str, list[ContainerStatus]] = {}
            if not self.removed and sandboxes:
                for s in sandboxes:
                    for c in await runtime.list_containers(s.id):
                        instances.setdefault(c.name, []).append(c)
                for mine in instances.values():
                    mine.sort(key=lambda c: (c.attempt, c.created_at))
                self.pod_runtime.waiting.clear()
                self.publish_status(instances, None, terminal=True)
                await deps.status.write(self.uid)
            for s in sandboxes:
                for c in await runtime.list_containers(s.id):
                    await runtime.remove_container(c.id)
                await runtime.remove_pod_sandbox(s.id)
            self.pod_runtime.sandbox_id = None
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
        if deps.settings.pod_dirs and not await asyncio.to_thread(self._remove_dirs):
            return deps.settings.retry_delay
        if not self.removed:
            md = metadata(self.pod)
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
        left = mounts_under(pod_dir)
        if left:
            log.warning("pod %s: mounts left under %s: %s", format_pod(self.pod), pod_dir,
                        left)
            return False
        shutil.rmtree(pod_dir, ignore_errors=True)
        shutil.rmtree(pod_log_dir(self.deps.root_dir, self.pod), ignore_errors=True)
        return not pod_dir.exists()


# --- all pods --------------------------------------------------------------------------------


class SandboxOwner(Protocol):
    """Whose a sandbox is (a runtime's `SandboxStatus`, or the fake runtime's own record)."""

    @property
    def pod_uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...


class PodWorkers:
    """The pod workers of one kubelet."""

    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self.crash_backoff = BackOff(deps.settings.backoff)
        self.image_backoff = BackOff(deps.settings.image_backoff)
        self.live_mounts = hotplug.LiveMounts(
            deps.runtime, deps.events, BackOff(BackOffPolicy(*hotplug.LIVE_MOUNT_BACKOFF)),
            lambda work: self.spawn(work))
        self._workers: dict[str, PodWorker] = {}
        self._background: set[asyncio.Task[Any]] = set()
        # Workers in a sync now; `_idle` is set while there are none.
        self._syncing = 0
        self._idle = asyncio.Event()
        self._idle.set()
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

    def sync_began(self) -> None:
        self._syncing += 1
        self._idle.clear()

    def sync_ended(self) -> None:
        self._syncing -= 1
        if self._syncing == 0:
            self._idle.set()

    def is_idle(self) -> bool:
        """No pod worker is in a sync."""
        return self._idle.is_set()

    async def idle(self) -> None:
        """Return once no pod worker is in a sync."""
        await self._idle.wait()

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
        return worker is not None and worker.deleting()

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
        return worker.pod_runtime.cache.volume_in_use(volume_name) if worker is not None else None

    def update(self, pod: Obj, *, unallocated: Sequence[Obj] = (),
               unallocated_volumes: Sequence[str] = (), deciding: bool = False) -> None:
        """The pod as the node has allocated it (the API's metadata, the allocated spec),
        and the containers and volumes the API has that are not allocated yet. `deciding`:
        the allocation of those is being decided (its outcome, allocated or not, wakes the
        worker), so they alone do not start a sync that would only show them `Pending` and
        hold up the one that actuates them."""
        uid = pod_uid(pod)
        if self.deps.probes is not None:
            self.deps.probes.update_pod(pod)
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
            if not deciding:
                worker.changed_in_sync = True
                worker.wake.set()
        if old.get("spec") != pod.get("spec"):
            worker.changed_in_sync = True
            worker.wake.set()
        # A new phase wakes the worker, but not a running one this kubelet wrote itself,
        # coming back on the watch (the sync that wrote it acted on it already: every pod's
        # Pending -> Running). A terminal phase always does (the worker finishes the pod).
        phase = (pod.get("status") or {}).get("phase")
        if metadata(old).get("deletionTimestamp") != metadata(pod).get("deletionTimestamp") or \
                ((old.get("status") or {}).get("phase") != phase and
                 (phase in ("Succeeded", "Failed") or
                  phase != self.deps.status.desired_phase(uid))):
            worker.wake.set()

    def remove(self, pod: Obj) -> None:
        """The pod is gone from the API: stop it and clean up."""
        uid = pod_uid(pod)
        if self.deps.probes is not None:
            self.deps.probes.remove_pod(uid)
        worker = self._workers.get(uid)
        if worker is None:
            worker = self._workers[uid] = PodWorker(self, pod)
            worker.removed = True
            worker.start()
            return
        worker.removed = True
        worker.wake.set()

    def remove_orphans(self, sandboxes: Iterable[SandboxOwner], known: set[str]) -> set[str]:
        """Stop and remove the pods of `sandboxes` whose UID is not in `known` (the kubelet's
        housekeeping of pods the runtime has and the kubelet no longer knows); their UIDs."""
        removed: set[str] = set()
        for sandbox in sandboxes:
            uid = sandbox.pod_uid
            if uid in known or uid in removed:
                continue
            log.info("removing the orphaned sandbox of pod %s/%s (%s)", sandbox.namespace,
                     sandbox.name, uid)
            self.remove({"metadata": {"uid": uid, "name": sandbox.name,
                                      "namespace": sandbox.namespace}})
            removed.add(uid)
        return removed

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

    def runtime_changed(self, uid: str) -> None:
        """The relister (or a probe) saw the pod's containers change: its worker syncs, and
        a listing it read ahead is stale."""
        worker = self._workers.get(uid)
        if worker is not None:
            worker.runtime_events += 1
            worker.wake.set()

    def prefetch_listing(self, uid: str) -> None:
        """The pod's change is being checkpointed: its worker reads its containers
        meanwhile (`PodWorker.prefetch_listing`)."""
        worker = self._workers.get(uid)
        if worker is not None:
            worker.prefetch_listing()

    def _worker_done(self, worker: PodWorker) -> None:
        if self._workers.get(worker.uid) is worker:
            del self._workers[worker.uid]
        self.deps.status.forget(worker.uid)
        if self.deps.probes is not None:
            self.deps.probes.remove_pod(worker.uid)
        self.deps.on_volumes_changed()
        self.on_worker_done(worker.uid)

    async def close(self) -> None:
        """Stop the workers (not the containers: they outlive the kubelet)."""
        tasks = [w.task for w in self._workers.values() if w.task is not None]
        tasks += list(self._background)
        await cancel_and_wait(*tasks)


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
            if mounts_under(path):
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

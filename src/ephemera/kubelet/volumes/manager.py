"""The kubelet's volume manager, shaped as upstream's `pkg/kubelet/volumemanager`
(reference/k8s-semantics.md section 5.1, KEP-6395 "VolumeManager").

State is kept **per volume**, keyed by (pod UID, volume name), never per pod, so volumes can
be added to and removed from a running pod:

- **Desired state of world (DSW)**: built by `set_desired_pods(pods)` from the pods the
  kubelet has admitted (for KEP-6395: the allocated pods). Only volumes some container
  (regular, init or ephemeral) mounts are desired ("Skipping unused volume"). Pods whose
  phase is Succeeded or Failed, and pods handed to `teardown_pod`, are left out. A volume
  whose source no plugin serves is a pod processing error
  (`failed to get Plugin from volumeSpec for volume "x" err=no volume plugin matched`).
  Each desired pod carries a version that goes up when its labels, annotations or spec
  change, or when `wait_for_pod_volumes` reprocesses it; resyncing volumes are set up again
  when it does.
- **Actual state of world (ASW)**: what is on disk, per volume: mounted (set up
  successfully, with the fingerprint of the volume source it was set up from) or uncertain
  (a setup failed part-way, or the volume was found on disk at start-up and not verified
  yet). Only mounted volumes whose source matches the desired one count as mounted.
- **Reconciler** (`run()`): on every change, when a back-off or a resync falls due, and
  every `reconcile_period` (0.1 s) while a teardown waits for its volume to go out of use,
  sets up what is desired but not mounted, and re-runs setup of
  configMap/secret/downwardAPI/projected volumes every `sync_period` (default 60 s,
  upstream's pod sync period; up to `RESYNC_SLACK` early, so that a node's resyncs share
  passes) and when their pod's version goes up. (Upstream's loop wakes every 0.1 s
  whatever happens; a settled node here costs no pass until something is due.) Then it
  tears down what is in ASW but not desired (a removed pod, a volume
  removed from a running pod, a volume re-added under the same name with another source,
  whose new setup waits for it), but only once the in-use checker (`set_in_use_checker`,
  KEP-6395's `IsVolumeInUseByPod`) says no running container of the pod still mounts it.
  (Upstream unmounts first; setups first here so that a swap's new volumes never wait for
  the in-use checks of the old ones.) One
  operation at a time per volume, any number of volumes at once; a failed operation is
  retried with per-volume exponential back-off (`backoff_initial` 0.5 s doubling up to
  `backoff_max` 122 s, as upstream's 2m2s).
- At start-up `run()` reconstructs ASW from `<root>/pods/*/volumes/*/*` (a kubelet restart
  adopts running pods); reconstructed volumes of pods nobody desires are torn down only
  after the first `set_desired_pods` call ("sources ready").

Errors are per volume: `volume_errors(uid)` maps a volume name to
`MountVolume.SetUp failed for volume "x" : <cause>` (upstream's FailedMount event text),
`UnmountVolume.TearDown failed for volume "x" : <cause>`, or the pod processing error.
`volume_statuses(uid)` gives KEP-6395's `volumeStatuses` entries (`Pending`, `HostMounted`,
`ErrorMounting`, `Unmounting`). `wait_for_pod_volumes` raises `VolumeMountTimeout` whose
`str()` is upstream's FailedMount message `Unable to attach or mount volumes: unmounted
volumes=[a b], unattached volumes=[], failed to process volumes=[]: context deadline
exceeded` (lists as Go's `%v` prints them, sorted), failing fast with the processing errors
joined by "; " instead of the deadline when the pod has some.

**Early set-up of a change's volumes**: while the kubelet writes the allocation checkpoint of
a pod change (KEP-6395), the emptyDir, Secret and ConfigMap volumes the change adds (names
the desired pod lacks) are desired already, so their set-up overlaps the checkpoint's fsync.
The change being written is the allocation manager's (`set_staged_source(source)`:
`source(uid)`, the pod's change being written or None); `staging_changed(uid)` says its write
began or ended. Once it ended the early volumes are no longer desired as such (the allocated
pod then desires them, or, when the write failed, they are torn down as any volume no longer
desired). Nothing mounts them in a container before the change is allocated (the pod worker
sees only the allocated spec), and `volume_statuses` leaves them out until then (the worker
reports them `Pending`); a kubelet killed meanwhile finds them on disk at start-up and tears
them down (their pod does not desire them). Only those three kinds: their contents do not
depend on the pod's spec (a downwardAPI or projected volume's do).

Every finished setup and teardown is reported to the observer (`set_operation_observer`) as a
`VolumeOperation` (plugin, seconds, error, and whether the volume is *dynamic*: added to or
removed from a pod already desired, KEP-6395), for the kubelet's metrics and events.

Host directories: `<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`. When a pod is
neither desired nor has any volume left, its `volumes/` dir (and `pods/<uid>` if then empty)
is removed; the rest of the pod dir belongs to the runtime and the agent.

Everything runs on one event loop; plugins do their blocking work in threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from ephemera import trace
from ephemera.aiotasks import cancel_and_wait
from ephemera.api.goformat import go_error_text
from ephemera.kubelet.volumes.base import (
    VolumeHost,
    VolumePlugin,
    pod_uid,
    teardown_dir,
)
from ephemera.kubelet.volumes.configmap import ConfigMapPlugin
from ephemera.kubelet.volumes.downwardapi import DownwardAPIPlugin
from ephemera.kubelet.volumes.emptydir import EmptyDirPlugin
from ephemera.kubelet.volumes.image import ImagePlugin
from ephemera.kubelet.volumes.projected import ProjectedPlugin
from ephemera.kubelet.volumes.secret import SecretPlugin

__all__ = [
    "BACKOFF_INITIAL",
    "BACKOFF_MAX",
    "DEADLINE_EXCEEDED",
    "DEFAULT_SYNC_PERIOD",
    "MOUNT",
    "POD_ATTACH_AND_MOUNT_TIMEOUT",
    "RECONCILE_PERIOD",
    "UNMOUNT",
    "InUseChecker",
    "VolumeHostPhase",
    "VolumeManager",
    "VolumeMountTimeout",
    "VolumeOperation",
    "VolumeUnmountError",
    "backoff_delay",
    "default_plugins",
    "referenced_volume_names",
]

log = logging.getLogger(__name__)

POD_ATTACH_AND_MOUNT_TIMEOUT = 123.0  # upstream's podAttachAndMountTimeout, 2m3s
DEFAULT_SYNC_PERIOD = 60.0  # upstream's --sync-frequency
RECONCILE_PERIOD = 0.1  # upstream's reconciler loop period, while a teardown waits
RESYNC_SLACK = 10.0  # resyncs due within this long share a pass (at most sync_period / 6)
# The volume kinds a change being allocated sets up early (`set_staged_source`).
_EARLY_KINDS = frozenset({"emptyDir", "secret", "configMap"})
BACKOFF_INITIAL = 0.5  # upstream's initialDurationBeforeRetry
BACKOFF_MAX = 122.0  # upstream's maxDurationBeforeRetry, 2m2s
DEADLINE_EXCEEDED = "context deadline exceeded"
_TERMINATED_MEMORY = 4096
_DRAIN_TIMEOUT = 10.0  # how long run() waits for in-flight operations when stopped

InUseChecker = Callable[[str, str], Awaitable[bool]]
Key = tuple[str, str]  # (pod uid, volume name)
MOUNT = "mount"
UNMOUNT = "unmount"


@dataclass(frozen=True)
class VolumeOperation:
    """One finished setup (`mount`: the one that mounts the volume, not a resync of a mounted
    one) or teardown (`unmount`) of a volume; `error` is its FailedMount/FailedUnMount text
    ("" when it succeeded)."""

    pod_uid: str
    volume_name: str
    volume_plugin: str  # upstream's plugin name, e.g. kubernetes.io/empty-dir
    operation: str  # MOUNT or UNMOUNT
    seconds: float
    dynamic: bool  # added to / removed from a pod already desired (KEP-6395)
    error: str = ""


class VolumeHostPhase(StrEnum):
    """KEP-6395 `PodVolumeHostPhase`."""

    PENDING = "Pending"
    HOST_MOUNTED = "HostMounted"
    ERROR_MOUNTING = "ErrorMounting"
    UNMOUNTING = "Unmounting"


def _go_list(names: Iterable[str]) -> str:
    return "[" + " ".join(names) + "]"


class VolumeMountTimeout(Exception):
    """A pod's volumes were not all mounted in time (or the pod has processing errors).
    `str(exc)` is the FailedMount event message; `detail` is the part after
    `Unable to attach or mount volumes: `."""

    reason = "FailedMount"

    def __init__(
        self,
        unmounted: list[str],
        unattached: list[str],
        not_processed: list[str],
        cause: str,
    ) -> None:
        self.unmounted = unmounted
        self.unattached = unattached
        self.not_processed = not_processed
        self.cause = cause
        self.detail = (
            f"unmounted volumes={_go_list(unmounted)}, "
            f"unattached volumes={_go_list(unattached)}, "
            f"failed to process volumes={_go_list(not_processed)}: {cause}"
        )
        self.message = f"Unable to attach or mount volumes: {self.detail}"
        super().__init__(self.message)


class VolumeUnmountError(Exception):
    """`teardown_pod` could not unmount everything: `mounted volumes=[a b]: <cause>`."""

    def __init__(self, mounted: list[str], cause: str) -> None:
        self.mounted = mounted
        self.cause = cause
        super().__init__(f"mounted volumes={_go_list(mounted)}: {cause}")


async def _wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait for `event` at most `timeout` seconds. (Not `asyncio.wait_for`: on Python 3.11
    it can swallow a cancellation that arrives as the event fires, and `run()` would then
    never stop.)"""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


def backoff_delay(failures: int, initial: float, maximum: float) -> float:
    """The wait before retrying an operation that failed `failures` times in a row:
    `initial`, doubling per failure, at most `maximum` (upstream's exponentialbackoff)."""
    return min(initial * (2 ** max(failures - 1, 0)), maximum)


def default_plugins() -> list[VolumePlugin]:
    return [
        EmptyDirPlugin(),
        ConfigMapPlugin(),
        SecretPlugin(),
        DownwardAPIPlugin(),
        ProjectedPlugin(),
        ImagePlugin(),
    ]


def referenced_volume_names(pod: Mapping[str, Any]) -> set[str]:
    """Names of the volumes some container (regular, init, ephemeral) mounts or uses as a
    device: upstream's `GetPodVolumeNames`."""
    spec = pod.get("spec") or {}
    names: set[str] = set()
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(kind) or []:
            for mount in [
                *(container.get("volumeMounts") or []),
                *(container.get("volumeDevices") or []),
            ]:
                if mount.get("name"):
                    names.add(str(mount["name"]))
    return names


def _fingerprint(volume: Mapping[str, Any]) -> str:
    """A volume source as canonical JSON (sorted keys), to compare with a later one."""
    return orjson.dumps(volume, option=orjson.OPT_SORT_KEYS).decode()


def _resync_basis(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return orjson.dumps([meta.get("labels"), meta.get("annotations"), pod.get("spec")],
                        option=orjson.OPT_SORT_KEYS, default=str).decode()


def _same_basis(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """`_resync_basis(a) == _resync_basis(b)` without serializing either (a new version of
    the pod object whose spec, labels and annotations are equal: the common case)."""
    ma, mb = a.get("metadata") or {}, b.get("metadata") or {}
    return a.get("spec") == b.get("spec") and ma.get("labels") == mb.get("labels") and \
        ma.get("annotations") == mb.get("annotations")


@dataclass
class DesiredVolume:
    pod_uid: str
    name: str
    volume: dict[str, Any]
    plugin: VolumePlugin
    fingerprint: str
    host_dir: Path
    dynamic: bool = False  # added to the pod after it was first desired
    early: bool = False  # of the change whose checkpoint is being written (`_early_volumes`)


@dataclass
class DesiredPod:
    uid: str
    pod: dict[str, Any]
    volumes: dict[str, DesiredVolume]
    errors: dict[str, str]  # volume name -> processing error
    version: int
    resync_basis: str
    # The object it was built from (identity only: pod objects are never changed in place,
    # a change is a new object) and whether it holds early volumes of a change being written.
    source: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    early: bool = False


@dataclass
class MountedVolume:
    pod_uid: str
    name: str
    plugin_dir: str
    host_dir: Path
    fingerprint: str | None  # None: reconstructed from disk, source unknown
    uncertain: bool  # on disk, but not (or not verifiably) set up
    synced_version: int = 0
    last_sync: float = 0.0
    early: bool = False  # set up early and not set up again since (`_carry_early_sync`)


def _mounted_from(
    desired: DesiredVolume, *, uncertain: bool, synced_version: int = 0, last_sync: float = 0.0
) -> MountedVolume:
    """The actual-state entry for the desired volume `desired` once its setup ran."""
    return MountedVolume(
        pod_uid=desired.pod_uid,
        name=desired.name,
        plugin_dir=desired.plugin.dir_name,
        host_dir=desired.host_dir,
        fingerprint=desired.fingerprint,
        uncertain=uncertain,
        synced_version=synced_version,
        last_sync=last_sync,
        early=desired.early and not uncertain,
    )


@dataclass
class _OpState:
    failures: int = 0
    retry_at: float = 0.0
    error: str = ""


@dataclass
class _Subscribers:
    callbacks: list[Callable[[str], Any]] = field(default_factory=list)


class VolumeManager:
    """Mounts and unmounts the volumes of the pods a kubelet runs. See the module docstring."""

    def __init__(
        self,
        root_dir: Path,
        host: VolumeHost,
        *,
        plugins: list[VolumePlugin] | None = None,
        sync_period: float = DEFAULT_SYNC_PERIOD,
        reconcile_period: float = RECONCILE_PERIOD,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        self.root_dir = Path(root_dir)
        self.host = host
        self.plugins = plugins if plugins is not None else default_plugins()
        self.sync_period = sync_period
        self.reconcile_period = reconcile_period
        # How early a volume's periodic resync may run to share a pass with one that is due.
        self.resync_slack = min(RESYNC_SLACK, sync_period / 6)
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._plugins_by_dir = {p.dir_name: p for p in self.plugins}
        self._dsw: dict[str, DesiredPod] = {}
        self._asw: dict[Key, MountedVolume] = {}
        self._op_states: dict[Key, _OpState] = {}
        self._ops: dict[Key, asyncio.Task[None]] = {}
        # Early setups under way (`DesiredVolume.early`), and those of them whose change was
        # allocated meanwhile: (old version, new version), for `_carry_early_sync`.
        self._early_setups: set[Key] = set()
        self._carried: dict[Key, tuple[int, int]] = {}
        self._terminated: OrderedDict[str, None] = OrderedDict()
        self._sources_ready = False
        self._in_use_checker: InUseChecker | None = None
        self._subscribers = _Subscribers()
        self._callback_tasks: set[asyncio.Task[Any]] = set()
        self._wake_event: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._reconstructed = False
        self._cleaning: set[str] = set()  # pods whose empty volume dirs are being removed
        self._observer: Callable[[VolumeOperation], None] | None = None
        # uid -> the pod's change whose allocation is being written (its early volumes)
        self._staged_source: Callable[[str], Mapping[str, Any] | None] = lambda uid: None

    # -- wiring ------------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[str], Any]) -> Callable[[], None]:
        """Call `callback(pod_uid)` (sync, or async and then scheduled) when one of the pod's
        volumes becomes mounted, fails to set up or tear down, or is torn down. Returns a
        function that unsubscribes."""
        self._subscribers.callbacks.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.callbacks.remove(callback)

        return unsubscribe

    def set_staged_source(self, source: Callable[[str], Mapping[str, Any] | None]) -> None:
        """`source(uid)`: the pod's change whose allocation checkpoint is being written, or
        None (its new emptyDir, Secret and ConfigMap volumes are set up early; see the module
        docstring)."""
        self._staged_source = source

    def set_in_use_checker(self, checker: InUseChecker | None) -> None:
        """`async checker(pod_uid, volume_name) -> bool`: True while a running container of
        the pod mounts the volume. The reconciler tears a volume down only when it says
        False (without a checker, at once)."""
        self._in_use_checker = checker

    def set_operation_observer(self, observer: Callable[[VolumeOperation], None] | None
                               ) -> None:
        """`observer(operation)` is called after every finished setup and teardown."""
        self._observer = observer

    def _observe(self, operation: VolumeOperation) -> None:
        if self._observer is None:
            return
        try:
            self._observer(operation)
        except Exception:
            log.exception("volume operation observer failed")

    # -- paths -------------------------------------------------------------------------------

    def pod_dir(self, uid: str) -> Path:
        return self.root_dir / "pods" / uid

    def pod_volumes_dir(self, uid: str) -> Path:
        return self.pod_dir(uid) / "volumes"

    def _find_plugin(self, volume: Mapping[str, Any]) -> VolumePlugin | None:
        for plugin in self.plugins:
            if plugin.can_support(volume):
                return plugin
        return None

    # -- desired state -----------------------------------------------------------------------

    def set_desired_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Replace the desired state with these pods' volumes (the admitted pods; full
        objects). Volumes no longer desired are torn down by the reconciler once unused.
        A pod given as the very object its desired state was built from, with no change
        being written, keeps that state as it is (nothing is parsed or fingerprinted again:
        a call costs the pods that changed, not every pod of the node)."""
        self._sources_ready = True
        new: dict[str, DesiredPod] = {}
        for pod in pods:
            uid = pod_uid(pod)
            if not uid or uid in self._terminated:
                continue
            if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
                continue
            old = self._dsw.get(uid)
            if old is not None and old.source is pod and not old.early \
                    and self._staged_source(uid) is None:
                new[uid] = old
                continue
            new[uid] = self._process_pod(pod, old)
        for uid, old in self._dsw.items():
            if uid not in new:
                self._forget_desired(old, None)
        self._dsw = new
        self._wake()
        self._signal_change()

    def _process_pod(self, pod: Mapping[str, Any], old: DesiredPod | None) -> DesiredPod:
        uid = pod_uid(pod)
        referenced = referenced_volume_names(pod)
        volumes: dict[str, DesiredVolume] = {}
        errors: dict[str, str] = {}
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            name = str(volume.get("name") or "")
            if name not in referenced:
                continue  # upstream: "Skipping unused volume"
            plugin = self._find_plugin(volume)
            if plugin is None:
                errors[name] = (
                    f'failed to get Plugin from volumeSpec for volume "{name}" '
                    "err=no volume plugin matched"
                )
                continue
            before = old.volumes.get(name) if old is not None else None
            # An unchanged volume keeps its fingerprint (equal as Python values is equal as
            # canonical JSON for what a volume source holds).
            fingerprint = before.fingerprint if before is not None and \
                before.volume == volume else _fingerprint(volume)
            volumes[name] = DesiredVolume(
                pod_uid=uid,
                name=name,
                volume=dict(volume),
                plugin=plugin,
                fingerprint=fingerprint,
                host_dir=before.host_dir if before is not None and before.plugin is plugin
                else self.pod_volumes_dir(uid) / plugin.dir_name / name,
                dynamic=old is not None and (before is None or before.dynamic
                                             or before.fingerprint != fingerprint),
            )
        early = False
        for name, volume in self._early_volumes(uid, pod).items():
            plugin = self._find_plugin(volume)
            if plugin is None:
                continue
            early = True
            volumes[name] = DesiredVolume(
                pod_uid=uid, name=name, volume=dict(volume), plugin=plugin,
                fingerprint=_fingerprint(volume),
                host_dir=self.pod_volumes_dir(uid) / plugin.dir_name / name, dynamic=True,
                early=True)
        basis = old.resync_basis if old is not None and old.source is not None and \
            _same_basis(old.source, pod) else _resync_basis(pod)
        version = 1 if old is None else old.version + int(basis != old.resync_basis)
        desired = DesiredPod(uid, dict(pod), volumes, errors, version, basis, source=pod,
                             early=early)
        if old is not None:
            self._forget_desired(old, desired)
            if version > old.version:
                self._carry_early_sync(old.version, desired)
        return desired

    def _carry_early_sync(self, old_version: int, new: DesiredPod) -> None:
        """The pod's version went up (its allocated spec changed): a volume set up early
        (from the staged change, while its checkpoint was written) and in sync at the old
        version counts as in sync at the new one, so the allocation of that change does not
        set it up a second time a few milliseconds after the first (its files were just
        written from the object cache). A Secret or ConfigMap that changed meanwhile bumped
        the version through `resync_pod` first, so such a volume is behind and still set up
        again. An early setup still running is carried when it ends (`_setup_op`)."""
        for name, volume in new.volumes.items():
            key = (new.uid, name)
            mounted = self._asw.get(key)
            if key in self._early_setups:
                self._carried[key] = (old_version, new.version)
            elif mounted is not None and mounted.early and not mounted.uncertain and \
                    mounted.fingerprint == volume.fingerprint and \
                    mounted.synced_version == old_version:
                mounted.synced_version = new.version
                mounted.early = False

    def _forget_desired(self, old: DesiredPod, new: DesiredPod | None) -> None:
        """Drop the back-off and errors of volumes that left (or changed in) the desired
        state, so their teardown (or the new source's setup) starts fresh."""
        for name, volume in old.volumes.items():
            still = new.volumes.get(name) if new is not None else None
            if still is not None and still.fingerprint == volume.fingerprint:
                continue
            key = (old.uid, name)
            if key not in self._ops:
                self._op_states.pop(key, None)

    def _reprocess(self, pod: Mapping[str, Any]) -> None:
        """Upstream's ReprocessPod: take the newest pod object and set up its resyncing
        volumes again (how configMap and secret contents refresh on a pod sync)."""
        uid = pod_uid(pod)
        if not uid or uid in self._terminated:
            return
        old = self._dsw.get(uid)
        desired = self._process_pod(pod, old)
        if old is not None:
            desired.version = max(desired.version, old.version + 1)
        self._dsw[uid] = desired
        self._wake()

    def staging_changed(self, uid: str) -> None:
        """The pod's change being written (`set_staged_source`) began or ended: its early
        volumes are desired now, or no longer."""
        desired = self._dsw.get(uid)
        if desired is not None and uid not in self._terminated:
            self._dsw[uid] = self._process_pod(desired.pod, desired)
            self._wake()

    def _early_volumes(self, uid: str, pod: Mapping[str, Any] | None = None
                       ) -> dict[str, Mapping[str, Any]]:
        """The volumes of the pod's change being written that are set up early: emptyDir,
        Secret and ConfigMap volumes it mounts that `pod` (default: the desired pod) lacks."""
        staged = self._staged_source(uid)
        if staged is None or uid in self._terminated:
            return {}
        if pod is None:
            desired = self._dsw.get(uid)
            if desired is None:
                return {}
            pod = desired.pod
        have = {str(v.get("name") or "") for v in (pod.get("spec") or {}).get("volumes") or []}
        referenced = referenced_volume_names(staged)
        return {str(v.get("name")): v for v in (staged.get("spec") or {}).get("volumes") or []
                if isinstance(v, dict) and str(v.get("name") or "") in referenced
                and str(v.get("name")) not in have and _EARLY_KINDS & v.keys()}

    def resync_pod(self, pod_uid: str) -> None:
        """Set up the pod's resyncing volumes (configMap, secret, projected, downwardAPI)
        again at the next pass: a Secret or ConfigMap they read has changed."""
        desired = self._dsw.get(pod_uid)
        if desired is not None and pod_uid not in self._terminated:
            desired.version += 1
            self._wake()

    def _desired_volume(self, key: Key) -> DesiredVolume | None:
        pod = self._dsw.get(key[0])
        return None if pod is None else pod.volumes.get(key[1])

    # -- queries -----------------------------------------------------------------------------

    def _is_mounted(self, key: Key) -> bool:
        mounted = self._asw.get(key)
        desired = self._desired_volume(key)
        return (
            mounted is not None
            and desired is not None
            and not mounted.uncertain
            and mounted.fingerprint == desired.fingerprint
        )

    def mounted_volumes(self, pod_uid: str) -> dict[str, Path]:
        """Desired volumes of the pod that are set up: volume name -> host dir."""
        pod = self._dsw.get(pod_uid)
        if pod is None:
            return {}
        return {
            name: volume.host_dir
            for name, volume in pod.volumes.items()
            if self._is_mounted((pod_uid, name))
        }

    def is_volume_mounted(self, pod_uid: str, volume_name: str) -> bool:
        return self._is_mounted((pod_uid, volume_name))

    def mounted_image_refs(self) -> set[str]:
        """The references of the image volumes in the actual state (mounted, uncertain or
        waiting for their teardown, wanted or not): image GC keeps their images, whose
        layers are the mounts' lower dirs. A volume found on disk at start-up names the
        reference its pod's desired volume has (its own source is unknown)."""
        refs: set[str] = set()
        for key, mounted in self._asw.items():
            if not isinstance(self._plugins_by_dir.get(mounted.plugin_dir), ImagePlugin):
                continue
            source: Any = None
            if mounted.fingerprint is not None:
                with contextlib.suppress(ValueError):
                    source = orjson.loads(mounted.fingerprint).get("image")
            else:
                desired = self._desired_volume(key)
                source = desired.volume.get("image") if desired is not None else None
            if isinstance(source, dict) and source.get("reference"):
                refs.add(str(source["reference"]))
        return refs

    def has_volumes_on_disk(self, pod_uid: str) -> bool:
        """Some volume of the pod is still in the actual state (mounted, uncertain or being
        torn down)."""
        return pod_uid in self._cleaning or any(key[0] == pod_uid for key in self._asw)

    def volume_errors(self, pod_uid: str) -> dict[str, str]:
        """Volume name -> the latest error of that volume (setup, teardown or processing)."""
        result: dict[str, str] = {}
        pod = self._dsw.get(pod_uid)
        if pod is not None:
            result.update(pod.errors)
        for (uid, name), state in self._op_states.items():
            if uid == pod_uid and state.error:
                result[name] = state.error
        return result

    def volume_failures(self, pod_uid: str, volume_name: str) -> int:
        """Consecutive failed operations of a volume (0 once one succeeds)."""
        state = self._op_states.get((pod_uid, volume_name))
        return 0 if state is None else state.failures

    def volume_statuses(self, pod_uid: str) -> list[dict[str, str]]:
        """KEP-6395 `status.volumeStatuses` entries of the pod: desired volumes in spec
        order, then volumes being torn down."""
        statuses: list[dict[str, str]] = []
        errors = self.volume_errors(pod_uid)
        pod = self._dsw.get(pod_uid)
        seen: set[str] = set()
        if pod is not None:
            for volume in (pod.pod.get("spec") or {}).get("volumes") or []:
                name = str(volume.get("name") or "")
                if name not in pod.volumes and name not in pod.errors:
                    continue
                seen.add(name)
                entry = {"name": name}
                if self._is_mounted((pod_uid, name)):
                    entry["hostPhase"] = VolumeHostPhase.HOST_MOUNTED.value
                elif name in errors:
                    entry["hostPhase"] = VolumeHostPhase.ERROR_MOUNTING.value
                    entry["errorMessage"] = errors[name]
                else:
                    entry["hostPhase"] = VolumeHostPhase.PENDING.value
                statuses.append(entry)
        early = self._early_volumes(pod_uid)
        for uid, name in sorted(self._asw):
            if uid == pod_uid and name not in seen and name not in early:
                statuses.append({"name": name, "hostPhase": VolumeHostPhase.UNMOUNTING.value})
        return statuses

    def _unmounted(self, uid: str, expected: Iterable[str]) -> list[str]:
        return sorted(name for name in expected if not self._is_mounted((uid, name)))

    # -- waiting -----------------------------------------------------------------------------

    async def wait_for_pod_volumes(
        self, pod: Mapping[str, Any], timeout: float = POD_ATTACH_AND_MOUNT_TIMEOUT
    ) -> None:
        """Upstream's WaitForAttachAndMount: reprocess the pod (adding it to the desired
        state if it is not there), then wait until every volume its containers mount is set
        up. Raises `VolumeMountTimeout` on time-out, or at once when the pod has processing
        errors. Needs `run()` to be running."""
        uid = pod_uid(pod)
        expected = referenced_volume_names(pod)
        if not expected:
            return
        self._reprocess(pod)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            changed = self._change_event()
            desired = self._dsw.get(uid)
            unmounted = self._unmounted(uid, expected)
            not_in_dsw = sorted(
                name for name in expected if desired is None or name not in desired.volumes
            )
            if desired is not None and desired.errors:
                raise VolumeMountTimeout(
                    unmounted, [], not_in_dsw, "; ".join(desired.errors.values())
                )
            if not unmounted:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise VolumeMountTimeout(unmounted, [], not_in_dsw, DEADLINE_EXCEEDED)
            await _wait_event(changed, min(remaining, 1.0))

    def _change_event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _signal_change(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _wake(self) -> None:
        if self._wake_event is not None:
            self._wake_event.set()

    def _notify(self, uid: str) -> None:
        self._signal_change()
        for callback in list(self._subscribers.callbacks):
            try:
                result = callback(uid)
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._callback_tasks.add(task)
                    task.add_done_callback(self._callback_done)
            except Exception:
                log.exception("volume manager subscriber failed for pod %s", uid)

    def _notify_setup(self, key: Key) -> None:
        """A setup ended: the pod's subscribers are told, unless the volume is set up
        early (its pod's worker cannot use it before the change is allocated, which wakes
        the worker itself)."""
        if key[1] in self._early_volumes(key[0]):
            self._signal_change()
        else:
            self._notify(key[0])

    def _callback_done(self, task: asyncio.Task[Any]) -> None:
        self._callback_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("volume manager subscriber failed", exc_info=task.exception())

    # -- the reconciler ------------------------------------------------------------------------

    async def run(self) -> None:
        """The reconciler loop; runs until cancelled. When cancelled it waits (up to 10 s) for
        the operations in flight to finish, so nothing is mounted after it returns."""
        self._wake_event = asyncio.Event()
        if not self._reconstructed:
            self._reconstructed = True
            found = await asyncio.to_thread(self._scan_disk)
            for volume in found:
                self._asw.setdefault((volume.pod_uid, volume.name), volume)
        try:
            while True:
                self._wake_event.clear()
                due: float | None = None
                try:
                    due = await self.reconcile_once()
                except Exception:
                    log.exception("volume reconciler pass failed")
                wait = self.reconcile_period
                if due is not None:
                    wait = max(wait, due - self._now())
                await _wait_event(self._wake_event, wait)
        finally:
            # Let in-flight operations finish (a mount half-way in a thread would otherwise
            # land after the caller believes everything stopped); cancel only stragglers.
            tasks = list(self._ops.values())
            if tasks:
                await asyncio.wait(tasks, timeout=_DRAIN_TIMEOUT)
                await cancel_and_wait(*tasks)  # the stragglers; the others' ends taken
            self._wake_event = None

    def _scan_disk(self) -> list[MountedVolume]:
        """Volumes found under `<root>/pods/*/volumes/<plugin>/<name>` (reconstruction)."""
        found: list[MountedVolume] = []
        pods_dir = self.root_dir / "pods"
        if not pods_dir.is_dir():
            return found
        for pod_dir in pods_dir.iterdir():
            volumes_dir = pod_dir / "volumes"
            if not volumes_dir.is_dir():
                continue
            for plugin_dir in volumes_dir.iterdir():
                if not plugin_dir.is_dir():
                    continue
                for host_dir in plugin_dir.iterdir():
                    found.append(
                        MountedVolume(
                            pod_uid=pod_dir.name,
                            name=host_dir.name,
                            plugin_dir=plugin_dir.name,
                            host_dir=host_dir,
                            fingerprint=None,
                            uncertain=True,
                        )
                    )
        return found

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _backing_off(self, key: Key, now: float) -> bool:
        state = self._op_states.get(key)
        return state is not None and state.retry_at > now

    def _needs_teardown(self, key: Key) -> bool:
        mounted = self._asw.get(key)
        if mounted is None:
            return False
        desired = self._desired_volume(key)
        if desired is None:
            return self._sources_ready or key[0] in self._terminated
        return mounted.fingerprint is not None and mounted.fingerprint != desired.fingerprint

    async def reconcile_once(self) -> float | None:
        """One reconciler pass: start the setups and resyncs, then the teardowns, that are
        due. Operations run as tasks; this returns without waiting for them. Setups go first
        because a teardown waits for the in-use check (a runtime relist): a swap's new volumes
        are then never held up behind the old ones (a volume re-added under its name with
        another source still waits for the old one's teardown).

        Returns when the next pass is due if nothing wakes the reconciler before (every
        change of the desired state and every finished operation does): the earliest
        back-off expiry or periodic resync; None when a teardown waits for its volume to go
        out of use, which only a pass finds out (then every `reconcile_period`). A resync
        due within `resync_slack` runs with the due one, so the resyncs of a node's pods
        share passes instead of each waking the reconciler."""
        now = self._now()
        due = now + self.sync_period
        slack = self.resync_slack
        for pod in list(self._dsw.values()):
            for name, desired in pod.volumes.items():
                key = (pod.uid, name)
                if key in self._ops:
                    continue
                if self._backing_off(key, now):
                    due = min(due, self._op_states[key].retry_at)
                    continue
                mounted = self._asw.get(key)
                if mounted is None or mounted.uncertain:
                    if mounted is not None and mounted.fingerprint not in (
                        None,
                        desired.fingerprint,
                    ):
                        continue  # the old source goes first
                    self._start(key, self._setup_op(desired))
                elif mounted.fingerprint != desired.fingerprint:
                    continue  # torn down first, below
                elif desired.plugin.needs_resync:
                    resync_at = mounted.last_sync + self.sync_period
                    if mounted.synced_version < pod.version or now >= resync_at - slack:
                        self._start(key, self._setup_op(desired))
                    else:
                        due = min(due, resync_at)
        now = self._now()
        polled = False
        for key in list(self._asw):
            if key in self._ops or not self._needs_teardown(key):
                continue
            if self._backing_off(key, now):
                due = min(due, self._op_states[key].retry_at)
                continue
            if self._in_use_checker is not None and key[0] not in self._terminated:
                try:
                    in_use = await self._in_use_checker(key[0], key[1])
                except Exception:
                    log.exception("in-use check failed for volume %s of pod %s", key[1], key[0])
                    in_use = True
                if in_use:
                    polled = True
                    continue
                if key in self._ops or not self._needs_teardown(key):
                    continue  # things moved while we asked
            self._start(key, self._teardown_op(key))
        return None if polled else due

    def _start(self, key: Key, op: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(op)
        self._ops[key] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._ops.get(key) is finished:
                del self._ops[key]
            self._wake()

        task.add_done_callback(done)
        return task

    def _record_failure(self, key: Key, message: str) -> None:
        state = self._op_states.setdefault(key, _OpState())
        state.failures += 1
        delay = backoff_delay(state.failures, self.backoff_initial, self.backoff_max)
        state.retry_at = self._now() + delay
        state.error = message

    async def _setup_op(self, desired: DesiredVolume) -> None:
        key = (desired.pod_uid, desired.name)
        pod = self._dsw.get(desired.pod_uid)
        pod_object = pod.pod if pod is not None else {}
        version = pod.version if pod is not None else 0
        was_mounted = self._is_mounted(key)
        had_error = bool(self._op_states.get(key, _OpState()).error)
        started = time.monotonic()
        if desired.early:
            self._early_setups.add(key)
        name = trace.name_of(pod_object)
        trace.mark("kubelet.volume_setup", name)
        try:
            await desired.plugin.setup(pod_object, desired.volume, desired.host_dir, self.host)
            trace.mark("kubelet.volume_set_up", name)
        except asyncio.CancelledError:
            self._early_setups.discard(key)
            self._carried.pop(key, None)
            raise
        except Exception as exc:
            self._early_setups.discard(key)
            self._carried.pop(key, None)
            cause = go_error_text(exc)
            message = f'MountVolume.SetUp failed for volume "{desired.name}" : {cause}'
            log.warning("pod %s: %s", desired.pod_uid, message)
            self._record_failure(key, message)
            self._observe(VolumeOperation(desired.pod_uid, desired.name, desired.plugin.name,
                                          MOUNT, time.monotonic() - started, desired.dynamic,
                                          message))
            if key not in self._asw and await asyncio.to_thread(
                os.path.lexists, desired.host_dir
            ):
                self._asw[key] = _mounted_from(desired, uncertain=True)
            self._notify_setup(key)
            return
        self._early_setups.discard(key)
        carried = self._carried.pop(key, None)
        self._asw[key] = _mounted_from(
            desired, uncertain=False, synced_version=version, last_sync=self._now()
        )
        if carried is not None and carried[0] == version:
            self._asw[key].synced_version = carried[1]
            self._asw[key].early = False
        self._op_states.pop(key, None)
        if not was_mounted:
            self._observe(VolumeOperation(desired.pod_uid, desired.name, desired.plugin.name,
                                          MOUNT, time.monotonic() - started, desired.dynamic))
        if not was_mounted or had_error:
            self._notify_setup(key)

    async def _teardown_op(self, key: Key) -> None:
        mounted = self._asw.get(key)
        if mounted is None:
            return
        plugin = self._plugins_by_dir.get(mounted.plugin_dir)
        # Dynamic: the volume leaves a pod that stays (not the teardown of a whole pod).
        dynamic = key[0] in self._dsw and key[0] not in self._terminated
        plugin_name = plugin.name if plugin is not None else \
            mounted.plugin_dir.replace("~", "/")
        started = time.monotonic()
        try:
            if plugin is not None:
                await plugin.teardown(mounted.host_dir)
            else:
                await asyncio.to_thread(teardown_dir, mounted.host_dir)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            cause = go_error_text(exc)
            message = f'UnmountVolume.TearDown failed for volume "{key[1]}" : {cause}'
            log.warning("pod %s: %s", key[0], message)
            self._record_failure(key, message)
            self._observe(VolumeOperation(key[0], key[1], plugin_name, UNMOUNT,
                                          time.monotonic() - started, dynamic, message))
            self._notify(key[0])
            return
        self._observe(VolumeOperation(key[0], key[1], plugin_name, UNMOUNT,
                                      time.monotonic() - started, dynamic))
        if self._asw.get(key) is mounted:
            del self._asw[key]
        self._op_states.pop(key, None)
        uid = key[0]
        if uid not in self._dsw and not self.has_volumes_on_disk(uid):
            self._cleaning.add(uid)
            try:
                await asyncio.to_thread(self._remove_pod_volume_dirs, uid)
            finally:
                self._cleaning.discard(uid)
        self._notify(uid)

    def _remove_pod_volume_dirs(self, uid: str) -> None:
        """Remove the empty `volumes/` tree of a pod that has no volume left, and the pod
        dir itself if that leaves it empty. Never removes a non-empty directory."""
        volumes_dir = self.pod_volumes_dir(uid)
        if volumes_dir.is_dir():
            for plugin_dir in volumes_dir.iterdir():
                with contextlib.suppress(OSError):
                    plugin_dir.rmdir()
            with contextlib.suppress(OSError):
                volumes_dir.rmdir()
        with contextlib.suppress(OSError):
            self.pod_dir(uid).rmdir()

    # -- explicit pod teardown -------------------------------------------------------------------

    async def teardown_pod(self, pod_uid: str) -> None:
        """Tear down every volume of a pod now (its containers must be stopped: the in-use
        check is skipped) and remove its volume directories. The pod leaves the desired
        state for good (a later `set_desired_pods` listing it is ignored). Raises
        `VolumeUnmountError` when something stays mounted."""
        self._terminated[pod_uid] = None
        while len(self._terminated) > _TERMINATED_MEMORY:
            self._terminated.popitem(last=False)
        self._dsw.pop(pod_uid, None)
        for _ in range(3):
            for key in [k for k in self._ops if k[0] == pod_uid]:
                task = self._ops.get(key)
                if task is not None:
                    await asyncio.gather(task, return_exceptions=True)
            # Volumes set up but never recorded (a crash mid-way) are found on disk too.
            for volume in await asyncio.to_thread(self._scan_disk):
                if volume.pod_uid == pod_uid:
                    self._asw.setdefault((volume.pod_uid, volume.name), volume)
            keys = [k for k in self._asw if k[0] == pod_uid and k not in self._ops]
            if not keys and not any(k[0] == pod_uid for k in self._ops):
                break
            for key in keys:
                self._op_states.pop(key, None)  # no back-off for an explicit teardown
            tasks = [self._start(key, self._teardown_op(key)) for key in keys]
            await asyncio.gather(*tasks, return_exceptions=True)
            if not self.has_volumes_on_disk(pod_uid):
                break
        remaining = sorted(name for uid, name in self._asw if uid == pod_uid)
        if remaining:
            errors = self.volume_errors(pod_uid)
            cause = "; ".join(errors[name] for name in remaining if name in errors)
            raise VolumeUnmountError(remaining, cause or "teardown did not finish")
        await asyncio.to_thread(self._remove_pod_volume_dirs, pod_uid)
        for key in [k for k in self._op_states if k[0] == pod_uid]:
            del self._op_states[key]
        self._signal_change()

    # -- shutdown helpers for tests and the agent ---------------------------------------------

    async def teardown_all(self) -> None:
        """Tear down every volume this manager knows of or finds on disk (for a node being
        removed, and for tests)."""
        uids = {uid for uid, _ in self._asw} | set(self._dsw)
        for volume in await asyncio.to_thread(self._scan_disk):
            uids.add(volume.pod_uid)
        for uid in sorted(uids):
            await self.teardown_pod(uid)

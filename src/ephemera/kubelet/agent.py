"""The Kubelet: the wiring of one node's agent and its main loop.

`Kubelet(config, api, runtime, images, volumes=None)` and `await kubelet.run(stop)`:

1. builds the base image when the store is empty (`ImageStore.ensure_base`);
2. serves its HTTPS API (`server.py`; port 0 picks a free port, written to `port_file`);
3. registers the Node (`node.py`; retried until the API answers), then keeps its status
   current (every `node_status_interval`) and its Lease renewed (every
   `lease_renew_interval`);
4. watches the pods bound to it (`fieldSelector=spec.nodeName=NAME`) with an informer; once
   the first list is in, admits them in creation order and hands each admitted pod to the
   pod workers (`podworkers.py`), the volume manager (its desired state) and the status
   manager (`status.py`), and registers the Secrets and ConfigMaps it references with the
   object cache (`objectcache.py`: one watch each; the volumes and env read them from
   there, and a change refreshes the pod's volumes);
5. relists the runtime every second (waking the workers of pods whose containers changed),
   and every `housekeeping_interval` cleans up what belongs to no pod it knows: sandboxes and
   containers (killed and removed), volumes and pod directories (a pod deleted while the
   kubelet was down).

**Admission** and the hand-over of pods to their workers are `ephemera.kubelet.podadmission`
(`PodAdmission`, shared with hollow nodes): the eviction manager's rule, then the resource fit
(pod count, then requests, emptyDir sizeLimits and pod-level `ephemeral-storage` against the
node's current allocatable, re-read at every node status write); a rejected pod gets
`phase: Failed`, `reason: OutOf<resource>` and upstream's message, with a Warning event. The
kubelet adds the rejection metric and the object cache's registrations.

**Allocation** (KEP-6395 / KEP-5972, `ephemera.kubelet.allocation`): an admitted pod is
checkpointed as allocated (in a thread) before it is handed to its worker; later spec changes
(`/dynamic`) are admitted whole or not at all by the `AllocationManager` (pending ones retried,
`FailedAllocation` events). Pod workers, the volume manager's desired state and `/allocatedPods`
see only the allocated spec; containers and volumes the API has but the node has not allocated
show as `Unallocated` / `Pending`. A restarted kubelet re-admits the checkpointed pods without a
new admission. Allocated changes get a `SuccessfulAllocation` event; dynamic volume mounts and
unmounts (the volume manager's `VolumeOperation`s) feed `kubelet_dynamic_*` metrics
(`ephemera.kubelet.metrics`) and the `SuccessfulMountVolume` / `SuccessfulUnMountVolume` events.

**Eviction manager** (`ephemera.kubelet.eviction.manager.EvictionManager`, run every
`eviction_interval`): the kubelet wires it to the stats provider (`StatsProvider` over the
accounting backend `--storage-accounting` chooses, `stats/accounting.py`: the directory walk,
or a loop-mounted ext4 image per pod read with `statvfs`, prepared and released with the pod)
and is its `EvictionHost`: the pods it may evict, the pod workers that kill them
(`PodWorkers.evict`), the images image GC keeps, the Node status it refreshes when a pressure
condition changes (the Node's MemoryPressure, DiskPressure and PIDPressure read
`node_conditions` through `NodeAgent.pressure_probe`), and it gives the stats provider the
machine's memory, the pods' share (less `--system-reserved`/`--kube-reserved`) and the
runtime's `memory_stats` and `process_counts`. Admission
rejects a non-critical pod under DiskPressure, a BestEffort one under MemoryPressure, first
(`admit_under_pressure`). The server's `/stats/summary` answers `stats_summary()` (the last
measurements).

**Logs** (`ephemera.kubelet.logs`): `log_source` finds the pod and its computed status and
lets `logs.log_source` pick the file; the server's `/containerLogs` streams it.

The kubelet leaves its containers running when it stops, for a restarted kubelet to adopt,
unless `stop_pods_on_exit` (`ephemera up`): then it shuts the node down as a reboot does
(`nodeshutdown.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from ephemera import trace
from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.api.featuregates import DYNAMIC_VOLUME_HOT_PLUG, FeatureGates, gate_enabled
from ephemera.api.quantity import Quantity, QuantityError, quantity_from_json
from ephemera.client import ApiClient, ApiUnavailable, Informer, resource_path
from ephemera.kubelet import events, logs
from ephemera.kubelet.allocation import (
    AllocationCheckpoint,
    AllocationManager,
    allocated_view,
)
from ephemera.kubelet.containerconfig import ContainerConfigError
from ephemera.kubelet.dnsconfig import DnsConfigurer
from ephemera.kubelet.events import NORMAL, STARTING, STARTING_MESSAGE, KubeletEvents
from ephemera.kubelet.eviction.decision import DEFAULT_PRESSURE_TRANSITION_PERIOD
from ephemera.kubelet.eviction.manager import EvictionManager
from ephemera.kubelet.eviction.thresholds import hard_eviction_reservation
from ephemera.kubelet.gc import pod_image_refs
from ephemera.kubelet.logs import LogSource
from ephemera.kubelet.metrics import KubeletMetrics
from ephemera.kubelet.node import (
    NodeAgent,
    NodeConfig,
    Pressure,
    allocatable,
    machine_memory_bytes,
    total_reserved,
)
from ephemera.kubelet.nodeshutdown import shut_down_node
from ephemera.kubelet.objectcache import PodObjects
from ephemera.kubelet.pleg import Relister
from ephemera.kubelet.podadmission import AdmitResult, PodAdmission
from ephemera.kubelet.podutil import pod_terminal
from ephemera.kubelet.podworkers import PodWorkers, remove_orphan_dirs
from ephemera.kubelet.portforward import PortForwardError, PortForwardTarget
from ephemera.kubelet.prober.handlers import ProbeTarget
from ephemera.kubelet.prober.manager import ProbeManager
from ephemera.kubelet.runtime.base import ContainerState, RuntimeError_, RuntimeService
from ephemera.kubelet.server import create_kubelet_app, kubelet_ssl_context
from ephemera.kubelet.serviceenv import service_env
from ephemera.kubelet.stats import StatsProvider, make_accounting
from ephemera.kubelet.status import StatusManager
from ephemera.kubelet.streaming import running_container_id
from ephemera.kubelet.tokens import TokenManager
from ephemera.kubelet.volumes.manager import MOUNT, VolumeOperation
from ephemera.kubelet.workerdeps import WorkerDeps, WorkerSettings

__all__ = ["Kubelet", "KubeletConfig"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass
class KubeletConfig:
    node_name: str
    root_dir: Path
    gates: FeatureGates = field(default_factory=FeatureGates)
    address: str = "127.0.0.1"  # where the HTTPS server listens
    port: int = 10250  # 0: a free port
    node_ip: str = "127.0.0.1"  # the InternalIP the Node reports (hostIP of its pods)
    pod_cidr: str = ""  # --pod-cidr: until the Node has a spec.podCIDR (standalone kubelets)
    wait_for_pod_cidr: bool = False  # start no pod before the Node has a podCIDR (`up`)
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    client_ca_file: Path | None = None
    # The server's TLS context when the caller keeps it (to load a rotated serving
    # certificate into it, `ephemera.kubelet.certificate`); else one from the files above.
    ssl_context: ssl.SSLContext | None = None
    port_file: Path | None = None
    max_pods: int = 110
    settings: WorkerSettings = field(default_factory=WorkerSettings)
    node_status_interval: float = 10.0
    node_status_report_interval: float = 300.0
    lease_renew_interval: float = 10.0
    housekeeping_interval: float = 2.0
    register_retry_interval: float = 1.0
    # On stop, shut the node down as a reboot does (`ephemera.kubelet.nodeshutdown`):
    # `ephemera up` stopping stops the whole node, and its next start brings the pods back.
    stop_pods_on_exit: bool = False
    shutdown_grace_period: float = 2.0
    # How often a pending (not yet allocatable) pod change is retried (KEP-6395).
    allocation_retry_period: float = 10.0
    # The eviction manager (issue 6): its pass interval and `--eviction-hard` (None: the
    # upstream defaults).
    eviction_interval: float = 10.0
    eviction_hard: str | None = None
    eviction_pressure_transition_period: float = DEFAULT_PRESSURE_TRANSITION_PERIOD
    # `--system-reserved` / `--kube-reserved` (`node.parse_reserved`): held back from
    # allocatable; the pods' memory (allocatableMemory.available) is measured against the
    # machine's memory minus them.
    system_reserved: Mapping[str, Quantity] = field(default_factory=dict)
    kube_reserved: Mapping[str, Quantity] = field(default_factory=dict)
    # Usage accounting (`ephemera.kubelet.stats.accounting`): "walk", "loopimage" or "auto"
    # (the CLI's default); with `storage_limit_enforcement` a pod's loop image is sized to
    # its ephemeral-storage limit (writes past it fail with ENOSPC).
    storage_accounting: str = "walk"
    storage_limit_enforcement: bool = False
    # Pods' resolv.conf (`ephemera.kubelet.dnsconfig`): `--cluster-dns`, `--cluster-domain`,
    # `--resolv-conf`.
    cluster_dns: list[str] = field(default_factory=list)
    cluster_domain: str = ""
    resolv_conf: str = "/etc/resolv.conf"


def _created(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp") or "")


def _bytes(value: Any) -> int:
    try:
        return int(quantity_from_json(value).value())
    except (QuantityError, TypeError):
        return 0


class Kubelet:
    """One node's agent (see the module docstring)."""

    def __init__(self, config: KubeletConfig, api: ApiClient, runtime: RuntimeService,
                 images: Any, volumes: Any = None) -> None:
        self.config = config
        self.api = api
        self.runtime = runtime
        self._pod_cidr = ""
        self.image_store = images
        self.node_name = config.node_name
        self.root_dir = config.root_dir
        self.metrics = KubeletMetrics(config.node_name)
        self.status = StatusManager(api)
        self.events = KubeletEvents(api, config.node_name, quiet=self._quiet,
                                    is_quiet=self._is_quiet)
        self.node_config = NodeConfig(node_name=config.node_name, root_dir=config.root_dir,
                                      gates=config.gates, node_ip=config.node_ip,
                                      kubelet_port=config.port, max_pods=config.max_pods)
        self.node_agent: NodeAgent | None = None
        self.node_allocatable: dict[str, Any] = {}
        self.node_allocatable_memory = 0
        if volumes is None:
            from ephemera.kubelet.volumes.manager import VolumeManager

            # ConfigMap and Secret changes reach the files within one pod sync period.
            volumes = VolumeManager(config.root_dir, self,
                                    sync_period=config.settings.resync_period)
        self.volumes = volumes
        # Service account tokens of projected volumes (TokenRequest, cached and rotated).
        self.tokens = TokenManager(api)
        # The Secrets and ConfigMaps of the pods, watched one by one (upstream's Watch
        # change-detection strategy); a change refreshes the volumes that read it.
        self.objects = PodObjects(api, on_change=self._object_changed)
        self.pods_informer = Informer(api, resource_path("pods"),
                                      field_selector=f"spec.nodeName={config.node_name}",
                                      name=f"pods on {config.node_name}")
        # Every Service, for the pods' service environment variables (`serviceenv`).
        self.services_informer = Informer(api, resource_path("services"), name="services")
        self.allocation = AllocationManager(
            AllocationCheckpoint(config.root_dir, writer_process=True),
            node_allocatable=lambda: self.node_allocatable, gates=config.gates,
            retry_period=config.allocation_retry_period)
        # Admission and hand-over of the pods (`podadmission`, shared with hollow nodes).
        self.pod_admission = PodAdmission(
            allocation=self.allocation, status=self.status, events=self.events,
            node_allocatable=lambda: self.node_allocatable, gates=config.gates,
            node_conditions=lambda: self.eviction_manager.node_conditions,
            volumes_changed=self._volumes_changed)
        self.pod_admission.on_seen = self._pod_seen
        self.pod_admission.on_rejected = self._rejected
        self.allocation.on_outcome = lambda result: self.metrics.dynamic_allocations.labels(
            result=result).inc()
        # A change's new volumes are set up while its checkpoint is written
        # (`VolumeManager.set_staged_source`).
        self.allocation.on_staging_changed = self._staging_changed
        set_staged_source = getattr(self.volumes, "set_staged_source", None)
        if set_staged_source is not None:
            set_staged_source(self.allocation.staged_change)
        self.metrics.track_pending_allocations(lambda: len(self.allocation.pending))
        self._initial_done = False
        self.relister = Relister(runtime, self._runtime_changed,
                                 period=config.settings.relist_period,
                                 on_duration=self._relisted)
        self.workers: PodWorkers | None = None
        # Liveness, readiness and startup probes; a changed result wakes the pod's worker.
        self.probes = ProbeManager(runtime, self._probe_event, pod_status=self.status.get,
                                   target=self._probe_target, on_update=self._runtime_changed,
                                   on_result=self._probe_counted,
                                   on_worker_end=self._probe_series_gone)
        self.bound_port: int = config.port
        self._tasks: list[asyncio.Task[Any]] = []
        # The eviction manager (issue 6): usage accounting, thresholds, the node conditions.
        image_dir = getattr(images, "dir", None)
        self.accounting = make_accounting(config.storage_accounting, config.root_dir,
                                          enforce_limits=config.storage_limit_enforcement,
                                          gates=config.gates)
        self.stats = StatsProvider(config.node_name, config.root_dir, self.accounting.walk,
                                   image_dir=Path(image_dir) if image_dir is not None else None,
                                   pod_totals=self.accounting.pod_usage)
        self.eviction_manager = EvictionManager(
            self, node_name=config.node_name, root_dir=config.root_dir, stats=self.stats,
            events=self.events, runtime=runtime, image_store=images, gates=config.gates,
            eviction_hard=config.eviction_hard,
            pressure_transition_period=config.eviction_pressure_transition_period,
            count_eviction=self.metrics.evictions.inc)
        reserved = total_reserved(config.system_reserved, config.kube_reserved)
        thresholds = self.eviction_manager.thresholds
        self.node_config.reservation = lambda capacity: total_reserved(
            reserved, hard_eviction_reservation(thresholds, capacity))
        # Memory: the machine's working set against its memory, the pods' cgroup against
        # the memory minus the reservations (upstream's node allocatable cgroup limit).
        self.stats.memory_capacity = machine_memory_bytes()
        self.stats.pods_memory_limit = max(
            0, self.stats.memory_capacity - reserved.get("memory", Quantity()).value())
        self.stats.runtime_memory = runtime.memory_stats
        self.stats.runtime_processes = runtime.process_counts

    # -- VolumeHost ----------------------------------------------------------------------

    async def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.objects.get_configmap(namespace, name)

    async def get_service_account_token(self, namespace: str, name: str,
                                        request: dict[str, Any]) -> dict[str, Any]:
        return await self.tokens.get_service_account_token(namespace, name, request)

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.objects.get_secret(namespace, name)

    def service_env(self, pod: Mapping[str, Any]) -> dict[str, str]:
        """The pod's service environment variables; upstream's error until the Services
        were listed once (the container start fails with CreateContainerConfigError and is
        retried)."""
        if not self.services_informer.has_synced:
            raise ContainerConfigError("services have not yet been read at least once, "
                                       "cannot construct envvars")
        spec = pod.get("spec") or {}
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        links = spec.get("enableServiceLinks")
        return service_env(self.services_informer.list(), namespace,
                           True if links is None else bool(links))

    @property
    def node_allocatable_cpu_millis(self) -> int:
        try:
            return int(quantity_from_json(self.node_allocatable.get("cpu", "1")).milli_value())
        except QuantityError:
            return 1000

    @property
    def node_allocatable_ephemeral_storage(self) -> int | None:
        value = self.node_allocatable.get("ephemeral-storage")
        return _bytes(value) if value is not None else None

    # -- helpers -------------------------------------------------------------------------

    async def _runtime_version(self) -> str:
        """`<runtime>://<version>` as the Node's `containerRuntimeVersion`."""
        version: Any = getattr(self.runtime, "version", "")
        try:
            if callable(version):
                version = version()
            if inspect.isawaitable(version):
                version = await version
        except Exception as err:
            log.warning("could not read the runtime's version: %s", err)
            version = ""
        text = str(version or "")
        return text if "://" in text else f"{self.runtime.name}://{text}"

    def _images_for_status(self) -> list[dict[str, Any]]:
        result = []
        list_images = getattr(self.image_store, "list", None)
        if list_images is None:
            return []
        for image in list_images():
            names = [*getattr(image, "repo_digests", ()), *getattr(image, "repo_tags", ())]
            if names:
                result.append({"names": names, "sizeBytes": int(getattr(image, "size", 0))})
        return result

    def _relisted(self, seconds: float) -> None:
        self.metrics.pleg_relist_duration.observe(seconds)
        snapshot = self.relister.snapshot
        self.metrics.running_pods.set(sum(1 for s in snapshot.sandboxes.values() if s.ready))
        counts = {"running": 0, "exited": 0, "created": 0, "unknown": 0}
        for c in snapshot.containers.values():
            counts[c.state.value.lower()] = counts.get(c.state.value.lower(), 0) + 1
        for state, count in counts.items():
            self.metrics.running_containers.labels(container_state=state).set(count)

    def _runtime_changed(self, uid: str) -> None:
        if self.workers is not None:
            self.workers.runtime_changed(uid)

    def _volumes_changed(self) -> None:
        if self.workers is not None and self._initial_done:
            self.volumes.set_desired_pods(self.workers.pods_needing_volumes())

    def _staging_changed(self, uid: str) -> None:
        """A change's checkpoint write began or ended: its new volumes are set up, and its
        pod's containers listed, meanwhile."""
        staging_changed = getattr(self.volumes, "staging_changed", None)
        if staging_changed is not None:
            staging_changed(uid)
        if self.workers is not None and self.allocation.staged_change(uid) is not None:
            self.workers.prefetch_listing(uid)

    def _volume_event(self, uid: str) -> None:
        if self.workers is not None:
            self.workers.wake(uid)

    def _object_changed(self, kind: str, namespace: str, name: str,
                        pod_uids: frozenset[str]) -> None:
        """A watched Secret or ConfigMap changed: the volumes of the pods referencing it
        are set up again (their files refreshed) at the volume manager's next pass."""
        resync = getattr(self.volumes, "resync_pod", None)
        if resync is None:
            return
        for uid in pod_uids:
            resync(uid)

    async def _in_use(self, uid: str, volume_name: str) -> bool:
        """KEP-6395's `IsVolumeInUseByPod`: from the pod worker's runtime view when it is
        current, else from the runtime (one relist shared by the checks asking at once)."""
        if self.workers is not None:
            known = self.workers.volume_in_use(uid, volume_name)
            if known is not None:
                return known
        with contextlib.suppress(RuntimeError_):
            await self.relister.relist_shared()
        for c in self.relister.snapshot.pod_containers(uid):
            if c.state in (ContainerState.RUNNING, ContainerState.CREATED) and any(
                    m.volume_name == volume_name for m in c.mounts):
                return True
        return False

    # -- pods ----------------------------------------------------------------------------

    def _handle_pod(self, pod: Obj) -> None:
        trace.mark("kubelet.pod_event", trace.name_of(pod))
        self.pod_admission.handle(pod)

    def _pod_seen(self, pod: Obj) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if pod_terminal(pod):
            self.objects.unregister_pod(uid)
        else:  # what the API's and the allocated spec reference stays watched
            self.objects.register_pod(uid, pod, self.allocation.get(uid))

    def _is_quiet(self) -> bool:
        """No pod worker is in a sync, no pod status waits to be written."""
        return (self.workers is None or self.workers.is_idle()) and self.status.is_settled()

    async def _quiet(self) -> None:
        """Return once the kubelet is quiet (`_is_quiet`: what deferred events wait for)."""
        while not self._is_quiet():
            if self.workers is not None:
                await self.workers.idle()
            await self.status.settled()

    # -- allocation (KEP-6395 / KEP-5972; ephemera.kubelet.allocation) -------------------

    def _volume_operation(self, operation: VolumeOperation) -> None:
        """Metrics and Normal events of dynamic volumes (KEP-6395); their failures are
        `FailedMount` / `FailedUnMount` events of the pod worker."""
        if not operation.dynamic:
            return
        self.metrics.observe_dynamic_volume(operation.operation, operation.volume_plugin,
                                            operation.seconds, bool(operation.error))
        pod = self.pod_admission.api_pods.get(operation.pod_uid)
        if operation.error or pod is None or self.workers is None:
            return
        if operation.operation == MOUNT:
            reason = events.SUCCESSFUL_MOUNT_VOLUME
            message = f'MountVolume.SetUp succeeded for volume "{operation.volume_name}"'
        else:
            reason = events.SUCCESSFUL_UNMOUNT_VOLUME
            message = f'UnmountVolume.TearDown succeeded for volume "{operation.volume_name}"'
        md = pod.get("metadata") or {}
        log.info("pod %s/%s: %s", md.get("namespace"), md.get("name"), message)
        self.workers.spawn(self.events.pod(pod, events.NORMAL, reason, message, deferred=True),
                           pod=pod)

    def allocated_pods(self) -> list[Obj]:
        """The allocated pods, status blank (`/allocatedPods`)."""
        return [allocated_view(p) for p in self.allocation.allocated.values()]

    def allocated_pod(self, uid: str) -> Obj | None:
        """One allocated pod, status blank (`/allocatedPods/UID`)."""
        pod = self.allocation.get(uid)
        return allocated_view(pod) if pod is not None else None

    def admit(self, pod: Obj) -> AdmitResult:
        """The admission decision (`PodAdmission.admit`)."""
        return self.pod_admission.admit(pod)

    def _rejected(self, pod: Obj, result: AdmitResult) -> None:
        self.objects.unregister_pod(str((pod.get("metadata") or {}).get("uid")))
        self.metrics.admission_rejections.labels(reason=result.reason).inc()

    def _on_pod(self, pod: Obj) -> None:
        self.status.observe(pod)
        if self._initial_done:
            self._handle_pod(pod)

    def _on_pod_update(self, old: Obj, new: Obj) -> None:
        self._on_pod(new)

    def _on_pod_delete(self, pod: Obj) -> None:
        self.objects.unregister_pod(str((pod.get("metadata") or {}).get("uid") or ""))
        self.pod_admission.deleted(pod)

    def _worker_done(self, uid: str) -> None:
        if self.pods_informer.get(self._key_of(uid)) is None:
            self.pod_admission.forget(uid)
            self.tokens.forget_pod(uid)

    def _key_of(self, uid: str) -> str:
        for pod in self.pods_informer.list():
            if pod["metadata"].get("uid") == uid:
                return f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}"
        return ""

    def admitted_pods(self) -> list[Obj]:
        """The admitted pods with the statuses the kubelet computed (for `/pods`)."""
        result: list[Obj] = []
        if self.workers is None:
            return result
        for pod in self.workers.pods():
            uid = pod["metadata"].get("uid")
            status = self.status.get(str(uid))
            result.append({**pod, "status": status if status is not None else
                           pod.get("status") or {}})
        return result

    # -- the eviction manager's host (ephemera.kubelet.eviction.manager) ------------------

    def _pod_with_status(self, pod: Obj) -> Obj:
        status = self.status.get(str(pod["metadata"].get("uid")))
        return {**pod, "status": status} if status is not None else pod

    def known_pods(self) -> list[Obj] | None:
        """The admitted pods the workers run (terminal ones too), with their statuses; None
        before the workers run and the first pods are handed to them."""
        if self.workers is None or not self._initial_done:
            return None
        return [self._pod_with_status(p) for p in self.workers.pods()
                if str(p["metadata"].get("uid")) in self.pod_admission.admitted]

    def is_evicted(self, uid: str) -> bool:
        return self.workers is not None and self.workers.is_evicted(uid)

    def is_terminating(self, uid: str) -> bool:
        return self.workers is not None and self.workers.is_terminating(uid)

    def kill_pod(self, uid: str, grace_period_seconds: float, reason: str, message: str,
                 condition: Mapping[str, str] | None) -> bool:
        return self.workers is not None and self.workers.evict(
            uid, grace_period_seconds, reason, message, condition)

    def spawn(self, work: Any, *, pod: Mapping[str, Any] | None = None) -> None:
        assert self.workers is not None
        self.workers.spawn(work, pod=pod)

    def mounted_volumes(self, uid: str) -> Mapping[str, Path]:
        mounted: Mapping[str, Path] = self.volumes.mounted_volumes(uid)
        return mounted

    async def relist(self) -> None:
        await self.relister.relist()

    async def update_node_status(self) -> None:
        if self.node_agent is not None:
            await self._update_node_status()

    async def stats_summary(self) -> dict[str, Any]:
        """The Summary API document (`/stats/summary`), from the last measurements."""
        return await self.eviction_manager.summary()

    def _pressure(self) -> Pressure:
        """The node's pressure: the eviction manager's conditions."""
        conditions = self.eviction_manager.node_conditions
        return Pressure(memory="MemoryPressure" in conditions, disk="DiskPressure" in conditions,
                        pid="PIDPressure" in conditions)

    def needed_images(self) -> set[str]:
        """The image references image GC keeps besides the runtime's containers' images:
        what the non-terminal pods bound to the node name, what the allocated specs name
        (staged changes included), and the images of the image volumes still in the volume
        manager's actual state (mounted, their teardown deferred while in use or not done
        yet: their layers are the mounts' lower dirs)."""
        needed = {ref for p in self.pods_informer.list() if not pod_terminal(p)
                  for ref in pod_image_refs(p)}
        needed.update(ref for p in self.allocation.effective_pods()
                      for ref in pod_image_refs(p))
        mounted = getattr(self.volumes, "mounted_image_refs", None)
        if mounted is not None:
            needed.update(mounted())
        return needed

    # -- logs ----------------------------------------------------------------------------

    def _find_pod(self, namespace: str, name: str) -> Obj | None:
        pod = self.pods_informer.get(f"{namespace}/{name}")
        if pod is not None:
            return pod
        if self.workers is not None:
            for candidate in self.workers.pods():
                md = candidate.get("metadata") or {}
                if md.get("namespace") == namespace and md.get("name") == name:
                    return candidate
        return None

    async def log_source(self, namespace: str, pod_name: str, container: str,
                         previous: bool) -> LogSource:
        """The log `kubectl logs` reads (`ephemera.kubelet.logs.log_source`)."""
        pod = self._find_pod(namespace, pod_name)
        status: Mapping[str, Any] = {}
        if pod is not None:
            status = self.status.get(str(pod["metadata"].get("uid"))) or \
                pod.get("status") or {}
        return await logs.log_source(pod, status, pod_name, container, previous,
                                     self.runtime, self.root_dir)

    # -- exec and attach (ephemera.kubelet.streaming) -------------------------------------

    async def stream_container(self, namespace: str, pod_name: str, container: str) -> str:
        """The runtime id of the running container that exec and attach reach."""
        return await running_container_id(self.runtime, self._find_pod(namespace, pod_name),
                                          container)

    async def port_forward_target(self, namespace: str, pod_name: str) -> PortForwardTarget:
        """The sandbox and network namespace that port-forward connects inside."""
        pod = self._find_pod(namespace, pod_name)
        if pod is None:
            raise PortForwardError("pod does not exist", 404)
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        worker = self.workers.get(uid) if self.workers is not None else None
        sandbox_id = worker.pod_runtime.sandbox_id if worker is not None else None
        if sandbox_id is None:
            raise PortForwardError(f'pod "{pod_name}" has no sandbox', 500)
        netns = await self.runtime.pod_network_namespace(sandbox_id)
        return PortForwardTarget(sandbox_id=sandbox_id, netns=netns)

    # -- main loop -----------------------------------------------------------------------

    async def _serve(self, stop: asyncio.Event, started: asyncio.Future[int]) -> None:
        cfg = self.config
        app = create_kubelet_app(self, self.metrics,
                                 require_client_cert=cfg.client_ca_file is not None)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            ssl_ctx = cfg.ssl_context
            if ssl_ctx is None and cfg.tls_cert_file is not None and \
                    cfg.tls_key_file is not None:
                ssl_ctx = kubelet_ssl_context(cfg.tls_cert_file, cfg.tls_key_file,
                                              cfg.client_ca_file)
            site = web.TCPSite(runner, cfg.address, cfg.port, ssl_context=ssl_ctx,
                               reuse_address=True)
            await site.start()
            port = cfg.port
            for address in runner.addresses:
                if isinstance(address, tuple) and len(address) >= 2:
                    port = int(address[1])
            started.set_result(port)
            await stop.wait()
        except BaseException as err:
            if not started.done():
                started.set_exception(err)
            raise
        finally:
            await runner.cleanup()

    async def _register(self, stop: asyncio.Event) -> bool:
        assert self.node_agent is not None
        delay = self.config.register_retry_interval
        while not stop.is_set():
            try:
                await self.node_agent.register()
                self._refresh_allocatable()
                await self.node_agent.renew_lease()
                return True
            except (StatusError, ApiUnavailable) as err:
                log.warning("registering node %s: %s; retrying", self.node_name,
                            getattr(err, "message", err))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await stop.wait()
            delay = min(delay * 2, 10.0)
        return False

    async def _periodic(self, interval: float, work: Any, what: str) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await work()
            except (StatusError, ApiUnavailable) as err:
                log.warning("%s: %s", what, getattr(err, "message", err))
            except Exception:
                log.exception("%s failed", what)

    async def _update_node_status(self) -> None:
        assert self.node_agent is not None
        self.node_agent.runtime_ready = self.relister.healthy
        self.node_agent.runtime_message = "" if self.relister.healthy else \
            "container runtime is down: listing containers failed"
        if await self.node_agent.update_status():
            self.metrics.node_status_updates.inc()
            self._refresh_allocatable()
        await self._sync_pod_cidr()

    async def _set_pod_cidr(self, cidr: str) -> None:
        log.info("node %s: pod CIDR %s", self.node_name, cidr)
        await self.runtime.update_runtime_config(cidr)
        self._pod_cidr = cidr

    async def _sync_pod_cidr(self) -> None:
        """Upstream's `updatePodCIDR`: hand the Node's `spec.podCIDR` to the runtime (the
        CNI config) when it is set or changed."""
        assert self.node_agent is not None
        cidr = str(((self.node_agent.node or {}).get("spec") or {}).get("podCIDR") or "")
        if cidr and cidr != self._pod_cidr:
            await self._set_pod_cidr(cidr)

    async def _await_pod_cidr(self, forever: bool = False) -> None:
        """Until the node IPAM controller gives the Node a podCIDR, look every half second
        for a minute (the status loop's interval would delay the first pods by up to its
        period; after the minute the status loop alone picks it up)."""
        assert self.node_agent is not None
        attempt = 0
        while forever or attempt < 120:
            attempt += 1
            if ((self.node_agent.node or {}).get("spec") or {}).get("podCIDR"):
                return
            await asyncio.sleep(0.5)
            try:
                self.node_agent.node = await self.api.get(
                    resource_path("nodes", name=self.node_name))
            except (StatusError, ApiUnavailable) as err:
                log.debug("reading node %s: %s", self.node_name, getattr(err, "message", err))
                continue
            await self._sync_pod_cidr()

    def _refresh_allocatable(self) -> None:
        """Admission (new pods and pod changes) reads the node's current allocatable: the
        Node's status as last written. Updated in place (the pod workers share the dict);
        when it changed, pending pod changes are tried again."""
        assert self.node_agent is not None
        status = (self.node_agent.node or {}).get("status") or {}
        current = dict(status.get("allocatable") or allocatable(
            self.node_agent.builder.capacity, self.node_config.reservation))
        if current == self.node_allocatable:
            return
        if self.node_allocatable:
            log.info("node %s: allocatable changed to %s", self.node_name, current)
        self.node_allocatable.clear()
        self.node_allocatable.update(current)
        self.node_allocatable_memory = _bytes(current.get("memory", "0"))
        self.allocation.retry()

    async def _renew_lease(self) -> None:
        assert self.node_agent is not None
        await self.node_agent.renew_lease()

    async def _housekeeping(self) -> None:
        """Clean up what belongs to no known pod."""
        assert self.workers is not None
        if not self._initial_done:
            return
        await self.relister.relist()
        known = set(self.workers.uids())
        known |= self.workers.remove_orphans(list(self.relister.snapshot.sandboxes.values()),
                                             known)
        pods_dir = self.root_dir / "pods"
        leftovers = []
        with contextlib.suppress(FileNotFoundError):
            leftovers = [e for e in os.listdir(pods_dir) if e not in known]
        for uid in leftovers:
            try:
                await self.volumes.teardown_pod(uid)
            except Exception as err:
                log.warning("tearing down the volumes of orphaned pod %s: %s", uid, err)
        await self.accounting.release_orphans(set(self.workers.uids()))
        await asyncio.to_thread(remove_orphan_dirs, self.root_dir,
                                set(self.workers.uids()))

    def _start(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro, name=name))

    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set."""
        cfg = self.config
        cfg.root_dir.mkdir(parents=True, exist_ok=True)
        await self._ensure_base_image()
        started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        server = asyncio.get_running_loop().create_task(self._serve(stop, started),
                                                        name="kubelet-server")
        self._tasks.append(server)
        try:
            self.bound_port = await started
            self.node_config.kubelet_port = self.bound_port
            self.node_config.runtime_version = await self._runtime_version()
            if cfg.port_file is not None:
                _write_atomic(cfg.port_file, f"{self.bound_port}\n")
            log.info("kubelet %s serving on %s:%d", self.node_name, cfg.address,
                     self.bound_port)
            self.node_agent = NodeAgent(self.api, self.node_config,
                                        pressure_probe=self._pressure,
                                        images=self._images_for_status,
                                        report_interval=cfg.node_status_report_interval,
                                        status_update_interval=cfg.node_status_interval,
                                        record_event=self.events.node_soon)
            # upstream's `BirthCry`, at each start (NodeAllocatableEnforced is not recorded:
            # ephemera puts no cgroup limit on the pods as a whole)
            self.events.node_soon(NORMAL, STARTING, STARTING_MESSAGE)
            if cfg.pod_cidr:
                await self._set_pod_cidr(cfg.pod_cidr)
            if not await self._register(stop):
                return
            await self._sync_pod_cidr()
            if not self._pod_cidr and cfg.wait_for_pod_cidr:
                await self._await_pod_cidr(forever=True)
            elif not self._pod_cidr:
                self._start(self._await_pod_cidr(), "pod-cidr")
            deps = WorkerDeps(
                api=self.api, runtime=self.runtime, images=self.image_store,
                volumes=self.volumes, status=self.status, events=self.events,
                root_dir=cfg.root_dir, node_name=self.node_name, host_ip=cfg.node_ip,
                get_configmap=self.get_configmap, get_secret=self.get_secret,
                node_allocatable=self.node_allocatable, service_env=self.service_env,
                settings=dataclasses.replace(
                    cfg.settings, hot_plug=cfg.settings.hot_plug
                    and gate_enabled(cfg.gates, DYNAMIC_VOLUME_HOT_PLUG)),
                on_volumes_changed=self._volumes_changed,
                on_container_started=self._container_started,
                on_pod_started=self.metrics.pod_start_duration.observe,
                on_sync_done=lambda op, s: self.metrics.pod_worker_duration.labels(
                    operation=op).observe(s),
                pod_storage=self.accounting, probes=self.probes, quiet=self._quiet,
                dns=DnsConfigurer(list(cfg.cluster_dns), cfg.cluster_domain, cfg.resolv_conf,
                                  [cfg.node_ip]))
            self.workers = PodWorkers(deps)
            self.pod_admission.workers = self.workers
            self.workers.on_worker_done = self._worker_done
            self.volumes.set_in_use_checker(self._in_use)
            self.volumes.subscribe(self._volume_event)
            observe_operations = getattr(self.volumes, "set_operation_observer", None)
            if observe_operations is not None:
                observe_operations(self._volume_operation)
            self.pods_informer.add_handler(on_add=self._on_pod, on_update=self._on_pod_update,
                                           on_delete=self._on_pod_delete)
            self._start(self.status.run(), "status-manager")
            self._start(self.relister.run(), "relister")
            self._start(self.volumes.run(), "volume-manager")
            self._start(self.pods_informer.run(), "pod-informer")
            self._start(self.services_informer.run(), "service-informer")
            self._start(self._periodic(cfg.node_status_interval, self._update_node_status,
                                       "updating the node status"), "node-status")
            self._start(self._periodic(cfg.lease_renew_interval, self._renew_lease,
                                       "renewing the node lease"), "node-lease")
            async def synced() -> None:
                await self.pods_informer.wait_synced()
                await self.services_informer.wait_synced()

            waiter = asyncio.ensure_future(synced())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            if stop.is_set():
                return
            await self.relister.wait_synced()
            restored = await asyncio.to_thread(self.allocation.restore)
            if restored:
                log.info("restored %d allocated pods from the checkpoint", restored)
            self._initial_done = True
            listed = sorted(self.pods_informer.list(), key=_created)
            self.allocation.keep_only({str(p["metadata"].get("uid")) for p in listed})
            for pod in listed:
                self._handle_pod(pod)
            self._volumes_changed()
            self._start(self.allocation.run(), "allocation")
            self._start(self._periodic(cfg.housekeeping_interval, self._housekeeping,
                                       "housekeeping"), "housekeeping")
            self._start(self._periodic(cfg.eviction_interval,
                                       self.eviction_manager.synchronize,
                                       "the eviction manager's pass"), "eviction-manager")
            await stop.wait()
        finally:
            if cfg.stop_pods_on_exit:
                await self.shut_down()
            await self.close()

    async def _probe_event(self, pod: Mapping[str, Any], container: str, type_: str,
                           reason: str, message: str, init: bool) -> None:
        """A probe's event, posted in the background (the probe does not wait for it)."""
        if self.workers is not None:
            self.workers.spawn(self.events.container(pod, container, type_, reason, message,
                                                     init=init), pod=pod)

    async def _probe_target(self, uid: str, status: Mapping[str, Any]) -> ProbeTarget:
        """Where the pod's network probes go: its IP and its sandbox's network namespace."""
        worker = self.workers.get(uid) if self.workers is not None else None
        netns = ""
        sandbox_id = worker.pod_runtime.sandbox_id if worker is not None else None
        if sandbox_id is not None:
            netns = await self.runtime.pod_network_namespace(sandbox_id)
        return ProbeTarget(pod_ip=str(status.get("podIP") or ""), netns=netns)

    def _probe_counted(self, labels: Mapping[str, str]) -> None:
        self.metrics.prober_probe_total.labels(**labels).inc()

    def _probe_series_gone(self, labels: Mapping[str, str]) -> None:
        counter = self.metrics.prober_probe_total
        for result in ("successful", "failed", "unknown"):
            with contextlib.suppress(KeyError):  # a series that never counted
                counter.remove(labels["probe_type"], result, labels["container"],
                               labels["pod"], labels["namespace"], labels["pod_uid"])

    def _container_started(self, kind: str, code: str) -> None:
        if code:
            self.metrics.started_containers_errors.labels(code=code, container_type=kind).inc()
        else:
            self.metrics.started_containers.labels(container_type=kind).inc()

    async def _ensure_base_image(self) -> None:
        listing = getattr(self.image_store, "list", None)
        ensure = getattr(self.image_store, "ensure_base", None)
        if listing is None or ensure is None:
            return
        try:
            if not await asyncio.to_thread(listing):
                await asyncio.to_thread(ensure)
        except Exception as err:
            log.warning("could not build the base image: %s", err)

    async def shut_down(self) -> None:
        """Stop the node's pods as a reboot does (`ephemera.kubelet.nodeshutdown`): the
        containers stop, the runtime forgets them, memory-backed volumes are unmounted;
        the pods' directories, disk volumes, logs and the allocation checkpoint stay, and
        the pods stay in the API for the next kubelet on this root to start again."""
        if self.workers is not None:
            await self.workers.close()
        await shut_down_node(self.runtime, self.root_dir, self.config.shutdown_grace_period)
        log.info("kubelet %s: stopped every pod on the node", self.node_name)

    async def close(self) -> None:
        """Stop the loops (the containers keep running)."""
        if self.workers is not None:
            await self.workers.close()
        await self.probes.close()
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()
        await self.events.close()
        await self.allocation.close()  # its callbacks and checkpoint writes finish
        await self.objects.close()
        self.accounting.close()
        with contextlib.suppress(Exception):
            await self.runtime.close()


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

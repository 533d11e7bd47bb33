"""Hollow nodes: many simulated nodes in one process (`ephemera hollow-nodes`), as kwok and
kubemark do, for scale tests.

Each `HollowNode` is a slim kubelet built from the real rule modules, not the full `Kubelet`
(see docs/design.md, "Hollow nodes"): it registers its Node with a fixed capacity, labels and
taints (`node.NodeAgent` with `NodeConfig.capacity`; the kubelet's Node events: `Starting`
and the three pressure conditions' at registration, four posts a node, at most
`register_concurrency` at a time over all nodes, then only on a change seen by a status
check: cordon, uncordon, Ready back after an outage; none while nothing changes), admits
and hands over the pods bound to it with the kubelet's own `podadmission.PodAdmission`
(pod count, then `allocation.fit`:
requests, emptyDir size limits and pod-level `ephemeral-storage`; a rejected pod Failed with
the kubelet's reason, message and Warning Event; no node pressure is simulated), checkpoints
them in the real `AllocationManager` (in memory: `MemoryCheckpoint`), admits `/dynamic`
changes whole through it (`SuccessfulAllocation` / `FailedAllocation` Events), and runs them
through the real pod workers (`podworkers`, `podactions`: sandbox, containers, restarts,
KEP-6395 actuation, termination), the real volume manager (desired/actual state, the
reconciler, `volumeStatuses` `Pending` -> `HostMounted` -> `Unmounting`) with volume plugins
that set nothing up on disk (`HollowVolumePlugin`; nor do the workers make pod or log
directories: `WorkerSettings.pod_dirs`), the real status manager, and the fake
runtime (`runtime.fake`, in memory; pods get addresses from the Node's `spec.podCIDR` once
a status check has seen it). Containers run until stopped, or `pod_lifetime`
seconds when set (then exit 0: `Always` pods restart, counted in `restartCount`; `Never` and
`OnFailure` pods end `Succeeded`); a container whose command the fake runtime knows (`exit
1`, `sleep 5`...) behaves as the fake runtime says.

What the process shares (`HollowNodes`): one API client for the pods (one connection pool;
the Nodes and Leases on a second client when given, so that renewals never wait for a
connection behind the pods' writes), ONE pod
informer for all its nodes (`fieldSelector=spec.nodeName!=`, dispatched by `spec.nodeName`),
one heartbeat scheduler that renews every Lease each `lease_renew_interval` and checks every
Node status each `node_status_interval` (written on change or every
`node_status_report_interval`, upstream's 5 min), each node at its own random phase
(jitter; those due within `HEARTBEAT_TICK` of each other go at one wakeup) and all together
under `heartbeat_qps` with at most `heartbeat_concurrency`
requests in flight (a node whose previous one is still in flight skips its turn); with a
`lease_api` factory, the Leases are renewed instead by a second such scheduler on a thread
of its own (`_LeaseThread`: its own event loop, and a client made there), so that a renewal
waits for the GIL, not behind the main loop's queued callbacks; and one
relister (PLEG) that lists each node's fake runtime once per `relist_period`, spread over
it, and skips a node whose runtime made no change since its last listing and has no exit
due (the listing would be the same: `HollowNode.relist_due`).

A process stopped cleanly writes its nodes' runtimes and allocated pods (`STATE_FILE`) and
the next one adopts them, as a kubelet restarted on a real runtime adopts its containers: no
pod restarts, and the sandboxes of pods deleted meanwhile are removed once the first pod list
is in (`HollowNode.remove_orphans`, the kubelet's housekeeping). A process killed writes
nothing: its nodes come back as after a reboot (every pod's sandbox and containers made
again, each container's `restartCount` one up).

Not simulated: the kubelet's HTTPS API (logs, exec, port-forward, metrics, stats), probes,
node-pressure eviction, images (every image is present), Secret/ConfigMap contents (their
volumes mount without reading them). API evictions and deletions are honoured (graceful
termination through the pod workers, then the pod object is deleted).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import heapq
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.featuregates import FeatureGates
from ephemera.client import ApiClient, Informer, resource_path
from ephemera.client.eventcorrelator import EventCorrelator
from ephemera.kubelet.allocation import AllocationCheckpoint, AllocationManager
from ephemera.kubelet.events import NORMAL, STARTING, STARTING_MESSAGE, KubeletEvents
from ephemera.kubelet.node import NodeAgent, NodeConfig, Pressure
from ephemera.kubelet.pleg import Relister
from ephemera.kubelet.podadmission import PodAdmission
from ephemera.kubelet.podworkers import PodWorkers
from ephemera.kubelet.runtime.fake import FakeRuntime
from ephemera.kubelet.status import StatusManager
from ephemera.kubelet.volumes.base import VolumeHost, VolumePlugin
from ephemera.kubelet.volumes.manager import VolumeManager
from ephemera.kubelet.workerdeps import WorkerDeps, WorkerSettings, run_inline

__all__ = [
    "DEFAULT_CAPACITY",
    "HollowConfig",
    "HollowNode",
    "HollowNodes",
    "parse_capacity",
    "parse_labels",
    "parse_taints",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

DEFAULT_CAPACITY = {"cpu": "4", "memory": "16Gi", "pods": "110",
                    "ephemeral-storage": "100Gi"}
# The image every hollow container runs when it names no command (the fake runtime runs it
# until it is stopped, or `pod_lifetime`).
HOLLOW_COMMAND = ("hollow",)
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


# --- flags -----------------------------------------------------------------------------------


def _pairs(flag: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for item in (p.strip() for p in flag.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"malformed {what} {item!r}, expect key=value")
        pairs.append((key.strip(), value.strip()))
    return pairs


def parse_capacity(flag: str) -> dict[str, str]:
    """`cpu=4,memory=16Gi,pods=110,ephemeral-storage=100Gi` (quantities checked); what is
    not given keeps `DEFAULT_CAPACITY`."""
    from ephemera.api.quantity import parse_quantity

    capacity = dict(DEFAULT_CAPACITY)
    for name, value in _pairs(flag, "capacity"):
        try:
            quantity = parse_quantity(value)
        except ValueError as err:
            raise ValueError(f'failed to parse quantity "{value}" for "{name}": {err}') \
                from None
        if quantity.sign() < 0:
            raise ValueError(f'capacity of "{name}" cannot be negative: {value}')
        capacity[name] = value
    return capacity


def parse_labels(flag: str) -> dict[str, str]:
    """`key=value,...` (upstream's `--node-labels`)."""
    return dict(_pairs(flag, "label"))


def parse_taints(flag: str) -> list[dict[str, str]]:
    """`key=value:Effect,...` or `key:Effect` (upstream's `--register-with-taints`)."""
    taints = []
    for item in (p.strip() for p in flag.split(",")):
        if not item:
            continue
        spec, sep, effect = item.rpartition(":")
        if not sep or effect not in TAINT_EFFECTS:
            raise ValueError(f"invalid taint {item!r}: expect key[=value]:Effect, Effect one "
                             f"of {', '.join(TAINT_EFFECTS)}")
        key, _, value = spec.partition("=")
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        taints.append(taint)
    return taints


@dataclass
class HollowConfig:
    count: int
    root_dir: Path  # pod and log directories: <root>/<node name>/...
    name_prefix: str = "hollow-node-"
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    gates: FeatureGates = field(default_factory=FeatureGates)
    node_ip: str = "127.0.0.1"
    # Seconds a container without a command of its own runs before it exits 0 (None: until
    # stopped).
    pod_lifetime: float | None = None
    lease_renew_interval: float = 10.0  # upstream's nodeLeaseRenewInterval
    node_status_interval: float = 60.0  # how often each Node's status is checked
    node_status_report_interval: float = 300.0  # upstream's nodeStatusReportFrequency
    heartbeat_qps: float = 200.0  # leases and node statuses together, whole process
    heartbeat_concurrency: int = 64
    # The Leases renewed on a thread of their own (its own event loop and connections;
    # `HollowNodes(lease_api=...)`), each under `heartbeat_qps` and `heartbeat_concurrency`.
    register_concurrency: int = 16
    relist_period: float = 5.0
    reconcile_period: float = 1.0
    # As the kubelet's `--wait-for-pod-cidr`: a node starts no pod before its Node has a
    # `spec.podCIDR`, learnt by listing the Nodes every `pod_cidr_poll` seconds meanwhile.
    wait_for_pod_cidr: bool = False
    pod_cidr_poll: float = 1.0
    # (`pod_dirs` is off whatever is given: `HollowNode`.)
    settings: WorkerSettings = field(default_factory=lambda: WorkerSettings(
        resync_period=60.0, relist_period=5.0))

    def node_name(self, index: int) -> str:
        return f"{self.name_prefix}{index}"


# --- the pieces a hollow node swaps in -------------------------------------------------------


class MemoryCheckpoint(AllocationCheckpoint):
    """The allocated pods kept in memory only: a restarted hollow-nodes process re-admits
    the pods it finds bound to its nodes."""

    def __init__(self) -> None:
        self._pods: dict[str, dict[str, Any]] = {}

    def store(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        # The allocated views themselves (the manager replaces a view, never changes one):
        # a write costs one dict, not a copy of every pod of the node.
        self._pods = dict(pods)  # type: ignore[arg-type]

    async def store_async(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        self.store(pods)

    def load(self) -> dict[str, dict[str, Any]]:
        return dict(self._pods)

    def remove(self) -> None:
        self._pods = {}


class HollowVolumePlugin(VolumePlugin):
    """A volume source "set up" without touching the disk: the volume manager's states
    (`Pending`, `HostMounted`, `Unmounting`) and operations are the real ones."""

    def __init__(self, name: str, source_key: str) -> None:
        self.name = name
        self.source_key = source_key

    async def setup(self, pod: Mapping[str, Any], volume: Mapping[str, Any], host_dir: Path,
                    host: VolumeHost) -> None:
        return None

    async def teardown(self, host_dir: Path) -> None:
        return None


def hollow_plugins() -> list[VolumePlugin]:
    return [HollowVolumePlugin(name, key) for name, key in (
        ("kubernetes.io/empty-dir", "emptyDir"), ("kubernetes.io/configmap", "configMap"),
        ("kubernetes.io/secret", "secret"), ("kubernetes.io/projected", "projected"),
        ("kubernetes.io/downward-api", "downwardAPI"), ("kubernetes.io/image", "image"))]


@dataclass(frozen=True)
class HollowImage:
    """Every image is present; one without a command runs `HOLLOW_COMMAND`."""

    id: str
    layers: tuple[Path, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = HOLLOW_COMMAND
    working_dir: str = "/"


class HollowImages:
    def __init__(self) -> None:
        self._images: dict[str, HollowImage] = {}

    def resolve(self, ref: str) -> HollowImage:
        image = self._images.get(ref)
        if image is None:
            image = self._images[ref] = HollowImage(id=f"sha256:hollow-{abs(hash(ref)):x}")
        return image


class HollowRuntime(FakeRuntime):
    """The fake runtime in memory, keeping no call log; `HOLLOW_COMMAND` runs
    `pod_lifetime` seconds (None: until stopped)."""

    def __init__(self, node_name: str, pod_lifetime: float | None) -> None:
        super().__init__(None, node_name, persist=False)
        self.calls: Any = collections.deque(maxlen=0)
        self.pod_lifetime = pod_lifetime

    def _decide(self, argv: tuple[str, ...]) -> tuple[Any, ...] | None:
        if argv == HOLLOW_COMMAND:
            return ("sleep", self.pod_lifetime) if self.pod_lifetime is not None else None
        return super()._decide(argv)


# --- one node --------------------------------------------------------------------------------


class HollowNode:
    """One simulated node (see the module docstring). Pods reach it through `on_pod` and
    `on_pod_delete`, called by the process's shared informer."""

    def __init__(self, name: str, api: ApiClient, config: HollowConfig,
                 images: HollowImages, heartbeat_api: ApiClient | None = None,
                 correlator: EventCorrelator | None = None,
                 event_limit: asyncio.Semaphore | None = None) -> None:
        """`event_limit`: bounds the node events posted in the background, shared by all
        the nodes (their registration events)."""
        self.name = name
        self.api = api
        self.config = config
        self.root_dir = config.root_dir / name
        self.node_config = NodeConfig(node_name=name, root_dir=self.root_dir,
                                      gates=config.gates, node_ip=config.node_ip,
                                      runtime_version="fake://0.1.0",
                                      extra_labels=dict(config.labels),
                                      capacity=dict(config.capacity), taints=config.taints)
        # The heartbeats' timeout as a kubelet's with upstream's 10 s status checks: these
        # nodes check their status less often, not their requests more patiently.
        self.events = KubeletEvents(api, name, quiet=self._quiet, is_quiet=self._is_quiet,
                                    correlator=correlator, limit=event_limit)
        self.node_agent = NodeAgent(heartbeat_api or api, self.node_config,
                                    pressure_probe=Pressure,
                                    report_interval=config.node_status_report_interval,
                                    status_update_interval=min(config.node_status_interval,
                                                               config.lease_renew_interval),
                                    record_event=self.events.node_soon)
        self.node_allocatable: dict[str, Any] = dict(config.capacity)
        self.runtime = HollowRuntime(name, config.pod_lifetime)
        self.status = StatusManager(api)
        self.image_store = images
        self.volumes = VolumeManager(self.root_dir, self, plugins=hollow_plugins(),
                                     sync_period=config.settings.resync_period,
                                     reconcile_period=config.reconcile_period)
        self.allocation = AllocationManager(
            MemoryCheckpoint(), node_allocatable=lambda: self.node_allocatable,
            gates=config.gates)
        # The kubelet's own admission and hand-over (no node pressure is simulated).
        self.pod_admission = PodAdmission(
            allocation=self.allocation, status=self.status, events=self.events,
            node_allocatable=lambda: self.node_allocatable, gates=config.gates,
            volumes_changed=self._volumes_changed)
        self.workers = PodWorkers(WorkerDeps(
            api=api, runtime=self.runtime, images=images, volumes=self.volumes,
            status=self.status, events=self.events, root_dir=self.root_dir, node_name=name,
            host_ip=config.node_ip, get_configmap=self.get_configmap,
            get_secret=self.get_secret, node_allocatable=self.node_allocatable,
            settings=replace(config.settings, pod_dirs=False),
            on_volumes_changed=self._volumes_changed,
            offload=run_inline))
        self.workers.on_worker_done = self._worker_done
        self.pod_admission.workers = self.workers
        self.volumes.set_in_use_checker(self._in_use)
        self.volumes.subscribe(self.workers.wake)
        self.relister = Relister(self.runtime, self.workers.wake,
                                 period=config.relist_period)
        self._relisted_generation = -1  # the runtime's change count when last relisted
        self.started = False
        self._tasks: list[asyncio.Task[Any]] = []

    # -- what the volume manager asks (VolumeHost) --

    @property
    def node_name(self) -> str:
        return self.name

    @property
    def node_allocatable_memory(self) -> int:
        return 0

    async def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return {}  # contents are not simulated (see the module docstring)

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return {}

    async def _in_use(self, uid: str, volume_name: str) -> bool:
        known = self.workers.volume_in_use(uid, volume_name)
        if known is not None:
            return known
        await self.relister.relist_shared()
        return any(any(m.volume_name == volume_name for m in c.mounts)
                   for c in self.relister.snapshot.pod_containers(uid)
                   if c.state.value in ("RUNNING", "CREATED"))

    # -- relisting --

    def relist_due(self, now: float) -> bool:
        """Whether a relist could find a change: the runtime changed since the last relist
        (`relist_once`), or a container's exit is due (it exits as it is listed)."""
        return (self.runtime.generation != self._relisted_generation
                or self.runtime.exit_due(now))

    async def relist_once(self) -> None:
        """One relist; the runtime's change count is taken before it, so a change made while
        it ran makes the next one due."""
        generation = self.runtime.generation
        await self.relister.relist()
        self._relisted_generation = generation

    # -- lifecycle --

    def start(self) -> None:
        """Start the node's own loops (status writes, volumes, allocation retries)."""
        loop = asyncio.get_running_loop()
        for work, what in ((self.status.run(), "status"), (self.volumes.run(), "volumes"),
                           (self.allocation.run(), "allocation")):
            self._tasks.append(loop.create_task(work, name=f"{self.name}-{what}"))
        self.started = True

    async def close(self) -> None:
        await self.workers.close()
        await cancel_and_wait(*self._tasks)
        await self.events.close()
        await self.allocation.close(timeout=1.0)

    def _is_quiet(self) -> bool:
        return self.workers.is_idle() and self.status.is_settled()

    async def _quiet(self) -> None:
        while not self._is_quiet():
            await self.workers.idle()
            await self.status.settled()

    # -- pods (the kubelet's admission and hand-over: `podadmission`) --

    def on_pod(self, pod: Obj) -> None:
        self.status.observe(pod)
        self.pod_admission.handle(pod)

    def on_pod_delete(self, pod: Obj) -> None:
        self.pod_admission.deleted(pod)

    def remove_orphans(self, known_uids: set[str]) -> None:
        """Stop and remove the sandboxes of pods not in `known_uids` (the API's pods on this
        node), as the kubelet's housekeeping does: after a clean stop, the pods deleted
        while the process was down left their adopted sandboxes behind."""
        self.workers.remove_orphans(list(self.runtime.sandboxes.values()), known_uids)

    def _worker_done(self, uid: str) -> None:
        if uid not in self.pod_admission.api_pods:
            self.pod_admission.forget(uid)

    def _volumes_changed(self) -> None:
        if self.started:
            self.volumes.set_desired_pods(self.workers.pods_needing_volumes())

    def pod_count(self) -> int:
        return len(self.workers.uids())


# --- the process -----------------------------------------------------------------------------


# Heartbeats due within this many seconds are sent together, at one wakeup: a wakeup costs
# a process about 0.1-0.2 ms of CPU on these machines (the apiserver's too, for each burst
# of requests), a wait of under a millisecond ends at once (the loop's timers count
# milliseconds), and a Lease renewed 50 ms early (of a 10 s interval, a 40 s duration)
# changes nothing. docs/benchmarks.md, "Heartbeats in ticks".
HEARTBEAT_TICK = 0.05


class _RateLimiter:
    """A token bucket: `acquire` returns once a request may go (`qps` a second, bursts of
    `burst`)."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = float(burst)
        self.tokens = float(burst)
        self.last = time.monotonic()

    async def acquire(self) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
            self.last = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.qps)


class _Gate:
    """Heartbeat requests under a rate limit and a cap of requests in flight; made on the
    event loop that uses it (its semaphore is that loop's)."""

    def __init__(self, qps: float, concurrency: int) -> None:
        self._limiter = _RateLimiter(qps, max(1, concurrency))
        self._inflight = asyncio.Semaphore(max(1, concurrency))

    async def run(self, work: Callable[[], Awaitable[Any]], what: str, name: str) -> bool:
        """`work()`; False (logged, retried at its next turn) if it raised."""
        await self._limiter.acquire()
        async with self._inflight:
            try:
                await work()
            except Exception as err:  # retried at its next turn
                log.warning("node %s: %s: %s", name, what,
                            getattr(err, "message", None) or err)
                return False
        return True


class _LeaseThread:
    """The Lease renewals of every node on their own thread: an event loop of their own and
    the connections of the client `make_api()` gives (made on that loop), so that a renewal
    waits for the interpreter's switch interval, not behind the main loop's queued work."""

    def __init__(self, nodes: HollowNodes, make_api: Callable[[], ApiClient]) -> None:
        self.nodes = nodes
        self.make_api = make_api
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="hollow-leases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception:
            log.exception("the lease renewal thread failed")
        finally:
            self._ready.set()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        cfg = self.nodes.config
        async with self.make_api() as api:
            for node in self.nodes.nodes.values():
                node.node_agent.lease_api = api
            await self.nodes._heartbeats(self._stop, ("lease",),
                                         _Gate(cfg.heartbeat_qps, cfg.heartbeat_concurrency))
        log.info("lease renewal thread stopped")

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    async def stop(self) -> None:
        """Stop the renewals and wait for the thread to end."""
        await asyncio.to_thread(self._ready.wait)
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)
        await asyncio.to_thread(self._thread.join)


def _discard(keys: set[tuple[str, str]], key: tuple[str, str], _done: Any) -> None:
    keys.discard(key)


# Under the root dir: every node's runtime (sandboxes, containers) and allocated pods,
# written when the process stops cleanly and taken back (then removed) at its next start.
STATE_FILE = "hollow-state.json"


class HollowNodes:
    """All the hollow nodes of one process and what they share (module docstring)."""

    def __init__(self, api: ApiClient, config: HollowConfig,
                 heartbeat_api: ApiClient | None = None,
                 lease_api: Callable[[], ApiClient] | None = None) -> None:
        """`heartbeat_api`: the client the Nodes and Leases are written with (registration,
        lease renewals, node statuses), when not `api`: its own connections, so that a
        renewal never waits for a connection behind the pods' status writes and events.
        `lease_api`: when given, the Leases are renewed (after registration) on a thread of
        their own with the client it makes there (`_LeaseThread`)."""
        self.api = api
        self.config = config
        images = HollowImages()
        # One event correlator for all the nodes (their keys name the node, so no node's
        # counts or spam budget mix with another's): its caches bound the process's memory
        # for events as one kubelet's do, where one each would hold 3 x 4,096 entries a node.
        correlator = EventCorrelator()
        # The nodes' background events (a node's start and registration) posted at most
        # `register_concurrency` at a time.
        event_limit = asyncio.Semaphore(max(1, config.register_concurrency))
        self.nodes: dict[str, HollowNode] = {
            config.node_name(i): HollowNode(config.node_name(i), api, config, images,
                                            heartbeat_api, correlator, event_limit)
            for i in range(config.count)}
        self.pods = Informer(api, resource_path("pods"), field_selector="spec.nodeName!=",
                             name="pods of the hollow nodes")
        self.pods.add_handler(on_add=self._on_pod, on_update=lambda old, new: self._on_pod(new),
                              on_delete=self._on_pod_delete)
        self._gate = _Gate(config.heartbeat_qps, config.heartbeat_concurrency)
        self._lease_thread = _LeaseThread(self, lease_api) if lease_api is not None else None
        self._dispatching = False
        # Nodes whose pods wait for the Node's podCIDR (`wait_for_pod_cidr`).
        self._cidr_wait: set[str] = set(self.nodes) if config.wait_for_pod_cidr else set()
        self.registered = 0
        self.lease_renewals = 0
        self.status_writes = 0

    def _node_of(self, pod: Mapping[str, Any]) -> HollowNode | None:
        return self.nodes.get(str((pod.get("spec") or {}).get("nodeName") or ""))

    def _on_pod(self, pod: Obj) -> None:
        node = self._node_of(pod)
        if node is not None and self._dispatching and node.name not in self._cidr_wait:
            node.on_pod(pod)

    def _on_pod_delete(self, pod: Obj) -> None:
        node = self._node_of(pod)
        if node is not None and self._dispatching and node.name not in self._cidr_wait:
            node.on_pod_delete(pod)

    def _dispatch(self, names: set[str] | None = None) -> None:
        """Hand the informer's pods (of the nodes `names`, else of all) to their nodes,
        oldest first; then each of those nodes removes the pods it adopted (`restore_state`)
        that are no longer in the API (`HollowNode.remove_orphans`)."""
        listed = sorted(self.pods.list(),
                        key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
        known: dict[str, set[str]] = {}
        for pod in listed:
            node_name = str((pod.get("spec") or {}).get("nodeName") or "")
            known.setdefault(node_name, set()).add(str(pod["metadata"].get("uid") or ""))
            if names is None or node_name in names:
                self._on_pod(pod)
        for name in self.nodes if names is None else names:
            if name not in self._cidr_wait:
                self.nodes[name].remove_orphans(known.get(name, set()))

    async def _await_pod_cidrs(self, stop: asyncio.Event) -> None:
        """`wait_for_pod_cidr`: list the Nodes until every hollow node's has a podCIDR; each
        node that has one gets it in its runtime and its pods dispatched (the others wait,
        their pods in the informer's cache)."""
        last_said = time.monotonic()
        while self._cidr_wait and not stop.is_set():
            try:
                # From the apiserver's watch cache (resourceVersion=0): a podCIDR seen
                # a moment late costs one more poll, not a read of every Node from the store.
                listed = await self.api.list(resource_path("nodes"), resourceVersion="0")
            except Exception as err:
                log.warning("listing the Nodes for their pod CIDRs: %s",
                            getattr(err, "message", None) or err)
                listed = {"items": []}
            ready: set[str] = set()
            for item in listed.get("items") or []:
                name = str(item["metadata"]["name"])
                cidr = str((item.get("spec") or {}).get("podCIDR") or "")
                if cidr and name in self._cidr_wait:
                    await self.nodes[name].runtime.update_runtime_config(cidr)
                    ready.add(name)
            if ready:
                self._cidr_wait -= ready
                if self._dispatching:
                    self._dispatch(ready)
            if not self._cidr_wait:
                log.info("every hollow node has its pod CIDR")
                return
            if time.monotonic() - last_said >= 30:
                last_said = time.monotonic()
                log.info("%d hollow nodes wait for their pod CIDR (the controller-manager's "
                         "node IPAM)", len(self._cidr_wait))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.pod_cidr_poll)

    async def register(self, stop: asyncio.Event) -> None:
        """Register every Node and create its Lease, `register_concurrency` at a time,
        retrying until the API answers."""
        gate = asyncio.Semaphore(max(1, self.config.register_concurrency))

        async def one(node: HollowNode) -> None:
            async with gate:
                # upstream's `BirthCry`, at each start of the (simulated) kubelet
                node.events.node_soon(NORMAL, STARTING, STARTING_MESSAGE)
                while not stop.is_set():
                    try:
                        await node.node_agent.register()
                        await node.node_agent.renew_lease()
                        self.registered += 1
                        return
                    except Exception as err:
                        log.warning("registering node %s: %s; retrying", node.name,
                                    getattr(err, "message", None) or err)
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), 1.0)

        await asyncio.gather(*(one(n) for n in self.nodes.values()))

    async def _heartbeats(self, stop: asyncio.Event, kinds: Sequence[str],
                          gate: _Gate) -> None:
        """Leases and/or Node statuses (`kinds`): each node at its own random phase of each
        interval, all under `gate`."""
        cfg = self.config
        now = time.monotonic()
        queue: list[tuple[float, int, str, str]] = []
        for i, name in enumerate(self.nodes):
            if "lease" in kinds:
                queue.append((now + random.uniform(0, cfg.lease_renew_interval), i, "lease",
                              name))
            if "status" in kinds:
                # The first status check comes within a lease interval (it also picks up
                # the podCIDR the controller-manager assigns after registration), the next
                # ones every `node_status_interval`.
                first = min(cfg.node_status_interval, cfg.lease_renew_interval)
                queue.append((now + random.uniform(0, first), i, "status", name))
        if not queue:
            return
        heapq.heapify(queue)
        pending: set[asyncio.Task[Any]] = set()
        busy: set[tuple[str, str]] = set()
        while not stop.is_set():
            due, i, kind, name = queue[0]
            wait = due - time.monotonic()
            if wait > HEARTBEAT_TICK:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
                continue
            heapq.heappop(queue)
            node = self.nodes[name]
            interval = cfg.lease_renew_interval if kind == "lease" else \
                cfg.node_status_interval
            heapq.heappush(queue, (due + interval, i, kind, name))
            if (kind, name) in busy:  # the previous one is still under way: skip this turn
                continue
            busy.add((kind, name))
            task = asyncio.ensure_future(self._renew(node, gate) if kind == "lease" else
                                         self._status(node, gate))
            pending.add(task)
            task.add_done_callback(pending.discard)
            task.add_done_callback(functools.partial(_discard, busy, (kind, name)))
            await asyncio.sleep(0)
        for task in pending:
            task.cancel()

    async def _renew(self, node: HollowNode, gate: _Gate) -> None:
        if await gate.run(node.node_agent.renew_lease, "renewing the node lease", node.name):
            self.lease_renewals += 1

    async def _status(self, node: HollowNode, gate: _Gate) -> None:
        written: list[bool] = []

        async def update() -> None:
            written.append(await node.node_agent.update_status())

        if await gate.run(update, "updating the node status", node.name) and any(written):
            self.status_writes += 1
        # The Node's podCIDR (the controller-manager's node IPAM) gives its pods their IPs.
        cidr = str(((node.node_agent.node or {}).get("spec") or {}).get("podCIDR") or "")
        if cidr and cidr != node.runtime.pod_cidr:
            await node.runtime.update_runtime_config(cidr)

    async def _relists(self, stop: asyncio.Event) -> None:
        """Each node's runtime listed once per `relist_period`, spread over it."""
        period = self.config.relist_period
        nodes = list(self.nodes.values())
        step = period / max(1, len(nodes))
        while not stop.is_set():
            for node in nodes:
                began = time.monotonic()
                try:
                    if node.relist_due(time.time()):
                        await node.relist_once()
                except Exception:
                    log.exception("relisting node %s", node.name)
                left = step - (time.monotonic() - began)
                if left > 0:
                    await asyncio.sleep(left)
                if stop.is_set():
                    return

    async def run(self, stop: asyncio.Event,
                  ready: Callable[[], None] | None = None) -> None:
        """Register the nodes, then run them until `stop` is set; `ready` is called once
        every Node is registered and the first pod list is dispatched."""
        self.config.root_dir.mkdir(parents=True, exist_ok=True)
        tasks: list[asyncio.Task[Any]] = []
        try:
            await self.register(stop)
            if stop.is_set():
                return
            adopted = self.restore_state()
            if adopted:
                log.info("adopted %d containers the hollow nodes ran before a clean stop",
                         adopted)
            for node in self.nodes.values():
                node.start()
            tasks.append(asyncio.create_task(self.pods.run(), name="hollow-pod-informer"))
            if self._lease_thread is not None:
                self._lease_thread.start()
            kinds = ("status",) if self._lease_thread is not None else ("lease", "status")
            tasks.append(asyncio.create_task(self._heartbeats(stop, kinds, self._gate),
                                             name="hollow-heartbeats"))
            if self._cidr_wait:
                tasks.append(asyncio.create_task(self._await_pod_cidrs(stop),
                                                 name="hollow-pod-cidrs"))
            synced = asyncio.ensure_future(self.pods.wait_synced())
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({synced, stopped}, return_when=asyncio.FIRST_COMPLETED)
            synced.cancel()
            stopped.cancel()
            if stop.is_set():
                return
            self._dispatching = True
            self._dispatch()
            tasks.append(asyncio.create_task(self._relists(stop), name="hollow-relister"))
            if ready is not None:
                ready()
            await stop.wait()
        finally:
            await cancel_and_wait(*tasks)
            if self._lease_thread is not None and self._lease_thread.alive:
                await self._lease_thread.stop()
            await asyncio.gather(*(n.close() for n in self.nodes.values()),
                                 return_exceptions=True)
            if any(n.started for n in self.nodes.values()):
                self.save_state()

    def save_state(self) -> None:
        """Write every node's runtime and allocated pods (`STATE_FILE`): a process stopped
        cleanly and started again adopts its containers, as a kubelet restarted on a real
        runtime does, instead of restarting every pod. A process killed leaves none: its
        nodes come back as after a reboot (module docstring)."""
        data = {name: {"runtime": node.runtime.state(),
                       "allocated": node.allocation.allocated}
                for name, node in self.nodes.items()}
        path = self.config.root_dir / STATE_FILE
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_bytes(orjson.dumps(data))
            tmp.replace(path)
        except OSError as err:
            log.error("saving the hollow nodes' state to %s: %s", path, err)

    def restore_state(self) -> int:
        """Take back what `save_state` wrote (then remove it: it holds only until the
        nodes run again); the containers adopted."""
        path = self.config.root_dir / STATE_FILE
        try:
            data = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return 0
        except (OSError, orjson.JSONDecodeError) as err:
            log.error("ignoring the hollow nodes' state in %s: %s", path, err)
            data = {}
        path.unlink(missing_ok=True)
        adopted = 0
        for name, saved in data.items():
            node = self.nodes.get(name)
            if node is None:
                continue
            node.runtime.restore(saved["runtime"])
            node.allocation.allocated = dict(saved["allocated"])
            node.allocation.checkpoint.store(node.allocation.allocated)
            adopted += len(node.runtime.containers)
        return adopted

    def summary(self) -> dict[str, int]:
        return {"nodes": len(self.nodes), "registered": self.registered,
                "pods": sum(n.pod_count() for n in self.nodes.values()),
                "leaseRenewals": self.lease_renewals, "nodeStatusWrites": self.status_writes}

"""The kubelet's Node: registration, status and the heartbeat Lease (upstream's
`kubelet_node_status.go`, `nodestatus/setters.go` and `nodelease`).

- `machine_capacity(root_dir)`: `cpu` (the CPUs this process may run on), `memory`
  (`MemTotal`), `ephemeral-storage` (the size of the filesystem holding the root dir),
  `pods` (110), `hugepages-<size>` for the page sizes the kernel offers (0).
- `allocatable(capacity, reservation)`: capacity minus what `reservation(capacity)` holds
  back, never below zero; the kubelet's reservation is the `--system-reserved` and
  `--kube-reserved` ones (`parse_reserved`: cpu, memory, ephemeral-storage; summed by
  `total_reserved`) plus what the hard eviction thresholds hold back (`memory.available`,
  `nodefs.available`: upstream's `GetNodeAllocatableReservation`).
- `NodeStatusBuilder` builds `status`: capacity (re-read at every build, so a grown or
  shrunk filesystem shows), allocatable, `conditions` (MemoryPressure,
  DiskPressure, PIDPressure, Ready, in upstream's order, with upstream's reasons and
  messages; `lastTransitionTime` kept while a condition's status stays), `addresses`
  (InternalIP, Hostname), `daemonEndpoints.kubeletEndpoint.Port`, `nodeInfo`,
  `declaredFeatures` (the enabled gates among PodLevelResourcesEphemeralStorage,
  DynamicNodeLocalEphemeralVolumes, DynamicContainers, sorted) and `images`.
- `node_object(...)`: the Node the kubelet registers, labelled `kubernetes.io/hostname`,
  `kubernetes.io/os`, `kubernetes.io/arch` (and the `beta.` forms upstream still sets).
- `NodeAgent`: `register()` creates the Node (or, when it exists, reconciles its labels and
  status, as upstream's `tryRegisterWithAPIServer` does), `update_status()` (upstream's
  `tryUpdateNodeStatus`) reads the Node from the API, builds the status on it and PATCHes
  `nodes/NAME/status` when the result differs from the Node in the API in anything but
  heartbeat times, or when `report_interval` seconds passed since the last report; so when
  someone else changed the status (the node lifecycle controller setting Ready `Unknown`
  after an outage), the next update, one `--node-status-update-frequency` later, restores
  it. `renew_lease()` keeps `kube-node-lease/NAME` current (`leaseDurationSeconds` 40,
  renewed every 10 s; owned by the Node) as upstream's node lease controller does: a PUT
  of the Lease it last wrote, no GET before it (a GET, and a create when missing, only
  when that PUT fails or at the first renewal).
- Node events (`NodeAgent.record_event`, posted by the caller in the background), as
  upstream's status setters record them, `Node NAME status is now: REASON`
  (`node_status_events`): a pressure condition that appears or changes status
  (`NodeHasSufficientMemory` / `NodeHasInsufficientMemory`, `NodeHasNoDiskPressure` /
  `NodeHasDiskPressure`, `NodeHasSufficientPID` / `NodeHasInsufficientPID`), a Ready
  condition that changes status (`NodeReady` / `NodeNotReady`; not when it first appears),
  and `spec.unschedulable` seen changed (`NodeNotSchedulable` / `NodeSchedulable`, compared
  with the last seen, initially schedulable). Registration records the pressure events of
  the new status as upstream's `initialNode` does, at every kubelet start. All are compared
  in memory with the Node the agent reads or writes anyway: no request of their own but the
  event's, and none while nothing changes.

Pressure comes from `NodeAgent.pressure_probe`: the kubelet's eviction manager sets
MemoryPressure, DiskPressure and PIDPressure from its signals; `probe_pressure` (the
default, for a node without one) reads the free space of the root dir's filesystem.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.api.featuregates import (
    DYNAMIC_CONTAINERS,
    DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES,
    DYNAMIC_VOLUME_HOT_PLUG,
    POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE,
)
from ephemera.api.jsoncopy import json_copy
from ephemera.api.patch import merge_patch
from ephemera.api.quantity import Quantity, parse_quantity
from ephemera.client import ApiClient, ApiUnavailable, resource_path

__all__ = [
    "DECLARABLE_FEATURES",
    "DEFAULT_MAX_PODS",
    "KUBELET_VERSION",
    "LEASE_DURATION_SECONDS",
    "NODE_LEASE_NAMESPACE",
    "NODE_NOT_READY",
    "NODE_NOT_SCHEDULABLE",
    "NODE_READY",
    "NODE_SCHEDULABLE",
    "PRESSURE_EVENTS",
    "NodeAgent",
    "NodeConfig",
    "NodeStatusBuilder",
    "Pressure",
    "RecordEvent",
    "Reservation",
    "allocatable",
    "declared_features",
    "heartbeat_timeout",
    "machine_capacity",
    "machine_memory_bytes",
    "node_object",
    "node_status_events",
    "node_status_message",
    "now_rfc3339",
    "parse_reserved",
    "total_reserved",
]

log = logging.getLogger(__name__)

KUBELET_VERSION = "v1.38.0"
DEFAULT_MAX_PODS = 110
NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
MAX_LEASE_UPDATE_RETRIES = 5  # upstream's maxUpdateRetries
# Upstream's defaults: status checked every 10 s, reported at least every 5 min when unchanged.
STATUS_UPDATE_INTERVAL = 10.0
STATUS_REPORT_INTERVAL = 300.0
EVICTION_HARD_NODEFS_FRACTION = 0.10  # probe_pressure's disk threshold (upstream's default)
# The resources `--system-reserved` / `--kube-reserved` may reserve (upstream also takes
# `pid`, which ephemera does not limit).
RESERVABLE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# The feature gates a node declares (KEP-5328) when they are on.
DECLARABLE_FEATURES = (
    DYNAMIC_CONTAINERS,
    DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES,
    DYNAMIC_VOLUME_HOT_PLUG,  # ephemera's own: live mount changes (NotRequired)
    POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE,
)


def heartbeat_timeout(status_update_interval: float = STATUS_UPDATE_INTERVAL) -> float:
    """How long one heartbeat request (a Node status check or write, a Lease renewal) may
    take: upstream's kubelet gives its heartbeat client the node status update frequency as
    its timeout, at most the lease duration (10 s by default), so that a renewal stuck on a
    saturated apiserver is given up and tried again within the lease, not after the
    client's 30 s."""
    return min(status_update_interval, float(LEASE_DURATION_SECONDS))


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """A `MicroTime` as upstream writes it (`2006-01-02T15:04:05.000000Z07:00`)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def go_arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386",
            "ppc64le": "ppc64le", "s390x": "s390x"}.get(machine, machine)


def _meminfo() -> dict[str, int]:
    """`/proc/meminfo` in bytes."""
    values: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                factor = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
                values[key] = int(parts[0]) * factor
    return values


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _hugepage_sizes() -> list[str]:
    """The hugepage sizes the kernel offers, as resource names (`hugepages-2Mi`)."""
    names = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.listdir("/sys/kernel/mm/hugepages")):
            if entry.startswith("hugepages-") and entry.endswith("kB"):
                kib = int(entry[len("hugepages-"):-2])
                if kib % (1024 * 1024) == 0:
                    names.append(f"hugepages-{kib // (1024 * 1024)}Gi")
                elif kib % 1024 == 0:
                    names.append(f"hugepages-{kib // 1024}Mi")
                else:
                    names.append(f"hugepages-{kib}Ki")
    return names


def _filesystem(path: Path) -> tuple[int, int]:
    """(size, available) in bytes of the filesystem holding `path` (or its nearest existing
    parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    st = os.statvfs(probe)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def machine_memory_bytes() -> int:
    """The machine's memory (`MemTotal`): the node's memory capacity."""
    return _meminfo().get("MemTotal", 0)


def total_reserved(*reservations: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """The sum of `reservations` (`--system-reserved`, `--kube-reserved`, the hard
    eviction thresholds' share), by resource."""
    total: dict[str, Quantity] = {}
    for reserved in reservations:
        for name, quantity in reserved.items():
            total[name] = total[name] + quantity if name in total else quantity
    return total


def machine_capacity(root_dir: Path, max_pods: int = DEFAULT_MAX_PODS) -> dict[str, str]:
    """The node's capacity as a Node's `status.capacity` (quantity strings)."""
    mem = machine_memory_bytes()
    size, _ = _filesystem(root_dir)
    capacity = {"cpu": str(_cpu_count()), "memory": f"{mem // 1024}Ki",
                "ephemeral-storage": f"{size // 1024}Ki", "pods": str(max_pods)}
    for name in _hugepage_sizes():
        capacity[name] = "0"
    return capacity


def parse_reserved(flag: str) -> dict[str, Quantity]:
    """`--system-reserved` / `--kube-reserved` (`cpu=500m,memory=1Gi,...`), with upstream's
    errors (`parseResourceList`); ephemera refuses `pid`, which it does not limit."""
    reserved: dict[str, Quantity] = {}
    for pair in (p.strip() for p in flag.split(",")):
        if not pair:
            continue
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"malformed pair, expect string=string: {pair}")
        name, value = name.strip(), value.strip()
        if name not in RESERVABLE_RESOURCES:
            hint = ": ephemera does not limit pids" if name == "pid" else ""
            raise ValueError(f'cannot reserve "{name}" resource{hint}')
        try:
            quantity = parse_quantity(value)
        except ValueError as err:
            raise ValueError(
                f'failed to parse quantity "{value}" for "{name}" resource: {err}') from None
        if quantity.sign() < 0:
            raise ValueError(f'resource quantity for "{name}" cannot be negative: {value}')
        reserved[name] = quantity
    return reserved


# What allocatable holds back, given the capacity (see `allocatable`).
Reservation = Callable[[Mapping[str, Quantity]], Mapping[str, Quantity]]


def allocatable(capacity: Mapping[str, str],
                reservation: Reservation | None = None) -> dict[str, str]:
    """Capacity minus `reservation(capacity)` (nothing when None), floored at zero, in
    Quantity arithmetic as upstream prints it (`4Gi` - `1Gi` is `3Gi`)."""
    quantities = {name: parse_quantity(value) for name, value in capacity.items()}
    held = reservation(quantities) if reservation is not None else {}
    result = dict(capacity)
    for name, quantity in quantities.items():
        if name in held:
            left = quantity - held[name]
            result[name] = str(left if left.sign() >= 0 else Quantity())
    return result


def declared_features(gates: Mapping[str, bool]) -> list[str]:
    """The features this node declares: the enabled ones among `DECLARABLE_FEATURES`."""
    return sorted(f for f in DECLARABLE_FEATURES if gates.get(f, False))


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _os_image() -> str:
    with contextlib.suppress(OSError), open("/etc/os-release") as f:
        for line in f:
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    return "Linux"


def node_info(runtime_version: str) -> dict[str, str]:
    machine_id = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id")
    return {
        "machineID": machine_id,
        "systemUUID": _read("/sys/class/dmi/id/product_uuid") or machine_id,
        "bootID": _read("/proc/sys/kernel/random/boot_id"),
        "kernelVersion": platform.release(),
        "osImage": _os_image(),
        "containerRuntimeVersion": runtime_version,
        "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": go_arch(),
    }


@dataclass(frozen=True)
class Pressure:
    """The node's pressure conditions: True means under pressure."""

    memory: bool = False
    disk: bool = False
    pid: bool = False


def probe_pressure(root_dir: Path) -> Pressure:
    """Disk pressure read directly (free space under 10% of the root dir's filesystem), for
    a node without an eviction manager; no memory or PID pressure (the eviction manager
    measures those)."""
    size, free = _filesystem(root_dir)
    return Pressure(disk=size > 0 and free < size * EVICTION_HARD_NODEFS_FRACTION)


@dataclass
class NodeConfig:
    node_name: str
    root_dir: Path
    gates: Mapping[str, bool]
    node_ip: str = "127.0.0.1"
    kubelet_port: int = 10250
    max_pods: int = DEFAULT_MAX_PODS
    runtime_version: str = ""
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    reservation: Reservation | None = None  # what allocatable holds back (the kubelet's)
    # A fixed capacity instead of the machine's (simulated nodes, `ephemera.kubelet.hollow`).
    capacity: Mapping[str, str] | None = None
    # Taints the Node is registered with (upstream's `--register-with-taints`).
    taints: Sequence[Mapping[str, str]] = ()


# (type, reason and message when fine, reason and message under pressure), upstream's order.
_PRESSURE_CONDITIONS = (
    ("MemoryPressure", "memory",
     ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
     ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available")),
    ("DiskPressure", "disk",
     ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
     ("KubeletHasDiskPressure", "kubelet has disk pressure")),
    ("PIDPressure", "pid",
     ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
     ("KubeletHasInsufficientPID", "kubelet has insufficient PID available")),
)
READY_MESSAGE = "kubelet is posting ready status"
# Node status event reasons (upstream's setters and `pkg/kubelet/events`): per pressure
# condition, (fine, under pressure).
PRESSURE_EVENTS = {
    "MemoryPressure": ("NodeHasSufficientMemory", "NodeHasInsufficientMemory"),
    "DiskPressure": ("NodeHasNoDiskPressure", "NodeHasDiskPressure"),
    "PIDPressure": ("NodeHasSufficientPID", "NodeHasInsufficientPID"),
}
NODE_READY = "NodeReady"
NODE_NOT_READY = "NodeNotReady"
NODE_SCHEDULABLE = "NodeSchedulable"
NODE_NOT_SCHEDULABLE = "NodeNotSchedulable"
# (event type, reason, message)
RecordEvent = Callable[[str, str, str], None]


def node_status_message(node_name: str, reason: str) -> str:
    """Upstream's `recordNodeStatusEvent` message."""
    return f"Node {node_name} status is now: {reason}"


def _statuses(status: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(c.get("type")): str(c.get("status"))
            for c in (status or {}).get("conditions") or [] if isinstance(c, dict)}


def node_status_events(previous: Mapping[str, Any] | None,
                       status: Mapping[str, Any]) -> list[str]:
    """The reasons of the events upstream's setters record when `status` replaces
    `previous` (None: a new Node), in the setters' order: a pressure condition new or
    changed, a Ready condition changed (not new)."""
    before, after = _statuses(previous), _statuses(status)
    reasons = []
    for kind, (fine, bad) in PRESSURE_EVENTS.items():
        now = after.get(kind)
        if now in ("True", "False") and before.get(kind) != now:
            reasons.append(bad if now == "True" else fine)
    ready = after.get("Ready")
    if ready is not None and "Ready" in before and before["Ready"] != ready:
        reasons.append(NODE_READY if ready == "True" else NODE_NOT_READY)
    return reasons


def node_labels(config: NodeConfig) -> dict[str, str]:
    arch = go_arch()
    return {"beta.kubernetes.io/arch": arch, "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch, "kubernetes.io/hostname": config.node_name,
            "kubernetes.io/os": "linux", **config.extra_labels}


class NodeStatusBuilder:
    """Builds the Node's `status`, keeping condition transition times across calls."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.capacity = self._capacity()
        self.info = node_info(config.runtime_version)

    def _capacity(self) -> dict[str, str]:
        if self.config.capacity is not None:
            return dict(self.config.capacity)
        return machine_capacity(self.config.root_dir, self.config.max_pods)

    def build(self, previous: Mapping[str, Any] | None, *, pressure: Pressure,
              runtime_ready: bool = True, runtime_message: str = "",
              images: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        cfg = self.config
        self.capacity = self._capacity()
        now = now_rfc3339()
        old = {c.get("type"): c for c in (previous or {}).get("conditions") or []
               if isinstance(c, dict)}
        conditions = []
        for kind, attr, fine, bad in _PRESSURE_CONDITIONS:
            under = bool(getattr(pressure, attr))
            reason, message = bad if under else fine
            conditions.append(_condition(kind, "True" if under else "False", reason, message,
                                         now, old.get(kind)))
        if runtime_ready:
            ready = _condition("Ready", "True", "KubeletReady", READY_MESSAGE, now,
                               old.get("Ready"))
        else:
            ready = _condition("Ready", "False", "KubeletNotReady",
                               runtime_message or "container runtime is down", now,
                               old.get("Ready"))
        conditions.append(ready)
        status: dict[str, Any] = {
            "capacity": dict(self.capacity),
            "allocatable": allocatable(self.capacity, cfg.reservation),
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": cfg.node_ip},
                          {"type": "Hostname", "address": cfg.node_name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": cfg.kubelet_port}},
            "nodeInfo": dict(self.info),
            "declaredFeatures": declared_features(cfg.gates),
        }
        if images:
            status["images"] = images
        return status


def _condition(kind: str, status: str, reason: str, message: str, now: str,
               previous: Mapping[str, Any] | None) -> dict[str, Any]:
    transition = now
    if previous is not None and previous.get("status") == status:
        transition = str(previous.get("lastTransitionTime") or now)
    return {"type": kind, "status": status, "lastHeartbeatTime": now,
            "lastTransitionTime": transition, "reason": reason, "message": message}


def without_heartbeats(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status with the heartbeat times left out, to tell a real change from a beat."""
    copy = dict(status)
    copy["conditions"] = [{k: v for k, v in c.items() if k != "lastHeartbeatTime"}
                          for c in status.get("conditions") or [] if isinstance(c, dict)]
    return copy


def node_object(config: NodeConfig, status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": config.node_name, "labels": node_labels(config),
                         "annotations": {
                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
            "spec": {"taints": [dict(t) for t in config.taints]} if config.taints else {},
            "status": status}


class NodeAgent:
    """Registers the Node, keeps its status current and renews its Lease."""

    def __init__(self, api: ApiClient, config: NodeConfig, *,
                 pressure_probe: Callable[[], Pressure] | None = None,
                 images: Callable[[], list[dict[str, Any]]] | None = None,
                 report_interval: float = STATUS_REPORT_INTERVAL,
                 status_update_interval: float = STATUS_UPDATE_INTERVAL,
                 record_event: RecordEvent | None = None) -> None:
        """`record_event(type, reason, message)`: posts a Node event, without waiting."""
        self.api = api
        self.record_event = record_event
        # spec.unschedulable as last seen (upstream's `lastNodeUnschedulable`).
        self._last_unschedulable = False
        self.config = config
        self.builder = NodeStatusBuilder(config)
        self.pressure_probe = pressure_probe or (lambda: probe_pressure(config.root_dir))
        self.images = images
        self.report_interval = report_interval
        self.heartbeat_timeout = heartbeat_timeout(status_update_interval)
        self.node: dict[str, Any] | None = None
        self.lease: dict[str, Any] | None = None  # the Lease as last written or read
        # The client the Lease is written with, when not `api` (hollow nodes renew on a
        # thread of their own).
        self.lease_api: ApiClient | None = None
        self._last_report_time = 0.0
        self.runtime_ready = True
        self.runtime_message = ""

    @property
    def name(self) -> str:
        return self.config.node_name

    def _status(self, previous: Mapping[str, Any] | None) -> dict[str, Any]:
        images = None
        if self.images is not None:
            try:
                images = self.images()
            except Exception as err:  # the image list is informative only
                log.warning("could not list images for the node status: %s", err)
        return self.builder.build(previous, pressure=self.pressure_probe(),
                                  runtime_ready=self.runtime_ready,
                                  runtime_message=self.runtime_message, images=images)

    def _record(self, reasons: Sequence[str]) -> None:
        if self.record_event is not None:
            for reason in reasons:
                self.record_event("Normal", reason, node_status_message(self.name, reason))

    def _schedulable_events(self, node: Mapping[str, Any]) -> list[str]:
        """Upstream's `recordNodeSchedulableEvent`: the event when `spec.unschedulable`
        differs from the last seen."""
        unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
        if unschedulable == self._last_unschedulable:
            return []
        self._last_unschedulable = unschedulable
        return [NODE_NOT_SCHEDULABLE if unschedulable else NODE_SCHEDULABLE]

    async def register(self) -> dict[str, Any]:
        """Create the Node, or reconcile an existing one; the Node as stored."""
        path = resource_path("nodes")
        status = self._status(None)
        self._record(node_status_events(None, status))  # upstream's `initialNode`
        try:
            self.node = await self.api.create(path, node_object(self.config, status))
            if not (self.node.get("status") or {}).get("conditions"):
                # A server that drops status on create: write it.
                self.node = await self.api.patch(
                    resource_path("nodes", name=self.name, subresource="status"),
                    {"status": status}, patch_type="merge")
            log.info("registered node %s", self.name)
        except StatusError as err:
            if err.code != 409:
                raise
            existing = await self.api.get(resource_path("nodes", name=self.name))
            labels = node_labels(self.config)
            if any((existing.get("metadata") or {}).get("labels", {}).get(k) != v
                   for k, v in labels.items()):
                await self.api.patch(resource_path("nodes", name=self.name),
                                     {"metadata": {"labels": labels}}, patch_type="merge")
            status = self._status(existing.get("status"))
            self.node = await self.api.patch(
                resource_path("nodes", name=self.name, subresource="status"),
                {"status": status}, patch_type="merge")
            log.info("node %s was already registered; status reconciled", self.name)
            self._record(node_status_events(existing.get("status"), status)
                         + self._schedulable_events(existing))
        self._last_report_time = time.monotonic()
        return self.node or {}

    async def update_status(self, *, force: bool = False) -> bool:
        """Upstream's `tryUpdateNodeStatus`: build the status on the Node as the API has it
        and PATCH it when it differs there in anything but heartbeat times (or the report
        interval passed, or `force`); True if written. The Node is read with
        `resourceVersion=0`, from the apiserver's watch cache, as upstream's first try
        (`FromApiserverCache`): the status is a merge patch, so a slightly old copy costs a
        write the API did not need, or delays one it needed (the cache had not yet seen
        another writer's change) until the next check or the report interval."""
        node = await self.api.get(resource_path("nodes", name=self.name),
                                  request_timeout=self.heartbeat_timeout, resourceVersion="0")
        original = node.get("status") or {}
        status = self._status(original)
        # What the Node's status becomes once the merge patch is applied.
        after = merge_patch({"status": original}, {"status": status}).get("status") or {}
        changed = without_heartbeats(after) != without_heartbeats(original)
        due = time.monotonic() - self._last_report_time >= self.report_interval
        if not (force or changed or due):
            self.node = node
            self._record(self._schedulable_events(node))
            return False
        self.node = await self.api.patch(
            resource_path("nodes", name=self.name, subresource="status"),
            {"status": status}, patch_type="merge", request_timeout=self.heartbeat_timeout)
        self._last_report_time = time.monotonic()
        self._record(node_status_events(original, after) + self._schedulable_events(node))
        return True

    def _new_lease(self, base: Mapping[str, Any] | None) -> dict[str, Any]:
        """Upstream's `newLease`: a copy of `base` (a new Lease when None) renewed now, owned
        by the Node once its uid is known (`setNodeOwnerFunc`, from the registered Node
        rather than a GET of it)."""
        if base is None:
            lease: dict[str, Any] = {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": NODE_LEASE_NAMESPACE},
                "spec": {"holderIdentity": self.name,
                         "leaseDurationSeconds": LEASE_DURATION_SECONDS}}
        else:
            lease = json_copy(dict(base))
        spec = lease.get("spec")
        if not isinstance(spec, dict):
            spec = lease["spec"] = {}
        spec["renewTime"] = now_micro()
        md = lease.get("metadata")
        if not isinstance(md, dict):
            md = lease["metadata"] = {}
        uid = ((self.node or {}).get("metadata") or {}).get("uid")
        if not md.get("ownerReferences") and uid:
            md["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.name,
                                      "uid": uid}]
        return lease

    async def renew_lease(self) -> None:
        """Renew (or create) the node's Lease as upstream's node lease controller (`sync`):
        a PUT of the Lease this agent last wrote, `renewTime` changed, with no GET before
        it; when that fails (or no Lease is known yet), the Lease is read (created when
        missing, and then not renewed again at once) and renewed from what was read. Each
        renewal is tried `MAX_LEASE_UPDATE_RETRIES` times, a conflict reading the Lease
        again first (`retryUpdateLease`). An error left raises to the caller, which tries
        again at its next turn."""
        if self.lease is not None:
            try:
                await self._update_lease(self.lease)
                return
            except (StatusError, ApiUnavailable) as err:
                log.info("node %s: failed to update lease using latest lease, fallback to "
                         "ensure lease: %s", self.name, getattr(err, "message", None) or err)
        lease, created = await self._ensure_lease()
        self.lease = lease
        if not created:
            await self._update_lease(lease)

    async def _ensure_lease(self) -> tuple[dict[str, Any], bool]:
        """Upstream's `ensureLease`: the Lease as stored, created when missing; and whether
        it was created."""
        try:
            return await (self.lease_api or self.api).get(
                _lease_path(self.name), request_timeout=self.heartbeat_timeout), False
        except StatusError as err:
            if err.code != 404:
                raise
        return await (self.lease_api or self.api).create(
            _lease_path(None), self._new_lease(None),
            request_timeout=self.heartbeat_timeout), True

    async def _update_lease(self, base: Mapping[str, Any]) -> None:
        """Upstream's `retryUpdateLease`: PUT `base` renewed, up to `MAX_LEASE_UPDATE_RETRIES`
        times; a conflict reads the Lease again before the next try."""
        error: StatusError | ApiUnavailable | None = None
        for _ in range(MAX_LEASE_UPDATE_RETRIES):
            try:
                self.lease = await (self.lease_api or self.api).update(
                    _lease_path(self.name), self._new_lease(base),
                    request_timeout=self.heartbeat_timeout)
                return
            except (StatusError, ApiUnavailable) as err:
                log.warning("node %s: failed to update lease: %s", self.name,
                            getattr(err, "message", None) or err)
                error = err
                if isinstance(err, StatusError) and err.code == 409:
                    base, _ = await self._ensure_lease()
        assert error is not None
        raise error


def _lease_path(name: str | None) -> str:
    """The node's Lease (`name`), or the collection of node Leases (None)."""
    return resource_path("leases", NODE_LEASE_NAMESPACE, name, group="coordination.k8s.io")


def default_node_name() -> str:
    """The host name, lower-cased, as upstream's `--hostname-override` default."""
    return socket.gethostname().lower()

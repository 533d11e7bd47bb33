"""The node lifecycle controller, as upstream's (`pkg/controller/nodelifecycle`), reduced to
what a kubelet's heartbeat decides: a node whose kubelet stopped renewing its Lease is
marked unknown, and nodes are tainted after their conditions.

- Informers on Nodes and on the Leases of `kube-node-lease`.
- Every `monitor_period` (5 s): a node's heartbeat is the last time this controller saw its
  Lease's `renewTime` (or its Ready condition's `lastHeartbeatTime`) change, or saw the node
  for the first time. When it is older than `grace_period` (50 s, upstream's
  `--node-monitor-grace-period` default since 1.32, kubernetes#126287: a little more than
  the kubelet's 40 s `leaseDurationSeconds`, so that a renewal late by a retry and the
  monitor's own period do not mark a live node), every condition among Ready,
  MemoryPressure, DiskPressure and PIDPressure that is not already Unknown becomes
  `status: Unknown`, reason
  `NodeStatusUnknown`, message `Kubelet stopped posting node status.` (a condition the kubelet
  never posted: `NodeStatusNeverUpdated`, `Kubelet never posted node status.`), with a
  `NodeNotReady` event `Node NAME status is now: NodeNotReady`.
- Taints, as upstream's NoSchedule and NoExecute passes: Ready False gives
  `node.kubernetes.io/not-ready`, Ready Unknown `node.kubernetes.io/unreachable` (each with
  effects NoSchedule and NoExecute, the latter with `timeAdded`); MemoryPressure,
  DiskPressure and PIDPressure True give `node.kubernetes.io/memory-pressure`,
  `disk-pressure`, `pid-pressure` (NoSchedule). Taints whose condition cleared are removed.
  Pods are not evicted (no taint-eviction controller yet).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.api.meta import now_rfc3339
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer, resource_path

__all__ = ["NodeLifecycleController", "desired_taints", "unknown_conditions"]

log = logging.getLogger("ephemera.controllers.nodelifecycle")
# The line logged when a node is marked Unknown (`bench.scale` counts them in the log).
NO_HEARTBEAT_LOG = "node %s: no heartbeat for %.0fs; marking it unknown"

NODE_LEASE_NAMESPACE = "kube-node-lease"
DEFAULT_GRACE_PERIOD = 50.0
DEFAULT_MONITOR_PERIOD = 5.0
MONITORED_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."
NEVER_REASON = "NodeStatusNeverUpdated"
NEVER_MESSAGE = "Kubelet never posted node status."
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
PRESSURE_TAINTS = {"MemoryPressure": "node.kubernetes.io/memory-pressure",
                   "DiskPressure": "node.kubernetes.io/disk-pressure",
                   "PIDPressure": "node.kubernetes.io/pid-pressure"}
MANAGED_TAINT_KEYS = frozenset({TAINT_NOT_READY, TAINT_UNREACHABLE, *PRESSURE_TAINTS.values()})

Obj = dict[str, Any]


def _conditions(node: Mapping[str, Any]) -> list[Obj]:
    return [c for c in (node.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]


def _condition(node: Mapping[str, Any], kind: str) -> Obj | None:
    for c in _conditions(node):
        if c.get("type") == kind:
            return c
    return None


def unknown_conditions(node: Mapping[str, Any], now: str) -> list[Obj] | None:
    """The node's conditions with the monitored ones set Unknown; None when they already
    are."""
    result = [dict(c) for c in _conditions(node)]
    changed = False
    for kind in MONITORED_CONDITIONS:
        current = next((c for c in result if c.get("type") == kind), None)
        if current is None:
            result.append({"type": kind, "status": "Unknown", "reason": NEVER_REASON,
                           "message": NEVER_MESSAGE, "lastHeartbeatTime": now,
                           "lastTransitionTime": now})
            changed = True
        elif current.get("status") != "Unknown":
            current.update({"status": "Unknown", "reason": UNKNOWN_REASON,
                            "message": UNKNOWN_MESSAGE, "lastTransitionTime": now})
            changed = True
    return result if changed else None


def desired_taints(node: Mapping[str, Any], now: str) -> list[Obj]:
    """The node's taints: the ones this controller does not manage, plus the ones its
    conditions call for (keeping `timeAdded` of a taint that stays)."""
    current = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
    keep = [t for t in current if t.get("key") not in MANAGED_TAINT_KEYS]
    wanted: list[tuple[str, str]] = []
    ready = _condition(node, "Ready")
    status = (ready or {}).get("status")
    if status == "False":
        wanted += [(TAINT_NOT_READY, "NoSchedule"), (TAINT_NOT_READY, "NoExecute")]
    elif status == "Unknown":
        wanted += [(TAINT_UNREACHABLE, "NoSchedule"), (TAINT_UNREACHABLE, "NoExecute")]
    for kind, key in PRESSURE_TAINTS.items():
        cond = _condition(node, kind)
        if cond is not None and cond.get("status") == "True":
            wanted.append((key, "NoSchedule"))
    existing = {(t.get("key"), t.get("effect")): t for t in current}
    for key, effect in wanted:
        taint = existing.get((key, effect))
        if taint is None:
            taint = {"key": key, "effect": effect}
            if effect == "NoExecute":
                taint["timeAdded"] = now
        keep.append(taint)
    return keep


class NodeLifecycleController:
    """Marks nodes whose heartbeats stopped as unknown and keeps condition taints; `run()`
    until cancelled."""

    def __init__(self, api: ApiClient, *, grace_period: float = DEFAULT_GRACE_PERIOD,
                 monitor_period: float = DEFAULT_MONITOR_PERIOD) -> None:
        self.api = api
        self.grace_period = grace_period
        self.monitor_period = monitor_period
        self.nodes = Informer(api, resource_path("nodes"), name="nodes")
        self.leases = Informer(api, resource_path("leases", NODE_LEASE_NAMESPACE,
                                                  group="coordination.k8s.io"),
                               name="node leases")
        self.recorder = EventRecorder(api, "node-controller")
        # node name -> (the heartbeat last seen, local monotonic time it was seen)
        self._probes: dict[str, tuple[str, float]] = {}

    def _heartbeat(self, name: str, node: Mapping[str, Any]) -> str:
        lease = self.leases.get(f"{NODE_LEASE_NAMESPACE}/{name}")
        renew = str(((lease or {}).get("spec") or {}).get("renewTime") or "")
        ready = _condition(node, "Ready") or {}
        return f"{renew}|{ready.get('lastHeartbeatTime') or ''}"

    def expired(self, name: str, node: Mapping[str, Any], now: float) -> bool:
        beat = self._heartbeat(name, node)
        seen = self._probes.get(name)
        if seen is None or seen[0] != beat:
            self._probes[name] = (beat, now)
            return False
        return now - seen[1] > self.grace_period

    async def monitor_once(self) -> None:
        now = time.monotonic()
        stamp = now_rfc3339()
        names = set()
        for node in self.nodes.list():
            name = str((node.get("metadata") or {}).get("name") or "")
            names.add(name)
            try:
                if self.expired(name, node, now):
                    conditions = unknown_conditions(node, stamp)
                    if conditions is not None:
                        log.info(NO_HEARTBEAT_LOG, name, self.grace_period)
                        node = await self.api.patch(
                            resource_path("nodes", name=name, subresource="status"),
                            {"status": {"conditions": conditions}}, patch_type="merge")
                        await self.recorder.record(
                            {"kind": "Node", "apiVersion": "v1",
                             "metadata": {"name": name, "uid": name}}, "Normal",
                            "NodeNotReady", f"Node {name} status is now: NodeNotReady")
                taints = desired_taints(node, stamp)
                if taints != [t for t in (node.get("spec") or {}).get("taints") or []]:
                    await self.api.patch(resource_path("nodes", name=name),
                                         {"spec": {"taints": taints or None}},
                                         patch_type="merge")
            except (StatusError, ApiUnavailable) as err:
                log.warning("node %s: %s", name, getattr(err, "message", err))
        for gone in set(self._probes) - names:
            del self._probes[gone]

    async def run(self) -> None:
        tasks = [asyncio.create_task(self.nodes.run(), name="nodes-informer"),
                 asyncio.create_task(self.leases.run(), name="leases-informer")]
        try:
            await self.nodes.wait_synced()
            await self.leases.wait_synced()
            while True:
                try:
                    await self.monitor_once()
                except Exception:
                    log.exception("node lifecycle: monitoring failed")
                await asyncio.sleep(self.monitor_period)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

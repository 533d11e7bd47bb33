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
  never posted: `NodeStatusNeverUpdated`, `Kubelet never posted node status.`).
- Events, as upstream's: a node seen for the first time (at this controller's start, every
  node) gets `RegisteredNode` `Node NAME event: Registered Node NAME in Controller`, a node
  gone `RemovingNode` `Node NAME event: Removing Node NAME from Controller`; they and
  `NodeNotReady` name the Node by its uid (the kubelet's name it by its name; `kubectl
  describe node` looks for both). Once per node per controller start, none at steady state.
- Pods, as upstream's `MarkPodsNotReady`: when a node's Ready goes from True to anything else
  in a monitor pass, a `NodeNotReady` event `Node NAME status is now: NodeNotReady` is
  recorded and every pod assigned to it (the pod informer's index by node, no scan of all
  pods) whose Ready condition is not already False gets it `status: False` (reason and message
  kept, `lastTransitionTime` now) through `pods/status`, with a Warning `NodeNotReady` event
  `Node is not ready` on the pod; a pod without a Ready condition is left alone. A pass that
  could not write them all tries again at the next pass while the node is not Ready. A pod
  assigned later to a node that is not Ready is marked likewise (upstream's `processPod`).
  The EndpointSlice controller follows the pods' Ready condition.
- Taints, as upstream's NoSchedule and NoExecute passes: Ready False gives
  `node.kubernetes.io/not-ready`, Ready Unknown `node.kubernetes.io/unreachable` (each with
  effects NoSchedule and NoExecute, the latter with `timeAdded`); MemoryPressure,
  DiskPressure and PIDPressure True give `node.kubernetes.io/memory-pressure`,
  `disk-pressure`, `pid-pressure` (NoSchedule); `spec.unschedulable` (`kubectl cordon`)
  gives `node.kubernetes.io/unschedulable` (NoSchedule), as upstream's TaintNodeByCondition.
  Taints whose condition cleared (or an uncordoned node's) are removed. A taint added
  carries `timeAdded`, as upstream's `SwapNodeControllerTaint` stamps every taint it adds.
  The NoSchedule taints follow a node's changes at once (the node informer's updates, as
  upstream's `doNoScheduleTaintingPass`), not only at the next monitor pass: a node whose
  taints are already right costs a comparison in memory, no request.
  The taint eviction controller (`ephemera.controllers.tainteviction`) deletes the pods
  that do not tolerate the NoExecute taints (by default after 300 s, the
  DefaultTolerationSeconds admission plugin's tolerations).
- Full disruption, as upstream's "master disruption mode" when every zone is fully
  disrupted: when no node is Ready (nodes labelled `node.kubernetes.io/exclude-disruption`
  not counted), the controller assumes it, not every node, is cut off: it removes the
  `not-ready` and `unreachable` NoExecute taints from every node and adds none, so no pod is
  evicted (pods are still marked not ready; the NoSchedule taints stay). Once a node is
  Ready again, every node's heartbeat counts from then (a fresh grace period) and the
  NoExecute taints come back on the nodes still not Ready. Not implemented: upstream's
  zones otherwise, and its rate limits on NoExecute tainting (0.1 nodes a second, less in a
  partially disrupted zone): ephemera taints a node as soon as its Ready condition leaves
  True.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.api.meta import now_rfc3339
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer, resource_path
from ephemera.controllers.objects import queue_key
from ephemera.controllers.podsbynode import node_name_of, pods_by_node
from ephemera.controllers.runner import Retry, worker
from ephemera.controllers.workqueue import WorkQueue

__all__ = ["NodeLifecycleController", "desired_taints", "fully_disrupted",
           "no_schedule_taints_differ", "not_ready_conditions", "unknown_conditions"]

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
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
PRESSURE_TAINTS = {"MemoryPressure": "node.kubernetes.io/memory-pressure",
                   "DiskPressure": "node.kubernetes.io/disk-pressure",
                   "PIDPressure": "node.kubernetes.io/pid-pressure"}
REGISTERED_NODE = "RegisteredNode"
EVENTS_AT_ONCE = 16  # node events posted at once (a pass after a start has one per node)
REMOVING_NODE = "RemovingNode"
EXCLUDE_DISRUPTION_LABEL = "node.kubernetes.io/exclude-disruption"
MANAGED_TAINT_KEYS = frozenset({TAINT_NOT_READY, TAINT_UNREACHABLE, TAINT_UNSCHEDULABLE,
                                *PRESSURE_TAINTS.values()})

Obj = dict[str, Any]


def _conditions(node: Mapping[str, Any]) -> list[Obj]:
    return [c for c in (node.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]


def _condition(node: Mapping[str, Any], kind: str) -> Obj | None:
    for c in _conditions(node):
        if c.get("type") == kind:
            return c
    return None


def node_ref(node: Mapping[str, Any]) -> Obj:
    """The Node as upstream's node controller names it in events (its uid)."""
    md = node.get("metadata") or {}
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": md.get("name") or "", "uid": md.get("uid") or ""}}


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


def _ready_status(node: Mapping[str, Any] | None) -> str:
    return str(((_condition(node, "Ready") if node is not None else None) or {})
               .get("status") or "")


def not_ready_conditions(pod: Mapping[str, Any], node_name: str, now: str) -> list[Obj] | None:
    """upstream's `MarkPodsNotReady` for one pod: its conditions with Ready set False
    (`lastTransitionTime` now, reason and message as they were); None when the pod is not on
    `node_name`, has no Ready condition, or its Ready is False already."""
    if node_name_of(pod) != node_name:
        return None
    conditions = [dict(c) for c in (pod.get("status") or {}).get("conditions") or []
                  if isinstance(c, dict)]
    for cond in conditions:
        if cond.get("type") != "Ready":
            continue
        if cond.get("status") == "False":
            return None
        cond.update({"status": "False", "lastTransitionTime": now})
        return conditions
    return None


def fully_disrupted(nodes: Iterable[Mapping[str, Any]]) -> bool | None:
    """upstream's `handleDisruption` over all zones: whether no node is Ready (all zones
    fully disrupted), counting only nodes without the `node.kubernetes.io/exclude-disruption`
    label; None when no node counts (the state stays as it was)."""
    counted = [n for n in nodes
               if EXCLUDE_DISRUPTION_LABEL not in ((n.get("metadata") or {}).get("labels") or {})]
    if not counted:
        return None
    return not any(_ready_status(n) == "True" for n in counted)


def desired_taints(node: Mapping[str, Any], now: str, *, no_execute: bool = True) -> list[Obj]:
    """The node's taints: the ones this controller does not manage, plus the ones its
    conditions and `spec.unschedulable` call for (keeping `timeAdded` of a taint that stays,
    `now` on one added); without `no_execute` (full disruption) no `not-ready` or
    `unreachable` NoExecute taint."""
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
    if (node.get("spec") or {}).get("unschedulable"):
        wanted.append((TAINT_UNSCHEDULABLE, "NoSchedule"))
    existing = {(t.get("key"), t.get("effect")): t for t in current}
    for key, effect in wanted:
        if effect == "NoExecute" and not no_execute:
            continue
        taint = existing.get((key, effect))
        if taint is None:
            taint = {"key": key, "effect": effect, "timeAdded": now}
        keep.append(taint)
    return keep


def _no_schedule_keys(taints: Iterable[Mapping[str, Any]]) -> set[str]:
    return {str(t.get("key")) for t in taints
            if t.get("effect") == "NoSchedule" and t.get("key") in MANAGED_TAINT_KEYS}


def no_schedule_taints_differ(node: Mapping[str, Any]) -> bool:
    """Whether the managed NoSchedule taints of the node differ from those `desired_taints`
    calls for (compared in memory: the common case, taints right, costs no request)."""
    current = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
    return _no_schedule_keys(current) != _no_schedule_keys(desired_taints(node, ""))


class NodeLifecycleController:
    """Marks nodes whose heartbeats stopped as unknown and keeps condition taints; `run()`
    until cancelled."""

    def __init__(self, api: ApiClient, *, grace_period: float = DEFAULT_GRACE_PERIOD,
                 monitor_period: float = DEFAULT_MONITOR_PERIOD, pods: Informer | None = None,
                 nodes: Informer | None = None) -> None:
        """`pods`, `nodes`: informers shared with other controllers (run by this one too),
        else its own."""
        self.api = api
        self.grace_period = grace_period
        self.monitor_period = monitor_period
        # (an empty informer is falsy: `is None`, not `or`)
        self.nodes = (nodes if nodes is not None
                      else Informer(api, resource_path("nodes"), name="nodes"))
        self.pods = pods if pods is not None else Informer(api, resource_path("pods"),
                                                           name="pods")
        self.pods_by_node = pods_by_node(self.pods)
        self.pods.add_handler(on_add=lambda pod: self._pod_updated(None, pod),
                              on_update=self._pod_updated)
        # Pods newly assigned to a node, to mark not ready if their node is not.
        self.pod_queue: WorkQueue[str] = WorkQueue()
        # Nodes whose pods could not all be marked not ready (upstream's `nodesToRetry`).
        self._retry: set[str] = set()
        # No node Ready (`fully_disrupted`): no NoExecute taints, so no evictions.
        self.full_disruption = False
        self.leases = Informer(api, resource_path("leases", NODE_LEASE_NAMESPACE,
                                                  group="coordination.k8s.io"),
                               name="node leases")
        # Nodes whose NoSchedule taints are to be written now, not at the next pass.
        self.node_queue: WorkQueue[str] = WorkQueue()
        self.nodes.add_handler(on_add=self._node_updated,
                               on_update=lambda _old, new: self._node_updated(new))
        self.recorder = EventRecorder(api, "node-controller")
        # node name -> (the heartbeat last seen, local monotonic time it was seen)
        self._probes: dict[str, tuple[str, float]] = {}
        # The nodes seen by a pass, by name (upstream's `knownNodeSet`).
        self._known: dict[str, Mapping[str, Any]] = {}

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
        nodes: list[Mapping[str, Any]] = []
        events: list[tuple[Mapping[str, Any], str, str]] = []  # RegisteredNode, RemovingNode
        for cached in self.nodes.list():
            name = str((cached.get("metadata") or {}).get("name") or "")
            names.add(name)
            if name not in self._known:
                log.info("node %s: observed a new Node", name)
                events.append((cached, REGISTERED_NODE, f"Registered Node {name} in Controller"))
            self._known[name] = cached
            node: Mapping[str, Any] = cached
            try:
                node = await self._update_health(name, cached, now, stamp)
            except (StatusError, ApiUnavailable) as err:
                log.warning("node %s: %s", name, getattr(err, "message", err))
            nodes.append(node)
        self._handle_disruption(nodes, now)
        for node in nodes:
            await self.sync_taints(node, stamp)
        for gone in set(self._known) - names:
            log.info("node %s: observed a Node deletion", gone)
            events.append((self._known.pop(gone), REMOVING_NODE,
                           f"Removing Node {gone} from Controller"))
        for start in range(0, len(events), EVENTS_AT_ONCE):
            await asyncio.gather(*(self._node_event(*e)
                                   for e in events[start:start + EVENTS_AT_ONCE]))
        for gone in set(self._probes) - names:
            del self._probes[gone]
        self._retry &= names

    async def sync_taints(self, node: Mapping[str, Any], stamp: str) -> None:
        """Write the node's `desired_taints` when they differ from its taints."""
        name = str((node.get("metadata") or {}).get("name") or "")
        taints = desired_taints(node, stamp, no_execute=not self.full_disruption)
        if taints == [t for t in (node.get("spec") or {}).get("taints") or []]:
            return
        try:
            await self.api.patch(resource_path("nodes", name=name),
                                 {"spec": {"taints": taints or None}}, patch_type="merge")
        except (StatusError, ApiUnavailable) as err:
            log.warning("node %s: %s", name, getattr(err, "message", err))

    async def _node_event(self, node: Mapping[str, Any], reason: str, event: str) -> None:
        """upstream's `RecordNodeEvent`."""
        name = str((node.get("metadata") or {}).get("name") or "")
        await self.recorder.record(node_ref(node), "Normal", reason,
                                   f"Node {name} event: {event}")

    def _node_updated(self, node: Mapping[str, Any]) -> None:
        """Queue a node seen by a pass whose NoSchedule taints are not what its conditions
        and `spec.unschedulable` call for (upstream's node update queue)."""
        name = str((node.get("metadata") or {}).get("name") or "")
        if name in self._probes and no_schedule_taints_differ(node):
            self.node_queue.add(name)

    async def sync_node_taints(self, name: str) -> None:
        """A node queued by `_node_updated`: its NoSchedule taints made what its conditions
        and `spec.unschedulable` call for (a failure is retried, rate-limited, by the
        queue's worker: `runner.worker`)."""
        node = self.nodes.get(name)
        if node is not None:
            await self.sync_taints(node, now_rfc3339())

    async def _update_health(self, name: str, node: Mapping[str, Any], now: float,
                             stamp: str) -> Mapping[str, Any]:
        """Mark the node Unknown when its heartbeat expired, and its pods not ready when
        its Ready condition left True; the node as it is then."""
        observed = _ready_status(node)
        if self.expired(name, node, now):
            conditions = unknown_conditions(node, stamp)
            if conditions is not None:
                log.info(NO_HEARTBEAT_LOG, name, self.grace_period)
                node = await self.api.patch(
                    resource_path("nodes", name=name, subresource="status"),
                    {"status": {"conditions": conditions}}, patch_type="merge")
        current = _ready_status(node)
        if not current or current == "True" or (observed != "True"
                                                and name not in self._retry):
            self._retry.discard(name)
            return node
        if observed == "True":  # the event once, when the status changed
            await self.recorder.record(node_ref(node), "Normal", "NodeNotReady",
                                       f"Node {name} status is now: NodeNotReady")
        if await self.mark_pods_not_ready(self.pods_by_node.get(name), name):
            self._retry.discard(name)
        else:
            log.info("node %s: could not mark all its pods not ready; retrying at the next "
                     "pass", name)
            self._retry.add(name)
        return node

    def _handle_disruption(self, nodes: list[Mapping[str, Any]], now: float) -> None:
        """Enter or leave full disruption (upstream's master disruption mode) as
        `fully_disrupted` says; on leaving it every node's heartbeat counts from now, as
        upstream resets its probe timestamps."""
        disrupted = fully_disrupted(nodes)
        if disrupted is None or disrupted == self.full_disruption:
            return
        self.full_disruption = disrupted
        if disrupted:
            log.info("Controller detected that all Nodes are not-Ready. Entering master "
                     "disruption mode")
            return
        log.info("Controller detected that some Nodes are Ready. Exiting master disruption "
                 "mode")
        for name, (beat, _) in list(self._probes.items()):
            self._probes[name] = (beat, now)

    async def mark_pods_not_ready(self, pods: list[Mapping[str, Any]], node_name: str) -> bool:
        """Set the Ready condition of `pods` on `node_name` False (`not_ready_conditions`),
        all at once; whether every write succeeded (a pod gone counts as done)."""
        stamp = now_rfc3339()
        marked = [(pod, conds) for pod in pods
                  if (conds := not_ready_conditions(pod, node_name, stamp)) is not None]
        if not marked:
            return True
        log.info("node %s: marking %d pods not ready", node_name, len(marked))
        results = await asyncio.gather(*(self._mark_pod(pod, conds) for pod, conds in marked))
        return all(results)

    async def _mark_pod(self, pod: Mapping[str, Any], conditions: list[Obj]) -> bool:
        md = pod.get("metadata") or {}
        body = {**pod, "status": {**(pod.get("status") or {}), "conditions": conditions}}
        ok = True
        try:
            await self.api.update(resource_path("pods", str(md.get("namespace") or ""),
                                                str(md.get("name") or ""),
                                                subresource="status"), body)
        except (StatusError, ApiUnavailable) as err:
            if isinstance(err, StatusError) and err.code == 404:
                return True  # deleted meanwhile: nothing left to do
            log.info("pod %s: could not mark it not ready: %s", queue_key(pod),
                     getattr(err, "message", err))
            ok = False
        # As upstream, the event follows the write (a pod gone has none).
        await self.recorder.record(pod, "Warning", "NodeNotReady", "Node is not ready",
                                   kind="Pod", api_version="v1")
        return ok

    def _pod_updated(self, old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> None:
        node = node_name_of(new)
        if node and (old is None or node_name_of(old) != node) and self._not_ready(node):
            self.pod_queue.add(queue_key(new))  # checked here too: most pods need nothing

    def _not_ready(self, node_name: str) -> bool:
        """Whether this controller has seen the node in a pass and its Ready condition is
        there and not True."""
        if node_name not in self._probes:
            return False
        status = _ready_status(self.nodes.get(node_name))
        return bool(status) and status != "True"

    async def sync_pod(self, key: str) -> None:
        """A pod newly assigned to a node: marked not ready if its node is not Ready (once
        this controller has seen the node in a pass, as upstream's `processPod`)."""
        pod = self.pods.get(key)
        if pod is None:
            return
        node_name = node_name_of(pod)
        if self._not_ready(node_name) and not await self.mark_pods_not_ready([pod], node_name):
            raise Retry("could not mark it not ready")

    async def run(self) -> None:
        tasks = [asyncio.create_task(self.nodes.run(), name="nodes-informer"),
                 asyncio.create_task(self.leases.run(), name="leases-informer"),
                 asyncio.create_task(self.pods.run(), name="pods-informer")]
        try:
            await self.nodes.wait_synced()
            await self.leases.wait_synced()
            await self.pods.wait_synced()
            tasks.append(asyncio.create_task(
                worker(self.pod_queue, self.sync_pod, what="pod", log=log),
                name="nodelifecycle-pods"))
            tasks.append(asyncio.create_task(
                worker(self.node_queue, self.sync_node_taints, what="node", log=log),
                name="nodelifecycle-nodes"))
            while True:
                try:
                    await self.monitor_once()
                except Exception:
                    log.exception("node lifecycle: monitoring failed")
                await asyncio.sleep(self.monitor_period)
        finally:
            self.pod_queue.close()
            self.node_queue.close()
            await cancel_and_wait(*tasks)

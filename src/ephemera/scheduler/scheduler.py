"""`Scheduler`: the component that assigns pending pods to nodes through the API.

It keeps two informers (client/): the nodes, and the pods that are not finished
(`status.phase!=Succeeded,status.phase!=Failed`). Pods bound to a node are counted on it in
the cache; pods without `spec.nodeName`, with `schedulerName` `default-scheduler`, no
`deletionTimestamp` and no `schedulingGates` go to the queue. As upstream's, a serial
scheduling cycle (one pod at a time) and concurrent binding cycles:

1. `schedule_pod` filters and scores the nodes (algorithm.py, plugins.py) against the cache:
   as upstream's, from where the previous pod's search stopped, until enough feasible nodes
   are found (all of them below 100 nodes, 42% of 1,000), one of the best at random;
2. on success the pod is assumed on the node (cache.py), so the next pod already sees the
   slot taken, and its binding cycle runs as its own task while the loop goes on with the
   next pod: `POST pods/NAME/binding`, then a `Normal Scheduled` event says
   `Successfully assigned ns/name to node`. At most `max_bindings_in_flight` bindings are
   under way at once (upstream has no such cap; its client's QPS limit bounds them): when
   all are taken, the loop waits for one to end before it picks the next pod. A slot is
   the binding POST's alone: it is given back when the POST is answered, and the event is
   written after that, as upstream's recorder writes events beside the binding cycles
   rather than in them (held for both round trips, the slots capped the bindings at 16 per
   two round trips, which a busy apiserver made long). A binding that fails forgets the
   assumed pod and puts it back with back-off; one whose pod was deleted meanwhile, or
   already bound, just ends;
3. when nothing fits, the pod's `PodScheduled` condition becomes `False`/`Unschedulable` with
   the FitError message (a strategic merge PATCH of `pods/NAME/status`, skipped when already
   so), a `Warning FailedScheduling` event repeats the message, and the pod waits in the queue
   until a node is added or changes, a pod leaves a node, or 5 minutes pass (queue.py).

Each decision is one INFO log line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api import meta
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer, resource_path
from ephemera.client.informer import object_key
from ephemera.scheduler.algorithm import ScheduleResult, schedule_pod, truncate_message
from ephemera.scheduler.cache import SchedulerCache, pod_uid
from ephemera.scheduler.nodeinfo import Gates, pod_fit_request, request_inputs
from ephemera.scheduler.plugins import PodInfo, missing_features
from ephemera.scheduler.queue import SchedulingQueue

__all__ = ["DEFAULT_SCHEDULER_NAME", "Scheduler", "is_pending_for", "run_scheduler"]

log = logging.getLogger("ephemera.scheduler")

DEFAULT_SCHEDULER_NAME = "default-scheduler"
# Pods that have not finished: the pods the scheduler counts or schedules.
ACTIVE_PODS_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
# How often unschedulable pods are checked for having waited too long.
FLUSH_INTERVAL = 30.0
# Binding POSTs under way at once (each cycle's event is written after its slot is free).
MAX_BINDINGS_IN_FLIGHT = 16


def _md(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    md = obj.get("metadata")
    return md if isinstance(md, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _assigned(pod: Mapping[str, Any]) -> bool:
    return bool(_spec(pod).get("nodeName"))


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_pending_for(pod: Mapping[str, Any], scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> bool:
    """Whether `scheduler_name` should place `pod`: not bound, not finished, not being
    deleted, not gated, and its `schedulerName` (default `default-scheduler`)."""
    spec = _spec(pod)
    return (not spec.get("nodeName") and not _finished(pod)
            and not _md(pod).get("deletionTimestamp")
            and (spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME) == scheduler_name
            and not spec.get("schedulingGates"))


def _priority(pod: Mapping[str, Any]) -> int:
    value = _spec(pod).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _what_scheduling_reads(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """The parts of a pending pod whose change can change its scheduling (not its status)."""
    md = _md(pod)
    return (pod.get("spec"), md.get("labels"), md.get("deletionTimestamp"), md.get("uid"))


def _node_facts(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """The parts of a node the filters and scores read (not heartbeats)."""
    status = node.get("status") or {}
    conditions = sorted((str(c.get("type")), str(c.get("status")))
                        for c in status.get("conditions") or [] if isinstance(c, Mapping))
    return (_md(node).get("labels"), node.get("spec"), status.get("allocatable"), conditions,
            status.get("declaredFeatures"))


class _Slot:
    """One binding cycle's hold on a binding slot, given back once however the cycle goes."""

    __slots__ = ("_held", "_slots")

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots = slots
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._slots.release()


class Scheduler:
    def __init__(self, api: ApiClient, gates: Gates = None, *,
                 scheduler_name: str = DEFAULT_SCHEDULER_NAME,
                 queue: SchedulingQueue | None = None,
                 events: EventRecorder | None = None,
                 max_bindings_in_flight: int = MAX_BINDINGS_IN_FLIGHT) -> None:
        if max_bindings_in_flight < 1:
            raise ValueError("max_bindings_in_flight must be at least 1")
        self.api = api
        self.gates = gates
        self.scheduler_name = scheduler_name
        self.cache = SchedulerCache(gates)
        # upstream's nextStartNodeIndex: where the next pod's search of the nodes begins.
        self._next_start_node_index = 0
        self.queue = queue or SchedulingQueue()
        self.events = events or EventRecorder(api, scheduler_name)
        self._binding_slots = asyncio.Semaphore(max_bindings_in_flight)
        self._bindings: set[asyncio.Task[None]] = set()
        # While `run` runs, binding tasks belong to its task group: one that fails
        # unexpectedly ends the scheduler, as a failing `_bind` did when it was awaited.
        self._task_group: asyncio.TaskGroup | None = None
        self.pods = Informer(api, resource_path("pods"), field_selector=ACTIVE_PODS_SELECTOR,
                             name="pods")
        self.nodes = Informer(api, resource_path("nodes"), name="nodes")
        self.nodes.add_handler(on_add=self._node_added, on_update=self._node_updated,
                               on_delete=self._node_deleted)
        self.pods.add_handler(on_add=self._pod_added, on_update=self._pod_updated,
                              on_delete=self._pod_deleted)

    # -- the loop -------------------------------------------------------------------------

    async def run(self, leading: asyncio.Event | None = None) -> None:
        """Watch nodes and pods and schedule until cancelled; with `leading`, the informers
        fill the cache at once but scheduling waits until it is set (as upstream starts its
        informers before the leader election, so a new leader starts warm)."""
        async with asyncio.TaskGroup() as tasks:
            self._task_group = tasks
            tasks.create_task(self.nodes.run(), name="nodes-informer")
            tasks.create_task(self.pods.run(), name="pods-informer")
            tasks.create_task(self._flush_periodically(), name="flush-unschedulable")
            await self.nodes.wait_synced()
            await self.pods.wait_synced()
            if leading is not None:
                await leading.wait()
            log.info("scheduler %s started: %d nodes, %d pods waiting", self.scheduler_name,
                     len(self.nodes), len(self.queue.active))
            try:
                while True:
                    await self.schedule_one()
            finally:
                self._task_group = None

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(min(FLUSH_INTERVAL, self.queue.max_unschedulable / 2))
            self.queue.flush_stale()

    @property
    def bindings_in_flight(self) -> int:
        """Binding cycles not yet ended (a cycle ends after its event is written)."""
        return len(self._bindings)

    async def wait_for_bindings(self) -> None:
        """Wait until every binding cycle started so far has ended."""
        while self._bindings:
            await asyncio.wait(set(self._bindings))

    async def schedule_one(self) -> None:
        """The scheduling cycle of one pending pod: pick its node and start its binding
        cycle (or say why it cannot be placed). Waits first for a free binding slot, which
        the binding cycle keeps until it ends."""
        await self._binding_slots.acquire()
        binding = False
        try:
            binding = await self._scheduling_cycle()
        finally:
            if not binding:
                self._binding_slots.release()

    async def _scheduling_cycle(self) -> bool:
        """Whether a binding cycle was started (it then owns the slot taken for it)."""
        key = await self.queue.pop()
        pod = self.pods.get(key)
        if pod is None or not is_pending_for(pod, self.scheduler_name) \
                or self.cache.is_assumed(pod):
            self.queue.remove(key)
            return False
        nodes = self.cache.node_infos()
        result = schedule_pod(pod, nodes, self.gates, start=self._next_start_node_index)
        if nodes:
            self._next_start_node_index = (self._next_start_node_index
                                           + result.processed) % len(nodes)
        if result.node_name is None:
            self.queue.unschedulable(key)
            self._log_unschedulable(pod, result)
            await self._record_unschedulable(pod, result.message)
            return False
        self.cache.assume(pod, str(result.node_name))
        slot = _Slot(self._binding_slots)
        coro = self._binding_cycle(key, pod, result, slot)
        name = f"bind-{key}"
        task = (self._task_group.create_task(coro, name=name) if self._task_group is not None
                else asyncio.create_task(coro, name=name))
        self._bindings.add(task)
        task.add_done_callback(lambda done: self._binding_ended(done, slot))
        return True

    def _binding_ended(self, task: asyncio.Task[None], slot: _Slot) -> None:
        self._bindings.discard(task)
        slot.release()  # a cycle cancelled or failed before its POST was answered
        if self._task_group is None and not task.cancelled() and task.exception() is not None:
            log.error("a binding cycle failed", exc_info=task.exception())

    # -- outcomes -------------------------------------------------------------------------

    def _still_same_pod(self, key: str, pod: Mapping[str, Any]) -> bool:
        """Whether `key` in the queue still means `pod` (not a pod of the same name created
        after it was deleted while its binding was under way)."""
        current = self.pods.get(key)
        return current is None or pod_uid(current) == pod_uid(pod)

    async def _binding_cycle(self, key: str, pod: Mapping[str, Any],
                             result: ScheduleResult, slot: _Slot) -> None:
        """Bind the assumed `pod` to its node; on failure forget it and requeue it. `slot`
        is given back once the POST is answered, before the event is written."""
        node = str(result.node_name)
        md = _md(pod)
        namespace, name = str(md.get("namespace") or ""), str(md.get("name") or "")
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": name, "namespace": namespace, "uid": md.get("uid")},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            try:
                await self.api.create(resource_path("pods", namespace, name, "binding"),
                                      binding)
            finally:
                slot.release()
        except StatusError as err:
            self.cache.forget(pod)
            self.queue.move_all_unschedulable()
            same = self._still_same_pod(key, pod)
            if err.code == 404 or (err.code == 409 and "already assigned" in err.message):
                log.info("not binding %s/%s to %s: %s", namespace, name, node, err.message)
                if same:
                    self.queue.remove(key)
                return
            log.warning("binding %s/%s to %s failed: %s", namespace, name, node, err.message)
            if same:
                self.queue.retry_later(key)
            await self.events.record(pod, "Warning", "FailedScheduling",
                                     truncate_message(f"Binding rejected: {err.message}"),
                                     action="Scheduling", kind="Pod", api_version="v1")
            return
        except ApiUnavailable as err:
            self.cache.forget(pod)
            log.warning("binding %s/%s to %s failed: %s", namespace, name, node, err)
            if self._still_same_pod(key, pod):
                self.queue.retry_later(key)
            return
        if self._still_same_pod(key, pod):
            self.queue.done(key)
        log.info("scheduled %s/%s on %s (score %d; %d of %d nodes searched feasible, of %d)",
                 namespace, name, node, result.scores[node], result.feasible,
                 result.processed, result.num_nodes)
        await self.events.record(pod, "Normal", "Scheduled",
                                 f"Successfully assigned {namespace}/{name} to {node}",
                                 action="Binding", kind="Pod", api_version="v1")

    def _log_unschedulable(self, pod: Mapping[str, Any], result: ScheduleResult) -> None:
        md = _md(pod)
        detail = ""
        info = PodInfo.of(pod, self.gates)
        lacking = sorted({f for n in self.cache.node_infos() if n.name in result.statuses
                          and result.statuses[n.name].plugin == "NodeDeclaredFeatures"
                          for f in missing_features(info, n)})
        if lacking:
            detail = f" (undeclared node features: {', '.join(lacking)})"
        log.info("unschedulable %s/%s: %s%s", md.get("namespace"), md.get("name"),
                 result.message, detail)

    async def _record_unschedulable(self, pod: Mapping[str, Any], message: str) -> None:
        md = _md(pod)
        namespace, name = str(md.get("namespace") or ""), str(md.get("name") or "")
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if isinstance(c, Mapping)
                        and c.get("type") == "PodScheduled"), None)
        unchanged = current is not None and (current.get("status"), current.get("reason"),
                                             current.get("message")) == (
            "False", "Unschedulable", message)
        if not unchanged:
            since = current.get("lastTransitionTime") if current is not None and current.get(
                "status") == "False" else None
            condition: dict[str, Any] = {
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": message, "lastProbeTime": None,
                "lastTransitionTime": since or meta.now_rfc3339()}
            if isinstance(md.get("generation"), int):
                condition["observedGeneration"] = md["generation"]
            try:
                await self.api.patch(resource_path("pods", namespace, name, "status"),
                                     {"status": {"conditions": [condition]}},
                                     patch_type="strategic")
            except StatusError as err:
                if err.code == 404:
                    return
                log.warning("could not update the status of %s/%s: %s", namespace, name,
                            err.message)
            except ApiUnavailable as err:
                log.warning("could not update the status of %s/%s: %s", namespace, name, err)
        await self.events.record(pod, "Warning", "FailedScheduling", truncate_message(message),
                                 action="Scheduling", kind="Pod", api_version="v1")

    # -- informer handlers (synchronous, on the event loop) --------------------------------

    def _node_added(self, node: dict[str, Any]) -> None:
        self.cache.set_node(node)
        self.queue.move_all_unschedulable()

    def _node_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.cache.set_node(new)
        if _node_facts(old) != _node_facts(new):
            self.queue.move_all_unschedulable()

    def _node_deleted(self, node: dict[str, Any]) -> None:
        self.cache.remove_node(str(_md(node).get("name") or ""))

    def _pod_added(self, pod: dict[str, Any]) -> None:
        if _assigned(pod):
            self.cache.add_pod(pod)
        elif is_pending_for(pod, self.scheduler_name) and not self.cache.is_assumed(pod):
            self.queue.add(object_key(pod), _priority(pod))

    def _pod_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        key = object_key(new)
        if _assigned(new):
            self.queue.remove(key)
            was_counted = _assigned(old)
            self.cache.add_pod(new)
            # A resize may have freed room. (Equal request inputs mean equal requests:
            # most updates are status writes, and are not computed twice for nothing.)
            if was_counted and request_inputs(old) != request_inputs(new) \
                    and pod_fit_request(old, self.gates) != pod_fit_request(new, self.gates):
                self.queue.move_all_unschedulable()
            return
        if self.cache.is_assumed(new):
            return  # the binding is on its way
        if not is_pending_for(new, self.scheduler_name):
            self.queue.remove(key)
        elif key not in self.queue or _what_scheduling_reads(old) != _what_scheduling_reads(new):
            self.queue.add(key, _priority(new))

    def _pod_deleted(self, pod: dict[str, Any]) -> None:
        self.queue.remove(object_key(pod))
        if _assigned(pod) or self.cache.is_assumed(pod):
            self.cache.remove_pod(pod)
            self.queue.move_all_unschedulable()


async def run_scheduler(api: ApiClient, gates: Gates = None,
                        stop: asyncio.Event | None = None) -> None:
    """Run a `Scheduler` until `stop` is set (or forever)."""
    scheduler = Scheduler(api, gates)
    task = asyncio.create_task(scheduler.run(), name="scheduler")
    if stop is None:
        await task
        return
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    await cancel_and_wait(stopper)
    if task.done() and not task.cancelled():
        task.result()  # re-raises what ended the scheduler, if it failed
    await cancel_and_wait(task)

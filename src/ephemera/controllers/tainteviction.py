"""The taint eviction controller, as upstream's (`pkg/controller/tainteviction`, formerly the
NoExecuteTaintManager; `taint-eviction-controller` in kube-controller-manager): a pod on a
node with `NoExecute` taints is deleted when it does not tolerate them all, or once the
shortest `tolerationSeconds` among the tolerations it tolerates them with has passed.

- On the shared pod and node informers; pods are found by node through `PodsByNode` (no scan
  of all pods). A node is looked at when its NoExecute taints change (or it is added or
  deleted), a pod when it is added or deleted or its tolerations or node change.
- A pod's deletion time (`eviction_time`): now when a taint is not tolerated (upstream's
  `GetMatchingTolerations`: each taint by the first toleration that tolerates it); none
  when no toleration it uses has `tolerationSeconds` (tolerated forever, as DaemonSet pods
  tolerate `not-ready` and `unreachable`); else, for each taint, the taint's `timeAdded`
  (the time this controller first saw it when it has none, never later than now) plus the
  seconds of its toleration (0 or less: at once), and the earliest of these. Upstream counts
  from the moment its controller sees the taint, which is the same within a watch's delay,
  except that a restarted controller-manager starts counting again; counting from
  `timeAdded` does not.
- A deletion scheduled earlier stays; a later one replaces it. Scheduled deletions are
  cancelled when the node's NoExecute taints are gone, the pod comes to tolerate them
  forever, or the pod is deleted, with a `TaintManagerEviction` event
  `Cancelling deletion of Pod NS/NAME`.
- When due: a `TaintManagerEviction` event `Marking for deletion Pod NS/NAME`, then (up to
  5 tries, as upstream) the pod's `DisruptionTarget` condition set True (reason
  `DeletionByTaintManager`, message `Taint manager: deleting due to NoExecute taint`)
  through `pods/status` and the pod deleted (with its grace period: on a node whose kubelet
  is gone it stays Terminating, as upstream's). A pod deleted so is not scheduled again until
  its deletion is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.api.meta import now_rfc3339, parse_time
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer, resource_path
from ephemera.controllers.objects import queue_key
from ephemera.controllers.podsbynode import node_name_of, pods_by_node
from ephemera.controllers.runner import EventQueue, run_workers
from ephemera.controllers.workqueue import WorkQueue
from ephemera.pods.conditions import disruption_target, update_pod_condition
from ephemera.scheduler.plugins import Taint, tolerates

__all__ = ["TaintEvictionController", "eviction_time", "matching_tolerations",
           "no_execute_taints"]

log = logging.getLogger("ephemera.controllers.tainteviction")

COMPONENT = "taint-eviction-controller"
NO_EXECUTE = "NoExecute"
EVENT_REASON = "TaintManagerEviction"
DISRUPTION_REASON = "DeletionByTaintManager"
DISRUPTION_MESSAGE = "Taint manager: deleting due to NoExecute taint"
DELETE_TRIES = 5
RETRY_SLEEP = 0.01
WORKERS = 8  # upstream's UpdateWorkerSize

Obj = Mapping[str, Any]


def no_execute_taints(node: Obj | None) -> list[Obj]:
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    return [t for t in taints if isinstance(t, dict) and t.get("effect") == NO_EXECUTE]


def _taint(taint: Obj) -> Taint:
    return Taint(str(taint.get("key") or ""), str(taint.get("value") or ""),
                 str(taint.get("effect") or ""))


def matching_tolerations(taints: Sequence[Obj], tolerations: Sequence[Obj]
                         ) -> list[Obj] | None:
    """upstream's `GetMatchingTolerations`: for each taint the first toleration that
    tolerates it; None when one is not tolerated."""
    used = []
    for taint in taints:
        t = _taint(taint)
        found = next((tol for tol in tolerations if isinstance(tol, Mapping)
                      and tolerates(tol, t)), None)
        if found is None:
            return None
        used.append(found)
    return used


def eviction_time(taints: Sequence[Obj], tolerations: Sequence[Obj], now: float,
                  seen: Mapping[Taint, float] | None = None) -> float | None:
    """When a pod with `tolerations` on a node with NoExecute `taints` (not empty) is due for
    deletion, in seconds of `time.time()`: `now` when a taint is not tolerated, None when it
    tolerates them all forever. A taint counts from its `timeAdded`, else from when it was
    first seen (`seen`, by key, value and effect), else from `now`; never from later than
    `now`."""
    used = matching_tolerations(taints, tolerations)
    if used is None:
        return now
    due: float | None = None
    for taint, toleration in zip(taints, used, strict=True):
        seconds = toleration.get("tolerationSeconds")
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            continue  # forever
        added = parse_time(taint.get("timeAdded"))
        start = (added.timestamp() if added is not None
                 else (seen or {}).get(_taint(taint), now))
        when = min(start, now) + max(seconds, 0)
        due = when if due is None else min(due, when)
    return due


class TaintEvictionController:
    """Deletes pods from nodes with NoExecute taints they do not tolerate (long enough);
    `run()` until cancelled."""

    def __init__(self, api: ApiClient, pods: Informer, nodes: Informer, *,
                 clock: Any = time.time) -> None:
        self.api = api
        self.pods = pods
        self.nodes = nodes
        self.clock = clock
        self.pods_by_node = pods_by_node(pods)
        self.recorder = EventRecorder(api, COMPONENT)
        self.events = EventQueue(self.recorder, "Pod", "v1")
        self.queue: WorkQueue[str] = WorkQueue()
        # node -> its NoExecute taints (upstream's `taintedNodes`)
        self.tainted: dict[str, list[Obj]] = {}
        # node -> taint (key, value, effect) -> when this controller first saw it
        self._seen: dict[str, dict[Taint, float]] = {}
        # pod key -> when it is to be deleted (scheduled, not yet done)
        self.due: dict[str, float] = {}
        # pods deleted by this controller (upstream's finished workers)
        self.done: set[str] = set()
        pods.add_handler(on_add=lambda pod: self.pod_updated(None, pod),
                         on_update=self.pod_updated,
                         on_delete=lambda pod: self.pod_updated(pod, None))
        nodes.add_handler(on_add=lambda node: self.node_updated(None, node),
                          on_update=self.node_updated,
                          on_delete=lambda node: self.node_updated(node, None))

    # -- informer events (processed at once: they only change this controller's state) --

    def node_updated(self, old: Obj | None, new: Obj | None) -> None:
        if (old is not None and new is not None
                and no_execute_taints(old) == no_execute_taints(new)):
            return
        name = str(((new or old or {}).get("metadata") or {}).get("name") or "")
        node = self.nodes.get(name)
        if node is None:
            self.tainted.pop(name, None)
            self._seen.pop(name, None)
            return
        taints = no_execute_taints(node)
        now = self.clock()
        if taints:
            seen = self._seen.get(name, {})
            self._seen[name] = {tid: seen.get(tid, now) for tid in map(_taint, taints)}
            self.tainted[name] = taints
        else:
            self.tainted.pop(name, None)
            self._seen.pop(name, None)
        for pod in self.pods_by_node.get(name):
            if taints:
                self.process_pod(queue_key(pod), name, pod, taints, now)
            else:
                self.cancel(queue_key(pod))

    def pod_updated(self, old: Obj | None, new: Obj | None) -> None:
        if old is not None and new is not None and node_name_of(old) == node_name_of(new) \
                and _tolerations(old) == _tolerations(new):
            return
        key = queue_key(new if new is not None else old or {})
        pod = self.pods.get(key)
        if pod is None:
            self.cancel(key)
            return
        node = node_name_of(pod)
        taints = self.tainted.get(node) if node else None
        if taints:
            self.process_pod(key, node, pod, taints, self.clock())

    def process_pod(self, key: str, node: str, pod: Obj, taints: Sequence[Obj],
                    now: float) -> None:
        due = eviction_time(taints, _tolerations(pod), now, self._seen.get(node))
        if due is None:
            self.cancel(key)
            return
        if key in self.done:
            return
        scheduled = self.due.get(key)
        if scheduled is not None:
            if scheduled <= due:
                return
            self.cancel(key)
        self.due[key] = due
        self.queue.add_after(key, due - now)

    def cancel(self, key: str) -> None:
        """Cancel the pod's scheduled deletion (with upstream's event) and forget a done
        one."""
        self.done.discard(key)
        if self.due.pop(key, None) is not None:
            self._event(key, f"Cancelling deletion of Pod {key}")

    def _event(self, key: str, message: str) -> None:
        namespace, _, name = key.partition("/")
        pod = self.pods.get(key)
        md = (pod or {}).get("metadata") or {}
        ref = {"metadata": {"namespace": namespace, "name": name,
                            **({"uid": md["uid"]} if md.get("uid") else {})}}
        self.events.post(ref, "Normal", EVENT_REASON, message)

    # -- deletions -----------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        due = self.due.get(key)
        if due is None:
            return  # cancelled, or replaced by an earlier one already done
        now = self.clock()
        if due > now:
            self.queue.add_after(key, due - now)
            return
        del self.due[key]
        self.done.add(key)
        log.info("deleting pod %s", key)
        self._event(key, f"Marking for deletion Pod {key}")
        error: Exception | None = None
        for _ in range(DELETE_TRIES):
            try:
                await self._condition_and_delete(key)
                return
            except StatusError as err:
                if err.code == 404:
                    return
                error = err
            except ApiUnavailable as err:
                error = err
            await asyncio.sleep(RETRY_SLEEP)
        self.done.discard(key)  # as upstream's worker that failed: may be scheduled again
        log.warning("pod %s: could not delete it: %s", key, getattr(error, "message", error))

    async def _condition_and_delete(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        path = resource_path("pods", namespace, name)
        pod = await self.api.get(path)
        status = dict(pod.get("status") or {})
        wanted = disruption_target(DISRUPTION_REASON, DISRUPTION_MESSAGE)
        if update_pod_condition(status, wanted, now_rfc3339()):
            await self.api.update(resource_path("pods", namespace, name, subresource="status"),
                                  {**pod, "status": status})
        await self.api.delete(path)

    async def run(self) -> None:
        await run_workers(self.queue, self.sync, what="pod", log=log, workers=WORKERS,
                          runs=(self.pods, self.nodes), also=[self.events.run])


def _tolerations(pod: Obj) -> list[Obj]:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return [t for t in tolerations if isinstance(t, Mapping)]

"""Admission and hand-over of the pods bound to one node: what a kubelet does with a pod
between its informer and its pod worker. One rule in one place for the `Kubelet`
(`agent.py`) and each hollow node (`hollow.py`), so a pod is admitted, rejected or has its
`/dynamic` change allocated or refused the same way, with the same status and Events, on
both.

**Admission** (`PodAdmission.admit`): the eviction manager's rule first (no non-critical pod
under DiskPressure, no BestEffort one under MemoryPressure: `admit_under_pressure` over the
node conditions it is given), then the resource fit (`admit`): the pod count against
`pods`, then what the other pods plus this one need (`allocation.fit`: requests, emptyDir
sizeLimits, pod-level `ephemeral-storage`) against the node's allocatable. The other pods
are `AllocationManager.others`: the allocated ones, less those terminal in their worker's
view. A rejected pod gets `phase: Failed`, `reason: OutOf<resource>` (or the eviction
manager's `Evicted`) and upstream's message (`rejected_status`), and a Warning Event of that
reason; it is not looked at again until deleted.

**Hand-over** (`PodAdmission.handle`): an admitted pod's allocation is checkpointed (in a
thread, `AllocationManager.write_new`) before its worker gets it; a pod already in the
checkpoint (a restarted kubelet) is re-admitted without a new admission; later spec changes
go through `AllocationManager.request` (whole or not at all), the worker seeing only the
allocated spec with the rest `Unallocated`/`Pending`. An allocated change gets a Normal
`SuccessfulAllocation` Event naming what it adds and removes, a refused one a Warning
`FailedAllocation`.

What the owner adds is given as hooks: `on_rejected` (metrics, the object cache),
`on_seen` (every pod version handled), `on_outcome` (allocation results, for metrics), and
`volumes_changed` (the volume manager's desired state).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ephemera.kubelet import events
from ephemera.kubelet.allocation import (
    FAILED_ALLOCATION,
    AllocationManager,
    describe_change,
    insufficient,
)
from ephemera.kubelet.events import KubeletEvents
from ephemera.kubelet.eviction import admit_under_pressure
from ephemera.kubelet.podutil import pod_terminal, pod_uid
from ephemera.kubelet.podworkers import PodWorkers
from ephemera.kubelet.status import StatusManager, rejected_status

__all__ = ["AdmitResult", "PodAdmission", "admit"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True)
class AdmitResult:
    admit: bool
    reason: str = ""
    message: str = ""


def admit(pod: Mapping[str, Any], others: Sequence[Mapping[str, Any]],
          node_allocatable: Mapping[str, Any], gates: Mapping[str, bool], *,
          needs: Callable[[Mapping[str, Any]], Mapping[str, int]] | None = None
          ) -> AdmitResult:
    """Whether the node has room for `pod` next to the admitted `others` (upstream's
    resource-fit admit handler; what a pod needs, emptyDir sizeLimits included, is the rule
    a dynamic change is admitted by too: `ephemera.kubelet.allocation.fit`; `needs`: the
    allocation manager's memo of the others' needs, `AllocationManager.needs`)."""
    try:
        pods_capacity = int(str(node_allocatable.get("pods", "110")))
    except ValueError:
        pods_capacity = 110
    if len(others) + 1 > pods_capacity:
        return AdmitResult(False, "OutOfpods",
                           f"Node didn't have enough resource: pods, requested: 1, used: "
                           f"{len(others)}, capacity: {pods_capacity}")
    shortage = insufficient(pod, others, node_allocatable, gates, needs=needs)
    if shortage is not None:
        return AdmitResult(False, f"OutOf{shortage.resource}", shortage.message)
    return AdmitResult(True)


def _name(pod: Mapping[str, Any]) -> str:
    md = pod.get("metadata") or {}
    return f"{md.get('namespace')}/{md.get('name')}"


def _nothing(*_args: Any) -> None:
    return None


class PodAdmission:
    """One node's admitted, rejected and being-admitted pods (see the module docstring).
    `workers` is set once the pod workers exist; no pod is handled before."""

    def __init__(self, *, allocation: AllocationManager, status: StatusManager,
                 events: KubeletEvents, node_allocatable: Callable[[], Mapping[str, Any]],
                 gates: Mapping[str, bool],
                 node_conditions: Callable[[], Sequence[str]] = tuple,
                 volumes_changed: Callable[[], None] = _nothing) -> None:
        self.allocation = allocation
        self.status = status
        self.events = events
        self.node_allocatable = node_allocatable
        self.gates = gates
        self.node_conditions = node_conditions
        self.volumes_changed = volumes_changed
        self.workers: PodWorkers | None = None
        self.on_rejected: Callable[[Obj, AdmitResult], None] = _nothing
        self.on_seen: Callable[[Obj], None] = _nothing
        self.admitted: set[str] = set()
        self.rejected: set[str] = set()
        self.admitting: set[str] = set()  # admitted, allocation checkpoint being written
        self.api_pods: dict[str, Obj] = {}  # uid -> the pod as the API has it
        allocation.on_allocated = self._allocated
        allocation.is_inactive = self.inactive
        allocation.on_failed = self._allocation_failed
        allocation.on_change_allocated = self._change_allocated

    # -- the decision --

    def admit(self, pod: Obj) -> AdmitResult:
        """The admission decision: the eviction manager's (no pod under DiskPressure but a
        critical one...), then the resource fit."""
        pressure = admit_under_pressure(pod, self.node_conditions(), self.gates)
        if not pressure.admit:
            return AdmitResult(False, pressure.reason, pressure.message)
        return admit(pod, self.allocation.others(pod_uid(pod)), self.node_allocatable(),
                     self.gates, needs=self.allocation.needs)

    def inactive(self, uid: str) -> bool:
        """Admission no longer counts the pod (`AllocationManager.others`): terminal in its
        worker's view, or, before it has a worker, in the API's."""
        if self.workers is not None:
            terminal = self.workers.is_terminal(uid)
            if terminal is not None:
                return terminal
        pod = self.api_pods.get(uid)
        return pod is not None and pod_terminal(pod)

    # -- the pods --

    def handle(self, pod: Obj) -> None:
        """A pod version from the API: admitted (or rejected) when new, else handed to its
        worker with its allocated spec."""
        workers = self.workers
        assert workers is not None
        uid = pod_uid(pod)
        if not uid or uid in self.rejected:
            return
        self.on_seen(pod)
        if uid not in self.admitted:
            if uid in self.admitting:  # its allocation is being checkpointed
                self.api_pods[uid] = pod
                return
            # A pod in the allocation checkpoint was admitted before a restart: re-admitted
            # with its allocated spec, no new admission.
            if not self.allocation.is_allocated(uid) and not pod_terminal(pod) and \
                    not (pod.get("metadata") or {}).get("deletionTimestamp"):
                result = self.admit(pod)
                if not result.admit:
                    self._reject(pod, result)
                    return
                self.api_pods[uid] = pod
                self.admitting.add(uid)
                view = self.allocation.stage_new(pod)  # admission counts it from now on
                workers.spawn(self._allocate_new(uid, view), pod=pod)
                return
            self.admitted.add(uid)
        self.api_pods[uid] = pod
        self.allocation.request(pod)
        containers, volumes = self.allocation.pending_changes(uid)
        workers.update(self.allocation.worker_pod(pod), unallocated=containers,
                       unallocated_volumes=volumes, deciding=self.allocation.deciding(uid))
        self.volumes_changed()

    def _reject(self, pod: Obj, result: AdmitResult) -> None:
        assert self.workers is not None
        self.rejected.add(pod_uid(pod))
        self.on_rejected(pod, result)
        log.info("rejected pod %s: %s", _name(pod), result.message)
        self.status.set_pod_status(pod, rejected_status(pod.get("status"), result.reason,
                                                        result.message))
        self.workers.spawn(self.events.pod(pod, events.WARNING, result.reason,
                                           result.message), pod=pod)

    async def _allocate_new(self, uid: str, view: Obj) -> None:
        """Checkpoint a newly admitted pod's staged allocation `view` (in a thread), then
        hand its newest version to its worker: nothing of it is set up before the checkpoint
        is written. A pod deleted meanwhile is forgotten."""
        try:
            await self.allocation.write_new(uid, view)
        finally:
            self.admitting.discard(uid)
        latest = self.api_pods.get(uid)
        if latest is None:
            self.allocation.forget(uid)
            return
        self.admitted.add(uid)
        try:
            self.handle(latest)
        except Exception:
            log.exception("handing pod %s to its worker failed", uid)

    def _allocated(self, uid: str) -> None:
        """A pod change was allocated: hand the new allocated pod to its worker and the
        volume manager (actuation)."""
        pod = self.api_pods.get(uid)
        if pod is not None and self.workers is not None and uid in self.admitted:
            self.handle(pod)

    def _allocation_failed(self, pod: Obj, message: str) -> None:
        log.info("pod %s: change not allocated: %s", _name(pod), message)
        if self.workers is not None:
            self.workers.spawn(self.events.pod(pod, events.WARNING, FAILED_ALLOCATION,
                                               message), pod=pod)
            self.workers.wake(pod_uid(pod))

    def _change_allocated(self, previous: Obj, current: Obj) -> None:
        """KEP-6395: a Normal `SuccessfulAllocation` event naming what the change adds and
        removes."""
        pod = self.api_pods.get(pod_uid(current)) or current
        message = f"Allocated pod update: {describe_change(previous, current)}"
        log.info("pod %s: %s", _name(current), message)
        if self.workers is not None:
            self.workers.spawn(self.events.pod(pod, events.NORMAL,
                                               events.SUCCESSFUL_ALLOCATION, message,
                                               deferred=True), pod=pod)

    def deleted(self, pod: Obj) -> None:
        """The pod object is gone from the API: nothing more of it is allocated, its worker
        (if any) terminates it and then forgets its status; a pod without one (rejected, or
        its allocation still being written) has its status forgotten now."""
        uid = pod_uid(pod)
        self.rejected.discard(uid)
        self.api_pods.pop(uid, None)
        self.allocation.withdraw(uid)  # nothing more of a deleted pod is allocated
        self.allocation.retry()  # room may have appeared for pending changes
        if self.workers is not None and (uid in self.admitted
                                         or self.workers.get(uid) is not None):
            self.workers.remove(pod)
        else:
            self.status.forget(uid)
        self.admitted.discard(uid)

    def forget(self, uid: str) -> None:
        """The worker of a pod gone from the API has ended: its allocation goes, and pending
        changes of the others may fit now."""
        self.admitted.discard(uid)
        self.api_pods.pop(uid, None)
        self.allocation.forget(uid)
        self.allocation.retry()

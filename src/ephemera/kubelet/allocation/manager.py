"""The allocation stage of the kubelet (KEP-6395 "Two-Stage Kubelet Lifecycle", KEP-5972,
reference/k8s-semantics.md sections 1.3-1.5 and 2.5-2.6).

`AllocationManager` keeps, per pod UID, the **allocated pod**: the version of the pod's spec
the node has admitted. Pod workers, the volume manager and `/allocatedPods` see only it, so
nothing is mounted or started for a change the node has not admitted.

- A new pod is allocated as it is admitted: `stage_new(pod)` at once (admission counts it
  from then on), `await write_new(uid, view)` to make it durable (`allocate_new(pod)`: both);
  the resource-fit admission stays in `agent.admit`, by the same rule (`fit.insufficient`)
  against the same pods (`others(uid)`).
- A changed spec of an allocated pod (`request(pod)`, from `/dynamic` or any spec update) is
  checked as a whole (`check`) and allocated all or nothing: what the pod needs of cpu, memory
  and ephemeral-storage (`fit.node_need`: requests plus the `sizeLimit`s of its memory or disk
  emptyDirs) against the node's current allocatable (`node_allocatable()`), only for the
  resources the change asks more of (as upstream's resize). That is all admission asks: what
  the change reads is the business of the stages after it, as upstream's (KEP-6395 lifecycle
  phase 3): a volume whose ConfigMap or Secret does not exist (yet), or whose image is not on
  the node, is allocated and its SetUp fails (`ErrorMounting`, a `FailedMount` event, retried
  by the volume manager until it mounts); a container whose image is not on the node is
  allocated and goes `ErrImagePull` / `ImagePullBackOff` (the pod worker). A change that does
  not fit stays **pending**: `on_failed(pod, message)` (the agent posts a `FailedAllocation`
  Warning event, once per distinct message) and it is retried when `retry()` is called (pods
  added, updated or removed, the node changed) and every `retry_period` seconds.
- Allocation stops once the pod is terminating or deleted (`withdraw(uid)`; its deletion
  needs no admission), and a pod forgotten (`forget`) is never allocated again: a change
  whose write was under way when the pod was forgotten is dropped without an event.
- Every allocation is checkpointed (`checkpoint.AllocationCheckpoint`) before it takes
  effect: the change is *staged*, written (`store_async`: by the checkpoint's writer process
  or a thread, so the fsync never blocks the event loop; one write at a time, each carrying
  every staged change, so changes made together share a write) and only then becomes the
  allocated pod that `get`, `worker_pod` and the pod worker see. Admission counts staged
  changes too (`others`: the allocated pods with the staged changes applied, less the pods
  `is_inactive(uid)` says are terminal), so two admissions never both take the same room.
  `restore()` at start-up reloads the allocated pods, so a restarted kubelet re-admits what
  it had admitted (nothing lost, nothing set up twice). A corrupted checkpoint is logged and
  ignored (the pods are then admitted again as new pods).
- `on_allocated(uid)` is called after each successful allocation of a change (the agent
  hands the new allocated pod to the pod worker and the volume manager, which actuate it);
  `on_change_allocated(previous, current)` just before it (for the agent's event), and
  `on_outcome(result)` with `admitted` for each allocated change, `deferred` or `error` for
  each change not allocated for a new reason (metrics). Callbacks returning awaitables run as
  tasks whose failures are logged; `await close()` waits for them (a forget's checkpoint
  write among them). While a checked change's checkpoint is written it is
  `staged_change(uid)`; `on_staging_changed(uid)` as its write begins and once it ended,
  whatever the outcome (before `on_allocated`), so the kubelet sets up the change's new
  volumes during the fsync; nothing of the change is actuated before it is on disk.

`allocated_view(pod)`: the allocated pod as `/allocatedPods` serves it (status left blank).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ephemera import trace
from ephemera.aiotasks import cancel_and_wait
from ephemera.api.goformat import go_error_text
from ephemera.kubelet.allocation.checkpoint import (
    AllocationCheckpoint,
    CheckpointCorruptedError,
    WriterUnavailable,
)
from ephemera.kubelet.allocation.fit import insufficient, pod_needs

__all__ = [
    "ADMITTED",
    "DEFERRED",
    "ERROR",
    "FAILED_ALLOCATION",
    "UNALLOCATED_MESSAGE",
    "UNALLOCATED_REASON",
    "AllocationManager",
    "AllocationResult",
    "allocated_view",
    "describe_change",
    "unallocated_containers",
    "unallocated_volumes",
]

log = logging.getLogger(__name__)

FAILED_ALLOCATION = "FailedAllocation"
UNALLOCATED_REASON = "Unallocated"
UNALLOCATED_MESSAGE = "Container addition pending node allocation"
DEFAULT_RETRY_PERIOD = 10.0
# Allocation outcomes (`on_outcome`, the `result` label of kubelet_dynamic_allocations_total).
ADMITTED = "admitted"
DEFERRED = "deferred"
ERROR = "error"
_UNSTAGED = object()

Obj = dict[str, Any]


@dataclass(frozen=True)
class AllocationResult:
    allocated: bool
    message: str = ""


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, dict) else {}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def allocated_view(pod: Mapping[str, Any]) -> Obj:
    """The pod as `/allocatedPods` serves it: metadata and spec, `status` blank."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": dict(pod.get("metadata") or {}),
            "spec": dict(_spec(pod)), "status": {}}


def unallocated_containers(desired: Mapping[str, Any],
                           allocated: Mapping[str, Any]) -> list[Obj]:
    """Containers of the desired spec that the allocated spec does not have."""
    have = {str(c.get("name")) for c in _spec(allocated).get("containers") or []}
    return [dict(c) for c in _spec(desired).get("containers") or []
            if str(c.get("name")) not in have]


def unallocated_volumes(desired: Mapping[str, Any], allocated: Mapping[str, Any]) -> list[str]:
    """Names of the volumes of the desired spec that the allocated spec does not have."""
    have = {str(v.get("name")) for v in _spec(allocated).get("volumes") or []}
    return [str(v.get("name")) for v in _spec(desired).get("volumes") or []
            if str(v.get("name")) not in have]


def describe_change(previous: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """`added volumes=[a], removed volumes=[], added containers=[c], removed containers=[]`
    between two allocated pods (lists in spec order, as Go's `%v` prints them)."""
    def names(items: list[Any]) -> str:
        return "[" + " ".join(str(i.get("name") if isinstance(i, dict) else i)
                              for i in items) + "]"
    return (f"added volumes={names(unallocated_volumes(current, previous))}, "
            f"removed volumes={names(unallocated_volumes(previous, current))}, "
            f"added containers={names(unallocated_containers(current, previous))}, "
            f"removed containers={names(unallocated_containers(previous, current))}")


class AllocationManager:
    """See the module docstring."""

    def __init__(self, checkpoint: AllocationCheckpoint, *,
                 node_allocatable: Callable[[], Mapping[str, Any]],
                 gates: Mapping[str, bool] | None = None,
                 retry_period: float = DEFAULT_RETRY_PERIOD) -> None:
        self.checkpoint = checkpoint
        self.node_allocatable = node_allocatable
        self.gates: Mapping[str, bool] = gates if gates is not None else {}
        self.retry_period = retry_period
        self.allocated: dict[str, Obj] = {}
        self.desired: dict[str, Obj] = {}  # pods with a change not allocated yet
        self.pending: dict[str, str] = {}  # uid -> why the change is not allocated
        self.on_allocated: Callable[[str], Any] = lambda uid: None
        self.on_change_allocated: Callable[[Obj, Obj], Any] = lambda previous, current: None
        # A change that passed its checks began or ended being written (`staged_change`;
        # the kubelet sets up its new volumes meanwhile; nothing is actuated before
        # `on_allocated`).
        self.on_staging_changed: Callable[[str], Any] = lambda uid: None
        self.on_failed: Callable[[Obj, str], Any] = lambda pod, message: None
        self.on_outcome: Callable[[str], Any] = lambda result: None
        # Pods admission no longer counts (terminal: their containers are done).
        self.is_inactive: Callable[[str], bool] = lambda uid: False
        self._wake: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Future[Any]] = set()
        self._staged: dict[str, Obj | None] = {}  # uid -> allocated pod (None: gone) to write
        self._io_lock = asyncio.Lock()  # one checkpoint write at a time
        # `fit.pod_needs` of each allocated (or staged) view, by the view's identity (the
        # view is kept with it, so the id stays its own): computed once per view, not at
        # every admission.
        self._needs: dict[int, tuple[Mapping[str, Any], Mapping[str, int]]] = {}

    # -- state -----------------------------------------------------------------------------

    def restore(self) -> int:
        """Reload the checkpointed allocated pods; how many."""
        try:
            self.allocated = self.checkpoint.load()
        except CheckpointCorruptedError as err:
            log.error("ignoring the allocation checkpoint: %s", err)
            self.allocated = {}
        except OSError as err:
            log.error("reading the allocation checkpoint: %s", err)
            self.allocated = {}
        self._staged.clear()
        try:
            self.checkpoint.start()  # its writer, before the first pod waits on it
        except WriterUnavailable as err:
            log.warning("allocation checkpoint: %s; writing in a thread until it starts", err)
        return len(self.allocated)

    def _effective(self) -> dict[str, Obj]:
        """The allocated pods with the staged (not yet written) changes applied: what
        admission counts."""
        pods = dict(self.allocated)
        for uid, view in self._staged.items():
            if view is None:
                pods.pop(uid, None)
            else:
                pods[uid] = view
        return pods

    def effective_pods(self) -> list[Obj]:
        """Every allocated pod, the staged changes applied (terminal ones too)."""
        return list(self._effective().values())

    def others(self, uid: str) -> list[Obj]:
        """The pods admission counts next to pod `uid` (a new pod's and a change's alike):
        the allocated pods with the staged changes applied (`_effective`: a change being
        written holds its room already), but `uid` and the pods `is_inactive` says are
        terminal."""
        return [pod for other, pod in self._effective().items()
                if other != uid and not self.is_inactive(other)]

    def needs(self, view: Mapping[str, Any]) -> Mapping[str, int]:
        """`fit.pod_needs` of an allocated or staged view (`others`), computed once per
        view; the memo is pruned to the current views as it grows."""
        entry = self._needs.get(id(view))
        if entry is not None and entry[0] is view:
            return entry[1]
        if len(self._needs) > 2 * (len(self.allocated) + len(self._staged)) + 16:
            current = {id(v) for v in self._effective().values()}
            self._needs = {k: e for k, e in self._needs.items() if k in current}
        needs = pod_needs(view, self.gates)
        self._needs[id(view)] = (view, needs)
        return needs

    def _forgotten(self, uid: str) -> bool:
        """`forget(uid)` was called (its write may still be under way)."""
        return uid in self._staged and self._staged[uid] is None

    async def _write_staged(self, uid: str, view: Obj | None) -> bool:
        """Write the checkpoint with every staged change once `view` is staged for `uid`.
        True when `view` is on disk (this write or an earlier one carried it), False when a
        later change replaced it first."""
        async with self._io_lock:
            if self._staged.get(uid, _UNSTAGED) is not view:
                if uid in self._staged:
                    return False  # a later change replaced it
                return (uid not in self.allocated) if view is None else \
                    self.allocated.get(uid) is view  # an earlier write carried it
            staged = dict(self._staged)
            pods = self._effective()
            try:
                await self.checkpoint.store_async(pods)
            except Exception:
                if self._staged.get(uid, _UNSTAGED) is view:
                    del self._staged[uid]
                raise
            for staged_uid, staged_view in staged.items():
                if self._staged.get(staged_uid, _UNSTAGED) is staged_view:
                    del self._staged[staged_uid]
                if staged_view is None:
                    self.allocated.pop(staged_uid, None)
                else:
                    self.allocated[staged_uid] = staged_view
            return True

    def staged_change(self, uid: str) -> Obj | None:
        """The allocated view of the allocated pod's change whose checkpoint is being
        written (None: none is; a new pod's first write or a forget is no change)."""
        view = self._staged.get(uid)
        return view if view is not None and uid in self.allocated else None

    def is_allocated(self, uid: str) -> bool:
        return uid in self.allocated

    def get(self, uid: str) -> Obj | None:
        return self.allocated.get(uid)

    def stage_new(self, pod: Mapping[str, Any]) -> Obj:
        """Stage a newly admitted pod's allocation: admission counts it from now on (before
        `write_new` has made it durable). Its allocated view."""
        uid = _uid(pod)
        view = allocated_view(pod)
        self.withdraw(uid)
        self._staged[uid] = view
        return view

    async def write_new(self, uid: str, view: Obj) -> None:
        """Checkpoint the staged new pod `view` of `uid`, returning once it is allocated (so
        nothing of it is set up before). When the write fails the pod is allocated anyway
        (it runs; a restarted kubelet admits it again as a new pod), unless it was forgotten
        meanwhile."""
        try:
            await self._write_staged(uid, view)
        except Exception as err:
            if isinstance(err, OSError):
                log.error("writing the allocation checkpoint: %s", err)
            else:
                log.exception("writing the allocation checkpoint failed")
            if not self._forgotten(uid):
                self.allocated[uid] = view

    async def allocate_new(self, pod: Mapping[str, Any]) -> None:
        """Record a newly admitted pod as allocated: `stage_new`, then `write_new`."""
        await self.write_new(_uid(pod), self.stage_new(pod))

    def differs(self, pod: Mapping[str, Any]) -> bool:
        """The pod's spec is not the allocated one."""
        current = self.allocated.get(_uid(pod))
        if current is None:
            return False
        allocated, desired = _spec(current), _spec(pod)
        # Plain equality first (what an unchanged spec meets at C speed; JSON documents equal
        # as Python values are equal as canonical JSON but for 1 and 1.0, which no spec
        # field holds both of), the canonical JSON only when that says they differ.
        return allocated != desired and _canonical(allocated) != _canonical(desired)

    def worker_pod(self, pod: Mapping[str, Any]) -> Obj:
        """The API pod with its allocated spec (what the pod worker actuates)."""
        current = self.allocated.get(_uid(pod))
        if current is None:
            return dict(pod)
        return {**pod, "spec": current["spec"]}

    def request(self, pod: Mapping[str, Any]) -> None:
        """The API has this spec for an allocated pod: allocate it when it differs (not
        once the pod is terminating)."""
        uid = _uid(pod)
        if uid not in self.allocated or self._forgotten(uid):
            return
        if not self.differs(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
            self.withdraw(uid)
            return
        self.desired[uid] = dict(pod)
        self.retry()

    def withdraw(self, uid: str) -> None:
        """Drop the pod's pending change, if any (the pod is terminating or deleted: nothing
        more of it is allocated; what is allocated stays until `forget`)."""
        self.desired.pop(uid, None)
        self.pending.pop(uid, None)

    def forget(self, uid: str) -> None:
        """The pod is gone: never allocated again."""
        self.withdraw(uid)
        if uid in self.allocated or self._staged.get(uid) is not None:
            # Staged now (admission no longer counts it), written in the background: a pod
            # left in the checkpoint is dropped at the next start-up (`keep_only`).
            self._staged[uid] = None
            self._call(self._forget_durably, uid)

    async def _forget_durably(self, uid: str) -> None:
        try:
            await self._write_staged(uid, None)
        except Exception as err:
            log.error("writing the allocation checkpoint: %s", err)
            self.allocated.pop(uid, None)

    def keep_only(self, uids: set[str]) -> None:
        """Drop allocated pods not in `uids` (at start-up: pods deleted while down)."""
        gone = [uid for uid in self.allocated if uid not in uids]
        for uid in gone:
            self.forget(uid)

    def retry(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- the admission check ---------------------------------------------------------------

    def check(self, pod: Mapping[str, Any]) -> str:
        """Why the change to `pod` cannot be allocated now ("" when it can): the node has
        not the room it asks more of (see the module docstring: nothing else is checked)."""
        uid = _uid(pod)
        shortage = insufficient(pod, self.others(uid), self.node_allocatable(), self.gates,
                                baseline=self.allocated.get(uid) or {}, needs=self.needs)
        return "" if shortage is None else shortage.message

    async def try_allocate(self, pod: Mapping[str, Any]) -> AllocationResult:
        """Allocate the pod's changed spec if it fits, all or nothing."""
        uid = _uid(pod)
        async with self._lock:
            if uid not in self.allocated:
                return AllocationResult(False, "pod is not admitted")
            if self._forgotten(uid):
                return AllocationResult(False, "pod is gone")
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                return AllocationResult(False, "pod is terminating")
            if not self.differs(pod):
                self.withdraw(uid)
                return AllocationResult(True)
            name = trace.name_of(pod)
            trace.mark("kubelet.allocation_check", name)
            message = self.check(pod)
            if message:
                return self._not_allocated(pod, message, DEFERRED)
            previous = self.allocated[uid]
            current = allocated_view(pod)
            self._staged[uid] = current
            trace.mark("kubelet.allocation_staged", name)
            self._call(self.on_staging_changed, uid)
            try:
                # durable before anything actuates it
                written = await self._write_staged(uid, current)
                trace.mark("kubelet.allocation_written", name)
            except Exception as err:
                return self._not_allocated(
                    pod, f"writing the allocation checkpoint: {go_error_text(err)}", ERROR)
            finally:
                self._call(self.on_staging_changed, uid)
            if not written:  # forgotten while being written: no event, no metric
                return AllocationResult(False, "pod is gone")
            if self.desired.get(uid) is not None and not self.differs(self.desired[uid]):
                self.desired.pop(uid, None)
            self.pending.pop(uid, None)
        log.info("allocated the change to pod %s/%s",
                 (pod.get("metadata") or {}).get("namespace"),
                 (pod.get("metadata") or {}).get("name"))
        self._call(self.on_outcome, ADMITTED)
        self._call(self.on_change_allocated, previous, current)
        self._call(self.on_allocated, uid)
        return AllocationResult(True)

    def _not_allocated(self, pod: Mapping[str, Any], message: str,
                       outcome: str) -> AllocationResult:
        """The change stays pending; reported (outcome, `on_failed`) once per message."""
        uid = _uid(pod)
        reported = self.pending.get(uid)
        self.pending[uid] = message
        if reported != message:
            self._call(self.on_outcome, outcome)
            self._call(self.on_failed, dict(pod), message)
        return AllocationResult(False, message)

    def _call(self, callback: Callable[..., Any], *args: Any) -> None:
        try:
            result = callback(*args)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._task_done)
        except Exception:
            log.exception("allocation callback failed")

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("allocation callback failed", exc_info=task.exception())

    async def close(self, timeout: float = 10.0) -> None:
        """Wait for the callbacks still running (a forget's checkpoint write among them),
        at most `timeout` seconds; cancel what is left; stop the checkpoint's writer."""
        tasks = list(self._tasks)
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=timeout)
            await cancel_and_wait(*late)
        self.checkpoint.close()

    async def allocate_pending(self) -> None:
        """One pass over every pending change (none blocks the others)."""
        for pod in list(self.desired.values()):
            await self.try_allocate(pod)

    async def run(self) -> None:
        """Retry pending changes when woken and every `retry_period`; until cancelled."""
        self._wake = asyncio.Event()
        while True:
            self._wake.clear()
            try:
                await self.allocate_pending()
            except Exception:
                log.exception("allocating pending pod changes failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.retry_period):
                    await self._wake.wait()

    def deciding(self, uid: str) -> bool:
        """The pod has a change whose first allocation attempt has not ended: its outcome
        (`on_allocated`, or `on_failed` with the reason) is still to come."""
        return uid in self.desired and uid not in self.pending and self._wake is not None

    def pending_changes(self, uid: str) -> tuple[list[Obj], list[str]]:
        """(containers, volume names) the API has for the pod that are not allocated."""
        desired = self.desired.get(uid)
        current = self.allocated.get(uid)
        if desired is None or current is None:
            return [], []
        return unallocated_containers(desired, current), unallocated_volumes(desired, current)



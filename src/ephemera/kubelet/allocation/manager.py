"""The allocation stage of the kubelet (KEP-6395 "Two-Stage Kubelet Lifecycle", KEP-5972,
reference/k8s-semantics.md sections 1.3-1.5 and 2.5-2.6).

`AllocationManager` keeps, per pod UID, the **allocated pod**: the version of the pod's spec
the node has admitted. Pod workers, the volume manager and `/allocatedPods` see only it, so
nothing is mounted or started for a change the node has not admitted.

- A new pod is allocated as it is admitted (`allocate_new`; the resource-fit admission stays
  in `agent.admit`).
- A changed spec of an allocated pod (`request(pod)`, from `/dynamic` or any spec update) is
  checked as a whole (`check`) and allocated all or nothing: resource requests plus the
  `sizeLimit` of memory-backed emptyDirs against allocatable `memory`, requests plus the
  `sizeLimit` of disk emptyDirs against allocatable `ephemeral-storage` (only when the change
  asks for more, as upstream's resize), ConfigMaps and Secrets of added or changed volumes
  (also projected sources; `optional` ones excepted) must exist, images of added or changed
  containers and image volumes must be in the node's store. A change that does not fit stays
  **pending**: `on_failed(pod, message)` (the agent posts a `FailedAllocation` Warning event,
  once per distinct message) and it is retried when `retry()` is called (pods added, updated
  or removed, the node changed) and every `retry_period` seconds.
- Allocation stops once the pod is terminating (its deletion needs no admission).
- Every allocation is checkpointed (`checkpoint.AllocationCheckpoint`) before it takes effect;
  `restore()` at start-up reloads the allocated pods, so a restarted kubelet re-admits what it
  had admitted (nothing lost, nothing set up twice). A corrupted checkpoint is logged and
  ignored (the pods are then admitted again as new pods).
- `on_allocated(uid)` is called after each successful allocation of a change (the agent
  hands the new allocated pod to the pod worker and the volume manager, which actuate it).

`allocated_view(pod)`: the allocated pod as `/allocatedPods` serves it (status left blank).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ephemera.api.quantity import QuantityError, quantity_from_json
from ephemera.kubelet.allocation.checkpoint import AllocationCheckpoint, CheckpointCorruptedError
from ephemera.pods import resources as podresources

__all__ = [
    "FAILED_ALLOCATION",
    "UNALLOCATED_MESSAGE",
    "UNALLOCATED_REASON",
    "AllocationManager",
    "AllocationResult",
    "allocated_view",
    "unallocated_containers",
    "unallocated_volumes",
]

log = logging.getLogger(__name__)

FAILED_ALLOCATION = "FailedAllocation"
UNALLOCATED_REASON = "Unallocated"
UNALLOCATED_MESSAGE = "Container addition pending node allocation"
DEFAULT_RETRY_PERIOD = 10.0

Obj = dict[str, Any]
Lookup = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]


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


def _bytes(value: Any) -> int:
    try:
        return int(quantity_from_json(value).value())
    except (QuantityError, TypeError, ValueError):
        return 0


def _emptydir_bytes(pod: Mapping[str, Any], memory: bool) -> int:
    total = 0
    for volume in _spec(pod).get("volumes") or []:
        empty = volume.get("emptyDir")
        if not isinstance(empty, dict):
            continue
        if (empty.get("medium") == "Memory") == memory and empty.get("sizeLimit") is not None:
            total += _bytes(empty["sizeLimit"])
    return total


def node_need(pod: Mapping[str, Any], resource: str, gates: Mapping[str, bool]) -> int:
    """What the pod needs of `resource` on the node (milli-CPU, bytes)."""
    request = podresources.pod_requests(pod, gates=gates).get(resource)
    amount = 0
    if request is not None:
        amount = int(request.milli_value()) if resource == "cpu" else int(request.value())
    if resource == "memory":
        amount += _emptydir_bytes(pod, memory=True)
    elif resource == "ephemeral-storage":
        amount += _emptydir_bytes(pod, memory=False)
    return amount


def _volume_refs(volume: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(kind, name) of the non-optional ConfigMaps and Secrets a volume reads."""
    refs: list[tuple[str, str]] = []
    cm = volume.get("configMap")
    if isinstance(cm, dict) and not cm.get("optional"):
        refs.append(("configmap", str(cm.get("name") or "")))
    secret = volume.get("secret")
    if isinstance(secret, dict) and not secret.get("optional"):
        refs.append(("secret", str(secret.get("secretName") or "")))
    projected = volume.get("projected")
    if isinstance(projected, dict):
        for source in projected.get("sources") or []:
            pcm = source.get("configMap")
            if isinstance(pcm, dict) and not pcm.get("optional"):
                refs.append(("configmap", str(pcm.get("name") or "")))
            psecret = source.get("secret")
            if isinstance(psecret, dict) and not psecret.get("optional"):
                refs.append(("secret", str(psecret.get("name") or "")))
    return refs


class AllocationManager:
    """See the module docstring."""

    def __init__(self, checkpoint: AllocationCheckpoint, *,
                 node_allocatable: Callable[[], Mapping[str, Any]],
                 get_configmap: Lookup, get_secret: Lookup,
                 image_present: Callable[[str], bool],
                 gates: Mapping[str, bool] | None = None,
                 retry_period: float = DEFAULT_RETRY_PERIOD) -> None:
        self.checkpoint = checkpoint
        self.node_allocatable = node_allocatable
        self.get_configmap = get_configmap
        self.get_secret = get_secret
        self.image_present = image_present
        self.gates: Mapping[str, bool] = gates if gates is not None else {}
        self.retry_period = retry_period
        self.allocated: dict[str, Obj] = {}
        self.desired: dict[str, Obj] = {}  # pods with a change not allocated yet
        self.pending: dict[str, str] = {}  # uid -> why the change is not allocated
        self.on_allocated: Callable[[str], Any] = lambda uid: None
        self.on_failed: Callable[[Obj, str], Any] = lambda pod, message: None
        self._reported: dict[str, str] = {}
        self._wake: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Future[Any]] = set()
        self._generation = 0
        self._written = 0
        self._write_lock = threading.Lock()

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
        return len(self.allocated)

    def _snapshot(self) -> tuple[int, dict[str, Obj]]:
        self._generation += 1
        return self._generation, {uid: allocated_view(p) for uid, p in self.allocated.items()}

    def _persist(self, snapshot: tuple[int, Mapping[str, Mapping[str, Any]]] | None = None
                 ) -> None:
        """Write a snapshot (taken on the event loop); an older one than the last written
        is skipped, so a slow thread never overwrites a newer checkpoint."""
        generation, pods = self._snapshot() if snapshot is None else snapshot
        with self._write_lock:
            if generation <= self._written:
                return
            self.checkpoint.store(pods)
            self._written = generation

    def is_allocated(self, uid: str) -> bool:
        return uid in self.allocated

    def get(self, uid: str) -> Obj | None:
        return self.allocated.get(uid)

    def allocate_new(self, pod: Mapping[str, Any]) -> None:
        """Record a newly admitted pod as allocated (checkpointed)."""
        uid = _uid(pod)
        self.allocated[uid] = allocated_view(pod)
        self.desired.pop(uid, None)
        self.pending.pop(uid, None)
        try:
            self._persist()
        except OSError as err:  # the pod runs; a restarted kubelet admits it again
            log.error("writing the allocation checkpoint: %s", err)

    def differs(self, pod: Mapping[str, Any]) -> bool:
        """The pod's spec is not the allocated one."""
        current = self.allocated.get(_uid(pod))
        return current is not None and _canonical(_spec(current)) != _canonical(_spec(pod))

    def worker_pod(self, pod: Mapping[str, Any]) -> Obj:
        """The API pod with its allocated spec (what the pod worker actuates)."""
        current = self.allocated.get(_uid(pod))
        if current is None:
            return dict(pod)
        return {**pod, "spec": current["spec"]}

    def request(self, pod: Mapping[str, Any]) -> None:
        """The API has this spec for an allocated pod: allocate it when it differs."""
        uid = _uid(pod)
        if uid not in self.allocated:
            return
        if not self.differs(pod):
            self.desired.pop(uid, None)
            self.pending.pop(uid, None)
            self._reported.pop(uid, None)
            return
        self.desired[uid] = dict(pod)
        self.retry()

    def forget(self, uid: str) -> None:
        """The pod is gone."""
        self.desired.pop(uid, None)
        self.pending.pop(uid, None)
        self._reported.pop(uid, None)
        if self.allocated.pop(uid, None) is not None:
            try:
                self._persist()
            except OSError as err:
                log.error("writing the allocation checkpoint: %s", err)

    def keep_only(self, uids: set[str]) -> None:
        """Drop allocated pods not in `uids` (at start-up: pods deleted while down)."""
        gone = [uid for uid in self.allocated if uid not in uids]
        for uid in gone:
            self.forget(uid)

    def retry(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- the admission check ---------------------------------------------------------------

    async def check(self, pod: Mapping[str, Any]) -> str:
        """Why the change to `pod` cannot be allocated now ("" when it can)."""
        uid = _uid(pod)
        old = self.allocated.get(uid) or {}
        node = self.node_allocatable()
        others = [p for u, p in self.allocated.items() if u != uid]
        for resource in ("cpu", "memory", "ephemeral-storage"):
            if resource not in node:
                continue
            need = node_need(pod, resource, self.gates)
            if need <= node_need(old, resource, self.gates):
                continue
            try:
                q = quantity_from_json(node[resource])
            except QuantityError:
                continue
            capacity = int(q.milli_value()) if resource == "cpu" else int(q.value())
            used = sum(node_need(o, resource, self.gates) for o in others)
            if need + used > capacity:
                return (f"Node didn't have enough resource: {resource}, requested: {need}, "
                        f"used: {used}, capacity: {capacity}")
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        old_volumes = {str(v.get("name")): _canonical(v) for v in _spec(old).get("volumes")
                       or []}
        for volume in _spec(pod).get("volumes") or []:
            name = str(volume.get("name"))
            if old_volumes.get(name) == _canonical(volume):
                continue
            for kind, ref in _volume_refs(volume):
                lookup = self.get_configmap if kind == "configmap" else self.get_secret
                if await lookup(namespace, ref) is None:
                    return f'volume "{name}": {kind} "{ref}" not found'
            image = volume.get("image")
            if isinstance(image, dict):
                reference = str(image.get("reference") or "")
                if not await asyncio.to_thread(self.image_present, reference):
                    return f'volume "{name}": image "{reference}" is not present on the node'
        old_images = {str(c.get("name")): c.get("image") for kind in
                      ("initContainers", "containers")
                      for c in _spec(old).get(kind) or []}
        for kind in ("initContainers", "containers"):
            for container in _spec(pod).get(kind) or []:
                name = str(container.get("name"))
                ref = str(container.get("image") or "")
                if old_images.get(name) == ref:
                    continue
                if not await asyncio.to_thread(self.image_present, ref):
                    return f'container "{name}": image "{ref}" is not present on the node'
        return ""

    async def try_allocate(self, pod: Mapping[str, Any]) -> AllocationResult:
        """Allocate the pod's changed spec if it fits, all or nothing."""
        uid = _uid(pod)
        async with self._lock:
            if uid not in self.allocated:
                return AllocationResult(False, "pod is not admitted")
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                return AllocationResult(False, "pod is terminating")
            if not self.differs(pod):
                self.desired.pop(uid, None)
                self.pending.pop(uid, None)
                return AllocationResult(True)
            try:
                message = await self.check(pod)
            except Exception as err:  # the API could not be asked: try again later
                message = f"checking the change: {err}"
            if message:
                self.pending[uid] = message
                if self._reported.get(uid) != message:
                    self._reported[uid] = message
                    self._call(self.on_failed, dict(pod), message)
                return AllocationResult(False, message)
            previous = self.allocated[uid]
            self.allocated[uid] = allocated_view(pod)
            try:
                await asyncio.to_thread(self._persist, self._snapshot())
            except OSError as err:
                self.allocated[uid] = previous
                self.pending[uid] = f"writing the allocation checkpoint: {err}"
                return AllocationResult(False, self.pending[uid])
            if self.desired.get(uid) is not None and not self.differs(self.desired[uid]):
                self.desired.pop(uid, None)
            self.pending.pop(uid, None)
            self._reported.pop(uid, None)
        log.info("allocated the change to pod %s/%s",
                 (pod.get("metadata") or {}).get("namespace"),
                 (pod.get("metadata") or {}).get("name"))
        self._call(self.on_allocated, uid)
        return AllocationResult(True)

    def _call(self, callback: Callable[..., Any], *args: Any) -> None:
        try:
            result = callback(*args)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except Exception:
            log.exception("allocation callback failed")

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
                await asyncio.wait_for(self._wake.wait(), self.retry_period)

    def pending_changes(self, uid: str) -> tuple[list[Obj], list[str]]:
        """(containers, volume names) the API has for the pod that are not allocated."""
        desired = self.desired.get(uid)
        current = self.allocated.get(uid)
        if desired is None or current is None:
            return [], []
        return unallocated_containers(desired, current), unallocated_volumes(desired, current)



"""The ReplicaSet controller and, on the same code, the ReplicationController manager, as
upstream's `pkg/controller/replicaset`.

For each ReplicaSet (key `namespace/name`, from a rate-limited work queue fed by the
ReplicaSet and pod informers):

- the active pods of its namespace are claimed (`ControllerRefManager`: adopt orphans the
  selector matches, release owned pods it no longer matches);
- only when its expectations are satisfied (every pod it created or deleted was seen by the
  informer, `Expectations`) does it act: too few pods are created from the template in
  slow-start batches (1, 2, 4, ..., at most 500 per sync), each a `SuccessfulCreate` event
  (`FailedCreate` on an error, which ends the burst and lowers the expectations by what was
  not created); too many are deleted, the first of upstream's ranking
  (`ephemera.controllers.podutil.pods_to_delete`), each `SuccessfulDelete`;
- the status is written (`replicas`, `fullyLabeledReplicas`, `readyReplicas`,
  `availableReplicas` counting `minReadySeconds`, `observedGeneration`, a `ReplicaFailure`
  condition while creating or deleting fails) when it changed, and a ReplicaSet whose ready
  pods are not yet available is synced again when they become so.

The controller compares nothing of a pod's spec with the template: a pod whose volumes were
changed through `/dynamic` (KEP-6395) is still its ReplicaSet's pod."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ephemera.api import labelselector, meta
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer, resource_path
from ephemera.controllers import podutil
from ephemera.controllers.controllerref import ControllerRefManager, controller_of
from ephemera.controllers.expectations import Expectations
from ephemera.controllers.objects import int_or_zero as _int
from ephemera.controllers.objects import labels as _labels
from ephemera.controllers.objects import metadata as _md
from ephemera.controllers.objects import queue_key as _key
from ephemera.controllers.runner import QueueController
from ephemera.controllers.slowstart import slow_start

__all__ = ["REPLICASET", "REPLICATIONCONTROLLER", "ReplicaKind", "ReplicaSetController",
           "calculate_status"]

log = logging.getLogger("ephemera.controllers.replicaset")

BURST_REPLICAS = 500
WORKERS = 5

Obj = dict[str, Any]


@dataclass(frozen=True)
class ReplicaKind:
    plural: str
    group: str
    api_version: str
    kind: str
    component: str  # the event source, upstream's controller name

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        return resource_path(self.plural, namespace, name, subresource, group=self.group)

    def selects(self, owner: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
        """Whether the owner's selector selects `labels` (a label selector for the apps
        kinds, a map of labels for a ReplicationController; an empty one selects nothing
        here, as validation refuses it)."""
        selector = (owner.get("spec") or {}).get("selector")
        if not isinstance(selector, dict) or not selector:
            return False
        if self.group:
            return not labelselector.is_empty(selector) and labelselector.matches(
                selector, labels)
        return all(labels.get(k) == v for k, v in selector.items())


REPLICASET = ReplicaKind("replicasets", "apps", "apps/v1", "ReplicaSet", "replicaset-controller")
REPLICATIONCONTROLLER = ReplicaKind("replicationcontrollers", "", "v1", "ReplicationController",
                                    "replication-controller")


def calculate_status(rs: Mapping[str, Any], pods: list[Obj], error: str | None,
                     failure_reason: str, now: datetime) -> dict[str, Any]:
    """`calculateStatus`: the counts of the claimed active pods, the observed generation
    and the ReplicaFailure condition; zero counts left out as upstream's JSON does."""
    spec = rs.get("spec") or {}
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = _int(spec.get("minReadySeconds"))
    fully = sum(1 for p in pods
                if all(_labels(p).get(k) == v for k, v in template_labels.items()))
    ready = sum(1 for p in pods if podutil.is_ready(p))
    available = sum(1 for p in pods if podutil.is_available(p, min_ready, now))
    status: dict[str, Any] = {"replicas": len(pods)}
    for name, count in (("fullyLabeledReplicas", fully), ("readyReplicas", ready),
                        ("availableReplicas", available)):
        if count:
            status[name] = count
    generation = _int(_md(rs).get("generation"))
    if generation:
        status["observedGeneration"] = generation
    conditions = [dict(c) for c in (rs.get("status") or {}).get("conditions") or []
                  if isinstance(c, dict)]
    failure = next((c for c in conditions if c.get("type") == "ReplicaFailure"), None)
    if error is not None and failure is None:
        conditions.append({"type": "ReplicaFailure", "status": "True",
                           "lastTransitionTime": meta.rfc3339(now),
                           "reason": failure_reason, "message": error})
    elif error is None and failure is not None:
        conditions.remove(failure)
    if conditions:
        status["conditions"] = conditions
    return status


class ReplicaSetController(QueueController):
    """Runs until cancelled (`run()`); `pods` and `sets` are informers the caller runs."""

    def __init__(self, api: ApiClient, pods: Informer, sets: Informer, *,
                 kind: ReplicaKind = REPLICASET, recorder: EventRecorder | None = None,
                 workers: int = WORKERS, burst_replicas: int = BURST_REPLICAS,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        super().__init__(api, kind=kind.kind, api_version=kind.api_version,
                         component=kind.component, informers=(pods, sets), log=log,
                         workers=workers, recorder=recorder, clock=clock)
        self.kind = kind
        self.pods = pods
        self.sets = sets
        self.burst_replicas = burst_replicas
        self.expectations = Expectations()
        sets.add_handler(on_add=lambda rs: self.queue.add(_key(rs)),
                         on_update=lambda old, new: self.queue.add(_key(new)),
                         on_delete=self._set_deleted)
        pods.add_handler(on_add=self._pod_added, on_update=self._pod_updated,
                         on_delete=self._pod_deleted)

    # -- handlers ---------------------------------------------------------------------------

    def _set_deleted(self, rs: Obj) -> None:
        self.expectations.delete(_key(rs))
        self.queue.add(_key(rs))

    def _resolve(self, namespace: str, ref: Mapping[str, Any]) -> Obj | None:
        if ref.get("kind") != self.kind.kind:
            return None
        rs = self.sets.get(f"{namespace}/{ref.get('name')}")
        if rs is None or _md(rs).get("uid") != ref.get("uid"):
            return None
        return rs

    def _matching_sets(self, pod: Mapping[str, Any]) -> list[Obj]:
        namespace, labels = _md(pod).get("namespace"), _labels(pod)
        return [rs for rs in self.sets.list(str(namespace or ""))
                if self.kind.selects(rs, labels)]

    def _pod_added(self, pod: Obj) -> None:
        if _md(pod).get("deletionTimestamp"):
            self._pod_deleted(pod)
            return
        ref = controller_of(pod)
        if ref is not None:
            rs = self._resolve(str(_md(pod).get("namespace") or ""), ref)
            if rs is not None:
                self.expectations.creation_observed(_key(rs))
                self.queue.add(_key(rs))
            return
        for rs in self._matching_sets(pod):
            self.queue.add(_key(rs))

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if _md(old).get("resourceVersion") == _md(new).get("resourceVersion"):
            return
        namespace = str(_md(new).get("namespace") or "")
        labels_changed = _labels(old) != _labels(new)
        if _md(new).get("deletionTimestamp"):
            self._pod_deleted(new)
            if labels_changed:
                self._pod_deleted(old)
            return
        new_ref, old_ref = controller_of(new), controller_of(old)
        if old_ref is not None and (new_ref is None or new_ref.get("uid") != old_ref.get("uid")):
            rs = self._resolve(namespace, old_ref)
            if rs is not None:
                self.queue.add(_key(rs))
        if new_ref is not None:
            rs = self._resolve(namespace, new_ref)
            if rs is None:
                return
            self.queue.add(_key(rs))
            min_ready = _int((rs.get("spec") or {}).get("minReadySeconds"))
            if min_ready > 0 and not podutil.is_ready(old) and podutil.is_ready(new):
                self.queue.add_after(_key(rs), min_ready + 1)
            return
        if labels_changed or old_ref is not None:
            for rs in self._matching_sets(new):
                self.queue.add(_key(rs))

    def _pod_deleted(self, pod: Obj) -> None:
        ref = controller_of(pod)
        if ref is None:
            return
        rs = self._resolve(str(_md(pod).get("namespace") or ""), ref)
        if rs is None:
            return
        self.expectations.deletion_observed(_key(rs), podutil.pod_key(pod))
        self.queue.add(_key(rs))

    # -- one sync ---------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        rs = self.sets.get(key)
        if rs is None:
            self.expectations.delete(key)
            return
        needs_sync = self.expectations.satisfied(key)
        namespace = str(_md(rs).get("namespace") or "")
        active = [p for p in self.pods.list(namespace) if podutil.is_active(p)]
        manager = ControllerRefManager(
            self.api, rs, self.kind.api_version, self.kind.kind,
            matches=lambda obj: self.kind.selects(rs, _labels(obj)),
            path_of=lambda obj: resource_path("pods", namespace, str(_md(obj).get("name"))),
            fresh_owner=lambda: self.api.get(self.kind.path(namespace, str(_md(rs).get("name")))))
        pods = await manager.claim(active)
        error: StatusError | ApiUnavailable | None = None
        reason = ""
        if needs_sync and not _md(rs).get("deletionTimestamp"):
            try:
                reason = await self.manage_replicas(pods, rs, key)
            except (StatusError, ApiUnavailable) as err:
                error = err
                replicas = _int((rs.get("spec") or {}).get("replicas"))
                reason = "FailedCreate" if len(pods) < replicas else "FailedDelete"
        now = self.clock()
        text = None if error is None else str(getattr(error, "message", error))
        status = calculate_status(rs, pods, text, reason, now)
        await self._update_status(rs, status)
        min_ready = _int((rs.get("spec") or {}).get("minReadySeconds"))
        if error is None and min_ready > 0:
            waits = [w for p in pods
                     if (w := podutil.available_in(p, min_ready, now)) is not None and w > 0]
            if waits:
                self.queue.add_after(key, min(waits) + 0.1)
        if error is not None:
            raise error

    async def manage_replicas(self, pods: list[Obj], rs: Obj, key: str) -> str:
        """Create or delete pods towards `spec.replicas` (`manageReplicas`)."""
        spec = rs.get("spec") or {}
        diff = len(pods) - _int(spec.get("replicas"))
        if diff < 0:
            count = min(-diff, self.burst_replicas)
            self.expectations.expect_creations(key, count)
            created, error = await slow_start(count, lambda _: self._create_pod(rs))
            if error is not None:
                for _ in range(count - created):
                    self.expectations.creation_observed(key)
                raise error
            return ""
        if diff > 0:
            count = min(diff, self.burst_replicas)
            related = self._related_pods(rs, pods)
            doomed = podutil.pods_to_delete(pods, related, count, self.clock())
            self.expectations.expect_deletions(key, [podutil.pod_key(p) for p in doomed])
            results = await asyncio.gather(*(self._delete_pod(rs, p) for p in doomed),
                                           return_exceptions=True)
            first: BaseException | None = None
            for pod, result in zip(doomed, results, strict=True):
                if isinstance(result, BaseException):
                    self.expectations.deletion_observed(key, podutil.pod_key(pod))
                    if not (isinstance(result, StatusError) and result.code == 404) and \
                            first is None:
                        first = result
            if first is not None:
                raise first
        return ""

    def _related_pods(self, rs: Obj, pods: list[Obj]) -> list[Obj]:
        """The pods of this ReplicaSet and of its siblings (the ReplicaSets of its
        controller, a Deployment), for the ranking of pods on the same node."""
        owner = controller_of(rs)
        if owner is None:
            return pods
        namespace = _md(rs).get("namespace")
        in_namespace = str(namespace or "")
        siblings = {_md(s).get("uid") for s in self.sets.list(in_namespace)
                    if (controller_of(s) or {}).get("uid") == owner.get("uid")}
        return [p for p in self.pods.list(in_namespace)
                if podutil.is_active(p) and (controller_of(p) or {}).get("uid") in siblings]

    async def _create_pod(self, rs: Obj) -> None:
        namespace = str(_md(rs).get("namespace") or "")
        ref = {"apiVersion": self.kind.api_version, "kind": self.kind.kind,
               "name": _md(rs).get("name"), "uid": _md(rs).get("uid"),
               "controller": True, "blockOwnerDeletion": True}
        pod = podutil.pod_from_template((rs.get("spec") or {}).get("template") or {}, rs, ref)
        try:
            created = await self.api.create(resource_path("pods", namespace), pod)
        except StatusError as err:
            self.events.post(rs, "Warning", "FailedCreate", f"Error creating: {err.message}")
            raise
        self.events.post(rs, "Normal", "SuccessfulCreate",
                    f"Created pod: {_md(created).get('name')}")

    async def _delete_pod(self, rs: Obj, pod: Mapping[str, Any]) -> None:
        name = str(_md(pod).get("name"))
        try:
            await self.api.delete(resource_path("pods", str(_md(pod).get("namespace")), name))
        except StatusError as err:
            if err.code != 404:
                self.events.post(rs, "Warning", "FailedDelete", f"Error deleting: {err.message}")
            raise
        self.events.post(rs, "Normal", "SuccessfulDelete", f"Deleted pod: {name}")

    async def _update_status(self, rs: Obj, status: dict[str, Any]) -> None:
        """Write `status` unless the stored one says the same; one retry on a conflict
        with a fresh read (`updateReplicaSetStatus`)."""
        current = rs
        for attempt in range(2):
            if (current.get("status") or {}) == status:
                return
            body = copy.deepcopy(current)
            body["status"] = status
            md = _md(current)
            try:
                await self.api.update(self.kind.path(str(md.get("namespace")),
                                                     str(md.get("name")), "status"), body)
                return
            except StatusError as err:
                if err.code == 404:
                    return
                if err.code != 409 or attempt:
                    raise
                current = await self.api.get(self.kind.path(str(md.get("namespace")),
                                                            str(md.get("name"))))

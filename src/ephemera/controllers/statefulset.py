"""The StatefulSet controller, as upstream's `pkg/controller/statefulset` in its main lines:
pods with stable names `<set>-<ordinal>` (from `spec.ordinals.start`), labelled
`statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index` and
`controller-revision-hash` (the revision's name, as upstream), with `hostname` the pod's name
and `subdomain` the set's `serviceName`; each template is a ControllerRevision
(`<set>-<hash>`) and the status carries `currentRevision` and `updateRevision`; revisions
neither of these nor any pod's are deleted beyond `revisionHistoryLimit`, oldest first.

- `OrderedReady`: one pod at a time, in ordinal order, each only once every lower one is
  Running and Ready; scale-down from the highest ordinal, one at a time, only while the
  others are healthy. `Parallel`: every missing pod made and every surplus one deleted at once.
- A pod that Failed or Succeeded is deleted and made again under its name.
- `RollingUpdate`: once every replica exists and is ready, the pod of the highest ordinal not
  at the update revision (and not below `partition`) is deleted, to be made again from the new
  template; one at a time. `OnDelete`: a pod is made from the new template only when it is
  deleted.

Events: `SuccessfulCreate` (`create Pod web-0 in StatefulSet web successful`),
`SuccessfulDelete`. Not done: PersistentVolumeClaims from `volumeClaimTemplates` (ephemera
serves no PVCs; the pods get upstream's claim volumes, which no node mounts, and creating
such a set answers a `Warning`), `minReadySeconds` beyond availability counting,
`maxUnavailable` above 1."""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ephemera.api import labelselector
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, EventRecorder, Informer, resource_path
from ephemera.controllers import deploymentutil as du
from ephemera.controllers import podutil
from ephemera.controllers.controllerref import ControllerRefManager, controller_of
from ephemera.controllers.history import (
    HASH_LABEL,
    delete_revisions,
    ensure_revision,
    owned_revisions,
    statefulset_history_to_delete,
)
from ephemera.controllers.objects import int_or_zero as _int
from ephemera.controllers.objects import metadata as _md
from ephemera.controllers.objects import queue_key as _key
from ephemera.controllers.runner import QueueController
from ephemera.pods.workloads import DEFAULT_REVISION_HISTORY_LIMIT

__all__ = ["StatefulSetController"]

log = logging.getLogger("ephemera.controllers.statefulset")

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
WORKERS = 2
Obj = dict[str, Any]


def ordinal_of(set_name: str, pod: Mapping[str, Any]) -> int | None:
    match = re.fullmatch(rf"{re.escape(set_name)}-(\d+)", str(_md(pod).get("name") or ""))
    return int(match.group(1)) if match else None


def _healthy(pod: Mapping[str, Any]) -> bool:
    """`isRunningAndReady` and not terminating."""
    return ((pod.get("status") or {}).get("phase") == "Running" and podutil.is_ready(pod)
            and not _md(pod).get("deletionTimestamp"))


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def _sts_path(namespace: str, name: str | None = None, sub: str | None = None) -> str:
    return resource_path("statefulsets", namespace, name, sub, group="apps")


class StatefulSetController(QueueController):
    def __init__(self, api: ApiClient, sets: Informer, pods: Informer, revisions: Informer, *,
                 recorder: EventRecorder | None = None, workers: int = WORKERS,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        super().__init__(api, kind="StatefulSet", api_version="apps/v1",
                         component="statefulset-controller", informers=(sets, pods, revisions),
                         log=log, workers=workers, recorder=recorder, clock=clock)
        self.sets = sets
        self.pods = pods
        self.revisions = revisions
        sets.add_handler(on_add=self._enqueue, on_update=lambda o, n: self._enqueue(n))
        pods.add_handler(on_add=self._pod_changed, on_update=lambda o, n: self._pod_changed(n),
                         on_delete=self._pod_changed)

    def _enqueue(self, sts: Obj) -> None:
        self.queue.add(_key(sts))

    def _pod_changed(self, pod: Obj) -> None:
        ref = controller_of(pod)
        if ref is not None:
            if ref.get("kind") == "StatefulSet":
                self.queue.add(f"{_md(pod).get('namespace')}/{ref.get('name')}")
            return
        for sts in self.sets.list():
            if _md(sts).get("namespace") == _md(pod).get("namespace"):
                self._enqueue(sts)

    # -- one sync ---------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        sts = self.sets.get(key)
        if sts is None:
            return
        namespace, name = str(_md(sts).get("namespace")), str(_md(sts).get("name"))
        spec = sts.get("spec") or {}
        selector = spec.get("selector")
        manager = ControllerRefManager(
            self.api, sts, "apps/v1", "StatefulSet",
            matches=lambda obj: not labelselector.is_empty(selector)
            and labelselector.matches(selector, {str(k): str(v) for k, v in
                                                 (_md(obj).get("labels") or {}).items()}),
            path_of=lambda obj: resource_path("pods", namespace, str(_md(obj).get("name"))),
            fresh_owner=lambda: self.api.get(_sts_path(namespace, name)))
        candidates = self.pods.list(namespace)
        pods = await manager.claim(candidates)
        update_revision, revisions = await self._ensure_revision(sts)
        status = sts.get("status") or {}
        current_revision = str(status.get("currentRevision") or update_revision)
        if not _md(sts).get("deletionTimestamp"):
            await self._update_set(sts, pods, current_revision, update_revision, revisions)
        await self._update_status(sts, pods, current_revision, update_revision)
        await self._truncate_history(sts, pods, current_revision, update_revision)

    async def _truncate_history(self, sts: Obj, pods: list[Obj], current_revision: str,
                                update_revision: str) -> None:
        """`truncateHistory`: the revisions neither current, nor the update's, nor any
        pod's, beyond `revisionHistoryLimit` (10 by default), oldest first."""
        limit = (sts.get("spec") or {}).get("revisionHistoryLimit")
        live = {current_revision, update_revision,
                *(str((_md(p).get("labels") or {}).get(HASH_LABEL)) for p in pods)}
        doomed = statefulset_history_to_delete(
            owned_revisions(self.revisions.list(), sts), live,
            limit if isinstance(limit, int) else DEFAULT_REVISION_HISTORY_LIMIT)
        await delete_revisions(self.api, doomed)

    async def _update_set(self, sts: Obj, pods: list[Obj], current_revision: str,
                          update_revision: str, revisions: dict[str, Obj]) -> None:
        spec = sts.get("spec") or {}
        name = str(_md(sts).get("name"))
        start = _int((spec.get("ordinals") or {}).get("start"))
        replicas = _int(spec.get("replicas"))
        monotonic = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
        strategy = spec.get("updateStrategy") or {}
        partition = _int((strategy.get("rollingUpdate") or {}).get("partition"))
        valid: dict[int, Obj] = {}
        condemned: list[tuple[int, Obj]] = []
        for pod in pods:
            ordinal = ordinal_of(name, pod)
            if ordinal is not None and start <= ordinal < start + replicas:
                valid[ordinal] = pod
            else:
                condemned.append((ordinal if ordinal is not None else -1, pod))
        condemned.sort(key=lambda item: item[0], reverse=True)
        for ordinal in range(start, start + replicas):
            found = valid.get(ordinal)
            if found is not None and _finished(found) and \
                    not _md(found).get("deletionTimestamp"):
                await self._delete(sts, found)
                if monotonic:
                    return
                continue
            if found is None:
                use_current = (strategy.get("type") == "RollingUpdate" and ordinal - start
                               < partition and current_revision in revisions)
                revision = current_revision if use_current else update_revision
                await self._create(sts, ordinal, revision, revisions[revision])
                if monotonic:
                    return
                continue
            if monotonic and not _healthy(found):
                return
        for _, pod in condemned:
            if _md(pod).get("deletionTimestamp"):
                if monotonic:
                    return
                continue
            if monotonic and not all(_healthy(p) for p in pods if p is not pod):
                return
            await self._delete(sts, pod)
            if monotonic:
                return
        if strategy.get("type") != "RollingUpdate":
            return
        if not all(_healthy(valid[o]) for o in valid) or len(valid) < replicas:
            return
        for ordinal in range(start + replicas - 1, start + partition - 1, -1):
            pod = valid[ordinal]
            if (_md(pod).get("labels") or {}).get(HASH_LABEL) != update_revision:
                await self._delete(sts, pod)
                return

    async def _create(self, sts: Obj, ordinal: int, revision: str, template: Mapping[str, Any]
                      ) -> None:
        namespace, set_name = str(_md(sts).get("namespace")), str(_md(sts).get("name"))
        spec = sts.get("spec") or {}
        ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": set_name,
               "uid": _md(sts).get("uid"), "controller": True, "blockOwnerDeletion": True}
        pod = podutil.pod_from_template(template, sts, ref)
        pod_name = f"{set_name}-{ordinal}"
        md = pod["metadata"]
        md.pop("generateName", None)
        md["name"] = pod_name
        md.setdefault("labels", {}).update({HASH_LABEL: revision, POD_NAME_LABEL: pod_name,
                                            POD_INDEX_LABEL: str(ordinal)})
        pod["spec"]["hostname"] = pod_name
        if spec.get("serviceName"):
            pod["spec"]["subdomain"] = spec["serviceName"]
        volumes = [v for v in pod["spec"].get("volumes") or []]
        for claim in spec.get("volumeClaimTemplates") or []:
            claim_name = str(_md(claim).get("name") or "")
            volumes = [v for v in volumes if v.get("name") != claim_name]
            volumes.append({"name": claim_name, "persistentVolumeClaim": {
                "claimName": f"{claim_name}-{pod_name}"}})
        if volumes:
            pod["spec"]["volumes"] = volumes
        try:
            await self.api.create(resource_path("pods", namespace), pod)
        except StatusError as err:
            if err.code == 409:
                return  # the old pod of that name is still being deleted
            self.events.post(sts, "Warning", "FailedCreate",
                        f"create Pod {pod_name} in StatefulSet {set_name} failed error: "
                        f"{err.message}")
            raise
        self.events.post(sts, "Normal", "SuccessfulCreate",
                    f"create Pod {pod_name} in StatefulSet {set_name} successful")

    async def _delete(self, sts: Obj, pod: Obj) -> None:
        pod_name, set_name = str(_md(pod).get("name")), str(_md(sts).get("name"))
        try:
            await self.api.delete(resource_path("pods", str(_md(pod).get("namespace")),
                                                pod_name))
        except StatusError as err:
            if err.code == 404:
                return
            self.events.post(sts, "Warning", "FailedDelete",
                        f"delete Pod {pod_name} in StatefulSet {set_name} failed error: "
                        f"{err.message}")
            raise
        self.events.post(sts, "Normal", "SuccessfulDelete",
                    f"delete Pod {pod_name} in StatefulSet {set_name} successful")

    async def _ensure_revision(self, sts: Obj) -> tuple[str, dict[str, Obj]]:
        """The update revision (the current template's hash) and the template of every
        revision the set has, kept as ControllerRevisions."""
        template = (sts.get("spec") or {}).get("template") or {}
        collision = (sts.get("status") or {}).get("collisionCount") or None
        # upstream names a StatefulSet's revisions (label and status) by the revision's name
        current = f"{_md(sts).get('name')}-{du.compute_hash(template, collision)}"
        owned = owned_revisions(self.revisions.list(), sts)
        templates: dict[str, Obj] = {}
        for r in owned:
            h = (_md(r).get("labels") or {}).get(HASH_LABEL)
            t = copy.deepcopy((((r.get("data") or {}).get("spec") or {}).get("template")) or {})
            t.pop("$patch", None)
            if h:
                templates[str(h)] = t
        await ensure_revision(self.api, sts, "StatefulSet", owned, current, current, template)
        templates.setdefault(current, copy.deepcopy(dict(template)))
        return current, templates

    async def _update_status(self, sts: Obj, pods: list[Obj], current_revision: str,
                             update_revision: str) -> None:
        live = [p for p in pods if not _md(p).get("deletionTimestamp")]
        min_ready = _int((sts.get("spec") or {}).get("minReadySeconds"))
        now = self.clock()
        current = sum(1 for p in live
                      if (_md(p).get("labels") or {}).get(HASH_LABEL) == current_revision)
        updated = sum(1 for p in live
                      if (_md(p).get("labels") or {}).get(HASH_LABEL) == update_revision)
        replicas = _int((sts.get("spec") or {}).get("replicas"))
        if updated == replicas == len(live):
            current_revision, current = update_revision, updated
        status: dict[str, Any] = {  # replicas and availableReplicas are never omitted
            "replicas": len(live), "availableReplicas": 0,
            "currentRevision": current_revision, "updateRevision": update_revision}
        generation = _int(_md(sts).get("generation"))
        if generation:
            status["observedGeneration"] = generation
        for name, value in (("readyReplicas", sum(1 for p in live if podutil.is_ready(p))),
                            ("currentReplicas", current), ("updatedReplicas", updated),
                            ("availableReplicas", sum(1 for p in live if podutil.is_available(
                                p, min_ready, now)))):
            if value:
                status[name] = value
        old = sts.get("status") or {}
        status["collisionCount"] = _int(old.get("collisionCount"))
        if "conditions" in old:
            status["conditions"] = old["conditions"]
        await self.write_status(sts, status, _sts_path(str(_md(sts).get("namespace")),
                                                       str(_md(sts).get("name")), "status"))

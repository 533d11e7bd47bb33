"""The Deployment controller, as upstream's `pkg/controller/deployment`: a Deployment's
ReplicaSets are claimed by its selector (`ControllerRefManager`), the one whose template is
the Deployment's is the new one (`<name>-<pod-template-hash>`, created when missing, with
the next revision), and each sync does one step:

- a Deployment being deleted only has its status written;
- a paused one, or one whose `spec.replicas` changed (a scaling event), is scaled
  (proportionally across its active ReplicaSets while a rollout is under way) without a
  rollout; a paused one gets `Progressing` `DeploymentPaused`, and `DeploymentResumed` back;
- `Recreate`: old ReplicaSets to 0, then, once no old pod is left, the new one to
  `spec.replicas`;
- `RollingUpdate`: the new ReplicaSet up to `replicas + maxSurge` pods in all, then old ones
  down (unhealthy pods first) while `replicas - maxUnavailable` stay available, counting
  what the ReplicaSets' status says is available;
- status: counts summed over the ReplicaSets, `Available` (`MinimumReplicasAvailable`) and
  `Progressing` (`NewReplicaSetCreated`, `FoundNewReplicaSet`, `ReplicaSetUpdated`,
  `NewReplicaSetAvailable`, `ProgressDeadlineExceeded` after `progressDeadlineSeconds`
  without progress); old ReplicaSets beyond `revisionHistoryLimit` with no pods are deleted.

Events: `ScalingReplicaSet` (`Scaled up replica set web-abc from 1 to 3`). Rollback is what
`kubectl rollout undo` does client-side: it writes an old ReplicaSet's template back, which
makes that ReplicaSet the new one with the next revision. The template hash is FNV-1a of the
template's JSON (`deploymentutil.compute_hash`), not upstream's value for the same template."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ephemera.api import labelselector
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, EventRecorder, Informer, resource_path
from ephemera.controllers import deploymentutil as du
from ephemera.controllers.controllerref import ControllerRefManager, controller_of
from ephemera.controllers.objects import labels as _labels
from ephemera.controllers.objects import metadata as _md
from ephemera.controllers.objects import queue_key as _key
from ephemera.controllers.runner import QueueController

__all__ = ["DeploymentController"]

log = logging.getLogger("ephemera.controllers.deployment")

WORKERS = 5
Obj = dict[str, Any]


def _deploy_path(namespace: str, name: str | None = None, sub: str | None = None) -> str:
    return resource_path("deployments", namespace, name, sub, group="apps")


def _rs_path(namespace: str, name: str | None = None) -> str:
    return resource_path("replicasets", namespace, name, group="apps")


def _selects(deployment: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    selector = (deployment.get("spec") or {}).get("selector")
    if not isinstance(selector, dict) or labelselector.is_empty(selector):
        return False
    return labelselector.matches(selector, labels)


class DeploymentController(QueueController):
    """Runs until cancelled (`run()`); the informers are the caller's to run."""

    def __init__(self, api: ApiClient, deployments: Informer, sets: Informer, pods: Informer, *,
                 recorder: EventRecorder | None = None, workers: int = WORKERS,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        super().__init__(api, kind="Deployment", api_version="apps/v1",
                         component="deployment-controller",
                         informers=(deployments, sets, pods), log=log, workers=workers,
                         recorder=recorder, clock=clock)
        self.deployments = deployments
        self.sets = sets
        self.pods = pods
        deployments.add_handler(on_add=self._enqueue,
                                on_update=lambda old, new: self._enqueue(new),
                                on_delete=self._enqueue)
        sets.add_handler(on_add=self._rs_changed,
                         on_update=self._rs_updated,
                         on_delete=self._rs_changed)
        pods.add_handler(on_delete=self._pod_deleted)

    # -- handlers ---------------------------------------------------------------------------

    def _enqueue(self, deployment: Obj) -> None:
        self.queue.add(_key(deployment))

    def _owner(self, obj: Mapping[str, Any], kind: str, informer: Informer) -> Obj | None:
        ref = controller_of(obj)
        if ref is None or ref.get("kind") != kind:
            return None
        owner = informer.get(f"{_md(obj).get('namespace')}/{ref.get('name')}")
        if owner is None or _md(owner).get("uid") != ref.get("uid"):
            return None
        return owner

    def _rs_changed(self, rs: Obj) -> None:
        owner = self._owner(rs, "Deployment", self.deployments)
        if owner is not None:
            self._enqueue(owner)
            return
        if controller_of(rs) is None:
            namespace = _md(rs).get("namespace")
            for d in self.deployments.list():
                if _md(d).get("namespace") == namespace and _selects(d, _labels(rs)):
                    self._enqueue(d)

    def _rs_updated(self, old: Obj, new: Obj) -> None:
        old_owner = self._owner(old, "Deployment", self.deployments)
        if old_owner is not None and (controller_of(new) or {}).get("uid") != \
                _md(old_owner).get("uid"):
            self._enqueue(old_owner)
        self._rs_changed(new)

    def _pod_deleted(self, pod: Obj) -> None:
        """A Recreate rollout waits for the old pods to be gone."""
        rs = self._owner(pod, "ReplicaSet", self.sets)
        if rs is None:
            return
        d = self._owner(rs, "Deployment", self.deployments)
        if d is not None and ((d.get("spec") or {}).get("strategy") or {}).get(
                "type") == "Recreate":
            self._enqueue(d)

    # -- one sync ---------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        cached = self.deployments.get(key)
        if cached is None:
            return
        d = copy.deepcopy(cached)
        namespace = str(_md(d).get("namespace") or "")
        name = str(_md(d).get("name") or "")
        if labelselector.is_empty((d.get("spec") or {}).get("selector")):
            if (d.get("status") or {}).get("observedGeneration") != _md(d).get("generation"):
                status = dict(d.get("status") or {})
                status["observedGeneration"] = _md(d).get("generation")
                await self._write_status(d, status)
            return
        manager = ControllerRefManager(
            self.api, d, "apps/v1", "Deployment",
            matches=lambda obj: _selects(d, _labels(obj)),
            path_of=lambda obj: _rs_path(namespace, str(_md(obj).get("name"))),
            fresh_owner=lambda: self.api.get(_deploy_path(namespace, name)))
        candidates = self.sets.list(namespace)
        rs_list = await manager.claim(candidates)
        if _md(d).get("deletionTimestamp"):
            await self._sync_status_only(d, rs_list)
            return
        await self._check_paused_conditions(d)
        if (d.get("spec") or {}).get("paused"):
            await self._sync_scale(d, rs_list)
            return
        if await self._is_scaling_event(d, rs_list):
            await self._sync_scale(d, rs_list)
            return
        if ((d.get("spec") or {}).get("strategy") or {}).get("type") == "Recreate":
            await self._rollout_recreate(d, rs_list)
        else:
            await self._rollout_rolling(d, rs_list)

    # -- new and old replica sets -----------------------------------------------------------

    async def _all_replica_sets(self, d: Obj, rs_list: list[Obj], create: bool
                                ) -> tuple[Obj | None, list[Obj]]:
        """`getAllReplicaSetsAndSyncRevision`."""
        old = du.find_old_replica_sets(d, rs_list)
        new = await self._new_replica_set(d, rs_list, old, create)
        return new, old

    async def _new_replica_set(self, d: Obj, rs_list: list[Obj], old: list[Obj], create: bool
                               ) -> Obj | None:
        existing = du.find_new_replica_set(d, rs_list)
        new_revision = str(du.max_revision(old) + 1)
        namespace = str(_md(d).get("namespace"))
        now = self.clock()
        if existing is not None:
            rs = copy.deepcopy(existing)
            changed = du.set_new_replica_set_annotations(d, rs, new_revision, True)
            min_ready = (d.get("spec") or {}).get("minReadySeconds") or 0
            if changed or (rs.get("spec") or {}).get("minReadySeconds", 0) != min_ready:
                rs["spec"]["minReadySeconds"] = min_ready
                rs = await self.api.update(_rs_path(namespace, str(_md(rs).get("name"))), rs)
            needs_update = self._set_revision(d, du.revision(rs))
            status = d.setdefault("status", {})
            if du.has_progress_deadline(d) and du.get_condition(status, "Progressing") is None:
                du.set_condition(status, du.new_condition(
                    "Progressing", "True", du.FOUND_NEW_RS,
                    f'Found new replica set "{_md(rs).get("name")}"', now))
                needs_update = True
            if needs_update:
                await self._write_status(d, status)
            return rs
        if not create:
            return None
        template = copy.deepcopy((d.get("spec") or {}).get("template") or {})
        collision = (d.get("status") or {}).get("collisionCount")
        pod_hash = du.compute_hash(template, collision)
        tmd = template.setdefault("metadata", {})
        tmd["labels"] = {**(tmd.get("labels") or {}), du.POD_TEMPLATE_HASH_LABEL: pod_hash}
        selector = copy.deepcopy((d.get("spec") or {}).get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}),
                                   du.POD_TEMPLATE_HASH_LABEL: pod_hash}
        rs_name = f"{_md(d).get('name')}-{pod_hash}"
        new_rs: Obj = {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": rs_name, "namespace": namespace,
                         "labels": dict(tmd["labels"]),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                              "name": _md(d).get("name"),
                                              "uid": _md(d).get("uid"), "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {"replicas": 0,
                     "minReadySeconds": (d.get("spec") or {}).get("minReadySeconds") or 0,
                     "selector": selector, "template": template}}
        all_sets = [*old]
        new_rs["spec"]["replicas"] = du.new_rs_new_replicas(d, all_sets, new_rs)
        du.set_new_replica_set_annotations(d, new_rs, new_revision, False)
        already_exists = False
        try:
            created = await self.api.create(_rs_path(namespace), new_rs)
        except StatusError as err:
            if err.code != 409 or err.reason != "AlreadyExists":
                if du.has_progress_deadline(d):
                    status = d.setdefault("status", {})
                    du.set_condition(status, du.new_condition(
                        "Progressing", "False", du.FAILED_RS_CREATE,
                        f'Failed to create new replica set "{rs_name}": {err.message}', now))
                    await self._write_status(d, status)
                self.events.post(d, "Warning", du.FAILED_RS_CREATE,
                            f'Failed to create new replica set "{rs_name}": {err.message}')
                raise
            current = await self.api.get(_rs_path(namespace, rs_name))
            ref = controller_of(current)
            if ref is not None and ref.get("uid") == _md(d).get("uid") and \
                    du.equal_ignore_hash((current.get("spec") or {}).get("template") or {},
                                         (d.get("spec") or {}).get("template") or {}):
                created, already_exists = current, True
            else:
                status = d.setdefault("status", {})
                status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
                await self._write_status(d, status)
                raise
        if not already_exists and du.replicas(created) > 0:
            self.events.post(d, "Normal", "ScalingReplicaSet",
                        f"Scaled up replica set {rs_name} from 0 to {du.replicas(created)}")
        needs_update = self._set_revision(d, int(new_revision))
        if not already_exists and du.has_progress_deadline(d):
            status = d.setdefault("status", {})
            du.set_condition(status, du.new_condition(
                "Progressing", "True", du.NEW_RS_CREATED,
                f'Created new replica set "{rs_name}"', now))
            needs_update = True
        if needs_update:
            await self._write_status(d, d.setdefault("status", {}))
        return created

    @staticmethod
    def _set_revision(d: Obj, rev: int) -> bool:
        """`SetDeploymentRevision`."""
        annotations = d.setdefault("metadata", {}).setdefault("annotations", {})
        if annotations.get(du.REVISION_ANNOTATION) != str(rev):
            annotations[du.REVISION_ANNOTATION] = str(rev)
            return True
        return False

    # -- scaling ----------------------------------------------------------------------------

    async def _scale_rs(self, rs: Obj, new_scale: int, d: Obj, operation: str) -> Obj:
        size_changed = du.replicas(rs) != new_scale
        surge = du.max_surge_of(d)
        annotations_changed = du.replicas_annotations_need_update(
            rs, du.replicas(d), du.replicas(d) + surge)
        if not size_changed and not annotations_changed:
            return rs
        old_scale = du.replicas(rs)
        body = copy.deepcopy(rs)
        body.setdefault("spec", {})["replicas"] = new_scale
        du.set_replicas_annotations(body, du.replicas(d), du.replicas(d) + surge)
        md = _md(rs)
        updated = await self.api.update(_rs_path(str(md.get("namespace")), str(md.get("name"))),
                                        body)
        if size_changed:
            self.events.post(d, "Normal", "ScalingReplicaSet",
                        f"Scaled {operation} replica set {md.get('name')} from {old_scale} "
                        f"to {new_scale}")
        return updated

    async def _scale_and_record(self, rs: Obj, new_scale: int, d: Obj) -> tuple[bool, Obj]:
        if du.replicas(rs) == new_scale:
            return False, rs
        operation = "up" if du.replicas(rs) < new_scale else "down"
        return True, await self._scale_rs(rs, new_scale, d, operation)

    async def _is_scaling_event(self, d: Obj, rs_list: list[Obj]) -> bool:
        new, old = await self._all_replica_sets(d, rs_list, False)
        for rs in du.filter_active([*old, new]):
            desired = du.desired_replicas_annotation(rs)
            if desired is not None and desired != du.replicas(d):
                return True
        return False

    async def _scale(self, d: Obj, new: Obj | None, old: list[Obj]) -> None:
        target = du.find_active_or_latest(new, old)
        if target is not None:
            if du.replicas(target) != du.replicas(d):
                await self._scale_and_record(target, du.replicas(d), d)
            return
        if du.is_saturated(d, new):
            for rs in du.filter_active(old):
                await self._scale_and_record(rs, 0, d)
            return
        if not du.is_rolling_update(d):
            return
        all_sets = du.filter_active([*old, new])
        allowed = du.replicas(d) + du.max_surge_of(d) if du.replicas(d) > 0 else 0
        to_add = allowed - du.replica_count(all_sets)
        operation = ""
        if to_add > 0:
            all_sets.sort(key=lambda rs: (-du.replicas(rs), tuple(
                -ord(c) for c in str(_md(rs).get("creationTimestamp") or ""))))
            operation = "up"
        elif to_add < 0:
            all_sets.sort(key=lambda rs: (-du.replicas(rs),
                                          str(_md(rs).get("creationTimestamp") or "")))
            operation = "down"
        added = 0
        sizes: dict[str, int] = {}
        for rs in all_sets:
            if to_add != 0:
                share = du.proportion(rs, d, to_add, added)
                sizes[str(_md(rs).get("name"))] = du.replicas(rs) + share
                added += share
            else:
                sizes[str(_md(rs).get("name"))] = du.replicas(rs)
        for i, rs in enumerate(all_sets):
            name = str(_md(rs).get("name"))
            if i == 0 and to_add != 0:
                sizes[name] = max(0, sizes[name] + to_add - added)
            await self._scale_rs(rs, sizes[name], d, operation)

    async def _sync_scale(self, d: Obj, rs_list: list[Obj]) -> None:
        """`sync`: scale without a rollout (paused, or a scaling event)."""
        new, old = await self._all_replica_sets(d, rs_list, False)
        await self._scale(d, new, old)
        if (d.get("spec") or {}).get("paused"):
            await self._cleanup(d, old)
        new, old = await self._all_replica_sets(d, self._claimed(d), False)
        await self._sync_deployment_status(d, [*old, new], new)

    def _claimed(self, d: Obj) -> list[Obj]:
        """The ReplicaSets this Deployment controls, as the cache has them now."""
        uid = _md(d).get("uid")
        namespace = _md(d).get("namespace")
        return [rs for rs in self.sets.list(str(namespace or ""))
                if (controller_of(rs) or {}).get("uid") == uid]

    # -- rollouts ---------------------------------------------------------------------------

    async def _rollout_rolling(self, d: Obj, rs_list: list[Obj]) -> None:
        new, old = await self._all_replica_sets(d, rs_list, True)
        assert new is not None
        all_sets: list[Obj] = [*old, new]
        scaled, new = await self._reconcile_new(all_sets, new, d)
        all_sets = [*old, new]
        if scaled:
            await self._sync_rollout_status(all_sets, new, d)
            return
        if await self._reconcile_old(all_sets, du.filter_active(old), new, d):
            await self._sync_rollout_status(all_sets, new, d)
            return
        status = du.calculate_status(all_sets, new, d, self.clock())
        if du.deployment_complete(d, status):
            await self._cleanup(d, old)
        await self._sync_rollout_status(all_sets, new, d)

    async def _reconcile_new(self, all_sets: list[Obj], new: Obj, d: Obj) -> tuple[bool, Obj]:
        if du.replicas(new) == du.replicas(d):
            return False, new
        if du.replicas(new) > du.replicas(d):
            return await self._scale_and_record(new, du.replicas(d), d)
        count = du.new_rs_new_replicas(d, all_sets, new)
        return await self._scale_and_record(new, count, d)

    async def _reconcile_old(self, all_sets: list[Obj], old: list[Obj], new: Obj, d: Obj
                             ) -> bool:
        if du.replica_count(old) == 0:
            return False
        all_count = du.replica_count(all_sets)
        min_available = du.replicas(d) - du.max_unavailable_of(d)
        new_unavailable = du.replicas(new) - du.status_int(new, "availableReplicas")
        max_scaled_down = all_count - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False
        old, cleaned = await self._cleanup_unhealthy(old, d, max_scaled_down)
        scaled = await self._scale_down_old(old, [*old, new], d)
        return cleaned + scaled > 0

    async def _cleanup_unhealthy(self, old: list[Obj], d: Obj, max_cleanup: int
                                 ) -> tuple[list[Obj], int]:
        total = 0
        out: list[Obj] = []
        for rs in du.by_creation(old):
            if du.replicas(rs) == 0 or total >= max_cleanup:
                out.append(rs)
                continue
            unhealthy = du.replicas(rs) - du.status_int(rs, "availableReplicas")
            if unhealthy <= 0:
                out.append(rs)
                continue
            down = min(max_cleanup - total, unhealthy)
            _, updated = await self._scale_and_record(rs, du.replicas(rs) - down, d)
            total += down
            out.append(updated)
        return out, total

    async def _scale_down_old(self, old: list[Obj], all_sets: list[Obj], d: Obj) -> int:
        min_available = du.replicas(d) - du.max_unavailable_of(d)
        available = du.available_lower_bound(all_sets)
        if available <= min_available:
            return 0
        to_scale = available - min_available
        total = 0
        for rs in du.by_creation(old):
            if total >= to_scale:
                break
            if du.replicas(rs) == 0:
                continue
            down = min(du.replicas(rs), to_scale - total)
            await self._scale_and_record(rs, du.replicas(rs) - down, d)
            total += down
        return total

    async def _rollout_recreate(self, d: Obj, rs_list: list[Obj]) -> None:
        new, old = await self._all_replica_sets(d, rs_list, False)
        all_sets: Sequence[Obj | None] = [*old, new]
        scaled = False
        for rs in du.filter_active(old):
            changed, _ = await self._scale_and_record(rs, 0, d)
            scaled = scaled or changed
        if scaled:
            await self._sync_rollout_status(all_sets, new, d)
            return
        if self._old_pods_running(new, old):
            await self._sync_rollout_status(all_sets, new, d)
            return
        if new is None:
            new, old = await self._all_replica_sets(d, rs_list, True)
            all_sets = [*old, new]
        assert new is not None
        _, new = await self._scale_and_record(new, du.replicas(d), d)
        all_sets = [*old, new]
        status = du.calculate_status(all_sets, new, d, self.clock())
        if du.deployment_complete(d, status):
            await self._cleanup(d, old)
        await self._sync_rollout_status(all_sets, new, d)

    def _old_pods_running(self, new: Obj | None, old: list[Obj]) -> bool:
        if du.actual_replica_count(old) > 0:
            return True
        old_uids = {_md(rs).get("uid") for rs in old}
        namespace = _md(old[0]).get("namespace") if old else None
        for pod in self.pods.list():
            if _md(pod).get("namespace") != namespace:
                continue
            if (controller_of(pod) or {}).get("uid") not in old_uids:
                continue
            if (pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded"):
                return True
        return False

    async def _cleanup(self, d: Obj, old: list[Obj]) -> None:
        """`cleanupDeployment`: old ReplicaSets beyond revisionHistoryLimit, pod-less."""
        limit = (d.get("spec") or {}).get("revisionHistoryLimit")
        if not isinstance(limit, int):
            return
        cleanable = [rs for rs in old if not _md(rs).get("deletionTimestamp")]
        diff = len(cleanable) - limit
        if diff <= 0:
            return
        cleanable.sort(key=lambda rs: (du.revision(rs), _md(rs).get("creationTimestamp") or ""))
        for rs in cleanable[:diff]:
            if du.status_int(rs, "replicas") or du.replicas(rs) or \
                    int(_md(rs).get("generation") or 0) > du.status_int(rs, "observedGeneration"):
                continue
            try:
                await self.api.delete(_rs_path(str(_md(rs).get("namespace")),
                                               str(_md(rs).get("name"))))
            except StatusError as err:
                if err.code != 404:
                    raise

    # -- status -----------------------------------------------------------------------------

    async def _check_paused_conditions(self, d: Obj) -> None:
        if not du.has_progress_deadline(d):
            return
        status = d.setdefault("status", {})
        condition = du.get_condition(status, "Progressing")
        if condition is not None and condition.get("reason") == du.TIMED_OUT:
            return
        paused = bool((d.get("spec") or {}).get("paused"))
        now = self.clock()
        if paused and (condition is None or condition.get("reason") != du.PAUSED):
            du.set_condition(status, du.new_condition("Progressing", "Unknown", du.PAUSED,
                                                      "Deployment is paused", now))
        elif not paused and condition is not None and condition.get("reason") == du.PAUSED:
            du.set_condition(status, du.new_condition("Progressing", "Unknown", du.RESUMED,
                                                      "Deployment is resumed", now))
        else:
            return
        await self._write_status(d, status)

    async def _sync_status_only(self, d: Obj, rs_list: list[Obj]) -> None:
        new, old = await self._all_replica_sets(d, rs_list, False)
        await self._sync_deployment_status(d, [*old, new], new)

    async def _sync_deployment_status(self, d: Obj, all_sets: Sequence[Obj | None],
                                      new: Obj | None) -> None:
        status = du.calculate_status(all_sets, new, d, self.clock())
        if status != (d.get("status") or {}):
            await self._write_status(d, status)

    async def _sync_rollout_status(self, all_sets: Sequence[Obj | None], new: Obj | None, d: Obj
                                   ) -> None:
        now = self.clock()
        status = du.calculate_status(all_sets, new, d, now)
        new_name = _md(new).get("name") if new is not None else ""
        if du.has_progress_deadline(d) and not (d.get("spec") or {}).get("paused"):
            current = du.get_condition(status, "Progressing")
            complete_already = (status.get("replicas") == status.get("updatedReplicas")
                                and current is not None
                                and current.get("reason") == du.NEW_RS_AVAILABLE)
            if not complete_already:
                if du.deployment_complete(d, status):
                    du.set_condition(status, du.new_condition(
                        "Progressing", "True", du.NEW_RS_AVAILABLE,
                        f'ReplicaSet "{new_name}" has successfully progressed.', now))
                elif du.deployment_progressing(d, status):
                    message = (f'ReplicaSet "{new_name}" is progressing.' if new is not None
                               else "Deployment is progressing.")
                    condition = du.new_condition("Progressing", "True", du.RS_UPDATED,
                                                 message, now)
                    if current is not None:
                        if current.get("status") == "True":
                            condition["lastTransitionTime"] = current.get("lastTransitionTime")
                        du.remove_condition(status, "Progressing")
                    du.set_condition(status, condition)
                elif du.deployment_timed_out(d, status, now):
                    du.set_condition(status, du.new_condition(
                        "Progressing", "False", du.TIMED_OUT,
                        f'ReplicaSet "{new_name}" has timed out progressing.', now))
        failures = [c for rs in all_sets if rs is not None
                    for c in (rs.get("status") or {}).get("conditions") or []
                    if c.get("type") == "ReplicaFailure" and c.get("status") == "True"]
        if failures:
            du.set_condition(status, du.new_condition("ReplicaFailure", "True",
                                                      str(failures[0].get("reason") or ""),
                                                      str(failures[0].get("message") or ""),
                                                      now))
        elif du.get_condition(status, "ReplicaFailure") is not None:
            du.remove_condition(status, "ReplicaFailure")
        if status == (d.get("status") or {}):
            after = du.progress_requeue_after(d, status, now)
            if after is not None:
                self.queue.add_after(_key(d), after)
            return
        await self._write_status(d, status)

    async def _write_status(self, d: Obj, status: dict[str, Any]) -> None:
        """PUT `/status` of `d` (whose annotations carry the revision); the stored
        resourceVersion guards it, a conflict is retried by the queue."""
        body = copy.deepcopy(d)
        body["status"] = status
        md = _md(d)
        updated = await self.api.update(
            _deploy_path(str(md.get("namespace")), str(md.get("name")), "status"), body)
        d["metadata"] = updated.get("metadata") or d.get("metadata")
        d["status"] = updated.get("status") or {}

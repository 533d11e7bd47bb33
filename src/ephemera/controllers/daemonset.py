"""The DaemonSet controller, as upstream's `pkg/controller/daemon`: one pod of the template on
every node that should run it.

A node should run a DaemonSet's pod when the template's `nodeSelector` and required node
affinity match it and its taints (`spec.taints` and those its conditions imply, as ephemera's
scheduler derives them) with effect `NoSchedule` or `NoExecute` are tolerated by the
template's tolerations plus the ones upstream adds to every daemon pod
(`node.kubernetes.io/not-ready` and `unreachable` `NoExecute`, `disk-pressure`,
`memory-pressure`, `pid-pressure`, `unschedulable` `NoSchedule`, and `network-unavailable`
for host-network pods). A pod already there keeps running while its `NoExecute` taints are
tolerated (a new `NoSchedule` taint does not evict it); one on a node that should not run it,
or on a node that is gone, is deleted; of several on one node the oldest stays; failed ones
are deleted and made again. Pods are bound to their node by upstream's required node
affinity on `metadata.name` (the scheduler places them), labelled `controller-revision-hash`
and `pod-template-generation`; each template is kept as a ControllerRevision
(`<name>-<hash>`, `kubectl rollout history daemonset`); old revisions beyond
`revisionHistoryLimit` that no pod has are deleted, oldest first. `RollingUpdate` replaces old pods
while at most `maxUnavailable` nodes lack an available pod (`maxSurge` is not implemented:
it is treated as 0, old pods go before new ones come); `OnDelete` replaces a pod only when it
is deleted. Expectations, adoption and events (`SuccessfulCreate`, `SuccessfulDelete`) are
the ReplicaSet controller's."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ephemera.api import labelselector
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer, resource_path
from ephemera.controllers import deploymentutil as du
from ephemera.controllers import podutil
from ephemera.controllers.controllerref import ControllerRefManager, controller_of
from ephemera.controllers.expectations import Expectations
from ephemera.controllers.history import (
    HASH_LABEL,
    daemonset_history_to_delete,
    delete_revisions,
    ensure_revision,
    owned_revisions,
)
from ephemera.controllers.objects import int_or_zero as _int
from ephemera.controllers.objects import metadata as _md
from ephemera.controllers.objects import queue_key as _key
from ephemera.controllers.runner import QueueController
from ephemera.pods.workloads import (
    DAEMONSET_TEMPLATE_GENERATION,
    DEFAULT_REVISION_HISTORY_LIMIT,
    scaled_value,
)
from ephemera.scheduler.plugins import Taint, effective_taints, matches_node_affinity, tolerates

__all__ = ["DaemonSetController", "node_should_run"]

log = logging.getLogger("ephemera.controllers.daemonset")

GENERATION_LABEL = "pod-template-generation"
WORKERS = 2
Obj = dict[str, Any]

_DAEMON_TOLERATIONS = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
]


def daemon_pod_spec(template: Mapping[str, Any], node: str) -> dict[str, Any]:
    """The template's spec with the daemon tolerations added and the required node affinity
    on `metadata.name` (`AddOrUpdateDaemonPodTolerations`,
    `ReplaceDaemonSetPodNodeNameNodeAffinity`)."""
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    tolerations = list(spec.get("tolerations") or [])
    extra = list(_DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        extra.append(("node.kubernetes.io/network-unavailable", "NoSchedule"))
    for key, effect in extra:
        if not any(t.get("key") == key and t.get("effect") == effect for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": effect})
    spec["tolerations"] = tolerations
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    return spec


def node_should_run(node: Mapping[str, Any], ds: Mapping[str, Any]) -> tuple[bool, bool]:
    """`nodeShouldRunDaemonPod`: (should run a new pod, should keep a running one)."""
    template = (ds.get("spec") or {}).get("template") or {}
    name = str(_md(node).get("name") or "")
    pod = {"spec": daemon_pod_spec(template, name)}
    selector_only = {"spec": {"nodeSelector": (template.get("spec") or {}).get("nodeSelector"),
                              "affinity": (template.get("spec") or {}).get("affinity")}}
    if not matches_node_affinity(selector_only, node) or not matches_node_affinity(pod, node):
        return False, False
    tolerations = pod["spec"]["tolerations"]

    def untolerated(effects: tuple[str, ...]) -> list[Taint]:
        return [t for t in effective_taints(node) if t.effect in effects
                and not any(tolerates(tol, t) for tol in tolerations)]

    if not untolerated(("NoSchedule", "NoExecute")):
        return True, True
    return False, not untolerated(("NoExecute",))


def _pod_node(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
             .get("nodeSelectorTerms") or [])
    for term in terms:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("values"):
                return str(f["values"][0])
    return ""


def _ds_path(namespace: str, name: str | None = None, sub: str | None = None) -> str:
    return resource_path("daemonsets", namespace, name, sub, group="apps")


class DaemonSetController(QueueController):
    def __init__(self, api: ApiClient, sets: Informer, pods: Informer, nodes: Informer,
                 revisions: Informer, *, recorder: EventRecorder | None = None,
                 workers: int = WORKERS,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        super().__init__(api, kind="DaemonSet", api_version="apps/v1",
                         component="daemonset-controller",
                         informers=(sets, pods, nodes, revisions), log=log, workers=workers,
                         recorder=recorder, clock=clock)
        self.sets = sets
        self.pods = pods
        self.nodes = nodes
        self.revisions = revisions
        self.expectations = Expectations()
        sets.add_handler(on_add=self._enqueue, on_update=lambda o, n: self._enqueue(n),
                         on_delete=self._set_deleted)
        nodes.add_handler(on_add=lambda n: self._enqueue_all(),
                          on_update=lambda o, n: self._enqueue_all(),
                          on_delete=lambda n: self._enqueue_all())
        pods.add_handler(on_add=self._pod_added, on_update=self._pod_updated,
                         on_delete=self._pod_deleted)

    # -- handlers ---------------------------------------------------------------------------

    def _enqueue(self, ds: Obj) -> None:
        self.queue.add(_key(ds))

    def _enqueue_all(self) -> None:
        for ds in self.sets.list():
            self._enqueue(ds)

    def _set_deleted(self, ds: Obj) -> None:
        self.expectations.delete(_key(ds))

    def _owner(self, pod: Mapping[str, Any]) -> Obj | None:
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != "DaemonSet":
            return None
        ds = self.sets.get(f"{_md(pod).get('namespace')}/{ref.get('name')}")
        if ds is None or _md(ds).get("uid") != ref.get("uid"):
            return None
        return ds

    def _pod_added(self, pod: Obj) -> None:
        if _md(pod).get("deletionTimestamp"):
            self._pod_deleted(pod)
            return
        ds = self._owner(pod)
        if ds is not None:
            self.expectations.creation_observed(_key(ds))
            self._enqueue(ds)
        elif controller_of(pod) is None:
            self._enqueue_all()

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if _md(new).get("deletionTimestamp"):
            self._pod_deleted(new)
            return
        ds = self._owner(new) or self._owner(old)
        if ds is not None:
            self._enqueue(ds)

    def _pod_deleted(self, pod: Obj) -> None:
        ds = self._owner(pod)
        if ds is not None:
            self.expectations.deletion_observed(_key(ds), podutil.pod_key(pod))
            self._enqueue(ds)

    # -- one sync ---------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        ds = self.sets.get(key)
        if ds is None:
            self.expectations.delete(key)
            return
        namespace, name = str(_md(ds).get("namespace")), str(_md(ds).get("name"))
        selector = (ds.get("spec") or {}).get("selector")
        manager = ControllerRefManager(
            self.api, ds, "apps/v1", "DaemonSet",
            matches=lambda obj: not labelselector.is_empty(selector)
            and labelselector.matches(selector, {str(k): str(v) for k, v in
                                                 (_md(obj).get("labels") or {}).items()}),
            path_of=lambda obj: resource_path("pods", namespace, str(_md(obj).get("name"))),
            fresh_owner=lambda: self.api.get(_ds_path(namespace, name)))
        candidates = [p for p in self.pods.list(namespace)
                      if not _md(p).get("deletionTimestamp")]
        pods = await manager.claim(candidates)
        current_hash = await self._ensure_revision(ds)
        if _md(ds).get("deletionTimestamp") or not self.expectations.satisfied(key):
            await self._update_status(ds, pods, current_hash)
            return
        by_node: dict[str, list[Obj]] = {}
        for pod in pods:
            by_node.setdefault(_pod_node(pod), []).append(pod)
        to_create: list[str] = []
        to_delete: list[Obj] = []
        nodes = {str(_md(n).get("name")): n for n in self.nodes.list()}
        for node_name, node in nodes.items():
            should_run, should_continue = node_should_run(node, ds)
            here = by_node.pop(node_name, [])
            if should_run and not here:
                to_create.append(node_name)
            elif should_continue:
                failed = [p for p in here if (p.get("status") or {}).get("phase") == "Failed"]
                to_delete.extend(failed)
                running = sorted((p for p in here if p not in failed),
                                 key=lambda p: str(_md(p).get("creationTimestamp") or ""))
                to_delete.extend(running[1:])
                if failed and not running and should_run:
                    to_create.append(node_name)
            else:
                to_delete.extend(here)
        for orphaned in by_node.values():  # pods of nodes that are gone
            to_delete.extend(orphaned)
        if not to_create and not to_delete:
            to_delete = self._rolling_update_victims(ds, pods, nodes, current_hash)
        await self._act(ds, key, to_create, to_delete, current_hash)
        await self._cleanup_history(ds, current_hash)
        await self._update_status(ds, [p for p in pods if p not in to_delete], current_hash)

    async def _cleanup_history(self, ds: Obj, current_hash: str) -> None:
        """`cleanupHistory`: old revisions beyond `revisionHistoryLimit` (10 by default)
        that no pod of the DaemonSet (one being deleted too) still has."""
        limit = (ds.get("spec") or {}).get("revisionHistoryLimit")
        uid = _md(ds).get("uid")
        live = {str((_md(p).get("labels") or {}).get(HASH_LABEL))
                for p in self.pods.list(str(_md(ds).get("namespace") or ""))
                if (controller_of(p) or {}).get("uid") == uid}
        doomed = daemonset_history_to_delete(
            owned_revisions(self.revisions.list(), ds), current_hash, live,
            limit if isinstance(limit, int) else DEFAULT_REVISION_HISTORY_LIMIT)
        await delete_revisions(self.api, doomed)

    def _rolling_update_victims(self, ds: Obj, pods: list[Obj], nodes: dict[str, Obj],
                                current_hash: str) -> list[Obj]:
        """`rollingUpdate` with maxSurge 0: old pods that are not available first, then
        available old pods while at most maxUnavailable nodes lack an available pod."""
        strategy = (ds.get("spec") or {}).get("updateStrategy") or {}
        if strategy.get("type") != "RollingUpdate":
            return []
        min_ready = _int((ds.get("spec") or {}).get("minReadySeconds"))
        now = self.clock()
        desired = sum(1 for n in nodes.values() if node_should_run(n, ds)[0])
        max_unavailable = scaled_value((strategy.get("rollingUpdate") or {}).get(
            "maxUnavailable", 1), desired, True) or 1
        unavailable = 0
        old_unavailable: list[Obj] = []
        old_available: list[Obj] = []
        for pod in pods:
            available = podutil.is_available(pod, min_ready, now)
            if not available:
                unavailable += 1
            if _md(pod).get("labels", {}).get(HASH_LABEL) != current_hash:
                (old_available if available else old_unavailable).append(pod)
        budget = max(0, max_unavailable - unavailable)
        return old_unavailable + old_available[:budget]

    async def _act(self, ds: Obj, key: str, to_create: list[str], to_delete: list[Obj],
                   current_hash: str) -> None:
        namespace = str(_md(ds).get("namespace"))
        if to_create:
            self.expectations.expect_creations(key, len(to_create))
        elif to_delete:
            self.expectations.expect_deletions(key, [podutil.pod_key(p) for p in to_delete])
        template = (ds.get("spec") or {}).get("template") or {}
        ref = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": _md(ds).get("name"),
               "uid": _md(ds).get("uid"), "controller": True, "blockOwnerDeletion": True}
        errors: list[BaseException] = []

        async def create(node: str) -> None:
            pod = podutil.pod_from_template(template, ds, ref)
            pod["metadata"].setdefault("labels", {})
            pod["metadata"]["labels"][HASH_LABEL] = current_hash
            pod["metadata"]["labels"][GENERATION_LABEL] = str(
                (_md(ds).get("annotations") or {}).get(DAEMONSET_TEMPLATE_GENERATION) or "1")
            pod["spec"] = daemon_pod_spec(template, node)
            try:
                created = await self.api.create(resource_path("pods", namespace), pod)
            except (StatusError, ApiUnavailable) as err:
                self.expectations.creation_observed(key)
                if isinstance(err, StatusError):
                    self.events.post(ds, "Warning", "FailedCreate",
                                     f"Error creating: {err.message}")
                errors.append(err)
                return
            self.events.post(ds, "Normal", "SuccessfulCreate",
                        f"Created pod: {_md(created).get('name')}")

        async def delete(pod: Obj) -> None:
            name = str(_md(pod).get("name"))
            try:
                await self.api.delete(resource_path("pods", namespace, name))
            except (StatusError, ApiUnavailable) as err:
                self.expectations.deletion_observed(key, podutil.pod_key(pod))
                if not (isinstance(err, StatusError) and err.code == 404):
                    errors.append(err)
                return
            self.events.post(ds, "Normal", "SuccessfulDelete", f"Deleted pod: {name}")

        if to_create:
            await asyncio.gather(*(create(n) for n in to_create))
        else:
            await asyncio.gather(*(delete(p) for p in to_delete))
        if errors:
            raise errors[0]

    async def _ensure_revision(self, ds: Obj) -> str:
        """The hash of the current template, kept as a ControllerRevision."""
        template = (ds.get("spec") or {}).get("template") or {}
        collision = (ds.get("status") or {}).get("collisionCount") or None
        current = du.compute_hash(template, collision)
        await ensure_revision(self.api, ds, "DaemonSet",
                              owned_revisions(self.revisions.list(), ds),
                              f"{_md(ds).get('name')}-{current}", current, template)
        return current

    async def _update_status(self, ds: Obj, pods: list[Obj], current_hash: str) -> None:
        min_ready = _int((ds.get("spec") or {}).get("minReadySeconds"))
        now = self.clock()
        by_node: dict[str, list[Obj]] = {}
        for pod in pods:
            by_node.setdefault(_pod_node(pod), []).append(pod)
        desired = current = misscheduled = ready = updated = available = 0
        for node in self.nodes.list():
            should_run, _ = node_should_run(node, ds)
            here = by_node.get(str(_md(node).get("name")), [])
            if should_run:
                desired += 1
                if here:
                    current += 1
                    if any(podutil.is_ready(p) for p in here):
                        ready += 1
                    if any(podutil.is_available(p, min_ready, now) for p in here):
                        available += 1
                    if any((_md(p).get("labels") or {}).get(HASH_LABEL) == current_hash
                           for p in here):
                        updated += 1
            elif here:
                misscheduled += 1
        status: dict[str, Any] = {"currentNumberScheduled": current,
                                  "numberMisscheduled": misscheduled,
                                  "desiredNumberScheduled": desired, "numberReady": ready}
        generation = _int(_md(ds).get("generation"))
        if generation:
            status["observedGeneration"] = generation
        for name, value in (("updatedNumberScheduled", updated),
                            ("numberAvailable", available),
                            ("numberUnavailable", max(0, desired - available))):
            if value:
                status[name] = value
        old = ds.get("status") or {}
        for keep in ("collisionCount", "conditions"):
            if keep in old:
                status[keep] = old[keep]
        await self.write_status(ds, status, _ds_path(str(_md(ds).get("namespace")),
                                                     str(_md(ds).get("name")), "status"))


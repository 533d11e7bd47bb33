"""The Job controller, as upstream's `pkg/controller/job`: informers on Jobs and on pods,
a work queue of Jobs, and a sync that runs `ephemera.batch.jobsync.compute` over a Job's
pods (those whose controller reference is the Job) and carries out its decision: the status
first (through `/status`, guarded by resourceVersion), then the pods' tracking finalizers
removed, pods deleted and created.

Pods are created from the template with the Job as controller owner
(`blockOwnerDeletion`), the `batch.kubernetes.io/job-tracking` finalizer and, for an Indexed
Job, the completion index (annotation and label `batch.kubernetes.io/job-completion-index`,
hostname `<job>-<index>`, the `JOB_COMPLETION_INDEX` variable). Expectations (upstream's
`ControllerExpectations`) hold a Job's next sync until the pods it created or deleted have
been seen, so a burst of events never makes too many pods. A failed pod is replaced after a
back-off of `backoff_base` seconds doubling per failure up to `backoff_max` (upstream: 10 s
to 6 min). Events: `SuccessfulCreate`, `SuccessfulDelete`, `Completed`, `Suspended`,
`Resumed`, and the failure reason (`BackoffLimitExceeded`, `DeadlineExceeded`,
`PodFailurePolicy`). A Job whose `spec.managedBy` names another controller is left to it.
The Job's pods are claimed as the ReplicaSet controller claims its own
(`ControllerRefManager`): an orphan its selector selects is adopted, taking the tracking
finalizer in the same patch; a pod it owns but no longer selects is released and loses it.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ephemera.api import labelselector
from ephemera.api.errors import StatusError
from ephemera.batch.jobs import JOB_COMPLETION_INDEX, JOB_TRACKING_FINALIZER, has_condition
from ephemera.batch.jobsync import compute
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer, resource_path
from ephemera.controllers import controllerref
from ephemera.controllers.controllerref import (
    ControllerRefManager,
    controller_of,
    new_controller_ref,
)
from ephemera.controllers.expectations import Expectations
from ephemera.controllers.objects import labels as _labels
from ephemera.controllers.objects import metadata as _md
from ephemera.controllers.objects import queue_key as _key
from ephemera.controllers.runner import run_workers
from ephemera.controllers.slowstart import slow_start
from ephemera.controllers.workqueue import WorkQueue

__all__ = ["JobController", "job_pod"]

log = logging.getLogger("ephemera.controllers.job")

JOBS = "/apis/batch/v1/jobs"
DEFAULT_BACKOFF_BASE = 10.0
DEFAULT_BACKOFF_MAX = 360.0
WORKERS = 4
MANAGED_BY = "kubernetes.io/job-controller"
ORPHAN_PREFIX = "\0orphan:"  # queue keys of pods to release that have no Job


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the pod's controlling Job, if a Job controls it."""
    return controllerref.controller_uid(obj, "Job", "batch")


def job_pod(job: Mapping[str, Any], index: int | None) -> dict[str, Any]:
    """The pod the Job's controller creates (with `index` for an Indexed Job)."""
    md = _md(job)
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    tmd = template.get("metadata") or {}
    name = str(md.get("name"))
    pod_md: dict[str, Any] = {
        "generateName": f"{name}-" if index is None else f"{name}-{index}-",
        "namespace": md.get("namespace"),
        "labels": dict(tmd.get("labels") or {}),
        "annotations": dict(tmd.get("annotations") or {}),
        "finalizers": [*(tmd.get("finalizers") or []), JOB_TRACKING_FINALIZER],
        "ownerReferences": [new_controller_ref(job, "batch/v1", "Job")]}
    spec = template.get("spec") or {}
    if index is not None:
        pod_md["annotations"][JOB_COMPLETION_INDEX] = str(index)
        pod_md["labels"][JOB_COMPLETION_INDEX] = str(index)
        if not spec.get("hostname"):
            spec["hostname"] = f"{name}-{index}"
        env = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{JOB_COMPLETION_INDEX}']"}}}
        for key in ("initContainers", "containers"):
            for c in spec.get(key) or []:
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in c.get("env") or []):
                    c["env"] = [*(c.get("env") or []), env]
    if not pod_md["annotations"]:
        del pod_md["annotations"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_md, "spec": spec}


class JobController:
    """`run()` until cancelled."""

    def __init__(self, api: ApiClient, recorder: EventRecorder | None = None, *,
                 backoff_base: float = DEFAULT_BACKOFF_BASE,
                 backoff_max: float = DEFAULT_BACKOFF_MAX, workers: int = WORKERS,
                 pods: Informer | None = None) -> None:
        """`pods`: an informer of all pods shared with other controllers (else its own)."""
        self.api = api
        self.recorder = recorder or EventRecorder(api, "job-controller")
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.workers = workers
        self.jobs = Informer(api, JOBS, name="jobs")
        self.pods = pods if pods is not None else Informer(api, resource_path("pods"),
                                                               name="job pods")
        self.queue: WorkQueue[str] = WorkQueue(base_delay=0.05, max_delay=30.0)
        self._pods_of: dict[str, dict[str, dict[str, Any]]] = {}  # job uid -> pod key -> pod
        self._job_key_of: dict[str, str] = {}  # job uid -> namespace/name
        self.expectations = Expectations()
        self._last_failure: dict[str, tuple[int, float]] = {}  # job uid -> (failures, when)
        self.jobs.add_handler(on_add=self._job_changed,
                              on_update=lambda old, new: self._job_changed(new),
                              on_delete=self._job_deleted)
        self.pods.add_handler(on_add=self._pod_added, on_update=self._pod_updated,
                              on_delete=self._pod_deleted)

    # -- events -----------------------------------------------------------------------------

    def _job_changed(self, job: dict[str, Any]) -> None:
        self._job_key_of[str(_md(job).get("uid"))] = _key(job)
        self.queue.add(_key(job))

    def _job_deleted(self, job: dict[str, Any]) -> None:
        uid = str(_md(job).get("uid"))
        self._job_key_of.pop(uid, None)
        self.expectations.delete(_key(job))
        self._last_failure.pop(uid, None)
        # its pods' finalizers must still go
        self.queue.add(_key(job))

    def _enqueue_owner(self, pod: Mapping[str, Any]) -> None:
        uid = controller_uid(pod)
        if uid is None:
            return
        key = self._job_key_of.get(uid) or f"{_md(pod).get('namespace', '')}/" + next(
            (str(r.get("name")) for r in _md(pod).get("ownerReferences") or []
             if r.get("uid") == uid), "")
        self.queue.add(key)

    def _observed(self, pod: Mapping[str, Any], created: bool) -> None:
        key = self._job_key_of.get(controller_uid(pod) or "")
        if key is None:
            return
        if created:
            self.expectations.creation_observed(key)
        else:
            self.expectations.deletion_observed(key, _key(pod))

    def _untracked(self, pod: Mapping[str, Any]) -> None:
        """A pod without a Job controller (orphaned): it keeps no tracking finalizer. (It
        is in no Job's `_pods_of`: a pod that loses its controller leaves its old Job's
        there in `_pod_updated`.)"""
        if JOB_TRACKING_FINALIZER in (_md(pod).get("finalizers") or []):
            self.queue.add(ORPHAN_PREFIX + _key(pod))

    def _enqueue_selecting(self, pod: Mapping[str, Any]) -> None:
        """An orphan: the Jobs whose selector selects it may adopt it (`getPodJobs`)."""
        if controller_of(pod) is not None or _md(pod).get("deletionTimestamp"):
            return
        namespace, labels = _md(pod).get("namespace"), _labels(pod)
        for job in self.jobs.list():
            if _md(job).get("namespace") == namespace and labelselector.selector_matches(
                    (job.get("spec") or {}).get("selector"), labels):
                self.queue.add(_key(job))

    def _pod_added(self, pod: dict[str, Any]) -> None:
        uid = controller_uid(pod)
        if uid is None:
            self._untracked(pod)
            self._enqueue_selecting(pod)
            return
        self._pods_of.setdefault(uid, {})[_key(pod)] = pod
        self._observed(pod, True)
        self._enqueue_owner(pod)

    def _pod_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        uid, old_uid = controller_uid(new), controller_uid(old)
        if old_uid is not None and old_uid != uid:  # released, or another Job's now
            self._pods_of.get(old_uid, {}).pop(_key(old), None)
            self._enqueue_owner(old)
        if uid is None:
            self._untracked(new)
            if old_uid is not None or _labels(old) != _labels(new):
                self._enqueue_selecting(new)
            return
        self._pods_of.setdefault(uid, {})[_key(new)] = new
        if _md(new).get("deletionTimestamp"):
            self._observed(new, False)
        self._enqueue_owner(new)

    def _pod_deleted(self, pod: dict[str, Any]) -> None:
        uid = controller_uid(pod)
        if uid is None:
            return
        pods = self._pods_of.get(uid, {})
        pods.pop(_key(pod), None)
        if not pods:
            self._pods_of.pop(uid, None)
        self._observed(pod, False)
        self._enqueue_owner(pod)

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        await run_workers(self.queue, self.sync, what="job", log=log, workers=self.workers,
                          runs=(self.jobs, self.pods))

    async def sync(self, key: str) -> None:
        if key.startswith(ORPHAN_PREFIX):
            namespace, name = key[len(ORPHAN_PREFIX):].split("/", 1)
            await self._release(namespace, name, unless_adopted=True)
            return
        job = self.jobs.get(key)
        if job is None:
            await self._release_orphans()
            return
        managed_by = (job.get("spec") or {}).get("managedBy")
        if managed_by and managed_by != MANAGED_BY:
            return  # another controller's (upstream's JobManagedBy)
        if not self.expectations.satisfied(key):
            # look again once the expectations expire, should the events never come
            self.queue.add_after(key, (self.expectations.expires_in(key) or 0.0) + 0.01)
            return
        uid = str(_md(job).get("uid"))
        if _md(job).get("deletionTimestamp"):
            # being deleted (in the foreground, say): no new pods, and none of its pods
            # waits for it to be counted
            for pod in list(self._pods_of.get(uid, {}).values()):
                if JOB_TRACKING_FINALIZER in (_md(pod).get("finalizers") or []):
                    await self._release(str(_md(pod).get("namespace")),
                                        str(_md(pod).get("name")))
            return
        pods = await self._claim(job)
        failures = int((job.get("status") or {}).get("failed") or 0) + len(
            ((job.get("status") or {}).get("uncountedTerminatedPods") or {}).get("failed") or [])
        backoff = self._backoff_remaining(uid, failures)
        plan = compute(job, pods, datetime.now(UTC), backoff_remaining=backoff)
        if plan.new_failures:
            self._last_failure[uid] = (failures + 1, time.monotonic())
        namespace, name = key.split("/", 1)
        if plan.status != (job.get("status") or {}):
            body = dict(job, apiVersion="batch/v1", kind="Job", status=plan.status)
            await self.api.update(resource_path("jobs", namespace, name, "status",
                                                group="batch"), body)
        for event_type, reason, message in plan.events:
            await self.recorder.record(job, event_type, reason, message, kind="Job",
                                       api_version="batch/v1")
        for pod_name in plan.release:
            await self._release(namespace, pod_name)
        if plan.delete or plan.create:
            self.expectations.expect(key, len(plan.create),
                                     [f"{namespace}/{pod_name}" for pod_name in plan.delete])
        await self._delete_then_create(job, namespace, plan.delete, plan.create)
        if plan.requeue_after is not None:
            self.queue.add_after(key, plan.requeue_after)

    async def _claim(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The Job's pods (`getPodsForJob`): those of its namespace its controller reference
        names and its selector selects, orphans it selects adopted with the tracking
        finalizer, owned ones it no longer selects released without it."""
        namespace, name = str(_md(job).get("namespace")), str(_md(job).get("name"))
        selector = (job.get("spec") or {}).get("selector")
        manager = ControllerRefManager(
            self.api, job, "batch/v1", "Job",
            matches=lambda obj: labelselector.selector_matches(selector, _labels(obj)),
            path_of=lambda obj: resource_path("pods", namespace, str(_md(obj).get("name"))),
            fresh_owner=lambda: self.api.get(resource_path("jobs", namespace, name,
                                                           group="batch")),
            finalizers=(JOB_TRACKING_FINALIZER,))
        return await manager.claim(self.pods.list(namespace))

    def _backoff_remaining(self, uid: str, failures: int) -> float:
        if failures <= 0 or uid not in self._last_failure:
            return 0.0
        count, when = self._last_failure[uid]
        delay = min(self.backoff_base * (2 ** max(0, count - 1)), self.backoff_max)
        return max(0.0, when + delay - time.monotonic())

    async def _release(self, namespace: str, pod_name: str, *,
                       unless_adopted: bool = False) -> None:
        """Remove the tracking finalizer (the pod is counted in the Job's status, or has no
        Job). `unless_adopted`: an orphan's, kept if the pod has an owner again
        (`_adopted`, read on the pod as it is now)."""
        path = resource_path("pods", namespace, pod_name)
        for _ in range(5):
            try:
                pod = await self.api.get(path)
            except StatusError as err:
                if err.code == 404:
                    return
                raise
            finalizers = list(_md(pod).get("finalizers") or [])
            if JOB_TRACKING_FINALIZER not in finalizers or \
                    (unless_adopted and self._adopted(pod)):
                return
            kept = [f for f in finalizers if f != JOB_TRACKING_FINALIZER]
            try:
                await self.api.patch(path, {"metadata": {
                    "finalizers": kept or None,
                    "resourceVersion": _md(pod).get("resourceVersion")}}, patch_type="merge")
                return
            except StatusError as err:
                if err.code == 404:
                    return
                if err.code != 409:
                    raise

    def _adopted(self, pod: Mapping[str, Any]) -> bool:
        """upstream's `handleOrphanPod` check: a pod queued as an orphan that has since got a
        controller keeps its tracking finalizer, unless that controller is a Job that is
        gone or finished (a controller of another kind, or a Job another controller
        manages, keeps it too)."""
        ref = controller_of(pod)
        if ref is None:
            return False
        if ref.get("kind") != "Job" or ref.get("apiVersion") != "batch/v1":
            return True
        key = self._job_key_of.get(str(ref.get("uid")))
        job = self.jobs.get(key) if key is not None else None
        if job is None or _md(job).get("uid") != ref.get("uid"):
            return False
        managed_by = (job.get("spec") or {}).get("managedBy")
        if managed_by and managed_by != MANAGED_BY:
            return True
        return not (has_condition(job, "Complete") or has_condition(job, "Failed"))

    async def _release_orphans(self) -> None:
        """Pods of Jobs that are gone keep no tracking finalizer."""
        for uid in [u for u in self._pods_of if u not in self._job_key_of]:
            for pod in list(self._pods_of.get(uid, {}).values()):
                if JOB_TRACKING_FINALIZER in (_md(pod).get("finalizers") or []):
                    await self._release(str(_md(pod).get("namespace")),
                                        str(_md(pod).get("name")), unless_adopted=True)

    async def _delete_pod(self, job: Mapping[str, Any], namespace: str, name: str) -> None:
        try:
            await self.api.delete(resource_path("pods", namespace, name))
        except (StatusError, ApiUnavailable) as err:
            # no deletion is coming for this pod either way: expect one fewer
            self.expectations.deletion_observed(_key(job), f"{namespace}/{name}")
            if not isinstance(err, StatusError) or err.code != 404:
                raise
            return
        await self.recorder.record(job, "Normal", "SuccessfulDelete", f"Deleted pod: {name}",
                                   kind="Job", api_version="batch/v1")

    async def _delete_then_create(self, job: Mapping[str, Any], namespace: str,
                                  doomed: list[str], indexes: list[int | None]) -> None:
        """Delete the pods `doomed`, every one tried (as upstream deletes them, each in its
        own call), then create those of `indexes`. A failed deletion is raised once all were
        tried; the creations are then not made, and no longer expected, so the Job is synced
        again when its retry comes, not once the expectations time out."""
        first: BaseException | None = None
        for pod_name in doomed:
            try:
                await self._delete_pod(job, namespace, pod_name)
            except (StatusError, ApiUnavailable) as err:
                first = first or err
        if first is not None:
            for _ in indexes:
                self.expectations.creation_observed(_key(job))
            raise first
        await self._create_pods(job, namespace, indexes)

    async def _create_pods(self, job: Mapping[str, Any], namespace: str,
                           indexes: list[int | None]) -> None:
        """Create in slow-start batches: a first failure stops the rest, and the creations
        not made are no longer expected."""
        created, error = await slow_start(
            len(indexes), lambda i: self._create_one(job, namespace, indexes[i]))
        if error is not None:
            for _ in range(len(indexes) - created):
                self.expectations.creation_observed(_key(job))
            raise error

    async def _create_one(self, job: Mapping[str, Any], namespace: str,
                          index: int | None) -> None:
        created = await self.api.create(resource_path("pods", namespace), job_pod(job, index))
        await self.recorder.record(job, "Normal", "SuccessfulCreate",
                                   f"Created pod: {_md(created).get('name')}", kind="Job",
                                   api_version="batch/v1")

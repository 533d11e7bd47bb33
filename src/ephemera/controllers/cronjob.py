"""The CronJob controller, as upstream's `pkg/controller/cronjob` (v2): informers on
CronJobs and Jobs, a work queue of CronJobs, and a sync per CronJob that

- keeps `status.active` to its running Jobs (a finished one leaves it with a
  `SawCompletedJob` event; `lastSuccessfulTime` follows a completed one);
- finds the most recent start time due since `lastScheduleTime` (or the creation), bounded
  by `startingDeadlineSeconds` (`MissSchedule` when it is too late, `TooManyMissedTimes`
  past 100 missed ones), in `spec.timeZone` (UTC otherwise);
- with `concurrencyPolicy: Forbid` skips a run while one is active (`JobAlreadyActive`);
  with `Replace` deletes the active ones first; `Allow` runs them side by side;
- creates the Job `<cronjob>-<minutes since the epoch>` from `jobTemplate`, owned by the
  CronJob, annotated `batch.kubernetes.io/cronjob-scheduled-timestamp`
  (`SuccessfulCreate`), and records `lastScheduleTime`;
- deletes the oldest finished Jobs beyond `successfulJobsHistoryLimit` and
  `failedJobsHistoryLimit` (`SuccessfulDelete`);
- requeues itself for the next start time. Nothing runs while `suspend` is true.

`clock` (default: the wall clock) is what the controller takes for now; tests drive the
schedule with it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.api.meta import parse_time, rfc3339, rfc3339_in_zone
from ephemera.batch.cronjobs import (
    ScheduleError,
    job_name,
    most_recent_due,
    parse_schedule,
    time_zone,
)
from ephemera.batch.jobs import has_condition
from ephemera.client import ApiClient, EventRecorder, Informer, resource_path
from ephemera.controllers.controllerref import controller_uid
from ephemera.controllers.objects import metadata as _md
from ephemera.controllers.objects import queue_key as _key
from ephemera.controllers.runner import run_workers
from ephemera.controllers.workqueue import WorkQueue

__all__ = ["SCHEDULED_TIMESTAMP", "CronJobController"]

log = logging.getLogger("ephemera.controllers.cronjob")

SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"
NEXT_SCHEDULE_DELTA = 0.1  # upstream's nextScheduleDelta: requeue a little after the time


def _owner_uid(job: Mapping[str, Any]) -> str | None:
    return controller_uid(job, "CronJob", "batch")


def _finished(job: Mapping[str, Any]) -> str | None:
    if has_condition(job, "Complete"):
        return "Complete"
    if has_condition(job, "Failed"):
        return "Failed"
    return None


class CronJobController:
    """`run()` until cancelled."""

    def __init__(self, api: ApiClient, recorder: EventRecorder | None = None, *,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.api = api
        self.recorder = recorder or EventRecorder(api, "cronjob-controller")
        self.clock = clock or (lambda: datetime.now(UTC))
        self.cronjobs = Informer(api, "/apis/batch/v1/cronjobs", name="cronjobs")
        self.jobs = Informer(api, "/apis/batch/v1/jobs", name="cronjob jobs")
        self.queue: WorkQueue[str] = WorkQueue(base_delay=0.1, max_delay=30.0)
        self.cronjobs.add_handler(on_add=lambda cj: self.queue.add(_key(cj)),
                                  on_update=lambda old, new: self.queue.add(_key(new)))
        self.jobs.add_handler(on_add=self._job_changed,
                              on_update=lambda old, new: self._job_changed(new),
                              on_delete=self._job_changed)

    def _job_changed(self, job: Mapping[str, Any]) -> None:
        for ref in _md(job).get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == "CronJob":
                self.queue.add(f"{_md(job).get('namespace', '')}/{ref.get('name')}")

    async def run(self) -> None:
        await run_workers(self.queue, self.sync, what="cronjob", log=log,
                          runs=(self.cronjobs, self.jobs))

    async def _event(self, cronjob: Mapping[str, Any], type_: str, reason: str,
                     message: str) -> None:
        await self.recorder.record(cronjob, type_, reason, message, kind="CronJob",
                                   api_version="batch/v1")

    async def sync(self, key: str) -> None:
        cronjob = self.cronjobs.get(key)
        if cronjob is None:
            return
        namespace = str(_md(cronjob).get("namespace"))
        uid = str(_md(cronjob).get("uid"))
        owned = [j for j in self.jobs.list()
                 if _md(j).get("namespace") == namespace and _owner_uid(j) == uid]
        spec = cronjob.get("spec") or {}
        status: dict[str, Any] = copy.deepcopy(dict(cronjob.get("status") or {}))
        now = self.clock()

        # the active list follows the Jobs
        by_uid = {str(_md(j).get("uid")): j for j in owned}
        active = []
        for ref in status.get("active") or []:
            job = by_uid.get(str(ref.get("uid")))
            if job is None:
                continue
            state = _finished(job)
            if state is None:
                active.append(ref)
                continue
            await self._event(cronjob, "Normal", "SawCompletedJob",
                              f"Saw completed job: {_md(job).get('name')}, status: {state}")
            if state == "Complete":
                done = parse_time((job.get("status") or {}).get("completionTime"))
                last = parse_time(status.get("lastSuccessfulTime"))
                if done is not None and (last is None or done > last):
                    status["lastSuccessfulTime"] = rfc3339(done)
        listed = {str(r.get("uid")) for r in active}
        for job in owned:
            if _finished(job) is None and str(_md(job).get("uid")) not in listed:
                active.append(self._ref(job))
        status["active"] = active
        await self._cleanup(cronjob, owned)

        next_in: float | None = None
        if not _md(cronjob).get("deletionTimestamp") and not spec.get("suspend"):
            next_in = await self._maybe_run(cronjob, status, owned, now)
        if not status.get("active"):
            status.pop("active", None)
        if status != (cronjob.get("status") or {}):
            body = dict(cronjob, apiVersion="batch/v1", kind="CronJob", status=status)
            ns, name = key.split("/", 1)
            await self.api.update(resource_path("cronjobs", ns, name, "status",
                                                group="batch"), body)
        if next_in is not None:
            self.queue.add_after(key, next_in + NEXT_SCHEDULE_DELTA)

    @staticmethod
    def _ref(job: Mapping[str, Any]) -> dict[str, Any]:
        md = _md(job)
        return {"apiVersion": "batch/v1", "kind": "Job", "name": md.get("name"),
                "namespace": md.get("namespace"), "uid": md.get("uid"),
                "resourceVersion": md.get("resourceVersion")}

    async def _maybe_run(self, cronjob: Mapping[str, Any], status: dict[str, Any],
                         owned: list[dict[str, Any]], now: datetime) -> float | None:
        """Start the run that is due, if any; seconds until the next start time."""
        spec = cronjob.get("spec") or {}
        try:
            schedule = parse_schedule(str(spec.get("schedule") or ""))
            zone = time_zone(spec.get("timeZone"))
        except (ScheduleError, ValueError, KeyError) as err:
            await self._event(cronjob, "Warning", "UnparseableSchedule",
                              f"unparseable schedule: {spec.get('schedule')!s} : {err}")
            return None
        earliest = parse_time(status.get("lastScheduleTime")) or \
            parse_time(_md(cronjob).get("creationTimestamp")) or now
        deadline = spec.get("startingDeadlineSeconds")
        if isinstance(deadline, int):
            earliest = max(earliest, now - timedelta(seconds=deadline))
        due = most_recent_due(schedule, earliest, now, zone)
        next_in = max(0.0, (due.next_time - now).total_seconds())
        if due.scheduled is None:
            return next_in
        if due.missed > 100:
            await self._event(cronjob, "Warning", "TooManyMissedTimes",
                              f"too many missed start times: {due.missed}. Set or decrease "
                              ".spec.startingDeadlineSeconds or check clock skew")
        if isinstance(deadline, int) and \
                due.scheduled + timedelta(seconds=deadline) < now:
            when = due.scheduled.astimezone(UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")
            await self._event(cronjob, "Warning", "MissSchedule",
                              f"Missed scheduled time to start a job: {when}")
            return next_in
        name = job_name(str(_md(cronjob).get("name")), due.scheduled)
        if any(r.get("name") == name for r in status.get("active") or []) or any(
                _md(j).get("name") == name for j in owned):
            # started already (its status write may have been lost): record it
            last = parse_time(status.get("lastScheduleTime"))
            if last is None or last < due.scheduled:
                status["lastScheduleTime"] = rfc3339(due.scheduled)
            return next_in
        policy = spec.get("concurrencyPolicy") or "Allow"
        if policy == "Forbid" and status.get("active"):
            await self._event(cronjob, "Normal", "JobAlreadyActive",
                              "Not starting job because prior execution is running and "
                              "concurrency policy is Forbid")
            return next_in
        if policy == "Replace":
            for ref in list(status.get("active") or []):
                await self._delete_job(cronjob, str(ref.get("name")))
            status["active"] = []
        created = await self._create_job(cronjob, name, due.scheduled)
        if created is not None:
            status.setdefault("active", []).append(self._ref(created))
        status["lastScheduleTime"] = rfc3339(due.scheduled)
        return next_in

    async def _create_job(self, cronjob: Mapping[str, Any], name: str,
                          scheduled: datetime) -> dict[str, Any] | None:
        md = _md(cronjob)
        template = copy.deepcopy((cronjob.get("spec") or {}).get("jobTemplate") or {})
        tmd = template.get("metadata") or {}
        zone = time_zone((cronjob.get("spec") or {}).get("timeZone"))
        local = scheduled.astimezone(zone) if zone is not None else scheduled.astimezone(UTC)
        job_md: dict[str, Any] = {"name": name, "namespace": md.get("namespace"),
                                  "labels": dict(tmd.get("labels") or {}),
                                  "annotations": {**(tmd.get("annotations") or {}),
                                                  SCHEDULED_TIMESTAMP: rfc3339_in_zone(local)},
                                  "ownerReferences": [{
                                      "apiVersion": "batch/v1", "kind": "CronJob",
                                      "name": md.get("name"), "uid": md.get("uid"),
                                      "controller": True, "blockOwnerDeletion": True}]}
        if not job_md["labels"]:
            del job_md["labels"]
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_md,
               "spec": template.get("spec") or {}}
        try:
            created = await self.api.create(
                resource_path("jobs", str(md.get("namespace")), group="batch"), job)
        except StatusError as err:
            if err.code == 409:  # made already, by an earlier sync whose status was lost
                existing = await self.api.get(resource_path(
                    "jobs", str(md.get("namespace")), name, group="batch"))
                return existing if _owner_uid(existing) == md.get("uid") else None
            await self._event(cronjob, "Warning", "FailedCreate",
                              f"Error creating job: {err.message}")
            raise
        await self._event(cronjob, "Normal", "SuccessfulCreate", f"Created job {name}")
        return created

    async def _delete_job(self, cronjob: Mapping[str, Any], name: str) -> None:
        try:
            await self.api.delete(
                resource_path("jobs", str(_md(cronjob).get("namespace")), name, group="batch"),
                {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"})
        except StatusError as err:
            if err.code != 404:
                raise
            return
        await self._event(cronjob, "Normal", "SuccessfulDelete", f"Deleted job {name}")

    async def _cleanup(self, cronjob: Mapping[str, Any], owned: list[dict[str, Any]]) -> None:
        """The finished Jobs beyond the history limits go, oldest first."""
        spec = cronjob.get("spec") or {}
        for state, limit_key in (("Complete", "successfulJobsHistoryLimit"),
                                 ("Failed", "failedJobsHistoryLimit")):
            limit = spec.get(limit_key)
            if not isinstance(limit, int):
                continue
            done = [j for j in owned if _finished(j) == state
                    and not _md(j).get("deletionTimestamp")]
            done.sort(key=lambda j: str((j.get("status") or {}).get("startTime")
                                        or _md(j).get("creationTimestamp") or ""))
            for job in done[:max(0, len(done) - limit)]:
                await self._delete_job(cronjob, str(_md(job).get("name")))

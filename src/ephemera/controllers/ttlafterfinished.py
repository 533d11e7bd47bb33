"""The TTL-after-finished controller, as upstream's `pkg/controller/ttlafterfinished`: a
Job with `spec.ttlSecondsAfterFinished` is deleted (in the foreground, so its pods go
first; with its UID as precondition) that many seconds after it finished: its
`completionTime`, or the time its `Failed` condition became true."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.api.meta import parse_time
from ephemera.client import ApiClient, Informer, resource_path
from ephemera.controllers.objects import queue_key
from ephemera.controllers.runner import run_workers
from ephemera.controllers.workqueue import WorkQueue

__all__ = ["TTLAfterFinishedController", "expires_in"]

log = logging.getLogger("ephemera.controllers.ttlafterfinished")


def expires_in(job: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds until the finished Job expires (<= 0: now); None: it never does (no TTL, or
    not finished)."""
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    if not isinstance(ttl, int) or (job.get("metadata") or {}).get("deletionTimestamp"):
        return None
    status = job.get("status") or {}
    finished: datetime | None = None
    for c in status.get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            finished = parse_time(status.get("completionTime")) if c.get("type") == "Complete" \
                else None
            finished = finished or parse_time(c.get("lastTransitionTime"))
    if finished is None:
        return None
    return (finished - now).total_seconds() + ttl


class TTLAfterFinishedController:
    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.jobs = Informer(api, "/apis/batch/v1/jobs", name="ttl jobs")
        self.queue: WorkQueue[str] = WorkQueue(base_delay=0.5, max_delay=30.0)
        self.jobs.add_handler(on_add=self._changed,
                              on_update=lambda old, new: self._changed(new))

    def _changed(self, job: Mapping[str, Any]) -> None:
        if expires_in(job, datetime.now(UTC)) is not None:
            self.queue.add(queue_key(job))

    async def run(self) -> None:
        await run_workers(self.queue, self._sync, what="ttl-after-finished job", log=log,
                          runs=(self.jobs,))

    async def _sync(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        path = resource_path("jobs", namespace, name, group="batch")
        job = self.jobs.get(key)
        if job is None:
            return
        left = expires_in(job, datetime.now(UTC))
        if left is None:
            return
        if left > 0:
            self.queue.add_after(key, left)
            return
        try:  # the cache may be stale: read it fresh before deleting
            fresh = await self.api.get(path)
        except StatusError as err:
            if err.code == 404:
                return
            raise
        left = expires_in(fresh, datetime.now(UTC))
        if left is None or left > 0:
            if left is not None:
                self.queue.add_after(key, left)
            return
        log.info("ttl-after-finished: cleaning up job %s", key)
        try:
            await self.api.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                         "propagationPolicy": "Foreground",
                                         "preconditions": {"uid": fresh["metadata"]["uid"]}})
        except StatusError as err:
            if err.code not in (404, 409):
                raise

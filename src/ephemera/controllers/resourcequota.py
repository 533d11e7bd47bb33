"""The ResourceQuota controller, as upstream's (`pkg/controller/resourcequota`): it keeps each
quota's `status` equal to what the namespace really uses.

- Two informers (`ephemera.client.Informer`): every ResourceQuota and every Pod.
- A namespace is queued (once, however often) when a quota is added, when its `spec.hard`
  differs from `status.hard`, when a pod's charged usage changes (added, deleted, finished,
  resized; `ephemera.pods.quota.PodEvaluator.usage` before and after), and for every namespace
  with quotas each `resync_period` seconds (which also catches pods whose deletion grace
  period ran out).
- A sync recomputes each quota of the namespace (`ephemera.pods.quota.compute_used`: pods from
  the informer's cache, other counted kinds (`count/configmaps`, `secrets`, ...) listed
  fresh) and, when `status.hard` or `status.used` differ (as quantities), writes
  `PUT .../resourcequotas/NAME/status` with the quota's resourceVersion; a 409 (admission
  charged it meanwhile) re-reads the quota and tries again.

Admission charges `status.used` as objects are created; this controller is what releases
usage (deletions, finished pods) and corrects over-charges (a create that failed after its
charge). Like upstream's, a recompute that races a create between its charge and its write
can briefly under-count that pod until the pod's own event queues the namespace again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.api.quantity import QuantityError, quantity_from_json
from ephemera.client import ApiClient, ApiUnavailable, Informer, resource_path
from ephemera.client.reflector import DEFAULT_PAGE_SIZE
from ephemera.pods import quota

log = logging.getLogger("ephemera.controllers.resourcequota")

DEFAULT_RESYNC_PERIOD = 60.0
# Attempts of one quota's status write that lose to a concurrent write.
MAX_CONFLICT_RETRIES = 5
RETRY_DELAY = 1.0

Obj = dict[str, Any]


def _namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _same_list(a: Any, b: Any) -> bool:
    """Two JSON ResourceLists with the same keys and equal quantities."""
    a = a if isinstance(a, dict) else {}
    b = b if isinstance(b, dict) else {}
    if a.keys() != b.keys():
        return False
    try:
        return all(quantity_from_json(a[k]) == quantity_from_json(b[k]) for k in a)
    except (QuantityError, TypeError):
        return False


def status_current(obj: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    current = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(current, dict)
    return (_same_list(current.get("hard"), status.get("hard"))
            and _same_list(current.get("used"), status.get("used")))


class ResourceQuotaController:
    """Keeps `status` of every ResourceQuota current; `run()` until cancelled."""

    def __init__(self, api: ApiClient, *, gates: Mapping[str, bool] | None = None,
                 resync_period: float = DEFAULT_RESYNC_PERIOD,
                 pods: Informer | None = None) -> None:
        """`pods`: an informer of all pods shared with other controllers (else its own)."""
        self.api = api
        self.gates: Mapping[str, bool] = dict(gates or {})
        self.resync_period = resync_period
        self.evaluator = quota.PodEvaluator(self.gates)
        self.quotas = Informer(api, resource_path("resourcequotas"), name="resourcequotas")
        self.pods = pods if pods is not None else Informer(api, resource_path("pods"),
                                                               name="pods")
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        # How many quota status writes this controller made (for tests and logs).
        self.writes = 0

    # -- the queue -----------------------------------------------------------------------

    def enqueue(self, namespace: str) -> None:
        if namespace and namespace not in self._queued:
            self._queued.add(namespace)
            self._queue.put_nowait(namespace)

    def _has_quotas(self, namespace: str) -> bool:
        return bool(self.quotas.list(namespace))

    def _quota_added(self, obj: Obj) -> None:
        self.enqueue(_namespace(obj))

    def _quota_updated(self, old: Obj, new: Obj) -> None:
        spec_hard = (new.get("spec") or {}).get("hard")
        status_hard = (new.get("status") or {}).get("hard")
        if old.get("spec") != new.get("spec") or not _same_list(spec_hard, status_hard):
            self.enqueue(_namespace(new))

    def _pod_changed(self, obj: Obj) -> None:
        namespace = _namespace(obj)
        if self._has_quotas(namespace):
            self.enqueue(namespace)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        # The namespace's quotas first: a pod's usage is computed (twice) only when a quota
        # could count it, not for every status write of a namespace without one.
        namespace = _namespace(new)
        if self._has_quotas(namespace) and \
                self.evaluator.usage(old) != self.evaluator.usage(new):
            self.enqueue(namespace)

    # -- running -------------------------------------------------------------------------

    async def run(self) -> None:
        """Start the informers, then sync queued namespaces until cancelled."""
        tasks = [asyncio.create_task(self.quotas.run(), name="quota-informer"),
                 asyncio.create_task(self.pods.run(), name="pod-informer")]
        try:
            await self.quotas.wait_synced()
            await self.pods.wait_synced()
            self.quotas.add_handler(on_add=self._quota_added, on_update=self._quota_updated)
            self.pods.add_handler(on_add=self._pod_changed, on_update=self._pod_updated,
                                  on_delete=self._pod_changed)
            tasks.append(asyncio.create_task(self._resync(), name="quota-resync"))
            log.info("resourcequota controller: synced %d quotas, %d pods",
                     len(self.quotas), len(self.pods))
            while True:
                namespace = await self._queue.get()
                self._queued.discard(namespace)
                try:
                    await self.sync_namespace(namespace)
                except (StatusError, ApiUnavailable) as err:
                    log.warning("namespace %s: quota sync failed: %s; retrying", namespace, err)
                    asyncio.get_running_loop().call_later(RETRY_DELAY, self.enqueue, namespace)
        finally:
            await cancel_and_wait(*tasks)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_period)
            for namespace in sorted({_namespace(q) for q in self.quotas.list()}):
                self.enqueue(namespace)

    # -- one namespace -------------------------------------------------------------------

    def _namespace_pods(self, namespace: str) -> list[Obj]:
        return self.pods.list(namespace)

    async def _objects(self, namespace: str, kinds: list[tuple[str, str]]
                       ) -> dict[tuple[str, str], list[Obj]]:
        objects: dict[tuple[str, str], list[Obj]] = {}
        for group, plural in kinds:
            if (group, plural) == ("", "pods"):
                objects[(group, plural)] = self._namespace_pods(namespace)
                continue
            try:
                listed = await self.api.list(resource_path(plural, namespace, group=group),
                                             limit=DEFAULT_PAGE_SIZE)  # in pages
            except StatusError as err:
                if err.code == 404:  # not a served resource: its count stays as it is
                    continue
                raise
            objects[(group, plural)] = list(listed.get("items") or [])
        return objects

    async def sync_namespace(self, namespace: str) -> None:
        """Recompute and write the status of every quota of `namespace`."""
        for cached in list(self.quotas.list()):
            if _namespace(cached) == namespace:
                await self.sync_quota(cached)

    async def sync_quota(self, obj: Obj) -> None:
        """Write `obj`'s recomputed status when it differs, re-reading it after a 409."""
        md = obj.get("metadata") or {}
        namespace, name = str(md.get("namespace") or ""), str(md.get("name") or "")
        path = resource_path("resourcequotas", namespace, name, "status")
        current = obj
        for _ in range(MAX_CONFLICT_RETRIES):
            objects = await self._objects(namespace, quota.counted_kinds(current))
            status = quota.compute_used(current, objects, self.gates)
            if status_current(current, status):
                return
            body = {**current, "status": status}
            try:
                await self.api.update(path, body)
            except StatusError as err:
                if err.code == 404:
                    return
                if err.code != 409:
                    raise
                current = await self.api.get(resource_path("resourcequotas", namespace, name))
                continue
            self.writes += 1
            log.info("resourcequota %s/%s: used %s", namespace, name,
                     ",".join(f"{k}={v}" for k, v in status["used"].items()))
            return
        log.info("resourcequota %s/%s: gave up after %d conflicts; will retry", namespace,
                 name, MAX_CONFLICT_RETRIES)
        asyncio.get_running_loop().call_later(RETRY_DELAY, self.enqueue, namespace)


__all__ = ["DEFAULT_RESYNC_PERIOD", "ResourceQuotaController", "status_current"]

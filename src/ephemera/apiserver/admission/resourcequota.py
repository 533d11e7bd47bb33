"""The ResourceQuota admission plugin, as upstream's
(`k8s.io/apiserver/pkg/admission/plugin/resourcequota`), in the validating phase (the rules and
messages are `ephemera.pods.quota`, reference/k8s-semantics.md section 7.1):

- handles CREATE and UPDATE of namespaced objects (pods: create, `/dynamic` and `/resize`
  updates, and a main-resource update that changes the Terminating scope; any other kind:
  `count/<resource>` on create);
- judges the object against the namespace's quotas (`status.hard` and `status.used`, which
  the quota controller keeps current; read from the apiserver's object cache, which reflects
  every write this apiserver made): `failed quota: ...`,
  `status unknown for quota: ...`, `exceeded quota: q1, requested: ..., used: ..., limited:
  ...`, each a 403 `pods "p1" is forbidden: <message>`;
- charges each matching quota by a compare-and-swap update of its `status.used` through the
  context's quota writer (`AdmissionContext.update_quota`), re-checking against the fresh
  quota when it lost a race (so two concurrent creates cannot both pass a nearly full quota);
  when a later quota refuses, the charges already made for this request are taken back. A
  `dryRun` request is checked but charges nothing.

A charge is made before the object is stored; if the write then fails (or loses its own race
and admission runs again), the quota is over-charged until the controller recomputes
`status.used` from the objects that exist, as upstream's is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.api.jsoncopy import json_copy
from ephemera.apiserver.admission import AdmissionContext, AdmissionPluginBase, AdmissionRequest
from ephemera.apiserver.resources import core_resource
from ephemera.pods import quota

log = logging.getLogger("ephemera.apiserver")


RESOURCE_QUOTAS = core_resource("resourcequotas")
_SUBRESOURCES = ("", "dynamic", "resize")


class _QuotaGone(Exception):
    """The quota was deleted between the read and the charge."""


async def namespace_quotas(context: AdmissionContext, req: AdmissionRequest
                           ) -> list[dict[str, Any]]:
    """The ResourceQuotas of the request's namespace, in name order (shared: read only), from
    the apiserver's object cache as upstream's quota accessor reads its lister with a live
    lookup (`AdmissionContext.cached_list`). The charge itself reads and writes the store."""
    return await context.cached_list(RESOURCE_QUOTAS, req.namespace)


class ResourceQuota(AdmissionPluginBase):
    name = "ResourceQuota"

    def handles(self, req: AdmissionRequest) -> bool:
        return (req.operation in ("CREATE", "UPDATE") and req.resource.namespaced
                and bool(req.namespace) and req.subresource in _SUBRESOURCES
                and isinstance(req.obj, dict))

    async def validate(self, req: AdmissionRequest) -> None:
        assert req.obj is not None
        evaluator = quota.evaluator_for(req.resource.plural, req.resource.group, req.gates)
        if not evaluator.handles(req.operation, req.subresource, req.obj, req.old):
            return
        quotas = await namespace_quotas(self.context, req)
        if not quotas:
            return
        try:
            charges = quota.plan_charges(quotas, evaluator, req.operation, req.obj, req.old,
                                         req.subresource)
        except quota.QuotaRejected as err:
            raise req.forbidden(str(err)) from None
        if req.dry_run or not charges:
            return
        made: list[quota.Charge] = []
        try:
            for item in charges:
                if await self._charge(req, item):
                    made.append(item)
        except quota.QuotaRejected as err:
            await self._release(req, made)
            raise req.forbidden(str(err)) from None
        except BaseException:
            await self._release(req, made)
            raise

    async def _charge(self, req: AdmissionRequest, item: quota.Charge) -> bool:
        """Add `item` to its quota's `status.used`; False when the quota is gone."""
        try:
            await _write_used(self.context, req, item, quota.charge)
        except _QuotaGone:
            return False
        except StatusError as err:
            if err.code == 404:
                return False
            raise
        return True

    async def _release(self, req: AdmissionRequest, made: list[quota.Charge]) -> None:
        """Take back the charges of a request that another quota refused (best effort)."""
        for item in made:
            try:
                await _write_used(self.context, req, item, quota.release)
            except (_QuotaGone, StatusError) as err:
                log.info("quota %s/%s: taking back a charge failed: %s", req.namespace,
                         item.quota, err)


async def _write_used(context: AdmissionContext, req: AdmissionRequest, item: quota.Charge,
                      used: Callable[[Mapping[str, Any], quota.Charge], dict[str, str]]
                      ) -> None:
    """Set the `status.used` of `item`'s quota to `used(quota, item)` by compare-and-swap (the
    registry re-reads and calls again after a lost race); `_QuotaGone` when the quota is
    gone."""

    async def write(current: dict[str, Any] | None) -> dict[str, Any]:
        if current is None:
            raise _QuotaGone
        new = json_copy(current)
        status = new.get("status")
        if not isinstance(status, dict):
            status = new["status"] = {}
        status["used"] = used(current, item)
        return new

    await context.update_quota(req.namespace, item.quota, write)


__all__ = ["RESOURCE_QUOTAS", "ResourceQuota", "namespace_quotas"]

"""The LimitRanger admission plugin, as upstream's (`plugin/pkg/admission/limitranger`), on pods
(reference/k8s-semantics.md section 7.2; the rules are `ephemera.pods.limitrange`):

- handles a pod CREATE, and an UPDATE of the `dynamic` (KEP-5972) or `resize` subresource;
  a pod being deleted is left alone; the LimitRanges are read from the apiserver's object
  cache (`ephemera.apiserver.informers`), as upstream's plugin reads its informer;
- mutating: the namespace's LimitRanges (in name order, the first to set a value wins) fill
  the missing requests and limits of the containers (`Container` items' `defaultRequest` and
  `default`) and, with `PodLevelResourcesEphemeralStorage`, the pod-level
  `ephemeral-storage` (`Pod` items, KEP-6386), recorded in `kubernetes.io/limit-ranger`. On a
  `/dynamic` update only the added containers are defaulted, with the resources an added
  container may set (`cpu`, `memory`);
- validating: every `min`, `max` and `maxLimitRequestRatio` of every item, a 403 with all
  violations: `pods "p" is forbidden: [maximum memory usage per Container is 1Gi, but limit is
  2Gi, ...]`. On an update, resources whose request and limit did not change are not checked
  again.
"""

from __future__ import annotations

from typing import Any

from ephemera.apiserver.admission import (
    AdmissionContext,
    AdmissionPluginBase,
    AdmissionRequest,
    is_pod_request,
)
from ephemera.apiserver.resources import core_resource
from ephemera.pods import limitrange
from ephemera.pods.dynamic import DYNAMIC_CONTAINER_RESOURCES

LIMIT_RANGES = core_resource("limitranges")


async def namespace_limit_ranges(context: AdmissionContext, req: AdmissionRequest
                                 ) -> list[dict[str, Any]]:
    """The LimitRanges of the request's namespace, in name order (shared: read only), from
    the apiserver's object cache as upstream's lister with its live lookup
    (`AdmissionContext.cached_list`)."""
    return await context.cached_list(LIMIT_RANGES, req.namespace)


def _container_names(pod: dict[str, Any] | None) -> set[str]:
    spec = (pod or {}).get("spec")
    if not isinstance(spec, dict):
        return set()
    return {str(c.get("name")) for key in ("containers", "initContainers")
            for c in spec.get(key) or [] if isinstance(c, dict)}


class LimitRanger(AdmissionPluginBase):
    name = "LimitRanger"

    def handles(self, req: AdmissionRequest) -> bool:
        if not isinstance(req.obj, dict):
            return False
        if (req.obj.get("metadata") or {}).get("deletionTimestamp"):
            return False
        if req.operation == "CREATE":
            return is_pod_request(req)
        return req.operation == "UPDATE" and is_pod_request(req, "dynamic", "resize")

    async def admit(self, req: AdmissionRequest) -> None:
        assert req.obj is not None
        ranges = await namespace_limit_ranges(self.context, req)
        if not ranges:
            return
        if req.operation == "CREATE":
            limitrange.default_pod_resources(req.obj, ranges, self.gates)
            return
        added = _container_names(req.obj) - _container_names(req.old)
        if added:
            limitrange.default_pod_resources(req.obj, ranges, self.gates, containers=added,
                                             allowed=DYNAMIC_CONTAINER_RESOURCES)

    async def validate(self, req: AdmissionRequest) -> None:
        assert req.obj is not None
        ranges = await namespace_limit_ranges(self.context, req)
        if not ranges:
            return
        old = req.old if req.operation == "UPDATE" else None
        messages = limitrange.validate_pod_limits(req.obj, ranges, self.gates, old_pod=old)
        if messages:
            raise req.forbidden(limitrange.aggregate_messages(messages))


__all__ = ["LIMIT_RANGES", "LimitRanger", "namespace_limit_ranges"]

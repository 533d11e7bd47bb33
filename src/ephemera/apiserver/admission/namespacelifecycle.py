"""The NamespaceLifecycle admission plugin, as upstream's
(`k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle`), in the mutating phase so that it
answers before validation does:

- deleting `default`, `kube-system` or `kube-public` is 403 `namespaces "default" is
  forbidden: this namespace may not be deleted`;
- a create or update of a namespaced object in a namespace that does not exist is 404
  `namespaces "x" not found` (deletes are always allowed, namespaces themselves too);
- a create in a Terminating namespace (phase Terminating or deletionTimestamp set) is 403
  `<resource> "<name>" is forbidden: unable to create new content in namespace x because it
  is being terminated`, with upstream's `NamespaceTerminating` cause on `metadata.namespace`.

The namespace is read from the context's namespace cache (`AdmissionContext.namespaces`,
`ephemera.apiserver.namespaces.NamespaceCache`, upstream's informer) when that admits the
request, else live from the store; a namespace DELETE makes the cache read that namespace live
for a while (upstream's forceLiveLookupCache). The background work of the namespace lifecycle
(emptying a Terminating namespace, its default ServiceAccount) is
`ephemera.apiserver.namespaces`, which reads what a Terminating and an immortal namespace are
from here (`is_terminating`, `IMMORTAL_NAMESPACES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ephemera.api import errors
from ephemera.apiserver.admission import AdmissionPluginBase, AdmissionRequest
from ephemera.apiserver.resources import core_resource

NAMESPACES = core_resource("namespaces")
# upstream's immortalNamespaces: never deleted.
IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


def is_terminating(namespace: Mapping[str, Any]) -> bool:
    """Phase Terminating, or a deletionTimestamp set: no new content may be created in it."""
    return ((namespace.get("status") or {}).get("phase") == "Terminating"
            or bool((namespace.get("metadata") or {}).get("deletionTimestamp")))


class NamespaceLifecycle(AdmissionPluginBase):
    name = "NamespaceLifecycle"

    def handles(self, req: AdmissionRequest) -> bool:
        return True

    async def admit(self, req: AdmissionRequest) -> None:
        is_namespace = req.resource == NAMESPACES
        cache = self.context.namespaces
        if req.operation == "DELETE" and is_namespace:
            if req.name in IMMORTAL_NAMESPACES:
                raise errors.forbidden("namespaces", req.name, "this namespace may not be deleted")
            if cache is not None:
                cache.force_live_lookup(req.name)
        if is_namespace or not req.resource.namespaced or not req.namespace:
            return
        if req.operation == "DELETE":
            return
        if cache is not None and cache.admits(req.namespace, req.operation):
            return
        namespace = await self.context.get(NAMESPACES, "", req.namespace)  # 404 when missing
        if req.operation != "CREATE":
            return
        if is_terminating(namespace):
            err = req.forbidden(f"unable to create new content in namespace {req.namespace} "
                                "because it is being terminated")
            details = err.details if err.details is not None else {}
            details.setdefault("causes", []).append({
                "reason": "NamespaceTerminating",
                "message": f"namespace {req.namespace} is being terminated",
                "field": "metadata.namespace"})
            err.details = details
            raise err

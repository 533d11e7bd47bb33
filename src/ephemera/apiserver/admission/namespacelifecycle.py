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

The background work of the namespace lifecycle (emptying a Terminating namespace, its default
ServiceAccount) is `ephemera.apiserver.namespaces`.
"""

from __future__ import annotations

from ephemera.api import errors
from ephemera.apiserver.admission import AdmissionPluginBase, AdmissionRequest
from ephemera.apiserver.namespaces import IMMORTAL_NAMESPACES, NAMESPACES


class NamespaceLifecycle(AdmissionPluginBase):
    name = "NamespaceLifecycle"

    def handles(self, req: AdmissionRequest) -> bool:
        return True

    async def admit(self, req: AdmissionRequest) -> None:
        is_namespace = req.resource == NAMESPACES
        if req.operation == "DELETE" and is_namespace and req.name in IMMORTAL_NAMESPACES:
            raise errors.forbidden("namespaces", req.name, "this namespace may not be deleted")
        if is_namespace or not req.resource.namespaced or not req.namespace:
            return
        if req.operation == "DELETE":
            return
        kv = await req.registry.store.get(NAMESPACES.key("", req.namespace))
        if kv is None:
            raise errors.not_found("namespaces", req.namespace)
        if req.operation != "CREATE":
            return
        ns = req.registry.codec(NAMESPACES).decode(kv)
        terminating = ((ns.get("status") or {}).get("phase") == "Terminating"
                       or bool((ns.get("metadata") or {}).get("deletionTimestamp")))
        if terminating:
            err = req.forbidden(f"unable to create new content in namespace {req.namespace} "
                                "because it is being terminated")
            details = err.details if err.details is not None else {}
            details.setdefault("causes", []).append({
                "reason": "NamespaceTerminating",
                "message": f"namespace {req.namespace} is being terminated",
                "field": "metadata.namespace"})
            err.details = details
            raise err

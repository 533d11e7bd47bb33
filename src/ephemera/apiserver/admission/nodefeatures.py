"""The NodeDeclaredFeatureValidator admission plugin (KEP-5328 Node Declared Features), as
upstream's (`plugin/pkg/admission/nodedeclaredfeatures`), validating phase, active only with
the `NodeDeclaredFeatures` gate on. A node lists what it supports in
`status.declaredFeatures`; a request that needs a feature of the pod's node is refused with a
403 Forbidden when the node does not declare it:

- `PUT`/`PATCH pods/NAME/dynamic` of a bound pod: the features
  `ephemera.pods.dynamic.required_node_features` names for the change (container additions or
  removals need `DynamicContainers`, volume and volume mount changes
  `DynamicNodeLocalEphemeralVolumes`): `pods "p" is forbidden: pod update requires features
  DynamicNodeLocalEphemeralVolumes which are not available on node "n1"` (upstream's message).
- `POST pods/NAME/binding`, and a create of a pod that already names its node: a pod that uses
  pod-level `ephemeral-storage` (KEP-6386) needs `PodLevelResourcesEphemeralStorage`: `pods
  "p" is forbidden: pod requires features PodLevelResourcesEphemeralStorage which are not
  available on node "n1"` (ephemera's message; upstream leaves this to the scheduler and the
  kubelet's admission, ephemera checks the binding too so that no path bypasses it).

A node that does not exist declares nothing: when the request needs a feature, it is refused
with upstream's `node "n1" not found` (403). A request that needs no feature, or a pod not
bound to a node, is not checked. With the gate off nothing is checked, as upstream.

The Node is read as upstream's plugin reads it, from a watch-fed cache (its node lister): the
apiserver's watch cache, no store read on a `PUT /dynamic`'s way. A refusal is never decided on
the cache: when the cached Node lacks a needed feature, or the cache has none, the Node is
read from the store and that copy decides (a feature declared a moment ago is seen). A
binding's pod is read the same way when the binding names the pod's UID (as the scheduler's
do): the watch cache's copy of that UID is the pod being bound, whose pod-level resources,
which the check reads, no write changes; otherwise it is read from the store.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.api.featuregates import NODE_DECLARED_FEATURES
from ephemera.api.goformat import go_quote
from ephemera.apiserver.admission import (
    AdmissionContext,
    AdmissionPluginBase,
    AdmissionRequest,
    is_pod_request,
)
from ephemera.apiserver.resources import core_resource
from ephemera.pods.dynamic import dynamic_change, required_node_features
from ephemera.pods.resources import pod_placement_features

NODES = core_resource("nodes")
PODS = core_resource("pods")


def _spec(pod: dict[str, Any] | None) -> dict[str, Any]:
    spec = (pod or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def _declared(node: dict[str, Any]) -> set[str]:
    declared = (node.get("status") or {}).get("declaredFeatures")
    return {str(f) for f in declared} if isinstance(declared, list) else set()


async def node_declared_features(context: AdmissionContext, req: AdmissionRequest,
                                 node: str) -> Collection[str]:
    """The node's `status.declaredFeatures` (read live); 403 `node "n" not found` when it
    does not exist."""
    try:
        obj = await context.get(NODES, "", node)
    except StatusError as err:
        if err.code == 404:
            raise req.forbidden(f'node {go_quote(node)} not found') from None
        raise
    return _declared(obj)


class NodeDeclaredFeatureValidator(AdmissionPluginBase):
    name = "NodeDeclaredFeatureValidator"

    def handles(self, req: AdmissionRequest) -> bool:
        if not self.gates.enabled(NODE_DECLARED_FEATURES):
            return False
        if req.operation == "UPDATE":
            return is_pod_request(req, "dynamic")
        return req.operation == "CREATE" and is_pod_request(req, "", "binding")

    async def validate(self, req: AdmissionRequest) -> None:
        if req.operation == "UPDATE":
            await self._validate_update(req)
        elif req.subresource == "binding":
            target = (req.obj or {}).get("target") or {}
            pod = self._watched_pod(req)
            if pod is None:
                pod = await self.context.get(PODS, req.namespace, req.name)
            await self._validate_placement(req, pod, str(target.get("name") or ""))
        elif req.obj is not None:
            await self._validate_placement(req, req.obj, str(_spec(req.obj).get("nodeName")
                                                             or ""))

    def _watched_pod(self, req: AdmissionRequest) -> dict[str, Any] | None:
        """The watch cache's copy of a binding's pod when the binding names its UID (the
        incarnation being bound; its pod-level resources are immutable), else None."""
        metadata = (req.obj or {}).get("metadata")
        uid = metadata.get("uid") if isinstance(metadata, dict) else None
        if not uid:
            return None
        cached = self.context.watched(PODS, req.namespace, req.name)
        if cached is None or (cached.get("metadata") or {}).get("uid") != uid:
            return None
        return cached

    async def _validate_update(self, req: AdmissionRequest) -> None:
        if req.obj is None or req.old is None:
            return
        node = str(_spec(req.obj).get("nodeName") or _spec(req.old).get("nodeName") or "")
        await _require_features(self.context, req, node, required_node_features(
            dynamic_change(req.obj, req.old)), "pod update")

    async def _validate_placement(self, req: AdmissionRequest, pod: dict[str, Any],
                                  node: str) -> None:
        await _require_features(self.context, req, node, pod_placement_features(pod), "pod")


async def _require_features(context: AdmissionContext, req: AdmissionRequest, node: str,
                            needed: list[str], subject: str) -> None:
    """403 `<subject> requires features F1, F2 which are not available on node "n"` when
    `node` does not declare every feature in `needed` (nothing needed or no node: no check)."""
    if not needed or not node:
        return
    cached = context.watched(NODES, "", node)
    if cached is not None and all(f in _declared(cached) for f in needed):
        return
    declared = await node_declared_features(context, req, node)
    missing = [f for f in needed if f not in declared]
    if missing:
        raise req.forbidden(f"{subject} requires features {', '.join(missing)} which are not "
                            f'available on node {go_quote(node)}')

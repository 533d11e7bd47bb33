"""The NodeRestriction admission plugin (upstream's `plugin/pkg/admission/noderestriction`),
mutating phase: what a node (a `system:node:<name>` user in `system:nodes`, see
`ephemera.apiserver.nodeidentity`) may write. Requests of other users are not looked at.

- pods: create only mirror pods (annotation `kubernetes.io/config.mirror`) bound to itself,
  owned by its Node (one controller owner reference with the Node's uid, no
  blockOwnerDeletion) and referencing no ServiceAccount, Secret, ConfigMap,
  ClusterTrustBundle or PersistentVolumeClaim; delete only pods bound to itself; no update;
- pods/status: update only pods bound to itself, without changing their labels; any other
  pod subresource (`dynamic`, `binding`, ...) is refused;
- nodes (and nodes/status): only its own Node; on create no `configSource` and no label it may
  not set, on update no new `configSource`, no taint change and no change of a label it may not
  set (labels under `node-restriction.kubernetes.io/`, and `kubernetes.io` / `k8s.io` labels
  other than the kubelet's own: `kubernetes.io/hostname`, `kubernetes.io/os`,
  `kubernetes.io/arch`, the zone, region and instance-type labels, and the
  `kubelet.kubernetes.io/` and `node.kubernetes.io/` namespaces);
- leases: only its own Lease in `kube-node-lease`;
- serviceaccounts/token (a TokenRequest, when its handler runs admission): only bound to a
  pod (with its uid) that is bound to the node.

Every refusal is upstream's 403 with upstream's message, e.g. `pods "p" is forbidden: node
"n1" can only update pod status for pods with spec.nodeName set to itself`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ephemera.api.goformat import go_quote
from ephemera.apiserver.admission import AdmissionPluginBase, AdmissionRequest
from ephemera.apiserver.nodeidentity import node_identity
from ephemera.apiserver.resources import core_resource
from ephemera.pods.references import (
    CONFIGMAP,
    SECRET,
    pod_level_references,
    pod_volume_references,
)

NODES = core_resource("nodes")
PODS = core_resource("pods")
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_RESTRICTION_LABEL_NAMESPACE = "node-restriction.kubernetes.io"
# upstream's kubeletapis.KubeletLabels() and KubeletLabelNamespaces().
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
})
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _label_namespace(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def _in_namespace(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


def is_kubelet_label(key: str) -> bool:
    """A label a kubelet may set on its own Node (upstream's `IsKubeletLabel`)."""
    if key in KUBELET_LABELS:
        return True
    namespace = _label_namespace(key)
    return any(_in_namespace(namespace, allowed) for allowed in KUBELET_LABEL_NAMESPACES)


def forbidden_labels(new: Mapping[str, str], old: Mapping[str, str]) -> list[str]:
    """The labels added, removed or changed between `old` and `new` that a node may not
    touch, sorted (upstream's `getForbiddenLabels(getModifiedLabels(...))`)."""
    modified = {k for k in new.keys() | old.keys() if new.get(k) != old.get(k)}
    forbidden = set()
    for key in modified:
        namespace = _label_namespace(key)
        if _in_namespace(namespace, NODE_RESTRICTION_LABEL_NAMESPACE):
            forbidden.add(key)
        kubernetes = _in_namespace(namespace, "kubernetes.io") or _in_namespace(namespace,
                                                                               "k8s.io")
        if kubernetes and not is_kubelet_label(key):
            forbidden.add(key)
    return sorted(forbidden)


def _labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return _dict(_dict((obj or {}).get("metadata")).get("labels"))


def _spec(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    return _dict((obj or {}).get("spec"))


class NodeRestriction(AdmissionPluginBase):
    name = "NodeRestriction"

    def handles(self, req: AdmissionRequest) -> bool:
        return node_identity(req.user)[1]

    async def admit(self, req: AdmissionRequest) -> None:
        node, _ = node_identity(req.user)
        if not node:
            name = req.user.name if req.user is not None else ""
            raise req.forbidden(f'could not determine node from user {go_quote(name)}')
        if req.is_resource("", "pods"):
            if req.subresource == "":
                await self._pod(node, req)
            elif req.subresource == "status":
                self._pod_status(node, req)
            else:
                raise req.forbidden(f'unexpected pod subresource {go_quote(req.subresource)}, only '
                                    "'status' and 'eviction' are allowed")
        elif req.is_resource("", "nodes"):
            self._node(node, req)
        elif req.is_resource("coordination.k8s.io", "leases"):
            self._lease(node, req)
        elif (req.is_resource("", "serviceaccounts") and req.operation == "CREATE"
              and req.subresource == "token"):
            await self._token_request(node, req)

    async def _pod(self, node: str, req: AdmissionRequest) -> None:
        if req.operation == "CREATE":
            await self._pod_create(node, req)
        elif req.operation == "DELETE":
            existing = await self.context.get(PODS, req.namespace, req.name)
            if _spec(existing).get("nodeName") != node:
                raise req.forbidden(
                    f'node {go_quote(node)} can only delete pods with spec.nodeName set to '
                    "itself")
        else:
            raise req.forbidden(f'unexpected operation {go_quote(req.operation)}, node '
                                f'{go_quote(node)} can only create and delete mirror pods')

    async def _pod_create(self, node: str, req: AdmissionRequest) -> None:
        pod = req.obj or {}
        md = _dict(pod.get("metadata"))
        spec = _spec(pod)
        if MIRROR_POD_ANNOTATION not in _dict(md.get("annotations")):
            raise req.forbidden(f'pod does not have {go_quote(MIRROR_POD_ANNOTATION)} '
                                f'annotation, node {go_quote(node)} can only create mirror pods')
        if spec.get("nodeName") != node:
            raise req.forbidden(
                f'node {go_quote(node)} can only create pods with spec.nodeName set to itself')
        owners = md.get("ownerReferences") or []
        if len(owners) > 1:
            raise req.forbidden(f'node {go_quote(node)} can only create pods with a single owner '
                                "reference set to itself")
        if not owners:
            raise req.forbidden(
                f'node {go_quote(node)} can only create pods with an owner reference set to itself')
        owner = _dict(owners[0])
        if (owner.get("apiVersion") != "v1" or owner.get("kind") != "Node"
                or owner.get("name") != node):
            raise req.forbidden(
                f'node {go_quote(node)} can only create pods with an owner reference set to itself')
        if owner.get("controller") is not True:
            raise req.forbidden(f'node {go_quote(node)} can only create pods with a controller '
                                "owner reference set to itself")
        if owner.get("blockOwnerDeletion") is True:
            raise req.forbidden(
                f'node {go_quote(node)} must not set blockOwnerDeletion on an owner reference')
        node_obj = await self.context.get(NODES, "", node)
        node_uid = _dict(node_obj.get("metadata")).get("uid", "")
        if owner.get("uid", "") != node_uid:
            raise req.forbidden(f"node {node} UID mismatch: expected {owner.get('uid', '')} "
                                f"got {node_uid}")
        if spec.get("serviceAccountName"):
            raise req.forbidden(
                f'node {go_quote(node)} can not create pods that reference a service account')
        refs = pod_level_references(pod).union(*pod_volume_references(pod).values())
        kinds = {kind for kind, _, _ in refs}
        if SECRET in kinds:
            raise req.forbidden(
                f'node {go_quote(node)} can not create pods that reference secrets')
        if CONFIGMAP in kinds:
            raise req.forbidden(
                f'node {go_quote(node)} can not create pods that reference configmaps')
        volumes = [_dict(v) for v in spec.get("volumes") or []]
        for volume in volumes:
            for source in _dict(volume.get("projected")).get("sources") or []:
                if "clusterTrustBundle" in _dict(source):
                    raise req.forbidden(f'node {go_quote(node)} can not create pods that reference '
                                        "clustertrustbundles")
        if any("persistentVolumeClaim" in v for v in volumes):
            raise req.forbidden(
                f'node {go_quote(node)} can not create pods that reference persistentvolumeclaims')

    @staticmethod
    def _pod_status(node: str, req: AdmissionRequest) -> None:
        if req.operation != "UPDATE":
            raise req.forbidden(f'unexpected operation {go_quote(req.operation)}')
        if _spec(req.old).get("nodeName") != node:
            raise req.forbidden(f'node {go_quote(node)} can only update pod status for pods with '
                                "spec.nodeName set to itself")
        if _labels(req.obj) != _labels(req.old):
            raise req.forbidden(f'node {go_quote(node)} cannot update labels through pod status')

    @staticmethod
    def _node(node: str, req: AdmissionRequest) -> None:
        if req.name != node:
            raise req.forbidden(
                f'node {go_quote(node)} is not allowed to modify node {go_quote(req.name)}')
        if req.operation == "CREATE":
            if _spec(req.obj).get("configSource") is not None:
                raise req.forbidden(f'node {go_quote(node)} is not allowed to create pods with a '
                                    "non-nil configSource")
            labels = forbidden_labels(_labels(req.obj), {})
            if labels:
                raise req.forbidden(f'node {go_quote(node)} is not allowed to set the following '
                                    f"labels: {', '.join(labels)}")
        elif req.operation == "UPDATE":
            new, old = _spec(req.obj), _spec(req.old)
            source = new.get("configSource")
            if source is not None and source != old.get("configSource"):
                raise req.forbidden(f'node {go_quote(node)} is not allowed to update '
                                    "configSource to a new non-nil configSource")
            if (new.get("taints") or []) != (old.get("taints") or []):
                raise req.forbidden(f'node {go_quote(node)} is not allowed to modify taints')
            labels = forbidden_labels(_labels(req.obj), _labels(req.old))
            if labels:
                raise req.forbidden(f"is not allowed to modify labels: {', '.join(labels)}")

    @staticmethod
    def _lease(node: str, req: AdmissionRequest) -> None:
        if req.namespace != NODE_LEASE_NAMESPACE:
            raise req.forbidden(
                f'can only access leases in the {go_quote(NODE_LEASE_NAMESPACE)} system namespace')
        name = req.name
        if req.operation == "CREATE":
            name = str(_dict((req.obj or {}).get("metadata")).get("name") or "")
        if name != node:
            raise req.forbidden(
                "can only access node lease with the same name as the requesting node")

    async def _token_request(self, node: str, req: AdmissionRequest) -> None:
        ref = _dict(_spec(req.obj).get("boundObjectRef"))
        if (ref.get("apiVersion") != "v1" or ref.get("kind") != "Pod"
                or not ref.get("name")):
            raise req.forbidden("node requested token not bound to a pod")
        if not ref.get("uid"):
            raise req.forbidden("node requested token with a pod binding without a uid")
        pod = await self.context.get(PODS, req.namespace, str(ref["name"]))
        if ref["uid"] != _dict(pod.get("metadata")).get("uid"):
            raise req.forbidden(f"the UID in the bound object reference ({ref['uid']}) does "
                                "not match the UID in record. The object might have been "
                                "deleted and then recreated")
        if _spec(pod).get("nodeName") != node:
            raise req.forbidden("node requested token bound to a pod scheduled on a "
                                "different node")

"""The Node authorizer (`--authorization-mode=Node`, upstream's
`plugin/pkg/auth/authorizer/node/node_authorizer.go`): what a kubelet may do.

Only requests of node users (`system:node:<name>` in `system:nodes`, see
`ephemera.apiserver.nodeidentity`) get an opinion; everyone else gets NO_OPINION. For a node:

- `secrets`, `configmaps`: get, list and watch of one named object, allowed when a pod bound
  to the node references it (`ephemera.apiserver.authz.nodegraph`); otherwise NO_OPINION with
  upstream's reason `no relationship found between node '<n>' and this object` (the 403 reads
  `... cannot get resource "secrets" ...: no relationship found ...`);
- `persistentvolumeclaims`: get of a referenced claim, update and patch of its status;
  `persistentvolumes`, `volumeattachments`: get of a related one (ephemera serves neither,
  so none is); `csinodes` (storage.k8s.io): its own;
- `serviceaccounts/token`: create, for the ServiceAccounts of pods bound to the node;
- `leases` (coordination.k8s.io): get, create, update, patch, delete of its own Lease in
  `kube-node-lease` (create is left to NodeRestriction, which sees the name);
- everything else: upstream's static node rules (`bootstrappolicy.node_rules()`, the
  `system:node` ClusterRole's, matched as RBAC matches rules: read pods, nodes, services,
  endpoints; create and delete pods; update pods/status, nodes and nodes/status; create,
  update, patch events; ...), with the `AuthorizeNodeWithSelectors`
  refinements off (ephemera's authorization attributes carry no field selectors). Which pods,
  nodes and leases a node may write is NodeRestriction's job
  (`ephemera.apiserver.admission.noderestriction`), as upstream.

The graph is kept from a watch on the pods in the store (listed at `start`, re-listed after
a compacted or dropped watch). Decisions do not wait for that watch: an edge the graph has is
confirmed against the pods as the store has them now, and a request the graph would deny is
checked against the namespace's pods in the store before it is denied. So a kubelet may read
a Secret as soon as a `pods/dynamic` update adding it to one of its pods is stored, and not
once the status update reporting the volume's teardown is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ephemera.api.goformat import go_quote
from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz import Attributes, Decision
from ephemera.apiserver.authz.bootstrappolicy import node_rules
from ephemera.apiserver.authz.nodegraph import NodeGraph, may_be_bound, pod_key
from ephemera.apiserver.authz.rbac import rule_allows
from ephemera.apiserver.informers import Reflector
from ephemera.apiserver.nodeidentity import node_identity
from ephemera.apiserver.registry import Registry
from ephemera.apiserver.resources import core_resource
from ephemera.apiserver.watchcache import decoded
from ephemera.pods.references import (
    CONFIGMAP,
    PVC,
    SECRET,
    SERVICEACCOUNT,
    Ref,
    pod_level_references,
    pod_volume_references,
)
from ephemera.store import Event, KeyValue

log = logging.getLogger("ephemera.apiserver")

PODS = core_resource("pods")
NODE_LEASE_NAMESPACE = "kube-node-lease"

_READ = frozenset({"get", "list", "watch"})
_CSINODE_VERBS = ("get", "create", "update", "patch", "delete")

# upstream's NodeRules() (the `system:node` ClusterRole), for what the graph and the special
# cases above do not decide.
NODE_RULES = tuple(node_rules())


def node_rules_allow(attributes: Attributes) -> bool:
    return any(rule_allows(attributes, rule) for rule in NODE_RULES)


NO_RULE_RESOLUTION = "node authorizer does not support user rule resolution"


def no_relationship(node: str) -> str:
    return f"no relationship found between node '{node}' and this object"


class NodeAuthorizer:
    """The Node authorization mode over the pods of `registry` (see the module docstring).
    `start` lists the pods and watches them in the background; `stop` ends the watch."""

    def __init__(self, registry: Registry, *, retry_interval: float = 1.0) -> None:
        self.registry = registry
        self.graph = NodeGraph()
        self._codec = registry.codec(PODS)
        self._prefix = PODS.key_prefix()
        self._reflector = Reflector(registry.store, PODS.key_prefix(), self,
                                    name="node authorizer", retry_interval=retry_interval,
                                    watch_cache=registry.watch_cache)

    # -- the graph from the store (this authorizer is its reflector's sink) -----------------

    async def start(self) -> None:
        await self._reflector.start()

    async def stop(self) -> None:
        await self._reflector.close()

    def replace(self, kvs: Sequence[KeyValue], revision: int) -> None:
        self.graph.replace(self._codec.decode(kv) for kv in kvs)

    def apply(self, event: Event) -> None:
        """One event of the watch: a deleted pod leaves the graph (found by its key); an
        unbound one, which the graph ignores, is not decoded (`may_be_bound`); a bound one is
        decoded once with the watch cache's other consumers (`decoded`)."""
        if event.type == "DELETE":
            namespace, _, name = event.kv.key[len(self._prefix):].partition("/")
            self.graph.delete_pod(namespace, name)
        elif may_be_bound(event.kv.value):
            self.graph.apply_pod(decoded(event, self._codec))

    # -- decisions --------------------------------------------------------------------------

    async def rules_for(self, user: UserInfo, namespace: str
                        ) -> tuple[list[Any], list[str], bool]:
        """upstream's `RulesFor`: a node's permissions cannot be listed (a
        SelfSubjectRulesReview says `incomplete` with this error); nobody else's come from
        here."""
        _, is_node = node_identity(user)
        if is_node:
            return [], [NO_RULE_RESOLUTION], True
        return [], [], False

    async def authorize(self, attributes: Attributes) -> tuple[Decision, str]:
        node, is_node = node_identity(attributes.user)
        if not is_node:
            return Decision.NO_OPINION, ""
        if not node:
            return Decision.NO_OPINION, f'unknown node for user {go_quote(attributes.user.name)}'
        if attributes.resource_request:
            group, resource = attributes.api_group, attributes.resource
            if group == "" and resource == "secrets":
                return await self._read_namespaced(node, SECRET, attributes)
            if group == "" and resource == "configmaps":
                return await self._read_namespaced(node, CONFIGMAP, attributes)
            if group == "" and resource == "persistentvolumeclaims":
                if attributes.subresource == "status":
                    return await self._status_update(node, PVC, attributes)
                return await self._get(node, PVC, attributes)
            if ((group, resource) == ("", "persistentvolumes")
                    or (group, resource) == ("storage.k8s.io", "volumeattachments")):
                return self._get_unrelated(node, attributes)
            if group == "storage.k8s.io" and resource == "csinodes":
                return self._csinode(node, attributes)
            if group == "" and resource == "serviceaccounts":
                return await self._create_token(node, attributes)
            if group == "coordination.k8s.io" and resource == "leases":
                return self._lease(node, attributes)
        if node_rules_allow(attributes):
            return Decision.ALLOW, ""
        return Decision.NO_OPINION, ""

    async def _read_namespaced(self, node: str, kind: str, attributes: Attributes
                               ) -> tuple[Decision, str]:
        if attributes.verb not in _READ:
            return Decision.NO_OPINION, "can only read resources of this type"
        if attributes.subresource:
            return Decision.NO_OPINION, "cannot read subresource"
        if not attributes.namespace:
            return Decision.NO_OPINION, "can only read namespaced object of this type"
        return await self._related(node, kind, attributes)

    async def _get(self, node: str, kind: str, attributes: Attributes) -> tuple[Decision, str]:
        if attributes.verb != "get":
            return Decision.NO_OPINION, "can only get individual resources of this type"
        if attributes.subresource:
            return Decision.NO_OPINION, "cannot get subresource"
        return await self._related(node, kind, attributes)

    async def _status_update(self, node: str, kind: str, attributes: Attributes
                             ) -> tuple[Decision, str]:
        if attributes.verb not in ("update", "patch"):
            return Decision.NO_OPINION, "can only get/update/patch this type"
        if attributes.subresource != "status":
            return Decision.NO_OPINION, "can only update status subresource"
        return await self._related(node, kind, attributes)

    @staticmethod
    def _get_unrelated(node: str, attributes: Attributes) -> tuple[Decision, str]:
        """PersistentVolumes and VolumeAttachments: ephemera serves neither, so the graph
        has no edge to one (upstream's `authorizeGet` over an empty graph)."""
        if attributes.verb != "get":
            return Decision.NO_OPINION, "can only get individual resources of this type"
        if attributes.subresource:
            return Decision.NO_OPINION, "cannot get subresource"
        if not attributes.name:
            return Decision.NO_OPINION, "No Object name found"
        return Decision.NO_OPINION, no_relationship(node)

    @staticmethod
    def _csinode(node: str, attributes: Attributes) -> tuple[Decision, str]:
        if attributes.verb not in _CSINODE_VERBS:
            return (Decision.NO_OPINION,
                    "can only get, create, update, patch, or delete a CSINode")
        if attributes.subresource:
            return Decision.NO_OPINION, "cannot authorize CSINode subresources"
        if attributes.verb != "create" and attributes.name != node:
            return (Decision.NO_OPINION,
                    "can only access CSINode with the same name as the requesting node")
        return Decision.ALLOW, ""

    async def _create_token(self, node: str, attributes: Attributes) -> tuple[Decision, str]:
        if attributes.verb != "create" or not attributes.name:
            return (Decision.NO_OPINION,
                    "can only create tokens for individual service accounts")
        if attributes.subresource != "token":
            return (Decision.NO_OPINION,
                    "can only create token subresource of serviceaccount")
        return await self._related(node, SERVICEACCOUNT, attributes)

    @staticmethod
    def _lease(node: str, attributes: Attributes) -> tuple[Decision, str]:
        verb = attributes.verb
        if verb not in ("get", "create", "update", "patch", "delete"):
            return (Decision.NO_OPINION,
                    "can only get, create, update, patch, or delete a node lease")
        if attributes.namespace != NODE_LEASE_NAMESPACE:
            return (Decision.NO_OPINION,
                    f'can only access leases in the {go_quote(NODE_LEASE_NAMESPACE)} system '
                    'namespace')
        if verb != "create" and attributes.name != node:
            return (Decision.NO_OPINION,
                    "can only access node lease with the same name as the requesting node")
        return Decision.ALLOW, ""

    async def _related(self, node: str, kind: str, attributes: Attributes
                       ) -> tuple[Decision, str]:
        if not attributes.name:
            return Decision.NO_OPINION, "No Object name found"
        ref: Ref = (kind, attributes.namespace, attributes.name)
        if await self._confirmed_in_graph(node, ref) or await self._found_in_store(node, ref):
            return Decision.ALLOW, ""
        return Decision.NO_OPINION, no_relationship(node)

    def _references(self, pod: Mapping[str, Any]) -> frozenset[Ref]:
        """What `pod` (as the store has it now) lets its node reach, with what the graph
        remembers of its removed-but-held volumes."""
        namespace, name = pod_key(pod)
        previous = self.graph.pod(namespace, name)
        remembered = None
        if previous is not None and previous.uid == (pod.get("metadata") or {}).get("uid"):
            remembered = previous.volumes
        volumes = pod_volume_references(pod, remembered)
        return pod_level_references(pod).union(*volumes.values())

    async def _confirmed_in_graph(self, node: str, ref: Ref) -> bool:
        """An edge of the graph, still there in the store's current state of its pod."""
        for (namespace, name), vertex in list(self.graph.pods_linking(node, ref)):
            kv = await self.registry.store.get(PODS.key(namespace, name))
            if kv is None:
                continue
            pod = self._codec.decode(kv)
            if ((pod.get("metadata") or {}).get("uid") == vertex.uid
                    and (pod.get("spec") or {}).get("nodeName") == node
                    and ref in self._references(pod)):
                return True
        return False

    async def _found_in_store(self, node: str, ref: Ref) -> bool:
        """A pod in the object's namespace, bound to `node`, referencing it now (the graph's
        watch may not have shown that pod's latest update yet)."""
        page = await self.registry.store.list(PODS.key_prefix(ref[1]))
        for kv in page.kvs:
            pod = self._codec.decode(kv)
            if (pod.get("spec") or {}).get("nodeName") == node and ref in self._references(pod):
                return True
        return False

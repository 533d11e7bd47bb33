"""The RBAC objects that let nodes join with a bootstrap token, as `kubeadm init` creates
them (its `bootstrap-token` phase), written by `ephemera up` once the API answers:

- ClusterRoles from upstream's bootstrap policy: `system:node-bootstrapper` (create, get,
  list, watch certificatesigningrequests), and
  `system:certificates.k8s.io:certificatesigningrequests:nodeclient` /
  `...:selfnodeclient` (create on those CSR subresources, which the CSR approver asks about);
- ClusterRoleBindings: `kubeadm:kubelet-bootstrap` and `kubeadm:node-autoapprove-bootstrap`
  for the group `system:bootstrappers:kubeadm:default-node-token` (the extra group of
  `ephemera token create`'s tokens), `kubeadm:node-autoapprove-certificate-rotation` for
  `system:nodes`.

Existing objects are left alone; an apiserver without RBAC (404) needs none.
"""

from __future__ import annotations

import logging
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.apiserver.bootstraptoken import DEFAULT_EXTRA_GROUP
from ephemera.client import ApiClient, resource_path

log = logging.getLogger("ephemera.up")

RBAC = "rbac.authorization.k8s.io"
NODE_BOOTSTRAPPER = "system:node-bootstrapper"
NODE_CLIENT = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
SELF_NODE_CLIENT = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"


def _role(name: str, verbs: list[str], resource: str) -> dict[str, Any]:
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole",
            "metadata": {"name": name,
                         "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
                         "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": [resource],
                       "verbs": verbs}]}


def _binding(name: str, role: str, group: str) -> dict[str, Any]:
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": group}]}


def node_bootstrap_objects() -> list[tuple[str, dict[str, Any]]]:
    """(plural, object) pairs, roles first."""
    return [
        ("clusterroles", _role(NODE_BOOTSTRAPPER, ["create", "get", "list", "watch"],
                               "certificatesigningrequests")),
        ("clusterroles", _role(NODE_CLIENT, ["create"], "certificatesigningrequests/nodeclient")),
        ("clusterroles", _role(SELF_NODE_CLIENT, ["create"],
                               "certificatesigningrequests/selfnodeclient")),
        ("clusterrolebindings", _binding("kubeadm:kubelet-bootstrap", NODE_BOOTSTRAPPER,
                                         DEFAULT_EXTRA_GROUP)),
        ("clusterrolebindings", _binding("kubeadm:node-autoapprove-bootstrap", NODE_CLIENT,
                                         DEFAULT_EXTRA_GROUP)),
        ("clusterrolebindings", _binding("kubeadm:node-autoapprove-certificate-rotation",
                                         SELF_NODE_CLIENT, "system:nodes")),
    ]


async def ensure_node_bootstrap_rbac(api: ApiClient) -> None:
    for plural, obj in node_bootstrap_objects():
        try:
            await api.create(resource_path(plural, group=RBAC), obj)
        except StatusError as err:
            if err.code == 404:
                return  # RBAC is not served
            if err.code != 409:
                raise

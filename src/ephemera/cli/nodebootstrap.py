"""The RBAC bindings that let nodes join with a bootstrap token, as `kubeadm init` creates
them (its `bootstrap-token` phase), written by `ephemera up` once the API answers. The roles
they bind are upstream's bootstrap policy, which the apiserver writes itself
(`ephemera.apiserver.authz.bootstrappolicy`): `system:node-bootstrapper` (create, get, list,
watch certificatesigningrequests) and
`system:certificates.k8s.io:certificatesigningrequests:nodeclient` / `...:selfnodeclient`
(create on those CSR subresources, which the CSR approver asks about).

ClusterRoleBindings: `kubeadm:kubelet-bootstrap` and `kubeadm:node-autoapprove-bootstrap` for
the group `system:bootstrappers:kubeadm:default-node-token` (the extra group of `ephemera
token create`'s tokens), `kubeadm:node-autoapprove-certificate-rotation` for `system:nodes`.

Existing objects are left alone; an apiserver without RBAC (404) needs none.
"""

from __future__ import annotations

import logging
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.api.wellknown import NODES_GROUP
from ephemera.apiserver.authz.bootstrappolicy import (
    NODE_BOOTSTRAPPER_ROLE,
    NODE_CLIENT_ROLE,
    SELF_NODE_CLIENT_ROLE,
)
from ephemera.apiserver.authz.rbac import RBAC_GROUP
from ephemera.apiserver.bootstraptoken import DEFAULT_EXTRA_GROUP
from ephemera.client import ApiClient, resource_path

log = logging.getLogger("ephemera.up")


def _binding(name: str, role: str, group: str) -> dict[str, Any]:
    return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": group}]}


def node_bootstrap_bindings() -> list[dict[str, Any]]:
    """kubeadm's ClusterRoleBindings of the node bootstrap roles."""
    return [
        _binding("kubeadm:kubelet-bootstrap", NODE_BOOTSTRAPPER_ROLE, DEFAULT_EXTRA_GROUP),
        _binding("kubeadm:node-autoapprove-bootstrap", NODE_CLIENT_ROLE, DEFAULT_EXTRA_GROUP),
        _binding("kubeadm:node-autoapprove-certificate-rotation", SELF_NODE_CLIENT_ROLE,
                 NODES_GROUP),
    ]


async def ensure_node_bootstrap_rbac(api: ApiClient) -> None:
    for binding in node_bootstrap_bindings():
        try:
            await api.create(resource_path("clusterrolebindings", group=RBAC_GROUP), binding)
        except StatusError as err:
            if err.code == 404:
                return  # RBAC is not served
            if err.code != 409:
                raise

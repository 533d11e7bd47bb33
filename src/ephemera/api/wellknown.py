"""Well-known names that several components must spell alike: the users and groups upstream
reserves (`k8s.io/apiserver/pkg/authentication/user`, `serviceaccount.MakeUsername`), and the
built-in certificate signer names (`k8s.io/api/certificates/v1`).

The apiserver (authentication, the Node authorizer, RBAC, the CSR admission plugins, the
default policy), the certificate controllers and the kubelet all read them from here.
"""

from __future__ import annotations

# --- users and groups -------------------------------------------------------------------------

MASTERS_GROUP = "system:masters"
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
SERVICE_ACCOUNT_USER_PREFIX = "system:serviceaccount:"


def node_username(node: str) -> str:
    """The user a kubelet acts as: `system:node:<node>` (in `NODES_GROUP`)."""
    return f"{NODE_USER_PREFIX}{node}"


def service_account_username(namespace: str, name: str) -> str:
    """upstream's `serviceaccount.MakeUsername`: `system:serviceaccount:<ns>:<name>`."""
    return f"{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}"


# --- certificate signers ----------------------------------------------------------------------

KUBE_APISERVER_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
KUBE_APISERVER_CLIENT_KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
LEGACY_UNKNOWN_SIGNER = "kubernetes.io/legacy-unknown"

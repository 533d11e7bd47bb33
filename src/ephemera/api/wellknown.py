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


SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"
ANONYMOUS_USER = "system:anonymous"


def service_account_username(namespace: str, name: str) -> str:
    """upstream's `serviceaccount.MakeUsername`: `system:serviceaccount:<ns>:<name>`."""
    return f"{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}"


def service_account_group_names(namespace: str) -> tuple[str, str]:
    """upstream's `serviceaccount.MakeGroupNames`: `system:serviceaccounts` and
    `system:serviceaccounts:<ns>`."""
    return SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{namespace}"


# --- certificate signers ----------------------------------------------------------------------

KUBE_APISERVER_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
KUBE_APISERVER_CLIENT_KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
LEGACY_UNKNOWN_SIGNER = "kubernetes.io/legacy-unknown"


# --- apiserver identity (KEP-1965) and the control plane's endpoints -------------------------

# Each apiserver's Lease `kube-system/apiserver-<hash>`, labelled as upstream's.
APISERVER_IDENTITY_NAMESPACE = "kube-system"
APISERVER_IDENTITY_LABEL = "apiserver.kubernetes.io/identity"
APISERVER_IDENTITY_VALUE = "kube-apiserver"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# ephemera's: the URL clients reach that apiserver at (ephemera serves no Services, so the
# identity leases stand in for the `kubernetes` Service's endpoints).
APISERVER_URL_ANNOTATION = "ephemera.io/apiserver-url"
# upstream's identity lease: 3600 s, renewed every 10 s.
APISERVER_IDENTITY_LEASE_SECONDS = 3600
APISERVER_IDENTITY_RENEW_SECONDS = 10
# An apiserver whose lease was not renewed for this long is not listed as an endpoint
# (upstream's lease endpoint reconciler's TTL, `masterEndpointReconcileTTL`).
APISERVER_ENDPOINT_TTL_SECONDS = 15

"""The default roles and bindings (upstream's `plugin/pkg/auth/authorizer/rbac/bootstrappolicy`),
written at every apiserver start by `reconcile(registry)` as upstream's RBAC post-start hook
reconciles them.

The roles: `cluster-admin` (everything; bound to the group `system:masters`), the aggregated
user-facing `admin`, `edit` and `view` (empty rules and an `aggregationRule`; their rules come
from `system:aggregate-to-*` through `ephemera.apiserver.authz.aggregation`), and the `system:`
roles of the components and of every user: `system:basic-user` (access reviews of oneself),
`system:discovery` and `system:public-info-viewer` (the non-resource paths), `system:monitoring`,
`system:kube-scheduler`, `system:kube-controller-manager`, `system:node` (bound to nobody: the
Node authorizer serves kubelets), the node bootstrap roles (`system:node-bootstrapper`,
`...:nodeclient`, `...:selfnodeclient`; kubeadm's bindings of them are `ephemera up`'s,
`ephemera.cli.nodebootstrap`) and the controller roles of the controllers ephemera runs.

`pods/dynamic` (KEP-6395, KEP-5972) is in no user-facing default role but `cluster-admin`
(the garbage collector's `*` grants it, as upstream's): `edit` grants
`pods`, which does not match the subresource. ephemera's controller-manager runs its
controllers under its own identity (upstream's `--use-service-account-credentials=false`), so
the controller roles are bound to `system:kube-controller-manager` as well as to their
upstream service accounts.

In `kube-system`, ephemera's Role and RoleBinding `system:ephemera:apiserver-endpoints-reader`
let nodes, the scheduler and the controller-manager read the apiserver identity leases, which
stand in for the `kubernetes` Service's endpoints (`ephemera.apiserver.identity`).

Reconciliation: a missing object is created; an existing one annotated
`rbac.authorization.kubernetes.io/autoupdate: "true"` gets the labels, annotations, rules
(aggregation selectors for an aggregated role) and subjects it lacks; one annotated `"false"`
is left as the administrator made it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

from ephemera.api import errors
from ephemera.api.errors import StatusError
from ephemera.api.wellknown import (
    APISERVER_IDENTITY_NAMESPACE,
    KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
    KUBE_APISERVER_CLIENT_SIGNER,
    KUBELET_SERVING_SIGNER,
    LEGACY_UNKNOWN_SIGNER,
    MASTERS_GROUP,
    NODES_GROUP,
)
from ephemera.apiserver.authz.rbac import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    RBAC_GROUP,
    ROLE_BINDINGS,
    ROLES,
    covers,
)
from ephemera.apiserver.authz.rbacapi import AUTOUPDATE_ANNOTATION
from ephemera.apiserver.certs import CONTROLLER_MANAGER_USER, PROXY_USER, SCHEDULER_USER
from ephemera.apiserver.registry import Registry
from ephemera.apiserver.resources import Resource

log = logging.getLogger("ephemera.apiserver.rbac")

BOOTSTRAP_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
AGGREGATE_TO = "rbac.authorization.k8s.io/aggregate-to-"
READ = ("get", "list", "watch")
WRITE = ("create", "delete", "deletecollection", "patch", "update")
EVENT_WRITE = ("create", "patch", "update")

Rule = dict[str, list[str]]


def rule(verbs: Sequence[str], groups: Sequence[str], resources: Sequence[str],
         names: Sequence[str] = ()) -> Rule:
    out = {"verbs": list(verbs), "apiGroups": list(groups), "resources": list(resources)}
    if names:
        out["resourceNames"] = list(names)
    return out


def url_rule(verbs: Sequence[str], urls: Sequence[str]) -> Rule:
    return {"verbs": list(verbs), "nonResourceURLs": list(urls)}


def _events() -> Rule:
    return rule(EVENT_WRITE, ("", "events.k8s.io"), ("events",))


def cluster_role(name: str, rules: Sequence[Rule], *, labels: dict[str, str] | None = None,
                 aggregate: str = "") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {**BOOTSTRAP_LABELS, **(labels or {})},
                     "annotations": {AUTOUPDATE_ANNOTATION: "true"}},
    }
    if aggregate:
        obj["aggregationRule"] = {"clusterRoleSelectors": [
            {"matchLabels": {AGGREGATE_TO + aggregate: "true"}}]}
    obj["rules"] = [dict(r) for r in rules]
    return obj


def subject(kind: str, name: str, namespace: str = "") -> dict[str, str]:
    if kind == "ServiceAccount":
        return {"kind": kind, "name": name, "namespace": namespace}
    return {"kind": kind, "apiGroup": RBAC_GROUP, "name": name}


def cluster_role_binding(name: str, subjects: Sequence[dict[str, str]], role: str = ""
                         ) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": dict(BOOTSTRAP_LABELS),
                     "annotations": {AUTOUPDATE_ANNOTATION: "true"}},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role or name},
        "subjects": [dict(s) for s in subjects],
    }


def _aggregate_labels(*targets: str) -> dict[str, str]:
    return {AGGREGATE_TO + t: "true" for t in targets}


def cluster_roles() -> list[dict[str, Any]]:
    """The default ClusterRoles, with upstream's rules."""
    return [
        cluster_role("cluster-admin", [rule(["*"], ["*"], ["*"]), url_rule(["*"], ["*"])]),
        cluster_role("admin", [], aggregate="admin"),
        cluster_role("edit", [], aggregate="edit", labels=_aggregate_labels("admin")),
        cluster_role("view", [], aggregate="view", labels=_aggregate_labels("edit")),
        cluster_role("system:aggregate-to-admin", [
            rule(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
            rule([*WRITE[:3], "get", "list", *WRITE[3:], "watch"], [RBAC_GROUP],
                 ["rolebindings", "roles"]),
        ], labels=_aggregate_labels("admin")),
        cluster_role("system:aggregate-to-edit", [
            rule(READ, [""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy",
                              "secrets", "services/proxy"]),
            rule(["impersonate"], [""], ["serviceaccounts"]),
            rule(WRITE, [""], ["pods", "pods/attach", "pods/exec", "pods/portforward",
                               "pods/proxy"]),
            rule(["create"], [""], ["pods/eviction"]),
            rule(WRITE, [""], ["configmaps", "events", "persistentvolumeclaims",
                               "replicationcontrollers", "replicationcontrollers/scale",
                               "secrets", "serviceaccounts", "services", "services/proxy"]),
            rule(["create"], [""], ["serviceaccounts/token"]),
            rule(WRITE, ["apps"], ["daemonsets", "deployments", "deployments/rollback",
                                   "deployments/scale", "replicasets", "replicasets/scale",
                                   "statefulsets", "statefulsets/scale"]),
            rule(WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
            rule(WRITE, ["batch"], ["cronjobs", "jobs"]),
            rule(WRITE, ["policy"], ["poddisruptionbudgets"]),
            rule(WRITE, ["networking.k8s.io"], ["ingresses", "networkpolicies"]),
            rule([*WRITE[:3], "get", "list", *WRITE[3:], "watch"], ["coordination.k8s.io"],
                 ["leases"]),
        ], labels=_aggregate_labels("edit")),
        cluster_role("system:aggregate-to-view", [
            rule(READ, [""], ["configmaps", "endpoints", "persistentvolumeclaims",
                              "persistentvolumeclaims/status", "pods", "replicationcontrollers",
                              "replicationcontrollers/scale", "serviceaccounts", "services",
                              "services/status"]),
            rule(READ, [""], ["bindings", "events", "limitranges", "namespaces/status",
                              "pods/log", "pods/status", "replicationcontrollers/status",
                              "resourcequotas", "resourcequotas/status"]),
            rule(READ, [""], ["namespaces"]),
            rule(READ, ["discovery.k8s.io"], ["endpointslices"]),
            rule(READ, ["apps"], ["controllerrevisions", "daemonsets", "daemonsets/status",
                                  "deployments", "deployments/scale", "deployments/status",
                                  "replicasets", "replicasets/scale", "replicasets/status",
                                  "statefulsets", "statefulsets/scale", "statefulsets/status"]),
            rule(READ, ["autoscaling"], ["horizontalpodautoscalers",
                                         "horizontalpodautoscalers/status"]),
            rule(READ, ["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
            rule(READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
            rule(READ, ["networking.k8s.io"], ["ingresses", "ingresses/status",
                                               "networkpolicies"]),
        ], labels=_aggregate_labels("view")),
        cluster_role("system:basic-user", [
            rule(["create"], ["authorization.k8s.io"],
                 ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
            rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"]),
        ]),
        cluster_role("system:discovery", [url_rule(["get"], [
            "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
            "/openapi/*", "/readyz", "/version", "/version/"])]),
        cluster_role("system:public-info-viewer", [url_rule(["get"], [
            "/healthz", "/livez", "/readyz", "/version", "/version/"])]),
        cluster_role("system:monitoring", [url_rule(["get"], [
            "/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis",
            "/readyz", "/readyz/*"])]),
        cluster_role("system:auth-delegator", [
            rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
            rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
        ]),
        cluster_role("system:kube-scheduler", [
            _events(),
            rule(["create"], ["coordination.k8s.io"], ["leases"]),
            rule(["get", "update"], ["coordination.k8s.io"], ["leases"], ["kube-scheduler"]),
            rule(READ, [""], ["nodes"]),
            rule(["delete", *READ], [""], ["pods"]),
            rule(["create"], [""], ["bindings", "pods/binding"]),
            rule(["patch", "update"], [""], ["pods/status"]),
            rule(READ, [""], ["replicationcontrollers", "services"]),
            rule(READ, ["apps", "extensions"], ["replicasets"]),
            rule(READ, ["apps"], ["statefulsets"]),
            rule(READ, ["policy"], ["poddisruptionbudgets"]),
            rule(READ, [""], ["persistentvolumeclaims", "persistentvolumes"]),
            rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
            rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
            rule(READ, ["storage.k8s.io"], ["csinodes"]),
            rule(READ, [""], ["namespaces"]),
            rule(READ, ["storage.k8s.io"], ["csidrivers"]),
            rule(READ, ["storage.k8s.io"], ["csistoragecapacities"]),
        ]),
        cluster_role("system:kube-controller-manager", [
            _events(),
            rule(["create"], ["coordination.k8s.io"], ["leases"]),
            rule(["get", "update"], ["coordination.k8s.io"], ["leases"],
                 ["kube-controller-manager"]),
            rule(["create"], [""], ["secrets", "serviceaccounts"]),
            rule(["delete"], [""], ["secrets"]),
            rule(["get"], [""], ["configmaps", "namespaces", "secrets", "serviceaccounts"]),
            rule(["update"], [""], ["secrets", "serviceaccounts"]),
            rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
            rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
            rule(["list", "watch"], ["*"], ["*"]),
            rule(["create"], [""], ["serviceaccounts/token"]),
        ]),
        cluster_role("system:node", node_rules()),
        cluster_role("system:node-proxier", [
            rule(["list", "watch"], [""], ["endpoints", "services"]),
            rule(READ, [""], ["nodes"]),
            _events(),
            rule(["list", "watch"], ["discovery.k8s.io"], ["endpointslices"]),
        ]),
        cluster_role(NODE_BOOTSTRAPPER_ROLE, [
            rule(["create", *READ], ["certificates.k8s.io"], ["certificatesigningrequests"])]),
        cluster_role(NODE_CLIENT_ROLE, [
            rule(["create"], ["certificates.k8s.io"],
                 ["certificatesigningrequests/nodeclient"])]),
        cluster_role(SELF_NODE_CLIENT_ROLE, [
            rule(["create"], ["certificates.k8s.io"],
                 ["certificatesigningrequests/selfnodeclient"])]),
        *controller_roles(),
    ]


def node_rules() -> list[Rule]:
    """upstream's `NodeRules()`: the `system:node` ClusterRole, and what the Node authorizer
    allows a kubelet beyond the objects it subdivides by the graph
    (`ephemera.apiserver.authz.node`)."""
    return [
        rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        rule(["create"], ["authorization.k8s.io"],
             ["localsubjectaccessreviews", "subjectaccessreviews"]),
        rule(READ, [""], ["services"]),
        rule(["create", *READ], [""], ["nodes"]),
        rule(["patch", "update"], [""], ["nodes/status"]),
        rule(["patch", "update"], [""], ["nodes"]),
        rule(EVENT_WRITE, [""], ["events"]),
        rule(READ, [""], ["pods"]),
        rule(["create", "delete"], [""], ["pods"]),
        rule(["patch", "update"], [""], ["pods/status"]),
        rule(["create"], [""], ["pods/eviction"]),
        rule(READ, [""], ["configmaps", "secrets"]),
        rule(["get"], [""], ["persistentvolumeclaims", "persistentvolumes"]),
        rule(["get"], [""], ["endpoints"]),
        rule(["create", *READ], ["certificates.k8s.io"], ["certificatesigningrequests"]),
        rule(["create", "delete", "get", "patch", "update"], ["coordination.k8s.io"],
             ["leases"]),
        rule(["get"], ["storage.k8s.io"], ["volumeattachments"]),
        rule(["create"], [""], ["serviceaccounts/token"]),
        rule(["get", "patch", "update"], [""], ["persistentvolumeclaims/status"]),
        rule(READ, ["storage.k8s.io"], ["csidrivers"]),
        rule(["create", "delete", "get", "patch", "update"], ["storage.k8s.io"],
             ["csinodes"]),
        rule(READ, ["node.k8s.io"], ["runtimeclasses"]),
    ]


NODE_BOOTSTRAPPER_ROLE = "system:node-bootstrapper"
NODE_CLIENT_ROLE = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
SELF_NODE_CLIENT_ROLE = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"


# The controllers of `ephemera controller-manager` (upstream's controller roles).
CONTROLLER_PREFIX = "system:controller:"


def controller_roles() -> list[dict[str, Any]]:
    return [
        cluster_role(CONTROLLER_PREFIX + "node-controller", [
            rule(["delete", "get", "list", "patch", "update"], [""], ["nodes"]),
            rule(["patch", "update"], [""], ["nodes/status"]),
            rule(["patch", "update"], [""], ["pods/status"]),
            rule(["delete", "list"], [""], ["pods"]),
            rule(["get"], [""], ["pods"]),
            _events(),
        ]),
        # Reads and writes any resource: owners and dependents may be of every kind.
        cluster_role(CONTROLLER_PREFIX + "generic-garbage-collector", [
            rule(["get", "list", "watch", "patch", "update", "delete"], ["*"], ["*"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "job-controller", [
            rule(["get", "list", "watch", "update", "patch"], ["batch"], ["jobs"]),
            rule(["update"], ["batch"], ["jobs/status"]),
            rule(["update"], ["batch"], ["jobs/finalizers"]),
            # `get` beyond upstream: ephemera reads a pod afresh before removing its
            # tracking finalizer.
            rule(["get", "list", "watch", "create", "delete", "patch"], [""], ["pods"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "cronjob-controller", [
            rule(["get", "list", "watch", "update"], ["batch"], ["cronjobs"]),
            rule(["get", "list", "watch", "create", "update", "delete", "patch"], ["batch"],
                 ["jobs"]),
            rule(["update"], ["batch"], ["cronjobs/status"]),
            rule(["update"], ["batch"], ["cronjobs/finalizers"]),
            rule(["list", "delete"], [""], ["pods"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "ttl-after-finished-controller", [
            rule(["get", "list", "watch", "delete"], ["batch"], ["jobs"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "resourcequota-controller", [
            rule(["list", "watch"], ["*"], ["*"]),
            rule(["update"], [""], ["resourcequotas/status"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "service-account-controller", [
            rule(["create"], [""], ["serviceaccounts"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "certificate-controller", [
            rule(["delete", *READ], ["certificates.k8s.io"], ["certificatesigningrequests"]),
            rule(["update"], ["certificates.k8s.io"], ["certificatesigningrequests/approval",
                                                       "certificatesigningrequests/status"]),
            # kubelet-serving beyond upstream: ephemera's approver approves serving CSRs
            # whose names are the Node's addresses (ephemera.controllers.certificates).
            rule(["approve"], ["certificates.k8s.io"], ["signers"],
                 [KUBE_APISERVER_CLIENT_SIGNER, KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
                  KUBELET_SERVING_SIGNER]),
            rule(["sign"], ["certificates.k8s.io"], ["signers"],
                 [KUBE_APISERVER_CLIENT_SIGNER, KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
                  KUBELET_SERVING_SIGNER, LEGACY_UNKNOWN_SIGNER]),
            rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
            _events(),
        ]),
        # One loop serves both (`ephemera.controllers.endpointslice`), with upstream's roles.
        cluster_role(CONTROLLER_PREFIX + "endpoint-controller", [
            rule(READ, [""], ["pods", "services"]),
            rule(["update"], [""], ["services/finalizers"]),
            rule(["create", "delete", "get", "list", "update"], [""], ["endpoints"]),
            rule(["create"], [""], ["endpoints/restricted"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "endpointslice-controller", [
            rule(READ, [""], ["nodes", "pods", "services"]),
            rule(["update"], [""], ["services/finalizers"]),
            rule(["create", "delete", "get", "list", "update"], ["discovery.k8s.io"],
                 ["endpointslices"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "root-ca-cert-publisher", [
            rule(["create", "update"], [""], ["configmaps"]),
            _events(),
        ]),
        # Workloads (`ephemera.controllers.replicaset`, `ephemera.controllers.deployment`).
        cluster_role(CONTROLLER_PREFIX + "deployment-controller", [
            rule(["get", "list", "watch", "update"], ["extensions", "apps"], ["deployments"]),
            rule(["update"], ["extensions", "apps"], ["deployments/status"]),
            rule(["update"], ["extensions", "apps"], ["deployments/finalizers"]),
            rule(["get", "list", "watch", "create", "update", "patch", "delete"],
                 ["apps", "extensions"], ["replicasets"]),
            rule(["get", "list", "watch", "update"], [""], ["pods"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "daemon-set-controller", [
            rule(["get", "list", "watch"], ["extensions", "apps"], ["daemonsets"]),
            rule(["update"], ["extensions", "apps"], ["daemonsets/status"]),
            rule(["update"], ["extensions", "apps"], ["daemonsets/finalizers"]),
            rule(["list", "watch"], [""], ["nodes"]),
            rule(["list", "watch", "create", "delete", "patch"], [""], ["pods"]),
            rule(["create"], [""], ["pods/binding"]),
            rule(["get", "list", "watch", "create", "delete", "update", "patch"], ["apps"],
                 ["controllerrevisions"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "statefulset-controller", [
            rule(["list", "watch"], [""], ["pods"]),
            rule(["get", "list", "watch"], ["apps"], ["statefulsets"]),
            rule(["update"], ["apps"], ["statefulsets/status"]),
            rule(["update"], ["apps"], ["statefulsets/finalizers"]),
            rule(["get", "create", "delete", "update", "patch"], [""], ["pods"]),
            rule(["get", "create", "delete", "update", "patch", "list", "watch"], ["apps"],
                 ["controllerrevisions"]),
            rule(["get", "create"], [""], ["persistentvolumeclaims"]),
            rule(["update", "delete"], [""], ["persistentvolumeclaims"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "replicaset-controller", [
            rule(["get", "list", "watch", "update"], ["apps", "extensions"], ["replicasets"]),
            rule(["update"], ["apps", "extensions"], ["replicasets/status"]),
            rule(["update"], ["apps", "extensions"], ["replicasets/finalizers"]),
            rule(["list", "watch", "patch", "create", "delete"], [""], ["pods"]),
            _events(),
        ]),
        cluster_role(CONTROLLER_PREFIX + "replication-controller", [
            rule(["get", "list", "watch", "update"], [""], ["replicationcontrollers"]),
            rule(["update"], [""], ["replicationcontrollers/status"]),
            rule(["update"], [""], ["replicationcontrollers/finalizers"]),
            rule(["list", "watch", "patch", "create", "delete"], [""], ["pods"]),
            _events(),
        ]),
    ]


def cluster_role_bindings() -> list[dict[str, Any]]:
    """The default ClusterRoleBindings."""
    authenticated = subject("Group", "system:authenticated")
    bindings = [
        cluster_role_binding("cluster-admin", [subject("Group", MASTERS_GROUP)]),
        cluster_role_binding("system:basic-user", [authenticated]),
        cluster_role_binding("system:discovery", [authenticated]),
        cluster_role_binding("system:public-info-viewer",
                             [authenticated, subject("Group", "system:unauthenticated")]),
        cluster_role_binding("system:monitoring", [subject("Group", "system:monitoring")]),
        cluster_role_binding("system:kube-controller-manager",
                             [subject("User", CONTROLLER_MANAGER_USER)]),
        cluster_role_binding("system:kube-scheduler", [subject("User", SCHEDULER_USER)]),
        cluster_role_binding("system:node", []),
        # kubeadm binds `system:node-proxier` to kube-proxy's service account; ephemera's
        # proxy has a client certificate of its own.
        cluster_role_binding("system:node-proxier", [subject("User", PROXY_USER)]),
    ]
    for role in controller_roles():
        name = role["metadata"]["name"]
        account = name.removeprefix(CONTROLLER_PREFIX)
        bindings.append(cluster_role_binding(name, [
            subject("ServiceAccount", account, "kube-system"),
            subject("User", CONTROLLER_MANAGER_USER)]))
    return bindings


# ephemera's: who may read the apiserver identity leases (`ephemera.apiserver.identity`), the
# stand-in for the `kubernetes` Service's endpoints that upstream's `system:node` and
# components read, so that they learn every apiserver of the control plane.
APISERVER_ENDPOINTS_READER = "system:ephemera:apiserver-endpoints-reader"


def namespace_roles() -> list[dict[str, Any]]:
    """The default Roles (upstream's `NamespaceRoles()`), in their namespaces."""
    return [{
        "apiVersion": f"{RBAC_GROUP}/v1", "kind": "Role",
        "metadata": {"name": APISERVER_ENDPOINTS_READER,
                     "namespace": APISERVER_IDENTITY_NAMESPACE,
                     "labels": dict(BOOTSTRAP_LABELS),
                     "annotations": {AUTOUPDATE_ANNOTATION: "true"}},
        "rules": [rule(READ, ["coordination.k8s.io"], ["leases"])],
    }]


def namespace_role_bindings() -> list[dict[str, Any]]:
    """The default RoleBindings (upstream's `NamespaceRoleBindings()`)."""
    return [{
        "apiVersion": f"{RBAC_GROUP}/v1", "kind": "RoleBinding",
        "metadata": {"name": APISERVER_ENDPOINTS_READER,
                     "namespace": APISERVER_IDENTITY_NAMESPACE,
                     "labels": dict(BOOTSTRAP_LABELS),
                     "annotations": {AUTOUPDATE_ANNOTATION: "true"}},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": APISERVER_ENDPOINTS_READER},
        "subjects": [subject("Group", NODES_GROUP), subject("User", SCHEDULER_USER),
                     subject("User", CONTROLLER_MANAGER_USER), subject("User", PROXY_USER)],
    }]


# --- reconciliation -----------------------------------------------------------------------------


def _merge_map(current: dict[str, Any], key: str, wanted: dict[str, str]) -> None:
    have = current.get(key)
    if not isinstance(have, dict):
        have = current[key] = {}
    for k, v in wanted.items():
        have.setdefault(k, v)


def reconciled(resource: Resource, current: dict[str, Any], expected: dict[str, Any]
               ) -> dict[str, Any] | None:
    """The object with what it lacks of `expected` added (None: leave it as it is)."""
    md = current.setdefault("metadata", {})
    if (md.get("annotations") or {}).get(AUTOUPDATE_ANNOTATION) == "false":
        return None
    out = copy.deepcopy(current)
    out_md = out.setdefault("metadata", {})
    _merge_map(out_md, "labels", expected["metadata"].get("labels") or {})
    _merge_map(out_md, "annotations", expected["metadata"].get("annotations") or {})
    if resource in (CLUSTER_ROLES, ROLES):
        wanted = expected.get("aggregationRule")
        if wanted is not None:
            have = out.setdefault("aggregationRule", {})
            selectors = have.setdefault("clusterRoleSelectors", [])
            selectors.extend(s for s in wanted["clusterRoleSelectors"] if s not in selectors)
        else:
            rules = out.get("rules") or []
            _, missing_rules = covers(rules, expected["rules"])
            if missing_rules:
                out["rules"] = [*rules, *(r for r in expected["rules"]
                                          if not covers(rules, [r])[0])]
    else:
        subjects = out.get("subjects") or []
        subjects.extend(s for s in expected["subjects"] if s not in subjects)
        out["subjects"] = subjects
    return out


async def _ensure(registry: Registry, resource: Resource, expected: dict[str, Any]) -> None:
    name = expected["metadata"]["name"]
    namespace = expected["metadata"].get("namespace") or ""
    try:
        await registry.create(resource, copy.deepcopy(expected))  # the registry logs it
        return
    except StatusError as err:
        if err.code != 409:
            raise

    async def merge(current: dict[str, Any] | None) -> dict[str, Any]:
        if current is None:
            raise errors.not_found(resource.plural, name, resource.group)
        old = copy.deepcopy(current)
        wanted = reconciled(resource, current, expected)
        if wanted is None or wanted == old:
            return old
        return await registry.prepare_update(resource, wanted, old)

    await registry.update(resource, namespace, name, merge)


async def reconcile(registry: Registry) -> None:
    """Create or complete the default roles and bindings."""
    for role in cluster_roles():
        await _ensure(registry, CLUSTER_ROLES, role)
    for binding in cluster_role_bindings():
        await _ensure(registry, CLUSTER_ROLE_BINDINGS, binding)
    namespaced = [(ROLES, r) for r in namespace_roles()]
    namespaced += [(ROLE_BINDINGS, b) for b in namespace_role_bindings()]
    for resource, obj in namespaced:
        try:
            await _ensure(registry, resource, obj)
        except StatusError as err:
            if err.code != 404:
                raise
            # An apiserver that creates no default namespaces (a test's): nowhere to put it.
            log.info("not creating %s %s: %s", resource.plural, obj["metadata"]["name"],
                     err.message)

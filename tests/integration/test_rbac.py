"""RBAC in the apiserver app (in process, on a real sqlite store, bearer-token users): the
default policy, 403s with upstream's text, `pods/dynamic` held back from every default role
but cluster-admin, aggregation of `admin`/`edit`/`view`, access reviews, validation and
escalation prevention."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Users, eventually, pod, serve_users

from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz import Attributes
from ephemera.apiserver.authz.rbac import rule_allows
from ephemera.store import open_store

AUTHENTICATED = "system:authenticated"
TOKENS = {
    "admin": UserInfo("kubernetes-admin", ("system:masters", AUTHENTICATED)),
    "jane": UserInfo("jane", (AUTHENTICATED,)),
    "ed": UserInfo("ed", (AUTHENTICATED,)),
    "adm": UserInfo("adm", (AUTHENTICATED,)),
}
RBAC = "/apis/rbac.authorization.k8s.io/v1"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
DYNAMIC_MESSAGE = ('pods "p" is forbidden: User "jane" cannot update resource "pods/dynamic" '
                   'in API group "" in the namespace "default"')


@pytest.fixture
async def users(tmp_path: Path) -> AsyncIterator[Users]:
    async for served in serve_users(open_store("sqlite", data_dir=tmp_path / "data"), TOKENS):
        yield served


def role(name: str, rules: list[dict[str, Any]], namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": namespace}, "rules": rules}


def binding(name: str, role_kind: str, role_name: str, user: str,
            namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"kind": role_kind, "name": role_name},
            "subjects": [{"kind": "User", "name": user}]}


DYNAMIC_RULE = {"apiGroups": [""], "resources": ["pods/dynamic"], "verbs": ["update"]}


async def can_i(users: Users, token: str, verb: str, resource: str, subresource: str = "",
                namespace: str = "default", group: str = "") -> bool:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"namespace": namespace, "verb": verb,
                                              "group": group, "resource": resource,
                                              "subresource": subresource}}}
    status, body = await users.call(token, "POST", SSAR, review)
    assert status == 201, body
    return bool(body["status"]["allowed"])


async def test_dynamic_is_forbidden_until_a_role_grants_it(users: Users) -> None:
    status, body = await users.call("admin", "POST", "/api/v1/namespaces/default/pods",
                                    pod("p"))
    assert status == 201, body
    status, body = await users.call("jane", "PUT",
                                    "/api/v1/namespaces/default/pods/p/dynamic", body)
    assert status == 403
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": DYNAMIC_MESSAGE, "reason": "Forbidden",
                    "details": {"name": "p", "kind": "pods"}, "code": 403}
    assert not await can_i(users, "jane", "update", "pods", "dynamic")

    status, _ = await users.call("admin", "POST", f"{RBAC}/namespaces/default/roles",
                                 role("dynamic", [DYNAMIC_RULE, {"apiGroups": [""],
                                                                 "resources": ["pods"],
                                                                 "verbs": ["get"]}]))
    assert status == 201
    status, _ = await users.call("admin", "POST", f"{RBAC}/namespaces/default/rolebindings",
                                 binding("jane-dynamic", "Role", "dynamic", "jane"))
    assert status == 201
    assert await can_i(users, "jane", "update", "pods", "dynamic")
    status, current = await users.call("jane", "GET", "/api/v1/namespaces/default/pods/p")
    assert status == 200
    status, body = await users.call("jane", "PUT",
                                    "/api/v1/namespaces/default/pods/p/dynamic", current)
    assert status != 403, body  # authorized; the pod's state decides the rest


async def test_no_user_facing_default_role_but_cluster_admin_grants_pods_dynamic(
        users: Users) -> None:
    status, body = await users.call("admin", "GET", f"{RBAC}/clusterroles")
    assert status == 200
    roles = {r["metadata"]["name"]: r for r in body["items"]}
    assert {"cluster-admin", "admin", "edit", "view", "system:basic-user",
            "system:discovery", "system:public-info-viewer", "system:kube-scheduler",
            "system:kube-controller-manager"} <= set(roles)
    update_dynamic = Attributes(user=TOKENS["jane"], verb="update", resource="pods",
                                subresource="dynamic", namespace="default", name="p")
    granting = {name for name, found in roles.items()
                if any(rule_allows(update_dynamic, r) for r in found.get("rules") or [])}
    # and upstream's garbage collector role, whose `*` resources match every subresource
    assert granting == {"cluster-admin", "system:controller:generic-garbage-collector"}

    async def aggregated() -> bool:
        _, edit = await users.call("admin", "GET", f"{RBAC}/clusterroles/edit")
        _, admin = await users.call("admin", "GET", f"{RBAC}/clusterroles/admin")
        return bool(edit.get("rules")) and all(r in admin.get("rules", [])
                                               for r in edit["rules"])

    await eventually(aggregated)
    _, edit = await users.call("admin", "GET", f"{RBAC}/clusterroles/edit")
    edit_resources = {r for rule in edit["rules"] for r in rule.get("resources", [])}
    assert {"pods", "configmaps", "pods/log"} <= edit_resources  # its own and view's
    assert "pods/dynamic" not in edit_resources

    status, _ = await users.call("admin", "POST", f"{RBAC}/namespaces/default/rolebindings",
                                 binding("ed-edit", "ClusterRole", "edit", "ed"))
    assert status == 201
    assert await can_i(users, "ed", "create", "pods")
    assert await can_i(users, "ed", "update", "pods")
    assert not await can_i(users, "ed", "update", "pods", "dynamic")
    assert not await can_i(users, "ed", "create", "pods", namespace="kube-system")
    assert await can_i(users, "admin", "update", "pods", "dynamic")


async def test_forbidden_messages_and_public_paths(users: Users) -> None:
    status, body = await users.call("jane", "GET", "/api/v1/namespaces/default/pods")
    assert (status, body["message"]) == (403, 'pods is forbidden: User "jane" cannot list '
                                              'resource "pods" in API group "" in the '
                                              'namespace "default"')
    status, body = await users.call("jane", "GET", "/api/v1/nodes?watch=true")
    assert body["message"] == ('nodes is forbidden: User "jane" cannot watch resource "nodes" '
                               'in API group "" at the cluster scope')
    status, body = await users.call("jane", "GET", "/nope")
    assert (status, body["message"]) == (403, 'forbidden: User "jane" cannot get path "/nope"')
    status, body = await users.call(
        "jane", "DELETE", f"{RBAC}/clusterroles/view")
    assert body["message"] == ('clusterroles.rbac.authorization.k8s.io "view" is forbidden: '
                               'User "jane" cannot delete resource "clusterroles" in API group '
                               '"rbac.authorization.k8s.io" at the cluster scope')
    for path in ("/api", "/api/v1", "/apis", f"{RBAC}", "/openapi/v2", "/version"):
        status, _ = await users.call("jane", "GET", path)
        assert status == 200, path
    status, _ = await users.api.get("/version")  # anonymous: system:public-info-viewer
    assert status == 200
    status, body = await users.api.get("/api")  # anonymous: no credentials at all
    assert (status, body["message"]) == (
        403, 'forbidden: User "system:anonymous" cannot get path "/api"')
    status, _ = await users.call("no-such-token", "GET", "/version")
    assert status == 401


async def test_a_binding_to_a_missing_role_is_named_in_the_denial(users: Users) -> None:
    status, _ = await users.call("admin", "POST", f"{RBAC}/namespaces/default/rolebindings",
                                 binding("dangling", "Role", "missing", "jane"))
    assert status == 201
    status, body = await users.call("jane", "GET", "/api/v1/namespaces/default/configmaps")
    assert status == 403
    assert body["message"].endswith(
        ': RBAC: role.rbac.authorization.k8s.io "missing" not found')


async def test_validation(users: Users) -> None:
    bad = binding("b", "Pod", "x", "jane")
    bad["subjects"].append({"kind": "Robot", "name": "r2"})
    status, body = await users.call("admin", "POST", f"{RBAC}/namespaces/default/rolebindings",
                                    bad)
    assert status == 422
    assert body["message"] == (
        'RoleBinding.rbac.authorization.k8s.io "b" is invalid: [roleRef.kind: Unsupported '
        'value: "Pod": supported values: "Role", "ClusterRole", subjects[1].kind: Unsupported '
        'value: "Robot": supported values: "ServiceAccount", "User", "Group"]')
    status, body = await users.call("admin", "POST", f"{RBAC}/namespaces/default/roles",
                                    role("r", [{"apiGroups": [""], "resources": ["pods"]},
                                               {"nonResourceURLs": ["/x"], "verbs": ["get"]}]))
    assert status == 422
    assert body["message"] == (
        'Role.rbac.authorization.k8s.io "r" is invalid: [rules[0].verbs: Required value: '
        'verbs must contain at least one value, rules[1].nonResourceURLs: Invalid value: '
        '[]string{"/x"}: namespaced rules cannot apply to non-resource URLs]')
    status, created = await users.call("admin", "POST",
                                       f"{RBAC}/namespaces/default/rolebindings",
                                       binding("ok", "ClusterRole", "view", "jane"))
    assert status == 201
    assert created["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io"
    assert created["subjects"][0]["apiGroup"] == "rbac.authorization.k8s.io"
    created["roleRef"]["name"] = "edit"
    status, body = await users.call("admin", "PUT",
                                    f"{RBAC}/namespaces/default/rolebindings/ok", created)
    assert status == 422
    assert body["message"] == ('RoleBinding.rbac.authorization.k8s.io "ok" is invalid: '
                               'roleRef: Invalid value: {"APIGroup":"rbac.authorization.k8s.io",'
                               '"Kind":"ClusterRole","Name":"edit"}: cannot change roleRef')


async def test_escalation_prevention(users: Users) -> None:
    status, _ = await users.call("admin", "POST", f"{RBAC}/namespaces/default/rolebindings",
                                 binding("adm-admin", "ClusterRole", "admin", "adm"))
    assert status == 201

    async def admin_aggregated() -> bool:
        return await can_i(users, "adm", "create", "roles",
                           group="rbac.authorization.k8s.io")

    await eventually(admin_aggregated)
    status, body = await users.call("adm", "POST", f"{RBAC}/namespaces/default/roles",
                                    role("dyn", [DYNAMIC_RULE]))
    assert status == 403
    assert body["message"] == (
        'roles.rbac.authorization.k8s.io "dyn" is forbidden: user "adm" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not '
        'currently held:\n{APIGroups:[""], Resources:["pods/dynamic"], Verbs:["update"]}')
    status, _ = await users.call("adm", "POST", f"{RBAC}/namespaces/default/roles",
                                 role("reader", [{"apiGroups": [""], "resources": ["pods"],
                                                  "verbs": ["get", "list"]}]))
    assert status == 201
    status, body = await users.call("adm", "POST", f"{RBAC}/namespaces/default/rolebindings",
                                    binding("jane-admin", "ClusterRole", "cluster-admin",
                                            "jane"))
    assert status == 403
    assert body["message"].startswith(
        'rolebindings.rbac.authorization.k8s.io "jane-admin" is forbidden: user "adm" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not '
        "currently held:\n")
    status, body = await users.call("adm", "POST", f"{RBAC}/namespaces/default/rolebindings",
                                    binding("jane-none", "Role", "none", "jane"))
    assert (status, body["message"], body["reason"]) == (
        404, 'roles.rbac.authorization.k8s.io "none" not found', "NotFound")
    # `bind` on the role lets adm bind it without holding it.
    status, _ = await users.call("admin", "POST", f"{RBAC}/namespaces/default/roles",
                                 role("binder", [{"apiGroups": ["rbac.authorization.k8s.io"],
                                                  "resources": ["clusterroles"],
                                                  "verbs": ["bind"],
                                                  "resourceNames": ["cluster-admin"]}]))
    assert status == 201
    status, _ = await users.call("admin", "POST", f"{RBAC}/namespaces/default/rolebindings",
                                 binding("adm-binder", "Role", "binder", "adm"))
    assert status == 201
    status, body = await users.call("adm", "POST", f"{RBAC}/namespaces/default/rolebindings",
                                    binding("jane-admin", "ClusterRole", "cluster-admin",
                                            "jane"))
    assert status == 201, body


async def test_subject_and_rules_reviews(users: Users) -> None:
    sar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
           "spec": {"user": "someone", "groups": ["system:masters"],
                    "resourceAttributes": {"verb": "update", "resource": "pods",
                                           "subresource": "dynamic", "namespace": "default"}}}
    status, body = await users.call("admin", "POST",
                                    "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
    assert status == 201
    assert body["status"] == {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding '
                              '"cluster-admin" of ClusterRole "cluster-admin" to Group '
                              '"system:masters"'}
    status, body = await users.call("jane", "POST",
                                    "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
    assert status == 403
    del sar["spec"]["resourceAttributes"]
    status, body = await users.call("admin", "POST",
                                    "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
    assert status == 422
    assert body["message"] == (
        'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
        'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must '
        'be specified')
    ssrr = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": "default"}}
    status, body = await users.call(
        "jane", "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", ssrr)
    assert status == 201
    assert {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]
            } in body["status"]["resourceRules"]
    assert body["status"]["incomplete"] is False
    status, _ = await users.call("jane", "GET", SSAR)
    assert status == 403  # a list, which nobody but cluster-admin may try
    status, _ = await users.call("admin", "GET", SSAR)
    assert status == 405


async def test_escalate_is_asked_about_the_request_name(users: Users) -> None:
    """upstream's RoleEscalationAuthorized asks with the request's name: none on a create, so
    `escalate` limited to a role's name lets one update that role, never create it."""
    status, _ = await users.call("admin", "POST", f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "role-writer"},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                   "verbs": ["create", "get", "update"]},
                  {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                   "verbs": ["escalate"], "resourceNames": ["named"]}]})
    assert status == 201
    status, _ = await users.call("admin", "POST", f"{RBAC}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "ed-role-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "role-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ed"}]})
    assert status == 201
    named = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "named"}, "rules": [DYNAMIC_RULE]}
    status, body = await users.call("ed", "POST", f"{RBAC}/clusterroles", named)
    assert status == 403
    assert body["message"].startswith('clusterroles.rbac.authorization.k8s.io "named" is '
                                      'forbidden: user "ed" (groups=["system:authenticated"]) '
                                      "is attempting to grant RBAC permissions not currently "
                                      "held:\n")
    status, created = await users.call("admin", "POST", f"{RBAC}/clusterroles",
                                       {**named, "rules": []})
    assert status == 201
    status, body = await users.call("ed", "PUT", f"{RBAC}/clusterroles/named",
                                    {**created, "rules": [DYNAMIC_RULE]})
    assert status == 200, body


async def test_services_proxy_needs_its_own_subresource(users: Users) -> None:
    path = "/api/v1/namespaces/default/services/web:80/proxy/index.html"
    status, body = await users.call("jane", "GET", path)
    assert (status, body["message"]) == (403, (
        'services "web:80" is forbidden: User "jane" cannot get resource "services/proxy" in '
        'API group "" in the namespace "default"'))
    status, _ = await users.call("admin", "POST", f"{RBAC}/namespaces/default/roles", role(
        "proxy", [{"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}]))
    assert status == 201
    status, _ = await users.call("admin", "POST", f"{RBAC}/namespaces/default/rolebindings",
                                 binding("jane-proxy", "Role", "proxy", "jane"))
    assert status == 201
    status, _ = await users.call("jane", "GET", path)
    assert status == 403  # get on services is not services/proxy
    status, _ = await users.call("admin", "PUT", f"{RBAC}/namespaces/default/roles/proxy", role(
        "proxy", [{"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"]}]))
    assert status == 200
    status, body = await users.call("jane", "GET", path)
    assert (status, body["message"]) == (404, 'services "web" not found')  # authorized



async def test_each_default_policy_write_is_logged_once(tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """The registry logs every write (updates at DEBUG); the bootstrap policy and the
    aggregation controller add no second line for the same write (each default object used
    to be logged twice)."""
    caplog.set_level(logging.DEBUG, logger="ephemera.apiserver")
    store = open_store("sqlite", data_dir=tmp_path / "data")
    async for _ in serve_users(store, TOKENS):
        await eventually(lambda: "aggregated the rules of clusterrole admin" in
                         [r.getMessage() for r in caplog.records])
        await asyncio.sleep(0.5)  # room for a second aggregation pass, behind its own write
    lines = [r.getMessage() for r in caplog.records]
    about_cluster_admin = [m for m in lines if m.startswith("created clusterroles cluster-admin")]
    assert len(about_cluster_admin) == 1 and " rv=" in about_cluster_admin[0]
    assert lines.count("aggregated the rules of clusterrole admin") == 1
    assert sum(1 for m in lines if m.startswith("updated clusterroles admin rv=")) == 1
    assert sum(1 for m in lines if m.startswith("created serviceaccounts default/default")) == 1

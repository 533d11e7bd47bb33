"""Impersonation (`Impersonate-*` headers, `kubectl --as`) in the apiserver app, on a real
sqlite store with bearer-token users and RBAC: who may impersonate, as whom the request is
then served, upstream's 403 texts, and the groups the new user gets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Users, serve

from ephemera.apiserver.audit import AuditFilter, AuditLog, load_policy, read_events
from ephemera.apiserver.authn import Authenticator, UserInfo
from ephemera.store import open_store

AUTHENTICATED = "system:authenticated"
TOKENS = {
    "admin": UserInfo("kubernetes-admin", ("system:masters", AUTHENTICATED)),
    "bob": UserInfo("bob", (AUTHENTICATED,)),
}
RBAC = "/apis/rbac.authorization.k8s.io/v1"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
async def users(tmp_path: Path) -> AsyncIterator[Users]:
    """With an audit log, as `ephemera up` runs: its filter reads the request's attributes
    before impersonation does (the attributes must then name the new user)."""
    store = open_store("sqlite", data_dir=tmp_path / "data")
    audit_log = AuditLog(tmp_path / "audit.log")
    try:
        async for served in serve(store, authenticator=Authenticator(TOKENS),
                                  audit=AuditFilter(load_policy(), audit_log)):
            yield Users(served, store)
    finally:
        audit_log.close()
        await store.close()


async def whoami(users: Users, token: str, headers: dict[str, Any]) -> tuple[int, Any]:
    status, body = await users.call(token, "POST", WHOAMI, {
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        headers=headers)
    return status, body.get("status", {}).get("userInfo") if status == 201 else body


async def test_an_admin_acts_as_the_user_it_names(users: Users, tmp_path: Path) -> None:
    status, info = await whoami(users, "admin", {"Impersonate-User": "jane"})
    assert status == 201
    assert info == {"username": "jane", "groups": [AUTHENTICATED]}
    status, body = await users.call("admin", "GET", PODS, headers={"Impersonate-User": "jane"})
    assert status == 403
    assert body["message"] == ('pods is forbidden: User "jane" cannot list resource "pods" in '
                               'API group "" in the namespace "default"')
    logged = [e for e in read_events(tmp_path / "audit.log")
              if e["stage"] == "ResponseComplete" and e["requestURI"] == PODS]
    assert [(e["user"]["username"], e["impersonatedUser"], e["responseStatus"]["code"])
            for e in logged] == [("kubernetes-admin",
                                  {"username": "jane", "groups": [AUTHENTICATED]}, 403)]
    # Groups asked for are the groups (system:authenticated added), extras and a UID kept.
    status, info = await whoami(users, "admin", {
        "Impersonate-User": "jane", "Impersonate-Group": "devs", "Impersonate-Uid": "u-1",
        "Impersonate-Extra-Scopes%2FA": "read"})
    assert info == {"username": "jane", "uid": "u-1", "groups": ["devs", AUTHENTICATED],
                    "extra": {"scopes/a": ["read"]}}
    # A service account's name brings its groups, unless groups are given.
    status, info = await whoami(users, "admin", {
        "Impersonate-User": "system:serviceaccount:default:builder"})
    assert info["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default",
                              AUTHENTICATED]
    # system:anonymous is unauthenticated: not even a SelfSubjectReview is allowed to it.
    status, body = await whoami(users, "admin", {"Impersonate-User": "system:anonymous"})
    assert status == 403
    assert body["message"] == (
        'selfsubjectreviews.authentication.k8s.io is forbidden: User "system:anonymous" cannot '
        'create resource "selfsubjectreviews" in API group "authentication.k8s.io" at the '
        'cluster scope')


async def test_impersonating_needs_the_impersonate_verb(users: Users) -> None:
    status, body = await users.call("bob", "GET", PODS, headers={"Impersonate-User": "jane"})
    assert status == 403
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": 'users "jane" is forbidden: User "bob" cannot impersonate '
                               'resource "users" in API group "" at the cluster scope',
                    "reason": "Forbidden", "details": {"name": "jane", "kind": "users"},
                    "code": 403}
    status, body = await users.call("bob", "GET", PODS, headers={
        "Impersonate-User": "system:serviceaccount:default:builder"})
    assert status == 403
    assert body["message"] == (
        'serviceaccounts "builder" is forbidden: User "bob" cannot impersonate resource '
        '"serviceaccounts" in API group "" in the namespace "default"')

    status, body = await users.call("admin", "POST", f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "impersonate-jane"},
        "rules": [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"],
                   "resourceNames": ["jane"]}]})
    assert status == 201, body
    status, body = await users.call("admin", "POST", f"{RBAC}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "bob-as-jane"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "impersonate-jane"},
        "subjects": [{"kind": "User", "name": "bob"}]})
    assert status == 201, body
    status, info = await whoami(users, "bob", {"Impersonate-User": "jane"})
    assert (status, info) == (201, {"username": "jane", "groups": [AUTHENTICATED]})
    # Each part is checked: a group bob may not take is refused, whoever the user is.
    status, body = await users.call("bob", "GET", PODS, headers={
        "Impersonate-User": "jane", "Impersonate-Group": "system:masters"})
    assert status == 403
    assert body["message"] == ('groups "system:masters" is forbidden: User "bob" cannot '
                               'impersonate resource "groups" in API group "" at the cluster '
                               'scope')


async def test_groups_without_a_user_are_refused(users: Users) -> None:
    status, body = await users.call("admin", "GET", PODS,
                                    headers={"Impersonate-Group": "system:masters"})
    assert status == 400
    assert body["reason"] == "BadRequest"
    assert body["message"] == ("impersonating groups, user extras or a UID needs a user to "
                               "impersonate too (the Impersonate-User header)")

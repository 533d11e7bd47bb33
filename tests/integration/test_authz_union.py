"""The authorizers together (`Node,RBAC` behind upstream's union): a denial carries every
authorizer's reason, one per line, as upstream's `union.go` joins them; a node's
SelfSubjectRulesReview is incomplete, with the Node authorizer's evaluation error; audit and
authorization read the request's attributes once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, serve

from ephemera.apiserver.audit import AuditFilter, AuditLog, load_policy
from ephemera.apiserver.authn import Authenticator, UserInfo
from ephemera.apiserver.authz import Attributes, requestinfo
from ephemera.store import open_store

TOKENS = {
    "admin": UserInfo("kubernetes-admin", ("system:masters", "system:authenticated")),
    "node": UserInfo("system:node:n1", ("system:nodes", "system:authenticated")),
    "jane": UserInfo("jane", ("system:authenticated",)),
}
RULES_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"


async def call(api: Api, token: str, method: str, path: str, body: Any = None
               ) -> tuple[int, Any]:
    status, data, _ = await api.request(method, path, body,
                                        headers={"Authorization": f"Bearer {token}"})
    return status, data


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    try:
        async for served in serve(store, authenticator=Authenticator(TOKENS)):
            yield served
    finally:
        await store.close()


async def dangling_binding(api: Api, user: str) -> None:
    status, body = await call(api, "admin", "POST",
                              "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
                              {"apiVersion": "rbac.authorization.k8s.io/v1",
                               "kind": "RoleBinding",
                               "metadata": {"name": f"dangling-{user.rsplit(':', 1)[-1]}"},
                               "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                           "kind": "Role", "name": "missing"},
                               "subjects": [{"apiGroup": "rbac.authorization.k8s.io",
                                             "kind": "User", "name": user}]})
    assert status == 201, body


async def test_the_reasons_of_all_authorizers_one_per_line(api: Api) -> None:
    await dangling_binding(api, "system:node:n1")
    status, body = await call(api, "node", "GET", "/api/v1/namespaces/default/secrets/s")
    assert (status, body["message"]) == (403, (
        'secrets "s" is forbidden: User "system:node:n1" cannot get resource "secrets" in API '
        'group "" in the namespace "default": no relationship found between node \'n1\' and '
        'this object\nRBAC: role.rbac.authorization.k8s.io "missing" not found'))


async def test_a_nodes_rules_review_is_incomplete(api: Api) -> None:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
              "spec": {"namespace": "default"}}
    status, body = await call(api, "node", "POST", RULES_REVIEWS, review)
    assert status == 201, body
    assert body["status"]["incomplete"] is True
    assert body["status"]["evaluationError"] == (
        "node authorizer does not support user rule resolution")
    assert {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]
            } in body["status"]["resourceRules"]  # RBAC's rules are still listed
    await dangling_binding(api, "system:node:n1")
    status, body = await call(api, "node", "POST", RULES_REVIEWS, review)
    assert body["status"]["evaluationError"] == (
        "[node authorizer does not support user rule resolution, "
        'role.rbac.authorization.k8s.io "missing" not found]')
    status, body = await call(api, "jane", "POST", RULES_REVIEWS, review)
    assert status == 201, body
    assert body["status"]["incomplete"] is False
    assert "evaluationError" not in body["status"]


async def test_audit_and_authorization_share_one_reading_of_the_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readings: list[str] = []
    original = requestinfo.request_attributes

    def counted(*args: Any) -> Attributes:
        readings.append(args[2])
        return original(*args)

    monkeypatch.setattr(requestinfo, "request_attributes", counted)
    store = open_store("sqlite", data_dir=tmp_path / "data")
    audit_log = AuditLog(tmp_path / "audit.log")
    try:
        async for served in serve(store, authenticator=Authenticator(TOKENS),
                                  audit=AuditFilter(load_policy(), audit_log)):
            readings.clear()
            status, body = await call(served, "jane", "GET",
                                      "/api/v1/namespaces/default/pods/p/log")
            assert status == 403, body
            assert readings == ["/api/v1/namespaces/default/pods/p/log"]
    finally:
        audit_log.close()
        await store.close()

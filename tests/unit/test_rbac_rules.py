"""RBAC's pure parts: rule matching, subjects, the escalation comparison and its message,
ClusterRole aggregation, the default policy, and request attributes from a URL."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz import Attributes
from ephemera.apiserver.authz.aggregation import aggregated_rules
from ephemera.apiserver.authz.bootstrappolicy import cluster_role_bindings, cluster_roles
from ephemera.apiserver.authz.rbac import (
    applies_to,
    compact_string,
    covers,
    escalation_error,
    rule_allows,
)
from ephemera.apiserver.authz.requestinfo import request_attributes

JANE = UserInfo("jane", ("devs", "system:authenticated"))


def attrs(verb: str, resource: str, subresource: str = "", name: str = "", group: str = "",
          namespace: str = "default") -> Attributes:
    return Attributes(user=JANE, verb=verb, api_group=group, resource=resource,
                      subresource=subresource, name=name, namespace=namespace)


@pytest.mark.parametrize(("rule", "request_", "allowed"), [
    ({"verbs": ["update"], "apiGroups": [""], "resources": ["pods"]},
     attrs("update", "pods", "dynamic"), False),
    ({"verbs": ["update"], "apiGroups": [""], "resources": ["pods/dynamic"]},
     attrs("update", "pods", "dynamic"), True),
    ({"verbs": ["update"], "apiGroups": [""], "resources": ["*/dynamic"]},
     attrs("update", "pods", "dynamic"), True),
    ({"verbs": ["update"], "apiGroups": [""], "resources": ["*/dynamic"]},
     attrs("update", "pods"), False),
    ({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
     attrs("update", "pods", "dynamic"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]},
     attrs("update", "pods"), False),
    ({"verbs": ["get"], "apiGroups": ["apps"], "resources": ["pods"]},
     attrs("get", "pods"), False),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"]},
     attrs("get", "pods", name="a"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"]},
     attrs("list", "pods"), False),
])
def test_rule_matching(rule: dict[str, Any], request_: Attributes, allowed: bool) -> None:
    assert rule_allows(request_, rule) is allowed


@pytest.mark.parametrize(("urls", "path", "allowed"), [
    (["/api", "/api/*"], "/api/v1", True),
    (["/api"], "/api/v1", False),
    (["*"], "/anything", True),
    (["/healthz"], "/healthz", True),
])
def test_non_resource_urls(urls: list[str], path: str, allowed: bool) -> None:
    request_ = Attributes(user=JANE, verb="get", resource_request=False, path=path)
    assert rule_allows(request_, {"verbs": ["get"], "nonResourceURLs": urls}) is allowed


def test_subjects() -> None:
    account = UserInfo("system:serviceaccount:ns1:robot", ())
    assert applies_to(JANE, {"kind": "User", "name": "jane"}, "")
    assert applies_to(JANE, {"kind": "Group", "name": "devs"}, "")
    assert not applies_to(JANE, {"kind": "User", "name": "devs"}, "")
    assert applies_to(account, {"kind": "ServiceAccount", "name": "robot"}, "ns1")
    assert not applies_to(account, {"kind": "ServiceAccount", "name": "robot"}, "ns2")
    assert applies_to(account, {"kind": "ServiceAccount", "name": "robot",
                                "namespace": "ns1"}, "ns2")
    assert not applies_to(account, {"kind": "ServiceAccount", "name": "robot"}, "")


def test_escalation_message_is_upstreams() -> None:
    owner = [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]
    wanted = [{"verbs": ["get", "update", "patch"], "apiGroups": [""],
               "resources": ["pods", "pods/dynamic"]}]
    ok, missing = covers(owner, wanted)
    assert not ok and len(missing) == 5
    assert escalation_error(JANE, owner, wanted) == (
        'user "jane" (groups=["devs" "system:authenticated"]) is attempting to grant RBAC '
        'permissions not currently held:\n'
        '{APIGroups:[""], Resources:["pods"], Verbs:["update" "patch"]}\n'
        '{APIGroups:[""], Resources:["pods/dynamic"], Verbs:["get" "update" "patch"]}')
    assert escalation_error(JANE, [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                            wanted) is None
    assert covers([{"verbs": ["get"], "apiGroups": [""], "resources": ["*/dynamic"]}],
                  [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods/dynamic"]}])[0]
    assert compact_string({"nonResourceURLs": ["/x"], "verbs": ["get"]}) == (
        '{NonResourceURLs:["/x"], Verbs:["get"]}')


def test_aggregation_resolves_chains_and_keeps_dynamic_out() -> None:
    rules = aggregated_rules(cluster_roles())
    view, edit, admin = rules["view"], rules["edit"], rules["admin"]
    assert view and all(r in edit for r in view) and all(r in admin for r in edit)
    # cluster-admin and the garbage collector's role (upstream's `*`/`*`) grant everything
    wildcards = {"cluster-admin", "system:controller:generic-garbage-collector"}
    everything = [r for role in cluster_roles() if role["metadata"]["name"] not in wildcards
                  for r in role["rules"]] + admin
    dynamic = attrs("update", "pods", "dynamic", name="p")
    assert not any(rule_allows(dynamic, r) for r in everything)
    assert any(rule_allows(attrs("update", "pods", name="p"), r) for r in edit)
    assert not any(rule_allows(attrs("update", "pods", name="p"), r) for r in view)


def test_aggregation_selectors_are_label_selectors() -> None:
    """clusterRoleSelectors match as `metav1.LabelSelector`s (api/labelselector.py): an empty
    one selects every role, one that does not convert (a bad operator, `In` without values)
    none."""
    source = {"metadata": {"name": "source", "labels": {"a": "1", "b": "2"}},
              "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}

    def selected(selector: dict[str, Any]) -> bool:
        target = {"metadata": {"name": "target"},
                  "aggregationRule": {"clusterRoleSelectors": [selector]}}
        return bool(aggregated_rules([source, target])["target"])

    assert selected({"matchLabels": {"a": "1"}})
    assert not selected({"matchLabels": {"a": "2"}})
    assert selected({"matchExpressions": [{"key": "b", "operator": "In", "values": ["2", "3"]}]})
    assert not selected({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]})
    assert selected({})
    assert not selected({"matchExpressions": [{"key": "a", "operator": "Bogus"}]})
    assert not selected({"matchExpressions": [{"key": "a", "operator": "NotIn"}]})


def test_default_bindings() -> None:
    bindings = {b["metadata"]["name"]: b for b in cluster_role_bindings()}
    assert bindings["cluster-admin"]["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:masters"}]
    assert bindings["system:node"]["subjects"] == []
    roles = {r["metadata"]["name"] for r in cluster_roles()}
    assert {b["roleRef"]["name"] for b in bindings.values()} <= roles


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("PUT", "/api/v1/namespaces/default/pods/p/dynamic", {},
     ("update", "", "pods", "dynamic", "default", "p")),
    ("GET", "/api/v1/namespaces/default/pods", {}, ("list", "", "pods", "", "default", "")),
    ("GET", "/api/v1/namespaces/default/pods",
     {"watch": "1", "fieldSelector": "metadata.name=p"},
     ("watch", "", "pods", "", "default", "p")),
    ("GET", "/api/v1/watch/namespaces/default/pods/p", {},
     ("watch", "", "pods", "", "default", "p")),
    ("DELETE", "/api/v1/namespaces/default/pods", {},
     ("deletecollection", "", "pods", "", "default", "")),
    ("GET", "/api/v1/namespaces/ns1", {}, ("get", "", "namespaces", "", "ns1", "ns1")),
    ("PUT", "/api/v1/namespaces/ns1/finalize", {},
     ("update", "", "namespaces", "finalize", "ns1", "ns1")),
    ("GET", "/api/v1/nodes/n1/proxy/stats/summary", {},
     ("get", "", "nodes", "proxy", "", "n1")),
    ("POST", "/api/v1/namespaces/ns1/services/http:web:80/proxy/a/b", {},
     ("create", "", "services", "proxy", "ns1", "http:web:80")),
    ("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings", {},
     ("create", "rbac.authorization.k8s.io", "rolebindings", "", "a", "")),
])
def test_request_attributes(method: str, path: str, query: dict[str, str],
                            expected: tuple[str, ...]) -> None:
    a = request_attributes(JANE, method, path, query)
    assert a.resource_request
    assert (a.verb, a.api_group, a.resource, a.subresource, a.namespace, a.name) == expected


@pytest.mark.parametrize("path", ["/api", "/api/v1", "/apis", "/apis/rbac.authorization.k8s.io",
                                  "/apis/rbac.authorization.k8s.io/v1", "/version",
                                  "/openapi/v2"])
def test_non_resource_requests(path: str) -> None:
    a = request_attributes(JANE, "GET", path, {})
    assert (a.resource_request, a.verb, a.path) == (False, "get", path)

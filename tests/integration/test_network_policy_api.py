"""networking.k8s.io/v1 NetworkPolicy through the in-process apiserver (kr8s' suite lists
the kind): discovery, upstream's defaults and validation messages, generation, the Table
columns and the `Warning` that ephemera does not enforce them."""

from __future__ import annotations

import copy
from typing import Any

from apiserver_fixtures import TABLE_ACCEPT, Api, causes

POLICIES = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies"


def policy(name: str = "db", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name},
            "spec": {"podSelector": {"matchLabels": {"app": "db"}}, **spec}}


async def test_defaults_generation_warning_and_table(api: Api) -> None:
    status, group = await api.get("/apis/networking.k8s.io/v1")
    assert status == 200
    by_name = {r["name"]: r for r in group["resources"]}
    assert by_name["networkpolicies"]["shortNames"] == ["netpol"]
    body = policy(ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                            "ports": [{"port": 5432}]}],
                  egress=[{"to": [{"ipBlock": {"cidr": "10.0.0.0/8",
                                               "except": ["10.1.0.0/16"]}}]}])
    status, created, response = await api.request("POST", POLICIES, body)
    assert status == 201, created
    assert "NetworkPolicies are not enforced in ephemera (not implemented)" in \
        response.headers["Warning"]
    assert created["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert created["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 5432}]
    assert created["metadata"]["generation"] == 1
    changed = copy.deepcopy(created)
    changed["spec"]["podSelector"] = {"matchLabels": {"app": "cache"}}
    status, updated, response = await api.request("PUT", f"{POLICIES}/db", changed)
    assert status == 200, updated
    assert updated["metadata"]["generation"] == 2
    assert "Warning" not in response.headers
    status, bare = await api.post(POLICIES, {"apiVersion": "networking.k8s.io/v1",
                                             "kind": "NetworkPolicy",
                                             "metadata": {"name": "all"}})
    assert status == 201, bare
    assert bare["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    status, table = await api.get(POLICIES, headers={"Accept": TABLE_ACCEPT})
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Pod-Selector", "Age"]
    assert [r["cells"][:2] for r in table["rows"]] == [["all", "<none>"], ["db", "app=cache"]]


async def test_validation_messages(api: Api) -> None:
    body = policy("bad", policyTypes=["Ingress", "Sideways"], ingress=[{
        "ports": [{"protocol": "ICMP", "port": 70000},
                  {"port": "http", "endPort": 90}, {"port": 100, "endPort": 80}],
        "from": [{}, {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24", "nope"]},
                      "podSelector": {}}]}])
    status, refused = await api.post(POLICIES, body)
    assert status == 422
    assert refused["message"].startswith('NetworkPolicy.networking.k8s.io "bad" is invalid')
    assert causes(refused) == [
        ("spec.ingress[0].ports[0].protocol",
         'Unsupported value: "ICMP": supported values: "TCP", "UDP", "SCTP"'),
        ("spec.ingress[0].ports[0].port",
         "Invalid value: 70000: must be between 1 and 65535, inclusive"),
        ("spec.ingress[0].ports[1].endPort",
         "Invalid value: 90: may not be specified when `port` is non-numeric"),
        ("spec.ingress[0].ports[2].endPort",
         "Invalid value: 80: must be greater than or equal to `port`"),
        ("spec.ingress[0].from[0]", "Required value: must specify a peer"),
        ("spec.ingress[0].from[1].ipBlock.except[0]",
         'Invalid value: "10.1.0.0/24": must be a strict subset of `cidr`'),
        ("spec.ingress[0].from[1].ipBlock.except[1]",
         'Invalid value: "nope": must be a valid CIDR value, (e.g. 10.9.8.0/24 or '
         "2001:db8::/64)"),
        ("spec.ingress[0].from[1]", "Forbidden: may not specify both ipBlock and another peer"),
        ("spec.policyTypes[1]",
         'Unsupported value: "Sideways": supported values: "Ingress", "Egress"'),
    ]
    status, refused = await api.post(POLICIES, policy(
        "many", policyTypes=["Ingress", "Egress", "Ingress"]))
    assert status == 422
    assert causes(refused) == [(
        "spec.policyTypes",
        'Invalid value: []networking.PolicyType{"Ingress", "Egress", "Ingress"}: may not '
        "specify more than two policyTypes")]

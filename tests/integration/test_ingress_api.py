"""networking.k8s.io/v1 Ingress through the in-process apiserver (kr8s' suite lists the
kind): discovery, the empty status and generation, upstream's validation messages and
warnings, the status subresource, the Table columns, and the `Warning` that no ingress
controller routes it."""

from __future__ import annotations

import copy
from typing import Any

from apiserver_fixtures import TABLE_ACCEPT, Api, causes

INGRESSES = "/apis/networking.k8s.io/v1/namespaces/default/ingresses"


def backend(name: str = "web", port: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"service": {"name": name, "port": {"number": 80} if port is None else port}}


def ingress(name: str = "site", **spec: Any) -> dict[str, Any]:
    spec.setdefault("rules", [{"host": "example.com", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": backend()}]}}])
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name}, "spec": spec}


async def test_create_status_warning_and_table(api: Api) -> None:
    status, group = await api.get("/apis/networking.k8s.io/v1")
    by_name = {r["name"]: r for r in group["resources"]}
    assert by_name["ingresses"]["shortNames"] == ["ing"]
    assert "ingresses/status" in by_name
    body = ingress(tls=[{"hosts": ["example.com"], "secretName": "cert"}])
    body["metadata"]["annotations"] = {"kubernetes.io/ingress.class": "nginx"}
    status, created, response = await api.request("POST", INGRESSES, body)
    assert status == 201, created
    warnings = response.headers.getall("Warning")
    assert any('annotation \\"kubernetes.io/ingress.class\\" is deprecated, please use '
               "'spec.ingressClassName' instead" in w for w in warnings)  # quotes escaped
    assert any("ephemera runs no ingress controller (not implemented)" in w for w in warnings)
    assert created["status"] == {"loadBalancer": {}}
    assert created["metadata"]["generation"] == 1
    reported = copy.deepcopy(created)
    reported["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}
    status, updated = await api.put(f"{INGRESSES}/site/status", reported)
    assert status == 200, updated
    reported = copy.deepcopy(updated)
    reported["status"] = {"loadBalancer": {"ingress": [{"ip": "nope"},
                                                       {"hostname": "10.0.0.1"}]}}
    status, refused = await api.put(f"{INGRESSES}/site/status", reported)
    assert status == 422
    assert causes(refused) == [
        ("status.loadBalancer.ingress[0].ip",
         'Invalid value: "nope": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)'),
        ("status.loadBalancer.ingress[1].hostname",
         'Invalid value: "10.0.0.1": must be a DNS name, not an IP address'),
    ]
    await api.post(INGRESSES, ingress("fallback", rules=None, defaultBackend=backend(),
                                      ingressClassName="nginx"))
    status, table = await api.get(INGRESSES, headers={"Accept": TABLE_ACCEPT})
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Class", "Hosts", "Address", "Ports", "Age"]
    assert [r["cells"][:5] for r in table["rows"]] == [
        ["fallback", "nginx", "*", "", "80"],
        ["site", "<none>", "example.com", "192.0.2.7", "80, 443"]]


async def test_validation_messages(api: Api) -> None:
    status, refused = await api.post(INGRESSES, ingress("empty", rules=None))
    assert status == 422
    assert causes(refused) == [(
        "spec", "Invalid value: []networking.IngressRule(nil): either `defaultBackend` or "
        "`rules` must be specified")]
    body = ingress("bad", ingressClassName="Nginx", rules=[
        {"host": "10.0.0.1"},
        {"host": "*.*.example.com"},
        {"http": {"paths": [
            {"path": "/a//b", "pathType": "Exact", "backend": backend("Web")},
            {"path": "rel", "pathType": "Regex", "backend": backend(port={"name": "http",
                                                                           "number": 80})},
            {"path": "/x", "backend": backend()},
            {"path": "/y", "pathType": "Prefix", "backend": {}},
            {"path": "/z", "pathType": "Prefix", "backend": backend(port={})}]}}])
    body["metadata"]["annotations"] = {"kubernetes.io/ingress.class": "other"}
    status, refused = await api.post(INGRESSES, body)
    assert status == 422
    assert refused["message"].startswith('Ingress.networking.k8s.io "bad" is invalid')
    got = causes(refused)
    assert got[0] == ("spec.rules[0].host",
                      'Invalid value: "10.0.0.1": must be a DNS name, not an IP address')
    assert got[1][0] == "spec.rules[1].host" and \
        "a wildcard DNS-1123 subdomain must start with '*.'" in got[1][1]
    assert got[2:] == [
        ("spec.rules[2].http.paths[0].path", "Invalid value: \"/a//b\": must not contain '//'"),
        ("spec.rules[2].http.paths[0].backend.service.name",
         'Invalid value: "Web": a DNS-1035 label must consist of lower case alphanumeric '
         "characters or '-', start with an alphabetic character, and end with an alphanumeric "
         "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
         "'[a-z]([-a-z0-9]*[a-z0-9])?')"),
        ("spec.rules[2].http.paths[1].pathType",
         'Unsupported value: "Regex": supported values: "Exact", "ImplementationSpecific", '
         '"Prefix"'),
        ("spec.rules[2].http.paths[1].backend",
         'Invalid value: "": cannot set both port name & port number'),
        ("spec.rules[2].http.paths[2].pathType", "Required value: pathType must be specified"),
        ("spec.rules[2].http.paths[3].backend",
         'Invalid value: "": resource or service backend is required'),
        ("spec.rules[2].http.paths[4].backend",
         "Required value: port name or number is required"),
        ("spec.ingressClassName",
         'Invalid value: "Nginx": a lowercase RFC 1123 subdomain must consist of lower case '
         "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
         "character (e.g. 'example.com', regex used for validation is "
         "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
        ("annotations.kubernetes.io/ingress.class",
         'Invalid value: "other": must match `ingressClassName` when both are specified'),
    ]

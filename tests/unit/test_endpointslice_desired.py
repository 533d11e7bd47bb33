"""The EndpointSlice controller's pure part: endpoint conditions (upstream's
`podToEndpoint`), named ports per pod, the 100-endpoint slices, the legacy subsets."""

from __future__ import annotations

from typing import Any

from ephemera.controllers.endpointslice import desired_slices, desired_subsets, find_port


def pod(name: str, ip: str | None, ready: bool, *, terminating: bool = False,
        port: int = 8080, phase: str = "Running") -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"u-{name}",
                          "labels": {"app": "x"}}
    if terminating:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": md, "status": status,
            "spec": {"containers": [{"name": "c", "ports": [{"name": "http",
                                                             "containerPort": port}]}]}}


def svc(publish: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": "s", "namespace": "ns"},
            "spec": {"selector": {"app": "x"}, "publishNotReadyAddresses": publish,
                     "ports": [{"name": "web", "port": 80, "targetPort": "http",
                                "protocol": "TCP"}]}}


def conditions(service: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["targetRef"]["name"]: e["conditions"]
            for _, eps in desired_slices(service, pods) for e in eps}


def test_conditions_follow_readiness_and_termination() -> None:
    pods = [pod("ready", "10.0.0.1", True), pod("unready", "10.0.0.2", False),
            pod("leaving", "10.0.0.3", True, terminating=True), pod("noip", None, True),
            pod("done", "10.0.0.4", True, phase="Succeeded")]
    assert conditions(svc(), pods) == {
        "ready": {"ready": True, "serving": True, "terminating": False},
        "unready": {"ready": False, "serving": False, "terminating": False},
        "leaving": {"ready": False, "serving": True, "terminating": True}}
    assert conditions(svc(publish=True), pods)["unready"] == {
        "ready": True, "serving": False, "terminating": False}


def test_named_ports_resolve_per_pod_and_slices_hold_100() -> None:
    pods = [pod(f"p{i:03}", f"10.0.{i // 200}.{i % 200 + 1}", True,
                port=8080 if i < 150 else 9090) for i in range(160)]
    slices = desired_slices(svc(), pods)
    assert [(ports, len(eps)) for ports, eps in slices] == [
        ((("web", 8080, "TCP"),), 100), ((("web", 8080, "TCP"),), 50),
        ((("web", 9090, "TCP"),), 10)]
    assert find_port(pods[0], {"targetPort": "nope"}) is None


def test_legacy_subsets_split_ready_and_not_ready() -> None:
    pods = [pod("b", "10.0.0.9", True), pod("a", "10.0.0.10", False),
            pod("leaving", "10.0.0.3", True, terminating=True)]
    assert desired_subsets(svc(), pods) == [{
        "addresses": [{"ip": "10.0.0.9", "targetRef": {
            "kind": "Pod", "namespace": "ns", "name": "b", "uid": "u-b"}}],
        "notReadyAddresses": [{"ip": "10.0.0.10", "targetRef": {
            "kind": "Pod", "namespace": "ns", "name": "a", "uid": "u-a"}}],
        "ports": [{"name": "web", "port": 8080, "protocol": "TCP"}]}]
    assert desired_slices(svc(), [])[0] == ((), [])


def test_hostname_when_the_subdomain_is_the_service() -> None:
    """Upstream's `ShouldSetHostname`: the pod's hostname on its endpoint when its subdomain
    names the Service (the DNS name `<hostname>.<service>.<ns>.svc`), not otherwise."""
    named = pod("web-0", "10.0.0.1", True)
    named["spec"].update(hostname="web-0", subdomain="s")
    other = pod("web-1", "10.0.0.2", True)
    other["spec"].update(hostname="web-1", subdomain="elsewhere")
    [(_, endpoints)] = desired_slices(svc(), [named, other])
    assert {e["targetRef"]["name"]: e.get("hostname") for e in endpoints} == {
        "web-0": "web-0", "web-1": None}
    [subset] = desired_subsets(svc(), [named, other])
    assert {a["targetRef"]["name"]: a.get("hostname") for a in subset["addresses"]} == {
        "web-0": "web-0", "web-1": None}

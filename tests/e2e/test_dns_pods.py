"""Cluster DNS in a real `ephemera up`: real pods' /etc/resolv.conf by dnsPolicy (read with
`kubectl exec cat`), and the DNS server `up` runs behind the kube-dns Service, queried
directly (pods reach it through the Service proxy, tested where that runs): a ClusterIP
Service, the `kubernetes` Service, a headless Service and its member pod's own name."""

from __future__ import annotations

import json
from typing import Any

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest
import yaml
from cluster import Cluster, Kubectl, kubelet_cluster_fixtures, wait, wait_pod

from ephemera.kubelet.dnsconfig import parse_resolv_conf

pytestmark = pytest.mark.e2e

NODE = "dns-node"
dns_cluster, k = kubelet_cluster_fixtures("dns_cluster", "dns-cluster", NODE,
                                          service_proxy=True)


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sleep", "3600"]}], **spec}}


def _host_lines() -> tuple[list[str], list[str], list[str]]:
    with open("/etc/resolv.conf") as f:
        return parse_resolv_conf(f.read())


def test_resolv_conf_by_dns_policy(k: Kubectl) -> None:
    k("create", "-f", "-", input=yaml.safe_dump_all([
        _pod("cluster-first"),
        _pod("default", dnsPolicy="Default"),
        _pod("none", dnsPolicy="None", dnsConfig={
            "nameservers": ["192.0.2.1"], "searches": ["example.test"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}),
        _pod("merged", dnsConfig={"nameservers": ["192.0.2.2"],
                                  "options": [{"name": "ndots", "value": "3"}]}),
        _pod("host-net", hostNetwork=True),
    ]))
    for name in ("cluster-first", "default", "none", "merged", "host-net"):
        wait_pod(k, name, lambda p: p["status"].get("phase") == "Running", "running")

    def resolv(name: str) -> str:
        return str(k("exec", name, "--", "cat", "/etc/resolv.conf").stdout)

    servers, searches, options = _host_lines()
    ns = k.namespace
    host_search = "".join(f" {s}" for s in searches
                          if s not in (f"{ns}.svc.cluster.local", "svc.cluster.local",
                                       "cluster.local"))
    assert resolv("cluster-first") == (
        f"search {ns}.svc.cluster.local svc.cluster.local cluster.local{host_search}\n"
        "nameserver 10.96.0.10\noptions ndots:5\n")
    assert resolv("none") == ("search example.test\nnameserver 192.0.2.1\n"
                              "options ndots:2 edns0\n")
    merged = resolv("merged")
    assert "nameserver 10.96.0.10\nnameserver 192.0.2.2\n" in merged
    assert merged.endswith("options ndots:3\n")
    # Default, and hostNetwork with ClusterFirst: the host's settings.
    for name in ("default", "host-net"):
        assert parse_resolv_conf(resolv(name)) == (servers, searches, options), name


def test_up_runs_the_dns_server_behind_kube_dns(k: Kubectl, dns_cluster: Cluster) -> None:
    wait(lambda: k("get", "service", "kube-dns", "-n", "kube-system", check=False
                   ).returncode == 0, "the kube-dns Service", dns_cluster)
    svc = k.json("get", "service", "kube-dns", "-n", "kube-system")
    assert svc["spec"]["clusterIP"] == "10.96.0.10"
    assert [(p["name"], p["port"], p["protocol"]) for p in svc["spec"]["ports"]] == [
        ("dns", 53, "UDP"), ("dns-tcp", 53, "TCP")]
    node = k.json("get", "node", NODE)
    [address] = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    port = wait(lambda: json.loads((dns_cluster.data_dir / "ports.json").read_text()
                                   ).get("dns"), "the DNS server's port", dns_cluster)
    k("create", "service", "clusterip", "web", "--tcp=80:8080")
    ip = k.json("get", "service", "web")["spec"]["clusterIP"]

    def ask(name: str, tcp: bool = False) -> dns.message.Message:
        query = dns.message.make_query(name, "A")
        send = dns.query.tcp if tcp else dns.query.udp
        return send(query, address, port=port, timeout=2)

    def answers(name: str) -> set[str]:
        try:
            return {r.to_text() for rrset in ask(name).answer for r in rrset}
        except (dns.exception.Timeout, OSError):  # still starting
            return set()

    wait(lambda: answers(f"web.{k.namespace}.svc.cluster.local") == {ip},
         "the new Service to resolve", dns_cluster)
    kubernetes = k.json("get", "service", "kubernetes", "-n", "default")
    assert {r.to_text() for rrset in ask("kubernetes.default.svc.cluster.local", True).answer
            for r in rrset} == {kubernetes["spec"]["clusterIP"]}
    assert ask(f"nope.{k.namespace}.svc.cluster.local").rcode() == dns.rcode.NXDOMAIN
    assert ask("example.com").rcode() == dns.rcode.REFUSED

    # A headless Service and a pod whose subdomain names it: the pod's own name.
    member = _pod("member", hostname="web-0", subdomain="members")
    member["metadata"]["labels"] = {"app": "members"}
    k("create", "-f", "-", input=yaml.safe_dump_all([member, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "members"},
        "spec": {"clusterIP": "None", "selector": {"app": "members"},
                 "ports": [{"name": "http", "port": 80}]}}]))
    pod_ip = wait_pod(k, "member", lambda p: p["status"].get("phase") == "Running"
                      and bool(p["status"].get("podIP")), "running")["status"]["podIP"]
    wait(lambda: answers(f"web-0.members.{k.namespace}.svc.cluster.local") == {pod_ip},
         "the member's name to resolve", dns_cluster)
    assert answers(f"members.{k.namespace}.svc.cluster.local") == {pod_ip}
    # Its /etc/hosts names it so too, as upstream's kubelet writes it.
    hosts = k("exec", "member", "--", "cat", "/etc/hosts").stdout
    assert hosts.startswith("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
    assert hosts.endswith(f"{pod_ip}\tweb-0.members.{k.namespace}.svc.cluster.local\tweb-0\n")


def test_nslookup_from_a_pod(k: Kubectl, dns_cluster: Cluster) -> None:
    """A pod resolves a Service through its resolv.conf: the kube-dns ClusterIP, carried by
    the Service proxy to the server's endpoint. Needs a node address pods reach (no
    EndpointSlice is published for a loopback one): skipped without it."""
    wait(lambda: k("get", "service", "kube-dns", "-n", "kube-system", check=False
                   ).returncode == 0, "the kube-dns Service", dns_cluster)
    slices = k.json("get", "endpointslices", "-n", "kube-system", "-l",
                    "kubernetes.io/service-name=kube-dns")["items"]
    if not slices:
        pytest.skip("the node's address is loopback: kube-dns has no endpoint pods reach")
    k("create", "service", "clusterip", "looked-up", "--tcp=80:8080")
    ip = k.json("get", "service", "looked-up")["spec"]["clusterIP"]
    k("create", "-f", "-", input=yaml.safe_dump(_pod("resolver")))
    wait_pod(k, "resolver", lambda p: p["status"].get("phase") == "Running", "running")
    name = f"looked-up.{k.namespace}.svc.cluster.local"

    def resolved() -> bool:
        out = k("exec", "resolver", "--", "nslookup", name, check=False)
        return out.returncode == 0 and f"Address: {ip}" in out.stdout

    wait(resolved, f"nslookup {name} in a pod", dns_cluster)

"""Services through the proxy `ephemera up` runs (`ephemera proxy`, nftables), with real
containers: busybox `httpd` backends serving their host name behind a NodePort Service are
both reached through its ClusterIP and its node port (from a pod and from the host), a
backend whose readiness probe fails gets no more connections, a Service without endpoints
refuses at once; after a `kill -9` of the proxy the restarted one replaces its table (no
stale rule); 50 backends deleted at once leave no veth, no address lease, no nftables rule
and no endpoint behind; and stopping `up` removes the table."""

from __future__ import annotations

import ipaddress
import json
import math
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    Cluster,
    Kubectl,
    cni_leases,
    namespaced_kubectl,
    run_kubelet_cluster,
    veths_on,
    wait,
    wait_pod,
)

from ephemera.cli.up import default_cluster_cidr
from ephemera.kubelet.runtime.cni import bridge_name
from ephemera.proxy import nft

pytestmark = pytest.mark.e2e

NODE = "svc-node"
REQUESTS = 16


def _table(cluster: Cluster) -> str:
    return nft.table_name(default_cluster_cidr(cluster.data_dir.resolve()), NODE)


@pytest.fixture(scope="module")
def svc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    clusters: list[Cluster] = []
    for cluster in run_kubelet_cluster(tmp_path_factory, "svc-cluster", NODE,
                                       service_proxy=True):
        clusters.append(cluster)
        table = _table(cluster)
        wait(lambda t=table: t in nft.list_tables(), "the proxy's table", cluster)
        yield cluster
    # stopping `up` stopped the proxy, which deleted its table
    assert _table(clusters[0]) not in nft.list_tables()


@pytest.fixture
def k(svc_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
      ) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(svc_cluster, tmp_path, request)


def _backend(name: str) -> dict[str, Any]:
    script = ("mkdir -p /www && hostname > /www/index.html && touch /tmp/ready && "
              "exec httpd -f -p 8080 -h /www")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name,
                                                            "labels": {"app": "web"}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "c", "image": "busybox", "command": ["sh", "-c", script],
                "ports": [{"name": "web", "containerPort": 8080}],
                "readinessProbe": {"exec": {"command": ["test", "-e", "/tmp/ready"]},
                                   "periodSeconds": 1, "failureThreshold": 1}}]}}


def _client() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client"},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}}


def _service(name: str, selector: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": "NodePort", "selector": selector,
                     "ports": [{"name": "http", "port": 80, "targetPort": "web"}]}}


def _ready(p: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in p["status"].get("conditions") or [])


def _fetch_from_client(k: Kubectl, ip: str, port: int) -> list[str]:
    """REQUESTS connections from the client pod; the body (a host name) of each answer."""
    # busybox-static's wget crashes on this host; nc speaks the request instead
    script = (f'for i in $(seq {REQUESTS}); do printf "GET / HTTP/1.0\\r\\n\\r\\n" | '
              f'nc -w 2 {ip} {port} | tail -n 1; echo; done')
    out = k("exec", "client", "--", "sh", "-c", script, check=False).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def _fetch_from_host(ip: str, port: int) -> list[str]:
    answers = []
    for _ in range(REQUESTS):
        try:
            with urllib.request.urlopen(f"http://{ip}:{port}/", timeout=3) as resp:
                answers.append(resp.read().decode().strip())
        except OSError:
            answers.append("")
    return answers


def test_clusterip_and_nodeport_balance_over_ready_backends_and_follow_readiness(
        k: Kubectl, svc_cluster: Cluster) -> None:
    k("create", "-f", "-", input=yaml.safe_dump_all([
        _backend("web-a"), _backend("web-b"), _client(), _service("web", {"app": "web"}),
        _service("nothing", {"app": "none"})]))
    for name in ("web-a", "web-b"):
        wait_pod(k, name, _ready, "Ready")
    wait_pod(k, "client", lambda p: p["status"].get("phase") == "Running", "Running")
    svc = k.json("get", "service", "web")
    cluster_ip, node_port = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["nodePort"]
    pod_cidr = k.json("get", "node", NODE)["spec"]["podCIDR"]
    node_ip = str(ipaddress.IPv4Network(pod_cidr).network_address + 1)  # the bridge's

    both = {"web-a", "web-b"}
    wait(lambda: set(_fetch_from_client(k, cluster_ip, 80)) == both,
         "both backends to answer through the ClusterIP", svc_cluster)
    wait(lambda: set(_fetch_from_client(k, node_ip, node_port)) == both,
         "both backends to answer through the node port from a pod", svc_cluster)
    wait(lambda: set(_fetch_from_host(node_ip, node_port)) == both,
         "both backends to answer through the node port from the host", svc_cluster)

    # a Service without endpoints refuses (upstream's reject), it does not time out
    nothing = k.json("get", "service", "nothing")["spec"]["clusterIP"]
    refused = k("exec", "client", "--", "sh", "-c", f"nc -w 5 {nothing} 80 </dev/null",
                check=False)
    assert refused.returncode != 0
    assert "refused" in refused.stderr.lower()

    k("exec", "web-b", "--", "rm", "/tmp/ready")
    wait_pod(k, "web-b", lambda p: not _ready(p), "not Ready")
    wait(lambda: set(_fetch_from_client(k, cluster_ip, 80)) == {"web-a"},
         "only the ready backend through the ClusterIP", svc_cluster)
    assert _fetch_from_client(k, node_ip, node_port) == ["web-a"] * REQUESTS
    assert _fetch_from_host(node_ip, node_port) == ["web-a"] * REQUESTS


def test_kill_9_of_the_proxy_then_restart_replaces_the_table_without_stale_rules(
        k: Kubectl, svc_cluster: Cluster) -> None:
    table = _table(svc_cluster)
    k("create", "-f", "-", input=yaml.safe_dump(_service("doomed", {"app": "none"})))
    doomed = k.json("get", "service", "doomed")["spec"]["clusterIP"]

    def rules_text() -> str:
        return str(nft.list_table(table))

    wait(lambda: doomed in rules_text(), "the proxy to program the Service", svc_cluster)
    old = svc_cluster.pid_of("proxy")
    os.kill(old, signal.SIGKILL)
    k("delete", "service", "doomed")
    # the killed proxy's table stays meanwhile (traffic keeps flowing)
    assert table in nft.list_tables()
    wait(lambda: svc_cluster.pid_of("proxy") != old, "up to restart the proxy", svc_cluster)
    wait(lambda: doomed not in rules_text(), "the restarted proxy to drop the stale rule",
         svc_cluster)
    assert nft.list_tables().count(table) == 1
    log = (svc_cluster.data_dir / "logs" / "proxy.log").read_text()
    assert f"synced nftables table {table} (full)" in log.rsplit("starting proxy", 1)[1]


MANY = 50


def _strings(value: Any) -> set[str]:
    """Every string in a JSON value (the addresses an nftables rule names, exactly)."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*map(_strings, value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*map(_strings, value)) if value else set()
    return set()


def _sleeper(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"many-{i}", "labels": {"app": "many"}},
            # no token volume or service variables: the network is what is tested
            "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                     "enableServiceLinks": False, "containers": [{
                         "name": "c", "image": "busybox", "command": ["sleep", "3600"],
                         "ports": [{"name": "web", "containerPort": 8080}]}]}}


def test_fifty_pods_deleted_at_once_leave_no_veth_address_rule_or_endpoint(
        k: Kubectl, svc_cluster: Cluster) -> None:
    """Issue #14: 50 backends of a Service, running with their own veth and address and
    programmed as endpoints, are deleted in one request (a DELETE of the collection);
    afterwards the node has what it had
    before: no veth on the bridge, no host-local lease, no rule naming a pod address, no
    endpoint in the Service's slices."""
    table = _table(svc_cluster)
    bridge = bridge_name((svc_cluster.data_dir / "kubelet").resolve())
    veths_before, leases_before = set(veths_on(bridge)), set(cni_leases(svc_cluster))
    k("create", "-f", "-", input=yaml.safe_dump_all(
        [_service("many", {"app": "many"}), *(_sleeper(i) for i in range(MANY))]))

    # one watch (kubectl wait), not a list of 50 pods five times a second
    k("wait", "--for=condition=Ready", "pods", "-l", "app=many", "--timeout=120s",
      timeout=130)
    pods = k.json("get", "pods", "-l", "app=many")["items"]
    ips = {p["status"]["podIP"] for p in pods}
    assert len(ips) == MANY

    def slice_addresses() -> set[str]:
        slices = k.json("get", "endpointslices", "-l",
                        "kubernetes.io/service-name=many")["items"]
        return {a for s in slices for e in s.get("endpoints") or []
                for a in e.get("addresses") or []}

    wait(lambda: slice_addresses() == ips, "every pod in the Service's slices", svc_cluster)
    wait(lambda: ips <= _strings(nft.list_table(table)),
         "the proxy to program every endpoint", svc_cluster)
    assert len(set(veths_on(bridge)) - veths_before) == MANY
    assert set(cni_leases(svc_cluster)) - leases_before == ips

    # all at once: one DELETE of the collection, then wait for the pods to be gone
    k("delete", "--raw", f"/api/v1/namespaces/{k.namespace}/pods?labelSelector=app%3Dmany")
    k("wait", "--for=delete", "pods", "-l", "app=many", "--timeout=120s", timeout=130)
    wait(lambda: not slice_addresses(), "no endpoint left in the Service's slices",
         svc_cluster)
    wait(lambda: not ips & _strings(nft.list_table(table)),
         "no rule naming a deleted pod's address", svc_cluster)
    wait(lambda: set(cni_leases(svc_cluster)) == leases_before,
         "the host-local leases to be released", svc_cluster)
    wait(lambda: set(veths_on(bridge)) == veths_before, "no veth left on the pod bridge",
         svc_cluster)
    # the Service itself is still programmed (its rules reject: no endpoints)
    assert k.json("get", "service", "many")["spec"]["clusterIP"] in \
        _strings(nft.list_table(table))


def test_bench_service_reports_both_paths_side_by_side(svc_cluster: Cluster,
                                                       tmp_path: Path) -> None:
    """`bench.service` on this cluster (its own namespace), a few requests: both paths
    answered every request, the ratios are numbers; it never checks a time."""
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.service", "--kubeconfig", str(svc_cluster.kubeconfig),
         "--kubelet-dir", str(svc_cluster.data_dir / "kubelet"), "--namespace", "bench-smoke",
         "--connections", "10", "--requests", "20", "--rounds", "2", "--json", str(out)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "Left behind: nothing" in run.stdout
    rows = [line for line in run.stdout.splitlines() if line.startswith(("| pod IP",
                                                                          "| ClusterIP"))]
    assert len(rows) == 2, run.stdout
    saved = json.loads(out.read_text())
    for path in ("pod IP", "ClusterIP"):
        result = saved["results"][path]
        assert (result["connect_count"], result["throughput_requests"],
                result["failures"]) == (10, 20, 0)
        assert math.isfinite(result["requests_per_s"]) and result["requests_per_s"] > 0
    assert "round 2/2 (ClusterIP then pod IP)" in run.stderr

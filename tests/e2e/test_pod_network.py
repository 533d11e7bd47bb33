"""The pod network in a real `ephemera up` with real containers: the node gets a podCIDR from
the controller-manager's node IPAM, pods get addresses in it through the CNI bridge and
host-local plugins (`kubectl get pods -o wide` shows them), two pods on the node talk over
TCP (busybox `httpd` and `nc` to the other pod's IP), and deleting the pods runs CNI DEL:
no host-local lease and no veth is left behind, also when the kubelet was killed with
`kill -9` first; stopping `up` removes the bridge."""

from __future__ import annotations

import ipaddress
import os
import signal
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

from ephemera.kubelet.runtime.cni import bridge_name

pytestmark = pytest.mark.e2e

NODE = "net-node"


@pytest.fixture(scope="module")
def net_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    clusters: list[Cluster] = []
    for cluster in run_kubelet_cluster(tmp_path_factory, "net-cluster", NODE):
        clusters.append(cluster)
        yield cluster
    # stopping `up` (a node reboot) removed the pod bridge with the last sandbox
    bridge = bridge_name((clusters[0].data_dir / "kubelet").resolve())
    assert not Path(f"/sys/class/net/{bridge}").exists()


@pytest.fixture
def k(net_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
      ) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(net_cluster, tmp_path, request)


def _pod(name: str, script: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", script]}]}}


def test_two_pods_talk_over_their_ips_and_leave_nothing(k: Kubectl, net_cluster: Cluster
                                                        ) -> None:
    node = k.json("get", "node", NODE)
    pod_cidr = ipaddress.ip_network(node["spec"]["podCIDR"])
    assert node["spec"]["podCIDRs"] == [str(pod_cidr)]
    assert pod_cidr.prefixlen == 24
    k("create", "-f", "-", input=yaml.safe_dump_all([
        _pod("server", "mkdir -p /www && echo hello-from-server > /www/index.html && "
                       "exec httpd -f -p 8080 -h /www"),
        _pod("client", "sleep 3600")]))
    server = wait_pod(k, "server", lambda p: bool(p["status"].get("podIP"))
                      and p["status"].get("phase") == "Running", "running with an IP")
    client = wait_pod(k, "client", lambda p: bool(p["status"].get("podIP"))
                      and p["status"].get("phase") == "Running", "running with an IP")
    server_ip = server["status"]["podIP"]
    assert ipaddress.ip_address(server_ip) in pod_cidr
    assert ipaddress.ip_address(client["status"]["podIP"]) in pod_cidr
    assert server_ip != client["status"]["podIP"]
    assert server["status"]["podIPs"] == [{"ip": server_ip}]
    wide = k("get", "pods", "-o", "wide").stdout
    assert server_ip in wide and client["status"]["podIP"] in wide

    def fetched() -> str | None:
        # busybox-static's wget crashes on this host; nc speaks the request instead
        result = k("exec", "client", "--", "sh", "-c",
                   f'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 2 {server_ip} 8080',
                   check=False)
        return result.stdout if result.returncode == 0 and result.stdout else None

    answer = wait(fetched, "the client to fetch from the server's pod IP", net_cluster)
    assert answer.startswith("HTTP/1.1 200 OK")
    assert answer.rstrip().endswith("hello-from-server")
    assert sorted(cni_leases(net_cluster)) == sorted([server_ip, client["status"]["podIP"]])

    k("delete", "pods", "--all", "--grace-period=1", "--wait=true", timeout=120)
    wait(lambda: not cni_leases(net_cluster), "the host-local leases to be released",
         net_cluster)
    bridge = bridge_name((net_cluster.data_dir / "kubelet").resolve())
    wait(lambda: not veths_on(bridge), "no veth left on the pod bridge", net_cluster)


def test_kill_9_of_the_kubelet_then_deleting_the_pods_leaks_no_lease_or_veth(
        k: Kubectl, net_cluster: Cluster) -> None:
    """DEL runs after a kubelet crash too: the pods' sandboxes (with their CNI results) are
    adopted by the restarted kubelet, which tears their network down when the pods go."""
    names = ["crash-a", "crash-b"]
    k("create", "-f", "-", input=yaml.safe_dump_all([_pod(n, "sleep 3600") for n in names]))
    ips = [wait_pod(k, n, lambda p: bool(p["status"].get("podIP")), "an IP")["status"]["podIP"]
           for n in names]
    assert sorted(cni_leases(net_cluster)) == sorted(ips)
    old = net_cluster.pid_of("kubelet")
    os.kill(old, signal.SIGKILL)
    k("delete", "pods", *names, "--grace-period=1", "--wait=false")
    wait(lambda: net_cluster.pid_of("kubelet") != old, "up to restart the kubelet",
         net_cluster)
    wait(lambda: not k.json("get", "pods")["items"], "the pods to be gone", net_cluster)
    wait(lambda: not cni_leases(net_cluster), "the host-local leases to be released",
         net_cluster)
    bridge = bridge_name((net_cluster.data_dir / "kubelet").resolve())
    wait(lambda: not veths_on(bridge), "no veth left on the pod bridge", net_cluster)

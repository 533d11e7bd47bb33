"""A node joined with `ephemera join` works fully (issue 13, item 6), in a real `ephemera up`
whose controller-manager signs for `--cluster-signing-duration 30s`, and a second kubelet on
the same machine joined with a bootstrap token and the real OCI runtime, met through the real
kubectl:

- the joined kubelet's serving certificate comes from a `kubernetes.io/kubelet-serving` CSR
  that it made as `system:node:NAME` for its Node's addresses, auto-approved; a TLS client
  that trusts only the cluster CA accepts it for the node's own address (as the apiserver
  does), where the kubelet listens, and no other joined node has that address;
- `kubectl logs`, `exec`, `attach`, `cp` and `pods/NAME/allocated` work on a pod on it;
- with 30 s certificates, the kubelet renews its client and serving certificates before they
  expire (at 70-90% of the lifetime), without a restart: the node stays Ready past the first
  client certificate's expiry, the served certificate changes, and logs and exec still work.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    Cluster,
    Kubectl,
    namespaced_kubectl,
    node_ready,
    release_leftovers,
    run_kubelet_cluster,
    wait,
)
from cryptography import x509
from processes import until

from ephemera.kubelet.runtime import nodeaddress

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("joined")]

MAIN_NODE = "join-main"
JOINED = "join-second"
LIFETIME = 30  # seconds (--cluster-signing-duration)
CSRS = "certificatesigningrequests"


@dataclass
class Joined:
    cluster: Cluster
    root: Path
    process: subprocess.Popen[bytes]
    log: Path

    def port(self) -> int:
        return int((self.root / "port").read_text())

    def client_certificate(self) -> x509.Certificate:
        doc = yaml.safe_load((self.root / "kubeconfig").read_text())
        data = doc["users"][0]["user"]["client-certificate-data"]
        return x509.load_pem_x509_certificate(base64.b64decode(data))

    def address(self) -> str:
        """The joined node's own address (198.18.0.0/15, on the interface its kubelet
        made), where its kubelet listens."""
        return nodeaddress.current_address(self.root)

    def served_certificate(self) -> x509.Certificate:
        """What a new TLS connection to the kubelet gets, checked against the cluster CA
        and the node's address (an error if it does not verify)."""
        ctx = ssl.create_default_context(cafile=str(self.cluster.ca_path))
        address = self.address()
        with socket.create_connection((address, self.port()), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname=address) as tls:
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der)


@pytest.fixture(scope="module")
def joined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Joined]:
    setup = run_kubelet_cluster(tmp_path_factory, "join-cluster", MAIN_NODE,
                                ["--cluster-signing-duration", f"{LIFETIME}s"])
    cluster = next(setup)
    join = subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "token", "create", "--data-dir",
         str(cluster.data_dir), "--print-join-command"],
        capture_output=True, text=True, timeout=60, check=True).stdout.split()
    base = tmp_path_factory.mktemp("joined-node")
    root, log = base / "root", base / "join.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "ephemera.cli", *join[1:], "--root-dir", str(root),
             "--node-name", JOINED, "--port", "0", "--port-file", str(root / "port"),
             "--stop-pods-on-exit"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    node = Joined(cluster, root, process, log)
    try:
        wait(lambda: process.poll() is not None or node_ready(cluster, JOINED),
             "the joined node to be Ready", cluster)
        assert process.poll() is None, log.read_text()
        yield node
    finally:
        # the joined node's pods go while it runs (a stopped kubelet cannot confirm them)
        cluster.kubectl("delete", "pods", "--all-namespaces", "--field-selector",
                        f"spec.nodeName={JOINED}", "--grace-period=1", "--wait=true",
                        check=False, timeout=120)
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        left = release_leftovers(base)
        if left:
            warnings.warn(f"the joined node left behind (released now): {'; '.join(left)}",
                          stacklevel=1)
        for _ in setup:  # delete the pods, stop `ephemera up`
            pass
        assert code == 0, log.read_text()[-4000:]


@pytest.fixture
def k(joined: Joined, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(joined.cluster, tmp_path, request)


def busybox_on_joined(k: Kubectl, name: str, script: str, **extra: Any) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeName": JOINED, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "busybox",
                                    "command": ["sh", "-c", script], **extra}]}}
    k("create", "-f", "-", input=json.dumps(pod))
    k("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=90s", timeout=100)


def exec_once_served(k: Kubectl, pod: str, script: str) -> Any:
    """`kubectl exec` into a pod on the joined node, again while the apiserver cannot verify
    the kubelet's certificate: a pod may run before the kubelet's serving certificate is
    signed and installed (until then the apiserver cannot verify the one it serves), and
    under load the exec can come first."""
    deadline = time.monotonic() + 30
    while True:
        result = k("exec", pod, "--", "sh", "-c", script, check=False)
        if "x509" not in result.stderr or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def serving_csrs(cluster: Cluster) -> list[dict[str, Any]]:
    csrs = json.loads(cluster.kubectl("get", CSRS, "-o", "json").stdout)["items"]
    return [c for c in csrs if c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"]


def test_the_joined_kubelet_serves_with_a_cluster_signed_certificate(joined: Joined) -> None:
    wait(lambda: serving_csrs(joined.cluster), "a serving CSR", joined.cluster)
    csr = serving_csrs(joined.cluster)[0]
    assert csr["spec"]["username"] == f"system:node:{JOINED}"
    assert sorted(csr["spec"]["usages"]) == ["digital signature", "server auth"]
    approved = [c for c in csr["status"]["conditions"] if c["type"] == "Approved"]
    assert approved[0]["reason"] == "AutoApproved"
    cert = wait(lambda: _verified(joined), "a served certificate signed by the cluster CA",
                joined.cluster)
    assert cert.subject.rfc4514_string() == f"CN=system:node:{JOINED},O=system:nodes"
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [JOINED]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == [joined.address()]


def _verified(joined: Joined) -> x509.Certificate | None:
    try:
        return joined.served_certificate()
    except ssl.SSLCertVerificationError:
        return None  # still the self-signed placeholder


def test_logs_exec_attach_cp_and_allocated_on_the_joined_node(k: Kubectl,
                                                              tmp_path: Path) -> None:
    busybox_on_joined(k, "box", "echo hello from the joined node; while true; do sleep 1; done")
    wait(lambda: k("logs", "box", check=False).stdout == "hello from the joined node\n",
         "the pod's log through the joined kubelet", k.cluster)
    assert k("exec", "box", "--", "sh", "-c", "echo $((6*7))").stdout == "42\n"
    source = tmp_path / "in.txt"
    source.write_text("copied in\n")
    k("cp", str(source), "box:/tmp/in.txt")
    assert k("exec", "box", "--", "cat", "/tmp/in.txt").stdout == "copied in\n"
    k("cp", "box:/tmp/in.txt", str(tmp_path / "out.txt"))
    assert (tmp_path / "out.txt").read_text() == "copied in\n"
    raw = k("get", "--raw", f"/api/v1/namespaces/{k.namespace}/pods/box/allocated").stdout
    assert json.loads(raw)["spec"]["containers"][0]["name"] == "c"
    busybox_on_joined(k, "catter", "cat", stdin=True, stdinOnce=True)
    assert k("attach", "-i", "catter", input="through attach\n", timeout=60).stdout == \
        "through attach\n"


def test_certificates_are_renewed_before_they_expire(joined: Joined, k: Kubectl) -> None:
    client = joined.client_certificate()
    served = wait(lambda: _verified(joined), "a cluster-signed serving certificate",
                  joined.cluster)
    lifetime = client.not_valid_after_utc - client.not_valid_before_utc
    assert lifetime <= dt.timedelta(seconds=LIFETIME + 5)  # the signer's duration
    # both are replaced before they expire
    wait(lambda: joined.client_certificate().serial_number != client.serial_number,
         "a renewed client certificate", joined.cluster, timeout=2 * LIFETIME)
    wait(lambda: (c := _verified(joined)) is not None
         and c.serial_number != served.serial_number,
         "a renewed serving certificate", joined.cluster, timeout=2 * LIFETIME)
    renewed = joined.client_certificate()
    assert renewed.not_valid_after_utc > client.not_valid_after_utc
    renewals = [c for c in json.loads(joined.cluster.kubectl(
        "get", CSRS, "-o", "json").stdout)["items"]
        if c["spec"]["username"] == f"system:node:{JOINED}"
        and c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"]
    assert renewals and all(c["status"].get("certificate") for c in renewals)
    # past the first client certificate's expiry the node still reports (its lease and
    # status go out with the renewed one) and the apiserver still reaches it
    def lease_renewed_after_expiry() -> bool:
        if dt.datetime.now(dt.UTC) <= client.not_valid_after_utc:
            return False
        lease = json.loads(joined.cluster.kubectl(
            "get", "lease", "-n", "kube-node-lease", JOINED, "-o", "json").stdout)
        renew_time = dt.datetime.fromisoformat(
            lease["spec"]["renewTime"].replace("Z", "+00:00"))
        return renew_time > client.not_valid_after_utc

    until(lease_renewed_after_expiry, "a Lease renewal after the first client certificate "
          "expired", 3 * LIFETIME, interval=1.0)
    assert node_ready(joined.cluster, JOINED)
    assert joined.process.poll() is None
    busybox_on_joined(k, "late", "echo still reachable; while true; do sleep 1; done")
    wait(lambda: k("logs", "late", check=False).stdout == "still reachable\n",
         "the pod's log after the renewals", k.cluster)
    assert k("exec", "late", "--", "echo", "ok").stdout == "ok\n"


def test_pods_on_the_two_nodes_get_disjoint_ranges_and_reach_each_other(k: Kubectl) -> None:
    """Issue 14, item 1: the joined node gets another /24 of the cluster CIDR from the node
    IPAM controller, and a pod on it reaches a pod on the first node over TCP (through the
    two nodes' bridges and the host's routes, no masquerade)."""
    main = ipaddress.ip_network(k.json("get", "node", MAIN_NODE)["spec"]["podCIDR"])
    second = ipaddress.ip_network(k.json("get", "node", JOINED)["spec"]["podCIDR"])
    assert not main.overlaps(second)
    server = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "main-server"},
              "spec": {"nodeName": MAIN_NODE, "terminationGracePeriodSeconds": 1,
                       "containers": [{"name": "c", "image": "busybox", "command": [
                           "sh", "-c", "while true; do echo from-main | nc -l -p 7000; "
                                       "done"]}]}}
    k("create", "-f", "-", input=json.dumps(server))
    k("wait", "--for=condition=Ready", "pod/main-server", "--timeout=90s", timeout=100)
    busybox_on_joined(k, "second-client", "sleep 3600")
    server_ip = k.json("get", "pod", "main-server")["status"]["podIP"]
    client_ip = k.json("get", "pod", "second-client")["status"]["podIP"]
    assert ipaddress.ip_address(server_ip) in main
    assert ipaddress.ip_address(client_ip) in second

    def answer() -> str | None:
        result = k("exec", "second-client", "--", "nc", "-w", "2", server_ip, "7000",
                   check=False)
        return result.stdout if result.returncode == 0 and result.stdout else None

    assert wait(answer, "the pod on the joined node to reach the first node's pod",
                k.cluster).strip() == "from-main"


def test_each_node_has_its_own_address_which_pods_reach(joined: Joined, k: Kubectl) -> None:
    """Issue 14, item 2: each kubelet's InternalIP is an address of 198.18.0.0/15 on an
    interface of its own (never the machine's), distinct per node; its pods' hostIP follows,
    and a pod on the joined node reaches the first node's kubelet and the apiserver there."""
    def internal_ip(node: str) -> str:
        addresses = k.json("get", "node", node)["status"]["addresses"]
        return next(a["address"] for a in addresses if a["type"] == "InternalIP")

    main_ip, second_ip = internal_ip(MAIN_NODE), internal_ip(JOINED)
    node_range = ipaddress.ip_network("198.18.0.0/15")
    assert main_ip != second_ip
    assert {ipaddress.ip_address(main_ip), ipaddress.ip_address(second_ip)} <= set(
        node_range)
    assert second_ip == joined.address()
    busybox_on_joined(k, "addr-client", "sleep 3600")
    pod = k.json("get", "pod", "addr-client")
    assert pod["status"]["hostIP"] == second_ip
    assert pod["status"]["hostIPs"] == [{"ip": second_ip}]
    slice_ = k.json("get", "endpointslice", "kubernetes", "-n", "default")
    api_ip, api_port = slice_["endpoints"][0]["addresses"][0], slice_["ports"][0]["port"]
    assert api_ip == main_ip  # `up` runs the apiserver on its node's address
    kubelet_port = k.json("get", "node", MAIN_NODE)["status"]["daemonEndpoints"][
        "kubeletEndpoint"]["Port"]
    for port in (api_port, kubelet_port):
        reached = exec_once_served(k, "addr-client", f"nc -w 2 {api_ip} {port} </dev/null "
                                                     "&& echo open")
        assert reached.stdout == "open\n", reached.stderr

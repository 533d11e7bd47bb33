"""Several apiservers on one etcd, as an operator runs them (issue 13, items 2 and 3): real
processes, a real etcd, the real kubectl.

- Two `ephemera apiserver`s share one identity through upstream's flags (the second serves a
  certificate of the first one's CA with `--tls-cert-file`, verifies clients with
  `--client-ca-file`, signs and verifies service account tokens with the first one's keys);
  kubectl uses either with the same kubeconfig; each lists itself in an identity Lease.
- The scheduler and a fake-runtime kubelet get both URLs (`--apiserver-endpoints`), the
  controller-manager only the first and learns the second from its identity lease; after
  `kill -9` of the apiserver they use, pods are still scheduled and Running through the other
  one, the kubelet and the scheduler resumed their watches from their resourceVersion (their
  logs say so; they never listed again), the controller-manager writes through it.
- `ephemera up --join-control-plane FIRST_DIR` starts a second member with one command;
  `ephemera token create --upload-certs` and `ephemera join --control-plane
  --certificate-key` do it as from another machine (the keys travel encrypted).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import KUBECTL, release_leftovers, start_cluster
from cryptography import x509
from processes import Proc, tails, until

from ephemera.api.wellknown import (
    APISERVER_IDENTITY_LABEL,
    APISERVER_URL_ANNOTATION,
    NODES_GROUP,
    node_username,
)
from ephemera.apiserver.certs import (
    CONTROLLER_MANAGER_USER,
    SCHEDULER_USER,
    ensure_pki,
    issue_client_cert,
    issue_serving_cert,
    write_admin_kubeconfig,
    write_client_kubeconfig,
    write_kubeconfig,
)
from ephemera.apiserver.serviceaccounttoken import ensure_signing_key
from etcdserver import EtcdServer

pytestmark = pytest.mark.e2e

START_TIMEOUT = 60.0
NODE = "ha-node"
POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: c
    image: busybox
    command: ["sleep", "3600"]
"""


def wait_for(check: Any, what: str, procs: Sequence[Proc] = (),
             timeout: float = START_TIMEOUT) -> Any:
    return until(check, what, timeout, logs=tails(procs))


def kubectl(kubeconfig: Path, home: Path, *args: str, server: str | None = None,
            check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(kubeconfig)}
    extra = ["--server", server] if server else []
    result = subprocess.run([KUBECTL, *extra, *args], env=env, input=stdin, text=True,
                            capture_output=True, timeout=60)
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result


@dataclass
class ControlPlane:
    etcd: EtcdServer
    base: Path
    a: Proc
    b: Proc
    url_a: str
    url_b: str
    kubeconfig: Path
    home: Path
    others: list[Proc] = field(default_factory=list)

    def kubectl(self, *args: str, server: str | None = None, check: bool = True,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return kubectl(self.kubeconfig, self.home, *args, server=server, check=check,
                       stdin=stdin)

    @property
    def procs(self) -> list[Proc]:
        return [self.a, self.b, *self.others]


def _port(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def start_apiserver(name: str, base: Path, etcd: str, extra: Sequence[str]) -> tuple[Proc, str]:
    port_file = base / f"{name}.port"
    proc = Proc(f"apiserver-{name}", [
        "apiserver", "--data-dir", str(base / name), "--port", "0", "--port-file",
        str(port_file), "--store", "etcd", "--etcd-endpoints", etcd,
        "--enable-bootstrap-token-auth", *extra], base / f"apiserver-{name}.log").start()
    port = wait_for(lambda: _port(port_file), f"apiserver {name} to serve", [proc])
    return proc, f"https://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    base = tmp_path_factory.mktemp("multi-apiserver")
    with EtcdServer(base / "etcd") as etcd:
        # The first member's identity: its data dir's CA and service account keys.
        pki = ensure_pki(base / "a", ["127.0.0.1"])
        sa_key = ensure_signing_key(base / "a")
        a, url_a = start_apiserver("a", base, etcd.endpoint, [])
        procs = [a]
        try:
            # The second one shares it through upstream's flags, with a serving certificate
            # of the first one's CA that also names a load balancer.
            serving = issue_serving_cert(pki.ca, ["127.0.0.1", "lb.example.test"])
            shared = base / "shared"
            shared.mkdir()
            (shared / "serving.crt").write_bytes(serving.cert_pem)
            (shared / "serving.key").write_bytes(serving.key_pem)
            (shared / "serving.key").chmod(0o600)
            b, url_b = start_apiserver("b", base, etcd.endpoint, [
                "--tls-cert-file", str(shared / "serving.crt"),
                "--tls-private-key-file", str(shared / "serving.key"),
                "--client-ca-file", str(pki.ca_cert_path),
                "--service-account-signing-key-file", str(sa_key),
                "--service-account-key-file", str(sa_key.with_suffix(".pub")),
                "--tls-san", "lb.example.test"])
            procs.append(b)
            home = base / "home"
            home.mkdir()
            kubeconfig = base / "admin.kubeconfig"
            write_admin_kubeconfig(kubeconfig, url_a, pki)
            plane = ControlPlane(etcd, base, a, b, url_a, url_b, kubeconfig, home)
            wait_for(lambda: plane.kubectl("get", "ns", "kube-system", check=False)
                     .returncode == 0, "the API to answer", procs)
            yield plane
        finally:
            for proc in reversed([*procs, *(plane.others if "plane" in locals() else [])]):
                proc.stop()
            left = release_leftovers(base / "kubelet")
            assert not left, f"left behind: {left}"


def test_two_apiservers_share_one_identity_and_list_themselves(plane: ControlPlane) -> None:
    # One kubeconfig (the first one's CA and admin certificate) works against both.
    for server in (plane.url_a, plane.url_b):
        names = plane.kubectl("get", "ns", "-o", "name", server=server).stdout.split()
        assert "namespace/kube-system" in names
    # A service account token signed by one verifies on the other.
    plane.kubectl("create", "serviceaccount", "shared-sa", server=plane.url_a)
    token = plane.kubectl("create", "token", "shared-sa", server=plane.url_a).stdout.strip()
    review = urllib.request.Request(
        plane.url_b + "/apis/authentication.k8s.io/v1/selfsubjectreviews", method="POST",
        data=json.dumps({"apiVersion": "authentication.k8s.io/v1",
                         "kind": "SelfSubjectReview"}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=str(plane.base / "a" / "pki" / "ca.crt"))
    with urllib.request.urlopen(review, context=ctx, timeout=10) as resp:
        who = json.loads(resp.read())
    assert who["status"]["userInfo"]["username"] == "system:serviceaccount:default:shared-sa"
    # Each apiserver keeps an identity Lease carrying the URL it is reached at.
    leases = wait_for(lambda: (lambda items: items if len(items) == 2 else None)(json.loads(
        plane.kubectl("get", "leases", "-n", "kube-system", "-l",
                      f"{APISERVER_IDENTITY_LABEL}=kube-apiserver", "-o", "json").stdout
    )["items"]), "two identity leases", plane.procs)
    assert sorted(lease["metadata"]["annotations"][APISERVER_URL_ANNOTATION]
                  for lease in leases) == sorted([plane.url_a, plane.url_b])
    for lease in leases:
        assert lease["metadata"]["name"].startswith("apiserver-")
        assert lease["spec"]["holderIdentity"].startswith(lease["metadata"]["name"] + "_")
        assert lease["spec"]["leaseDurationSeconds"] == 3600


def test_components_fail_over_when_their_apiserver_is_killed(plane: ControlPlane) -> None:
    base = plane.base
    pki = ensure_pki(base / "a")
    ca = pki.ca
    endpoints = f"{plane.url_a},{plane.url_b}"
    write_client_kubeconfig(base / "scheduler.kubeconfig", plane.url_a, pki, SCHEDULER_USER)
    write_client_kubeconfig(base / "cm.kubeconfig", plane.url_a, pki, CONTROLLER_MANAGER_USER)
    node_cert = issue_client_cert(ca, node_username(NODE), (NODES_GROUP,))
    write_kubeconfig(base / "kubelet.kubeconfig", plane.url_a, ca.cert_pem, node_cert.cert_pem,
                     node_cert.key_pem, user=node_username(NODE))
    scheduler = Proc("scheduler", [
        "scheduler", "--kubeconfig", str(base / "scheduler.kubeconfig"),
        "--apiserver-endpoints", endpoints], base / "scheduler.log").start()
    # The controller-manager knows only the first apiserver: it learns the second from its
    # identity lease.
    manager = Proc("controller-manager", [
        "controller-manager", "--kubeconfig", str(base / "cm.kubeconfig")],
        base / "controller-manager.log").start()
    kubelet = Proc("kubelet", [
        "kubelet", "--kubeconfig", str(base / "kubelet.kubeconfig"), "--node-name", NODE,
        "--root-dir", str(base / "kubelet"), "--runtime", "fake", "--port", "0",
        "--client-ca-file", str(pki.ca_cert_path), "--storage-accounting", "walk",
        "--stop-pods-on-exit", "--apiserver-endpoints", endpoints],
        base / "kubelet.log").start()
    plane.others += [scheduler, manager, kubelet]

    def running(name: str) -> bool:
        got = plane.kubectl("get", "pod", name, "-o", "json", server=plane.url_b, check=False)
        if got.returncode != 0:
            return False
        return bool(json.loads(got.stdout).get("status", {}).get("phase") == "Running")

    wait_for(lambda: plane.kubectl("get", "serviceaccount", "default", check=False)
             .returncode == 0, "the default service account", plane.procs)
    plane.kubectl("apply", "-f", "-", stdin=POD.format(name="before"))
    wait_for(lambda: running("before"), "pod before to run", plane.procs)
    wait_for(lambda: f"learned apiservers {plane.url_b}" in manager.text(),
             "the controller-manager to learn apiserver b", plane.procs)
    # Past client-go's "very short watch": every component's watches are established.
    time.sleep(1.5)

    plane.a.process.send_signal(signal.SIGKILL)
    plane.a.process.wait()
    killed_at = time.monotonic()
    plane.kubectl("apply", "-f", "-", stdin=POD.format(name="after"), server=plane.url_b)
    wait_for(lambda: running("after"), "pod after to run through apiserver b", plane.procs,
             timeout=20)
    assert time.monotonic() - killed_at < 20

    log = kubelet.text()
    assert f"apiserver {plane.url_a} is not answering" in log
    assert f"switching to {plane.url_b}" in log
    assert "listing again" not in log, log[-3000:]  # every watch resumed: no relist
    scheduler_log = scheduler.text()
    assert f"switching to {plane.url_b}" in scheduler_log
    assert "listing again" not in scheduler_log, scheduler_log[-3000:]
    # The controller-manager moved to the apiserver it learned; its next write went there:
    # a pod's service account exists in a namespace created after the kill.
    plane.kubectl("create", "namespace", "after-kill", server=plane.url_b)
    wait_for(lambda: plane.kubectl("get", "serviceaccount", "default", "-n", "after-kill",
                                   server=plane.url_b, check=False).returncode == 0,
             "the controller-manager to create a service account through b", plane.procs,
             timeout=20)
    assert f"switching to {plane.url_b}" in manager.text()
    # The dead apiserver drops out of the live endpoints once its lease is older than 15 s
    # (not waited for here); the live one is still listed.
    leases = json.loads(plane.kubectl("get", "leases", "-n", "kube-system", "-l",
                                      f"{APISERVER_IDENTITY_LABEL}=kube-apiserver", "-o",
                                      "json", server=plane.url_b).stdout)["items"]
    assert plane.url_b in [lease["metadata"]["annotations"][APISERVER_URL_ANNOTATION]
                           for lease in leases]


def test_up_join_control_plane_starts_a_second_member(tmp_path: Path) -> None:
    with EtcdServer(tmp_path / "etcd") as etcd:
        store = ["--store", "etcd", "--etcd-endpoints", etcd.endpoint, "--no-kubelet"]
        with start_cluster(tmp_path / "first", tmp_path / "home",
                           [*store, "--tls-san", "lb.example.test,10.9.9.9"]) as first:
            serving = x509.load_pem_x509_certificate(
                (tmp_path / "first" / "pki" / "apiserver.crt").read_bytes())
            sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            assert "lb.example.test" in sans.value.get_values_for_type(x509.DNSName)
            assert ipaddress.ip_address("10.9.9.9") in sans.value.get_values_for_type(
                x509.IPAddress)
            with start_cluster(tmp_path / "second", tmp_path / "home2", [
                    *store, "--join-control-plane", str(tmp_path / "first")]) as second:
                for name in ("ca.crt", "ca.key", "sa.key", "sa.pub"):
                    assert ((tmp_path / "second" / "pki" / name).read_bytes()
                            == (tmp_path / "first" / "pki" / name).read_bytes())
                # The first member's kubeconfig works against the second member.
                got = first.kubectl("get", "ns", "kube-system", "-o", "name", "--server",
                                    second.server)
                assert got.stdout.strip() == "namespace/kube-system"
                # Its own scheduler and controller-manager (started once its API answers).
                wait_for(lambda: {p.stem for p in (tmp_path / "second" / "run").glob("*.pid")}
                         >= {"apiserver", "scheduler", "controller-manager"},
                         "the second member's components")
                # They are given both apiservers: their own member's first.
                pid = int((tmp_path / "second" / "run" / "scheduler.pid").read_text())
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                endpoints = argv[argv.index(b"--apiserver-endpoints") + 1].decode()
                assert endpoints == f"{second.server},{first.server}"
                assert second.stop() == 0
            assert first.stop() == 0
    joined = subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "up", "--data-dir", str(tmp_path / "third"),
         "--join-control-plane", str(tmp_path / "first")],
        capture_output=True, text=True, timeout=60)
    assert joined.returncode == 2
    assert "--join-control-plane needs --store etcd" in joined.stderr


def test_join_control_plane_from_another_machine_with_a_certificate_key(
        tmp_path: Path) -> None:
    with EtcdServer(tmp_path / "etcd") as etcd:
        store = ["--store", "etcd", "--etcd-endpoints", etcd.endpoint]
        with start_cluster(tmp_path / "first", tmp_path / "home", [*store, "--no-kubelet"]) \
                as first:
            cli = [sys.executable, "-m", "ephemera.cli"]
            printed = subprocess.run(
                [*cli, "token", "create", "--data-dir", str(tmp_path / "first"),
                 "--upload-certs", "--print-join-command"],
                capture_output=True, text=True, timeout=60, check=True).stdout.split()
            assert printed[:2] == ["ephemera", "join"] and "--control-plane" in printed
            key = printed[printed.index("--certificate-key") + 1]
            # Without the key the Secret tells nothing.
            secret = json.loads(first.kubectl("get", "secret", "-n", "kube-system",
                                              "kubeadm-certs", "-o", "json").stdout)
            assert sorted(secret["data"]) == ["ca.crt", "ca.key", "sa.key", "sa.pub"]
            assert b"PRIVATE KEY" not in base64.b64decode(secret["data"]["ca.key"])

            join = [*cli, *printed[1:], "--data-dir", str(tmp_path / "second"), *store]
            wrong = [*join[:join.index(key)], "ab" * 32, *join[join.index(key) + 1:]]
            failed = subprocess.run(wrong, capture_output=True, text=True, timeout=60)
            assert failed.returncode == 1
            assert "the certificate key does not decrypt the kubeadm-certs Secret" in (
                failed.stderr)

            out_path = tmp_path / "join.out"
            with open(out_path, "wb") as out:
                member = subprocess.Popen(join, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL)
            try:
                kubeconfig = tmp_path / "second" / "kubeconfig"
                wait_for(lambda: kubeconfig.exists() or member.poll() is not None,
                         "the second member's API")
                assert member.poll() is None, out_path.read_text()
                for name in ("ca.crt", "ca.key", "sa.key", "sa.pub"):
                    assert ((tmp_path / "second" / "pki" / name).read_bytes()
                            == (tmp_path / "first" / "pki" / name).read_bytes())
                server = str(yaml.safe_load(kubeconfig.read_text())["clusters"][0]
                             ["cluster"]["server"])
                assert server != first.server
                got = first.kubectl("get", "ns", "kube-system", "-o", "name", "--server",
                                    server)
                assert got.stdout.strip() == "namespace/kube-system"
            finally:
                member.send_signal(signal.SIGTERM)
                code = member.wait(30)
            assert code == 0, out_path.read_text()
            assert first.stop() == 0

"""In-cluster API access (issue 14, items 2 and 5) in a real `ephemera up` with real
containers, as an operator in a pod meets it:

- the pod gets the `kube-api-access-*` volume and upstream's service environment variables;
- kubectl run inside the pod with its in-cluster configuration (the service account token and
  ca.crt of that volume, `KUBERNETES_SERVICE_HOST`/`_PORT`) lists what RBAC lets its service
  account list and gets upstream's 403 for the rest; TLS verification against ca.crt passes,
  so the serving certificate covers the address reached;
- the serving certificate names the `kubernetes` Service's ClusterIP and DNS names.

The pod reaches the apiserver at the `kubernetes` EndpointSlice's address and port (the node
address `up` made): the ClusterIP needs the Service proxy. Once the proxy runs under `up`, set
`THROUGH_CLUSTER_IP` and the pod uses its own `KUBERNETES_SERVICE_HOST`/`_PORT` unchanged.

The client is the host's kubectl (a static Go binary), copied into a busybox pod through
`kubectl exec -i` (ephemera has no hostPath volumes): busybox's own wget speaks only TLS 1.2
without the signature_algorithms extension, which the apiserver (as any current TLS server)
refuses.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import Cluster, Kubectl, namespaced_kubectl, run_kubelet_cluster, wait, wait_pod
from cryptography import x509

from ephemera.kubelet.runtime import nodeaddress

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("in-cluster-api")]

THROUGH_CLUSTER_IP = True  # through the ClusterIP (up runs the proxy); False: the endpoint
NODE = "in-cluster"
KUBECTL = os.path.realpath(shutil.which("kubectl") or "/usr/bin/kubectl")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"



@pytest.fixture(scope="module")
def api_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """`up` (with upstream's token mount) for the module; its node address's interface is
    gone once it stopped."""
    setup = run_kubelet_cluster(tmp_path_factory, "in-cluster-api", NODE,
                                ["--mount-service-account-token"], service_proxy=True)
    cluster = next(setup)
    interface = nodeaddress.interface_name(cluster.data_dir / "kubelet")
    assert interface in os.listdir("/sys/class/net")
    yield cluster
    for _ in setup:
        pass
    assert interface not in os.listdir("/sys/class/net")


@pytest.fixture
def k(api_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(api_cluster, tmp_path, request)


def endpoint(k: Kubectl) -> tuple[str, int]:
    """The `kubernetes` Service's endpoint (the apiserver's advertised address and port)."""
    def listed() -> tuple[str, int] | None:
        got = k("get", "endpointslice", "kubernetes", "-n", "default", "-o", "json",
                check=False)
        if got.returncode != 0:
            return None
        slice_ = json.loads(got.stdout)
        if not slice_.get("endpoints"):
            return None
        return str(slice_["endpoints"][0]["addresses"][0]), int(slice_["ports"][0]["port"])

    return wait(listed, "the kubernetes endpoints", k.cluster)


def client_pod(name: str, account: str, **spec: object) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"serviceAccountName": account, "terminationGracePeriodSeconds": 1,
                     "nodeName": NODE, **spec,
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sleep", "3600"],
                                     "env": [{"name": "HOME", "value": "/tmp"}]}]}}


def copy_kubectl(k: Kubectl, pod: str) -> None:
    """The host's kubectl binary to /tmp/kubectl in `pod`."""
    argv, env = k.cluster.kubectl_command(
        ["-n", str(k.namespace), "exec", "-i", pod, "--", "sh", "-c",
         "cat > /tmp/kubectl && chmod +x /tmp/kubectl"], k.home)
    with open(KUBECTL, "rb") as binary:
        subprocess.run(argv, env=env, stdin=binary, capture_output=True, timeout=120,
                       check=True)


def in_pod_kubectl(k: Kubectl, pod: str, api: tuple[str, int], *args: str) -> tuple[int, str]:
    """kubectl in `pod` with its in-cluster configuration: exit code and output."""
    override = "" if THROUGH_CLUSTER_IP else (
        f"KUBERNETES_SERVICE_HOST={api[0]} KUBERNETES_SERVICE_PORT={api[1]} ")
    command = f"{override}/tmp/kubectl {' '.join(args)} 2>&1"
    got = k("exec", pod, "--", "sh", "-c", command, check=False, timeout=60)
    return got.returncode, got.stdout


@pytest.mark.skipif(not os.path.isfile(KUBECTL), reason="no kubectl on this host")
def test_a_pod_calls_the_api_with_its_service_account_and_rbac_decides(
        k: Kubectl, api_cluster: Cluster) -> None:
    namespace = k.namespace
    k("create", "serviceaccount", "reader")
    k("create", "role", "pod-reader", "--verb=get,list", "--resource=pods")
    k("create", "rolebinding", "reader", "--role=pod-reader",
      f"--serviceaccount={namespace}:reader")
    k("create", "service", "clusterip", "web-front", "--tcp=8080:80")
    k("create", "-f", "-", input=json.dumps(client_pod("client", "reader")))
    pod = wait_pod(k, "client", lambda p: p["status"].get("phase") == "Running", "Running")

    # The ServiceAccount admission's volume, mounted at the well-known path.
    volumes = [v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
    assert len(volumes) == 1 and len(volumes[0]["name"]) == len("kube-api-access-") + 5
    assert volumes[0]["projected"]["sources"][0] == {
        "serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": volumes[0]["name"], "mountPath": SA_DIR, "readOnly": True} in mounts
    assert k("exec", "client", "--", "cat", f"{SA_DIR}/namespace").stdout == namespace

    # Upstream's service variables: the kubernetes Service's and the namespace's.
    env = dict(line.split("=", 1) for line in
               k("exec", "client", "--", "env").stdout.splitlines() if "=" in line)
    cluster_ip = k.json("get", "svc", "kubernetes", "-n", "default")["spec"]["clusterIP"]
    web_ip = k.json("get", "svc", "web-front")["spec"]["clusterIP"]
    assert env["KUBERNETES_SERVICE_HOST"] == cluster_ip
    assert env["KUBERNETES_SERVICE_PORT"] == env["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
    assert env["KUBERNETES_PORT"] == env["KUBERNETES_PORT_443_TCP"] == f"tcp://{cluster_ip}:443"
    assert env["WEB_FRONT_SERVICE_HOST"] == web_ip
    assert env["WEB_FRONT_PORT_8080_TCP_ADDR"] == web_ip

    # kubectl's in-cluster configuration, verifying the apiserver against ca.crt.
    api = endpoint(k)
    copy_kubectl(k, "client")
    code, out = in_pod_kubectl(k, "client", api, "get", "pods", "-o", "name")
    assert (code, out) == (0, "pod/client\n")
    code, out = in_pod_kubectl(k, "client", api, "get", "secrets")
    assert code == 1
    assert out == (f'Error from server (Forbidden): secrets is forbidden: User '
                   f'"system:serviceaccount:{namespace}:reader" cannot list resource '
                   f'"secrets" in API group "" in the namespace "{namespace}"\n')
    code, out = in_pod_kubectl(k, "client", api, "get", "pods", "-n", "default")
    assert code == 1 and "cannot list resource \"pods\" in API group \"\" in the " \
        "namespace \"default\"" in out


def test_service_links_off_and_no_automount(k: Kubectl, api_cluster: Cluster) -> None:
    k("create", "service", "clusterip", "hidden", "--tcp=80")
    k("create", "serviceaccount", "quiet")
    k("patch", "serviceaccount", "quiet", "-p", '{"automountServiceAccountToken": false}')
    pod = client_pod("plain", "quiet", enableServiceLinks=False)
    k("create", "-f", "-", input=json.dumps(pod))
    got = wait_pod(k, "plain", lambda p: p["status"].get("phase") == "Running", "Running")
    assert "volumes" not in got["spec"]
    env = k("exec", "plain", "--", "env").stdout
    assert "HIDDEN_SERVICE_HOST" not in env
    assert "KUBERNETES_SERVICE_HOST=" in env  # always, as upstream
    assert k("exec", "plain", "--", "ls", SA_DIR, check=False).returncode != 0


def test_the_serving_certificate_names_the_kubernetes_service(
        k: Kubectl, api_cluster: Cluster) -> None:
    address, port = endpoint(k)
    ctx = ssl.create_default_context(cafile=str(api_cluster.ca_path))
    for name in ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local", address):
        with socket.create_connection((address, port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname=name) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    names = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    cluster_ip = k.json("get", "svc", "kubernetes", "-n", "default")["spec"]["clusterIP"]
    assert ipaddress.ip_address(cluster_ip) in names.get_values_for_type(x509.IPAddress)
    node = k.json("get", "node", NODE)
    assert {"type": "InternalIP", "address": address} in node["status"]["addresses"]
    assert ipaddress.ip_address(address) in ipaddress.ip_network("198.18.0.0/15")

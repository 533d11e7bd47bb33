"""Authentication in a real `ephemera up` (`--mount-service-account-token`), met through the
real kubectl and plain HTTPS:

- a request with credentials that fail is refused (401 Unauthorized), on every path;
- `kubectl create token` (TokenRequest) gives a service account token that `kubectl auth
  whoami` (SelfSubjectReview) shows as `system:serviceaccount:NS:NAME`, with upstream's
  validation message for a too short duration; deleting the ServiceAccount invalidates it;
- a pod in a real container reads its `kube-api-access-*` volume (token, the cluster CA, its
  namespace) and a projected `serviceAccountToken` with an audience; the token authenticates
  as the pod's ServiceAccount bound to the pod, and stops when the pod is deleted;
- a second kubelet joins with a bootstrap token (`ephemera token create`, `ephemera join`): its
  CSR is requested by `system:bootstrap:ID`, auto-approved and signed, and the node registers
  and authenticates as `system:node:NAME` in `system:nodes`.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml
from cluster import (
    KUBECTL,
    Cluster,
    Kubectl,
    namespaced_kubectl,
    node_ready,
    pod_json,
    run_kubelet_cluster,
    wait,
    wait_pod,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("authn")]

NODE = "authn-node"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
UNAUTHORIZED = "error: You must be logged in to the server (Unauthorized)"


@pytest.fixture(scope="module")
def authn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from run_kubelet_cluster(tmp_path_factory, "authn-cluster", NODE,
                                   ["--mount-service-account-token"])


@pytest.fixture
def k(authn_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
      ) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(authn_cluster, tmp_path, request)


def whoami(cluster: Cluster, home: Path, *, token: str | None = None,
           kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`kubectl auth whoami -o json` with a bearer token (and the cluster CA) or a
    kubeconfig of its own."""
    if kubeconfig is None:
        kubeconfig = home / "token-kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": {
                "server": cluster.server, "certificate-authority": str(cluster.ca_path)}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x"}))
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(kubeconfig)}
    return subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir",
                           str(home / "whoami-cache"), "auth", "whoami", "-o", "json"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def user_info(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    info: dict[str, Any] = json.loads(result.stdout)["status"]["userInfo"]
    return info


def test_requests_with_bad_credentials_are_refused(authn_cluster: Cluster) -> None:
    ctx = ssl.create_default_context(cafile=str(authn_cluster.ca_path))
    bad = urllib.request.Request(authn_cluster.server + "/healthz",
                                 headers={"Authorization": "Bearer not-a-token"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(bad, context=ctx, timeout=30)
    assert info.value.code == 401
    assert json.loads(info.value.read()) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def test_kubectl_create_token_gives_a_service_account_identity(k: Kubectl) -> None:
    ns = k.namespace
    k("create", "serviceaccount", "builder")
    short = k("create", "token", "builder", "--duration", "5m", check=False)
    assert short.returncode != 0
    assert short.stderr.strip() == (
        'error: failed to create token: TokenRequest.authentication.k8s.io "" is invalid: '
        "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than "
        "10 minutes")
    token = k("create", "token", "builder").stdout.strip()
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == f"system:serviceaccount:{ns}:builder"
    assert claims["exp"] - claims["iat"] == 3600
    info = user_info(whoami(k.cluster, k.home, token=token))
    assert info["username"] == f"system:serviceaccount:{ns}:builder"
    assert info["groups"] == ["system:serviceaccounts", f"system:serviceaccounts:{ns}",
                              "system:authenticated"]
    k("delete", "serviceaccount", "builder")
    refused = whoami(k.cluster, k.home, token=token)
    assert refused.returncode != 0
    assert refused.stderr.strip() == UNAUTHORIZED


def test_a_pod_reads_and_uses_its_service_account_token(k: Kubectl) -> None:
    ns = k.namespace
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader"},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "busybox",
                                    "command": ["sh", "-c", "sleep 3600"],
                                    "volumeMounts": [{"name": "vault",
                                                      "mountPath": "/vault"}]}],
                    "volumes": [{"name": "vault", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "vault-token", "audience": "vault",
                                                 "expirationSeconds": 600}}]}}]}}
    k("create", "-f", "-", input=yaml.safe_dump(pod))
    created = pod_json(k, "reader")
    access = [v for v in created["spec"]["volumes"]
              if v["name"].startswith("kube-api-access-")]
    assert len(access) == 1
    assert {"name": access[0]["name"], "readOnly": True, "mountPath": SA_DIR} in \
        created["spec"]["containers"][0]["volumeMounts"]
    wait_pod(k, "reader", lambda p: p.get("status", {}).get("phase") == "Running",
             "Running")

    def read(path: str) -> str:
        return str(k("exec", "reader", "--", "cat", path).stdout)

    assert read(f"{SA_DIR}/namespace") == ns
    assert read(f"{SA_DIR}/ca.crt") == k.cluster.ca_path.read_text()
    token = read(f"{SA_DIR}/token")
    uid = pod_json(k, "reader")["metadata"]["uid"]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["kubernetes.io"]["pod"] == {"name": "reader", "uid": uid}
    assert claims["kubernetes.io"]["node"]["name"] == NODE
    assert claims["exp"] - claims["iat"] == 3607
    info = user_info(whoami(k.cluster, k.home, token=token))
    assert info["username"] == f"system:serviceaccount:{ns}:default"
    assert info["extra"]["authentication.kubernetes.io/pod-name"] == ["reader"]
    assert info["extra"]["authentication.kubernetes.io/pod-uid"] == [uid]
    vault = jwt.decode(read("/vault/vault-token"), options={"verify_signature": False})
    assert vault["aud"] == ["vault"] and vault["exp"] - vault["iat"] == 600
    # a token for another audience does not authenticate to the apiserver
    refused = whoami(k.cluster, k.home, token=read("/vault/vault-token"))
    assert refused.returncode != 0
    assert refused.stderr.strip() == UNAUTHORIZED
    k("delete", "pod", "reader", "--wait=true", timeout=120)
    wait(lambda: whoami(k.cluster, k.home, token=token).returncode != 0,
         "the bound token to stop working", k.cluster)


def test_a_node_joins_with_a_bootstrap_token(authn_cluster: Cluster, tmp_path: Path) -> None:
    cluster = authn_cluster
    node = f"joiner-{os.getpid()}"
    created = subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "token", "create", "--data-dir",
         str(cluster.data_dir), "--print-join-command"],
        capture_output=True, text=True, timeout=60, check=True)
    join = created.stdout.split()
    assert join[:2] == ["ephemera", "join"] and join[join.index("--server") + 1] == \
        cluster.server
    token = join[join.index("--token") + 1]
    token_id = token.split(".")[0]
    root = tmp_path / "joiner"
    log = tmp_path / "join.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "ephemera.cli", *join[1:], "--root-dir", str(root),
             "--node-name", node, "--runtime", "fake", "--port", "0"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait(lambda: process.poll() is not None or node_ready(cluster, node),
             "the joined node to be Ready", cluster)
        assert process.poll() is None, log.read_text()
        csrs = json.loads(cluster.kubectl("get", "csr", "-o", "json").stdout)["items"]
        mine = [c for c in csrs if c["spec"]["username"] == f"system:bootstrap:{token_id}"]
        assert len(mine) == 1
        csr = mine[0]
        assert csr["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
        assert csr["spec"]["groups"] == ["system:bootstrappers",
                                         "system:bootstrappers:kubeadm:default-node-token",
                                         "system:authenticated"]
        approved = [c for c in csr["status"]["conditions"] if c["type"] == "Approved"]
        assert approved[0]["reason"] == "AutoApproved"
        from cryptography import x509

        cert = x509.load_pem_x509_certificate(base64.b64decode(csr["status"]["certificate"]))
        assert cert.subject.rfc4514_string() == f"CN=system:node:{node},O=system:nodes"
        info = user_info(whoami(cluster, tmp_path, kubeconfig=root / "kubeconfig"))
        assert info["username"] == f"system:node:{node}"
        assert info["groups"] == ["system:nodes", "system:authenticated"]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        cluster.kubectl("delete", "node", node, "--wait=false", check=False)

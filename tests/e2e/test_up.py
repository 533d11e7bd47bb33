"""`ephemera up` as a user meets it: the real process, the real kubectl, plain HTTPS."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cluster import Cluster, cluster, start_cluster  # noqa: F401  (cluster is a fixture)

pytestmark = pytest.mark.e2e

KEPT_CONFIGMAP = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: kept
data:
  k: v1
"""


def test_kubectl_version_namespaces_and_api_resources(cluster: Cluster) -> None:  # noqa: F811
    version = cluster.kubectl("version").stdout
    assert "Server Version: v1.38.0" in version
    # The dispatcher ran the built-in kubectl 1.32, the one that knows --subresource=dynamic.
    assert "Client Version: v1.32" in version

    lines = cluster.kubectl("get", "namespaces").stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "AGE"]
    assert sorted(line.split()[0] for line in lines[1:]) == [
        "default", "kube-node-lease", "kube-public", "kube-system"]

    resources = cluster.kubectl("api-resources").stdout.splitlines()
    pods = [line.split() for line in resources if line.split()[:1] == ["pods"]]
    assert pods and pods[0][1] == "po", resources
    assert any(line.split()[:1] == ["leases"] for line in resources)

    missing = cluster.kubectl("get", "pod", "nope", "--subresource=dynamic", check=False)
    assert missing.returncode == 1
    assert 'pods "nope" not found' in missing.stderr
    assert "invalid subresource" not in missing.stderr


def test_unauthenticated_https_is_anonymous_and_bad_credentials_401(
        cluster: Cluster) -> None:  # noqa: F811
    ctx = ssl.create_default_context(cafile=str(cluster.ca_path))  # verifies the server
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(cluster.server + "/api/v1/namespaces", context=ctx, timeout=10)
    assert err.value.code == 403
    assert json.loads(err.value.read())["message"] == (
        'namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" '
        'in API group "" at the cluster scope')
    with urllib.request.urlopen(cluster.server + "/version", context=ctx, timeout=10) as ok:
        assert json.loads(ok.read())["major"] == "1"
    bad = urllib.request.Request(cluster.server + "/version",
                                 headers={"Authorization": "Bearer not-a-token"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, context=ctx, timeout=10)
    assert err.value.code == 401
    assert json.loads(err.value.read()) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def test_restart_on_the_same_data_dir_keeps_objects(tmp_path: Path) -> None:
    data, home = tmp_path / "data", tmp_path / "home"
    with start_cluster(data, home) as first:
        first.kubectl("create", "-f", "-", input=KEPT_CONFIGMAP)
        assert first.stop() == 0
    with start_cluster(data, home) as second:
        got = json.loads(second.kubectl("get", "configmap", "kept", "-o", "json").stdout)
        assert got["data"] == {"k": "v1"}
        assert second.stop() == 0
    assert "ephemera: stopped" in second.output


def test_killed_apiserver_is_restarted(cluster: Cluster) -> None:  # noqa: F811
    pid = cluster.pid_of("apiserver")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        new_pid = cluster.pid_of("apiserver")
        if new_pid != pid:
            result = cluster.kubectl("get", "namespace", "default", "-o", "name", check=False)
            if result.returncode == 0:
                assert result.stdout.strip() == "namespace/default"
                break
        assert time.monotonic() < deadline, cluster.output
        time.sleep(0.1)
    assert f"apiserver (pid {pid}) exited: killed by SIGKILL; restarting" in cluster.output


def test_port_zero_and_sigint_stops_cleanly(tmp_path: Path) -> None:
    # `--port 0`: the apiserver picks a free port, which `up` reads from its port file
    running = start_cluster(tmp_path / "data", tmp_path / "home", ["--port", "0"])
    server = (tmp_path / "data" / "kubeconfig").read_text().split("server: ")[1].split()[0]
    assert int(server.rsplit(":", 1)[1]) > 0
    pid = running.pid_of("apiserver")
    assert running.stop(signal.SIGINT) == 0
    with pytest.raises(ProcessLookupError):
        for _ in range(100):  # the child is gone (reaped by up) once up has exited
            os.kill(pid, 0)
            time.sleep(0.05)


def test_unknown_feature_gate_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "up", "--data-dir", str(tmp_path),
         "--feature-gates", "DynamicContainers=true,Bogus=false"],
        capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "unrecognized feature gate: Bogus" in result.stderr

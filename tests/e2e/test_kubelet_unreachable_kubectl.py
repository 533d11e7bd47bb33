"""The real kubectl against a pod whose node's kubelet cannot be reached (a Node that reports
a kubelet port nothing listens on, as a stopped kubelet leaves it): `kubectl logs`, `kubectl
exec` and `kubectl get --raw .../proxy/...` print upstream's lines (Go's dial errors), never
a Python repr."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import Cluster, Kubectl
from kep_e2e import as_input, kubectl_in, node_manifest, running_cluster

pytestmark = [pytest.mark.e2e]

NODE = "stopped-node"


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, int]]:
    """A cluster without a kubelet and a Node whose kubelet port is closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    node = node_manifest(NODE)
    node["status"]["addresses"] = [{"type": "InternalIP", "address": "127.0.0.1"}]
    node["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": port}}
    with running_cluster(tmp_path_factory.mktemp("unreachable")) as cluster:
        cluster.kubectl("create", "-f", "-", input=as_input(node))
        yield cluster, port


def test_kubectl_shows_go_s_dial_errors(stopped: tuple[Cluster, int], tmp_path: Path) -> None:
    cluster, port = stopped
    k: Kubectl = kubectl_in(cluster, tmp_path, "test_kubectl_shows_go_s_dial_errors")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]}}
    k("create", "-f", "-", input=as_input(pod))
    refused = f"dial tcp 127.0.0.1:{port}: connect: connection refused"

    logs = k("logs", "p", check=False)
    assert (logs.returncode, logs.stdout) == (1, "")
    assert logs.stderr.strip() == (
        f'Error from server: Get "https://127.0.0.1:{port}/containerLogs/{k.namespace}/p/c": '
        f"{refused}")

    tail = k("logs", "p", "--tail=3", "-f", check=False)
    assert tail.stderr.strip() == (
        f'Error from server: Get "https://127.0.0.1:{port}/containerLogs/{k.namespace}/p/c'
        f'?follow=true&tailLines=3": {refused}')

    proxy = k("get", "--raw", f"/api/v1/nodes/{NODE}/proxy/stats/summary", check=False)
    assert (proxy.returncode, proxy.stderr.strip()) == (1, f"Error from server: {refused}")

    exec_result = k("exec", "p", "--", "true", check=False)
    assert (exec_result.returncode, exec_result.stderr.strip()) == (
        1, f"Error from server: error dialing backend: {refused}")
    for result in (logs, tail, proxy, exec_result):
        assert "object at 0x" not in result.stderr and "Traceback" not in result.stderr

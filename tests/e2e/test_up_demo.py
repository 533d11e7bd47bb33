"""`make run` (`ephemera up --demo`) as a new user meets it, twice on the same data dir: the
second start runs the demo against the pod the first one created, and every command
succeeds (issue 11, item 1: it used to fail with an InternalError, because the demo sent
`kubectl logs` to a kubelet that was not serving yet), `kubectl dynamic` included (item 5:
the plugin is found)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster import Cluster, release_leftovers, start_cluster

pytestmark = pytest.mark.e2e

DEMO_TIMEOUT = 180.0


def run_demo_once(data: Path, home: Path) -> str:
    """`ephemera up --demo` until the demo is done, then stopped; its output."""
    cluster: Cluster = start_cluster(data, home, ["--demo", "--node-name", "demo-node"])
    with cluster:
        deadline = time.monotonic() + DEMO_TIMEOUT
        while "Press Ctrl-C to stop it." not in cluster.output:
            assert cluster.process.poll() is None, cluster.output
            assert time.monotonic() < deadline, f"the demo did not finish\n{cluster.output}"
            time.sleep(0.2)
        assert cluster.stop() == 0
        return cluster.output


def test_the_demo_works_on_a_second_start(tmp_path: Path) -> None:
    data, home = tmp_path / "data", tmp_path / "home"
    try:
        first = run_demo_once(data, home)
        assert "pod/demo created" in first
        second = run_demo_once(data, home)
        assert "pod/demo unchanged" in second
        for output in (first, second):
            assert "ephemera: node demo-node is Ready" in output
            assert "kubectl exited with code" not in output, output
            assert "Error from server" not in output, output
            # `kubectl logs demo` printed what the container wrote.
            logs = output.split("$ kubectl logs demo\n", 1)[1]
            assert logs.startswith("hello from ephemera\n"), output
            # kubectl found the `dynamic` plugin (issue 11, item 5).
            status = output.split("$ kubectl dynamic status demo\n", 1)[1]
            assert status.startswith("Pod: default/demo   Node: demo-node   Phase: Running\n")
            rows = [line.split() for line in status.splitlines()]
            assert ["config", "configMap/demo-config", "yes", "yes", "HostMounted"] in rows
        # The restart is a node reboot: the pod came back, its container restarted once.
        pods = second.split("$ kubectl get pods -o wide\n", 1)[1].splitlines()
        assert pods[1].split()[:4] == ["demo", "1/1", "Running", "1"], second
    finally:
        release_leftovers(tmp_path)

"""Stopping `ephemera up` and starting it again on the same data dir is a node reboot
(issue 11, item 1; `ephemera.kubelet.nodeshutdown`): the pods bound to the node come back
with the same UIDs, their containers start again with `restartCount` counting on, a disk
emptyDir keeps its files, a memory emptyDir is empty again, a dynamic volume and the
allocation checkpoint carry over. And one `up` (or kubelet) per directory (item 9(b))."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cluster import (
    LOOP,
    RESTART_CONTAINER,
    Cluster,
    Kubectl,
    container,
    create_running,
    exec_in,
    mounted_names,
    node_ready,
    patch_dynamic,
    release_leftovers,
    running,
    start_cluster,
    volume_phases,
    wait,
    wait_pod,
)

pytestmark = pytest.mark.e2e

NODE = "restart-node"


def keeper() -> dict[str, Any]:
    volumes = [{"name": "disk", "emptyDir": {}},
               {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "keeper"},
            "spec": {"terminationGracePeriodSeconds": 1, "volumes": volumes,
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", LOOP],
                                     "dynamicVolumePolicy": RESTART_CONTAINER,
                                     "volumeMounts": [{"name": v["name"],
                                                       "mountPath": f"/{v['name']}"}
                                                      for v in volumes]}]}}


def start(base: Path) -> Cluster:
    cluster = start_cluster(base / "data", base / "home", ["--node-name", NODE])
    wait(lambda: node_ready(cluster, NODE), "the node to be Ready", cluster)
    return cluster


def allocated(k: Kubectl) -> dict[str, Any]:
    raw = k("get", "--raw", "/api/v1/namespaces/default/pods/keeper/allocated").stdout
    return dict(json.loads(raw))


def test_a_restart_is_a_node_reboot(tmp_path: Path) -> None:
    try:
        with start(tmp_path) as first:
            k = Kubectl(first, tmp_path / "home", "default")
            create_running(k, keeper())
            exec_in(k, "keeper", "c", "echo kept > /disk/file; echo lost > /mem/file")
            patch_dynamic(k, "keeper", [
                {"op": "add", "path": "/spec/volumes/-",
                 "value": {"name": "dyn", "emptyDir": {}}},
                {"op": "add", "path": "/spec/containers/0/volumeMounts/-",
                 "value": {"name": "dyn", "mountPath": "/dyn"}}])
            before = wait_pod(k, "keeper", lambda p: running(p) and
                              mounted_names(p) == {"disk", "mem", "dyn"} and
                              volume_phases(p).get("dyn") == "HostMounted",
                              "c running with the dynamic volume")
            exec_in(k, "keeper", "c", "echo dynamic > /dyn/file")
            allocated_before = allocated(k)
            assert first.stop() == 0
        pods_dir = tmp_path / "data" / "kubelet" / "pods"
        # Stopped as a reboot stops a node: no container, process, mount or loop device is
        # left; the disk is kept.
        assert release_leftovers(tmp_path / "data") == []
        uid = before["metadata"]["uid"]
        assert (pods_dir / uid).is_dir()

        with start(tmp_path) as second:
            k = Kubectl(second, tmp_path / "home", "default")
            old = container(before)
            after = wait_pod(k, "keeper", lambda p: running(p) and
                             container(p).get("containerID") != old["containerID"] and
                             volume_phases(p).get("dyn") == "HostMounted",
                             "c running again after the restart")
            assert after["metadata"]["uid"] == uid
            assert container(after)["restartCount"] == old["restartCount"] + 1
            assert mounted_names(after) == {"disk", "mem", "dyn"}
            assert {e["name"]: e["hostPhase"] for e in after["status"]["volumeStatuses"]} == \
                {"disk": "HostMounted", "mem": "HostMounted", "dyn": "HostMounted"}
            out = exec_in(k, "keeper", "c",
                          "cat /disk/file /dyn/file; ls -A /mem | wc -l; "
                          "grep -c ' /mem tmpfs ' /proc/mounts")
            assert out == "kept\ndynamic\n0\n1\n"
            assert allocated(k)["spec"] == allocated_before["spec"]
            assert allocated(k)["metadata"]["uid"] == uid
            k("delete", "pod", "keeper", "--grace-period=1", "--wait=true", timeout=120)
            assert second.stop() == 0
    finally:
        release_leftovers(tmp_path)


def test_a_second_up_or_kubelet_on_a_held_dir_refuses_to_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    try:
        with start(tmp_path) as first:
            second = subprocess.run(
                [sys.executable, "-m", "ephemera.cli", "up", "--data-dir", str(data),
                 "--node-name", "other"],
                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert second.returncode == 1
            assert second.stderr == (
                f"ephemera up: data dir {data} is in use by process {first.process.pid}; "
                "stop it first, or use another directory\n")
            assert second.stdout == ""  # nothing was started

            kubelet = subprocess.run(
                [sys.executable, "-m", "ephemera.cli", "kubelet", "--kubeconfig",
                 str(data / "kubeconfig"), "--root-dir", str(data / "kubelet"),
                 "--node-name", "other", "--port", "0"],
                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert kubelet.returncode == 1
            assert kubelet.stderr == (
                f"ephemera kubelet: root dir {data / 'kubelet'} is in use by process "
                f"{first.pid_of('kubelet')}; stop it first, or use another directory\n")
            # The running cluster is untouched: no second node registered.
            nodes = first.kubectl("get", "nodes", "-o", "name").stdout.split()
            assert nodes == [f"node/{NODE}"]
            assert first.stop() == 0
        # Released with the process: the same dir starts again.
        with start_cluster(data, tmp_path / "home", ["--no-kubelet"]) as again:
            assert again.stop() == 0
    finally:
        release_leftovers(tmp_path)

"""The kubelet's eviction manager and Summary API inside a real `ephemera up
--eviction-interval 1`, with real containers, met through kubectl: a busybox pod writing past
its emptyDir `sizeLimit` with `dd` ends `Failed` / `Evicted` with upstream's exact message and
an `Evicted` event, and `kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary` reports a
pod's emptyDir and `ephemeral-storage` usage as `du` measures the volume's directory.

One cluster per module; each test has its own namespace and deletes its pods."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Cluster, Kubectl, namespaced_kubectl, run_kubelet_cluster, wait

pytestmark = pytest.mark.e2e

NODE = "evict-node"


@pytest.fixture(scope="module")
def evict_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from run_kubelet_cluster(tmp_path_factory, "eviction-cluster", NODE,
                                   ["--eviction-interval", "1"])


@pytest.fixture
def k(evict_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
      ) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(evict_cluster, tmp_path, request)


def scratch_pod(name: str, script: str, empty_dir: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "volumes": [{"name": "scratch", "emptyDir": empty_dir}],
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", script],
                                     "volumeMounts": [{"name": "scratch",
                                                       "mountPath": "/scratch"}]}]}}


def pod_json(k: Kubectl, name: str) -> dict[str, Any]:
    return dict(k.json("get", "pod", name))


def summary(k: Kubectl) -> dict[str, Any]:
    out = k("get", "--raw", f"/api/v1/nodes/{NODE}/proxy/stats/summary").stdout
    return dict(json.loads(out))


def test_writing_past_the_empty_dir_size_limit_evicts_the_pod(k: Kubectl) -> None:
    k("create", "-f", "-", input=yaml.safe_dump(scratch_pod(
        "filler", "dd if=/dev/zero of=/scratch/fill bs=1M count=8; sleep 3600",
        {"sizeLimit": "4Mi"})))
    evicted = wait(lambda: (lambda p: p if p["status"].get("phase") == "Failed" else None)(
        pod_json(k, "filler")), "pod filler to be evicted", k.cluster)
    message = 'Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". '
    assert evicted["status"]["reason"] == "Evicted"
    assert evicted["status"]["message"] == message
    state = evicted["status"]["containerStatuses"][0]["state"]
    assert "terminated" in state, state
    events = k.json("get", "events", "--field-selector", "involvedObject.name=filler")
    assert [(e["type"], e["message"]) for e in events["items"] if e["reason"] == "Evicted"] \
        == [("Warning", message)]


def _du_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[0])


def test_the_summary_api_through_the_node_proxy_matches_du(k: Kubectl) -> None:
    k("create", "-f", "-", input=yaml.safe_dump(scratch_pod(
        "writer", "dd if=/dev/zero of=/scratch/data bs=1M count=3; sleep 3600", {})))
    pod = wait(lambda: (lambda p: p if p["status"].get("phase") == "Running" else None)(
        pod_json(k, "writer")), "pod writer to run", k.cluster)
    uid = pod["metadata"]["uid"]
    host_dir = (k.cluster.data_dir / "kubelet" / "pods" / uid / "volumes" /
                "kubernetes.io~empty-dir" / "scratch")
    wait(lambda: _du_bytes(host_dir) >= 3 << 20, "dd to finish", k.cluster)
    expected = _du_bytes(host_dir)

    def measured() -> dict[str, Any] | None:
        for p in summary(k)["pods"]:
            if p["podRef"]["uid"] == uid:
                volumes = {v["name"]: v for v in p.get("volume") or []}
                if volumes.get("scratch", {}).get("usedBytes") == expected:
                    return dict(p)
        return None

    stats = wait(measured, "the summary to show the emptyDir's usage", k.cluster)
    assert stats["podRef"] == {"name": "writer", "namespace": k.namespace, "uid": uid}
    # The pod's ephemeral storage: the emptyDir plus the container's writable layer and logs.
    assert stats["ephemeral-storage"]["usedBytes"] >= expected
    [container] = stats["containers"]
    assert container["name"] == "c" and "rootfs" in container and "logs" in container
    node = summary(k)["node"]
    assert node["nodeName"] == NODE
    assert node["fs"]["capacityBytes"] > node["fs"]["availableBytes"] > 0


def test_writable_layer_and_empty_dir_past_the_pod_level_limit(k: Kubectl) -> None:
    """KEP-6386: the pod-level limit counts the writable layer, the logs and the emptyDir."""
    body = scratch_pod("podlevel", "dd if=/dev/zero of=/tmp/layer bs=1M count=5; "
                       "dd if=/dev/zero of=/scratch/vol bs=1M count=5; sleep 3600", {})
    body["spec"]["resources"] = {"limits": {"ephemeral-storage": "8Mi"}}
    k("create", "-f", "-", input=yaml.safe_dump(body))
    evicted = wait(lambda: (lambda p: p if p["status"].get("phase") == "Failed" else None)(
        pod_json(k, "podlevel")), "pod podlevel to be evicted", k.cluster)
    assert evicted["status"]["reason"] == "Evicted"
    match = re.fullmatch(r"Evicted: Pod ephemeral local storage usage \((\d+)(Ki|Mi)\) exceeds "
                         r"pod-level limit \(8Mi\)", evicted["status"]["message"])
    assert match is not None, evicted["status"]["message"]
    used_ki = int(match.group(1)) * (1024 if match.group(2) == "Mi" else 1)
    assert used_ki > 8 * 1024

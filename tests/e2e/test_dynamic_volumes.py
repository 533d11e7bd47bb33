"""KEP-6395 dynamic volumes on a real `ephemera up` with the real OCI runtime, through kubectl:
an emptyDir added with `kubectl patch --subresource=dynamic` to a running container whose
policy is RestartContainer (the container is recreated with a new containerID and sees the
mount; `volumeStatuses` goes to HostMounted; `pods/NAME/allocated` shows it), then removed
(Unmounting, pruned, host directory gone; the kubelet's mount and unmount histograms,
read through `nodes/NODE/proxy/metrics`, count it), and a change that cannot be allocated (a memory
emptyDir bigger than the node) staying pending with the Unallocated and FailedAllocation
signals while the running container is untouched; and (KEP-5972) a sidecar container added
then removed, whose status leaves the pod once it has stopped, so `kubectl get pods` shows the
pod Running, not the sidecar's `Error`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    Cluster,
    Kubectl,
    assert_kubelet_clean,
    container,
    namespaced_kubectl,
    run_kubelet_cluster,
    wait,
    wait_pod,
)

pytestmark = pytest.mark.e2e

SCRIPT = ("trap 'exit 0' TERM; for d in /keep /extra; do "
          "grep -q \" $d \" /proc/mounts && echo \"mounted $d\"; done; echo ready; "
          "while true; do sleep 0.2; done")


@pytest.fixture(scope="module")
def dyn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from run_kubelet_cluster(tmp_path_factory, "dynamic-cluster", "dyn-node",
                                   after_delete=assert_kubelet_clean)


@pytest.fixture
def k(dyn_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(dyn_cluster, tmp_path, request)


def _worker(k: Kubectl) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "volumes": [{"name": "keep", "emptyDir": {}}],
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", SCRIPT],
                                     "dynamicVolumePolicy": {
                                         "restartPolicy": "RestartContainer"},
                                     "volumeMounts": [{"name": "keep",
                                                       "mountPath": "/keep"}]}]}}
    k("create", "-f", "-", input=yaml.safe_dump(body))
    return wait_pod(k, "w", lambda p: "running" in container(p).get("state", {}),
                    "running")


def _phase(p: dict[str, Any], name: str) -> str | None:
    for entry in p.get("status", {}).get("volumeStatuses") or []:
        if entry["name"] == name:
            return str(entry["hostPhase"])
    return None


def _patch(k: Kubectl, ops: list[dict[str, Any]]) -> None:
    k("patch", "pod", "w", "--subresource=dynamic", "--type=json", "-p", json.dumps(ops))


def _metric(k: Kubectl, name: str, labels: str) -> float:
    """A sample of the kubelet's /metrics, read through the apiserver's node proxy."""
    text = k("get", "--raw", "/api/v1/nodes/dyn-node/proxy/metrics").stdout
    for histogram in ("mount", "unmount"):
        assert f"# TYPE kubelet_dynamic_volume_{histogram}_duration_seconds histogram" in text
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.split()[-1])
    raise AssertionError(f"no {name}{{{labels}}} in the kubelet's metrics")


def test_add_then_remove_an_emptydir(k: Kubectl) -> None:
    before = _worker(k)
    uid = before["metadata"]["uid"]
    first_id = container(before)["containerID"]
    _patch(k, [{"op": "add", "path": "/spec/volumes/-",
                "value": {"name": "extra", "emptyDir": {}}},
               {"op": "add", "path": "/spec/containers/0/volumeMounts/-",
                "value": {"name": "extra", "mountPath": "/extra"}}])
    after = wait_pod(k, "w", lambda p: container(p).get("containerID") != first_id and
                     "running" in container(p).get("state", {}) and
                     _phase(p, "extra") == "HostMounted", "restarted with /extra")
    assert {m["name"] for m in container(after)["volumeMounts"]} == {"keep", "extra"}
    wait(lambda: "mounted /extra" in k("logs", "w", "-c", "c").stdout,
         "the container to see /extra", k.cluster)
    allocated = json.loads(k("get", "--raw",
                             f"/api/v1/namespaces/{k.namespace}/pods/w/allocated").stdout)
    assert [v["name"] for v in allocated["spec"]["volumes"]] == ["keep", "extra"]
    assert allocated["status"] == {}
    host_dir = (k.cluster.data_dir / "kubelet" / "pods" / uid / "volumes" /
                "kubernetes.io~empty-dir" / "extra")
    assert host_dir.is_dir()
    assert _metric(k, "kubelet_dynamic_volume_mount_duration_seconds_count",
                   'volume_plugin="kubernetes.io/empty-dir"') >= 1
    assert _metric(k, "kubelet_dynamic_allocations_total", 'result="admitted"') >= 1
    second_id = container(after)["containerID"]
    _patch(k, [{"op": "remove", "path": "/spec/containers/0/volumeMounts/1"},
               {"op": "remove", "path": "/spec/volumes/1"}])
    gone = wait_pod(k, "w", lambda p: _phase(p, "extra") is None and
                    container(p).get("containerID") != second_id and
                    "running" in container(p).get("state", {}), "extra pruned")
    assert [m["name"] for m in container(gone)["volumeMounts"]] == ["keep"]
    wait(lambda: not host_dir.exists(), "the host directory to be removed", k.cluster)
    logs = k("logs", "w", "-c", "c").stdout
    assert "mounted /keep" in logs and "mounted /extra" not in logs
    assert _metric(k, "kubelet_dynamic_volume_unmount_duration_seconds_count",
                   'volume_plugin="kubernetes.io/empty-dir"') >= 1


def test_a_change_that_cannot_be_allocated_stays_pending(k: Kubectl) -> None:
    before = _worker(k)
    first_id = container(before)["containerID"]
    _patch(k, [{"op": "add", "path": "/spec/volumes/-",
                "value": {"name": "huge", "emptyDir": {"medium": "Memory",
                                                       "sizeLimit": "100Pi"}}},
               {"op": "add", "path": "/spec/containers/-",
                "value": {"name": "late", "image": "busybox",
                          "command": ["sh", "-c", SCRIPT],
                          "volumeMounts": [{"name": "huge", "mountPath": "/huge"}]}}])
    p = wait_pod(k, "w", lambda p: _phase(p, "huge") == "Pending" and
                 container(p, "late").get("state", {}).get("waiting", {}).get("reason") ==
                 "Unallocated", "the change pending")
    assert container(p, "late")["state"]["waiting"]["message"] == \
        "Container addition pending node allocation"
    events = wait(lambda: [e for e in k.json("get", "events", "--field-selector",
                                              "involvedObject.name=w")["items"]
                           if e["reason"] == "FailedAllocation"],
                  "a FailedAllocation event", k.cluster)
    assert events[0]["message"].startswith("Node didn't have enough resource: memory")
    allocated = json.loads(k("get", "--raw",
                             f"/api/v1/namespaces/{k.namespace}/pods/w/allocated").stdout)
    assert [c["name"] for c in allocated["spec"]["containers"]] == ["c"]
    assert container(k.json("get", "pod", "w"))["containerID"] == first_id


def test_a_removed_container_leaves_the_status(k: Kubectl) -> None:
    """A sidecar added and removed through `/dynamic`: it is killed (busybox's `sh` as PID 1
    ignores SIGTERM: exit 137 after the grace period, `Error`), then its status is gone, so
    `kubectl get pods` shows `1/1 Running`; its name can be added again, as a new container."""
    _worker(k)
    sidecar = {"name": "side", "image": "busybox",
               "command": ["sh", "-c", "while true; do sleep 0.2; done"]}
    _patch(k, [{"op": "add", "path": "/spec/containers/-", "value": sidecar}])
    wait_pod(k, "w", lambda p: "running" in container(p, "side").get("state", {}),
             "the sidecar running")
    assert k("get", "pod", "w", "--no-headers").stdout.split()[1:3] == ["2/2", "Running"]
    _patch(k, [{"op": "remove", "path": "/spec/containers/1"}])
    gone = wait_pod(k, "w", lambda p: [s["name"] for s in p["status"]["containerStatuses"]]
                    == ["c"], "the sidecar's status gone")
    assert "running" in container(gone)["state"]
    assert k("get", "pod", "w", "--no-headers").stdout.split()[1:4] == ["1/1", "Running", "0"]
    _patch(k, [{"op": "add", "path": "/spec/containers/-", "value": sidecar}])
    again = wait_pod(k, "w", lambda p: "running" in container(p, "side").get("state", {}),
                     "the sidecar added again")
    assert container(again, "side")["restartCount"] == 0
    assert not container(again, "side").get("lastState")

"""Memory eviction with real containers, met through kubectl: `ephemera up --system-reserved
memory=<all but 350Mi of this machine>` leaves the pods 350Mi (allocatableMemory.available,
a copy of the default `memory.available<100Mi`); a BestEffort busybox pod whose `dd` holds a
300Mi buffer (blocked writing into a pipe nobody reads) takes the pods' cgroup below the
threshold: the Node reports MemoryPressure, the pod ends `Failed` / `Evicted` with upstream's
message and an `Evicted` event with its annotations, and a BestEffort pod bound to the node
then is refused by the kubelet while a Burstable one runs; 30 s (the transition period) after
the memory came back MemoryPressure is False again and a BestEffort pod runs. About 300 MiB
of real memory, for a few seconds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Cluster, Kubectl, namespaced_kubectl, run_kubelet_cluster, wait

from ephemera.api.quantity import parse_quantity

pytestmark = pytest.mark.e2e

NODE = "memory-node"
Mi = 1024 * 1024
PODS_MEMORY = 350 * Mi


def _mem_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


@pytest.fixture(scope="module")
def memory_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reserved = _mem_total() - PODS_MEMORY
    yield from run_kubelet_cluster(tmp_path_factory, "memory-cluster", NODE,
                                   ["--eviction-interval", "1",
                                    "--eviction-pressure-transition-period", "30",
                                    "--system-reserved", f"memory={reserved}"])


@pytest.fixture
def k(memory_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
      ) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(memory_cluster, tmp_path, request)


def busybox(name: str, script: str, requests: dict[str, str] | None = None, *,
            bound: bool = False) -> dict[str, Any]:
    """A busybox pod; `bound`: on the node already (`spec.nodeName`), so the kubelet's
    admission decides (the scheduler would keep it off a node tainted memory-pressure)."""
    container: dict[str, Any] = {"name": "c", "image": "busybox",
                                 "command": ["sh", "-c", script]}
    if requests:
        container["resources"] = {"requests": requests}
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 1, "containers": [container]}
    if bound:
        spec["nodeName"] = NODE
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def memory_condition(k: Kubectl) -> dict[str, Any]:
    node = json.loads(k("get", "node", NODE, "-o", "json").stdout)
    return dict(next(c for c in node["status"]["conditions"]
                     if c["type"] == "MemoryPressure"))


def test_a_pod_using_more_memory_than_the_node_has_left_is_evicted(k: Kubectl) -> None:
    node = json.loads(k("get", "node", NODE, "-o", "json").stdout)
    assert parse_quantity(node["status"]["allocatable"]["memory"]).value() == (
        PODS_MEMORY - 100 * Mi)  # capacity - system-reserved - the hard threshold
    assert memory_condition(k)["status"] == "False"
    k("create", "-f", "-", input=yaml.safe_dump(busybox(
        "hog", "dd if=/dev/zero bs=300M count=1 | sleep 3600")))
    evicted = wait(lambda: (lambda p: p if p["status"].get("phase") == "Failed" else None)(
        k.json("get", "pod", "hog")), "pod hog to be evicted", k.cluster)
    assert evicted["status"]["reason"] == "Evicted"
    message = evicted["status"]["message"]
    found = re.fullmatch(
        r"The node was low on resource: memory\. Threshold quantity: 100Mi, available: "
        r"(\S+)\. Container c was using (\S+), request is 0, has larger consumption of "
        r"memory\. ", message)
    assert found, message
    available, used = (parse_quantity(q).value() for q in found.groups())
    assert available < 100 * Mi
    assert used >= 300 * Mi
    events = k.json("get", "events", "--field-selector", "involvedObject.name=hog")
    [event] = [e for e in events["items"] if e["reason"] == "Evicted"]
    assert (event["type"], event["message"]) == ("Warning", message)
    assert event["metadata"]["annotations"] == {
        "offending_containers": "c", "offending_containers_usage": found.group(2),
        "starved_resource": "memory"}
    condition = memory_condition(k)  # kept for the pressure transition period
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
    k("create", "-f", "-", input=yaml.safe_dump(busybox("late", "sleep 3600", bound=True)))
    rejected = wait(lambda: (lambda p: p if p["status"].get("phase") == "Failed" else None)(
        k.json("get", "pod", "late")), "pod late to be rejected", k.cluster)
    assert (rejected["status"]["reason"], rejected["status"]["message"]) == (
        "Evicted", "Pod was rejected: The node had condition: [MemoryPressure]. ")
    k("create", "-f", "-", input=yaml.safe_dump(busybox("burstable", "sleep 3600",
                                                        {"memory": "1Mi"}, bound=True)))
    wait(lambda: k.json("get", "pod", "burstable")["status"].get("phase") == "Running",
         "pod burstable to run", k.cluster)
    summary = json.loads(k("get", "--raw", f"/api/v1/nodes/{NODE}/proxy/stats/summary").stdout)
    [pods] = summary["node"]["systemContainers"]
    assert pods["name"] == "pods" and pods["memory"]["workingSetBytes"] < 300 * Mi  # freed
    assert summary["node"]["memory"]["availableBytes"] > 0
    wait(lambda: memory_condition(k)["status"] == "False", "MemoryPressure to clear",
         k.cluster)
    assert memory_condition(k)["reason"] == "KubeletHasSufficientMemory"
    k("create", "-f", "-", input=yaml.safe_dump(busybox("later", "sleep 3600", bound=True)))
    wait(lambda: k.json("get", "pod", "later")["status"].get("phase") == "Running",
         "pod later to run", k.cluster)

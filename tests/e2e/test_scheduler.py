"""The scheduler as `ephemera up` runs it (a supervised child), met through kubectl: nodes
created through the API with allocatable resources, conditions, taints and declared
features; pods placed or explained with upstream's message, condition and events; pods
retried when nodes change; the feature gates handed down by `up`; surviving `kill -9` of
the scheduler and of the apiserver."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Cluster, start_cluster

# These tests bring API-only nodes of their own: their clusters run no kubelet.
NO_KUBELET = ["--no-kubelet"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A running cluster without a kubelet; stopped (and checked to exit 0) afterwards."""
    running = start_cluster(tmp_path / "data", tmp_path / "home", NO_KUBELET)
    try:
        yield running
    finally:
        code = running.stop()
        assert code == 0, f"ephemera up exited {code}\n{running.output}"

pytestmark = pytest.mark.e2e

WAIT = 30.0
ISSUE_MESSAGE = ("0/3 nodes are available: 3 Insufficient ephemeral-storage. preemption: 0/3 "
                 "nodes are available: 3 No preemption victims found for incoming pod.")


def node(name: str, *, es: str = "1Gi", ready: str = "True",
         declared: list[str] | None = None, taints: list[dict[str, str]] | None = None
         ) -> dict[str, Any]:
    allocatable = {"cpu": "2", "memory": "4Gi", "ephemeral-storage": es, "pods": "10"}
    status: dict[str, Any] = {"capacity": allocatable, "allocatable": allocatable,
                              "conditions": [{"type": "Ready", "status": ready,
                                              "reason": "KubeletReady"}]}
    if declared is not None:
        status["declaredFeatures"] = declared
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": taints} if taints else {}, "status": status}


def pod(name: str, *, es: str | None = None, pod_es: str | None = None,
        **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox:1.36"}
    if es is not None:
        container["resources"] = {"requests": {"ephemeral-storage": es}}
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": {"containers": [container], **spec}}
    if pod_es is not None:
        body["spec"]["resources"] = {"requests": {"ephemeral-storage": pod_es}}
    return body


def create(cluster: Cluster, *objects: dict[str, Any]) -> None:
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(objects))


def get_pod(cluster: Cluster, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(cluster.kubectl("get", "pod", name, "-o", "json").stdout)
    return result


def wait_for(cluster: Cluster, name: str,
             check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        current = get_pod(cluster, name)
        if check(current):
            return current
        if time.monotonic() > deadline:
            scheduler_log = (cluster.data_dir / "logs" / "scheduler.log").read_text()
            pytest.fail(f"pod {name} never got there:\n{json.dumps(current, indent=1)}\n"
                        f"scheduler log:\n{scheduler_log[-3000:]}")
        time.sleep(0.1)


def condition(p: dict[str, Any]) -> dict[str, Any]:
    for c in p.get("status", {}).get("conditions") or []:
        if c["type"] == "PodScheduled":
            return dict(c)
    return {}


def unschedulable_with(message: str) -> Callable[[dict[str, Any]], bool]:
    return lambda p: condition(p).get("message") == message


def bound(p: dict[str, Any]) -> bool:
    return bool(p["spec"].get("nodeName"))


def events(cluster: Cluster, name: str, message: str) -> list[dict[str, Any]]:
    """The events about pod `name` with `message`, once there is one (each is written just
    after the binding or the status it reports)."""
    deadline = time.monotonic() + WAIT
    while True:
        listed = json.loads(cluster.kubectl("get", "events", "--field-selector",
                                            f"involvedObject.name={name}", "-o", "json").stdout)
        found = [e for e in listed["items"] if e["message"] == message]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_pods_are_placed_or_explained_and_retried(cluster: Cluster) -> None:
    create(cluster, node("n1"), node("n2"), node("n3"))
    create(cluster, pod("big", es="2Gi"))
    pending = wait_for(cluster, "big", unschedulable_with(ISSUE_MESSAGE))
    assert condition(pending)["status"] == "False"
    assert condition(pending)["reason"] == "Unschedulable"
    assert pending["status"]["phase"] == "Pending" and not bound(pending)
    [failed] = events(cluster, "big", ISSUE_MESSAGE)
    assert (failed["type"], failed["reason"], failed["message"]) == (
        "Warning", "FailedScheduling", ISSUE_MESSAGE)
    assert failed["source"]["component"] == "default-scheduler"
    assert failed["involvedObject"]["uid"] == pending["metadata"]["uid"]
    described = cluster.kubectl("describe", "pod", "big").stdout
    assert re.search(r"^\s+PodScheduled\s+False\s*$", described, re.M), described
    assert re.search(r"Warning\s+FailedScheduling\s+.*\sdefault-scheduler\s+"
                     + re.escape(ISSUE_MESSAGE), described), described

    create(cluster, pod("small", es="512Mi"))
    small = wait_for(cluster, "small", bound)
    node_name = small["spec"]["nodeName"]
    assert condition(small)["status"] == "True"
    scheduled = f"Successfully assigned default/small to {node_name}"
    assert [(e["type"], e["reason"]) for e in events(cluster, "small", scheduled)] == [
        ("Normal", "Scheduled")]

    # a node grows: the waiting pod is tried again and lands there
    cluster.kubectl("patch", "node", "n3", "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"allocatable": {"ephemeral-storage": "4Gi"}}}))
    assert wait_for(cluster, "big", bound)["spec"]["nodeName"] == "n3"


def test_declared_features_taints_and_readiness(cluster: Cluster) -> None:
    plr = "PodLevelResourcesEphemeralStorage"
    create(cluster, node("old", es="10Gi", declared=[]),
           node("tainted", es="10Gi", declared=[plr],
                taints=[{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]),
           node("down", es="10Gi", declared=[plr], ready="Unknown"))
    create(cluster, pod("plr", es="1Gi", pod_es="2Gi"))
    message = ("0/3 nodes are available: 1 node(s) didn't match Pod's required features, "
               "2 node(s) had untolerated taint(s). preemption: 0/3 nodes are available: "
               "3 Preemption is not helpful for scheduling.")
    wait_for(cluster, "plr", unschedulable_with(message))

    # the node becomes Ready: the pod lands there
    cluster.kubectl("patch", "node", "down", "--subresource=status", "--type=strategic", "-p",
                    json.dumps({"status": {"conditions": [{"type": "Ready",
                                                           "status": "True"}]}}))
    assert wait_for(cluster, "plr", bound)["spec"]["nodeName"] == "down"

    # a pod that tolerates the taint may use that node
    create(cluster, pod("batch", es="9Gi", tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]))
    assert wait_for(cluster, "batch", bound)["spec"]["nodeName"] in ("tainted", "old")


def test_up_hands_the_feature_gates_to_the_scheduler(tmp_path: Path) -> None:
    with start_cluster(tmp_path / "data", tmp_path / "home",
                       ["--feature-gates", "NodeDeclaredFeatures=false", *NO_KUBELET]
                       ) as running:
        create(running, node("old", es="10Gi", declared=[]))
        create(running, pod("plr", es="1Gi", pod_es="2Gi"))
        assert wait_for(running, "plr", bound)["spec"]["nodeName"] == "old"
        log = (running.data_dir / "logs" / "scheduler.log").read_text()
        assert re.search(r"starting scheduler: .* scheduler --kubeconfig \S+ "
                         r"--feature-gates NodeDeclaredFeatures=false$", log, re.M), log
        assert running.stop() == 0


def _new_pid(cluster: Cluster, component: str, old: int) -> int:
    deadline = time.monotonic() + WAIT
    while True:
        try:
            pid = cluster.pid_of(component)
        except (OSError, ValueError):
            pid = old
        if pid != old:
            return pid
        assert time.monotonic() < deadline, cluster.output
        time.sleep(0.05)


def test_scheduling_survives_kill_9_of_scheduler_and_apiserver(
        cluster: Cluster) -> None:
    create(cluster, node("n1", es="10Gi"))
    create(cluster, pod("first", es="1Gi"))
    wait_for(cluster, "first", bound)

    scheduler = cluster.pid_of("scheduler")
    os.kill(scheduler, signal.SIGKILL)
    _new_pid(cluster, "scheduler", scheduler)
    create(cluster, pod("second", es="1Gi"))
    assert wait_for(cluster, "second", bound)["spec"]["nodeName"] == "n1"
    assert f"scheduler (pid {scheduler}) exited: killed by SIGKILL; restarting" in cluster.output

    apiserver = cluster.pid_of("apiserver")
    os.kill(apiserver, signal.SIGKILL)
    _new_pid(cluster, "apiserver", apiserver)
    deadline = time.monotonic() + WAIT
    while cluster.kubectl("get", "nodes", check=False).returncode != 0:
        assert time.monotonic() < deadline, cluster.output
        time.sleep(0.1)
    create(cluster, pod("third", es="1Gi"))
    assert wait_for(cluster, "third", bound)["spec"]["nodeName"] == "n1"

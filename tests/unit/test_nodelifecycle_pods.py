"""The node lifecycle controller's `MarkPodsNotReady` rule (`not_ready_conditions`), the
pods-by-node index it finds a node's pods with, and full disruption (no node Ready: no
NoExecute taints), and the NoSchedule taints of conditions and cordon."""

from __future__ import annotations

from typing import Any

from ephemera.client import ApiClient, ClientConfig, Informer
from ephemera.controllers.nodelifecycle import (
    desired_taints,
    fully_disrupted,
    no_schedule_taints_differ,
    not_ready_conditions,
)
from ephemera.controllers.podsbynode import PodsByNode

NOW = "2026-01-01T00:00:10Z"


def pod(name: str = "p", node: str = "n1", ready: str | None = "True",
        **status: Any) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "True"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready, "reason": "",
                           "lastTransitionTime": "2026-01-01T00:00:00Z"})
    return {"metadata": {"namespace": "default", "name": name, "resourceVersion": "1"},
            "spec": {"nodeName": node}, "status": {"conditions": conditions, **status}}


def test_a_ready_pod_on_the_node_becomes_not_ready() -> None:
    conditions = not_ready_conditions(pod(), "n1", NOW)
    assert conditions == [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "False", "reason": "",
         "lastTransitionTime": NOW}]


def test_reason_and_message_stay_as_the_kubelet_wrote_them() -> None:
    p = pod()
    p["status"]["conditions"][1].update(reason="ContainersNotReady", message="m")
    conditions = not_ready_conditions(p, "n1", NOW)
    assert conditions is not None
    ready = conditions[1]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False", "ContainersNotReady", "m")


def test_unknown_ready_becomes_false_too() -> None:
    conditions = not_ready_conditions(pod(ready="Unknown"), "n1", NOW)
    assert conditions is not None and conditions[1]["status"] == "False"


def test_pods_left_alone() -> None:
    assert not_ready_conditions(pod(ready="False"), "n1", NOW) is None  # already
    assert not_ready_conditions(pod(ready=None), "n1", NOW) is None  # no Ready condition
    assert not_ready_conditions(pod(node="n2"), "n1", NOW) is None  # another node's


def test_the_pod_itself_is_not_modified() -> None:
    p = pod()
    not_ready_conditions(p, "n1", NOW)
    assert p["status"]["conditions"][1]["status"] == "True"


def test_pods_by_node_follow_adds_moves_and_deletes() -> None:
    informer = Informer(ApiClient(ClientConfig(server="http://127.0.0.1:1")), "/api/v1/pods")
    index = PodsByNode(informer)
    a, b, unbound = pod("a"), pod("b", node="n2"), pod("u", node="")
    informer.replace([a, b, unbound], "1")
    assert [p["metadata"]["name"] for p in index.get("n1")] == ["a"]
    assert [p["metadata"]["name"] for p in index.get("n2")] == ["b"]
    assert index.get("") == [] and index.get("n3") == []
    bound = pod("u", node="n1")
    bound["metadata"]["resourceVersion"] = "2"
    informer.replace([a, b, bound], "2")
    assert [p["metadata"]["name"] for p in index.get("n1")] == ["a", "u"]
    informer.replace([bound], "3")
    assert [p["metadata"]["name"] for p in index.get("n1")] == ["u"]
    assert index.get("n2") == []


def node(name: str, ready: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def test_full_disruption_is_no_node_ready() -> None:
    assert fully_disrupted([node("a", "Unknown"), node("b", "False")]) is True
    assert fully_disrupted([node("a", "Unknown"), node("b", "True")]) is False
    # an excluded node does not count, either way
    excluded = {"node.kubernetes.io/exclude-disruption": ""}
    assert fully_disrupted([node("a", "Unknown"), node("b", "True", **excluded)]) is True
    assert fully_disrupted([node("b", "Unknown", **excluded)]) is None  # no node counts
    assert fully_disrupted([]) is None


def test_no_no_execute_taints_in_full_disruption() -> None:
    down = node("a", "Unknown")
    down["spec"] = {"taints": [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": NOW},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
        {"key": "mine", "effect": "NoExecute"}]}
    assert desired_taints(down, NOW, no_execute=False) == [
        {"key": "mine", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]
    assert [(t["key"], t["effect"]) for t in desired_taints(down, NOW)] == [
        ("mine", "NoExecute"), ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute")]


def cordoned(unschedulable: bool, taints: list[dict[str, Any]]) -> dict[str, Any]:
    n = node("a", "True")
    n["spec"] = {"unschedulable": unschedulable, "taints": taints}
    return n


def test_a_cordoned_node_gets_the_unschedulable_taint_and_loses_it_when_uncordoned() -> None:
    """upstream's TaintNodeByCondition: `spec.unschedulable` calls for
    `node.kubernetes.io/unschedulable:NoSchedule`, stamped `timeAdded` as every taint the
    controller adds (`SwapNodeControllerTaint`); kept as it is while cordoned."""
    mine = {"key": "mine", "effect": "NoSchedule"}
    added = desired_taints(cordoned(True, [mine]), NOW)
    assert added == [mine, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                            "timeAdded": NOW}]
    assert no_schedule_taints_differ(cordoned(True, [mine]))
    assert desired_taints(cordoned(True, added), "later") == added
    assert not no_schedule_taints_differ(cordoned(True, added))
    assert desired_taints(cordoned(False, added), NOW) == [mine]
    assert no_schedule_taints_differ(cordoned(False, added))
    assert not no_schedule_taints_differ(cordoned(False, [mine]))


def test_a_pressure_taint_added_carries_time_added() -> None:
    n = node("a", "True")
    n["status"]["conditions"].append({"type": "DiskPressure", "status": "True"})
    assert desired_taints(n, NOW) == [
        {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule", "timeAdded": NOW}]

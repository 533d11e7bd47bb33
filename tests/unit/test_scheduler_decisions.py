"""One scheduling decision and its message (pure): upstream's FitError text with the
preemption part, the choice among feasible nodes, and the assumed-pods cache that keeps two
pods off one slot."""

from __future__ import annotations

import random
from typing import Any

import pytest
from test_scheduler_filters import make_node, make_pod

from ephemera.scheduler.algorithm import (
    NO_NODES_AVAILABLE,
    fit_error_message,
    num_feasible_nodes_to_find,
    schedule_pod,
    truncate_message,
)
from ephemera.scheduler.cache import SchedulerCache
from ephemera.scheduler.nodeinfo import NodeInfo
from ephemera.scheduler.plugins import FilterStatus


def infos(*nodes: dict[str, Any]) -> list[NodeInfo]:
    return [NodeInfo(n) for n in nodes]


def test_the_message_of_the_issue() -> None:
    nodes = infos(*(make_node(f"n{i}", es="1Gi") for i in range(1, 4)))
    result = schedule_pod(make_pod(requests={"ephemeral-storage": "2Gi"}), nodes)
    assert result.node_name is None
    assert result.message == (
        "0/3 nodes are available: 3 Insufficient ephemeral-storage. preemption: 0/3 nodes are "
        "available: 3 No preemption victims found for incoming pod.")


def test_reasons_are_counted_and_sorted_as_strings() -> None:
    nodes = infos(
        make_node("a", es="1Gi", cpu="1"),
        make_node("b", es="1Gi"),
        make_node("c", taints=[{"key": "k", "effect": "NoSchedule"}]),
        make_node("d", labels={"x": "y"}, unschedulable=True),
    )
    pod = make_pod(requests={"cpu": "2", "ephemeral-storage": "2Gi"})
    assert schedule_pod(pod, nodes).message == (
        "0/4 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s), "
        "1 node(s) were unschedulable, 2 Insufficient ephemeral-storage. preemption: 0/4 nodes "
        "are available: 2 No preemption victims found for incoming pod, 2 Preemption is not "
        "helpful for scheduling.")


def test_only_unresolvable_rejections() -> None:
    nodes = infos(make_node("a"), make_node("b"))
    result = schedule_pod(make_pod(nodeSelector={"disk": "ssd"}), nodes)
    assert result.message == (
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def test_missing_declared_feature_message() -> None:
    nodes = infos(make_node("a", declared=[]), make_node("b", declared=["DynamicContainers"]))
    pod = make_pod(pod_requests={"ephemeral-storage": "1Gi"})
    assert schedule_pod(pod, nodes).message == (
        "0/2 nodes are available: 2 node(s) didn't match Pod's required features. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def test_preemption_policy_never() -> None:
    nodes = infos(make_node("a", es="1Gi"))
    pod = make_pod(requests={"ephemeral-storage": "2Gi"}, preemptionPolicy="Never")
    assert schedule_pod(pod, nodes).message == (
        "0/1 nodes are available: 1 Insufficient ephemeral-storage. preemption: not eligible "
        "due to preemptionPolicy=Never.")


def test_no_nodes_at_all() -> None:
    result = schedule_pod(make_pod(), [])
    assert (result.node_name, result.message) == (None, NO_NODES_AVAILABLE)
    assert fit_error_message(0, {}) == "no nodes available to schedule pods"


def test_several_reasons_from_one_node_each_count() -> None:
    statuses = {"a": FilterStatus("NodeResourcesFit",
                                  ("Insufficient cpu", "Insufficient memory"), False)}
    assert fit_error_message(1, statuses) == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption: 0/1 "
        "nodes are available: 1 No preemption victims found for incoming pod.")


def test_the_least_allocated_feasible_node_wins_and_ties_go_to_any_of_the_best() -> None:
    busy = NodeInfo(make_node("a"))
    busy.add_pod("x", make_pod("x", requests={"cpu": "2", "memory": "4Gi"}))
    nodes = [busy, NodeInfo(make_node("c")), NodeInfo(make_node("b")),
             NodeInfo(make_node("d", es="1Gi"))]
    pod = make_pod(requests={"cpu": "1", "ephemeral-storage": "2Gi"})
    result = schedule_pod(pod, nodes)
    assert set(result.scores) == {"a", "b", "c"}
    assert result.scores["a"] < result.scores["b"] == result.scores["c"]
    assert set(result.statuses) == {"d"}
    assert result.processed == 4
    rng = random.Random(7)
    chosen = {schedule_pod(pod, nodes, rng=rng).node_name for _ in range(40)}
    assert chosen == {"b", "c"}  # as upstream's selectHost: either of the best, never "a"


@pytest.mark.parametrize(("nodes", "wanted"), [
    (1, 1), (99, 99), (100, 100), (200, 100), (300, 144), (1000, 420), (5000, 500),
    (6000, 300), (20000, 1000)])
def test_num_feasible_nodes_to_find_is_upstreams_adaptive_share(nodes: int,
                                                                 wanted: int) -> None:
    assert num_feasible_nodes_to_find(nodes) == wanted


def test_a_large_cluster_is_searched_in_part_from_where_the_last_search_ended() -> None:
    """From 100 nodes on the search stops once enough nodes fit and the next pod's starts
    where it ended (upstream's nextStartNodeIndex), so every node gets its turn; a pod that
    fits nowhere is still filtered against every node, and its message counts them all."""
    nodes = infos(*(make_node(f"n{i:03}", es="1Gi") for i in range(300)))
    first = schedule_pod(make_pod(), nodes)
    assert (first.processed, first.feasible, first.num_nodes) == (144, 144, 300)
    assert set(first.scores) == {f"n{i:03}" for i in range(144)}
    assert first.node_name in first.scores  # all tie: any of them
    second = schedule_pod(make_pod(), nodes, start=first.processed)
    assert set(second.scores) == {f"n{i:03}" for i in range(144, 288)}
    assert second.node_name in second.scores and second.processed == 144
    wrapped = schedule_pod(make_pod(), nodes, start=282)
    assert wrapped.processed == 144 and set(wrapped.scores) == {
        f"n{i:03}" for i in (*range(282, 300), *range(126))}
    nowhere = schedule_pod(make_pod(requests={"ephemeral-storage": "2Gi"}), nodes, start=7)
    assert nowhere.node_name is None and nowhere.processed == 300
    assert nowhere.message.startswith("0/300 nodes are available: 300 Insufficient "
                                      "ephemeral-storage.")
    rejected = [make_node(f"n{i:03}", es="1Gi") for i in range(300)]
    some_fit = infos(*rejected[:250], *(make_node(f"n{i:03}") for i in range(250, 300)))
    partial = schedule_pod(make_pod(requests={"ephemeral-storage": "2Gi"}), some_fit)
    assert partial.processed == 300 and partial.feasible == 50  # fewer fit than wanted
    assert partial.node_name in {f"n{i:03}" for i in range(250, 300)}


def test_truncated_event_message() -> None:
    assert truncate_message("x" * 10, 8) == "xxxx ..."
    assert truncate_message("short") == "short"


# --- the cache: assumed pods take their slot -----------------------------------------------


def test_an_assumed_pod_takes_its_slot_until_forgotten() -> None:
    cache = SchedulerCache()
    cache.set_node(make_node("n1", es="3Gi"))
    first = make_pod("first", requests={"ephemeral-storage": "2Gi"})
    second = make_pod("second", requests={"ephemeral-storage": "2Gi"})
    assert schedule_pod(first, cache.node_infos()).node_name == "n1"
    cache.assume(first, "n1")
    assert cache.is_assumed(first)
    # the binding of `first` is not seen yet, and `second` no longer fits
    assert schedule_pod(second, cache.node_infos()).message.startswith(
        "0/1 nodes are available: 1 Insufficient ephemeral-storage.")
    cache.forget(first)
    assert not cache.is_assumed(first)
    assert schedule_pod(second, cache.node_infos()).node_name == "n1"


def test_the_observed_binding_replaces_the_assumption() -> None:
    cache = SchedulerCache()
    cache.set_node(make_node("n1", es="3Gi"))
    pod = make_pod("p", requests={"ephemeral-storage": "2Gi"})
    cache.assume(pod, "n1")
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}}
    cache.add_pod(bound)
    assert not cache.is_assumed(pod)
    node = cache.node("n1")
    assert node is not None and node.pod_count == 1
    assert node.requested.ephemeral_storage == 2 * 2**30
    cache.forget(pod)  # nothing assumed any more: still counted
    assert node.pod_count == 1
    cache.remove_pod(bound)
    assert node.pod_count == 0 and node.requested.ephemeral_storage == 0


def test_a_status_update_through_the_cache_keeps_the_counted_requests() -> None:
    """The pods watch sends every status write of a bound pod: the cache replaces the pod
    on its node without computing its requests again; a pod seen on another node than the
    one it was counted on moves there."""
    cache = SchedulerCache()
    cache.set_node(make_node("n1"))
    cache.set_node(make_node("n2"))
    bound = make_pod("p", requests={"cpu": "1"}, nodeName="n1")
    cache.add_pod(bound)
    n1, n2 = cache.node("n1"), cache.node("n2")
    assert n1 is not None and n2 is not None
    counted = n1._pods["uid-p"].requested
    running = {**bound, "status": {"phase": "Running"}}
    cache.add_pod(running)
    assert n1._pods["uid-p"].requested is counted
    assert n1.pods() == [running] and n1.requested.milli_cpu == 1000
    moved = {**running, "spec": {**running["spec"], "nodeName": "n2"}}
    cache.add_pod(moved)
    assert (n1.pod_count, n1.requested.milli_cpu) == (0, 0)
    assert (n2.pod_count, n2.requested.milli_cpu) == (1, 1000)


def test_pods_of_a_node_seen_before_the_node_are_counted_when_it_comes() -> None:
    cache = SchedulerCache()
    cache.add_pod(make_pod("early", requests={"cpu": "1"}, nodeName="late"))
    cache.set_node(make_node("late"))
    node = cache.node("late")
    assert node is not None and node.requested.milli_cpu == 1000
    # a node update keeps its pods
    cache.set_node(make_node("late", cpu="8"))
    assert node.pod_count == 1 and node.allocatable.milli_cpu == 8000


@pytest.mark.parametrize("count", [1, 3])
def test_node_infos_are_sorted_by_name(count: int) -> None:
    cache = SchedulerCache()
    for name in ["c", "a", "b"][:count]:
        cache.set_node(make_node(name))
    names = [n.name for n in cache.node_infos()]
    assert names == sorted(names)
    cache.remove_node(names[0])
    assert len(cache.node_infos()) == count - 1

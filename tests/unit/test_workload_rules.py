"""The workload controllers' pure rules: upstream's ranking of pods to delete, the rolling
update's fenceposts and new ReplicaSet size, proportional scaling, the template hash and
revisions, expectations and the work queue; and the label selector helpers."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ephemera.api import labelselector
from ephemera.controllers import deploymentutil as du
from ephemera.controllers.controllerref import adopt_patch, release_patch
from ephemera.controllers.expectations import EXPECTATIONS_TIMEOUT, Expectations
from ephemera.controllers.history import (
    HASH_LABEL,
    daemonset_history_to_delete,
    statefulset_history_to_delete,
)
from ephemera.controllers.podutil import is_available, pods_to_delete
from ephemera.controllers.slowstart import slow_start
from ephemera.controllers.workqueue import WorkQueue

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, *, node: str = "n1", phase: str = "Running", ready: bool = True,
        ready_for: float = 1000, created: float = 2000, restarts: int = 0,
        cost: int | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": "ns", "uid": name,
                          "creationTimestamp": ts(created)}
    if cost is not None:
        md["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": str(cost)}
    return {"metadata": md, "spec": {"nodeName": node},
            "status": {"phase": phase,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": ts(ready_for)}],
                       "containerStatuses": [{"restartCount": restarts}]}}


def names(pods: list[Any]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_pods_to_delete_follow_upstreams_ranking() -> None:
    pods = [pod("old-ready"), pod("unassigned", node=""), pod("pending", phase="Pending"),
            pod("unready", ready=False), pod("cheap", cost=-5),
            pod("young", ready_for=1, created=2), pod("restarted", restarts=3)]
    order = names(pods_to_delete(pods, pods, len(pods) - 1, NOW))
    assert order[:5] == ["unassigned", "pending", "unready", "cheap", "young"]
    assert order[5] == "restarted"
    assert "old-ready" not in order


def test_doubled_up_pods_go_first() -> None:
    alone, crowded = pod("alone", node="n1"), pod("crowded", node="n2")
    others = [pod("x", node="n2"), pod("y", node="n2")]
    assert names(pods_to_delete([alone, crowded], [alone, crowded, *others], 1, NOW)) == [
        "crowded"]


def test_available_counts_min_ready_seconds() -> None:
    assert is_available(pod("p", ready_for=10), 5, NOW)
    assert not is_available(pod("p", ready_for=3), 5, NOW)
    assert not is_available(pod("p", ready=False), 0, NOW)


def deployment(replicas: int, surge: Any = "25%", unavailable: Any = "25%",
               **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "d", "generation": 1},
            "spec": {"replicas": replicas, "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}},
            "status": status}


def rs(name: str, replicas: int, available: int = 0, status_replicas: int | None = None,
       max_replicas: int | None = None) -> dict[str, Any]:
    annotations = {} if max_replicas is None else {du.MAX_REPLICAS_ANNOTATION: str(max_replicas)}
    return {"metadata": {"name": name, "uid": name, "annotations": annotations},
            "spec": {"replicas": replicas},
            "status": {"replicas": replicas if status_replicas is None else status_replicas,
                       "availableReplicas": available}}


@pytest.mark.parametrize(("replicas", "surge", "unavailable", "want"), [
    (10, "25%", "25%", (3, 2)),  # surge rounds up, unavailable down
    (4, 1, 1, (1, 1)),
    (3, 0, 0, (0, 1)),  # both zero would stall: one may be unavailable
    (1, "0%", "25%", (0, 1)),
])
def test_fenceposts(replicas: int, surge: Any, unavailable: Any, want: tuple[int, int]) -> None:
    assert du.resolve_fenceposts(deployment(replicas, surge, unavailable)) == want


def test_new_replica_set_size_counts_pods_not_yet_deleted() -> None:
    d = deployment(10)  # at most 13 pods
    new = rs("new", 0)
    assert du.new_rs_new_replicas(d, [rs("old", 10, 10), new], new) == 3
    # the old set was scaled to 8 but its 10 pods are not all gone yet: no room
    old = rs("old", 8, 10, status_replicas=10)
    assert du.new_rs_new_replicas(d, [old, rs("new", 3)], rs("new", 3)) == 3
    assert du.available_lower_bound([old, rs("new", 3, 3)]) == 11


def test_proportional_scaling_fraction() -> None:
    """A set annotated for 13 pods in all, of 8, when the deployment grows to 20 (+5 surge):
    round(8 * 25 / 13) = 15, so it takes 7 of the 10 to add; shrunk to 4 (+1): 3, 5 fewer."""
    a = rs("a", 8, max_replicas=13)
    assert du.replica_set_fraction(a, deployment(20)) == 7
    assert du.proportion(a, deployment(20), 10, 0) == 7
    assert du.proportion(a, deployment(20), 10, 8) == 2  # only what is left to add
    assert du.proportion(a, deployment(4), -6, 0) == -5
    assert du.proportion(rs("empty", 0), deployment(20), 10, 0) == 0


def test_hash_revision_and_annotations() -> None:
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}
    h = du.compute_hash(template, None)
    assert h == du.compute_hash(template, None) != du.compute_hash(template, 1)
    assert set(h) <= set("bcdfghjklmnpqrstvwxz2456789")
    hashed = {"metadata": {"labels": {"app": "web", "pod-template-hash": h}},
              "spec": {"containers": []}}
    assert du.equal_ignore_hash(template, hashed)
    d = {"metadata": {"annotations": {"team": "a", du.REVISION_ANNOTATION: "9"}},
         "spec": {"replicas": 3, "strategy": {"type": "Recreate"}}}
    target: dict[str, Any] = {"metadata": {"annotations": {du.REVISION_ANNOTATION: "1"}}}
    assert du.set_new_replica_set_annotations(d, target, "4", False)
    assert target["metadata"]["annotations"] == {
        "team": "a", du.REVISION_ANNOTATION: "4", du.REVISION_HISTORY_ANNOTATION: "1",
        du.DESIRED_REPLICAS_ANNOTATION: "3", du.MAX_REPLICAS_ANNOTATION: "3"}


def test_progress_conditions() -> None:
    d = deployment(2)
    d["spec"]["progressDeadlineSeconds"] = 60
    status = {"conditions": [du.new_condition("Progressing", "True", du.RS_UPDATED, "m",
                                              NOW - timedelta(seconds=61))]}
    assert du.deployment_timed_out(d, status, NOW)
    assert not du.deployment_timed_out(d, status, NOW - timedelta(seconds=10))
    complete = {"updatedReplicas": 2, "replicas": 2, "availableReplicas": 2,
                "observedGeneration": 1}
    assert du.deployment_complete(d, complete)
    assert du.deployment_progressing(d, {"updatedReplicas": 1})


def test_expectations() -> None:
    clock = [0.0]
    exp = Expectations(lambda: clock[0])
    assert exp.satisfied("a")
    exp.expect_creations("a", 2)
    exp.creation_observed("a")
    assert not exp.satisfied("a")
    exp.creation_observed("a")
    assert exp.satisfied("a")
    exp.expect_deletions("a", ["ns/p1", "ns/p2"])
    exp.deletion_observed("a", "ns/p1")
    exp.deletion_observed("a", "ns/p1")  # twice counts once
    assert not exp.satisfied("a")
    clock[0] += EXPECTATIONS_TIMEOUT + 1
    assert exp.satisfied("a")  # a lost event does not stall it for ever


def test_expectations_of_creations_and_deletions_at_once_and_when_they_expire() -> None:
    clock = [10.0]
    exp = Expectations(lambda: clock[0])
    assert exp.expires_in("job") is None
    exp.expect("job", 1, ["ns/old"])
    clock[0] += 100
    assert exp.expires_in("job") == EXPECTATIONS_TIMEOUT - 100
    exp.creation_observed("job")
    assert not exp.satisfied("job")  # the deletion is still to be seen
    exp.deletion_observed("job", "ns/old")
    assert exp.satisfied("job")
    assert exp.expires_in("job") is None


async def test_slow_start_doubles_the_batches_and_stops_at_a_failing_one() -> None:
    calls: list[int] = []

    async def call(i: int) -> None:
        calls.append(i)
        if i == 4:
            raise RuntimeError("quota")

    assert await slow_start(3, lambda i: call(i - 10)) == (3, None)
    calls.clear()
    done, error = await slow_start(20, call)
    # batches 1, 2, 4: the third holds index 4 and fails; no fourth batch is made
    assert sorted(calls) == list(range(7))
    assert done == 6 and isinstance(error, RuntimeError)


async def test_work_queue_dedups_and_never_hands_a_key_twice() -> None:
    q = WorkQueue()
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    key = await q.get()
    q.add(key)  # while processing: queued again only after done
    assert len(q) == 1
    other = await q.get()
    assert other != key
    q.done(key)
    assert await asyncio.wait_for(q.get(), 1) == key


def test_label_selector_helpers() -> None:
    sel = {"matchLabels": {"app": "web"},
           "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]}
    assert labelselector.format_label_selector(sel) == "app=web,tier in (a,b)"
    assert labelselector.matches(sel, {"app": "web", "tier": "a"})
    assert not labelselector.matches(sel, {"app": "web"})
    assert labelselector.format_label_selector({}) == "<none>"
    bad = {"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["x"]}]}
    errs = labelselector.validate_label_selector(bad, labelselector.Path("spec", "selector"))
    assert [str(e) for e in errs] == [
        "spec.selector.matchExpressions[0].values: Forbidden: may not be specified when "
        "`operator` is 'Exists' or 'DoesNotExist'"]


def _revision(name: str, number: int, hash_: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {HASH_LABEL: hash_ or name}},
            "revision": number}


def _names(revisions: list[dict[str, Any]]) -> list[str]:
    return [r["metadata"]["name"] for r in revisions]


def test_statefulset_history_keeps_the_live_revisions_and_the_newest_beyond_the_limit() -> None:
    revisions = [_revision(f"db-{n}", n) for n in (3, 1, 5, 2, 4)]
    # live: the current (1) and update (5) revisions and a pod's (3); history: 2 and 4
    live = {"db-1", "db-5", "db-3"}
    assert _names(statefulset_history_to_delete(revisions, live, 1)) == ["db-2"]
    assert _names(statefulset_history_to_delete(revisions, live, 0)) == ["db-2", "db-4"]
    assert statefulset_history_to_delete(revisions, live, 10) == []


def test_daemonset_history_counts_the_old_revisions_but_skips_those_a_pod_has() -> None:
    revisions = [_revision(f"agent-h{n}", n, f"h{n}") for n in (1, 2, 3, 4)]
    # current h4; old: h1, h2, h3 (h1 still on a pod); limit 1: two to kill, h1 skipped
    assert _names(daemonset_history_to_delete(revisions, "h4", {"h1", "h4"}, 1)) == [
        "agent-h2", "agent-h3"]
    assert _names(daemonset_history_to_delete(revisions, "h4", set(), 2)) == ["agent-h1"]
    assert daemonset_history_to_delete(revisions, "h4", set(), 3) == []


def test_a_claim_with_finalizers_adds_them_on_adoption_and_removes_them_on_release() -> None:
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-uid",
           "controller": True, "blockOwnerDeletion": True}
    tracking = ("batch.kubernetes.io/job-tracking",)
    assert adopt_patch(ref, "pod-uid", tracking) == {"metadata": {
        "ownerReferences": [ref], "uid": "pod-uid", "finalizers": list(tracking)}}
    assert release_patch("job-uid", "pod-uid", tracking) == {"metadata": {
        "ownerReferences": [{"$patch": "delete", "uid": "job-uid"}], "uid": "pod-uid",
        "$deleteFromPrimitiveList/finalizers": list(tracking)}}
    assert "finalizers" not in adopt_patch(ref, "pod-uid")["metadata"]

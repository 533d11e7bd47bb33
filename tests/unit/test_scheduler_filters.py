"""The scheduler's filters, score and resource accounting (pure): upstream's reasons, fit
arithmetic with pod-level resources, taints and tolerations, node affinity, declared
features, least-allocated scores."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.api.featuregates import FeatureGates
from ephemera.scheduler.nodeinfo import NodeInfo, assigned_pod_requests, pod_fit_request
from ephemera.scheduler.plugins import (
    FILTERS,
    REASON_AFFINITY,
    REASON_FEATURES,
    REASON_TAINT,
    REASON_UNSCHEDULABLE,
    PodInfo,
    Taint,
    effective_taints,
    has_node_constraints,
    least_allocated_score,
    node_affinity,
    node_declared_features,
    run_filters,
    tolerates,
)

GATES_OFF_ES = FeatureGates({"PodLevelResourcesEphemeralStorage": False})
GATES_OFF_NDF = FeatureGates({"NodeDeclaredFeatures": False})


def make_node(name: str = "n1", *, cpu: str = "4", memory: str = "8Gi",
              es: str | None = "10Gi", pods: str = "110", labels: dict[str, str] | None = None,
              taints: list[dict[str, Any]] | None = None, ready: str | None = "True",
              conditions: list[dict[str, Any]] | None = None, unschedulable: bool = False,
              declared: list[str] | None = None) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    if es is not None:
        allocatable["ephemeral-storage"] = es
    status: dict[str, Any] = {"allocatable": allocatable, "capacity": dict(allocatable),
                              "conditions": list(conditions or [])}
    if ready is not None:
        status["conditions"].append({"type": "Ready", "status": ready})
    if declared is not None:
        status["declaredFeatures"] = declared
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}}, "spec": spec, "status": status}


def make_pod(name: str = "p1", *, requests: dict[str, str] | None = None,
             pod_requests: dict[str, str] | None = None, pod_limits: dict[str, str] | None = None,
             containers: int = 1, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if requests:
        container["resources"] = {"requests": requests}
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{**container, "name": f"c{i}"} for i in range(containers)],
                 **spec},
        "status": {"phase": "Pending"}}
    resources: dict[str, Any] = {}
    if pod_requests:
        resources["requests"] = pod_requests
    if pod_limits:
        resources["limits"] = pod_limits
    if resources:
        body["spec"]["resources"] = resources
    return body


def info(node: dict[str, Any], *pods: dict[str, Any], gates: Any = None) -> NodeInfo:
    node_info = NodeInfo(node, gates)
    for p in pods:
        node_info.add_pod(p["metadata"]["uid"], p)
    return node_info


def reasons(pod: dict[str, Any], node: NodeInfo, gates: Any = None) -> tuple[str, ...] | None:
    status = run_filters(PodInfo.of(pod, gates), node)
    return None if status is None else status.reasons


# --- NodeResourcesFit ---------------------------------------------------------------------


def test_fits_an_empty_node() -> None:
    assert reasons(make_pod(requests={"cpu": "1", "ephemeral-storage": "1Gi"}),
                   info(make_node())) is None


@pytest.mark.parametrize(("requests", "expected"), [
    ({"cpu": "5"}, ("Insufficient cpu",)),
    ({"memory": "9Gi"}, ("Insufficient memory",)),
    ({"ephemeral-storage": "11Gi"}, ("Insufficient ephemeral-storage",)),
    ({"cpu": "5", "memory": "9Gi", "ephemeral-storage": "11Gi"},
     ("Insufficient cpu", "Insufficient memory", "Insufficient ephemeral-storage")),
    ({"example.com/gpu": "1"}, ("Insufficient example.com/gpu",)),
])
def test_insufficient_resources_in_upstream_order(requests: dict[str, str],
                                                  expected: tuple[str, ...]) -> None:
    assert reasons(make_pod(requests=requests), info(make_node())) == expected


def test_requests_of_pods_on_the_node_count() -> None:
    node = info(make_node(es="10Gi"), make_pod("a", requests={"ephemeral-storage": "6Gi"}))
    assert reasons(make_pod(requests={"ephemeral-storage": "4Gi"}), node) is None
    assert reasons(make_pod(requests={"ephemeral-storage": "5Gi"}), node) == (
        "Insufficient ephemeral-storage",)


def test_a_node_without_ephemeral_storage_fits_only_pods_that_request_none() -> None:
    node = info(make_node(es=None))
    assert reasons(make_pod(), node) is None
    assert reasons(make_pod(requests={"ephemeral-storage": "1"}), node) == (
        "Insufficient ephemeral-storage",)


def test_pod_count_comes_first_and_a_zero_request_never_fails() -> None:
    node = info(make_node(pods="1", es="1Gi"), make_pod("a"))
    assert reasons(make_pod(), node) == ("Too many pods",)
    assert reasons(make_pod(requests={"ephemeral-storage": "2Gi"}), node) == (
        "Too many pods", "Insufficient ephemeral-storage")
    assert reasons(make_pod(requests={"ephemeral-storage": "0"}), info(make_node(es="0"))) is None


def test_pod_level_ephemeral_storage_replaces_the_container_aggregate() -> None:
    # two containers of 1Gi each (2Gi) and a pod-level request of 4Gi: the pod needs 4Gi
    pod = make_pod(requests={"ephemeral-storage": "1Gi"}, containers=2,
                   pod_requests={"ephemeral-storage": "4Gi"})
    declaring = make_node(es="3Gi", declared=["PodLevelResourcesEphemeralStorage"])
    assert pod_fit_request(pod).ephemeral_storage == 4 * 2**30
    assert reasons(pod, info(declaring)) == ("Insufficient ephemeral-storage",)
    assert reasons(pod, info({**declaring, "status": {
        **declaring["status"], "allocatable": {"pods": "10", "ephemeral-storage": "4Gi"}}})) is None
    # with the gate off the pod-level value is not supported: the aggregate (2Gi) counts
    assert pod_fit_request(pod, GATES_OFF_ES).ephemeral_storage == 2 * 2**30
    assert reasons(pod, info(declaring, gates=GATES_OFF_ES), GATES_OFF_ES) is None


def test_pod_level_requests_of_pods_on_the_node_count_too() -> None:
    on_node = make_pod("a", requests={"ephemeral-storage": "1Gi"},
                       pod_requests={"ephemeral-storage": "8Gi"})
    requested, _ = assigned_pod_requests(on_node)
    assert requested.ephemeral_storage == 8 * 2**30
    node = info(make_node(es="10Gi"), on_node)
    assert reasons(make_pod(requests={"ephemeral-storage": "3Gi"}), node) == (
        "Insufficient ephemeral-storage",)


def test_overhead_is_added_to_the_request() -> None:
    pod = make_pod(requests={"cpu": "3"}, overhead={"cpu": "1500m"})
    assert pod_fit_request(pod).milli_cpu == 4500
    assert reasons(pod, info(make_node(cpu="4"))) == ("Insufficient cpu",)


def test_removing_a_pod_frees_its_requests() -> None:
    a = make_pod("a", requests={"cpu": "3", "ephemeral-storage": "9Gi"})
    node = info(make_node(), a)
    assert node.requested.milli_cpu == 3000
    node.remove_pod("uid-a")
    assert (node.requested.milli_cpu, node.requested.ephemeral_storage, node.pod_count) == (
        0, 0, 0)


def test_a_status_update_keeps_the_counted_requests_and_a_resize_recounts_them() -> None:
    """A pod's requests are computed again only when what they are computed from changed:
    a new status (phase, conditions, container states) keeps them, the actuated resources
    of a resize change them."""
    pod = make_pod("a", requests={"cpu": "1"})
    node = info(make_node(), pod)
    counted = node._pods["uid-a"].requested
    running = {**pod, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}], "containerStatuses": [
        {"name": "c0", "ready": True, "state": {"running": {}}}]}}
    node.add_pod("uid-a", running)
    assert node._pods["uid-a"].requested is counted
    assert node.pods() == [running] and node.requested.milli_cpu == 1000
    resized = {**running, "spec": {**running["spec"], "containers": [
        {"name": "c0", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}]},
        "status": {**running["status"], "containerStatuses": [
            {"name": "c0", "allocatedResources": {"cpu": "2"},
             "resources": {"requests": {"cpu": "2"}}}]}}
    node.add_pod("uid-a", resized)
    assert node.requested.milli_cpu == 2000 and node.pod_count == 1
    shrinking = {**resized, "spec": running["spec"]}  # spec back to 1, actuated still 2
    node.add_pod("uid-a", shrinking)
    assert node.requested.milli_cpu == 2000
    done = {**shrinking, "status": {"phase": "Running", "containerStatuses": [
        {"name": "c0", "allocatedResources": {"cpu": "1"},
         "resources": {"requests": {"cpu": "1"}}}]}}
    node.add_pod("uid-a", done)
    assert node.requested.milli_cpu == 1000


# --- taints, unschedulable, readiness -----------------------------------------------------


@pytest.mark.parametrize(("toleration", "taint", "expected"), [
    ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
     Taint("k", "v", "NoSchedule"), True),
    ({"key": "k", "value": "v"}, Taint("k", "v", "NoExecute"), True),  # empty effect: any
    ({"key": "k", "value": "other"}, Taint("k", "v", "NoSchedule"), False),
    ({"key": "k", "operator": "Exists"}, Taint("k", "anything", "NoSchedule"), True),
    ({"operator": "Exists"}, Taint("any-key", "x", "NoExecute"), True),  # tolerates all
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"},
     Taint("k", "", "NoSchedule"), False),
    ({"key": "other", "operator": "Exists"}, Taint("k", "", "NoSchedule"), False),
])
def test_toleration_matching(toleration: dict[str, Any], taint: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_untolerated_taint_filters_the_node() -> None:
    node = info(make_node(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]))
    assert reasons(make_pod(), node) == (REASON_TAINT,)
    tolerant = make_pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                      "effect": "NoSchedule"}])
    assert reasons(tolerant, node) is None


def test_a_node_update_changes_the_taints_its_cached_filters_see() -> None:
    """The node's effective taints are derived once per node object: a new object (a taint
    added, the node gone NotReady, then back) is judged by its own taints."""
    node = info(make_node())
    assert reasons(make_pod(), node) is None
    node.set_node(make_node(taints=[{"key": "dedicated", "effect": "NoSchedule"}]))
    assert reasons(make_pod(), node) == (REASON_TAINT,)
    node.set_node(make_node(ready="Unknown"))
    assert reasons(make_pod(), node) == (REASON_TAINT,)
    node.set_node(make_node())
    assert reasons(make_pod(), node) is None


def test_prefer_no_schedule_does_not_filter() -> None:
    node = info(make_node(taints=[{"key": "k", "effect": "PreferNoSchedule"}]))
    assert reasons(make_pod(), node) is None


@pytest.mark.parametrize(("ready", "taint_key"), [
    ("False", "node.kubernetes.io/not-ready"),
    ("Unknown", "node.kubernetes.io/unreachable"),
])
def test_not_ready_nodes_carry_the_condition_taints(ready: str, taint_key: str) -> None:
    node = make_node(ready=ready)
    assert Taint(taint_key, "", "NoSchedule") in effective_taints(node)
    assert reasons(make_pod(), info(node)) == (REASON_TAINT,)
    tolerant = make_pod(tolerations=[{"key": taint_key, "operator": "Exists",
                                      "effect": "NoSchedule"}])
    assert reasons(tolerant, info(node)) is None


def test_disk_pressure_taints_and_a_node_without_ready_condition_does_not() -> None:
    pressured = make_node(conditions=[{"type": "DiskPressure", "status": "True"}])
    assert reasons(make_pod(), info(pressured)) == (REASON_TAINT,)
    assert effective_taints(make_node(ready=None)) == []


def test_unschedulable_node() -> None:
    node = info(make_node(unschedulable=True))
    assert reasons(make_pod(), node) == (REASON_UNSCHEDULABLE,)
    tolerant = make_pod(tolerations=[{"key": "node.kubernetes.io/unschedulable",
                                      "operator": "Exists", "effect": "NoSchedule"}])
    assert reasons(tolerant, node) is None


def test_a_cordoned_node_with_its_unschedulable_taint() -> None:
    """As upstream's NodeUnschedulable runs before TaintToleration: a cordoned node carrying
    the node lifecycle controller's taint says `node(s) were unschedulable`; a pod tolerating
    the taint may land."""
    node = info(make_node(unschedulable=True, taints=[
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
         "timeAdded": "2026-01-01T00:00:00Z"}]))
    assert reasons(make_pod(), node) == (REASON_UNSCHEDULABLE,)
    tolerant = make_pod(tolerations=[{"key": "node.kubernetes.io/unschedulable",
                                      "operator": "Exists", "effect": "NoSchedule"}])
    assert reasons(tolerant, node) is None


def test_filters_stop_at_the_first_rejection() -> None:
    # unschedulable and too small: only NodeUnschedulable's reason is reported
    node = info(make_node(unschedulable=True, es="1Gi"))
    assert reasons(make_pod(requests={"ephemeral-storage": "2Gi"}), node) == (
        REASON_UNSCHEDULABLE,)


# --- node affinity ------------------------------------------------------------------------


def test_node_selector() -> None:
    node = info(make_node(labels={"disk": "ssd", "zone": "a"}))
    assert reasons(make_pod(nodeSelector={"disk": "ssd"}), node) is None
    assert reasons(make_pod(nodeSelector={"disk": "hdd"}), node) == (REASON_AFFINITY,)
    assert reasons(make_pod(nodeSelector={"gpu": "yes"}), node) == (REASON_AFFINITY,)


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(("term", "fits"), [
    ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}, True),
    ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, False),
    ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, True),
    ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, False),
    ({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}, True),
    ({"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["8"]}]}, False),
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, True),
    ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}, False),
    ({}, False),  # an empty term matches nothing
])
def test_required_node_affinity(term: dict[str, Any], fits: bool) -> None:
    node = info(make_node("n1", labels={"zone": "a", "cores": "16"}))
    got = reasons(make_pod(affinity=_required(term)), node)
    assert got == (None if fits else (REASON_AFFINITY,))


def test_node_affinity_terms_are_ored() -> None:
    node = info(make_node(labels={"zone": "b"}))
    pod = make_pod(affinity=_required(
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}))
    assert reasons(pod, node) is None


def test_a_node_update_changes_the_labels_its_cached_filters_see() -> None:
    """The node's labels are derived once per node object: a relabelled node is matched by
    its new labels."""
    node = info(make_node(labels={"disk": "ssd"}))
    pod = make_pod(nodeSelector={"disk": "ssd"})
    assert reasons(pod, node) is None
    node.set_node(make_node(labels={"disk": "hdd"}))
    assert reasons(pod, node) == (REASON_AFFINITY,)
    node.set_node(make_node(labels={"disk": "ssd"}))
    assert reasons(pod, node) is None


@pytest.mark.parametrize(("spec", "constrained"), [
    ({}, False),
    ({"nodeSelector": {}}, False),
    ({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}},
     False),
    ({"nodeSelector": {"disk": "ssd"}}, True),
    ({"affinity": _required()}, True),  # no terms at all: matches nothing, as upstream
])
def test_has_node_constraints(spec: dict[str, Any], constrained: bool) -> None:
    assert has_node_constraints(make_pod(**spec)) is constrained
    node = info(make_node(labels={"disk": "hdd"}))
    assert reasons(make_pod(**spec), node) == ((REASON_AFFINITY,) if constrained else None)


def test_pre_filter_leaves_out_the_filters_that_cannot_reject() -> None:
    """upstream's PreFilter `Skip`: NodeAffinity without node constraints,
    NodeDeclaredFeatures without a required feature; the others always run, in order."""
    assert PodInfo.of(make_pod()).filters == tuple(
        f for f in FILTERS if f not in (node_affinity, node_declared_features))
    constrained = make_pod(nodeSelector={"disk": "ssd"},
                           pod_requests={"ephemeral-storage": "1Gi"})
    assert PodInfo.of(constrained).filters == tuple(FILTERS)
    assert node_declared_features not in PodInfo.of(constrained, GATES_OFF_NDF).filters


# --- declared features --------------------------------------------------------------------


def test_pod_level_ephemeral_storage_needs_the_declared_feature() -> None:
    pod = make_pod(pod_requests={"ephemeral-storage": "1Gi"})
    assert PodInfo.of(pod).required_features == ("PodLevelResourcesEphemeralStorage",)
    assert reasons(pod, info(make_node(declared=[]))) == (REASON_FEATURES,)
    assert reasons(pod, info(make_node())) == (REASON_FEATURES,)  # nothing declared
    assert reasons(pod, info(make_node(declared=["PodLevelResourcesEphemeralStorage"]))) is None
    # a limit alone is enough to need it
    limited = make_pod(pod_limits={"ephemeral-storage": "1Gi"})
    assert reasons(limited, info(make_node(declared=[]))) == (REASON_FEATURES,)


def test_declared_features_are_not_checked_with_the_gate_off_or_without_pod_level_es() -> None:
    pod = make_pod(pod_requests={"ephemeral-storage": "1Gi"})
    assert PodInfo.of(pod, GATES_OFF_NDF).required_features == ()
    assert reasons(pod, info(make_node(declared=[])), GATES_OFF_NDF) is None
    assert reasons(make_pod(pod_requests={"cpu": "1"}), info(make_node(declared=[]))) is None
    assert reasons(make_pod(requests={"ephemeral-storage": "1Gi"}),
                   info(make_node(declared=[]))) is None


# --- least allocated ------------------------------------------------------------------------


def test_least_allocated_score_uses_upstream_arithmetic() -> None:
    # 4 cpu, 8Gi: the pod asks 1 cpu and 2Gi; node already has 1 cpu and 2Gi requested
    on_node = make_pod("a", requests={"cpu": "1", "memory": "2Gi"})
    node = info(make_node(cpu="4", memory="8Gi"), on_node)
    pod = PodInfo.of(make_pod(requests={"cpu": "1", "memory": "2Gi"}))
    # cpu: (4000-2000)*100/4000 = 50; memory: (8Gi-4Gi)*100/8Gi = 50
    assert least_allocated_score(pod, node) == 50
    # an empty node scores higher
    assert least_allocated_score(pod, info(make_node(cpu="4", memory="8Gi"))) == 75


def test_least_allocated_counts_unrequested_containers_at_the_defaults() -> None:
    # no requests: 100m cpu and 200Mi memory count for scoring (not for fit)
    pod = PodInfo.of(make_pod())
    assert (pod.score_request.milli_cpu, pod.score_request.memory) == (100, 200 * 2**20)
    assert pod.fit_request.is_zero()
    node = info(make_node(cpu="1", memory="2000Mi"))
    # cpu (1000-100)*100//1000 = 90; memory (2000-200)*100//2000 = 90
    assert least_allocated_score(pod, node) == 90


def test_least_allocated_is_zero_when_overcommitted() -> None:
    pod = PodInfo.of(make_pod(requests={"cpu": "8", "memory": "16Gi"}))
    assert least_allocated_score(pod, info(make_node(cpu="4", memory="8Gi"))) == 0


def test_a_node_keeps_its_score_until_it_or_its_pods_change() -> None:
    pod = PodInfo.of(make_pod(requests={"cpu": "1", "memory": "2Gi"}))
    node = info(make_node(cpu="4", memory="8Gi"))
    assert least_allocated_score(pod, node) == 75
    assert node.scores == {(1000, 2 * 2**30): 75}
    node.add_pod("uid-a", make_pod("a", requests={"cpu": "1", "memory": "2Gi"}))
    assert least_allocated_score(pod, node) == 50
    node.set_node(make_node(cpu="8", memory="16Gi"))
    assert least_allocated_score(pod, node) == 75  # (8-2)/8 and (16-4)/16
    node.remove_pod("uid-a")
    assert least_allocated_score(pod, node) == 87
    # another pod size is scored for itself: cpu 0, memory (16Gi - 200Mi) * 100 // 16Gi = 98
    assert least_allocated_score(PodInfo.of(make_pod(requests={"cpu": "8"})), node) == 49
    assert len(node.scores) == 2

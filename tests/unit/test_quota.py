"""ResourceQuota rules (`ephemera.pods.quota`): pod usage (pod-level aware, terminal pods),
the admission check with upstream's exact messages (reference/k8s-semantics.md section 7.1),
scopes, the controller's recomputation and the ResourceQuota object's validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ephemera.api.featuregates import (
    POD_LEVEL_RESOURCES,
    POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE,
    FeatureGates,
)
from ephemera.api.meta import rfc3339
from ephemera.api.quantity import parse_quantity
from ephemera.pods.quota import (
    CREATE,
    UPDATE,
    Charge,
    ObjectCountEvaluator,
    PodEvaluator,
    QuotaRejected,
    charge,
    compute_used,
    counted_kinds,
    plan_charges,
    release,
    validate_resource_quota,
)

ON = FeatureGates()
ES_OFF = FeatureGates({POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE: False})
PLR_OFF = FeatureGates({POD_LEVEL_RESOURCES: False})


def ctr(name: str, requests: dict[str, str] | None = None,
        limits: dict[str, str] | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": name, "image": "busybox", "resources": res}


def pod(*containers: dict[str, Any], name: str = "p1", phase: str = "Pending",
        resources: dict[str, Any] | None = None, rv: str = "",
        **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": name, "namespace": "default"},
                            "spec": {"containers": list(containers), **spec},
                            "status": {"phase": phase}}
    if resources is not None:
        body["spec"]["resources"] = resources
    if rv:
        body["metadata"]["resourceVersion"] = rv
    return body


def rq(name: str, hard: dict[str, str], used: dict[str, str] | None = None,
       **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"hard": hard}
    if used is not None:
        status["used"] = used
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": "7"},
            "spec": {"hard": hard, **spec}, "status": status}


def usage(p: dict[str, Any], gates: FeatureGates = ON, now: datetime | None = None
          ) -> dict[str, str]:
    return {k: str(v) for k, v in sorted(PodEvaluator(gates, now).usage(p).items())}


def rejected(quotas: list[dict[str, Any]], p: dict[str, Any], gates: FeatureGates = ON) -> str:
    with pytest.raises(QuotaRejected) as info:
        plan_charges(quotas, PodEvaluator(gates), CREATE, p)
    return str(info.value)


# --- usage ----------------------------------------------------------------------------------


def test_pod_usage_of_containers() -> None:
    p = pod(ctr("a", requests={"cpu": "250m", "memory": "64Mi", "ephemeral-storage": "1Gi"},
                limits={"cpu": "500m", "memory": "128Mi", "ephemeral-storage": "2Gi"}),
            ctr("b", requests={"cpu": "250m"}))
    assert usage(p) == {
        "count/pods": "1", "cpu": "500m", "ephemeral-storage": "1Gi",
        "limits.cpu": "500m", "limits.ephemeral-storage": "2Gi", "limits.memory": "128Mi",
        "memory": "64Mi", "pods": "1", "requests.cpu": "500m",
        "requests.ephemeral-storage": "1Gi", "requests.memory": "64Mi"}


def test_pod_level_ephemeral_storage_replaces_the_aggregate_kep_6386() -> None:
    p = pod(ctr("a", requests={"ephemeral-storage": "1Gi"}, limits={"ephemeral-storage": "1Gi"}),
            ctr("b", requests={"ephemeral-storage": "1Gi"}, limits={"ephemeral-storage": "1Gi"}),
            resources={"requests": {"ephemeral-storage": "3Gi"},
                       "limits": {"ephemeral-storage": "5Gi"}})
    with_gate = usage(p)
    assert with_gate["requests.ephemeral-storage"] == "3Gi"
    assert with_gate["ephemeral-storage"] == "3Gi"
    assert with_gate["limits.ephemeral-storage"] == "5Gi"
    without = usage(p, ES_OFF)  # falls back to the container aggregate
    assert without["requests.ephemeral-storage"] == "2Gi"
    assert without["limits.ephemeral-storage"] == "2Gi"


def test_overhead_is_charged() -> None:
    p = pod(ctr("a", requests={"cpu": "1"}, limits={"cpu": "1"}), overhead={"cpu": "250m"})
    assert usage(p)["requests.cpu"] == "1250m"
    assert usage(p)["limits.cpu"] == "1250m"


def test_pod_without_ephemeral_storage_limit_charges_no_limit() -> None:
    assert "limits.ephemeral-storage" not in usage(pod(ctr("a")))


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pods_are_counted_but_not_charged(phase: str) -> None:
    p = pod(ctr("a", requests={"cpu": "1"}), phase=phase)
    assert usage(p) == {"count/pods": "1"}


def test_pod_past_its_deletion_grace_period_is_not_charged() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    p = pod(ctr("a", requests={"cpu": "1"}))
    p["metadata"]["deletionTimestamp"] = rfc3339(start)
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    assert usage(p, now=start + timedelta(seconds=10))["requests.cpu"] == "1"
    assert usage(p, now=start + timedelta(seconds=31)) == {"count/pods": "1"}


# --- admission ------------------------------------------------------------------------------


def test_exceeded_quota_message() -> None:
    quotas = [rq("q1", {"requests.ephemeral-storage": "10Gi"},
                 {"requests.ephemeral-storage": "9Gi"})]
    p = pod(ctr("a", requests={"ephemeral-storage": "2Gi"}))
    assert rejected(quotas, p) == (
        "exceeded quota: q1, requested: requests.ephemeral-storage=2Gi, used: "
        "requests.ephemeral-storage=9Gi, limited: requests.ephemeral-storage=10Gi")


def test_exceeded_lists_only_the_exceeded_resources_sorted() -> None:
    quotas = [rq("q1", {"pods": "10", "requests.memory": "1Gi", "limits.memory": "1Gi",
                        "count/pods": "1"},
                 {"pods": "0", "requests.memory": "0", "limits.memory": "1Gi",
                  "count/pods": "1"})]
    p = pod(ctr("a", requests={"memory": "64Mi"}, limits={"memory": "64Mi"}))
    assert rejected(quotas, p) == (
        "exceeded quota: q1, requested: count/pods=1,limits.memory=64Mi, used: "
        "count/pods=1,limits.memory=1Gi, limited: count/pods=1,limits.memory=1Gi")


def test_pods_count_quota() -> None:
    quotas = [rq("pods", {"pods": "2"}, {"pods": "2"})]
    assert rejected(quotas, pod(ctr("a"))) == (
        "exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2")


def test_first_exceeded_quota_in_order_is_reported() -> None:
    quotas = [rq("a", {"pods": "5"}, {"pods": "1"}), rq("b", {"pods": "1"}, {"pods": "1"}),
              rq("c", {"pods": "1"}, {"pods": "1"})]
    assert rejected(quotas, pod(ctr("a"))).startswith("exceeded quota: b,")


def test_missing_container_values_message() -> None:
    quotas = [rq("compute", {"limits.cpu": "4", "requests.memory": "1Gi"},
                 {"limits.cpu": "0", "requests.memory": "0"})]
    p = pod(ctr("c1"), ctr("c2", limits={"cpu": "1"}))
    assert rejected(quotas, p) == (
        "failed quota: compute: must specify limits.cpu for: c1; requests.memory for: c1,c2")


def test_init_containers_must_specify_too() -> None:
    quotas = [rq("compute", {"cpu": "4"}, {"cpu": "0"})]
    p = pod(ctr("app", requests={"cpu": "1"}), initContainers=[ctr("init")])
    assert rejected(quotas, p) == "failed quota: compute: must specify cpu for: init"


def test_ephemeral_storage_is_not_required_of_containers() -> None:
    quotas = [rq("es", {"limits.ephemeral-storage": "4Gi", "requests.ephemeral-storage": "4Gi"},
                 {"limits.ephemeral-storage": "0", "requests.ephemeral-storage": "0"})]
    charges = plan_charges(quotas, PodEvaluator(ON), CREATE, pod(ctr("a")))
    assert charges == []  # nothing to charge: no ephemeral-storage asked for


def test_pod_level_resources_lift_the_container_requirement() -> None:
    quotas = [rq("compute", {"requests.cpu": "4", "limits.cpu": "4"},
                 {"requests.cpu": "0", "limits.cpu": "0"})]
    p = pod(ctr("a"), ctr("b"), resources={"requests": {"cpu": "1"}, "limits": {"cpu": "2"}})
    charges = plan_charges(quotas, PodEvaluator(ON), CREATE, p)
    assert charges == [Charge("compute", {"requests.cpu": parse_quantity("1"),
                                          "limits.cpu": parse_quantity("2")})]
    assert rejected(quotas, p, PLR_OFF).startswith("failed quota: compute: must specify")


def test_status_unknown_before_the_controller_ran() -> None:
    quotas = [rq("q1", {"pods": "5", "requests.cpu": "2"}, {"pods": "0"})]
    assert rejected(quotas, pod(ctr("a", requests={"cpu": "1"}))) == (
        "status unknown for quota: q1, resources: pods,requests.cpu")


def test_quota_without_status_hard_matches_nothing() -> None:
    quota = rq("q1", {"pods": "0"})
    del quota["status"]
    assert plan_charges([quota], PodEvaluator(ON), CREATE, pod(ctr("a"))) == []


def test_charges_only_the_hard_resources_of_each_quota() -> None:
    quotas = [rq("a", {"pods": "5"}, {"pods": "1"}),
              rq("b", {"requests.memory": "1Gi", "configmaps": "3"},
                 {"requests.memory": "0", "configmaps": "0"}),
              rq("c", {"configmaps": "3"}, {"configmaps": "0"})]
    p = pod(ctr("a", requests={"memory": "256Mi"}))
    charges = plan_charges(quotas, PodEvaluator(ON), CREATE, p)
    assert charges == [Charge("a", {"pods": parse_quantity("1")}),
                       Charge("b", {"requests.memory": parse_quantity("256Mi")})]
    assert charge(quotas[1], charges[1]) == {"configmaps": "0", "requests.memory": "256Mi"}


def test_dynamic_update_charges_the_delta() -> None:
    old = pod(ctr("a", requests={"cpu": "500m"}), rv="10", phase="Running")
    new = pod(ctr("a", requests={"cpu": "500m"}), ctr("b", requests={"cpu": "250m"}),
              rv="10", phase="Running")
    quotas = [rq("q", {"requests.cpu": "1", "pods": "3"},
                 {"requests.cpu": "500m", "pods": "1"})]
    charges = plan_charges(quotas, PodEvaluator(ON), UPDATE, new, old, "dynamic")
    assert charges == [Charge("q", {"requests.cpu": parse_quantity("250m")})]
    # A removal frees nothing at admission (the controller releases it).
    assert plan_charges(quotas, PodEvaluator(ON), UPDATE, old, new, "dynamic") == []
    quotas[0]["status"]["used"]["requests.cpu"] = "900m"
    with pytest.raises(QuotaRejected) as info:
        plan_charges(quotas, PodEvaluator(ON), UPDATE, new, old, "dynamic")
    assert str(info.value) == ("exceeded quota: q, requested: requests.cpu=250m, used: "
                               "requests.cpu=900m, limited: requests.cpu=1")


def test_plain_updates_and_other_subresources_are_not_charged() -> None:
    quotas = [rq("q", {"pods": "0"}, {"pods": "0"})]
    p = pod(ctr("a"), rv="3")
    evaluator = PodEvaluator(ON)
    assert plan_charges(quotas, evaluator, UPDATE, p, p, "") == []
    assert plan_charges(quotas, evaluator, UPDATE, p, p, "status") == []


def test_release_takes_back_a_charge_not_below_zero() -> None:
    quota = rq("q", {"pods": "5", "requests.cpu": "2"}, {"pods": "1", "requests.cpu": "1"})
    item = Charge("q", {"pods": parse_quantity("2"), "requests.cpu": parse_quantity("500m")})
    assert release(quota, item) == {"pods": "0", "requests.cpu": "500m"}


def test_object_count_evaluator() -> None:
    evaluator = ObjectCountEvaluator("configmaps")
    quotas = [rq("q", {"count/configmaps": "1", "configmaps": "5"},
                 {"count/configmaps": "1", "configmaps": "1"})]
    with pytest.raises(QuotaRejected) as info:
        plan_charges(quotas, evaluator, CREATE, {"metadata": {"name": "cm"}})
    assert str(info.value) == ("exceeded quota: q, requested: count/configmaps=1, used: "
                               "count/configmaps=1, limited: count/configmaps=1")


# --- scopes ---------------------------------------------------------------------------------

SCOPE_CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("BestEffort matches a pod without requests", {"scopes": ["BestEffort"]},
     pod(ctr("a")), True),
    ("BestEffort skips a burstable pod", {"scopes": ["BestEffort"]},
     pod(ctr("a", requests={"cpu": "1"})), False),
    ("NotBestEffort", {"scopes": ["NotBestEffort"]}, pod(ctr("a", requests={"cpu": "1"})),
     True),
    ("Terminating", {"scopes": ["Terminating"]}, pod(ctr("a"), activeDeadlineSeconds=60), True),
    ("NotTerminating skips a pod with a deadline", {"scopes": ["NotTerminating"]},
     pod(ctr("a"), activeDeadlineSeconds=60), False),
    ("PriorityClass In",
     {"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                              "values": ["high"]}]}},
     pod(ctr("a"), priorityClassName="high"), True),
    ("PriorityClass NotIn",
     {"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass",
                                              "operator": "NotIn", "values": ["high"]}]}},
     pod(ctr("a"), priorityClassName="high"), False),
    ("PriorityClass Exists without a class",
     {"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass",
                                              "operator": "Exists"}]}},
     pod(ctr("a")), False),
]


@pytest.mark.parametrize(("spec", "p", "matches"), [c[1:] for c in SCOPE_CASES],
                         ids=[c[0] for c in SCOPE_CASES])
def test_scopes(spec: dict[str, Any], p: dict[str, Any], matches: bool) -> None:
    quotas = [rq("q", {"pods": "0"}, {"pods": "0"}, **spec)]
    if matches:
        assert rejected(quotas, p).startswith("exceeded quota: q,")
    else:
        assert plan_charges(quotas, PodEvaluator(ON), CREATE, p) == []


# --- the controller's recomputation ---------------------------------------------------------


def test_compute_used_sums_live_pods_and_fills_zeros() -> None:
    quota = rq("q", {"pods": "10", "count/pods": "10", "requests.cpu": "4",
                     "limits.ephemeral-storage": "10Gi", "configmaps": "3"},
               {"pods": "7", "configmaps": "2"})
    pods = [pod(ctr("a", requests={"cpu": "500m"}), name="a"),
            pod(ctr("b", requests={"cpu": "250m"}), name="b"),
            pod(ctr("c", requests={"cpu": "1"}), name="c", phase="Succeeded")]
    status = compute_used(quota, {("", "pods"): pods, ("", "configmaps"): [{}]}, ON)
    assert status == {
        "hard": {"configmaps": "3", "count/pods": "10", "limits.ephemeral-storage": "10Gi",
                 "pods": "10", "requests.cpu": "4"},
        "used": {"configmaps": "1", "count/pods": "3", "limits.ephemeral-storage": "0",
                 "pods": "2", "requests.cpu": "750m"}}


def test_compute_used_keeps_what_it_cannot_count_and_drops_what_is_no_longer_hard() -> None:
    quota = rq("q", {"secrets": "3", "pods": "1"}, {"secrets": "2", "services": "4"})
    status = compute_used(quota, {("", "pods"): []}, ON)
    assert status["used"] == {"pods": "0", "secrets": "2"}


def test_compute_used_respects_scopes() -> None:
    quota = rq("q", {"pods": "10"}, scopes=["BestEffort"])
    pods = [pod(ctr("a"), name="a"), pod(ctr("b", requests={"cpu": "1"}), name="b")]
    assert compute_used(quota, {("", "pods"): pods}, ON)["used"] == {"pods": "1"}


def test_counted_kinds() -> None:
    quota = rq("q", {"requests.cpu": "1", "count/configmaps": "2", "secrets": "1",
                     "count/leases.coordination.k8s.io": "3"})
    assert counted_kinds(quota) == [("", "pods"), ("", "configmaps"), ("", "secrets"),
                                    ("coordination.k8s.io", "leases")]


# --- the ResourceQuota object ---------------------------------------------------------------

QUOTA_VALIDATION: list[tuple[str, dict[str, Any], list[str]]] = [
    ("valid", {"hard": {"pods": "10", "requests.ephemeral-storage": "10Gi",
                        "count/pods": "3", "limits.cpu": "2"}}, []),
    ("negative", {"hard": {"requests.cpu": "-1"}},
     ['spec.hard[requests.cpu]: Invalid value: "-1": must be greater than or equal to 0']),
    ("not an integer", {"hard": {"pods": "1500m"}},
     ['spec.hard[pods]: Invalid value: "1500m": must be an integer']),
    ("count needs an integer", {"hard": {"count/pods": "1.5"}},
     ['spec.hard[count/pods]: Invalid value: "1500m": must be an integer']),
    ("unknown name", {"hard": {"foo": "1"}},
     ['spec.hard[foo]: Invalid value: "foo": must be a standard resource type or fully '
      "qualified",
      'spec.hard[foo]: Invalid value: "foo": must be a standard resource for quota']),
    ("not a quota resource", {"hard": {"storage": "1"}},
     ['spec.hard[storage]: Invalid value: "storage": must be a standard resource for quota']),
    ("conflicting scopes", {"hard": {"pods": "1"}, "scopes": ["BestEffort", "NotBestEffort"]},
     ['spec.scopes: Invalid value: []core.ResourceQuotaScope{"BestEffort", "NotBestEffort"}: '
      "conflicting scopes"]),
    ("scope not valid for the resource",
     {"hard": {"requests.ephemeral-storage": "1Gi"}, "scopes": ["Terminating"]},
     ['spec.scopes: Invalid value: []core.ResourceQuotaScope{"Terminating"}: unsupported scope '
      "applied to resource"]),
    ("unknown scope", {"hard": {"pods": "1"}, "scopes": ["Sometimes"]},
     ['spec.scopes: Invalid value: []core.ResourceQuotaScope{"Sometimes"}: unsupported scope']),
    ("selector operator",
     {"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [
         {"scopeName": "BestEffort", "operator": "In", "values": ["x"]}]}},
     ['spec.scopeSelector.matchExpressions.operator: Invalid value: "In": must be \'Exist\' '
      "when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, "
      "ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or "
      "ResourceQuotaScopeCrossNamespacePodAffinity"]),
    ("selector values required",
     {"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [
         {"scopeName": "PriorityClass", "operator": "In"}]}},
     ["spec.scopeSelector.matchExpressions.values: Required value: must be at least one value "
      "when `operator` is 'In' or 'NotIn' for scope selector"]),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in QUOTA_VALIDATION],
                         ids=[c[0] for c in QUOTA_VALIDATION])
def test_validate_resource_quota(spec: dict[str, Any], expected: list[str]) -> None:
    obj = {"metadata": {"name": "q"}, "spec": spec}
    assert [str(e) for e in validate_resource_quota(obj)] == expected

"""Pod resource helpers: the sidecar formula, pod-level overrides, overhead, QoS.

Cases come from upstream's component-helpers `helpers_test.go` (TestPodRequestsAndLimits,
TestPodRequestsAndLimitsWithoutOverhead, TestPodResourceRequests), the reference's worked
examples (reference/k8s-semantics.md sections 3.1-3.5) and KEP-6386.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ephemera.api.featuregates import (
    POD_LEVEL_RESOURCES,
    POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE,
    FeatureGates,
)
from ephemera.api.quantity import Quantity, QuantityFormat, parse_quantity
from ephemera.pods.resources import (
    QOS_BEST_EFFORT,
    QOS_BURSTABLE,
    QOS_GUARANTEED,
    aggregate_container_limits,
    aggregate_container_requests,
    all_containers_have_limit_for_resource,
    compute_qos_class,
    container_requests,
    is_overcommit_allowed,
    is_pod_level_limits_set,
    is_pod_level_requests_set,
    is_pod_level_resources_set,
    is_supported_pod_level_resource,
    pod_limits,
    pod_requests,
    qos_class,
    resource_list,
    resource_request_quantity,
    supported_pod_level_resources,
)

ES_OFF = FeatureGates({POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE: False})
PLR_OFF = FeatureGates({POD_LEVEL_RESOURCES: False})


def ctr(
    name: str,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    *,
    sidecar: bool = False,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = dict(requests)
    if limits is not None:
        resources["limits"] = dict(limits)
    container: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def pod(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    *,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    overhead: Mapping[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    if requests is not None or limits is not None:
        spec["resources"] = {}
        if requests is not None:
            spec["resources"]["requests"] = dict(requests)
        if limits is not None:
            spec["resources"]["limits"] = dict(limits)
    if overhead is not None:
        spec["overhead"] = dict(overhead)
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "spec": spec}
    if status is not None:
        out["status"] = status
    return out


def strings(resources: Mapping[str, Quantity]) -> dict[str, str]:
    return {name: str(q) for name, q in resources.items()}


def values(resources: Mapping[str, Quantity]) -> dict[str, Quantity]:
    return dict(resources)


def q(text: str) -> Quantity:
    return parse_quantity(text)


def ql(raw: Mapping[str, str]) -> dict[str, Quantity]:
    return {name: q(text) for name, text in raw.items()}


# --- supported pod-level resources ------------------------------------------------------------


def test_supported_pod_level_resources_follow_the_gates() -> None:
    def listed(gates: Mapping[str, bool] | None) -> str:
        return ", ".join(f'"{n}"' for n in sorted(supported_pod_level_resources(gates)))

    # The list validation prints in `Unsupported value: ...: supported values: ...`.
    assert listed(ES_OFF) == '"cpu", "hugepages-", "memory"'
    assert listed(None) == '"cpu", "ephemeral-storage", "hugepages-", "memory"'
    assert listed({}) == listed(None)  # a gate missing from the mapping takes its default
    assert is_supported_pod_level_resource("hugepages-2Mi", ES_OFF)
    assert is_supported_pod_level_resource("ephemeral-storage")
    assert not is_supported_pod_level_resource("ephemeral-storage", ES_OFF)
    assert not is_supported_pod_level_resource("ephemeral-storage", PLR_OFF)
    assert not is_supported_pod_level_resource("nvidia.com/gpu")
    assert not is_supported_pod_level_resource("storage")


def test_pod_level_set_ignores_unsupported_keys() -> None:
    p = pod([ctr("c")], requests={"nvidia.com/gpu": "1"}, limits={"ephemeral-storage": "1Gi"})
    assert not is_pod_level_requests_set(p)
    assert is_pod_level_limits_set(p)
    assert is_pod_level_resources_set(p)
    assert not is_pod_level_resources_set(p, ES_OFF)
    assert not is_pod_level_resources_set(pod([ctr("c")]))


def test_overcommit_and_all_containers_have_limit() -> None:
    assert is_overcommit_allowed("cpu") and is_overcommit_allowed("ephemeral-storage")
    assert is_overcommit_allowed("kubernetes.io/foo")
    assert not is_overcommit_allowed("hugepages-2Mi")
    assert not is_overcommit_allowed("example.com/dongle")
    both = pod([ctr("a", limits={"ephemeral-storage": "4Gi"})],
               [ctr("i", limits={"ephemeral-storage": "1Gi"})])  # fmt: skip
    assert all_containers_have_limit_for_resource(both, "ephemeral-storage")
    one = pod([ctr("a", limits={"ephemeral-storage": "4Gi"}), ctr("b")])
    assert not all_containers_have_limit_for_resource(one, "ephemeral-storage")


# --- upstream TestPodRequestsAndLimits --------------------------------------------------------


def _upstream_pod(**fields: str) -> dict[str, Any]:
    requests = {r: fields[f"{r}_request"] for r in ("cpu", "memory") if f"{r}_request" in fields}
    limits = {r: fields[f"{r}_limit"] for r in ("cpu", "memory") if f"{r}_limit" in fields}
    overhead = {r: fields[f"{r}_overhead"] for r in ("cpu", "memory") if f"{r}_overhead" in fields}
    return pod([ctr("foo", requests or None, limits or None)], overhead=overhead or None)


@pytest.mark.parametrize(
    ("fields", "expected_requests", "expected_limits"),
    [
        ({"cpu_limit": "9"}, {}, {"cpu": "9"}),
        ({"cpu_overhead": "5", "memory_overhead": "5"}, {"cpu": "5", "memory": "5"}, {}),
        ({"cpu_request": "1", "memory_request": "10", "cpu_overhead": "5",
          "memory_overhead": "5"}, {"cpu": "6", "memory": "15"}, {}),
        ({"cpu_request": "1", "cpu_limit": "2", "memory_request": "10", "memory_limit": "12",
          "cpu_overhead": "5", "memory_overhead": "5"},
         {"cpu": "6", "memory": "15"}, {"cpu": "7", "memory": "17"}),
        ({"cpu_request": "1", "cpu_limit": "2", "memory_request": "10", "cpu_overhead": "5",
          "memory_overhead": "5"}, {"cpu": "6", "memory": "15"}, {"cpu": "7"}),
    ],
    ids=["just-limit-no-overhead", "just-overhead", "req-and-overhead",
         "all-req-lim-and-overhead", "req-some-lim-and-overhead"],
)  # fmt: skip
def test_pod_requests_and_limits_with_overhead(
    fields: dict[str, str], expected_requests: dict[str, str], expected_limits: dict[str, str]
) -> None:
    p = _upstream_pod(**fields)
    assert values(pod_requests(p)) == ql(expected_requests)
    assert values(pod_limits(p)) == ql(expected_limits)


def _two_containers(init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return pod(
        [ctr("foobar", {"cpu": "1", "memory": "5"}, {"cpu": "2", "memory": "10"}),
         ctr("foobar2", {"cpu": "4", "memory": "12"}, {"cpu": "8", "memory": "24"})],
        init,
        overhead={"cpu": "3", "memory": "8"},
    )  # fmt: skip


def test_without_overhead_is_the_sum_of_containers() -> None:
    p = _two_containers()
    assert values(pod_requests(p, exclude_overhead=True)) == ql({"cpu": "5", "memory": "17"})
    assert values(pod_limits(p, exclude_overhead=True)) == ql({"cpu": "10", "memory": "34"})
    assert values(pod_requests(p)) == ql({"cpu": "8", "memory": "25"})
    assert values(pod_limits(p)) == ql({"cpu": "13", "memory": "42"})


def test_massive_init_container_is_the_largest() -> None:
    p = _two_containers(
        [ctr("small-init", {"cpu": "1", "memory": "5"}, {"cpu": "1", "memory": "5"}),
         ctr("big-init", {"cpu": "40", "memory": "120"}, {"cpu": "80", "memory": "240"})]
    )  # fmt: skip
    assert values(pod_requests(p, exclude_overhead=True)) == ql({"cpu": "40", "memory": "120"})
    assert values(pod_limits(p, exclude_overhead=True)) == ql({"cpu": "80", "memory": "240"})


# --- the sidecar formula ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("init", "containers", "expected"),
    [
        # nil options, larger init container / larger containers (TestPodResourceRequests).
        ([ctr("i", {"cpu": "4"})], [ctr("c", {"cpu": "1"})], {"cpu": "4"}),
        ([ctr("i", {"cpu": "2"})], [ctr("a", {"cpu": "2"}), ctr("b", {"cpu": "3"})], {"cpu": "5"}),
        # Sidecars add to the regular containers: 1 + 2 + 3 + 1 = 7 > init 5.
        ([ctr("i", {"cpu": "5"}), ctr("s1", {"cpu": "3"}, sidecar=True),
          ctr("s2", {"cpu": "2"}, sidecar=True), ctr("s3", {"cpu": "1"}, sidecar=True)],
         [ctr("c", {"cpu": "1"})], {"cpu": "7"}),
        # An init container after a sidecar runs beside it: max(1+2+1, 3+2) = 5.
        ([ctr("i1", {"cpu": "1"}), ctr("s1", {"cpu": "2"}, sidecar=True),
          ctr("i2", {"cpu": "3"}), ctr("s2", {"cpu": "1"}, sidecar=True)],
         [ctr("c", {"cpu": "1"})], {"cpu": "5"}),
        # An init container before the sidecar does not run beside it: max(2+1, 4) = 4.
        ([ctr("i", {"cpu": "4"}), ctr("s", {"cpu": "2"}, sidecar=True)],
         [ctr("c", {"cpu": "1"})], {"cpu": "4"}),
        # Keys present in one list only are kept.
        ([ctr("i", {"memory": "1Gi"})], [ctr("c", {"cpu": "1"})], {"cpu": "1", "memory": "1Gi"}),
        ([], [ctr("c"), ctr("d", {})], {}),
    ],
)  # fmt: skip
def test_sidecar_formula(
    init: list[dict[str, Any]], containers: list[dict[str, Any]], expected: dict[str, str]
) -> None:
    p = pod(containers, init)
    assert values(aggregate_container_requests(p)) == ql(expected)
    assert values(pod_requests(p)) == ql(expected)


def test_one_limited_container_sets_the_aggregate_limit() -> None:
    # The KEP-6386 sidecar pitfall: a container without a limit adds nothing.
    p = pod([ctr("app"), ctr("log-shipper", limits={"ephemeral-storage": "2Gi"})])
    assert strings(aggregate_container_limits(p)) == {"ephemeral-storage": "2Gi"}
    assert strings(pod_limits(p)) == {"ephemeral-storage": "2Gi"}


# --- pod-level resources (KEP-2837, KEP-6386) -------------------------------------------------


def _kep6386_pod() -> dict[str, Any]:
    """The KEP's example: 10Gi requested and 20Gi limited for the pod, 2Gi for one sidecar."""
    return pod(
        [ctr("app", {"cpu": "1", "memory": "1Gi"}, {"memory": "2Gi"})],
        [ctr("log-shipper", {"ephemeral-storage": "1Gi"}, {"ephemeral-storage": "2Gi"},
             sidecar=True)],
        requests={"ephemeral-storage": "10Gi"},
        limits={"ephemeral-storage": "20Gi"},
    )  # fmt: skip


def test_pod_level_ephemeral_storage_replaces_the_aggregate() -> None:
    p = _kep6386_pod()
    assert strings(pod_requests(p)) == {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "10Gi"}
    assert strings(pod_limits(p)) == {"memory": "2Gi", "ephemeral-storage": "20Gi"}
    # With the gate off, pod-level ephemeral-storage is ignored (KEP-6386 "disable").
    assert strings(pod_requests(p, gates=ES_OFF)) == {
        "cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi",
    }  # fmt: skip
    assert strings(pod_limits(p, gates=ES_OFF)) == {"memory": "2Gi", "ephemeral-storage": "2Gi"}


def test_pod_level_cpu_mixes_with_container_values_per_key() -> None:
    p = pod(
        [ctr("a", {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "10Mi"}),
         ctr("b", {"cpu": "2", "memory": "1Gi"})],
        requests={"cpu": "500m", "nvidia.com/gpu": "1"},
        limits={"cpu": "4"},
    )  # fmt: skip
    assert strings(pod_requests(p)) == {
        "cpu": "500m", "memory": "2Gi", "ephemeral-storage": "10Mi",
    }  # fmt: skip
    assert strings(pod_limits(p)) == {"cpu": "4"}
    # Gate PodLevelResources off: pod-level values play no part.
    assert strings(pod_requests(p, gates=PLR_OFF)) == {
        "cpu": "3", "memory": "2Gi", "ephemeral-storage": "10Mi",
    }  # fmt: skip
    assert strings(pod_limits(p, gates=PLR_OFF)) == {}
    assert strings(pod_requests(p, skip_pod_level_resources=True))["cpu"] == "3"
    assert strings(pod_requests(p, skip_container_level_resources=True)) == {"cpu": "500m"}


def test_pod_level_limits_apply_when_only_requests_are_set_at_pod_level() -> None:
    # PodLimits overrides when requests OR limits are set at pod level.
    p = pod([ctr("a", limits={"memory": "1Gi"})], requests={"memory": "512Mi"})
    assert strings(pod_limits(p)) == {"memory": "1Gi"}
    p = pod([ctr("a", limits={"memory": "1Gi"})], requests={"cpu": "1"}, limits={"memory": "3Gi"})
    assert strings(pod_limits(p)) == {"memory": "3Gi"}


def test_overhead_on_pod_level_values() -> None:
    p = pod(
        [ctr("a", {"cpu": "1"}, {"cpu": "1"})],
        requests={"ephemeral-storage": "1Gi"},
        limits={"ephemeral-storage": "2Gi", "memory": "0"},
        overhead={"ephemeral-storage": "100Mi", "memory": "64Mi", "cpu": "250m"},
    )
    assert strings(pod_requests(p)) == {
        "cpu": "1250m", "ephemeral-storage": "1124Mi", "memory": "64Mi",
    }  # fmt: skip
    # Limits: overhead only where a non-zero limit exists (memory's limit is 0).
    assert strings(pod_limits(p)) == {"cpu": "1250m", "ephemeral-storage": "2148Mi", "memory": "0"}
    assert strings(pod_limits(p, exclude_overhead=True)) == {
        "cpu": "1", "ephemeral-storage": "2Gi", "memory": "0",
    }  # fmt: skip


def test_resource_request_quantity_for_eviction_ranking() -> None:
    p = pod(
        [ctr("a", {"cpu": "1", "ephemeral-storage": "1Gi"})],
        requests={"memory": "1Gi"},
        overhead={"memory": "64Mi", "ephemeral-storage": "1Mi"},
    )
    assert str(resource_request_quantity(p, "memory")) == "1088Mi"
    # Pod-level resources set: container values are skipped, so this reads 0 (no overhead).
    es = resource_request_quantity(p, "ephemeral-storage")
    assert es.is_zero() and es.format is QuantityFormat.BINARY_SI
    assert str(resource_request_quantity(pod([ctr("a", {"cpu": "1"})]), "cpu")) == "1"


# --- status resources (KEP-1287) --------------------------------------------------------------


def _resized(spec_cpu: str, status: dict[str, Any], infeasible: bool) -> dict[str, Any]:
    conditions = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]
    return pod(
        [ctr("container-1", {"cpu": spec_cpu})],
        status={"containerStatuses": [{"name": "container-1", **status}],
                **({"conditions": conditions} if infeasible else {})},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("spec_cpu", "status", "infeasible", "expected"),
    [
        ("4", {"resources": {"requests": {"cpu": "2"}}}, True, "2"),
        ("6", {"allocatedResources": {"cpu": "4"}, "resources": {"requests": {"cpu": "2"}}},
         True, "4"),
        ("4", {"resources": {"requests": {"cpu": "2"}}}, False, "4"),
        ("2", {"allocatedResources": {"cpu": "3"}}, False, "3"),
    ],
    ids=["infeasible", "infeasible-in-progress", "no-resize-status", "allocated-larger"],
)  # fmt: skip
def test_use_status_resources(
    spec_cpu: str, status: dict[str, Any], infeasible: bool, expected: str
) -> None:
    p = _resized(spec_cpu, status, infeasible)
    assert strings(pod_requests(p, use_status_resources=True)) == {"cpu": expected}
    assert strings(pod_requests(p)) == {"cpu": spec_cpu}


def test_status_limits() -> None:
    p = _resized("1", {"resources": {"limits": {"cpu": "3"}}}, False)
    p["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "2"}
    assert strings(pod_limits(p, use_status_resources=True)) == {"cpu": "3"}
    p["status"]["conditions"] = [{"type": "PodResizePending", "reason": "Infeasible"}]
    p["status"]["containerStatuses"][0]["resources"]["limits"] = {"cpu": "1"}
    assert strings(pod_limits(p, use_status_resources=True)) == {"cpu": "1"}


def test_non_missing_container_requests_fill_only_missing_keys() -> None:
    p = pod([ctr("a", {"cpu": "0"}), ctr("b")])
    non_missing = {"cpu": q("100m"), "memory": q("200Mi")}
    assert strings(pod_requests(p, non_missing_container_requests=non_missing)) == {
        "cpu": "100m", "memory": "400Mi",
    }  # fmt: skip


# --- QoS --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (pod([ctr("a")]), QOS_BEST_EFFORT),
        (pod([ctr("a", {"ephemeral-storage": "1Gi"}, {"ephemeral-storage": "1Gi"})]),
         QOS_BEST_EFFORT),
        (pod([ctr("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})]),
         QOS_GUARANTEED),
        (pod([ctr("a", limits={"cpu": "1", "memory": "1Gi"})], [ctr("i", limits={"cpu": "1",
             "memory": "1Gi"})]), QOS_BURSTABLE),  # requests not yet defaulted from limits
        (pod([ctr("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}),
              ctr("b")]), QOS_BURSTABLE),
        (pod([ctr("a", {"cpu": "1"}, {"cpu": "1"})]), QOS_BURSTABLE),
        (pod([ctr("a", {"cpu": "1000m", "memory": "1Gi", "ephemeral-storage": "1Gi"},
                  {"cpu": "1", "memory": "1024Mi"})]), QOS_GUARANTEED),
        # Pod-level resources decide alone.
        (pod([ctr("a")], requests={"cpu": "1", "memory": "1Gi"},
             limits={"cpu": "1", "memory": "1Gi"}), QOS_GUARANTEED),
        (pod([ctr("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
             requests={"cpu": "1"}), QOS_BURSTABLE),
        (pod([ctr("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
             requests={}), QOS_BEST_EFFORT),
    ],
)  # fmt: skip
def test_compute_qos_class(p: dict[str, Any], expected: str) -> None:
    assert compute_qos_class(p) == expected


def test_qos_uses_containers_when_pod_level_resources_are_off() -> None:
    p = pod([ctr("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
            requests={"cpu": "1"})  # fmt: skip
    assert compute_qos_class(p, gates=PLR_OFF) == QOS_GUARANTEED
    p["status"] = {"qosClass": "BestEffort"}
    assert qos_class(p) == QOS_BEST_EFFORT
    assert compute_qos_class(p) == QOS_BURSTABLE


def test_unparseable_values_are_left_out() -> None:
    assert strings(resource_list({"cpu": "1", "memory": "lots", "x": None})) == {
        "cpu": "1", "x": "0",
    }  # fmt: skip
    assert strings(container_requests({"resources": {"requests": {"cpu": "2", "m": "?"}}})) == {
        "cpu": "2"
    }
    assert pod_requests({}) == {} and pod_limits({"spec": None}) == {}


# --- properties -------------------------------------------------------------------------------

NAMES = ("cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "example.com/gpu")
amounts = st.sampled_from(["0", "1", "100m", "250m", "2", "1Ki", "512Mi", "1Gi", "1.5Gi", "3e3"])
resource_maps = st.dictionaries(st.sampled_from(NAMES), amounts, max_size=4)


@st.composite
def containers(draw: st.DrawFn, prefix: str, *, init: bool) -> list[dict[str, Any]]:
    count = draw(st.integers(0 if init else 1, 3))
    return [
        ctr(f"{prefix}{i}", draw(resource_maps), draw(resource_maps),
            sidecar=init and draw(st.booleans()))
        for i in range(count)
    ]  # fmt: skip


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    return pod(
        draw(containers("c", init=False)),
        draw(containers("i", init=True)),
        requests=draw(st.none() | resource_maps),
        limits=draw(st.none() | resource_maps),
        overhead=draw(st.none() | resource_maps),
    )


gates_strategy = st.builds(
    lambda plr, es: FeatureGates(
        {POD_LEVEL_RESOURCES: plr, POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE: es}
    ),
    st.booleans(),
    st.booleans(),
)


def _pod_level(p: dict[str, Any], key: str) -> dict[str, Quantity]:
    return resource_list(p["spec"].get("resources", {}).get(key))


@given(pods(), gates_strategy)
def test_requests_cover_every_container_where_not_set_at_pod_level(
    p: dict[str, Any], gates: FeatureGates
) -> None:
    requests = pod_requests(p, gates=gates, exclude_overhead=True)
    pod_level = _pod_level(p, "requests") if is_pod_level_requests_set(p, gates) else {}
    pod_level_on = gates.enabled(POD_LEVEL_RESOURCES)
    for c in p["spec"]["containers"] + p["spec"].get("initContainers", []):
        for name, value in container_requests(c).items():
            if pod_level_on and name in pod_level and is_supported_pod_level_resource(name, gates):
                continue
            assert requests[name] >= value


@given(pods(), gates_strategy)
def test_pod_level_value_wins_when_set(p: dict[str, Any], gates: FeatureGates) -> None:
    requests = pod_requests(p, gates=gates, exclude_overhead=True)
    limits = pod_limits(p, gates=gates, exclude_overhead=True)
    with_overhead = pod_requests(p, gates=gates)
    overhead = resource_list(p["spec"].get("overhead"))
    if not gates.enabled(POD_LEVEL_RESOURCES):
        assert requests == aggregate_container_requests(p)
        assert limits == aggregate_container_limits(p)
        return
    if is_pod_level_requests_set(p, gates):
        for name, value in _pod_level(p, "requests").items():
            if is_supported_pod_level_resource(name, gates):
                assert requests[name] == value
                assert with_overhead[name] == value + overhead.get(name, Quantity())
    if is_pod_level_resources_set(p, gates):
        for name, value in _pod_level(p, "limits").items():
            if is_supported_pod_level_resource(name, gates):
                assert limits[name] == value
    for name, value in overhead.items():
        assert with_overhead[name] == requests.get(name, Quantity()) + value


@given(pods())
def test_container_order_does_not_matter_for_regular_containers(p: dict[str, Any]) -> None:
    reordered = {**p, "spec": {**p["spec"], "containers": p["spec"]["containers"][::-1]}}
    assert pod_requests(reordered) == pod_requests(p)
    assert pod_limits(reordered) == pod_limits(p)
    assert compute_qos_class(reordered) == compute_qos_class(p)

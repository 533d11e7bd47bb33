"""LimitRange rules (`ephemera.pods.limitrange`): the object's defaulting and validation, the
LimitRanger's defaults into pods and its min/max/ratio checks, with upstream's exact messages
(reference/k8s-semantics.md section 7.2) and KEP-6386's pod-level ephemeral-storage."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ephemera.api.featuregates import POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE, FeatureGates
from ephemera.pods.limitrange import (
    LIMIT_RANGER_ANNOTATION,
    aggregate_messages,
    default_limit_range,
    default_pod_resources,
    validate_limit_range,
    validate_pod_limits,
)

ON = FeatureGates()
ES_OFF = FeatureGates({POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE: False})


def lr(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "lr"},
            "spec": {"limits": list(items)}}


def ctr(name: str, requests: dict[str, str] | None = None,
        limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": name, "image": "busybox", "resources": res, **extra}


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None,
        resources: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    if resources is not None:
        spec["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def errors_of(obj: dict[str, Any], gates: FeatureGates = ON,
              old: dict[str, Any] | None = None) -> list[str]:
    return [str(e) for e in validate_limit_range(obj, gates, old)]


# --- the LimitRange object ------------------------------------------------------------------


def test_object_defaulting_fills_container_defaults_from_max_then_min() -> None:
    obj = lr({"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}},
             {"type": "Pod", "max": {"cpu": "4"}})
    default_limit_range(obj)
    container, pod_item = obj["spec"]["limits"]
    assert container["default"] == {"cpu": "2"}
    assert container["defaultRequest"] == {"cpu": "2", "memory": "64Mi"}
    assert "default" not in pod_item and "defaultRequest" not in pod_item


def test_object_defaulting_keeps_explicit_values() -> None:
    obj = lr({"type": "Container", "max": {"cpu": "2"}, "default": {"cpu": "1"},
              "defaultRequest": {"cpu": "500m"}})
    default_limit_range(obj)
    item = obj["spec"]["limits"][0]
    assert item["default"] == {"cpu": "1"} and item["defaultRequest"] == {"cpu": "500m"}


POD_DEFAULT_FORBIDDEN = "may not be specified when `type` is 'Pod'"

VALIDATION_CASES: list[tuple[str, dict[str, Any], FeatureGates, list[str]]] = [
    ("valid container item",
     {"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "1"},
      "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "200m"},
      "maxLimitRequestRatio": {"cpu": "5"}}, ON, []),
    ("min above max (and so above the default and default request taken from max)",
     {"type": "Container", "min": {"memory": "1Gi"}, "max": {"memory": "500Mi"}}, ON,
     ['spec.limits[0].min[memory]: Invalid value: "1Gi": min value 1Gi is greater than max '
      "value 500Mi",
      'spec.limits[0].defaultRequest[memory]: Invalid value: "500Mi": min value 1Gi is greater '
      "than default request value 500Mi",
      'spec.limits[0].default[memory]: Invalid value: "1Gi": min value 1Gi is greater than '
      "default value 500Mi"]),
    ("default above max (the value shown is max, as upstream)",
     {"type": "Container", "max": {"memory": "1Gi"}, "default": {"memory": "2Gi"},
      "defaultRequest": {"memory": "1Gi"}}, ON,
     ['spec.limits[0].default[memory]: Invalid value: "1Gi": default value 2Gi is greater '
      "than max value 1Gi"]),
    ("default request above default",
     {"type": "Container", "default": {"cpu": "1"}, "defaultRequest": {"cpu": "2"}}, ON,
     ['spec.limits[0].defaultRequest[cpu]: Invalid value: "2": default request value 2 is '
      "greater than default limit value 1"]),
    ("min above default request",
     {"type": "Container", "min": {"cpu": "1"}, "defaultRequest": {"cpu": "500m"}}, ON,
     ['spec.limits[0].defaultRequest[cpu]: Invalid value: "500m": min value 1 is greater than '
      "default request value 500m"]),
    ("ratio below one",
     {"type": "Container", "maxLimitRequestRatio": {"cpu": "500m"}}, ON,
     ['spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: "500m": ratio 500m is less '
      "than 1"]),
    ("ratio above max/min",
     {"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "200m"},
      "maxLimitRequestRatio": {"cpu": "3"}}, ON,
     ['spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: "3": ratio 3 is greater than '
      "max/min = 2.000000"]),
    ("not a container resource",
     {"type": "Pod", "max": {"pods": "2"}}, ON,
     ['spec.limits[0].max[pods]: Invalid value: "pods": must be a standard resource for '
      "containers"]),
    ("unknown type",
     {"type": "Node", "max": {"cpu": "1"}}, ON,
     ['spec.limits[0].type: Invalid value: "Node": must be a standard limit type or fully '
      "qualified"]),
    ("hugepages default and default request must be equal",
     {"type": "Container", "default": {"hugepages-2Mi": "4Mi"},
      "defaultRequest": {"hugepages-2Mi": "2Mi"}}, ON,
     ['spec.limits[0].defaultRequest[hugepages-2Mi]: Invalid value: "2Mi": default value 4Mi '
      "must equal to defaultRequest value 2Mi in hugepages-2Mi"]),
    ("type Pod default and defaultRequest forbidden without the KEP-6386 gate",
     {"type": "Pod", "default": {"ephemeral-storage": "1Gi"},
      "defaultRequest": {"ephemeral-storage": "1Gi"}}, ES_OFF,
     [f"spec.limits[0].default: Forbidden: {POD_DEFAULT_FORBIDDEN}",
      f"spec.limits[0].defaultRequest: Forbidden: {POD_DEFAULT_FORBIDDEN}"]),
    ("type Pod ephemeral-storage defaults allowed with the gate",
     {"type": "Pod", "min": {"ephemeral-storage": "100Mi"}, "max": {"ephemeral-storage": "4Gi"},
      "default": {"ephemeral-storage": "2Gi"}, "defaultRequest": {"ephemeral-storage": "1Gi"},
      "maxLimitRequestRatio": {"ephemeral-storage": "4"}}, ON, []),
    ("type Pod defaults hold ephemeral-storage only",
     {"type": "Pod", "default": {"cpu": "1"}}, ON,
     ['spec.limits[0].default[cpu]: Unsupported value: "cpu": supported values: '
      '"ephemeral-storage"']),
    ("type Pod defaults checked against max",
     {"type": "Pod", "max": {"ephemeral-storage": "1Gi"},
      "defaultRequest": {"ephemeral-storage": "2Gi"}}, ON,
     ['spec.limits[0].defaultRequest[ephemeral-storage]: Invalid value: "2Gi": default '
      "request value 2Gi is greater than max value 1Gi"]),
    ("type Pod min and max stay valid without the gate",
     {"type": "Pod", "max": {"ephemeral-storage": "4Gi"}}, ES_OFF, []),
    ("claim item needs storage",
     {"type": "PersistentVolumeClaim", "max": {"cpu": "1"}}, ON,
     ["spec.limits[0].limits: Required value: either minimum or maximum storage value is "
      "required, but neither was provided"]),
]


@pytest.mark.parametrize(("item", "gates", "expected"),
                         [c[1:] for c in VALIDATION_CASES], ids=[c[0] for c in VALIDATION_CASES])
def test_validate_limit_range(item: dict[str, Any], gates: FeatureGates,
                              expected: list[str]) -> None:
    obj = lr(item)
    default_limit_range(obj)
    assert errors_of(obj, gates) == expected


def test_duplicate_type() -> None:
    obj = lr({"type": "Container", "max": {"cpu": "1"}}, {"type": "Container"})
    assert errors_of(obj) == ['spec.limits[1].type: Duplicate value: "Container"']


def test_pod_defaults_stay_valid_on_update_once_in_use_with_the_gate_off() -> None:
    obj = lr({"type": "Pod", "default": {"ephemeral-storage": "1Gi"}})
    assert errors_of(obj, ES_OFF)  # a new one is refused
    assert errors_of(obj, ES_OFF, old=copy.deepcopy(obj)) == []


# --- defaults into pods ---------------------------------------------------------------------

CONTAINER_DEFAULTS = {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
                      "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}


def test_container_defaults_and_annotation() -> None:
    p = pod(ctr("app"), ctr("keep", requests={"cpu": "1"}, limits={"cpu": "2"}),
            init=[ctr("init")])
    assert default_pod_resources(p, [lr(CONTAINER_DEFAULTS)], ON)
    app, keep = p["spec"]["containers"]
    assert app["resources"] == {"limits": {"cpu": "500m", "memory": "256Mi"},
                                "requests": {"cpu": "100m", "memory": "128Mi"}}
    assert keep["resources"] == {"requests": {"cpu": "1", "memory": "128Mi"},
                                 "limits": {"cpu": "2", "memory": "256Mi"}}
    assert p["spec"]["initContainers"][0]["resources"]["limits"] == {"cpu": "500m",
                                                                     "memory": "256Mi"}
    assert p["metadata"]["annotations"][LIMIT_RANGER_ANNOTATION] == (
        "LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for "
        "container app; memory request for container keep; memory limit for container keep; "
        "cpu, memory request for init container init; cpu, memory limit for init container "
        "init")


def test_no_defaults_no_annotation() -> None:
    p = pod(ctr("app"))
    assert not default_pod_resources(p, [lr({"type": "Container", "max": {"cpu": "1"}})], ON)
    assert "annotations" not in p["metadata"]
    assert p["spec"]["containers"][0]["resources"] == {}


def test_first_limit_range_wins() -> None:
    p = pod(ctr("app"))
    first = lr({"type": "Container", "default": {"cpu": "1"}, "defaultRequest": {"cpu": "1"}})
    second = lr({"type": "Container", "default": {"cpu": "2"}, "defaultRequest": {"cpu": "2"}})
    default_pod_resources(p, [first, second], ON)
    assert p["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1"}


POD_ES_DEFAULTS = {"type": "Pod", "default": {"ephemeral-storage": "4Gi"},
                   "defaultRequest": {"ephemeral-storage": "1Gi"}}


def test_pod_level_ephemeral_storage_defaults_with_the_gate() -> None:
    p = pod(ctr("app"))
    default_pod_resources(p, [lr(POD_ES_DEFAULTS)], ON)
    assert p["spec"]["resources"] == {"limits": {"ephemeral-storage": "4Gi"},
                                      "requests": {"ephemeral-storage": "1Gi"}}
    assert p["metadata"]["annotations"][LIMIT_RANGER_ANNOTATION] == (
        "LimitRanger plugin set: ephemeral-storage request for pod; ephemeral-storage limit "
        "for pod")


def test_pod_level_defaults_ignored_without_the_gate() -> None:
    p = pod(ctr("app"))
    assert not default_pod_resources(p, [lr(POD_ES_DEFAULTS)], ES_OFF)
    assert "resources" not in p["spec"]


def test_pod_level_defaults_keep_what_the_pod_sets() -> None:
    p = pod(ctr("app"), resources={"limits": {"ephemeral-storage": "8Gi"},
                                   "requests": {"ephemeral-storage": "8Gi"}})
    assert not default_pod_resources(p, [lr(POD_ES_DEFAULTS)], ON)
    assert p["spec"]["resources"]["limits"] == {"ephemeral-storage": "8Gi"}


def test_defaulted_pod_limit_gets_the_aggregate_container_request() -> None:
    # Pod defaulting would give a pod-level limit the containers' aggregate request.
    p = pod(ctr("a", requests={"ephemeral-storage": "1Gi"}),
            ctr("b", requests={"ephemeral-storage": "512Mi"}))
    default_pod_resources(p, [lr({"type": "Pod", "default": {"ephemeral-storage": "4Gi"}})], ON)
    assert p["spec"]["resources"] == {"limits": {"ephemeral-storage": "4Gi"},
                                      "requests": {"ephemeral-storage": "1536Mi"}}


def test_defaulted_pod_limit_without_container_requests_is_also_the_request() -> None:
    p = pod(ctr("a"), resources={"requests": {"cpu": "1"}})
    default_pod_resources(p, [lr({"type": "Pod", "default": {"ephemeral-storage": "4Gi"}})], ON)
    assert p["spec"]["resources"] == {"requests": {"cpu": "1", "ephemeral-storage": "4Gi"},
                                      "limits": {"ephemeral-storage": "4Gi"}}


def test_dynamic_defaults_only_added_containers_and_only_cpu_memory() -> None:
    ranges = [lr({"type": "Container", "default": {"cpu": "1", "ephemeral-storage": "1Gi"},
                  "defaultRequest": {"cpu": "1", "ephemeral-storage": "1Gi"}}, POD_ES_DEFAULTS)]
    p = pod(ctr("old"), ctr("new"))
    default_pod_resources(p, ranges, ON, containers={"new"}, allowed=("cpu", "memory"))
    old, new = p["spec"]["containers"]
    assert old["resources"] == {}
    assert new["resources"] == {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    assert "resources" not in p["spec"]


# --- checks ---------------------------------------------------------------------------------

CHECK_CASES: list[tuple[str, dict[str, Any], dict[str, Any], FeatureGates, list[str]]] = [
    ("min without a request",
     {"type": "Container", "min": {"memory": "100Mi"}}, pod(ctr("c")), ON,
     ["minimum memory usage per Container is 100Mi.  No request is specified"]),
    ("min above the request",
     {"type": "Container", "min": {"memory": "1Gi"}},
     pod(ctr("c", requests={"memory": "512Mi"})), ON,
     ["minimum memory usage per Container is 1Gi, but request is 512Mi"]),
    ("min above the limit",
     {"type": "Container", "min": {"cpu": "500m"}},
     pod(ctr("c", requests={"cpu": "1"}, limits={"cpu": "200m"})), ON,
     ["minimum cpu usage per Container is 500m, but limit is 200m"]),
    ("max without a limit",
     {"type": "Container", "max": {"cpu": "1"}}, pod(ctr("c", requests={"cpu": "1"})), ON,
     ["maximum cpu usage per Container is 1.  No limit is specified"]),
    ("max below the limit",
     {"type": "Container", "max": {"memory": "1Gi"}},
     pod(ctr("c", limits={"memory": "2Gi"})), ON,
     ["maximum memory usage per Container is 1Gi, but limit is 2Gi"]),
    ("max below the request",
     {"type": "Container", "max": {"memory": "1500Mi"}},
     pod(ctr("c", requests={"memory": "2Gi"}, limits={"memory": "1Gi"})), ON,
     ["maximum memory usage per Container is 1500Mi, but request is 2Gi"]),
    ("ratio without a request",
     {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
     pod(ctr("c", limits={"cpu": "1"}, requests={"cpu": "0"})), ON,
     ["cpu max limit to request ratio per Container is 2, but no request is specified or "
      "request is 0"]),
    ("ratio without a limit",
     {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
     pod(ctr("c", requests={"cpu": "1"})), ON,
     ["cpu max limit to request ratio per Container is 2, but no limit is specified or limit "
      "is 0"]),
    ("ratio exceeded",
     {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
     pod(ctr("c", requests={"cpu": "250m"}, limits={"cpu": "1"})), ON,
     ["cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000"]),
    ("init containers are checked too",
     {"type": "Container", "max": {"cpu": "1"}},
     pod(ctr("c", limits={"cpu": "1"}), init=[ctr("i", limits={"cpu": "2"})]), ON,
     ["maximum cpu usage per Container is 1, but limit is 2"]),
    ("within bounds",
     {"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "1"},
      "maxLimitRequestRatio": {"cpu": "4"}},
     pod(ctr("c", requests={"cpu": "250m"}, limits={"cpu": "1"})), ON, []),
    ("type Pod sums the containers",
     {"type": "Pod", "max": {"memory": "1Gi"}},
     pod(ctr("a", limits={"memory": "768Mi"}), ctr("b", limits={"memory": "512Mi"})), ON,
     ["maximum memory usage per Pod is 1Gi, but limit is 1280Mi"]),
    ("type Pod uses the init container formula",
     {"type": "Pod", "max": {"cpu": "2"}},
     pod(ctr("a", limits={"cpu": "1"}), init=[ctr("i", limits={"cpu": "3"})]), ON,
     ["maximum cpu usage per Pod is 2, but limit is 3"]),
    ("type Pod uses the pod-level ephemeral-storage limit (KEP-6386)",
     {"type": "Pod", "max": {"ephemeral-storage": "1Gi"}},
     pod(ctr("a", limits={"ephemeral-storage": "512Mi"}),
         resources={"limits": {"ephemeral-storage": "2Gi"},
                    "requests": {"ephemeral-storage": "512Mi"}}), ON,
     ["maximum ephemeral-storage usage per Pod is 1Gi, but limit is 2Gi"]),
    ("type Pod without the gate ignores the pod-level ephemeral-storage",
     {"type": "Pod", "max": {"ephemeral-storage": "1Gi"}},
     pod(ctr("a", limits={"ephemeral-storage": "512Mi"}),
         resources={"limits": {"ephemeral-storage": "2Gi"}}), ES_OFF, []),
    ("type Pod min on the pod-level request",
     {"type": "Pod", "min": {"ephemeral-storage": "1Gi"}},
     pod(ctr("a"), resources={"requests": {"ephemeral-storage": "100Mi"}}), ON,
     ["minimum ephemeral-storage usage per Pod is 1Gi, but request is 100Mi"]),
    ("type Pod ratio on pod-level values",
     {"type": "Pod", "maxLimitRequestRatio": {"ephemeral-storage": "2"}},
     pod(ctr("a"), resources={"requests": {"ephemeral-storage": "1Gi"},
                              "limits": {"ephemeral-storage": "3Gi"}}), ON,
     ["ephemeral-storage max limit to request ratio per Pod is 2, but provided ratio is "
      "3.000000"]),
]


@pytest.mark.parametrize(("item", "p", "gates", "expected"), [c[1:] for c in CHECK_CASES],
                         ids=[c[0] for c in CHECK_CASES])
def test_validate_pod_limits(item: dict[str, Any], p: dict[str, Any], gates: FeatureGates,
                             expected: list[str]) -> None:
    assert validate_pod_limits(p, [lr(item)], gates) == expected


def test_all_violations_of_all_ranges_are_reported_once() -> None:
    p = pod(ctr("a", limits={"memory": "2Gi", "cpu": "2"}))
    ranges = [lr({"type": "Container", "max": {"memory": "1Gi", "cpu": "1"}}),
              lr({"type": "Container", "max": {"memory": "1Gi"}})]
    messages = validate_pod_limits(p, ranges, ON)
    assert messages == ["maximum cpu usage per Container is 1, but limit is 2",
                        "maximum memory usage per Container is 1Gi, but limit is 2Gi"]
    assert aggregate_messages(messages) == (
        "[maximum cpu usage per Container is 1, but limit is 2, maximum memory usage per "
        "Container is 1Gi, but limit is 2Gi]")
    assert aggregate_messages(messages[:1]) == messages[0]


def test_update_skips_unchanged_resources_and_checks_added_containers() -> None:
    item = lr({"type": "Container", "max": {"cpu": "1"}})
    old = pod(ctr("old", limits={"cpu": "4"}))  # admitted before the LimitRange existed
    new = pod(ctr("old", limits={"cpu": "4"}), ctr("added", limits={"cpu": "2"}))
    assert validate_pod_limits(new, [item], ON, old_pod=old) == [
        "maximum cpu usage per Container is 1, but limit is 2"]
    assert validate_pod_limits(new, [item], ON) == [
        "maximum cpu usage per Container is 1, but limit is 4",
        "maximum cpu usage per Container is 1, but limit is 2"]

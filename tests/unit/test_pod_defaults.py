"""Pod defaulting (`ephemera.pods.defaults`): upstream's v1 defaults, the KEP-2837 pod-level
rules and the KEP-6386 worked examples (reference/k8s-semantics.md section 3.3)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ephemera.api.featuregates import DEFAULTS
from ephemera.pods.defaults import (
    default_pod,
    default_pull_policy,
    drop_disabled_pod_fields,
    parse_image_reference,
)
from ephemera.pods.validation import validate_pod_create

GATES: dict[str, bool] = dict(DEFAULTS)
ES_OFF = dict(GATES, PodLevelResourcesEphemeralStorage=False)
PLR_OFF = dict(GATES, PodLevelResources=False, PodLevelResourcesEphemeralStorage=False)
ES = "ephemeral-storage"
DIGEST = "sha256:" + "a" * 64


def container(name: str, **resources: dict[str, str]) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox:1.36"}
    if resources:
        c["resources"] = dict(resources)
    return c


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers or [container("c")])}
    if init:
        body["initContainers"] = init
    body.update(spec)
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": body}


def defaulted(p: dict[str, Any], gates: dict[str, bool] = GATES) -> dict[str, Any]:
    default_pod(p, gates)
    return p


def pod_resources(p: dict[str, Any]) -> dict[str, Any]:
    return p["spec"].get("resources", {})


# --- plain defaults ---------------------------------------------------------------------


def test_spec_and_container_defaults() -> None:
    p = defaulted(pod(container("c")))
    spec = p["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["securityContext"] == {}
    assert spec["enableServiceLinks"] is True
    assert "serviceAccountName" not in spec  # admission sets it, not defaulting
    c = spec["containers"][0]
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "File"
    assert c["resources"] == {}
    assert "resources" not in spec  # no pod-level resources appear from nothing


def test_explicit_values_are_kept() -> None:
    p = defaulted(pod(dict(container("c"), imagePullPolicy="Never",
                           terminationMessagePolicy="FallbackToLogsOnError"),
                      restartPolicy="Never", terminationGracePeriodSeconds=0,
                      enableServiceLinks=False, dnsPolicy="Default"))
    spec = p["spec"]
    assert (spec["restartPolicy"], spec["terminationGracePeriodSeconds"],
            spec["enableServiceLinks"], spec["dnsPolicy"]) == ("Never", 0, False, "Default")
    assert spec["containers"][0]["imagePullPolicy"] == "Never"
    assert spec["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("busybox:1.36", "IfNotPresent"),
        ("docker.io/library/busybox", "Always"),
        ("registry.local:5000/team/app", "Always"),
        ("registry.local:5000/team/app:v2", "IfNotPresent"),
        ("localhost/app", "Always"),
        (f"busybox@{DIGEST}", "IfNotPresent"),
        (f"busybox:latest@{DIGEST}", "Always"),
        ("busybox@sha256:abc", "IfNotPresent"),  # a bad digest: does not parse
        ("BusyBox", "IfNotPresent"),  # upper case: does not parse
        ("", "IfNotPresent"),
    ],
)
def test_image_pull_policy(image: str, policy: str) -> None:
    assert default_pull_policy(image) == policy
    p = defaulted(pod(dict(container("c"), image=image)))
    assert p["spec"]["containers"][0]["imagePullPolicy"] == policy


def test_parse_image_reference() -> None:
    assert parse_image_reference("busybox") == ("busybox", "latest", "")
    assert parse_image_reference("r:5000/a/b:1") == ("r:5000/a/b", "1", "")
    assert parse_image_reference(f"a@{DIGEST}") == ("a", "", DIGEST)
    assert parse_image_reference("a" * 64) is None


def test_volumes() -> None:
    volumes = [
        {"name": "bare"},
        {"name": "cm", "configMap": {"name": "c"}},
        {"name": "sec", "secret": {"secretName": "s", "defaultMode": 0o400}},
        {"name": "dapi", "downwardAPI": {"items": [
            {"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}},
        {"name": "proj", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token"}}]}},
        {"name": "hp", "hostPath": {"path": "/tmp"}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "1024Mi"}},
    ]
    spec = defaulted(pod(volumes=volumes))["spec"]
    by_name = {v["name"]: v for v in spec["volumes"]}
    assert by_name["bare"] == {"name": "bare", "emptyDir": {}}
    assert by_name["cm"]["configMap"]["defaultMode"] == 420
    assert by_name["sec"]["secret"]["defaultMode"] == 0o400  # explicit kept
    assert by_name["dapi"]["downwardAPI"]["defaultMode"] == 420
    assert by_name["dapi"]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"] == "v1"
    assert by_name["proj"]["projected"]["defaultMode"] == 420
    token = by_name["proj"]["projected"]["sources"][0]["serviceAccountToken"]
    assert token["expirationSeconds"] == 3600
    assert by_name["hp"]["hostPath"]["type"] == ""
    assert by_name["scratch"]["emptyDir"]["sizeLimit"] == "1Gi"


@pytest.mark.parametrize(
    ("gates", "reference", "expected"),
    [
        (GATES, "quay.io/x/data:latest", "Always"),
        (GATES, "quay.io/x/data", "Always"),
        (GATES, "quay.io/x/data:v1", "IfNotPresent"),
        (dict(GATES, ImageVolume=False), "quay.io/x/data:latest", None),
    ],
)
def test_image_volume_pull_policy(gates: dict[str, bool], reference: str,
                                  expected: str | None) -> None:
    spec = defaulted(pod(volumes=[{"name": "data", "image": {"reference": reference}}]),
                     gates)["spec"]
    assert spec["volumes"][0]["image"].get("pullPolicy") == expected
    assert "emptyDir" not in spec["volumes"][0]


def test_container_members() -> None:
    c = dict(container("c"),
             ports=[{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
             env=[{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
             livenessProbe={"httpGet": {"port": 80}},
             readinessProbe={"exec": {"command": ["true"]}, "periodSeconds": 5},
             lifecycle={"preStop": {"httpGet": {"port": 80, "path": "/stop"}}})
    out = defaulted(pod(c))["spec"]["containers"][0]
    assert [p["protocol"] for p in out["ports"]] == ["TCP", "UDP"]
    assert out["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] == "v1"
    assert out["livenessProbe"] == {"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
                                    "timeoutSeconds": 1, "periodSeconds": 10,
                                    "successThreshold": 1, "failureThreshold": 3}
    assert out["readinessProbe"]["periodSeconds"] == 5
    assert out["lifecycle"]["preStop"]["httpGet"] == {"port": 80, "path": "/stop",
                                                      "scheme": "HTTP"}


def test_host_network_sets_host_ports() -> None:
    c = dict(container("c"), ports=[{"containerPort": 8080}])
    spec = defaulted(pod(c, hostNetwork=True))["spec"]
    assert spec["containers"][0]["ports"][0]["hostPort"] == 8080


def test_deprecated_service_account_follows_the_name() -> None:
    spec = defaulted(pod(serviceAccountName="builder"))["spec"]
    assert spec["serviceAccount"] == "builder"
    spec = defaulted(pod(serviceAccount="old"))["spec"]
    assert spec["serviceAccountName"] == "old"


def test_container_requests_from_limits() -> None:
    c = container("c", limits={"cpu": "1", "memory": "1Gi", ES: "2Gi"},
                  requests={"cpu": "500m"})
    i = container("init", limits={"memory": "64Mi"})
    spec = defaulted(pod(c, init=[i]))["spec"]
    assert spec["containers"][0]["resources"]["requests"] == {
        "cpu": "500m", "memory": "1Gi", ES: "2Gi"}
    assert spec["initContainers"][0]["resources"]["requests"] == {"memory": "64Mi"}


@pytest.mark.parametrize(
    ("raw", "rounded"),
    [("1u", "1m"), ("0.5", "500m"), ("1.5", "1500m"), ("1000m", "1"), ("2048Mi", "2Gi"),
     ("100m", "100m"), ("1n", "1m")],
)
def test_resource_lists_round_up_to_milli(raw: str, rounded: str) -> None:
    c = container("c", limits={"cpu": raw})
    spec = defaulted(pod(c))["spec"]
    assert spec["containers"][0]["resources"]["limits"]["cpu"] == rounded
    assert spec["containers"][0]["resources"]["requests"]["cpu"] == rounded


# --- KEP-6386 worked examples (reference section 3.3) -----------------------------------


def test_kep6386_example_pod_request_from_aggregate_not_from_limit() -> None:
    """pod limits {es: 20Gi}, c1 without resources, c2 limits {es: 2Gi}: c2 requests 2Gi,
    so the pod requests 2Gi (not 20Gi); the pod limit stays 20Gi."""
    p = defaulted(pod(container("c1"), container("c2", limits={ES: "2Gi"}),
                      resources={"limits": {ES: "20Gi"}}))
    assert p["spec"]["containers"][1]["resources"]["requests"] == {ES: "2Gi"}
    assert pod_resources(p) == {"limits": {ES: "20Gi"}, "requests": {ES: "2Gi"}}
    assert validate_pod_create(p, GATES) == []


def test_kep6386_example_pod_request_from_limit_when_no_container_asks() -> None:
    p = defaulted(pod(container("c1"), container("c2"), resources={"limits": {ES: "20Gi"}}))
    assert pod_resources(p) == {"limits": {ES: "20Gi"}, "requests": {ES: "20Gi"}}


def test_kep6386_example_pod_limit_from_aggregate_makes_request_invalid() -> None:
    """pod requests {es: 10Gi}, c1 and c2 limits {es: 4Gi}: the pod limit defaults to 8Gi,
    and the 10Gi request now exceeds it."""
    p = defaulted(pod(container("c1", limits={ES: "4Gi"}), container("c2", limits={ES: "4Gi"}),
                      resources={"requests": {ES: "10Gi"}}))
    assert pod_resources(p) == {"requests": {ES: "10Gi"}, "limits": {ES: "8Gi"}}
    assert [str(e) for e in validate_pod_create(p, GATES)] == [
        'spec.resources.requests: Invalid value: "10Gi": must be less than or equal to '
        "ephemeral-storage limit of 8Gi"]


def test_kep6386_example_pod_limit_with_a_6gi_request() -> None:
    """The reference says the same pod with a 6Gi request "is valid and gets the 8Gi limit".
    It does get the 8Gi limit, but upstream's rules also default each container's request
    to its 4Gi limit, so the containers request 8Gi in total and the 6Gi pod request is
    rejected. With container requests that fit (3Gi each) the 6Gi pod is valid."""
    p = defaulted(pod(container("c1", limits={ES: "4Gi"}), container("c2", limits={ES: "4Gi"}),
                      resources={"requests": {ES: "6Gi"}}))
    assert pod_resources(p)["limits"] == {ES: "8Gi"}
    assert [str(e) for e in validate_pod_create(p, GATES)] == [
        'spec.resources.requests[ephemeral-storage]: Invalid value: "6Gi": must be greater '
        "than or equal to aggregate container requests of 8Gi"]
    p = defaulted(pod(container("c1", limits={ES: "4Gi"}, requests={ES: "3Gi"}),
                      container("c2", limits={ES: "4Gi"}, requests={ES: "3Gi"}),
                      resources={"requests": {ES: "6Gi"}}))
    assert pod_resources(p) == {"requests": {ES: "6Gi"}, "limits": {ES: "8Gi"}}
    assert validate_pod_create(p, GATES) == []


def test_kep6386_example_no_pod_limit_when_one_container_is_unlimited() -> None:
    p = defaulted(pod(container("c1", limits={ES: "4Gi"}), container("c2"),
                      resources={"requests": {ES: "10Gi"}}))
    assert "limits" not in pod_resources(p)


def test_kep6386_example_no_es_limit_when_some_pod_limit_is_set() -> None:
    """pod limits {cpu: 2}, pod requests {es: 1Gi}, every container limits es: no es limit
    default, because a supported pod-level limit already exists."""
    p = defaulted(pod(container("c1", limits={ES: "512Mi"}),
                      container("c2", limits={ES: "256Mi"}),
                      resources={"limits": {"cpu": "2"}, "requests": {ES: "1Gi"}}))
    assert pod_resources(p)["limits"] == {"cpu": "2"}
    assert pod_resources(p)["requests"] == {ES: "1Gi", "cpu": "2"}


def test_kep6386_prr_enabling_the_gate_defaults_pod_es_requests() -> None:
    """PRR: a pod with pod.spec.resources (cpu) and container-level ephemeral-storage gets
    the pod-level ephemeral-storage request from the containers once the gate is on."""
    def build() -> dict[str, Any]:
        return pod(container("c1", limits={ES: "1Gi"}), container("c2", limits={ES: "2Gi"}),
                   resources={"limits": {"cpu": "2"}})
    on, off = defaulted(build(), GATES), defaulted(build(), ES_OFF)
    assert pod_resources(on)["requests"] == {ES: "3Gi", "cpu": "2"}
    assert pod_resources(off)["requests"] == {"cpu": "2"}
    assert validate_pod_create(on, GATES) == []
    assert validate_pod_create(off, ES_OFF) == []


def test_kep6386_prr_pod_limit_from_containers_when_all_limit_es() -> None:
    def build() -> dict[str, Any]:
        return pod(container("c1", limits={ES: "1Gi"}), container("c2", limits={ES: "2Gi"}),
                   resources={"requests": {"cpu": "1"}})
    on, off = defaulted(build(), GATES), defaulted(build(), ES_OFF)
    assert pod_resources(on)["limits"] == {ES: "3Gi"}
    assert "limits" not in pod_resources(off)


def test_empty_dir_size_limit_plays_no_part() -> None:
    p = defaulted(pod(container("c"), volumes=[{"name": "s", "emptyDir": {"sizeLimit": "5Gi"}}],
                      resources={"requests": {"cpu": "1"}}))
    assert "limits" not in pod_resources(p)
    assert ES not in pod_resources(p)["requests"]


def test_sidecar_formula_in_pod_request_default() -> None:
    """An init container runs alone; a sidecar keeps running: requests default to
    max(regular + sidecars, init + sidecars before it)."""
    sidecar = dict(container("side", requests={"cpu": "200m"}), restartPolicy="Always")
    init = container("init", requests={"cpu": "2"})
    p = defaulted(pod(container("c", requests={"cpu": "500m"}), init=[sidecar, init],
                      resources={"limits": {"cpu": "4"}}))
    assert pod_resources(p)["requests"] == {"cpu": "2200m"}


def test_kep2837_row6_request_from_containers_exceeds_limit() -> None:
    """KEP-2837 row 6: pod limit 100Gi, two containers limited to 60Gi: the pod request
    defaults to 120Gi and the pod is invalid."""
    p = defaulted(pod(container("a", limits={"memory": "60Gi"}),
                      container("b", limits={"memory": "60Gi"}),
                      resources={"limits": {"memory": "100Gi"}}))
    assert pod_resources(p)["requests"] == {"memory": "120Gi"}
    assert [str(e) for e in validate_pod_create(p, GATES)] == [
        'spec.resources.requests: Invalid value: "120Gi": must be less than or equal to '
        "memory limit of 100Gi"]


def test_hugepage_pod_limits_default_from_containers() -> None:
    p = defaulted(pod(container("c", limits={"hugepages-2Mi": "4Mi", "memory": "1Gi"}),
                      resources={"requests": {"cpu": "1"}}))
    assert pod_resources(p)["limits"]["hugepages-2Mi"] == "4Mi"
    # not when the pod requests that hugepage size itself
    p = defaulted(pod(container("c", limits={"hugepages-2Mi": "4Mi", "memory": "1Gi"}),
                      resources={"requests": {"hugepages-2Mi": "4Mi"}}))
    assert "hugepages-2Mi" not in pod_resources(p).get("limits", {})


def test_pod_level_defaults_need_the_gate() -> None:
    p = defaulted(pod(container("c", limits={"cpu": "1"}), resources={"limits": {"cpu": "2"}}),
                  PLR_OFF)
    assert pod_resources(p) == {"limits": {"cpu": "2"}}


def test_es_pod_limit_is_not_copied_to_requests_with_its_gate_off() -> None:
    p = defaulted(pod(container("c"), resources={"limits": {ES: "1Gi", "cpu": "1"}}), ES_OFF)
    assert pod_resources(p)["requests"] == {"cpu": "1"}


def test_pod_level_quantities_round_up() -> None:
    p = defaulted(pod(container("c"), resources={"limits": {"cpu": "1u"}}))
    assert pod_resources(p) == {"limits": {"cpu": "1m"}, "requests": {"cpu": "1m"}}


def test_defaulting_twice_changes_nothing() -> None:
    p = pod(container("c1", limits={ES: "1Gi", "cpu": "0.5"}),
            init=[dict(container("s", limits={"cpu": "100m"}), restartPolicy="Always")],
            volumes=[{"name": "v"}, {"name": "cm", "configMap": {"name": "x"}}],
            resources={"limits": {ES: "4Gi"}})
    once = defaulted(p)
    twice = defaulted(copy.deepcopy(once))
    assert once == twice


# --- dropping the fields of disabled features ----------------------------------------------


def test_drop_disabled_fields_on_create() -> None:
    p = pod(dict(container("c"), volumeMounts=[{"name": "img", "mountPath": "/i"},
                                               {"name": "e", "mountPath": "/e"}],
                 dynamicVolumePolicy={"restartPolicy": "RestartContainer"}),
            volumes=[{"name": "img", "image": {"reference": "x"}}, {"name": "e", "emptyDir": {}}],
            resources={"limits": {"cpu": "1"}})
    off = {name: False for name in GATES}
    drop_disabled_pod_fields(p, None, off)
    spec = p["spec"]
    assert "resources" not in spec
    assert spec["volumes"] == [{"name": "e", "emptyDir": {}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "e", "mountPath": "/e"}]
    assert "dynamicVolumePolicy" not in spec["containers"][0]


def test_drop_disabled_fields_keeps_what_the_old_pod_uses() -> None:
    old = pod(volumes=[{"name": "img", "image": {"reference": "x"}}],
              resources={"limits": {"cpu": "1"}})
    new = copy.deepcopy(old)
    drop_disabled_pod_fields(new, old, {name: False for name in GATES})
    assert new == old
    kept = pod(volumes=[{"name": "img", "image": {"reference": "x"}}])
    drop_disabled_pod_fields(kept, None, GATES)
    assert kept["spec"]["volumes"][0]["name"] == "img"

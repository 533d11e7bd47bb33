"""Pod validation (`ephemera.pods.validation`): upstream's exact messages and field paths for
create, plain update and status update, KEP-2837/KEP-6386 pod-level resources included."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from ephemera.api import errors
from ephemera.api.featuregates import DEFAULTS
from ephemera.pods.defaults import default_pod
from ephemera.pods.validation import (
    UPDATABLE_POD_SPEC_FIELDS,
    validate_pod_create,
    validate_pod_status_update,
    validate_pod_update,
)

GATES: dict[str, bool] = dict(DEFAULTS)
ES_OFF = dict(GATES, PodLevelResourcesEphemeralStorage=False)
PLR_OFF = dict(GATES, PodLevelResources=False)
ES = "ephemeral-storage"
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
FORBIDDEN_PREFIX = (
    "spec: Forbidden: pod updates may not change fields other than "
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously "
    "negative)\n"
)


def ctr(name: str = "c", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", **fields}


def res(**lists: dict[str, str]) -> dict[str, Any]:
    return {"resources": dict(lists)}


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers) if containers else [ctr()]}
    body.update(spec)
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": body}


def create_errors(p: dict[str, Any], gates: dict[str, bool] = GATES) -> list[str]:
    default_pod(p, gates)
    return [str(e) for e in validate_pod_create(p, gates)]


# --- create: table of single rules ------------------------------------------------------

Case = tuple[str, Callable[[], dict[str, Any]], list[str]]

CASES: list[Case] = [
    ("valid", lambda: pod(), []),
    ("containers required", lambda: pod(containers=[]), ["spec.containers: Required value"]),
    ("pod name is a subdomain", lambda: {"metadata": {"name": "P_1", "namespace": "d"},
                                         "spec": {"containers": [ctr()]}},
     ['metadata.name: Invalid value: "P_1": a lowercase RFC 1123 subdomain must consist of '
      "lower case alphanumeric characters, '-' or '.', and must start and end with an "
      "alphanumeric character (e.g. 'example.com', regex used for validation is "
      "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]),
    ("bad label value", lambda: {"metadata": {"name": "p", "namespace": "d",
                                              "labels": {"app": "a b"}},
                                 "spec": {"containers": [ctr()]}},
     ['metadata.labels: Invalid value: "a b": a valid label must be an empty string or consist '
      "of alphanumeric characters, '-', '_' or '.', and must start and end with an "
      "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
      "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"]),
    ("container name required", lambda: pod(ctr("")),
     ["spec.containers[0].name: Required value"]),
    ("container name is a label", lambda: pod(ctr("Web")),
     [f'spec.containers[0].name: Invalid value: "Web": {LABEL_MSG}']),
    ("container name without dots", lambda: pod(ctr("a.b")),
     ['spec.containers[0].name: Invalid value: "a.b": must not contain dots']),
    ("duplicate containers", lambda: pod(ctr("c"), ctr("c")),
     ['spec.containers[1].name: Duplicate value: "c"']),
    ("init name clashes with a container", lambda: pod(ctr("c"), initContainers=[ctr("c")]),
     ['spec.initContainers[0].name: Duplicate value: "c"']),
    ("duplicate init containers", lambda: pod(initContainers=[ctr("i"), ctr("i")]),
     ['spec.initContainers[1].name: Duplicate value: "i"']),
    ("image required", lambda: pod(ctr("c", image="")),
     ["spec.containers[0].image: Required value"]),
    ("image without surrounding spaces", lambda: pod(ctr("c", image=" busybox")),
     ['spec.containers[0].image: Invalid value: " busybox": must not have leading or trailing '
      "whitespace"]),
    ("ephemeral containers not on create",
     lambda: pod(ephemeralContainers=[{"name": "dbg", "image": "busybox"}]),
     ["spec.ephemeralContainers: Forbidden: cannot be set on create"]),
    ("nodeName with scheduling gates",
     lambda: pod(nodeName="n1", schedulingGates=[{"name": "example.com/wait"}]),
     ["spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"]),
    # volumes
    ("duplicate volumes", lambda: pod(volumes=[{"name": "x"}, {"name": "x"}]),
     ['spec.volumes[1].name: Duplicate value: "x"']),
    ("volume name is a label", lambda: pod(volumes=[{"name": "X"}]),
     [f'spec.volumes[0].name: Invalid value: "X": {LABEL_MSG}']),
    ("volume name too long", lambda: pod(volumes=[{"name": "v" * 64}]),
     [f'spec.volumes[0].name: Invalid value: "{"v" * 64}": must be no more than 63 characters']),
    ("volume name required", lambda: pod(volumes=[{"emptyDir": {}}]),
     ["spec.volumes[0].name: Required value"]),
    ("two volume types", lambda: pod(volumes=[{"name": "v", "emptyDir": {},
                                               "configMap": {"name": "c"}}]),
     ["spec.volumes[0].configMap: Forbidden: may not specify more than 1 volume type"]),
    ("two volume types, upstream's downwarAPI typo",
     lambda: pod(volumes=[{"name": "v", "secret": {"secretName": "s"}, "downwardAPI": {}}]),
     ["spec.volumes[0].downwarAPI: Forbidden: may not specify more than 1 volume type"]),
    ("configMap name required", lambda: pod(volumes=[{"name": "v", "configMap": {}}]),
     ["spec.volumes[0].configMap.name: Required value"]),
    ("secret name required", lambda: pod(volumes=[{"name": "v", "secret": {}}]),
     ["spec.volumes[0].secret.secretName: Required value"]),
    ("file mode range",
     lambda: pod(volumes=[{"name": "v", "configMap": {"name": "c", "defaultMode": 512}}]),
     ["spec.volumes[0].configMap.defaultMode: Invalid value: 512: must be a number between 0 "
      "and 0777 (octal), both inclusive"]),
    ("item path relative",
     lambda: pod(volumes=[{"name": "v", "secret": {"secretName": "s",
                                                   "items": [{"key": "k", "path": "/abs"}]}}]),
     ['spec.volumes[0].secret.items[0].path: Invalid value: "/abs": must be a relative path']),
    ("negative emptyDir sizeLimit",
     lambda: pod(volumes=[{"name": "v", "emptyDir": {"sizeLimit": "-1"}}]),
     ["spec.volumes[0].emptyDir.sizeLimit: Forbidden: SizeLimit field must be a valid resource "
      "quantity"]),
    ("image volume reference required", lambda: pod(volumes=[{"name": "v", "image": {}}]),
     ["spec.volumes[0].image.reference: Required value"]),
    ("image volume pull policy",
     lambda: pod(volumes=[{"name": "v", "image": {"reference": "r", "pullPolicy": "Sometimes"}}]),
     ['spec.volumes[0].image.pullPolicy: Unsupported value: "Sometimes": supported values: '
      '"Always", "IfNotPresent", "Never"']),
    ("hostPath path required", lambda: pod(volumes=[{"name": "v", "hostPath": {}}]),
     ["spec.volumes[0].hostPath.path: Required value"]),
    ("pvc claim required", lambda: pod(volumes=[{"name": "v", "persistentVolumeClaim": {}}]),
     ["spec.volumes[0].persistentVolumeClaim.claimName: Required value"]),
    # volume mounts
    ("mount of a missing volume", lambda: pod(ctr("c", volumeMounts=[{"name": "x",
                                                                       "mountPath": "/x"}])),
     ['spec.containers[0].volumeMounts[0].name: Not found: "x"']),
    ("mount of an invalid volume is not found",
     lambda: pod(ctr("c", volumeMounts=[{"name": "v", "mountPath": "/x"}]),
                 volumes=[{"name": "v", "configMap": {}}]),
     ["spec.volumes[0].configMap.name: Required value",
      'spec.containers[0].volumeMounts[0].name: Not found: "v"']),
    ("mount path required", lambda: pod(ctr("c", volumeMounts=[{"name": "v"}]),
                                        volumes=[{"name": "v"}]),
     ["spec.containers[0].volumeMounts[0].mountPath: Required value"]),
    ("mount paths unique",
     lambda: pod(ctr("c", volumeMounts=[{"name": "v", "mountPath": "/data"},
                                        {"name": "w", "mountPath": "/data"}]),
                 volumes=[{"name": "v"}, {"name": "w"}]),
     ['spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/data": must be unique']),
    ("subPath absolute, upstream's path without index",
     lambda: pod(ctr("c", volumeMounts=[{"name": "v", "mountPath": "/d", "subPath": "/a"}]),
                 volumes=[{"name": "v"}]),
     ['spec.containers[0].volumeMounts.subPath: Invalid value: "/a": must be a relative path']),
    ("subPath backsteps",
     lambda: pod(ctr("c", volumeMounts=[{"name": "v", "mountPath": "/d", "subPath": "a/../.."}]),
                 volumes=[{"name": "v"}]),
     ["spec.containers[0].volumeMounts.subPath: Invalid value: \"a/../..\": must not contain "
      "'..'"]),
    ("subPath and subPathExpr",
     lambda: pod(ctr("c", volumeMounts=[{"name": "v", "mountPath": "/d", "subPath": "a",
                                         "subPathExpr": "$(X)"}]), volumes=[{"name": "v"}]),
     ['spec.containers[0].volumeMounts[0].subPathExpr: Invalid value: "$(X)": subPathExpr and '
      "subPath are mutually exclusive"]),
    ("bidirectional needs privileged",
     lambda: pod(ctr("c", volumeMounts=[{"name": "v", "mountPath": "/d",
                                         "mountPropagation": "Bidirectional"}]),
                 volumes=[{"name": "v"}]),
     ["spec.containers[0].volumeMounts.mountPropagation: Forbidden: Bidirectional mount "
      "propagation is available only to privileged containers"]),
    ("recursiveReadOnly needs readOnly",
     lambda: pod(ctr("c", volumeMounts=[{"name": "v", "mountPath": "/d",
                                         "recursiveReadOnly": "Enabled"}]),
                 volumes=[{"name": "v"}]),
     ["spec.containers[0].volumeMounts.recursiveReadOnly: Forbidden: may only be specified "
      "when readOnly is true"]),
    ("image volume subPath allowed (1.33+)",
     lambda: pod(ctr("c", volumeMounts=[{"name": "v", "mountPath": "/d", "subPath": "a"}]),
                 volumes=[{"name": "v", "image": {"reference": "quay.io/x:1"}}]), []),
    # ports
    ("container port required", lambda: pod(ctr("c", ports=[{"containerPort": 0}])),
     ["spec.containers[0].ports[0].containerPort: Required value"]),
    ("container port range", lambda: pod(ctr("c", ports=[{"containerPort": 70000}])),
     ["spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and "
      "65535, inclusive"]),
    ("protocol", lambda: pod(ctr("c", ports=[{"containerPort": 80, "protocol": "FOO"}])),
     ['spec.containers[0].ports[0].protocol: Unsupported value: "FOO": supported values: '
      '"SCTP", "TCP", "UDP"']),
    ("port names unique",
     lambda: pod(ctr("c", ports=[{"containerPort": 80, "name": "http"},
                                 {"containerPort": 81, "name": "http"}])),
     ['spec.containers[0].ports[1].name: Duplicate value: "http"']),
    ("port name format", lambda: pod(ctr("c", ports=[{"containerPort": 80, "name": "a--b"}])),
     ['spec.containers[0].ports[0].name: Invalid value: "a--b": must not contain consecutive '
      "hyphens"]),
    ("host ports unique",
     lambda: pod(ctr("a", ports=[{"containerPort": 80, "hostPort": 8080}]),
                 ctr("b", ports=[{"containerPort": 81, "hostPort": 8080}])),
     ['spec.containers[1].ports[0].hostPort: Duplicate value: "TCP//8080"']),
    # env
    ("env name required", lambda: pod(ctr("c", env=[{"value": "x"}])),
     ["spec.containers[0].env[0].name: Required value"]),
    ("env name", lambda: pod(ctr("c", env=[{"name": "A=B"}])),
     ['spec.containers[0].env[0].name: Invalid value: "A=B": a valid environment variable name '
      "must consist only of printable ASCII characters other than '='"]),
    ("env valueFrom empty", lambda: pod(ctr("c", env=[{"name": "A", "valueFrom": {}}])),
     ['spec.containers[0].env[0].valueFrom: Invalid value: "": must specify one of: '
      "`fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"]),
    ("env fieldRef path",
     lambda: pod(ctr("c", env=[{"name": "A", "valueFrom": {"fieldRef": {
         "fieldPath": "spec.restartPolicy"}}}])),
     ['spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Unsupported value: '
      '"spec.restartPolicy": supported values: "metadata.name", "metadata.namespace", '
      '"metadata.uid", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", '
      '"status.hostIPs", "status.podIP", "status.podIPs"']),
    # policies
    ("pull policy", lambda: pod(ctr("c", imagePullPolicy="Sometimes")),
     ['spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes": supported values: '
      '"Always", "IfNotPresent", "Never"']),
    ("termination message policy", lambda: pod(ctr("c", terminationMessagePolicy="Log")),
     ['spec.containers[0].terminationMessagePolicy: Unsupported value: "Log": supported '
      'values: "File", "FallbackToLogsOnError"']),
    ("restart policy", lambda: pod(restartPolicy="Sometimes"),
     ['spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", '
      '"OnFailure", "Never"']),
    ("dns policy", lambda: pod(dnsPolicy="Google"),
     ['spec.dnsPolicy: Unsupported value: "Google": supported values: '
      '"ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"']),
    ("dnsPolicy None needs dnsConfig", lambda: pod(dnsPolicy="None"),
     ["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"]),
    ("negative grace period", lambda: pod(terminationGracePeriodSeconds=-1),
     ["spec.terminationGracePeriodSeconds: Invalid value: -1: must be greater than or equal "
      "to 0"]),
    ("active deadline range", lambda: pod(activeDeadlineSeconds=0),
     ["spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, "
      "inclusive"]),
    # sidecars
    ("sidecar init container", lambda: pod(initContainers=[ctr("s", restartPolicy="Always",
                                                                  readinessProbe={"exec": {
                                                                      "command": ["true"]}})]),
     []),
    ("init restartPolicy only Always",
     lambda: pod(initContainers=[ctr("i", restartPolicy="OnFailure")]),
     ['spec.initContainers[0].restartPolicy: Unsupported value: "OnFailure": supported values: '
      '"Always"']),
    ("restartPolicy not on regular containers", lambda: pod(ctr("c", restartPolicy="Always")),
     ["spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers"]),
    ("probes only on sidecar init containers",
     lambda: pod(initContainers=[ctr("i", readinessProbe={"exec": {"command": ["true"]}})]),
     ["spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers "
      "without restartPolicy=Always"]),
    ("probe handler required", lambda: pod(ctr("c", livenessProbe={"periodSeconds": 3})),
     ["spec.containers[0].livenessProbe: Required value: must specify a handler type"]),
    ("liveness success threshold",
     lambda: pod(ctr("c", livenessProbe={"exec": {"command": ["x"]}, "successThreshold": 2})),
     ["spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"]),
    # container resources
    ("request above limit",
     lambda: pod(ctr("c", **res(limits={"cpu": "1"}, requests={"cpu": "2"}))),
     ['spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal '
      "to cpu limit of 1"]),
    ("negative quantity", lambda: pod(ctr("c", **res(requests={"memory": "-1"}))),
     ['spec.containers[0].resources.requests[memory]: Invalid value: "-1": must be greater '
      "than or equal to 0"]),
    ("not a container resource", lambda: pod(ctr("c", **res(limits={"ACTOKEY": "3"}))),
     ['spec.containers[0].resources.limits[ACTOKEY]: Invalid value: "ACTOKEY": must be a '
      "standard resource type or fully qualified",
      'spec.containers[0].resources.limits[ACTOKEY]: Invalid value: "ACTOKEY": must be a '
      "standard resource for containers",
      'spec.containers[0].resources.requests[ACTOKEY]: Invalid value: "ACTOKEY": must be a '
      "standard resource type or fully qualified",
      'spec.containers[0].resources.requests[ACTOKEY]: Invalid value: "ACTOKEY": must be a '
      "standard resource for containers"]),
    ("extended resource request must equal limit",
     lambda: pod(ctr("c", **res(limits={"example.com/gpu": "2"},
                                requests={"example.com/gpu": "1"}))),
     ['spec.containers[0].resources.requests: Invalid value: "1": must be equal to '
      "example.com/gpu limit of 2"]),
    ("extended resource needs a limit",
     lambda: pod(ctr("c", **res(requests={"example.com/gpu": "1"}))),
     ["spec.containers[0].resources.limits: Required value: Limit must be set for non "
      "overcommitable resources"]),
    ("extended resource is an integer",
     lambda: pod(ctr("c", **res(limits={"example.com/gpu": "500m"}))),
     ['spec.containers[0].resources.limits[example.com/gpu]: Invalid value: "500m": must be '
      "an integer",
      'spec.containers[0].resources.requests[example.com/gpu]: Invalid value: "500m": must be '
      "an integer"]),
    ("hugepages need cpu or memory", lambda: pod(ctr("c", **res(limits={"hugepages-2Mi": "4Mi"}))),
     ["spec.containers[0].resources: Forbidden: HugePages require cpu or memory"]),
    ("hugepages whole pages",
     lambda: pod(ctr("c", **res(limits={"hugepages-2Mi": "3Mi", "memory": "1Gi"}))),
     ['spec.containers[0].resources.limits[hugepages-2Mi]: Invalid value: "3Mi": 3Mi is not '
      "positive integer multiple of hugepages-2Mi",
      'spec.containers[0].resources.requests[hugepages-2Mi]: Invalid value: "3Mi": 3Mi is not '
      "positive integer multiple of hugepages-2Mi"]),
    # misc spec
    ("toleration operator",
     lambda: pod(tolerations=[{"key": "k", "operator": "Maybe"}]),
     ['spec.tolerations[0].operator: Unsupported value: "Maybe": supported values: "Equal", '
      '"Exists"']),
    ("scheduling gates unique",
     lambda: pod(schedulingGates=[{"name": "example.com/a"}, {"name": "example.com/a"}]),
     ['spec.schedulingGates[1]: Duplicate value: "example.com/a"']),
    ("dynamicVolumePolicy enum (KEP-6395)",
     lambda: pod(ctr("c", dynamicVolumePolicy={"restartPolicy": "Never"})),
     ['spec.containers[0].dynamicVolumePolicy.restartPolicy: Unsupported value: "Never": '
      'supported values: "NotRequired", "RestartContainer"']),
    ("projected token needs a service account",
     lambda: pod(volumes=[{"name": "t", "projected": {"sources": [
         {"serviceAccountToken": {"path": "token"}}]}}]),
     ["spec.volumes[0].projected.sources[0].serviceAccountToken: Forbidden: must not be "
      "specified when serviceAccountName is not set"]),
]


@pytest.mark.parametrize(("build", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_create_rules(build: Callable[[], dict[str, Any]], expected: list[str]) -> None:
    assert create_errors(build()) == expected


def test_error_causes_carry_reason_and_field() -> None:
    p = pod(ctr("c", volumeMounts=[{"name": "x", "mountPath": "/x"}]))
    default_pod(p, GATES)
    (err,) = validate_pod_create(p, GATES)
    assert err.cause() == {"reason": "FieldValueNotFound", "message": 'Not found: "x"',
                           "field": "spec.containers[0].volumeMounts[0].name"}


# --- pod-level resources (KEP-2837, KEP-6386) -------------------------------------------

UNSUPPORTED_ES = ('Unsupported value: "ephemeral-storage": supported values: "cpu", '
                  '"hugepages-", "memory"')


def test_pod_level_es_rejected_with_its_gate_off() -> None:
    p = pod(resources={"requests": {ES: "1Gi"}, "limits": {ES: "2Gi"}})
    assert create_errors(p, ES_OFF) == [
        f"spec.resources.limits[ephemeral-storage]: {UNSUPPORTED_ES}",
        f"spec.resources.requests[ephemeral-storage]: {UNSUPPORTED_ES}",
    ]


def test_pod_level_es_request_only_with_gate_off() -> None:
    assert create_errors(pod(resources={"requests": {ES: "1Gi"}}), ES_OFF) == [
        f"spec.resources.requests[ephemeral-storage]: {UNSUPPORTED_ES}"]


def test_pod_level_es_accepted_with_the_gate() -> None:
    p = pod(ctr("a", **res(requests={ES: "1Gi"}, limits={ES: "2Gi"})), ctr("b"),
            resources={"requests": {ES: "2Gi"}, "limits": {ES: "5Gi"}})
    assert create_errors(p) == []


def test_unsupported_pod_level_resource_lists_es_with_the_gate() -> None:
    assert create_errors(pod(resources={"limits": {"example.com/gpu": "1"}})) == [
        'spec.resources.limits[example.com/gpu]: Unsupported value: "example.com/gpu": '
        'supported values: "cpu", "ephemeral-storage", "hugepages-", "memory"']


def test_pod_level_nonstandard_name() -> None:
    assert create_errors(pod(resources={"limits": {"foo": "1"}})) == [
        'spec.resources.limits[foo]: Invalid value: "foo": must be a standard resource type or '
        "fully qualified"]


def test_pod_level_negative_quantities() -> None:
    assert create_errors(pod(resources={"limits": {"cpu": "-1"}})) == [
        'spec.resources.limits[cpu]: Invalid value: "-1": must be greater than or equal to 0',
        'spec.resources.requests[cpu]: Invalid value: "-1": must be greater than or equal to 0']


def test_pod_level_request_above_limit() -> None:
    p = pod(resources={"requests": {ES: "6Gi"}, "limits": {ES: "5Gi"}})
    assert create_errors(p) == [
        'spec.resources.requests: Invalid value: "6Gi": must be less than or equal to '
        "ephemeral-storage limit of 5Gi"]


def test_aggregate_container_requests_above_pod_request() -> None:
    p = pod(ctr("a", **res(requests={ES: "1Gi"})), ctr("b", **res(requests={ES: "1Gi"})),
            resources={"requests": {ES: "1Gi"}})
    assert create_errors(p) == [
        'spec.resources.requests[ephemeral-storage]: Invalid value: "1Gi": must be greater '
        "than or equal to aggregate container requests of 2Gi"]


def test_container_limit_above_pod_limit_has_upstreams_odd_path() -> None:
    p = pod(ctr("a", **res(requests={ES: "1Gi"}, limits={ES: "6Gi"})),
            resources={"requests": {ES: "2Gi"}, "limits": {ES: "5Gi"}})
    assert create_errors(p) == [
        'spec.resources.containers[0][ephemeral-storage].limits: Invalid value: "6Gi": must be '
        "less than or equal to pod limits of 5Gi"]


def test_sum_of_container_limits_may_exceed_pod_limit() -> None:
    p = pod(ctr("a", **res(requests={ES: "1Gi"}, limits={ES: "4Gi"})),
            ctr("b", **res(requests={ES: "1Gi"}, limits={ES: "4Gi"})),
            resources={"requests": {ES: "2Gi"}, "limits": {ES: "5Gi"}})
    assert create_errors(p) == []


def test_aggregate_uses_the_sidecar_formula() -> None:
    """Regular 1Gi + sidecar 1Gi = 2Gi, but the init container with the sidecar before it
    needs 3Gi: the pod request must cover 3Gi."""
    sidecar = ctr("s", restartPolicy="Always", **res(requests={ES: "1Gi"}))
    init = ctr("i", **res(requests={ES: "2Gi"}))
    p = pod(ctr("a", **res(requests={ES: "1Gi"})), initContainers=[sidecar, init],
            resources={"requests": {ES: "2Gi"}})
    assert create_errors(p) == [
        'spec.resources.requests[ephemeral-storage]: Invalid value: "2Gi": must be greater '
        "than or equal to aggregate container requests of 3Gi"]


def test_real_example_cpu_request_below_aggregate() -> None:
    """reference 9.3: `spec.resources.requests[cpu]: Invalid value: "1": must be greater than
    or equal to aggregate container requests of 1500m`, as a 422 cause and message."""
    p = pod(ctr("a", **res(requests={"cpu": "1", "memory": "512Mi"})),
            ctr("b", **res(requests={"cpu": "500m", "memory": "128Mi"})),
            resources={"requests": {"cpu": "1", "memory": "576Mi"}})
    p["metadata"]["name"] = "fry"
    default_pod(p, GATES)
    errs = validate_pod_create(p, GATES)
    assert errs[0].cause() == {
        "reason": "FieldValueInvalid",
        "message": 'Invalid value: "1": must be greater than or equal to aggregate container '
                   "requests of 1500m",
        "field": "spec.resources.requests[cpu]"}
    status = errors.invalid("Pod", "fry", errs)
    assert status.code == 422
    assert str(status.message) == (
        'Pod "fry" is invalid: [spec.resources.requests[cpu]: Invalid value: "1": must be greater '
        "than or equal to aggregate container requests of 1500m, "
        'spec.resources.requests[memory]: Invalid value: "576Mi": must be greater than or equal '
        "to aggregate container requests of 640Mi]")


def test_unsupported_container_resources_are_not_compared_k8s_132449() -> None:
    """k/k#132449: pod-level cpu with a container ephemeral-storage request. With the ES gate
    off ephemeral-storage is not a pod-level resource and is not compared; with it on it is,
    and the pod request defaults to the aggregate (KEP-6386 PRR: such pods stay valid when the
    gate is turned on)."""
    def build() -> dict[str, Any]:
        return pod(ctr("c", **res(requests={ES: "10Mi"})), resources={"requests": {"cpu": "300m"}})
    assert create_errors(build(), ES_OFF) == []
    p = build()
    assert create_errors(p, GATES) == []
    assert p["spec"]["resources"] == {"requests": {"cpu": "300m", ES: "10Mi"}}


def test_pod_level_claims_forbidden() -> None:
    p = pod(resources={"claims": [{"name": "gpu"}], "limits": {"cpu": "1"}})
    assert "spec.resources.claims: Forbidden: claims cannot be set for Resources at pod-level" \
        in create_errors(p)


def test_pod_level_resources_not_validated_without_the_gate() -> None:
    p = pod(resources={"limits": {"foo": "1"}})
    assert create_errors(p, PLR_OFF) == []


# --- update -----------------------------------------------------------------------------


def stored(p: dict[str, Any] | None = None) -> dict[str, Any]:
    p = p or pod(ctr("c"), volumes=[{"name": "v"}], tolerations=[
        {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute",
         "tolerationSeconds": 10}])
    p["metadata"].update(uid="u1", resourceVersion="5", creationTimestamp="2026-01-01T00:00:00Z")
    default_pod(p, GATES)
    assert validate_pod_create(p, GATES) == []
    return p


def update_errors(mutate: Callable[[dict[str, Any]], None],
                  old: dict[str, Any] | None = None,
                  gates: dict[str, bool] = GATES) -> list[str]:
    old = old or stored()
    new = copy.deepcopy(old)
    mutate(new)
    default_pod(new, gates)
    return [str(e) for e in validate_pod_update(new, old, gates)]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(p: dict[str, Any]) -> None:
        target: Any = p
        keys = path.split(".")
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target[key]
        last = keys[-1]
        if last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value
    return mutate


ALLOWED_UPDATES: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("nothing", lambda p: None),
    ("labels", _set("metadata.labels", {"a": "b"})),
    ("container image", _set("spec.containers.0.image", "busybox:1.37")),
    ("active deadline set", _set("spec.activeDeadlineSeconds", 100)),
    ("toleration added", lambda p: p["spec"]["tolerations"].append(
        {"key": "x", "operator": "Exists"})),
    ("tolerationSeconds changed", _set("spec.tolerations.0.tolerationSeconds", 5)),
    ("explicit zero of a plain field", _set("spec.hostNetwork", False)),
]


@pytest.mark.parametrize("mutate", [m for _, m in ALLOWED_UPDATES],
                         ids=[n for n, _ in ALLOWED_UPDATES])
def test_allowed_updates(mutate: Callable[[dict[str, Any]], None]) -> None:
    assert update_errors(mutate) == []


def test_quantity_spelling_is_not_a_change() -> None:
    old = stored(pod(ctr("c", **res(limits={"memory": "1Gi"}))))
    assert update_errors(_set("spec.containers.0.resources.limits.memory", "1024Mi"),
                         old) == []


def test_init_container_image_may_change() -> None:
    old = stored(pod(ctr("c"), initContainers=[ctr("i")]))
    assert update_errors(_set("spec.initContainers.0.image", "alpine"), old) == []


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda p: p["spec"]["containers"].append(ctr("d")),
         ["spec.containers: Forbidden: pod updates may not add or remove containers"]),
        (_set("spec.containers.0.image", ""),  # upstream reports it twice (spec and update)
         ["spec.containers[0].image: Required value"] * 2),
        (_set("metadata.name", "q"), ['metadata.name: Invalid value: "q": field is immutable']),
        (_set("metadata.uid", "u2"), ['metadata.uid: Invalid value: "u2": field is immutable']),
        (_set("metadata.namespace", "other"),
         ['metadata.namespace: Invalid value: "other": field is immutable']),
        (_set("spec.tolerations.0.value", "w"),
         ["spec.tolerations: Forbidden: existing toleration can not be modified except its "
          "tolerationSeconds"]),
        (lambda p: p["spec"].update(schedulingGates=[{"name": "example.com/late"}]),
         ["spec.schedulingGates[0].name: Forbidden: only deletion is allowed, but found new "
          "scheduling gate 'example.com/late'"]),
    ],
)
def test_rejected_updates(mutate: Callable[[dict[str, Any]], None], expected: list[str]) -> None:
    assert update_errors(mutate) == expected


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p["spec"]["volumes"].append({"name": "w", "emptyDir": {}}),
        _set("spec.containers.0.volumeMounts", [{"name": "v", "mountPath": "/v"}]),
        _set("spec.containers.0.resources", {"limits": {"cpu": "1"}}),
        _set("spec.restartPolicy", "Never"),
        _set("spec.nodeName", "node-1"),
        _set("spec.hostNetwork", True),
        _set("spec.securityContext", {"runAsUser": 0}),
        _set("spec.terminationGracePeriodSeconds", 5),
        _set("spec.containers.0.dynamicVolumePolicy", {"restartPolicy": "RestartContainer"}),
    ],
    ids=["volume added", "mount added", "resources", "restartPolicy", "nodeName",
         "hostNetwork", "runAsUser 0", "grace period", "dynamicVolumePolicy"],
)
def test_spec_is_otherwise_immutable(mutate: Callable[[dict[str, Any]], None]) -> None:
    errs = update_errors(mutate)
    assert len(errs) == 1
    assert errs[0].startswith(FORBIDDEN_PREFIX)
    assert "core.PodSpec{" in errs[0]


def test_forbidden_update_diff_names_the_field() -> None:
    (err,) = update_errors(_set("spec.restartPolicy", "Never"))
    diff = err[len(FORBIDDEN_PREFIX):]
    assert [line for line in diff.splitlines() if line[:1] in "-+"] == [
        '- \tRestartPolicy:                 "Always",',
        '+ \tRestartPolicy:                 "Never",']
    assert ",".join(UPDATABLE_POD_SPEC_FIELDS) in err


def test_active_deadline_rules() -> None:
    old = stored(pod(activeDeadlineSeconds=100))
    assert update_errors(_set("spec.activeDeadlineSeconds", 50), old) == []
    assert update_errors(_set("spec.activeDeadlineSeconds", 200), old) == [
        "spec.activeDeadlineSeconds: Invalid value: 200: must be less than or equal to previous "
        "value"]
    assert update_errors(lambda p: p["spec"].pop("activeDeadlineSeconds"), old) == [
        'spec.activeDeadlineSeconds: Invalid value: "null": must not update from a positive '
        "integer to nil value"]


def test_negative_grace_period_may_become_one() -> None:
    old = stored(pod())
    old["spec"]["terminationGracePeriodSeconds"] = -1  # stored by an older server
    errs = update_errors(_set("spec.terminationGracePeriodSeconds", 1), old)
    assert errs == []


def test_scheduling_gates_may_be_removed_and_selectors_added_while_gated() -> None:
    old = stored(pod(schedulingGates=[{"name": "example.com/a"}, {"name": "example.com/b"}],
                     nodeSelector={"zone": "a"}))
    assert update_errors(_set("spec.schedulingGates", [{"name": "example.com/b"}]), old) == []
    assert update_errors(_set("spec.nodeSelector", {"zone": "a", "disk": "ssd"}), old) == []
    assert update_errors(_set("spec.nodeSelector", {"zone": "b"}), old) == [
        'spec.nodeSelector: Invalid value: map[string]string{"zone":"b"}: only additions to '
        "spec.nodeSelector are allowed (no mutations or deletions)"]


def test_update_keeps_pod_level_es_in_use_with_the_gate_off() -> None:
    old = stored(pod(ctr("c"), resources={"requests": {ES: "1Gi"}, "limits": {ES: "2Gi"}}))
    assert update_errors(_set("metadata.labels", {"a": "b"}), old, ES_OFF) == []


# --- status -----------------------------------------------------------------------------


def status_errors(mutate: Callable[[dict[str, Any]], None],
                  old: dict[str, Any] | None = None) -> list[str]:
    old = old or stored()
    old.setdefault("status", {"phase": "Pending", "qosClass": "BestEffort"})
    new = copy.deepcopy(old)
    mutate(new)
    return [str(e) for e in validate_pod_status_update(new, old)]


def test_status_updates() -> None:
    assert status_errors(_set("status.phase", "Running")) == []
    assert status_errors(_set("spec.nodeName", "n1")) == [
        "status.nodeName: Forbidden: may not be changed directly"]
    assert status_errors(_set("status.qosClass", "Guaranteed")) == [
        'status.qosClass: Invalid value: "Guaranteed": field is immutable']
    assert status_errors(_set("status.podIPs", [{"ip": "10.0.0.300"}])) == [
        'status.podIPs[0]: Invalid value: "10.0.0.300": must be a valid IP address, '
        "(e.g. 10.9.8.7 or 2001:db8::ffff)"]


def test_status_volume_statuses_kep6395() -> None:
    good = [{"name": "cache", "hostPhase": "HostMounted"},
            {"name": "cfg", "hostPhase": "ErrorMounting", "errorMessage": "boom"}]
    assert status_errors(_set("status.volumeStatuses", good)) == []
    bad = [{"name": "cache", "hostPhase": "Mounted"}, {"name": "cache", "hostPhase": "Pending"}]
    assert status_errors(_set("status.volumeStatuses", bad)) == [
        'status.volumeStatuses[0].hostPhase: Unsupported value: "Mounted": supported values: '
        '"ErrorMounting", "HostMounted", "Pending", "Unmounting"',
        'status.volumeStatuses[1].name: Duplicate value: "cache"']


def test_terminated_container_may_not_restart_under_never() -> None:
    old = stored(pod(restartPolicy="Never"))
    old["status"] = {"qosClass": "BestEffort", "containerStatuses": [
        {"name": "c", "state": {"terminated": {"exitCode": 0}}}]}
    assert status_errors(_set("status.containerStatuses", [
        {"name": "c", "state": {"running": {}}}]), old) == [
        "status.containerStatuses[0].state: Forbidden: may not be transitioned to "
        "non-terminated state"]


def test_dynamic_volume_hot_plug_gate() -> None:
    """`NotRequired` (ephemera's DynamicVolumeHotPlug) is valid with the gate on, an unknown
    enum value with it off, and kept on update by a pod that already uses it."""
    def live() -> dict[str, Any]:
        return pod(ctr("c", dynamicVolumePolicy={"restartPolicy": "NotRequired"}))

    assert create_errors(live()) == []
    off = {"DynamicVolumeHotPlug": False}
    assert create_errors(live(), off) == [
        'spec.containers[0].dynamicVolumePolicy.restartPolicy: Unsupported value: '
        '"NotRequired": supported values: "RestartContainer"']
    old, new = live(), live()
    default_pod(old, off)
    default_pod(new, off)
    new["metadata"]["labels"] = {"a": "b"}
    assert [str(e) for e in validate_pod_update(new, old, off)] == []


def test_semantic_equal_skips_the_walk_only_for_the_same_json(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same JSON value (types included) is equal without normalizing either side; values
    Python's `==` takes as equal but JSON does not (0 and 0.0: a zero int is "unset", a float
    is kept) still go through the walk and keep its answer."""
    from ephemera.pods import validation

    spec = {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}}]}
    assert validation._semantic_equal(spec, copy.deepcopy(spec))
    assert not validation._semantic_equal({"hostNetwork": 0}, {"hostNetwork": 0.0})
    assert validation._semantic_equal({"limits": {"cpu": "1"}}, {"limits": {"cpu": "1000m"}})
    walked: list[Any] = []
    real = validation._semantic
    monkeypatch.setattr(validation, "_semantic",
                        lambda value, key="": walked.append(value) or real(value, key))
    assert validation._semantic_equal(spec, copy.deepcopy(spec))
    assert walked == []
    assert validation._semantic_equal({"a": 1}, {"a": 1, "b": ""})
    assert walked != []

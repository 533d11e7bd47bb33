"""Field validation against the served schema: unknown fields in strict decoding's format,
wrong JSON types in the Go decoder's words, and the Status errors and warnings built from
them."""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import pytest

from ephemera.api import fieldvalidation as fv
from ephemera.api import schema
from ephemera.api.errors import StatusError
from ephemera.api.patch import apply_patch

POD = "io.k8s.api.core.v1.Pod"


def pod(**spec_extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p1",
            "labels": {"app": "web", "example.com/anything-goes": "yes"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [{"manager": "kubectl", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}],
        },
        "spec": {
            "containers": [{
                "name": "c",
                "image": "busybox",
                "resources": {"limits": {"ephemeral-storage": "1Gi", "cpu": 1,
                                         "example.com/gpu": "2"},
                              "requests": {"memory": "64Mi"}},
                "dynamicVolumePolicy": {"restartPolicy": "RestartContainer"},
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                "livenessProbe": {"httpGet": {"port": "http"}},
                "ports": [{"containerPort": 80}],
            }],
            "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}],
            "resources": {"requests": {"ephemeral-storage": "2Gi"}},
            "nodeSelector": {"disk": "ssd"},
            **spec_extra,
        },
        "status": {
            "phase": "Running",
            "volumeStatuses": [{"name": "scratch", "hostPhase": "HostMounted"}],
            "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0,
                                   "image": "busybox", "imageID": "",
                                   "volumeMounts": [{"name": "scratch",
                                                     "mountPath": "/scratch"}]}],
            "startTime": "2026-09-25T14:00:00Z",
        },
    }


def test_a_full_pod_with_kep_fields_and_map_keys_has_no_unknown_fields() -> None:
    obj = pod()
    assert fv.unknown_fields(obj, POD) == []
    assert fv.type_errors(obj, POD) is None
    before = copy.deepcopy(obj)
    assert fv.drop_unknown_fields(obj, POD) == []
    assert obj == before


def test_unknown_fields_use_strict_decoding_paths_in_document_order() -> None:
    obj = pod(bogus=True)
    obj["spec"]["containers"][0]["foo"] = 1
    obj["spec"]["containers"][0]["dynamicVolumePolicy"]["mode"] = "Auto"
    obj["metadata"]["nme"] = "typo"
    obj["status"]["volumeStatuses"][0]["phase"] = "x"
    obj["extra"] = {}
    assert fv.unknown_fields(obj, POD) == [
        "metadata.nme",
        "spec.containers[0].dynamicVolumePolicy.mode",
        "spec.containers[0].foo",
        "spec.bogus",
        "status.volumeStatuses[0].phase",
        "extra",
    ]


def test_field_names_are_case_sensitive() -> None:
    obj = pod()
    obj["metadata"]["Name"] = "p1"
    assert fv.unknown_fields(obj, POD) == ["metadata.Name"]


def test_opaque_and_preserved_nodes_accept_anything() -> None:
    obj = pod()
    obj["metadata"]["managedFields"][0]["fieldsV1"] = {"f:spec": {"anything": [1, 2]}}
    assert fv.unknown_fields(obj, POD) == []
    event = {"type": "ADDED", "object": {"kind": "Whatever", "made": {"up": 1}}}
    assert fv.unknown_fields(event, "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent") == []


def test_drop_unknown_fields_removes_them_in_place() -> None:
    obj = pod(bogus=1)
    obj["spec"]["containers"][0]["foo"] = {"deep": 1}
    expected = pod()
    assert fv.drop_unknown_fields(obj, POD) == ["spec.containers[0].foo", "spec.bogus"]
    assert obj == expected


def test_other_kinds() -> None:
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "n1"},
             "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                      "renewTime": "2026-09-25T14:00:00.000000Z", "holder": "x"}}
    assert fv.unknown_fields(lease, "io.k8s.api.coordination.v1.Lease") == ["spec.holder"]
    assert fv.type_errors(lease, "io.k8s.api.coordination.v1.Lease") is None
    secret = {"data": {"k": "aGVsbG8="}, "stringData": {"x": "y"}, "type": "Opaque"}
    assert fv.unknown_fields(secret, "io.k8s.api.core.v1.Secret") == []
    assert fv.type_errors(secret, "io.k8s.api.core.v1.Secret") is None


def test_strict_error_is_the_upstream_bad_request() -> None:
    err = fv.strict_error("Pod", "v1", ["spec.containers[0].foo"])
    assert err.code == 400
    assert err.status() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
                   'unknown field "spec.containers[0].foo"',
        "reason": "BadRequest", "code": 400,
    }
    several = fv.strict_error("Lease", "v1", ["spec.a", "b"], duplicates=["metadata.name"])
    assert several.message == (
        'Lease in version "v1" cannot be handled as a Lease: strict decoding error: '
        'unknown field "spec.a", unknown field "b", duplicate field "metadata.name"')


def test_warning_texts_and_header() -> None:
    assert fv.warning_texts(["spec.foo", "bar"]) == [
        'unknown field "spec.foo"', 'unknown field "bar"']
    assert fv.warning_header('unknown field "spec.foo"') == '299 - "unknown field \\"spec.foo\\""'


def test_check_strict_raises_and_warn_drops() -> None:
    obj = pod(bogus=1)
    with pytest.raises(StatusError) as info:
        fv.check(obj, POD, "Strict", "Pod", "v1")
    assert info.value.message.endswith('strict decoding error: unknown field "spec.bogus"')
    assert "bogus" in obj["spec"]

    assert fv.check(obj, POD, None, "Pod", "v1") == ['unknown field "spec.bogus"']
    assert "bogus" not in obj["spec"]

    obj = pod(bogus=1)
    assert fv.check(obj, POD, "Ignore", "Pod", "v1") == []
    assert "bogus" not in obj["spec"]


def test_check_rejects_a_bad_directive() -> None:
    with pytest.raises(StatusError) as info:
        fv.check(pod(), POD, "Loose", "Pod", "v1", options_kind="PatchOptions")
    assert info.value.code == 422
    assert info.value.message == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loose": '
        'supported values: "", "Ignore", "Strict", "Warn"')


def test_type_errors_beat_every_directive() -> None:
    obj = pod()
    obj["spec"]["containers"] = "c"
    for mode in ("Strict", "Warn", "Ignore"):
        with pytest.raises(StatusError) as info:
            fv.check(obj, POD, mode, "Pod", "v1")
        assert info.value.code == 400
        assert info.value.message == (
            'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string '
            "into Go struct field PodSpec.spec.containers of type []v1.Container")


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda p: p.__setitem__("spec", "x"),
     "json: cannot unmarshal string into Go struct field Pod.spec of type v1.PodSpec"),
    (lambda p: p["spec"].__setitem__("containers", ["c"]),
     "json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type "
     "v1.Container"),
    (lambda p: p["metadata"]["labels"].__setitem__("n", 1),
     "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type "
     "string"),
    (lambda p: p["spec"]["containers"][0]["ports"][0].__setitem__("containerPort", "80"),
     "json: cannot unmarshal string into Go struct field "
     "ContainerPort.spec.containers.ports.containerPort of type int32"),
    (lambda p: p["spec"]["containers"][0]["ports"][0].__setitem__("containerPort", 1.5),
     "json: cannot unmarshal number 1.5 into Go struct field "
     "ContainerPort.spec.containers.ports.containerPort of type int32"),
    (lambda p: p["spec"].__setitem__("hostNetwork", "yes"),
     "json: cannot unmarshal string into Go struct field PodSpec.spec.hostNetwork of type bool"),
    (lambda p: p["spec"].__setitem__("terminationGracePeriodSeconds", True),
     "json: cannot unmarshal bool into Go struct field "
     "PodSpec.spec.terminationGracePeriodSeconds of type int64"),
    (lambda p: p["spec"]["containers"][0]["dynamicVolumePolicy"].__setitem__(
        "restartPolicy", {"a": 1}),
     "json: cannot unmarshal object into Go struct field "
     "ContainerDynamicVolumePolicy.spec.containers.dynamicVolumePolicy.restartPolicy of type "
     "string"),
    (lambda p: p["status"].__setitem__("volumeStatuses", {"name": "x"}),
     "json: cannot unmarshal object into Go struct field PodStatus.status.volumeStatuses of "
     "type []v1.PodVolumeStatus"),
    (lambda p: p["spec"]["containers"][0]["resources"]["limits"].__setitem__("cpu", "lots"),
     "quantities must match the regular expression "
     "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    (lambda p: p["spec"]["resources"]["requests"].__setitem__("ephemeral-storage", "1Zi"),
     "quantities must match the regular expression "
     "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    (lambda p: p["spec"]["resources"]["requests"].__setitem__("ephemeral-storage", "1ii"),
     "unable to parse quantity's suffix"),
    (lambda p: p["spec"]["containers"][0]["livenessProbe"]["httpGet"].__setitem__(
        "port", False),
     "json: cannot unmarshal bool into Go struct field "
     "HTTPGetAction.spec.containers.livenessProbe.httpGet.port of type int32"),
    (lambda p: p["status"].__setitem__("startTime", "yesterday"),
     'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as '
     '"2006"'),
    (lambda p: p["status"].__setitem__("startTime", "2026-13-01T00:00:00Z"),
     'parsing time "2026-13-01T00:00:00Z": month out of range'),
])
def test_type_errors_in_the_go_decoders_words(mutate: Any, message: str) -> None:
    obj = pod()
    mutate(obj)
    assert fv.type_errors(obj, POD) == message


def test_values_of_the_right_type_are_accepted() -> None:
    obj = pod()
    obj["spec"]["containers"][0]["resources"]["limits"].update(
        {"cpu": 0.5, "memory": "1.5Gi", "x/y": "1e3", "z/w": "100m"})
    obj["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = 8080
    obj["spec"]["containers"][0]["ports"][0]["containerPort"] = 80.0  # YAML-converted 80
    obj["spec"]["nodeName"] = None  # null decodes as the zero value
    obj["status"]["startTime"] = "2026-09-25T14:00:00.5+02:00"
    assert fv.type_errors(obj, POD) is None


def test_a_body_that_is_not_an_object() -> None:
    assert fv.type_errors([1], POD) == "json: cannot unmarshal array into Go value of type v1.Pod"


def test_loads_json_reports_duplicate_fields() -> None:
    value, dups = fv.loads_json(
        b'{"metadata":{"name":"a","name":"b"},"spec":{"containers":[{"name":"x","name":"y"}]}}')
    assert value == {"metadata": {"name": "b"}, "spec": {"containers": [{"name": "y"}]}}
    assert dups == ["metadata.name", "spec.containers[0].name"]
    assert type(value["metadata"]) is dict


def test_patch_strict_error_is_an_invalid_on_the_patch_field() -> None:
    err = fv.patch_strict_error(["spec.foo"], '{"spec":{"foo":1}}')
    assert err.code == 422
    assert err.reason == "Invalid"
    assert err.message == (' "" is invalid: patch: Invalid value: "{\\"spec\\":{\\"foo\\":1}}": '
                           'strict decoding error: unknown field "spec.foo"')
    assert err.status()["details"]["causes"][0]["field"] == "patch"


def test_apply_unknown_fields_use_structured_merge_diff_paths() -> None:
    obj = pod(bogus=1)
    obj["spec"]["containers"][0]["foo"] = 1
    obj["status"]["containerStatuses"][0]["volumeMounts"][0]["q"] = 1
    assert fv.apply_unknown_fields(obj, POD) == [
        '.spec.containers[name="c"].foo',
        ".spec.bogus",
        '.status.containerStatuses[0].volumeMounts[mountPath="/scratch"].q',
    ]
    err = fv.apply_schema_error("default", "p1", "", "v1", "Pod",
                                ['.spec.containers[name="c"].foo'])
    assert err.message == (
        "failed to create typed patch object (default/p1; /v1, Kind=Pod): "
        '.spec.containers[name="c"].foo: field not declared in schema')
    assert (err.code, err.reason) == (400, "BadRequest")


@pytest.mark.parametrize(("text", "ok"), [
    ("aGVsbG8=", True), ("aGVsbG8h", True), ("", True), ("aGVsbG8", False),
    ("a!bc", False), ("ab==", True), ("a===", False),
])
def test_base64_checks(text: str, ok: bool) -> None:
    assert (fv.base64_error(text) is None) is ok


def _alternating(levels: int) -> Any:
    """Objects and arrays nested `levels` deep (the shape that costs Python the most stack)."""
    value: Any = 1
    for i in range(levels - 1):
        value = {"a": value} if i % 2 else [value]
    return {"x": value}


def test_the_nesting_limit_holds_within_pythons_recursion_limit() -> None:
    """A body at the limit goes through decoding, field validation, patches and deep copies
    with the default recursion limit; one level more is Go's decoder's refusal."""
    assert sys.getrecursionlimit() == 1000
    body = json.dumps(_alternating(fv.MAX_NESTING_DEPTH))
    value, duplicates = fv.loads_json(body)
    assert duplicates == []
    copy.deepcopy(value)
    live = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    for content_type in ("application/merge-patch+json",
                         "application/strategic-merge-patch+json"):
        patched = apply_patch(content_type, copy.deepcopy(live), body.encode(),
                              "io.k8s.api.core.v1.ConfigMap")
        assert not fv.too_deep(patched)
        fv.check(patched, "io.k8s.api.core.v1.ConfigMap", "Warn", "ConfigMap", "v1")
    with pytest.raises(ValueError, match=fv.EXCEEDED_MAX_DEPTH):
        fv.loads_json(json.dumps(_alternating(fv.MAX_NESTING_DEPTH + 1)))


@pytest.mark.parametrize("body, value, duplicates", [
    (b'{"a":1,"b":{"c":[1,2.5,"x",null,true]}}',
     {"a": 1, "b": {"c": [1, 2.5, "x", None, True]}}, []),  # compact: orjson's fast path
    (b'{"a":1,"a":2}', {"a": 2}, ["a"]),  # compact, but a duplicate: the slow path
    (b'{"m":{"k":1,"k":{"x":1}}}', {"m": {"k": {"x": 1}}}, ["m.k"]),
    (b'{"a": 1, "a": 2}', {"a": 2}, ["a"]),  # not compact
    (b'{"big":123456789012345678901234567890}', {"big": 123456789012345678901234567890}, []),
])
def test_loads_json_compact_bodies_and_duplicates(body: bytes, value: Any,
                                                  duplicates: list[str]) -> None:
    assert fv.loads_json(body) == (value, duplicates)


def test_loads_json_refuses_deep_compact_bodies() -> None:
    def nested(depth: int) -> bytes:
        return b'{"a":' * depth + b"1" + b"}" * depth

    with pytest.raises(ValueError, match="exceeded max depth"):
        fv.loads_json(nested(fv.MAX_NESTING_DEPTH + 1))
    assert fv.loads_json(nested(fv.MAX_NESTING_DEPTH - 1))[1] == []


@pytest.mark.parametrize("text, deep", [
    ('{"a":' * fv.MAX_NESTING_DEPTH + "1" + "}" * fv.MAX_NESTING_DEPTH, False),  # the limit
    ('[{"a":' * 126 + "1" + "}]" * 126, True),  # 252 levels
    ("[" * 10 + '"' + "{" * 300 + '"' + "]" * 10, False),  # 310 brackets, 300 in a string
    ('{"a":[1,2,{"b":"c"}]}', False),
])
def test_too_deep_with_its_source_text(text: str, deep: bool) -> None:
    """The text's count of opening brackets bounds the depth: the answer is the walk's,
    whether the count lets the walk be skipped or not."""
    value = json.loads(text)
    assert fv.too_deep(value) is deep
    assert fv.too_deep(value, source=text) is deep
    assert fv.too_deep(value, source=text.encode()) is deep


_TIME_TEXTS = [
    "2026-12-01T00:00:01Z", "2026-12-01T23:59:59+02:00", "2026-12-01T00:00:01.5Z",
    "2026-12-01T00:00:01,25-07:30", "2026-12-01T00:00:01.123456Z",
    "2026-12-01T00:00:01.123456+01:00", "2026-12-01T00:00:01.12345Z",
    "2026-12-01T00:00:01.1234567Z", "2026-13-01T00:00:01Z", "2026-00-01T00:00:01Z",
    "2026-12-32T00:00:01Z", "2026-12-00T00:00:01Z", "2026-12-01T24:00:01Z",
    "2026-12-01T00:60:01Z", "2026-12-01T00:00:60Z", "2026-12-01T00:00:01",
    "2026-12-01T00:00:01Zx", "2026-12-01 00:00:01Z", "2026-12-01T00:00:01.Z",
    "2026-12-01T00:00:01+0200", "\u0662\u0660\u0662\u0666-12-01T00:00:01Z",
    "2026-12-01T00:00:01.\u0665Z",
    "2026-12-01T00:00:01Z\n", "", "2026", "2026-12-01T00:00:01z",
    "2023-02-29T00:00:00Z", "2024-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
    "2026-12-01T00:00:00+24:00", "2026-12-01T00:00:00+25:00", "2026-12-01T00:00:00-23:61",
    "2026-12-01T00:00:00+00:60", "2026-12-01T1:00:00Z", "2026-12-01T00:00:01,123456Z",
]


@pytest.mark.parametrize(("text", "micro", "message"), [
    ("2023-02-30T00:00:00Z", False, 'parsing time "2023-02-30T00:00:00Z": day out of range'),
    ("2023-02-29T00:00:00Z", False, 'parsing time "2023-02-29T00:00:00Z": day out of range'),
    ("2024-02-29T00:00:00Z", False, None),
    ("2000-02-29T00:00:00Z", False, None),
    ("1900-02-29T00:00:00Z", False, 'parsing time "1900-02-29T00:00:00Z": day out of range'),
    ("2026-06-31T00:00:00.000000Z", True,
     'parsing time "2026-06-31T00:00:00.000000Z": day out of range'),
    ("2026-12-01T00:00:00+99:00", False,
     'parsing time "2026-12-01T00:00:00+99:00": time zone offset hour out of range'),
    ("2026-12-01T00:00:00-12:75", False,
     'parsing time "2026-12-01T00:00:00-12:75": time zone offset minute out of range'),
    ("2026-12-01T00:00:00+24:60", False, None),
    ("2026-12-01T00:00:00*01:00", False,
     'parsing time "2026-12-01T00:00:00*01:00" as "2006-01-02T15:04:05Z07:00": cannot parse '
     '"*01:00" as "Z07:00"'),
    ("2026-12-01T7:00:00Z", False, None),
    ("2026-13-01Tx", False, 'parsing time "2026-13-01Tx": month out of range'),
    ("2026-12-01T00:00:00,123456Z", True, None),
    ("2026-12-01T00:00:00.-12345Z", True,
     'parsing time "2026-12-01T00:00:00.-12345Z": fractional second out of range'),
])
def test_time_error_follows_gos_parser(text: str, micro: bool, message: str | None) -> None:
    """Go checks each element's range as it reads it, the zone offset with > (24:00 and
    00:60 pass), and the day against its month and year last."""
    assert fv.time_error(text, micro) == message


@pytest.mark.parametrize("micro", [False, True])
@pytest.mark.parametrize("text", _TIME_TEXTS)
def test_time_error_takes_valid_times_as_the_full_parse_does(text: str, micro: bool) -> None:
    """The check's shortcut for plainly valid times answers as the layout walk does."""
    assert fv.time_error(text, micro) == fv._time_error(text, micro)


_UNKNOWN_AT: list[tuple[str, ...]] = [
    (), ("metadata",), ("spec",), ("spec", "containers", 0), ("spec", "containers", 0,
                                                               "livenessProbe", "httpGet"),
    ("spec", "volumes", 0, "emptyDir"), ("status",), ("status", "containerStatuses", 0),
    ("metadata", "managedFields", 0), ("metadata", "managedFields", 0, "fieldsV1"),
    ("metadata", "labels"), ("spec", "containers", 0, "resources", "limits"),
]


@pytest.mark.parametrize("where", [None, *_UNKNOWN_AT])
@pytest.mark.parametrize("known", [False, True])
def test_the_type_walk_flags_every_unknown_field(where: tuple[str, ...] | None,
                                                 known: bool) -> None:
    """`type_errors` leaves `unknown` empty only where `unknown_fields` finds nothing, so
    that `check` may skip the second walk."""
    obj = pod()
    if where is not None:
        target: Any = obj
        for step in where:
            target = target[step]
        target["bogus"] = "1"
    stored = pod() if known else fv.UNKNOWN
    flagged: list[bool] = []
    assert fv.type_errors(obj, POD, stored, flagged) is None
    found = fv.unknown_fields(obj, POD, stored)
    if found:
        assert flagged
    expected = where is not None and where not in (
        ("metadata", "managedFields", 0, "fieldsV1"), ("metadata", "labels"),
        ("spec", "containers", 0, "resources", "limits"))
    assert bool(found) == expected
    warnings = fv.check(copy.deepcopy(obj), POD, "Warn", "Pod", "v1", known=stored)
    assert warnings == [f'unknown field "{p}"' for p in found]


def test_the_type_walk_adds_no_plans_once_a_kind_was_walked() -> None:
    """Each definition's walk starts from one node: walking the same kind again follows the
    plans it worked out before (the tables do not grow with every write)."""
    assert fv.type_errors(pod(), POD) is None
    sizes = len(fv._FACTS), len(fv._PLANS)
    for _ in range(3):
        assert fv.type_errors(pod(), POD) is None
    assert (len(fv._FACTS), len(fv._PLANS)) == sizes


@pytest.mark.parametrize(("text", "micro", "written"), [
    ("2026-12-01T10:00:00Z", False, "2026-12-01T10:00:00Z"),
    ("2026-12-01T10:00:00.75Z", False, "2026-12-01T10:00:00Z"),
    ("2026-12-01T01:30:00+02:00", False, "2026-11-30T23:30:00Z"),
    ("2026-12-31T23:00:00-01:30", False, "2027-01-01T00:30:00Z"),
    ("2026-12-01T7:00:00Z", False, "2026-12-01T07:00:00Z"),
    ("2026-12-01T00:00:00+24:00", False, "2026-11-30T00:00:00Z"),
    ("0999-06-01T00:00:00Z", False, "0999-06-01T00:00:00Z"),
    ("0999-06-01T00:00:00+01:00", False, "0999-05-31T23:00:00Z"),
    ("0000-01-01T00:00:00Z", False, "0000-01-01T00:00:00Z"),
    ("2026-12-01T10:00:00.123456Z", True, "2026-12-01T10:00:00.123456Z"),
    ("2026-12-01T10:00:00.123456+00:00", True, "2026-12-01T10:00:00.123456Z"),
    ("2026-12-01T10:00:00,500000-05:00", True, "2026-12-01T15:00:00.500000Z"),
])
def test_times_are_written_back_as_go_encodes_them(text: str, micro: bool,
                                                   written: str) -> None:
    """metav1.Time encodes `t.UTC().Format(RFC3339)`: UTC, the fraction dropped; MicroTime
    the same with six digits. Year 0000 is kept as sent (no UTC conversion needed)."""
    assert fv.time_error(text, micro) is None
    assert fv.go_time(text, micro) == written


def test_the_type_walk_stores_quantities_and_times_as_go_writes_them() -> None:
    """Upstream decodes a body into Go structs and stores what they encode: a quantity in
    canonical form (a JSON number too), a time in UTC; other strings are left alone."""
    obj = pod()
    obj["spec"]["containers"][0]["resources"]["limits"].update(
        {"cpu": 0.5, "memory": "1.5Gi", "x/y": "1000", "z/w": "100m"})
    obj["spec"]["resources"]["requests"]["ephemeral-storage"] = "2048Mi"
    obj["status"]["startTime"] = "2026-09-25T14:00:00.5+02:00"
    obj["metadata"]["annotations"] = {"when": "2026-09-25T14:00:00.5+02:00", "n": "1.5Gi"}
    assert fv.type_errors(obj, POD) is None
    limits = obj["spec"]["containers"][0]["resources"]["limits"]
    assert {k: limits[k] for k in ("cpu", "memory", "x/y", "z/w")} == {
        "cpu": "500m", "memory": "1536Mi", "x/y": "1k", "z/w": "100m"}
    assert obj["spec"]["resources"]["requests"]["ephemeral-storage"] == "2Gi"
    assert obj["status"]["startTime"] == "2026-09-25T12:00:00Z"
    assert obj["metadata"]["annotations"] == {"when": "2026-09-25T14:00:00.5+02:00",
                                              "n": "1.5Gi"}


def test_a_lease_keeps_its_microseconds_in_utc() -> None:
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "n1", "namespace": "kube-node-lease"},
             "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                      "renewTime": "2026-12-02T15:00:00.123456+01:00"}}
    assert fv.type_errors(lease, "io.k8s.api.coordination.v1.Lease") is None
    assert lease["spec"]["renewTime"] == "2026-12-02T14:00:00.123456Z"


@pytest.mark.parametrize(("sent", "stored"), [
    ("+", "0"), (".", "0"), ("-.", "0"), (" 2Gi ", "2Gi"), (7, "7"),
])
def test_quantities_decode_as_resource_parse_quantity_reads_them(sent: Any,
                                                                  stored: str) -> None:
    """The decoder reads a Quantity with resource.ParseQuantity, which is more lenient than
    the regular expression its error quotes: a sign or a point without digits is zero."""
    obj = pod()
    obj["spec"]["containers"][0]["resources"]["limits"]["cpu"] = sent
    assert fv.type_errors(obj, POD) is None
    assert obj["spec"]["containers"][0]["resources"]["limits"]["cpu"] == stored


def test_a_signed_micro_fraction_is_a_time_go_parses() -> None:
    """Go's time.atoi takes a sign, so `.+12345` is a fraction of 12345 microseconds; the
    text is kept as it came (no client writes it)."""
    text = "2026-12-01T00:00:00.+12345Z"
    assert fv.time_error(text, micro=True) is None
    assert fv.go_time(text, micro=True) == text


# --- the type walk's plans: a schema of every shape, errors as the walk without plans gave ---

WIDGET, WIDGET_SPEC, PART = "com.example.v1.Widget", "com.example.v1.WidgetSpec", \
    "com.example.v1.Part"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": "#/definitions/" + name}


def _widget_definitions(weight: str = "integer") -> dict[str, dict[str, Any]]:
    """`$ref`s (a recursive one among them), an array of objects, maps of objects and of
    integers, a preserved subtree, IntOrString, Quantity, Time, bytes, a closed object."""
    return {
        WIDGET: {"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": _ref(schema.OBJECT_META), "spec": _ref(WIDGET_SPEC)}},
        WIDGET_SPEC: {"type": "object", "properties": {
            "parts": {"type": "array", "items": _ref(PART)},
            "byName": {"type": "object", "additionalProperties": _ref(PART)},
            "counts": {"type": "object",
                       "additionalProperties": {"type": "integer", "format": "int32"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "port": _ref(fv.INT_OR_STRING), "size": _ref(fv.QUANTITY), "at": _ref(fv.TIME),
            "data": {"type": "string", "format": "byte"}, "enabled": {"type": "boolean"},
            "ratio": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}},
            "closed": {"type": "object", "properties": {"a": {"type": "string"}},
                       "additionalProperties": False}}},
        PART: {"type": "object", "properties": {
            "name": {"type": "string"}, "weight": {"type": weight, "format": "int32"},
            "sub": _ref(PART)}},
    }


@pytest.fixture
def widgets() -> Any:
    schema.set_custom_definitions(_widget_definitions())
    yield
    schema.set_custom_definitions({})


def widget() -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "labels": {"a": "b"}},
            "spec": {"parts": [{"name": "p", "weight": 1,
                                "sub": {"name": "q", "sub": {"weight": 2}}}],
                     "byName": {"x": {"name": "x", "sub": {"weight": 3}}}, "counts": {"a": 1},
                     "free": {"anything": [1, {"goes": True}]}, "port": "http",
                     "size": "1.5Gi", "at": "2026-01-01T01:00:00+01:00", "data": "aGVsbG8=",
                     "enabled": True, "ratio": 0.5, "tags": ["a"], "closed": {"a": "b"}}}


_INTO = "json: cannot unmarshal {} into Go struct field {} of type {}"


@pytest.mark.parametrize(("where", "value", "message"), [
    (("spec", "parts", 0, "sub", "sub", "weight"), 2**31,
     _INTO.format("number 2147483648", "Part.spec.parts.sub.sub.weight", "int32")),
    (("spec", "parts", 0, "sub", "sub", "weight"), 1.5,
     _INTO.format("number 1.5", "Part.spec.parts.sub.sub.weight", "int32")),
    (("spec", "parts", 0, "sub", "sub", "weight"), "1",
     _INTO.format("string", "Part.spec.parts.sub.sub.weight", "int32")),
    (("spec", "parts", 0, "name"), 1, _INTO.format("number", "Part.spec.parts.name", "string")),
    (("spec", "byName", "x", "sub", "weight"), "1",
     _INTO.format("string", "Part.spec.byName.sub.weight", "int32")),
    (("spec", "byName", "x"), "s", _INTO.format("string", "WidgetSpec.spec.byName", "v1.Part")),
    (("spec", "counts", "a"), "s", _INTO.format("string", "WidgetSpec.spec.counts", "int32")),
    (("spec", "counts", "a"), 1, None),
    (("spec", "port"), True, _INTO.format("bool", "WidgetSpec.spec.port", "int32")),
    (("spec", "port"), 1.5, _INTO.format("number 1.5", "WidgetSpec.spec.port", "int32")),
    (("spec", "size"), "big", "quantities must match the regular expression "
                              "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    (("spec", "size"), 2.5, None),
    (("spec", "at"), "noon", 'parsing time "noon" as "2006-01-02T15:04:05Z07:00": cannot '
                             'parse "noon" as "2006"'),
    (("spec", "at"), 5, _INTO.format("number", "WidgetSpec.spec.at", "string")),
    (("spec", "data"), "!!", "illegal base64 data at input byte 0"),
    (("spec", "data"), 3, _INTO.format("number", "WidgetSpec.spec.data", "[]uint8")),
    (("spec", "enabled"), 1, _INTO.format("number", "WidgetSpec.spec.enabled", "bool")),
    (("spec", "ratio"), "s", _INTO.format("string", "WidgetSpec.spec.ratio", "float64")),
    (("spec", "ratio"), 1, None),
    (("spec", "tags", 0), 1, _INTO.format("number", "WidgetSpec.spec.tags", "string")),
    (("spec", "closed", "a"), 1, _INTO.format("number", "WidgetSpec.spec.closed.a", "string")),
    (("spec", "free", "anything"), 1, None),
    (("spec", "parts"), 1, _INTO.format("number", "WidgetSpec.spec.parts", "[]v1.Part")),
    (("spec",), "s", _INTO.format("string", "Widget.spec", "v1.WidgetSpec")),
    (("metadata", "labels", "a"), 1,
     _INTO.format("number", "ObjectMeta.metadata.labels", "string")),
    (("metadata", "name"), 1, _INTO.format("number", "ObjectMeta.metadata.name", "string")),
])
def test_the_type_walk_names_each_shape_of_schema_as_the_decoder(
        widgets: None, where: tuple[str | int, ...], value: Any, message: str | None) -> None:
    """The Go path of a wrong value, built once it is found: the innermost named struct
    with a property on the way (a map's key and an array's index are not fields), every
    field from the top; twice, the second walk following the plans the first made."""
    for _ in range(2):
        obj = widget()
        target: Any = obj
        for step in where[:-1]:
            target = target[step]
        target[where[-1]] = value
        assert fv.type_errors(obj, WIDGET) == message


def test_the_type_walk_rewrites_and_flags_through_plans(widgets: None) -> None:
    for _ in range(2):
        obj = widget()
        assert fv.type_errors(obj, WIDGET) is None
        assert (obj["spec"]["size"], obj["spec"]["at"]) == ("1536Mi", "2026-01-01T00:00:00Z")
        obj = widget()
        obj["bogus"] = 1
        obj["spec"]["parts"][0]["sub"]["sub"]["x"] = 1
        obj["spec"]["byName"]["x"]["y"] = 2
        obj["spec"]["closed"]["z"] = 3
        obj["spec"]["free"]["fine"] = 4
        obj["metadata"]["nope"] = 5
        flagged: list[bool] = []
        assert fv.type_errors(copy.deepcopy(obj), WIDGET, fv.UNKNOWN, flagged) is None
        assert len(flagged) == 5
        assert fv.unknown_fields(obj, WIDGET) == [
            "metadata.nope", "spec.parts[0].sub.sub.x", "spec.byName.x.y", "spec.closed.z",
            "bogus"]
        assert fv.check(obj, WIDGET, "Warn", "Widget", "example.com/v1") == [
            'unknown field "metadata.nope"', 'unknown field "spec.parts[0].sub.sub.x"',
            'unknown field "spec.byName.x.y"', 'unknown field "spec.closed.z"',
            'unknown field "bogus"']


def test_a_known_subtree_passes_where_its_plan_would_refuse_it(widgets: None) -> None:
    """A dict or list equal to the known object's at its place is not walked, a value its
    plan would take at once (a string at a string) nor refused (another version's)."""
    stored = widget()
    stored["spec"]["tags"] = [{"other": "version"}]
    obj = widget()
    obj["spec"]["tags"] = [{"other": "version"}]
    assert fv.type_errors(obj, WIDGET, stored) is None
    assert fv.type_errors(copy.deepcopy(obj), WIDGET) == _INTO.format(
        "object", "WidgetSpec.spec.tags", "string")


def test_new_custom_definitions_are_walked_with_new_plans(widgets: None) -> None:
    obj = widget()
    assert fv.type_errors(obj, WIDGET) is None
    schema.set_custom_definitions(_widget_definitions(weight="string"))
    assert fv.type_errors(widget(), WIDGET) == _INTO.format(
        "number", "Part.spec.parts.weight", "string")


def test_the_rewritten_times_and_quantities_are_remembered_as_go_time_writes_them() -> None:
    """Each valid text's rewriting is worked out once; a wrong one is refused every time."""
    for _ in range(2):
        obj = pod()
        obj["status"]["startTime"] = "2026-09-25T16:00:00+02:00"
        obj["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "0.5"
        assert fv.type_errors(obj, POD) is None
        assert obj["status"]["startTime"] == "2026-09-25T14:00:00Z"
        assert obj["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "500m"
        unchanged = pod()
        assert fv.type_errors(unchanged, POD) is None
        assert unchanged["status"] == pod()["status"]
        obj["status"]["startTime"] = "2026-09-25"
        assert fv.type_errors(obj, POD) == ('parsing time "2026-09-25" as '
                                            '"2006-01-02T15:04:05Z07:00": cannot parse "" as "T"')
    assert fv._WRITTEN_TIMES["2026-09-25T16:00:00+02:00"] == "2026-09-25T14:00:00Z"
    assert fv._WRITTEN_TIMES["2026-09-25T14:00:00Z"] is None
    assert "2026-09-25" not in fv._WRITTEN_TIMES

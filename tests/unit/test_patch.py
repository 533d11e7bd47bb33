"""apply_patch: JSON patch (RFC 6902), JSON merge patch (RFC 7386, its appendix A examples),
strategic merge patch through the content type, and the Status errors for bad patches."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ephemera.api.errors import StatusError
from ephemera.api.patch import PATCH_TYPES, apply_patch, json_patch, merge_patch

POD = "io.k8s.api.core.v1.Pod"
LIVE: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default", "labels": {"app": "a"}},
    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
}


# RFC 7386 appendix A: (target, patch, result)
RFC7386_EXAMPLES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), RFC7386_EXAMPLES)
def test_merge_patch_rfc7386_examples(target: Any, patch: Any, result: Any) -> None:
    before = copy.deepcopy(target)
    assert merge_patch(target, patch) == result
    assert target == before


def test_merge_patch_through_content_type() -> None:
    body = b'{"metadata":{"labels":{"app":null,"tier":"web"}},"spec":{"containers":[{"name":"d"}]}}'
    out = apply_patch("application/merge-patch+json; charset=utf-8", LIVE, body, POD)
    assert out["metadata"]["labels"] == {"tier": "web"}
    assert out["spec"]["containers"] == [{"name": "d"}], "merge patch replaces lists"
    assert LIVE["metadata"]["labels"] == {"app": "a"}


def test_strategic_merge_patch_through_content_type() -> None:
    body = json.dumps({
        "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {"$setElementOrder/containers": [{"name": "c"}],
                 "containers": [{"dynamicVolumePolicy": {"mode": "Manual"}, "name": "c"}]},
    }).encode()
    out = apply_patch("application/strategic-merge-patch+json", LIVE, body, POD)
    assert out["spec"]["containers"] == [
        {"name": "c", "image": "busybox", "dynamicVolumePolicy": {"mode": "Manual"}}]
    assert out["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/last-applied-configuration": "{}"}


def test_json_patch_operations_in_order() -> None:
    ops = [
        {"op": "add", "path": "/metadata/labels/tier", "value": "web"},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx"},
        {"op": "remove", "path": "/metadata/labels/app"},
        {"op": "copy", "from": "/metadata/labels/tier", "path": "/metadata/labels/copy"},
        {"op": "move", "from": "/metadata/labels/copy", "path": "/metadata/labels/moved"},
        {"op": "test", "path": "/spec/containers/0/image", "value": "nginx"},
        {"op": "add", "path": "/spec/containers/-", "value": {"name": "d", "image": "x"}},
    ]
    out = apply_patch("application/json-patch+json", LIVE, json.dumps(ops).encode(), POD)
    assert out["metadata"]["labels"] == {"tier": "web", "moved": "web"}
    assert out["spec"]["containers"] == [{"name": "c", "image": "nginx"},
                                         {"name": "d", "image": "x"}]
    assert LIVE["spec"]["containers"][0]["image"] == "busybox"


def _unprocessable(cause: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server rejected our request due to an error in our request",
            "reason": "Invalid",
            "details": {"causes": [{"reason": "UnexpectedServerResponse", "message": cause}]},
            "code": 422}


@pytest.mark.parametrize(("ops", "cause"), [
    ([{"op": "test", "path": "/spec/containers/0/image", "value": "nginx"}],
     "testing value /spec/containers/0/image failed: test failed"),
    ([{"op": "test", "path": "/spec/nodeName", "value": "n1"}],
     "testing value /spec/nodeName failed: test failed"),
    ([{"op": "remove", "path": "/spec/nodeName"}],
     'error in remove for path: "/spec/nodeName": Unable to remove nonexistent key: nodeName: '
     "missing value"),
    ([{"op": "replace", "path": "/spec/nodeName", "value": "n"}],
     "replace operation does not apply: doc is missing key: /spec/nodeName: missing value"),
    ([{"op": "add", "path": "/spec/missing/x", "value": 1}],
     'add operation does not apply: doc is missing path: "/spec/missing/x": missing value'),
    ([{"op": "frobnicate", "path": "/spec"}], "Unexpected kind: frobnicate"),
])
def test_json_patch_operation_that_does_not_apply_is_422(ops: list[Any], cause: str) -> None:
    with pytest.raises(StatusError) as info:
        json_patch(LIVE, ops)
    assert info.value.status() == _unprocessable(cause)


def test_json_patch_copies_values_and_reads_a_missing_value_as_null() -> None:
    ops = [{"op": "add", "path": "/spec/extra", "value": {"a": 1}},
           {"op": "add", "path": "/spec/nothing"}]
    out = json_patch(LIVE, ops)
    out["spec"]["extra"]["a"] = 2
    assert ops[0]["value"] == {"a": 1}
    assert out["spec"]["nothing"] is None


def test_json_patch_stops_at_the_first_failure_without_touching_live() -> None:
    ops = [{"op": "add", "path": "/metadata/labels/x", "value": "1"},
           {"op": "test", "path": "/metadata/labels/app", "value": "other"}]
    before = copy.deepcopy(LIVE)
    with pytest.raises(StatusError):
        json_patch(LIVE, ops)
    assert before == LIVE


def test_json_patch_that_replaces_the_root_with_a_non_object_is_invalid() -> None:
    with pytest.raises(StatusError) as info:
        json_patch(LIVE, [{"op": "replace", "path": "", "value": [1]}])
    assert info.value.code == 422
    assert info.value.details is not None
    assert info.value.details["causes"][0]["field"] == "patch"


def test_json_patch_operation_limit() -> None:
    ops = [{"op": "test", "path": "/kind", "value": "Pod"}] * 10001
    with pytest.raises(StatusError) as info:
        json_patch(LIVE, ops)
    assert info.value.code == 413
    assert info.value.message == ("Request entity too large: The allowed maximum operations in a "
                                  "JSON patch is 10000, got 10001")


@pytest.mark.parametrize(("content_type", "body", "message"), [
    ("application/json-patch+json", b'{"op":"add"}',
     "error decoding patch: json: cannot unmarshal object into Go value of type "
     "[]handlers.jsonPatchOp"),
    ("application/json-patch+json", b"[", "error decoding patch: unexpected end of JSON input"),
    ("application/merge-patch+json", b"[1]",
     "error decoding patch: json: cannot unmarshal array into Go value of type "
     "map[string]interface {}"),
    ("application/merge-patch+json", b"{x}",
     "error decoding patch: invalid character 'x' looking for beginning of object key string"),
    ("application/strategic-merge-patch+json", b"not json",
     "invalid character 'o' in literal null (expecting 'u')"),
    ("application/strategic-merge-patch+json", b'"s"',
     "json: cannot unmarshal string into Go value of type map[string]interface {}"),
    ("application/strategic-merge-patch+json", b'{"a":1 "b":2}',
     "invalid character '\"' after object key:value pair"),
    ("application/strategic-merge-patch+json", b"[1 2]",
     "invalid character '2' after array element"),
    ("application/strategic-merge-patch+json", b"", "unexpected end of JSON input"),
])
def test_undecodable_patch_is_400(content_type: str, body: bytes, message: str) -> None:
    with pytest.raises(StatusError) as info:
        apply_patch(content_type, LIVE, body, POD)
    assert info.value.code == 400
    assert info.value.reason == "BadRequest"
    assert info.value.message == message


@pytest.mark.parametrize("content_type", ["application/json", "text/plain",
                                          "application/apply-patch+yaml"])
def test_other_content_types_are_415(content_type: str) -> None:
    with pytest.raises(StatusError) as info:
        apply_patch(content_type, LIVE, b"{}", POD)
    assert info.value.code == 415
    assert info.value.reason == "UnsupportedMediaType"


def test_patch_types() -> None:
    assert {"application/json-patch+json", "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml"} == PATCH_TYPES


def test_null_bodies_are_no_ops_for_json_and_strategic_patches() -> None:
    assert apply_patch("application/json-patch+json", LIVE, b"null", POD) == LIVE
    assert apply_patch("application/strategic-merge-patch+json", LIVE, b"null", POD) == LIVE


# --- property: a merge patch computed as the difference of two objects yields the second ---

SCALARS = (st.booleans() | st.integers() | st.text(max_size=4)
           | st.floats(allow_nan=False, allow_infinity=False))
VALUES = st.recursive(
    SCALARS | st.none(),
    lambda children: st.lists(children, max_size=3)
    # RFC 7386 cannot set a member to null, so objects hold no nulls.
    | st.dictionaries(st.text(max_size=4), children.filter(lambda v: v is not None), max_size=4),
    max_leaves=15)
OBJECTS = st.dictionaries(st.text(max_size=4), VALUES.filter(lambda v: v is not None),
                          max_size=5)


def diff(source: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """The smallest RFC 7386 patch that turns `source` into `target`."""
    patch: dict[str, Any] = {}
    for key in source:
        if key not in target:
            patch[key] = None
    for key, value in target.items():
        old = source.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            sub = diff(old, value)
            if sub:
                patch[key] = sub
        elif key not in source or old != value or type(old) is not type(value):
            patch[key] = value
    return patch


@settings(max_examples=200, deadline=None)
@given(OBJECTS, OBJECTS)
def test_merge_patch_of_the_difference_yields_the_target(a: dict[str, Any],
                                                         b: dict[str, Any]) -> None:
    patch = diff(a, b)
    assert merge_patch(a, patch) == b
    body = json.dumps(patch).encode()
    assert apply_patch("application/merge-patch+json", a, body, POD) == b

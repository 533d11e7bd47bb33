"""Go's printing of values in messages (`ephemera.api.goformat`) and through field errors
(`ephemera.api.field`), as apimachinery's `field.Error.ErrorBody` prints them."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.api import errors, field
from ephemera.api.goformat import (
    GoText,
    go_error_text,
    go_float,
    go_quote,
    go_scalar,
    go_slice,
    go_string_map,
    go_value,
)


@pytest.mark.parametrize(("text", "quoted"), [
    ("plain", '"plain"'),
    ("\x00", '"\\x00"'),
    ("é", '"é"'),
    ("tab\there", '"tab\\there"'),
    ('say "hi"\\', '"say \\"hi\\"\\\\"'),
    ("\u200b", '"\\u200b"'),
    ("\x7f", '"\\x7f"'),
    ("\U0001f600", '"\U0001f600"'),
])
def test_go_quote_is_strconv_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


@pytest.mark.parametrize(("value", "text"), [
    (1.5, "1.5"), (1.0, "1"), (100.0, "100"), (123456.0, "123456"), (1e6, "1e+06"),
    (1234567.0, "1.234567e+06"), (0.0001, "0.0001"), (0.00001, "1e-05"),
    (1.5e-7, "1.5e-07"), (-2.5, "-2.5"), (1e21, "1e+21"), (0.1, "0.1"), (0.0, "0"),
    (float("inf"), "+Inf"), (float("nan"), "NaN"),
])
def test_go_float_is_percent_v(value: float, text: str) -> None:
    assert go_float(value) == text


@pytest.mark.parametrize(("value", "text"), [
    (1.5, "1.5"), (0.1, "0.1"), (3.14159265358979, "3.1415927"), (1e6, "1e+06"),
    (16777217.0, "1.6777216e+07"), (1e100, "+Inf"), (-1e100, "-Inf"), (1e-50, "0"),
    (float("nan"), "NaN")])
def test_go_float_of_a_float32(value: float, text: str) -> None:
    """`strconv.FormatFloat(f, 'g', -1, 32)`: rounded to a float32 first, then its shortest
    digits (sigs.k8s.io/yaml's float map keys)."""
    assert go_float(value, bits=32) == text


@pytest.mark.parametrize(("value", "text"), [
    (True, "true"), (False, "false"), ("x", '"x"'), ("a\tb", '"a\\tb"'), ("", '""'),
    (0, "0"), (-7, "-7"), (2**70, "1180591620717411303424"), (2.5, "2.5"), (1e6, "1e+06"),
    (-0.0, "-0"), (float("inf"), "+Inf"),
    (None, None), ([], None), (["a"], None), ({}, None), ({"a": 1}, None), ((1,), None),
])
def test_go_scalar_prints_scalars_only(value: Any, text: str | None) -> None:
    """Bools before ints (a Python bool is an int); nil and collections are left to the
    caller (None)."""
    assert go_scalar(value) == text


@pytest.mark.parametrize(("value", "text"), [
    ("x", '"x"'), ("\x00", '"\\x00"'), ("é", '"é"'), (123, "123"), (-1, "-1"),
    (True, "true"), (False, "false"), (2.5, "2.5"), (None, '"null"'),
    (["a", "b"], '[]string{"a", "b"}'), ([], "[]string{}"),
    ({"type": "spc_t"}, '{"type":"spc_t"}'),
    (go_slice(["BestEffort"], "core.ResourceQuotaScope"),
     '[]core.ResourceQuotaScope{"BestEffort"}'),
    (go_string_map({"zone": "b", "a": "é"}), 'map[string]string{"a":"é", "zone":"b"}'),
    (GoText("&core.Probe{}"), "&core.Probe{}"),
])
def test_go_value_is_field_error_s_bad_value(value: Any, text: str) -> None:
    assert go_value(value) == text


def test_field_errors_quote_as_go_does() -> None:
    assert str(field.invalid("metadata.name", "a\x00é", "bad")) == \
        'metadata.name: Invalid value: "a\\x00é": bad'
    assert str(field.invalid("spec.replicas", 123, "must be even")) == \
        "spec.replicas: Invalid value: 123: must be even"
    assert str(field.invalid("spec.x", True, "no")) == "spec.x: Invalid value: true: no"
    assert str(field.not_supported("spec.p", "é", ["Always", "Nevér"])) == \
        'spec.p: Unsupported value: "é": supported values: "Always", "Nevér"'
    assert str(field.not_supported("spec.p", "x", [])) == 'spec.p: Unsupported value: "x"'
    assert str(field.duplicate("spec.volumes[1].name", "v\t1")) == \
        'spec.volumes[1].name: Duplicate value: "v\\t1"'


def test_go_error_text_reads_as_go_s_path_error() -> None:
    assert go_error_text(OSError(28, "No space left on device", "/var/lib/x")) == \
        "/var/lib/x: no space left on device"
    assert go_error_text(FileNotFoundError(2, "No such file or directory")) == \
        "no such file or directory"
    assert go_error_text(OSError(18, "Invalid cross-device link", "/a", None, "/b")) == \
        "/a /b: invalid cross-device link"
    assert go_error_text(ValueError("bad value")) == "bad value"
    assert go_error_text(KeyError()) == "KeyError"


def test_status_messages_quote_names_as_go_does() -> None:
    assert errors.not_found("pods", 'a"é\x00').message == 'pods "a\\"é\\x00" not found'
    assert errors.already_exists("configmaps", "x\ty").message == \
        'configmaps "x\\ty" already exists'
    assert errors.method_not_allowed("PUT", "PodList").message == \
        'PUT is not supported on resources of kind "PodList"'
    assert errors.unknown("dial tcp 127.0.0.1:1: connect: connection refused").status() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "dial tcp 127.0.0.1:1: connect: connection refused", "code": 500}

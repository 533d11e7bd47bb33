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
    go_json,
    go_quote,
    go_scalar,
    go_slice,
    go_string_map,
    go_type_name,
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
    # float64s print as strconv.FormatFloat(f, 'g', -1, 64): shortest digits, an exponent
    # below 1e-4 and from 1e+06 on (%v's 'g' uses precision 6 for that choice)
    (1e6, "1e+06"), (1.5, "1.5"), (100000.0, "100000"), (1e21, "1e+21"), (-0.0, "-0"),
    (1.0, "1"), (123456.0, "123456"), (1234567.0, "1.234567e+06"), (0.0001, "0.0001"),
    (0.00001, "1e-05"), (-2.5e-7, "-2.5e-07"), (1e100, "1e+100"), (0.1, "0.1"),
    (1 / 3, "0.3333333333333333"), (5e-324, "5e-324"), (1.7976931348623157e308,
                                                        "1.7976931348623157e+308"),
    # int64s (sigs.k8s.io/json's PreserveInts) print their digits; past int64, a float64
    (1000000, "1000000"), (-7, "-7"), (0, "0"), (2**63 - 1, "9223372036854775807"),
    (-2**63, "-9223372036854775808"), (2**63, "9.223372036854776e+18"),
    (10**21, "1e+21"),
    (True, "true"), (False, "false"), ("a b", "a b"), ("", ""), (None, "<nil>"),
    ([], "[]"), ({}, "map[]"), ([1, "x", None, 2.5e6], "[1 x <nil> 2.5e+06]"),
    ({"spec": {"foo": 1, "a": [True, None, "x"]}}, "map[spec:map[a:[true <nil> x] foo:1]]"),
    ({"b": 1e6, "a": {"$patch": "merge"}}, "map[a:map[$patch:merge] b:1e+06]"),
])
def test_go_json_is_percent_v_of_decoded_json(value: Any, text: str) -> None:
    """Go's `%v` of an `interface{}` holding decoded JSON, as upstream's strategic merge
    patch messages print it: maps with sorted keys, bare strings, `<nil>`."""
    assert go_json(value) == text


@pytest.mark.parametrize(("value", "text"), [
    (3, "int64"), (2**63, "float64"), (2.5, "float64"), ("3", "string"), (True, "bool"),
    (None, "<nil>"), ({"a": 1}, "map[string]interface {}"), ([1], "[]interface {}"),
])
def test_go_type_name_is_percent_t_of_decoded_json(value: Any, text: str) -> None:
    """Go's `%T` of the same decoded JSON (`unstructured.NestedInt64`'s error names it)."""
    assert go_type_name(value) == text


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


def test_go_quote_of_every_ascii_character_as_strconv_quote() -> None:
    """The printable-ASCII shortcut answers as the character walk: every ASCII character
    alone and between letters."""
    expected = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    for code in range(128):
        ch = chr(code)
        quoted = expected.get(ch) or (ch if 0x20 <= code < 0x7F else f"\\x{code:02x}")
        assert go_quote(ch) == f'"{quoted}"'
        assert go_quote(f"a{ch}b") == f'"a{quoted}b"'
    assert go_quote("") == '""'
    assert go_quote("café") == '"café"'

"""`json_copy`: a deep copy of JSON trees that shares nothing mutable with its source and
falls back to `copy.deepcopy` for anything that is not a dict, a list or a JSON scalar."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ephemera.api.jsoncopy import copy_decoded, json_copy, same_json


def test_a_copy_is_equal_and_shares_no_dict_or_list() -> None:
    shared = {"k": [1, 2]}
    source = {"a": {"b": [{"c": "d"}, 1.5, None, True]}, "x": shared, "y": shared}
    copied = json_copy(source)
    assert copied == source
    copied["a"]["b"][0]["c"] = "changed"
    copied["x"]["k"].append(3)
    assert source["a"]["b"][0]["c"] == "d"  # type: ignore[index]
    assert shared == {"k": [1, 2]} and copied["y"] == {"k": [1, 2]}


def test_other_types_are_deep_copied_too() -> None:
    inner = [1]
    source = {"t": (inner,), "s": {3}}
    copied = json_copy(source)
    assert copied == source
    copied["t"][0].append(2)
    copied["s"].add(4)
    assert inner == [1] and source["s"] == {3}


@pytest.mark.parametrize("a, b, same", [
    ({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "x"}]}, True),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True),  # key order is not a difference
    ({"a": True}, {"a": 1}, False),  # == in Python, not in JSON
    ([0], [False], False),
    ({"a": 1}, {"a": 1.0}, False),  # may be equal: the caller does the work
    ({"a": 1}, {"a": 2}, False),
    ({"big": 2**70}, {"big": 2**70}, False),  # orjson does not encode it: not surely equal
    ("a", "a", True), ("a", "b", False), (2**70, 2**70, True), (None, None, True),
    (1, True, False), (True, 1, False), (0, None, False), (1, 1.0, False),
    (0.0, -0.0, False),  # equal in Python, not in JSON
    (1.5, 1.5, True),
])
def test_same_json(a: Any, b: Any, same: bool) -> None:
    assert same_json(a, b) is same


@pytest.mark.parametrize("source", [
    {"f": math.nan, "g": [math.inf, -math.inf]},  # JSON has no NaN: the round trip says null
    {"t": (1, 2), "l": [(3,)]},  # tuples stay tuples
    {"big": 2**70, "neg": -(2**64)},  # beyond orjson's 64 bits
    {1: "a", None: "b"},  # keys that are not strings
    {"x": "\ud800"},  # a lone surrogate
    [{"a": -0.0, "b": 1.0, "c": 1, "d": True, "e": None, "u": "é\u2028", "l": [[], {}]}],
])
def test_copy_decoded_keeps_every_value_and_type(source: Any) -> None:
    copied = copy_decoded(source)
    assert _typed(copied) == _typed(source)
    if isinstance(source, dict):
        source.clear()  # the copy shares no container with its source
    else:
        source[0]["l"][0].append(1)
        assert copied[0]["l"] == [[], {}]
    assert copied


def _typed(value: Any) -> Any:
    """`value` with every node's type beside it, NaN spelled out (NaN != NaN)."""
    if isinstance(value, dict):
        return (type(value), [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value), [_typed(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return (float, "nan")
    if isinstance(value, float):
        return (float, math.copysign(1, value), value)
    return (type(value), value)

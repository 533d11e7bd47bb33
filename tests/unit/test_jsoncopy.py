"""`json_copy`: a deep copy of JSON trees that shares nothing mutable with its source and
falls back to `copy.deepcopy` for anything that is not a dict, a list or a JSON scalar."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.api.jsoncopy import json_copy, same_json


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
])
def test_same_json(a: Any, b: Any, same: bool) -> None:
    assert same_json(a, b) is same

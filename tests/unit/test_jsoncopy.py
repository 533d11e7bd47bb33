"""`json_copy`: a deep copy of JSON trees that shares nothing mutable with its source and
falls back to `copy.deepcopy` for anything that is not a dict, a list or a JSON scalar."""

from __future__ import annotations

from ephemera.api.jsoncopy import json_copy


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

"""`json_copy`: a deep copy of a decoded JSON tree (API objects as the apiserver and the
kubelet hold them: dicts, lists, strings, numbers, booleans, None); `same_json`: whether two
such trees are surely the same value (for skipping work on what a write did not change);
`copy_decoded`: the same copy, faster, of a tree decoded from JSON text.

`copy.deepcopy` keeps a memo of every node it visits (for shared and cyclic references, which
a decoded JSON tree never has) and dispatches through `__deepcopy__` lookups; on a pod it was
the largest single cost of a `PUT pods/NAME/dynamic` (about a fifth of its CPU). This walks
dicts and lists only, shares the immutable leaves, and hands anything else (a tuple, a
set, an object) to `copy.deepcopy`, so it is never shallower than `deepcopy`."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

import orjson

T = TypeVar("T")

_ATOMS = (str, int, float, bool, type(None))
# Scalars whose `==` on two values of the same type is JSON's equality (not floats: 0.0 ==
# -0.0, which JSON writes apart).
_EXACT_SCALARS = frozenset({str, int, bool, type(None)})


def json_copy(value: T) -> T:
    """A deep copy of `value`, fast for JSON trees (see the module docstring)."""
    return _copy(value)


# What orjson would encode as another type (subclasses of str, int, dict and list,
# dataclasses, datetimes) it refuses under these options. Enums it encodes as their
# values whatever the options: hence `copy_decoded` is for decoded trees only.
_EXACT = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | \
    orjson.OPT_PASSTHROUGH_DATETIME


def copy_decoded(value: T) -> T:
    """A deep copy of a tree decoded from JSON text (an API object as the apiserver reads
    it from a body or the store: plain dicts, lists, strings, numbers, booleans, None, and
    no enums), by encoding and decoding it with orjson, both in C: on a stored pod about a
    third of `json_copy`'s time. The copy is kept when it compares equal to the source,
    which it does not when the round trip changed a value (a NaN or an infinity, which JSON
    encodes as null; a tuple, which becomes a list); what orjson refuses (integers beyond 64
    bits, non-string keys, lone surrogates) or changed is copied by `json_copy`."""
    if type(value) is dict or type(value) is list:
        try:
            copied = orjson.loads(orjson.dumps(value, option=_EXACT))
        except (TypeError, orjson.JSONDecodeError):
            return _copy(value)
        if copied == value:
            return copied
    return _copy(value)


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {key: (item if type(item) in _ATOMS else _copy(item))
                for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _ATOMS else _copy(item) for item in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


def same_json(a: Any, b: Any) -> bool:
    """True when `a` and `b` are the same JSON value, types included (Python's `==` takes
    true for 1): two strings, integers, booleans or nulls by `==`; anything else by `==`
    first, then their canonical encodings (both at C speed). False for values orjson does
    not encode and for 1 against 1.0, which may be equal: a caller skipping work on equal
    values then does the work."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        if kind in _EXACT_SCALARS or type(b) in _EXACT_SCALARS:
            return False  # (True == 1 in Python) or perhaps equal (1 and 1.0)
    elif kind in _EXACT_SCALARS:
        return bool(a == b)
    if a != b:
        return False
    try:
        return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == \
            orjson.dumps(b, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return False

"""Field validation against the served schema: what the apiserver's decoder does with a
request body (`fieldValidation=Strict|Warn|Ignore`).

- `type_errors(obj, definition)`: the first value of the wrong JSON type (a string where an
  object is expected, a bad quantity, ...), worded like the Go JSON decoder that upstream
  uses (`json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type
  []v1.Container`). Upstream answers these with 400 whatever `fieldValidation` says.
  The same walk rewrites, in place, the values that Go's encoder writes differently from
  how they came (`go_quantity`, `go_time`): upstream decodes a body into Go structs and
  stores what they encode, so a Quantity is stored canonical (`1.5Gi` as `1536Mi`, `0.5`
  as `500m`) and a Time in UTC to the second, a MicroTime in UTC to the microsecond.
- `unknown_fields(obj, definition)` / `drop_unknown_fields(...)`: the fields the schema does
  not know, as strict decoding names them (`spec.containers[0].foo`), in document order.
- `known`, which the three take: an object of the same kind that passed them (the stored
  object a patch applies to); subtrees equal to it at the same place are not walked again.
- `write_as_go(obj, definition)`: the walk's rewriting alone (a server-side apply's result).
- `check(obj, definition, directive, kind, version)`: both, as create and update apply them:
  raises the 400 `StatusError`, or drops the unknown fields and returns the `Warning` texts.
- `strict_error`, `decode_error`, `patch_strict_error`, `apply_schema_error` and
  `warning_texts` build the exact upstream messages for the handlers that need them;
  `json_kind(value)` names a value's JSON kind as Go's decoder does in those messages.

Nodes are the OpenAPI v2 nodes of `ephemera.api.schema`; `$ref`s are followed, a node with
`x-kubernetes-preserve-unknown-fields` or an object with neither `properties` nor
`additionalProperties` (RawExtension, FieldsV1, Patch) accepts anything. The type walk reads
each node once into a plan (`_Plan`: its `$ref` followed, its check, its properties' plans,
the value types it takes as they are), cached until the custom definitions change, and
names a wrong value's Go path only once it found one; it remembers how the Quantity and
time texts it met last are written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import orjson

from ephemera.api import errors, field, schema
from ephemera.api.errors import StatusError
from ephemera.api.goformat import go_quote
from ephemera.api.jsoncopy import same_json
from ephemera.api.managedfields import typed_patch_error
from ephemera.api.quantity import ERR_FORMAT_WRONG, QuantityError, quantity_from_json

QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
MICRO_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"

STRICT = "Strict"
WARN = "Warn"
IGNORE = "Ignore"
DIRECTIVES = (IGNORE, STRICT, WARN)

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


# --- schema navigation ---------------------------------------------------------------------


def _ref_name(node: dict[str, Any]) -> str | None:
    ref = node.get("$ref")
    if ref is None and len(node.get("allOf", ())) == 1:
        ref = node["allOf"][0].get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _resolve(node: dict[str, Any], name: str | None) -> tuple[dict[str, Any], str | None]:
    """The node behind a reference and the definition name it came from (or `name`)."""
    ref = _ref_name(node)
    if ref is not None:
        return schema.definition(ref), ref
    return node, name


def _opaque(node: dict[str, Any]) -> bool:
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return True
    return (node.get("type") == "object" and "properties" not in node
            and "additionalProperties" not in node)


def _is_object(node: dict[str, Any]) -> bool:
    return node.get("type") == "object" or "properties" in node


class _Facts(NamedTuple):
    """What the walks ask of a schema node, read once per node (`_facts`)."""

    ref: str | None  # the definition its `$ref` names (then the rest is the node's own)
    opaque: bool
    is_object: bool
    kind: str | None  # its `type`
    props: dict[str, Any] | None
    extra: Any  # additionalProperties
    items: dict[str, Any] | None  # an array's `items`


# Facts by id(node), with the node kept so that its id is not reused while its entry lives.
# Built-in nodes live as long as the process; custom resources' schemas are replaced by new
# nodes, and the table starts again when it grows past `_FACTS_LIMIT`.
_FACTS: dict[int, tuple[dict[str, Any], _Facts]] = {}
_FACTS_LIMIT = 50_000


def _facts(node: dict[str, Any]) -> _Facts:
    entry = _FACTS.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    kind = node.get("type")
    items = node.get("items") if kind == "array" else None
    facts = _Facts(_ref_name(node), _opaque(node), _is_object(node),
                   kind if isinstance(kind, str) else None, node.get("properties"),
                   node.get("additionalProperties"), items if isinstance(items, dict) else None)
    if len(_FACTS) >= _FACTS_LIMIT:
        _FACTS.clear()
    _FACTS[id(node)] = (node, facts)
    return facts


def _resolved(node: dict[str, Any]) -> tuple[dict[str, Any], _Facts, str | None]:
    """`_resolve` with the facts of the node behind the reference."""
    entry = _FACTS.get(id(node))
    facts = entry[1] if entry is not None and entry[0] is node else _facts(node)
    if facts.ref is None:
        return node, facts, None
    target = schema.definition(facts.ref)
    entry = _FACTS.get(id(target))
    return (target, entry[1] if entry is not None and entry[0] is target else _facts(target),
            facts.ref)


# --- unknown fields ------------------------------------------------------------------------


def _strict_child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


UNKNOWN: Any = object()  # no known counterpart (`known`)


def _known_child(known: Any, key: str | int) -> Any:
    """`known`'s counterpart of a dict key or list index (`UNKNOWN` when it has none)."""
    if isinstance(key, str):
        return known.get(key, UNKNOWN) if isinstance(known, dict) else UNKNOWN
    return known[key] if isinstance(known, list) and key < len(known) else UNKNOWN


def _walk_unknown(value: Any, node: dict[str, Any], path: str, found: list[str],
                  drop: bool, known: Any = UNKNOWN) -> None:
    if known is not UNKNOWN and isinstance(value, dict | list) and same_json(value, known):
        return  # a dict or list equal to its known counterpart
    _, facts, _ = _resolved(node)
    if value is None or facts.opaque:
        return
    if isinstance(value, dict) and facts.is_object:
        props, extra = facts.props, facts.extra
        known_map = known if isinstance(known, dict) else None
        unknown: list[str] = []
        for key, sub in value.items():
            if props is not None and key in props:
                _walk_unknown(sub, props[key], _strict_child(path, key), found, drop,
                              UNKNOWN if known_map is None else known_map.get(key, UNKNOWN))
            elif isinstance(extra, dict):
                _walk_unknown(sub, extra, _strict_child(path, key), found, drop,
                              UNKNOWN if known_map is None else known_map.get(key, UNKNOWN))
            elif props is not None or extra is False:
                found.append(_strict_child(path, key))
                unknown.append(key)
        if drop:
            for key in unknown:
                del value[key]
    elif isinstance(value, list) and facts.items is not None:
        items = facts.items
        for i, item in enumerate(value):
            _walk_unknown(item, items, f"{path}[{i}]", found, drop, _known_child(known, i))


def unknown_fields(obj: Any, definition: str, known: Any = UNKNOWN) -> list[str]:
    """The fields of `obj` that the definition does not know, in strict decoding's format
    (`spec.containers[0].foo`, `metadata.bogus`, `foo`) and in document order."""
    found: list[str] = []
    _walk_unknown(obj, schema.definition(definition), "", found, False, known)
    return found


def drop_unknown_fields(obj: Any, definition: str, known: Any = UNKNOWN) -> list[str]:
    """Remove the unknown fields from `obj` in place; return their paths as
    `unknown_fields` does."""
    found: list[str] = []
    _walk_unknown(obj, schema.definition(definition), "", found, True, known)
    return found


# --- server-side apply (structured-merge-diff) paths ----------------------------------------


def _smd_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(v)


def _walk_smd(value: Any, node: dict[str, Any], path: str, found: list[str]) -> None:
    node, _ = _resolve(node, None)
    if value is None or _opaque(node):
        return
    if isinstance(value, dict) and _is_object(node):
        props: dict[str, Any] | None = node.get("properties")
        extra = node.get("additionalProperties")
        for key, sub in value.items():
            if props is not None and key in props:
                _walk_smd(sub, props[key], f"{path}.{key}", found)
            elif isinstance(extra, dict):
                _walk_smd(sub, extra, f"{path}.{key}", found)
            elif props is not None:
                found.append(f"{path}.{key}")
                return  # structured-merge-diff stops at the first unknown key of a map
    elif isinstance(value, list) and node.get("type") == "array" and "items" in node:
        keys = node.get("x-kubernetes-list-map-keys") \
            if node.get("x-kubernetes-list-type") == "map" else None
        for i, item in enumerate(value):
            if keys and isinstance(item, dict) and all(k in item for k in keys):
                element = "[" + ",".join(f"{k}={_smd_value(item[k])}" for k in keys) + "]"
            else:
                element = f"[{i}]"
            _walk_smd(item, node["items"], path + element, found)


def apply_unknown_fields(obj: Any, definition: str) -> list[str]:
    """Unknown fields as server-side apply names them: `.spec.containers[name="c"].foo`
    (list-map entries by key, the first unknown key of each map only)."""
    found: list[str] = []
    _walk_smd(obj, schema.definition(definition), "", found)
    return found


def apply_schema_error(namespace: str, name: str, group: str, version: str, kind: str,
                       paths: list[str]) -> StatusError:
    """An apply patch with fields outside the schema: `managedfields.typed_patch_error` (400,
    upstream's message) with one `<path>: field not declared in schema` a field."""
    return typed_patch_error(namespace, name, group, version, kind,
                             [f"{p}: field not declared in schema" for p in paths])


# --- wrong JSON types ----------------------------------------------------------------------


def go_type(node: dict[str, Any]) -> str:
    """The Go type name a node stands for, as the JSON decoder prints it (best effort: named
    string and map types such as `v1.RestartPolicy` or `v1.ResourceList` print as their
    underlying type)."""
    ref = _ref_name(node)
    if ref is not None:
        parts = ref.split(".")
        return f"{parts[-2]}.{parts[-1]}"
    kind = node.get("type")
    if kind == "array":
        return "[]" + go_type(node.get("items", {}))
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return "map[string]" + go_type(extra)
        return "map[string]interface {}"
    if kind == "string":
        return "[]uint8" if node.get("format") == "byte" else "string"
    if kind == "integer":
        return str(node.get("format") or "int")
    if kind == "number":
        return "float64"
    if kind == "boolean":
        return "bool"
    return "interface {}"


def json_kind(value: Any) -> str:
    """The kind of a decoded JSON value as Go's JSON decoder names it in `json: cannot
    unmarshal <kind> into ...`: `object`, `array`, `string`, `number`, `bool` or `null`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object"


def go_quantity(value: Any) -> Any:
    """What Go writes for the Quantity `value` once decoded (its canonical string; `value`
    itself when that is what Go writes), parsed once; raises `QuantityError` with
    resource.ParseQuantity's words when it is not a quantity."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(ERR_FORMAT_WRONG)
    text = str(quantity_from_json(value))
    return value if text == value else text


_RFC3339 = "2006-01-02T15:04:05Z07:00"
_RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"


# A time as clients write it, every element captured: Go's parser reads the same, and the
# common case needs no other parse (a one-digit hour is accepted, as Go accepts it).
_TIME_FIELDS = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{1,2}):([0-9]{2}):([0-9]{2})"
                          r"(?:[.,]([0-9]+))?(?:Z|([+-])([0-9]{2}):([0-9]{2}))")
_MICRO_TIME_FIELDS = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{1,2}):([0-9]{2}):"
                                r"([0-9]{2})[.,]([0-9]{6})(?:Z|([+-])([0-9]{2}):([0-9]{2}))")


class TimeError(ValueError):
    """A text that is not a metav1.Time or MicroTime; `message` is Go's time.Parse error."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _days_in(month: int, year: int) -> int:
    """Go's daysIn: the days of a month (1-12) in the proleptic Gregorian calendar."""
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def time_error(text: str, micro: bool = False) -> str | None:
    """Why `text` does not parse as metav1.Time (RFC 3339) or MicroTime (six fractional
    digits), worded like Go's time.Parse, or None."""
    try:
        go_time(text, micro)
    except TimeError as e:
        return e.message
    return None


def go_time(text: str, micro: bool) -> str:
    """The time `text` as Go's encoder writes it back once decoded: in UTC, a Time to the
    second, a MicroTime to the microsecond (both truncated); a time that needs a year
    outside 1-9999 to say in UTC is kept as it came. Raises `TimeError` with Go's words when
    `text` does not parse. One parse: the elements the check reads are the ones written."""
    m = (_MICRO_TIME_FIELDS if micro else _TIME_FIELDS).fullmatch(text)
    if m is None:
        message = _time_error(text, micro)
        if message is None:
            return text  # valid in a spelling the regex leaves out (a signed micro fraction)
        raise TimeError(message)
    year, month, day, hour, minute, second = map(int, m.groups()[:6])
    fraction, sign, zone_hour, zone_minute = m.group(7, 8, 9, 10)
    if not (1 <= month <= 12 and 1 <= day <= _days_in(month, year) and hour <= 23
            and minute <= 59 and second <= 59
            and (sign is None or (int(zone_hour) <= 24 and int(zone_minute) <= 60))):
        raise TimeError(_time_error(text, micro) or "")  # an element out of its range
    if sign is None and len(m.group(4)) == 2 and \
            (fraction is None if not micro else text[19] == "."):
        return text  # already in Go's form: the common case
    microsecond = int(fraction) if micro else 0
    try:
        moment = datetime(year, month, day, hour, minute, second, microsecond)
        if sign is not None:
            offset = timedelta(hours=int(zone_hour), minutes=int(zone_minute))
            moment = moment - offset if sign == "+" else moment + offset
    except (ValueError, OverflowError):
        return text  # year 0000, or out of datetime's range once in UTC
    whole = (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
             f"{moment.minute:02d}:{moment.second:02d}")
    return f"{whole}.{moment.microsecond:06d}Z" if micro else f"{whole}Z"


def _digit(text: str, i: int) -> bool:
    """Go's isDigit: an ASCII digit at byte `i` (other Unicode digits are not)."""
    return i < len(text) and "0" <= text[i] <= "9"


def _getnum(text: str, fixed: bool) -> tuple[int, str] | None:
    """Go's getnum: one or two leading digits, exactly two when `fixed`; None when bad."""
    if not _digit(text, 0):
        return None
    if not _digit(text, 1):
        return None if fixed else (int(text[0]), text[1:])
    return int(text[:2]), text[2:]


def _atoi(text: str) -> int | None:
    """Go's time.atoi: an optional sign, then ASCII digits only."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all("0" <= c <= "9" for c in digits):
        return None
    return -int(digits) if text[:1] == "-" else int(digits)


# RFC 3339's layout as Go's parser splits it: (literal prefix, element) pairs.
_LAYOUT = (("", "2006"), ("-", "01"), ("-", "02"), ("T", "15"), (":", "04"), (":", "05"))


def _time_error(text: str, micro: bool) -> str | None:
    """`time_error` for what is not plainly valid: walks the layout as Go's time.parse
    does, a range error reported at the element that has it, the day of the month last."""
    layout = _RFC3339_MICRO if micro else _RFC3339
    whole = go_quote(text)

    def bad(rest: str, element: str) -> str:
        return (f"parsing time {whole} as {go_quote(layout)}: "
                f"cannot parse {go_quote(rest)} as {go_quote(element)}")

    def out_of_range(what: str) -> str:
        return f"parsing time {whole}: {what} out of range"

    rest = text
    fields: list[int] = []
    for prefix, element in _LAYOUT:
        if prefix:
            if not rest.startswith(prefix):
                return bad(rest, prefix)
            rest = rest[1:]
        if element == "2006":
            year = _atoi(rest[:4]) if len(rest) >= 4 and _digit(rest, 0) else None
            if year is None:
                return bad(rest, element)
            fields.append(year)
            rest = rest[4:]
            continue
        got = _getnum(rest, fixed=element != "15")
        if got is None:
            return bad(rest, element)
        value, rest = got
        fields.append(value)
        label, top = {"01": ("month", 12), "15": ("hour", 23), "04": ("minute", 59),
                      "05": ("second", 59)}.get(element, ("", 99))
        if value > top or (element == "01" and value < 1):
            return out_of_range(label)
    if micro:
        if len(rest) < 7:
            return bad(rest, ".000000")
        fraction = _atoi(rest[1:7]) if rest[0] in ".," else None
        if fraction is None:
            return bad(rest, ".000000")
        if fraction < 0:
            return out_of_range("fractional second")
        rest = rest[7:]
    elif len(rest) >= 2 and rest[0] in ".," and _digit(rest, 1):
        i = 2
        while _digit(rest, i):
            i += 1
        rest = rest[i:]
    if rest.startswith("Z"):
        rest = rest[1:]
    else:
        zone = rest
        if len(zone) < 6 or zone[3] != ":":
            return bad(zone, "Z07:00")
        zone_hour = _getnum(zone[1:3], True)
        zone_minute = _getnum(zone[4:6], True) if zone_hour is not None else None
        # Go tests the offset's range with > (offsets of 24 hours or 60 minutes are
        # written), the minute's error over the hour's, before the digits and the sign.
        if zone_minute is not None and zone_minute[0] > 60:
            return out_of_range("time zone offset minute")
        if zone_hour is not None and zone_hour[0] > 24:
            return out_of_range("time zone offset hour")
        if zone_minute is None or zone[0] not in "+-":
            return bad(zone, "Z07:00")
        rest = zone[6:]
    if rest:
        return f"parsing time {whole}: extra text: {go_quote(rest)}"
    year, month, day = fields[:3]
    if day < 1 or day > _days_in(month, year):
        return out_of_range("day")
    return None


_B64 = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def base64_error(text: str) -> str | None:
    """Why `text` is not standard padded base64, as Go's encoding/base64 says it
    (`illegal base64 data at input byte N`), or None. Best effort on N."""
    chars = [(i, c) for i, c in enumerate(text) if c not in "\r\n"]
    for n, (i, c) in enumerate(chars):
        if c == "=":
            tail = chars[n:]
            pad_ok = (len(chars) % 4 == 0 and len(tail) <= 2
                      and all(ch == "=" for _, ch in tail) and n % 4 >= 2)
            return None if pad_ok else f"illegal base64 data at input byte {i}"
        if c not in _B64:
            return f"illegal base64 data at input byte {i}"
    if len(chars) % 4:
        return f"illegal base64 data at input byte {len(text)}"
    return None


class _TypeError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# Named Go types the schema does not tell from their underlying type, by (struct, field), as
# the decoder names them (`go_type` prints the underlying type of the others).
_GO_NAMED_TYPES = {("DeleteOptions", "propagationPolicy"): "v1.DeletionPropagation"}


def _unmarshal_error(value: Any, node: dict[str, Any], struct: str, fields: list[str],
                     value_text: str | None = None) -> _TypeError:
    what = value_text or json_kind(value)
    target = go_type(node)
    if struct and fields:
        target = _GO_NAMED_TYPES.get((struct, fields[-1]), target)
    if struct:
        return _TypeError(f"json: cannot unmarshal {what} into Go struct field "
                          f"{struct}.{'.'.join(fields)} of type {target}")
    return _TypeError(f"json: cannot unmarshal {what} into Go value of type {target}")


class _Unmarshal(Exception):
    """A value of the wrong JSON type, raised where it is found; its Go path is built on the
    way out (`at`), so that the walk carries no path while nothing is wrong."""

    def __init__(self, value: Any, node: dict[str, Any], value_text: str | None = None
                 ) -> None:
        super().__init__()
        self.value, self.node, self.value_text = value, node, value_text
        self.keys: list[str] = []  # the JSON fields from the value up, innermost first
        self.struct: str | None = None  # the innermost Go struct that has them

    def at(self, key: str, struct: str | None) -> None:
        """The value sits at field `key` of an object of the Go struct `struct` (None: a
        struct without a name of its own, named by the next one out)."""
        self.keys.append(key)
        if self.struct is None:
            self.struct = struct

    def message(self, at: Sequence[str]) -> str:
        return _unmarshal_error(self.value, self.node, self.struct or "",
                                [*at, *reversed(self.keys)], self.value_text).message


# What `_check` does at a node (`_Plan.code`); the codes after `_ARRAY` are `_leaf`'s.
_ANY, _OBJECT, _ARRAY, _STRING, _BYTES, _BOOLEAN, _INTEGER, _NUMBER, _QUANTITY, \
    _INT_OR_STRING, _TIME, _MICRO_TIME = range(12)

_NONE = type(None)
_EVERY_JSON_TYPE = frozenset((_NONE, bool, int, float, str, list, dict))
_INT32_NODE = {"type": "integer", "format": "int32"}  # how IntOrString's number is named


class _Plan:
    """What the type walk does at one schema node, worked out once (`_plan`): the `$ref`
    followed, the check its values get, and for an object the plans of its properties and of
    its map values, for an array the plan of its items (both filled on first use, `_fill`,
    so that recursive schemas end). `fast`: the Python types of values that pass as they
    are (an int also within `low`..`high`), which the walk accepts without a call."""

    __slots__ = ("children", "code", "declared", "extra", "fast", "filled", "high", "items",
                 "low", "marks", "name", "node", "struct")

    def __init__(self, declared: dict[str, Any]) -> None:
        node, facts, name = _resolved(declared)
        self.declared, self.node, self.name = declared, node, name
        kind = facts.kind
        self.low, self.high = _INT_RANGES["int64"]
        self.fast: frozenset[type] = frozenset((_NONE,))
        # the struct a property's Go path is named by (None: the enclosing one's)
        self.struct = name.rsplit(".", 1)[-1] if name and facts.props is not None else None
        self.marks = facts.props is not None or facts.extra is False  # other keys unknown
        self.filled = False
        self.children: dict[str, _Plan] = {}
        self.extra: _Plan | None = None
        self.items: _Plan | None = None
        if name == QUANTITY:
            code = _QUANTITY
        elif name == INT_OR_STRING:
            code, self.fast = _INT_OR_STRING, frozenset((_NONE, str, int))
        elif name in (TIME, MICRO_TIME):
            code = _TIME if name == TIME else _MICRO_TIME
        elif facts.opaque and kind in ("object", None):
            code, self.fast = _ANY, _EVERY_JSON_TYPE
        elif facts.is_object:
            code = _OBJECT
        elif kind == "array":
            code = _ARRAY
        elif kind == "string":
            if node.get("format") == "byte":
                code = _BYTES
            else:
                code, self.fast = _STRING, frozenset((_NONE, str))
        elif kind == "boolean":
            code, self.fast = _BOOLEAN, frozenset((_NONE, bool))
        elif kind == "integer":
            code, self.fast = _INTEGER, frozenset((_NONE, int))
            self.low, self.high = _INT_RANGES.get(str(node.get("format")),
                                                  _INT_RANGES["int64"])
        elif kind == "number":
            code, self.fast = _NUMBER, frozenset((_NONE, int, float))
        else:
            code, self.fast = _ANY, _EVERY_JSON_TYPE
        self.code = code


# Plans by id(node), with the node kept so that its id is not reused while its entry lives;
# emptied when the served custom definitions change (a `$ref` may name another node then)
# and when it grows past `_FACTS_LIMIT`.
_PLANS: dict[int, tuple[dict[str, Any], _Plan]] = {}
_plans_generation = -1


def _plan(node: dict[str, Any]) -> _Plan:
    entry = _PLANS.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    if len(_PLANS) >= _FACTS_LIMIT:
        _PLANS.clear()
    plan = _Plan(node)
    _PLANS[id(node)] = (node, plan)
    return plan


def _fill(plan: _Plan) -> None:
    """The plans of a node's properties, map values and items, once."""
    if plan.name is not None:  # a `$ref`: the definition's own plan has them
        target = _plan(plan.node)
        if not target.filled:
            _fill(target)
        plan.children, plan.extra, plan.items = target.children, target.extra, target.items
    else:
        node = plan.node
        if plan.code == _OBJECT:
            props = node.get("properties")
            if props is not None:
                plan.children = {key: _plan(sub) for key, sub in props.items()}
            extra = node.get("additionalProperties")
            plan.extra = _plan(extra) if isinstance(extra, dict) else None
        elif plan.code == _ARRAY:
            plan.items = _plan(node.get("items", {}))
    plan.filled = True


# What `_leaf` returned for the valid Quantity, Time and MicroTime texts it met last (None:
# written as they are): a body repeats its times (a status's conditions and container
# states, an Event's first and last timestamps), and so do the bodies of the same second.
# Each table starts again when it grows past `_WRITTEN_LIMIT`.
_WRITTEN_QUANTITIES: dict[str, str | None] = {}
_WRITTEN_TIMES: dict[str, str | None] = {}
_WRITTEN_MICRO_TIMES: dict[str, str | None] = {}
_WRITTEN_LIMIT = 4096


def _remember(table: dict[str, str | None], text: str, written: str | None) -> None:
    if len(table) >= _WRITTEN_LIMIT:
        table.clear()
    table[text] = written


def _leaf(value: Any, plan: _Plan) -> Any:
    """`_check` of a value that is not null at a node that is neither an object nor an
    array."""
    code = plan.code
    if code == _STRING:
        if not isinstance(value, str):
            raise _Unmarshal(value, plan.node)
        return None
    if code == _QUANTITY:
        if isinstance(value, str):
            written = _WRITTEN_QUANTITIES.get(value, UNKNOWN)
            if written is not UNKNOWN:
                return written
        try:
            written = go_quantity(value)
        except QuantityError as e:
            raise _TypeError(str(e)) from None
        written = None if written is value else written
        if isinstance(value, str):
            _remember(_WRITTEN_QUANTITIES, value, written)
        return written
    if code in (_TIME, _MICRO_TIME):
        if not isinstance(value, str):
            raise _Unmarshal(value, {"type": "string"})
        cache = _WRITTEN_TIMES if code == _TIME else _WRITTEN_MICRO_TIMES
        written = cache.get(value, UNKNOWN)
        if written is not UNKNOWN:
            return written
        try:
            written = go_time(value, micro=code == _MICRO_TIME)
        except TimeError as e:
            raise _TypeError(e.message) from None
        written = None if written is value else written
        _remember(cache, value, written)
        return written
    if code == _INT_OR_STRING:
        if isinstance(value, str):
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Unmarshal(value, _INT32_NODE)
        if isinstance(value, float) and not value.is_integer():
            raise _Unmarshal(value, _INT32_NODE, f"number {value!r}")
        return None
    if code == _BYTES:
        if not isinstance(value, str):
            raise _Unmarshal(value, plan.node)
        err = base64_error(value)
        if err:
            raise _TypeError(err)
        return None
    if code == _BOOLEAN:
        if not isinstance(value, bool):
            raise _Unmarshal(value, plan.node)
        return None
    if code in (_INTEGER, _NUMBER):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Unmarshal(value, plan.node)
        if code == _INTEGER:
            if isinstance(value, float) and not value.is_integer():
                raise _Unmarshal(value, plan.node, f"number {value!r}")
            if not plan.low <= int(value) <= plan.high:
                raise _Unmarshal(value, plan.node, f"number {int(value)}")
    return None


def _check(value: Any, plan: _Plan, known: Any, unknown: list[bool]) -> Any:
    """Raise _Unmarshal or _TypeError for the first value that the Go decoder would refuse.
    Appends to `unknown` at a key the schema does not know (where `_walk_unknown` may report
    one: it walks no node this walk does not). Returns what Go would write in place of a
    valid Quantity or time that it writes otherwise (the caller puts it in place), else
    None. A child value of a type its plan passes as it is (`_Plan.fast`) is not walked:
    the walk of it would return None at once."""
    if value is None:
        return None  # null decodes into anything as the zero value
    if known is not UNKNOWN and isinstance(value, dict | list) and same_json(value, known):
        return None  # a dict or list equal to its known counterpart
    code = plan.code
    if code == _OBJECT:
        if not isinstance(value, dict):
            raise _Unmarshal(value, plan.declared)
        if not plan.filled:
            _fill(plan)
        children, extra = plan.children, plan.extra
        known_map = known if isinstance(known, dict) else None
        for key, sub in value.items():
            child = children.get(key)
            if child is None:
                if extra is None:
                    if plan.marks:
                        unknown.append(True)
                    continue
                child = extra
            kind = type(sub)
            if kind in child.fast and (kind is not int or child.low <= sub <= child.high):
                continue
            try:
                if child.code > _ARRAY and kind is not dict and kind is not list:
                    written = _leaf(sub, child)  # no `known` to compare it with
                else:
                    written = _check(sub, child, UNKNOWN if known_map is None
                                     else known_map.get(key, UNKNOWN), unknown)
            except _Unmarshal as e:
                if key in children:  # a property: a Go struct field (a map's key is not)
                    e.at(key, plan.struct)
                raise
            if written is not None:
                value[key] = written  # a value replaced, no key added: iteration goes on
        return None
    if code == _ARRAY:
        if not isinstance(value, list):
            raise _Unmarshal(value, plan.declared)
        if not plan.filled:
            _fill(plan)
        items = plan.items
        assert items is not None
        fast, low, high = items.fast, items.low, items.high
        known_list = known if isinstance(known, list) else None
        for i, item in enumerate(value):
            kind = type(item)
            if kind in fast and (kind is not int or low <= item <= high):
                continue
            if items.code > _ARRAY and kind is not dict and kind is not list:
                written = _leaf(item, items)
            else:
                written = _check(item, items, known_list[i] if known_list is not None
                                 and i < len(known_list) else UNKNOWN, unknown)
            if written is not None:
                value[i] = written
        return None
    if code == _ANY:
        return None
    return _leaf(value, plan)


# The reference node each definition's walk starts from: one per definition, so that its
# plan is worked out once (a new node per call was a new plan on every write).
_ROOTS: dict[str, dict[str, Any]] = {}


def type_errors(obj: Any, definition: str, known: Any = UNKNOWN,
                unknown: list[bool] | None = None, at: Sequence[str] = ()) -> str | None:
    """The decode error of the first value of the wrong type in `obj` (document order), or
    None. Examples: `json: cannot unmarshal string into Go struct field
    PodSpec.spec.containers of type []v1.Container`, `quantities must match the regular
    expression '...'`. Integral floats are accepted where integers are expected (a YAML
    body converted to JSON cannot tell 1 from 1.0). `unknown`, when given, gets an entry
    when the walk met a field the schema does not know: an object that passed with
    `unknown` left empty has no unknown fields (`unknown_fields` would find none).
    Valid values that Go writes otherwise are rewritten in `obj` (`go_quantity`,
    `go_time`), up to the first wrong one. `at`: the JSON fields `obj` sits at in the body
    the decoder reads (an Eviction's `deleteOptions`), which its messages name."""
    global _plans_generation
    if _plans_generation != schema.custom_generation:
        _PLANS.clear()
        _plans_generation = schema.custom_generation
    root = _ROOTS.get(definition)
    if root is None:
        if len(_ROOTS) >= _FACTS_LIMIT:
            _ROOTS.clear()
        root = _ROOTS[definition] = {"$ref": "#/definitions/" + definition}
    if not isinstance(obj, dict):
        return _unmarshal_error(obj, root, "", []).message
    try:
        _check(obj, _plan(root), known, [] if unknown is None else unknown)
    except _Unmarshal as e:
        return e.message(at)
    except _TypeError as e:
        return e.message
    return None


def metadata_type_error(obj: Any) -> str | None:
    """The decode error of a custom object's `metadata`, which upstream's apiextensions
    decoder reads into a typed ObjectMeta however the rest of the object is typed
    (`GetObjectMeta`: the metadata alone, so the Go path starts there: `json: cannot
    unmarshal number into Go struct field ObjectMeta.annotations of type string`), or None.
    Valid times in it are rewritten as Go writes them, as `type_errors` does."""
    if not isinstance(obj, dict) or obj.get("metadata") is None:
        return None
    return type_errors(obj["metadata"], schema.OBJECT_META)


def write_as_go(obj: dict[str, Any], definition: str, known: Any = UNKNOWN) -> None:
    """Rewrite `obj`'s valid Quantity and time values as Go writes them (the type walk's
    rewriting, for an object no decoder read: a server-side apply's merged result). A value
    of the wrong type stops the walk there and is left to validation."""
    type_errors(obj, definition, known)


# --- messages ------------------------------------------------------------------------------


def _strict_errors(paths: list[str], duplicates: Sequence[str] = ()) -> list[str]:
    return ([f"unknown field {go_quote(p)}" for p in paths]
            + [f"duplicate field {go_quote(p)}" for p in duplicates])


def strict_decoding_message(paths: list[str], duplicates: Sequence[str] = ()) -> str:
    """`strict decoding error: unknown field "a", unknown field "b", duplicate field "c"`."""
    return "strict decoding error: " + ", ".join(_strict_errors(paths, duplicates))


def warning_texts(paths: list[str], duplicates: Sequence[str] = ()) -> list[str]:
    """The `Warning` texts of fieldValidation=Warn, one per field: `unknown field "spec.foo"`
    (then `duplicate field "x"`)."""
    return _strict_errors(paths, duplicates)


def warning_header(text: str) -> str:
    """A `Warning` header value as the apiserver sends it: `299 - "<escaped text>"`."""
    return f"299 - {go_quote(text)}"


def decode_error(kind: str, version: str, message: str) -> StatusError:
    """400 `<Kind> in version "<version>" cannot be handled as a <Kind>: <message>` (the
    body of a create or update did not decode)."""
    return StatusError(400, "BadRequest",
                       f"{kind} in version {go_quote(version)} cannot be handled as a "
                       f"{kind}: {message}")


def strict_error(kind: str, version: str, paths: list[str],
                 duplicates: Sequence[str] = ()) -> StatusError:
    """400 for fieldValidation=Strict on create or update:
    `Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field
    "spec.containers[0].foo"`."""
    return decode_error(kind, version, strict_decoding_message(paths, duplicates))


def patch_strict_error(paths: list[str], patched: str,
                       duplicates: Sequence[str] = ()) -> StatusError:
    """422 for fieldValidation=Strict on a JSON, merge or strategic merge patch, as upstream
    builds it: an Invalid error with an empty kind and name on the field `patch`, whose value
    `patched` is the patched object's JSON text for JSON and merge patches and Go's `%+v` of
    the patch itself for strategic merge patches (`goformat.go_json`)."""
    detail = strict_decoding_message(paths, duplicates)
    value = go_quote(patched)
    message = f"Invalid value: {value}: {detail}"
    return StatusError(422, "Invalid", f' "" is invalid: patch: {message}',
                       {"causes": [{"reason": "FieldValueInvalid", "message": message,
                                    "field": "patch"}]})


def directive(value: str | None, options_kind: str = "CreateOptions") -> str:
    """The fieldValidation directive of a request: Warn when unset. Anything else than
    Ignore, Warn or Strict raises upstream's 422 on the options kind (`CreateOptions`,
    `UpdateOptions`, `PatchOptions`): `CreateOptions.meta.k8s.io "" is invalid:
    fieldValidation: Unsupported value: "X": supported values: "", "Ignore", "Strict",
    "Warn"`."""
    if not value:
        return WARN
    if value not in DIRECTIVES:
        raise errors.invalid(options_kind, "", [field.not_supported(
            "fieldValidation", value, ["", *DIRECTIVES])], group="meta.k8s.io")
    return value


class _PairsDict(dict[str, Any]):
    duplicates: list[str]


def _pairs_hook(pairs: list[tuple[str, Any]]) -> _PairsDict:
    out = _PairsDict()
    out.duplicates = []
    for key, value in pairs:
        if key in out and key not in out.duplicates:
            out.duplicates.append(key)
        out[key] = value
    return out


def _plain(value: Any, path: str, found: list[str]) -> Any:
    if isinstance(value, dict):
        for key in getattr(value, "duplicates", ()):
            found.append(_strict_child(path, key))
        return {k: _plain(v, _strict_child(path, k), found) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value


# Request bodies nest objects and arrays no deeper than this; deeper ones are refused with
# the message of Go's decoder ("exceeded max depth"). Go's limit is 10000; Python's recursion
# bounds ours lower: with the default recursion limit (1000) the recursive paths a body
# takes (decoding, field validation, patches, managedFields, deep copies) were measured to
# fail past about 320 levels of alternating objects and arrays (two frames a level on
# Python 3.11), so 250 leaves a margin for deeper call stacks.
MAX_NESTING_DEPTH = 250
EXCEEDED_MAX_DEPTH = "exceeded max depth"


def too_deep(value: Any, limit: int = MAX_NESTING_DEPTH, source: str | bytes | None = None
             ) -> bool:
    """Whether a decoded JSON value nests objects and arrays deeper than `limit`. `source`:
    the JSON text it was decoded from; every level of nesting opens with a `{` or a `[`, so
    a text with no more than `limit` of them (counted at C speed, those inside strings
    included) cannot nest deeper, and the value is not walked."""
    if source is not None:
        opening = (source.count("{") + source.count("[") if isinstance(source, str)
                   else source.count(b"{") + source.count(b"["))
        if opening <= limit:
            return False
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def loads_json(text: str | bytes) -> tuple[Any, list[str]]:
    """Parse a JSON body as Go does for Kubernetes (the last of duplicate keys wins) and
    return the value with the paths of the duplicate fields (`metadata.name`), which
    Strict rejects and Warn reports. Raises ValueError on malformed JSON and on JSON nested
    deeper than `MAX_NESTING_DEPTH`.

    A body that orjson parses and encodes back to exactly its own bytes (compact JSON, as
    most clients send it) cannot hold a duplicate key (the re-encoding would be shorter):
    it is taken as orjson parsed it. Anything else (whitespace, escapes orjson writes
    otherwise, integers beyond 64 bits, malformed JSON) goes through the standard library
    with a hook that notes the duplicates."""
    if isinstance(text, bytes):
        try:
            fast = orjson.loads(text)
            same = orjson.dumps(fast) == text
        except (orjson.JSONDecodeError, TypeError):  # TypeError: nested beyond orjson's
            same = False
        if same:
            if too_deep(fast, source=text):
                raise ValueError(EXCEEDED_MAX_DEPTH)
            return fast, []
    try:
        raw = json.loads(text, object_pairs_hook=_pairs_hook)
    except RecursionError:
        raise ValueError(EXCEEDED_MAX_DEPTH) from None
    if too_deep(raw, source=text):
        raise ValueError(EXCEEDED_MAX_DEPTH)
    found: list[str] = []
    return _plain(raw, "", found), found


def check(obj: Any, definition: str, field_validation: str | None, kind: str,
          version: str, duplicates: list[str] | None = None,
          options_kind: str = "CreateOptions", *, check_types: bool = True,
          known: Any = UNKNOWN) -> list[str]:
    """Field validation of a create or update body, as the apiserver's decoder does it.

    Raises the 422 of a bad `fieldValidation` value; the 400 decode error for a value of the
    wrong type (whatever the directive); with Strict, the 400 strict decoding error naming
    the unknown fields, then the `duplicates` (from `loads_json`). With Warn and Ignore the
    unknown fields are dropped from `obj` in place; the returned list holds the `Warning`
    texts to send (empty for Ignore). `check_types=False` leaves the types to the caller
    (a custom resource's schema validation reports them, not a Go decoder), but for the
    metadata, which is typed for every kind (`metadata_type_error`). `known`: a
    stored object of the kind (any version of it: each passed), whose equal subtrees are
    not walked again."""
    mode = directive(field_validation, options_kind)
    unknown: list[bool] = []
    err = (type_errors(obj, definition, known, unknown) if check_types
           else metadata_type_error(obj))
    if err is not None:
        raise decode_error(kind, version, err)
    dups = list(duplicates or ())
    if check_types and not unknown:
        paths = []  # the type walk met no unknown field
    elif mode == STRICT:
        paths = unknown_fields(obj, definition, known)
    else:
        paths = drop_unknown_fields(obj, definition, known)
    if mode == STRICT:
        if paths or dups:
            raise strict_error(kind, version, paths, dups)
        return []
    return warning_texts(paths, dups) if mode == WARN else []

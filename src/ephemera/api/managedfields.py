"""Server-side apply and `metadata.managedFields` bookkeeping: the essentials of
sigs.k8s.io/structured-merge-diff and of the apiserver's field manager, on plain JSON objects
typed by the served OpenAPI v2 schema.

Field sets are sets of paths; a path is a tuple of path elements, serialised in `fieldsV1` as
`f:<field>` (struct fields and map keys), `k:{"name":"c"}` (an item of a list-map, keys from
`x-kubernetes-list-map-keys`, else the patch merge key), `v:<json>` (an item of a set) and
`.` (the node itself, next to its children). Types come from the schema: lists are list-maps,
sets (`x-kubernetes-list-type: set`, or patch strategy merge on primitives) or atomic (all
others); maps and structs are granular unless `x-kubernetes-map-type: atomic`; a field the
schema does not know is deduced from its value (maps granular, lists atomic).

`server_side_apply` merges the applied configuration into the live object, removes the
fields the applier applied last time and no longer applies when no other manager owns them,
and answers 409 Conflict (`ApplyConflict`) when another manager owns a field whose value the
apply changes, unless forced (then ownership moves to the applier). As upstream, the manager
`kubectl` may take over fields from client-side apply without conflicts when their live value
still equals the `kubectl.kubernetes.io/last-applied-configuration` annotation, and it keeps
that annotation in sync. An apply to an object without managed fields first attributes its
existing fields to `before-first-apply`.

`record_update` is the bookkeeping of every other write (create, update, patch): the fields
the write added or changed move to its manager (operation `Update`), removed fields leave
every manager, and `managedFields: []` (or `[{}]`) in the request resets them. At most 10
`Update` entries are kept; older ones merge into `ancient-changes`.

Fields no manager ever owns (upstream's strip set): `apiVersion`, `kind`, `metadata`,
`metadata.{name,namespace,uid,resourceVersion,generation,creationTimestamp,selfLink,
clusterName,managedFields}`. Fields reset by the strategy (upstream's `GetResetFields`) are
left out of every field set and comparison: `status` for the main resource and every
subresource but `status`; `spec`, `metadata.deletionTimestamp` and `metadata.ownerReferences`
for the `status` subresource. `server_side_apply` also keeps the live values of these reset
fields, as the strategy's PrepareForUpdate would.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ephemera.api.errors import StatusError, bad_request
from ephemera.api.goformat import go_quote
from ephemera.api.jsoncopy import json_copy, same_json
from ephemera.api.meta import now_rfc3339
from ephemera.api.strategicpatch import (
    Node,
    canonical_json,
    definition_node,
    extension,
    field_node,
    is_declared_field,
    items_node,
    resolve_node,
)

PathElement = tuple[Any, ...]  # ("f", name) | ("k", ((name, json), ...)) | ("v", json) | ("i", n)
FieldPath = tuple[PathElement, ...]
FieldSet = set[FieldPath]

LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
MAX_UPDATE_MANAGERS = 10
ANCIENT_CHANGES_MANAGER = "ancient-changes"
BEFORE_FIRST_APPLY_MANAGER = "before-first-apply"
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024

_STRIPPED: FieldSet = {
    (("f", "apiVersion"),),
    (("f", "kind"),),
    (("f", "metadata"),),
    *((("f", "metadata"), ("f", name)) for name in (
        "name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName",
        "generation", "managedFields", "resourceVersion")),
}

# Defaults of list-map key fields that the served schema does not carry.
_KEY_FIELD_DEFAULTS: dict[str, Any] = {"protocol": "TCP"}


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

# Path elements parsed, printed and ranked, remembered (pure functions of a string or a
# tuple): every write decodes and encodes its object's fieldsV1, whose element keys
# (`f:spec`, `k:{"name":"app"}`) repeat across writes and objects.
ELEMENT_CACHE = 16384


# --- types ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Type:
    tag: str  # "scalar" | "map" | "list"
    prop: Node | None = None  # the (unresolved) schema node; None when deduced
    atomic: bool = False
    keys: tuple[str, ...] = ()  # list-map keys
    is_set: bool = False
    # The schema types of this map's fields by name, filled as walks ask for them (bounded:
    # past `_FIELD_TYPES_LIMIT` names, the type of a further name is looked up every time).
    _field_types: dict[str, _Type | None] = field(default_factory=dict, compare=False,
                                                  repr=False)

    def field_type(self, key: str) -> _Type | None:
        """The schema type of this map's field `key` (declared or `additionalProperties`);
        None when the schema does not know it."""
        known = self._field_types.get(key, MISSING)
        if known is not MISSING:
            result: _Type | None = known
            return result
        t = _schema_type(_child_prop(self, key))
        if len(self._field_types) < _FIELD_TYPES_LIMIT:
            self._field_types[key] = t
        return t

    @functools.cached_property
    def declared_fields(self) -> frozenset[str]:
        """The names of this map's declared properties (its struct fields)."""
        if self.prop is None:
            return frozenset()
        props = resolve_node(self.prop).get("properties")
        return frozenset(props) if isinstance(props, dict) else frozenset()

    @functools.cached_property
    def item_type(self) -> _Type | None:
        """The schema type of this list's items; None when the schema does not know it."""
        return _schema_type(_items_prop(self))


_FIELD_TYPES_LIMIT = 256
_SCALAR = _Type("scalar")
_CONTAINERS = (dict, list)  # the JSON values that are not leaves by their shape alone
_DEDUCED_MAP = _Type("map", None)  # a map the schema does not type
_DEDUCED_LIST = _Type("list", None, atomic=True)  # a list the schema does not type


def _same_type(a: _Type, b: _Type) -> bool:
    return (a.tag == b.tag and a.prop is b.prop and a.atomic == b.atomic and a.keys == b.keys
            and a.is_set == b.is_set)


# Schema node (by identity; the node is kept so that its id stays its own) -> its type: the
# schema is loaded once and never changed, and every write walks the same nodes.
_SCHEMA_TYPES: dict[int, tuple[Node, _Type | None]] = {}


def _schema_type(prop: Node | None) -> _Type | None:
    if prop is None:
        return None
    known = _SCHEMA_TYPES.get(id(prop))
    if known is not None and known[0] is prop:
        return known[1]
    t = _schema_type_of(prop)
    _SCHEMA_TYPES[id(prop)] = (prop, t)
    return t


def _schema_type_of(prop: Node) -> _Type | None:
    resolved = resolve_node(prop)
    typ = prop.get("type") or resolved.get("type")
    if typ == "array" or "items" in prop or "items" in resolved:
        list_type = extension(prop, "x-kubernetes-list-type")
        if list_type == "map":
            keys = tuple(extension(prop, "x-kubernetes-list-map-keys") or ())
            return _Type("list", prop, keys=keys) if keys else _Type("list", prop, atomic=True)
        if list_type == "set":
            return _Type("list", prop, is_set=True)
        if list_type == "atomic":
            return _Type("list", prop, atomic=True)
        strategies = str(extension(prop, "x-kubernetes-patch-strategy") or "").split(",")
        if "merge" in strategies:
            merge_key = extension(prop, "x-kubernetes-patch-merge-key")
            if merge_key:
                return _Type("list", prop, keys=(str(merge_key),))
            return _Type("list", prop, is_set=True)
        return _Type("list", prop, atomic=True)
    if typ == "object" or "properties" in resolved or "additionalProperties" in resolved:
        if extension(prop, "x-kubernetes-preserve-unknown-fields"):
            return _Type("map", None)
        return _Type("map", prop, atomic=extension(prop, "x-kubernetes-map-type") == "atomic")
    return _SCALAR


def _type_of(prop: Node | None, value: Any) -> _Type:
    """The type of a value at a schema node; the value's shape wins where the two disagree."""
    return _value_type(_schema_type(prop), value)


def _value_type(schema_type: _Type | None, value: Any) -> _Type:
    """The type of a value whose schema type is `schema_type` (None: unknown to the schema);
    the value's shape wins where the two disagree."""
    if value is MISSING or value is None:
        return schema_type or _SCALAR
    if isinstance(value, dict):
        return schema_type if schema_type is not None and schema_type.tag == "map" \
            else _DEDUCED_MAP
    if isinstance(value, list):
        return schema_type if schema_type is not None and schema_type.tag == "list" \
            else _DEDUCED_LIST
    return _SCALAR


def _child_prop(t: _Type, key: str) -> Node | None:
    return field_node(t.prop, key) if t.prop is not None else None


def _items_prop(t: _Type) -> Node | None:
    return items_node(t.prop) if t.prop is not None else None


# --- path elements ----------------------------------------------------------------------------


class _ShapeError(Exception):
    pass


def _item_element(t: _Type, item: Any, index: int) -> PathElement:
    if t.keys:
        if item is None:
            raise _ShapeError(f"element {index}: associative list with keys may not have a "
                              "null element")
        if not isinstance(item, dict):
            raise _ShapeError(f"element {index}: associative list with keys may not have "
                              "non-map elements")
        fields = []
        for name in t.keys:
            if name in item:
                fields.append((name, _key_json(item[name])))
                continue
            default = (field_node(_items_prop(t), name) or {}).get(
                "default", _KEY_FIELD_DEFAULTS.get(name))
            if default is None:
                raise _ShapeError(f"element {index}: associative list with keys has an element "
                                  f'that omits key field "{name}" (and doesn\'t have default '
                                  "value)")
            fields.append((name, _key_json(default)))
        return ("k", tuple(sorted(fields)) if len(fields) > 1 else tuple(fields))
    if t.is_set:
        return ("v", _key_json(item))
    return ("i", index)


def _key_json(value: Any) -> str:
    """`canonical_json` of a list item's key or value; a plain string (printable ASCII
    without quotes or backslashes, as most names are) quoted directly."""
    if (type(value) is str and value.isascii() and value.isprintable() and '"' not in value
            and "\\" not in value):
        return '"' + value + '"'
    return canonical_json(value)


def _index_items(t: _Type, items: Any, path: FieldPath,
                 allow_duplicates: bool = True) -> dict[PathElement, Any]:
    """The items of a granular list by path element, in list order (first one wins)."""
    out: dict[PathElement, Any] = {}
    if not isinstance(items, list):
        return out
    for i, item in enumerate(items):
        try:
            pe = _item_element(t, item, i)
        except _ShapeError as err:
            raise _ShapeError(f"{path_string(path)}: {err}") from None
        if pe in out:
            if not allow_duplicates:
                raise _ShapeError(f"{path_string(path)}: duplicate entries for key "
                                  f"{_element_string(pe)}")
            continue
        out[pe] = item
    return out


def _value_string(value: Any) -> str:
    """structured-merge-diff's value.ToString."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list):
        return "[" + ",".join(_value_string(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={_value_string(value[k])}" for k in sorted(value)) + "}"
    return str(value)


def _element_string(pe: PathElement) -> str:
    tag = pe[0]
    if tag == "f":
        return "." + str(pe[1])
    if tag == "k":
        return "[" + ",".join(f"{n}={_value_string(json.loads(v))}" for n, v in pe[1]) + "]"
    if tag == "v":
        return "[=" + _value_string(json.loads(pe[1])) + "]"
    return f"[{pe[1]}]"


def path_string(path: FieldPath) -> str:
    """A field path as upstream prints it: `.spec.containers[name="c"].image`."""
    return "".join(_element_string(pe) for pe in path)


def _value_sort_key(value: Any) -> tuple[Any, ...]:
    if isinstance(value, bool):
        return (2, int(value))
    if isinstance(value, int | float):
        return (0, float(value))
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, list):
        return (3, tuple(_value_sort_key(v) for v in value))
    if isinstance(value, dict):
        return (4, tuple((k, _value_sort_key(value[k])) for k in sorted(value)))
    return (5,)


@functools.lru_cache(maxsize=ELEMENT_CACHE)
def _element_sort_key(pe: PathElement) -> tuple[Any, ...]:
    tag = pe[0]
    if tag == "f":
        return (0, pe[1])
    if tag == "k":
        return (1, tuple((n, _value_sort_key(json.loads(v))) for n, v in pe[1]))
    if tag == "v":
        return (2, _value_sort_key(json.loads(pe[1])))
    return (3, pe[1])


# --- fieldsV1 ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=ELEMENT_CACHE)
def _element_key(pe: PathElement) -> str:
    tag = pe[0]
    if tag == "f":
        return "f:" + str(pe[1])
    if tag == "k":
        body = ",".join(f"{json.dumps(n, ensure_ascii=False)}:{v}" for n, v in pe[1])
        return "k:{" + body + "}"
    if tag == "v":
        return "v:" + str(pe[1])
    return f"i:{pe[1]}"


@functools.lru_cache(maxsize=ELEMENT_CACHE)
def _parse_element_key(key: str) -> PathElement:
    tag, sep, rest = key.partition(":")
    if not sep:
        raise ValueError(f"invalid path element {key!r}")
    if tag == "f":
        return ("f", rest)
    if tag == "k":
        obj = json.loads(rest)
        if not isinstance(obj, dict) or not obj:
            raise ValueError(f"invalid key {rest!r}")
        return ("k", tuple(sorted((n, canonical_json(v)) for n, v in obj.items())))
    if tag == "v":
        return ("v", canonical_json(json.loads(rest)))
    if tag == "i":
        return ("i", int(rest))
    raise ValueError(f"invalid path element {key!r}")


def _trie(paths: Iterable[FieldPath]) -> dict[PathElement, Any]:
    """{pe: [is_member, children]} for a set of paths."""
    root: dict[PathElement, Any] = {}
    for path in paths:
        if not path:
            continue
        node = root
        for pe in path[:-1]:
            entry = node.get(pe)
            if entry is None:
                entry = node[pe] = [False, {}]
            node = entry[1]
        entry = node.get(path[-1])
        if entry is None:
            node[path[-1]] = [True, {}]
        else:
            entry[0] = True
    return root


# Encoded field sets, as JSON, by their paths in the order given (the order decides between
# elements that sort alike): writes of one shape (every pod of a ReplicaSet created, every
# Event) encode the same sets. Bounded: the table starts again when full, and a set of more
# than `_ENCODED_MAX_PATHS` paths is not remembered.
_ENCODED: dict[tuple[FieldPath, ...], bytes] = {}
_ENCODED_LIMIT = 2048
_ENCODED_MAX_PATHS = 256


def encode_fields(paths: Iterable[FieldPath]) -> dict[str, Any]:
    """A field set as a `fieldsV1` object (children sorted as upstream sorts them); a new
    object on every call."""
    key = tuple(paths)
    known = _ENCODED.get(key)
    if known is not None:
        decoded: dict[str, Any] = orjson.loads(known)
        return decoded
    encoded = _encode_fields(key)
    if len(key) > _ENCODED_MAX_PATHS:
        return encoded
    try:
        text = orjson.dumps(encoded)
    except TypeError:  # a key orjson does not encode (a lone surrogate): not remembered
        return encoded
    if len(_ENCODED) >= _ENCODED_LIMIT:
        _ENCODED.clear()
    _ENCODED[key] = text
    return encoded


def _encode_fields(paths: Iterable[FieldPath]) -> dict[str, Any]:
    def emit(trie: dict[PathElement, Any], out: dict[str, Any]) -> None:
        for pe in sorted(trie, key=_element_sort_key):
            member, children = trie[pe]
            inner: dict[str, Any] = {}
            if children:
                if member:
                    inner["."] = {}
                emit(children, inner)
            out[_element_key(pe)] = inner

    encoded: dict[str, Any] = {}
    emit(_trie(paths), encoded)
    return encoded


# Decoded field sets by the compact JSON of their `fieldsV1`: a write decodes every manager
# of the stored object, which are mostly those the previous write stored. Bounded: the table
# starts again when full.
_DECODED: dict[bytes, frozenset[FieldPath]] = {}
_DECODED_LIMIT = 2048


def decode_fields(fields_v1: Any) -> FieldSet:
    """A `fieldsV1` object as a field set; raises ValueError when it is malformed."""
    try:
        key = orjson.dumps(fields_v1)
    except TypeError:
        return _decode_fields(fields_v1)
    known = _DECODED.get(key)
    if known is None:
        known = frozenset(_decode_fields(fields_v1))
        if len(_DECODED) >= _DECODED_LIMIT:
            _DECODED.clear()
        _DECODED[key] = known
    return set(known)


def _decode_fields(fields_v1: Any) -> FieldSet:
    out: FieldSet = set()

    def walk(obj: Any, prefix: FieldPath) -> None:
        if not isinstance(obj, dict):
            raise ValueError("fieldsV1 must be an object")
        for key, value in obj.items():
            if key == ".":
                if not prefix:
                    raise ValueError("'.' at the root of fieldsV1")
                out.add(prefix)
                continue
            path = (*prefix, _parse_element_key(key))
            if not isinstance(value, dict):
                raise ValueError("fieldsV1 values must be objects")
            if value:
                walk(value, path)
            else:
                out.add(path)

    walk(fields_v1, ())
    return out


def _iterate_sorted(paths: Iterable[FieldPath]) -> Iterator[FieldPath]:
    """Paths in upstream's Set.Iterate order: at each level the members, then the children."""
    def walk(trie: dict[PathElement, Any], prefix: FieldPath) -> Iterator[FieldPath]:
        ordered = sorted(trie, key=_element_sort_key)
        for pe in ordered:
            if trie[pe][0]:
                yield (*prefix, pe)
        for pe in ordered:
            if trie[pe][1]:
                yield from walk(trie[pe][1], (*prefix, pe))

    yield from walk(_trie(paths), ())


# --- walkers over typed values ----------------------------------------------------------------


def _is_empty_map(value: Any) -> bool:
    return value is MISSING or value is None or (isinstance(value, dict) and not value)


def _is_empty_list(value: Any) -> bool:
    return value is MISSING or value is None or (isinstance(value, list) and not value)


def _json_equal(a: Any, b: Any) -> bool:
    if type(a) is str:  # (the usual leaf)
        return type(b) is str and a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _is_leaf(t: _Type, lhs: Any, rhs: Any) -> bool:
    if t.tag == "scalar" or t.atomic:
        return True
    if t.tag == "map":
        return _is_empty_map(lhs) and _is_empty_map(rhs)
    return _is_empty_list(lhs) and _is_empty_list(rhs)


def _pair_type(prop: Node | None, lhs: Any, rhs: Any) -> _Type:
    """The type two values at a schema node are compared or merged as (either may be
    MISSING, not both)."""
    return _pair_value_type(_schema_type(prop), lhs, rhs)


def _pair_value_type(schema_type: _Type | None, lhs: Any, rhs: Any) -> _Type:
    """`_pair_type` for values whose schema type is `schema_type`."""
    tl = _value_type(schema_type, lhs) if lhs is not MISSING else None
    tr = _value_type(schema_type, rhs) if rhs is not MISSING else None
    if tl is None:
        assert tr is not None
        return tr
    if tr is None or tl is tr or _same_type(tl, tr) or rhs is None:
        return tl
    if lhs is None:
        return tr
    return _SCALAR  # shapes disagree: compare or replace as a whole


def to_field_set(value: Any, prop: Node | None, path: FieldPath = (),
                 allow_duplicates: bool = True) -> FieldSet:
    """upstream's TypedValue.ToFieldSet: the leaves, list items and map entries of a value."""
    out: FieldSet = set()

    def walk(v: Any, schema_type: _Type | None, at: FieldPath) -> None:
        t = _value_type(schema_type, v)
        if t.tag == "scalar" or t.atomic:
            out.add(at)
            return
        if t.tag == "list":
            for pe, item in _index_items(t, v, at, allow_duplicates).items():
                walk(item, t.item_type, (*at, pe))
                out.add((*at, pe))
            return
        if not isinstance(v, dict):
            return
        declared = t.declared_fields
        for key, child in v.items():
            child_path = (*at, ("f", key))
            walk(child, t.field_type(key), child_path)
            if (child is None or (isinstance(child, dict) and not child)
                    or key not in declared):
                out.add(child_path)

    walk(value, _schema_type(prop), path)
    out.discard(())
    return out


@dataclass
class _Comparison:
    added: FieldSet = field(default_factory=set)
    modified: FieldSet = field(default_factory=set)
    removed: FieldSet = field(default_factory=set)


# Paths left out of a comparison, as a trie: {path element: the trie below it, or None for
# a path left out with everything under it}.
_Skip = dict[PathElement, Any]
_NO_SKIP: _Skip = {}


@functools.lru_cache(maxsize=16)
def _skip_trie(ignored: tuple[FieldPath, ...]) -> _Skip:
    """The trie of `_compare`'s `ignored` paths (non-empty); shared, never changed."""
    root: _Skip = {}
    for path in ignored:
        if not path:
            continue
        node = root
        for pe in path[:-1]:
            child = node.setdefault(pe, {})
            if child is None:
                break  # a prefix of this path is left out already
            node = child
        else:
            node[path[-1]] = None
    return root


def _compare(lhs: Any, rhs: Any, prop: Node | None,
             ignored: tuple[FieldPath, ...] = ()) -> _Comparison:
    """upstream's TypedValue.Compare (lhs old, rhs new), without the paths under any of
    `ignored` (upstream's RecursiveDifference of the comparison's sets)."""
    c = _Comparison()
    # (Two objects are compared field by field without testing them as a whole first:
    # the fields are each tested before they are walked.)
    if (isinstance(lhs, dict) and isinstance(rhs, dict)) or not same_json(lhs, rhs):
        _compare_changed(c, lhs, rhs, _schema_type(prop), (), _skip_trie(ignored))
    return c


def _compare_changed(c: _Comparison, left: Any, right: Any, schema_type: _Type | None,
                     at: FieldPath, skip: _Skip | None) -> None:
    """Compare two values at `at` that are not the same JSON (either may be MISSING) into
    `c`: an unchanged subtree adds, modifies and removes nothing, and a write changes a few
    fields of a large object, so most of it is never walked. `skip` None: the path is left
    out of the comparison; its values are still walked (the result dropped), so that a value
    that cannot be typed fails the write wherever it is."""
    if skip is None:
        c, skip = _Comparison(), _NO_SKIP
    if not isinstance(left, _CONTAINERS) and not isinstance(right, _CONTAINERS):
        # Scalars, nulls or MISSING: a leaf, whatever the schema says.
        if left is MISSING:
            c.added.add(at)
        elif right is MISSING:
            c.removed.add(at)
        elif not _json_equal(left, right):
            c.modified.add(at)
    elif left is MISSING:
        _collect_all(right, schema_type, at, skip, c.added)
    elif right is MISSING:
        _collect_all(left, schema_type, at, skip, c.removed)
    else:
        _compare_present(c, left, right, schema_type, at, skip)


def _compare_present(c: _Comparison, left: Any, right: Any, schema_type: _Type | None,
                     at: FieldPath, skip: _Skip) -> None:
    """`_compare_changed` of two values present on both sides."""
    if isinstance(left, dict) and isinstance(right, dict):  # (the usual case: two objects)
        t = _value_type(schema_type, left)
        if t.atomic or (not left and not right):
            if not _json_equal(left, right):
                c.modified.add(at)
        else:
            _compare_maps(c, t, left, right, at, skip)
        return
    t = _pair_value_type(schema_type, left, right)
    # `_is_leaf`: a map's (a list's) values are here each a map (a list) or null.
    if t.tag == "scalar" or t.atomic or (not left and not right):
        if not _json_equal(left, right):
            c.modified.add(at)
    elif t.tag == "map":
        _compare_maps(c, t, left if isinstance(left, dict) else {},
                      right if isinstance(right, dict) else {}, at, skip)
    else:
        litems = _index_items(t, left, at)
        ritems = _index_items(t, right, at)
        item_type = t.item_type
        for pe, litem in litems.items():
            ritem = ritems.get(pe, MISSING)
            if ritem is MISSING or not same_json(litem, ritem):
                _compare_changed(c, litem, ritem, item_type, (*at, pe),
                                 skip.get(pe, _NO_SKIP) if skip else _NO_SKIP)
        _collect_items(item_type, [(pe, v) for pe, v in ritems.items() if pe not in litems],
                       at, skip, c.added)


def _compare_maps(c: _Comparison, t: _Type, lmap: dict[str, Any], rmap: dict[str, Any],
                  at: FieldPath, skip: _Skip) -> None:
    """`_compare_present` of two granular maps of type `t`, field by field."""
    for key, lvalue in lmap.items():
        rvalue = rmap.get(key, MISSING)
        if rvalue is not MISSING and (lvalue == rvalue if type(lvalue) is str
                                      else same_json(lvalue, rvalue)):
            continue  # unchanged (two strings compared here: the usual field)
        pe = ("f", key)
        _compare_changed(c, lvalue, rvalue, t.field_type(key), (*at, pe),
                         skip.get(pe, _NO_SKIP) if skip else _NO_SKIP)
    if not rmap.keys() <= lmap.keys():  # (fields only the new value has)
        _collect_entries(t, [(k, v) for k, v in rmap.items() if k not in lmap], at, skip,
                         c.added)


def _collect_all(value: Any, schema_type: _Type | None, at: FieldPath, skip: _Skip,
                 out: FieldSet) -> None:
    """What `_compare` finds in a value present on one side only: the value and all it holds
    (its leaves, map entries and list items), each added (or removed) at its path."""
    if not isinstance(value, _CONTAINERS):  # a scalar or null: a leaf (null: empty)
        out.add(at)
        return
    t = _value_type(schema_type, value)
    if t.atomic or not value:
        out.add(at)
        return
    if isinstance(value, dict):
        _collect_entries(t, value.items(), at, skip, out)
    else:
        _collect_items(t.item_type, _index_items(t, value, at).items(), at, skip, out)
    if at:
        out.add(at)


def _collect_entries(t: _Type, entries: Iterable[tuple[str, Any]], at: FieldPath,
                     skip: _Skip, out: FieldSet) -> None:
    """`_collect_all` of map entries of type `t` at `at`."""
    for key, value in entries:
        pe = ("f", key)
        value_skip = skip.get(pe, _NO_SKIP) if skip else _NO_SKIP
        if not isinstance(value, _CONTAINERS):  # a leaf (see `_compare_changed`)
            if value_skip is not None:
                out.add((*at, pe))
        elif value_skip is None:  # left out: walked for its errors only
            _collect_all(value, t.field_type(key), (*at, pe), _NO_SKIP, set())
        else:
            _collect_all(value, t.field_type(key), (*at, pe), value_skip, out)


def _collect_items(item_type: _Type | None, items: Iterable[tuple[PathElement, Any]],
                   at: FieldPath, skip: _Skip, out: FieldSet) -> None:
    """`_collect_all` of list items (by path element) whose schema type is `item_type`."""
    for pe, item in items:
        item_skip = skip.get(pe, _NO_SKIP) if skip else _NO_SKIP
        if not isinstance(item, _CONTAINERS):
            if item_skip is not None:
                out.add((*at, pe))
        elif item_skip is None:
            _collect_all(item, item_type, (*at, pe), _NO_SKIP, set())
        else:
            _collect_all(item, item_type, (*at, pe), item_skip, out)


def _merge(lhs: Any, rhs: Any, prop: Node | None, at: FieldPath) -> Any:
    """upstream's TypedValue.Merge (lhs live, rhs applied); MISSING when nothing remains."""
    t = _pair_type(prop, lhs, rhs)
    if _is_leaf(t, lhs, rhs):
        return rhs if rhs is not MISSING else lhs
    if t.tag == "map":
        lmap = lhs if isinstance(lhs, dict) else {}
        rmap = rhs if isinstance(rhs, dict) else {}
        out: dict[str, Any] = {}
        for key in [*lmap, *(k for k in rmap if k not in lmap)]:
            left, right, child = lmap.get(key, MISSING), rmap.get(key, MISSING), \
                _child_prop(t, key)
            if right is None:
                if _is_leaf(_pair_type(child, left, None), left, None):
                    continue  # a null scalar, atomic or empty value applied: the field goes
                # a null map or list (structured-merge-diff reads it as an empty one) merges
                # nothing into the live entries, which stay
                right = MISSING
            merged = _merge(left, right, child, (*at, ("f", key)))
            if merged is not MISSING:
                out[key] = merged
        return out if out else MISSING
    litems = _index_items(t, lhs, at)
    ritems = _index_items(t, rhs, at)
    items = _merge_list_items(t, list(litems), litems, list(ritems), ritems, at)
    return items if items else MISSING


def _merge_list_items(t: _Type, lorder: list[PathElement], litems: dict[PathElement, Any],
                      rorder: list[PathElement], ritems: dict[PathElement, Any],
                      at: FieldPath) -> list[Any]:
    """structured-merge-diff's list merge order: live items stay where they are, applied items
    keep their relative order."""
    out: list[Any] = []

    def emit(pe: PathElement, left: Any, right: Any) -> None:
        merged = _merge(left, right, _items_prop(t), (*at, pe))
        if merged is not MISSING:
            out.append(merged)

    shared = [pe for pe in rorder if pe in litems]
    next_shared = shared.pop(0) if shared else None
    li = ri = 0
    while li < len(lorder) or ri < len(rorder):
        if li < len(lorder) and ri < len(rorder):
            pe = lorder[li]
            if pe == rorder[ri]:
                emit(pe, litems[pe], ritems[pe])
                li += 1
                ri += 1
                next_shared = shared.pop(0) if shared else None
                continue
            if pe in ritems and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < len(lorder) and lorder[li] not in ritems:
            emit(lorder[li], litems[lorder[li]], MISSING)
            li += 1
            continue
        if ri < len(rorder):
            pe = rorder[ri]
            emit(pe, litems.get(pe, MISSING), ritems[pe])
            ri += 1
            if next_shared is not None and next_shared == pe:
                next_shared = shared.pop(0) if shared else None
        else:
            li += 1
    return out


def _remove_paths(value: Any, paths: FieldSet, prop: Node | None) -> Any:
    """upstream's RemoveItems: drop each path (with everything under it) from a value."""
    def walk(v: Any, p: Node | None, trie: dict[PathElement, Any], at: FieldPath) -> Any:
        t = _type_of(p, v)
        if t.atomic or t.tag == "scalar":
            return v
        if isinstance(v, dict) and t.tag == "map":
            out: dict[str, Any] = {}
            for key, child in v.items():
                entry = trie.get(("f", key))
                if entry is None:
                    out[key] = child
                elif not entry[0]:
                    out[key] = walk(child, _child_prop(t, key), entry[1], (*at, ("f", key)))
            return out
        if isinstance(v, list) and t.tag == "list":
            kept = []
            for i, item in enumerate(v):
                try:
                    pe = _item_element(t, item, i)
                except _ShapeError:
                    kept.append(item)
                    continue
                entry = trie.get(pe)
                if entry is None:
                    kept.append(item)
                elif not entry[0]:
                    kept.append(walk(item, _items_prop(t), entry[1], (*at, pe)))
            return kept
        return v

    return walk(value, prop, _trie(paths), ())


def _ensure_named_fields(paths: FieldSet, root: Node | None) -> FieldSet:
    """upstream's EnsureNamedFieldsAreMembers: add every struct field on the way to a path."""
    out = set(paths)
    for path in paths:
        p = root
        for i, pe in enumerate(path[:-1]):
            t = _schema_type(p)
            if pe[0] == "f":
                if t is not None and t.tag == "map" and is_declared_field(t.prop, pe[1]):
                    out.add(path[:i + 1])
                p = field_node(t.prop, pe[1]) if t is not None and t.tag == "map" else None
            else:
                p = items_node(t.prop) if t is not None and t.tag == "list" else None
    return out


def _without(paths: FieldSet, ignored: tuple[FieldPath, ...]) -> FieldSet:
    """RecursiveDifference with a few prefixes: drop the paths under any of them."""
    prefixes = [(len(i), i) for i in ignored]
    out: FieldSet = set()
    for path in paths:
        for length, prefix in prefixes:
            if path[:length] == prefix:
                break
        else:
            out.add(path)
    return out


# --- managers ---------------------------------------------------------------------------------


@dataclass
class _Manager:
    manager: str
    operation: str  # "Apply" | "Update"
    api_version: str
    subresource: str
    fields: FieldSet
    time: str | None = None
    # The stored object's encoding of this manager's fields (canonical: this module wrote
    # it) and the fields it encodes; `entry` reuses it while `fields` still equals them.
    stored: tuple[frozenset[FieldPath], dict[str, Any]] | None = \
        field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str, str, str]:
        # Appliers keep one entry whatever version they apply (BuildManagerIdentifier).
        version = "" if self.operation == "Apply" else self.api_version
        return (self.manager, self.operation, version, self.subresource)

    def identifier(self) -> str:
        entry: dict[str, str] = {"manager": self.manager, "operation": self.operation}
        if self.operation != "Apply" and self.api_version:
            entry["apiVersion"] = self.api_version
        if self.subresource:
            entry["subresource"] = self.subresource
        return json.dumps(entry, separators=(",", ":"))

    def describe(self) -> str:
        """upstream's printManager."""
        text = go_quote(self.manager)
        if self.subresource:
            text += f" with subresource {go_quote(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
        return text

    def entry(self) -> dict[str, Any]:
        out: dict[str, Any] = {"manager": self.manager, "operation": self.operation,
                               "apiVersion": self.api_version}
        if self.time is not None:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        if self.stored is not None and self.fields == self.stored[0]:
            out["fieldsV1"] = self.stored[1]
        else:
            out["fieldsV1"] = encode_fields(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out


_Managers = dict[tuple[str, str, str, str], _Manager]


def _decode_managers(entries: Any, stored: Any = None) -> _Managers:
    """Decode `metadata.managedFields`; raises ValueError when any entry is malformed.
    `stored`: the stored object's entries; a manager whose fields are encoded exactly as
    there keeps that encoding (`_Manager.stored`), written again unless its fields change."""
    managers: _Managers = {}
    encodings = _stored_encodings(stored)
    if entries is None:
        return managers
    if not isinstance(entries, list):
        raise ValueError("managedFields must be a list")
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError("managedFields entries must be objects")
        operation = entry.get("operation")
        if operation not in ("Apply", "Update"):
            raise ValueError(f"invalid operation {operation!r}")
        if entry.get("fieldsType") != "FieldsV1":
            raise ValueError(f"invalid fieldsType {entry.get('fieldsType')!r}")
        manager = _Manager(str(entry.get("manager", "")), operation,
                           str(entry.get("apiVersion", "")), str(entry.get("subresource", "")),
                           decode_fields(entry.get("fieldsV1", {})),
                           entry.get("time") if isinstance(entry.get("time"), str) else None)
        key = manager.key
        if key in managers:
            raise ValueError(f"duplicate manager {manager.identifier()}")
        encoding = encodings.get(key)
        if encoding is not None and encoding == entry.get("fieldsV1"):
            manager.stored = (frozenset(manager.fields), encoding)
        managers[key] = manager
    return managers


def _stored_encodings(entries: Any) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """The `fieldsV1` of each manager of a stored object's `metadata.managedFields`."""
    out: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    if not isinstance(entries, list):
        return out
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("fieldsV1"), dict):
            operation = str(entry.get("operation", ""))
            version = "" if operation == "Apply" else str(entry.get("apiVersion", ""))
            out[(str(entry.get("manager", "")), operation, version,
                 str(entry.get("subresource", "")))] = entry["fieldsV1"]
    return out


def _time_sort_key(time: str | None) -> str:
    return time or ""


def _encode_managers(managers: _Managers) -> list[dict[str, Any]]:
    ordered = sorted(managers.values(), key=lambda m: (
        m.operation, _time_sort_key(m.time), m.manager, m.api_version, m.subresource))
    return [m.entry() for m in ordered if m.fields]


def _cap_update_managers(managers: _Managers) -> None:
    if len(managers) <= MAX_UPDATE_MANAGERS or \
            sum(m.operation == "Update" for m in managers.values()) <= MAX_UPDATE_MANAGERS:
        return  # (without sorting them by their identifiers, which encodes each)
    updaters = sorted((m for m in managers.values() if m.operation == "Update"),
                      key=lambda m: (_time_sort_key(m.time), m.identifier()))
    if len(updaters) <= MAX_UPDATE_MANAGERS:
        return
    length = len(updaters)
    first_of_version: dict[str, _Manager] = {}
    for m in updaters:
        if length <= MAX_UPDATE_MANAGERS:
            break
        bucket_key = (ANCIENT_CHANGES_MANAGER, "Update", m.api_version, "")
        first = first_of_version.get(m.api_version)
        if first is None:
            first_of_version[m.api_version] = m
            continue
        bucket = managers.get(bucket_key)
        if bucket is None:
            del managers[first.key]
            bucket = _Manager(ANCIENT_CHANGES_MANAGER, "Update", m.api_version, "",
                              set(first.fields), first.time)
            managers[bucket_key] = bucket
        bucket.fields |= m.fields
        bucket.time = m.time
        del managers[m.key]
        length -= 1


def _set_managed_fields(obj: dict[str, Any], managers: _Managers) -> None:
    meta = obj.setdefault("metadata", {})
    encoded = _encode_managers(managers)
    if encoded:
        meta["managedFields"] = encoded
    else:
        meta.pop("managedFields", None)


# --- helpers over objects ---------------------------------------------------------------------


# The fields the strategy resets, left out of field sets and comparisons (`_ignored_fields`).
_STATUS_RESET_FIELDS: tuple[FieldPath, ...] = (
    (("f", "spec"),), (("f", "metadata"), ("f", "deletionTimestamp")),
    (("f", "metadata"), ("f", "ownerReferences")))
_MAIN_RESET_FIELDS: tuple[FieldPath, ...] = ((("f", "status"),),)


def _ignored_fields(subresource: str) -> tuple[FieldPath, ...]:
    return _STATUS_RESET_FIELDS if subresource == "status" else _MAIN_RESET_FIELDS


def _without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    out = json_copy(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return out


def _view_without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without `metadata.managedFields` for reading only (a comparison): new top-level
    and metadata dicts, everything below shared with `obj`."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    out = dict(obj)
    out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


# `_empty_object`'s result by root node (kept, so that its id stays its own); bounded.
_EMPTY_OBJECTS: dict[int, tuple[Node, dict[str, dict[str, None]]]] = {}
_EMPTY_OBJECTS_LIMIT = 1024


def _empty_object(root: Node | None) -> dict[str, Any]:
    """What upstream compares a create against: a new typed object, whose struct fields
    (`metadata`, `spec`, `status`, ...) are present, holding their required fields as null
    (Go serialises the fields without omitempty). A new object on every call."""
    if root is None:
        return {}
    entry = _EMPTY_OBJECTS.get(id(root))
    if entry is None or entry[0] is not root:
        if len(_EMPTY_OBJECTS) >= _EMPTY_OBJECTS_LIMIT:
            _EMPTY_OBJECTS.clear()
        entry = _EMPTY_OBJECTS[id(root)] = (root, _new_empty_object(root))
    return {name: dict(fields) for name, fields in entry[1].items()}


def _new_empty_object(root: Node) -> dict[str, dict[str, None]]:
    out: dict[str, dict[str, None]] = {}
    for name in (root.get("properties") or {}):
        prop = field_node(root, name)
        t = _schema_type(prop)
        if t is None or t.tag != "map" or prop is None:
            continue
        resolved = resolve_node(prop)
        if resolved.get("properties"):
            out[name] = {r: None for r in resolved.get("required", ())}
    return out


def _restore_reset_fields(result: dict[str, Any], live: dict[str, Any] | None,
                          ignored: tuple[FieldPath, ...]) -> None:
    for path in ignored:
        names = [pe[1] for pe in path]
        target: Any = result
        source: Any = live or {}
        for name in names[:-1]:
            if not isinstance(target, dict):
                break
            target = target.get(name)
            source = source.get(name, {}) if isinstance(source, dict) else {}
        if not isinstance(target, dict):
            continue
        last = names[-1]
        if isinstance(source, dict) and last in source:
            target[last] = json_copy(source[last])
        else:
            target.pop(last, None)


def _kind_of(definition: str, root: Node | None, api_version: str) -> str:
    group, _, version = api_version.rpartition("/")
    for gvk in (root or {}).get("x-kubernetes-group-version-kind", ()):
        if gvk.get("group") == group and gvk.get("version") == version:
            return str(gvk.get("kind"))
    return definition.rsplit(".", 1)[-1]


def _gvk_string(api_version: Any, kind: Any) -> str:
    group, _, version = str(api_version or "").rpartition("/")
    return f"{group}/{version}, Kind={kind or ''}"


def typed_patch_error(namespace: str, name: str, group: str, version: str, kind: str,
                      errors: Sequence[str]) -> StatusError:
    """An apply configuration that cannot be typed by the schema (a field the schema does not
    declare, duplicate keys in a list-map, an item without its key): upstream's message,
    `failed to create typed patch object (ns/name; group/version, Kind=K): <error>` (several
    errors as structured-merge-diff lists them), but as a 400 BadRequest where upstream
    answers a 500: ephemera never answers a 500 to bad input."""
    detail = errors[0] if len(errors) == 1 else "\n".join(["errors:",
                                                           *("  " + e for e in errors)])
    return StatusError(400, "BadRequest", f"failed to create typed patch object "
                                          f"({namespace}/{name}; {group}/{version}, "
                                          f"Kind={kind}): {detail}")


# --- conflicts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Conflict:
    manager: str  # the printed manager, e.g. `"kubectl-create" using v1`
    path: str  # e.g. `.spec.containers[name="c"].image`


class ApplyConflict(StatusError):
    """409 Conflict of a server-side apply, exactly as apimachinery's NewApplyConflict."""

    def __init__(self, conflicts: list[Conflict], paths: list[FieldPath] | None = None) -> None:
        self.conflicts = conflicts
        self.paths = paths or []
        causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {c.manager}",
                   "field": c.path} for c in conflicts]
        super().__init__(409, "Conflict", _conflict_message(conflicts), {"causes": causes})


def _conflict_message(conflicts: list[Conflict]) -> str:
    if len(conflicts) == 1:
        c = conflicts[0]
        return f"Apply failed with 1 conflict: conflict with {c.manager}: {c.path}"
    by_manager: dict[str, list[str]] = {}
    for c in conflicts:
        by_manager.setdefault(c.manager, []).append(c.path)
    lines: list[str] = []
    for manager in by_manager:
        lines.append(f"conflicts with {manager}:")
        lines.extend(f"- {p}" for p in by_manager[manager])
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


def _conflict_error(conflicts: dict[tuple[str, str, str, str], FieldSet],
                    managers: _Managers) -> ApplyConflict:
    items: list[Conflict] = []
    paths: list[FieldPath] = []
    for key in sorted(conflicts, key=lambda k: managers[k].identifier()):
        for path in _iterate_sorted(conflicts[key]):
            items.append(Conflict(managers[key].describe(), path_string(path)))
            paths.append(path)
    return ApplyConflict(items, paths)


# --- the updater ------------------------------------------------------------------------------


def _update_managers(old: Any, new: Any, root: Node | None, managers: _Managers,
                     skip: tuple[str, str, str, str] | None, force: bool,
                     ignored: tuple[FieldPath, ...]) -> tuple[_Managers, _Comparison]:
    """upstream's Updater.update: take changed fields away from the other managers (or
    report them as conflicts) and forget removed fields."""
    comparison = _compare(old, new, root, ignored)
    changed = comparison.added | comparison.modified
    conflicts: dict[tuple[str, str, str, str], FieldSet] = {}
    for key, manager in managers.items():
        if key == skip:
            continue
        owned = manager.fields & changed
        if owned:
            conflicts[key] = owned
    if conflicts and not force:
        raise _conflict_error(conflicts, managers)
    out: _Managers = {}
    removed = comparison.removed
    for key, manager in managers.items():
        if key != skip:
            taken = conflicts.get(key)
            if taken or (removed and removed & manager.fields):
                manager = _Manager(manager.manager, manager.operation, manager.api_version,
                                   manager.subresource,
                                   manager.fields - (taken or set()) - removed, manager.time,
                                   manager.stored)
            if not manager.fields:
                continue
        out[key] = manager  # (the caller's own when none of its fields are taken)
    return out, comparison


def _record(old: dict[str, Any], new: dict[str, Any], root: Node | None, managers: _Managers,
            manager: str, api_version: str, subresource: str, now: str,
            ignored: tuple[FieldPath, ...]) -> _Managers:
    """Updater.Update plus managedFieldsUpdater: the changes of one non-apply write."""
    managers, comparison = _update_managers(old, new, root, managers, None, True, ignored)
    changed = (comparison.added | comparison.modified) - _STRIPPED
    if changed:
        entry = _Manager(manager, "Update", api_version, subresource, set(changed), now)
        key = entry.key
        previous = managers.get(key)
        if previous is not None:
            entry.fields |= previous.fields
            entry.stored = previous.stored  # (written again if the fields are the same)
        managers[key] = entry
    _cap_update_managers(managers)
    return managers


def record_update(old: dict[str, Any] | None, new: dict[str, Any], manager: str,
                  definition: str, api_version: str, subresource: str = "",
                  now: str | None = None) -> None:
    """Update `new["metadata"]["managedFields"]` for a create (`old` None), update or patch
    by `manager`: what `new` adds or changes against `old` moves to `manager` (operation
    `Update`). Never raises: malformed managed fields are dropped, as upstream does."""
    root = definition_node(definition)
    ignored = _ignored_fields(subresource)
    meta = new.setdefault("metadata", {})
    requested = meta.get("managedFields")
    old_entries = ((old or {}).get("metadata") or {}).get("managedFields")
    reset = isinstance(requested, list) and (requested == [] or requested == [{}])
    managers: _Managers
    try:
        if reset:
            managers = {}
        elif subresource:
            managers = _decode_managers(old_entries, old_entries)
        else:
            try:
                managers = _decode_managers(requested, old_entries)
            except ValueError:
                managers = {}
            if not managers:
                managers = _decode_managers(old_entries, old_entries)
    except ValueError:
        managers = {}
    if old is not None and not managers and ((old.get("metadata") or {}).get("uid")):
        # An existing object without managed fields stays untracked (skipNonAppliedManager).
        meta.pop("managedFields", None)
        return
    base = _view_without_managed_fields(old) if old is not None else _empty_object(root)
    current = _view_without_managed_fields(new)
    try:
        managers = _record(base, current, root, managers, manager, api_version, subresource,
                           now or now_rfc3339(), ignored)
    except _ShapeError:
        meta.pop("managedFields", None)
        return
    _set_managed_fields(new, managers)


def server_side_apply(live: dict[str, Any] | None, applied: dict[str, Any], manager: str,
                      force: bool, definition: str, api_version: str, subresource: str = "",
                      now: str | None = None) -> dict[str, Any]:
    """Apply a partial object for `manager` (application/apply-patch+yaml); `live` None means
    create. Returns the merged object with `metadata.managedFields` updated; raises
    `ApplyConflict` (409) on conflicts unless `force`, 400 for a wrong kind or version or a
    configuration carrying managedFields."""
    root = definition_node(definition)
    kind = _kind_of(definition, root, api_version)
    if applied.get("apiVersion") != api_version or applied.get("kind") != kind:
        raise bad_request("invalid object type: "
                          + _gvk_string(applied.get("apiVersion"), applied.get("kind")))
    applied_meta = applied.get("metadata")
    if isinstance(applied_meta, dict) and applied_meta.get("managedFields") is not None:
        raise bad_request("metadata.managedFields must be nil")
    stamp = now or now_rfc3339()
    ignored = _ignored_fields(subresource)
    try:
        try:
            result = _apply(live, applied, manager, force, root, api_version, subresource,
                            stamp, ignored)
        except ApplyConflict as conflict:
            allowed = _allowed_conflicts(manager, live, root)
            if allowed is None:
                raise
            remaining = [(c, p) for c, p in zip(conflict.conflicts, conflict.paths, strict=True)
                         if p not in allowed]
            if remaining:
                raise ApplyConflict([c for c, _ in remaining],
                                    [p for _, p in remaining]) from None
            result = _apply(live, applied, manager, True, root, api_version, subresource,
                            stamp, ignored)
    except _ShapeError as err:
        meta = applied.get("metadata") if isinstance(applied.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        group, _, version = str(applied.get("apiVersion") or "").rpartition("/")
        raise typed_patch_error(str(meta.get("namespace", "")), str(meta.get("name", "")),
                                group, version, str(applied.get("kind") or ""),
                                [str(err)]) from None
    if manager == "kubectl":
        _sync_last_applied(result, applied)
    return result


def _apply(live: dict[str, Any] | None, applied: dict[str, Any], manager: str, force: bool,
           root: Node | None, api_version: str, subresource: str, now: str,
           ignored: tuple[FieldPath, ...]) -> dict[str, Any]:
    try:
        managers = _decode_managers(((live or {}).get("metadata") or {}).get("managedFields"))
    except ValueError:
        managers = {}
    base = _without_managed_fields(live) if live is not None else _empty_object(root)
    merge_base = base if live is not None else {}
    if live is not None and not managers:
        managers = _record(_empty_object(root), base, root, {}, BEFORE_FIRST_APPLY_MANAGER,
                           api_version, subresource, now, ignored)

    config = json_copy(applied)
    for path in ignored:
        _drop_path(config, path)
    # Duplicate keys are an error in the configuration (tolerated in live objects).
    applied_fields = _without(to_field_set(config, root, allow_duplicates=False), ignored)
    applier = _Manager(manager, "Apply", api_version, subresource, applied_fields)
    previous = managers.get(applier.key)

    merged = _merge(merge_base, config, root, ())
    if merged is MISSING:
        merged = {}
    managers[applier.key] = applier
    if previous is not None and previous.fields:
        merged = _prune(merged, managers, previous.fields, root)
    _restore_reset_fields(merged, live, ignored)

    managers, _ = _update_managers(base, merged, root, managers, applier.key, force, ignored)
    applier = managers[applier.key]
    applier.fields = applier.fields - _STRIPPED
    if not applier.fields:
        managers.pop(applier.key, None)
    elif not _json_equal(base, merged) or live is None:
        applier.time = now
    elif previous is not None:
        applier.time = previous.time
    _set_managed_fields(merged, managers)
    result: dict[str, Any] = merged
    return result


def _prune(merged: dict[str, Any], managers: _Managers, last: FieldSet,
           root: Node | None) -> dict[str, Any]:
    """Remove what the applier applied last time and no longer applies, unless another
    manager (or the applier's new configuration) owns it."""
    managed: FieldSet = set()
    for m in managers.values():
        managed |= m.fields
    remove = ((_ensure_named_fields(last, root)
               & _ensure_named_fields(to_field_set(merged, root), root))
              - _ensure_named_fields(managed, root))
    if not remove:
        return merged
    pruned: dict[str, Any] = _remove_paths(merged, remove, root)
    return pruned


def _drop_path(obj: dict[str, Any], path: FieldPath) -> None:
    target: Any = obj
    for pe in path[:-1]:
        target = target.get(pe[1]) if isinstance(target, dict) else None
    if isinstance(target, dict):
        target.pop(path[-1][1], None)


def _allowed_conflicts(manager: str, live: dict[str, Any] | None,
                       root: Node | None) -> FieldSet | None:
    """upstream's lastAppliedManager: for `kubectl`, the fields client-side apply set whose
    live value still equals the last-applied configuration may be taken over."""
    if manager != "kubectl" or live is None:
        return None
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(LAST_APPLIED_ANNOTATION)
    if not text:
        return None
    try:
        last_applied = json.loads(text)
        if not isinstance(last_applied, dict):
            return None
        fields = to_field_set(last_applied, root)
        comparison = _compare(last_applied, _without_managed_fields(live), root)
    except (ValueError, _ShapeError):
        return None
    return fields - (comparison.modified | comparison.added | comparison.removed)


def _go_json(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _sync_last_applied(result: dict[str, Any], applied: dict[str, Any]) -> None:
    """upstream's lastAppliedUpdater: `kubectl` server-side apply keeps an existing
    last-applied annotation equal to the configuration it applied."""
    annotations = (result.get("metadata") or {}).get("annotations")
    if not isinstance(annotations, dict) or LAST_APPLIED_ANNOTATION not in annotations:
        return
    config = json_copy(applied)
    config_annotations = (config.get("metadata") or {}).get("annotations")
    if isinstance(config_annotations, dict):
        config_annotations.pop(LAST_APPLIED_ANNOTATION, None)
    annotations[LAST_APPLIED_ANNOTATION] = _go_json(config) + "\n"
    total = sum(len(k) + len(str(v)) for k, v in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        del annotations[LAST_APPLIED_ANNOTATION]

"""Strategic merge patch (`application/strategic-merge-patch+json`), applied the way
apimachinery's `strategicpatch.StrategicMergeMapPatch` applies it on the server.

The patch metadata comes from the served OpenAPI v2 schema (`ephemera.api.schema`): a list
whose property carries `x-kubernetes-patch-strategy: merge` is merged by its
`x-kubernetes-patch-merge-key` (or, for primitives, unioned); other lists are replaced; maps
merge; `null` deletes a key. Directives: `$patch: replace|delete` in maps, `$patch:
replace|delete` items in merged lists, `$setElementOrder/<list>`, `$retainKeys`,
`$deleteFromPrimitiveList/<list>`. Element order follows upstream exactly: `$setElementOrder`
first, then the order in the patch, then the order in the live list.

Deliberate deviations from upstream, all in inputs upstream mishandles: directives and nulls
inside values that are inserted fresh (a new key, a new list item, a replaced list) are
resolved rather than stored verbatim (`$patch: replace` keeps the map, `$patch: delete` drops
it); a field the schema does not know gets no patch metadata instead of an error (lists
replace, maps merge).

Errors are `StatusError`s with upstream's messages: lists of lists are 422, as upstream; every
other error the patch causes (a malformed directive, a missing merge key, an unknown `$patch`,
a `$setElementOrder` that contradicts the patch, ...) is 400 BadRequest, where upstream
answers the merge errors with a 500 (ephemera never answers a 500 to bad input). Only a patch
strategy the schema itself gets wrong is a 500.

This module also holds the small schema helpers (`field_node`, `items_node`, `extension`,
`resolve_node`, ...) that `managedfields` shares.
"""

from __future__ import annotations

import json
from typing import Any

from ephemera.api import schema
from ephemera.api.errors import StatusError
from ephemera.api.goformat import go_json
from ephemera.api.jsoncopy import json_copy

Node = dict[str, Any]

DIRECTIVE_MARKER = "$patch"
RETAIN_KEYS_DIRECTIVE = "$retainKeys"
DELETE_FROM_PRIMITIVE_LIST_PREFIX = "$deleteFromPrimitiveList"
SET_ELEMENT_ORDER_PREFIX = "$setElementOrder"

# mergepatch's sentinel errors, with the HTTP answer interpretStrategicMergePatchError gives.
ERR_BAD_JSON_DOC = "invalid JSON document"
ERR_NO_LIST_OF_LISTS = "lists of lists are not supported"
ERR_BAD_PATCH_FORMAT_FOR_PRIMITIVE_LIST = "invalid patch format of primitive list"
ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS = "invalid patch format of retainKeys"
ERR_BAD_PATCH_FORMAT_FOR_SET_ELEMENT_ORDER_LIST = "invalid patch format of setElementOrder list"

_MISSING = object()


# --- schema helpers (shared with managedfields) -------------------------------------------


def definition_node(definition: str) -> Node | None:
    """The schema node of a definition name, or None when the schema does not know it."""
    return schema.definitions().get(definition)


def resolve_node(node: Node) -> Node:
    """`schema.resolve`, tolerating a reference the schema does not hold."""
    try:
        return schema.resolve(node)
    except KeyError:
        return node


def extension(node: Node | None, name: str) -> Any:
    """An `x-kubernetes-*` extension of a property node, or of the definition it refers to."""
    if node is None:
        return None
    if name in node:
        return node[name]
    return resolve_node(node).get(name)


def field_node(parent: Node | None, key: str) -> Node | None:
    """The (unresolved) property node of `key` in the object node `parent`: a declared
    property, else the `additionalProperties` node of a map, else None (unknown)."""
    if parent is None:
        return None
    obj = resolve_node(parent)
    props = obj.get("properties")
    if isinstance(props, dict) and key in props:
        prop: Node = props[key]
        return prop
    extra = obj.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    return None


def is_declared_field(parent: Node | None, key: str) -> bool:
    """Whether `key` is a declared property (a struct field) of the object node `parent`."""
    if parent is None:
        return False
    props = resolve_node(parent).get("properties")
    return isinstance(props, dict) and key in props


def items_node(node: Node | None) -> Node | None:
    """The item node of an array property node."""
    if node is None:
        return None
    items = node.get("items")
    if items is None:
        items = resolve_node(node).get("items")
    return items if isinstance(items, dict) else None


# --- Go's names for upstream's messages (values print with `goformat.go_json`) --------------


def _go_type(value: Any) -> str:
    if value is None:
        return "<nil>"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    return "string"


# --- errors -----------------------------------------------------------------------------------


class _PatchError(Exception):
    """A patch that cannot be applied; `code` 400 (the patch is wrong), 422 (upstream's lists
    of lists) or 500 (the schema is wrong)."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def status_error(self) -> StatusError:
        if self.code == 400:
            return StatusError(400, "BadRequest", self.message)
        if self.code == 422:
            return unprocessable_entity(self.message)
        return StatusError(500, "", self.message)


def unprocessable_entity(server_message: str) -> StatusError:
    """apimachinery's `NewGenericServerResponse(422, ...)`, which the patch handler uses for a
    JSON patch that does not apply and for SMP's 422 errors."""
    return StatusError(
        422, "Invalid", "the server rejected our request due to an error in our request",
        {"causes": [{"reason": "UnexpectedServerResponse", "message": server_message}]})


def _no_merge_key(item: Any, merge_key: str) -> _PatchError:
    return _PatchError(f"map: {go_json(item)} does not contain declared merge key: {merge_key}")


def _bad_arg_type(expected: str, actual: Any) -> _PatchError:
    return _PatchError(f"expected a {expected}, but received a {_go_type(actual)}")


def _bad_patch_type(directive: Any, patch: Any) -> _PatchError:
    return _PatchError(f"unknown patch type: {go_json(directive)} in map: {go_json(patch)}")


# --- public entry point -----------------------------------------------------------------------


def strategic_merge_patch(live: dict[str, Any], patch: dict[str, Any],
                          definition: str) -> dict[str, Any]:
    """Apply a strategic merge patch to `live` (a JSON object of the kind named by
    `definition`, e.g. `io.k8s.api.core.v1.Pod`); returns a new dict, mutating neither."""
    original = json_copy(live)
    patch_copy = json_copy(patch)
    try:
        return _merge_map(original, patch_copy, definition_node(definition))
    except _PatchError as err:
        raise err.status_error() from None


# --- patch metadata ---------------------------------------------------------------------------


def _patch_meta(prop: Node | None) -> tuple[str, str]:
    """(patch strategy without retainKeys, merge key) of a property node."""
    raw = extension(prop, "x-kubernetes-patch-strategy") or ""
    strategies = [s for s in str(raw).split(",") if s]
    if len(strategies) > 2:
        raise _PatchError(f"unexpected patch strategy: {go_json(strategies)}", 500)
    others = [s for s in strategies if s != "retainKeys"]
    if len(strategies) == 2 and len(others) != 1:
        raise _PatchError(f"unexpected patch strategy: {go_json(strategies)}", 500)
    strategy = others[0] if others else ""
    merge_key = extension(prop, "x-kubernetes-patch-merge-key") or ""
    return strategy, str(merge_key)


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    return "scalar"


def _is_directive_key(key: str) -> bool:
    return (key in (DIRECTIVE_MARKER, RETAIN_KEYS_DIRECTIVE)
            or key.startswith(DELETE_FROM_PRIMITIVE_LIST_PREFIX + "/")
            or key.startswith(SET_ELEMENT_ORDER_PREFIX + "/"))


def _clean_new(value: Any, in_list: bool = False) -> tuple[Any, bool]:
    """A patch value that lands where nothing was: drop nulls inside maps (upstream's
    discardNullValuesFromPatch) and resolve directives (upstream's removeDirectives, except
    that a `$patch: replace` map outside a list is kept). Returns (value, keep)."""
    if isinstance(value, dict):
        if DIRECTIVE_MARKER in value and (in_list or value[DIRECTIVE_MARKER] != "replace"):
            return None, False
        out: dict[str, Any] = {}
        for key, child in value.items():
            if child is None or _is_directive_key(key):
                continue
            cleaned, keep = _clean_new(child)
            if keep:
                out[key] = cleaned
        return out, True
    if isinstance(value, list):
        items = []
        for child in value:
            cleaned, keep = _clean_new(child, in_list=True)
            if keep:
                items.append(cleaned)
        return items, True
    return value, True


def _set_fresh(original: dict[str, Any], key: str, value: Any) -> None:
    cleaned, keep = _clean_new(value)
    if keep:
        original[key] = cleaned
    else:
        original.pop(key, None)


def _extract_key(key: str, prefix: str) -> str:
    head, sep, rest = key.partition("/")
    if not sep or head != prefix:
        if prefix == DELETE_FROM_PRIMITIVE_LIST_PREFIX:
            raise _PatchError(ERR_BAD_PATCH_FORMAT_FOR_PRIMITIVE_LIST)
        raise _PatchError(ERR_BAD_PATCH_FORMAT_FOR_SET_ELEMENT_ORDER_LIST)
    return rest


# --- maps -------------------------------------------------------------------------------------


def _merge_map(original: dict[str, Any], patch: dict[str, Any],
               node: Node | None) -> dict[str, Any]:
    if DIRECTIVE_MARKER in patch:
        directive = patch[DIRECTIVE_MARKER]
        if directive == "replace":
            del patch[DIRECTIVE_MARKER]
            cleaned, _ = _clean_new(patch)
            result: dict[str, Any] = cleaned
            return result
        if directive == "delete":
            return {}
        raise _bad_patch_type(directive, patch)

    _apply_retain_keys(original, patch)
    _merge_set_element_order(original, patch, node)

    for raw_key, patch_value in list(patch.items()):
        key = raw_key
        is_delete_list = False
        if raw_key.startswith(DELETE_FROM_PRIMITIVE_LIST_PREFIX):
            key = _extract_key(raw_key, DELETE_FROM_PRIMITIVE_LIST_PREFIX)
            is_delete_list = True

        if patch_value is None:
            original.pop(key, None)
            continue
        if key not in original:
            if not is_delete_list:
                _set_fresh(original, key, patch_value)
            continue
        original_value = original[key]
        if _shape(original_value) != _shape(patch_value):
            if not is_delete_list:
                _set_fresh(original, key, patch_value)
            continue

        prop = field_node(node, key)
        if isinstance(original_value, dict):
            strategy, _ = _patch_meta(prop)
            if strategy == "replace":
                _set_fresh(original, key, patch_value)
            else:
                original[key] = _merge_map(original_value, patch_value, prop)
        elif isinstance(original_value, list):
            strategy, merge_key = _patch_meta(prop)
            original[key] = _merge_slice_handler(original_value, patch_value, prop, strategy,
                                                 merge_key, is_delete_list)
        else:
            original[key] = patch_value
    return original


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    if RETAIN_KEYS_DIRECTIVE not in patch:
        return
    retain = patch.pop(RETAIN_KEYS_DIRECTIVE)
    if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
        raise _PatchError(ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS)
    keep = set(retain)
    for key, value in patch.items():
        if (value is None or key.startswith(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
                or key.startswith(SET_ELEMENT_ORDER_PREFIX)):
            continue
        if key not in keep:
            raise _PatchError(ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS)
    for key in list(original):
        if key not in keep:
            del original[key]


def _merge_set_element_order(original: dict[str, Any], patch: dict[str, Any],
                             node: Node | None) -> None:
    for key in [k for k in patch if k.startswith(SET_ELEMENT_ORDER_PREFIX)]:
        order = patch.pop(key)
        if not isinstance(order, list):
            raise _bad_arg_type("[]interface {}", order)
        list_key = _extract_key(key, SET_ELEMENT_ORDER_PREFIX)
        found_original = list_key in original
        found_patch = list_key in patch
        original_list: list[Any] = []
        patch_list: list[Any] = []
        if found_original:
            if not isinstance(original[list_key], list):
                raise _bad_arg_type("[]interface {}", original[list_key])
            original_list = original[list_key]
        if found_patch:
            if not isinstance(patch[list_key], list):
                raise _bad_arg_type("[]interface {}", patch[list_key])
            patch_list = patch[list_key]
        prop = field_node(node, list_key)
        strategy, merge_key = _patch_meta(prop)
        _validate_patch_with_set_order_list(patch_list, order, merge_key)

        if found_original and not found_patch:
            merged = original_list
        elif found_patch and not found_original:
            merged, _ = _clean_new(patch_list)
        elif found_original and found_patch:
            merged = _merge_slice_handler(original_list, patch_list, prop, strategy, merge_key,
                                          False)
        else:
            continue

        if merge_key:
            patch_items, server_only = _partition_maps(merged, order, merge_key)
        else:
            patch_items, server_only = _partition_primitives(merged, order)
        kind = _element_kind(original_list, patch_list, allow_empty=True)
        if kind is None:
            original[list_key] = merged
        else:
            original[list_key] = _normalize_element_order(patch_items, server_only, order,
                                                          original_list, merge_key, kind)
        patch.pop(list_key, None)


def _validate_patch_with_set_order_list(patch_list: list[Any], order: list[Any],
                                        merge_key: str) -> None:
    if not order or not patch_list:
        return
    non_delete = patch_list
    if merge_key:
        non_delete, _ = _extract_to_delete_items(patch_list)
    patch_index = order_index = 0
    while patch_index < len(non_delete) and order_index < len(order):
        item = non_delete[patch_index]
        if isinstance(item, dict) and DIRECTIVE_MARKER in item:
            patch_index += 1
            continue
        if _merge_key_value_equal(item, order[order_index], merge_key):
            patch_index += 1
        order_index += 1
    if patch_index < len(non_delete) and order_index >= len(order):
        raise _PatchError(
            f"the order in patch list:\n{go_json(patch_list)}\n doesn't match "
            f"{SET_ELEMENT_ORDER_PREFIX} list:\n{go_json(order)}")


def _merge_key_value_equal(left: Any, right: Any, merge_key: str) -> bool:
    if not merge_key:
        return _same(left, right)
    if not isinstance(left, dict):
        raise _bad_arg_type("map[string]interface {}", left)
    if not isinstance(right, dict):
        raise _bad_arg_type("map[string]interface {}", right)
    if merge_key not in left:
        raise _no_merge_key(left, merge_key)
    if merge_key not in right:
        raise _no_merge_key(right, merge_key)
    return _same(left[merge_key], right[merge_key])


# --- lists ------------------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    """Go's `==` on decoded JSON scalars: the types must match too (1 is not true)."""
    return type(a) is type(b) and a == b


def _element_kind(*lists: list[Any], allow_empty: bool = False) -> str | None:
    """upstream's sliceElementType: "map" or a scalar type; errors on lists of lists and on
    mixed element types."""
    seen: str | None = None
    for items in lists:
        for item in items:
            if isinstance(item, list):
                raise _PatchError(ERR_NO_LIST_OF_LISTS, 422)
            current = "map" if isinstance(item, dict) else _go_type(item)
            if seen is None:
                seen = current
            elif seen != current:
                raise _PatchError("list element types are not identical: "
                                  + go_json(list(lists)))
    if seen is None and not allow_empty:
        raise _PatchError("no elements in any of the given slices")
    return seen


def _merge_slice_handler(original: list[Any], patch: list[Any], prop: Node | None,
                         strategy: str, merge_key: str, is_delete_list: bool) -> list[Any]:
    if strategy == "merge":
        return _merge_slice(original, patch, items_node(prop), merge_key, is_delete_list)
    if is_delete_list:
        return _delete_from_slice(original, patch)
    cleaned, _ = _clean_new(patch)
    result: list[Any] = cleaned
    return result


def _merge_slice(original: list[Any], patch: list[Any], elem_node: Node | None,
                 merge_key: str, is_delete_list: bool) -> list[Any]:
    if not original and not patch:
        return original
    kind = _element_kind(original, patch)
    assert kind is not None
    if kind != "map":
        if is_delete_list:
            return _delete_from_slice(original, patch)
        merged = _deduplicate(original + patch)
    else:
        if not merge_key:
            raise _PatchError("cannot merge lists without merge key for type map")
        original, patch = _merge_slice_with_special_elements(original, patch, merge_key)
        merged = _merge_slice_without_special_elements(original, patch, merge_key, elem_node)

    if merge_key:
        patch_items, server_only = _partition_maps(merged, patch, merge_key)
    else:
        patch_items, server_only = _partition_primitives(merged, patch)
    return _normalize_element_order(patch_items, server_only, patch, original, merge_key, kind)


def _delete_from_slice(current: list[Any], to_delete: list[Any]) -> list[Any]:
    return [v for v in current if not any(_same(v, d) for d in to_delete)]


def _deduplicate(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not any(_same(item, seen) for seen in out):
            out.append(item)
    return out


def _merge_slice_with_special_elements(original: list[Any], patch: list[Any],
                                       merge_key: str) -> tuple[list[Any], list[Any]]:
    without_special: list[Any] = []
    replace = False
    for item in patch:
        if DIRECTIVE_MARKER not in item:
            without_special.append(item)
            continue
        directive = item[DIRECTIVE_MARKER]
        if directive == "delete":
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
            original = [o for o in original
                        if not (isinstance(o, dict) and merge_key in o
                                and _same(o[merge_key], item[merge_key]))]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise _PatchError("merging lists cannot yet be specified in the patch")
        else:
            raise _bad_patch_type(directive, item)
    if replace:
        cleaned, _ = _clean_new(without_special)
        return cleaned, []
    return original, without_special


def _merge_slice_without_special_elements(original: list[Any], patch: list[Any],
                                          merge_key: str,
                                          elem_node: Node | None) -> list[Any]:
    out = list(original)
    for item in patch:
        if merge_key not in item:
            raise _no_merge_key(item, merge_key)
        index = _find_map_by_key(out, merge_key, item[merge_key])
        if index >= 0:
            out[index] = _merge_map(out[index], item, elem_node)
        else:
            cleaned, keep = _clean_new(item, in_list=True)
            if keep:
                out.append(cleaned)
    return out


def _find_map_by_key(items: list[Any], key: str, value: Any) -> int:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _PatchError(f"value for key {i} is not a map.")
        if key in item and _same(item[key], value):
            return i
    return -1


def _extract_to_delete_items(items: list[Any]) -> tuple[list[Any], list[Any]]:
    non_delete: list[Any] = []
    to_delete: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise _bad_arg_type("map[string]interface {}", item)
        if item.get(DIRECTIVE_MARKER) == "delete":
            to_delete.append(item)
        else:
            non_delete.append(item)
    return non_delete, to_delete


def _partition_primitives(items: list[Any], by: list[Any]) -> tuple[list[Any], list[Any]]:
    in_patch: list[Any] = []
    server_only: list[Any] = []
    for item in items:
        (in_patch if any(_same(item, b) for b in by) else server_only).append(item)
    return in_patch, server_only


def _partition_maps(items: list[Any], by: list[Any],
                    merge_key: str) -> tuple[list[Any], list[Any]]:
    in_patch: list[Any] = []
    server_only: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise _bad_arg_type("map[string]interface {}", item)
        if merge_key not in item:
            raise _no_merge_key(item, merge_key)
        found = any(isinstance(b, dict) and merge_key in b and _same(b[merge_key], item[merge_key])
                    for b in by)
        (in_patch if found else server_only).append(item)
    return in_patch, server_only


def _index(items: list[Any], value: Any, merge_key: str, kind: str) -> int:
    def key_of(item: Any) -> Any:
        if kind == "map":
            return item.get(merge_key) if isinstance(item, dict) else None
        return item

    wanted = key_of(value)
    for i, item in enumerate(items):
        if _same(key_of(item), wanted):
            return i
    return -1


def _normalize_element_order(patch_items: list[Any], server_only: list[Any],
                             patch_order: list[Any], server_order: list[Any],
                             merge_key: str, kind: str) -> list[Any]:
    patch_items = _normalize_slice_order(patch_items, patch_order, merge_key, kind)
    server_only = _normalize_slice_order(server_only, server_order, merge_key, kind)
    return _merge_sorted_slice(server_only, patch_items, server_order, merge_key, kind)


def _normalize_slice_order(to_sort: list[Any], order: list[Any], merge_key: str,
                           kind: str) -> list[Any]:
    to_delete: list[Any] = []
    if kind == "map":
        for item in [*to_sort, *order]:
            if not isinstance(item, dict):
                raise _bad_arg_type("map[string]interface {}", item)
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
        to_sort, to_delete = _extract_to_delete_items(to_sort)
    items = list(to_sort)

    def less(a: Any, b: Any) -> bool:
        ia = _index(order, a, merge_key, kind)
        if ia >= 0:
            ib = _index(order, b, merge_key, kind)
            if ib >= 0:
                return ia < ib
        return True

    # Go's sort.SliceStable is an insertion sort on short slices; with upstream's
    # not-a-strict-order `less`, mirroring it keeps the result identical.
    for i in range(1, len(items)):
        j = i
        while j > 0 and less(items[j], items[j - 1]):
            items[j], items[j - 1] = items[j - 1], items[j]
            j -= 1
    return items + to_delete


def _merge_sorted_slice(left: list[Any], right: list[Any], server_order: list[Any],
                        merge_key: str, kind: str) -> list[Any]:
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li = _index(server_order, left[i], merge_key, kind)
            ri = _index(server_order, right[j], merge_key, kind)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys, as used for list item identities."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)

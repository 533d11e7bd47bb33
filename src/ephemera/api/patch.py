"""PATCH bodies applied to a live object, with the Status errors the Kubernetes apiserver
answers for bad ones: JSON patch (RFC 6902, through the `jsonpatch` library), JSON merge
patch (RFC 7386) and strategic merge patch (`ephemera.api.strategicpatch`). Server-side
apply (`application/apply-patch+yaml`) lives in `ephemera.api.managedfields`.

Errors, as upstream's patch handler gives them:
- an undecodable body: 400 BadRequest (Go's JSON messages, approximated);
- a JSON patch with more than 10000 operations: 413;
- a JSON patch operation that does not apply (a failed `test`, a missing path): 422 Invalid
  `the server rejected our request due to an error in our request`, the cause carrying
  evanphx/json-patch's message (e.g. `testing value /spec/x failed: test failed`);
- a JSON patch whose result is not an object: 422 Invalid on the field `patch`;
- any other content type: 415.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonpatch
import jsonpointer

from ephemera.api import field
from ephemera.api.errors import StatusError, bad_request, invalid, unsupported_media_type
from ephemera.api.fieldvalidation import EXCEEDED_MAX_DEPTH, json_kind, too_deep
from ephemera.api.goformat import go_quote
from ephemera.api.jsoncopy import copy_decoded, json_copy
from ephemera.api.strategicpatch import strategic_merge_patch, unprocessable_entity

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = {JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH}

MAX_JSON_PATCH_OPERATIONS = 10000
_GO_MAP = "map[string]interface {}"
_JSON_PATCH_OPS = {"add", "remove", "replace", "move", "copy", "test"}


def apply_patch(content_type: str, live: dict[str, Any], patch_body: bytes,
                definition: str) -> dict[str, Any]:
    """Apply a JSON, merge or strategic merge patch body to `live`; returns a new dict."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == JSON_PATCH:
        ops = _decode(patch_body, "error decoding patch: ")
        if ops is None:
            ops = []
        if not isinstance(ops, list):
            raise bad_request("error decoding patch: json: cannot unmarshal "
                              f"{json_kind(ops)} into Go value of type []handlers.jsonPatchOp")
        return json_patch(live, ops)
    if media_type == MERGE_PATCH:
        patch = _decode(patch_body, "error decoding patch: ")
        if not isinstance(patch, dict):
            raise bad_request("error decoding patch: json: cannot unmarshal "
                              f"{json_kind(patch)} into Go value of type {_GO_MAP}")
        return merge_patch(live, patch)
    if media_type == STRATEGIC_MERGE_PATCH:
        patch = _decode(patch_body, "")
        if patch is None:
            patch = {}
        if not isinstance(patch, dict):
            raise bad_request(f"json: cannot unmarshal {json_kind(patch)} into Go value of type "
                              f"{_GO_MAP}")
        return strategic_merge_patch(live, patch, definition)
    raise unsupported_media_type()


# --- JSON patch -------------------------------------------------------------------------------


def json_patch(live: dict[str, Any], ops: list[Any]) -> dict[str, Any]:
    """Apply RFC 6902 operations in order; returns a new dict, `live` is untouched."""
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise StatusError(413, "RequestEntityTooLarge",
                          "Request entity too large: The allowed maximum operations in a JSON "
                          f"patch is {MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}")
    for op in ops:
        if not isinstance(op, dict):
            raise bad_request("error decoding patch: json: cannot unmarshal "
                              f"{json_kind(op)} into Go value of type handlers.jsonPatchOp")
    doc: Any = copy_decoded(live)
    for op in json_copy(ops):  # values must not be shared with the caller's operations
        doc = _apply_operation(doc, op)
    if not isinstance(doc, dict):
        text = json.dumps(doc, separators=(",", ":"))
        raise invalid("", "", [field.invalid(
            "patch", text,
            f"json: cannot unmarshal {json_kind(doc)} into Go value of type {_GO_MAP}")])
    return doc


def _apply_operation(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    path = op.get("path")
    if kind not in _JSON_PATCH_OPS:
        raise unprocessable_entity(f"Unexpected kind: {'' if kind is None else kind}")
    if not isinstance(path, str):
        raise unprocessable_entity(f"{kind} operation failed to decode path: missing value")
    if kind in ("add", "replace", "test") and "value" not in op:
        op = {**op, "value": None}  # evanphx/json-patch reads a missing value as null
    if kind in ("move", "copy") and not isinstance(op.get("from"), str):
        raise unprocessable_entity(f"{kind} operation failed to decode from: "
                                   "operation missing from field: missing value")
    try:
        result: Any = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
    except jsonpatch.JsonPatchTestFailed:
        raise unprocessable_entity(f"testing value {path} failed: test failed") from None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, KeyError,
            IndexError, TypeError):
        raise unprocessable_entity(_op_failure(kind, path, op.get("from"))) from None
    return result


def _op_failure(kind: str, path: str, source: Any) -> str:
    """evanphx/json-patch (v4)'s message for an operation whose path does not resolve."""
    last = path.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
    if kind == "add":
        return f'add operation does not apply: doc is missing path: "{path}": missing value'
    if kind == "remove":
        return (f'error in remove for path: "{path}": Unable to remove nonexistent key: '
                f"{last}: missing value")
    if kind == "replace":
        return f"replace operation does not apply: doc is missing key: {path}: missing value"
    if kind == "move":
        return f"move operation does not apply: doc is missing from path: {source}: missing value"
    if kind == "copy":
        return f'copy operation does not apply: doc is missing from path: "{source}": missing value'
    return f"testing value {path} failed: test failed"


# --- JSON merge patch -------------------------------------------------------------------------


def merge_patch(live: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386: objects merge recursively, `null` removes a key, anything else replaces."""
    result: dict[str, Any] = _merge_value(copy_decoded(live), patch)
    return result


def _merge_value(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return json_copy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge_value(target.get(key), value)
    return target


# --- decoding ---------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


def _decode(body: bytes, prefix: str) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request(f"{prefix}invalid character looking for beginning of value") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise bad_request(prefix + EXCEEDED_MAX_DEPTH) from None
    except json.JSONDecodeError as err:
        raise bad_request(prefix + go_json_error(text, err)) from None
    except ValueError as err:
        raise bad_request(prefix + str(err)) from None
    if too_deep(value, source=text):
        raise bad_request(prefix + EXCEEDED_MAX_DEPTH)
    return value


_DECODE_CONTEXT = [
    ("Expecting value", "looking for beginning of value"),
    ("Expecting property name enclosed in double quotes",
     "looking for beginning of object key string"),
    ("Expecting ':' delimiter", "after object key"),
    ("Extra data", "after top-level value"),
    ("Invalid control character", "in string literal"),
    ("Invalid \\escape", "in string escape code"),
]


def go_json_error(text: str, err: json.JSONDecodeError) -> str:
    """Go's encoding/json wording for the common syntax errors (`invalid character '}'
    looking for beginning of value`, `unexpected end of JSON input`): the one rule for
    every JSON body the apiserver reads."""
    if err.pos >= len(text.rstrip()) or "Unterminated string" in err.msg:
        return "unexpected end of JSON input"
    char = text[err.pos]
    if err.msg.startswith("Invalid \\escape") and err.pos + 1 < len(text):
        char = text[err.pos + 1]  # Go names the character after the backslash
    literal = _LITERALS.get(char)
    if err.msg.startswith("Expecting value") and literal is not None:
        for offset, expected in enumerate(literal):
            got = text[err.pos + offset] if err.pos + offset < len(text) else ""
            if not got:
                return "unexpected end of JSON input"
            if got != expected:
                return (f"invalid character {_quote_char(got)} in literal {literal} "
                        f"(expecting {_quote_char(expected)})")
    shown = _quote_char(char)
    if err.msg.startswith("Expecting ',' delimiter"):
        opener = _innermost_open(text[:err.pos])
        where = "after array element" if opener == "[" else "after object key:value pair"
        return f"invalid character {shown} {where}"
    for python_msg, go_context in _DECODE_CONTEXT:
        if err.msg.startswith(python_msg):
            return f"invalid character {shown} {go_context}"
    return f"invalid character {shown}: {err.msg}"


_LITERALS = {"n": "null", "t": "true", "f": "false"}


def _quote_char(char: str) -> str:
    """Go's `quoteChar`: `'x'`, `'\\''`, and a control character escaped as `%q` does."""
    if char == "'":
        return "'\\''"
    if char == '"':
        return "'\"'"
    return "'" + go_quote(char)[1:-1] + "'"


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _innermost_open(prefix: str) -> str:
    stack: list[str] = []
    for ch in _STRING.sub("", prefix):
        if ch in "[{":
            stack.append(ch)
        elif ch in "]}" and stack:
            stack.pop()
    return stack[-1] if stack else ""

"""Request bodies: read them (chunked or not, with or without a Content-Type) under a size
cap (413 beyond it), refuse an object body whose Content-Type names a format not read (415,
`check_object_content_type`), and decode JSON, YAML or Kubernetes protobuf by what the body
is (a JSON Content-Type on YAML bytes included, as kubectl's `--raw` and YAML-sending
clients need), with upstream's messages for a body that is not an object (`the object
provided is unrecognized ...`)."""

from __future__ import annotations

import json
from typing import Any

import yaml
from aiohttp import web

from ephemera.api import errors, fieldvalidation, protobuf
from ephemera.api.goformat import go_float, go_scalar
from ephemera.api.patch import go_json_error

DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024
# The body `read_body` read, kept on the request for the audit log's `requestObject`.
RAW_BODY: web.RequestKey[bytes] = web.RequestKey("raw-body", bytes)


# The formats an object's body is read in, as upstream's serializers list them in a 415 (a
# custom resource's: no protobuf).
OBJECT_MEDIA_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")


def check_object_content_type(request: web.Request, *, custom: bool = False) -> None:
    """415 UnsupportedMediaType for an object body whose Content-Type names a format the
    apiserver does not read (`text/plain`, a form), as upstream's input negotiation answers.
    A missing Content-Type reads the body as what it is (kubectl's `create --raw` sends none;
    `decode_object`); patches have their own types (`errors.unsupported_media_type`)."""
    media = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
    accepted = OBJECT_MEDIA_TYPES[:2] if custom else OBJECT_MEDIA_TYPES
    if media and media not in accepted:
        raise errors.StatusError(
            415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
            f"accepted media types include: {', '.join(accepted)}")


async def read_body(request: web.Request, limit: int = DEFAULT_MAX_BODY_BYTES) -> bytes:
    """The whole body, de-chunked (and kept as `request[RAW_BODY]`); 413
    RequestEntityTooLarge above `limit` bytes."""
    data = await _read(request, limit)
    request[RAW_BODY] = data
    return data


async def _read(request: web.Request, limit: int) -> bytes:
    length = request.content_length
    if length is not None and length > limit:
        raise errors.request_entity_too_large(limit)
    if not request.body_exists:
        return b""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = await request.content.readany()
        if not chunk:
            break
        total += len(chunk)
        if total > limit:
            raise errors.request_entity_too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


class _YamlLoader(yaml.SafeLoader):
    """YAML as sigs.k8s.io/yaml reads it: timestamps stay strings, and map keys become JSON
    keys as they are read (so `true` and `1`, equal as Python keys, stay two keys)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)  # `<<` merge keys, as SafeLoader does
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            # a key refused: its value built whole now, for the message
            value = self.construct_object(value_node, deep=deep or key is None)
            out[_json_key(key, value)] = value
        return out


_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def summarize(data: bytes, max_length: int = 30) -> str:
    """upstream's `summarizeData`, used in decode error messages."""
    if not data:
        return "<empty>"
    if data[:1] == b"{":
        text = data[:max_length].decode("utf-8", "replace")
        return text + " ..." if len(data) > max_length else text
    if len(data) > max_length:
        return data[:max_length].hex() + " ..."
    return data.hex()


class DecodeError(ValueError):
    """The body is neither JSON nor YAML (the message says why, Go-like)."""


def decode_document(data: bytes) -> Any:
    """JSON, or else YAML (one document); raises DecodeError."""
    if protobuf.is_protobuf(data):  # e.g. DeleteOptions from `kubectl drain`
        try:
            return protobuf.decode_object(data)
        except protobuf.ProtobufError as err:
            raise DecodeError(str(err)) from None
    stripped = data.lstrip()
    if not stripped:
        raise DecodeError("unexpected end of JSON input")
    if stripped[:1] in (b"{", b"["):
        try:
            value = json.loads(data)
        except RecursionError:
            raise DecodeError(f"json parse error: {fieldvalidation.EXCEEDED_MAX_DEPTH}") from None
        except (ValueError, UnicodeDecodeError) as err:
            json_error = err
        else:
            if fieldvalidation.too_deep(value, source=data):
                raise DecodeError(f"json parse error: {fieldvalidation.EXCEEDED_MAX_DEPTH}")
            return value
    else:
        json_error = None
    try:
        docs = [d for d in yaml.load_all(data, Loader=_YamlLoader) if d is not None]
        if any(fieldvalidation.too_deep(d) for d in docs):
            raise DecodeError(f"error converting YAML to JSON: "
                              f"{fieldvalidation.EXCEEDED_MAX_DEPTH}")
    except RecursionError:
        raise DecodeError(f"error converting YAML to JSON: {fieldvalidation.EXCEEDED_MAX_DEPTH}"
                          ) from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        if json_error is not None:
            raise DecodeError(_json_message(json_error)) from None
        raise DecodeError(f"error converting YAML to JSON: {yaml_error_text(err)}") from None
    if len(docs) != 1:
        if json_error is not None:
            raise DecodeError(_json_message(json_error))
        raise DecodeError("error converting YAML to JSON: expected exactly one document")
    return docs[0]


def _go_value(value: Any, nested: bool = False) -> str:
    """A YAML value as Go's `%+#v` shows it (`<nil>`, `"s"`, `1`, `1.5`, `true`,
    `[]interface {}{"a", 1}`, `map[interface {}]interface {}{"k":"v"}`; a nil inside a
    collection is `interface {}(nil)`; map keys sorted, as fmt sorts them)."""
    if value is None:
        return "interface {}(nil)" if nested else "<nil>"
    scalar = go_scalar(value)
    if scalar is not None:
        return scalar
    if isinstance(value, dict):
        items = sorted(f"{_go_value(k, True)}:{_go_value(v, True)}" for k, v in value.items())
        return "map[interface {}]interface {}{" + ", ".join(items) + "}"
    return "[]interface {}{" + ", ".join(_go_value(v, True) for v in value) + "}"


# What sigs.k8s.io/yaml writes for a float key that is no number in JSON.
_FLOAT_KEY_WORDS = {"+Inf": ".inf", "-Inf": "-.inf", "NaN": ".nan"}


def _json_key(key: Any, value: Any) -> str:
    """A map key as sigs.k8s.io/yaml writes it in JSON: strings kept, integers and booleans
    written out (`1`, `true`), floats as float32s are (`FormatFloat(k, 'g', -1, 32)`:
    `1.5`, `3.1415927`, `.inf`); a collection as a key is go-yaml's `invalid map key`, and a
    null key (`? x` in YAML, for instance) sigs.k8s.io/yaml's `unsupported map key`."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, str | int):
        return str(key)
    if isinstance(key, float):
        text = go_float(key, bits=32)
        return _FLOAT_KEY_WORDS.get(text, text)
    if isinstance(key, list | dict):
        raise DecodeError(f"error converting YAML to JSON: yaml: invalid map key: "
                          f"{_go_value(key)}")
    raise DecodeError(f"error converting YAML to JSON: unsupported map key of type: "
                      f"%!s(<nil>), key: {_go_value(key)}, value: {_go_value(value)}")


# PyYAML's words for a problem -> go-yaml's (what upstream's sigs.k8s.io/yaml reports).
_YAML_PROBLEMS = {
    "mapping values are not allowed here": "mapping values are not allowed in this context",
    "found character '\\t' that cannot start any token":
        "found character that cannot start any token",
    "expected <block end>, but found '<block mapping start>'": "did not find expected key",
    "expected <block end>, but found '<scalar>'": "did not find expected key",
    "expected <block end>, but found '<block sequence start>'": "did not find expected key",
}


def yaml_error_text(err: Exception) -> str:
    """A YAML parse error as go-yaml words it (`yaml: line 2: mapping values are not
    allowed in this context`), without PyYAML's `"<unicode string>"` marks."""
    if isinstance(err, UnicodeDecodeError):
        return "yaml: invalid leading UTF-8 octet"
    mark = getattr(err, "problem_mark", None)
    problem = str(getattr(err, "problem", "") or "") or str(err).splitlines()[0]
    problem = _YAML_PROBLEMS.get(problem, problem)
    if mark is not None:
        return f"yaml: line {mark.line + 1}: {problem}"
    return f"yaml: {problem}"


def _json_message(err: Exception) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"json parse error: {go_json_error(err.doc, err)}"
    if isinstance(err, UnicodeDecodeError):
        return "json parse error: invalid character in string literal"
    return f"json parse error: {err}"


def decode_object(data: bytes, kind: str) -> tuple[dict[str, Any], list[str]]:
    """A body that must be an object of `kind` (named in the error message): Kubernetes
    protobuf (`k8s\\0...`), JSON (with the paths of its duplicated fields) or YAML; 400 for
    anything else, 415 for a protobuf kind that is not understood."""
    if protobuf.is_protobuf(data):
        try:
            return protobuf.decode_object(data), []
        except protobuf.ProtobufError as err:
            raise errors.StatusError(415, "UnsupportedMediaType", str(err)) from None
    if data.lstrip()[:1] == b"{":
        try:
            obj, duplicates = fieldvalidation.loads_json(data)
        except ValueError as err:
            if str(err) == fieldvalidation.EXCEEDED_MAX_DEPTH:
                raise errors.bad_request(
                    f"the object provided is unrecognized (must be of type {kind}): "
                    f"couldn't get version/kind; json parse error: {err} "
                    f"({summarize(data)})") from None
            obj, duplicates = None, []
        if isinstance(obj, dict):
            return obj, duplicates
    try:
        obj = decode_document(data)
    except DecodeError as err:
        raise errors.bad_request(
            f"the object provided is unrecognized (must be of type {kind}): "
            f"couldn't get version/kind; {err} ({summarize(data)})") from None
    if not isinstance(obj, dict):
        raise errors.bad_request(
            f"the object provided is unrecognized (must be of type {kind}): "
            f"couldn't get version/kind; json parse error: json: cannot unmarshal "
            f"{fieldvalidation.json_kind(obj)} into Go value of type struct {{ APIVersion string "
            f'"json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }} '
            f"({summarize(data)})")
    return obj, []

"""Decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) into
the JSON form of the object.

kubectl's typed commands (`kubectl create namespace|configmap|secret|serviceaccount|quota`)
send their object as protobuf, with no fallback to JSON on a 415: the bytes `k8s\\0`, then a
`runtime.Unknown` envelope (its `typeMeta` and the `raw` message). Only the messages of the
kinds those commands create are described here, by their field numbers in upstream's
`generated.proto`; fields this table does not know are skipped, as protobuf does. Responses
stay JSON, which these clients accept.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

MAGIC = b"k8s\x00"

# A field: (JSON name, type, element type). Types: "string", "bytes", "bool", "int",
# a message name, "repeated" (of the element type), "map" (string keys, element values).
Field = tuple[str, str, str]

MESSAGES: dict[str, dict[int, Field]] = {
    "Unknown": {1: ("typeMeta", "TypeMeta", ""), 2: ("raw", "rawbytes", ""),
                3: ("contentEncoding", "string", ""), 4: ("contentType", "string", "")},
    "TypeMeta": {1: ("apiVersion", "string", ""), 2: ("kind", "string", "")},
    "ObjectMeta": {
        1: ("name", "string", ""), 2: ("generateName", "string", ""),
        3: ("namespace", "string", ""), 4: ("selfLink", "string", ""), 5: ("uid", "string", ""),
        6: ("resourceVersion", "string", ""), 7: ("generation", "int", ""),
        8: ("creationTimestamp", "Time", ""), 9: ("deletionTimestamp", "Time", ""),
        10: ("deletionGracePeriodSeconds", "int", ""), 11: ("labels", "map", "string"),
        12: ("annotations", "map", "string"),
        13: ("ownerReferences", "repeated", "OwnerReference"),
        14: ("finalizers", "repeated", "string"),
        17: ("managedFields", "repeated", "ManagedFieldsEntry"),
    },
    "OwnerReference": {1: ("kind", "string", ""), 3: ("name", "string", ""),
                       4: ("uid", "string", ""), 5: ("apiVersion", "string", ""),
                       6: ("controller", "bool", ""), 7: ("blockOwnerDeletion", "bool", "")},
    "ManagedFieldsEntry": {1: ("manager", "string", ""), 2: ("operation", "string", ""),
                           3: ("apiVersion", "string", ""), 4: ("time", "Time", ""),
                           6: ("fieldsType", "string", ""), 7: ("fieldsV1", "FieldsV1", ""),
                           8: ("subresource", "string", "")},
    "ObjectReference": {1: ("kind", "string", ""), 2: ("namespace", "string", ""),
                        3: ("name", "string", ""), 4: ("uid", "string", ""),
                        5: ("apiVersion", "string", ""), 6: ("resourceVersion", "string", ""),
                        7: ("fieldPath", "string", "")},
    "LocalObjectReference": {1: ("name", "string", "")},
    "ConfigMap": {1: ("metadata", "ObjectMeta", ""), 2: ("data", "map", "string"),
                  3: ("binaryData", "map", "bytes"), 4: ("immutable", "bool", "")},
    "Secret": {1: ("metadata", "ObjectMeta", ""), 2: ("data", "map", "bytes"),
               3: ("type", "string", ""), 4: ("stringData", "map", "string"),
               5: ("immutable", "bool", "")},
    "Namespace": {1: ("metadata", "ObjectMeta", ""), 2: ("spec", "NamespaceSpec", ""),
                  3: ("status", "NamespaceStatus", "")},
    "NamespaceSpec": {1: ("finalizers", "repeated", "string")},
    "NamespaceStatus": {1: ("phase", "string", "")},
    "ServiceAccount": {1: ("metadata", "ObjectMeta", ""),
                       2: ("secrets", "repeated", "ObjectReference"),
                       3: ("imagePullSecrets", "repeated", "LocalObjectReference"),
                       4: ("automountServiceAccountToken", "bool", "")},
    "ResourceQuota": {1: ("metadata", "ObjectMeta", ""), 2: ("spec", "ResourceQuotaSpec", ""),
                      3: ("status", "ResourceQuotaStatus", "")},
    "ResourceQuotaSpec": {1: ("hard", "map", "Quantity"), 2: ("scopes", "repeated", "string"),
                          3: ("scopeSelector", "ScopeSelector", "")},
    "ResourceQuotaStatus": {1: ("hard", "map", "Quantity"), 2: ("used", "map", "Quantity")},
    "ScopeSelector": {1: ("matchExpressions", "repeated", "ScopedResourceSelectorRequirement")},
    "ScopedResourceSelectorRequirement": {1: ("scopeName", "string", ""),
                                          2: ("operator", "string", ""),
                                          3: ("values", "repeated", "string")},
}

# The kinds whose protobuf bodies are understood (the message of each).
KINDS = {"ConfigMap", "Secret", "Namespace", "ServiceAccount", "ResourceQuota"}


class ProtobufError(ValueError):
    pass


def is_protobuf(data: bytes) -> bool:
    return data.startswith(MAGIC)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ProtobufError("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value): an int for varints and fixed, bytes otherwise."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated field")
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _scalar(kind: str, value: Any) -> Any:
    if kind == "string":
        return bytes(value).decode("utf-8")
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if kind == "rawbytes":
        return bytes(value)
    if kind == "bool":
        return bool(value)
    if kind == "int":
        return _signed(int(value))
    if kind == "Time":
        seconds = 0
        for number, _, v in _fields(bytes(value)):
            if number == 1:
                seconds = _signed(v)
        if seconds == 0:
            return None  # the zero Time: null, left out
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind == "Quantity":
        for number, _, v in _fields(bytes(value)):
            if number == 1:
                return bytes(v).decode()
        return "0"
    if kind == "FieldsV1":
        for number, _, v in _fields(bytes(value)):
            if number == 1:
                return json.loads(bytes(v))
        return {}
    return decode_message(kind, bytes(value))


def decode_message(name: str, data: bytes) -> dict[str, Any]:
    schema = MESSAGES[name]
    out: dict[str, Any] = {}
    for number, _, value in _fields(data):
        spec = schema.get(number)
        if spec is None:
            continue
        json_name, kind, element = spec
        if kind == "repeated":
            out.setdefault(json_name, []).append(_scalar(element, value))
        elif kind == "map":
            key, item = "", None
            for entry_number, _, entry_value in _fields(bytes(value)):
                if entry_number == 1:
                    key = bytes(entry_value).decode()
                elif entry_number == 2:
                    item = _scalar(element, entry_value)
            if item is None:
                item = "" if element in ("string", "bytes") else "0"
            out.setdefault(json_name, {})[key] = item
        else:
            item = _scalar(kind, value)
            # Go writes every non-pointer field; JSON leaves out their zero values.
            if item is None or item == "" or (kind == "int" and item == 0
                                               and json_name == "generation"):
                continue
            out[json_name] = item
    return out


def decode_object(data: bytes) -> dict[str, Any]:
    """The object of a `k8s\\0` protobuf body, with its `kind` and `apiVersion`; raises
    ProtobufError for a kind this table does not describe or malformed bytes."""
    try:
        envelope = decode_message("Unknown", data[len(MAGIC):])
        type_meta = envelope.get("typeMeta") or {}
        kind = type_meta.get("kind", "")
        if kind not in KINDS:
            raise ProtobufError(f"protobuf bodies of kind {kind!r} are not supported; send JSON")
        obj = decode_message(kind, envelope.get("raw", b""))
    except (UnicodeDecodeError, ValueError, IndexError) as err:
        if isinstance(err, ProtobufError):
            raise
        raise ProtobufError(f"malformed protobuf body: {err}") from None
    return {"apiVersion": type_meta.get("apiVersion", "v1"), "kind": kind, **obj}

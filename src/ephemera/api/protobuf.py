"""Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`), decoded to the
JSON object the same Go client would have sent as JSON.

kubectl's typed-client commands (`create configmap|secret|namespace|serviceaccount|quota|role|
rolebinding|clusterrole|clusterrolebinding|token|...`, `auth can-i`, the pod deletions of
`drain`) send protobuf whatever the server serves, and do not fall back to JSON on a 415.

A body is the 4 bytes `k8s\\0` and a `runtime.Unknown` envelope: `typeMeta` (apiVersion,
kind), `raw` (the object's message), `contentEncoding`, `contentType`. The message is read
with the table in data/protobuf.json (see scripts/gen_protobuf_table.py: field numbers, types
and Go struct facts of upstream's generated.proto, per message) and rendered as Go's JSON
encoder renders the decoded struct: JSON field names, embedded structs inlined, a zero value
left out where the Go field is `omitempty` and not a pointer, a set pointer kept even when
zero, int64 as numbers, `bytes` as base64, `Time` and `MicroTime` as RFC 3339 (`null` for the
zero time), `Duration` as Go writes it, `Quantity` as its string, `IntOrString` as a number or
a string, `FieldsV1` and `RawExtension` as the JSON they carry. Unknown fields are skipped, as
protobuf does.

The KEP fields (`containers[].dynamicVolumePolicy`, `status.volumeStatuses`, ...) have no
upstream field numbers: kubectl's compiled types cannot carry them, so they are never in a
protobuf body; clients that set them send JSON.

Public API: `MAGIC`, `CONTENT_TYPE`, `ProtobufError`, `is_protobuf(data, content_type=None)`,
`decode_object(data) -> dict`, `decode_message(message_name, data) -> Any`,
`message_for(api_version, kind) -> str | None`.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

META_VERSION = "meta.k8s.io/v1"
MAX_DEPTH = 100  # nesting of messages (RawExtension can nest whole objects)

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_WIRE_TYPES = {"bool": _VARINT, "int32": _VARINT, "int64": _VARINT, "uint32": _VARINT,
               "uint64": _VARINT, "double": _FIXED64, "float": _FIXED32, "string": _LENGTH,
               "bytes": _LENGTH, "message": _LENGTH}
_ZERO_SCALARS: dict[str, Any] = {"bool": False, "int32": 0, "int64": 0, "uint32": 0,
                                 "uint64": 0, "double": 0.0, "float": 0.0, "string": ""}
# time.Time{} as Unix seconds: Go's zero time, which its JSON writes as null.
_GO_ZERO_TIME = -62135596800
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ProtobufError(ValueError):
    """A body that is not a protobuf object this table can read (the message says why)."""


@dataclass(frozen=True, slots=True)
class Field:
    number: int
    json: str
    kind: str  # a scalar kind, or "message"
    message: str = ""
    repeated: bool = False
    map_key: str = ""  # set for map fields (kind/message then describe the values)
    inline: bool = False
    omitempty: bool = False
    pointer: bool = False
    nilable: bool = False  # a Go slice or map ([]byte, Verbs): absent is nil (null)


@dataclass(frozen=True, slots=True)
class Message:
    name: str
    fields: tuple[Field, ...]
    by_number: dict[int, Field]
    special: str = ""


@dataclass(frozen=True, slots=True)
class Table:
    messages: dict[str, Message]
    kinds: dict[str, str]


@cache
def table() -> Table:
    """The decoding table (data/protobuf.json), loaded once."""
    raw = json.loads(resources.files("ephemera.api").joinpath("data/protobuf.json").read_text())
    messages: dict[str, Message] = {}
    for name, entry in raw["messages"].items():
        fields = tuple(
            Field(number=f["number"], json=f["json"], kind=f["kind"],
                  message=f.get("message", ""), repeated=f.get("repeated", False),
                  map_key=f.get("map", ""), inline=f.get("inline", False),
                  omitempty=f.get("omitempty", False), pointer=f.get("pointer", False),
                  nilable=f.get("nilable", False))
            for f in entry.get("fields", []))
        messages[name] = Message(name, fields, {f.number: f for f in fields},
                                 entry.get("special", ""))
    return Table(messages, dict(raw["kinds"]))


def is_protobuf(data: bytes, content_type: str | None = None) -> bool:
    """Whether a body is Kubernetes protobuf: its magic prefix, or its declared media type."""
    if data.startswith(MAGIC):
        return True
    if content_type:
        return content_type.split(";")[0].strip().lower() == CONTENT_TYPE
    return False


def message_for(api_version: str, kind: str) -> str | None:
    """The message of a kind. meta/v1 kinds (DeleteOptions, Status, ...) are registered in
    every group version, so they are found under any apiVersion."""
    kinds = table().kinds
    return kinds.get(f"{api_version}/{kind}") or kinds.get(f"{META_VERSION}/{kind}")


def decode_object(data: bytes) -> dict[str, Any]:
    """A whole body (`k8s\\0` + runtime.Unknown) as the JSON object, `kind` and `apiVersion`
    first; raises ProtobufError."""
    return _Decoder().envelope(data)


def decode_message(message: str, data: bytes) -> Any:
    """One message's bytes as JSON (a dict, or a string/number/list for special types)."""
    if message not in table().messages:
        raise ProtobufError(f"no protobuf message {message!r} in the table")
    return _Decoder().message(message, data)


# --- wire format ---------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("unexpected EOF")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtobufError("integer overflow")


def _wire(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value): an int for varint and fixed fields, else bytes."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("illegal tag 0")
        value: int | bytes
        if wire_type == _VARINT:
            value, pos = _varint(data, pos)
        elif wire_type == _FIXED64:
            if pos + 8 > end:
                raise ProtobufError("unexpected EOF")
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire_type == _LENGTH:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise ProtobufError("unexpected EOF")
            value, pos = data[pos:pos + length], pos + length
        elif wire_type == _FIXED32:
            if pos + 4 > end:
                raise ProtobufError("unexpected EOF")
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire_type} for field {number}")
        yield number, wire_type, value


def _signed64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _scalar(kind: str, value: int | bytes) -> Any:
    if kind == "string":
        assert isinstance(value, bytes)
        return value.decode("utf-8", "replace")  # Go's JSON writes U+FFFD for bad UTF-8
    if kind == "bytes":
        assert isinstance(value, bytes)
        return base64.b64encode(value).decode("ascii")
    assert isinstance(value, int)
    if kind == "bool":
        return value != 0
    if kind in ("int32", "int64"):
        return _signed64(value)
    if kind == "uint32":
        return value & 0xFFFFFFFF
    if kind == "uint64":
        return value
    if kind == "double":
        return struct.unpack("<d", value.to_bytes(8, "little"))[0]
    if kind == "float":
        return struct.unpack("<f", value.to_bytes(4, "little"))[0]
    raise ProtobufError(f"unknown scalar kind {kind!r}")


def _unpacked(field: Field, wire_type: int, value: int | bytes) -> list[int | bytes]:
    """A repeated numeric field may arrive packed (one length-delimited run of values)."""
    expected = _WIRE_TYPES[field.kind]
    if wire_type == expected:
        return [value]
    if wire_type == _LENGTH and expected != _LENGTH:
        assert isinstance(value, bytes)
        values: list[int | bytes] = []
        pos = 0
        while pos < len(value):
            if expected == _VARINT:
                item, pos = _varint(value, pos)
            else:
                size = 8 if expected == _FIXED64 else 4
                if pos + size > len(value):
                    raise ProtobufError("unexpected EOF")
                item, pos = int.from_bytes(value[pos:pos + size], "little"), pos + size
            values.append(item)
        return values
    raise ProtobufError(f"field {field.json} (number {field.number}): wire type {wire_type}, "
                        f"want {expected}")


# --- special types -------------------------------------------------------------------------


def _go_duration(nanoseconds: int) -> str:
    """time.Duration.String()."""
    if nanoseconds == 0:
        return "0s"
    sign = "-" if nanoseconds < 0 else ""
    n = abs(nanoseconds)
    if n < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if n >= size or unit == "ns":
                return sign + _trim_fraction(n, size) + unit
    seconds, fraction = divmod(n, 1_000_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = _trim_fraction(seconds * 1_000_000_000 + fraction, 1_000_000_000) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _trim_fraction(value: int, unit: int) -> str:
    whole, fraction = divmod(value, unit)
    if not fraction:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{str(fraction).rjust(digits, '0').rstrip('0')}"


def _timestamp(data: bytes) -> tuple[int, int]:
    seconds = nanos = 0
    for number, wire_type, value in _wire(data):
        if wire_type != _VARINT:
            continue
        assert isinstance(value, int)
        if number == 1:
            seconds = _signed64(value)
        elif number == 2:
            nanos = _signed64(value)
    return seconds, nanos


def _format_time(seconds: int, micros: int | None) -> str | None:
    if seconds == _GO_ZERO_TIME and not micros:
        return None
    try:
        moment = _EPOCH + timedelta(seconds=seconds, microseconds=micros or 0)
    except OverflowError:
        raise ProtobufError(f"time out of range: {seconds}s") from None
    if micros is None:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- messages ------------------------------------------------------------------------------


class _Decoder:
    def __init__(self) -> None:
        self.table = table()
        self.depth = 0

    def envelope(self, data: bytes) -> dict[str, Any]:
        if not data.startswith(MAGIC):
            raise ProtobufError("not a Kubernetes protobuf body (no k8s\\0 prefix)")
        api_version = kind = content_encoding = ""
        raw = b""
        for number, wire_type, value in _wire(data[len(MAGIC):]):
            if wire_type != _LENGTH:
                continue
            assert isinstance(value, bytes)
            if number == 1:
                for type_number, type_wire, type_value in _wire(value):
                    if type_wire == _LENGTH and type_number in (1, 2):
                        assert isinstance(type_value, bytes)
                        text = type_value.decode("utf-8", "replace")
                        if type_number == 1:
                            api_version = text
                        else:
                            kind = text
            elif number == 2:
                raw = value
            elif number == 3:
                content_encoding = value.decode("utf-8", "replace")
        if content_encoding:
            raise ProtobufError(f"unsupported content encoding {content_encoding!r}")
        if not kind:
            raise ProtobufError("Object 'Kind' is missing in protobuf body")
        message = message_for(api_version, kind)
        if message is None:
            raise ProtobufError(f'no kind "{kind}" is registered for version "{api_version}"')
        obj = self.message(message, raw)
        head: dict[str, Any] = {"kind": kind}
        if api_version:
            head["apiVersion"] = api_version
        return {**head, **obj}

    def message(self, name: str, data: bytes) -> Any:
        message = self.table.messages[name]
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise ProtobufError("protobuf body nested too deeply")
            if message.special:
                return self._special(message, data)
            return self._fields(message, data)
        except (UnicodeDecodeError, struct.error) as err:
            raise ProtobufError(f"{name}: {err}") from None
        finally:
            self.depth -= 1

    def _fields(self, message: Message, data: bytes) -> dict[str, Any]:
        seen: dict[int, list[tuple[int, int | bytes]]] = {}
        for number, wire_type, value in _wire(data):
            if number in message.by_number:
                seen.setdefault(number, []).append((wire_type, value))
        out: dict[str, Any] = {}
        for field in message.fields:
            occurrences = seen.get(field.number)
            if field.inline:
                inner = self.message(field.message, self._joined(field, occurrences or []))
                out.update(inner)
                continue
            present, value = self._value(field, occurrences)
            if self._left_out(field, present, value):
                continue
            out[field.json] = value
        return out

    def _joined(self, field: Field, occurrences: list[tuple[int, int | bytes]]) -> bytes:
        """A message field seen more than once is merged, as protobuf does: concatenated."""
        parts = []
        for wire_type, value in occurrences:
            if wire_type != _LENGTH:
                raise ProtobufError(f"field {field.json} (number {field.number}): wire type "
                                    f"{wire_type}, want {_LENGTH}")
            assert isinstance(value, bytes)
            parts.append(value)
        return b"".join(parts)

    def _value(self, field: Field,
               occurrences: list[tuple[int, int | bytes]] | None) -> tuple[bool, Any]:
        """(present on the wire, the JSON value) of one field."""
        if not occurrences:
            return False, self._zero(field)
        if field.map_key:
            entries: dict[str, Any] = {}
            for _wire_type, entry in occurrences:
                key, item = self._map_entry(field, self._bytes(field, entry))
                entries[key] = item
            return True, entries
        if field.repeated:
            items = []
            for wire_type, value in occurrences:
                for item in _unpacked(field, wire_type, value):
                    items.append(self._single(field, _WIRE_TYPES[field.kind], item))
            return True, items
        if field.kind == "message":
            return True, self.message(field.message, self._joined(field, occurrences))
        wire_type, value = occurrences[-1]  # the last one wins, as in protobuf
        return True, self._single(field, wire_type, value)

    def _single(self, field: Field, wire_type: int, value: int | bytes) -> Any:
        expected = _WIRE_TYPES[field.kind]
        if wire_type != expected:
            raise ProtobufError(f"field {field.json} (number {field.number}): wire type "
                                f"{wire_type}, want {expected}")
        if field.kind == "message":
            assert isinstance(value, bytes)
            return self.message(field.message, value)
        return _scalar(field.kind, value)

    @staticmethod
    def _bytes(field: Field, value: int | bytes) -> bytes:
        if not isinstance(value, bytes):
            raise ProtobufError(f"field {field.json} (number {field.number}): wire type 0, "
                                f"want {_LENGTH}")
        return value

    def _map_entry(self, field: Field, data: bytes) -> tuple[str, Any]:
        key: Any = _ZERO_SCALARS.get(field.map_key, "")
        item: Any = None
        have_item = False
        for number, wire_type, value in _wire(data):
            if number == 1:
                key = _scalar(field.map_key, value)
            elif number == 2:
                item = self._single(field, wire_type, value)
                have_item = True
        if not have_item:
            item = self._zero_value(field)
        return str(key), item

    def _zero(self, field: Field) -> Any:
        """What Go's JSON encoder writes for a field the body did not carry."""
        if field.pointer or field.repeated or field.map_key or field.nilable:
            return None
        return self._zero_value(field)

    def _zero_value(self, field: Field) -> Any:
        if field.kind == "bytes":
            return ""
        if field.kind == "message":
            return self.message(field.message, b"")
        return _ZERO_SCALARS[field.kind]

    @staticmethod
    def _left_out(field: Field, present: bool, value: Any) -> bool:
        """encoding/json's omitempty: nil pointers, slices and maps, empty strings, slices
        and maps, false and 0 are left out; structs never are; a set pointer always stays."""
        if not field.omitempty:
            return False
        if field.repeated or field.map_key or field.nilable:
            return value is None or len(value) == 0
        if field.pointer:
            return not present  # a set pointer stays, even to a zero value (or null time)
        if field.kind == "message":
            return False
        return value in ("", False, 0)  # 0.0 == 0

    def _special(self, message: Message, data: bytes) -> Any:
        special = message.special
        if special == "Time":
            if not data:
                return None
            seconds, _nanos = _timestamp(data)
            return _format_time(seconds, None)
        if special == "MicroTime":
            if not data:
                return None
            seconds, nanos = _timestamp(data)
            return _format_time(seconds, nanos // 1000)
        if special == "Duration":
            nanoseconds = 0
            for number, wire_type, value in _wire(data):
                if number == 1 and wire_type == _VARINT:
                    assert isinstance(value, int)
                    nanoseconds = _signed64(value)
            return _go_duration(nanoseconds)
        if special == "Quantity":
            text = "0"
            for number, wire_type, value in _wire(data):
                if number == 1 and wire_type == _LENGTH:
                    assert isinstance(value, bytes)
                    text = value.decode("utf-8", "replace") or "0"
            return text
        if special == "IntOrString":
            type_, int_val, str_val = 0, 0, ""
            for number, wire_type, value in _wire(data):
                if number == 1 and wire_type == _VARINT:
                    assert isinstance(value, int)
                    type_ = _signed64(value)
                elif number == 2 and wire_type == _VARINT:
                    assert isinstance(value, int)
                    int_val = _signed64(value)
                elif number == 3 and wire_type == _LENGTH:
                    assert isinstance(value, bytes)
                    str_val = value.decode("utf-8", "replace")
            return str_val if type_ == 1 else int_val
        if special in ("FieldsV1", "RawExtension"):
            raw: bytes | None = None
            for number, wire_type, value in _wire(data):
                if number == 1 and wire_type == _LENGTH:
                    assert isinstance(value, bytes)
                    raw = value
            return self._embedded(raw)
        if special == "Unknown":
            return self.envelope(MAGIC + data)
        if special == "list":
            items = self._fields(message, data).get("items")
            return items
        raise ProtobufError(f"{message.name}: unknown special type {special!r}")

    def _embedded(self, raw: bytes | None) -> Any:
        """The bytes of a FieldsV1 or RawExtension: JSON, or a nested protobuf object."""
        if not raw:
            return None
        if raw.startswith(MAGIC):
            return self.envelope(raw)
        try:
            return json.loads(raw)
        except ValueError as err:
            raise ProtobufError(f"embedded object is neither JSON nor protobuf: {err}") from None

"""Derive src/ephemera/api/data/protobuf.json, the table that ephemera.api.protobuf decodes
Kubernetes protobuf request bodies with, from the kubectl binaries on this machine.

A Go program built with k8s.io/api carries two sets of facts this needs, and kubectl is the
client whose protobuf bodies the apiserver must read:

- the upstream `generated.proto` files, compiled: gogo/protobuf registers each one as a gzipped
  FileDescriptorProto (message names, field numbers, field names, scalar types, message types,
  repeated and map fields);
- the Go structs those messages are generated from, in the runtime type data: for every field,
  its struct tag (`json:"name,omitempty"`, `json:",inline"`, `protobuf:"bytes,1,opt,name=x"`)
  and its Go kind (pointer, slice, map, struct or scalar). These decide what Go's JSON encoder
  would write for a decoded object: the JSON name, whether a zero value is left out
  (`omitempty` on a non-pointer), whether a set pointer to a zero value is kept, and which
  embedded structs are inlined.

Both are joined on the field number. Only the packages in PACKAGES are kept (whole files). The
table is the union over the binaries given (field numbers are never reused upstream; a clash
stops the script). Messages whose Go type has its own JSON form (Time, MicroTime, Duration,
Quantity, IntOrString, FieldsV1, RawExtension, Unknown) are marked `special`; messages that are
Go slices on the JSON side (`ExtraValue`: `repeated string items = 1`) are marked `list`.

The KEP fields (`Container.dynamicVolumePolicy`, `PodStatus.volumeStatuses`,
`ContainerStatus.volumeMounts` additions) have no upstream field numbers; kubectl's compiled
types do not know them, so they never appear in a protobuf body and are not in the table.

Run: `python scripts/gen_protobuf_table.py [BINARY ...]` (default: the kubectl that
`kubectl` on PATH resolves to and, beside it, `kubectl.1.33`). Needs the `protobuf` package
(installed with aetcd).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "src" / "ephemera" / "api" / "data" / "protobuf.json"

# Go package path -> the apiVersion its kinds are sent with.
PACKAGES = {
    "k8s.io/apimachinery/pkg/apis/meta/v1": "meta.k8s.io/v1",
    "k8s.io/apimachinery/pkg/runtime": "",
    "k8s.io/apimachinery/pkg/util/intstr": "",
    "k8s.io/apimachinery/pkg/api/resource": "",
    "k8s.io/api/core/v1": "v1",
    "k8s.io/api/authorization/v1": "authorization.k8s.io/v1",
    "k8s.io/api/authentication/v1": "authentication.k8s.io/v1",
    "k8s.io/api/rbac/v1": "rbac.authorization.k8s.io/v1",
    "k8s.io/api/coordination/v1": "coordination.k8s.io/v1",
    "k8s.io/api/policy/v1": "policy/v1",
    "k8s.io/api/events/v1": "events.k8s.io/v1",
    "k8s.io/api/apps/v1": "apps/v1",
    "k8s.io/api/autoscaling/v1": "autoscaling/v1",
    "k8s.io/api/batch/v1": "batch/v1",
    "k8s.io/api/networking/v1": "networking.k8s.io/v1",
    "k8s.io/api/storage/v1": "storage.k8s.io/v1",
}

META = "k8s.io.apimachinery.pkg.apis.meta.v1."
# Messages whose Go type marshals to JSON by its own rules (see ephemera.api.protobuf).
SPECIAL = {
    META + "Time": "Time",
    META + "MicroTime": "MicroTime",
    META + "Duration": "Duration",
    META + "FieldsV1": "FieldsV1",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "Quantity",
    "k8s.io.apimachinery.pkg.api.resource.QuantityValue": "Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "RawExtension",
    "k8s.io.apimachinery.pkg.runtime.Unknown": "Unknown",
}

# Kinds registered in every group version whose Go struct has no TypeMeta.
UNTYPED_KINDS = {META + "WatchEvent"}

SCALARS = {
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING: "string",
    descriptor_pb2.FieldDescriptorProto.TYPE_BYTES: "bytes",
    descriptor_pb2.FieldDescriptorProto.TYPE_BOOL: "bool",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32: "int32",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64: "int64",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT32: "uint32",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT64: "uint64",
    descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE: "double",
    descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT: "float",
}

# Go reflect kinds (internal/abi.Kind) the table cares about.
GO_KINDS = {1: "bool", 2: "int", 5: "int32", 6: "int64", 7: "uint", 10: "uint32",
            11: "uint64", 13: "float32", 14: "float64", 17: "array", 20: "interface",
            21: "map", 22: "ptr", 23: "slice", 24: "string", 25: "struct"}


# --- the ELF image -------------------------------------------------------------------------


class Image:
    """A statically linked Go ELF executable: its bytes and virtual-address mapping."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = path.read_bytes()
        if self.data[:4] != b"\x7fELF" or self.data[4] != 2:
            raise SystemExit(f"{path}: not a 64-bit ELF executable")
        shoff, = struct.unpack_from("<Q", self.data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", self.data, 0x3A)
        headers = [struct.unpack_from("<IIQQQQ", self.data, shoff + i * shentsize)
                   for i in range(shnum)]
        names_at = headers[shstrndx][4]
        self.sections: dict[str, tuple[int, int, int]] = {}
        for name_off, _type, _flags, addr, offset, size in headers:
            end = self.data.index(b"\0", names_at + name_off)
            name = self.data[names_at + name_off:end].decode()
            self.sections[name] = (addr, offset, size)
        self._mapped = [(a, o, s) for n, (a, o, s) in self.sections.items()
                        if a and n not in (".bss", ".noptrbss", ".tbss")]

    def offset(self, vaddr: int) -> int | None:
        for addr, off, size in self._mapped:
            if addr <= vaddr < addr + size:
                return off + vaddr - addr
        return None

    def varint(self, pos: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            byte = self.data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return result, pos

    def go_name(self, vaddr: int) -> tuple[str, str, int] | None:
        """A runtime name (internal/abi.Name): its text, tag and flag bits."""
        pos = self.offset(vaddr)
        if pos is None:
            return None
        flags = self.data[pos]
        length, pos = self.varint(pos + 1)
        text = self.data[pos:pos + length].decode("utf-8", "replace")
        tag = ""
        if flags & 2:
            tag_length, tag_pos = self.varint(pos + length)
            tag = self.data[tag_pos:tag_pos + tag_length].decode("utf-8", "replace")
        return text, tag, flags


def file_descriptors(image: Image) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The gzipped FileDescriptorProtos gogo/protobuf registers, by file name."""
    found: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for match in re.finditer(rb"\x1f\x8b\x08\x00", image.data):
        try:
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(
                image.data[match.start():match.start() + 4_000_000])
            descriptor = descriptor_pb2.FileDescriptorProto.FromString(raw)
        except Exception:  # not a gzip stream, or not a descriptor
            continue
        if descriptor.name.endswith("generated.proto") and descriptor.message_type:
            found.setdefault(descriptor.name, descriptor)
    return found


@dataclass
class GoField:
    name: str
    tag: str
    kind: str
    embedded: bool

    def tag_value(self, key: str) -> str | None:
        match = re.search(rf'(?:^| ){key}:"([^"]*)"', self.tag)
        return match.group(1) if match else None


def go_structs(image: Image) -> dict[str, list[GoField]]:
    """Struct types with protobuf-tagged fields, by `package/path.TypeName` (internal/abi
    StructType: a 48-byte Type, PkgPath, then the Fields slice; an UncommonType after it
    carries the package path)."""
    rodata = image.sections[".rodata"][0]
    data = image.data
    structs: dict[str, list[GoField]] = {}
    for section in (".rodata", ".data.rel.ro", ".noptrdata", ".data"):
        if section not in image.sections:
            continue
        _addr, start, size = image.sections[section]
        for pos in range(start, start + size - 96, 8):
            if data[pos + 23] & 0x1F != 25:  # Kind_ == Struct
                continue
            fields_at, count, capacity = struct.unpack_from("<QQQ", data, pos + 56)
            if not 0 < count < 400 or count != capacity:
                continue
            fields_pos = image.offset(fields_at)
            if fields_pos is None:
                continue
            fields: list[GoField] = []
            for i in range(count):
                name_at, type_at, _offset = struct.unpack_from("<QQQ", data, fields_pos + 24 * i)
                name = image.go_name(name_at)
                type_pos = image.offset(type_at)
                if name is None or type_pos is None:
                    fields = []
                    break
                kind = GO_KINDS.get(data[type_pos + 23] & 0x1F, "other")
                fields.append(GoField(name[0], name[1], kind, bool(name[2] & 8)))
            if not any('protobuf:"' in f.tag for f in fields):
                continue
            tflag = data[pos + 20]
            if not tflag & 1:  # no UncommonType: not a named type
                continue
            name_off, = struct.unpack_from("<i", data, pos + 40)
            pkg_off, = struct.unpack_from("<i", data, pos + 80)
            type_name = image.go_name(rodata + name_off)
            package = image.go_name(rodata + pkg_off)
            if type_name is None or package is None:
                continue
            short = type_name[0].lstrip("*").rsplit(".", 1)[-1]
            structs.setdefault(f"{package[0]}.{short}", fields)
    return structs


def client_version(path: Path) -> str:
    try:
        out = subprocess.run([str(path), "version", "--client", "-o", "json"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
        return str(json.loads(out)["clientVersion"]["gitVersion"])
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return "unknown"


# --- the table -----------------------------------------------------------------------------


@dataclass
class Table:
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, entry: dict[str, Any]) -> None:
        have = self.messages.get(name)
        if have is None:
            self.messages[name] = entry
            return
        by_number = {f["number"]: f for f in have.get("fields", [])}
        for new in entry.get("fields", []):
            old = by_number.get(new["number"])
            if old is None:
                have.setdefault("fields", []).append(new)
            elif old != new:
                raise SystemExit(f"{name} field {new['number']}: {old} != {new}")


def package_of(proto_package: str) -> str:
    return proto_package.replace(".", "/").replace("k8s/io/", "k8s.io/", 1)


def message_entry(full_name: str, message: descriptor_pb2.DescriptorProto,
                  go_fields: list[GoField] | None) -> dict[str, Any]:
    if full_name in SPECIAL:
        return {"special": SPECIAL[full_name]}
    maps = {nested.name: nested for nested in message.nested_type
            if nested.options.map_entry}
    by_number: dict[int, GoField] = {}
    for go_field in go_fields or []:
        tag = go_field.tag_value("protobuf")
        if tag:
            by_number[int(tag.split(",")[1])] = go_field
    if go_fields is None:
        only = list(message.field)
        if not only:  # an empty struct (meta/v1 Patch)
            return {"fields": []}
        # No Go struct: a named slice type (`type ExtraValue []string`).
        if len(only) == 1 and only[0].name == "items" and only[0].label == 3:
            return {"special": "list", "fields": [field_entry(only[0], maps, None)]}
        raise SystemExit(f"{full_name}: no Go struct for this message")
    fields = []
    for proto_field in message.field:
        matched = by_number.get(proto_field.number)
        if matched is None:
            raise SystemExit(f"{full_name}.{proto_field.name}: no Go field with this number")
        fields.append(field_entry(proto_field, maps, matched))
    # Go struct order (the order Go's JSON encoder writes fields in).
    order = {number: i for i, number in enumerate(by_number)}
    fields.sort(key=lambda f: order.get(f["number"], 1 << 30))
    return {"fields": fields}


def field_entry(proto_field: descriptor_pb2.FieldDescriptorProto,
                maps: dict[str, descriptor_pb2.DescriptorProto],
                go_field: GoField | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"number": proto_field.number, "json": proto_field.name}
    value = proto_field
    map_entry = None
    if proto_field.type == proto_field.TYPE_MESSAGE:
        map_entry = maps.get(proto_field.type_name.rsplit(".", 1)[-1])
    if map_entry is not None:
        key, value = map_entry.field[0], map_entry.field[1]
        entry["map"] = SCALARS[key.type]
    if value.type == value.TYPE_MESSAGE:
        entry["kind"] = "message"
        entry["message"] = value.type_name.lstrip(".")
    else:
        entry["kind"] = SCALARS[value.type]
    if map_entry is None and proto_field.label == proto_field.LABEL_REPEATED:
        entry["repeated"] = True
    if go_field is not None:
        json_tag = go_field.tag_value("json") or ""
        json_name, _, options = json_tag.partition(",")
        if "inline" in options.split(",") or (go_field.embedded and not json_name):
            entry["inline"] = True
        elif json_name and json_name != "-":
            entry["json"] = json_name
        if "omitempty" in options.split(","):
            entry["omitempty"] = True
        if go_field.kind == "ptr":
            entry["pointer"] = True
        if go_field.kind in ("slice", "map") and "repeated" not in entry and "map" not in entry:
            entry["nilable"] = True  # []byte, or a named slice type: absent is nil
    return entry


def build(binaries: list[Path]) -> dict[str, Any]:
    table = Table()
    sources = []
    for path in binaries:
        image = Image(path)
        descriptors = file_descriptors(image)
        structs = go_structs(image)
        sources.append(f"{path.name} {client_version(path)}: {len(descriptors)} generated.proto "
                       f"files, {len(structs)} Go structs")
        for descriptor in descriptors.values():
            package = package_of(descriptor.package)
            if package not in PACKAGES:
                continue
            for message in descriptor.message_type:
                full_name = f"{descriptor.package}.{message.name}"
                go_fields = structs.get(f"{package}.{message.name}")
                table.add(full_name, message_entry(full_name, message, go_fields))
                api_version = PACKAGES[package]
                if api_version and go_fields and (
                        any(f.name == "TypeMeta" and f.embedded for f in go_fields)
                        or full_name in UNTYPED_KINDS):
                    table.kinds[f"{api_version}/{message.name}"] = full_name
    missing = {f.get("message") for m in table.messages.values() for f in m.get("fields", [])
               if f.get("message") and f["message"] not in table.messages}
    if missing:
        raise SystemExit(f"messages referred to but not in the table: {sorted(missing)}")
    return {
        "comment": "Generated by scripts/gen_protobuf_table.py from the generated.proto "
                   "descriptors and Go struct tags compiled into kubectl. Do not edit.",
        "sources": sources,
        "kinds": dict(sorted(table.kinds.items())),
        "messages": dict(sorted(table.messages.items())),
    }


def default_binaries() -> list[Path]:
    found = shutil.which("kubectl")
    if not found:
        raise SystemExit("kubectl not found on PATH; name the binaries to read")
    builtin = Path(os.path.realpath(found))
    newer = builtin.with_name("kubectl.1.33")
    return [builtin, newer] if newer.exists() else [builtin]


def main(argv: list[str]) -> None:
    binaries = [Path(a) for a in argv] or default_binaries()
    document = build(binaries)
    # One line per kind and per message: small, and diffs show what changed.
    lines = ["{", f'"comment": {json.dumps(document["comment"])},',
             f'"sources": {json.dumps(document["sources"])},', '"kinds": {']
    lines.append(",\n".join(f"{json.dumps(k)}: {json.dumps(v)}"
                             for k, v in document["kinds"].items()))
    lines.append('},\n"messages": {')
    lines.append(",\n".join(f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}"
                             for k, v in document["messages"].items()))
    lines.append("}}")
    text = "\n".join(lines) + "\n"
    if json.loads(text) != document:
        raise SystemExit("the table does not read back as written")
    fd, tmp = tempfile.mkstemp(dir=TARGET.parent, prefix=".protobuf.", suffix=".json")
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, TARGET)
    print(f"wrote {TARGET.relative_to(ROOT)}: {len(document['messages'])} messages, "
          f"{len(document['kinds'])} kinds ({len(gzip.compress(text.encode()))} bytes gzipped)")


if __name__ == "__main__":
    main(sys.argv[1:])

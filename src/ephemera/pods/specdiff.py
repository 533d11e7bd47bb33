"""The diff a rejected pod update shows, shaped as upstream's: `ValidatePodUpdate` appends
`cmp.Diff(oldPod.Spec, mungedPodSpec)` (go-cmp) to `pod updates may not change fields other
than ...`.

Both specs are walked together in Go's field order (`core.PodSpec`, `core.Container`,
`core.Volume` ...), whatever order their JSON keys came in, so only what really changed is
marked: `-` lines are the old spec, `+` lines the new, and unchanged fields around a change
are shown (two on each side, as go-cmp's context) or folded into `... // N identical
fields`. Nested structs and lists are opened down to the changed leaf, and a run of one-line
fields has its values aligned, as go-cmp prints them.

Where it differs from go-cmp (ephemera's choices): only the fields present in either JSON
object are counted (go-cmp also counts the Go zero values JSON leaves out); a field absent
on one side prints as Go's zero value (`""`, `false`, else `nil`); lists of different
lengths are compared by their common head and tail, not by go-cmp's edit script; unchanged
nested values print on one line without their Go type (`{Name: "v", MountPath: "/v"}`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ephemera.api.goformat import go_quote, go_scalar

__all__ = ["spec_diff"]

CONTEXT = 2  # go-cmp's numContextRecords

# Go field order of the internal types, by JSON name (what is not listed sorts after these).
_ORDER: dict[str, tuple[str, ...]] = {
    "core.PodSpec": (
        "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
        "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector",
        "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "nodeName",
        "hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "securityContext",
        "imagePullSecrets", "hostname", "subdomain", "setHostnameAsFQDN", "affinity",
        "schedulerName", "tolerations", "hostAliases", "priorityClassName", "priority",
        "preemptionPolicy", "dnsConfig", "readinessGates", "runtimeClassName", "overhead",
        "enableServiceLinks", "topologySpreadConstraints", "os", "schedulingGates",
        "resourceClaims", "resources", "hostUsers", "hostnameOverride", "schedulingGroup"),
    "core.Container": (
        "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env",
        "resources", "resizePolicy", "restartPolicy", "restartPolicyRules", "volumeMounts",
        "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
        "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy",
        "securityContext", "stdin", "stdinOnce", "tty", "dynamicVolumePolicy"),
    "core.Volume": ("name", "VolumeSource"),
    "core.VolumeSource": (
        "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo",
        "secret", "nfs", "iscsi", "glusterfs", "persistentVolumeClaim", "rbd", "quobyte",
        "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc", "azureFile",
        "configMap", "vsphereVolume", "azureDisk", "photonPersistentDisk", "projected",
        "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image"),
    "core.VolumeMount": ("name", "readOnly", "recursiveReadOnly", "mountPath", "subPath",
                         "mountPropagation", "subPathExpr"),
    "core.EmptyDirVolumeSource": ("medium", "sizeLimit"),
    "core.ConfigMapVolumeSource": ("name", "items", "defaultMode", "optional"),
    "core.SecretVolumeSource": ("secretName", "items", "defaultMode", "optional"),
    "core.ProjectedVolumeSource": ("sources", "defaultMode"),
    "core.ImageVolumeSource": ("reference", "pullPolicy"),
    "core.ResourceRequirements": ("limits", "requests", "claims"),
    "core.EnvVar": ("name", "value", "valueFrom"),
    "core.ContainerPort": ("name", "hostPort", "containerPort", "protocol", "hostIP"),
}
# The Go type of a field's value, by (struct type, JSON name); "[]T" for a slice of T, "&T"
# for a pointer to a struct, "map" for a map.
_FIELD_TYPES: dict[tuple[str, str], str] = {
    ("core.PodSpec", "volumes"): "[]core.Volume",
    ("core.PodSpec", "initContainers"): "[]core.Container",
    ("core.PodSpec", "containers"): "[]core.Container",
    ("core.PodSpec", "nodeSelector"): "map[string]string",
    ("core.PodSpec", "resources"): "&core.ResourceRequirements",
    ("core.Volume", "VolumeSource"): "core.VolumeSource",
    ("core.VolumeSource", "emptyDir"): "&core.EmptyDirVolumeSource",
    ("core.VolumeSource", "configMap"): "&core.ConfigMapVolumeSource",
    ("core.VolumeSource", "secret"): "&core.SecretVolumeSource",
    ("core.VolumeSource", "projected"): "&core.ProjectedVolumeSource",
    ("core.VolumeSource", "image"): "&core.ImageVolumeSource",
    ("core.Container", "volumeMounts"): "[]core.VolumeMount",
    ("core.Container", "env"): "[]core.EnvVar",
    ("core.Container", "ports"): "[]core.ContainerPort",
    ("core.Container", "resources"): "core.ResourceRequirements",
    ("core.Container", "command"): "[]string",
    ("core.Container", "args"): "[]string",
    ("core.ResourceRequirements", "limits"): "core.ResourceList",
    ("core.ResourceRequirements", "requests"): "core.ResourceList",
}
_GO_NAMES = {"dnsPolicy": "DNSPolicy", "dnsConfig": "DNSConfig", "os": "OS",
             "hostPID": "HostPID", "hostIPC": "HostIPC", "hostIP": "HostIP",
             "serviceAccount": "DeprecatedServiceAccount", "tty": "TTY",
             "setHostnameAsFQDN": "SetHostnameAsFQDN", "fc": "FC", "csi": "CSI",
             "nfs": "NFS", "iscsi": "ISCSI", "rbd": "RBD", "cephfs": "CephFS",
             "scaleIO": "ScaleIO", "storageos": "StorageOS", "downwardAPI": "DownwardAPI",
             "gcePersistentDisk": "GCEPersistentDisk",
             "awsElasticBlockStore": "AWSElasticBlockStore"}
# Volume sources sit inline in a Volume's JSON and under `VolumeSource` in Go.
_VOLUME_SOURCE = "VolumeSource"


def _go_name(key: str) -> str:
    return _GO_NAMES.get(key, key[:1].upper() + key[1:])


def _struct_view(type_name: str, value: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON object as the Go struct has it: a Volume's source fields nested."""
    if type_name != "core.Volume":
        return dict(value)
    out: dict[str, Any] = {k: v for k, v in value.items() if k == "name"}
    source = {k: v for k, v in value.items() if k != "name"}
    out[_VOLUME_SOURCE] = source
    return out


def _element_type(type_name: str) -> str:
    return type_name[2:] if type_name.startswith("[]") else ""


def _struct_type(type_name: str) -> str:
    return type_name.lstrip("&")


def _ordered_keys(type_name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    order = _ORDER.get(_struct_type(type_name), ())
    known = [k for k in order if k in old or k in new]
    rest = sorted((set(old) | set(new)) - set(known))
    return known + rest


def _zero(other: Any) -> str:
    """What Go prints for a field JSON leaves out: `""` for a string, `false` for a bool,
    `nil` otherwise (the API's optional numbers, structs, lists and maps are pointers,
    slices and maps)."""
    if isinstance(other, str):
        return '""'
    if isinstance(other, bool):
        return "false"
    return "nil"


def _inline(value: Any, type_name: str = "", top: bool = False) -> str:
    """A value on one line, go-cmp style: the Go type shown only on the `top` value of a
    diff line."""
    if value is None:
        return "nil"
    scalar = go_scalar(value)
    if scalar is not None:
        return scalar
    prefix = type_name if top and type_name else ""
    if isinstance(value, Mapping):
        if type_name.startswith("map") or type_name == "core.ResourceList":
            items = ", ".join(f"{go_quote(str(k))}: {_inline(value[k])}" for k in sorted(value))
            return f"{prefix}{{{items}}}"
        struct = _struct_type(type_name)
        view = _struct_view(struct, value)
        fields = ", ".join(
            f"{_go_name(k)}: {_inline(view[k], _FIELD_TYPES.get((struct, k), ''))}"
            for k in _ordered_keys(struct, view, {}))
        # Without its type, a pointer to a struct still shows its `&` (`EmptyDir: &{}`).
        pointer = "&" if not prefix and type_name.startswith("&") else ""
        return f"{prefix or pointer}{{{fields}}}"
    if isinstance(value, Sequence):
        element = _element_type(type_name)
        return f"{prefix}{{" + ", ".join(_inline(v, element) for v in value) + "}"
    return go_quote(str(value))


@dataclass
class _Record:
    """One field or element of a struct, map or list being printed."""

    key: str  # "Name" for a struct field, "" for a list element
    lines: list[tuple[str, str]]  # (mark, text): mark is " ", "-" or "+"; text sans indent
    same: bool

    @property
    def opens(self) -> bool:
        """A changed struct, map or list printed field by field below its key."""
        return not self.same and self.lines == [(" ", "")]


def _value_records(key: str, old: Any, new: Any, type_name: str, absent_old: bool,
                   absent_new: bool) -> _Record:
    if not absent_old and not absent_new and old == new:
        return _Record(key, [(" ", _inline(new, type_name))], True)
    # Both structs (even empty ones) or both non-empty lists: opened, so that only the
    # changed fields inside are marked.
    nested = not absent_old and not absent_new and (
        (isinstance(old, Mapping) and isinstance(new, Mapping))
        or (isinstance(old, list) and isinstance(new, list) and bool(old) and bool(new)))
    if nested:
        return _Record(key, [(" ", "")], False)  # opened by the caller
    lines: list[tuple[str, str]] = []
    lines.append(("-", _zero(new) if absent_old else _inline(old, type_name, top=True)))
    lines.append(("+", _zero(old) if absent_new else _inline(new, type_name, top=True)))
    return _Record(key, lines, False)


class _Printer:
    def __init__(self) -> None:
        self.out: list[str] = []

    def emit(self, mark: str, depth: int, text: str) -> None:
        self.out.append(f"{mark} {chr(9) * depth}{text}")

    def compare(self, key: str, old: Any, new: Any, type_name: str, depth: int,
                suffix: str = ",") -> None:
        """Open a changed struct, map or list at `depth`, labelled `key` ("" for a list
        element), and print its records."""
        label = f"{key}: " if key else ""
        opening = type_name if key or depth == 0 else ""
        if opening.startswith("&") and not key:
            opening = ""
        self.emit(" ", depth, f"{label}{opening}{{")
        if isinstance(old, Mapping):
            self._struct(old, new, type_name, depth + 1)
        else:
            self._list(old, new, _element_type(type_name), depth + 1)
        self.emit(" ", depth, "}" + suffix)

    def _struct(self, old: Mapping[str, Any], new: Mapping[str, Any], type_name: str,
                depth: int) -> None:
        struct = _struct_type(type_name)
        is_map = type_name.startswith("map") or type_name == "core.ResourceList"
        old_view, new_view = (dict(old), dict(new)) if is_map else \
            (_struct_view(struct, old), _struct_view(struct, new))
        keys = sorted(set(old_view) | set(new_view)) if is_map else \
            _ordered_keys(struct, old_view, new_view)
        records: list[tuple[_Record, Any, Any, str]] = []
        for k in keys:
            field_type = "" if is_map else _FIELD_TYPES.get((struct, k), "")
            if struct == "core.Volume" and k == _VOLUME_SOURCE:
                field_type = "core.VolumeSource"
            label = go_quote(k) if is_map else _go_name(k)
            record = _value_records(label, old_view.get(k), new_view.get(k), field_type,
                                    k not in old_view, k not in new_view)
            records.append((record, old_view.get(k), new_view.get(k), field_type))
        self._print_records(records, depth, "entries" if is_map else "fields")

    def _list(self, old: list[Any], new: list[Any], element_type: str, depth: int) -> None:
        records: list[tuple[_Record, Any, Any, str]] = []
        head = 0
        while head < min(len(old), len(new)) and (old[head] == new[head] or
                                                   len(old) == len(new)):
            records.append((_value_records("", old[head], new[head], element_type, False,
                                           False), old[head], new[head], element_type))
            head += 1
        tail: list[tuple[_Record, Any, Any, str]] = []
        o_end, n_end = len(old), len(new)
        while o_end > head and n_end > head and old[o_end - 1] == new[n_end - 1]:
            o_end, n_end = o_end - 1, n_end - 1
            tail.insert(0, (_Record("", [(" ", _inline(new[n_end], element_type))], True),
                            old[o_end], new[n_end], element_type))
        for value in old[head:o_end]:
            records.append((_Record("", [("-", _inline(value, element_type))], False),
                            value, None, element_type))
        for value in new[head:n_end]:
            records.append((_Record("", [("+", _inline(value, element_type))], False),
                            None, value, element_type))
        self._print_records(records + tail, depth, "elements")

    def _print_records(self, records: list[tuple[_Record, Any, Any, str]], depth: int,
                       noun: str) -> None:
        shown = _with_context([r for r, _, _, _ in records])
        width = _aligned_widths([r for r, _, _, _ in records], shown)
        pending = 0
        for i, (record, old, new, type_name) in enumerate(records):
            if not shown[i]:
                pending += 1
                continue
            if pending:
                self.emit(" ", depth, _ellipsis(pending, noun))
                pending = 0
            if record.opens:
                self.compare(record.key, old, new, type_name, depth)
                continue
            label = f"{record.key}:".ljust(width.get(i, 0) + 1) + " " if record.key else ""
            for mark, text in record.lines:
                self.emit(mark, depth, f"{label}{text},")
        if pending:
            self.emit(" ", depth, _ellipsis(pending, noun))


def _ellipsis(count: int, noun: str) -> str:
    """go-cmp's folded run: `... // 3 identical fields`, `... // 1 identical element`."""
    singular = {"fields": "field", "elements": "element", "entries": "entry"}[noun]
    return f"... // {count} identical {noun if count > 1 else singular}"


def _aligned_widths(records: list[_Record], shown: list[bool]) -> dict[int, int]:
    """The key width of each one-line record shown: the longest key of its run of
    consecutive one-line records, so their values line up as go-cmp lines them up."""
    width: dict[int, int] = {}
    run: list[int] = []

    def close() -> None:
        longest = max((len(records[i].key) for i in run), default=0)
        width.update({i: longest for i in run})
        run.clear()

    for i, record in enumerate(records):
        if shown[i] and record.key and not record.opens:
            run.append(i)
        else:
            close()
    close()
    return width


def _with_context(records: list[_Record]) -> list[bool]:
    """Which records go-cmp prints: every changed one, up to `CONTEXT` identical ones on
    each side of a change (none before the first group or after the last), and a lone
    identical record rather than an ellipsis for one."""
    shown = [not r.same for r in records]
    groups: list[list[int]] = []
    for i, r in enumerate(records):
        if r.same:
            if groups and groups[-1] and records[groups[-1][-1]].same and \
                    groups[-1][-1] == i - 1:
                groups[-1].append(i)
            else:
                groups.append([i])
    for group in groups:
        first, last = group[0] == 0, group[-1] == len(records) - 1
        low = 0 if first else min(CONTEXT, len(group))
        high = 0 if last else min(CONTEXT, len(group) - low)
        if len(group) - (low + high) == 1:
            high += 1
        for i in group[:low]:
            shown[i] = True
        for i in group[len(group) - high:]:
            shown[i] = True
    return shown


def spec_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """go-cmp's `cmp.Diff(oldSpec, newSpec)` shape for two pod specs (JSON), ending in a
    newline."""
    printer = _Printer()
    printer.compare("", old, new, "core.PodSpec", 0, suffix="")
    return "\n".join(printer.out) + "\n"

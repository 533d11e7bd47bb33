"""The `downwardAPI` volume plugin (`kubernetes.io/downward-api`) and the downward API item
collection the projected plugin shares.

Each item becomes one file at `item.path` with mode `item.mode` or `defaultMode` (0644):

- `fieldRef.fieldPath`: `metadata.name`, `metadata.namespace`, `metadata.uid`,
  `metadata.labels`, `metadata.annotations` (upstream's `FormatMap`: sorted `key="value"`
  lines, the value quoted as Go's `%q`, no trailing newline), and the subscripted
  `metadata.labels['k']` / `metadata.annotations['k']` (the bare value).
- `resourceFieldRef` (`containerName`, `resource`, `divisor`): `limits.cpu`,
  `limits.memory`, `limits.ephemeral-storage`, `requests.*` of the same, and
  `limits.hugepages-*`/`requests.hugepages-*`; the value is ceil(quantity / divisor)
  (divisor 1 when unset or zero). A container without a limit gets the pod-level limit when
  one is set (KEP-2837), else the node's allocatable (upstream's
  `MergeContainerResourceLimits`).

Errors from several items are aggregated as upstream's `utilerrors.NewAggregate`. The files
live on a tmpfs (upstream wraps downwardAPI in a memory emptyDir). Resynced by the manager
whenever the pod object changes and periodically, so label and annotation changes reach the
files.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from ephemera.api.goformat import go_quote
from ephemera.api.quantity import Quantity, QuantityError, quantity_from_json
from ephemera.kubelet.volumes.atomicwriter import FileProjection
from ephemera.kubelet.volumes.base import (
    VolumeHost,
    VolumePlugin,
    VolumeSetupError,
    aggregate_errors,
)
from ephemera.kubelet.volumes.emptydir import write_memory_backed_volume

__all__ = [
    "DEFAULT_MODE",
    "DownwardAPIPlugin",
    "collect_downward_api",
    "extract_field_path",
    "extract_resource_value",
    "format_map",
]

DEFAULT_MODE = 0o644
_SUBSCRIPTED = re.compile(r"^(.*)\['(.*)'\]$")
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_MERGED_LIMITS = ("cpu", "memory", "ephemeral-storage")


def _mode(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def format_map(values: Mapping[str, Any]) -> str:
    """Upstream's `fieldpath.FormatMap`."""
    return "\n".join(f"{key}={go_quote(str(values[key]))}" for key in sorted(values))


def extract_field_path(pod: Mapping[str, Any], field_path: str) -> str:
    """Upstream's `fieldpath.ExtractFieldPathAsString` for a pod."""
    meta = pod.get("metadata") or {}
    match = _SUBSCRIPTED.match(field_path)
    if match:
        path, subscript = match.group(1), match.group(2)
        if path in ("metadata.annotations", "metadata.labels"):
            if len(subscript) > 316 or not _QUALIFIED_NAME.match(subscript.lower()):
                raise VolumeSetupError(f"invalid key subscript in {field_path}")
            source = meta.get("annotations" if path == "metadata.annotations" else "labels")
            return str((source or {}).get(subscript, ""))
        raise VolumeSetupError(f'fieldPath "{field_path}" does not support subscript')
    if field_path == "metadata.annotations":
        return format_map(meta.get("annotations") or {})
    if field_path == "metadata.labels":
        return format_map(meta.get("labels") or {})
    if field_path == "metadata.name":
        return str(meta.get("name") or "")
    if field_path == "metadata.namespace":
        return str(meta.get("namespace") or "")
    if field_path == "metadata.uid":
        return str(meta.get("uid") or "")
    raise VolumeSetupError(f"unsupported fieldPath: {field_path}")


def _find_container(pod: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        if container.get("name") == name:
            return container
    raise VolumeSetupError(f"container {name} not found")


def _quantity(value: Any) -> Quantity | None:
    if value is None:
        return None
    try:
        return quantity_from_json(value)
    except (QuantityError, TypeError, ValueError):
        return None


def _node_allocatable(host: VolumeHost) -> dict[str, Quantity]:
    cpu_millis = getattr(host, "node_allocatable_cpu_millis", None)
    if not isinstance(cpu_millis, int):
        cpu_millis = (os.cpu_count() or 1) * 1000
    result = {
        "cpu": Quantity.from_milli(cpu_millis),
        "memory": Quantity.from_int(int(host.node_allocatable_memory)),
    }
    storage = getattr(host, "node_allocatable_ephemeral_storage", None)
    if isinstance(storage, int):
        result["ephemeral-storage"] = Quantity.from_int(storage)
    return result


def extract_resource_value(
    pod: Mapping[str, Any], ref: Mapping[str, Any], host: VolumeHost
) -> str:
    """Upstream's `ExtractResourceValueByContainerNameAndNodeAllocatable`."""
    container = _find_container(pod, str(ref.get("containerName") or ""))
    resource = str(ref.get("resource") or "")
    divisor = _quantity(ref.get("divisor"))
    if divisor is None or divisor.is_zero():
        divisor = Quantity.from_int(1)
    kind, _, name = resource.partition(".")
    supported = name in _MERGED_LIMITS or name.startswith("hugepages-")
    if kind not in ("limits", "requests") or not supported:
        raise VolumeSetupError(f"Unsupported container resource : {resource}")
    resources = container.get("resources") or {}
    value = _quantity((resources.get(kind) or {}).get(name))
    if kind == "limits" and name in _MERGED_LIMITS and (value is None or value.is_zero()):
        spec = pod.get("spec") or {}
        pod_level = _quantity(((spec.get("resources") or {}).get("limits") or {}).get(name))
        value = pod_level if pod_level is not None else _node_allocatable(host).get(name)
    amount = value.as_fraction() if value is not None else Fraction(0)
    return str(math.ceil(amount / divisor.as_fraction()))


def collect_downward_api(
    pod: Mapping[str, Any], items: Any, default_mode: int, host: VolumeHost
) -> tuple[dict[str, FileProjection], list[str]]:
    """The payload of a list of downward API items, and the error messages of the items that
    failed."""
    payload: dict[str, FileProjection] = {}
    errors: list[str] = []
    for item in items or []:
        path = str(item.get("path") or "")
        mode = _mode(item.get("mode"), default_mode)
        try:
            if item.get("fieldRef") is not None:
                text = extract_field_path(pod, str(item["fieldRef"].get("fieldPath") or ""))
            elif item.get("resourceFieldRef") is not None:
                text = extract_resource_value(pod, item["resourceFieldRef"], host)
            else:
                continue
        except VolumeSetupError as exc:
            errors.append(str(exc))
            continue
        payload[path] = FileProjection(text.encode(), mode)
    return payload, errors


class DownwardAPIPlugin(VolumePlugin):
    name = "kubernetes.io/downward-api"
    source_key = "downwardAPI"
    needs_resync = True

    async def setup(
        self,
        pod: Mapping[str, Any],
        volume: Mapping[str, Any],
        host_dir: Path,
        host: VolumeHost,
    ) -> None:
        source = self.source_of(volume)
        payload, errors = collect_downward_api(
            pod, source.get("items"), _mode(source.get("defaultMode"), DEFAULT_MODE), host
        )
        if errors:
            raise VolumeSetupError(aggregate_errors(errors))
        await write_memory_backed_volume(pod, host, host_dir, payload)

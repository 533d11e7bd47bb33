"""Where a custom resource keeps what its `scale` subresource shows: the paths the CRD version
names (`specReplicasPath`, `statusReplicasPath`, `labelSelectorPath`), read into an
`autoscaling/v1` Scale and written back. The subresource itself is served by
`ephemera.apiserver.scale`, as for the built-in kinds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ephemera.api import errors, meta
from ephemera.apiserver import tables
from ephemera.apiserver.registry import Registry
from ephemera.apiserver.resources import Resource


def _d(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, dict) else {}


def scale_paths(registry: Registry, resource: Resource) -> dict[str, Any]:
    strategy = registry.strategy(resource)
    scale = getattr(strategy, "scale", None)
    if not isinstance(scale, dict):
        raise errors.not_found(resource.plural, "", resource.group)
    return scale


def to_scale(obj: dict[str, Any], scale: Mapping[str, Any]) -> dict[str, Any]:
    md = meta.ensure_metadata(obj)
    spec = tables.jsonpath_values(obj, str(scale.get("specReplicasPath") or ""))
    status = tables.jsonpath_values(obj, str(scale.get("statusReplicasPath") or ""))
    out: dict[str, Any] = {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                         "creationTimestamp") if k in md},
        "spec": {"replicas": spec[0]} if spec and isinstance(spec[0], int) else {},
        "status": {"replicas": status[0] if status and isinstance(status[0], int) else 0},
    }
    selector_path = scale.get("labelSelectorPath")
    if isinstance(selector_path, str):
        selector = tables.jsonpath_values(obj, selector_path)
        if selector and isinstance(selector[0], str):
            out["status"]["selector"] = selector[0]
    return out


def set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    node = obj
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value

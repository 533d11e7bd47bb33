"""The `scale` subresource of custom resources: an `autoscaling/v1` Scale read from and
written to the paths the CRD version names (`specReplicasPath`, `statusReplicasPath`,
`labelSelectorPath`); GET, PUT, and PATCH with JSON or merge patches."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from ephemera.api import errors, field, meta, patch
from ephemera.apiserver import tables
from ephemera.apiserver.body import read_body
from ephemera.apiserver.registry import Registry, dumps
from ephemera.apiserver.resources import Resource
from ephemera.apiserver.rest import Target, method_not_allowed, request_user, respond


def _d(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, dict) else {}


def _scale_paths(registry: Registry, resource: Resource) -> dict[str, Any]:
    strategy = registry.strategy(resource)
    scale = getattr(strategy, "scale", None)
    if not isinstance(scale, dict):
        raise errors.not_found(resource.plural, "", resource.group)
    return scale


def _to_scale(obj: dict[str, Any], scale: Mapping[str, Any]) -> dict[str, Any]:
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


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    node = obj
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


async def serve_scale(request: web.Request, registry: Registry, target: Target,
                      max_body_bytes: int) -> web.Response:
    """GET, PUT and PATCH (JSON and merge patches) of `NAME/scale`."""
    res = target.resource
    scale = _scale_paths(registry, res)
    if request.method == "GET":
        obj = await registry.get(res, target.namespace, target.name)
        return respond(_to_scale(obj, scale))
    if request.method not in ("PUT", "PATCH"):
        raise method_not_allowed()
    body = await read_body(request, max_body_bytes)
    content_type = request.content_type.split(";")[0].strip().lower()

    async def update(current: dict[str, Any] | None) -> dict[str, Any]:
        if current is None:
            raise errors.not_found(res.plural, target.name, res.group)
        old_scale = _to_scale(copy.deepcopy(current), scale)
        if request.method == "PUT":
            try:
                new_scale = json.loads(body)
            except ValueError as err:
                raise errors.bad_request(f"error decoding Scale: {err}") from None
        elif content_type in (patch.JSON_PATCH, patch.MERGE_PATCH):
            new_scale = patch.apply_patch(content_type, old_scale, body, "")
        else:
            raise errors.unsupported_media_type(custom=True)
        if not isinstance(new_scale, dict):
            raise errors.bad_request("the body must be a Scale object")
        wanted_rv = _d(new_scale, "metadata").get("resourceVersion")
        if wanted_rv and wanted_rv != meta.ensure_metadata(current).get("resourceVersion"):
            raise errors.conflict(res.plural, target.name, group=res.group)
        replicas = _d(new_scale, "spec").get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise errors.invalid("Scale", target.name, [field.invalid(
                "spec.replicas", replicas, "must be greater than or equal to 0")],
                group="autoscaling")
        new = copy.deepcopy(current)
        _set_path(new, str(scale.get("specReplicasPath")), replicas)
        return await registry.prepare_update(res, new, current, subresource="scale",
                                             user=request_user(request))

    result, _ = await registry.update(res, target.namespace, target.name, update)
    return web.Response(body=dumps(_to_scale(result, scale)), content_type="application/json")

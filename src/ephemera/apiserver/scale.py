"""The `scale` subresource, as upstream's ScaleREST, of Deployments, ReplicaSets,
StatefulSets and ReplicationControllers (`ephemera.pods.workloads.scale_of`, `spec.replicas`)
and of custom resources (the CRD's paths, `ephemera.apiserver.customscale`): GET answers the
parent as an autoscaling/v1 Scale, or as the Accept header asks, its Table
(`ephemera.apiserver.tables`) or PartialObjectMetadata; PUT and PATCH (JSON and merge patches
of the Scale, and strategic merge for the built-in kinds) decode the Scale as upstream decodes
it into its Go type (a PUT's replicas of the wrong type 400, a patched one 422 on the field
`patch`; unknown fields as `fieldValidation` says), validate it (`ValidateScale`, 422 of kind
`Scale.autoscaling`), check its resourceVersion against the parent's (409) and write the
replicas into the parent through the registry's update (the parent's defaults, admission,
validation and generation rules), answering the new Scale. Server-side apply of a Scale is
not served (415), a departure listed in the README."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ephemera.api import errors, fieldvalidation, meta, patch
from ephemera.api.errors import StatusError
from ephemera.apiserver import customscale
from ephemera.apiserver.body import check_object_content_type, decode_object, read_body
from ephemera.apiserver.registry import Registry
from ephemera.apiserver.resources import Resource
from ephemera.apiserver.rest import (
    PATCH_APPLY,
    PATCH_STRATEGIC,
    PATCH_TYPES,
    Target,
    as_form,
    check_kind,
    check_patched,
    dry_run,
    field_manager,
    method_not_allowed,
    record_update,
    request_user,
    respond,
    response_form,
)
from ephemera.pods import workloads

SCALE_DEFINITION = "io.k8s.api.autoscaling.v1.Scale"


def _invalid(name: str, errs: list[Any]) -> StatusError:
    return errors.invalid("Scale", name, errs, "autoscaling")


@dataclass(frozen=True)
class ScaleAccess:
    """How a kind keeps its scale: the parent read as a Scale, the replicas written into it,
    and whether it takes strategic merge patches (custom resources do not)."""

    read: Callable[[dict[str, Any]], dict[str, Any]]
    write_replicas: Callable[[dict[str, Any], int], None]
    custom: bool


def scale_access(registry: Registry, res: Resource) -> ScaleAccess:
    if res.custom:
        paths = customscale.scale_paths(registry, res)
        spec_path = str(paths.get("specReplicasPath"))
        return ScaleAccess(lambda obj: customscale.to_scale(copy.deepcopy(obj), paths),
                           lambda obj, n: customscale.set_path(obj, spec_path, n), True)

    def write(obj: dict[str, Any], replicas: int) -> None:
        obj.setdefault("spec", {})["replicas"] = replicas
    return ScaleAccess(lambda obj: workloads.scale_of(res.plural, obj), write, False)


async def handle_scale(request: web.Request, target: Target, registry: Registry,
                       max_body_bytes: int) -> web.Response:
    """GET, PUT or PATCH of `<parent>/NAME/scale`."""
    res = target.resource
    access = scale_access(registry, res)
    if request.method == "GET":
        obj = await registry.get(res, target.namespace, target.name)
        return respond_scale(request, res, access.read(obj))
    if request.method not in ("PUT", "PATCH"):
        raise method_not_allowed()
    is_patch = request.method == "PATCH"
    content_type = request.content_type.split(";")[0].strip().lower()
    if is_patch and (content_type not in PATCH_TYPES or
                     (access.custom and content_type == PATCH_STRATEGIC)):
        raise errors.unsupported_media_type(custom=access.custom)
    if is_patch and content_type == PATCH_APPLY:
        raise StatusError(415, "UnsupportedMediaType",
                          "server-side apply of the scale subresource is not supported")
    if not is_patch:
        check_object_content_type(request)
    body = await read_body(request, max_body_bytes)
    options_kind = "PatchOptions" if is_patch else "UpdateOptions"
    dry = dry_run(request.query.getall("dryRun", []), options_kind)
    manager = request.query.get("fieldManager", "") or field_manager(request)
    user = request_user(request)
    field_validation = request.query.get("fieldValidation")
    sent: dict[str, Any] | None = None
    warnings: list[str] = []
    if not is_patch:
        sent, duplicates = decode_object(body, "Scale")
        check_kind(sent, "autoscaling/v1", "Scale")
        warnings = fieldvalidation.check(sent, SCALE_DEFINITION, field_validation, "Scale",
                                         "v1", duplicates, options_kind)
    directive = fieldvalidation.directive(field_validation, options_kind)

    async def compute(current: dict[str, Any] | None) -> dict[str, Any]:
        if current is None:
            raise errors.not_found(res.plural, target.name, res.group)
        old_scale = access.read(current)
        if sent is not None:
            new_scale = copy.deepcopy(sent)
        else:
            new_scale = patch.apply_patch(content_type, copy.deepcopy(old_scale), body,
                                          SCALE_DEFINITION)
            warnings[:] = check_patched(new_scale, SCALE_DEFINITION, content_type, directive,
                                        body, known=old_scale)
        smd = meta.ensure_metadata(new_scale)
        if (smd.get("name") or target.name) != target.name:
            raise errors.bad_request(f"the name of the object ({smd.get('name')}) does not "
                                     f"match the name on the URL ({target.name})")
        smd["name"] = target.name
        smd["namespace"] = target.namespace
        errs = workloads.validate_scale(new_scale)
        if errs:
            raise _invalid(target.name, errs)
        current_rv = (current.get("metadata") or {}).get("resourceVersion")
        wanted = smd.get("resourceVersion")
        if wanted and wanted != current_rv:
            raise errors.conflict(res.plural, target.name, group=res.group)
        new = copy.deepcopy(current)
        access.write_replicas(new, replicas_of(new_scale))
        new = record_update(current, new, manager, res, "scale")
        stored = await registry.prepare_update(res, new, current, subresource="scale",
                                               user=user, dry_run=dry)
        return stored

    result, _ = await registry.update(res, target.namespace, target.name, compute,
                                      dry_run=dry)
    return respond(access.read(result), warnings=warnings)


def respond_scale(request: web.Request, res: Resource, scale: dict[str, Any]) -> web.Response:
    """A read Scale as the Accept header asks: plain JSON, or a Table (`tables`' printer of
    `res`'s Scale) or PartialObjectMetadata, as `RestHandlers.get` answers an object."""
    form = response_form(request)
    if form is None:
        return respond(scale)
    list_meta = {"resourceVersion": (scale.get("metadata") or {}).get("resourceVersion", "")}
    return respond(as_form(form, request, res, [scale], list_meta, single=True,
                           subresource="scale"))


def replicas_of(scale: dict[str, Any]) -> int:
    """`spec.replicas` of a Scale that decoded (its type was checked): 0 when unset, as
    the Go struct's zero value; an integral float (a YAML body) as its integer."""
    replicas = (scale.get("spec") or {}).get("replicas")
    return int(replicas) if isinstance(replicas, int | float) else 0


def serves_scale(resource: Resource) -> bool:
    return "scale" in resource.subresources

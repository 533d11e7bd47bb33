"""The OpenAPI documents the apiserver serves, built from the served schema
(`ephemera.api.schema`) and the resource table (`ephemera.apiserver.resources`).

- `/openapi/v3`: `openapi_v3_index()`, one `serverRelativeURL` per group-version, carrying a
  content hash because kubectl caches documents by URL.
- `/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`: `openapi_v3_document(group,
  version)`: `components.schemas` (the v2 definitions turned into OpenAPI 3 schemas) and the
  `paths` of every served resource, with `x-kubernetes-group-version-kind`, the
  `fieldValidation` query parameter and the patch content types, which is what kubectl's
  validation, client-side apply (strategic merge patch) and explain read.
- `/openapi/v2`: `openapi_v2_document()`, the same in Swagger 2.0 (JSON), and
  `openapi_v2_protobuf_bytes()`, that document as gnostic's protobuf (`openapiproto`), which is
  what kubectl asks for.

Everything here is pure and computed once per set of served resources (the custom
resources of CRDs change it: `ephemera.apiserver.resources.generation`): the `*_bytes`
functions return the cached serialized bodies, the dict functions fresh copies.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ephemera.api import schema
from ephemera.apiserver import openapiproto
from ephemera.apiserver.resources import (
    Resource,
    by_group_version,
    generation,
    served_group_versions,
)

V2_REF = "#/definitions/"
V3_REF = "#/components/schemas/"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
STATUS = META + "Status"
DELETE_OPTIONS = META + "DeleteOptions"
PATCH = META + "Patch"
BINDING = "io.k8s.api.core.v1.Binding"
SCALE = "io.k8s.api.autoscaling.v1.Scale"

PATCH_CONTENT_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
BODY_CONTENT_TYPES = ("*/*",)
RESPONSE_CONTENT_TYPES = ("application/json", "application/yaml")
INFO = {"title": "Kubernetes", "version": "unversioned"}

# --- parameters ------------------------------------------------------------------------------

_QUERY_PARAMETERS: dict[str, tuple[str, str]] = {
    # name: (type, description)
    "pretty": ("string", "If 'true', the output is indented."),
    "dryRun": ("string", "All: check and process the request but persist nothing."),
    "fieldManager": ("string", "The name of the actor making the change, for managedFields."),
    "fieldValidation": (
        "string",
        "What to do with fields the schema does not know, and with duplicate fields: Ignore "
        "drops them silently, Warn (the default) drops them and says so in a Warning header, "
        "Strict rejects the request with 400 BadRequest."),
    "force": ("boolean", "For apply patches: take over fields other managers own."),
    "gracePeriodSeconds": ("integer", "Seconds before the object is deleted; 0 means now."),
    "propagationPolicy": ("string", "Orphan, Background or Foreground deletion of dependents."),
    "orphanDependents": ("boolean", "Deprecated; use propagationPolicy."),
    "labelSelector": ("string", "Only objects whose labels match this selector."),
    "fieldSelector": ("string", "Only objects whose fields match this selector."),
    "limit": ("integer", "The most items to return; the rest comes with the continue token."),
    "continue": ("string", "The token from a previous page, to get the next one."),
    "resourceVersion": ("string", "The version to read at, or to watch from."),
    "resourceVersionMatch": ("string", "Exact or NotOlderThan: how resourceVersion applies."),
    "timeoutSeconds": ("integer", "End the list or watch after this many seconds."),
    "watch": ("boolean", "Stream the changes instead of returning a list."),
    "allowWatchBookmarks": ("boolean", "Let the watch send BOOKMARK events."),
    "sendInitialEvents": ("boolean", "Start the watch with the current objects as ADDED."),
    "command": ("string", "One argument of the program to run, given once per argument."),
    "ports": ("integer", "A port of the pod to forward to; given once per port."),
    "path": ("string", "The path of the request to the pod's port."),
    "container": ("string", "Which container; may be left out when the pod has only one."),
    "stdin": ("boolean", "Send input to the process on channel 0."),
    "stdout": ("boolean", "Receive what the process writes to its output on channel 1."),
    "stderr": ("boolean", "Receive what the process writes to its errors on channel 2."),
    "tty": ("boolean", "Run the process on a terminal; its errors then come on channel 1."),
}
_LIST_QUERY = ("allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit",
               "resourceVersion", "resourceVersionMatch", "sendInitialEvents",
               "timeoutSeconds", "watch")
_WRITE_QUERY = ("dryRun", "fieldManager", "fieldValidation")
_PATCH_QUERY = (*_WRITE_QUERY, "force")
_DELETE_QUERY = ("dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy")
_ATTACH_QUERY = ("container", "stderr", "stdin", "stdout", "tty")
_EXEC_QUERY = ("command", *_ATTACH_QUERY)
_PROXY_METHODS = ("get", "post", "put", "patch", "delete", "head", "options")


@dataclass(frozen=True)
class _Operation:
    method: str  # get, put, post, patch, delete
    operation_id: str
    action: str  # x-kubernetes-action
    description: str
    gvk: dict[str, str]
    query: tuple[str, ...] = ()
    body: str | None = None  # definition name of the request body
    body_types: tuple[str, ...] = BODY_CONTENT_TYPES
    body_required: bool = True
    responses: dict[str, str | None] = field(default_factory=dict)  # code -> definition


@dataclass(frozen=True)
class _PathItem:
    path: str
    path_parameters: tuple[tuple[str, str], ...]  # (name, description)
    operations: tuple[_Operation, ...]


def _group_id(group: str, version: str) -> str:
    if not group:
        return "CoreV" + version[1:]
    head = group.removesuffix(".k8s.io")
    words = [w for part in head.split(".") for w in part.split("-")]
    return "".join(w[:1].upper() + w[1:] for w in words) + "V" + version[1:]


def _gvk(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "kind": kind, "version": version}


def _path_items(r: Resource) -> list[_PathItem]:
    prefix = f"/apis/{r.group}/{r.version}" if r.group else f"/api/{r.version}"
    gid = _group_id(r.group, r.version)
    gvk = _gvk(r.group, r.version, r.kind)
    scoped = "Namespaced" if r.namespaced else ""
    ns_path = "/namespaces/{namespace}" if r.namespaced else ""
    ns_param = (("namespace", "The namespace of the object."),) if r.namespaced else ()
    name_param = (("name", f"The name of the {r.kind}."),)
    collection = f"{prefix}{ns_path}/{r.plural}"
    list_def = r.definition + "List"
    verbs = set(r.verbs)
    items: list[_PathItem] = []

    ops: list[_Operation] = []
    if "list" in verbs:
        ops.append(_Operation("get", f"list{gid}{scoped}{r.kind}", "list",
                              f"List or watch objects of kind {r.kind}.", gvk, _LIST_QUERY,
                              responses={"200": list_def}))
    if "create" in verbs:
        ops.append(_Operation("post", f"create{gid}{scoped}{r.kind}", "post",
                              f"Create a {r.kind}.", gvk, _WRITE_QUERY, body=r.definition,
                              responses={"200": r.definition, "201": r.definition,
                                         "202": r.definition}))
    if "deletecollection" in verbs:
        ops.append(_Operation("delete", f"delete{gid}Collection{scoped}{r.kind}",
                              "deletecollection", f"Delete a collection of {r.kind} objects.",
                              gvk, (*_DELETE_QUERY, *_LIST_QUERY), body=DELETE_OPTIONS,
                              body_required=False, responses={"200": STATUS}))
    if ops:
        items.append(_PathItem(collection, ns_param, tuple(ops)))

    ops = []
    if "get" in verbs:
        ops.append(_Operation("get", f"read{gid}{scoped}{r.kind}", "get",
                              f"Read the given {r.kind}.", gvk,
                              responses={"200": r.definition}))
    if "update" in verbs:
        ops.append(_Operation("put", f"replace{gid}{scoped}{r.kind}", "put",
                              f"Replace the given {r.kind}.", gvk, _WRITE_QUERY,
                              body=r.definition,
                              responses={"200": r.definition, "201": r.definition}))
    if "patch" in verbs:
        ops.append(_patch_op(f"patch{gid}{scoped}{r.kind}", f"Patch the given {r.kind}.",
                             gvk, r.definition, r.custom))
    if "delete" in verbs:
        ops.append(_Operation("delete", f"delete{gid}{scoped}{r.kind}", "delete",
                              f"Delete the given {r.kind}.", gvk, _DELETE_QUERY,
                              body=DELETE_OPTIONS, body_required=False,
                              responses={"200": r.definition, "202": r.definition}))
    if ops:
        items.append(_PathItem(f"{collection}/{{name}}", (*name_param, *ns_param), tuple(ops)))

    for sub in r.subresources:
        title = sub[:1].upper() + sub[1:]
        sub_path = f"{collection}/{{name}}/{sub}"
        if sub == "binding":
            bgvk = _gvk("", "v1", "Binding")
            ops = [_Operation("post", f"create{gid}{scoped}{r.kind}{title}", "post",
                              f"Bind the given {r.kind} to a node.", bgvk, _WRITE_QUERY,
                              body=BINDING, responses={"200": BINDING, "201": BINDING,
                                                       "202": BINDING})]
        elif sub == "eviction":
            # Its policy/v1 Eviction is not among the definitions served (no policy group):
            # discovery lists the subresource, which is what kubectl drain looks for.
            continue
        elif sub == "allocated":
            ops = [_Operation("get", f"read{gid}{scoped}{r.kind}{title}", "get",
                              f"Read the given {r.kind} as its node allocated it.", gvk,
                              responses={"200": r.definition})]
        elif sub == "log":
            ops = [_Operation("get", f"read{gid}{scoped}{r.kind}{title}", "get",
                              f"Read the log of the given {r.kind}.", gvk,
                              responses={"200": None})]
        elif sub in ("exec", "attach"):
            sgvk = _gvk(r.group, r.version, f"{r.kind}{title}Options")
            query = _EXEC_QUERY if sub == "exec" else _ATTACH_QUERY
            ops = [_Operation(method, f"connect{gid}{method.capitalize()}{scoped}{r.kind}{title}",
                              "connect", f"connect {method.upper()} requests to {sub} of "
                              f"{r.kind}", sgvk, query, responses={"200": None})
                   for method in ("get", "post")]
        elif sub == "portforward":
            sgvk = _gvk(r.group, r.version, f"{r.kind}PortForwardOptions")
            ops = [_Operation(method, f"connect{gid}{method.capitalize()}{scoped}{r.kind}{title}",
                              "connect", f"connect {method.upper()} requests to portforward of "
                              f"{r.kind}", sgvk, ("ports",), responses={"200": None})
                   for method in ("get", "post")]
        elif sub == "proxy" and r.plural in ("pods", "services"):
            sgvk = _gvk(r.group, r.version, f"{r.kind}ProxyOptions")
            ops = [_Operation(method, f"connect{gid}{method.capitalize()}{scoped}{r.kind}Proxy",
                              "connect",
                              f"connect {method.upper()} requests to proxy of {r.kind}",
                              sgvk, ("path",), responses={"200": None})
                   for method in _PROXY_METHODS]
        elif sub == "scale":
            sgvk = _gvk("autoscaling", "v1", "Scale")
            ops = [
                _Operation("get", f"read{gid}{scoped}{r.kind}{title}", "get",
                           f"Read the scale of the given {r.kind}.", sgvk,
                           responses={"200": SCALE}),
                _Operation("put", f"replace{gid}{scoped}{r.kind}{title}", "put",
                           f"Replace the scale of the given {r.kind}.", sgvk, _WRITE_QUERY,
                           body=SCALE, responses={"200": SCALE, "201": SCALE}),
                _patch_op(f"patch{gid}{scoped}{r.kind}{title}",
                          f"Patch the scale of the given {r.kind}.", sgvk, SCALE),
            ]
        elif sub == "finalize":
            ops = [_Operation("put", f"replace{gid}{scoped}{r.kind}{title}", "put",
                              f"Replace the finalizers of the given {r.kind}.", gvk,
                              _WRITE_QUERY, body=r.definition,
                              responses={"200": r.definition, "201": r.definition})]
        else:
            # `scale` reads and writes an autoscaling/v1 Scale, the others the kind itself
            body, sgvk = ((SCALE, _gvk("autoscaling", "v1", "Scale")) if sub == "scale"
                          else (r.definition, gvk))
            ops = [
                _Operation("get", f"read{gid}{scoped}{r.kind}{title}", "get",
                           f"Read the {sub} of the given {r.kind}.", sgvk,
                           responses={"200": body}),
                _Operation("put", f"replace{gid}{scoped}{r.kind}{title}", "put",
                           f"Replace the {sub} of the given {r.kind}.", sgvk, _WRITE_QUERY,
                           body=body, responses={"200": body, "201": body}),
                _patch_op(f"patch{gid}{scoped}{r.kind}{title}",
                          f"Patch the {sub} of the given {r.kind}.", sgvk, body, r.custom),
            ]
        items.append(_PathItem(sub_path, (*name_param, *ns_param), tuple(ops)))

    if r.namespaced and "list" in verbs:
        items.append(_PathItem(
            f"{prefix}/{r.plural}", (),
            (_Operation("get", f"list{gid}{r.kind}ForAllNamespaces", "list",
                        f"List or watch objects of kind {r.kind} in every namespace.", gvk,
                        _LIST_QUERY, responses={"200": list_def}),)))
    return items


def _patch_op(operation_id: str, description: str, gvk: dict[str, str],
              definition: str, custom: bool = False) -> _Operation:
    """A patch operation; custom resources take no strategic merge patch."""
    types = (tuple(t for t in PATCH_CONTENT_TYPES if "strategic" not in t) if custom
             else PATCH_CONTENT_TYPES)
    return _Operation("patch", operation_id, "patch", description, gvk, _PATCH_QUERY,
                      body=PATCH, body_types=types,
                      responses={"200": definition, "201": definition})


_cached_generation = 0


def _fresh() -> None:
    """Forget what was computed from an older set of served resources."""
    global _cached_generation
    current = generation()
    if current != _cached_generation:
        _group_version_items.cache_clear()
        _v3_document_bytes.cache_clear()
        _v3_index_bytes.cache_clear()
        _v2_document_bytes.cache_clear()
        _v2_protobuf_bytes.cache_clear()
        _cached_generation = current


@cache
def _group_version_items(group: str, version: str) -> tuple[_PathItem, ...]:
    if (group, version) not in served_group_versions():
        raise KeyError(f"group-version {group}/{version} is not served")
    items: list[_PathItem] = []
    for r in by_group_version(group, version):
        items.extend(_path_items(r))
    return tuple(items)


def _status_response(code: str) -> str:
    return {"200": "OK", "201": "Created", "202": "Accepted"}.get(code, code)


# --- schemas -----------------------------------------------------------------------------


def _referenced(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            out.add(ref.rsplit("/", 1)[-1])
        for v in node.values():
            _referenced(v, out)
    elif isinstance(node, list):
        for v in node:
            _referenced(v, out)


def _closure(roots: set[str]) -> list[str]:
    defs = schema.definitions()
    keep: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        found: set[str] = set()
        _referenced(defs[name], found)
        todo.extend(found - keep)
    return sorted(keep)


def _used_definitions(items: tuple[_PathItem, ...]) -> list[str]:
    roots = {STATUS}
    for item in items:
        for op in item.operations:
            if op.body:
                roots.add(op.body)
            roots.update(d for d in op.responses.values() if d)
    return _closure(roots)


def v3_schema(node: Any) -> Any:
    """An OpenAPI v2 schema node as OpenAPI 3: references point into `components.schemas`,
    and a reference with sibling keys (a description, say) is wrapped in `allOf`, as
    OpenAPI 3.0 ignores the siblings of `$ref`."""
    if isinstance(node, list):
        return [v3_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = {"$ref": V3_REF + ref.removeprefix(V2_REF)}
        rest = {k: v3_schema(v) for k, v in node.items() if k != "$ref"}
        return {"allOf": [target], **rest} if rest else target
    return {k: v3_schema(v) for k, v in node.items()}


def _v3_definition(name: str, node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = v3_schema(node)
    # The two types that take more than one JSON type, as upstream serves them in v3.
    if name == QUANTITY:
        out.pop("type", None)
        out["oneOf"] = [{"type": "string"}, {"type": "number"}]
    elif name == INT_OR_STRING:
        out.pop("type", None)
        out["oneOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


def _v3_parameter(name: str, location: str, description: str,
                  type_: str = "string") -> dict[str, Any]:
    p: dict[str, Any] = {"name": name, "in": location, "description": description}
    if location == "path":
        p["required"] = True
    p["schema"] = {"type": type_, "uniqueItems": True}
    return p


def _v3_content(types: tuple[str, ...], definition: str) -> dict[str, Any]:
    return {t: {"schema": {"$ref": V3_REF + definition}} for t in types}


def _v3_operation(op: _Operation, tag: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tags": [tag],
        "description": op.description,
        "operationId": op.operation_id,
    }
    if op.query:
        out["parameters"] = [
            _v3_parameter(q, "query", _QUERY_PARAMETERS[q][1], _QUERY_PARAMETERS[q][0])
            for q in op.query
        ]
    if op.body:
        body: dict[str, Any] = {"content": _v3_content(op.body_types, op.body)}
        if op.body_required:
            body["required"] = True
        out["requestBody"] = body
    responses: dict[str, Any] = {}
    for code, definition in op.responses.items():
        resp: dict[str, Any] = {"description": _status_response(code)}
        if definition:
            resp["content"] = _v3_content(RESPONSE_CONTENT_TYPES, definition)
        responses[code] = resp
    responses["401"] = {"description": "Unauthorized"}
    out["responses"] = responses
    out["x-kubernetes-action"] = op.action
    out["x-kubernetes-group-version-kind"] = dict(op.gvk)
    return out


def _tag(group: str, version: str) -> str:
    return f"{group.removesuffix('.k8s.io').replace('.', '_') or 'core'}_{version}"


def _build_v3_document(group: str, version: str) -> dict[str, Any]:
    items = _group_version_items(group, version)
    defs = schema.definitions()
    tag = _tag(group, version)
    paths: dict[str, Any] = {}
    for item in items:
        entry: dict[str, Any] = {
            op.method: _v3_operation(op, tag) for op in item.operations
        }
        entry["parameters"] = [
            *(_v3_parameter(n, "path", d) for n, d in item.path_parameters),
            _v3_parameter("pretty", "query", _QUERY_PARAMETERS["pretty"][1]),
        ]
        paths[item.path] = entry
    return {
        "openapi": "3.0.0",
        "info": dict(INFO),
        "paths": paths,
        "components": {
            "schemas": {n: _v3_definition(n, defs[n]) for n in _used_definitions(items)},
            "securitySchemes": {
                "BearerToken": {"type": "apiKey", "description": "Bearer token.",
                                "name": "authorization", "in": "header"},
            },
        },
        "security": [{"BearerToken": []}],
    }


def openapi_v3_path(group: str, version: str) -> str:
    """The key of a group-version in the index: `api/v1`, `apis/<group>/<version>`."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3_document_bytes(group: str, version: str) -> bytes:
    """The serialized v3 document of a group-version; KeyError if it is not served."""
    _fresh()
    return _v3_document_bytes(group, version)


@cache
def _v3_document_bytes(group: str, version: str) -> bytes:
    doc = _build_v3_document(group, version)
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def openapi_v3_document(group: str, version: str) -> dict[str, Any]:
    """The v3 document of a group-version (`""` for core); KeyError if it is not served."""
    result: dict[str, Any] = json.loads(openapi_v3_document_bytes(group, version))
    return result


def document_hash(group: str, version: str) -> str:
    """The content hash in the document's `serverRelativeURL` (SHA-512, upper-case hex)."""
    return hashlib.sha512(openapi_v3_document_bytes(group, version)).hexdigest().upper()


def openapi_v3_index_bytes() -> bytes:
    _fresh()
    return _v3_index_bytes()


@cache
def _v3_index_bytes() -> bytes:
    paths = {
        openapi_v3_path(g, v): {
            "serverRelativeURL": f"/openapi/v3/{openapi_v3_path(g, v)}?hash="
                                 f"{document_hash(g, v)}"
        }
        for g, v in served_group_versions()
    }
    return json.dumps({"paths": paths}, separators=(",", ":")).encode()


def openapi_v3_index() -> dict[str, Any]:
    """The `/openapi/v3` discovery document."""
    result: dict[str, Any] = json.loads(openapi_v3_index_bytes())
    return result


def openapi_v3_document_for_path(path: str) -> bytes | None:
    """The serialized document for the part of a URL after `/openapi/v3/` (`api/v1`,
    `apis/coordination.k8s.io/v1`; a trailing slash is tolerated), or None."""
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] == "api":
        gv = ("", parts[1])
    elif len(parts) == 3 and parts[0] == "apis":
        gv = (parts[1], parts[2])
    else:
        return None
    if gv not in served_group_versions():
        return None
    return openapi_v3_document_bytes(*gv)


# --- v2 ----------------------------------------------------------------------------------


def _v2_parameter(name: str, location: str, description: str,
                  type_: str = "string") -> dict[str, Any]:
    p: dict[str, Any] = {"name": name, "in": location, "description": description,
                         "type": type_, "uniqueItems": True}
    if location == "path":
        p["required"] = True
    return p


def _v2_operation(op: _Operation, tag: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tags": [tag],
        "description": op.description,
        "operationId": op.operation_id,
        "consumes": list(op.body_types) if op.body else ["*/*"],
        "produces": list(RESPONSE_CONTENT_TYPES),
        "schemes": ["https"],
    }
    params: list[dict[str, Any]] = []
    if op.body:
        body: dict[str, Any] = {"name": "body", "in": "body",
                                "schema": {"$ref": V2_REF + op.body}}
        if op.body_required:
            body["required"] = True
        params.append(body)
    params.extend(_v2_parameter(q, "query", _QUERY_PARAMETERS[q][1], _QUERY_PARAMETERS[q][0])
                  for q in op.query)
    if params:
        out["parameters"] = params
    responses: dict[str, Any] = {}
    for code, definition in op.responses.items():
        resp: dict[str, Any] = {"description": _status_response(code)}
        if definition:
            resp["schema"] = {"$ref": V2_REF + definition}
        responses[code] = resp
    responses["401"] = {"description": "Unauthorized"}
    out["responses"] = responses
    out["x-kubernetes-action"] = op.action
    out["x-kubernetes-group-version-kind"] = dict(op.gvk)
    return out


def openapi_v2_document_bytes() -> bytes:
    _fresh()
    return _v2_document_bytes()


@cache
def _v2_document_bytes() -> bytes:
    paths: dict[str, Any] = {}
    used: set[str] = set()
    for group, version in served_group_versions():
        items = _group_version_items(group, version)
        used.update(_used_definitions(items))
        tag = _tag(group, version)
        for item in items:
            entry: dict[str, Any] = {
                op.method: _v2_operation(op, tag) for op in item.operations
            }
            entry["parameters"] = [
                *(_v2_parameter(n, "path", d) for n, d in item.path_parameters),
                _v2_parameter("pretty", "query", _QUERY_PARAMETERS["pretty"][1]),
            ]
            paths[item.path] = entry
    defs = schema.definitions()
    doc = {
        "swagger": "2.0",
        "info": dict(INFO),
        "paths": paths,
        "definitions": {n: defs[n] for n in sorted(used)},
        "securityDefinitions": {
            "BearerToken": {"type": "apiKey", "description": "Bearer token.",
                            "name": "authorization", "in": "header"},
        },
        "security": [{"BearerToken": []}],
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def openapi_v2_protobuf_bytes() -> bytes:
    """The Swagger 2.0 document as gnostic's protobuf (`openapiproto`): what kubectl asks
    `/openapi/v2` for, to validate a manifest whose kind v3 does not name."""
    _fresh()
    return _v2_protobuf_bytes()


@cache
def _v2_protobuf_bytes() -> bytes:
    return openapiproto.encode(json.loads(_v2_document_bytes()))


def openapi_v2_document() -> dict[str, Any]:
    """The Swagger 2.0 document of everything served (JSON)."""
    result: dict[str, Any] = json.loads(openapi_v2_document_bytes())
    return result

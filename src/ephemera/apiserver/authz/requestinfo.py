"""What a request asks, for authorization: upstream's `RequestInfoFactory.NewRequestInfo`, from
the method, the path and the query alone (so an unknown resource is authorized, and denied,
before it is found missing, as upstream does).

- `/api/v1/...` and `/apis/GROUP/VERSION/...` with a resource are resource requests; anything
  shorter (`/api`, `/api/v1`, `/apis/GROUP`, ...) and every other path (`/version`,
  `/healthz`, `/openapi/v2`) is a non-resource request whose verb is the lowercased method;
- verbs: POST create, GET and HEAD get (list or watch without a name; watch with
  `watch=true` or the legacy `watch/` prefix; a `metadata.name=` field selector names the
  object), PUT update, PATCH patch, DELETE delete (deletecollection without a name);
- `namespaces/NS/...` gives the namespace; a namespace object's own name is its namespace;
- `resource/name/subresource[/more]` gives the subresource (`nodes/N/proxy/...`: proxy).

`attributes_of(request)` is what audit and authorization read: the attributes of an aiohttp
request (its user as authentication left it, `system:anonymous` without one), computed once
and kept on the request under `ATTRIBUTES`, whichever middleware asks first.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from ephemera.api.listoptions import query_flag
from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz import Attributes, requester
from ephemera.apiserver.rest import USER

API_PREFIXES = ("api", "apis")
GROUPLESS_PREFIX = "api"
NAMESPACE_SUBRESOURCES = ("status", "finalize")
METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete"}
ATTRIBUTES: web.RequestKey[Attributes] = web.RequestKey("attributes", Attributes)


def _is_path_segment(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and "%" not in name


def _watch_requested(query: Mapping[str, str]) -> bool:
    return bool(query_flag(query, "watch"))


def _field_selector_name(query: Mapping[str, str]) -> str:
    """The name an exact `metadata.name` term of the field selector requires."""
    for term in (query.get("fieldSelector") or "").split(","):
        for operator in ("==", "="):
            key, sep, value = term.partition(operator)
            if sep and key.strip() == "metadata.name" and not value.startswith("="):
                return value.strip()
    return ""


def _non_resource(user: UserInfo, method: str, path: str) -> Attributes:
    return Attributes(user=user, verb=method.lower(), resource_request=False, path=path)


def request_attributes(user: UserInfo, method: str, path: str,
                       query: Mapping[str, str]) -> Attributes:
    inner = path.strip("/")
    parts = inner.split("/") if inner else []
    if len(parts) < 3 or parts[0] not in API_PREFIXES:
        return _non_resource(user, method, path)
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix != GROUPLESS_PREFIX:
        if len(parts) < 3:
            return _non_resource(user, method, path)
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    verb = METHOD_VERBS.get(method.upper(), "")
    if parts[0] in ("watch", "proxy"):
        if len(parts) < 2:
            return _non_resource(user, method, path)
        verb, parts = parts[0], parts[1:]
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else ""
    subresource = parts[2] if len(parts) >= 3 and verb != "proxy" else ""
    if not name and verb == "get":
        verb = "watch" if _watch_requested(query) else "list"
        selected = _field_selector_name(query)
        if selected and _is_path_segment(selected):
            name = selected
    elif name and verb == "get" and not subresource and _watch_requested(query):
        verb = "watch"  # ephemera serves a watch of the named object here
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(user=user, verb=verb, api_group=group, api_version=version,
                      resource=resource, subresource=subresource, namespace=namespace,
                      name=name, path=path)


def attributes_of(request: web.Request) -> Attributes:
    """The attributes of `request` (see the module docstring); authentication must have run."""
    attributes = request.get(ATTRIBUTES)
    if attributes is None:
        attributes = request_attributes(requester(request.get(USER)), request.method,
                                        request.path, request.query)
        request[ATTRIBUTES] = attributes
    return attributes

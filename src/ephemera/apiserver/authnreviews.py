"""The `authentication.k8s.io/v1` reviews: create-only, never stored, as upstream's
`pkg/registry/authentication`:

- `tokenreviews` (`POST /apis/authentication.k8s.io/v1/tokenreviews`): is `spec.token` a
  valid bearer token, and whose? `status.authenticated`, `status.user`, `status.audiences`
  (the apiserver's audiences). An empty token is 400 `token is required for TokenReview in
  authentication`. Audiences other than the apiserver's are not supported: a review asking
  only for others is answered unauthenticated.
- `selfsubjectreviews` (what `kubectl auth whoami` posts): `status.userInfo` of the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web

from ephemera.api import errors, fieldvalidation, meta
from ephemera.apiserver.authn import Authenticator, UserInfo
from ephemera.apiserver.body import decode_object, read_body
from ephemera.apiserver.resources import Resource
from ephemera.apiserver.rest import check_kind, dry_run, request_user, respond

GROUP = "authentication.k8s.io"


def user_info_json(user: UserInfo | None) -> dict[str, Any]:
    """A `UserInfo` as `authentication.k8s.io/v1` UserInfo JSON (empty fields left out)."""
    if user is None:
        return {}
    out: dict[str, Any] = {"username": user.name}
    if user.uid:
        out["uid"] = user.uid
    if user.groups:
        out["groups"] = list(user.groups)
    if user.extra:
        out["extra"] = {k: list(v) for k, v in user.extra.items()}
    return out


async def _read(request: web.Request, resource: Resource, max_body_bytes: int
                ) -> tuple[dict[str, Any], list[str]]:
    body = await read_body(request, max_body_bytes)
    obj, duplicates = decode_object(body, resource.kind)
    check_kind(obj, resource.api_version, resource.kind)
    dry_run(request.query.getall("dryRun", []), "CreateOptions")
    warnings = fieldvalidation.check(obj, resource.definition,
                                     request.query.get("fieldValidation"), resource.kind,
                                     resource.version, duplicates, "CreateOptions")
    md = meta.ensure_metadata(obj)
    md.setdefault("creationTimestamp", None)
    return obj, warnings


async def create_review(request: web.Request, resource: Resource,
                        authenticator: Authenticator | None, audiences: Sequence[str],
                        max_body_bytes: int) -> web.Response:
    """Answer a POST of one of the reviews (201 with the filled-in status)."""
    obj, warnings = await _read(request, resource, max_body_bytes)
    if resource.plural == "selfsubjectreviews":
        obj["status"] = {"userInfo": user_info_json(request_user(request))}
        return respond(obj, 201, warnings)
    spec = obj.get("spec") or {}
    token = str(spec.get("token") or "")
    if not token:
        raise errors.bad_request("token is required for TokenReview in authentication")
    status: dict[str, Any] = {"user": {}}
    wanted = list(spec.get("audiences") or audiences)
    user = None
    if authenticator is not None and set(wanted) & set(audiences):
        user = await authenticator.authenticate_bearer(token)
    status["authenticated"] = user is not None
    if user is not None:
        status["user"] = user_info_json(user)
        status["audiences"] = [a for a in wanted if a in audiences]
    obj["status"] = status
    return respond(obj, 201, warnings)

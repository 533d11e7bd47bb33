"""The `authentication.k8s.io/v1` reviews: create-only, never stored, as upstream's
`pkg/registry/authentication`:

- `tokenreviews` (`POST /apis/authentication.k8s.io/v1/tokenreviews`): is `spec.token` a
  valid bearer token for `spec.audiences` (the apiserver's `--api-audiences` when empty),
  and whose? `status.authenticated`, `status.user`, `status.audiences`: the requested
  audiences the token is valid for (`Authenticator.review_token`: a service account token's
  `aud` claim among them; for a static or bootstrap token, those that are the apiserver's).
  An empty token is 400 `token is required for TokenReview in authentication`.
- `selfsubjectreviews` (what `kubectl auth whoami` posts): `status.userInfo` of the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web

from ephemera.api import errors, fieldvalidation, meta
from ephemera.apiserver.authn import Authenticator, UserInfo
from ephemera.apiserver.body import check_object_content_type, decode_object, read_body
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
    check_object_content_type(request)
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
    wanted = [str(a) for a in spec.get("audiences") or []] or list(audiences)
    answer = None
    if authenticator is not None:
        answer = await authenticator.review_token(token, wanted, audiences)
    status["authenticated"] = answer is not None
    if answer is not None:
        user, valid_for = answer
        status["user"] = user_info_json(user)
        status["audiences"] = list(valid_for)
    obj["status"] = status
    return respond(obj, 201, warnings)

"""Kubernetes `Status` errors, built exactly as apimachinery's `errors` package builds them.

Every failure the apiserver answers is a `StatusError`; `status()` is the wire body. The
constructors take the resource (plural, for example `pods`) and the name, as upstream does;
`invalid` takes the Kind (`Pod`), as upstream does.
"""

from __future__ import annotations

from typing import Any

from ephemera.api.field import FieldError, aggregate
from ephemera.api.goformat import go_quote

# What a request that hit a bug in the apiserver is told (upstream's panic recovery says
# `This request caused apiserver to panic. Look in the logs for details.`); the Python
# exception itself goes to the log only.
UNEXPECTED = "this request caused the apiserver to fail; its log has the details"

OPTIMISTIC_LOCK = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


class StatusError(Exception):
    """An error answered as a `kind: Status` body with its HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # upstream's `reason` is omitempty: an unknown reason is left out
            body["reason"] = self.reason
        if self.details is not None:  # upstream's `details` pointer: `{}` when set but empty
            body["details"] = self.details
        body["code"] = self.code
        return body


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(name: str, resource: str, group: str) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    d["kind"] = resource
    return d


def not_found(resource: str, name: str, group: str = "") -> StatusError:
    q = _qualified(resource, group)
    msg = f"{q} {go_quote(name)} not found" if name else f"{q} not found"
    return StatusError(404, "NotFound", msg, _details(name, resource, group))


def already_exists(resource: str, name: str, group: str = "") -> StatusError:
    q = _qualified(resource, group)
    return StatusError(409, "AlreadyExists", f"{q} {go_quote(name)} already exists",
                       _details(name, resource, group))


def generate_name_conflict(resource: str, name: str, group: str = "") -> StatusError:
    q = _qualified(resource, group)
    details = _details(name, resource, group)
    details["retryAfterSeconds"] = 1
    return StatusError(
        409, "AlreadyExists",
        f"{q} {go_quote(name)} already exists, the server was not able to generate a unique "
        "name for the object", details, retry_after=1)


def conflict(resource: str, name: str, err: str = OPTIMISTIC_LOCK, group: str = "") -> StatusError:
    q = _qualified(resource, group)
    return StatusError(409, "Conflict",
                       f"Operation cannot be fulfilled on {q} {go_quote(name)}: {err}",
                       _details(name, resource, group))


def invalid(kind: str, name: str, errors: list[FieldError], group: str = "") -> StatusError:
    details = _details(name, kind, group)
    details["causes"] = [e.cause() for e in errors]
    return StatusError(422, "Invalid",
                       f"{_qualified(kind, group)} {go_quote(name)} is invalid: "
                       f"{aggregate(errors)}",
                       details)


def forbidden(resource: str, name: str, err: str, group: str = "") -> StatusError:
    q = _qualified(resource, group)
    if name:
        msg = f"{q} {go_quote(name)} is forbidden: {err}"
    elif resource:
        msg = f"{q} is forbidden: {err}"
    else:
        msg = f"forbidden: {err}"
    return StatusError(403, "Forbidden", msg, _details(name, resource, group))


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def unauthorized(message: str = "Unauthorized") -> StatusError:
    return StatusError(401, "Unauthorized", message)


def method_not_allowed(verb: str, kind: str) -> StatusError:
    return StatusError(405, "MethodNotAllowed",
                       f"{verb} is not supported on resources of kind {go_quote(kind)}")


def not_acceptable(message: str) -> StatusError:
    return StatusError(406, "NotAcceptable", message)


def unsupported_media_type(*, custom: bool = False) -> StatusError:
    """415 for a patch type the resource does not take (custom resources take no strategic
    merge patch)."""
    types = ("application/json-patch+json, application/merge-patch+json, "
             "application/apply-patch+yaml")
    if not custom:
        types += ", application/strategic-merge-patch+json"
    return StatusError(415, "UnsupportedMediaType",
                       "the body of the request was in an unknown format - accepted media types "
                       f"include: {types}")


def request_entity_too_large(limit: int) -> StatusError:
    return StatusError(413, "RequestEntityTooLarge",
                       f"Request entity too large: limit is {limit}")


def expired(message: str) -> StatusError:
    """410 for a list or watch at a compacted resourceVersion (`too old resource version`)."""
    return StatusError(410, "Expired", message)


def gone(message: str) -> StatusError:
    return StatusError(410, "Gone", message)


def resource_expired(requested: int, oldest: int) -> StatusError:
    return expired(f"too old resource version: {requested} ({oldest})")


def internal_error(err: str) -> StatusError:
    return StatusError(500, "InternalError", f"Internal error occurred: {err}",
                       {"causes": [{"message": err}]})


def unknown(message: str, code: int = 500) -> StatusError:
    """What upstream's `ErrorToAPIStatus` answers for an error that is not a Status (a
    failed dial to a kubelet, say): code 500, no reason, the error's own text."""
    return StatusError(code, "", message)


def timeout(message: str) -> StatusError:
    return StatusError(504, "Timeout", message)


def success_status(details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Success"}
    if details:
        body["details"] = details
    return body

"""The `authorization.k8s.io/v1` access reviews (upstream's `pkg/registry/authorization`):
create-only, never stored; the answer is the request object with its `status` filled in
(201), as `kubectl auth can-i` reads it.

- SelfSubjectAccessReview: may the requesting user do `spec.resourceAttributes` (or
  `spec.nonResourceAttributes`)? `status.allowed`, `status.denied` (an authorizer said no),
  `status.reason`.
- SubjectAccessReview: the same for `spec.user` / `spec.groups` / `spec.uid` / `spec.extra`.
- LocalSubjectAccessReview: a SubjectAccessReview within the URL's namespace (the resource
  attributes' namespace must be it; non-resource attributes are not allowed).
- SelfSubjectRulesReview: the rules the requesting user holds in `spec.namespace`
  (`kubectl auth can-i --list`), from the authorizers that can list them.

Validation errors are upstream's (`pkg/apis/authorization/validation`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from ephemera.api import errors, field, fieldvalidation
from ephemera.api.field import FieldError, Path
from ephemera.apiserver.authn import ANONYMOUS, UserInfo
from ephemera.apiserver.authz import Attributes, Authorizer, Decision
from ephemera.apiserver.authz.rbac import aggregate_errors
from ephemera.apiserver.body import decode_object, read_body
from ephemera.apiserver.resources import Resource
from ephemera.apiserver.rest import Target, check_kind, method_not_allowed, respond

AUTHORIZATION_GROUP = "authorization.k8s.io"

# (rules, resolution errors, incomplete) a user holds in a namespace.
RulesSource = Callable[[UserInfo, str], Awaitable[tuple[list[Any], list[str], bool]]]


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def attributes_from_spec(user: UserInfo, spec: Mapping[str, Any]) -> Attributes:
    """upstream's `ResourceAttributesFrom` / `NonResourceAttributesFrom`."""
    resource = spec.get("resourceAttributes")
    if isinstance(resource, dict):
        return Attributes(user=user, verb=str(resource.get("verb") or ""),
                          api_group=str(resource.get("group") or ""),
                          api_version=str(resource.get("version") or ""),
                          resource=str(resource.get("resource") or ""),
                          subresource=str(resource.get("subresource") or ""),
                          namespace=str(resource.get("namespace") or ""),
                          name=str(resource.get("name") or ""))
    non_resource = _d(spec.get("nonResourceAttributes"))
    return Attributes(user=user, verb=str(non_resource.get("verb") or ""),
                      resource_request=False, path=str(non_resource.get("path") or ""))


def _spec_errors(spec: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateSelfSubjectAccessReviewSpec` (shared by the other access reviews)."""
    path = Path("spec")
    has_resource = spec.get("resourceAttributes") is not None
    has_non_resource = spec.get("nonResourceAttributes") is not None
    if has_resource and has_non_resource:
        return [field.invalid(path.child("nonResourceAttributes"),
                              spec.get("nonResourceAttributes"),
                              "cannot be specified in combination with resourceAttributes")]
    if not has_resource and not has_non_resource:
        # A nil pointer: Go's field errors print it as the string "null".
        return [field.invalid(path.child("resourceAttributes"), "null",
                              "exactly one of nonResourceAttributes or resourceAttributes "
                              "must be specified")]
    return []


def _subject_errors(spec: Mapping[str, Any]) -> list[FieldError]:
    if not spec.get("user") and not spec.get("groups"):
        return [field.invalid(Path("spec", "user"), spec.get("user") or "",
                              "at least one of user or group must be specified")]
    return []


def _user_from_spec(spec: Mapping[str, Any]) -> UserInfo:
    extra = {str(k): tuple(str(v) for v in values or [])
             for k, values in _d(spec.get("extra")).items()}
    groups = spec.get("groups")
    groups = groups if isinstance(groups, list) else []
    return UserInfo(name=str(spec.get("user") or ""), groups=tuple(str(g) for g in groups),
                    uid=str(spec.get("uid") or ""), extra=extra)


def _status(decision: Decision, reason: str) -> dict[str, Any]:
    status: dict[str, Any] = {"allowed": decision is Decision.ALLOW}
    if decision is Decision.DENY:
        status["denied"] = True
    if reason:
        status["reason"] = reason
    return status


def rules_review_status(rules: list[Any], errs: list[str], incomplete: bool
                        ) -> dict[str, Any]:
    """upstream's `SubjectRulesReviewStatus` from RBAC rules."""
    resource_rules: list[dict[str, Any]] = []
    non_resource_rules: list[dict[str, Any]] = []
    for rule in rules:
        if rule.get("resources"):
            entry = {"verbs": list(rule.get("verbs") or [])}
            for key in ("apiGroups", "resources", "resourceNames"):
                if rule.get(key):
                    entry[key] = list(rule[key])
            resource_rules.append(entry)
        if rule.get("nonResourceURLs"):
            non_resource_rules.append({"verbs": list(rule.get("verbs") or []),
                                       "nonResourceURLs": list(rule["nonResourceURLs"])})
    status: dict[str, Any] = {"resourceRules": resource_rules,
                              "nonResourceRules": non_resource_rules,
                              "incomplete": incomplete}
    if errs:
        status["evaluationError"] = aggregate_errors(errs)
    return status


class Reviews:
    """The handlers (`create` is the only verb)."""

    def __init__(self, authorizer: Authorizer, rules_sources: list[RulesSource],
                 max_body_bytes: int) -> None:
        self.authorizer = authorizer
        self.rules_sources = rules_sources
        self.max_body_bytes = max_body_bytes

    async def handle(self, request: web.Request, target: Target, user: UserInfo | None
                     ) -> web.Response:
        res = target.resource
        if request.method != "POST" or target.name or target.subresource:
            raise method_not_allowed()
        if res.namespaced and not target.namespace:
            raise method_not_allowed()
        obj = await self._read(request, res)
        spec = _d(obj.get("spec"))
        obj["spec"] = spec
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            md = obj["metadata"] = {}
        md.setdefault("creationTimestamp", None)
        requester_ = requester(user)
        if res.plural == "selfsubjectrulesreviews":
            obj["status"] = await self._rules(requester_, str(spec.get("namespace") or ""))
            return respond(obj, 201)
        errs = _spec_errors(spec)
        subject = requester_
        if res.plural in ("subjectaccessreviews", "localsubjectaccessreviews"):
            errs.extend(_subject_errors(spec))
            subject = _user_from_spec(spec)
        if res.plural == "localsubjectaccessreviews":
            errs.extend(self._local_errors(obj, spec, target.namespace))
        if errs:
            raise errors.invalid(res.kind, "", errs, res.group)
        decision, reason = await self.authorizer.authorize(attributes_from_spec(subject, spec))
        obj["status"] = _status(decision, reason)
        return respond(obj, 201)

    @staticmethod
    def _local_errors(obj: dict[str, Any], spec: Mapping[str, Any], namespace: str
                      ) -> list[FieldError]:
        md = _d(obj.get("metadata"))
        if md.get("namespace") and md["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request")
        md["namespace"] = namespace
        errs: list[FieldError] = []
        attributes = spec.get("resourceAttributes")
        if isinstance(attributes, dict) and (attributes.get("namespace") or "") != namespace:
            errs.append(field.invalid(Path("spec", "resourceAttributes", "namespace"),
                                      attributes.get("namespace") or "",
                                      "must match metadata.namespace"))
        if spec.get("nonResourceAttributes") is not None:
            errs.append(field.invalid(Path("spec", "nonResourceAttributes"),
                                      spec.get("nonResourceAttributes"),
                                      "disallowed on this kind of request"))
        return errs

    async def _read(self, request: web.Request, res: Resource) -> dict[str, Any]:
        body = await read_body(request, self.max_body_bytes)
        obj, duplicates = decode_object(body, res.kind)
        check_kind(obj, res.api_version, res.kind)
        fieldvalidation.check(obj, res.definition, request.query.get("fieldValidation"),
                              res.kind, res.version, duplicates, "CreateOptions")
        return obj

    async def _rules(self, user: UserInfo, namespace: str) -> dict[str, Any]:
        rules: list[Any] = []
        errs: list[str] = []
        incomplete = False
        for source in self.rules_sources:
            more, more_errs, more_incomplete = await source(user, namespace)
            rules.extend(more)
            errs.extend(more_errs)
            incomplete = incomplete or more_incomplete
        return rules_review_status(rules, errs, incomplete)


def is_review(resource: Resource) -> bool:
    return resource.group == AUTHORIZATION_GROUP


def requester(user: Any) -> UserInfo:
    """The request's user; `system:anonymous` without one."""
    return user if isinstance(user, UserInfo) else ANONYMOUS

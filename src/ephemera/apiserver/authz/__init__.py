"""Authorization: may this user do this to this object. The seam every authorizer plugs into.

`Attributes` is what upstream calls `authorizer.Attributes` (the request's user, verb and
resource coordinates, or its non-resource path); `Authorizer.authorize` answers with a
`Decision` and a reason, and `UnionAuthorizer` asks each authorizer in turn until one has an
opinion (upstream's `--authorization-mode=Node,RBAC`). `forbidden_message` builds upstream's
exact 403 text. The plugins live beside this module: `rbac` (roles and bindings) and `node`
(the Node authorizer's graph).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ephemera.api.goformat import go_quote
from ephemera.apiserver.authn import ANONYMOUS, UserInfo


def requester(user: Any) -> UserInfo:
    """The request's user; `system:anonymous` without one."""
    return user if isinstance(user, UserInfo) else ANONYMOUS


class Decision(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    NO_OPINION = "no-opinion"


@dataclass(frozen=True)
class Attributes:
    """One request as authorization sees it (upstream's `authorizer.AttributesRecord`).

    `verb` is the API verb for a resource request (get, list, watch, create, update, patch,
    delete, deletecollection) and the lowercased HTTP method for a non-resource one (`path`
    set, `resource_request` False)."""

    user: UserInfo
    verb: str
    resource_request: bool = True
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


class Authorizer(Protocol):
    async def authorize(self, attributes: Attributes) -> tuple[Decision, str]: ...


class UnionAuthorizer:
    """The first authorizer with an opinion decides; none, and the request is denied with
    the reasons of those that gave one, one per line (upstream's `union.go`)."""

    def __init__(self, authorizers: Sequence[Authorizer]) -> None:
        self.authorizers = tuple(authorizers)

    async def authorize(self, attributes: Attributes) -> tuple[Decision, str]:
        reasons: list[str] = []
        for authorizer in self.authorizers:
            decision, reason = await authorizer.authorize(attributes)
            if decision is not Decision.NO_OPINION:
                return decision, reason
            if reason:
                reasons.append(reason)
        return Decision.NO_OPINION, "\n".join(reasons)


def forbidden_message(attributes: Attributes, reason: str = "") -> str:
    """Upstream's 403 text (`responsewriters.forbiddenMessage`), e.g.
    `User "bob" cannot update resource "pods/dynamic" in API group "" in the namespace
    "default"`, followed by `: <reason>` when the authorizers gave one."""
    user = attributes.user.name
    if not attributes.resource_request:
        message = f'User {go_quote(user)} cannot {attributes.verb} path {go_quote(attributes.path)}'
    else:
        resource = attributes.resource
        if attributes.subresource:
            resource = f"{resource}/{attributes.subresource}"
        if attributes.namespace:
            message = (f'User {go_quote(user)} cannot {attributes.verb} resource '
                       f'{go_quote(resource)} in API group {go_quote(attributes.api_group)} in '
                       'the namespace '
                       f'{go_quote(attributes.namespace)}')
        else:
            message = (f'User {go_quote(user)} cannot {attributes.verb} resource '
                       f'{go_quote(resource)} in API group {go_quote(attributes.api_group)} at '
                       'the cluster scope')
    if reason:
        message = f"{message}: {reason}"
    return message

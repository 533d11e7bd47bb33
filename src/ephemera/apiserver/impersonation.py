"""User impersonation (`kubectl --as`, `--as-group`, `--as-uid`; upstream's
`filters.WithImpersonation`): a request with `Impersonate-*` headers is served as the user
they name, once the authenticated user is allowed to act as each part of it.

- Headers: `Impersonate-User` (a `system:serviceaccount:NS:NAME` name is that service
  account), `Impersonate-Group` (repeated), `Impersonate-Uid`, `Impersonate-Extra-<key>`
  (the key lowercased and percent-decoded; one value a header line). Groups, extras or a UID
  without a user are refused (400 here; upstream answers 500 for this bad input).
- Each part is authorized for the requesting user with verb `impersonate` on `users`,
  `serviceaccounts` (in its namespace), `groups`, `uids` (`authentication.k8s.io`) or
  `userextras/<key>` (`authentication.k8s.io`), named by its value; the first refusal is
  upstream's 403 (`users "jane" is forbidden: User "bob" cannot impersonate resource "users"
  in API group "" at the cluster scope`).
- The new user: the named one, with the groups asked for, or, when none were, a service
  account's groups (`system:serviceaccounts`, `system:serviceaccounts:NS`); then
  `system:authenticated` added unless `system:authenticated` or `system:unauthenticated` was
  asked for (`system:unauthenticated` for `system:anonymous`).
- The audit event keeps the authenticated user as `user` and names the new one
  `impersonatedUser`; everything after this filter (priority, authorization, admission,
  `SelfSubjectReview`) sees the new user.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import unquote

from multidict import CIMultiDictProxy

from ephemera.api import errors
from ephemera.api.meta import dns1123_label_errors, dns1123_subdomain_errors
from ephemera.api.wellknown import (
    ANONYMOUS_USER,
    SERVICE_ACCOUNT_USER_PREFIX,
    service_account_group_names,
    service_account_username,
)
from ephemera.apiserver.authn import AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP, UserInfo
from ephemera.apiserver.authz import Attributes

__all__ = ["Impersonation", "impersonated_user", "requests_of"]

USER_HEADER = "Impersonate-User"
GROUP_HEADER = "Impersonate-Group"
UID_HEADER = "Impersonate-Uid"
EXTRA_HEADER_PREFIX = "impersonate-extra-"
AUTHENTICATION_GROUP = "authentication.k8s.io"


@dataclass(frozen=True)
class Impersonation:
    """One part of an impersonation, as upstream's filter authorizes it: `kind` is `User`,
    `ServiceAccount`, `Group`, `UserExtra` (`key` set) or `UID`."""

    kind: str
    name: str
    namespace: str = ""
    key: str = ""

    def attributes(self, user: UserInfo) -> Attributes:
        """What `user` must be allowed to do to act as this part."""
        resource = {"User": "users", "ServiceAccount": "serviceaccounts", "Group": "groups",
                    "UserExtra": "userextras", "UID": "uids"}[self.kind]
        api_group = AUTHENTICATION_GROUP if self.kind in ("UserExtra", "UID") else ""
        return Attributes(user=user, verb="impersonate", api_group=api_group,
                          api_version="v1" if api_group else "", resource=resource,
                          subresource=self.key, namespace=self.namespace, name=self.name)


def _service_account(username: str) -> tuple[str, str] | None:
    """upstream's `serviceaccount.SplitUsername`: (namespace, name) of a valid service
    account username."""
    if not username.startswith(SERVICE_ACCOUNT_USER_PREFIX):
        return None
    parts = username[len(SERVICE_ACCOUNT_USER_PREFIX):].split(":")
    if len(parts) != 2:
        return None
    namespace, name = parts
    if dns1123_label_errors(namespace) or dns1123_subdomain_errors(name):
        return None
    return namespace, name


def requests_of(headers: CIMultiDictProxy[str]) -> list[Impersonation]:
    """The impersonation a request asks for, part by part in upstream's order (user, groups,
    extras, UID); [] for none. 400 for groups, extras or a UID without a user."""
    parts: list[Impersonation] = []
    user = headers.get(USER_HEADER, "")
    if user:
        account = _service_account(user)
        parts.append(Impersonation("ServiceAccount", account[1], account[0]) if account
                     else Impersonation("User", user))
    parts.extend(Impersonation("Group", group) for group in headers.getall(GROUP_HEADER, []))
    for header, value in headers.items():
        if header.lower().startswith(EXTRA_HEADER_PREFIX):
            key = unquote(header[len(EXTRA_HEADER_PREFIX):].lower())
            parts.append(Impersonation("UserExtra", value, key=key))
    uid = headers.get(UID_HEADER, "")
    if uid:
        parts.append(Impersonation("UID", uid))
    if parts and not user:
        raise errors.bad_request("impersonating groups, user extras or a UID needs a user to "
                                 f"impersonate too (the {USER_HEADER} header)")
    return parts


def impersonated_user(parts: list[Impersonation]) -> UserInfo:
    """The user `parts` (from `requests_of`, a user among them) make."""
    name, uid = "", ""
    groups: list[str] = []
    extra: dict[str, tuple[str, ...]] = {}
    groups_given = any(part.kind == "Group" for part in parts)
    for part in parts:
        if part.kind == "User":
            name = part.name
        elif part.kind == "ServiceAccount":
            name = service_account_username(part.namespace, part.name)
            if not groups_given:
                groups += service_account_group_names(part.namespace)
        elif part.kind == "Group":
            groups.append(part.name)
        elif part.kind == "UserExtra":
            extra[part.key] = (*extra.get(part.key, ()), part.name)
        else:
            uid = part.name
    if name != ANONYMOUS_USER:
        if not {AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP} & set(groups):
            groups.append(AUTHENTICATED_GROUP)
    elif UNAUTHENTICATED_GROUP not in groups:
        groups.append(UNAUTHENTICATED_GROUP)
    return UserInfo(name, tuple(groups), uid, extra)


async def impersonate(headers: CIMultiDictProxy[str], user: UserInfo,
                      authorize: Callable[[Attributes], Awaitable[None]]) -> UserInfo | None:
    """The user a request with `headers`, authenticated as `user`, is served as: None when
    it asks for no impersonation; `authorize` raises the 403 for a part `user` may not take."""
    parts = requests_of(headers)
    if not parts:
        return None
    for part in parts:
        await authorize(part.attributes(user))
    return impersonated_user(parts)

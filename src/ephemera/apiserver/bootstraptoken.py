"""Bootstrap tokens, as upstream's (`k8s.io/cluster-bootstrap`, and the apiserver's
`plugin/pkg/auth/authenticator/token/bootstrap`): short-lived bearer tokens `ID.SECRET`
(`[a-z0-9]{6}.[a-z0-9]{16}`) with which a new node authenticates to ask for its client
certificate.

A token lives in the Secret `bootstrap-token-<ID>` in `kube-system`, of type
`bootstrap.kubernetes.io/token`, with data `token-id`, `token-secret`, optional `expiration`
(RFC 3339), `usage-bootstrap-authentication: "true"` and optional `auth-extra-groups`
(comma-separated, each `system:bootstrappers:...`). It authenticates as
`system:bootstrap:<ID>` in `system:bootstrappers`, the extra groups and
`system:authenticated`. `new_token` and `token_secret` make one (`ephemera token create`).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hmac
import logging
import re
import secrets
import string
from collections.abc import Mapping, Sequence
from typing import Any

from ephemera.apiserver.authn import AUTHENTICATED_GROUP, ObjectReader, UserInfo
from ephemera.apiserver.resources import core_resource

log = logging.getLogger("ephemera.apiserver.authn")

SECRET_PREFIX = "bootstrap-token-"
SECRET_TYPE = "bootstrap.kubernetes.io/token"
NAMESPACE = "kube-system"
USER_PREFIX = "system:bootstrap:"
BOOTSTRAPPERS_GROUP = "system:bootstrappers"
# kubeadm's default extra group of node join tokens.
DEFAULT_EXTRA_GROUP = "system:bootstrappers:kubeadm:default-node-token"
KEY_ID = "token-id"
KEY_SECRET = "token-secret"
KEY_EXPIRATION = "expiration"
KEY_DESCRIPTION = "description"
KEY_USAGE_AUTHENTICATION = "usage-bootstrap-authentication"
KEY_USAGE_SIGNING = "usage-bootstrap-signing"
KEY_EXTRA_GROUPS = "auth-extra-groups"

TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
GROUP_RE = re.compile(r"^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$")
_ALPHABET = string.ascii_lowercase + string.digits

SECRETS = core_resource("secrets")


def parse_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed bootstrap token, else None."""
    match = TOKEN_RE.match(token)
    return (match.group(1), match.group(2)) if match else None


def new_token() -> str:
    """A random `ID.SECRET` token."""
    def pick(n: int) -> str:
        return "".join(secrets.choice(_ALPHABET) for _ in range(n))

    return f"{pick(6)}.{pick(16)}"


def token_secret(token: str, *, ttl: dt.timedelta | None = dt.timedelta(hours=24),
                 extra_groups: Sequence[str] = (DEFAULT_EXTRA_GROUP,),
                 description: str = "", now: dt.datetime | None = None) -> dict[str, Any]:
    """The Secret that makes `token` a bootstrap token for authentication (and signing),
    expiring after `ttl` (None: never), as `kubeadm token create` writes it."""
    parsed = parse_token(token)
    if parsed is None:
        raise ValueError(f"the bootstrap token {token!r} does not match "
                         f"{TOKEN_RE.pattern}")
    token_id, secret = parsed
    data = {KEY_ID: token_id, KEY_SECRET: secret, KEY_USAGE_AUTHENTICATION: "true",
            KEY_USAGE_SIGNING: "true"}
    if extra_groups:
        data[KEY_EXTRA_GROUPS] = ",".join(extra_groups)
    if description:
        data[KEY_DESCRIPTION] = description
    if ttl is not None:
        expires = (now or dt.datetime.now(dt.UTC)) + ttl
        data[KEY_EXPIRATION] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
        "metadata": {"name": SECRET_PREFIX + token_id, "namespace": NAMESPACE},
        "stringData": data,
    }


def _data(secret: Mapping[str, Any], key: str) -> str:
    value = (secret.get("data") or {}).get(key)
    if not isinstance(value, str):
        return ""
    try:
        return base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def _expired(secret: Mapping[str, Any], now: dt.datetime) -> bool:
    text = _data(secret, KEY_EXPIRATION)
    if not text:
        return False
    try:
        expires = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return True  # upstream treats an unparsable expiration as expired
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=dt.UTC)
    return now >= expires


def groups_of(secret: Mapping[str, Any]) -> tuple[str, ...]:
    """`system:bootstrappers` and the valid `auth-extra-groups`; ValueError for a bad one."""
    groups = [BOOTSTRAPPERS_GROUP]
    for group in _data(secret, KEY_EXTRA_GROUPS).split(","):
        group = group.strip()
        if not group:
            continue
        if not GROUP_RE.match(group):
            raise ValueError(f"{group!r} is not a valid bootstrap group name")
        if group not in groups:
            groups.append(group)
    return tuple(groups)


class BootstrapTokenAuthenticator:
    """Authenticates bootstrap tokens against the Secrets in kube-system."""

    def __init__(self, objects: ObjectReader) -> None:
        self.objects = objects

    async def authenticate_token(self, token: str) -> UserInfo | None:
        parsed = parse_token(token)
        if parsed is None:
            return None
        token_id, token_secret_value = parsed
        name = SECRET_PREFIX + token_id
        secret = await self.objects.get(SECRETS, NAMESPACE, name)

        def reject(why: str) -> None:
            log.info("bootstrap token secret %s/%s %s", NAMESPACE, name, why)

        if secret is None:
            log.info("no secret %s/%s matches the bootstrap token", NAMESPACE, name)
            return None
        if (secret.get("metadata") or {}).get("deletionTimestamp"):
            reject("is deleted and awaiting removal")
            return None
        if secret.get("type") != SECRET_TYPE or not secret.get("data"):
            reject(f"has invalid type, expected {SECRET_TYPE}")
            return None
        if not hmac.compare_digest(_data(secret, KEY_SECRET).encode(),
                                   token_secret_value.encode()):
            reject(f"has invalid value for key {KEY_SECRET}")
            return None
        if _data(secret, KEY_ID) != token_id:
            reject(f"has invalid value for key {KEY_ID}")
            return None
        if _expired(secret, dt.datetime.now(dt.UTC)):
            reject("has expired")
            return None
        if _data(secret, KEY_USAGE_AUTHENTICATION) != "true":
            reject(f"not marked {KEY_USAGE_AUTHENTICATION}=true")
            return None
        try:
            groups = groups_of(secret)
        except ValueError as err:
            reject(f"has invalid value for key {KEY_EXTRA_GROUPS}: {err}")
            return None
        return UserInfo(name=USER_PREFIX + token_id, groups=(*groups, AUTHENTICATED_GROUP))

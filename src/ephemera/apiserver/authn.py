"""Authentication: who sent a request. The methods of upstream's kube-apiserver, in its order:

- the TLS client certificate (verified against the cluster CA by the TLS layer, see
  `ephemera.apiserver.server`): user = CN, groups = O; parsed once per certificate (the user
  is remembered by the certificate's DER bytes), not on every request;
- a bearer token from a static token file (`--token-auth-file`): CSV lines
  `token,user,uid,"group1,group2"`;
- further bearer-token authenticators (`TokenAuthenticator`), asked in turn: bootstrap
  tokens (`ephemera.apiserver.bootstraptoken`) and service account JWTs
  (`ephemera.apiserver.serviceaccounttoken`), which read objects through an `ObjectReader`
  (`StoreObjectReader`: straight from the store).

Every authenticated user also gets the group `system:authenticated`, as upstream adds it.
As upstream's union authenticator with `FailOnError` around the anonymous one: a request with
no credentials at all gives None (the app makes it `ANONYMOUS`, `system:anonymous` in
`system:unauthenticated`, when anonymous requests are allowed); a request with credentials of
which none check out (a bearer token nobody knows, a client certificate that is not a client
certificate or names no user) raises `InvalidCredentials`, on every path: the app answers 401
with `unauthorized_status()`, never anonymous. A client certificate that does not verify
against the CA (another CA's, expired) is refused earlier, by the TLS handshake: Python's
`ssl` cannot ask for a certificate without verifying it, as Go's `RequestClientCert` does.
Authorization is `ephemera.apiserver.authz`'s.
"""

from __future__ import annotations

import csv
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import orjson
from cryptography import x509

from ephemera.api.wellknown import ANONYMOUS_USER
from ephemera.apiserver.certs import has_client_auth_usage, user_from_certificate
from ephemera.apiserver.resources import Resource
from ephemera.store import Store

AUTHENTICATED_GROUP = "system:authenticated"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
# How many client certificates' users `Authenticator` remembers.
CERTIFICATE_USERS_CACHED = 1024


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


# Upstream's anonymous user (`anonymous.NewAuthenticator`).
ANONYMOUS = UserInfo(ANONYMOUS_USER, (UNAUTHENTICATED_GROUP,))


class InvalidCredentials(Exception):
    """The request carries credentials, and none of them authenticates it (401)."""


class _Transport(Protocol):
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...


class _Request(Protocol):
    """What `authenticate` reads of an aiohttp request."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def transport(self) -> _Transport | None: ...


class TokenFileError(ValueError):
    pass


class ObjectReader(Protocol):
    """Reads one stored object (a dict), or None when there is none."""

    async def get(self, resource: Resource, namespace: str, name: str
                  ) -> dict[str, Any] | None: ...


class StoreObjectReader:
    """An `ObjectReader` over the apiserver's store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def get(self, resource: Resource, namespace: str, name: str
                  ) -> dict[str, Any] | None:
        kv = await self.store.get(resource.key(namespace, name))
        if kv is None:
            return None
        obj: dict[str, Any] = orjson.loads(kv.value)
        return obj


class TokenAuthenticator(Protocol):
    """Who a bearer token belongs to, or None when it is not this authenticator's or does
    not check out."""

    async def authenticate_token(self, token: str) -> UserInfo | None: ...


# A token's user and the audiences it is valid for (upstream's `authenticator.Response`).
TokenResponse = tuple[UserInfo, tuple[str, ...]]


@runtime_checkable
class AudienceAwareTokenAuthenticator(Protocol):
    """A token authenticator that checks the token's own audiences (service account JWTs):
    the user and the audiences among `audiences` (None: the apiserver's) the token is valid
    for, or None."""

    async def authenticate_token_for(self, token: str, audiences: Sequence[str] | None
                                     ) -> TokenResponse | None: ...


def _with_authenticated(groups: list[str]) -> tuple[str, ...]:
    if AUTHENTICATED_GROUP not in groups:
        groups = [*groups, AUTHENTICATED_GROUP]
    return tuple(groups)


def load_token_file(path: str | os.PathLike[str]) -> dict[str, UserInfo]:
    """Read a static token file as upstream's `tokenfile.NewCSV` does: at least 3 columns
    (token, user name, user uid), an optional 4th with comma-separated groups."""
    tokens: dict[str, UserInfo] = {}
    with open(path, newline="") as f:
        for record in csv.reader(f, skipinitialspace=True):
            if not record or (len(record) == 1 and not record[0].strip()):
                continue
            if len(record) < 3:
                raise TokenFileError(
                    f"token file '{path}' must have at least 3 columns (token, user name, "
                    f"user uid), found {len(record)}")
            token, name, uid = record[0], record[1], record[2]
            if not token:
                continue
            groups = []
            if len(record) >= 4:
                groups = [g.strip() for g in record[3].split(",") if g.strip()]
            tokens[token] = UserInfo(name=name, uid=uid, groups=_with_authenticated(groups))
    return tokens


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, as upstream's bearertoken
    authenticator parses it; None when there is none."""
    auth = headers.get("Authorization", "").strip()
    if not auth:
        return None
    parts = auth.split(" ")
    if len(parts) < 2 or parts[0].lower() != "bearer":
        return None
    token = parts[1]
    return token or None


def peer_certificate_der(request: _Request) -> bytes | None:
    """The DER bytes of the client certificate the TLS layer verified, or None (plain HTTP,
    or no cert)."""
    transport = request.transport
    if transport is None:
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    return der or None


class Authenticator:
    """Authenticates requests by client certificate, then by bearer token: the static
    tokens, then each of `token_authenticators` in turn."""

    def __init__(self, tokens: Mapping[str, UserInfo] | None = None,
                 token_authenticators: Sequence[TokenAuthenticator] = ()) -> None:
        self.tokens: dict[str, UserInfo] = dict(tokens or {})
        self.token_authenticators = list(token_authenticators)
        # DER bytes -> the user of that certificate (or None): a certificate is parsed once,
        # not on every request of a connection (the TLS layer verified it at the handshake).
        self._certificate_users: OrderedDict[bytes, UserInfo | None] = OrderedDict()

    @classmethod
    def from_token_file(cls, path: str | os.PathLike[str] | None) -> Authenticator:
        return cls(load_token_file(Path(path)) if path else None)

    def authenticate_certificate(self, cert: x509.Certificate) -> UserInfo | None:
        """A certificate the TLS layer already verified against the CA."""
        if not has_client_auth_usage(cert):
            return None
        name, groups = user_from_certificate(cert)
        if not name:
            return None
        return UserInfo(name=name, groups=_with_authenticated(groups))

    def certificate_user(self, der: bytes) -> UserInfo | None:
        """`authenticate_certificate` of a DER certificate, remembered by its bytes (the
        last `CERTIFICATE_USERS_CACHED` certificates)."""
        cache = self._certificate_users
        try:
            user = cache[der]
        except KeyError:
            user = cache[der] = self.authenticate_certificate(
                x509.load_der_x509_certificate(der))
            if len(cache) > CERTIFICATE_USERS_CACHED:
                cache.popitem(last=False)
        else:
            cache.move_to_end(der)
        return user

    def static_token_user(self, token: str) -> UserInfo | None:
        """The user of a token of the static token file, or None."""
        return self.tokens.get(token)

    async def authenticate(self, request: _Request) -> UserInfo | None:
        """The request's user: by its client certificate, else by its bearer token; None
        when it carries neither; `InvalidCredentials` when it carries one or both and
        neither authenticates it."""
        der = peer_certificate_der(request)
        if der is not None:
            user = self.certificate_user(der)
            if user is not None:
                return user
        token = bearer_token(request.headers)
        if token is not None:
            user = await self.authenticate_bearer(token)
            if user is not None:
                return user
        if der is not None or token is not None:
            raise InvalidCredentials
        return None

    async def authenticate_bearer(self, token: str) -> UserInfo | None:
        """A bearer token: the static tokens first, then the other authenticators."""
        user = self.static_token_user(token)
        if user is not None:
            return user
        for authenticator in self.token_authenticators:
            user = await authenticator.authenticate_token(token)
            if user is not None:
                return user
        return None

    async def review_token(self, token: str, audiences: Sequence[str],
                           api_audiences: Sequence[str]) -> TokenResponse | None:
        """A TokenReview's authentication of `token` for `audiences`, as upstream's
        authenticators answer it with audiences in the context: the static and bootstrap
        tokens know no audiences (upstream's `WrapAudienceAgnosticToken`), so they count only
        for the requested audiences that are the apiserver's (`api_audiences`), and those
        are the audiences reported; a service account token is checked against its own
        `aud` claim (`AudienceAwareTokenAuthenticator`)."""
        agnostic = tuple(a for a in api_audiences if a in audiences)
        if agnostic:
            user = self.static_token_user(token)
            if user is not None:
                return user, agnostic
        for authenticator in self.token_authenticators:
            if isinstance(authenticator, AudienceAwareTokenAuthenticator):
                answer = await authenticator.authenticate_token_for(token, audiences)
                if answer is not None:
                    return answer
            elif agnostic:
                user = await authenticator.authenticate_token(token)
                if user is not None:
                    return user, agnostic
        return None


def unauthorized_status() -> dict[str, Any]:
    """The body upstream sends with a 401."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }

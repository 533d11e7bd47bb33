"""Service account tokens: the JWTs the apiserver signs for ServiceAccounts and accepts back
as bearer tokens, as upstream's `pkg/serviceaccount` does them.

- Keys: an ECDSA P-256 key pair in `<data-dir>/pki/sa.key` / `sa.pub` (kubeadm's names;
  upstream's `--service-account-signing-key-file` / `--service-account-key-file`), made once
  and kept. Tokens are ES256, with `kid` = base64url(sha256(DER public key)) as upstream.
- Claims (`bound_claims`): `iss`, `sub` `system:serviceaccount:NS:NAME`, `aud`, `iat`,
  `nbf`, `exp`, `jti`, and the private `kubernetes.io` claim: `namespace`,
  `serviceaccount{name,uid}`, and for a bound token the `pod`, `secret` or `node` it is bound
  to (a pod-bound token also names the pod's node when known).
- Validation (`ServiceAccountTokenAuthenticator`): the issuer, the signature (any of the
  public keys), `exp`/`nbf`/`iat` with upstream's one-minute leeway, an audience shared with
  the apiserver's `--api-audiences` (with a TokenReview's `spec.audiences` when it names
  some; a token without `aud` has the apiserver's), and that the ServiceAccount (and the
  bound pod, secret or node) still exists with the uid in the claims and was not deleted
  more than a minute ago. The user is `system:serviceaccount:NS:NAME` in
  `system:serviceaccounts`,
  `system:serviceaccounts:NS` and `system:authenticated`, with upstream's extra keys.
"""

from __future__ import annotations

import base64
import datetime as dt
import fcntl
import hashlib
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from ephemera.api.goformat import go_quote_list
from ephemera.api.wellknown import service_account_group_names, service_account_username
from ephemera.apiserver.authn import AUTHENTICATED_GROUP, ObjectReader, UserInfo
from ephemera.apiserver.certs import _write_private
from ephemera.apiserver.resources import core_resource

log = logging.getLogger("ephemera.apiserver.authn")

# kubeadm's default issuer, which is also the default API audience.
DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SIGNING_KEY_FILE = "sa.key"
PUBLIC_KEY_FILE = "sa.pub"
# jwt.DefaultLeeway in go-jose, which upstream's validator uses.
LEEWAY = dt.timedelta(minutes=1)
# Extra keys of a service account user, as upstream's `serviceaccount.UserInfo` sets them.
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"
EXTRA_NODE_UID = "authentication.kubernetes.io/node-uid"
EXTRA_CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
_EXTRA_KEYS = {"pod": (EXTRA_POD_NAME, EXTRA_POD_UID), "node": (EXTRA_NODE_NAME, EXTRA_NODE_UID)}

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey


def service_account_groups(namespace: str) -> tuple[str, ...]:
    return (*service_account_group_names(namespace), AUTHENTICATED_GROUP)


# --- keys ----------------------------------------------------------------------------------


def ensure_signing_key(data_dir: str | os.PathLike[str]) -> Path:
    """`<data-dir>/pki/sa.key` (and `sa.pub`), created once (ECDSA P-256); its path."""
    directory = Path(data_dir) / "pki"
    directory.mkdir(parents=True, exist_ok=True)
    key_path, pub_path = directory / SIGNING_KEY_FILE, directory / PUBLIC_KEY_FILE
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not key_path.exists():
            key = ec.generate_private_key(ec.SECP256R1())
            _write_private(key_path, key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption()), 0o600)
            pub_path.unlink(missing_ok=True)
        if not pub_path.exists():
            _write_private(pub_path, load_private_key(key_path).public_key().public_bytes(
                serialization.Encoding.PEM,
                serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)
    return key_path


def load_private_key(path: str | os.PathLike[str]) -> PrivateKey:
    key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise ValueError(f"{path}: not an ECDSA or RSA private key")
    return key


def load_public_keys(path: str | os.PathLike[str]) -> list[PublicKey]:
    """The public keys of a PEM file: public keys, private keys (their public half) or
    certificates, as upstream's `keyutil.PublicKeysFromFile` reads them."""
    from cryptography import x509

    keys: list[PublicKey] = []
    data = Path(path).read_bytes()
    for block in data.split(b"-----END ")[:-1]:
        start = block.find(b"-----BEGIN ")
        if start < 0:
            continue
        label = block[start + 11:block.find(b"-----", start + 11)]
        pem = block[start:] + b"-----END " + label + b"-----\n"
        loaded: Any
        if b"CERTIFICATE" in label:
            loaded = x509.load_pem_x509_certificate(pem).public_key()
        elif b"PRIVATE" in label:
            loaded = serialization.load_pem_private_key(pem, password=None).public_key()
        else:
            loaded = serialization.load_pem_public_key(pem)
        if isinstance(loaded, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey)):
            keys.append(loaded)
    if not keys:
        raise ValueError(f"{path}: no ECDSA or RSA public key")
    return keys


def key_id(public_key: PublicKey) -> str:
    """Upstream's `keyIDFromPublicKey`: base64url (no padding) of sha256 of the DER key."""
    der = public_key.public_bytes(serialization.Encoding.DER,
                                  serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()


def _algorithm(key: PrivateKey | PublicKey) -> str:
    if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        return "RS256"
    curve = key.curve.name
    return {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}[curve]


# --- claims and signing --------------------------------------------------------------------


def _ref(obj: Mapping[str, Any]) -> dict[str, str]:
    md = obj.get("metadata") or {}
    return {"name": str(md.get("name") or ""), "uid": str(md.get("uid") or "")}


def bound_claims(
    account: Mapping[str, Any],
    expiration_seconds: int,
    audiences: Sequence[str],
    *,
    pod: Mapping[str, Any] | None = None,
    secret: Mapping[str, Any] | None = None,
    node: Mapping[str, Any] | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """Upstream's `token.Claims`: the registered and private claims of a token for
    `account`, bound to `pod`, `secret` or `node` when given (`node` with a pod is the pod's
    node)."""
    now = now or dt.datetime.now(dt.UTC)
    md = account.get("metadata") or {}
    namespace = str(md.get("namespace") or "")
    issued = int(now.timestamp())
    private: dict[str, Any] = {"namespace": namespace, "serviceaccount": _ref(account)}
    if pod is not None:
        private["pod"] = _ref(pod)
        if node is not None:
            private["node"] = _ref(node)
    elif secret is not None:
        private["secret"] = _ref(secret)
    elif node is not None:
        private["node"] = _ref(node)
    return {
        "aud": list(audiences),
        "exp": issued + int(expiration_seconds),
        "iat": issued,
        "nbf": issued,
        "jti": str(uuid.uuid4()),
        "sub": service_account_username(namespace, str(md.get("name") or "")),
        "kubernetes.io": private,
    }


@dataclass(frozen=True)
class TokenIssuer:
    """Signs service account tokens with one private key, as issuer `issuer`."""

    private_key: PrivateKey
    issuer: str = DEFAULT_ISSUER

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], issuer: str = DEFAULT_ISSUER
                  ) -> TokenIssuer:
        return cls(load_private_key(path), issuer)

    def sign(self, claims: Mapping[str, Any]) -> str:
        payload = {"iss": self.issuer, **claims}
        return jwt.encode(payload, self.private_key, algorithm=_algorithm(self.private_key),
                          headers={"kid": key_id(self.private_key.public_key())})


# --- validation ----------------------------------------------------------------------------


class InvalidToken(Exception):
    """Why a token that looked like ours does not authenticate (logged, answered 401)."""


SERVICE_ACCOUNTS = core_resource("serviceaccounts")
_BOUND_KINDS = {"pod": core_resource("pods"), "secret": core_resource("secrets"),
                "node": core_resource("nodes")}


def _deleted_long_ago(obj: Mapping[str, Any], now: dt.datetime) -> bool:
    stamp = (obj.get("metadata") or {}).get("deletionTimestamp")
    if not stamp:
        return False
    when = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return when < now - LEEWAY


class ServiceAccountTokenAuthenticator:
    """Authenticates the tokens of `issuers` signed by one of `public_keys`, for
    `audiences`, whose service account (and bound object) `objects` still has."""

    def __init__(self, public_keys: Sequence[PublicKey], objects: ObjectReader, *,
                 issuers: Sequence[str] = (DEFAULT_ISSUER,),
                 audiences: Sequence[str] = (DEFAULT_ISSUER,)) -> None:
        self.public_keys = list(public_keys)
        self.objects = objects
        self.issuers = list(issuers)
        self.audiences = list(audiences)

    def _decode(self, token: str) -> dict[str, Any]:
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise InvalidToken("not a JWT") from None
        if unverified.get("iss") not in self.issuers:
            raise InvalidToken("not issued by this apiserver")
        last: Exception | None = None
        for key in self.public_keys:
            try:
                claims: dict[str, Any] = jwt.decode(
                    token, key, algorithms=[_algorithm(key)], issuer=self.issuers,
                    leeway=LEEWAY, options={"require": ["exp", "iat", "sub"],
                                            "verify_aud": False})
                return claims
            except jwt.InvalidSignatureError as err:
                last = err
            except jwt.ExpiredSignatureError:
                raise InvalidToken("service account token has expired") from None
            except jwt.ImmatureSignatureError:
                raise InvalidToken("service account token is not valid yet") from None
            except jwt.PyJWTError as err:
                raise InvalidToken(str(err)) from None
        raise InvalidToken(f"invalid signature: {last}")

    def _audiences(self, claims: Mapping[str, Any], requested: Sequence[str] | None
                   ) -> tuple[str, ...]:
        """upstream's JWT authenticator: the token's audiences (the apiserver's for a token
        without any) that are also requested (the apiserver's when nothing is requested),
        in the token's order; InvalidToken when there are none."""
        aud = claims.get("aud")
        token_audiences = ([aud] if isinstance(aud, str) else
                           [a for a in aud if isinstance(a, str)] if isinstance(aud, list)
                           else [])
        if not token_audiences:
            token_audiences = list(self.audiences)
        wanted = list(requested) if requested is not None else self.audiences
        shared = tuple(a for a in token_audiences if a in wanted)
        if not shared and self.audiences:
            raise InvalidToken(f"token audiences {go_quote_list(token_audiences)} is invalid for "
                               f"the target audiences {go_quote_list(wanted)}")
        return shared

    async def _check_bound(self, kind: str, namespace: str, ref: Mapping[str, Any],
                           now: dt.datetime) -> None:
        resource = _BOUND_KINDS[kind]
        name = str(ref.get("name") or "")
        obj = await self.objects.get(resource, namespace if resource.namespaced else "", name)
        if obj is None or _deleted_long_ago(obj, now):
            raise InvalidToken(f"{kind} {namespace}/{name} has been deleted")
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if uid != str(ref.get("uid") or ""):
            raise InvalidToken(f"{kind} UID ({uid}) does not match claim ({ref.get('uid')})")

    async def validate(self, token: str, audiences: Sequence[str] | None = None
                       ) -> tuple[UserInfo, tuple[str, ...]]:
        """The user of a valid token and the audiences it is valid for among `audiences`
        (None: the apiserver's); InvalidToken otherwise."""
        claims = self._decode(token)
        shared = self._audiences(claims, audiences)
        private = claims.get("kubernetes.io")
        if not isinstance(private, dict):
            raise InvalidToken("token has no kubernetes.io claim")
        namespace = str(private.get("namespace") or "")
        account_ref = private.get("serviceaccount") or {}
        name = str(account_ref.get("name") or "")
        if claims.get("sub") != service_account_username(namespace, name):
            raise InvalidToken("sub does not match the kubernetes.io claim")
        now = dt.datetime.now(dt.UTC)
        account = await self.objects.get(SERVICE_ACCOUNTS, namespace, name)
        if account is None or _deleted_long_ago(account, now):
            raise InvalidToken(f"service account {namespace}/{name} has been deleted")
        account_uid = str((account.get("metadata") or {}).get("uid") or "")
        if account_uid != str(account_ref.get("uid") or ""):
            raise InvalidToken(f"service account UID ({account_uid}) does not match claim "
                               f"({account_ref.get('uid')})")
        extra: dict[str, tuple[str, ...]] = {}
        for kind in ("pod", "secret", "node"):
            ref = private.get(kind)
            if not isinstance(ref, dict):
                continue
            if not (kind == "node" and "pod" in private):  # a pod's node is informational
                await self._check_bound(kind, namespace, ref, now)
            if kind in _EXTRA_KEYS:
                name_key, uid_key = _EXTRA_KEYS[kind]
                extra[name_key] = (str(ref.get("name")),)
                extra[uid_key] = (str(ref.get("uid")),)
        if claims.get("jti"):
            extra[EXTRA_CREDENTIAL_ID] = (f"JTI={claims['jti']}",)
        user = UserInfo(name=service_account_username(namespace, name), uid=account_uid,
                        groups=service_account_groups(namespace), extra=extra)
        return user, shared

    async def authenticate_token(self, token: str) -> UserInfo | None:
        """A bearer token of a request to this apiserver (valid for its audiences)."""
        answer = await self.authenticate_token_for(token, None)
        return answer[0] if answer is not None else None

    async def authenticate_token_for(self, token: str, audiences: Sequence[str] | None
                                     ) -> tuple[UserInfo, tuple[str, ...]] | None:
        """A token for `audiences` (a TokenReview's): the user and the audiences among them
        the token is valid for."""
        if token.count(".") != 2:
            return None
        try:
            return await self.validate(token, audiences)
        except InvalidToken as err:
            log.info("service account token rejected: %s", err)
            return None



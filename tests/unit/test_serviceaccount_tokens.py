"""Service account tokens: signing and verification (signature, expiry, audience, issuer),
and the checks against the live objects (deleted or recreated service account, bound pod);
bootstrap tokens against their Secret."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any

import jwt
import pytest

from ephemera.apiserver.bootstraptoken import (
    BootstrapTokenAuthenticator,
    new_token,
    parse_token,
    token_secret,
)
from ephemera.apiserver.resources import Resource
from ephemera.apiserver.serviceaccounttoken import (
    DEFAULT_ISSUER,
    ServiceAccountTokenAuthenticator,
    TokenIssuer,
    bound_claims,
    ensure_signing_key,
    key_id,
    load_public_keys,
)


class Objects:
    """An ObjectReader over a dict."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}

    def put(self, plural: str, namespace: str, name: str, uid: str, **more: Any) -> dict[str, Any]:
        obj = {"metadata": {"name": name, "namespace": namespace, "uid": uid, **more}}
        self.objects[(plural, namespace, name)] = obj
        return obj

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((resource.plural, namespace, name))


@pytest.fixture
def issuer(tmp_path: Path) -> TokenIssuer:
    return TokenIssuer.from_file(ensure_signing_key(tmp_path))


def authenticator(issuer: TokenIssuer, objects: Objects, **kw: Any
                  ) -> ServiceAccountTokenAuthenticator:
    return ServiceAccountTokenAuthenticator([issuer.private_key.public_key()], objects, **kw)


def test_keys_are_made_once_and_the_public_half_loads(tmp_path: Path) -> None:
    key = ensure_signing_key(tmp_path)
    first = key.read_bytes()
    assert ensure_signing_key(tmp_path).read_bytes() == first
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    pub = load_public_keys(tmp_path / "pki" / "sa.pub")
    issuer = TokenIssuer.from_file(key)
    assert key_id(pub[0]) == key_id(issuer.private_key.public_key())
    assert load_public_keys(key)[0].public_numbers() == pub[0].public_numbers()  # type: ignore[union-attr]


async def test_bound_token_claims_and_user(issuer: TokenIssuer) -> None:
    objects = Objects()
    account = objects.put("serviceaccounts", "team", "builder", "sa-1")
    pod = objects.put("pods", "team", "runner", "pod-1")
    node = objects.put("nodes", "", "n1", "node-1")
    token = issuer.sign(bound_claims(account, 3600, [DEFAULT_ISSUER], pod=pod, node=node))
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "ES256" and header["kid"] == key_id(issuer.private_key.public_key())
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["iss"] == DEFAULT_ISSUER and claims["aud"] == [DEFAULT_ISSUER]
    assert claims["sub"] == "system:serviceaccount:team:builder"
    assert claims["exp"] - claims["iat"] == 3600 and claims["nbf"] == claims["iat"]
    assert claims["kubernetes.io"] == {
        "namespace": "team", "serviceaccount": {"name": "builder", "uid": "sa-1"},
        "pod": {"name": "runner", "uid": "pod-1"}, "node": {"name": "n1", "uid": "node-1"}}
    user = await authenticator(issuer, objects).authenticate_token(token)
    assert user is not None
    assert user.name == "system:serviceaccount:team:builder" and user.uid == "sa-1"
    assert user.groups == ("system:serviceaccounts", "system:serviceaccounts:team",
                           "system:authenticated")
    assert user.extra["authentication.kubernetes.io/pod-name"] == ("runner",)
    assert user.extra["authentication.kubernetes.io/node-uid"] == ("node-1",)
    assert user.extra["authentication.kubernetes.io/credential-id"] == (
        f"JTI={claims['jti']}",)


async def test_expired_token_is_refused(issuer: TokenIssuer) -> None:
    objects = Objects()
    account = objects.put("serviceaccounts", "ns", "sa", "u1")
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
    token = issuer.sign(bound_claims(account, 3600, [DEFAULT_ISSUER], now=long_ago))
    assert await authenticator(issuer, objects).authenticate_token(token) is None
    # within the one-minute leeway it still counts
    recent = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=630)
    token = issuer.sign(bound_claims(account, 600, [DEFAULT_ISSUER], now=recent))
    assert await authenticator(issuer, objects).authenticate_token(token) is not None


async def test_wrong_audience_issuer_or_key_is_refused(issuer: TokenIssuer,
                                                       tmp_path: Path) -> None:
    objects = Objects()
    account = objects.put("serviceaccounts", "ns", "sa", "u1")
    vault = issuer.sign(bound_claims(account, 3600, ["vault"]))
    assert await authenticator(issuer, objects).authenticate_token(vault) is None
    assert await authenticator(issuer, objects, audiences=["vault"]).authenticate_token(
        vault) is not None
    other = TokenIssuer(issuer.private_key, "https://elsewhere")
    assert await authenticator(issuer, objects).authenticate_token(
        other.sign(bound_claims(account, 3600, [DEFAULT_ISSUER]))) is None
    stranger = TokenIssuer.from_file(ensure_signing_key(tmp_path / "other"))
    forged = stranger.sign(bound_claims(account, 3600, [DEFAULT_ISSUER]))
    assert await authenticator(issuer, objects).authenticate_token(forged) is None
    assert await authenticator(issuer, objects).authenticate_token("not.a.jwt") is None


async def test_deleted_or_recreated_objects_invalidate_tokens(issuer: TokenIssuer) -> None:
    objects = Objects()
    account = objects.put("serviceaccounts", "ns", "sa", "u1")
    pod = objects.put("pods", "ns", "p", "pod-1")
    token = issuer.sign(bound_claims(account, 3600, [DEFAULT_ISSUER], pod=pod))
    auth = authenticator(issuer, objects)
    assert await auth.authenticate_token(token) is not None
    objects.put("pods", "ns", "p", "pod-2")  # recreated under the same name
    assert await auth.authenticate_token(token) is None
    del objects.objects[("pods", "ns", "p")]
    assert await auth.authenticate_token(token) is None
    unbound = issuer.sign(bound_claims(account, 3600, [DEFAULT_ISSUER]))
    assert await auth.authenticate_token(unbound) is not None
    gone = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    objects.put("serviceaccounts", "ns", "sa", "u1", deletionTimestamp=gone)
    assert await auth.authenticate_token(unbound) is None
    objects.put("serviceaccounts", "ns", "sa", "u2")
    assert await auth.authenticate_token(unbound) is None
    del objects.objects[("serviceaccounts", "ns", "sa")]
    assert await auth.authenticate_token(unbound) is None


def _stored_secret(secret: dict[str, Any]) -> dict[str, Any]:
    stored = json.loads(json.dumps(secret))
    stored["data"] = {k: base64.b64encode(v.encode()).decode()
                      for k, v in stored.pop("stringData").items()}
    return stored


async def test_bootstrap_tokens() -> None:
    token = new_token()
    assert parse_token(token) is not None and parse_token("ABCDEF.0123456789abcdef") is None
    token_id = token.split(".")[0]
    objects = Objects()
    auth = BootstrapTokenAuthenticator(objects)
    assert await auth.authenticate_token(token) is None  # no secret yet
    secret = _stored_secret(token_secret(token))
    assert secret["metadata"] == {"name": f"bootstrap-token-{token_id}",
                                  "namespace": "kube-system"}
    objects.objects[("secrets", "kube-system", f"bootstrap-token-{token_id}")] = secret
    user = await auth.authenticate_token(token)
    assert user is not None and user.name == f"system:bootstrap:{token_id}"
    assert user.groups == ("system:bootstrappers",
                           "system:bootstrappers:kubeadm:default-node-token",
                           "system:authenticated")
    wrong = token[:7] + ("a" if token[7] != "a" else "b") + token[8:]
    assert await auth.authenticate_token(wrong) is None
    expired = _stored_secret(token_secret(token, now=dt.datetime.now(dt.UTC)
                                          - dt.timedelta(days=2)))
    objects.objects[("secrets", "kube-system", f"bootstrap-token-{token_id}")] = expired
    assert await auth.authenticate_token(token) is None
    opaque = dict(secret, type="Opaque")
    objects.objects[("secrets", "kube-system", f"bootstrap-token-{token_id}")] = opaque
    assert await auth.authenticate_token(token) is None

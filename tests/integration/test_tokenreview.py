"""TokenReviews (`authentication.k8s.io/v1`) against an apiserver with two API audiences: a
review authenticates for `spec.audiences` (the API audiences when empty) and reports the
audiences the token is valid for, as upstream does: a service account token's own `aud`
among the requested ones, a static token the requested ones that are API audiences. The
review resources are create-only: reading them is 405."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, serve

from ephemera.apiserver.authn import Authenticator, StoreObjectReader, UserInfo
from ephemera.apiserver.serviceaccounttoken import (
    ServiceAccountTokenAuthenticator,
    TokenIssuer,
    bound_claims,
    ensure_signing_key,
)
from ephemera.store import open_store

API_AUDIENCES = ("https://kubernetes.default.svc.cluster.local", "api-two")
ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))
STATIC = UserInfo("robot", ("system:authenticated",), uid="r-1")
REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


@dataclass
class Reviewer:
    api: Api
    issuer: TokenIssuer

    async def review(self, token: str, audiences: list[str] | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"token": token}
        if audiences is not None:
            spec["audiences"] = audiences
        status, body, _ = await self.api.request(
            "POST", REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                              "spec": spec},
            headers={"Authorization": "Bearer admin"})
        assert status == 201, body
        return dict(body["status"])

    async def service_account_token(self, audiences: list[str]) -> str:
        status, account, _ = await self.api.request(
            "GET", "/api/v1/namespaces/default/serviceaccounts/default",
            headers={"Authorization": "Bearer admin"})
        assert status == 200, account
        return self.issuer.sign(bound_claims(account, 3600, audiences))


@pytest.fixture
async def reviewer(tmp_path: Path) -> AsyncIterator[Reviewer]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    issuer = TokenIssuer.from_file(ensure_signing_key(tmp_path))
    accounts = ServiceAccountTokenAuthenticator(
        [issuer.private_key.public_key()], StoreObjectReader(store),
        issuers=[issuer.issuer], audiences=API_AUDIENCES)
    authenticator = Authenticator({"admin": ADMIN, "static": STATIC}, [accounts])
    try:
        async for api in serve(store, authenticator=authenticator, token_issuer=issuer,
                               api_audiences=API_AUDIENCES):
            await api.settle_namespaces()
            yield Reviewer(api, issuer)
    finally:
        await store.close()


async def test_a_service_account_token_is_reviewed_for_its_own_audiences(
        reviewer: Reviewer) -> None:
    token = await reviewer.service_account_token(["vault", "api-two"])
    status = await reviewer.review(token)  # the API audiences
    assert status["authenticated"] is True
    assert status["user"]["username"] == "system:serviceaccount:default:default"
    assert status["audiences"] == ["api-two"]
    status = await reviewer.review(token, ["vault"])  # another service's audience
    assert (status["authenticated"], status["audiences"]) == (True, ["vault"])
    status = await reviewer.review(token, ["api-two", "vault", "elsewhere"])
    assert status["audiences"] == ["vault", "api-two"]  # in the token's order
    assert await reviewer.review(token, ["elsewhere"]) == {"authenticated": False, "user": {}}


async def test_a_static_token_counts_only_for_api_audiences(reviewer: Reviewer) -> None:
    status = await reviewer.review("static")
    assert status == {"authenticated": True, "audiences": list(API_AUDIENCES),
                      "user": {"username": "robot", "uid": "r-1",
                               "groups": ["system:authenticated"]}}
    status = await reviewer.review("static", ["vault", "api-two"])
    assert (status["authenticated"], status["audiences"]) == (True, ["api-two"])
    assert await reviewer.review("static", ["vault"]) == {"authenticated": False, "user": {}}
    assert await reviewer.review("nobody") == {"authenticated": False, "user": {}}


@pytest.mark.parametrize("path", [
    REVIEWS, f"{REVIEWS}?watch=true", f"{REVIEWS}/x",
    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
])
async def test_reviews_cannot_be_read(reviewer: Reviewer, path: str) -> None:
    status, body, _ = await reviewer.api.request("GET", path,
                                                 headers={"Authorization": "Bearer admin"})
    assert (status, body["reason"], body["message"]) == (
        405, "MethodNotAllowed", "the server does not allow this method on the requested "
        "resource")
    status, body, _ = await reviewer.api.request("DELETE", f"{REVIEWS}/x",
                                                 headers={"Authorization": "Bearer admin"})
    assert status == 405


async def test_a_token_request_with_null_spec_and_metadata_gets_the_defaults(
        reviewer: Reviewer) -> None:
    """JSON null is Go's zero value: a TokenRequest with `spec: null` (and `metadata: null`)
    is issued as with `{}`, for the API audiences and an hour."""
    status, body, _ = await reviewer.api.request(
        "POST", "/api/v1/namespaces/default/serviceaccounts/default/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": None,
         "spec": None}, headers={"Authorization": "Bearer admin"})
    assert status == 201, body
    assert (body["spec"]["audiences"], body["spec"]["expirationSeconds"]) == (
        list(API_AUDIENCES), 3600)
    assert (await reviewer.review(body["status"]["token"]))["authenticated"] is True

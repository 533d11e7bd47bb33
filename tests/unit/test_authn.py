"""Authentication over a real TLS connection on loopback: client certificates verified
against the cluster CA, bearer tokens from a token file, and nothing at all."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from ephemera.apiserver.authn import (
    Authenticator,
    InvalidCredentials,
    TokenFileError,
    bearer_token,
    load_token_file,
    unauthorized_status,
)
from ephemera.apiserver.certs import Pki, ensure_pki, issue_client_cert
from ephemera.apiserver.server import client_ssl_context, serve, server_ssl_context


def test_token_file_parsing(tmp_path: Path) -> None:
    path = tmp_path / "tokens.csv"
    path.write_text('abc,alice,1001,"dev,ops"\n\n  def, bob, 1002\n')
    tokens = load_token_file(path)
    assert tokens["abc"].name == "alice" and tokens["abc"].uid == "1001"
    assert tokens["abc"].groups == ("dev", "ops", "system:authenticated")
    assert tokens["def"].name == "bob" and tokens["def"].groups == ("system:authenticated",)
    path.write_text("abc,alice\n")
    with pytest.raises(TokenFileError) as err:
        load_token_file(path)
    assert "must have at least 3 columns (token, user name, user uid), found 2" in str(err.value)


def test_bearer_header_parsing() -> None:
    assert bearer_token({"Authorization": "Bearer abc"}) == "abc"
    assert bearer_token({"Authorization": "  bearer abc  "}) == "abc"
    assert bearer_token({"Authorization": "Basic abc"}) is None
    assert bearer_token({"Authorization": "Bearer "}) is None
    assert bearer_token({}) is None


@dataclass
class Served:
    url: str
    pki: Pki


@pytest.fixture
async def whoami(tmp_path: Path) -> AsyncIterator[Served]:
    """A TLS server whose only handler answers who the request authenticated as."""
    pki = ensure_pki(tmp_path)
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('t0ken,carol,42,"team-a"\n')
    authenticator = Authenticator.from_token_file(tokens)

    async def handler(request: web.Request) -> web.Response:
        try:
            user = await authenticator.authenticate(request)
        except InvalidCredentials:
            return web.json_response(unauthorized_status(), status=401)
        if user is None:
            return web.json_response({"anonymous": True})
        return web.json_response({"name": user.name, "groups": list(user.groups),
                                  "uid": user.uid})

    app = web.Application()
    app.router.add_get("/whoami", handler)
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(app, host="127.0.0.1", port=0,
                                     ssl_context=server_ssl_context(pki), stop=stop,
                                     on_started=started.set_result))
    port = await asyncio.wait_for(started, 10)
    try:
        yield Served(f"https://127.0.0.1:{port}/whoami", pki)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def _get(url: str, ctx: ssl.SSLContext, headers: dict[str, str] | None = None
               ) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as session, \
            session.get(url, ssl=ctx, headers=headers or {}) as resp:
        return resp.status, json.loads(await resp.text())


async def test_admin_certificate(whoami: Served) -> None:
    status, body = await _get(whoami.url, client_ssl_context(whoami.pki))
    assert status == 200
    assert body == {"name": "kubernetes-admin", "uid": "",
                    "groups": ["system:masters", "system:authenticated"]}


async def test_other_client_certificate(whoami: Served, tmp_path: Path) -> None:
    pair = issue_client_cert(whoami.pki.ca, "dave", ["g1", "g2"])
    (tmp_path / "d.crt").write_bytes(pair.cert_pem)
    (tmp_path / "d.key").write_bytes(pair.key_pem)
    ctx = client_ssl_context(whoami.pki, with_admin_cert=False)
    ctx.load_cert_chain(tmp_path / "d.crt", tmp_path / "d.key")
    status, body = await _get(whoami.url, ctx)
    assert (status, body["name"], body["groups"]) == (
        200, "dave", ["g1", "g2", "system:authenticated"])


async def test_bearer_token(whoami: Served) -> None:
    ctx = client_ssl_context(whoami.pki, with_admin_cert=False)
    status, body = await _get(whoami.url, ctx, {"Authorization": "Bearer t0ken"})
    assert (status, body["name"], body["uid"]) == (200, "carol", "42")
    status, body = await _get(whoami.url, ctx, {"Authorization": "Bearer wrong"})
    assert status == 401


async def test_no_credentials_is_no_user_and_bad_ones_are_refused(whoami: Served) -> None:
    ctx = client_ssl_context(whoami.pki, with_admin_cert=False)
    assert await _get(whoami.url, ctx) == (200, {"anonymous": True})
    assert await _get(whoami.url, ctx, {"Authorization": "Basic Zm9vOmJhcg=="}) == (
        200, {"anonymous": True})
    status, body = await _get(whoami.url, ctx, {"Authorization": "Bearer nope"})
    assert status == 401
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


async def test_certificate_from_another_ca_is_refused(whoami: Served, tmp_path: Path) -> None:
    foreign = ensure_pki(tmp_path / "foreign")
    ctx = client_ssl_context(whoami.pki, with_admin_cert=False)
    ctx.load_cert_chain(foreign.admin_cert_path, foreign.admin_key_path)
    with pytest.raises(aiohttp.ClientError):
        await _get(whoami.url, ctx)


async def test_serving_certificate_is_not_a_client_credential(whoami: Served) -> None:
    ctx = client_ssl_context(whoami.pki, with_admin_cert=False)
    ctx.load_cert_chain(whoami.pki.serving_cert_path, whoami.pki.serving_key_path)
    # OpenSSL checks the purpose of the client's chain: serverAuth only is refused there, and
    # the authenticator would refuse it too.
    with pytest.raises(aiohttp.ClientError):
        await _get(whoami.url, ctx)
    assert Authenticator().authenticate_certificate(whoami.pki.serving.certificate) is None
    assert Authenticator().authenticate_certificate(whoami.pki.admin.certificate) is not None

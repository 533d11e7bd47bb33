"""Authentication on every path, over real TLS on loopback, as upstream's union authenticator
with `FailOnError` around the anonymous one: credentials that fail are a 401 everywhere
(`/version` and `/healthz` included), a request with no credentials at all is
`system:anonymous` (the default RBAC's `system:public-info-viewer` lets it read `/version`
and the health paths, nothing else), and anonymous requests are off with `--anonymous-auth=false`
or the AlwaysAllow authorizer."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.apiserver.authn import Authenticator, UserInfo
from ephemera.apiserver.certs import CertKey, Pki, ensure_pki, issue_client_cert
from ephemera.apiserver.server import client_ssl_context, serve, server_ssl_context
from ephemera.store import open_store

UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
PATHS = ("/version", "/healthz", "/livez", "/readyz", "/api", "/api/v1/namespaces")
PUBLIC = ("/version", "/healthz", "/livez", "/readyz")


@dataclass
class Server:
    url: str
    pki: Pki
    tmp: Path

    def context(self, cert: CertKey | None = None) -> ssl.SSLContext:
        ctx = client_ssl_context(self.pki, with_admin_cert=False)
        if cert is not None:
            name = f"c{id(cert)}"
            (self.tmp / f"{name}.crt").write_bytes(cert.cert_pem)
            (self.tmp / f"{name}.key").write_bytes(cert.key_pem)
            ctx.load_cert_chain(self.tmp / f"{name}.crt", self.tmp / f"{name}.key")
        return ctx

    async def get(self, path: str, *, token: str | None = None,
                  cert: CertKey | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        async with aiohttp.ClientSession() as session, \
                session.get(self.url + path, ssl=self.context(cert), headers=headers) as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text)
            except ValueError:
                return resp.status, text


Start = Callable[..., Awaitable[Server]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """Starts an apiserver over TLS with the static token `good` (a cluster admin) and the
    given `ApiserverConfig` settings."""
    pki = ensure_pki(tmp_path / "pki")
    stops: list[tuple[asyncio.Event, asyncio.Task[None]]] = []
    stores = []

    async def run(**config: Any) -> Server:
        store = open_store("sqlite", data_dir=tmp_path / f"data{len(stores)}")
        stores.append(store)
        authenticator = Authenticator({"good": UserInfo("admin", ("system:masters",
                                                                  "system:authenticated"))})
        app = create_app(store, ApiserverConfig(authenticator=authenticator, **config))
        stop = asyncio.Event()
        started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(serve(app, host="127.0.0.1", port=0,
                                         ssl_context=server_ssl_context(pki), stop=stop,
                                         on_started=started.set_result))
        stops.append((stop, task))
        port = await asyncio.wait_for(started, 10)
        return Server(f"https://127.0.0.1:{port}", pki, tmp_path)

    try:
        yield run
    finally:
        for stop, task in stops:
            stop.set()
            await asyncio.wait_for(task, 10)
        for store in stores:
            await store.close()


def _certificate(ca: CertKey, subject: x509.Name, *, expired: bool = False) -> CertKey:
    """A client-auth certificate signed by `ca` (expired an hour ago when asked)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    end = now - dt.timedelta(hours=1) if expired else now + dt.timedelta(days=1)
    cert = (x509.CertificateBuilder().subject_name(subject)
            .issuer_name(ca.certificate.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(end - dt.timedelta(days=2)).not_valid_after(end)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca.private_key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), key_pem)


async def test_a_bad_bearer_token_is_401_on_every_path(start: Start) -> None:
    server = await start()
    for path in PATHS:
        assert await server.get(path, token="wrong") == (401, UNAUTHORIZED), path
        status, _ = await server.get(path, token="good")
        assert status == 200, path


async def test_no_credentials_is_anonymous_for_authorization(start: Start) -> None:
    server = await start()
    for path in PUBLIC:
        status, _ = await server.get(path)
        assert status == 200, path
    status, body = await server.get("/version")
    assert body["major"] == "1"
    for path in ("/api", "/api/v1/namespaces"):
        status, body = await server.get(path)
        assert (status, body["reason"]) == (403, "Forbidden"), path
    _, body = await server.get("/api")
    assert body["message"] == 'forbidden: User "system:anonymous" cannot get path "/api"'
    _, body = await server.get("/api/v1/namespaces")
    assert body["message"] == ('namespaces is forbidden: User "system:anonymous" cannot list '
                               'resource "namespaces" in API group "" at the cluster scope')


async def test_a_certificate_naming_no_user_is_401_unless_a_token_authenticates(
        start: Start) -> None:
    server = await start()
    nameless = _certificate(server.pki.ca, x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "team")]))
    for path in PATHS:
        assert await server.get(path, cert=nameless) == (401, UNAUTHORIZED), path
    # the union goes on to the bearer token, as upstream's
    status, _ = await server.get("/api", cert=nameless, token="good")
    assert status == 200
    assert await server.get("/version", cert=nameless, token="wrong") == (401, UNAUTHORIZED)
    good = issue_client_cert(server.pki.ca, "carol", ["system:masters"])
    for path in PATHS:
        status, _ = await server.get(path, cert=good)
        assert status == 200, path


async def test_unverifiable_certificates_are_refused_by_the_handshake(
        start: Start, tmp_path: Path) -> None:
    """Departure: upstream's TLS layer takes any certificate and its authenticator answers
    401; Python's `ssl` verifies a certificate it asks for, so the handshake fails."""
    server = await start()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mallory")])
    expired = _certificate(server.pki.ca, subject, expired=True)
    foreign = _certificate(ensure_pki(tmp_path / "foreign").ca, subject)
    for cert in (expired, foreign):
        with pytest.raises(aiohttp.ClientError):
            await server.get("/version", cert=cert)


@pytest.mark.parametrize("config", [{"anonymous_auth": False},
                                    {"authorization_modes": ["AlwaysAllow"]}])
async def test_without_anonymous_requests_no_credentials_is_401(
        start: Start, config: dict[str, Any]) -> None:
    server = await start(**config)
    for path in PATHS:
        assert await server.get(path) == (401, UNAUTHORIZED), path
        status, _ = await server.get(path, token="good")
        assert status == 200, path

"""A kubelet the apiserver cannot reach: logs, `/allocated`, exec, attach and the node proxy
answer as upstream's apiserver does (a 500 with no reason and Go's error text), never with a
Python repr."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

from aiohttp import web
from apiserver_fixtures import Api

from ephemera.apiserver.certs import create_ca, issue_serving_cert

PODS = "/api/v1/namespaces/default/pods"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def _node_at(api: Api, port: int) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    status, created = await api.post("/api/v1/nodes", node)
    assert status == 201, created
    created["status"] = {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                         "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}
    status, body = await api.put("/api/v1/nodes/n1/status", created)
    assert status == 200, body


def _failure(status: int, body: dict[str, object]) -> tuple[int, object, object]:
    assert body["kind"] == "Status" and body["code"] == status
    return status, body.get("reason"), body["message"]


async def test_unreachable_kubelet_answers_go_s_errors(api: Api) -> None:
    port = _closed_port()
    await _node_at(api, port)
    created = await api.create_pod("p1", node="n1")
    uid = created["metadata"]["uid"]
    refused = f"dial tcp 127.0.0.1:{port}: connect: connection refused"

    assert _failure(*await api.get(f"{PODS}/p1/log")) == (
        500, None, f'Get "https://127.0.0.1:{port}/containerLogs/default/p1/c": {refused}')
    # The query as Go's url.Values.Encode writes it: keys sorted.
    assert _failure(*await api.get(f"{PODS}/p1/log?tailLines=5&follow=true")) == (
        500, None,
        f'Get "https://127.0.0.1:{port}/containerLogs/default/p1/c?follow=true&tailLines=5": '
        f"{refused}")
    assert _failure(*await api.get(f"{PODS}/p1/allocated")) == (
        500, None, f'Get "https://127.0.0.1:{port}/allocatedPods/{uid}": {refused}')
    assert _failure(*await api.get("/api/v1/nodes/n1/proxy/stats/summary")) == (
        500, None, refused)
    assert _failure(*await api.post(f"{PODS}/p1/exec?command=ls&stdout=true", None)) == (
        500, None, f"error dialing backend: {refused}")
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    status, body, _ = await api.request("GET", f"{PODS}/p1/attach?stdout=true",
                                        headers=upgrade)
    assert _failure(status, body) == (500, None, f"error dialing backend: {refused}")


async def _serve(tmp_path: Path, tls: bool) -> tuple[web.AppRunner, int]:
    """A server on loopback: HTTPS with a certificate of a CA the apiserver does not trust,
    or plain HTTP."""
    context = None
    if tls:
        pair = issue_serving_cert(create_ca("untrusted-ca"), ["127.0.0.1"])
        (tmp_path / "k.crt").write_bytes(pair.cert_pem)
        (tmp_path / "k.key").write_bytes(pair.key_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tmp_path / "k.crt", tmp_path / "k.key")
    runner = web.AppRunner(web.Application())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port: int = runner.addresses[0][1]
    return runner, port


async def test_a_kubelet_with_an_untrusted_certificate_or_no_tls(api: Api,
                                                                 tmp_path: Path) -> None:
    untrusted, port = await _serve(tmp_path, tls=True)
    plain, plain_port = await _serve(tmp_path, tls=False)
    try:
        await _node_at(api, port)
        await api.create_pod("p1", node="n1")
        assert _failure(*await api.get(f"{PODS}/p1/log")) == (
            500, None, f'Get "https://127.0.0.1:{port}/containerLogs/default/p1/c": tls: '
                       "failed to verify certificate: x509: certificate signed by unknown "
                       "authority")
        node = (await api.get("/api/v1/nodes/n1"))[1]
        node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] = plain_port
        assert (await api.put("/api/v1/nodes/n1/status", node))[0] == 200
        assert _failure(*await api.get("/api/v1/nodes/n1/proxy/healthz")) == (
            500, None, "tls: first record does not look like a TLS handshake")
    finally:
        await untrusted.cleanup()
        await plain.cleanup()

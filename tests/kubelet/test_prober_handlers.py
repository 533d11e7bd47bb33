"""The network probe handlers against real servers on loopback (host network namespace):
tcpSocket, httpGet (status codes, redirects, headers, connection errors) and grpc (the
health protocol), each with upstream's messages."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from ephemera.kubelet.prober import handlers
from ephemera.kubelet.prober.grpcprobe import decode_status, encode_request
from ephemera.kubelet.prober.handlers import Outcome, ProbeError, ProbeTarget

HOST = ProbeTarget()  # no pod IP, host namespace: 127.0.0.1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def http_server() -> AsyncIterator[tuple[int, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.headers))
        if request.path == "/ok":
            return web.Response(text="fine")
        if request.path == "/moved":
            raise web.HTTPFound("/ok")
        if request.path == "/away":
            raise web.HTTPFound("http://127.0.0.2:1/elsewhere")
        return web.Response(status=500, text="secret body")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield int(server.port or 0), seen
    finally:
        await server.close()


async def test_tcp_socket() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert await handlers.tcp_probe(HOST, "", port, 1) == (Outcome.SUCCESS, "")
    closed = _free_port()
    assert await handlers.tcp_probe(HOST, "", closed, 1) == (
        Outcome.FAILURE, f"dial tcp 127.0.0.1:{closed}: connect: connection refused")


async def test_http_get(http_server: tuple[int, list[dict[str, str]]]) -> None:
    port, seen = http_server
    container: dict[str, Any] = {"ports": [{"name": "web", "containerPort": port}]}

    async def probe(path: str, **extra: Any) -> tuple[Outcome, str]:
        action = {"path": path, "port": "web", "scheme": "HTTP", **extra}
        return await handlers.http_probe(HOST, action, container, 1)

    assert await probe("/ok") == (Outcome.SUCCESS, "fine")
    assert seen[-1]["User-Agent"] == "kube-probe/1.38" and seen[-1]["Accept"] == "*/*"
    assert await probe("/moved") == (Outcome.SUCCESS, "fine")  # same host: followed
    outcome, output = await probe("/away")
    assert outcome == Outcome.WARNING
    assert output.startswith("Probe terminated redirects, Response body: ")
    assert await probe("/bad") == (Outcome.FAILURE, "HTTP probe failed with statuscode: 500")
    await probe("/ok", httpHeaders=[{"name": "X-Probe", "value": "yes"},
                                    {"name": "User-Agent", "value": "mine"}])
    assert seen[-1]["X-Probe"] == "yes" and seen[-1]["User-Agent"] == "mine"
    closed = _free_port()
    refused = await handlers.http_probe(HOST, {"path": "/x", "port": closed, "scheme": "HTTP"},
                                        {}, 1)
    assert refused == (Outcome.FAILURE, f'Get "http://127.0.0.1:{closed}/x": dial tcp '
                                        f'127.0.0.1:{closed}: connect: connection refused')


def test_resolve_port() -> None:
    container = {"ports": [{"name": "http", "containerPort": 8080}]}
    assert handlers.resolve_port("http", container) == 8080
    assert handlers.resolve_port("9090", container) == 9090
    assert handlers.resolve_port(80, container) == 80
    with pytest.raises(ProbeError) as err:
        handlers.resolve_port("web", container)
    assert str(err.value) == 'strconv.Atoi: parsing "web": invalid syntax'
    with pytest.raises(ProbeError) as err:
        handlers.resolve_port(70000, container)
    assert str(err.value) == "invalid port number: 70000"


def test_health_messages_encoding() -> None:
    assert encode_request("") == b""
    assert encode_request("db") == b"\x0a\x02db"
    assert decode_status(b"\x08\x01") == 1
    assert decode_status(b"") == 0
    assert decode_status(b"\x08\x02") == 2


@pytest.fixture
def grpc_server() -> Any:
    statuses = {"": 1, "down": 2}

    def check(request: bytes, context: grpc.ServicerContext) -> bytes:
        service = request[2:].decode() if request else ""
        if service not in statuses:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return b"\x08" + bytes([statuses[service]])

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health",
        {"Check": grpc.unary_unary_rpc_method_handler(
            check, request_deserializer=lambda b: b, response_serializer=lambda b: b)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(0)


async def test_grpc(grpc_server: int) -> None:
    assert await handlers.grpc_probe(HOST, grpc_server, "", 2) == (Outcome.SUCCESS,
                                                                   "service healthy")
    assert await handlers.grpc_probe(HOST, grpc_server, "down", 2) == (
        Outcome.FAILURE, 'service unhealthy (responded with "NOT_SERVING")')
    outcome, output = await handlers.grpc_probe(HOST, grpc_server, "other", 2)
    assert outcome == Outcome.FAILURE
    assert output == ("error: health rpc probe failed: rpc error: code = NotFound "
                      "desc = unknown service")


async def test_grpc_without_the_health_service() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        outcome, output = await handlers.grpc_probe(HOST, port, "", 2)
    finally:
        server.stop(0)
    assert outcome == Outcome.FAILURE
    assert output.startswith("this server does not implement the grpc health protocol "
                             "(grpc.health.v1.Health): ")


async def test_http_get_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        outcome, output = await handlers.http_probe(
            HOST, {"path": "/", "port": port, "scheme": "HTTP"}, {}, 1)
    assert (outcome, output) == (
        Outcome.FAILURE, f'Get "http://127.0.0.1:{port}/": context deadline exceeded '
                         '(Client.Timeout exceeded while awaiting headers)')

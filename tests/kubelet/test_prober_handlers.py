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
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import HealthServicer

from ephemera.kubelet.prober import handlers
from ephemera.kubelet.prober.grpcprobe import status_name
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


def test_serving_status_names() -> None:
    assert status_name(2) == "NOT_SERVING"
    assert status_name(3) == "SERVICE_UNKNOWN"
    assert status_name(9) == "9"  # a status this side's proto does not know


@pytest.fixture
def grpc_server() -> Any:
    health = HealthServicer()  # the gRPC project's own health service
    health.set("", health_pb2.HealthCheckResponse.SERVING)
    health.set("down", health_pb2.HealthCheckResponse.NOT_SERVING)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
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
    # grpcio's health service answers an unknown service with NOT_FOUND and no details
    assert output == "error: health rpc probe failed: rpc error: code = NotFound desc = "


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

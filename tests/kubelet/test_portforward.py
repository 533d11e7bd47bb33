"""Port-forward on the kubelet (`ephemera.kubelet.portforward`) and its SPDY/3.1 framing
(`ephemera.kubelet.spdy`): the framing against SPDY/3's dictionary and a byte stream cut
anywhere; whole sessions over a real WebSocket to a TCP echo server on loopback (the host's
namespace stands in for a pod's; the real pod namespace is met in tests/e2e), in kubectl's
SPDY-over-WebSocket and in the Python client's channel protocol."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web
from kubelet_harness import Harness, pod, running_kubelet

from ephemera.client import resource_path
from ephemera.kubelet import spdy
from ephemera.kubelet.portforward import (
    PortForwardError,
    PortForwardTarget,
    parse_ports,
    serve_port_forward,
)

# -- framing ----------------------------------------------------------------------------------


def test_the_header_dictionary_is_spdy3s() -> None:
    # the 1423 bytes of the SPDY/3 draft's dictionary (as Go's spdystream has it)
    assert len(spdy.HEADER_DICTIONARY) == 1423
    assert hashlib.sha256(spdy.HEADER_DICTIONARY).hexdigest() == (
        "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02")


def test_frames_survive_a_byte_stream_cut_anywhere() -> None:
    writer = spdy.FrameWriter()
    stream = (writer.syn_stream(1, {"streamtype": ["error"], "port": ["80"],
                                    "requestid": ["0"]})
              + writer.syn_stream(3, {"streamtype": ["data"], "port": ["80"],
                                      "requestid": ["0"]})
              + b"".join(writer.data(3, b"payload", fin=True))
              + writer.ping(7) + writer.rst_stream(3, 5) + writer.goaway(3))
    for cut in range(1, len(stream)):
        reader = spdy.FrameReader()
        frames = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert [type(f).__name__ for f in frames] == ["ControlFrame", "ControlFrame",
                                                       "DataFrame", "ControlFrame",
                                                       "ControlFrame", "ControlFrame"]
        first, second, data, ping, rst, goaway = frames
        assert isinstance(first, spdy.ControlFrame) and isinstance(second, spdy.ControlFrame)
        assert first.stream_id == 1 and first.headers["streamtype"] == ["error"]
        assert second.headers == {"streamtype": ["data"], "port": ["80"], "requestid": ["0"]}
        assert isinstance(data, spdy.DataFrame)
        assert (data.stream_id, data.data, data.flags) == (3, b"payload", spdy.DATA_FLAG_FIN)
        assert isinstance(ping, spdy.ControlFrame) and ping.ping_id == 7
        assert isinstance(rst, spdy.ControlFrame) and (rst.stream_id, rst.status) == (3, 5)
        assert isinstance(goaway, spdy.ControlFrame) and goaway.type == spdy.TYPE_GOAWAY


def test_a_stream_that_is_not_spdy3_is_refused() -> None:
    with pytest.raises(spdy.SpdyError, match="unsupported SPDY version 2"):
        spdy.FrameReader().feed(struct.pack(">HHI", 0x8002, 6, 4) + b"\0\0\0\1")


def test_ports_of_the_channel_protocol() -> None:
    assert parse_ports(["80", "8080,9090"]) == [80, 8080, 9090]
    with pytest.raises(PortForwardError, match='query parameter "port" is required'):
        parse_ports([])
    with pytest.raises(PortForwardError, match='port "0" must be > 0'):
        parse_ports(["0"])
    with pytest.raises(PortForwardError, match='unable to parse "http" as a port'):
        parse_ports(["http"])


# -- sessions ---------------------------------------------------------------------------------


class Host:
    async def port_forward_target(self, namespace: str, pod: str) -> PortForwardTarget:
        if pod != "p":
            raise PortForwardError("pod does not exist", 404)
        return PortForwardTarget(sandbox_id="sandbox1", netns="")


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(4096):
        writer.write(b"echo:" + data)
        await writer.drain()
    writer.write(b"bye")  # after the client's half-close
    await writer.drain()
    writer.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    async with server:
        yield port


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def kubelet() -> AsyncIterator[str]:
    app = web.Application()
    host = Host()

    async def handler(request: web.Request) -> web.StreamResponse:
        return await serve_port_forward(request, host)

    app.router.add_get("/portForward/{namespace}/{pod}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/portForward/ns"
    finally:
        await runner.cleanup()


class SpdyClient:
    """kubectl's side: SPDY frames in binary WebSocket messages."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.writer = spdy.FrameWriter()
        self.reader = spdy.FrameReader()
        self.frames: list[spdy.Frame] = []

    async def send(self, frame: bytes) -> None:
        # cut in two, as Go's framer writes field by field
        await self.ws.send_bytes(frame[:3])
        await self.ws.send_bytes(frame[3:])

    async def until(self, done: Any, timeout: float = 10) -> list[spdy.Frame]:
        async with asyncio.timeout(timeout):
            while not done(self.frames):
                message = await self.ws.receive()
                assert message.type == aiohttp.WSMsgType.BINARY, message
                self.frames.extend(self.reader.feed(message.data))
        return self.frames

    def data(self, stream_id: int) -> tuple[bytes, bool]:
        frames = [f for f in self.frames
                  if isinstance(f, spdy.DataFrame) and f.stream_id == stream_id]
        return (b"".join(f.data for f in frames),
                any(f.flags & spdy.DATA_FLAG_FIN for f in frames))


async def _spdy(kubelet: str) -> tuple[aiohttp.ClientSession, SpdyClient]:
    session = aiohttp.ClientSession()
    ws = await session.ws_connect(f"{kubelet}/p", protocols=("SPDY/3.1+portforward.k8s.io",))
    assert ws.protocol == "SPDY/3.1+portforward.k8s.io"
    return session, SpdyClient(ws)


async def test_spdy_pairs_forward_each_connection_and_half_close(
        kubelet: str, echo_port: int) -> None:
    session, client = await _spdy(kubelet)
    try:
        for request_id, (error_id, data_id) in enumerate(((1, 3), (5, 7))):
            headers = {"streamtype": ["error"], "port": [str(echo_port)],
                       "requestid": [str(request_id)]}
            await client.send(client.writer.syn_stream(error_id, headers))
            await client.send(b"".join(client.writer.data(error_id, b"", fin=True)))
            await client.send(client.writer.syn_stream(data_id, {**headers,
                                                                 "streamtype": ["data"]}))
        # data sent at once, before the pod connection may be up, is not lost
        await client.send(b"".join(client.writer.data(3, b"one")))
        await client.send(b"".join(client.writer.data(7, b"two", fin=True)))
        await client.send(client.writer.ping(1))
        await client.until(lambda frames: client.data(7) == (b"echo:twobye", True))
        replies = {f.stream_id for f in client.frames
                   if isinstance(f, spdy.ControlFrame) and f.type == spdy.TYPE_SYN_REPLY}
        assert replies == {1, 3, 5, 7}
        assert any(isinstance(f, spdy.ControlFrame) and f.type == spdy.TYPE_PING
                   and f.ping_id == 1 for f in client.frames)
        await client.until(lambda frames: client.data(3)[0] == b"echo:one")
        assert client.data(3) == (b"echo:one", False)  # the first is still open
        await client.send(b"".join(client.writer.data(3, b"", fin=True)))
        await client.until(lambda frames: client.data(3)[1] and client.data(1)[1])
        assert client.data(3) == (b"echo:onebye", True)
        assert client.data(1) == (b"", True)  # no error
        assert client.data(5) == (b"", True)
    finally:
        await client.ws.close()
        await session.close()


async def test_spdy_a_refused_port_is_written_on_the_error_stream(kubelet: str) -> None:
    port = _free_port()
    session, client = await _spdy(kubelet)
    try:
        headers = {"streamtype": ["error"], "port": [str(port)], "requestid": ["0"]}
        await client.send(client.writer.syn_stream(1, headers))
        await client.send(client.writer.syn_stream(3, {**headers, "streamtype": ["data"]}))
        await client.until(lambda frames: client.data(1)[1] and client.data(3)[1])
        message = client.data(1)[0].decode()
        assert message.startswith(
            f'error forwarding port {port} to pod sandbox1, uid : failed to execute '
            f'portforward in network namespace "": failed to connect to localhost:{port} '
            f'inside namespace "sandbox1", IPv4: dial tcp4 127.0.0.1:{port}: connect: '
            f'connection refused IPv6 dial tcp6 [::1]:{port}: ')
        assert client.data(3) == (b"", True)
    finally:
        await client.ws.close()
        await session.close()


async def test_the_channel_protocol_prefixes_ports_and_forwards(
        kubelet: str, echo_port: int) -> None:
    refused = _free_port()
    async with aiohttp.ClientSession() as session, session.ws_connect(
            f"{kubelet}/p?port={echo_port}&port={refused}",
            protocols=("v4.channel.k8s.io",)) as ws:
        assert ws.protocol == "v4.channel.k8s.io"
        await ws.send_bytes(b"\x00hello")
        seen: dict[int, bytes] = {}
        async with asyncio.timeout(10):
            while b"echo:hello" not in seen.get(0, b"") or not seen.get(3, b"")[2:]:
                message = await ws.receive()
                assert message.type == aiohttp.WSMsgType.BINARY
                seen[message.data[0]] = seen.get(message.data[0], b"") + message.data[1:]
        assert seen[0] == struct.pack("<H", echo_port) + b"echo:hello"
        assert seen[1] == struct.pack("<H", echo_port)
        assert seen[2] == struct.pack("<H", refused)
        assert seen[3].startswith(struct.pack("<H", refused) + (
            f"error forwarding port {refused} to pod sandbox1, uid : ").encode())


async def test_refusals_before_the_upgrade(kubelet: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{kubelet}/nobody?port=80") as answer:
            assert (answer.status, await answer.text()) == (404, "pod does not exist")
        async with session.get(f"{kubelet}/p",
                               headers={"Sec-WebSocket-Protocol": "v4.channel.k8s.io"}
                               ) as answer:
            assert answer.status == 400
            assert await answer.text() == 'query parameter "port" is required'
        async with session.get(f"{kubelet}/p?port=80") as answer:
            assert answer.status == 400
            assert "over WebSocket only" in await answer.text()


# -- through the in-process apiserver (fake runtime: the pod's namespace is the host's) -------


async def _running_box(h: Harness) -> None:
    await h.create(pod("box", argv=["sleep", "3600"]))
    await h.wait_pod("box", lambda p: (p.get("status") or {}).get("phase") == "Running")


async def test_pods_portforward_through_the_apiserver(tmp_path: Path, echo_port: int) -> None:
    async with running_kubelet(tmp_path) as h:
        await _running_box(h)
        url = f"{h.api.server}/api/v1/namespaces/default/pods/box/portforward"
        async with aiohttp.ClientSession() as client, client.ws_connect(
                url, params={"ports": str(echo_port)}, protocols=("v4.channel.k8s.io",)) as ws:
            assert ws.protocol == "v4.channel.k8s.io"
            await ws.send_bytes(b"\x00ping")
            got = b""
            async with asyncio.timeout(10):
                while b"echo:ping" not in got:
                    message = await ws.receive()
                    if message.data[0] == 0:
                        got += message.data[1:]
            assert got == struct.pack("<H", echo_port) + b"echo:ping"
        base = f"{h.api.server}/api/v1/namespaces/default/pods"
        async with aiohttp.ClientSession() as client:
            async with client.get(f"{base}/nope/portforward", params={"ports": "80"}) as resp:
                assert resp.status == 404
                assert (await resp.json())["message"] == 'pods "nope" not found'
            async with client.get(f"{base}/box/portforward", params={"ports": "x"}) as resp:
                assert resp.status == 400
                assert (await resp.json())["message"] == (
                    'strconv.ParseInt: parsing "x": invalid syntax')


async def _web(request: web.Request) -> web.Response:
    body = await request.read()
    return web.Response(status=201 if request.method == "POST" else 200,
                        text=f"{request.method} {request.path_qs} {body.decode()} "
                             f"auth={request.headers.get('Authorization', '-')}",
                        headers={"X-Pod": "yes"})


async def test_pods_proxy_through_the_apiserver(tmp_path: Path) -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _web)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with running_kubelet(tmp_path) as h:
            await _running_box(h)
            base = f"{h.api.server}/api/v1/namespaces/default/pods"
            async with aiohttp.ClientSession() as client:
                async with client.get(f"{base}/box:{port}/proxy/a/b?x=1") as resp:
                    assert resp.status == 200 and resp.headers["X-Pod"] == "yes"
                    assert await resp.text() == "GET /a/b?x=1  auth=-"
                async with client.post(f"{base}/http:box:{port}/proxy/", data=b"sent",
                                       headers={"Authorization": "Bearer secret"}) as resp:
                    # the caller's credentials for the apiserver stay there
                    assert (resp.status, await resp.text()) == (201, "POST / sent auth=-")
                async with client.get(f"{base}/box:{_free_port()}/proxy/") as resp:
                    assert resp.status == 503
                    status = await resp.json()
                    assert status["reason"] == "ServiceUnavailable"
                    assert status["message"].startswith(
                        "error trying to reach service: error forwarding port ")
                async with client.get(f"{base}/https:box:{port}/proxy/") as resp:
                    assert resp.status == 400
                async with client.get(f"{base}/nope:{port}/proxy/") as resp:
                    assert resp.status == 404
    finally:
        await runner.cleanup()


async def test_services_proxy_picks_a_ready_pod_endpoint(tmp_path: Path) -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _web)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with running_kubelet(tmp_path) as h:
            await _running_box(h)
            service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                       "spec": {"selector": {"app": "web"},
                                "ports": [{"name": "http", "port": 80, "targetPort": port},
                                          {"name": "none", "port": 81, "targetPort": 1}]}}
            await h.api.create(resource_path("services", "default"), service)
            await h.api.create(resource_path("services", "default"), {
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": "empty"},
                "spec": {"selector": {"app": "none"}, "ports": [{"port": 80}]}})

            def endpoint(pod_name: str, ip: str, ready: bool) -> dict[str, Any]:
                return {"addresses": [ip], "conditions": {"ready": ready},
                        "targetRef": {"kind": "Pod", "namespace": "default",
                                      "name": pod_name}}

            # a not-ready endpoint and one whose pod is gone are never picked
            await h.api.create(
                resource_path("endpointslices", "default", group="discovery.k8s.io"),
                {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                 "metadata": {"name": "web-abc",
                              "labels": {"kubernetes.io/service-name": "web"}},
                 "addressType": "IPv4",
                 "endpoints": [endpoint("box", "10.0.0.2", True),
                               endpoint("sleepy", "10.0.0.3", False),
                               endpoint("gone", "10.0.0.4", True)],
                 "ports": [{"name": "http", "port": port, "protocol": "TCP"}]})
            base = f"{h.api.server}/api/v1/namespaces/default/services"
            async with aiohttp.ClientSession() as client:
                for name in ("web:80", "web:http", "http:web:http"):
                    for _ in range(3):
                        async with client.get(f"{base}/{name}/proxy/a?x=1") as resp:
                            assert resp.status == 200 and resp.headers["X-Pod"] == "yes"
                            assert await resp.text() == "GET /a?x=1  auth=-"
                async with client.post(f"{base}/web:80/proxy", data=b"sent") as resp:
                    assert (resp.status, await resp.text()) == (201, "POST / sent auth=-")
                expected = {
                    "web:82": (503, 'no service port 82 found for service "web"'),
                    "web:none": (503, 'no endpoints available for service "web"'),
                    "web": (503, 'no endpoints available for service "web"'),  # unnamed
                    "empty": (503, 'no endpoints available for service "empty"'),
                    "nope:80": (404, 'services "nope" not found'),
                    "a:b:c:d": (400, 'invalid service request "a:b:c:d"'),
                }
                for name, (code, message) in expected.items():
                    async with client.get(f"{base}/{name}/proxy/") as resp:
                        status = await resp.json()
                        assert (resp.status, status["message"]) == (code, message), name
    finally:
        await runner.cleanup()


async def _raw_upgrade(server: str, path: str, protocol: str
                       ) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    """kubectl's plain SPDY upgrade on a raw connection: the answer's head, and the stream."""
    where = urlsplit(server)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    writer.write((f"POST {path} HTTP/1.1\r\nHost: {where.netloc}\r\nConnection: Upgrade\r\n"
                  f"Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {protocol}\r\n"
                  "Content-Length: 0\r\n\r\n").encode())
    async with asyncio.timeout(10):
        head = await reader.readuntil(b"\r\n\r\n")
    return head, reader, writer


async def test_kubectls_plain_spdy_upgrade_is_tunnelled_to_the_kubelet(
        tmp_path: Path, echo_port: int) -> None:
    async with running_kubelet(tmp_path) as h:
        await _running_box(h)
        path = "/api/v1/namespaces/default/pods/box/portforward"
        head, reader, writer = await _raw_upgrade(h.api.server, path, "portforward.k8s.io")
        try:
            assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
            assert b"\r\nUpgrade: SPDY/3.1\r\n" in head
            assert b"\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n" in head
            frames = spdy.FrameWriter()
            headers = {"streamtype": ["error"], "port": [str(echo_port)], "requestid": ["0"]}
            writer.write(frames.syn_stream(1, headers)
                         + frames.syn_stream(3, {**headers, "streamtype": ["data"]})
                         + b"".join(frames.data(3, b"ping", fin=True)))
            parser = spdy.FrameReader()
            got: list[spdy.Frame] = []

            def data(stream_id: int) -> bytes:
                return b"".join(f.data for f in got
                                if isinstance(f, spdy.DataFrame) and f.stream_id == stream_id)

            async with asyncio.timeout(10):
                while data(3) != b"echo:pingbye":
                    chunk = await reader.read(4096)
                    assert chunk, got
                    got.extend(parser.feed(chunk))
        finally:
            writer.close()
        head, reader, writer = await _raw_upgrade(h.api.server, path, "v9.example")
        writer.close()
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        head, reader, writer = await _raw_upgrade(
            h.api.server, path.replace("/box/", "/nope/"), "portforward.k8s.io")
        writer.close()
        assert head.startswith(b"HTTP/1.1 404 Not Found\r\n")

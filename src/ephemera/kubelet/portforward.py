"""Port-forward on the kubelet: `GET /portForward/NS/POD` (upstream's
`pkg/kubelet/cri/streaming/portforward`, reached through the apiserver's `pods/portforward`).

Each forwarded connection is a TCP connection the kubelet opens to 127.0.0.1:PORT (then
[::1]:PORT) inside the pod sandbox's network namespace (`ephemera.kubelet.prober.netns`), as
containerd's CRI does; a pod without its own namespace (hostNetwork, the fake runtime) is
reached on the host's loopback. Two WebSocket subprotocols:

- `SPDY/3.1+portforward.k8s.io` (kubectl 1.31+, its default): the WebSocket's binary
  messages carry a SPDY/3.1 connection (`ephemera.kubelet.spdy`). For each local connection
  kubectl opens an `error` stream and a `data` stream with the same `requestID` and `port`
  headers; every stream is answered with a SYN_REPLY at once; when both of a pair are open
  the kubelet dials the port and copies bytes both ways over the data stream (a FIN from
  kubectl half-closes the pod connection); a failure is written on the error stream as
  upstream's `error forwarding port 80 to pod SANDBOX, uid : <the runtime's error>` (what
  kubectl prints after `an error occurred forwarding 8080 -> 80: `). PINGs are echoed.
- `v4.channel.k8s.io` and `channel.k8s.io` (the official Python client): the ports are the
  query's `port` values (the apiserver turns `ports` into them); port i gets data channel
  2i and error channel 2i+1, each starting with the port as two little-endian bytes; one
  connection per port for the life of the WebSocket, which closes when all have ended.

Refused before the upgrade: an unknown pod 404 `pod does not exist`; no `port` for the
channel protocols 400 `query parameter "port" is required`; a bad port 400 `unable to parse
"x" as a port: ...` or `port "0" must be > 0`; a request that is not a WebSocket upgrade
(plain SPDY) 400, since ephemera speaks port-forward over WebSockets only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import WSMsgType, web

from ephemera.aiotasks import cancel_and_wait
from ephemera.kubelet import spdy
from ephemera.kubelet.prober.netns import NetnsError, run_in_netns

__all__ = ["PortForwardError", "PortForwardHost", "PortForwardTarget", "dial_pod",
           "parse_ports", "serve_port_forward"]

log = logging.getLogger(__name__)

SPDY_WEBSOCKET = "SPDY/3.1+portforward.k8s.io"
V4 = "v4.channel.k8s.io"
V1 = "channel.k8s.io"
SERVED = (SPDY_WEBSOCKET, V4, V1)
DIAL_TIMEOUT = 10.0
READ_CHUNK = 32 * 1024
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class PortForwardError(Exception):
    """A port-forward refused before the upgrade: the HTTP code and upstream's text."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class PortForwardTarget:
    """The pod as the runtime knows it: its sandbox and network namespace ("": host)."""

    sandbox_id: str
    netns: str


class PortForwardHost(Protocol):
    async def port_forward_target(self, namespace: str, pod: str) -> PortForwardTarget:
        """The pod's sandbox (PortForwardError when the pod is not here)."""
        ...


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def _go_dial_error(network: str, address: str, err: OSError) -> str:
    if isinstance(err, TimeoutError):
        return f"dial {network} {address}: i/o timeout"
    text = os.strerror(err.errno).lower() if err.errno else str(err)
    return f"dial {network} {address}: connect: {text}"


def _connect(port: int) -> socket.socket:
    """127.0.0.1:PORT, else [::1]:PORT, in the calling thread's namespace; OSError with
    containerd's text when neither answers."""
    errors: list[str] = []
    for family, network, host, shown in ((socket.AF_INET, "tcp4", "127.0.0.1", "127.0.0.1"),
                                         (socket.AF_INET6, "tcp6", "::1", "[::1]")):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(DIAL_TIMEOUT)
        try:
            sock.connect((host, port))
        except OSError as err:
            sock.close()
            errors.append(_go_dial_error(network, f"{shown}:{port}", err))
            continue
        sock.setblocking(False)
        return sock
    raise OSError(f"IPv4: {errors[0]} IPv6 {errors[1]} ")


async def dial_pod(target: PortForwardTarget, port: int) -> Streams:
    """A connection to the pod's `port`; OSError with the runtime's text."""
    try:
        sock = await run_in_netns(target.netns, lambda: _connect(port))
    except NetnsError as err:
        raise OSError(f"failed to execute portforward in network namespace "
                      f'"{target.netns}": {err}') from None
    except OSError as err:
        raise OSError(f'failed to execute portforward in network namespace "{target.netns}": '
                      f'failed to connect to localhost:{port} inside namespace '
                      f'"{target.sandbox_id}", {err}') from None
    return await asyncio.open_connection(sock=sock, limit=READ_CHUNK * 2)


def forward_error(port: int, target: PortForwardTarget, err: BaseException) -> str:
    """The kubelet's message on the error stream (a CRI runtime's pod is its sandbox id)."""
    return f"error forwarding port {port} to pod {target.sandbox_id}, uid : {err}"


def parse_ports(values: list[str]) -> list[int]:
    """The ports of the channel protocols' `port` query values (each may list several)."""
    if not values:
        raise PortForwardError('query parameter "port" is required')
    ports: list[int] = []
    for value in values:
        for text in value.split(","):
            try:
                port = int(text)
                if not 0 <= port <= 0xFFFF:
                    raise ValueError
            except ValueError:
                raise PortForwardError(
                    f'unable to parse "{text}" as a port: strconv.ParseUint: parsing '
                    f'"{text}": invalid syntax') from None
            if port == 0:
                raise PortForwardError(f'port "{text}" must be > 0')
            ports.append(port)
    return ports


async def _copy_out(reader: asyncio.StreamReader,
                    send: Callable[[bytes], Awaitable[None]]) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while chunk := await reader.read(READ_CHUNK):
            await send(chunk)


# -- SPDY over WebSocket -------------------------------------------------------------------


class _SpdySession:
    def __init__(self, ws: web.WebSocketResponse, target: PortForwardTarget) -> None:
        self.ws = ws
        self.target = target
        self.reader = spdy.FrameReader()
        self.writer = spdy.FrameWriter()
        self.lock = asyncio.Lock()
        self.pending: dict[str, dict[str, int]] = {}  # requestID -> streamtype -> stream id
        self.sockets: dict[int, asyncio.StreamWriter] = {}  # data stream id -> pod socket
        self.early: dict[int, list[bytes | None]] = {}  # data before the pod answered
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.ports: dict[int, int] = {}

    async def send(self, encode: Callable[[], bytes | list[bytes]]) -> None:
        """Encode and send under one lock: header compression state is in send order."""
        async with self.lock:
            frames = encode()
            for frame in frames if isinstance(frames, list) else [frames]:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await self.ws.send_bytes(frame)

    async def run(self) -> None:
        try:
            async for message in self.ws:
                if message.type != WSMsgType.BINARY:
                    continue
                try:
                    frames = self.reader.feed(message.data)
                except spdy.SpdyError as err:
                    log.debug("port-forward: %s", err)
                    await self.send(lambda: self.writer.goaway(0, 1))
                    return
                for frame in frames:
                    if await self.handle(frame):
                        return
        finally:
            await cancel_and_wait(*self.tasks.values())

    async def handle(self, frame: spdy.Frame) -> bool:
        """Act on one frame; True when the connection is over."""
        if isinstance(frame, spdy.DataFrame):
            await self._data(frame)
            return False
        if frame.type == spdy.TYPE_SYN_STREAM:
            await self._syn_stream(frame)
        elif frame.type == spdy.TYPE_PING:
            await self.send(lambda: self.writer.ping(frame.ping_id))
        elif frame.type == spdy.TYPE_RST_STREAM:
            task = self.tasks.get(frame.stream_id)
            if task is not None:
                task.cancel()
        elif frame.type == spdy.TYPE_GOAWAY:
            return True
        return False

    async def _syn_stream(self, frame: spdy.ControlFrame) -> None:
        sid = frame.stream_id
        await self.send(lambda: self.writer.syn_reply(sid))
        headers = frame.headers
        kind = (headers.get("streamtype") or [""])[0]
        request_id = (headers.get("requestid") or [str(sid)])[0]
        try:
            port = int((headers.get("port") or [""])[0])
        except ValueError:
            await self.send(lambda: self.writer.rst_stream(sid, spdy.RST_PROTOCOL_ERROR))
            return
        pair = self.pending.setdefault(request_id, {})
        pair[kind] = sid
        if kind == "data":
            self.early[sid] = []
        if "data" in pair and "error" in pair:
            del self.pending[request_id]
            data_id, error_id = pair["data"], pair["error"]
            self.ports[data_id] = port
            self.tasks[data_id] = asyncio.ensure_future(self._forward(data_id, error_id, port))

    async def _data(self, frame: spdy.DataFrame) -> None:
        sid = frame.stream_id
        payload: list[bytes | None] = [frame.data] if frame.data else []
        if frame.flags & spdy.DATA_FLAG_FIN:
            payload.append(None)
        sock = self.sockets.get(sid)
        if sock is None:
            if sid in self.early:
                self.early[sid].extend(payload)
            return
        await self._to_pod(sock, payload)

    @staticmethod
    async def _to_pod(sock: asyncio.StreamWriter, payload: list[bytes | None]) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            for chunk in payload:
                if chunk is None:
                    if sock.can_write_eof():
                        sock.write_eof()
                else:
                    sock.write(chunk)
                    await sock.drain()

    async def _forward(self, data_id: int, error_id: int, port: int) -> None:
        try:
            try:
                reader, sock = await dial_pod(self.target, port)
            except OSError as err:
                message = forward_error(port, self.target, err).encode()
                log.info("port-forward: %s", message.decode())
                await self.send(lambda: self.writer.data(error_id, message, fin=True))
                await self.send(lambda: self.writer.data(data_id, b"", fin=True))
                return
            self.sockets[data_id] = sock
            try:
                await self._to_pod(sock, self.early.pop(data_id, []))

                async def out(chunk: bytes) -> None:
                    await self.send(lambda: self.writer.data(data_id, chunk))

                await _copy_out(reader, out)
            finally:
                self.sockets.pop(data_id, None)
                sock.close()
            await self.send(lambda: self.writer.data(error_id, b"", fin=True))
            await self.send(lambda: self.writer.data(data_id, b"", fin=True))
        finally:
            self.early.pop(data_id, None)
            self.tasks.pop(data_id, None)


# -- the channel protocols (v4.channel.k8s.io) ---------------------------------------------


async def _serve_channels(ws: web.WebSocketResponse, target: PortForwardTarget,
                          ports: list[int]) -> None:
    lock = asyncio.Lock()

    async def send(channel: int, payload: bytes) -> None:
        async with lock:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.send_bytes(bytes((channel,)) + payload)

    for index, port in enumerate(ports):
        prefix = struct.pack("<H", port)
        await send(2 * index, prefix)
        await send(2 * index + 1, prefix)
    loop = asyncio.get_running_loop()
    # Each port's connection once dialed (None when the dial failed or it has ended): data
    # the client sends meanwhile waits for it.
    sockets: dict[int, asyncio.Future[asyncio.StreamWriter | None]] = {
        index: loop.create_future() for index in range(len(ports))}

    async def forward(index: int, port: int) -> None:
        try:
            reader, sock = await dial_pod(target, port)
        except OSError as err:
            sockets[index].set_result(None)
            await send(2 * index + 1, forward_error(port, target, err).encode())
            return
        sockets[index].set_result(sock)
        try:
            await _copy_out(reader, lambda chunk: send(2 * index, chunk))
        finally:
            sock.close()

    forwards = asyncio.ensure_future(asyncio.gather(
        *(forward(i, p) for i, p in enumerate(ports)), return_exceptions=True))

    async def read_client() -> None:
        async for message in ws:
            if message.type != WSMsgType.BINARY or not message.data:
                continue
            channel, payload = message.data[0], message.data[1:]
            waiting = sockets.get(channel // 2)
            if channel % 2 != 0 or waiting is None or not payload:
                continue
            sock = await waiting
            if sock is not None and not sock.is_closing():
                with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                    sock.write(payload)
                    await sock.drain()

    reader_task = asyncio.ensure_future(read_client())
    try:
        either: set[asyncio.Future[Any]] = {forwards, reader_task}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (forwards, reader_task):
            await cancel_and_wait(task)
        for waiting in sockets.values():
            done = waiting.result() if waiting.done() else None
            if done is not None:
                done.close()
            waiting.cancel()


async def serve_port_forward(request: web.Request, host: PortForwardHost) -> web.StreamResponse:
    """`/portForward/NS/POD`."""
    namespace = request.match_info["namespace"]
    pod = request.match_info["pod"]
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
               if p.strip()]
    chosen = next((p for p in offered if p in SERVED), V1 if not offered else None)
    try:
        target = await host.port_forward_target(namespace, pod)
        ports = [] if chosen == SPDY_WEBSOCKET else parse_ports(request.query.getall("port", []))
    except PortForwardError as err:
        return web.Response(status=err.code, text=err.message)
    ws = web.WebSocketResponse(protocols=SERVED, autoping=True, max_msg_size=MAX_MESSAGE_BYTES)
    if not ws.can_prepare(request).ok:
        return web.Response(status=400, text="ephemera serves port-forward over WebSocket "
                                             f"only (subprotocols {', '.join(SERVED)})")
    if chosen is None:
        return web.Response(
            status=400, text=f"unable to upgrade: unable to negotiate protocol: requested "
                             f"protocol(s) are not supported: [{' '.join(offered)}]; supports "
                             f"[{' '.join(SERVED)}]")
    await ws.prepare(request)
    try:
        if chosen == SPDY_WEBSOCKET:
            await _SpdySession(ws, target).run()
        else:
            await _serve_channels(ws, target, ports)
    finally:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.close()
    return ws

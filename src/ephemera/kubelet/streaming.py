"""exec and attach on the kubelet: the Kubernetes WebSocket channel protocols and the bridge
between a WebSocket and a runtime `ExecSession` (upstream's
`pkg/kubelet/cri/streaming/remotecommand` with apimachinery's `wsstream`).

Routes (served by `ephemera.kubelet.server`, reached through the apiserver's `pods/exec` and
`pods/attach`): `GET|POST /exec/NS/POD/CONTAINER?command=..&command=..&input=1&output=1&
error=1&tty=1` and `GET|POST /attach/NS/POD/CONTAINER?...` (the same without `command`).
The stream flags are upstream's kubelet names (`input`, `output`, `error`, `tty`; what the
apiserver sends); `stdin`, `stdout`, `stderr` are accepted too. A flag is on when it is `1`
or `true`. `tty` drops `stderr`, as upstream.

Before the upgrade, as upstream's kubelet: no stream asked for is a 400 `you must specify at
least 1 of stdin, stdout, stderr`; an unknown pod a 404 `pod does not exist`; a container
that is not running a 500 `container not found ("c")`; a request that is not a WebSocket
upgrade (SPDY) a 400, since ephemera speaks only WebSocket; client-offered subprotocols none
of which is served a 400.

Subprotocols (the client's first one that is served wins; no offer means `channel.k8s.io`):
- `v5.channel.k8s.io`: binary frames, the first byte the channel (0 stdin, 1 stdout,
  2 stderr, 3 error, 4 resize); a client frame `[255, channel]` closes that channel (stdin:
  EOF to the process).
- `v4.channel.k8s.io`, `v4.base64.channel.k8s.io`: the same without the close signal.
- `channel.k8s.io`, `base64.channel.k8s.io`: the error channel carries only a failure's
  message, as text, instead of a `Status`.
The base64 variants send text frames: the channel as an ASCII digit, then the payload in
base64.

After the upgrade the kubelet sends an empty frame on the first stream it writes (stdout,
else stderr, else error), as upstream, relays stdin (channel 0) and terminal sizes (channel
4, JSON `{"Width": w, "Height": h}`) to the session and its output to channels 1 and 2; when
the output has ended and the process has exited it writes the outcome on channel 3 and
closes the WebSocket normally. The outcome (v4/v5) is a `Status` without kind: `{"metadata":
{}, "status": "Success"}`, or for exec a non-zero exit `Failure` with reason
`NonZeroExitCode` and `details.causes: [{"reason": "ExitCode", "message": "<n>"}]` (kubectl
exits with n), or an `InternalError` when the runtime could not exec or attach. Attach
reports `Success` when the container's output ends, as upstream. A client that goes away
ends an exec (the process is killed) or detaches an attach (the container keeps running).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import WSMsgType, web

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.goformat import go_error_text
from ephemera.kubelet.podutil import LABEL_CONTAINER_NAME, LABEL_POD_UID
from ephemera.kubelet.runtime.base import (
    ContainerState,
    ExecSession,
    RuntimeError_,
    RuntimeService,
)

__all__ = [
    "CHANNEL_ERROR",
    "CHANNEL_RESIZE",
    "CHANNEL_STDERR",
    "CHANNEL_STDIN",
    "CHANNEL_STDOUT",
    "CLOSE_SIGNAL",
    "PROTOCOLS",
    "SERVED_PROTOCOLS",
    "ChannelProtocol",
    "StreamHost",
    "StreamLookupError",
    "StreamOptions",
    "bridge_session",
    "exit_status",
    "internal_error_status",
    "negotiate",
    "parse_resize",
    "parse_stream_options",
    "running_container_id",
    "serve_attach",
    "serve_exec",
    "success_status",
]

log = logging.getLogger(__name__)

CHANNEL_STDIN = 0
CHANNEL_STDOUT = 1
CHANNEL_STDERR = 2
CHANNEL_ERROR = 3
CHANNEL_RESIZE = 4
CLOSE_SIGNAL = 255  # v5: [255, channel] closes a channel

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
V4_BASE64 = "v4.base64.channel.k8s.io"
V1 = "channel.k8s.io"
V1_BASE64 = "base64.channel.k8s.io"

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
SPDY_REFUSED = ("ephemera serves exec and attach over WebSocket only (subprotocols "
                f"{V5}, {V4}); SPDY is not supported")


@dataclass(frozen=True)
class ChannelProtocol:
    """One subprotocol: how frames carry channels, and what the error channel says."""

    name: str
    version: int  # 1 (channel.k8s.io), 4 or 5
    base64: bool = False

    @property
    def close_signal(self) -> bool:
        """Whether the client may close single channels (`[255, channel]`)."""
        return self.version >= 5

    def encode(self, channel: int, payload: bytes) -> bytes | str:
        """A frame carrying `payload` on `channel`: bytes for a binary frame, str for text."""
        if self.base64:
            return chr(ord("0") + channel) + base64.b64encode(payload).decode("ascii")
        return bytes((channel,)) + payload

    def decode(self, frame: bytes | str) -> tuple[int, bytes]:
        """(channel, payload) of a received frame; ValueError for an empty or bad one."""
        if isinstance(frame, str):
            if not frame:
                raise ValueError("empty frame")
            if self.base64:
                channel = ord(frame[0]) - ord("0")
                try:
                    return channel, base64.b64decode(frame[1:], validate=True)
                except binascii.Error as err:
                    raise ValueError(f"bad base64 payload: {err}") from None
            raw = frame.encode()
        else:
            raw = bytes(frame)
        if not raw:
            raise ValueError("empty frame")
        return raw[0], raw[1:]

    def error_payload(self, status: Mapping[str, Any]) -> bytes | None:
        """What the error channel carries for this outcome; None: nothing (v1 success)."""
        if self.version >= 4:
            return json.dumps(status, separators=(",", ":")).encode()
        if status.get("status") == "Success":
            return None
        return str(status.get("message", "")).encode()


PROTOCOLS: dict[str, ChannelProtocol] = {
    p.name: p for p in (
        ChannelProtocol(V5, 5),
        ChannelProtocol(V4, 4),
        ChannelProtocol(V4_BASE64, 4, base64=True),
        ChannelProtocol(V1, 1),
        ChannelProtocol(V1_BASE64, 1, base64=True),
    )
}
SERVED_PROTOCOLS: tuple[str, ...] = tuple(PROTOCOLS)


def offered_protocols(header: str | None) -> list[str]:
    """The subprotocols a `Sec-WebSocket-Protocol` header offers, in order."""
    return [p.strip() for p in (header or "").split(",") if p.strip()]


def negotiate(offered: Sequence[str]) -> ChannelProtocol | None:
    """The client's first offered protocol that is served; `channel.k8s.io` when it offers
    none; None when it offers only unknown ones."""
    if not offered:
        return PROTOCOLS[V1]
    for name in offered:
        if name in PROTOCOLS:
            return PROTOCOLS[name]
    return None


# -- options ------------------------------------------------------------------------------------


class StreamLookupError(Exception):
    """An exec or attach refused before the upgrade: the HTTP code and upstream's text."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class StreamOptions:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool
    command: tuple[str, ...] = ()


def _flag(query: Mapping[str, str], *names: str) -> bool:
    return any(query.get(n, "").lower() in ("1", "true") for n in names)


def parse_stream_options(query: Any, *, exec_: bool) -> StreamOptions:
    """The kubelet's view of an exec or attach request's query (a MultiDict or a mapping
    whose `getall` gives repeated values)."""
    tty = _flag(query, "tty")
    options = StreamOptions(
        stdin=_flag(query, "input", "stdin"),
        stdout=_flag(query, "output", "stdout"),
        stderr=_flag(query, "error", "stderr") and not tty,
        tty=tty,
        command=tuple(query.getall("command", [])) if exec_ else (),
    )
    if not (options.stdin or options.stdout or options.stderr):
        raise StreamLookupError("you must specify at least 1 of stdin, stdout, stderr")
    if exec_ and not options.command:
        raise StreamLookupError("cmd must not be empty")
    return options


def parse_resize(payload: bytes) -> tuple[int, int] | None:
    """(cols, rows) of a resize message `{"Width": w, "Height": h}`; None if malformed."""
    try:
        size = json.loads(payload)
        cols, rows = int(size["Width"]), int(size["Height"])
    except (ValueError, KeyError, TypeError):
        return None
    if cols < 0 or rows < 0 or cols > 0xFFFF or rows > 0xFFFF:
        return None
    return cols, rows


# -- outcomes (metav1.Status as the kubelet marshals it: no kind, no apiVersion) -------------


def success_status() -> dict[str, Any]:
    return {"metadata": {}, "status": "Success"}


def _go_list(items: Sequence[str]) -> str:
    return "[" + " ".join(items) + "]"


def exit_status(code: int, argv: Sequence[str]) -> dict[str, Any]:
    """The outcome of an exec'd process that exited with `code` (a signal number as a
    negative code becomes 128 + signal, as runtimes report it)."""
    if code < 0:
        code = 128 - code
    if code == 0:
        return success_status()
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command "
                   f"{_go_list(argv)}, exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def internal_error_status(message: str) -> dict[str, Any]:
    """apimachinery's `NewInternalError(err).Status()`."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {message}",
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    }


# -- the bridge ---------------------------------------------------------------------------------


class _Sender:
    """Serialized writes to the WebSocket; after the client is gone, writes are dropped."""

    def __init__(self, ws: web.WebSocketResponse, protocol: ChannelProtocol) -> None:
        self.ws = ws
        self.protocol = protocol
        self.lock = asyncio.Lock()
        self.gone = False

    async def send(self, channel: int, payload: bytes) -> None:
        if self.gone or self.ws.closed:
            self.gone = True
            return
        frame = self.protocol.encode(channel, payload)
        try:
            async with self.lock:
                if isinstance(frame, str):
                    await self.ws.send_str(frame)
                else:
                    await self.ws.send_bytes(frame)
        except (ConnectionError, RuntimeError):
            self.gone = True


async def _pump(stream: AsyncIterator[bytes] | None, channel: int, forward: bool,
                sender: _Sender) -> None:
    """Copy one output stream to its channel (or drain it when the client did not ask)."""
    if stream is None:
        return
    async for chunk in stream:
        if forward and chunk:
            await sender.send(channel, chunk)


async def bridge_session(ws: web.WebSocketResponse, protocol: ChannelProtocol,
                         options: StreamOptions, session: ExecSession,
                         outcome: Callable[[int | Exception], dict[str, Any]]) -> int | None:
    """Relay between an upgraded WebSocket and a session until the session's output has
    ended and it has exited, then write `outcome(exit code)` (or `outcome(the error)` when
    waiting failed) on the error channel and close the WebSocket. Returns the exit code;
    None when the client went away first (the session is then closed: an exec'd process
    killed, an attach detached) or waiting failed."""
    sender = _Sender(ws, protocol)

    async def read_client() -> None:
        async for message in ws:
            if message.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                continue
            try:
                channel, payload = protocol.decode(message.data)
            except ValueError:
                continue
            try:
                if channel == CLOSE_SIGNAL and protocol.close_signal:
                    if payload[:1] == bytes((CHANNEL_STDIN,)) and options.stdin:
                        await session.write_stdin(b"")
                elif channel == CHANNEL_STDIN:
                    if options.stdin and payload:
                        await session.write_stdin(payload)
                elif channel == CHANNEL_RESIZE:
                    size = parse_resize(payload)
                    if size is not None:
                        await session.resize(*size)
            except (OSError, RuntimeError_) as err:
                log.debug("exec/attach input: %s", err)

    output = asyncio.ensure_future(asyncio.gather(
        _pump(session.stdout, CHANNEL_STDOUT, options.stdout, sender),
        _pump(session.stderr, CHANNEL_STDERR, options.stderr, sender)))
    reader = asyncio.ensure_future(read_client())
    waiter: asyncio.Future[int] | None = None
    try:
        first: set[asyncio.Future[Any]] = {output, reader}
        await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        if output.done() and not reader.done():
            waiter = asyncio.ensure_future(session.wait())
            either: set[asyncio.Future[Any]] = {waiter, reader}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if waiter is not None and waiter.done():
            code: int | None = None
            try:
                code = waiter.result()
                status = outcome(code)
            except (OSError, RuntimeError_) as err:
                status = outcome(err)
            payload = protocol.error_payload(status)
            if payload is not None:
                await sender.send(CHANNEL_ERROR, payload)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.close()
            return code
        return None  # the client went away before the session ended
    finally:
        if waiter is not None and not waiter.done():
            waiter.cancel()
        with contextlib.suppress(Exception):
            await session.close()
        if not output.done():
            try:
                async with asyncio.timeout(10):
                    await asyncio.shield(output)
            except Exception:  # the output no one will read any more
                output.cancel()
        if output.done() and not output.cancelled():
            output.exception()  # retrieved
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.close()
        await cancel_and_wait(reader)


# -- the kubelet's handlers ---------------------------------------------------------------------


class StreamHost(Protocol):
    """What the handlers ask the kubelet."""

    runtime: RuntimeService

    async def stream_container(self, namespace: str, pod: str, container: str) -> str:
        """The runtime id of the pod's running container (StreamLookupError if none)."""
        ...


async def running_container_id(runtime: RuntimeService, pod: Mapping[str, Any] | None,
                               container: str) -> str:
    """The id of the newest running instance of `container` in `pod` (as upstream's
    `findContainer` over running containers: `pod does not exist` 404, `container not found
    ("c")` 500)."""
    if pod is None:
        raise StreamLookupError("pod does not exist", 404)
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    running = [c for c in await runtime.list_containers()
               if c.labels.get(LABEL_POD_UID) == uid
               and c.labels.get(LABEL_CONTAINER_NAME) == container
               and c.state == ContainerState.RUNNING]
    if not running:
        raise StreamLookupError(f'container not found ("{container}")', 500)
    return max(running, key=lambda c: (c.attempt, c.created_at)).id


async def serve_exec(request: web.Request, host: StreamHost) -> web.StreamResponse:
    """`/exec/NS/POD/CONTAINER`."""
    return await _serve(request, host, exec_=True)


async def serve_attach(request: web.Request, host: StreamHost) -> web.StreamResponse:
    """`/attach/NS/POD/CONTAINER`."""
    return await _serve(request, host, exec_=False)


async def _serve(request: web.Request, host: StreamHost, *, exec_: bool) -> web.StreamResponse:
    namespace = request.match_info["namespace"]
    pod = request.match_info["pod"]
    container = request.match_info["container"]
    try:
        options = parse_stream_options(request.query, exec_=exec_)
        container_id = await host.stream_container(namespace, pod, container)
    except StreamLookupError as err:
        return web.Response(status=err.code, text=err.message)
    ws = web.WebSocketResponse(protocols=SERVED_PROTOCOLS, autoping=True,
                               max_msg_size=MAX_MESSAGE_BYTES)
    if not ws.can_prepare(request).ok:
        return web.Response(status=400, text=SPDY_REFUSED)
    offered = offered_protocols(request.headers.get("Sec-WebSocket-Protocol"))
    protocol = negotiate(offered)
    if protocol is None:
        return web.Response(
            status=400, text=f"unable to upgrade: unable to negotiate protocol: requested "
                             f"protocol(s) are not supported: {_go_list(offered)}; supports "
                             f"{_go_list(list(SERVED_PROTOCOLS))}")
    await ws.prepare(request)
    # Tell the client the streams are up: an empty frame on the first one it reads.
    first = (CHANNEL_STDOUT if options.stdout else CHANNEL_STDERR if options.stderr
             else CHANNEL_ERROR)
    with contextlib.suppress(ConnectionError, RuntimeError):
        frame = protocol.encode(first, b"")
        await (ws.send_str(frame) if isinstance(frame, str) else ws.send_bytes(frame))
    argv = list(options.command)
    try:
        if exec_:
            session = await host.runtime.exec(container_id, argv, tty=options.tty,
                                              stdin=options.stdin)
        else:
            session = await host.runtime.attach(container_id)
    except (RuntimeError_, OSError) as err:
        what = "executing command in" if exec_ else "attaching to"
        payload = protocol.error_payload(
            internal_error_status(f"error {what} container: {go_error_text(err)}"))
        with contextlib.suppress(ConnectionError, RuntimeError):
            if payload is not None:
                frame = protocol.encode(CHANNEL_ERROR, payload)
                await (ws.send_str(frame) if isinstance(frame, str) else ws.send_bytes(frame))
            await ws.close()
        return ws

    def outcome(result: int | Exception) -> dict[str, Any]:
        if not exec_:
            return success_status()  # as upstream: attach ends with Success
        if isinstance(result, Exception):
            return internal_error_status(
                f"error executing command in container: {go_error_text(result)}")
        return exit_status(result, argv)

    code = await bridge_session(ws, protocol, options, session, outcome)
    log.debug("%s %s/%s/%s ended: %s", "exec" if exec_ else "attach", namespace, pod,
              container, "client left" if code is None else f"exit code {code}")
    return ws

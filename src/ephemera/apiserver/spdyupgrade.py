"""kubectl's plain SPDY/3.1 port-forward (`Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version:
portforward.k8s.io`), served by turning it into the WebSocket tunnel the kubelet speaks.

kubectl 1.31+ first asks for `SPDY/3.1+portforward.k8s.io` over a WebSocket and falls back to
this older upgrade when that is refused (an apiserver or proxy that cannot upgrade to a
WebSocket); older kubectls and other clients ask for it directly. Upstream's apiserver relays
the SPDY upgrade to the kubelet; ephemera's kubelet serves port-forward over WebSockets only
(`ephemera.kubelet.portforward`), so the apiserver opens the WebSocket tunnel to the kubelet
and carries the client's SPDY byte stream in its binary messages, unchanged, both ways: the
tunnel is the same SPDY/3.1 connection, only the carrier differs.

- The upgrade is checked as upstream's `httpstream.Handshake` and SPDY `UpgradeResponse`
  do: `X-Stream-Protocol-Version` values must include `portforward.k8s.io` (or be absent),
  else 403 `unable to upgrade: unable to negotiate protocol: client supports [...], server
  supports [portforward.k8s.io]`; the answer is 101 with `Connection: Upgrade`, `Upgrade:
  SPDY/3.1` and the chosen protocol. The kubelet's refusal (a pod gone, ...) is relayed as
  it answered, before any 101.
- aiohttp parses only `websocket` upgrades as upgrades; for this one the handler answers 101
  and then installs itself as the connection's payload reader (as aiohttp's own WebSocket
  response does), so every later byte of the connection is the SPDY stream. Reading pauses
  while too much of it waits to be sent on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp import web

from ephemera.aiotasks import cancel_and_wait

__all__ = ["PORT_FORWARD_PROTOCOL", "is_spdy_upgrade", "negotiate", "tunnel_spdy"]

PORT_FORWARD_PROTOCOL = "portforward.k8s.io"
SPDY_WEBSOCKET = "SPDY/3.1+portforward.k8s.io"
PAUSE_AT = 64  # chunks waiting for the kubelet before the client's socket stops being read


def is_spdy_upgrade(request: web.Request) -> bool:
    """A plain `Upgrade: SPDY/3.1` request (upstream's check, case-insensitive)."""
    connection = [t.strip().lower() for t in request.headers.get("Connection", "").split(",")]
    return ("upgrade" in connection
            and request.headers.get("Upgrade", "").strip().lower() == "spdy/3.1")


def negotiate(request: web.Request) -> str | None:
    """The `X-Stream-Protocol-Version` to answer ('' when the client offers none), None when
    none of the client's is served."""
    offered = [v.strip() for value in request.headers.getall("X-Stream-Protocol-Version", [])
               for v in value.split(",") if v.strip()]
    if not offered:
        return ""
    return PORT_FORWARD_PROTOCOL if PORT_FORWARD_PROTOCOL in offered else None


def refusal(request: web.Request) -> web.Response:
    """Upstream's 403 when no offered protocol is served."""
    offered = [v.strip() for value in request.headers.getall("X-Stream-Protocol-Version", [])
               for v in value.split(",") if v.strip()]
    return web.Response(status=403, content_type="text/plain", text=(
        f"unable to upgrade: unable to negotiate protocol: client supports "
        f"[{' '.join(offered)}], server supports [{PORT_FORWARD_PROTOCOL}]"))


class _Feed:
    """What aiohttp's connection feeds the bytes after the 101 to (its payload-parser
    interface: `feed_data` returns (eof, tail), `feed_eof`)."""

    def __init__(self, transport: asyncio.Transport | None) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.transport = transport
        self.paused = False

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.queue.put_nowait(bytes(data))
        if self.transport is not None and not self.paused and self.queue.qsize() > PAUSE_AT:
            self.paused = True
            self.transport.pause_reading()
        return False, b""

    def feed_eof(self) -> None:
        self.queue.put_nowait(None)

    async def read(self) -> bytes | None:
        chunk = await self.queue.get()
        if self.paused and self.queue.qsize() < PAUSE_AT // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return chunk


async def tunnel_spdy(request: web.Request, upstream: aiohttp.ClientWebSocketResponse,
                      protocol: str) -> web.StreamResponse:
    """Answer the client's upgrade with 101 and carry its byte stream in `upstream`'s binary
    messages both ways until either side ends."""
    headers = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
    if protocol:
        headers["X-Stream-Protocol-Version"] = protocol
    response = web.StreamResponse(status=101, headers=headers)
    writer = await response.prepare(request)
    assert writer is not None
    await writer.drain()  # the 101 goes out before any byte of the stream
    transport = request.transport
    feed = _Feed(transport if isinstance(transport, asyncio.Transport) else None)
    conn: Any = request.protocol
    conn.set_parser(feed)
    conn.keep_alive(False)

    async def up() -> None:
        while (chunk := await feed.read()) is not None:
            await upstream.send_bytes(chunk)

    async def down() -> None:
        async for message in upstream:
            if message.type != aiohttp.WSMsgType.BINARY or transport is None \
                    or transport.is_closing():
                break
            transport.write(message.data)
            await writer.drain()

    tasks = {asyncio.ensure_future(up()), asyncio.ensure_future(down())}
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait(*tasks)
        await upstream.close()
        if transport is not None and not transport.is_closing():
            transport.close()
    return response

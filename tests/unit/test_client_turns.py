"""`ApiClient`'s requests in flight: at most `max_requests` at once, the rest waiting their
turn in order, and a request's deadline counted from its turn, not from the call."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestServer

from ephemera.client import ApiClient
from ephemera.client.kubeconfig import ClientConfig


async def test_requests_waiting_for_a_turn_do_not_spend_their_deadline() -> None:
    in_flight = {"now": 0, "most": 0}
    order: list[str] = []

    async def slow(request: web.Request) -> web.Response:
        in_flight["now"] += 1
        in_flight["most"] = max(in_flight["most"], in_flight["now"])
        order.append(request.match_info["name"])
        await asyncio.sleep(0.4)
        in_flight["now"] -= 1
        return web.json_response({"name": request.match_info["name"]})

    app = web.Application()
    app.router.add_get("/objects/{name}", slow)
    async with TestServer(app) as server:
        config = ClientConfig(server=str(server.make_url("")).rstrip("/"))
        # Six requests of 0.4 s, two at a time, each with a 1 s deadline: the last two get
        # their turn after 0.8 s and are answered at 1.2 s. Counted from the call they
        # would have timed out (aiohttp's pool wait counts in its deadline).
        async with ApiClient(config, request_timeout=1.0, max_requests=2) as api:
            names = [f"o{i}" for i in range(6)]
            answers = await asyncio.gather(*(api.get(f"/objects/{n}") for n in names))
    assert [a["name"] for a in answers] == names
    assert in_flight["most"] == 2
    assert order == names  # turns are given in the order the requests were made


async def test_watches_take_no_turn() -> None:
    """A client's open watches do not hold back its requests (each watch has a connection
    of its own for its life, as client-go's)."""
    release = asyncio.Event()

    async def watch(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","object":{"kind":"Pod"}}\n')
        await release.wait()
        return response

    async def get(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Pod", "metadata": {"name": "p"}})

    app = web.Application()
    app.router.add_get("/watch/{n}", watch)
    app.router.add_get("/pods/p", get)
    async with TestServer(app) as server:
        config = ClientConfig(server=str(server.make_url("")).rstrip("/"))
        async with ApiClient(config, request_timeout=2.0, max_requests=1) as api:
            streams = [api.watch(f"/watch/{n}") for n in range(3)]
            firsts = [await stream.__anext__() for stream in streams]
            assert [e.type for e in firsts] == ["ADDED"] * 3
            # three watches open, one turn: the request still goes through at once (a
            # request waiting for a turn has no deadline yet: bound the wait here)
            async with asyncio.timeout(5):
                assert (await api.get("/pods/p"))["metadata"]["name"] == "p"
            release.set()
            for stream in streams:
                assert [e async for e in stream] == []  # each ends with its response

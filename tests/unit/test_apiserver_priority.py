"""The apiserver's priority filter (`ephemera.apiserver.priority`): node heartbeats (Lease and
Node writes by nodes, or by the admin identity the hollow nodes use) overtake a saturated
normal level; long-running requests take no seat; a full queue is upstream's 429; and the
API client sends a 429 with `Retry-After` again, as client-go does. In-process aiohttp apps
with handlers the test holds, no store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ephemera.api.errors import StatusError
from ephemera.apiserver.authn import ANONYMOUS, UserInfo
from ephemera.apiserver.authz.requestinfo import request_attributes
from ephemera.apiserver.priority import (
    Level,
    PriorityAndFairness,
    PriorityConfig,
    Rejected,
    Seats,
    classify,
)
from ephemera.apiserver.rest import USER
from ephemera.client import ApiClient, ClientConfig

NODE = UserInfo("system:node:n1", ("system:nodes", "system:authenticated"))
ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))
ALICE = UserInfo("alice", ("system:authenticated",))
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
PODS = "/api/v1/namespaces/default/pods"


def level(user: UserInfo, method: str, path: str, query: str = "") -> Level:
    params = dict(p.split("=", 1) for p in query.split("&") if p)
    return classify(request_attributes(user, method, path, params))


def test_node_heartbeats_are_node_high_for_nodes_and_the_admin_only() -> None:
    assert level(NODE, "PUT", LEASE) is Level.NODE_HIGH
    assert level(NODE, "PATCH", "/api/v1/nodes/n1/status") is Level.NODE_HIGH
    assert level(NODE, "GET", "/api/v1/nodes/n1") is Level.NODE_HIGH
    assert level(ADMIN, "PUT", LEASE) is Level.NODE_HIGH
    assert level(ADMIN, "POST", "/api/v1/nodes") is Level.NODE_HIGH
    # other users' leases, and everything else the nodes or the admin do, are normal
    assert level(ALICE, "PUT", LEASE) is Level.NORMAL
    assert level(ANONYMOUS, "PUT", LEASE) is Level.NORMAL
    assert level(NODE, "PUT", PODS + "/p/status") is Level.NORMAL
    assert level(ADMIN, "POST", PODS) is Level.NORMAL
    assert level(ADMIN, "GET", "/version") is Level.NORMAL
    # without authentication every request acts as the admin
    attributes = request_attributes(ANONYMOUS, "PUT", LEASE, {})
    assert classify(attributes, authenticated=False) is Level.NODE_HIGH


def test_long_running_requests_take_no_seat() -> None:
    assert level(ALICE, "GET", PODS, "watch=true") is Level.EXEMPT
    assert level(ALICE, "GET", "/api/v1/watch/pods") is Level.EXEMPT
    for sub in ("log", "exec", "attach", "portforward", "proxy"):
        assert level(ALICE, "GET", f"{PODS}/p/{sub}") is Level.EXEMPT, sub
    assert level(ALICE, "GET", "/api/v1/nodes/n1/proxy/stats") is Level.EXEMPT
    assert level(ALICE, "GET", PODS) is Level.NORMAL
    for probe in ("/healthz", "/readyz", "/livez"):  # upstream's `probes` FlowSchema
        assert level(ALICE, "GET", probe) is Level.EXEMPT, probe
    assert level(ALICE, "GET", "/healthz/etcd") is Level.NORMAL
    assert level(ALICE, "GET", "/version") is Level.NORMAL


def test_seats_are_upstream_shares_of_the_flags_divided_among_workers() -> None:
    config = PriorityConfig()  # 400 + 200 = 600 seats: node-high 40/245, normal 20/245
    assert (config.seats(40), config.seats(20)) == (98, 49)
    assert PriorityConfig(workers=2).seats(20) == 25
    assert PriorityConfig(max_requests_inflight=1, max_mutating_requests_inflight=0).seats(
        20) == 1
    assert not PriorityConfig(max_requests_inflight=0,
                              max_mutating_requests_inflight=0).limited


async def test_a_full_queue_or_a_long_wait_is_rejected_and_seats_pass_in_order() -> None:
    seats = Seats(1, queue_limit=1, wait_limit=0.05)
    await seats.acquire()
    with pytest.raises(Rejected):  # queued, then out of time
        await seats.acquire()
    first = asyncio.ensure_future(seats.acquire())
    await asyncio.sleep(0)
    with pytest.raises(Rejected):  # the queue (1) is full
        await seats.acquire()
    seats.wait_limit = 10
    seats.release()  # the seat passes to the one in line
    await first
    assert (seats.executing, len(seats.waiting), seats.rejected) == (1, 0, 2)
    seats.release()
    assert seats.executing == 0


class Held:
    """Handlers that answer when the test lets them."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.entered = 0

    async def slow(self, request: web.Request) -> web.Response:
        if "watch" in request.query:  # a watch "stream" that ends at once
            return web.json_response({"watch": True})
        self.entered += 1
        await self.gate.wait()
        return web.json_response({"path": request.path})

    async def fast(self, request: web.Request) -> web.Response:
        return web.json_response({"path": request.path})


@web.middleware
async def user_from_header(request: web.Request, handler: Any) -> web.StreamResponse:
    request[USER] = {"node": NODE, "alice": ALICE}[request.headers["X-User"]]
    response: web.StreamResponse = await handler(request)
    return response


@pytest.fixture
async def served() -> AsyncIterator[tuple[TestClient[Any, Any], Held, PriorityAndFairness]]:
    held = Held()
    # one seat of each level
    priority = PriorityAndFairness(PriorityConfig(max_requests_inflight=1,
                                                  max_mutating_requests_inflight=0))
    app = web.Application(middlewares=[user_from_header, priority.middleware])
    app.router.add_route("PUT", LEASE, held.fast)
    app.router.add_route("GET", PODS, held.slow)
    async with TestClient(TestServer(app)) as client:
        yield client, held, priority


async def test_a_lease_write_overtakes_a_saturated_normal_level(
        served: tuple[TestClient[Any, Any], Held, PriorityAndFairness]) -> None:
    client, held, priority = served
    normal = priority.levels[Level.NORMAL]
    lists = [asyncio.ensure_future(client.get(PODS, headers={"X-User": "alice"}))
             for _ in range(3)]
    while held.entered < 1 or len(normal.waiting) < 2:
        await asyncio.sleep(0.005)
    assert held.entered == 1  # one seat: the other two wait in line
    resp = await client.put(LEASE, headers={"X-User": "node"})
    assert resp.status == 200
    assert not any(task.done() for task in lists)
    # a watch of the same user takes no seat either
    resp = await client.get(PODS + "?watch=true", headers={"X-User": "alice"})
    assert resp.status == 200 and await resp.json() == {"watch": True}
    # the same Lease write by a user who is not a node waits its turn behind the lists
    other = asyncio.ensure_future(client.put(LEASE, headers={"X-User": "alice"}))
    await asyncio.sleep(0.05)
    assert not other.done()
    held.gate.set()
    for resp in await asyncio.gather(*lists, other):
        assert resp.status == 200
    assert normal.executing == 0 and not normal.waiting


async def test_a_full_queue_is_upstreams_429(
        served: tuple[TestClient[Any, Any], Held, PriorityAndFairness]) -> None:
    client, held, priority = served
    priority.levels[Level.NORMAL].queue_limit = 0
    first = asyncio.ensure_future(client.get(PODS, headers={"X-User": "alice"}))
    while held.entered < 1:
        await asyncio.sleep(0.005)
    resp = await client.get(PODS, headers={"X-User": "alice"})
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "1"
    assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert await resp.text() == "Too many requests, please try again later.\n"
    held.gate.set()
    assert (await first).status == 200


async def test_the_client_sends_a_429_with_retry_after_again() -> None:
    answers = {"count": 0}
    refusals = {"/refused-twice": 2, "/refused-always": 100}

    async def handler(request: web.Request) -> web.Response:
        answers["count"] += 1
        if answers["count"] <= refusals[request.path]:
            return web.Response(status=429, text="Too many requests, please try again later.\n",
                                headers={"Retry-After": "0"})
        return web.json_response({"kind": "Pod", "n": answers["count"]})

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", handler)
    async with TestServer(app) as server:
        config = ClientConfig(server=str(server.make_url("")).rstrip("/"))
        async with ApiClient(config) as api:
            assert await api.create("/refused-twice", {"kind": "Pod"}) == {"kind": "Pod",
                                                                             "n": 3}
            answers["count"] = 0
            with pytest.raises(StatusError) as caught:
                await api.get("/refused-always")
            assert answers["count"] == 11  # the first try and client-go's 10 retries
            assert (caught.value.code, caught.value.reason) == (429, "TooManyRequests")
            assert caught.value.message == "Too many requests, please try again later."

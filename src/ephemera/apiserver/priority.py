"""Node heartbeats ahead of other work when the apiserver is saturated: the cheapest honest
piece of upstream's API Priority and Fairness (APF), as one aiohttp middleware.

Every request is classified once, after authentication (upstream's filter order:
authentication, audit, priority and fairness, authorization):

- **exempt** (no seat, never queued): long-running requests, as upstream's
  `BasicLongRunningRequestCheck` names them (verbs `watch` and `proxy`; subresources
  `attach`, `exec`, `proxy`, `log`, `portforward`), and a GET of `/healthz`, `/readyz` or
  `/livez` (upstream's `probes` FlowSchema: a saturated apiserver is not failed by its own
  probes);
- **node-high**: what upstream's `system-node-high` FlowSchema matches, any verb on `nodes`,
  `nodes/status` and `coordination.k8s.io` `leases`, by a user of the `system:nodes` group
  (a `system:node:NAME` user has it) or of `system:masters`. Upstream exempts
  `system:masters` from every limit; ephemera cannot, because under `ephemera up` and in
  bench/scale every component (the hollow nodes included) uses the admin kubeconfig, so
  exempting it would exempt everything. It gives the admin only the node-high part of
  what upstream exempts for it;
- **normal**: everything else (upstream's other levels, `system`, `leader-election`,
  `workload-high`, `workload-low`, `global-default`, `catch-all`, are one level here).

Each level has seats (requests executing their handlers at once) and one FIFO queue. A
request of a level whose seats are all taken waits in its level's queue; the high level
never waits for the normal one. A request finding its queue full, or still queued after
`wait_limit` seconds (upstream's request timeout / 4, 15 s), is refused as upstream's filter
refuses it: 429, `Retry-After: 1` (the value upstream's dropped-requests tracker starts at),
the plain-text body `Too many requests, please try again later.` Upstream also sends
`X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID` on every classified
response; ephemera serves no `flowcontrol.apiserver.k8s.io` objects whose UIDs these could
name, so it sends neither.

Seats: upstream's `--max-requests-inflight` (400) plus `--max-mutating-requests-inflight`
(200) make the server's concurrency limit (600 seats), shared among the priority levels in
proportion to their nominal concurrency shares (`node-high` 40, `global-default` 20, of 245
in all): 98 and 49 seats. ephemera gives its two levels those two shares, and divides them
among the apiserver's worker processes (each one event loop). A seat is cheap in Go (a
goroutine on any core) but not in one event loop, where every handler in flight interleaves
with all the others on one core: past a few dozen, more concurrency only stretches every
request's latency, the node heartbeats' included, which is what this module exists to stop.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import logging
import math
import time
from typing import Any

from aiohttp import web

from ephemera.apiserver.authz import Attributes
from ephemera.apiserver.authz.requestinfo import attributes_of
from ephemera.apiserver.metrics import QUEUE_WAIT
from ephemera.apiserver.rest import USER

log = logging.getLogger("ephemera.apiserver")

DEFAULT_MAX_REQUESTS_INFLIGHT = 400
DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT = 200
# Upstream's default nominal concurrency shares (the suggested PriorityLevelConfigurations).
NODE_HIGH_SHARES = 40
GLOBAL_DEFAULT_SHARES = 20
TOTAL_SHARES = 245  # exempt 0, system 30, node-high 40, leader-election 10,
# workload-high 40, workload-low 100, global-default 20, catch-all 5
# Upstream's queues a level holds times the length of each (node-high 64 x 50,
# global-default 128 x 50).
NODE_HIGH_QUEUE = 64 * 50
GLOBAL_DEFAULT_QUEUE = 128 * 50
DEFAULT_WAIT_LIMIT = 15.0  # upstream: the request timeout (60 s) / 4
RETRY_AFTER = "1"
REJECTION_LOG_INTERVAL = 60.0  # seconds between log lines about a level's refusals
TOO_MANY_REQUESTS = "Too many requests, please try again later."

LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/livez"})
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
NODE_HIGH_GROUPS = frozenset({"system:nodes", "system:masters"})
NODE_HIGH_RESOURCES = frozenset({("", "nodes"), ("coordination.k8s.io", "leases")})


class Level(enum.Enum):
    EXEMPT = "exempt"
    NODE_HIGH = "node-high"
    NORMAL = "normal"


# The FlowSchema each level is reported under in the metrics (`ephemera.apiserver.metrics`).
FLOW_SCHEMAS = {Level.NODE_HIGH: "system-node-high", Level.NORMAL: "normal"}


def classify(attributes: Attributes, *, authenticated: bool = True) -> Level:
    """The priority level of a request (see the module docstring). Without authentication
    (`authenticated` False: the apiserver has no authenticator, every request acts as an
    administrator) the user counts as `system:masters`."""
    if not attributes.resource_request:
        # upstream's `probes` FlowSchema: a GET of a health endpoint never waits
        probe = attributes.verb == "get" and attributes.path in PROBE_PATHS
        return Level.EXEMPT if probe else Level.NORMAL
    if (attributes.verb in LONG_RUNNING_VERBS
            or attributes.subresource in LONG_RUNNING_SUBRESOURCES):
        return Level.EXEMPT
    if ((attributes.api_group, attributes.resource) in NODE_HIGH_RESOURCES
            and attributes.subresource in ("", "status")
            and (not authenticated
                 or not NODE_HIGH_GROUPS.isdisjoint(attributes.user.groups))):
        return Level.NODE_HIGH
    return Level.NORMAL


@dataclasses.dataclass(frozen=True)
class PriorityConfig:
    """The flags (upstream's names and defaults) and the number of worker processes that
    share them."""

    max_requests_inflight: int = DEFAULT_MAX_REQUESTS_INFLIGHT
    max_mutating_requests_inflight: int = DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT
    workers: int = 1
    wait_limit: float = DEFAULT_WAIT_LIMIT

    @property
    def limited(self) -> bool:
        """Both flags 0: no seats, no queues (every request executes at once)."""
        return self.max_requests_inflight + self.max_mutating_requests_inflight > 0

    def seats(self, shares: int) -> int:
        """A level's seats in one worker: its share of the server's, at least one."""
        total = self.max_requests_inflight + self.max_mutating_requests_inflight
        return max(1, math.ceil(total * shares / TOTAL_SHARES / max(1, self.workers)))


class Rejected(Exception):
    """The request's queue is full, or it waited too long."""


class Seats:
    """A level's seats and its FIFO queue of waiting requests."""

    def __init__(self, seats: int, queue_limit: int, wait_limit: float) -> None:
        self.seats = seats
        self.queue_limit = queue_limit
        self.wait_limit = wait_limit
        self.executing = 0
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self.rejected = 0

    async def acquire(self) -> None:
        """Take a seat, waiting in line for one if all are taken; `Rejected` when the queue
        is full or the wait is over."""
        if self.executing < self.seats and not self.waiting:
            self.executing += 1
            return
        if len(self.waiting) >= self.queue_limit:
            self.rejected += 1
            raise Rejected
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await asyncio.wait_for(asyncio.shield(turn), self.wait_limit)
        except TimeoutError:
            if turn.done():  # the seat was handed over as the wait ended: keep it
                return
            self.waiting.remove(turn)
            self.rejected += 1
            raise Rejected from None
        except asyncio.CancelledError:
            if turn.done():
                self.release()  # handed a seat, then cancelled: pass it on
            else:
                self.waiting.remove(turn)
            raise

    def release(self) -> None:
        """Give the seat to the first in line, or free it."""
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the seat passes on: `executing` is unchanged
                return
        self.executing -= 1


def too_many_requests() -> web.Response:
    """Upstream's refusal (`tooManyRequests`: `http.Error`'s plain text and headers)."""
    response = web.Response(status=429, text=TOO_MANY_REQUESTS + "\n",
                            content_type="text/plain", charset="utf-8")
    response.headers["Retry-After"] = RETRY_AFTER
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


class PriorityAndFairness:
    """The middleware's state: the seats of the two levels of one worker process."""

    def __init__(self, config: PriorityConfig | None = None) -> None:
        config = config or PriorityConfig()
        self.levels: dict[Level, Seats] = {} if not config.limited else {
            Level.NODE_HIGH: Seats(config.seats(NODE_HIGH_SHARES), NODE_HIGH_QUEUE,
                                   config.wait_limit),
            Level.NORMAL: Seats(config.seats(GLOBAL_DEFAULT_SHARES), GLOBAL_DEFAULT_QUEUE,
                                config.wait_limit),
        }
        self._next_log: dict[Level, float] = {}  # when a level's refusals are logged next

    def _rejected(self, level: Level, seats: Seats, request: web.Request) -> None:
        """One log line for a level's first refusal, then at most one a minute with the
        count (the clients retry a 429 without a trace of their own)."""
        now = time.monotonic()
        if now < self._next_log.get(level, 0.0):
            return
        self._next_log[level] = now + REJECTION_LOG_INTERVAL
        log.warning("priority level %s: %d requests refused with 429 so far (%d seats, %d "
                    "waiting); the last: %s %s", level.value, seats.rejected, seats.seats,
                    len(seats.waiting), request.method, request.path)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        level = classify(attributes_of(request), authenticated=USER in request)
        seats = self.levels.get(level)
        if seats is None:
            exempt: web.StreamResponse = await handler(request)
            return exempt
        queued = time.monotonic()
        try:
            await seats.acquire()
        except Rejected:
            request[QUEUE_WAIT] = (level.value, FLOW_SCHEMAS[level],
                                   time.monotonic() - queued, False)
            self._rejected(level, seats, request)
            return too_many_requests()
        request[QUEUE_WAIT] = (level.value, FLOW_SCHEMAS[level], time.monotonic() - queued,
                               True)
        try:
            response: web.StreamResponse = await handler(request)
        finally:
            seats.release()
        return response


def priority_middleware(config: PriorityConfig | None) -> Any:
    """The middleware to install (after authentication and audit, before authorization)."""
    return PriorityAndFairness(config).middleware

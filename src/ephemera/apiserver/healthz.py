"""The apiserver's health endpoints, `/healthz`, `/livez` and `/readyz`, as upstream's
`k8s.io/apiserver/pkg/server/healthz` serves them: each runs a list of named checks.

- `GET /readyz`: every check in order; all passing is `ok` (200), with `?verbose` a
  `[+]NAME ok` line each and `readyz check passed`. Any failing is a 500 listing every check
  (the verbose form, always), `[-]NAME failed: reason withheld` for each failed one (these
  paths are public: the reason goes to the log only) and `readyz check failed`.
  `?exclude=NAME` (repeatable) skips a check (`[+]NAME excluded: ok`); a name no check has
  adds upstream's `warn: some health checks cannot be excluded: no matches for "NAME"`.
- `GET /readyz/NAME`: that check alone, `ok` or a 500 `internal server error: REASON`; a
  name no check has is the apiserver's 404 for an unserved path (as upstream's mux).

The checks (upstream's names and order; ephemera has no post-start hooks that could still be
running while it serves, see below):

- `ping`: always passes (the apiserver answered).
- `log`: a thread flushes the log handlers every minute; the check fails (`logging blocked`)
  when the last flush finished more than two minutes ago (a handler stuck writing to a pipe
  nobody reads). Started by the first check, as upstream's `LogHealthz`.
- `etcd` (all three endpoints) and `etcd-readiness` (`/readyz`): a read of
  `/registry/health` from the store within `STORE_TIMEOUT` seconds (upstream's probe, a
  linearizable etcd GET, which fails once etcd has lost quorum; with the SQLite store a read
  of its database). Upstream's names whatever the backend, so that probes and `?exclude=`
  written for upstream work. To stay cheap when polled, the store is read at most once per
  half timeout (upstream's rate limiter): a check meanwhile gets the last probe's result.
  Both checks share the one probe.
- `shutdown` (`/readyz`): fails (`process is shutting down`) once the apiserver's graceful
  shutdown has begun (`app[STOP]`). aiohttp stops accepting connections and requests at that
  point, so only a readyz already being answered sees it, as upstream without
  `--shutdown-delay-duration`.

Not served: upstream's `informer-sync` and `poststarthook/*` checks fail only until the
apiserver's informers have synced and its start hooks have run; ephemera's apiserver lists
every informer and runs every start hook before it listens, so they could never fail while
anyone can ask.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.goformat import go_quote
from ephemera.store import Store, StoreError

log = logging.getLogger("ephemera.apiserver")

# The key the store probe reads (upstream: path.Join("/", prefix, "health")).
HEALTH_KEY = "/registry/health"
# upstream's `--etcd-healthcheck-timeout` and `--etcd-readycheck-timeout` defaults.
STORE_TIMEOUT = 2.0
# upstream's LogHealthz: flushed every minute, blocked after two.
LOG_FLUSH_INTERVAL = 60.0
LOG_BLOCKED_AFTER = 120.0

# What Go's http.Error and upstream's root handler send.
TEXT_PLAIN = "text/plain; charset=utf-8"


class CheckFailed(Exception):
    """A check's failure; its text is the reason (logged, and sent by `/readyz/NAME`)."""


class Check(Protocol):
    """A named check: `check()` returns when healthy, raises `CheckFailed` otherwise."""

    @property
    def name(self) -> str: ...

    async def check(self) -> None: ...


class Ping:
    name = "ping"

    async def check(self) -> None:
        return None


class LogFlusher:
    """upstream's `LogHealthz`: a thread flushes every handler of the root logger each
    `interval` seconds; blocked when the last flush is older than `blocked_after`."""

    name = "log"

    def __init__(self, *, interval: float = LOG_FLUSH_INTERVAL,
                 blocked_after: float = LOG_BLOCKED_AFTER,
                 clock: Callable[[], float] = time.monotonic,
                 flush: Callable[[], None] | None = None) -> None:
        self.interval = interval
        self.blocked_after = blocked_after
        self.clock = clock
        self.flush = flush or flush_log_handlers
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.last_verified = 0.0

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self.last_verified = self.clock()
            self._thread = threading.Thread(target=self._loop, name="log-health",
                                            daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                self.flush()
            except Exception:  # (a closed stream: not blocked)
                pass
            self.last_verified = self.clock()
            time.sleep(self.interval)

    async def check(self) -> None:
        if self._thread is None:
            self._start()
        if self.clock() - self.last_verified >= self.blocked_after:
            raise CheckFailed("logging blocked")


def flush_log_handlers() -> None:
    """Flush every handler of the root logger (each takes its handler's lock, so a handler
    stuck in a write blocks this)."""
    for handler in list(logging.getLogger().handlers):
        handler.flush()


# One per process, as upstream's: the handlers are the process's.
LOG_CHECK = LogFlusher()


class StoreProbe:
    """A read of `HEALTH_KEY` within `timeout` seconds, at most one every `timeout / 2`
    seconds (upstream's limiter): a call meanwhile gets the last result (or, before any
    result, waits for the read under way). Never more than one read at a time."""

    def __init__(self, store: Store, timeout: float = STORE_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.timeout = timeout
        self.interval = timeout / 2
        self.clock = clock
        self.backend = store.backend
        self.reads = 0
        self._started_at: float | None = None
        self._task: asyncio.Task[str | None] | None = None
        self._have_result = False
        self._result: str | None = None

    async def probe(self) -> None:
        task = self._task
        if task is None and (self._started_at is None
                             or self.clock() - self._started_at >= self.interval):
            self._started_at = self.clock()
            task = self._task = asyncio.get_running_loop().create_task(
                self._read(), name="store-health-probe")
            await asyncio.shield(task)
        elif task is not None and not self._have_result:
            await asyncio.shield(task)
        if self._result is not None:
            raise CheckFailed(self._result)

    async def close(self) -> None:
        """Cancel a read under way (the store is about to close)."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def _read(self) -> str | None:
        self.reads += 1
        try:
            async with asyncio.timeout(self.timeout):
                await self.store.get(HEALTH_KEY)
            reason = None
        except TimeoutError:
            reason = f"error getting data from {self.backend}: context deadline exceeded"
        except StoreError as err:
            reason = f"error getting data from {self.backend}: {err}"
        except Exception:  # a store's bug still fails the check; its Python text is logged
            log.exception("store health probe failed")
            reason = f"error getting data from {self.backend}: unexpected error"
        finally:
            if self._task is asyncio.current_task():
                self._task = None
        self._result, self._have_result = reason, True
        return reason


@dataclass(frozen=True)
class StoreCheck:
    name: str
    probe: StoreProbe

    async def check(self) -> None:
        await self.probe.probe()


@dataclass(frozen=True)
class ShutdownCheck:
    stopping: asyncio.Event
    name: str = "shutdown"

    async def check(self) -> None:
        if self.stopping.is_set():
            raise CheckFailed("process is shutting down")


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    # Go's http.Error and upstream's root handler set `X-Content-Type-Options: nosniff`;
    # a single check's `ok` is written bare (Go sniffs its Content-Type).
    nosniff: bool = True


class HealthEndpoint:
    """One endpoint (`healthz`, `livez`, `readyz`) and its checks, in order."""

    def __init__(self, name: str, checks: Sequence[Check]) -> None:
        self.name = name
        self.checks = tuple(checks)
        self.by_name = {check.name: check for check in self.checks}

    async def root(self, excluded: Iterable[str], verbose: bool) -> Answer:
        """upstream's `handleRootHealth`."""
        unmatched = set(excluded)
        lines: list[str] = []
        failed: list[tuple[str, str]] = []
        for check in self.checks:
            if check.name in unmatched:
                unmatched.discard(check.name)
                lines.append(f"[+]{check.name} excluded: ok\n")
                continue
            try:
                await check.check()
            except CheckFailed as err:
                lines.append(f"[-]{check.name} failed: reason withheld\n")
                failed.append((check.name, str(err)))
            else:
                lines.append(f"[+]{check.name} ok\n")
        if unmatched:
            names = ",".join(go_quote(name) for name in sorted(unmatched))
            lines.append(f"warn: some health checks cannot be excluded: no matches for {names}\n")
            log.warning("cannot exclude some health checks, no health checks are installed "
                        "matching %s", names)
        if failed:
            log.info("%s check failed: %s\n%s", ",".join(name for name, _ in failed), self.name,
                     "".join(f"[-]{name} failed: {reason}\n" for name, reason in failed))
            return Answer(500, "".join(lines) + f"{self.name} check failed\n")
        if not verbose:
            return Answer(200, "ok")
        return Answer(200, "".join(lines) + f"{self.name} check passed\n")

    async def single(self, name: str) -> Answer | None:
        """upstream's `adaptCheckToHandler` for the check `name`; None when there is none."""
        check = self.by_name.get(name)
        if check is None:
            return None
        try:
            await check.check()
        except CheckFailed as err:
            return Answer(500, f"internal server error: {err}\n")
        return Answer(200, "ok", nosniff=False)


class Health:
    """The three endpoints over one store probe (see the module docstring)."""

    ENDPOINTS = ("healthz", "livez", "readyz")

    def __init__(self, store: Store, stopping: asyncio.Event, *,
                 log_check: Check = LOG_CHECK, store_timeout: float = STORE_TIMEOUT) -> None:
        self.probe = StoreProbe(store, store_timeout)
        common: list[Check] = [Ping(), log_check, StoreCheck("etcd", self.probe)]
        self.endpoints = {
            "healthz": HealthEndpoint("healthz", common),
            "livez": HealthEndpoint("livez", common),
            "readyz": HealthEndpoint("readyz", [*common, StoreCheck("etcd-readiness", self.probe),
                                                ShutdownCheck(stopping)]),
        }

    async def close(self) -> None:
        await self.probe.close()

    def paths(self) -> list[str]:
        """Every path served, as upstream's `/` lists them."""
        return [f"/{name}{suffix}" for name, endpoint in self.endpoints.items()
                for suffix in ("", *(f"/{check.name}" for check in endpoint.checks))]

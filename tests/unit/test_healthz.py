"""The health endpoints' checks and output (`ephemera.apiserver.healthz`), as upstream's
`k8s.io/apiserver/pkg/server/healthz` prints them."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from ephemera.apiserver.healthz import (
    HEALTH_KEY,
    Answer,
    CheckFailed,
    Health,
    HealthEndpoint,
    LogFlusher,
    Ping,
    StoreProbe,
)
from ephemera.store import StoreError


class Fixed:
    def __init__(self, name: str, reason: str | None = None) -> None:
        self.name = name
        self.reason = reason

    async def check(self) -> None:
        if self.reason is not None:
            raise CheckFailed(self.reason)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeStore:
    """A store whose `get` counts reads and fails, hangs or answers as told."""

    backend = "the store"

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.error: Exception | None = None
        self.hang = False
        self.release = asyncio.Event()

    async def get(self, key: str) -> Any:
        self.reads.append(key)
        if self.hang:
            await asyncio.Event().wait()
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return None


def readyz(*reasons: tuple[str, str | None]) -> HealthEndpoint:
    return HealthEndpoint("readyz", [Fixed(name, reason) for name, reason in reasons])


async def test_passing_is_ok_and_verbose_lists_each_check() -> None:
    endpoint = readyz(("ping", None), ("etcd", None))
    assert await endpoint.root([], verbose=False) == Answer(200, "ok")
    assert await endpoint.root([], verbose=True) == Answer(
        200, "[+]ping ok\n[+]etcd ok\nreadyz check passed\n")


async def test_a_failure_is_500_verbose_with_the_reason_withheld(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "ephemera.apiserver")
    endpoint = readyz(("ping", None), ("etcd", "error getting data from etcd: boom"),
                      ("shutdown", "process is shutting down"))
    expected = Answer(500, "[+]ping ok\n[-]etcd failed: reason withheld\n"
                           "[-]shutdown failed: reason withheld\nreadyz check failed\n")
    assert await endpoint.root([], verbose=False) == expected
    assert await endpoint.root([], verbose=True) == expected
    # the reasons go to the log only
    assert "etcd,shutdown check failed: readyz\n[-]etcd failed: error getting data from " \
           "etcd: boom\n[-]shutdown failed: process is shutting down" in caplog.text


async def test_excluded_checks_and_unknown_names() -> None:
    endpoint = readyz(("ping", None), ("etcd", "down"))
    assert await endpoint.root(["etcd"], verbose=False) == Answer(200, "ok")
    assert await endpoint.root(["etcd"], verbose=True) == Answer(
        200, "[+]ping ok\n[+]etcd excluded: ok\nreadyz check passed\n")
    # unknown names: one warning line, sorted and quoted as Go's %q; a name given twice once
    assert await endpoint.root(["zz", "etcd", "a\"b", "zz"], verbose=True) == Answer(
        200, "[+]ping ok\n[+]etcd excluded: ok\nwarn: some health checks cannot be excluded: "
             "no matches for \"a\\\"b\",\"zz\"\nreadyz check passed\n")
    assert await endpoint.root(["nope"], verbose=False) == Answer(
        500, "[+]ping ok\n[-]etcd failed: reason withheld\nwarn: some health checks cannot be "
             "excluded: no matches for \"nope\"\nreadyz check failed\n")


async def test_a_single_check() -> None:
    endpoint = readyz(("ping", None), ("etcd", "error getting data from etcd: boom"))
    assert await endpoint.single("ping") == Answer(200, "ok", nosniff=False)
    assert await endpoint.single("etcd") == Answer(
        500, "internal server error: error getting data from etcd: boom\n")
    assert await endpoint.single("nope") is None


async def test_the_check_sets_in_upstream_order() -> None:
    health = Health(FakeStore(), asyncio.Event())  # type: ignore[arg-type]
    names = {name: [c.name for c in e.checks] for name, e in health.endpoints.items()}
    assert names == {"healthz": ["ping", "log", "etcd"], "livez": ["ping", "log", "etcd"],
                     "readyz": ["ping", "log", "etcd", "etcd-readiness", "shutdown"]}
    assert health.paths() == [
        "/healthz", "/healthz/ping", "/healthz/log", "/healthz/etcd",
        "/livez", "/livez/ping", "/livez/log", "/livez/etcd",
        "/readyz", "/readyz/ping", "/readyz/log", "/readyz/etcd", "/readyz/etcd-readiness",
        "/readyz/shutdown"]


async def test_shutdown_check() -> None:
    stopping = asyncio.Event()
    endpoint = Health(FakeStore(), stopping).endpoints["readyz"]  # type: ignore[arg-type]
    assert await endpoint.single("shutdown") == Answer(200, "ok", nosniff=False)
    stopping.set()
    assert await endpoint.single("shutdown") == Answer(
        500, "internal server error: process is shutting down\n")


async def test_store_probe_reads_at_most_once_per_half_timeout() -> None:
    store, clock = FakeStore(), Clock()
    probe = StoreProbe(store, timeout=2.0, clock=clock)  # type: ignore[arg-type]
    # concurrent checks before any result share the one read
    waiting = [asyncio.ensure_future(probe.probe()) for _ in range(3)]
    await asyncio.sleep(0)
    store.release.set()
    await asyncio.gather(*waiting)
    assert store.reads == [HEALTH_KEY]
    # within the interval: the last result, no read
    store.error = StoreError("etcdserver: request timed out")
    clock.now = 0.9
    await probe.probe()
    assert len(store.reads) == 1
    # after it: a read, whose failure later checks get too
    clock.now = 1.0
    with pytest.raises(CheckFailed) as failed:
        await probe.probe()
    assert str(failed.value) == "error getting data from the store: etcdserver: request timed out"
    clock.now = 1.5
    with pytest.raises(CheckFailed):
        await probe.probe()
    assert len(store.reads) == 2


async def test_store_probe_times_out() -> None:
    store = FakeStore()
    store.hang = True
    probe = StoreProbe(store, timeout=0.05)  # type: ignore[arg-type]
    with pytest.raises(CheckFailed) as failed:
        await probe.probe()
    assert str(failed.value) == "error getting data from the store: context deadline exceeded"


async def test_a_store_bug_fails_the_probe_without_its_python_text() -> None:
    store = FakeStore()
    store.release.set()
    store.error = RuntimeError("<Store object at 0x7f00>")
    probe = StoreProbe(store)  # type: ignore[arg-type]
    with pytest.raises(CheckFailed) as failed:
        await probe.probe()
    assert str(failed.value) == "error getting data from the store: unexpected error"


async def test_store_probe_while_a_read_is_under_way_answers_the_last_result() -> None:
    store, clock = FakeStore(), Clock()
    probe = StoreProbe(store, timeout=2.0, clock=clock)  # type: ignore[arg-type]
    store.release.set()
    await probe.probe()
    store.release.clear()
    clock.now = 5.0
    slow = asyncio.ensure_future(probe.probe())  # a read now, waiting on the store
    await asyncio.sleep(0)
    clock.now = 6.5
    await asyncio.wait_for(probe.probe(), 1)  # the last result (ok), without waiting
    assert len(store.reads) == 2
    store.release.set()
    await slow


async def test_log_check_fails_when_a_flush_blocks() -> None:
    clock, unblock, flushed = Clock(), threading.Event(), threading.Event()

    def flush() -> None:
        unblock.wait()
        flushed.set()

    check = LogFlusher(interval=0.01, blocked_after=120, clock=clock, flush=flush)
    await check.check()  # starts the flusher, which blocks
    clock.now = 119.0
    await check.check()
    clock.now = 120.0
    with pytest.raises(CheckFailed) as failed:
        await check.check()
    assert str(failed.value) == "logging blocked"
    unblock.set()
    assert await asyncio.to_thread(flushed.wait, 5)
    for _ in range(100):
        if check.last_verified == 120.0:
            break
        await asyncio.sleep(0.01)
    await check.check()


async def test_ping() -> None:
    await Ping().check()


async def test_store_probe_close_cancels_a_read_under_way() -> None:
    store = FakeStore()
    probe = StoreProbe(store)  # type: ignore[arg-type]
    waiting = asyncio.ensure_future(probe.probe())
    await asyncio.sleep(0)
    await probe.close()
    with pytest.raises(asyncio.CancelledError):
        await waiting

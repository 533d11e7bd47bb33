"""`/healthz`, `/livez` and `/readyz` of the in-process apiserver, as upstream's answer them:
the named checks, their exact bodies, status codes and headers, and a store that fails or
hangs (etcd without quorum) failing the `etcd` checks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, serve

from ephemera.apiserver.app import HEALTH, STOP
from ephemera.store import KeyValue, StoreError, open_store
from etcdserver import EtcdCluster

NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": "the server could not find the requested resource",
             "reason": "NotFound", "details": {}, "code": 404}
READYZ_CHECKS = ("ping", "log", "etcd", "etcd-readiness", "shutdown")


class BreakableReads:
    """Makes a store's `get` fail (`error`) or hang (`hang`) once told to, as etcd's reads
    do once it has lost quorum."""

    def __init__(self, store: Any) -> None:
        self.get = store.get
        self.error: StoreError | None = None
        self.hang = False
        store.get = self.broken_get

    async def broken_get(self, key: str) -> KeyValue | None:
        if self.hang:
            await asyncio.Event().wait()
        if self.error is not None:
            raise self.error
        result: KeyValue | None = await self.get(key)
        return result


@pytest.fixture
async def health_api(tmp_path: Path) -> AsyncIterator[tuple[Api, BreakableReads]]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    reads = BreakableReads(store)
    try:
        async for served in serve(store):
            probe = served.app[HEALTH].probe
            probe.timeout, probe.interval = 0.2, 0.0  # a read each check, a short timeout
            yield served, reads
    finally:
        await store.close()


async def text(api: Api, path: str, method: str = "GET") -> tuple[int, str, dict[str, str]]:
    response = await api.client.request(method, path)
    return response.status, await response.text(), dict(response.headers)


async def test_health_endpoints_answer_ok(health_api: tuple[Api, BreakableReads]) -> None:
    api, _ = health_api
    for path in ("/healthz", "/livez", "/readyz"):
        status, body, headers = await text(api, path)
        assert (status, body) == (200, "ok")
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert headers["X-Content-Type-Options"] == "nosniff"
    # upstream's mux serves these paths whatever the method
    assert (await text(api, "/readyz", "POST"))[:2] == (200, "ok")


async def test_health_verbose_lists_the_checks(health_api: tuple[Api, BreakableReads]) -> None:
    api, _ = health_api
    assert (await text(api, "/readyz?verbose"))[:2] == (200, "".join(
        f"[+]{name} ok\n" for name in READYZ_CHECKS) + "readyz check passed\n")
    assert (await text(api, "/livez?verbose=1"))[:2] == (
        200, "[+]ping ok\n[+]log ok\n[+]etcd ok\nlivez check passed\n")
    assert (await text(api, "/healthz?verbose&exclude=log&exclude=nope"))[:2] == (
        200, "[+]ping ok\n[+]log excluded: ok\n[+]etcd ok\nwarn: some health checks cannot be "
             "excluded: no matches for \"nope\"\nhealthz check passed\n")


async def test_readyz_single_checks_and_unknown_names(
        health_api: tuple[Api, BreakableReads]) -> None:
    api, _ = health_api
    for name in READYZ_CHECKS:
        status, body, headers = await text(api, f"/readyz/{name}")
        assert (status, body) == (200, "ok")
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert (await text(api, "/livez/etcd"))[:2] == (200, "ok")
    for path in ("/readyz/nope", "/readyz/", "/livez/shutdown", "/healthz/etcd-readiness",
                 "/readyz/etcd/more"):
        status, body = await api.get(path)
        assert (status, body) == (404, NOT_FOUND), path


async def test_readyz_fails_when_the_store_fails(
        health_api: tuple[Api, BreakableReads]) -> None:
    api, reads = health_api
    reads.error = StoreError("etcdserver: request timed out")
    failed = ("[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n"
              "[-]etcd-readiness failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n")
    for path in ("/readyz", "/readyz?verbose"):
        status, body, headers = await text(api, path)
        assert (status, body) == (500, failed)
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert headers["X-Content-Type-Options"] == "nosniff"
    assert (await text(api, "/livez"))[:2] == (
        500, "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\nlivez check failed\n")
    assert (await text(api, "/healthz"))[:2] == (
        500, "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\nhealthz check failed\n")
    assert (await text(api, "/readyz/etcd"))[:2] == (
        500, "internal server error: error getting data from the store: "
             "etcdserver: request timed out\n")
    assert (await text(api, "/readyz/ping"))[:2] == (200, "ok")
    assert (await text(api, "/readyz?exclude=etcd&exclude=etcd-readiness"))[:2] == (200, "ok")
    reads.error = None
    assert (await text(api, "/readyz"))[:2] == (200, "ok")


async def test_readyz_fails_when_the_store_hangs(
        health_api: tuple[Api, BreakableReads]) -> None:
    api, reads = health_api
    reads.hang = True
    status, body, _ = await asyncio.wait_for(text(api, "/readyz"), 5)
    assert (status, body) == (500, "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n"
                                   "[-]etcd-readiness failed: reason withheld\n[+]shutdown ok\n"
                                   "readyz check failed\n")
    assert (await text(api, "/livez/etcd"))[:2] == (
        500, "internal server error: error getting data from the store: "
             "context deadline exceeded\n")


async def test_readyz_fails_once_shutdown_begins(
        health_api: tuple[Api, BreakableReads]) -> None:
    api, _ = health_api
    api.app[STOP].set()
    assert (await text(api, "/readyz"))[:2] == (
        500, "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n"
             "[-]shutdown failed: reason withheld\nreadyz check failed\n")
    assert (await text(api, "/readyz/shutdown"))[:2] == (
        500, "internal server error: process is shutting down\n")
    assert (await text(api, "/livez"))[:2] == (200, "ok")


async def test_health_paths_listed_at_the_root(health_api: tuple[Api, BreakableReads]) -> None:
    api, _ = health_api
    status, body = await api.get("/")
    assert status == 200
    assert body["paths"] == sorted(body["paths"])
    assert {"/healthz", "/healthz/etcd", "/livez/log", "/readyz/etcd-readiness",
            "/readyz/shutdown", "/version"} <= set(body["paths"])


async def test_readyz_fails_when_etcd_loses_quorum(tmp_path: Path) -> None:
    """The user trial's case: two of three etcd members gone, the apiserver's reads of the one
    left time out."""
    cluster = EtcdCluster(tmp_path / "etcd", 3)
    await asyncio.to_thread(cluster.start)
    try:
        store = open_store("etcd", endpoints=[cluster.client_url(0)])
        try:
            async for api in serve(store):
                probe = api.app[HEALTH].probe
                probe.timeout, probe.interval = 0.5, 0.0
                assert (await text(api, "/readyz"))[:2] == (200, "ok")
                cluster.kill(1)
                cluster.kill(2)
                assert (await text(api, "/livez"))[:2] == (
                    500, "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n"
                         "livez check failed\n")
                # (the read times out, or etcd says it has no leader once it has noticed)
                status, body, _ = await text(api, "/readyz/etcd")
                assert status == 500
                assert body.startswith("internal server error: error getting data from etcd: ")
        finally:
            await store.close()
    finally:
        await asyncio.to_thread(cluster.stop)

"""Tests specific to the etcd backend and to the test etcd server: key prefixes isolate stores
sharing one etcd, endpoint parsing, the exact compacted revision, and the server's life cycle."""

from __future__ import annotations

import asyncio
import signal
import urllib.request
import uuid
from pathlib import Path

import pytest

from ephemera.store import Event, Store, open_store
from ephemera.store.etcd import bytes_prefix_end, grpc_target
from etcdserver import EtcdServer

pytestmark = pytest.mark.etcd


def etcd_store(endpoint: str) -> Store:
    return open_store(
        "etcd", endpoints=[endpoint], prefix=f"/t-{uuid.uuid4().hex[:12]}", progress_interval=0.1
    )


async def test_prefixes_isolate_stores_on_one_etcd(etcd_endpoint: str) -> None:
    first, second = etcd_store(etcd_endpoint), etcd_store(etcd_endpoint)
    try:
        start = await second.current_revision()
        watcher = await second.watch("/", start)
        mine = await first.create("/shared/a", b"first")
        theirs = await second.create("/shared/a", b"second")  # no KeyExists: separate keys
        assert theirs.mod_revision > mine.mod_revision  # one etcd, one revision counter
        assert await first.get("/shared/a") == mine
        assert [kv.value for kv in (await second.list("")).kvs] == [b"second"]
        async with asyncio.timeout(10):
            async for item in watcher:
                if isinstance(item, Event):
                    assert item.kv == theirs
                    break
        await watcher.close()
    finally:
        await first.close()
        await second.close()


async def test_compacted_revision_is_exact(etcd_endpoint: str) -> None:
    store = etcd_store(etcd_endpoint)
    try:
        await store.create("/c/a", b"1")
        target = (await store.create("/c/b", b"1")).mod_revision
        await store.compact(target)
        assert await store.compacted_revision() == target
    finally:
        await store.close()


def test_endpoint_parsing() -> None:
    assert grpc_target(["http://127.0.0.1:2379"]) == "127.0.0.1:2379"
    assert grpc_target(["localhost:23790"]) == "localhost:23790"
    assert grpc_target(["http://127.0.0.1:1", "127.0.0.2:2"]) == "ipv4:127.0.0.1:1,127.0.0.2:2"
    assert grpc_target(["http://etcd-a:1", "http://etcd-b:2"]) == "etcd-a:1"
    with pytest.raises(ValueError):
        grpc_target([])
    with pytest.raises(ValueError):
        grpc_target(["https://127.0.0.1:2379"])


def test_bytes_prefix_end() -> None:
    assert bytes_prefix_end(b"/a/") == b"/a0"
    assert bytes_prefix_end(b"a\xff") == b"b"
    assert bytes_prefix_end(b"") == b"\x00"


def test_open_store_validates_its_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown store kind"):
        open_store("zookeeper", data_dir=tmp_path)
    with pytest.raises(ValueError, match="data dir"):
        open_store("sqlite")
    with pytest.raises(ValueError, match="endpoints"):
        open_store("etcd", endpoints=[])
    with pytest.raises(ValueError, match="prefix"):
        open_store("sqlite", data_dir=tmp_path, prefix="/x")


def test_etcd_server_starts_healthy_and_stops_on_sigterm(tmp_path: Path) -> None:
    server = EtcdServer(tmp_path)
    with server:
        process = server.process
        assert process is not None
        with urllib.request.urlopen(f"{server.endpoint}/health", timeout=5) as response:
            assert b'"health":"true"' in response.read()
    # etcd shuts down, then re-raises the signal to itself: it ended by SIGTERM, not SIGKILL.
    assert process.returncode == -signal.SIGTERM
    assert "received signal; shutting down" in (tmp_path / "etcd.log").read_text()

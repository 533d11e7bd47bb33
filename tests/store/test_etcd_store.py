"""Tests specific to the etcd backend and to the test etcd server: key prefixes isolate stores
sharing one etcd, endpoint parsing, the exact compacted revision, lists read in pages that
stay under the gRPC receive limit, fragmented watch catch-up, a watch read while the event
loop is busy, all watches on one stream, and the server's life cycle."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import grpc
import pytest
from aetcd import rpc

from ephemera.store import Event, Store, Watcher, open_store
from ephemera.store.base import StoreError
from ephemera.store.etcd import EtcdStore, bytes_prefix_end, grpc_target
from etcdserver import EtcdCluster, EtcdServer

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


def small_store(endpoint: str, **options: int) -> EtcdStore:
    return EtcdStore([endpoint], prefix=f"/t-{uuid.uuid4().hex[:12]}", progress_interval=0.1,
                     **options)


async def test_lists_are_read_in_pages_at_one_revision(etcd_endpoint: str) -> None:
    """With 7 keys per Range, a list of 20 is assembled from pages; a limited list stops at
    its limit and says how many keys remain; every page is read at the first one's
    revision, so a key created afterwards is not in a list at that revision."""
    store = small_store(etcd_endpoint, range_page=7)
    try:
        for i in range(20):
            await store.create(f"/p/{i:02}", b"v%d" % i)
        everything = await store.list("/p/")
        assert [kv.key for kv in everything.kvs] == [f"/p/{i:02}" for i in range(20)]
        assert not everything.more
        await store.create("/p/99", b"late")
        at_first = await store.list("/p/", revision=everything.revision)
        assert [kv.key for kv in at_first.kvs] == [kv.key for kv in everything.kvs]
        first = await store.list("/p/", limit=10, revision=everything.revision)
        assert [kv.key for kv in first.kvs] == [f"/p/{i:02}" for i in range(10)]
        assert (first.more, first.remaining) == (True, 10)
        rest = await store.list("/p/", limit=10, start_after=first.kvs[-1].key,
                                revision=first.revision)
        assert [kv.key for kv in rest.kvs] == [f"/p/{i:02}" for i in range(10, 20)]
        assert not rest.more
        assert len((await store.list("/p/")).kvs) == 21
    finally:
        await store.close()


async def test_a_page_over_the_receive_limit_is_read_in_halves(etcd_endpoint: str) -> None:
    """60 values of 20 KiB (1.2 MB) through a channel that receives at most 256 KiB per
    message: one Range of everything would be refused ("Received message larger than max"),
    so the store halves its pages until they fit; the list is whole and in order."""
    store = small_store(etcd_endpoint, max_receive_bytes=256 * 1024, range_page=500)
    try:
        value = b"x" * 20 * 1024
        await asyncio.gather(*(store.create(f"/big/{i:03}", value) for i in range(60)))
        listed = await store.list("/big/")
        assert [kv.key for kv in listed.kvs] == [f"/big/{i:03}" for i in range(60)]
        assert all(kv.value == value for kv in listed.kvs)
        limited = await store.list("/big/", limit=50)
        assert (len(limited.kvs), limited.more, limited.remaining) == (50, True, 10)
    finally:
        await store.close()


async def test_watch_catch_up_larger_than_the_receive_limit(etcd_endpoint: str) -> None:
    """A watcher starting before 30 writes of 150 KiB is sent all of them at once by etcd
    (4.5 MB, over this channel's 2 MiB receive limit); with fragments it gets every event,
    in order."""
    store = small_store(etcd_endpoint, max_receive_bytes=2 * 1024 * 1024)
    try:
        start = await store.current_revision()
        value = b"y" * 150 * 1024
        for i in range(30):
            await store.create(f"/w/{i:02}", value)
        watcher = await store.watch("/w/", start)
        keys: list[str] = []
        async with asyncio.timeout(20):
            async for item in watcher:
                if isinstance(item, Event):
                    assert item.kv.value == value
                    keys.append(item.kv.key)
                    if len(keys) == 30:
                        break
        await watcher.close()
        assert keys == [f"/w/{i:02}" for i in range(30)]
    finally:
        await store.close()


async def test_a_watch_is_read_while_the_event_loop_is_busy(etcd_endpoint: str) -> None:
    """200 writes land, one revision each, while the loop is blocked. The stream is read
    off the loop, so once it runs again they come in a few batches; read on the loop (as
    through grpc.aio) each message took a loop iteration or two, and a busy apiserver's
    watch cache fell tens of seconds behind etcd."""
    store = small_store(etcd_endpoint)
    count = 200
    try:
        watcher = await store.watch("/busy/", await store.current_revision())

        def write() -> None:  # another client of the same etcd, on a thread
            with grpc.insecure_channel(store.target) as channel:
                kv = rpc.KVStub(channel)
                for i in range(count):
                    kv.Put(rpc.PutRequest(key=store._key(f"/busy/k{i}"), value=b"v"))

        writer = threading.Thread(target=write)
        writer.start()
        writer.join()  # the loop is blocked meanwhile, as a busy apiserver's is
        time.sleep(0.5)
        iterations = 0

        async def count_iterations() -> None:
            nonlocal iterations
            while True:
                await asyncio.sleep(0)
                iterations += 1

        counter = asyncio.create_task(count_iterations())
        received = 0
        async with asyncio.timeout(30):
            async for item in watcher:
                if isinstance(item, Event):
                    received += 1
                    if received == count:
                        break
        counter.cancel()
        assert iterations < 20, iterations
        await watcher.close()
    finally:
        await store.close()


async def next_event(watcher: Watcher) -> Event:
    async with asyncio.timeout(10):
        async for item in watcher:
            if isinstance(item, Event):
                return item
    raise AssertionError("the watch ended")


async def test_watches_share_one_stream(etcd_endpoint: str) -> None:
    """Twenty watches created at once, from different revisions, are one Watch call on one
    connection, read by the event loop (no thread of their own); each created answer finds
    its own watch (each gets its own prefix's events and no other's, from its own start), and
    a cancelled watch leaves the others going."""
    store = small_store(etcd_endpoint)
    try:
        starts = [(await store.create(f"/s/{i:02}/old", b"old")).mod_revision for i in range(20)]
        threads = set(threading.enumerate())
        # even ones from their own write (they see it), odd ones after it (they do not)
        watchers = await asyncio.gather(*(
            store.watch(f"/s/{i:02}/", start - 1 if i % 2 == 0 else start)
            for i, start in enumerate(starts)))
        assert set(threading.enumerate()) - threads == set()
        assert store._stream is not None and len(store._stream) == 20
        for i in range(20):
            await store.create(f"/s/{i:02}/new", b"new")
        for i, watcher in enumerate(watchers):
            first = await next_event(watcher)
            assert first.kv.key == (f"/s/{i:02}/old" if i % 2 == 0 else f"/s/{i:02}/new")
        await watchers[3].close()
        assert len(store._stream) == 19
        await store.create("/s/04/after", b"x")
        assert (await next_event(watchers[4])).kv.key == "/s/04/new"
        assert (await next_event(watchers[4])).kv.key == "/s/04/after"
        stream = store._stream
    finally:
        await store.close()
    assert stream.ended  # closing the store closed its stream and connection
    async with asyncio.timeout(10):
        while stream._transport is not None:
            await asyncio.sleep(0.01)


async def test_watches_carry_on_when_their_stream_is_lost(etcd_endpoint: str) -> None:
    """When the shared stream's connection is cut under it, its watches are created again on
    a new stream from the revision after the last one each was handed, as etcd's own client
    does: their consumers get every event once, with no end, and new watches work."""
    store = small_store(etcd_endpoint)
    try:
        revision = await store.current_revision()
        first, second = await store.watch("/f/a/", revision), await store.watch("/f/b/", revision)
        before = await store.create("/f/a/1", b"v")
        assert (await next_event(first)).kv == before
        broken = store._stream
        assert broken is not None and broken._transport is not None
        broken._transport.abort()
        during = [await store.create("/f/a/2", b"v"), await store.create("/f/b/1", b"v")]
        assert (await next_event(first)).kv == during[0]
        assert (await next_event(second)).kv == during[1]
        assert store._stream is not broken and broken.ended
        after = await store.create("/f/a/3", b"v")
        assert (await next_event(first)).kv == after  # not /f/a/1 or /f/a/2 a second time
        again = await store.watch("/f/a/", after.mod_revision)
        last = await store.create("/f/a/4", b"v")
        assert (await next_event(again)).kv == last
        assert (await next_event(first)).kv == last
    finally:
        await store.close()


async def writes_reach(store: EtcdStore, watcher: Watcher) -> None:
    """Three writes under `/k/`, each retried until etcd takes it (the unary channel moves to
    another member, or reconnects, at its own pace), reach `watcher` in order, once each."""
    written = []
    for i in range(2, 5):
        async with asyncio.timeout(30):
            while True:
                try:
                    written.append(await store.create(f"/k/{i}", b"v"))
                    break
                except StoreError:
                    await asyncio.sleep(0.2)
    assert [(await next_event(watcher)).kv for _ in written] == written


async def test_watches_carry_on_when_their_etcd_member_stops(tmp_path: Path) -> None:
    """Three etcd members: the one the watch stream is on is killed; the store's writes go to
    the others, and the watch resumes on one of them with every event once."""
    with EtcdCluster(tmp_path / "etcd", 3) as cluster:
        store = EtcdStore(cluster.endpoints.split(","), prefix="/m", progress_interval=0.1)
        try:
            watcher = await store.watch("/k/", await store.current_revision())
            first = await store.create("/k/1", b"v")
            assert (await next_event(watcher)).kv == first
            stream = store._stream
            assert stream is not None and stream._transport is not None
            port = stream._transport.get_extra_info("peername")[1]
            cluster.kill(cluster.client_ports.index(port))
            await writes_reach(store, watcher)
        finally:
            await store.close()


async def test_watches_wait_for_their_only_etcd_member_to_restart(tmp_path: Path) -> None:
    """One etcd member, killed and started again: the stream's watches are created again
    with a back-off (`RESUME_DELAYS`) instead of all failing within milliseconds of it going,
    so they carry on from where they were once it is back, every event once, and their
    consumers list nothing again."""
    with EtcdCluster(tmp_path / "etcd", 1) as cluster:
        store = EtcdStore(cluster.endpoints.split(","), prefix="/r", progress_interval=0.1)
        try:
            watcher = await store.watch("/k/", await store.current_revision())
            first = await store.create("/k/1", b"v")
            assert (await next_event(watcher)).kv == first
            cluster.kill(0)
            await asyncio.sleep(0.5)  # the stream's first resumes fail meanwhile
            await asyncio.to_thread(cluster.restart, 0)
            await writes_reach(store, watcher)
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

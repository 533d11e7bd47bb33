"""Tests specific to the sqlite backend: durability across kill -9, reopening, the data dir
lock, watch replay over many history pages and compaction during a replay, and a property test
of random operations against an in-memory model."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ephemera.store import (
    Compacted,
    Event,
    KeyExists,
    KeyNotFound,
    KeyValue,
    RevisionMismatch,
    StoreError,
    open_store,
)
from ephemera.store.sqlite import REPLAY_PAGE, SqliteStore, prefix_end

CRASH_WRITER = Path(__file__).with_name("sqlite_crash_writer.py")


def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, str(CRASH_WRITER), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    acknowledged: list[str] = []
    for line in process.stdout:
        acknowledged.append(line.strip())
        if len(acknowledged) >= 1500:
            break
    os.kill(process.pid, signal.SIGKILL)  # mid-stream: the writers never stop on their own
    remainder, errors = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, errors
    acknowledged += [line for line in remainder.splitlines() if line.startswith("/crash/")]

    async def check() -> None:
        store = open_store("sqlite", data_dir=tmp_path)
        try:
            stored = {kv.key: kv.value for kv in (await store.list("/crash/")).kvs}
            missing = [key for key in acknowledged if key not in stored]
            assert missing == []
            assert all(stored[key] == key.encode() * 20 for key in acknowledged)
            assert await store.current_revision() == 1 + len(stored)
        finally:
            await store.close()

    asyncio.run(check())


def test_the_chosen_durability_settings(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = open_store("sqlite", data_dir=tmp_path)
        await store.create("/a", b"1")
        await store.close()

    asyncio.run(scenario())
    with sqlite3.connect(tmp_path / "store.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert SqliteStore.__module__ == "ephemera.store.sqlite"
    from ephemera.store import sqlite as module

    assert module.SYNCHRONOUS == "FULL"


async def test_reopen_keeps_data_history_and_revision(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path)
    a = await store.create("/r/a", b"1")
    a2 = await store.update("/r/a", b"2", a.mod_revision)
    b = await store.create("/r/b", b"1")
    deleted = await store.delete("/r/b")
    await store.compact(a2.mod_revision)
    await store.close()
    store = open_store("sqlite", data_dir=tmp_path)
    try:
        assert await store.current_revision() == deleted.mod_revision
        assert await store.compacted_revision() == a2.mod_revision
        assert await store.get("/r/a") == a2
        assert (await store.list("/r/", revision=b.mod_revision)).kvs == [a2, b]
        with pytest.raises(Compacted):
            await store.list("/r/", revision=a.mod_revision)
        watcher = await store.watch("/r/", a2.mod_revision)
        items = aiter(watcher)
        async with asyncio.timeout(10):
            replayed = [await anext(items), await anext(items)]
        assert [(e.type, e.kv) for e in replayed if isinstance(e, Event)] == [
            ("PUT", b),
            ("DELETE", deleted),
        ]
        c = await store.create("/r/c", b"1")
        assert c.mod_revision == deleted.mod_revision + 1
        await watcher.close()
    finally:
        await store.close()


async def test_a_data_dir_opens_in_one_store_only(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path)
    try:
        with pytest.raises(StoreError, match="in use"):
            open_store("sqlite", data_dir=tmp_path)
    finally:
        await store.close()
    again = open_store("sqlite", data_dir=tmp_path)
    await again.close()


async def test_current_reads_do_not_aggregate_history(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path)
    await store.create("/q/a", b"1")
    await store.close()
    with sqlite3.connect(tmp_path / "store.db") as conn:
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT value, create_revision, mod_revision "
                "FROM current WHERE key = ?",
                ("/q/a",),
            )
        )
    assert "USING INDEX" in plan or "PRIMARY KEY" in plan
    assert "history" not in plan


async def test_replay_spans_many_pages_and_filters_prefixes(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path, progress_interval=0.05)
    try:
        start = await store.current_revision()
        mine: list[KeyValue] = []
        for i in range(REPLAY_PAGE * 2 + 10):
            if i % 3 == 0:
                mine.append(await store.create(f"/mine/{i:05d}", b"v"))
            else:
                await store.create(f"/other/{i:05d}", b"v")
        for i in range(REPLAY_PAGE + 5):
            mine.append(await store.create(f"/mine/x{i:05d}", b"v"))
        watcher = await store.watch("/mine/", start)
        live = await store.create("/mine/live", b"v")
        received: list[KeyValue] = []
        async with asyncio.timeout(20):
            async for item in watcher:
                if isinstance(item, Event):
                    received.append(item.kv)
                    if item.kv == live:
                        break
        assert received == [*mine, live]
        await watcher.close()
    finally:
        await store.close()


async def test_compaction_overtaking_a_replay_raises_compacted(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path)
    try:
        start = await store.current_revision()
        for i in range(REPLAY_PAGE * 3):
            await store.create(f"/big/{i:05d}", b"v")
        watcher = await store.watch("/big/", start)
        items = aiter(watcher)
        first = await anext(items)
        assert isinstance(first, Event) and first.revision == start + 1
        await store.compact(await store.current_revision())
        with pytest.raises(Compacted):
            async with asyncio.timeout(10):
                async for _item in watcher:
                    pass
    finally:
        await store.close()


def test_prefix_end() -> None:
    assert prefix_end("/a/") == "/a0"
    assert prefix_end("") is None
    assert prefix_end("a\U0010ffff") == "b"
    assert prefix_end("\ud7ff") == "\ue000"
    assert all("/a/" <= key < "/a0" for key in ["/a/", "/a/\U0010ffff", "/a/zz"])


# -- property test: random operations against an in-memory model -------------------------

keys = st.sampled_from(["/m/a", "/m/b", "/m/c", "/m/a/x", "/n/a"])
values = st.binary(max_size=8)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("create"), keys, values, st.just(0)),
        st.tuples(st.just("update"), keys, values, st.integers(0, 3)),
        st.tuples(st.just("delete"), keys, st.just(b""), st.integers(0, 3)),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
def test_random_operations_match_a_model(ops: list[tuple[str, str, bytes, int]]) -> None:
    """`stale` picks the expected revision: 0 = the current one, 1 = one too old, 2 or 3 =
    zero (a mismatch for update, unconditional for delete)."""

    async def scenario(data_dir: Path) -> None:
        store = open_store("sqlite", data_dir=data_dir, progress_interval=0.05)
        try:
            model: dict[str, KeyValue] = {}
            snapshots: dict[int, dict[str, KeyValue]] = {}
            log: list[tuple[str, KeyValue]] = []
            start = revision = await store.current_revision()
            for kind, key, value, stale in ops:
                current = model.get(key)
                if stale == 0 and current is not None:
                    expected = current.mod_revision
                elif stale == 1 and current is not None:
                    expected = current.mod_revision - 1
                else:
                    expected = 0
                if kind == "create":
                    if current is not None:
                        with pytest.raises(KeyExists):
                            await store.create(key, value)
                        continue
                    kv = await store.create(key, value)
                    assert kv == KeyValue(key, value, revision + 1, revision + 1)
                elif current is None:
                    with pytest.raises(KeyNotFound):
                        if kind == "update":
                            await store.update(key, value, expected)
                        else:
                            await store.delete(key, expected)
                    continue
                elif kind == "update":
                    if expected != current.mod_revision:
                        with pytest.raises(RevisionMismatch) as raised:
                            await store.update(key, value, expected)
                        assert raised.value.current == current
                        continue
                    kv = await store.update(key, value, expected)
                    assert kv == KeyValue(key, value, current.create_revision, revision + 1)
                else:
                    if expected and expected != current.mod_revision:
                        with pytest.raises(RevisionMismatch):
                            await store.delete(key, expected)
                        continue
                    kv = await store.delete(key, expected)
                    assert kv == KeyValue(key, current.value, current.create_revision, revision + 1)
                revision += 1
                if kind == "delete":
                    del model[key]
                    log.append(("DELETE", kv))
                else:
                    model[key] = kv
                    log.append(("PUT", kv))
                snapshots[revision] = dict(model)
                assert await store.get(key) == model.get(key)
            assert await store.current_revision() == revision
            for at, snapshot in snapshots.items():
                listed = await store.list("/m/", revision=at)
                assert listed.kvs == [snapshot[k] for k in sorted(snapshot) if k.startswith("/m/")]
            assert {kv.key: kv for kv in (await store.list("")).kvs} == model
            watcher = await store.watch("/m/", start)
            expected_log = [(t, kv) for t, kv in log if kv.key.startswith("/m/")]
            seen: list[tuple[str, KeyValue]] = []
            async with asyncio.timeout(10):
                async for item in watcher:
                    if not isinstance(item, Event):
                        break
                    seen.append((item.type, item.kv))
            assert seen == expected_log
            await watcher.close()
        finally:
            await store.close()

    with tempfile.TemporaryDirectory() as data_dir:
        asyncio.run(scenario(Path(data_dir)))


async def test_expiry_times_survive_a_reopen(tmp_path: Path) -> None:
    """The expiry table is part of the store: a key whose TTL ran out while the store was
    closed is deleted once it is open again (its DELETE event to a watch); a key made
    permanent before the close stays."""
    store = open_store("sqlite", data_dir=tmp_path)
    gone = await store.create("/e/gone", b"1", ttl=1)
    kept = await store.create("/e/kept", b"2", ttl=1)
    await store.update("/e/kept", b"3", kept.mod_revision)
    await store.close()
    await asyncio.sleep(1.1)
    store = open_store("sqlite", data_dir=tmp_path)
    try:
        watcher = await store.watch("/e/", await store.current_revision())
        items = aiter(watcher)
        async with asyncio.timeout(10):
            event = await anext(items)
            while not isinstance(event, Event):
                event = await anext(items)
        await watcher.close()
        assert (event.type, event.kv.key, event.kv.value) == ("DELETE", "/e/gone", b"1")
        assert event.kv.create_revision == gone.create_revision
        assert [kv.key for kv in (await store.list("/e/")).kvs] == ["/e/kept"]
    finally:
        await store.close()


async def test_a_failing_expiry_does_not_stop_the_writes(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An expiry transaction that fails (disk full) leaves its keys due and is tried again a
    second later; the writes are answered meanwhile, and the key expires once the store
    can write again."""
    store = open_store("sqlite", data_dir=tmp_path)
    try:
        assert isinstance(store, SqliteStore)
        real = store._apply_one
        failing = True

        def apply_one(conn: Any, write: Any, revision: int, outcome: Any) -> int:
            if failing and write.future is None:  # an expiry
                raise sqlite3.OperationalError("database or disk is full")
            return real(conn, write, revision, outcome)

        monkeypatch.setattr(store, "_apply_one", apply_one)
        watcher = await store.watch("/x/", await store.current_revision())
        await store.create("/x/expiring", b"1", ttl=1)
        await asyncio.sleep(1.5)  # due, and failing
        async with asyncio.timeout(5):
            await store.create("/x/other", b"2")
        assert await store.get("/x/expiring") is not None
        failing = False
        items = aiter(watcher)
        deleted = None
        async with asyncio.timeout(10):
            while deleted is None:
                item = await anext(items)
                if isinstance(item, Event) and item.type == "DELETE":
                    deleted = item
        await watcher.close()
        assert deleted.kv.key == "/x/expiring"
    finally:
        await store.close()


async def test_a_rollback_whose_reload_fails_is_reloaded_before_the_next_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed transaction's writes changed the writer's memory (a delete dropped the key's
    expiry); when reading the tables back fails too, the next transaction reads them first,
    so the key, still there, still expires."""
    import ephemera.store.sqlite as sqlite_module

    store = open_store("sqlite", data_dir=tmp_path)
    try:
        assert isinstance(store, SqliteStore)
        await store.create("/r/k", b"1", ttl=100)
        real_apply_one, real_read_meta = store._apply_one, sqlite_module._read_meta
        state = {"fail_write": True, "fail_read": True}

        def apply_one(conn: Any, write: Any, revision: int, outcome: Any) -> int:
            revision = real_apply_one(conn, write, revision, outcome)
            if state["fail_write"]:
                state["fail_write"] = False
                raise sqlite3.OperationalError("disk I/O error")
            return revision

        def read_meta(conn: Any) -> tuple[int, int]:
            if state["fail_read"]:
                state["fail_read"] = False
                raise sqlite3.OperationalError("disk I/O error")
            return real_read_meta(conn)

        monkeypatch.setattr(store, "_apply_one", apply_one)
        monkeypatch.setattr(sqlite_module, "_read_meta", read_meta)
        with pytest.raises(StoreError, match="sqlite write failed"):
            await store.delete("/r/k")
        assert "/r/k" not in store._expiring  # what the rolled-back delete left in memory
        await store.create("/r/other", b"2")
        assert await store.get("/r/k") is not None
        assert "/r/k" in store._expiring  # read back before that write
    finally:
        await store.close()

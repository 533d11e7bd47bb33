"""The embedded store backend: etcd's semantics over one SQLite file, `<data_dir>/store.db`.

Tables:
- `history`: one row per revision (key, value, create_revision, prev_revision, deleted). A
  delete's row keeps the last value, so DELETE events carry it. Lists at an old revision and
  watch replays read this table.
- `current`: the live keys, keyed by key; a read of the current value is a primary-key lookup,
  never an aggregate over history.
- `meta`: the current revision and the compacted revision.
- `expiry`: the keys written with a TTL, and when each expires (wall-clock seconds).

Durability: WAL journal with `PRAGMA synchronous=FULL`. An acknowledged write must survive
`kill -9` of the process. `synchronous=NORMAL` would already give that (a WAL commit reaches the
kernel with write(2) before COMMIT returns, and the kernel keeps it when the process dies), but
not an OS crash or power loss, which can lose the last transactions. FULL fsyncs the WAL at
every commit, so an acknowledged write also survives those, the guarantee etcd gives (it fsyncs
its raft log before answering). The fsync cost is amortized by group commit: the single writer
thread takes every write waiting in its queue into one transaction (each write still gets its
own revision and its own outcome) and acknowledges them all after the one COMMIT.

Threads: all SQLite calls run off the event loop. Writes go to one dedicated writer thread
(which owns the only writing connection, so revisions are assigned without lock contention);
reads run on a small pool of reader threads, each with its own connection (WAL lets them read
a consistent snapshot while the writer commits).

Expiry: the writer thread keeps the expiring keys in memory too (a dict and a heap, read from
`expiry` at start), and when the soonest is due (checked at least every second while any is
pending) it deletes up to MAX_BATCH due keys in a transaction of their own, each a delete at
its own revision with its DELETE event, taking the writes waiting meanwhile before the next
batch. A failed expiry transaction (disk full) is tried again a second later, the writes
still served in between. Expiry times are wall-clock, so a key whose TTL ran out while the
store was closed goes right after it opens again.

Watch: committed events are published on the event loop, in revision order, to a `WatchHub`
(bounded buffer per watcher, dropped on overflow). A watch from an old revision registers with
the hub first, noting the hub's last published revision R, then replays history up to R from
the table while live events after R wait in its buffer: no gap, no duplicate. The writers are
answered one turn of the loop after the events are published, so the watchers' tasks woken by
an event (the apiserver's watch cache, and the watch streams it wakes in turn) run before the
writer resumes: a client waiting on a watch for a write (a kubelet for its pod's update, a
client for a status) gets the event without waiting for the writer's own response to be
encoded and sent, and a write answered is in the watch cache. Only one process may open a data
dir (an exclusive `flock` on `<data_dir>/store.lock`), since the fan-out is in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import heapq
import logging
import os
import queue
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, TypeVar

from ephemera import trace
from ephemera.store.base import (
    Compacted,
    Event,
    FutureRevision,
    KeyExists,
    KeyNotFound,
    KeyValue,
    ListResult,
    RevisionMismatch,
    Store,
    StoreError,
    Watcher,
)
from ephemera.store.watchhub import DEFAULT_PROGRESS_INTERVAL, DEFAULT_WATCH_CAPACITY, WatchHub

log = logging.getLogger("ephemera.store")

STORE_FILE = "store.db"
LOCK_FILE = "store.lock"
SYNCHRONOUS = "FULL"
MAX_BATCH = 256  # writes per group commit
REPLAY_PAGE = 512  # history rows read per replay step
EXPIRY_CHECK = 1.0  # seconds the writer waits at most for a write while keys expire

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (name, value) VALUES ('schema', 1), ('revision', 1), ('compacted', 0);
CREATE TABLE IF NOT EXISTS history (
    revision INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision INTEGER NOT NULL,  -- mod_revision of the version this write replaced, or 0
    deleted INTEGER NOT NULL         -- 1: a delete; value is the value it removed
);
CREATE INDEX IF NOT EXISTS history_by_key ON history (key, revision);
CREATE TABLE IF NOT EXISTS current (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    create_revision INTEGER NOT NULL,
    mod_revision INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS expiry (
    key TEXT PRIMARY KEY,
    expires_at REAL NOT NULL  -- time.time() when the key is deleted
);
"""

T = TypeVar("T")


def prefix_end(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix` (None: no bound)."""
    while prefix:
        last = ord(prefix[-1])
        if last < 0x10FFFF:
            following = last + 1
            if 0xD800 <= following <= 0xDFFF:  # surrogates cannot be encoded; skip them
                following = 0xE000
            return prefix[:-1] + chr(following)
        prefix = prefix[:-1]
    return None


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
    return conn


def _history_page(
    conn: sqlite3.Connection, prefix: str, after: int, until: int
) -> tuple[list[Event], int]:
    """Events under `prefix` in (after, until], at most REPLAY_PAGE of them, and the
    revision the page reaches."""
    compacted = _read_meta(conn)[1]
    if after + 1 < compacted:
        raise Compacted(after + 1, compacted)
    upper = prefix_end(prefix)
    upper_clause = "AND h.key < :upper" if upper is not None else ""
    rows = conn.execute(
        f"""SELECT h.revision, h.key, h.value, h.create_revision, h.prev_revision,
                   h.deleted, p.value
            FROM history AS h LEFT JOIN history AS p
                 ON h.deleted = 0 AND p.revision = h.prev_revision
            WHERE h.revision > :after AND h.revision <= :until
            AND h.key >= :lower {upper_clause}
            ORDER BY h.revision LIMIT :limit""",
        {"after": after, "until": until, "lower": prefix, "upper": upper, "limit": REPLAY_PAGE},
    ).fetchall()
    events: list[Event] = []
    for revision, key, value, create_revision, prev_revision, deleted, prev_value in rows:
        kv = KeyValue(key, value, create_revision, revision)
        if deleted:
            events.append(Event("DELETE", kv, KeyValue(key, value, create_revision, prev_revision)))
        else:
            prev = (
                KeyValue(key, prev_value, create_revision, prev_revision)
                if prev_value is not None
                else None
            )
            events.append(Event("PUT", kv, prev))
    reached = rows[-1][0] if len(rows) == REPLAY_PAGE else until
    return events, reached


def _read_meta(conn: sqlite3.Connection) -> tuple[int, int]:
    meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
    return int(meta["revision"]), int(meta["compacted"])


@dataclass
class _Write:
    kind: Literal["create", "update", "delete", "compact"]
    key: str
    value: bytes
    expected: int
    future: asyncio.Future[Any] | None  # None: the store's own (an expiry), nobody waits
    loop: asyncio.AbstractEventLoop
    ttl: int = 0


@dataclass
class _Outcome:
    result: Any = None
    error: BaseException | None = None
    event: Event | None = None
    compacted: int = 0
    revision: int = 0


@dataclass
class _Batch:
    writes: list[_Write]
    outcomes: list[_Outcome] = field(default_factory=list)


def _settle(future: asyncio.Future[Any] | None, outcome: _Outcome) -> None:
    if future is None:  # an expiry (its failures are logged by the writer)
        return
    if future.done():  # the caller was cancelled (the write itself happened)
        return
    if outcome.error is not None:
        future.set_exception(outcome.error)
    else:
        future.set_result(outcome.result)


class SqliteStore(Store):
    """The sqlite backend. Open it with `SqliteStore(data_dir)` (or `open_store("sqlite")`)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
        watch_capacity: int = DEFAULT_WATCH_CAPACITY,
        readers: int = 4,
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / STORE_FILE
        self._lock_file: IO[bytes] | None = open(data_dir / LOCK_FILE, "a+b")  # noqa: SIM115
        try:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise StoreError(f"{data_dir} is in use by another process") from None
        self._writer_conn = _connect(self.path)
        self._writer_conn.executescript(SCHEMA)
        revision, compacted = _read_meta(self._writer_conn)
        self._writer_revision = revision  # owned by the writer thread
        # The expiring keys (owned by the writer thread): key -> when, and a heap of
        # (when, key) whose entries are stale once the dict says otherwise.
        self._expiring: dict[str, float] = {}
        self._expiry_heap: list[tuple[float, str]] = []
        self._load_expiry(self._writer_conn)
        self._expiry_not_before = 0.0  # time.time() before which no expiry is tried again
        self._stale = False  # memory not reloaded after a rollback yet (`_reload`)
        self._loop: asyncio.AbstractEventLoop | None = None  # where expiries are published
        self._revision = revision  # the last acknowledged revision (event loop)
        self._compacted = compacted
        self._hub = WatchHub(revision, capacity=watch_capacity, progress_interval=progress_interval)
        self._writes: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._writer = threading.Thread(
            target=self._write_loop, name="ephemera-sqlite-writer", daemon=True
        )
        self._writer.start()
        self._reader_local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_conns_lock = threading.Lock()
        self._readers = ThreadPoolExecutor(
            max_workers=readers, thread_name_prefix="ephemera-sqlite-read"
        )
        self._closed = False

    # -- writes --------------------------------------------------------------------------

    async def _write(
        self,
        kind: Literal["create", "update", "delete", "compact"],
        key: str = "",
        value: bytes = b"",
        expected: int = 0,
        ttl: int = 0,
    ) -> Any:
        if self._closed:
            raise StoreError("store is closed")
        loop = asyncio.get_running_loop()
        self._loop = loop
        future: asyncio.Future[Any] = loop.create_future()
        self._writes.put(_Write(kind, key, value, expected, future, loop, ttl))
        return await future

    def _load_expiry(self, conn: sqlite3.Connection) -> None:
        self._expiring = dict(conn.execute("SELECT key, expires_at FROM expiry").fetchall())
        self._expiry_heap = [(when, key) for key, when in self._expiring.items()]
        heapq.heapify(self._expiry_heap)

    def _set_expiry(self, conn: sqlite3.Connection, key: str, ttl: int) -> None:
        """Within a write's transaction: `key` expires `ttl` seconds from now (0: never)."""
        if ttl > 0:
            when = time.time() + ttl
            conn.execute("INSERT OR REPLACE INTO expiry VALUES (?, ?)", (key, when))
            self._expiring[key] = when
            heapq.heappush(self._expiry_heap, (when, key))
        elif self._expiring.pop(key, None) is not None:
            conn.execute("DELETE FROM expiry WHERE key = ?", (key,))

    def _expiry_wait(self) -> float | None:
        """How long the writer may wait for a write before keys are due (None: forever).
        Not less than a second while nothing can be published yet (no loop known) or
        after an expiry failed."""
        if not self._expiry_heap:
            return None
        if self._loop is None or time.time() < self._expiry_not_before:
            return EXPIRY_CHECK
        return min(max(self._expiry_heap[0][0] - time.time(), 0.0), EXPIRY_CHECK)

    def _expiry_due(self) -> bool:
        return bool(self._expiry_heap) and self._expiry_heap[0][0] <= time.time() \
            and self._loop is not None and time.time() >= self._expiry_not_before

    def _expire(self, conn: sqlite3.Connection) -> None:
        """Delete up to MAX_BATCH keys whose time has come, in one transaction (the writer
        takes the writes waiting meanwhile before the next batch)."""
        loop = self._loop
        if loop is None or time.time() < self._expiry_not_before:
            return  # nothing to publish on yet (after the first write or watch), or backing off
        now = time.time()
        heap = self._expiry_heap
        due: list[_Write] = []
        while heap and heap[0][0] <= now and len(due) < MAX_BATCH:
            when, key = heapq.heappop(heap)
            if self._expiring.get(key) == when:  # not rewritten since
                due.append(_Write("delete", key, b"", 0, None, loop))
        if len(heap) > 2 * len(self._expiring) + 1024:  # mostly entries rewritten since
            self._expiry_heap = [(when, key) for key, when in self._expiring.items()]
            heapq.heapify(self._expiry_heap)
        if not due:
            return
        batch = _Batch(due)
        committed = self._apply(conn, batch)
        failed = [(w.key, o.error) for w, o in zip(due, batch.outcomes, strict=True)
                  if o.error is not None]
        if not committed:
            # The transaction failed (disk full, I/O error): its keys are due again (reloaded
            # by `_apply`); the writes waiting are taken first, and the next try is in a second.
            self._expiry_not_before = time.time() + EXPIRY_CHECK
            log.warning("expiring %d keys failed: %s; trying again in %.0f s", len(due),
                        failed[0][1], EXPIRY_CHECK)
            return
        for key, _ in failed:  # gone or rewritten some other way: no longer expiring
            if self._expiring.pop(key, None) is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("DELETE FROM expiry WHERE key = ?", (key,))
        log.info("expired %d keys", len(due) - len(failed))
        with contextlib.suppress(RuntimeError):  # the loop is gone
            loop.call_soon_threadsafe(self._acknowledge, batch)

    def _write_loop(self) -> None:
        conn = self._writer_conn
        stopping = False
        while not stopping:
            try:
                first = self._writes.get(timeout=self._expiry_wait())
            except queue.Empty:
                if self._expiry_due():
                    self._expire(conn)
                continue
            if first is None:
                break
            writes = [first]
            while len(writes) < MAX_BATCH:
                try:
                    following = self._writes.get_nowait()
                except queue.Empty:
                    break
                if following is None:
                    stopping = True
                    break
                writes.append(following)
            batch = _Batch(writes)
            if trace.ENABLED:
                for write in writes:
                    trace.mark("store.begin", write.key)
            self._apply(conn, batch)
            if trace.ENABLED:
                for write in writes:
                    trace.mark("store.committed", write.key)
            with contextlib.suppress(RuntimeError):  # the loop is gone
                writes[0].loop.call_soon_threadsafe(self._acknowledge, batch)
            if self._expiry_due():
                self._expire(conn)

    def _reload(self, conn: sqlite3.Connection) -> None:
        """After a rollback: the revision and the expiring keys as the tables have them (the
        rolled-back writes changed them in memory); if this read fails too, it is tried again
        before the next transaction."""
        try:
            self._writer_revision = _read_meta(conn)[0]
            self._load_expiry(conn)
            self._stale = False
        except sqlite3.Error:
            self._stale = True

    def _apply(self, conn: sqlite3.Connection, batch: _Batch) -> bool:
        """Run the batch's writes in one transaction; whether it committed (else every
        write's outcome is the failure)."""
        if self._stale:
            self._reload(conn)
        revision = self._writer_revision
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for write in batch.writes:
                    outcome = _Outcome()
                    try:
                        revision = self._apply_one(conn, write, revision, outcome)
                    except StoreError as error:
                        outcome.error = error
                    batch.outcomes.append(outcome)
                conn.execute("UPDATE meta SET value = ? WHERE name = 'revision'", (revision,))
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except Exception as error:  # sqlite3.Error, or a bug: answer every write anyway
            log.exception("sqlite write failed")
            failure = StoreError("sqlite write failed: " + (
                str(error) if isinstance(error, sqlite3.Error) else "see the apiserver's log"))
            batch.outcomes = [_Outcome(error=failure) for _ in batch.writes]
            self._reload(conn)
            return False
        self._writer_revision = revision
        return True

    def _apply_one(
        self, conn: sqlite3.Connection, write: _Write, revision: int, outcome: _Outcome
    ) -> int:
        key = write.key
        if write.kind == "compact":
            target = write.expected
            compacted = conn.execute("SELECT value FROM meta WHERE name = 'compacted'").fetchone()[
                0
            ]
            if target > revision:
                raise FutureRevision(target, revision)
            if target > compacted:
                # Keep, for every key, its latest version at `target` unless that is a delete,
                # so that a list at `target` still works; drop everything else older.
                conn.execute(
                    """DELETE FROM history WHERE revision < :target AND (deleted = 1 OR EXISTS (
                           SELECT 1 FROM history AS newer WHERE newer.key = history.key
                           AND newer.revision > history.revision
                           AND newer.revision <= :target))""",
                    {"target": target},
                )
                conn.execute("UPDATE meta SET value = ? WHERE name = 'compacted'", (target,))
                compacted = target
            outcome.compacted = compacted
            return revision
        row = conn.execute(
            "SELECT value, create_revision, mod_revision FROM current WHERE key = ?", (key,)
        ).fetchone()
        current = KeyValue(key, row[0], row[1], row[2]) if row is not None else None
        if write.kind == "create":
            if current is not None:
                raise KeyExists(key)
            revision += 1
            conn.execute(
                "INSERT INTO history VALUES (?, ?, ?, ?, 0, 0)",
                (revision, key, write.value, revision),
            )
            conn.execute(
                "INSERT INTO current VALUES (?, ?, ?, ?)", (key, write.value, revision, revision)
            )
            self._set_expiry(conn, key, write.ttl)
            kv = KeyValue(key, write.value, revision, revision)
            outcome.result = kv
            outcome.event = Event("PUT", kv, None)
            outcome.revision = revision
            return revision
        if current is None:
            raise KeyNotFound(key)
        if (write.kind == "update" or write.expected) and current.mod_revision != write.expected:
            raise RevisionMismatch(key, current)
        revision += 1
        if write.kind == "update":
            conn.execute(
                "INSERT INTO history VALUES (?, ?, ?, ?, ?, 0)",
                (revision, key, write.value, current.create_revision, current.mod_revision),
            )
            conn.execute(
                "UPDATE current SET value = ?, mod_revision = ? WHERE key = ?",
                (write.value, revision, key),
            )
            self._set_expiry(conn, key, write.ttl)
            kv = KeyValue(key, write.value, current.create_revision, revision)
            outcome.event = Event("PUT", kv, current)
        else:
            conn.execute(
                "INSERT INTO history VALUES (?, ?, ?, ?, ?, 1)",
                (revision, key, current.value, current.create_revision, current.mod_revision),
            )
            conn.execute("DELETE FROM current WHERE key = ?", (key,))
            self._set_expiry(conn, key, 0)
            kv = KeyValue(key, current.value, current.create_revision, revision)
            outcome.event = Event("DELETE", kv, current)
        outcome.result = kv
        outcome.revision = revision
        return revision

    def _acknowledge(self, batch: _Batch) -> None:
        """On the event loop, after COMMIT: publish the events in order, then answer at the
        loop's next turn (after the tasks the events woke; see the module's docstring). (A
        store serves one event loop; a write from another loop is answered on its own.)"""
        events = [outcome.event for outcome in batch.outcomes if outcome.event is not None]
        if events:
            self._revision = max(self._revision, events[-1].revision)
            self._hub.publish(events)
            if trace.ENABLED:
                for write in batch.writes:
                    trace.mark("store.published", write.key)
        loop = batch.writes[0].loop
        for write, outcome in zip(batch.writes, batch.outcomes, strict=True):
            if outcome.compacted:
                self._compacted = max(self._compacted, outcome.compacted)
            if write.loop is loop:
                loop.call_soon(_settle, write.future, outcome)
            else:
                with contextlib.suppress(RuntimeError):
                    write.loop.call_soon_threadsafe(_settle, write.future, outcome)

    async def create(self, key: str, value: bytes, *, ttl: int = 0) -> KeyValue:
        kv: KeyValue = await self._write("create", key, value, ttl=ttl)
        return kv

    async def update(self, key: str, value: bytes, expected_mod_revision: int, *,
                     ttl: int = 0) -> KeyValue:
        kv: KeyValue = await self._write("update", key, value, expected_mod_revision, ttl)
        return kv

    async def delete(self, key: str, expected_mod_revision: int = 0) -> KeyValue:
        kv: KeyValue = await self._write("delete", key, b"", expected_mod_revision)
        return kv

    async def compact(self, revision: int) -> None:
        await self._write("compact", expected=revision)

    # -- reads ---------------------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._reader_local, "conn", None)
        if conn is None:
            conn = _connect(self.path)
            conn.execute("PRAGMA query_only=1")
            self._reader_local.conn = conn
            with self._reader_conns_lock:
                self._reader_conns.append(conn)
        return conn

    async def _read(self, function: Any, *args: Any) -> Any:
        if self._closed:
            raise StoreError("store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, function, *args)

    def _in_snapshot(self, function: Any, *args: Any) -> Any:
        conn = self._reader()
        conn.execute("BEGIN")
        try:
            return function(conn, *args)
        finally:
            conn.execute("COMMIT")

    async def get(self, key: str) -> KeyValue | None:
        kv: KeyValue | None = await self._read(self._get, key)
        return kv

    def _get(self, key: str) -> KeyValue | None:
        row = (
            self._reader()
            .execute(
                "SELECT value, create_revision, mod_revision FROM current WHERE key = ?", (key,)
            )
            .fetchone()
        )
        return KeyValue(key, row[0], row[1], row[2]) if row is not None else None

    async def list(
        self, prefix: str, *, limit: int = 0, start_after: str = "", revision: int = 0
    ) -> ListResult:
        result: ListResult = await self._read(
            self._in_snapshot, self._list, prefix, limit, start_after, revision
        )
        return result

    def _list(
        self, conn: sqlite3.Connection, prefix: str, limit: int, start_after: str, revision: int
    ) -> ListResult:
        current, compacted = _read_meta(conn)
        upper = prefix_end(prefix)
        params: dict[str, Any] = {
            "lower": prefix,
            "upper": upper,
            "after": start_after,
            "limit": limit + 1 if limit > 0 else -1,
            "revision": revision,
        }
        upper_clause = "AND key < :upper" if upper is not None else ""
        if revision == 0 or revision == current:
            source = f"""FROM current WHERE key >= :lower {upper_clause} AND key > :after"""
            columns = "key, value, create_revision, mod_revision"
            read_at = current
        elif revision > current:
            raise FutureRevision(revision, current)
        elif revision < compacted:
            raise Compacted(revision, compacted)
        else:
            source = f"""FROM history
                    WHERE key >= :lower {upper_clause} AND key > :after
                    AND revision <= :revision AND deleted = 0
                    AND revision = (SELECT MAX(newest.revision) FROM history AS newest
                                    WHERE newest.key = history.key
                                    AND newest.revision <= :revision)"""
            columns = "key, value, create_revision, revision"
            read_at = revision
        rows = conn.execute(
            f"SELECT {columns} {source} ORDER BY key LIMIT :limit", params
        ).fetchall()
        more = 0 < limit < len(rows)
        remaining = 0
        if more:
            rows = rows[:limit]
            remaining = conn.execute(f"SELECT COUNT(*) {source}", params).fetchone()[0] - limit
        return ListResult([KeyValue(*row) for row in rows], read_at, more, remaining)

    async def watch(self, prefix: str, after_revision: int, *, prev: bool = True) -> Watcher:
        # `prev` is ignored: a history row holds the previous value beside the new one.
        if self._closed:
            raise StoreError("store is closed")
        self._loop = asyncio.get_running_loop()
        if after_revision + 1 < self._compacted:
            raise Compacted(after_revision + 1, self._compacted)
        until = self._hub.revision
        watcher = self._hub.register(prefix, after_revision)
        if after_revision < until:
            position = after_revision

            async def replay() -> list[Event]:
                nonlocal position
                while position < until:
                    events, position = await self._read(
                        self._in_snapshot, _history_page, prefix, position, until
                    )
                    if events:
                        return events
                return []

            watcher.set_replay(replay)
        return watcher

    async def current_revision(self) -> int:
        return self._revision

    async def compacted_revision(self) -> int:
        return self._compacted

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._hub.close()
        self._writes.put(None)
        await asyncio.to_thread(self._writer.join)
        await asyncio.to_thread(self._readers.shutdown, True)
        with self._reader_conns_lock:
            conns, self._reader_conns = self._reader_conns, []
        for conn in [*conns, self._writer_conn]:
            conn.close()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def __repr__(self) -> str:
        return f"SqliteStore({os.fspath(self.path)!r})"

"""The store: etcd's semantics (a global revision, compare-and-swap on a key's modification
revision, watch from a revision, compaction) over two backends, `sqlite` (embedded, the
default) and `etcd` (a real etcd server). Only this package touches SQLite or etcd.

`open_store(kind, ...)` opens a backend by name."""

from __future__ import annotations

from pathlib import Path

from ephemera.store.base import (
    Compacted,
    Event,
    FutureRevision,
    KeyExists,
    KeyNotFound,
    KeyValue,
    ListResult,
    Progress,
    RevisionMismatch,
    Store,
    StoreError,
    Watcher,
    WatcherDropped,
)
from ephemera.store.watchhub import DEFAULT_PROGRESS_INTERVAL, DEFAULT_WATCH_CAPACITY

STORE_KINDS = ("sqlite", "etcd")


def open_store(
    kind: str,
    *,
    data_dir: Path | None = None,
    endpoints: list[str] | None = None,
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
    watch_capacity: int = DEFAULT_WATCH_CAPACITY,
    prefix: str = "",
) -> Store:
    """Open a store: `sqlite` in `data_dir` (file `store.db`), or `etcd` at `endpoints`
    (client URLs such as `http://127.0.0.1:2379`) with every key under `prefix`.
    `progress_interval`: seconds of silence after which a watcher yields `Progress`;
    `watch_capacity`: events a watcher may hold unconsumed before it is dropped.
    A store serves the one event loop that uses it; `await store.close()` at the end."""
    if kind == "sqlite":
        if data_dir is None:
            raise ValueError("the sqlite store needs a data dir")
        if prefix:
            raise ValueError("a key prefix is only supported by the etcd store")
        from ephemera.store.sqlite import SqliteStore

        return SqliteStore(
            data_dir, progress_interval=progress_interval, watch_capacity=watch_capacity
        )
    if kind == "etcd":
        if not endpoints:
            raise ValueError("the etcd store needs endpoints")
        from ephemera.store.etcd import EtcdStore

        return EtcdStore(
            endpoints,
            prefix=prefix,
            progress_interval=progress_interval,
            watch_capacity=watch_capacity,
        )
    raise ValueError(f"unknown store kind {kind!r} (expected one of {', '.join(STORE_KINDS)})")


__all__ = [
    "DEFAULT_PROGRESS_INTERVAL",
    "DEFAULT_WATCH_CAPACITY",
    "STORE_KINDS",
    "Compacted",
    "Event",
    "FutureRevision",
    "KeyExists",
    "KeyNotFound",
    "KeyValue",
    "ListResult",
    "Progress",
    "RevisionMismatch",
    "Store",
    "StoreError",
    "Watcher",
    "WatcherDropped",
    "open_store",
]

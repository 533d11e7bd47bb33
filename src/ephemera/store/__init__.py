"""The store: etcd's semantics (a global revision, compare-and-swap on a key's modification
revision, watch from a revision, compaction) over two backends, `sqlite` (embedded, the
default) and `etcd` (a real etcd server). Only this package touches SQLite or etcd."""

from ephemera.store.base import (
    Compacted,
    Event,
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

__all__ = [
    "Compacted",
    "Event",
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
]

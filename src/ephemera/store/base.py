"""The Store interface every backend implements, with etcd's semantics.

Revisions: one global counter that only grows; every successful write (create, update,
delete) takes the next revision. A key's `mod_revision` is the revision of its last write
and is what compare-and-swap compares (the apiserver serves it as `resourceVersion`).

Watch: `watch(prefix, after_revision)` delivers every event with revision > after_revision,
each exactly once, in revision order, without gaps; when nothing happens for a while it
yields `Progress(revision)` (for watch bookmarks). A watcher whose consumer falls behind by
more than its buffer is dropped (`WatcherDropped` raised from iteration) instead of growing
without bound; the client re-lists.

Compaction: after `compact(rev)`, a list at a revision < rev, or a watch from
after_revision < rev - 1 (history no longer complete) raises `Compacted`.

Expiry: a create or update with `ttl` (seconds) makes the key expire, as a key attached to
an etcd lease: after `ttl` seconds, and at most a reuse window later (SQLite: a second or so;
etcd: min(60 s, 5% of the TTL), the lease being shared by the writes of that window), the
key is deleted with a DELETE event as any delete (SQLite: each at a revision of its own;
etcd: the keys of one lease at one revision). A write without `ttl` makes the key permanent
again (etcd: a put without a lease detaches the key from its lease).
The apiserver gives Events their TTL this way (`--event-ttl`).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import ClassVar, Literal


class StoreError(Exception):
    """Base of the store's errors."""


class KeyExists(StoreError):
    def __init__(self, key: str) -> None:
        super().__init__(f"key exists: {key}")
        self.key = key


class KeyNotFound(StoreError):
    def __init__(self, key: str) -> None:
        super().__init__(f"key not found: {key}")
        self.key = key


class RevisionMismatch(StoreError):
    """A compare-and-swap failed; `current` is the key's current value (None if deleted)."""

    def __init__(self, key: str, current: KeyValue | None) -> None:
        super().__init__(f"revision mismatch on {key}")
        self.key = key
        self.current = current


class Compacted(StoreError):
    """The requested revision has been compacted away (the apiserver answers 410)."""

    def __init__(self, requested: int, compacted: int) -> None:
        super().__init__(f"revision {requested} compacted (oldest available {compacted})")
        self.requested = requested
        self.compacted = compacted


class FutureRevision(StoreError):
    """A list or compaction at a revision newer than the current one (etcd's "required
    revision is a future revision"; the apiserver answers "Too large resource version")."""

    def __init__(self, requested: int, current: int) -> None:
        super().__init__(f"revision {requested} is in the future (current {current})")
        self.requested = requested
        self.current = current


class WatcherDropped(StoreError):
    """The watcher fell behind its bounded buffer and was dropped; re-list and re-watch."""


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Event:
    """A change: `PUT` (create or update) or `DELETE`. For DELETE, `kv.value` is the value the
    key had before it was deleted and `kv.mod_revision` is the revision of the delete.
    `prev` is the previous value of the key, when there was one."""

    type: Literal["PUT", "DELETE"]
    kv: KeyValue
    prev: KeyValue | None

    @property
    def revision(self) -> int:
        return self.kv.mod_revision


@dataclass(frozen=True, slots=True)
class Progress:
    """No events up to `revision` (etcd's progress notification)."""

    revision: int


@dataclass(frozen=True, slots=True)
class ListResult:
    kvs: list[KeyValue]
    revision: int  # the revision the list was read at
    more: bool  # True when `limit` cut the list; continue after kvs[-1].key
    remaining: int = 0  # when `more`: how many keys of the range come after kvs[-1].key


class Watcher(abc.ABC):
    """An async iterator of `Event | Progress`; `close()` stops it."""

    @abc.abstractmethod
    def __aiter__(self) -> AsyncIterator[Event | Progress]: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    def take_ready(self, limit: int) -> list[Event | Progress]:
        """At most `limit` of the next items iteration would yield without waiting, taken
        now (in order); none when the next one needs a wait (or ends the iteration). Only
        between two steps of the iteration, never while one is awaited. A consumer that
        writes to a client uses it to send everything queued in one write."""
        del limit
        return []

    async def next_within(self, seconds: float) -> Event | Progress | Literal[False] | None:
        """The next item iteration would yield, waiting at most `seconds` for it (False: none
        came in time), None once the watch has ended (closed, or `interrupt`ed); raises what
        iteration raises. Awaited by the consumer's own task: no task of its own, so an item
        pushed reaches the consumer at the loop's next turn. Not mixed with iteration."""
        raise NotImplementedError

    def deliver_to(self, sink: Callable[[Event | Progress], None]) -> bool:
        """Hand the items pushed from now on straight to `sink`, in the producer's call,
        whenever nothing is waiting for iteration (buffered or to replay): no hop through
        the consumer's task. Iteration then still yields what was waiting, and ends or
        raises as before (a `sink` that raises fails the watch). False when this watcher
        cannot (the consumer iterates as before)."""
        del sink
        return False

    def interrupt(self) -> None:
        """End the watch for its consumer: a `next_within` waiting, or the next one, returns
        None."""
        raise NotImplementedError


class Store(abc.ABC):
    """Keys are strings (`/registry/pods/default/p1`), values opaque bytes."""

    # What messages call the store ("error getting data from etcd", as upstream's say).
    backend: ClassVar[str] = "the store"

    @abc.abstractmethod
    async def create(self, key: str, value: bytes, *, ttl: int = 0) -> KeyValue:
        """Create `key` (expiring after `ttl` seconds, if not 0); raises KeyExists. Returns
        the stored KeyValue."""

    @abc.abstractmethod
    async def get(self, key: str) -> KeyValue | None: ...

    @abc.abstractmethod
    async def list(
        self, prefix: str, *, limit: int = 0, start_after: str = "", revision: int = 0
    ) -> ListResult:
        """Keys under `prefix` in key order, those > `start_after`, at most `limit` (0: all),
        read at `revision` (0: now); when `limit` cut the list, how many keys remain.
        Raises Compacted for a revision older than the oldest kept, FutureRevision for one
        newer than the current revision."""

    @abc.abstractmethod
    async def update(self, key: str, value: bytes, expected_mod_revision: int, *,
                     ttl: int = 0) -> KeyValue:
        """Replace the value if the key's mod_revision is `expected_mod_revision` (expiring
        after `ttl` seconds from now, if not 0; permanent otherwise); raises
        RevisionMismatch (with the current value) or KeyNotFound."""

    @abc.abstractmethod
    async def delete(self, key: str, expected_mod_revision: int = 0) -> KeyValue:
        """Delete the key (if `expected_mod_revision` is non-zero, only at that revision).
        Returns the deleted value with mod_revision set to the delete's revision. Raises
        KeyNotFound or RevisionMismatch."""

    @abc.abstractmethod
    async def watch(self, prefix: str, after_revision: int, *, prev: bool = True) -> Watcher:
        """Events under `prefix` with revision > after_revision. Raises Compacted when that
        history is gone (iteration raises it too when a compaction overtakes a watcher that
        is still catching up on history). With `prev` False the events need not carry `prev`,
        nor a DELETE the deleted value (its `kv.value` may be empty): for a watcher that holds
        every value itself (the watch cache), so a store that reads previous values for each
        event and watcher (etcd's `prev_kv`) does not."""

    @abc.abstractmethod
    async def current_revision(self) -> int: ...

    @abc.abstractmethod
    async def compacted_revision(self) -> int:
        """The oldest revision still readable (0 when nothing was compacted)."""

    @abc.abstractmethod
    async def compact(self, revision: int) -> None:
        """Forget history older than `revision` (a no-op when already compacted that far;
        FutureRevision when `revision` is newer than the current one)."""

    @abc.abstractmethod
    async def close(self) -> None: ...

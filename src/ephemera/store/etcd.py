"""The etcd store backend: the Store interface on a real etcd 3.4 server.

Client: `aetcd`'s gRPC bindings (`aetcd.rpc`: the generated KV and Watch stubs and messages)
over one asyncio gRPC channel for the unary calls; the shared watch stream is read by the loop
itself (`ephemera.store.etcdwatch`, below). We chose gRPC over the JSON gateway because it is
faster here: sequential puts ran at ~1,400/s with aetcd against ~600/s for the gateway through
a Python HTTP client, with half the latency (linux-runtime-facts.md section 8), and the watch
is a real bidirectional stream rather than chunked JSON. We call the stubs directly rather
than `aetcd.Client`'s helpers because those lack what the interface needs: range `limit` and
`revision`, and progress notifications (aetcd's watcher silently discards responses without
events, and does not expose the header revision).

Semantics:
- create = Txn(create_revision(key) == 0 → put); update = Txn(version > 0 and mod_revision ==
  expected → put, else range); delete likewise (the range on failure gives the current value
  for RevisionMismatch). etcd's own revision is the store revision (an empty etcd is at 1).
- list = Ranges from max(prefix, start_after + "\\0") to the prefix end, read in pages of at
  most `RANGE_PAGE` keys (`limit` on every Range, the next page after the last key read), all
  at the first page's revision, until the caller's `limit` (0: the whole range) is reached or
  etcd says there is no `more`. A page that still exceeds the receive limit (huge values) is
  read again in halves, down to one key. So no list, however large the store, asks etcd for
  one message of unbounded size (etcd's own Go client accepts up to 2 GiB in one message).
- watch catch-up: a watcher starting behind the current revision is sent up to 1,000
  revisions of events in one response by etcd; the watch is created with `fragment`, so etcd
  splits any response larger than its `--max-request-bytes` (1.5 MiB by default) into
  fragments, which the stream reader joins again.
- watch = one watch per watcher with start_revision = after_revision + 1, prev_kv (for
  DELETE values and `prev`; not for the watch cache, which holds every value itself: etcd
  reads each event's previous value again for each watcher that asks) and progress_notify.
  Events go to a bounded buffer (`BufferedWatcher`); a watcher that overflows it is dropped
  and its etcd watch cancelled.
- watch stream: all of a store's watches share one etcd Watch call (`etcdwatch.WatchStream`),
  as etcd's own client multiplexes a client's watches; creates and cancels are sent on it, and
  etcd answers creates in the order they were sent, which pairs each created response with
  its watch. A stream that ends under its watches (the member it was on stopped, the
  connection lost, an error status) is replaced: its watches are created again on a new
  stream (the endpoints tried in order) from the revision after the newest each was handed,
  as etcd's client re-creates its watches, so their consumers see no end (`_resume`): at
  once the first time, then after `etcdwatch.RESUME_DELAYS` (0.25 s doubling to 4 s, so a
  restarting member is waited for about 8 s); one whose revisions were compacted meanwhile
  ends with `Compacted`, and a watch created again that many times without etcd answering
  it in between ends with `WatcherDropped`.
- watch reading: that one call is not made through gRPC's library but spoken over HTTP/2 by
  `etcdwatch` on a connection of its own, which the event loop reads like any socket: all
  that arrived is parsed in one callback, for every watch, with no thread. gRPC's blocking
  API read it on threads (about 0.3 ms of CPU per event in a busy apiserver worker), and
  `grpc.aio` on the loop took one message per loop iteration (the watch cache fell 20-45 s
  behind etcd at 1,000 nodes); `etcdwatch`'s docstring has the numbers.
- ttl: a create or update with `ttl` puts the key with a lease (`LeaseManager`: one granted
  per minute or so, shared by the keys written meanwhile, as upstream's apiserver does); etcd
  deletes the key when its lease expires. A put without `ttl` detaches the key from its lease.
- Errors: etcd answers OUT_OF_RANGE "mvcc: required revision has been compacted" (a list or a
  compaction at a compacted revision) and "... is a future revision"; these become `Compacted`
  and `FutureRevision`. A watch from a compacted revision is answered with a created response
  followed by a cancel carrying `compact_revision`; the stream reader turns that into
  `Compacted`. `watch()` checks compaction up front with a one-key Range at the start
  revision, so the common case raises from `watch()` itself.
- `compacted_revision()`: etcd has no call for it; a Range at revision 1 succeeds when nothing
  was compacted, otherwise a throwaway watch from revision 1 is answered with the exact
  `compact_revision`.

Progress: etcd 3.4.23's on-demand progress request (WatchProgressRequest) can overtake events
still queued for the watcher (etcd issue #15220, fixed in 3.4.25), so we never send it. The
server's periodic progress notification (progress_notify, every
`--experimental-watch-progress-notify-interval`, 10 minutes unless configured; the tests use
200ms, production should use a few seconds as Kubernetes recommends) is sent only to watchers
that have caught up, through the same channel as the events, so its header revision is safe;
each becomes a `Progress`. Between those, when the consumer has waited `progress_interval`
with nothing to receive, we synthesise `Progress(last revision known complete)`: the highest of
after_revision, the last event and the last server notification.

Message limits (gRPC channel options, chosen rather than gRPC's defaults of 4 MiB received,
unlimited sent): receive `MAX_RECEIVE_BYTES` (64 MiB), sent `MAX_SEND_BYTES` (16 MiB). A page
of 500 keys of ordinary objects is a few MB, a watch fragment at most the server's request
limit plus one event, so 64 MiB leaves an order of magnitude of room; beyond it a page is
halved (above). Sends are single objects, bounded by etcd's `--max-request-bytes` (1.5 MiB by
default, 10 MiB at most as etcd recommends); 16 MiB lets the server's limit be the one a user
meets, with etcd's own "request is too large".

Key prefix: `prefix` is prepended to every key and stripped from results, so several stores
(test runs) share one etcd without seeing each other's keys. Revisions and compaction are
etcd-wide, shared by all of them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

import grpc
from aetcd import rpc

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
from ephemera.store.etcdwatch import RESUME_DELAYS, Watch, WatchStream
from ephemera.store.watchhub import (
    DEFAULT_PROGRESS_INTERVAL,
    DEFAULT_WATCH_CAPACITY,
    BufferedWatcher,
)

log = logging.getLogger("ephemera.store.etcd")

COMPACTED_MESSAGE = "required revision has been compacted"
FUTURE_MESSAGE = "required revision is a future revision"
ALL_KEYS = b"\x00"  # as range_end: every key >= key; as key with range_end \0: all keys
RANGE_PAGE = 500  # keys per Range of a list (the apiserver's and client-go's page size)
MAX_RECEIVE_BYTES = 64 * 1024 * 1024  # the channel's receive limit (module docstring)
MAX_SEND_BYTES = 16 * 1024 * 1024  # the channel's send limit (module docstring)
TOO_LARGE_MESSAGE = "larger than max"  # gRPC's "Received message larger than max (a vs. b)"


def bytes_prefix_end(prefix: bytes) -> bytes:
    """etcd's range end for a prefix (b"\\0", every key from the start, when there is none)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return ALL_KEYS
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def etcd_addresses(endpoints: list[str]) -> list[tuple[str, int]]:
    """The (host, port) of each etcd client URL (`http://host:port` or `host:port`)."""
    if not endpoints:
        raise ValueError("no etcd endpoints")
    addresses: list[tuple[str, int]] = []
    for endpoint in endpoints:
        parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        if parts.scheme not in ("http", ""):
            raise ValueError(f"unsupported etcd endpoint {endpoint!r} (only http)")
        if parts.hostname is None:
            raise ValueError(f"bad etcd endpoint {endpoint!r}")
        addresses.append((parts.hostname, parts.port or 2379))
    return addresses


def grpc_target(endpoints: list[str]) -> str:
    """A gRPC target for etcd client URLs. Several IPv4 endpoints become one `ipv4:` target
    (gRPC fails over between them); otherwise the first endpoint is used."""
    addresses = etcd_addresses(endpoints)
    try:
        if len(addresses) > 1:
            for host, _ in addresses:
                ipaddress.IPv4Address(host)
            return "ipv4:" + ",".join(f"{host}:{port}" for host, port in addresses)
    except ValueError:
        pass
    host, port = addresses[0]
    return f"{host}:{port}"


def _is(error: grpc.aio.AioRpcError, message: str) -> bool:
    return error.code() == grpc.StatusCode.OUT_OF_RANGE and message in (error.details() or "")


# upstream's lease manager (storage/etcd3/lease_manager.go): a lease is reused by the writes
# of the next `min(60 s, 5% of the TTL)`, at most 1,000 keys each, so that expiring objects
# (Events) do not cost a LeaseGrant each.
LEASE_REUSE_SECONDS = 60
LEASE_REUSE_PERCENT = 0.05
LEASE_MAX_KEYS = 1000


class LeaseManager:
    """Leases for keys written with a TTL, one granted per reuse window (upstream's
    `leaseManager.GetLease`): a key expires between `ttl` and `ttl` + the window after its
    write, never before."""

    def __init__(self, grant: Callable[[int], Awaitable[int]], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._grant = grant  # TTL seconds -> a new lease's ID
        self._clock = clock
        self._lease = 0
        self._expires = 0.0  # when the last granted lease expires (clock)
        self._keys = 0  # keys attached to it so far
        self._lock = asyncio.Lock()

    async def lease_for(self, ttl: int) -> int:
        async with self._lock:
            now = self._clock()
            reuse = min(LEASE_REUSE_SECONDS, int(LEASE_REUSE_PERCENT * ttl))
            # It outlives this key's TTL, and by no more than the window.
            valid = now + ttl < self._expires
            sufficient = now + ttl + reuse >= self._expires
            self._keys += 1
            if self._lease and valid and sufficient and self._keys <= LEASE_MAX_KEYS:
                return self._lease
            self._lease = await self._grant(ttl + reuse)
            self._expires = now + ttl + reuse
            self._keys = 1
            return self._lease


class EtcdStore(Store):
    """The etcd backend: `EtcdStore(["http://127.0.0.1:2379"], prefix="/t-1")`."""

    backend = "etcd"

    def __init__(
        self,
        endpoints: list[str],
        *,
        prefix: str = "",
        progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
        watch_capacity: int = DEFAULT_WATCH_CAPACITY,
        timeout: float = 30.0,
        max_receive_bytes: int = MAX_RECEIVE_BYTES,
        range_page: int = RANGE_PAGE,
    ) -> None:
        self.target = grpc_target(endpoints)
        self._addresses = etcd_addresses(endpoints)
        self._max_receive_bytes = max_receive_bytes
        self._range_page = range_page
        self.prefix = prefix
        self._prefix_bytes = prefix.encode()
        self._progress_interval = progress_interval
        self._watch_capacity = watch_capacity
        self._timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._kv: rpc.KVStub | None = None
        self._watch_stub: rpc.WatchStub | None = None
        self._watchers: set[BufferedWatcher] = set()
        self._stream: WatchStream | None = None  # the one every watch shares
        self._resume_timers: set[asyncio.TimerHandle] = set()  # resumes backing off

        self._leases = LeaseManager(self._grant_lease)
        self._closed = False

    # -- plumbing ------------------------------------------------------------------------

    def _connect(self) -> rpc.KVStub:
        if self._closed:
            raise StoreError("store is closed")
        if self._kv is None:
            self._channel = rpc.insecure_channel(
                self.target,
                options=[
                    ("grpc.max_receive_message_length", self._max_receive_bytes),
                    ("grpc.max_send_message_length", MAX_SEND_BYTES),
                ],
            )
            self._kv = rpc.KVStub(self._channel)
            self._watch_stub = rpc.WatchStub(self._channel)
        return self._kv

    def _key(self, key: str) -> bytes:
        return self._prefix_bytes + key.encode()

    def _range(self, prefix: str) -> tuple[bytes, bytes]:
        start = self._key(prefix)
        return (start or ALL_KEYS), bytes_prefix_end(start)

    def _kv_from(self, kv: rpc.KeyValue) -> KeyValue:
        key = kv.key[len(self._prefix_bytes) :].decode()
        return KeyValue(key, kv.value, kv.create_revision, kv.mod_revision)

    def _error(self, error: grpc.aio.AioRpcError) -> StoreError:
        return StoreError(f"etcd {error.code().name}: {error.details()}")

    async def _grant_lease(self, ttl: int) -> int:
        self._connect()
        assert self._channel is not None
        try:
            response = await rpc.LeaseStub(self._channel).LeaseGrant(
                rpc.LeaseGrantRequest(TTL=ttl), timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            raise self._error(error) from error
        return int(response.ID)

    async def _put(self, full: bytes, value: bytes, ttl: int, *,
                   prev_kv: bool = False) -> rpc.PutRequest:
        """The PutRequest of a write: attached to a lease when it expires."""
        lease = await self._leases.lease_for(ttl) if ttl > 0 else 0
        return rpc.PutRequest(key=full, value=value, lease=lease, prev_kv=prev_kv)

    async def _txn(self, request: rpc.TxnRequest) -> rpc.TxnResponse:
        try:
            return await self._connect().Txn(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            raise self._error(error) from error

    # -- writes --------------------------------------------------------------------------

    async def create(self, key: str, value: bytes, *, ttl: int = 0) -> KeyValue:
        full = self._key(key)
        put = await self._put(full, value, ttl)
        response = await self._txn(
            rpc.TxnRequest(
                compare=[
                    rpc.Compare(
                        key=full,
                        target=rpc.Compare.CREATE,
                        result=rpc.Compare.EQUAL,
                        create_revision=0,
                    )
                ],
                success=[rpc.RequestOp(request_put=put)],
            )
        )
        if not response.succeeded:
            raise KeyExists(key)
        revision = response.header.revision
        return KeyValue(key, value, revision, revision)

    def _guard(self, full: bytes, expected: int | None) -> list[rpc.Compare]:
        """The key exists and, unless `expected` is None, its mod_revision is `expected`
        (etcd's mod_revision == 0 alone would also match a missing key)."""
        compare = [
            rpc.Compare(key=full, target=rpc.Compare.VERSION, result=rpc.Compare.GREATER, version=0)
        ]
        if expected is not None:
            compare.append(
                rpc.Compare(
                    key=full,
                    target=rpc.Compare.MOD,
                    result=rpc.Compare.EQUAL,
                    mod_revision=expected,
                )
            )
        return compare

    def _failed(self, key: str, response: rpc.TxnResponse) -> StoreError:
        kvs = response.responses[0].response_range.kvs
        if not kvs:
            return KeyNotFound(key)
        return RevisionMismatch(key, self._kv_from(kvs[0]))

    async def update(self, key: str, value: bytes, expected_mod_revision: int, *,
                     ttl: int = 0) -> KeyValue:
        full = self._key(key)
        put = await self._put(full, value, ttl, prev_kv=True)
        response = await self._txn(
            rpc.TxnRequest(
                compare=self._guard(full, expected_mod_revision),
                success=[rpc.RequestOp(request_put=put)],
                failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=full))],
            )
        )
        if not response.succeeded:
            raise self._failed(key, response)
        prev = response.responses[0].response_put.prev_kv
        return KeyValue(key, value, prev.create_revision, response.header.revision)

    async def delete(self, key: str, expected_mod_revision: int = 0) -> KeyValue:
        full = self._key(key)
        response = await self._txn(
            rpc.TxnRequest(
                compare=self._guard(full, expected_mod_revision or None),
                success=[
                    rpc.RequestOp(
                        request_delete_range=rpc.DeleteRangeRequest(key=full, prev_kv=True)
                    )
                ],
                failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=full))],
            )
        )
        if not response.succeeded:
            raise self._failed(key, response)
        prev_kvs = response.responses[0].response_delete_range.prev_kvs
        if not prev_kvs:  # deleted by someone else between compare and delete: cannot happen
            raise KeyNotFound(key)
        prev = prev_kvs[0]
        return KeyValue(key, prev.value, prev.create_revision, response.header.revision)

    async def compact(self, revision: int) -> None:
        try:
            await self._connect().Compact(
                rpc.CompactionRequest(revision=revision), timeout=self._timeout
            )
        except grpc.aio.AioRpcError as error:
            if _is(error, COMPACTED_MESSAGE):
                return  # already compacted at least that far
            if _is(error, FUTURE_MESSAGE):
                raise FutureRevision(revision, await self.current_revision()) from error
            raise self._error(error) from error

    # -- reads ---------------------------------------------------------------------------

    async def _get_range(self, request: rpc.RangeRequest) -> rpc.RangeResponse:
        try:
            return await self._connect().Range(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            if _is(error, COMPACTED_MESSAGE):
                raise Compacted(request.revision, await self.compacted_revision()) from error
            if _is(error, FUTURE_MESSAGE):
                raise FutureRevision(request.revision, await self.current_revision()) from error
            raise self._error(error) from error

    async def get(self, key: str) -> KeyValue | None:
        response = await self._get_range(rpc.RangeRequest(key=self._key(key)))
        return self._kv_from(response.kvs[0]) if response.kvs else None

    async def list(
        self, prefix: str, *, limit: int = 0, start_after: str = "", revision: int = 0
    ) -> ListResult:
        start, end = self._range(prefix)
        if start_after:
            start = max(start, self._key(start_after) + b"\x00")
        kvs: list[KeyValue] = []
        page = self._range_page
        while True:
            want = page if not limit else min(page, limit - len(kvs))
            response, page = await self._range_page_at(start, end, want, revision)
            revision = revision or int(response.header.revision)
            kvs.extend(self._kv_from(kv) for kv in response.kvs)
            if not response.more or not response.kvs:
                return ListResult(kvs, revision, False)
            if limit and len(kvs) >= limit:
                remaining = int(response.count) - len(response.kvs)
                return ListResult(kvs, revision, True, remaining)
            start = response.kvs[-1].key + b"\x00"

    async def _range_page_at(
        self, start: bytes, end: bytes, limit: int, revision: int
    ) -> tuple[rpc.RangeResponse, int]:
        """One Range of at most `limit` keys; when the answer exceeds the receive limit, the
        same Range with half the limit, down to one key. The response and the limit used."""
        while True:
            try:
                request = rpc.RangeRequest(key=start, range_end=end, limit=limit,
                                           revision=revision)
                return await self._get_range(request), limit
            except StoreError as error:
                cause = error.__cause__
                if (limit <= 1 or not isinstance(cause, grpc.aio.AioRpcError)
                        or cause.code() != grpc.StatusCode.RESOURCE_EXHAUSTED
                        or TOO_LARGE_MESSAGE not in (cause.details() or "")):
                    raise
                limit //= 2

    async def current_revision(self) -> int:
        response = await self._get_range(rpc.RangeRequest(key=ALL_KEYS, count_only=True))
        return int(response.header.revision)

    async def compacted_revision(self) -> int:
        try:
            await self._connect().Range(
                rpc.RangeRequest(key=ALL_KEYS, count_only=True, revision=1),
                timeout=self._timeout,
            )
            return 0
        except grpc.aio.AioRpcError as error:
            if not _is(error, COMPACTED_MESSAGE):
                raise self._error(error) from error
        # A watch from revision 1 is cancelled with the exact compact revision.
        assert self._watch_stub is not None
        call = self._watch_stub.Watch(timeout=self._timeout)
        try:
            await call.write(
                rpc.WatchRequest(
                    create_request=rpc.WatchCreateRequest(
                        key=b"\x00ephemera-compaction-probe", start_revision=1
                    )
                )
            )
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    raise StoreError("etcd closed the watch stream")
                if response.compact_revision:
                    return int(response.compact_revision)
        except grpc.aio.AioRpcError as error:
            raise self._error(error) from error
        finally:
            call.cancel()

    # -- watch ---------------------------------------------------------------------------

    async def watch(self, prefix: str, after_revision: int, *, prev: bool = True) -> Watcher:
        start_revision = after_revision + 1
        key, range_end = self._range(prefix)
        try:  # a single-key read at the start revision fails when it is compacted
            await self._get_range(rpc.RangeRequest(key=ALL_KEYS, revision=start_revision))
        except FutureRevision:
            pass  # watching from the future is fine
        watch = Watch(asyncio.get_running_loop(), after_revision)
        request = watch.request = rpc.WatchCreateRequest(
            key=key, range_end=range_end, start_revision=start_revision,
            progress_notify=True, prev_kv=prev, fragment=True)
        stream = self._watch_stream()
        if not stream.create(request, watch):  # it ended just now: the next one
            stream = self._watch_stream()
            if not stream.create(request, watch):
                raise StoreError("etcd watch failed: the watch stream ended")
        try:
            async with asyncio.timeout(self._timeout):
                created = await watch.created
        except TimeoutError as error:
            stream.cancel(watch)
            raise StoreError("etcd watch failed: context deadline exceeded") from error
        except BaseException:
            stream.cancel(watch)
            raise
        if created is None or not created.created:
            stream.cancel(watch)
            raise StoreError("etcd did not create the watch")
        if created.compact_revision:
            stream.cancel(watch)
            raise Compacted(start_revision, int(created.compact_revision))
        if created.canceled:
            stream.cancel(watch)
            raise StoreError(f"etcd refused the watch: {created.cancel_reason}")

        watcher = BufferedWatcher(
            prefix,
            after_revision,
            capacity=self._watch_capacity,
            progress_interval=self._progress_interval,
            progress_revision=lambda: watch.complete_revision,
            on_close=lambda closing: self._stop_watch(closing, watch),
        )
        self._watchers.add(watcher)
        stream.attach(watch, watcher)
        return watcher

    def _watch_stream(self) -> WatchStream:
        """The stream every watch of this store shares (a new one when the last one ended)."""
        if self._closed:
            raise StoreError("store is closed")
        if self._stream is None or self._stream.ended:
            self._stream = WatchStream(
                self._addresses, event_from=self._event_from,
                on_end=self._watchers.discard, max_message_bytes=self._max_receive_bytes,
                connect_timeout=self._timeout, on_lost=self._resume)
        return self._stream

    def _resume(self, watches: Sequence[Watch], reason: str) -> bool:
        """The stream under `watches` ended (its etcd member stopped, the connection was
        lost): create them again on a new stream, each from the revision after the newest
        one it was handed, as etcd's own client does, so that its consumers (the watch
        cache, the informers) carry on without a gap or a second copy and list nothing
        again. A revision compacted meanwhile ends that watch with `Compacted`."""
        if self._closed:
            return False
        delay = RESUME_DELAYS[min(max(w.resumes for w in watches), len(RESUME_DELAYS) - 1)]
        if not delay:
            log.info("etcd watch stream ended (%s): resuming %d watches on a new stream",
                     reason, len(watches))
            self._create_again(watches)
            return True
        log.info("etcd watch stream ended (%s): resuming %d watches on a new stream in %g s",
                 reason, len(watches), delay)
        timer: asyncio.TimerHandle | None = None

        def due() -> None:
            assert timer is not None
            self._resume_timers.discard(timer)
            self._create_again(watches)

        timer = asyncio.get_running_loop().call_later(delay, due)
        self._resume_timers.add(timer)
        return True

    def _create_again(self, watches: Sequence[Watch]) -> None:
        """Create `watches` again on the store's stream (a new one if the last ended), but
        those their consumers stopped meanwhile; nothing once the store is closed (its
        watchers were closed with it)."""
        if self._closed:
            return
        stream = self._watch_stream()
        for watch in watches:
            if not watch.stopped:
                stream.create(watch.resume_request(), watch)

    def _event_from(self, event: rpc.Event) -> Event:
        prev = self._kv_from(event.prev_kv) if event.HasField("prev_kv") else None
        if event.type == rpc.Event.DELETE:
            key = event.kv.key[len(self._prefix_bytes) :].decode()
            if prev is None:  # the previous value was compacted away
                kv = KeyValue(key, b"", 0, event.kv.mod_revision)
            else:
                kv = KeyValue(key, prev.value, prev.create_revision, event.kv.mod_revision)
            return Event("DELETE", kv, prev)
        return Event("PUT", self._kv_from(event.kv), prev)

    async def _stop_watch(self, watcher: BufferedWatcher, watch: Watch) -> None:
        self._watchers.discard(watcher)
        if watch.stream is not None:  # the stream it is on now (resumed: not the first)
            watch.stream.cancel(watch)

    async def close(self) -> None:
        if self._closed:
            return
        for watcher in list(self._watchers):
            await watcher.close()
        self._closed = True
        for timer in self._resume_timers:
            timer.cancel()
        self._resume_timers.clear()
        if self._stream is not None:
            self._stream.stop()
        if self._channel is not None:
            await self._channel.close()
        self._channel = self._kv = self._watch_stub = None
        self._stream = None

    def __repr__(self) -> str:
        return f"EtcdStore({self.target!r}, prefix={self.prefix!r})"

"""The etcd store's watch stream: every watch of one `EtcdStore` on one etcd Watch call, read
by the event loop itself.

`WatchStream` speaks gRPC over HTTP/2 on a connection of its own: the `h2` library keeps the
HTTP/2 state (frames, flow control, pings, GOAWAY), and gRPC's framing on top is a 5-byte
prefix (a compressed flag, a big-endian length) before each protobuf message. The Watch call
is one POST to `/etcdserverpb.Watch/Watch`; creates and cancels are messages sent on it, etcd's
WatchResponses come back on it, and its end (trailers with `grpc-status`, a reset, GOAWAY, a
lost connection) fails every watch on it; the store opens a new stream for the next watch.
etcd answers creates in the order they were sent, which is how a created response finds its
watch (`Watch`), as etcd's own client pairs them.

Why not gRPC's Python library for this call: it reads a stream on threads (a channel thread,
then the caller's), which then hand each message to the loop; in an apiserver worker
following another's writes, those threads used about 0.3 ms of CPU per event, where one
process's loop reading the socket itself parses an event in about 0.07 ms, and a following
worker now pays a quarter less per write in all (docs/benchmarks.md, "The watch stream on
the event loop"; `bench/apiserver_follow.py`). Through `grpc.aio` the loop was not the cost
but the latency: one message per loop iteration. The unary calls (Range, Txn,
LeaseGrant) stay on `grpc.aio`.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence
from typing import cast
from urllib.parse import unquote

import grpc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from aetcd import rpc

from ephemera.store.base import (
    Compacted,
    Event,
    Progress,
    StoreError,
    WatcherDropped,
)
from ephemera.store.watchhub import BufferedWatcher

__all__ = ["Watch", "WatchStream"]

WATCH_PATH = "/etcdserverpb.Watch/Watch"
# The flow-control window granted to etcd, for the connection and the stream: a catch-up of
# 1,000 revisions arrives without waiting for a window update.
RECEIVE_WINDOW = 16 * 1024 * 1024
_STATUS_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}

# How long a watch waits before it is created again on a new stream, by how many times it
# was already (since etcd last answered it): the first at once (a connection cut under a
# member that is up), then backing off, so that a member restarting (a few seconds) is
# waited for instead of every watch ending within milliseconds of it going; past the last,
# the watch ends (a member that accepts connections and ends every stream does not keep it
# going round).
RESUME_DELAYS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
MAX_RESUMES = len(RESUME_DELAYS)

# What the stream hands a watch: an event, a progress notification, or the watch's end.
_Read = Event | Progress | StoreError


class Watch:
    """One watch on a store's stream: `created` is etcd's answer to its create request; every
    event, progress notification or failure after that goes to `watcher`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, after_revision: int) -> None:
        self.complete_revision = after_revision  # every event up to here has been pushed
        self.created: asyncio.Future[rpc.WatchResponse | None] = loop.create_future()
        self.watcher: BufferedWatcher | None = None
        self.watch_id: int | None = None  # etcd's id, once created
        self.stopped = False
        self.fragments: list[rpc.Event] = []  # of a response not yet whole
        self.handed = after_revision  # the newest revision read for it
        self.held: list[_Read] = []  # read before `watcher` was attached
        self.request: rpc.WatchCreateRequest | None = None  # what created it
        self.stream: WatchStream | None = None  # the stream it is on now
        self.resumes = 0  # times created again on a new stream since etcd last answered it

    def resume_request(self) -> rpc.WatchCreateRequest:
        """Its create request again, from the revision after the newest one it was handed
        (what a fragment in flight held comes again whole)."""
        assert self.request is not None
        request = rpc.WatchCreateRequest()
        request.CopyFrom(self.request)
        request.start_revision = self.handed + 1
        self.fragments = []
        self.watch_id = None
        self.resumes += 1
        return request

    def set_created(self, response: rpc.WatchResponse | StoreError | None) -> None:
        if self.created.done():
            return
        if isinstance(response, StoreError):
            self.created.set_exception(response)
        else:
            self.created.set_result(response)

    def deliver(self, item: _Read) -> bool:
        """Give `item` to the watcher; False once the watch has ended."""
        watcher = self.watcher
        if watcher is None:  # not attached yet: `WatchStream.attach` delivers it
            self.held.append(item)
            return True
        if watcher.finished:  # ended on the consumer's side: what is left goes nowhere
            return False
        if isinstance(item, StoreError):
            watcher.fail(item)
            return False
        if isinstance(item, Progress):
            if item.revision <= self.complete_revision:
                return True
            self.complete_revision = item.revision
        if not watcher.push(item):
            return False
        if isinstance(item, Event):
            self.complete_revision = max(self.complete_revision, item.revision)
        return True


class WatchStream(asyncio.Protocol):
    """Every watch of one store on one etcd Watch call over a connection of its own (module
    docstring). `addresses` are tried in order until one connects; `event_from` turns etcd's
    events into the store's; `on_end` is told of a watcher whose watch ended on its own;
    `on_lost` is offered the watches of a stream that ended under them (the connection or
    the member lost, etcd's error status), and takes them (True) to create them again on
    another stream, as etcd's own client does; else they fail."""

    def __init__(self, addresses: list[tuple[str, int]], *,
                 event_from: Callable[[rpc.Event], Event],
                 on_end: Callable[[BufferedWatcher], None],
                 max_message_bytes: int, connect_timeout: float,
                 on_lost: Callable[[Sequence[Watch], str], bool] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._addresses = addresses
        self._on_lost = on_lost
        self._event_from = event_from
        self._on_end = on_end
        self._max_message_bytes = max_message_bytes
        self._connect_timeout = connect_timeout
        self._h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self._transport: asyncio.Transport | None = None
        self._stream_id = 0
        self._outbox: collections.deque[bytes] = collections.deque()  # framed, not yet sent
        self._received = bytearray()  # message bytes not yet a whole message
        self._trailers_reason = ""
        self._creating: collections.deque[Watch] = collections.deque()  # sent, unanswered
        self._watches: dict[int, Watch] = {}  # created, by etcd's watch id
        self.ended = False
        self._stopped = False
        self._opening = self._loop.create_task(self._open())

    def __len__(self) -> int:
        return len(self._creating) + len(self._watches)

    # -- what the store calls --

    def create(self, request: rpc.WatchCreateRequest, watch: Watch) -> bool:
        """Send `request` for `watch`; False when the stream has already ended."""
        if self.ended:
            return False
        watch.stream = self
        self._creating.append(watch)
        self._send(rpc.WatchRequest(create_request=request))
        return True

    def attach(self, watch: Watch, watcher: BufferedWatcher) -> None:
        """Start delivering to `watcher` (what was read before it came, first)."""
        watch.watcher = watcher
        held, watch.held = watch.held, []
        for item in held:
            if not watch.deliver(item):
                self._end_watch(watch)
                return

    def cancel(self, watch: Watch) -> None:
        """End `watch`; one still being created is cancelled as soon as etcd names it."""
        watch.stopped = True
        if watch.watch_id is None or self._watches.pop(watch.watch_id, None) is None:
            return
        self._send_cancel(watch.watch_id)

    def stop(self) -> None:
        """Close the stream and its connection; its watches get nothing more."""
        self._stopped = True
        if self._transport is not None:
            self._transport.close()
        else:
            self._opening.cancel()
        self._fail_all("the store was closed")

    # -- the connection --

    async def _open(self) -> None:
        failures = []
        for host, port in self._addresses:
            try:
                async with asyncio.timeout(self._connect_timeout):
                    await self._loop.create_connection(lambda: self, host, port)
                return
            except (OSError, TimeoutError) as error:
                failures.append(f"{host}:{port}: {error or type(error).__name__}")
        self._fail_all("etcd watch stream failed: cannot connect to etcd: "
                       + "; ".join(failures))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport = cast(asyncio.Transport, transport)  # uvloop's is not one
        if self._stopped:
            transport.close()
            return
        host, port = transport.get_extra_info("peername")[:2]
        connection = self._h2
        connection.initiate_connection()
        connection.update_settings(
            {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: RECEIVE_WINDOW})
        connection.increment_flow_control_window(
            RECEIVE_WINDOW - connection.inbound_flow_control_window)
        self._stream_id = connection.get_next_available_stream_id()
        connection.send_headers(self._stream_id, [
            (":method", "POST"), (":scheme", "http"), (":path", WATCH_PATH),
            (":authority", f"{host}:{port}"), ("content-type", "application/grpc"),
            ("te", "trailers"), ("user-agent", "ephemera-etcd-watch")])
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._fail_all(self._trailers_reason or "etcd watch stream failed: the connection "
                       f"to etcd was lost{f' ({exc})' if exc else ''}")

    def data_received(self, data: bytes) -> None:
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as error:
            self._abort(f"etcd watch stream failed: HTTP/2 protocol error: {error}",
                        resumable=False)
            return
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                self._h2.acknowledge_received_data(event.flow_controlled_length,
                                                   event.stream_id)
                if event.stream_id == self._stream_id and event.data:
                    self._received += event.data
                    self._read_messages()
            elif isinstance(event, h2.events.ResponseReceived):
                self._check_headers(dict(event.headers))  # type: ignore[arg-type]
            elif isinstance(event, h2.events.TrailersReceived):
                self._check_headers(dict(event.headers),  # type: ignore[arg-type]
                                    trailers=True)
            elif isinstance(event, h2.events.StreamEnded):
                self._abort(self._trailers_reason or "etcd closed the watch stream")
            elif isinstance(event, h2.events.StreamReset):
                self._abort(f"etcd watch stream failed: reset by etcd (HTTP/2 error code "
                            f"{event.error_code})")
            elif isinstance(event, h2.events.ConnectionTerminated):
                self._abort(f"etcd watch stream failed: etcd closed the connection (GOAWAY, "
                            f"HTTP/2 error code {event.error_code})")
            elif isinstance(event, h2.events.WindowUpdated):
                self._flush()
            if self.ended:
                return
        self._write()

    def _check_headers(self, headers: dict[str, str], *, trailers: bool = False) -> None:
        status = headers.get(":status")
        if status is not None and status != "200":
            self._abort(f"etcd watch stream failed: HTTP status {status}", resumable=False)
            return
        code = headers.get("grpc-status")
        if code is None:
            if trailers:
                self._trailers_reason = "etcd watch stream failed: no grpc-status"
            return
        if code == "0":
            self._trailers_reason = "etcd closed the watch stream"
            return
        message = unquote(headers.get("grpc-message", ""))
        name = _STATUS_NAMES.get(int(code) if code.isdigit() else -1, f"code {code}")
        self._trailers_reason = f"etcd watch stream failed: {message or name}"
        if not trailers:  # a trailers-only answer: the call failed before it began
            self._abort(self._trailers_reason)

    def _abort(self, reason: str, *, resumable: bool = True) -> None:
        """End the stream for `reason`: close the connection, then its watches are resumed
        elsewhere (`on_lost`) or fail. Not `resumable`: what the stream read cannot be read
        (a protocol error, a message too large), and another stream would read it again."""
        self._trailers_reason = self._trailers_reason or reason
        if self._transport is not None:
            self._write()
            self._transport.close()
        self._fail_all(reason, resumable=resumable)

    def _send(self, request: rpc.WatchRequest) -> None:
        message = request.SerializeToString()
        self._outbox.append(b"\x00" + len(message).to_bytes(4, "big") + message)
        self._flush()

    def _send_cancel(self, watch_id: int) -> None:
        self._send(rpc.WatchRequest(cancel_request=rpc.WatchCancelRequest(watch_id=watch_id)))

    def _flush(self) -> None:
        """Send what the outbox holds, as far as etcd's flow-control window allows."""
        if self._transport is None or not self._stream_id or self.ended:
            return
        connection, stream_id = self._h2, self._stream_id
        while self._outbox:
            data = self._outbox[0]
            size = min(len(data), connection.local_flow_control_window(stream_id),
                       connection.max_outbound_frame_size)
            if size <= 0:
                break  # the rest when etcd opens the window (WindowUpdated)
            connection.send_data(stream_id, data[:size])
            if size == len(data):
                self._outbox.popleft()
            else:
                self._outbox[0] = data[size:]
        self._write()

    def _write(self) -> None:
        out = self._h2.data_to_send()
        if out and self._transport is not None:
            self._transport.write(out)

    def _read_messages(self) -> None:
        """Every whole gRPC message received so far, in order."""
        received, offset = self._received, 0
        while len(received) - offset >= 5:
            length = int.from_bytes(received[offset + 1:offset + 5], "big")
            if received[offset]:
                self._abort("etcd watch stream failed: a compressed message, which was not "
                            "asked for", resumable=False)
                return
            if length > self._max_message_bytes:
                self._abort(f"etcd watch stream failed: received message larger than max "
                            f"({length} vs. {self._max_message_bytes})", resumable=False)
                return
            end = offset + 5 + length
            if len(received) < end:
                break
            response = rpc.WatchResponse.FromString(bytes(received[offset + 5:end]))
            offset = end
            self._on_response(response)
            if self.ended:
                return
        del received[:offset]

    # -- etcd's answers --

    def _on_response(self, response: rpc.WatchResponse) -> None:
        if response.created:
            self._on_created(response)
            return
        watch = self._watches.get(response.watch_id)
        if watch is None:  # a cancelled watch's last responses, or another's progress
            return
        watch.resumes = 0
        if response.compact_revision:
            self._finish(watch, Compacted(watch.handed + 1, int(response.compact_revision)))
            return
        if response.canceled:
            reason = response.cancel_reason or "no reason given"
            self._finish(watch, WatcherDropped(f"etcd cancelled the watch: {reason}"))
            return
        watch.fragments.extend(response.events)
        if response.fragment:  # more of the same response follows
            return
        events, watch.fragments = watch.fragments, []
        if not events:  # a progress notification
            progress = Progress(int(response.header.revision))
            watch.handed = max(watch.handed, progress.revision)
            self._hand(watch, progress)
            return
        items = [self._event_from(event) for event in events]
        watch.handed = max(watch.handed, items[-1].revision)  # etcd sends them in order
        self._hand(watch, *items)

    def _on_created(self, response: rpc.WatchResponse) -> None:
        watch = self._creating.popleft() if self._creating else None
        if watch is None:
            return
        usable = not (response.canceled or response.compact_revision)
        if usable:
            watch.watch_id = int(response.watch_id)
            if watch.stopped:  # given up while it was being created
                self._send_cancel(watch.watch_id)
                return
            self._watches[watch.watch_id] = watch
        if not watch.created.done():
            watch.set_created(response)
        elif response.compact_revision:  # resumed after the revisions it still needed
            self._hand(watch, Compacted(watch.handed + 1, int(response.compact_revision)))
        elif not usable:
            reason = response.cancel_reason or "no reason given"
            self._hand(watch, WatcherDropped(f"etcd refused the watch again: {reason}"))

    def _finish(self, watch: Watch, error: StoreError) -> None:
        if watch.watch_id is not None:
            self._watches.pop(watch.watch_id, None)
        self._hand(watch, error)

    def _fail_all(self, reason: str, *, resumable: bool = True) -> None:
        if self.ended:
            return
        self.ended = True
        creating, self._creating = list(self._creating), collections.deque()
        watches = list(self._watches.values())
        self._watches.clear()
        # Watches being created for a caller fail (`watch()` raises, the caller watches
        # again); those being resumed count with the created ones.
        resuming = [watch for watch in creating if watch.created.done()]
        for watch in creating:
            if not watch.created.done():
                watch.set_created(None if self._stopped
                                  else StoreError(f"etcd watch failed: {reason}"))
        if self._stopped:
            return
        lost = [watch for watch in [*watches, *resuming]
                if not watch.stopped and watch.resumes < MAX_RESUMES]
        if resumable and lost and self._on_lost is not None and self._on_lost(lost, reason):
            watches = [watch for watch in [*watches, *resuming] if watch not in lost]
        else:
            watches = [*watches, *resuming]
        for watch in watches:
            self._hand(watch, WatcherDropped(reason))

    def _hand(self, watch: Watch, *items: _Read) -> None:
        for item in items:
            if watch.stopped:  # ended on the consumer's side: what is left goes nowhere
                return
            if not watch.deliver(item):
                self._end_watch(watch)
                return

    def _end_watch(self, watch: Watch) -> None:
        self.cancel(watch)
        if watch.watcher is not None:
            self._on_end(watch.watcher)

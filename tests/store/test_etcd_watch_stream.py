"""`store.etcdwatch.WatchStream` against a small HTTP/2 gRPC server of the test's own, for the
ends a real etcd is hard to bring about: a gRPC error status in the trailers, a message over
the receive limit, nothing listening. (The real etcd's side is tests/store/test_etcd_store.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import cast

import h2.config
import h2.connection
import h2.events
import pytest
from aetcd import rpc

from ephemera.store.base import Event, KeyValue, StoreError, WatcherDropped
from ephemera.store.etcdwatch import Watch, WatchStream
from ephemera.store.watchhub import BufferedWatcher

# What the fake etcd does once it has read the first create request: it is handed the
# connection, the stream id and a function that frames a WatchResponse.
Behaviour = Callable[[h2.connection.H2Connection, int, Callable[[rpc.WatchResponse], bytes]],
                     None]


def framed(response: rpc.WatchResponse) -> bytes:
    message = response.SerializeToString()
    return b"\x00" + len(message).to_bytes(4, "big") + message


class FakeEtcd(asyncio.Protocol):
    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.transport: asyncio.Transport | None = None
        self.requests: list[rpc.WatchRequest] = []
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.h2.initiate_connection()
        self.transport.write(self.h2.data_to_send())

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                headers = dict(event.headers)
                assert headers[b":path"] == b"/etcdserverpb.Watch/Watch"
                assert headers[b"content-type"] == b"application/grpc"
                self.h2.send_headers(event.stream_id, [(":status", "200"),
                                                       ("content-type", "application/grpc")])
            elif isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                self.buffer += event.data
                length = int.from_bytes(self.buffer[1:5], "big")
                if len(self.buffer) >= 5 + length:
                    self.requests.append(rpc.WatchRequest.FromString(self.buffer[5:5 + length]))
                    self.buffer = self.buffer[5 + length:]
                    if len(self.requests) == 1:
                        self.behaviour(self.h2, event.stream_id, framed)
        self.transport.write(self.h2.data_to_send())


@pytest.fixture
async def fake_etcd(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, int]]:
    behaviour: Behaviour = request.param
    server = await asyncio.get_running_loop().create_server(
        lambda: FakeEtcd(behaviour), "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[:2]
    finally:
        server.close()


def created_then(then: Behaviour) -> Behaviour:
    """Answer the create (watch id 7), then do `then`."""
    def behaviour(connection: h2.connection.H2Connection, stream_id: int,
                  frame: Callable[[rpc.WatchResponse], bytes]) -> None:
        connection.send_data(stream_id, frame(rpc.WatchResponse(created=True, watch_id=7)))
        then(connection, stream_id, frame)
    return behaviour


def trailers_unavailable(connection: h2.connection.H2Connection, stream_id: int,
                         frame: Callable[[rpc.WatchResponse], bytes]) -> None:
    connection.send_headers(stream_id, [("grpc-status", "14"),
                                        ("grpc-message", "etcdserver%3A no leader")],
                            end_stream=True)


def too_large(connection: h2.connection.H2Connection, stream_id: int,
              frame: Callable[[rpc.WatchResponse], bytes]) -> None:
    event = rpc.Event(kv=rpc.KeyValue(key=b"/k", value=b"x" * 5000, mod_revision=3))
    connection.send_data(stream_id, frame(rpc.WatchResponse(watch_id=7, events=[event])))


def one_event(connection: h2.connection.H2Connection, stream_id: int,
              frame: Callable[[rpc.WatchResponse], bytes]) -> None:
    event = rpc.Event(kv=rpc.KeyValue(key=b"/k", value=b"v", create_revision=3,
                                      mod_revision=3))
    data = frame(rpc.WatchResponse(watch_id=7, events=[event]))
    connection.send_data(stream_id, data[:3])  # a message split across frames is joined
    connection.send_data(stream_id, data[3:])


def event_from(event: rpc.Event) -> Event:
    kv = event.kv
    return Event("PUT", KeyValue(kv.key.decode(), kv.value, kv.create_revision, kv.mod_revision),
                 None)


async def start_watch(address: tuple[str, int]) -> tuple[WatchStream, BufferedWatcher]:
    stream = WatchStream([address], event_from=event_from, on_end=lambda watcher: None,
                         max_message_bytes=1024, connect_timeout=5)
    watch = Watch(asyncio.get_running_loop(), 2)
    assert stream.create(rpc.WatchCreateRequest(key=b"/k", start_revision=3), watch)
    async with asyncio.timeout(10):
        created = await watch.created
    assert created is not None and created.watch_id == 7
    watcher = BufferedWatcher("/k", 2, capacity=10, progress_interval=60,
                              progress_revision=lambda: watch.complete_revision)
    stream.attach(watch, watcher)
    return stream, watcher


async def next_item(watcher: BufferedWatcher) -> object:
    async with asyncio.timeout(10):
        async for item in watcher:
            return item
    raise AssertionError("the watch ended")


@pytest.mark.parametrize("fake_etcd", [created_then(one_event)], indirect=True)
async def test_events_are_read_from_frames(fake_etcd: tuple[str, int]) -> None:
    stream, watcher = await start_watch(fake_etcd)
    try:
        item = await next_item(watcher)
        assert isinstance(item, Event) and item.kv == KeyValue("/k", b"v", 3, 3)
    finally:
        stream.stop()


@pytest.mark.parametrize("fake_etcd", [created_then(trailers_unavailable)], indirect=True)
async def test_an_error_status_fails_the_watches_with_its_message(
        fake_etcd: tuple[str, int]) -> None:
    stream, watcher = await start_watch(fake_etcd)
    with pytest.raises(WatcherDropped, match=r"^etcd watch stream failed: etcdserver: no leader$"):
        await next_item(watcher)
    assert stream.ended
    assert not stream.create(rpc.WatchCreateRequest(key=b"/k"), Watch(
        asyncio.get_running_loop(), 0))  # the store opens a new stream instead


@pytest.mark.parametrize("fake_etcd", [created_then(too_large)], indirect=True)
async def test_a_message_over_the_receive_limit_fails_the_stream(
        fake_etcd: tuple[str, int]) -> None:
    stream, watcher = await start_watch(fake_etcd)
    with pytest.raises(WatcherDropped, match=r"received message larger than max \(\d+ vs\. 1024\)"):
        await next_item(watcher)
    assert stream.ended


async def test_nothing_listening_fails_the_create() -> None:
    server = await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", 0)
    address = server.sockets[0].getsockname()[:2]
    server.close()
    await server.wait_closed()
    stream = WatchStream([address], event_from=event_from, on_end=lambda watcher: None,
                         max_message_bytes=1024, connect_timeout=5)
    watch = Watch(asyncio.get_running_loop(), 0)
    assert stream.create(rpc.WatchCreateRequest(key=b"/k"), watch)
    with pytest.raises(StoreError, match=r"cannot connect to etcd: 127\.0\.0\.1:"):
        async with asyncio.timeout(10):
            await watch.created

"""Watch plumbing shared by the store backends: `BufferedWatcher`, a `Watcher` with a bounded
buffer, idle `Progress` events and drop-on-overflow, and `WatchHub`, the in-process fan-out of
committed events to such watchers (used by the sqlite backend and the apiserver's watch
cache), with an optional index: a watcher registered with a `route` (the watch cache's pod
watchers with `spec.nodeName=NAME`) is found by that value instead of testing every event.

A producer (the hub, or the etcd backend's stream reader) `push`es items; the consumer iterates.
When more than `capacity` items wait unconsumed, the watcher is dropped: its buffer is freed and
iteration raises `WatcherDropped`. When the consumer waits `progress_interval` seconds with
nothing to receive, iteration yields `Progress(progress_revision())`; the producer guarantees
that, whenever the buffer is empty, every event up to that revision has been delivered.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable
from typing import Literal

from ephemera.store.base import Event, Progress, StoreError, Watcher, WatcherDropped

DEFAULT_WATCH_CAPACITY = 10_000
DEFAULT_PROGRESS_INTERVAL = 5.0

# A replay source: called repeatedly, returns the next batch of history (empty when done).
ReplayPage = Callable[[], Awaitable[list[Event]]]
# The route values of an event (a pod's node names before and after): routed watchers of
# other values are not offered the event.
Routes = Callable[[Event], Collection[str]]


class BufferedWatcher(Watcher):
    """A watcher fed by a producer through a bounded buffer."""

    def __init__(
        self,
        prefix: str,
        after_revision: int,
        *,
        capacity: int,
        progress_interval: float,
        progress_revision: Callable[[], int],
        on_close: Callable[[BufferedWatcher], Awaitable[None] | None] | None = None,
    ) -> None:
        self.prefix = prefix
        self.after_revision = after_revision
        self.capacity = capacity
        self.progress_interval = progress_interval
        self._progress_revision = progress_revision
        self._on_close = on_close
        self._buffer: collections.deque[Event | Progress] = collections.deque()
        self._wakeup = asyncio.Event()
        self._error: StoreError | None = None
        self._closed = False
        self._interrupted = False
        self._sink: Callable[[Event | Progress], None] | None = None
        self._replay: ReplayPage | None = None
        self._replayed: collections.deque[Event] = collections.deque()
        self._last_sent = time.monotonic()
        # wakes a waiting consumer when it has been idle long enough (`_wake_by`)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline = math.inf
        # The highest revision handed to the consumer (events or progress).
        self.delivered_revision = after_revision

    # -- producer side -------------------------------------------------------------------

    @property
    def dropped(self) -> bool:
        return isinstance(self._error, WatcherDropped)

    @property
    def finished(self) -> bool:
        """Closed, dropped or failed: the producer should stop feeding it."""
        return self._closed or self._error is not None

    def set_replay(self, replay: ReplayPage) -> None:
        """History to deliver before anything pushed (pages are fetched lazily)."""
        self._replay = replay

    def deliver_to(self, sink: Callable[[Event | Progress], None]) -> bool:
        """See `Watcher.deliver_to`."""
        self._sink = sink
        return True

    def push(self, item: Event | Progress) -> bool:
        """Queue an item (or hand it to the sink); returns False (and drops the watcher)
        when the buffer overflows."""
        if self.finished:
            return False
        if self._sink is not None and not self._buffer and not self._replayed and \
                self._replay is None:
            if isinstance(item, Progress) and item.revision <= self.delivered_revision:
                return True  # says nothing new
            self._deliver(item)
            try:
                self._sink(item)
            except Exception as err:  # a bug in the consumer: its watch ends, it starts over
                self.fail(StoreError(f"watcher on {self.prefix!r}: its consumer failed: "
                                     f"{type(err).__name__}"))
                return False
            return True
        if len(self._buffer) >= self.capacity:
            self.fail(WatcherDropped(f"watcher on {self.prefix!r} fell behind by {self.capacity}"))
            return False
        self._buffer.append(item)
        self._wakeup.set()
        return True

    def fail(self, error: StoreError, *, discard_buffer: bool = False) -> None:
        """End the watch with `error`, raised by iteration once the buffered items are
        consumed, or at once with `discard_buffer` (always for a drop, so that a lagging
        consumer frees its memory)."""
        if self.finished:
            return
        self._error = error
        if discard_buffer or isinstance(error, WatcherDropped):
            self._buffer.clear()
            self._replayed.clear()
            self._replay = None
        self._wakeup.set()

    # -- consumer side -------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Event | Progress]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event | Progress]:
        while True:
            item = await self._next()
            if item is None:
                return
            assert item is not False  # no limit: it waits
            yield item

    async def next_within(self, seconds: float) -> Event | Progress | Literal[False] | None:
        """See `Watcher.next_within`."""
        return await self._next(time.monotonic() + seconds)

    def interrupt(self) -> None:
        self._interrupted = True
        self._wakeup.set()

    async def _next(self, until: float = math.inf) -> Event | Progress | Literal[False] | None:
        """The next item; None at the end; False when none came before `until` (monotonic
        time; only a wait for a push is limited by it, never a replay page's read)."""
        while True:
            if self._closed or self._interrupted:
                return None
            if self._error is not None and not self._buffer:
                raise self._error
            if self._replayed or self._replay is not None:
                replayed = await self._next_replayed()
                if replayed is not None:
                    return self._deliver(replayed)
                continue
            if self._buffer:
                item = self._buffer.popleft()
                if isinstance(item, Progress) and item.revision <= self.delivered_revision:
                    continue  # says nothing new
                return self._deliver(item)
            self._wakeup.clear()
            now = time.monotonic()
            idle_until = self._last_sent + self.progress_interval
            if now < idle_until:
                if until <= now:
                    return False  # the caller's limit came first
                # Woken by a push, or by the timer (perhaps a little early, the loop's
                # clock; or set for an earlier idle deadline): either way, look again.
                self._wake_by(min(idle_until, until))
                await self._wakeup.wait()
                continue
            revision = max(self._progress_revision(), self.delivered_revision)
            return self._deliver(Progress(revision))

    def _wake_by(self, deadline: float) -> None:
        """Make sure the consumer is woken by `deadline` (monotonic time). One timer serves
        many waits: a wait that ends with an item leaves it set, and the next wait keeps it
        unless it needs an earlier one, so an item costs no timer of its own; a timer that
        fires for a deadline since moved on wakes the consumer once, for nothing."""
        if self._timer is not None and self._timer_deadline <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_deadline = deadline
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, deadline - time.monotonic()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._wakeup.set()

    def take_ready(self, limit: int) -> list[Event | Progress]:
        """See `Watcher.take_ready`: the replayed history already fetched, then the buffer;
        it stops before a replay page still to fetch, and before the end of the watch (an
        error, or closing) that the next step of the iteration reports."""
        items: list[Event | Progress] = []
        while len(items) < limit and not self._closed:
            if self._replayed:
                items.append(self._deliver(self._replayed.popleft()))
                continue
            if self._replay is not None or not self._buffer:
                break
            item = self._buffer.popleft()
            if isinstance(item, Progress) and item.revision <= self.delivered_revision:
                continue  # says nothing new
            items.append(self._deliver(item))
        return items

    async def _next_replayed(self) -> Event | None:
        while not self._replayed:
            if self._replay is None:
                return None
            try:
                page = await self._replay()
            except StoreError as error:
                self._replay = None
                self.fail(error, discard_buffer=True)
                raise
            if self.finished:  # closed or dropped while the page was read
                return None
            if not page:
                self._replay = None
                return None
            self._replayed.extend(page)
        return self._replayed.popleft()

    def _deliver(self, item: Event | Progress) -> Event | Progress:
        self.delivered_revision = max(self.delivered_revision, item.revision)
        self._last_sent = time.monotonic()
        return item

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._buffer.clear()
        self._replayed.clear()
        self._replay = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wakeup.set()
        if self._on_close is not None:
            result = self._on_close(self)
            if result is not None:
                await result


class WatchHub:
    """In-process fan-out: `publish` committed events (in revision order, on the event loop)
    to every registered watcher whose prefix matches. `revision` is the last published
    revision: every event up to it has been pushed to the watchers registered at the time.

    A watcher registered with a `route` is offered only the events whose `routes` (given to
    `publish`) include it; the caller guarantees it wants no other event (its selector
    requires that value), so each event costs one dictionary lookup per route value instead
    of one test per such watcher."""

    def __init__(self, revision: int, *, capacity: int, progress_interval: float) -> None:
        self.revision = revision
        self.capacity = capacity
        self.progress_interval = progress_interval
        self._watchers: set[BufferedWatcher] = set()
        self._routed: dict[str, set[BufferedWatcher]] = {}
        self._route_of: dict[BufferedWatcher, str] = {}

    @property
    def routed(self) -> bool:
        """Some watcher is registered with a route (`publish` needs `routes`)."""
        return bool(self._route_of)

    def register(self, prefix: str, after_revision: int, *,
                 route: str | None = None) -> BufferedWatcher:
        """A watcher that receives every event published from now on with revision >
        `after_revision` (with `route`: every such event whose routes include it); events in
        (after_revision, self.revision] must be replayed from history by the caller
        (`set_replay`)."""
        watcher = BufferedWatcher(
            prefix,
            after_revision,
            capacity=self.capacity,
            progress_interval=self.progress_interval,
            progress_revision=lambda: self.revision,
            on_close=self._unregister,
        )
        if route is None:
            self._watchers.add(watcher)
        else:
            self._routed.setdefault(route, set()).add(watcher)
            self._route_of[watcher] = route
        return watcher

    def _unregister(self, watcher: BufferedWatcher) -> None:
        self._watchers.discard(watcher)
        route = self._route_of.pop(watcher, None)
        if route is not None:
            watchers = self._routed.get(route)
            if watchers is not None:
                watchers.discard(watcher)
                if not watchers:
                    del self._routed[route]

    def publish(self, events: Iterable[Event], routes: Routes | None = None) -> None:
        """Push each event to the watchers that want it, the routed ones first: their
        streams are woken (and write the event) in the order they are pushed, and a routed
        watcher is the one that acts on the event (the kubelet of a pod's node, e.g. on a
        `pods/NAME/dynamic` update), where the others follow (informers, the writer's own
        watch)."""
        for event in events:
            self.publish_event(event, routes(event) if self._routed and routes else None)

    def publish_event(self, event: Event, routes: Collection[str] | None = None) -> None:
        """`publish` of one event whose route values are `routes` (None: only the unrouted
        watchers are offered it)."""
        self.revision = max(self.revision, event.revision)
        if routes is not None and self._routed:
            for value in routes:
                watchers = self._routed.get(value)
                if watchers:
                    self._offer(event, watchers)
        self._offer(event, self._watchers)

    def _offer(self, event: Event, watchers: set[BufferedWatcher]) -> None:
        key = event.kv.key
        finished = [
            watcher for watcher in list(watchers)
            if watcher.finished or (
                key.startswith(watcher.prefix)
                and event.revision > watcher.after_revision
                and not watcher.push(event)
            )
        ]
        for watcher in finished:
            self._unregister(watcher)

    async def close(self) -> None:
        watchers = [*self._watchers, *self._route_of]
        self._watchers, self._routed, self._route_of = set(), {}, {}
        for watcher in watchers:
            await watcher.close()

    def __len__(self) -> int:
        return len(self._watchers) + len(self._route_of)

"""`EventCorrelator`: what client-go's event recorder does to an Event before it is written
(`tools/record/events_cache.go`), so that a component talking about one object over and over
neither floods the apiserver nor the object's `kubectl describe`.

Three steps, in upstream's order, each remembering at most 4,096 keys (least recently used
forgotten):

1. **Aggregation.** Events alike but for their message (same source, object, type, reason and
   reporting component and instance): from the tenth distinct message within 10 minutes of the
   last one, the event becomes one Event whose message is `(combined from similar events): `
   and the newest message, counted up on every further one.
2. **Repeats.** An event the same as one written before (source, object and `fieldPath`, type,
   reason, message) bumps the `count` and `lastTimestamp` of that Event (a PATCH), instead of
   creating another.
3. **Spam filter.** Each source may write 25 events about one object (kind, namespace, name,
   UID, apiVersion) at once, then one every 5 minutes (a token bucket, filled at the start);
   events beyond that are dropped. Repeats and aggregated events take tokens too. One
   difference from upstream, whose bucket is shared by both types: Normal and Warning events
   have a bucket each, so that routine Normal events (five for each live volume swap) never
   use up the budget of the Warnings an operator needs (a `FailedMount` after a pool pod's
   hundredth swap is still written).

The correlator decides; `EventRecorder` (events.py) writes, and tells it what was written.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["AGGREGATED_PREFIX", "Correlated", "EventCorrelator"]

CACHE_ENTRIES = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0  # seconds
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
AGGREGATED_PREFIX = "(combined from similar events): "

Key = tuple[str, ...]
V = TypeVar("V")


@dataclass(frozen=True)
class Correlated:
    """What to write: `event` created, or when `patch` is set, that merge patch of the Event
    `event` names (`metadata.namespace`/`name`), created instead if it is gone. `key`: what
    the correlator remembers the written Event under."""

    event: dict[str, Any]
    key: Key
    patch: dict[str, Any] | None = None


@dataclass
class _Aggregate:
    messages: set[str] = field(default_factory=set)
    last: float = 0.0


@dataclass
class _Observed:
    count: int
    first_timestamp: str
    name: str


@dataclass
class _Bucket:
    tokens: float
    at: float


class _Lru(Generic[V]):
    """A mapping that forgets its least recently used keys beyond `size`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Key, V] = OrderedDict()

    def get(self, key: Key) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: Key, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def _source_object(event: Mapping[str, Any]) -> Key:
    source = event.get("source") or {}
    obj = event.get("involvedObject") or {}
    return (str(source.get("component") or ""), str(source.get("host") or ""),
            str(obj.get("kind") or ""), str(obj.get("namespace") or ""),
            str(obj.get("name") or ""), str(obj.get("uid") or ""),
            str(obj.get("apiVersion") or ""))


def event_key(event: Mapping[str, Any]) -> Key:
    """Upstream's `getEventKey`: events with one key are repeats of each other."""
    return (*_source_object(event),
            str((event.get("involvedObject") or {}).get("fieldPath") or ""),
            str(event.get("type") or ""), str(event.get("reason") or ""),
            str(event.get("message") or ""))


def _aggregate_key(event: Mapping[str, Any]) -> Key:
    """Upstream's `EventAggregatorByReasonFunc`: everything but the message."""
    return ("aggregate", *_source_object(event), str(event.get("type") or ""),
            str(event.get("reason") or ""), str(event.get("reportingComponent") or ""),
            str(event.get("reportingInstance") or ""))


class EventCorrelator:
    """One component's correlator (one per `EventRecorder`). `clock` is monotonic seconds."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 burst: int = SPAM_BURST, qps: float = SPAM_QPS,
                 max_events: int = AGGREGATE_MAX_EVENTS,
                 interval: float = AGGREGATE_INTERVAL, size: int = CACHE_ENTRIES) -> None:
        self.clock = clock
        self.burst, self.qps = burst, qps
        self.max_events, self.interval = max_events, interval
        self._aggregates: _Lru[_Aggregate] = _Lru(size)
        self._observed: _Lru[_Observed] = _Lru(size)
        self._buckets: _Lru[_Bucket] = _Lru(size)

    def correlate(self, event: dict[str, Any]) -> Correlated | None:
        """What to write for the new `event` (count 1, timestamps now); None: dropped by
        the spam filter."""
        event, key = self._aggregate(event)
        correlated = self._observe(event, key)
        return correlated if self._accept(event) else None

    def written(self, correlated: Correlated, stored: Mapping[str, Any]) -> None:
        """The apiserver stored `stored` for `correlated`: later repeats count on from it."""
        md = stored.get("metadata") or {}
        self._observed.put(correlated.key, _Observed(int(stored.get("count") or 1),
                                                     str(stored.get("firstTimestamp") or ""),
                                                     str(md.get("name") or "")))

    def _aggregate(self, event: dict[str, Any]) -> tuple[dict[str, Any], Key]:
        now = self.clock()
        key = _aggregate_key(event)
        record = self._aggregates.get(key)
        if record is None or now - record.last > self.interval:
            record = _Aggregate()
        record.messages.add(str(event.get("message") or ""))
        record.last = now
        self._aggregates.put(key, record)
        if len(record.messages) < self.max_events:
            return event, event_key(event)
        record.messages.pop()
        md = event.get("metadata") or {}
        name = str((event.get("involvedObject") or {}).get("name") or md.get("name") or "")
        combined = {**event, "message": AGGREGATED_PREFIX + str(event.get("message") or ""),
                    "count": 1,
                    "metadata": {**md, "name": f"{name}.{time.time_ns():x}"}}
        return combined, key

    def _observe(self, event: dict[str, Any], key: Key) -> Correlated:
        seen = self._observed.get(key)
        if seen is None:
            self._observed.put(key, _Observed(1, str(event.get("firstTimestamp") or ""),
                                              str((event.get("metadata") or {}).get("name"))))
            return Correlated(event, key)
        # As upstream, the count goes up here, whether or not the spam filter then drops it.
        count = seen.count + 1
        self._observed.put(key, _Observed(count, seen.first_timestamp, seen.name))
        md = {**(event.get("metadata") or {}), "name": seen.name}
        repeated = {**event, "metadata": md, "count": count,
                    "firstTimestamp": seen.first_timestamp or event.get("firstTimestamp")}
        patch = {"count": count, "lastTimestamp": event.get("lastTimestamp"),
                 "message": event.get("message")}
        return Correlated(repeated, key, patch)

    def _accept(self, event: Mapping[str, Any]) -> bool:
        now = self.clock()
        key = (*_source_object(event), str(event.get("type") or ""))
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.qps)
        bucket.at = now
        self._buckets.put(key, bucket)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

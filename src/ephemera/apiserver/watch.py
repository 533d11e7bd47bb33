"""Watch streams: `GET ...?watch=true` as upstream's apiserver serves it.

- the options and where the stream starts are `ephemera.api.listoptions`' (upstream's
  validation, the WatchList defaults, the watch cache's rules): initial events (synthetic
  `ADDED` events for the current state, not older than the resourceVersion asked for, then
  the changes), or the changes after a resourceVersion; a compacted one, or one newer than
  the store's after the wait, is a 200 stream with one `ERROR` event carrying the Status (410
  Expired `too old resource version: N (M)`, 504 Too large resource version).
- `sendInitialEvents=true` with `allowWatchBookmarks=true` (as a watch from unset or `0` is
  defaulted to): after the initial events, a `BOOKMARK` annotated
  `k8s.io/initial-events-end: "true"`; `allowWatchBookmarks=true`: periodic `BOOKMARK`s (and
  one just before the stream ends on its timeout).
- selectors with upstream's transitions: an object that stops matching is sent as `DELETED`
  (its previous state at the event's resourceVersion), one that starts matching as `ADDED`.
- one JSON object per line in a chunked 200 response; a one-row Table per event when the
  Accept header asks for a Table (column definitions on the first event). The events queued
  for a stream when it wakes (a watch cache step or a store watch response of several, or a
  client that fell behind for a while) go out in one write, one chunk (`Watcher.take_ready`);
  a lone event goes at once.
- `timeoutSeconds` (default: a random time between the configured minimum and twice it, as
  upstream; a negative one ends the stream at once, as upstream's timer), a store
  `WatcherDropped` (the client fell behind) or the server shutting down end the stream
  cleanly; the client re-lists and watches again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ephemera import trace
from ephemera.api import errors, listoptions
from ephemera.api.errors import StatusError
from ephemera.api.selectors import EQUALS, FieldSelector, FieldTerm, Selection
from ephemera.apiserver import tables
from ephemera.apiserver.registry import Codec, Registry, dumps
from ephemera.apiserver.resources import Resource
from ephemera.apiserver.rest import Target, response_form, selection
from ephemera.apiserver.watchcache import SharedEvent, decoded
from ephemera.store import (
    Compacted,
    Event,
    KeyValue,
    Progress,
    StoreError,
    Watcher,
    WatcherDropped,
)

log = logging.getLogger("ephemera.apiserver")

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# How often an idle stream checks that its client is still there.
LIVENESS_CHECK_INTERVAL = 5.0
# Initial events, and the events queued for a stream, are written in batches of about this
# many bytes (aiohttp waits for the transport to drain above the same size).
WRITE_BATCH = 64 * 1024
# How many queued events are taken from the watcher at a time between two size checks.
TAKE_BATCH = 64


@dataclass
class WatchSettings:
    bookmark_interval: float = 60.0
    min_timeout: float = 1800.0


class _Stream:
    """Encodes events for one watch."""

    def __init__(self, resource: Resource, codec: Codec, form: str | None,
                 include_object: tables.IncludeObject) -> None:
        self.resource = resource
        self.codec = codec
        self.table_version = form.split(":", 1)[1] if form and form.startswith("Table:") \
            else None
        self.include_object = include_object
        self.columns_sent = False

    def event(self, type_: str, kv: KeyValue, obj: dict[str, Any] | None = None) -> bytes:
        if self.table_version is None:
            return b'{"type":"' + type_.encode() + b'","object":' + self.codec.raw(kv) + b"}\n"
        if obj is None:
            obj = self.codec.decode(kv)
        table = tables.to_table(self.resource, [obj], include_object=self.include_object,
                                with_columns=not self.columns_sent,
                                metadata={"resourceVersion": str(kv.mod_revision)},
                                api_version=self.table_version)
        self.columns_sent = True
        return dumps({"type": type_, "object": table}) + b"\n"

    def bookmark(self, revision: int, initial_events_end: bool = False) -> bytes:
        if self.table_version is not None:
            obj: dict[str, Any] = {"kind": "Table", "apiVersion": self.table_version,
                                   "metadata": {"resourceVersion": str(revision)},
                                   "columnDefinitions": None, "rows": []}
        else:
            md: dict[str, Any] = {"resourceVersion": str(revision)}
            if initial_events_end:
                md["annotations"] = {INITIAL_EVENTS_END: "true"}
            obj = {"kind": self.resource.kind, "apiVersion": self.resource.api_version,
                   "metadata": md}
        return dumps({"type": "BOOKMARK", "object": obj}) + b"\n"


def _error_event(status: dict[str, Any]) -> bytes:
    return dumps({"type": "ERROR", "object": status}) + b"\n"


def _is_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def serve_watch(request: web.Request, registry: Registry, target: Target,
                      settings: WatchSettings, stop: asyncio.Event) -> web.StreamResponse:
    res = target.resource
    sel = selection(request, res)
    if target.name:
        term = FieldTerm("metadata.name", EQUALS, target.name)
        sel = Selection(sel.kind, sel.labels, FieldSelector((*sel.fields.terms, term)))
    # As upstream: the options are validated by the query's `watch` (a `/watch/` path
    # without it is validated as a list), then the read is the watch cache's.
    options = listoptions.list_options(request.query)
    read = listoptions.watch_read(options)
    allow_bookmarks = options.allow_watch_bookmarks
    timeout_seconds = options.timeout_seconds
    if timeout_seconds:
        # as upstream's timer: a negative timeoutSeconds has run out already
        timeout = float(timeout_seconds)
    else:
        timeout = settings.min_timeout * (1 + random.random())
    codec = registry.codec(res)
    stream = _Stream(res, codec, response_form(request),
                     tables.parse_include_object(request.query.get("includeObject")))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout

    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                       "Cache-Control": "no-cache, private"})
    response.enable_chunked_encoding()

    initial_chunks: list[bytes] = []
    start = 0
    try:
        if read.initial_events:
            page = await registry.list(res, target.namespace, sel, read.initial_list)
            start = page.revision
            for kv, obj in zip(page.kvs, page.objects, strict=True):
                initial_chunks.append(stream.event("ADDED", kv, obj))
        elif read.after is None:
            start = await registry.store.current_revision()
        else:
            start = read.after
        watcher = await registry.watch(res, target.namespace, start, sel)
    except (StatusError, Compacted) as err:
        # upstream: once the options are valid, a failure to start is an ERROR event
        if isinstance(err, Compacted):
            err = errors.resource_expired(start, err.compacted)
        await response.prepare(request)
        await response.write(_error_event(err.status()))
        await response.write_eof()
        return response

    await response.prepare(request)
    last_revision = start
    # The apiserver stopping ends the watch (its next item is the end); the items are
    # awaited in this task, so an event pushed is written at the loop's next turn.
    stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    stopping.add_done_callback(lambda f: None if f.cancelled() else watcher.interrupt())
    try:
        batch: list[bytes] = []
        size = 0
        for chunk in initial_chunks:
            batch.append(chunk)
            size += len(chunk)
            if size >= WRITE_BATCH:
                await response.write(b"".join(batch))
                batch, size = [], 0
        if read.end_bookmark:
            batch.append(stream.bookmark(start, initial_events_end=True))
        if batch:
            await response.write(b"".join(batch))
        next_bookmark = loop.time() + settings.bookmark_interval
        while True:
            now = loop.time()
            if now >= deadline:
                if allow_bookmarks:
                    await response.write(stream.bookmark(last_revision))
                break
            if _is_gone(request) or stop.is_set():
                break
            wake = min(deadline, now + LIVENESS_CHECK_INTERVAL)
            if allow_bookmarks:
                wake = min(wake, next_bookmark)
            try:
                item = await watcher.next_within(max(wake - now, 0))
            except WatcherDropped:
                break
            except Compacted as err:
                status = errors.resource_expired(start, err.compacted).status()
                await response.write(_error_event(status))
                break
            if item is None:
                break
            if item is not False:
                last_revision = await _write_ready(response, stream, codec, sel, watcher,
                                                   item, last_revision)
            if allow_bookmarks and loop.time() >= next_bookmark:
                await response.write(stream.bookmark(last_revision))
                next_bookmark = loop.time() + settings.bookmark_interval
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write_eof()
    except (ConnectionError, RuntimeError) as err:
        log.debug("watch of %s ended: %s", res.plural, err)
    except Exception as err:
        log.exception("watch of %s failed: %s", request.path_qs, err)
        status = errors.internal_error(str(err) if isinstance(err, StoreError)
                                       else errors.UNEXPECTED).status()
        with contextlib.suppress(Exception):
            await response.write(_error_event(status))
            await response.write_eof()
    finally:
        stopping.cancel()
        await watcher.close()
    return response


async def _write_ready(response: web.StreamResponse, stream: _Stream, codec: Codec,
                       sel: Selection, watcher: Watcher, item: Event | Progress,
                       last_revision: int) -> int:
    """Write `item` and whatever else the watcher holds ready (up to about `WRITE_BATCH`
    bytes) in one write: one chunk, one TLS record or a few, one send, instead of one per
    event. Nothing waits for more: what is queued goes at once. Returns the revision the
    stream has reached."""
    lines: list[bytes] = []
    size = 0
    items: list[Event | Progress] = [item]
    while items:
        for ready in items:
            last_revision = max(last_revision, ready.revision)
            if isinstance(ready, Event):
                line = _encode(stream, codec, sel, ready)
                if line:
                    lines.append(line)
                    size += len(line)
                    if trace.ENABLED:
                        trace.mark("apiserver.watch_sent", ready.kv.key)
        if size >= WRITE_BATCH:
            break
        items = watcher.take_ready(TAKE_BATCH)
    if lines:
        await response.write(lines[0] if len(lines) == 1 else b"".join(lines))
    return last_revision


def _encode(stream: _Stream, codec: Codec, sel: Selection, event: Event) -> bytes:
    kv = event.kv
    created = event.type == "PUT" and kv.create_revision == kv.mod_revision
    if sel.empty:
        if event.type == "DELETE":
            return _line(stream, "DELETED", event)
        return _line(stream, "ADDED" if created else "MODIFIED", event)
    if event.type == "DELETE":
        obj = decoded(event, codec)
        return _line(stream, "DELETED", event, obj) if sel.matches(obj) else b""
    obj = decoded(event, codec)
    passes = sel.matches(obj)
    if created:
        return _line(stream, "ADDED", event, obj) if passes else b""
    prev_obj: dict[str, Any] | None = None
    if event.prev is not None:
        prev_obj = decoded(event, codec, prev=True)
        prev_passes = sel.matches(prev_obj)
    else:
        prev_passes = passes
    if passes and prev_passes:
        return _line(stream, "MODIFIED", event, obj)
    if passes:
        return _line(stream, "ADDED", event, obj)
    if prev_passes and event.prev is not None and prev_obj is not None:
        return _gone_line(stream, event, prev_obj)
    return b""


# -- one decode and one encoding per event for all the watchers of the watch cache ----------
# The watch cache pushes `SharedEvent`s: what one stream decodes (`decoded`) or encodes from
# it is kept in its `memo` for the others (the objects are shared: only read). The memo is
# keyed by the apiVersion the stream serves, as the versions of a custom resource share one
# cache. Events from the store (no watch cache) are decoded and encoded per stream.


def _line(stream: _Stream, type_: str, event: Event,
          obj: dict[str, Any] | None = None) -> bytes:
    """The watch line of the event's object, encoded once per shared event and type for
    every JSON stream (a Table stream's line depends on the stream: its own)."""
    if stream.table_version is not None or not isinstance(event, SharedEvent):
        return stream.event(type_, event.kv, obj)
    key = ("json", stream.codec.resource.api_version, type_)
    line: bytes | None = event.memo.get(key)
    if line is None:
        line = event.memo[key] = stream.event(type_, event.kv)
    return line


def _gone_line(stream: _Stream, event: Event, prev_obj: dict[str, Any]) -> bytes:
    """A `DELETED` for an object that stopped matching: its previous state at the event's
    resourceVersion."""
    kv, prev = event.kv, event.prev
    assert prev is not None
    gone = KeyValue(kv.key, prev.value, prev.create_revision, kv.mod_revision)
    if stream.table_version is None:
        if not isinstance(event, SharedEvent):
            return stream.event("DELETED", gone)
        key = ("json", stream.codec.resource.api_version, "gone")
        line: bytes | None = event.memo.get(key)
        if line is None:
            line = event.memo[key] = stream.event("DELETED", gone)
        return line
    metadata = {**prev_obj["metadata"], "resourceVersion": str(kv.mod_revision)}
    return stream.event("DELETED", gone, {**prev_obj, "metadata": metadata})

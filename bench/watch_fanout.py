"""The watch cache's fan-out cost, in process (`python -m bench.watch_fanout`): K kubelet-like
pod watchers (`spec.nodeName=node-i`), one scheduler-like (`spec.nodeName=`) and W watchers
of all pods get E pod events (a create, a binding to a node, a status update, each pod),
through the watch cache's `WatchHub` and the watch streams' encoder, two ways side by side:

- `per watcher`: as before the shared events and the node index: every watcher is offered
  every event, and each stream decodes and encodes it on its own;
- `shared`: as the cache does now: the node index offers an event only to the watchers of
  the nodes it had or has, and one `SharedEvent` is decoded and encoded once for all.

It counts the decodes (JSON parses of stored values: the streams' and the node index's,
whose parse the streams then reuse) and encodes (deterministic) and the CPU seconds (this
process, `time.process_time`). Markdown on stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from ephemera.api.selectors import Selection
from ephemera.apiserver.registry import Codec
from ephemera.apiserver.resources import core_resource
from ephemera.apiserver.watch import _encode, _Stream
from ephemera.apiserver.watchcache import FieldIndex, SharedEvent
from ephemera.store import Event, KeyValue
from ephemera.store.watchhub import BufferedWatcher, WatchHub

PODS = core_resource("pods")
CODEC = Codec(PODS)
PREFIX = "/registry/pods/"


def _pod(name: str, node: str, phase: str) -> bytes:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox",
                                            "resources": {"requests": {"cpu": "10m"}}}]}
    if node:
        spec["nodeName"] = node
    return CODEC.encode({"kind": "Pod", "apiVersion": "v1",
                         "metadata": {"name": name, "namespace": "default",
                                      "labels": {"app": "scale"}},
                         "spec": spec, "status": {"phase": phase}})


def events(pods: int, nodes: int) -> list[Event]:
    out: list[Event] = []
    revision = 1
    for i in range(pods):
        key, node = f"{PREFIX}default/p{i}", f"node-{i % nodes}"
        created = KeyValue(key, _pod(f"p{i}", "", "Pending"), revision, revision)
        bound = KeyValue(key, _pod(f"p{i}", node, "Pending"), revision, revision + 1)
        running = KeyValue(key, _pod(f"p{i}", node, "Running"), revision, revision + 2)
        out += [Event("PUT", created, None), Event("PUT", bound, created),
                Event("PUT", running, bound)]
        revision += 3
    return out


def run(all_events: list[Event], nodes: int, watches: int, shared: bool
        ) -> dict[str, float]:
    counts = {"decodes": 0, "encodes": 0, "offers": 0}
    decode, event_line, parse = Codec.decode, _Stream.event, FieldIndex.parse

    def counting_decode(self: Codec, kv: KeyValue,
                        parsed: dict[str, Any] | None = None) -> dict[str, Any]:
        counts["decodes"] += parsed is None
        return decode(self, kv, parsed)

    def counting_parse(kv: KeyValue) -> dict[str, Any]:
        counts["decodes"] += 1
        return parse(kv)

    def counting_event(self: _Stream, type_: str, kv: KeyValue,
                       obj: dict[str, Any] | None = None) -> bytes:
        counts["encodes"] += 1
        return event_line(self, type_, kv, obj)

    Codec.decode = counting_decode  # type: ignore[method-assign]
    _Stream.event = counting_event  # type: ignore[method-assign]
    FieldIndex.parse = staticmethod(counting_parse)  # type: ignore[method-assign]
    try:
        hub = WatchHub(0, capacity=10**9, progress_interval=3600)
        index = FieldIndex("Pod", "spec.nodeName")
        streams: dict[BufferedWatcher, tuple[_Stream, Selection]] = {}
        selectors: list[tuple[str, str | None]] = [
            (f"spec.nodeName=node-{i}", f"node-{i}") for i in range(nodes)]
        selectors += [("spec.nodeName=", ""), *[("", None)] * watches]
        for field_selector, route in selectors:
            watcher = hub.register(PREFIX, 0, route=route if shared else None)
            streams[watcher] = (_Stream(PODS, CODEC, None, "PartialObjectMetadata"),
                                Selection.parse("Pod", None, field_selector or None))

        began = time.process_time()
        for event in all_events:
            if shared:
                event = SharedEvent(event.type, event.kv, event.prev)
            hub.publish((event,), index.routes if shared else None)
            for watcher, (stream, sel) in streams.items():
                while watcher._buffer:  # the streams' side, as serve_watch drains them
                    item = watcher._buffer.popleft()
                    counts["offers"] += 1
                    if isinstance(item, Event):
                        _encode(stream, CODEC, sel, item)
        cpu = time.process_time() - began
    finally:
        Codec.decode = decode  # type: ignore[method-assign]
        _Stream.event = event_line  # type: ignore[method-assign]
        FieldIndex.parse = staticmethod(parse)  # type: ignore[method-assign]
    return {**counts, "cpu_seconds": round(cpu, 3)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.watch_fanout",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=20, help="kubelet-like watchers")
    parser.add_argument("--watches", type=int, default=10, help="watchers of all pods")
    args = parser.parse_args(argv)
    all_events = events(args.pods, args.nodes)
    print(f"{len(all_events)} events, {args.nodes} node watchers, 1 scheduler watcher, "
          f"{args.watches} watchers of all pods\n")
    print("| fan-out | offers | decodes | encodes | CPU s |")
    print("|---|--:|--:|--:|--:|")
    for shared in (False, True):
        r = run(all_events, args.nodes, args.watches, shared)
        print(f"| {'shared' if shared else 'per watcher'} | {r['offers']:.0f} | "
              f"{r['decodes']:.0f} | {r['encodes']:.0f} | {r['cpu_seconds']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

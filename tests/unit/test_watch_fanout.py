"""The watch streams' share of a watch-cache event (`ephemera.apiserver.watch`): every stream
of a `SharedEvent` gets the same lines a stream of the plain event gets, while the event is
decoded once (its object and previous state) and each JSON line encoded once, however many
streams (with or without selectors) watch it; a Table stream's lines are its own."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ephemera.api.selectors import Selection
from ephemera.apiserver import registry as registry_module
from ephemera.apiserver.registry import Codec
from ephemera.apiserver.resources import Resource, core_resource
from ephemera.apiserver.watch import _encode, _Stream
from ephemera.apiserver.watchcache import FieldIndex, SharedEvent
from ephemera.store import Event, KeyValue

PODS = core_resource("pods")
CODEC = Codec(PODS)


def stored(name: str, node: str, labels: dict[str, str]) -> bytes:
    return CODEC.encode({"kind": "Pod", "apiVersion": "v1",
                         "metadata": {"name": name, "namespace": "ns", "labels": labels},
                         "spec": {"nodeName": node, "containers": [{"name": "c"}]}})


def events() -> list[Event]:
    key = "/registry/pods/ns/p"
    created = KeyValue(key, stored("p", "a", {"app": "x"}), 5, 5)
    moved = KeyValue(key, stored("p", "b", {"app": "x"}), 5, 6)
    relabelled = KeyValue(key, stored("p", "b", {"app": "y"}), 5, 7)
    return [Event("PUT", created, None), Event("PUT", moved, created),
            Event("PUT", relabelled, moved), Event("DELETE", relabelled, None)]


SELECTIONS = [Selection.parse("Pod", None, None), Selection.parse("Pod", "app=x", None),
              Selection.parse("Pod", None, "spec.nodeName=a"),
              Selection.parse("Pod", "app in (x,y)", "spec.nodeName=b")]


def stream(form: str | None = None) -> _Stream:
    return _Stream(PODS, CODEC, form, "PartialObjectMetadata")


@pytest.mark.parametrize("form", [None, "Table:meta.k8s.io/v1"])
def test_shared_events_give_each_stream_the_lines_a_plain_event_gives(
        form: str | None) -> None:
    for event in events():
        shared = SharedEvent(event.type, event.kv, event.prev)
        for sel in SELECTIONS:
            plain_line = _encode(stream(form), CODEC, sel, event)
            shared_line = _encode(stream(form), CODEC, sel, shared)
            if form is not None:  # a Table's row carries the time it was made: compare rows
                plain_line, shared_line = (
                    [row["cells"][0] for row in json.loads(line)["object"]["rows"]]
                    if line else [] for line in (plain_line, shared_line))
            assert shared_line == plain_line, (event.type, event.revision, sel)


def test_an_event_is_decoded_and_encoded_once_for_all_streams(
        monkeypatch: pytest.MonkeyPatch) -> None:
    decodes: list[int] = []
    encodes: list[str] = []
    decode, event_line = Codec.decode, _Stream.event

    def counting_decode(self: Codec, kv: KeyValue,
                        parsed: dict[str, Any] | None = None) -> dict[str, Any]:
        decodes.append(kv.mod_revision)
        return decode(self, kv, parsed)

    def counting_event(self: _Stream, type_: str, kv: KeyValue,
                       obj: dict[str, Any] | None = None) -> bytes:
        encodes.append(type_)
        return event_line(self, type_, kv, obj)

    monkeypatch.setattr(registry_module.Codec, "decode", counting_decode)
    monkeypatch.setattr(_Stream, "event", counting_event)
    moved = events()[1]  # node a -> b: ADDED for b's watchers, DELETED for a's
    shared = SharedEvent(moved.type, moved.kv, moved.prev)
    lines = [_encode(stream(), CODEC, sel, shared) for sel in SELECTIONS * 25]
    assert sorted(decodes) == [5, 6]  # the previous state and the object, once each
    assert sorted(encodes) == ["ADDED", "DELETED", "MODIFIED"]  # once per kind of line
    assert len({id(line) for line in lines if line}) == 3  # the same bytes, shared
    assert {json.loads(line)["type"] for line in lines if line} == {
        "ADDED", "DELETED", "MODIFIED"}


def test_the_versions_of_a_custom_resource_each_get_their_own_apiversion() -> None:
    # The versions of a custom resource share one watch cache, hence one shared event.
    v1, v2 = (Resource("example.com", version, "widgets", "Widget", True,
                       f"com.example.{version}.Widget", storage_prefix="example.com/widgets",
                       custom=True, storage_version="v1") for version in ("v1", "v2"))
    codecs = [Codec(v1), Codec(v2)]
    key = "/registry/example.com/widgets/ns/w"
    old = KeyValue(key, codecs[0].encode({"metadata": {"name": "w", "labels": {"a": "x"}}}),
                   5, 5)
    new = KeyValue(key, codecs[0].encode({"metadata": {"name": "w", "labels": {"a": "y"}}}),
                   5, 6)
    shared = SharedEvent("PUT", new, old)
    sel = Selection.parse(v1.selector_kind, "a=x", None)  # stops matching: DELETED
    for selection in (Selection.parse(v1.selector_kind, None, None), sel):
        for codec in codecs * 2:
            line = _encode(_Stream(codec.resource, codec, None, "PartialObjectMetadata"),
                           codec, selection, shared)
            assert json.loads(line)["object"]["apiVersion"] == codec.resource.api_version


def test_the_node_index_parse_is_the_streams_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Routing a shared event parses its object and previous state; the streams decode
    those parses instead of parsing the stored bytes again, and answer the same lines."""
    parses: list[int] = []
    parse = FieldIndex.parse

    def counting_parse(kv: KeyValue) -> dict[str, Any]:
        parses.append(kv.mod_revision)
        return parse(kv)

    monkeypatch.setattr(registry_module, "loads", lambda data: pytest.fail("parsed again"))
    monkeypatch.setattr(FieldIndex, "parse", staticmethod(counting_parse))
    moved = events()[1]
    shared = SharedEvent(moved.type, moved.kv, moved.prev)
    assert set(FieldIndex("Pod", "spec.nodeName").routes(shared)) == {"a", "b"}
    lines = [_encode(stream(), CODEC, sel, shared) for sel in SELECTIONS]
    assert sorted(parses) == [5, 6]
    monkeypatch.undo()
    assert lines == [_encode(stream(), CODEC, sel, moved) for sel in SELECTIONS]

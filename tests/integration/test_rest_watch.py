"""Watch streams: resourceVersion rules, bookmarks, initial events, selectors with their
transitions, Table events, compaction, timeouts, the events queued for a stream written
together."""

from __future__ import annotations

import asyncio
import json
from asyncio.selector_events import _SelectorSocketTransport
from pathlib import Path
from typing import Any

import pytest
from aiohttp.web_protocol import RequestHandler
from apiserver_fixtures import TABLE_ACCEPT, Api, configmap, open_watch, serve

from ephemera.apiserver.app import REGISTRY
from ephemera.store import Event, KeyValue, open_store

PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"


async def test_watch_without_resource_version_sends_current_state_first(api: Api) -> None:
    await api.create_pod("a")
    await api.create_pod("b")
    for query in ("watch=true", "watch=1&resourceVersion=0", "watch=True"):
        watch = await open_watch(api, f"{PODS}?{query}")
        first = [await watch.next() for _ in range(2)]
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in first] == [
            ("ADDED", "a"), ("ADDED", "b")]
        assert first[0]["object"]["kind"] == "Pod"
        watch.close()


async def test_watch_from_resource_version_sends_later_changes(api: Api) -> None:
    a = await api.create_pod("a")
    watch = await open_watch(api, f"{PODS}?watch=true&resourceVersion="
                                  f"{a['metadata']['resourceVersion']}")
    await api.create_pod("b")
    await api.patch(f"{PODS}/b", {"metadata": {"labels": {"x": "1"}}}, MERGE)
    await api.delete(f"{PODS}/b")
    events = [await watch.next() for _ in range(3)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "b")]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3
    watch.close()


async def test_watch_response_is_chunked_json_lines(api: Api) -> None:
    response = await api.client.get(f"{PODS}?watch=true")
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Transfer-Encoding"] == "chunked"
    await api.create_pod("a")
    line = await asyncio.wait_for(response.content.readline(), 5)
    assert line.endswith(b"\n")
    assert json.loads(line)["type"] == "ADDED"
    response.close()


async def test_watch_with_field_selector_on_one_pod(api: Api) -> None:
    await api.create_pod("a")
    watch = await open_watch(api, f"{PODS}?fieldSelector=metadata.name%3Db&watch=true")
    await api.create_pod("b")
    await api.create_pod("bb")
    event = await watch.next()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "b")
    await api.delete(f"{PODS}/b")
    event = await watch.next()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("DELETED", "b")
    watch.close()


async def test_watch_selector_transitions(api: Api) -> None:
    _, cm = await api.post(CMS, configmap("c1", labels={"app": "web"}))
    watch = await open_watch(api, f"{CMS}?watch=true&labelSelector=app%3Dweb&resourceVersion="
                                  f"{cm['metadata']['resourceVersion']}")
    await api.patch(f"{CMS}/c1", {"metadata": {"labels": {"app": "db"}}}, MERGE)
    event = await watch.next()
    assert event["type"] == "DELETED"
    assert event["object"]["metadata"]["labels"] == {"app": "web"}  # its last matching state
    await api.patch(f"{CMS}/c1", {"data": {"k": "2"}}, MERGE)  # not matching: nothing
    _, back = await api.patch(f"{CMS}/c1", {"metadata": {"labels": {"app": "web"}}}, MERGE)
    event = await watch.next()
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["resourceVersion"] == back["metadata"]["resourceVersion"]
    await api.patch(f"{CMS}/c1", {"data": {"k": "3"}}, MERGE)
    assert (await watch.next())["type"] == "MODIFIED"
    watch.close()


async def test_watch_of_named_object_path(api: Api) -> None:
    watch = await open_watch(api, f"{CMS}/c1?watch=true")
    await api.post(CMS, configmap("c2"))
    await api.post(CMS, configmap("c1"))
    event = await watch.next()
    assert event["object"]["metadata"]["name"] == "c1"
    watch.close()
    watch = await open_watch(api, "/api/v1/watch/namespaces/default/configmaps")
    assert {(await watch.next())["object"]["metadata"]["name"] for _ in range(2)} == {"c1",
                                                                                      "c2"}
    watch.close()


async def test_watch_across_namespaces(api: Api) -> None:
    await api.post("/api/v1/namespaces", {"metadata": {"name": "other"}})
    watch = await open_watch(api, "/api/v1/configmaps?watch=true")
    await api.post("/api/v1/namespaces/other/configmaps", configmap("c1"))
    event = await watch.next()
    assert event["object"]["metadata"]["namespace"] == "other"
    watch.close()


async def test_watch_bookmarks(api: Api) -> None:
    _, cm = await api.post(CMS, configmap("c1"))
    rv = cm["metadata"]["resourceVersion"]
    watch = await open_watch(api, f"{CMS}?watch=true&allowWatchBookmarks=true&resourceVersion="
                                  f"{rv}")
    event = await watch.next()
    assert event == {"type": "BOOKMARK", "object": {
        "kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}}
    watch.close()


async def test_send_initial_events_ends_with_annotated_bookmark(api: Api) -> None:
    await api.post(CMS, configmap("c1"))
    _, last = await api.post(CMS, configmap("c2"))
    watch = await open_watch(api, f"{CMS}?watch=true&sendInitialEvents=true&allowWatchBookmarks"
                                  "=true&resourceVersionMatch=NotOlderThan")
    events = [await watch.next() for _ in range(3)]
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "BOOKMARK"]
    bookmark = events[2]["object"]["metadata"]
    assert bookmark["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(bookmark["resourceVersion"]) >= int(last["metadata"]["resourceVersion"])
    watch.close()


async def test_watch_timeout_ends_stream(api: Api) -> None:
    watch = await open_watch(api, f"{CMS}?watch=true&timeoutSeconds=1")
    assert await watch.ended(timeout=10)


async def test_a_negative_watch_timeout_ends_the_stream_at_once(api: Api) -> None:
    """upstream's watch timer of a negative duration fires at once (it is not the default
    timeout, which lasts minutes)."""
    watch = await open_watch(api, f"{CMS}?watch=true&timeoutSeconds=-5")
    assert await watch.ended(timeout=10)


async def test_watch_from_compacted_revision_sends_expired_error(api: Api) -> None:
    await api.keep_watch_history("/registry/configmaps/", 1)  # the watch goes to the store
    _, cm = await api.post(CMS, configmap("c1"))
    old = int(cm["metadata"]["resourceVersion"])
    for i in range(3):
        await api.patch(f"{CMS}/c1", {"data": {"k": str(i)}}, MERGE)
    current = await api.store.current_revision()
    await api.store.compact(current)
    watch = await open_watch(api, f"{CMS}?watch=true&resourceVersion={old - 1}")
    event = await watch.next()
    assert event["type"] == "ERROR"
    status = event["object"]
    assert (status["kind"], status["status"], status["code"], status["reason"]) == (
        "Status", "Failure", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {old - 1} (")
    assert await watch.ended()


async def test_watch_events_as_tables(api: Api) -> None:
    await api.create_pod("a")
    watch = await open_watch(api, f"{PODS}?watch=true", headers={"Accept": TABLE_ACCEPT})
    first = await watch.next()
    assert first["type"] == "ADDED"
    table = first["object"]
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:2] == ["Name", "Ready"]
    assert table["rows"][0]["cells"][0] == "a"
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    await api.create_pod("b")
    second = await watch.next()
    assert second["object"]["kind"] == "Table"
    assert second["object"]["rows"][0]["cells"][0] == "b"
    watch.close()


async def test_watch_ends_cleanly_when_the_watcher_falls_behind(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data", watch_capacity=2)
    try:
        # Without the watch cache the stream's watcher is the store's (2 items); the cache
        # takes the store's events as they are published and never falls behind.
        async for api in serve(store, watch_cache=False):
            response = await api.client.get(f"{CMS}?watch=true")
            await asyncio.sleep(0.1)
            await asyncio.gather(*(api.post(CMS, configmap(f"c{i}")) for i in range(50)))
            body = await asyncio.wait_for(response.content.read(), 10)
            events = [json.loads(line) for line in body.splitlines() if line.strip()]
            assert all(e["type"] in ("ADDED", "BOOKMARK") for e in events)
            assert len([e for e in events if e["type"] == "ADDED"]) < 50
    finally:
        await store.close()


async def test_the_app_compacts_the_store_periodically(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    try:
        async for api in serve(store, compaction_interval=0.05):
            await api.keep_watch_history("/registry/configmaps/", 1)
            _, cm = await api.post(CMS, configmap("c1"))
            first = int(cm["metadata"]["resourceVersion"])
            for i in range(3):
                await api.patch(f"{CMS}/c1", {"data": {"k": str(i)}}, MERGE)
            # a watch after `first` starts at first + 1, gone once compacted beyond it
            for _ in range(200):
                if await store.compacted_revision() > first + 1:
                    break
                await asyncio.sleep(0.05)
            assert await store.compacted_revision() > first + 1
            watch = await open_watch(api, f"{CMS}?watch=true&resourceVersion={first}")
            assert (await watch.next())["type"] == "ERROR"
    finally:
        await store.close()


# -- the events queued for a stream go out together -----------------------------------------


def server_writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every `transport.write` of the apiserver's side of a connection, recorded."""
    writes: list[bytes] = []
    original = _SelectorSocketTransport.write

    def write(self: _SelectorSocketTransport, data: Any) -> None:
        if isinstance(self._protocol, RequestHandler):  # type: ignore[attr-defined]
            writes.append(bytes(data))
        original(self, data)

    monkeypatch.setattr(_SelectorSocketTransport, "write", write)
    return writes


def event_writes(writes: list[bytes]) -> list[bytes]:
    return [data for data in writes if b'{"type":"' in data]


async def test_events_queued_for_a_stream_are_written_together(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    _, first = await api.post(CMS, configmap("c0"))
    for i in range(1, 20):
        await api.post(CMS, configmap(f"c{i}"))
    writes = server_writes(monkeypatch)
    # a client watching again from an older resourceVersion: 19 events wait for its stream
    watch = await open_watch(api, f"{CMS}?watch=true&resourceVersion="
                                  f"{first['metadata']['resourceVersion']}")
    events = [await watch.next() for _ in range(19)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", f"c{i}") for i in range(1, 20)]
    assert len(event_writes(writes)) == 1

    # live: the watch cache applies several committed events in one step (as it does for a
    # store watch response holding several); the stream writes them once, in order
    registry = api.app[REGISTRY]
    assert registry.watch_cache is not None
    cache = await registry.watch_cache.ready("/registry/configmaps/")
    assert cache is not None
    watch.close()
    revision = cache.revision
    watch = await open_watch(api, f"{CMS}?watch=true&resourceVersion={revision}")
    assert len(cache.hub) == 1
    writes.clear()
    stored = cache.items["/registry/configmaps/default/c0"]
    for i in range(1, 6):
        kv = KeyValue(stored.key, stored.value, stored.create_revision, revision + i)
        cache.apply(Event("PUT", kv, stored))
    events = [await watch.next() for _ in range(5)]
    assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("MODIFIED", str(revision + i)) for i in range(1, 6)]
    assert len(event_writes(writes)) == 1

    # a lone event is written at once, on its own
    writes.clear()
    await api.post(CMS, configmap("lone"))
    event = await watch.next()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "lone")
    assert len(event_writes(writes)) == 1
    watch.close()

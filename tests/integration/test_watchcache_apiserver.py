"""The watch cache's answers against the store's, over HTTP: two apiservers on one store, one
with the watch cache (`--watch-cache`, the default) and one without, asked the same lists
and watches (resourceVersion `0`, "not older than", exact, paged with continue tokens,
label and field selectors, initial events, a future resourceVersion, one older than both
the cache's window and the store's compaction) must give the same items, events and
errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, eventually, serve

from ephemera.apiserver.app import REGISTRY
from ephemera.store import Store, open_store

CMS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[Api, Api, Store]]:
    store = open_store("sqlite", data_dir=tmp_path / "data", progress_interval=0.1)
    try:
        async for cached in serve(store):
            async for uncached in serve(store, watch_cache=False):
                yield cached, uncached, store
    finally:
        await store.close()


def names(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


async def all_pages(api: Api, query: str) -> list[str]:
    got: list[str] = []
    status, body = await api.get(f"{CMS}?{query}")
    assert status == 200, body
    got += names(body)
    while body["metadata"].get("continue"):
        status, body = await api.get(f"{CMS}?limit=2&continue={body['metadata']['continue']}")
        assert status == 200, body
        got += names(body)
    return got


async def watch_events(api: Api, path: str, timeout: int, query: str
                       ) -> list[dict[str, Any]]:
    """The events of a watch of `path` until it times out after `timeout` seconds."""
    response = await api.client.get(f"{path}?watch=true&timeoutSeconds={timeout}&{query}")
    assert response.status == 200
    return [json.loads(line) for line in (await response.read()).splitlines()]


async def watch_lines(api: Api, query: str) -> list[dict[str, Any]]:
    """A configmap watch's events until it times out (timeoutSeconds=1): the bookmark that
    ends the initial events, without its resourceVersion, but not the periodic ones, whose
    number and revisions depend on timing alone (every 0.2 s here)."""
    events = []
    for event in await watch_events(api, CMS, 1, query):
        obj = event["object"]
        if event["type"] == "BOOKMARK":
            annotations = obj["metadata"].get("annotations")
            if annotations:
                events.append({"type": "BOOKMARK", "annotations": annotations})
        elif event["type"] == "ERROR":
            events.append({"type": "ERROR", "code": obj["code"], "message": obj["message"]})
        else:
            events.append({"type": event["type"], "name": obj["metadata"]["name"],
                           "rv": obj["metadata"]["resourceVersion"],
                           "data": obj.get("data")})
    return events


async def test_the_cache_answers_as_the_store_does(pair: tuple[Api, Api, Store]) -> None:
    cached, uncached, store = pair
    for i in range(7):
        status, _ = await uncached.post(CMS, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "labels": {"parity": "even" if i % 2 else "odd"}},
            "data": {"i": str(i)}})
        assert status == 201
    first_rv = int((await uncached.get(CMS))[1]["metadata"]["resourceVersion"])
    for i in (1, 4):
        status, _ = await uncached.patch(f"{CMS}/cm-{i}", {"data": {"i": f"{i}+"}},
                                         "application/merge-patch+json")
        assert status == 200
    assert (await uncached.delete(f"{CMS}/cm-5"))[0] == 200
    current = await store.current_revision()
    cache = cached.app[REGISTRY].watch_cache
    assert cache is not None
    resource = await cache.ready("/registry/configmaps/")
    assert resource is not None

    async def caught_up() -> bool:
        return resource.revision >= current

    await eventually(caught_up)

    for query in ("resourceVersion=0", "resourceVersion=0&limit=2",
                  f"resourceVersion={current}&resourceVersionMatch=NotOlderThan",
                  f"resourceVersion={first_rv}&resourceVersionMatch=Exact",
                  f"resourceVersion={first_rv}&limit=2",
                  "resourceVersion=0&labelSelector=parity%3Deven",
                  "resourceVersion=0&fieldSelector=metadata.name%3Dcm-3",
                  f"resourceVersion={current}&resourceVersionMatch=NotOlderThan&limit=2",
                  "limit=2"):
        assert await all_pages(cached, query) == await all_pages(uncached, query), query
    # the cache's lists carry its revision, which has reached the store's
    body = (await cached.get(f"{CMS}?resourceVersion=0"))[1]
    assert int(body["metadata"]["resourceVersion"]) == current

    for query in (f"resourceVersion={first_rv}", f"resourceVersion={first_rv - 3}",
                  "resourceVersion=0&sendInitialEvents=true&allowWatchBookmarks=true"
                  "&resourceVersionMatch=NotOlderThan",
                  f"resourceVersion={first_rv}&labelSelector=parity%3Dodd",
                  f"resourceVersion={first_rv}&fieldSelector=metadata.name%3Dcm-4"):
        assert await watch_lines(cached, query) == await watch_lines(uncached, query), query

    # A revision from the future: both wait, then answer 504 Too large resource version.
    for api in (cached, uncached):
        api.app[REGISTRY].block_timeout = 0.2
    future = f"resourceVersion={current + 50}&resourceVersionMatch=NotOlderThan"
    answers = [await api.get(f"{CMS}?{future}") for api in (cached, uncached)]
    assert answers[0] == answers[1]
    assert answers[0][0] == 504


async def test_a_watch_older_than_the_window_and_the_compaction_is_410(
        pair: tuple[Api, Api, Store]) -> None:
    cached, uncached, store = pair
    await cached.keep_watch_history("/registry/configmaps/", 2)
    start = await store.current_revision()
    for i in range(5):
        assert (await uncached.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"name": f"old-{i}"}}))[0] == 201
    await asyncio.sleep(0.1)
    await store.compact(await store.current_revision())
    answers = [await watch_lines(api, f"resourceVersion={start}") for api in (cached, uncached)]
    assert answers[0] == answers[1]
    assert answers[0][0]["type"] == "ERROR" and answers[0][0]["code"] == 410


PODS = "/api/v1/namespaces/default/pods"


async def pod_watch_lines(api: Api, query: str) -> list[tuple[str, str, str, str]]:
    events = []
    for event in await watch_events(api, PODS, 4, query):
        obj = event["object"]
        if event["type"] != "BOOKMARK":
            events.append((event["type"], obj["metadata"]["name"],
                           obj["metadata"]["resourceVersion"],
                           obj["spec"].get("nodeName", "")))
    return events


SELECTORS = ("spec.nodeName%3Dnode-a", "spec.nodeName%3Dnode-b", "spec.nodeName%3D",
             "spec.nodeName%21%3D", "spec.nodeName%3Dnode-a,metadata.name%3Dp2")


async def test_pod_watches_by_node_answer_as_the_store_does(
        pair: tuple[Api, Api, Store]) -> None:
    """The cache finds `spec.nodeName=NAME` watchers through its node index: each watching
    while the pods change gets what the store's filtered watch gives, binding transitions
    included (the unscheduled watch gets a DELETED when its pod is bound, the node's an
    ADDED)."""
    cached, uncached, _store = pair
    first_rv = int((await uncached.get(PODS))[1]["metadata"]["resourceVersion"])
    cache = cached.app[REGISTRY].watch_cache
    assert cache is not None
    resource = await cache.ready("/registry/pods/")
    assert resource is not None and resource.index is not None
    watches = {(api is cached, selector): asyncio.ensure_future(pod_watch_lines(
                   api, f"resourceVersion={first_rv}&fieldSelector={selector}"))
               for api in (cached, uncached) for selector in SELECTORS}

    async def watching() -> bool:
        return len(resource.hub) >= len(SELECTORS) and resource.hub.routed

    await eventually(watching)  # the changes are pushed to them, not replayed
    await uncached.create_pod("p1")  # unscheduled
    await uncached.create_pod("p2", node="node-a")
    status, body = await uncached.post(f"{PODS}/p1/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"},
        "target": {"kind": "Node", "name": "node-b"}})
    assert status == 201, body
    status, body = await uncached.patch(f"{PODS}/p2", {"metadata": {"labels": {"x": "y"}}},
                                        "application/merge-patch+json")
    assert status == 200, body
    assert (await uncached.delete(f"{PODS}/p2?gracePeriodSeconds=0"))[0] == 200
    answers = {key: await task for key, task in watches.items()}
    for selector in SELECTORS:
        assert answers[True, selector] == answers[False, selector], selector
    assert [(t, n, node) for t, n, _, node in answers[True, "spec.nodeName%3D"]] == [
        ("ADDED", "p1", ""), ("DELETED", "p1", "")]
    assert [(t, n) for t, n, _, _ in answers[True, "spec.nodeName%3Dnode-b"]] == [
        ("ADDED", "p1")]
    assert [t for t, *_ in answers[True, "spec.nodeName%3Dnode-a"]] == [
        "ADDED", "MODIFIED", "DELETED"]


async def test_an_informer_s_watch_after_a_consistent_list_is_served_by_the_cache(
        tmp_path: Path) -> None:
    """The caches start with the apiserver: a watch from the revision of a consistent list
    (the store's) made before any cached read finds that revision in the cache's window, as
    an informer's first watch does, rather than a second watch of the store for its life."""
    store = open_store("sqlite", data_dir=tmp_path / "data")
    try:
        async for api in serve(store):
            watch_cache = api.app[REGISTRY].watch_cache
            assert watch_cache is not None
            status, listed = await api.get(CMS)  # consistent: from the store
            assert status == 200
            await api.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "after-the-list"}})
            store_watchers = len(store._hub)  # the caches' own watches of the store
            response = await api.client.get(
                f"{CMS}?watch=true&resourceVersion={listed['metadata']['resourceVersion']}")
            assert response.status == 200
            first = json.loads(await response.content.readline())
            assert (first["type"], first["object"]["metadata"]["name"]) == (
                "ADDED", "after-the-list")
            cache = await watch_cache.ready("/registry/configmaps/")
            assert cache is not None
            assert (len(cache.hub), len(store._hub)) == (1, store_watchers)
            response.close()
    finally:
        await store.close()


async def test_events_are_never_cached(tmp_path: Path) -> None:
    """As upstream's default watch cache size for Events is 0: a `resourceVersion=0` list
    and a watch of Events (`kubectl get events -w`) are answered from the store, and leave
    no Events cache behind to hold and decode every Event from then on."""
    store = open_store("sqlite", data_dir=tmp_path / "data")
    events = "/api/v1/namespaces/default/events"
    try:
        async for api in serve(store):
            watch_cache = api.app[REGISTRY].watch_cache
            assert watch_cache is not None
            event = {"apiVersion": "v1", "kind": "Event",
                     "metadata": {"name": "e1"}, "reason": "Started", "message": "m",
                     "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}}
            status, created = await api.post(events, event)
            assert status == 201, created
            status, listed = await api.get(f"{events}?resourceVersion=0")
            assert status == 200 and names(listed) == ["e1"]
            store_watchers = len(store._hub)
            response = await api.client.get(
                f"{events}?watch=true&resourceVersion={created['metadata']['resourceVersion']}")
            assert response.status == 200
            await api.post(events, {**event, "metadata": {"name": "e2"}})
            line = json.loads(await asyncio.wait_for(response.content.readline(), 10))
            assert (line["type"], line["object"]["metadata"]["name"]) == ("ADDED", "e2")
            assert len(store._hub) == store_watchers + 1  # the watch is the store's own
            assert "/registry/events/" not in watch_cache._caches
            assert await watch_cache.ready("/registry/events/") is None
            response.close()
    finally:
        await store.close()

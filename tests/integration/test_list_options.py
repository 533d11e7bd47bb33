"""List, get and watch options over HTTP, on both stores (SQLite's history table, etcd's
ranges at a revision): paginated lists at an exact past revision, 410 once it is compacted,
`NotOlderThan` and GET waiting for a newer revision and answering 504 Too large resource
version with its Retry-After, and upstream's 400 and 422 answers for options that break the
rules."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from apiserver_fixtures import Api, configmap, eventually, open_watch

from ephemera.apiserver import registry as registry_module
from ephemera.apiserver.app import REGISTRY
from ephemera.store import ListResult

CMS = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"


@pytest.fixture(params=["sqlite", pytest.param("etcd", marks=pytest.mark.etcd)])
def store_api(request: pytest.FixtureRequest) -> Api:
    api: Api = request.getfixturevalue("api" if request.param == "sqlite" else "etcd_api")
    api.app[REGISTRY].block_timeout = 0.3
    return api


def names(body: dict[str, Any]) -> list[str]:
    return [i["metadata"]["name"] for i in body["items"]]


async def _history(api: Api) -> tuple[str, dict[str, str]]:
    """c0..c4 created; the revision then; afterwards c1 changed, c0 deleted, c5 created.
    Returns that revision and c1's data at it."""
    for i in range(5):
        status, _ = await api.post(CMS, configmap(f"c{i}", {"v": "old"}))
        assert status == 201
    _, listed = await api.get(CMS)
    rv = listed["metadata"]["resourceVersion"]
    await api.patch(f"{CMS}/c1", {"data": {"v": "new"}}, MERGE)
    await api.delete(f"{CMS}/c0")
    await api.post(CMS, configmap("c5"))
    return rv, {"v": "old"}


async def test_a_paginated_list_at_a_resource_version_reads_exactly_there(
        store_api: Api) -> None:
    api = store_api
    rv, old = await _history(api)
    for query in (f"resourceVersion={rv}&limit=2",
                  f"resourceVersion={rv}&resourceVersionMatch=Exact&limit=2"):
        status, first = await api.get(f"{CMS}?{query}")
        assert status == 200, first
        assert names(first) == ["c0", "c1"]
        assert first["items"][1]["data"] == old
        assert first["metadata"]["resourceVersion"] == rv
        assert first["metadata"]["remainingItemCount"] == 3
        status, rest = await api.get(f"{CMS}?limit=2&continue={first['metadata']['continue']}")
        assert status == 200
        assert (names(rest), rest["metadata"]["resourceVersion"]) == (["c2", "c3"], rv)
        assert rest["metadata"]["remainingItemCount"] == 1
        _, last = await api.get(f"{CMS}?limit=2&continue={rest['metadata']['continue']}")
        assert names(last) == ["c4"] and "continue" not in last["metadata"]
        assert "remainingItemCount" not in last["metadata"]
    # a selector filters: no count, as upstream
    _, selected = await api.get(f"{CMS}?limit=1&fieldSelector=metadata.namespace%3Ddefault")
    assert selected["metadata"]["continue"] and "remainingItemCount" not in selected["metadata"]
    # without a limit, the legacy resourceVersion means "not older than": the newest list
    status, newest = await api.get(f"{CMS}?resourceVersion={rv}")
    assert names(newest) == ["c1", "c2", "c3", "c4", "c5"]
    assert int(newest["metadata"]["resourceVersion"]) > int(rv)
    _, exact = await api.get(f"{CMS}?resourceVersion={rv}&resourceVersionMatch=Exact")
    assert names(exact) == ["c0", "c1", "c2", "c3", "c4"]


async def test_resource_version_zero_ignores_the_limit(store_api: Api) -> None:
    api = store_api
    await _history(api)
    # Any revision will do for resourceVersion=0: the watch cache (started with the
    # apiserver) may answer before it has the last writes, so ask until it has them; a
    # limit obeyed would never give all five.
    answers: list[dict[str, Any]] = []

    async def whole() -> bool:
        status, body = await api.get(f"{CMS}?resourceVersion=0&limit=2")
        assert status == 200
        answers.append(body)
        return names(body) == ["c1", "c2", "c3", "c4", "c5"]

    await eventually(whole)
    assert "continue" not in answers[-1]["metadata"]


async def test_an_exact_list_at_a_compacted_revision_is_gone(store_api: Api) -> None:
    api = store_api
    rv, _ = await _history(api)
    await api.store.compact(await api.store.current_revision())
    for query in (f"resourceVersion={rv}&limit=2",
                  f"resourceVersion={rv}&resourceVersionMatch=Exact"):
        status, body = await api.get(f"{CMS}?{query}")
        assert (status, body["reason"], body["message"]) == (
            410, "Expired", "The resourceVersion for the provided list is too old.")


async def test_a_resource_version_newer_than_the_store_waits_then_is_too_large(
        store_api: Api) -> None:
    api = store_api
    await api.post(CMS, configmap("c0"))
    current = await api.store.current_revision()
    future = current + 1000
    for path in (f"{CMS}?resourceVersion={future}",
                 f"{CMS}?resourceVersion={future}&resourceVersionMatch=NotOlderThan",
                 f"{CMS}?resourceVersion={future}&resourceVersionMatch=Exact",
                 f"{CMS}?resourceVersion={future}&limit=1",
                 f"{CMS}/c0?resourceVersion={future}"):
        status, body, response = await api.request("GET", path)
        assert status == 504, path
        assert response.headers["Retry-After"] == "1"
        assert body["reason"] == "Timeout"
        assert body["message"].startswith(
            f"Timeout: Too large resource version: {future}, current: ")
        assert body["details"] == {"causes": [{"reason": "ResourceVersionTooLarge",
                                               "message": "Too large resource version"}],
                                   "retryAfterSeconds": 1}


async def test_a_read_of_the_next_revision_is_answered_once_it_is_written(
        store_api: Api) -> None:
    api = store_api
    api.app[REGISTRY].block_timeout = 10
    created = await api.post(CMS, configmap("c0"))
    old_rv = int(created[1]["metadata"]["resourceVersion"])
    nxt = await api.store.current_revision() + 1
    got = asyncio.create_task(api.get(f"{CMS}/c0?resourceVersion={nxt}"))
    listed = asyncio.create_task(api.get(
        f"{CMS}?resourceVersion={nxt}&resourceVersionMatch=NotOlderThan"))
    await asyncio.sleep(0.2)
    assert not got.done() and not listed.done()
    await api.patch(f"{CMS}/c0", {"data": {"k": "2"}}, MERGE)
    status, obj = await got
    assert status == 200 and obj["data"] == {"k": "2"}
    assert int(obj["metadata"]["resourceVersion"]) > old_rv
    status, body = await listed
    assert status == 200 and int(body["metadata"]["resourceVersion"]) >= nxt
    # an older resourceVersion is served at once
    status, obj = await api.get(f"{CMS}/c0?resourceVersion={old_rv}")
    assert status == 200 and obj["data"] == {"k": "2"}


async def test_bad_options_get_upstreams_answers(store_api: Api) -> None:
    api = store_api
    await api.post(CMS, configmap("c0"))
    await api.post(CMS, configmap("c1"))
    _, page = await api.get(f"{CMS}?limit=1")
    token = page["metadata"]["continue"]
    status, body = await api.get(f"{CMS}?continue={token}&resourceVersion=5")
    assert (status, body["reason"], body["message"]) == (
        400, "BadRequest", "specifying resource version is not allowed when using continue")
    status, body = await api.get(f"{CMS}?continue=bogus!&limit=1")
    assert (status, body["message"]) == (
        400, "invalid continue token: continue key is not valid: illegal base64 data at "
             "input byte 5")
    status, body = await api.get(f"{CMS}?sendInitialEvents=true&resourceVersionMatch=Exact")
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: '
        "resourceVersionMatch is forbidden unless resourceVersion is provided, "
        "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]")
    assert [c["field"] for c in body["details"]["causes"]] == [
        "resourceVersionMatch", "sendInitialEvents"]
    status, body = await api.get(f"{CMS}?watch=true&resourceVersion=3"
                                 "&resourceVersionMatch=NotOlderThan")
    assert (status, body["message"]) == (
        422, 'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
             "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
    status, body = await api.get(f"{CMS}?watch=true&sendInitialEvents=true")
    assert (status, body["message"]) == (
        422, 'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
             "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
    for path in (f"{CMS}?resourceVersion=abc", f"{CMS}/c0?resourceVersion=abc",
                 f"{CMS}?watch=1&resourceVersion=abc"):
        status, body = await api.get(path)
        assert (status, body["message"]) == (
            400, 'invalid resource version: resourceVersion: Invalid value: "abc": '
                 'strconv.ParseUint: parsing "abc": invalid syntax'), path


async def test_watch_initial_events_wait_for_the_revision_and_end_with_a_bookmark(
        store_api: Api) -> None:
    api = store_api
    await api.post(CMS, configmap("c0"))
    future = await api.store.current_revision() + 1000
    watch = await open_watch(api, f"{CMS}?watch=true&sendInitialEvents=true"
                                  "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
                                  f"&resourceVersion={future}")
    event = await watch.next()
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (504, "Timeout")
    assert event["object"]["message"].startswith(
        f"Timeout: Too large resource version: {future}, current: ")
    assert await watch.ended()
    # a watch from "0" with bookmarks is defaulted to initial events and their end bookmark
    watch = await open_watch(api, f"{CMS}?watch=true&resourceVersion=0&allowWatchBookmarks=1")
    first = await watch.next()
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "c0")
    end = await watch.next()
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    watch.close()


async def test_an_unpaginated_filtered_list_reads_the_store_in_pages(
        store_api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A list with a selector and no limit is filtered page by page (never one read of the
    whole range), all pages at the first one's revision; every match is returned."""
    api = store_api
    monkeypatch.setattr(registry_module, "LIST_PAGE", 4)
    for i in range(11):
        status, _ = await api.post(CMS, configmap(f"p{i:02}", labels={"odd": str(i % 2)}))
        assert status == 201
    store = api.app[REGISTRY].store
    reads: list[tuple[int, int]] = []
    original = store.list

    async def recording(prefix: str, **options: Any) -> ListResult:
        result = await original(prefix, **options)
        reads.append((options.get("limit", 0), result.revision))
        return result

    monkeypatch.setattr(store, "list", recording)
    status, body = await api.get(f"{CMS}?labelSelector=odd%3D1")
    assert status == 200
    assert names(body) == [f"p{i:02}" for i in range(1, 11, 2)]
    assert "continue" not in body["metadata"]
    assert [limit for limit, _ in reads] == [4, 4, 4]
    assert {revision for _, revision in reads} == {int(body["metadata"]["resourceVersion"])}

"""`ephemera.client` against the in-process apiserver on a real loopback socket: the verbs,
Status errors as `StatusError`, watches (410 included), an unreachable server, and the
informer's cache, handlers, re-list after a compaction and reconnection after a restart;
with several apiservers, failover of requests and of the informer's watch (no relist)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from apiserver_fixtures import Api, eventually

from ephemera.api.errors import StatusError
from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, ApiUnavailable, ClientConfig, Informer, resource_path
from ephemera.client.reflector import SHORT_WATCH_SECONDS
from ephemera.store import open_store

CONFIGMAPS = resource_path("configmaps", "default")


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels or {}}, "data": data or {"k": "v"}}


@pytest.fixture
async def client(api: Api) -> AsyncIterator[ApiClient]:
    url = str(api.client.server.make_url("")).rstrip("/")
    async with ApiClient(ClientConfig(server=url), user_agent="client-test") as c:
        yield c


# --- verbs and errors ------------------------------------------------------------------------


async def test_create_get_list_update_patch_delete(client: ApiClient) -> None:
    created = await client.create(CONFIGMAPS, configmap("a", {"app": "x"}))
    assert created["metadata"]["uid"]
    await client.create(CONFIGMAPS, configmap("b", {"app": "y"}))
    got = await client.get(resource_path("configmaps", "default", "a"))
    assert got["data"] == {"k": "v"}

    listed = await client.list(CONFIGMAPS, label_selector="app=x")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a"]
    assert int(listed["metadata"]["resourceVersion"]) > 0
    paged = await client.list(CONFIGMAPS, limit=1)
    assert sorted(i["metadata"]["name"] for i in paged["items"]) == ["a", "b"]
    assert "continue" not in paged["metadata"]

    got["data"] = {"k": "v2"}
    updated = await client.update(resource_path("configmaps", "default", "a"), got)
    assert updated["data"] == {"k": "v2"}
    merged = await client.patch(resource_path("configmaps", "default", "a"),
                                {"data": {"more": "1"}}, patch_type="merge")
    assert merged["data"] == {"k": "v2", "more": "1"}
    patched = await client.patch(resource_path("configmaps", "default", "a"),
                                 [{"op": "remove", "path": "/data/more"}], patch_type="json")
    assert patched["data"] == {"k": "v2"}

    await client.delete(resource_path("configmaps", "default", "a"))
    with pytest.raises(StatusError) as err:
        await client.get(resource_path("configmaps", "default", "a"))
    assert (err.value.code, err.value.reason, err.value.message) == (
        404, "NotFound", 'configmaps "a" not found')
    assert err.value.details == {"name": "a", "kind": "configmaps"}


async def test_status_errors_carry_the_servers_status(client: ApiClient) -> None:
    await client.create(CONFIGMAPS, configmap("dup"))
    with pytest.raises(StatusError) as dup:
        await client.create(CONFIGMAPS, configmap("dup"))
    assert (dup.value.code, dup.value.reason) == (409, "AlreadyExists")
    assert dup.value.message == 'configmaps "dup" already exists'

    with pytest.raises(StatusError) as invalid:
        await client.create(CONFIGMAPS, configmap("Not_Valid"))
    assert (invalid.value.code, invalid.value.reason) == (422, "Invalid")
    assert invalid.value.details is not None
    assert invalid.value.details["causes"][0]["field"] == "metadata.name"

    stale = await client.get(resource_path("configmaps", "default", "dup"))
    await client.patch(resource_path("configmaps", "default", "dup"), {"data": {"k": "2"}},
                       patch_type="merge")
    with pytest.raises(StatusError) as conflict:
        await client.update(resource_path("configmaps", "default", "dup"), stale)
    assert (conflict.value.code, conflict.value.reason) == (409, "Conflict")


async def test_watch_from_a_list_and_410_after_compaction(client: ApiClient, api: Api) -> None:
    await api.keep_watch_history("/registry/configmaps/", 1)
    listed = await client.list(CONFIGMAPS)
    rv = listed["metadata"]["resourceVersion"]
    await client.create(CONFIGMAPS, configmap("w"))
    events = client.watch(CONFIGMAPS, resource_version=rv, timeout_seconds=5,
                          allow_bookmarks=False)
    first = await anext(events)
    assert (first.type, first.object["metadata"]["name"]) == ("ADDED", "w")
    assert int(first.resource_version) > int(rv)
    await events.aclose()

    await client.delete(resource_path("configmaps", "default", "w"))
    await api.store.compact(await api.store.current_revision())
    with pytest.raises(StatusError) as gone:
        async for _ in client.watch(CONFIGMAPS, resource_version=rv, timeout_seconds=5):
            pass
    assert gone.value.code == 410
    assert gone.value.message.startswith(f"too old resource version: {rv} (")


async def test_warnings_reach_the_handler_unquoted(api: Api) -> None:
    url = str(api.client.server.make_url("")).rstrip("/")
    seen: list[str] = []
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db"]}]},
            "bogus\u00e9": 1}
    async with ApiClient(ClientConfig(server=url), on_warning=seen.append) as c:
        await c.create(resource_path("pods", "default"), body)
    assert seen == ['unknown field "bogusé"',
                    "spec.hostAliases: adding /etc/hosts entries has no effect in ephemera "
                    "(not implemented)"]


async def test_an_unreachable_server_raises_api_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    async with ApiClient(ClientConfig(server=f"http://127.0.0.1:{port}")) as c:
        with pytest.raises(ApiUnavailable) as err:
            await c.get("/version")
        assert str(err.value) == f'Get "http://127.0.0.1:{port}/version": {refused}'
        with pytest.raises(ApiUnavailable) as err:
            async for _ in c.watch(CONFIGMAPS):
                pass
        assert str(err.value) == (f'Get "http://127.0.0.1:{port}{CONFIGMAPS}?'
                                  f'allowWatchBookmarks=true&watch=true": {refused}')
    # Over TLS too: Go's words, not aiohttp's (which carry an SSLContext repr).
    async with ApiClient(ClientConfig(server=f"https://127.0.0.1:{port}")) as c:
        with pytest.raises(ApiUnavailable) as err:
            await c.get("/api/v1/namespaces", limit=1)
        assert str(err.value) == \
            f'Get "https://127.0.0.1:{port}/api/v1/namespaces?limit=1": {refused}'


# --- the informer --------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def add(self, obj: dict[str, Any]) -> None:
        self.seen.append(("add", obj["metadata"]["name"], obj["data"]["k"]))

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.seen.append(("update", new["metadata"]["name"],
                          f'{old["data"]["k"]}->{new["data"]["k"]}'))

    def delete(self, obj: dict[str, Any]) -> None:
        self.seen.append(("delete", obj["metadata"]["name"], obj["data"]["k"]))


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[Informer]:
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 10)
        yield informer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_informer_cache_and_handlers(client: ApiClient) -> None:
    await client.create(CONFIGMAPS, configmap("before", {"app": "x"}, k="0"))
    await client.create(CONFIGMAPS, configmap("other", {"app": "y"}, k="0"))
    informer = Informer(client, CONFIGMAPS, label_selector="app=x")
    recorder = Recorder()
    informer.add_handler(on_add=recorder.add, on_update=recorder.update,
                         on_delete=recorder.delete)
    async with running(informer):
        assert recorder.seen == [("add", "before", "0")]
        await client.create(CONFIGMAPS, configmap("new", {"app": "x"}, k="1"))
        await client.patch(resource_path("configmaps", "default", "new"), {"data": {"k": "2"}},
                           patch_type="merge")
        await client.delete(resource_path("configmaps", "default", "before"))
        await eventually(lambda: len(recorder.seen) == 4)
        assert recorder.seen[1:] == [("add", "new", "1"), ("update", "new", "1->2"),
                                     ("delete", "before", "0")]
        assert [o["metadata"]["name"] for o in informer.list()] == ["new"]
        cached = informer.get("default/new")
        assert cached is not None and cached["data"] == {"k": "2"}
        # a handler added late sees the cache first
        late = Recorder()
        informer.add_handler(on_add=late.add)
        assert late.seen == [("add", "new", "2")]


async def test_informer_lists_in_pages(client: ApiClient,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The first list asks for resourceVersion 0, which the watch cache answers whole; a
    consistent list (after the version is gone) reads `page_size` items at a time
    (client-go's pager), all at the first page's resourceVersion, and the cache holds
    every page."""
    for i in range(5):
        await client.create(CONFIGMAPS, configmap(f"paged-{i}", {"app": "paged"}))
    await client.create(CONFIGMAPS, configmap("not-paged", {"app": "other"}))
    asked: list[dict[str, Any]] = []
    get = client.get

    async def recording_get(path: str, **params: Any) -> dict[str, Any]:
        page = await get(path, **params)
        asked.append({**params, "rv": page["metadata"]["resourceVersion"]})
        return page

    monkeypatch.setattr(client, "get", recording_get)
    informer = Informer(client, CONFIGMAPS, label_selector="app=paged", page_size=2)
    async with running(informer):
        assert sorted(o["metadata"]["name"] for o in informer.list()) == [
            f"paged-{i}" for i in range(5)]
        assert [(a["limit"], a["resourceVersion"]) for a in asked] == [(2, "0")]
        asked.clear()
        informer.reflector._version_gone = True  # as after a watch's 410
        await informer.reflector.relist()
        assert sorted(o["metadata"]["name"] for o in informer.list()) == [
            f"paged-{i}" for i in range(5)]
    assert [(a["limit"], bool(a["continue"]), a["resourceVersion"]) for a in asked] == [
        (2, False, None), (2, True, None), (2, True, None)]
    assert len({a["rv"] for a in asked}) == 1
    assert int(informer.resource_version) >= int(asked[0]["rv"])


async def test_informer_lists_again_after_its_revision_is_compacted(client: ApiClient,
                                                                    api: Api) -> None:
    await client.create(CONFIGMAPS, configmap("kept", {"app": "x"}))
    # The watch cache keeps two events of history, so that the next watch from `synced_at`
    # is older than its window and goes to the store, which has compacted it away.
    await api.keep_watch_history("/registry/configmaps/", 2)
    # short watches without bookmarks: the resourceVersion moves only with matching events
    informer = Informer(client, CONFIGMAPS, label_selector="app=x", watch_timeout=1,
                        allow_bookmarks=False)
    recorder = Recorder()
    informer.add_handler(on_add=recorder.add, on_update=recorder.update,
                         on_delete=recorder.delete)
    async with running(informer):
        synced_at = int(informer.resource_version)
        for i in range(3):  # history the informer does not watch
            await client.create(CONFIGMAPS, configmap(f"unrelated-{i}"))
        compacted = await api.store.current_revision()
        await api.store.compact(compacted)
        # the next watch (from `synced_at`) answers 410: the informer lists again
        await eventually(lambda: int(informer.resource_version) >= compacted)
        assert synced_at < compacted
        assert recorder.seen == [("add", "kept", "v")]  # nothing changed for the handlers


async def test_informer_reconnects_after_the_server_restarts(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    config = ApiserverConfig(watch_bookmark_interval=0.2)
    first = TestServer(create_app(store, config))
    await first.start_server()
    port = first.port
    recorder = Recorder()
    try:
        async with ApiClient(ClientConfig(server=f"http://127.0.0.1:{port}")) as c:
            await c.create(CONFIGMAPS, configmap("a", k="1"))
            informer = Informer(c, CONFIGMAPS)
            informer.add_handler(on_add=recorder.add, on_update=recorder.update,
                                 on_delete=recorder.delete)
            async with running(informer):
                await first.close()
                second = TestServer(create_app(store, config), port=port)
                await second.start_server()
                try:
                    await c.delete(resource_path("configmaps", "default", "a"))
                    await c.create(CONFIGMAPS, configmap("b", k="2"))
                    await eventually(lambda: len(recorder.seen) == 3, timeout=20)
                    assert recorder.seen == [("add", "a", "1"), ("delete", "a", "1"),
                                             ("add", "b", "2")]
                finally:
                    await second.close()
    finally:
        await store.close()


# --- several apiservers ----------------------------------------------------------------------


async def test_a_dead_first_endpoint_fails_over_at_once_and_sticks(client: ApiClient) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    live = client.server
    async with ApiClient(ClientConfig(server=live), endpoints=[dead]) as c:
        assert c.server == dead and c.endpoints.urls == (dead, live)
        await c.create(CONFIGMAPS, configmap("failover"))
        assert c.server == live  # moved within the request, and stays there
        got = await c.get(resource_path("configmaps", "default", "failover"))
        assert got["metadata"]["name"] == "failover" and c.server == live


async def test_a_request_broken_after_it_was_sent_names_its_own_server(
        client: ApiClient) -> None:
    """A server that takes the request and hangs up: the client moves to the next one for
    the next request, and the error names the server the request went to."""

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    broken = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with ApiClient(ClientConfig(server=client.server), endpoints=[broken]) as c:
            with pytest.raises(ApiUnavailable) as err:
                await c.get("/version")
            assert c.server == client.server  # switched for the next request
            assert str(err.value).startswith(f'Get "{broken}/version": ')
    finally:
        server.close()


async def test_a_request_timeout_of_its_own_bounds_one_request() -> None:
    """`request_timeout=` on a verb bounds that request (a kubelet's heartbeats: 10 s) while
    the client's own bound (30 s) stays for the others."""

    done = asyncio.Event()

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        await done.wait()
        writer.close()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    silent = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with ApiClient(ClientConfig(server=silent)) as c:
            started = asyncio.get_running_loop().time()
            with pytest.raises(ApiUnavailable) as err:
                await c.update("/api/v1/nodes/n1", {}, request_timeout=0.3)
            assert asyncio.get_running_loop().time() - started < c.request_timeout / 2
            assert str(err.value).startswith(f'Put "{silent}/api/v1/nodes/n1": ')
            with pytest.raises(TimeoutError):  # the client's own bound is still 30 s
                await asyncio.wait_for(c.get("/version"), 1.0)
    finally:
        done.set()
        server.close()


async def test_informer_resumes_its_watch_on_the_next_apiserver_without_a_relist(
        tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    config = ApiserverConfig(watch_bookmark_interval=0.2)
    first, second = TestServer(create_app(store, config)), TestServer(create_app(store, config))
    await first.start_server()
    await second.start_server()
    urls = [f"http://127.0.0.1:{server.port}" for server in (first, second)]
    recorder = Recorder()
    try:
        async with ApiClient(ClientConfig(server=urls[1]), endpoints=[urls[0]]) as c:
            await c.create(CONFIGMAPS, configmap("a", k="1"))
            informer = Informer(c, CONFIGMAPS)
            informer.add_handler(on_add=recorder.add, on_update=recorder.update,
                                 on_delete=recorder.delete)
            async with running(informer):
                assert c.server == urls[0]
                # Past client-go's "very short watch" (an empty watch ended within a second
                # lists again): the watch is established, as a component's long-running one.
                await asyncio.sleep(SHORT_WATCH_SECONDS + 0.5)
                await first.close()
                await c.create(CONFIGMAPS, configmap("b", k="2"))
                await eventually(lambda: len(recorder.seen) == 2, timeout=10)
                assert recorder.seen == [("add", "a", "1"), ("add", "b", "2")]
                assert c.server == urls[1]
                # The stream ended with the server; the watch was opened again from its last
                # version on the second server (the connection moved within the request).
                assert informer.reflector.relists == 0
    finally:
        await second.close()
        await store.close()

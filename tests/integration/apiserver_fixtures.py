"""Fixtures for the in-process apiserver tests: the aiohttp app on a SqliteStore in a tmp dir
(or on the session's etcd, under a unique prefix), driven through aiohttp's test client; and
`eventually`, the tests' wait for a condition."""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient, TestServer

from ephemera.apiserver.app import LIFECYCLE, REGISTRY, ApiserverConfig, create_app
from ephemera.apiserver.authn import Authenticator, UserInfo
from ephemera.store import Store, open_store


async def eventually(check: Callable[[], Awaitable[object] | object],
                     timeout: float = 10) -> None:
    """Wait until `check()` (a plain or an async predicate) is truthy; fail the test when it is
    not within `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


TABLE_ACCEPT = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;"
                "v=v1beta1;g=meta.k8s.io,application/json")


def pod(name: str, *, labels: dict[str, str] | None = None, node: str = "",
        **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], **spec},
    }
    if labels:
        body["metadata"]["labels"] = labels
    if node:
        body["spec"]["nodeName"] = node
    return body


def configmap(name: str, data: dict[str, str] | None = None, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, **metadata}, "data": data or {"k": "v"}}


def causes(body: dict[str, Any]) -> list[tuple[str, str]]:
    """The (field, message) of each cause of a Status (a 422's)."""
    return [(c["field"], c["message"]) for c in body["details"]["causes"]]


@dataclass
class Api:
    client: TestClient[web.Request, web.Application]
    store: Store
    app: web.Application

    async def request(self, method: str, path: str, body: Any = None, *,
                      content_type: str = "application/json",
                      headers: dict[str, str] | None = None) -> tuple[int, Any, ClientResponse]:
        all_headers = dict(headers or {})
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            all_headers.setdefault("Content-Type", content_type)
        response = await self.client.request(method, path, data=data, headers=all_headers)
        text = await response.text()
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return response.status, parsed, response

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        status, body, _ = await self.request("GET", path, **kw)
        return status, body

    async def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        status, data, _ = await self.request("POST", path, body, **kw)
        return status, data

    async def put(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        status, data, _ = await self.request("PUT", path, body, **kw)
        return status, data

    async def patch(self, path: str, body: Any, content_type: str, **kw: Any
                    ) -> tuple[int, Any]:
        status, data, _ = await self.request("PATCH", path, body, content_type=content_type,
                                             **kw)
        return status, data

    async def delete(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        status, data, _ = await self.request("DELETE", path, body, **kw)
        return status, data

    async def create_pod(self, name: str, namespace: str = "default", **kw: Any
                         ) -> dict[str, Any]:
        status, body = await self.post(f"/api/v1/namespaces/{namespace}/pods", pod(name, **kw))
        assert status == 201, body
        return dict(body)

    async def keep_watch_history(self, prefix: str, events: int) -> None:
        """Let the watch cache of `prefix` keep only its next `events` events, so that a
        watch from before them is older than its window and goes to the store (which may
        answer 410 where the cache would have served it)."""
        watch_cache = self.app[REGISTRY].watch_cache
        assert watch_cache is not None
        cache = await watch_cache.ready(prefix)
        assert cache is not None
        cache.history_limit = events

    async def settle_namespaces(self) -> None:
        await asyncio.wait_for(self.app[LIFECYCLE].wait_idle(), 10)


async def serve(store: Store, **config: Any) -> AsyncIterator[Api]:
    settings: dict[str, Any] = {"watch_bookmark_interval": 0.2, "namespace_retry_interval": 0.05}
    settings.update(config)
    app = create_app(store, ApiserverConfig(**settings))
    async with TestClient(TestServer(app)) as client:
        yield Api(client, store, app)


StoreT = TypeVar("StoreT", bound=Store)


class Users(Generic[StoreT]):
    """An apiserver authenticating bearer tokens: `call` sends a request as a token's user."""

    def __init__(self, api: Api, store: StoreT) -> None:
        self.api = api
        self.store = store

    async def call(self, token: str, method: str, path: str, body: Any = None,
                   **kw: Any) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}", **kw.pop("headers", {})}
        status, data, _ = await self.api.request(method, path, body, headers=headers, **kw)
        return status, data


async def serve_users(store: StoreT, tokens: dict[str, UserInfo]) -> AsyncIterator[Users[StoreT]]:
    """Body of a fixture: `serve(store)` with the static bearer `tokens`; `store` is closed
    afterwards."""
    try:
        async for served in serve(store, authenticator=Authenticator(tokens)):
            yield Users(served, store)
    finally:
        await store.close()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    try:
        async for served in serve(store):
            yield served
    finally:
        await store.close()


@pytest.fixture
async def etcd_api(etcd_endpoint: str) -> AsyncIterator[Api]:
    store = open_store("etcd", endpoints=[etcd_endpoint], prefix=f"/t-{uuid.uuid4().hex}")
    try:
        async for served in serve(store):
            yield served
    finally:
        await store.close()


class WatchStream:
    """The events of a watch response, one JSON object per line."""

    def __init__(self, response: ClientResponse) -> None:
        self.response = response

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.response.content.readline(), timeout)
        assert line, "the watch stream ended"
        event: dict[str, Any] = json.loads(line)
        return event

    async def next_non_bookmark(self, timeout: float = 5.0) -> dict[str, Any]:
        while True:
            event = await self.next(timeout)
            if event["type"] != "BOOKMARK":
                return event

    async def ended(self, timeout: float = 5.0) -> bool:
        rest = await asyncio.wait_for(self.response.content.read(), timeout)
        return all(not line.strip() or json.loads(line)["type"] == "BOOKMARK"
                   for line in rest.splitlines())

    def close(self) -> None:
        self.response.close()


async def open_watch(api: Api, path: str, headers: dict[str, str] | None = None
                     ) -> WatchStream:
    response = await api.client.get(path, headers=headers or {})
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("application/json")
    return WatchStream(response)

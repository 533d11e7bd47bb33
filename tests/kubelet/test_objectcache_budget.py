"""The watch budget of the kubelet's object cache is shared by Secrets and ConfigMaps: a
watch freed by one kind goes to the object that has waited longest for one, of either kind
(against an in-process apiserver)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestServer

from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, ClientConfig, resource_path
from ephemera.kubelet.objectcache import PodObjects
from ephemera.store import open_store

NS = "default"


@contextlib.asynccontextmanager
async def apiserver(tmp_path: Path) -> AsyncIterator[ApiClient]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    server = TestServer(create_app(store, ApiserverConfig(watch_bookmark_interval=0.2,
                                                          namespace_retry_interval=0.05)))
    await server.start_server()
    try:
        url = str(server.make_url("")).rstrip("/")
        async with ApiClient(ClientConfig(server=url), user_agent="budget-test") as api:
            yield api
    finally:
        await server.close()
        await store.close()


def _pod(uid: str, *, secret: str | None = None, configmap: str | None = None
         ) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = []
    if secret is not None:
        volumes.append({"name": "s", "secret": {"secretName": secret}})
    if configmap is not None:
        volumes.append({"name": "c", "configMap": {"name": configmap}})
    return {"metadata": {"name": uid, "namespace": NS, "uid": uid},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "volumes": volumes}}


async def test_a_freed_watch_goes_to_the_longest_waiter_of_either_kind(
        tmp_path: Path) -> None:
    async with apiserver(tmp_path) as api:
        await api.create(resource_path("secrets", NS), {"metadata": {"name": "s1"}})
        await api.create(resource_path("secrets", NS), {"metadata": {"name": "s2"}})
        await api.create(resource_path("configmaps", NS),
                         {"metadata": {"name": "c1"}, "data": {"k": "v"}})
        objects = PodObjects(api, max_watched=1)
        try:
            objects.register_pod("u1", _pod("u1", secret="s1"))
            objects.register_pod("u2", _pod("u2", configmap="c1"))  # waits first
            objects.register_pod("u3", _pod("u3", secret="s2"))  # waits next
            assert objects.secrets.watched() == [(NS, "s1")]
            assert objects.configmaps.watched() == []
            task = objects.secrets._items[(NS, "s1")].task
            objects.unregister_pod("u1")  # the Secret's watch goes to the ConfigMap
            assert task is not None
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert objects.configmaps.watched() == [(NS, "c1")]
            assert objects.secrets.watched() == []
            config = await objects.get_configmap(NS, "c1")
            assert config is not None and config["data"] == {"k": "v"}
            assert objects.configmaps.cache_reads == 1
            objects.unregister_pod("u2")  # and back to the Secret waiting
            assert objects.secrets.watched() == [(NS, "s2")]
        finally:
            await objects.close()

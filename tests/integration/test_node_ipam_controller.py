"""The node IPAM controller against an in-process apiserver: Nodes get the lowest free
blocks, a Node left without one gets one `CIDRNotAvailable` event and one log line however
many passes run while it waits, and the block of a deleted Node goes to the oldest waiting
Node."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer
from apiserver_fixtures import eventually

from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, resource_path
from ephemera.client.kubeconfig import ClientConfig
from ephemera.controllers.nodeipam import NodeIpamController
from ephemera.store import open_store

NODES = resource_path("nodes")


@contextlib.asynccontextmanager
async def ipam_and_api(tmp_path: Path, cluster_cidr: str) -> AsyncIterator[ApiClient]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    server = TestServer(create_app(store, ApiserverConfig(watch_bookmark_interval=0.2)))
    await server.start_server()
    try:
        async with ApiClient(ClientConfig(server=str(server.make_url("")).rstrip("/")),
                             user_agent="nodeipam-test") as api:
            task = asyncio.create_task(NodeIpamController(api, cluster_cidr, 24).run())
            try:
                yield api
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await server.close()
        await store.close()


async def pod_cidrs(api: ApiClient) -> dict[str, str]:
    listed = await api.list(NODES)
    return {n["metadata"]["name"]: (n.get("spec") or {}).get("podCIDR", "")
            for n in listed["items"]}


async def test_a_node_left_without_a_block_is_told_once_and_gets_a_freed_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ephemera.controllers.nodeipam")
    async with ipam_and_api(tmp_path, "10.77.0.0/23") as api:  # two /24 blocks
        for i in range(4):
            await api.create(NODES, {"apiVersion": "v1", "kind": "Node",
                                     "metadata": {"name": f"n{i}"}})
            await asyncio.sleep(0.01)  # creation order is the order of allocation

        async def two_allocated() -> bool:
            return sorted((await pod_cidrs(api)).values()) == [
                "", "", "10.77.0.0/24", "10.77.1.0/24"]

        await eventually(two_allocated)
        cidrs = await pod_cidrs(api)
        waiting = sorted(name for name, cidr in cidrs.items() if not cidr)

        def told_lines() -> list[str]:
            return [r.getMessage() for r in caplog.records
                    if "no pod CIDR left" in r.getMessage()]

        await eventually(lambda: len(told_lines()) == 2)  # one per Node (created apart)
        assert told_lines() == [
            "no pod CIDR left in 10.77.0.0/23 (/24 blocks) for 1 node(s): n2; 1 wait in all",
            "no pod CIDR left in 10.77.0.0/23 (/24 blocks) for 1 node(s): n3; 2 wait in all"]
        # more passes while they wait (every update of a Node without a block wakes one)
        for round_ in range(3):
            for name in waiting:
                await api.patch(f"{NODES}/{name}", {"metadata": {"labels": {
                    "round": str(round_)}}}, patch_type="merge")
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert len(told_lines()) == 2
        events = (await api.list(resource_path("events", "default")))["items"]
        told = sorted(e["involvedObject"]["name"] for e in events
                      if e["reason"] == "CIDRNotAvailable")
        assert told == waiting == ["n2", "n3"]
        assert all(e.get("count", 1) == 1 for e in events)

        holder = next(name for name, cidr in cidrs.items() if cidr == "10.77.0.0/24")
        await api.delete(f"{NODES}/{holder}")

        async def freed_block_reused() -> bool:
            return (await pod_cidrs(api)).get(waiting[0]) == "10.77.0.0/24"

        await eventually(freed_block_reused)
        assert (await pod_cidrs(api)).get(waiting[1]) == ""

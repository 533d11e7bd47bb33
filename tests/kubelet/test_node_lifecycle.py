"""The node lifecycle controller against a real kubelet (fake runtime): while the kubelet
renews its Lease the node stays Ready; once it stops, the node is marked Unknown and tainted
unreachable; a kubelet that comes back makes it Ready and untainted again. And the service
accounts controller recreates a deleted `default` ServiceAccount."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kubelet_harness import NODE, Harness, running_kubelet, wait_until

from ephemera.api.errors import StatusError
from ephemera.client import resource_path
from ephemera.controllers.nodelifecycle import NodeLifecycleController
from ephemera.controllers.serviceaccounts import ServiceAccountsController


@contextlib.asynccontextmanager
async def running(controller: Any) -> AsyncIterator[None]:
    task = asyncio.create_task(controller.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def ready(h: Harness) -> str:
    node = await h.api.get(resource_path("nodes", name=NODE))
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


async def taint_keys(h: Harness) -> set[str]:
    node = await h.api.get(resource_path("nodes", name=NODE))
    return {t["key"] for t in (node.get("spec") or {}).get("taints") or []}


async def test_a_node_whose_lease_expires_is_marked_unknown(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        controller = NodeLifecycleController(h.api, grace_period=1.5, monitor_period=0.2)
        async with running(controller):
            await asyncio.sleep(2.5)  # renewed every 0.5 s: stays Ready
            assert await ready(h) == "True"
            assert await taint_keys(h) == set()
            await h.shutdown()

            async def unknown() -> bool:
                return await ready(h) == "Unknown"

            await wait_until(unknown)
            node = await h.api.get(resource_path("nodes", name=NODE))
            cond = {c["type"]: c for c in node["status"]["conditions"]}
            assert (cond["Ready"]["reason"], cond["Ready"]["message"]) == (
                "NodeStatusUnknown", "Kubelet stopped posting node status.")
            assert cond["DiskPressure"]["status"] == "Unknown"

            async def tainted() -> bool:
                return "node.kubernetes.io/unreachable" in await taint_keys(h)

            await wait_until(tainted)
            await h.restart()

            async def recovered() -> bool:
                return await ready(h) == "True" and not await taint_keys(h)

            await wait_until(recovered)


async def test_the_default_service_account_comes_back(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h, \
            running(ServiceAccountsController(h.api, resync_period=0.5)):
        path = resource_path("serviceaccounts", "default", "default")
        await h.api.get(path)
        await h.api.delete(path)

        async def back() -> bool:
            try:
                await h.api.get(path)
            except StatusError:
                return False
            return True

        await wait_until(back)
        await h.api.create(resource_path("namespaces"), {"metadata": {"name": "fresh"}})

        async def in_fresh() -> bool:
            try:
                await h.api.get(resource_path("serviceaccounts", "fresh", "default"))
            except StatusError:
                return False
            return True

        await wait_until(in_fresh)

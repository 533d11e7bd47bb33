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


def status_writes(h: Harness) -> float:
    """How many times the kubelet has written its Node's status."""
    value = h.kubelet.metrics.registry.get_sample_value(
        "ephemera_kubelet_node_status_updates_total")
    return float(value or 0.0)


def ready_condition(node: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    return found


async def test_status_set_unknown_by_another_is_restored_at_the_next_update(
        tmp_path: Path) -> None:
    """The kubelet compares with the Node in the API, not with its own last report: when the
    node lifecycle controller (here: the test, writing what it writes) has set the conditions
    Unknown, the kubelet's next status update, one update period later, makes the node Ready
    again. The harness reports unchanged status only every 300 s, so nothing but the
    comparison with the API's Node can bring Ready back within the wait."""
    async with running_kubelet(tmp_path) as h:
        agent = h.kubelet.node_agent
        assert agent is not None
        assert agent.report_interval == 300.0
        path = resource_path("nodes", name=NODE, subresource="status")
        node = await h.api.get(resource_path("nodes", name=NODE))
        before = ready_condition(node)
        assert before["status"] == "True"
        unknown = [{**c, "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status."}
                   for c in node["status"]["conditions"]]

        async def settled() -> bool:
            return not await agent.update_status()

        await wait_until(settled)  # the kubelet has nothing more of its own to write
        writes_before = status_writes(h)
        await h.api.patch(path, {"status": {"conditions": unknown}}, patch_type="merge")
        assert await ready(h) == "Unknown"

        async def restored() -> bool:
            return await ready(h) == "True"

        await wait_until(restored)
        # The very next write put it back (nothing else changed in between).
        assert status_writes(h) == writes_before + 1
        after = ready_condition(await h.api.get(resource_path("nodes", name=NODE)))
        assert (after["reason"], after["message"]) == ("KubeletReady",
                                                       "kubelet is posting ready status")


async def test_an_unchanged_status_is_not_rewritten_and_a_changed_one_is(
        tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        agent = h.kubelet.node_agent
        assert agent is not None

        async def settled() -> bool:
            return not await agent.update_status()

        await wait_until(settled)  # the status in the API is the kubelet's own
        rv = (await h.api.get(resource_path("nodes", name=NODE)))["metadata"]["resourceVersion"]
        assert not await agent.update_status()
        assert (await h.api.get(resource_path("nodes", name=NODE))
                )["metadata"]["resourceVersion"] == rv
        await h.api.patch(resource_path("nodes", name=NODE, subresource="status"),
                          {"status": {"nodeInfo": {"kubeletVersion": "v0.0.0"}}},
                          patch_type="merge")
        assert await agent.update_status()
        node = await h.api.get(resource_path("nodes", name=NODE))
        assert node["status"]["nodeInfo"]["kubeletVersion"] != "v0.0.0"

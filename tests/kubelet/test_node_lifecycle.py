"""The node lifecycle controller against a real kubelet (fake runtime): while the kubelet
renews its Lease the node stays Ready; once it stops, the node is marked Unknown and tainted
unreachable; a kubelet that comes back makes it Ready and untainted again. Once it stops, its
pods are marked not ready (and leave the EndpointSlice's ready endpoints), and the taint
eviction controller deletes those whose toleration of the taint runs out. And the service
accounts controller recreates a deleted `default` ServiceAccount."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

from kubelet_harness import NODE, Harness, pod, running_kubelet, wait_until

from ephemera.api.errors import StatusError
from ephemera.api.meta import now_rfc3339
from ephemera.client import Informer, resource_path
from ephemera.controllers.endpointslice import EndpointSliceController
from ephemera.controllers.nodelifecycle import NodeLifecycleController
from ephemera.controllers.serviceaccounts import ServiceAccountsController
from ephemera.controllers.tainteviction import TaintEvictionController
from ephemera.kubelet.node import now_micro


@contextlib.asynccontextmanager
async def in_background(work: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def running(controller: Any) -> contextlib.AbstractAsyncContextManager[None]:
    return in_background(controller.run())


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
            # Its only node not Ready: full disruption (upstream's master disruption mode),
            # the NoSchedule taint only, no NoExecute one to evict by.
            await asyncio.sleep(0.5)
            node = await h.api.get(resource_path("nodes", name=NODE))
            assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [
                ("node.kubernetes.io/unreachable", "NoSchedule")]
            assert controller.full_disruption
            await h.restart()

            async def recovered() -> bool:
                return await ready(h) == "True" and not await taint_keys(h)

            await wait_until(recovered)


async def test_cordon_taints_the_node_unschedulable_and_uncordon_untaints_it(
        tmp_path: Path) -> None:
    """`kubectl cordon` (spec.unschedulable) adds `node.kubernetes.io/unschedulable:
    NoSchedule` with `timeAdded`, uncordon removes it; at once, on the node's update, not at
    the next monitor pass (an hour away here)."""
    async with running_kubelet(tmp_path) as h:
        controller = NodeLifecycleController(h.api, monitor_period=3600.0)
        async with running(controller):
            await wait_until(lambda: NODE in controller._probes)  # its first pass
            path = resource_path("nodes", name=NODE)
            await h.api.patch(path, {"spec": {"unschedulable": True}}, patch_type="merge")

            async def tainted() -> bool:
                return "node.kubernetes.io/unschedulable" in await taint_keys(h)

            await wait_until(tainted)
            node = await h.api.get(path)
            [taint] = node["spec"]["taints"]
            assert (taint["key"], taint["effect"]) == ("node.kubernetes.io/unschedulable",
                                                       "NoSchedule")
            assert taint["timeAdded"]
            await h.api.patch(path, {"spec": {"unschedulable": None}}, patch_type="merge")

            async def untainted() -> bool:
                return not await taint_keys(h)

            await wait_until(untainted)


async def test_a_failed_taint_sync_is_retried(tmp_path: Path) -> None:
    """A node's taint sync that fails (a conflict here) is retried by the node queue's worker,
    rate-limited, and the worker goes on: the cordoned node gets its taint without waiting
    for the next monitor pass (an hour away). The worker used to end at the first error."""
    async with running_kubelet(tmp_path) as h:
        controller = NodeLifecycleController(h.api, monitor_period=3600.0)
        async with running(controller):
            await wait_until(lambda: NODE in controller._probes)  # its first pass
            sync_taints, failed = controller.sync_taints, []

            async def failing_once(node: Any, stamp: str) -> None:
                if not failed:
                    failed.append(node)
                    raise StatusError(409, "Conflict", "the object has been modified")
                await sync_taints(node, stamp)

            controller.sync_taints = failing_once  # type: ignore[method-assign]
            path = resource_path("nodes", name=NODE)
            await h.api.patch(path, {"spec": {"unschedulable": True}}, patch_type="merge")

            async def tainted() -> bool:
                return "node.kubernetes.io/unschedulable" in await taint_keys(h)

            await wait_until(tainted)
            assert len(failed) == 1


def _node_events(events: list[dict[str, Any]], source: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in events
            if e["involvedObject"]["kind"] == "Node" and e["source"]["component"] == source]


async def test_node_events_of_the_kubelet_and_the_node_lifecycle_controller(
        tmp_path: Path) -> None:
    """Upstream's: the kubelet's start (`Starting kubelet.`), its new node's pressure
    conditions (`Node NAME status is now: ...`), cordon and uncordon as its status update
    sees them, naming the Node with its name as uid; the controller's `RegisteredNode` with
    the Node's uid. Nothing more while nothing changes."""
    async with running_kubelet(tmp_path) as h:
        agent = h.kubelet.node_agent
        assert agent is not None
        say = f"Node {NODE} status is now: "
        started = [("Starting", "Starting kubelet."),
                   ("NodeHasSufficientMemory", say + "NodeHasSufficientMemory"),
                   ("NodeHasNoDiskPressure", say + "NodeHasNoDiskPressure"),
                   ("NodeHasSufficientPID", say + "NodeHasSufficientPID")]

        async def kubelet_events(expected: list[tuple[str, str]]) -> bool:
            return sorted(_node_events(await h.events(NODE), "kubelet")) == sorted(expected)

        await wait_until(lambda: kubelet_events(started))
        [event] = [e for e in await h.events(NODE) if e["reason"] == "Starting"]
        assert event["involvedObject"]["uid"] == NODE
        assert event["source"]["host"] == NODE
        path = resource_path("nodes", name=NODE)
        await h.api.patch(path, {"spec": {"unschedulable": True}}, patch_type="merge")
        await agent.update_status()
        cordoned = [*started, ("NodeNotSchedulable", say + "NodeNotSchedulable")]
        await wait_until(lambda: kubelet_events(cordoned))
        await agent.update_status()  # unchanged: no event
        await h.api.patch(path, {"spec": {"unschedulable": None}}, patch_type="merge")
        await agent.update_status()
        await agent.update_status()
        await wait_until(lambda: kubelet_events(
            [*cordoned, ("NodeSchedulable", say + "NodeSchedulable")]))

        controller = NodeLifecycleController(h.api, monitor_period=0.2)
        async with running(controller):
            uid = (await h.api.get(path))["metadata"]["uid"]
            registered = await h.wait_event(NODE, lambda e: e["reason"] == "RegisteredNode")
            assert registered["message"] == f"Node {NODE} event: Registered Node {NODE} in " \
                                            "Controller"
            assert registered["involvedObject"]["uid"] == uid
            assert registered["source"]["component"] == "node-controller"
            await asyncio.sleep(0.5)  # more passes: no more events
            assert _node_events(await h.events(NODE), "node-controller") == [
                ("RegisteredNode", registered["message"])]


@contextlib.asynccontextmanager
async def another_ready_node(h: Harness, name: str = "other") -> AsyncIterator[None]:
    """A Node that stays Ready, its Lease renewed every 0.2 s (by the test), so that the
    cluster is not fully disrupted when the kubelet's node stops."""
    now = now_rfc3339()
    await h.api.create(resource_path("nodes"), {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "lastHeartbeatTime": now, "lastTransitionTime": now}]}})
    path = resource_path("leases", "kube-node-lease", group="coordination.k8s.io")
    await h.api.create(path, {"metadata": {"name": name},
                              "spec": {"holderIdentity": name, "renewTime": now_micro()}})

    async def renew() -> None:
        while True:
            await asyncio.sleep(0.2)
            await h.api.patch(f"{path}/{name}", {"spec": {"renewTime": now_micro()}},
                              patch_type="merge")

    async with in_background(renew()):
        yield


def _pod_ready(p: dict[str, Any]) -> str:
    return next((c["status"] for c in p["status"].get("conditions") or []
                 if c["type"] == "Ready"), "")


async def test_the_pods_of_an_unreachable_node_are_not_ready_then_evicted(
        tmp_path: Path) -> None:
    """A node that stops heartbeating: its pods' Ready goes False with upstream's event, so
    the EndpointSlice's endpoint is no longer ready, and the taint eviction controller deletes
    the pod whose toleration of `unreachable` lasts 1 s (with its event and condition), not
    the one that tolerates it forever (as a DaemonSet's pod does), nor the one whose 600 s
    have not passed when the kubelet comes back (its deletion cancelled, with an event)."""
    async with running_kubelet(tmp_path) as h:
        unreachable = {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                       "effect": "NoExecute"}
        h.runtime.pod_cidr = "10.244.0.0/24"  # pod addresses, for the EndpointSlice
        short = pod("short", tolerations=[{**unreachable, "tolerationSeconds": 1}])
        short["metadata"]["labels"] = {"app": "web"}
        await h.create(short)
        await h.create(pod("forever", tolerations=[unreachable]))
        await h.create(pod("long", tolerations=[{**unreachable, "tolerationSeconds": 600}]))
        await h.api.create(resource_path("services", "default"), {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
        for name in ("short", "forever", "long"):
            await h.wait_pod(name, lambda p: _pod_ready(p) == "True")
        pods = Informer(h.api, resource_path("pods"), name="pods")
        nodes = Informer(h.api, resource_path("nodes"), name="nodes")
        lifecycle = NodeLifecycleController(h.api, grace_period=1.5, monitor_period=0.2,
                                            pods=pods, nodes=nodes)


        async def endpoint_ready() -> bool | None:
            slices = await h.api.list(resource_path("endpointslices", "default",
                                                    group="discovery.k8s.io"),
                                      label_selector="kubernetes.io/service-name=web")
            endpoints = [e for s in slices["items"] for e in s.get("endpoints") or []]
            return endpoints[0]["conditions"]["ready"] if endpoints else None

        async def endpoint_not_ready() -> bool:
            return await endpoint_ready() is False

        async with another_ready_node(h), running(lifecycle), \
                running(EndpointSliceController(h.api, pods)), \
                running(TaintEvictionController(h.api, pods, nodes)):
            await wait_until(lambda: endpoint_ready())
            await h.shutdown()
            for name in ("short", "forever"):
                p = await h.wait_pod(name, lambda p: _pod_ready(p) == "False")
                assert p["status"]["phase"] == "Running"
                await h.wait_event(name, lambda e: (e["reason"], e["message"], e["type"]) == (
                    "NodeNotReady", "Node is not ready", "Warning"))
            await wait_until(endpoint_not_ready)
            # A pod bound to the node now is marked too (upstream's processPod).
            late = pod("late")
            del late["spec"]["nodeName"]
            created = await h.create(late)
            await h.api.update(resource_path("pods", "default", "late", subresource="status"),
                               {**created, "status": {"conditions": [
                                   {"type": "Ready", "status": "True"}]}})
            await h.api.create(resource_path("pods", "default", "late", subresource="binding"),
                               {"metadata": {"name": "late"},
                                "target": {"kind": "Node", "name": NODE}})
            await h.wait_pod("late", lambda p: _pod_ready(p) == "False")
            await h.wait_pod("short", lambda p: bool(p["metadata"].get("deletionTimestamp")))
            gone = await h.get("short")
            assert gone is not None  # Terminating: its kubelet is gone, as upstream
            target = next(c for c in gone["status"]["conditions"]
                          if c["type"] == "DisruptionTarget")
            assert (target["status"], target["reason"], target["message"]) == (
                "True", "DeletionByTaintManager",
                "Taint manager: deleting due to NoExecute taint")
            event = await h.wait_event("short", lambda e: e["reason"] == "TaintManagerEviction")
            assert event["message"] == "Marking for deletion Pod default/short"
            assert event["source"]["component"] == "taint-eviction-controller"
            await asyncio.sleep(1.0)
            forever = await h.get("forever")
            assert forever is not None and not forever["metadata"].get("deletionTimestamp")
            # The kubelet back within the 600 s: the taint goes, the deletion is cancelled.
            await h.restart()
            await h.wait_event("long", lambda e: (e["reason"], e["message"]) == (
                "TaintManagerEviction", "Cancelling deletion of Pod default/long"))
            long = await h.wait_pod("long", lambda p: _pod_ready(p) == "True")
            assert not long["metadata"].get("deletionTimestamp")


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

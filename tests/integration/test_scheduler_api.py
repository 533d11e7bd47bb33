"""The scheduler against the in-process apiserver (real loopback HTTP, one process): binding,
the Unschedulable condition and events, retries when nodes or pods change, the assumed-pods
cache, pods it must leave alone, and the feature gates."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, serve

from ephemera.api.featuregates import FeatureGates
from ephemera.client import ApiClient, ClientConfig, resource_path
from ephemera.scheduler import Scheduler
from ephemera.store import open_store

PODS = resource_path("pods", "default")
DECLARES_ES = ["PodLevelResourcesEphemeralStorage"]


def node(name: str, *, es: str = "10Gi", pods: str = "110", ready: str = "True",
         declared: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    allocatable = {"cpu": "4", "memory": "8Gi", "ephemeral-storage": es, "pods": pods}
    status: dict[str, Any] = {"capacity": allocatable, "allocatable": allocatable,
                              "conditions": [{"type": "Ready", "status": ready}]}
    if declared is not None:
        status["declaredFeatures"] = declared
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": spec, "status": status}


def pod(name: str, es: str | None = None, *, pod_es: str | None = None,
        **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox:1.36"}
    if es is not None:
        container["resources"] = {"requests": {"ephemeral-storage": es}}
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": {"containers": [container], **spec}}
    if pod_es is not None:
        body["spec"]["resources"] = {"requests": {"ephemeral-storage": pod_es}}
    return body


@pytest.fixture
async def client(api: Api) -> AsyncIterator[ApiClient]:
    url = str(api.client.server.make_url("")).rstrip("/")
    async with ApiClient(ClientConfig(server=url), user_agent="scheduler-test") as c:
        yield c


@contextlib.asynccontextmanager
async def scheduler_running(client: ApiClient, gates: Any = None) -> AsyncIterator[Scheduler]:
    scheduler = Scheduler(client, gates)
    task = asyncio.create_task(scheduler.run())
    try:
        yield scheduler
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wait_for_pod(client: ApiClient, name: str, check: Callable[[dict[str, Any]], bool],
                       timeout: float = 15) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        current = await client.get(resource_path("pods", "default", name))
        if check(current):
            return current
        assert asyncio.get_running_loop().time() < deadline, current
        await asyncio.sleep(0.05)


def bound(p: dict[str, Any]) -> bool:
    return bool(p["spec"].get("nodeName"))


def scheduled_condition(p: dict[str, Any]) -> dict[str, Any]:
    """The PodScheduled condition ({} when there is none)."""
    return next((dict(c) for c in p.get("status", {}).get("conditions") or []
                 if c["type"] == "PodScheduled"), {})


def unschedulable(p: dict[str, Any]) -> bool:
    return scheduled_condition(p).get("reason") == "Unschedulable"


async def events_of(client: ApiClient, name: str, *,
                    at_least: int = 0) -> list[tuple[str, str, str]]:
    """The events about pod `name`, once there are `at_least` of them (an event is written
    just after the binding or the status it reports)."""
    deadline = asyncio.get_running_loop().time() + 15
    while True:
        listed = await client.list(resource_path("events", "default"),
                                   field_selector=f"involvedObject.name={name}")
        if len(listed["items"]) >= at_least:
            return [(e["type"], e["reason"], e["message"]) for e in listed["items"]]
        assert asyncio.get_running_loop().time() < deadline, listed
        await asyncio.sleep(0.05)


async def test_binds_pods_and_records_scheduled_events(client: ApiClient) -> None:
    for name in ("n1", "n2"):
        await client.create(resource_path("nodes"), node(name))
    async with scheduler_running(client):
        for name in ("p1", "p2"):
            await client.create(PODS, pod(name, "1Gi"))
        p1 = await wait_for_pod(client, "p1", bound)
        p2 = await wait_for_pod(client, "p2", bound)
    # least allocated spreads them
    assert {p1["spec"]["nodeName"], p2["spec"]["nodeName"]} == {"n1", "n2"}
    assert scheduled_condition(p1)["status"] == "True"
    assert await events_of(client, "p1", at_least=1) == [
        ("Normal", "Scheduled", f"Successfully assigned default/p1 to {p1['spec']['nodeName']}")]
    listed = await client.list(resource_path("events", "default"),
                               field_selector="involvedObject.name=p1")
    event = listed["items"][0]
    assert event["source"]["component"] == "default-scheduler"
    assert event["involvedObject"]["kind"] == "Pod"
    assert event["involvedObject"]["uid"] == p1["metadata"]["uid"]


async def test_unschedulable_condition_event_and_retry_when_a_node_comes(
        client: ApiClient) -> None:
    for name in ("n1", "n2", "n3"):
        await client.create(resource_path("nodes"), node(name, es="1Gi"))
    message = ("0/3 nodes are available: 3 Insufficient ephemeral-storage. preemption: 0/3 "
               "nodes are available: 3 No preemption victims found for incoming pod.")
    async with scheduler_running(client):
        await client.create(PODS, pod("big", "2Gi"))
        pending = await wait_for_pod(client, "big", unschedulable)
        condition = scheduled_condition(pending)
        assert (condition["status"], condition["message"]) == ("False", message)
        assert pending["status"]["phase"] == "Pending" and not bound(pending)
        assert await events_of(client, "big", at_least=1) == [
            ("Warning", "FailedScheduling", message)]

        # a node change that does not help: tried again, the same event counted again, the
        # pod's status left alone
        await client.patch(resource_path("nodes", name="n1"),
                           {"metadata": {"labels": {"touched": "yes"}}}, patch_type="merge")
        event_path = resource_path("events", "default")

        async def counted_twice() -> bool:
            listed = await client.list(event_path, field_selector="involvedObject.name=big")
            return [e.get("count") for e in listed["items"]] == [2]

        deadline = asyncio.get_running_loop().time() + 15
        while not await counted_twice():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        again = await client.get(resource_path("pods", "default", "big"))
        assert again["metadata"]["resourceVersion"] == pending["metadata"]["resourceVersion"]

        await client.create(resource_path("nodes"), node("n4", es="5Gi"))
        placed = await wait_for_pod(client, "big", bound)
    assert placed["spec"]["nodeName"] == "n4"
    assert scheduled_condition(placed)["status"] == "True"


async def test_retry_when_a_pod_leaves_the_node(client: ApiClient) -> None:
    await client.create(resource_path("nodes"), node("only", es="3Gi"))
    async with scheduler_running(client):
        await client.create(PODS, pod("first", "2Gi"))
        await wait_for_pod(client, "first", bound)
        await client.create(PODS, pod("second", "2Gi"))
        await wait_for_pod(client, "second", unschedulable)
        # an unscheduled pod's delete is immediate; this one is bound: delete it with grace 0
        await client.delete(resource_path("pods", "default", "first"), gracePeriodSeconds=0)
        placed = await wait_for_pod(client, "second", bound)
    assert placed["spec"]["nodeName"] == "only"


async def test_two_pods_do_not_take_one_slot(client: ApiClient) -> None:
    await client.create(resource_path("nodes"), node("n1", es="3Gi", pods="10"))
    for name in ("a", "b", "c"):  # all pending before the scheduler starts
        await client.create(PODS, pod(name, "2Gi"))
    async with scheduler_running(client):
        results = [await wait_for_pod(client, n, lambda p: bound(p) or unschedulable(p))
                   for n in ("a", "b", "c")]
    assert sum(bound(p) for p in results) == 1
    losers = [p for p in results if not bound(p)]
    for p in losers:
        assert scheduled_condition(p)["message"].startswith(
            "0/1 nodes are available: 1 Insufficient ephemeral-storage.")


async def test_taints_not_ready_nodes_node_selector_and_pod_count(client: ApiClient) -> None:
    await client.create(resource_path("nodes"), node(
        "tainted", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]))
    await client.create(resource_path("nodes"), node("down", ready="False"))
    await client.create(resource_path("nodes"), node("full", pods="0"))
    async with scheduler_running(client):
        await client.create(PODS, pod("p"))
        p = await wait_for_pod(client, "p", unschedulable)
        assert scheduled_condition(p)["message"] == (
            "0/3 nodes are available: 1 Too many pods, 2 node(s) had untolerated taint(s). "
            "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming "
            "pod, 2 Preemption is not helpful for scheduling.")
        await client.create(PODS, pod("tolerant", tolerations=[
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]))
        assert (await wait_for_pod(client, "tolerant", bound))["spec"]["nodeName"] == "tainted"
        await client.create(PODS, pod("picky", nodeSelector={"disk": "ssd"}))
        picky = await wait_for_pod(client, "picky", unschedulable)
        # the taints are checked before the selector
        assert scheduled_condition(picky)["message"] == (
            "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
            "2 node(s) had untolerated taint(s). preemption: 0/3 nodes are available: "
            "3 Preemption is not helpful for scheduling.")
        # the node turns Ready: the first pod lands there
        await client.patch(resource_path("nodes", name="down", subresource="status"),
                           {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                           patch_type="strategic")
        assert (await wait_for_pod(client, "p", bound))["spec"]["nodeName"] == "down"


async def test_pod_level_ephemeral_storage_needs_a_declaring_node(client: ApiClient) -> None:
    await client.create(resource_path("nodes"), node("old", es="1000Gi", declared=[]))
    await client.create(resource_path("nodes"), node("new", es="100Gi", declared=DECLARES_ES))
    await client.create(resource_path("nodes"), node("small", es="1Gi", declared=DECLARES_ES))
    async with scheduler_running(client):
        await client.create(PODS, pod("plr", "1Gi", pod_es="4Gi"))
        placed = await wait_for_pod(client, "plr", bound)
        assert placed["spec"]["nodeName"] == "new"
        await client.create(PODS, pod("huge", "1Gi", pod_es="200Gi"))
        huge = await wait_for_pod(client, "huge", unschedulable)
    assert scheduled_condition(huge)["message"] == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's required features, "
        "2 Insufficient ephemeral-storage. preemption: 0/3 nodes are available: "
        "1 Preemption is not helpful for scheduling, 2 No preemption victims found for "
        "incoming pod.")


async def test_with_node_declared_features_off_any_node_will_do(tmp_path: Path) -> None:
    gates = FeatureGates({"NodeDeclaredFeatures": False})
    store = open_store("sqlite", data_dir=tmp_path / "data")
    try:
        async for served in serve(store, feature_gates=gates):
            url = str(served.client.server.make_url("")).rstrip("/")
            async with ApiClient(ClientConfig(server=url)) as client:
                await client.create(resource_path("nodes"), node("old", declared=[]))
                async with scheduler_running(client, gates):
                    await client.create(PODS, pod("plr", pod_es="4Gi"))
                    placed = await wait_for_pod(client, "plr", bound)
                assert placed["spec"]["nodeName"] == "old"
    finally:
        await store.close()


async def test_pods_it_must_leave_alone(client: ApiClient) -> None:
    await client.create(resource_path("nodes"), node("n1"))
    async with scheduler_running(client) as scheduler:
        await client.create(PODS, pod("other", schedulerName="my-scheduler"))
        await client.create(PODS, pod("gated", schedulingGates=[{"name": "wait"}]))
        await client.create(PODS, pod("pinned", nodeName="n1"))
        await client.create(PODS, pod("normal"))
        await wait_for_pod(client, "normal", bound)
        await asyncio.sleep(0.3)  # give it every chance to touch the others
        assert scheduler.queue.active == []
    for name in ("other", "gated"):
        left = await client.get(resource_path("pods", "default", name))
        assert not bound(left)
        assert not unschedulable(left)
        assert await events_of(client, name) == []
    assert await events_of(client, "pinned") == []

"""The scheduler's binding cycles against a fake API that holds each binding until the test
answers it: the scheduling cycle goes on while bindings are under way (each next pod sees the
assumed ones), the cap on bindings in flight, a failed binding forgets the assumed pod and
requeues it with back-off, and a pod deleted (or deleted and created again) while its
binding is under way."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable
from ephemera.client.api import WatchEvent
from ephemera.scheduler import Scheduler
from ephemera.scheduler.queue import SchedulingQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeApi:
    """Holds every `POST pods/NAME/binding` until `answer(...)`; records events."""

    def __init__(self) -> None:
        self.bindings: dict[str, asyncio.Future[None]] = {}  # by the binding's pod uid
        self.names: dict[str, str] = {}  # uid -> pod name
        self.bound: dict[str, str] = {}  # pod name -> node, for bindings answered with success
        self.events: list[tuple[str, str, str]] = []
        # set: every event POST waits for it (an apiserver slow to write Events)
        self.events_held: asyncio.Event | None = None

    async def create(self, path: str, body: Any, **params: Any) -> dict[str, Any]:
        if path.endswith("/binding"):
            uid, name = body["metadata"]["uid"], body["metadata"]["name"]
            answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.bindings[uid] = answer
            self.names[uid] = name
            await answer
            self.bound[name] = body["target"]["name"]
            return {"kind": "Status", "status": "Success"}
        if "/events" in path:
            if self.events_held is not None:
                await self.events_held.wait()
            self.events.append((body["involvedObject"]["name"], body["reason"], body["message"]))
            return dict(body)
        raise AssertionError(f"unexpected create {path}")

    async def patch(self, path: str, body: Any, **params: Any) -> dict[str, Any]:
        return {}

    @property
    def pending(self) -> list[str]:
        return sorted(self.names[uid] for uid, answer in self.bindings.items()
                      if not answer.done())

    def answer(self, name: str, error: BaseException | None = None, *, uid: str = "") -> None:
        answer = self.bindings[uid or f"uid-{name}"]
        if error is None:
            answer.set_result(None)
        else:
            answer.set_exception(error)


def node(name: str, pods: str = "110") -> dict[str, Any]:
    allocatable = {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "10Gi", "pods": pods}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": "1"}, "spec": {},
            "status": {"capacity": allocatable, "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, uid: str = "", rv: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                         "resourceVersion": rv},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            "status": {"phase": "Pending"}}


async def settle() -> None:
    """Let every task that can run, run (a bounded number of loop turns, no clock)."""
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


def make_scheduler(api: FakeApi, nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
                   **kwargs: Any) -> Scheduler:
    scheduler = Scheduler(cast(ApiClient, api), queue=SchedulingQueue(clock=Clock()), **kwargs)
    scheduler.nodes.replace(nodes, "1")
    scheduler.pods.replace(pods, "1")
    return scheduler


def scheduled_on(api: FakeApi) -> dict[str, str]:
    return {name: msg.rsplit(" to ", 1)[1] for name, reason, msg in api.events
            if reason == "Scheduled"}


async def test_the_next_pods_are_scheduled_while_bindings_are_under_way(api: FakeApi) -> None:
    # one slot a node: each next pod must see the assumed ones to go elsewhere
    s = make_scheduler(api, [node("n1", pods="1"), node("n2", pods="1"), node("n3", pods="1")],
                       [pod("a"), pod("b"), pod("c")])
    for _ in range(3):
        await s.schedule_one()
    await settle()
    assert api.pending == ["a", "b", "c"]
    assert s.bindings_in_flight == 3
    assert s.cache.assumed_count == 3
    assert api.events == []  # the Scheduled event comes after the binding
    for name in ("b", "a", "c"):  # answered in any order
        api.answer(name)
    await s.wait_for_bindings()
    assert sorted(api.bound.values()) == ["n1", "n2", "n3"]
    assert scheduled_on(api) == api.bound
    assert s.bindings_in_flight == 0
    assert "default/a" not in s.queue and "default/c" not in s.queue


async def test_at_most_the_cap_of_bindings_are_under_way(api: FakeApi) -> None:
    s = make_scheduler(api, [node("n1")], [pod("a"), pod("b"), pod("c")],
                       max_bindings_in_flight=2)
    await s.schedule_one()
    await s.schedule_one()
    third = asyncio.create_task(s.schedule_one())
    await settle()
    assert not third.done()  # waits for a slot before it takes the next pod
    assert api.pending == ["a", "b"]
    assert s.queue.active == ["default/c"]
    api.answer("a")
    await settle()
    assert third.done()
    assert api.pending == ["b", "c"]
    api.answer("b")
    api.answer("c")
    await s.wait_for_bindings()
    assert set(api.bound) == {"a", "b", "c"}


async def test_a_slot_is_free_once_the_binding_is_answered_not_its_event(
        api: FakeApi) -> None:
    api.events_held = asyncio.Event()
    s = make_scheduler(api, [node("n1")], [pod("a"), pod("b")], max_bindings_in_flight=1)
    await s.schedule_one()
    await settle()
    api.answer("a")
    await settle()
    assert api.bound == {"a": "n1"} and api.events == []  # a's event still being written
    second = asyncio.create_task(s.schedule_one())
    await settle()
    assert second.done()  # the slot was given back with a's binding answer
    assert api.pending == ["b"]
    assert s.bindings_in_flight == 2  # a's cycle ends when its event is written
    api.answer("b")
    api.events_held.set()
    await s.wait_for_bindings()
    assert scheduled_on(api) == {"a": "n1", "b": "n1"}


@pytest.mark.parametrize("error", [
    StatusError(500, "InternalError", "etcd is slow"),
    ApiUnavailable("connection reset"),
])
async def test_a_failed_binding_forgets_the_pod_and_backs_it_off(
        api: FakeApi, error: Exception) -> None:
    s = make_scheduler(api, [node("n1", pods="1")], [pod("a"), pod("b")])
    await s.schedule_one()
    await settle()
    assert api.pending == ["a"]
    assert s.cache.node("n1").pod_count == 1  # type: ignore[union-attr]
    api.answer("a", error)
    await s.wait_for_bindings()
    assert s.cache.assumed_count == 0
    assert s.cache.node("n1").pod_count == 0  # type: ignore[union-attr]
    assert s.queue.backing_off == ["default/a"]
    assert s.queue.attempts("default/a") == 1
    rejected = [e for e in api.events if e[1] == "FailedScheduling"]
    if isinstance(error, StatusError):
        assert rejected == [("a", "FailedScheduling", "Binding rejected: etcd is slow")]
    else:
        assert rejected == []
    # the freed slot goes to the next pod
    await s.schedule_one()
    await settle()
    assert api.pending == ["b"]


async def test_a_pod_deleted_while_its_binding_is_under_way(api: FakeApi) -> None:
    s = make_scheduler(api, [node("n1", pods="1")], [pod("a"), pod("b")])
    await s.schedule_one()
    await settle()
    s.pods.apply(WatchEvent("DELETED", pod("a")))
    assert s.cache.node("n1").pod_count == 0  # type: ignore[union-attr]
    assert "default/a" not in s.queue
    await s.schedule_one()  # b takes the slot a left at once
    await settle()
    assert api.pending == ["a", "b"]
    api.answer("a", StatusError(404, "NotFound", 'pods "a" not found'))
    api.answer("b")
    await s.wait_for_bindings()
    assert "default/a" not in s.queue
    assert api.bound == {"b": "n1"}
    assert [e[1] for e in api.events] == ["Scheduled"]  # b's; nothing for a


async def test_a_pod_created_again_while_the_old_ones_binding_fails(api: FakeApi) -> None:
    s = make_scheduler(api, [node("n1")], [pod("a", uid="old")])
    await s.schedule_one()
    await settle()
    s.pods.apply(WatchEvent("DELETED", pod("a", uid="old")))
    s.pods.apply(WatchEvent("ADDED", pod("a", uid="new", rv="3")))
    await s.schedule_one()  # the new pod of the same name, bound while the old one is
    await settle()
    assert sorted(api.bindings) == ["new", "old"] and api.pending == ["a", "a"]
    api.answer("a", StatusError(500, "InternalError", "etcd is slow"), uid="old")
    await settle()
    # the old pod's failure leaves the new pod's attempt alone: still in flight, assumed
    assert s.queue.backing_off == [] and "default/a" in s.queue
    assert s.cache.assumed_count == 1
    api.answer("a", uid="new")
    await s.wait_for_bindings()
    assert "default/a" not in s.queue
    assert api.bound == {"a": "n1"}
    assert [e[1] for e in api.events] == ["FailedScheduling", "Scheduled"]


async def test_each_pod_searches_the_nodes_from_where_the_last_search_stopped(
        api: FakeApi) -> None:
    """250 nodes: a search stops at 120 feasible ones (upstream's numFeasibleNodesToFind),
    and the next pod's search starts after the nodes the last one tried, round the list."""
    nodes = [node(f"n{i:03}", pods="1") for i in range(250)]
    s = make_scheduler(api, nodes, [pod("a"), pod("b"), pod("c")])
    for name in ("a", "b", "c"):
        await s.schedule_one()
        await settle()
        api.answer(name)
    await s.wait_for_bindings()
    index = {name: int(on[1:]) for name, on in api.bound.items()}
    assert index["a"] in range(120)
    assert index["b"] in range(120, 240)
    assert index["c"] in {*range(240, 250), *range(111)} - {index["a"]}


async def test_only_a_changed_request_of_a_bound_pod_retries_the_unschedulable(
        api: FakeApi) -> None:
    """A status write of a bound pod leaves the unschedulable pods where they are; a resize
    (its requests changed) may have freed room, and moves them to be tried again."""
    s = make_scheduler(api, [node("n1")], [pod("waiting")])
    key = await s.queue.pop()
    s.queue.unschedulable(key)
    bound = pod("big", rv="2")
    bound["spec"] = {"nodeName": "n1", "containers": [
        {"name": "c", "image": "busybox:1.36", "resources": {"requests": {"cpu": "1"}}}]}
    s._pod_added(bound)
    running = {**bound, "status": {"phase": "Running"}}
    s._pod_updated(bound, running)
    assert s.queue.unschedulable_pods == [key]
    resized = {**running, "spec": {**running["spec"], "containers": [
        {"name": "c", "image": "busybox:1.36", "resources": {"requests": {"cpu": "500m"}}}]}}
    s._pod_updated(running, resized)
    assert s.queue.unschedulable_pods == []

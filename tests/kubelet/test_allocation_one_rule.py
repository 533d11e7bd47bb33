"""The kubelet's one fit rule and the allocation races (KEP-6395 / KEP-5972):

- a new pod's admission and a change's check count the same pods
  (`AllocationManager.others`): a pod terminal in its worker's view leaves its room to both,
  and a change still being checkpointed holds its room against a new pod;
- a pod forgotten (deleted) while its change is written never comes back as allocated,
  and such a change posts no event and counts no metric;
- a terminating pod's pending change is dropped; the manager's background work is logged
  when it fails and `close()` waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from kubelet_harness import Harness, pod, running_kubelet, running_worker, wait_until

from ephemera.client import resource_path
from ephemera.kubelet import node as node_module
from ephemera.kubelet.allocation import AllocationCheckpoint, AllocationManager
from ephemera.kubelet.podadmission import admit
from ephemera.kubelet.volumes.mounts import unmount_all_under

Obj = dict[str, Any]
MiB = 1 << 20
ALLOCATABLE = {"cpu": "4", "memory": "100Mi", "ephemeral-storage": "1Gi", "pods": "10"}


class BlockingStore:
    """Wraps `AllocationCheckpoint.store_async`: holds each write until `release` is set."""

    def __init__(self, checkpoint: AllocationCheckpoint) -> None:
        self.inner = checkpoint.store_async
        self.release = asyncio.Event()
        self.release.set()
        self.calls = 0

    async def __call__(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        self.calls += 1
        await asyncio.wait_for(self.release.wait(), 20)
        await self.inner(pods)


def _pod(uid: str, *, memory_volume: str | None = None, request: str | None = None) -> Obj:
    volumes: list[Obj] = []
    if memory_volume is not None:
        volumes.append({"name": "ram", "emptyDir": {"medium": "Memory",
                                                    "sizeLimit": memory_volume}})
    container: Obj = {"name": "c", "image": "busybox"}
    if request is not None:
        container["resources"] = {"requests": {"memory": request}}
    return {"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
            "spec": {"containers": [container], "volumes": volumes},
            "status": {"phase": "Running"}}


class Recorder:
    """The manager's callbacks, recorded."""

    def __init__(self, manager: AllocationManager) -> None:
        self.calls: list[tuple[str, Any]] = []
        manager.on_outcome = lambda result: self.calls.append(("outcome", result))
        manager.on_allocated = lambda uid: self.calls.append(("allocated", uid))
        manager.on_change_allocated = lambda previous, current: self.calls.append(
            ("change", current["metadata"]["uid"]))
        manager.on_failed = lambda p, message: self.calls.append(("failed", message))


def _manager(tmp_path: Path) -> tuple[AllocationManager, BlockingStore]:
    checkpoint = AllocationCheckpoint(tmp_path)
    store = BlockingStore(checkpoint)
    checkpoint.store_async = store  # type: ignore[method-assign]
    manager = AllocationManager(checkpoint, node_allocatable=lambda: ALLOCATABLE)
    return manager, store


# --- the manager -----------------------------------------------------------------------------


async def test_a_terminal_pod_leaves_its_room_to_a_change_and_a_new_pod(
        tmp_path: Path) -> None:
    manager, _ = _manager(tmp_path)
    terminal: set[str] = set()
    manager.is_inactive = terminal.__contains__
    await manager.allocate_new(_pod("done", request="60Mi"))
    await manager.allocate_new(_pod("u1"))
    change = _pod("u1", memory_volume="50Mi")
    newcomer = _pod("new", request="50Mi")
    expected = ("Node didn't have enough resource: memory, requested: 52428800, used: "
                "62914560, capacity: 104857600")
    assert admit(newcomer, manager.others("new"), ALLOCATABLE, {}).message == expected
    assert (await manager.try_allocate(change)).message == expected
    terminal.add("done")  # its worker found it Failed: neither counts it any more
    assert admit(newcomer, manager.others("new"), ALLOCATABLE, {}).admit
    assert (await manager.try_allocate(change)).allocated


async def test_a_change_being_checkpointed_holds_its_room_against_a_new_pod(
        tmp_path: Path) -> None:
    manager, store = _manager(tmp_path)
    await manager.allocate_new(_pod("u1"))
    store.release.clear()
    growing = asyncio.ensure_future(manager.try_allocate(_pod("u1", memory_volume="60Mi")))
    try:
        await wait_until(lambda: store.calls == 2)  # the change's write, held
        assert manager.get("u1")["spec"]["volumes"] == []  # type: ignore[index]
        result = admit(_pod("new", request="60Mi"), manager.others("new"), ALLOCATABLE, {})
        assert (result.admit, result.message) == (
            False, "Node didn't have enough resource: memory, requested: 62914560, used: "
                   "62914560, capacity: 104857600")
    finally:
        store.release.set()
    assert (await growing).allocated


async def test_a_change_staged_after_a_forget_is_refused_and_the_forget_is_kept(
        tmp_path: Path) -> None:
    manager, store = _manager(tmp_path)
    await manager.allocate_new(_pod("u1"))
    recorder = Recorder(manager)
    store.release.clear()
    other = asyncio.ensure_future(manager.allocate_new(_pod("other")))  # holds the writes
    try:
        await wait_until(lambda: store.calls == 2)
        manager.forget("u1")  # its write waits behind the other one
        result = await manager.try_allocate(_pod("u1", memory_volume="1Mi"))
        assert (result.allocated, result.message) == (False, "pod is gone")
    finally:
        store.release.set()
    await other
    await manager.close()
    assert recorder.calls == []
    assert sorted(manager.allocated) == ["other"]
    assert sorted(AllocationCheckpoint(tmp_path).load()) == ["other"]


async def test_a_change_replaced_by_a_forget_before_its_write_posts_nothing(
        tmp_path: Path) -> None:
    manager, store = _manager(tmp_path)
    await manager.allocate_new(_pod("u1"))
    recorder = Recorder(manager)
    store.release.clear()
    other = asyncio.ensure_future(manager.allocate_new(_pod("other")))  # holds the writes
    try:
        await wait_until(lambda: store.calls == 2)
        changing = asyncio.ensure_future(manager.try_allocate(_pod("u1", memory_volume="1Mi")))
        await wait_until(lambda: manager._staged.get("u1") is not None)  # waits to write
        manager.forget("u1")
    finally:
        store.release.set()
    result = await changing
    await other
    await manager.close()
    assert (result.allocated, result.message) == (False, "pod is gone")
    assert recorder.calls == []  # no SuccessfulAllocation, no metric
    assert sorted(manager.allocated) == ["other"]
    assert sorted(AllocationCheckpoint(tmp_path).load()) == ["other"]


async def test_a_terminating_pod_drops_its_pending_change(tmp_path: Path) -> None:
    manager, _ = _manager(tmp_path)
    await manager.allocate_new(_pod("u1"))
    change = _pod("u1", memory_volume="1Gi")  # does not fit: stays pending
    manager.request(change)
    assert (await manager.try_allocate(change)).message.startswith(
        "Node didn't have enough resource: memory")
    assert "u1" in manager.desired and "u1" in manager.pending
    terminating = {**change, "metadata": {**change["metadata"],
                                          "deletionTimestamp": "2025-01-01T00:00:00Z"}}
    manager.request(terminating)
    assert manager.desired == {} and manager.pending == {}
    assert manager.get("u1") is not None  # allocated until the pod is forgotten


async def test_a_failing_callback_is_logged_and_close_waits_for_the_forget(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager, store = _manager(tmp_path)
    await manager.allocate_new(_pod("u1"))

    async def broken(uid: str) -> None:
        raise RuntimeError(f"cannot hand {uid} over")

    manager.on_allocated = broken
    with caplog.at_level(logging.ERROR, logger="ephemera.kubelet.allocation.manager"):
        assert (await manager.try_allocate(_pod("u1", memory_volume="1Mi"))).allocated
        await manager.close()
    assert any(r.exc_info and "cannot hand u1 over" in str(r.exc_info[1])
               for r in caplog.records)
    store.release.clear()
    manager.forget("u1")
    closing = asyncio.ensure_future(manager.close())
    await wait_until(lambda: store.calls == 3)
    assert not closing.done()  # the forget's write is still under way
    store.release.set()
    await closing
    assert AllocationCheckpoint(tmp_path).load() == {}


# --- on the fake runtime -----------------------------------------------------------------------


def _small_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Machines of 600Mi: 500Mi allocatable (the 100Mi hard eviction threshold less)."""
    real = node_module.machine_capacity

    def small(root_dir: Path, max_pods: int = 110) -> dict[str, str]:
        return {**real(root_dir, max_pods), "memory": "614400Ki"}

    monkeypatch.setattr(node_module, "machine_capacity", small)


def _with_request(name: str, memory: str, **spec: Any) -> Obj:
    body = pod(name, argv=["sleep", "3600"], **spec)
    body["spec"]["containers"][0]["resources"] = {"requests": {"memory": memory}}
    return body


async def _add_memory_volume(h: Harness, size: str) -> None:
    path = resource_path("pods", "default", "w") + "/dynamic"
    current = await h.api.get(path)
    current["spec"]["volumes"].append({"name": "ram", "emptyDir": {"medium": "Memory",
                                                                   "sizeLimit": size}})
    current["spec"]["containers"][0]["volumeMounts"].append({"name": "ram",
                                                             "mountPath": "/ram"})
    await h.api.update(path, current)


def _phase(p: Obj) -> str:
    return str((p.get("status") or {}).get("phase"))


def _volume_mounted(p: Obj, name: str) -> bool:
    return any(v["name"] == name and v["hostPhase"] == "HostMounted"
               for v in p["status"].get("volumeStatuses") or [])


async def test_a_failed_pod_leaves_its_room_on_the_kubelet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _small_node(monkeypatch)
    try:
        async with running_kubelet(tmp_path) as h:
            await wait_until(lambda: h.kubelet.node_allocatable.get("memory") == "500Mi")
            done = _with_request("done", "400Mi", restartPolicy="Never")
            done["spec"]["containers"][0]["command"] = ["exit", "1"]
            await h.create(done)
            failed = await h.wait_pod("done", lambda p: _phase(p) == "Failed")
            assert h.kubelet.allocation.get(failed["metadata"]["uid"]) is not None
            await running_worker(h)
            # 300Mi more for w: only fits once the Failed pod's 400Mi are not counted
            await _add_memory_volume(h, "300Mi")
            await h.wait_pod("w", lambda p: _volume_mounted(p, "ram"))
            # a new pod is admitted by the same count: 150Mi next to w's 300Mi
            await h.create(_with_request("new", "150Mi"))
            await h.wait_pod("new", lambda p: _phase(p) == "Running")
            await h.create(_with_request("late", "100Mi"))
            late = await h.wait_pod("late", lambda p: _phase(p) == "Failed")
            assert late["status"]["message"] == (
                "Pod was rejected: Node didn't have enough resource: memory, requested: "
                "104857600, used: 471859200, capacity: 524288000")
    finally:
        unmount_all_under(tmp_path)


async def test_a_change_being_written_holds_its_room_on_the_kubelet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _small_node(monkeypatch)
    try:
        async with running_kubelet(tmp_path) as h:
            await wait_until(lambda: h.kubelet.node_allocatable.get("memory") == "500Mi")
            await running_worker(h)
            store = BlockingStore(h.kubelet.allocation.checkpoint)
            h.kubelet.allocation.checkpoint.store_async = store  # type: ignore[method-assign]
            store.release.clear()
            try:
                await _add_memory_volume(h, "300Mi")
                await wait_until(lambda: store.calls == 1)  # staged, being written
                await h.create(_with_request("new", "300Mi"))
                rejected = await h.wait_pod("new", lambda p: _phase(p) == "Failed")
            finally:
                store.release.set()
            assert rejected["status"]["reason"] == "OutOfmemory"
            assert rejected["status"]["message"] == (
                "Pod was rejected: Node didn't have enough resource: memory, requested: "
                "314572800, used: 314572800, capacity: 524288000")
            await h.wait_pod("w", lambda p: _volume_mounted(p, "ram"))
    finally:
        unmount_all_under(tmp_path)


async def test_the_needs_memo_counts_each_allocated_view_as_it_is_now(tmp_path: Path) -> None:
    """`AllocationManager.needs` (what admission sums next to a new pod) answers as the rule
    computed afresh does, and an allocated change (a new view of the pod) is counted by its
    new needs, not the memo of the old view."""
    manager, _ = _manager(tmp_path)
    await manager.allocate_new(_pod("u1", request="30Mi"))
    await manager.allocate_new(_pod("u2", request="10Mi"))
    newcomer = _pod("new", request="50Mi")

    def both() -> tuple[Any, Any]:
        memo = admit(newcomer, manager.others("new"), ALLOCATABLE, {}, needs=manager.needs)
        fresh = admit(newcomer, manager.others("new"), ALLOCATABLE, {})
        return (memo.admit, memo.message), (fresh.admit, fresh.message)

    memo, fresh = both()
    assert memo == fresh == (True, "")
    assert (await manager.try_allocate(_pod("u1", request="30Mi", memory_volume="20Mi"))
            ).allocated
    memo, fresh = both()
    assert memo == fresh == (
        False, "Node didn't have enough resource: memory, requested: 52428800, used: "
               "62914560, capacity: 104857600")

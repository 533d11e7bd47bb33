"""The kubelet's allocation stage (KEP-6395 "Two-Stage Kubelet Lifecycle", KEP-5972): the
checkpoint (round trip, atomic file, corruption detected), all-or-nothing admission of a pod
change with pending retries, and, on the fake runtime, `/dynamic` changes actuated by
restarting only the target container, `/allocated`, `volumeStatuses` and the `Unallocated`
signals of a change that cannot be allocated."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubelet_harness import (
    Harness,
    container_status,
    running_kubelet,
    running_worker,
    wait_until,
)

from ephemera.client import resource_path
from ephemera.kubelet.allocation import (
    UNALLOCATED_MESSAGE,
    AllocationCheckpoint,
    AllocationManager,
    CheckpointCorruptedError,
    slotwriter,
)
from ephemera.kubelet.allocation.checkpoint import SlotWriterProcess, WriterUnavailable

Obj = dict[str, Any]


def _pod(uid: str, *, volumes: list[Obj] | None = None, memory: str | None = None,
         images: tuple[str, ...] = ("busybox",)) -> Obj:
    containers: list[Obj] = []
    for i, image in enumerate(images):
        c: Obj = {"name": f"c{i}", "image": image}
        if memory is not None:
            c["resources"] = {"requests": {"memory": memory}}
        containers.append(c)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
            "spec": {"containers": containers, "volumes": volumes or []},
            "status": {"phase": "Running"}}


# --- checkpoint ------------------------------------------------------------------------------


def test_checkpoint_round_trip_is_deterministic(tmp_path: Path) -> None:
    cp = AllocationCheckpoint(tmp_path)
    pods = {"b": _pod("b"), "a": _pod("a", memory="1Mi")}
    cp.store(pods)
    assert cp.load() == pods
    assert cp.newest() == cp.path
    first = json.loads(cp.path.read_bytes())
    cp.store({"a": pods["a"], "b": pods["b"]})
    assert cp.newest() == cp.slots[1]
    again = json.loads(cp.slots[1].read_bytes())
    # sorted by UID: the same list, only the sequence moved on
    assert json.loads(again["data"]) == {**json.loads(first["data"]), "sequence": 2}
    assert sorted(p.name for p in cp.dir.iterdir()) == [
        "allocated_pods_state", "allocated_pods_state.alt"]  # nothing else written
    assert AllocationCheckpoint(tmp_path).load() == pods
    assert AllocationCheckpoint(tmp_path / "none").load() == {}


def test_a_checkpoint_write_overwrites_the_older_slot_in_place(tmp_path: Path) -> None:
    """A write is open, fstat (the slot's size, padded to), pwrite, fdatasync, close of the
    slot that does not hold the last write: no rename, no new file once both slots exist,
    and a smaller checkpoint is padded to the slot's size (its metadata unchanged)."""
    cp = AllocationCheckpoint(tmp_path)
    big = {uid: _pod(uid) for uid in "abcdefgh"}
    cp.store(big)
    cp.store(big)
    sizes = [path.stat().st_size for path in cp.slots]
    inodes = [path.stat().st_ino for path in cp.slots]
    calls: list[str] = []
    real = {name: getattr(os, name) for name in ("open", "write", "pwrite", "fsync",
                                                 "fdatasync", "close", "replace", "rename",
                                                 "mkdir", "stat", "lstat", "fstat")}

    def counted(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real[name](*args, **kwargs)
        return call

    small = {"a": _pod("a")}
    with pytest.MonkeyPatch.context() as patch:
        for name in real:
            patch.setattr(os, name, counted(name))
        cp.store(small)
    assert calls == ["open", "fstat", "pwrite", "fdatasync", "close"]
    assert cp.newest() == cp.slots[0]
    assert [path.stat().st_size for path in cp.slots] == sizes
    assert [path.stat().st_ino for path in cp.slots] == inodes
    assert AllocationCheckpoint(tmp_path).load() == small


def test_a_torn_newest_slot_falls_back_to_the_older_write(tmp_path: Path) -> None:
    """A power loss mid-write can tear only the slot being written: the other one holds the
    write before, which is what was actuated then, and the next write goes to the torn
    slot."""
    cp = AllocationCheckpoint(tmp_path)
    cp.store({"a": _pod("a")})
    cp.store({"a": _pod("a"), "b": _pod("b")})
    torn = cp.slots[1].read_bytes().rstrip()  # the write, without the slot's padding
    cp.slots[1].write_bytes(torn[: len(torn) // 2])
    restarted = AllocationCheckpoint(tmp_path)
    assert restarted.load() == {"a": _pod("a")}
    restarted.store({"c": _pod("c")})
    assert restarted.newest() == cp.slots[1]
    assert AllocationCheckpoint(tmp_path).load() == {"c": _pod("c")}


def test_a_checkpoint_from_before_the_slots_is_read_and_kept_until_overwritten(
        tmp_path: Path) -> None:
    """One file, no sequence (an older ephemera's or upstream's layout): read as sequence 0;
    the first write goes to the other slot, so it is never overwritten unflushed."""
    cp = AllocationCheckpoint(tmp_path)
    cp.dir.mkdir(parents=True)
    data = json.dumps({"podList": [_pod("a")]}, sort_keys=True, separators=(",", ":"))
    cp.path.write_text(json.dumps({"version": "v2", "data": data,
                                   "checksum": hashlib.sha256(data.encode()).hexdigest()}))
    assert cp.load() == {"a": _pod("a")}
    cp.store({"b": _pod("b")})
    assert cp.newest() == cp.slots[1]
    assert json.loads(json.loads(cp.path.read_text())["data"])["podList"] == [_pod("a")]
    assert AllocationCheckpoint(tmp_path).load() == {"b": _pod("b")}


def test_checkpoint_corruption_is_detected(tmp_path: Path) -> None:
    cp = AllocationCheckpoint(tmp_path)
    cp.store({"a": _pod("a")})
    outer = json.loads(cp.path.read_text())
    outer["data"] = outer["data"].replace('"c0"', '"cX"')
    cp.path.write_text(json.dumps(outer))
    with pytest.raises(CheckpointCorruptedError, match="checksum mismatch"):
        AllocationCheckpoint(tmp_path).load()
    cp.path.write_text('{"version": "v2", "data": ')
    with pytest.raises(CheckpointCorruptedError, match="not valid JSON"):
        AllocationCheckpoint(tmp_path).load()
    cp.path.write_text(json.dumps({"version": "v9", "data": "{}", "checksum": ""}))
    with pytest.raises(CheckpointCorruptedError,
                       match='unsupported checkpoint version "v9"'):
        AllocationCheckpoint(tmp_path).load()


async def test_the_writer_process_writes_the_same_slots_as_a_thread(tmp_path: Path) -> None:
    """`store_async` through the writer process leaves the bytes `store` leaves, slot for
    slot, and `close` stops the process."""
    by_thread = AllocationCheckpoint(tmp_path / "thread")
    by_process = AllocationCheckpoint(tmp_path / "process", writer_process=True)
    try:
        for pods in ({"a": _pod("a")}, {"a": _pod("a"), "b": _pod("b")}, {"b": _pod("b")}):
            by_thread.store(pods)
            await by_process.store_async(pods)
            assert [p.read_bytes() if p.exists() else None for p in by_process.slots] == \
                [p.read_bytes() if p.exists() else None for p in by_thread.slots]
        pid = by_process.writer_pid
        assert pid is not None
        assert sorted(AllocationCheckpoint(tmp_path / "process").load()) == ["b"]
    finally:
        by_process.close()
    assert by_process.writer_pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_a_write_whose_writer_died_is_made_and_the_writer_started_again(
        tmp_path: Path) -> None:
    """The writer process killed between writes: the next write is made all the same (by a
    new writer, or in a thread when the old one is found dead mid-request), and later ones
    by a new writer."""
    cp = AllocationCheckpoint(tmp_path, writer_process=True)
    try:
        await cp.store_async({"a": _pod("a")})
        first = cp.writer_pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await cp.store_async({"a": _pod("a"), "b": _pod("b")})
        assert sorted(AllocationCheckpoint(tmp_path).load()) == ["a", "b"]
        await cp.store_async({"c": _pod("c")})
        assert cp.writer_pid not in (None, first)
        assert sorted(AllocationCheckpoint(tmp_path).load()) == ["c"]
    finally:
        cp.close()


async def test_a_write_failing_in_the_writer_raises_its_error(tmp_path: Path) -> None:
    """An error of the write itself (here the slot is a directory) is the caller's, with its
    errno, and nothing counts as written."""
    cp = AllocationCheckpoint(tmp_path, writer_process=True)
    try:
        await cp.store_async({"a": _pod("a")})  # to the first slot: the next goes to the other
        cp.slots[1].mkdir()
        with pytest.raises(IsADirectoryError):
            await cp.store_async({"b": _pod("b")})
        assert cp.writer_pid is not None  # the process lives on
        cp.slots[1].rmdir()
        assert sorted(AllocationCheckpoint(tmp_path).load()) == ["a"]
        await cp.store_async({"b": _pod("b")})
        assert sorted(AllocationCheckpoint(tmp_path).load()) == ["b"]
    finally:
        cp.close()


def test_a_slot_longer_than_the_checkpoint_knows_is_padded_to_its_size(
        tmp_path: Path) -> None:
    """A write whose caller never saw it end (its task cancelled) may have made the older
    slot longer than the checkpoint's record of it: the next write to that slot is padded to
    the file's size, so no tail of it is left to spoil the JSON."""
    cp = AllocationCheckpoint(tmp_path)
    cp.store({"a": _pod("a")})
    cp.store({"b": _pod("b")})  # both slots exist; the next write goes to the first
    longer = json.dumps({"pods": "x" * 20000}).encode()
    slotwriter.write_slot(str(cp.slots[0]), longer, False)  # never acknowledged
    cp.store({"c": _pod("c")})
    assert cp.slots[0].stat().st_size >= len(longer)
    assert sorted(AllocationCheckpoint(tmp_path).load()) == ["c"]


async def test_a_cancelled_write_in_a_thread_ends_before_the_next_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no writer process, a write runs in a thread; when its caller is cancelled the
    thread goes on, and the next `store_async` waits for it before it writes."""
    cp = AllocationCheckpoint(tmp_path, writer_process=True)
    real = slotwriter.write_slot
    spans: list[tuple[str, float, float]] = []

    def slow(path: str, body: bytes, new: bool) -> None:
        began = time.monotonic()
        time.sleep(0.3)
        real(path, body, new)
        spans.append((path, began, time.monotonic()))

    def unavailable() -> None:
        raise WriterUnavailable("no writer in this test")

    monkeypatch.setattr(slotwriter, "write_slot", slow)
    monkeypatch.setattr(cp._writer, "start", unavailable)  # type: ignore[union-attr]
    first = asyncio.ensure_future(cp.store_async({"a": _pod("a")}))
    await asyncio.sleep(0.05)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await cp.store_async({"b": _pod("b")})
    assert len(spans) == 2 and spans[0][2] <= spans[1][1]  # one after the other
    assert sorted(AllocationCheckpoint(tmp_path).load()) == ["b"]


def test_a_writer_that_keeps_failing_is_started_again_only_after_a_back_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first failure is retried at once; after failures in a row the next start waits
    for a back-off (1 s, doubling to 30 s) instead of forking at every write."""
    writer = SlotWriterProcess(AllocationCheckpoint(tmp_path).slots)
    spawns: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> None:
        spawns.append(1)
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(writer, "spawn", failing)
    for _ in range(2):  # the first failure leaves no back-off: tried again at once
        with pytest.raises(WriterUnavailable, match="starting the checkpoint writer"):
            writer.start()
    with pytest.raises(WriterUnavailable, match="failed 2 times in a row"):
        writer.start()  # backing off: not forked
    assert len(spawns) == 2


# --- the manager -----------------------------------------------------------------------------


class _Node:
    def __init__(self) -> None:
        self.allocatable: Obj = {"cpu": "4", "memory": "100Mi", "ephemeral-storage": "1Gi"}


def _manager(tmp_path: Path, node: _Node) -> AllocationManager:
    return AllocationManager(AllocationCheckpoint(tmp_path),
                             node_allocatable=lambda: node.allocatable)


async def test_a_change_is_allocated_whole_or_not_at_all(tmp_path: Path) -> None:
    node = _Node()
    manager = _manager(tmp_path, node)
    failures: list[str] = []
    allocated: list[str] = []
    manager.on_failed = lambda p, message: failures.append(message)
    manager.on_allocated = allocated.append
    await manager.allocate_new(_pod("other", memory="60Mi"))
    await manager.allocate_new(_pod("u1"))
    change = _pod("u1", volumes=[
        {"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "50Mi"}},
        {"name": "cfg", "configMap": {"name": "settings"}}], images=("busybox", "busybox"))
    result = await manager.try_allocate(change)
    assert not result.allocated
    assert result.message == ("Node didn't have enough resource: memory, requested: 52428800, "
                              "used: 62914560, capacity: 104857600")
    assert failures == [result.message]
    # nothing of the change is allocated (nor checkpointed)
    assert manager.get("u1") == AllocationCheckpoint(tmp_path).load()["u1"]
    assert manager.get("u1")["spec"]["volumes"] == []  # type: ignore[index]
    # room appears: allocated whole (the ConfigMap it reads is the volume manager's business)
    manager.forget("other")
    assert (await manager.try_allocate(change)).allocated
    assert allocated == ["u1"]
    assert failures == [result.message]
    assert manager.get("u1")["spec"] == change["spec"]  # type: ignore[index]
    assert manager.get("u1")["status"] == {}  # type: ignore[index]
    assert AllocationCheckpoint(tmp_path).load()["u1"]["spec"] == change["spec"]


async def test_what_a_change_reads_is_not_for_admission_to_check(tmp_path: Path) -> None:
    """KEP-6395 lifecycle phase 3: a change that fits is allocated though the ConfigMaps
    and Secrets its volumes read do not exist (projected sources too), its image volume's
    image and its new or changed containers' images are not on the node: their SetUp fails
    (`ErrorMounting`), their containers go `ErrImagePull`, after allocation."""
    manager = _manager(tmp_path, _Node())
    failures: list[str] = []
    manager.on_failed = lambda p, message: failures.append(message)
    await manager.allocate_new(_pod("u1"))
    change = _pod("u1", volumes=[
        {"name": "cfg", "configMap": {"name": "nowhere"}},
        {"name": "creds", "secret": {"secretName": "nowhere"}},
        {"name": "both", "projected": {"sources": [{"configMap": {"name": "a"}},
                                                   {"secret": {"name": "b"}}]}},
        {"name": "model", "image": {"reference": "registry.example/model:v1"}}],
        images=("registry.example/new:v2", "registry.example/added:v1"))
    assert manager.check(change) == ""
    assert (await manager.try_allocate(change)).allocated
    assert manager.get("u1")["spec"] == change["spec"]  # type: ignore[index]
    assert failures == []


async def test_pending_changes_are_retried_and_restored(tmp_path: Path) -> None:
    node = _Node()
    node.allocatable["memory"] = "10Mi"
    manager = _manager(tmp_path, node)
    manager.retry_period = 0.05
    await manager.allocate_new(_pod("u1"))
    change = _pod("u1", volumes=[{"name": "ram", "emptyDir": {"medium": "Memory",
                                                              "sizeLimit": "20Mi"}}])
    manager.request(change)
    assert manager.pending_changes("u1") == ([], ["ram"])
    task = asyncio.get_running_loop().create_task(manager.run())
    try:
        await wait_until(lambda: "u1" in manager.pending)
        assert manager.get("u1")["spec"]["volumes"] == []  # type: ignore[index]
        node.allocatable["memory"] = "1Gi"  # the node changed: the periodic retry admits it
        await wait_until(lambda: "u1" not in manager.pending and not manager.desired)
    finally:
        task.cancel()
    restored = _manager(tmp_path, node)
    assert restored.restore() == 1
    assert restored.get("u1")["spec"] == change["spec"]  # type: ignore[index]
    # a corrupted checkpoint (both slots) is ignored (the pods are admitted again as new)
    for slot in AllocationCheckpoint(tmp_path).slots:
        slot.write_text("garbage")
    assert _manager(tmp_path, node).restore() == 0


# --- on the fake runtime -----------------------------------------------------------------------


def _status_names(p: Obj) -> list[str]:
    return [s["name"] for s in p.get("status", {}).get("containerStatuses") or []]


def _volume_phase(p: Obj, name: str) -> str | None:
    for entry in p["status"].get("volumeStatuses") or []:
        if entry["name"] == name:
            return str(entry["hostPhase"])
    return None


async def _dynamic(h: Harness, name: str, body: Obj) -> Obj:
    return await h.api.patch(resource_path("pods", "default", name) + "/dynamic", body,
                             patch_type="strategic")


async def test_a_dynamic_volume_restarts_only_its_container(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        before = await running_worker(h, sidecar=True)
        uid = before["metadata"]["uid"]
        assert _volume_phase(before, "keep") == "HostMounted"
        side_id = container_status(before, "side")["containerID"]
        main_id = container_status(before)["containerID"]
        await _dynamic(h, "w", {"spec": {
            "volumes": [{"name": "keep", "emptyDir": {}}, {"name": "extra", "emptyDir": {}}],
            "containers": [{"name": "c", "volumeMounts": [
                {"name": "keep", "mountPath": "/keep"},
                {"name": "extra", "mountPath": "/extra"}]}]}})
        after = await h.wait_pod("w", lambda p: any(
            m["name"] == "extra" for m in container_status(p).get("volumeMounts") or [])
            and "running" in container_status(p)["state"])
        assert container_status(after)["containerID"] != main_id
        assert container_status(after, "side")["containerID"] == side_id  # untouched
        assert _volume_phase(after, "extra") == "HostMounted"
        allocated = await h.api.get(resource_path("pods", "default", "w") + "/allocated")
        assert allocated["status"] == {}
        assert [v["name"] for v in allocated["spec"]["volumes"]] == ["keep", "extra"]
        extra_dir = h.root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "extra"
        assert extra_dir.is_dir()
        # remove it again: Unmounting until torn down, then pruned and the dir gone
        path = resource_path("pods", "default", "w") + "/dynamic"
        current = await h.api.get(path)
        current["spec"]["volumes"] = [v for v in current["spec"]["volumes"]
                                      if v["name"] != "extra"]
        current["spec"]["containers"][0]["volumeMounts"] = [
            {"name": "keep", "mountPath": "/keep"}]
        await h.api.update(path, current)
        gone = await h.wait_pod("w", lambda p: _volume_phase(p, "extra") is None and all(
            m["name"] != "extra" for m in container_status(p).get("volumeMounts") or [])
            and "running" in container_status(p)["state"])
        assert container_status(gone, "side")["containerID"] == side_id
        await wait_until(lambda: not extra_dir.exists())


async def test_an_unallocatable_change_stays_pending(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        before = await running_worker(h, sidecar=True)
        main_id = container_status(before)["containerID"]
        await _dynamic(h, "w", {"spec": {
            "volumes": [{"name": "keep", "emptyDir": {}},
                        {"name": "huge", "emptyDir": {"medium": "Memory",
                                                      "sizeLimit": "100Pi"}}],
            "containers": [{"name": "late", "image": "busybox", "volumeMounts": [
                {"name": "huge", "mountPath": "/huge"}]}]}})
        p = await h.wait_pod("w", lambda p: _volume_phase(p, "huge") == "Pending" and any(
            s["name"] == "late" for s in p["status"]["containerStatuses"]))
        assert container_status(p, "late")["state"] == {"waiting": {
            "reason": "Unallocated", "message": UNALLOCATED_MESSAGE}}
        event = await h.wait_event("w", lambda e: e["reason"] == "FailedAllocation")
        assert event["type"] == "Warning"
        assert event["message"].startswith("Node didn't have enough resource: memory, ")
        allocated = await h.api.get(resource_path("pods", "default", "w") + "/allocated")
        assert [v["name"] for v in allocated["spec"]["volumes"]] == ["keep"]
        assert [c["name"] for c in allocated["spec"]["containers"]] == ["c", "side"]
        huge = h.root / "pods" / p["metadata"]["uid"] / "volumes" / \
            "kubernetes.io~empty-dir" / "huge"
        assert not huge.exists()  # nothing is prepared for what is not allocated
        assert container_status(p)["containerID"] == main_id
        # the restarted kubelet keeps what it allocated and the change stays pending
        await h.restart()
        p = await h.wait_pod("w", lambda p: _volume_phase(p, "huge") == "Pending")
        assert container_status(p)["containerID"] == main_id
        assert not huge.exists()


async def test_a_container_added_with_a_configmap_then_removed(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        before = await running_worker(h, sidecar=True)
        main_id = container_status(before)["containerID"]
        await h.api.create(resource_path("configmaps", "default"), {
            "metadata": {"name": "task"}, "data": {"job": "42"}})
        path = resource_path("pods", "default", "w") + "/dynamic"
        current = await h.api.get(path)
        current["spec"]["volumes"].append({"name": "task", "configMap": {"name": "task"}})
        current["spec"]["containers"].append({"name": "helper", "image": "busybox",
                                              "volumeMounts": [{"name": "task",
                                                                "mountPath": "/task"}]})
        await h.api.update(path, current)
        p = await h.wait_pod("w", lambda p: any(
            s["name"] == "helper" and "running" in s["state"]
            for s in p["status"]["containerStatuses"]))
        assert container_status(p, "helper")["volumeMounts"] == [
            {"name": "task", "mountPath": "/task"}]
        assert container_status(p)["containerID"] == main_id  # the others keep running
        assert _volume_phase(p, "task") == "HostMounted"
        uid = p["metadata"]["uid"]
        task_file = h.root / "pods" / uid / "volumes" / "kubernetes.io~configmap" / "task" / "job"
        assert task_file.read_text() == "42"
        helper_id = container_status(p, "helper")["containerID"]
        # remove the container and its volume together
        current = await h.api.get(path)
        current["spec"]["containers"] = [c for c in current["spec"]["containers"]
                                         if c["name"] != "helper"]
        current["spec"]["volumes"] = [v for v in current["spec"]["volumes"]
                                      if v["name"] != "task"]
        await h.api.update(path, current)
        p = await h.wait_pod("w", lambda p: "helper" not in _status_names(p)
                             and _volume_phase(p, "task") is None)
        # the removed container left the status once stopped, with its runtime containers
        assert container_status(p)["containerID"] == main_id
        helper_runtime_id = helper_id.split("://", 1)[-1]
        assert ("stop_container", helper_runtime_id) in [c[:2] for c in h.runtime.calls]
        assert ("remove_container", helper_runtime_id) in h.runtime.calls
        assert "helper" not in {c.name for c in await h.runtime.list_containers()}
        await wait_until(lambda: not task_file.exists())
        allocated = await h.api.get(resource_path("pods", "default", "w") + "/allocated")
        assert [c["name"] for c in allocated["spec"]["containers"]] == ["c", "side"]
        # the name is free: a container added under it starts afresh
        current = await h.api.get(path)
        current["spec"]["containers"].append({"name": "helper", "image": "busybox"})
        await h.api.update(path, current)
        p = await h.wait_pod("w", lambda p: "helper" in _status_names(p) and
                             "running" in container_status(p, "helper")["state"])
        assert container_status(p, "helper")["restartCount"] == 0
        assert container_status(p, "helper")["containerID"] != helper_id
        assert not container_status(p, "helper").get("lastState")


async def test_a_restarted_kubelet_readmits_from_the_checkpoint(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await running_worker(h, sidecar=True)
        await _dynamic(h, "w", {"spec": {
            "volumes": [{"name": "keep", "emptyDir": {}}, {"name": "extra", "emptyDir": {}}],
            "containers": [{"name": "c", "volumeMounts": [
                {"name": "keep", "mountPath": "/keep"},
                {"name": "extra", "mountPath": "/extra"}]}]}})
        p = await h.wait_pod("w", lambda p: any(
            m["name"] == "extra" for m in container_status(p).get("volumeMounts") or [])
            and "running" in container_status(p)["state"])
        actuated_id = container_status(p)["containerID"]
        checkpointed = AllocationCheckpoint(h.root).load()[p["metadata"]["uid"]]
        assert [v["name"] for v in checkpointed["spec"]["volumes"]] == ["keep", "extra"]
        await h.restart()
        await asyncio.sleep(1.0)  # a few syncs: the adopted container is not restarted again
        assert not any(c[0] in ("stop_container", "create_container") for c in h.runtime.calls)
        # the change made while the kubelet is down is allocated and actuated after it
        await h.shutdown()
        path = resource_path("pods", "default", "w") + "/dynamic"
        current = await h.api.get(path)
        current["spec"]["volumes"].append({"name": "third", "emptyDir": {}})
        current["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "third", "mountPath": "/third"})
        await h.api.update(path, current)
        while_down = await h.get("w")
        assert while_down is not None and container_status(while_down)["containerID"] == actuated_id
        await h.restart()
        p = await h.wait_pod("w", lambda p: _volume_phase(p, "third") == "HostMounted" and any(
            m["name"] == "third" for m in container_status(p).get("volumeMounts") or [])
            and "running" in container_status(p)["state"])
        assert container_status(p)["containerID"] != actuated_id
        assert [m["name"] for m in container_status(p)["volumeMounts"]] == [
            "keep", "extra", "third"]


async def test_a_never_started_instance_does_not_hold_a_swapped_out_volume(
        tmp_path: Path) -> None:
    """A kubelet stopped between the create and the start of a swap's instance leaves it
    created, never started, mounting the swap's volume; a later swap then removes that
    volume. The next kubelet replaces the never-started instance (removed first, as it
    would never run), so the volume is no longer in use by the pod, and is torn down and
    pruned from `volumeStatuses` (chaos test, 2026-12-03: it stayed `Unmounting`)."""
    async with running_kubelet(tmp_path) as h:
        before = await running_worker(h)
        uid = before["metadata"]["uid"]

        def swap_to(name: str) -> Obj:
            return {"spec": {"volumes": [{"name": name, "emptyDir": {}}],
                             "containers": [{"name": "c", "volumeMounts": [
                                 {"name": name, "mountPath": "/keep"}]}]}}

        started = asyncio.Event()  # never set: the swap's start hangs as a killed one would

        async def hang(container_id: str) -> None:
            await started.wait()

        h.runtime.start_container = hang  # type: ignore[method-assign]
        await _dynamic(h, "w", swap_to("one"))

        async def created_with_one() -> bool:
            return any(c.state.value == "CREATED" and [m.volume_name for m in c.mounts]
                       == ["one"] for c in await h.runtime.list_containers())

        await wait_until(created_with_one)
        await _dynamic(h, "w", swap_to("two"))
        await h.restart()
        after = await h.wait_pod("w", lambda p: p["status"].get("volumeStatuses") == [
            {"name": "two", "hostPhase": "HostMounted"}]
            and "running" in container_status(p)["state"], timeout=20)
        assert [m["name"] for m in container_status(after)["volumeMounts"]] == ["two"]
        assert not any(c.state.value == "CREATED" for c in await h.runtime.list_containers())
        one = h.root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "one"
        await wait_until(lambda: not one.exists())


async def test_a_change_is_staged_around_its_checkpoint_write(tmp_path: Path) -> None:
    """`on_staging_changed` runs before the change's checkpoint is on disk, the change then
    `staged_change` (the kubelet sets up its volumes meanwhile), and again once the write
    ended (no longer staged) and before `on_allocated`; a failed write unstages it too and
    allocates nothing."""
    node = _Node()
    manager = _manager(tmp_path, node)
    calls: list[tuple[str, Any]] = []

    def staging(uid: str) -> None:
        view = manager.staged_change(uid)
        if view is None:
            calls.append(("unstaged", uid))
            return
        on_disk = AllocationCheckpoint(tmp_path).load()["u1"]["spec"]["volumes"]
        calls.append(("staging", ([v["name"] for v in view["spec"]["volumes"]], on_disk)))

    manager.on_staging_changed = staging
    manager.on_allocated = lambda uid: calls.append(("allocated", uid))
    await manager.allocate_new(_pod("u1"))
    change = _pod("u1", volumes=[{"name": "scratch", "emptyDir": {}}])
    assert (await manager.try_allocate(change)).allocated
    assert calls == [("staging", (["scratch"], [])), ("unstaged", "u1"),
                     ("allocated", "u1")]

    calls.clear()
    failing = _pod("u1", volumes=[{"name": "other", "emptyDir": {}}])

    def broken(pods: Any) -> None:
        raise OSError(28, "No space left on device")

    manager.checkpoint.store = broken  # type: ignore[method-assign]
    result = await manager.try_allocate(failing)
    assert not result.allocated
    assert result.message == "writing the allocation checkpoint: no space left on device"
    assert [name for name, _ in calls] == ["staging", "unstaged"]
    assert calls[1] == ("unstaged", "u1")


@dataclass
class _UnfitChange:
    """A manager with pod u1 allocated, and a change of it adding a memory emptyDir larger
    than the node's memory (until `node.allocatable` grows); `woken` collects the failures
    reported to the pod's worker."""
    node: _Node
    manager: AllocationManager
    change: Obj
    woken: list[str]


UNFIT = ("Node didn't have enough resource: memory, requested: 209715200, used: 0, "
         "capacity: 104857600")


async def _unfit_change(tmp_path: Path) -> _UnfitChange:
    node = _Node()
    manager = _manager(tmp_path, node)
    woken: list[str] = []
    manager.on_failed = lambda pod, message: woken.append(message)
    await manager.allocate_new(_pod("u1"))
    change = _pod("u1", volumes=[{"name": "ram", "emptyDir": {"medium": "Memory",
                                                              "sizeLimit": "200Mi"}}])
    return _UnfitChange(node, manager, change, woken)


@asynccontextmanager
async def _allocation_loop(manager: AllocationManager) -> AsyncIterator[None]:
    """The manager's allocation loop running (and waiting for requests) meanwhile."""
    task = asyncio.create_task(manager.run())
    try:
        await wait_until(lambda: manager._wake is not None)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_change_made_again_after_its_pod_came_back_is_decided_and_reported_anew(
        tmp_path: Path) -> None:
    """A failed change whose pod came back to its allocated spec is gone altogether: the
    same change made again is being decided again and its failure reported again."""
    t = await _unfit_change(tmp_path)
    manager = t.manager
    async with _allocation_loop(manager):
        manager.request(t.change)
        await wait_until(lambda: "u1" in manager.pending)
        assert (await manager.try_allocate(_pod("u1"))).allocated  # back to the allocated spec
        assert "u1" not in manager.desired and "u1" not in manager.pending
        manager.request(t.change)
        assert manager.deciding("u1")
        await wait_until(lambda: len(t.woken) == 2)
        assert t.woken == [UNFIT] * 2


async def test_deciding_lasts_until_a_changes_first_attempt_ends(tmp_path: Path) -> None:
    """`deciding(uid)`: a requested change whose first attempt has not ended (its outcome
    will wake the pod's worker); not once it failed (pending) or was allocated."""
    t = await _unfit_change(tmp_path)
    manager = t.manager
    manager.desired["u1"] = t.change
    assert not manager.deciding("u1")  # no allocation loop: nothing would decide it
    del manager.desired["u1"]
    async with _allocation_loop(manager):
        manager.request(t.change)
        assert manager.deciding("u1")
        await wait_until(lambda: "u1" in manager.pending)
        assert t.woken == [UNFIT]
        assert not manager.deciding("u1")  # failed: the worker shows it pending
        t.node.allocatable["memory"] = "1Gi"
        manager.request(t.change)
        await wait_until(
            lambda: manager.get("u1")["spec"] == t.change["spec"])  # type: ignore[index]
        assert not manager.deciding("u1")

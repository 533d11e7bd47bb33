"""Observability of KEP-6395 dynamic volumes on the fake runtime (issue #5 item 6): the
kubelet's metrics (`kubelet_dynamic_volume_{mount,unmount}_duration_seconds`,
`kubelet_dynamic_volume_errors_total`, `kubelet_dynamic_allocations_total`,
`kubelet_dynamic_pending_allocations`, `kubelet_admission_rejections_total`) and events
(`SuccessfulAllocation`, `SuccessfulMountVolume`, `SuccessfulUnMountVolume`, `FailedMount`,
`Killing` for a definition change) after a dynamic add, remove and failure; and the
allocation fixes: the checkpoint written off the event loop and before anything is actuated,
the same emptyDir rule for admitting a pod and a change, the node's current allocatable."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubelet_harness import (
    Harness,
    container_status,
    pod,
    running_kubelet,
    running_worker,
    slowed,
    wait_until,
)
from prometheus_client.parser import text_string_to_metric_families

from ephemera.api.errors import StatusError
from ephemera.client import resource_path
from ephemera.kubelet import node as node_module
from ephemera.kubelet.allocation import AllocationCheckpoint, AllocationManager
from ephemera.kubelet.podadmission import admit

Obj = dict[str, Any]
EMPTY_DIR = "kubernetes.io/empty-dir"


def _sample(h: Harness, name: str, **labels: str) -> float | None:
    """The value of one sample of the kubelet's /metrics text (None when absent)."""
    text = h.kubelet.metrics.render().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def _mounts(p: Obj, name: str = "c") -> list[str]:
    return [m["name"] for m in container_status(p, name).get("volumeMounts") or []]


async def _edit_dynamic(h: Harness, volumes: list[Obj], mounts: list[Obj]) -> None:
    """Read, change and write `/dynamic`, again on a conflict (the kubelet writes the
    status meanwhile), as `kubectl edit` would."""
    path = resource_path("pods", "default", "w") + "/dynamic"
    for _ in range(5):
        current = await h.api.get(path)
        current["spec"]["volumes"] = volumes
        current["spec"]["containers"][0]["volumeMounts"] = mounts
        try:
            await h.api.update(path, current)
            return
        except StatusError as err:
            if err.code != 409:
                raise
    raise AssertionError("the /dynamic update conflicted five times")


async def _equals(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


async def _event(h: Harness, reason: str, message: str) -> Obj:
    return await h.wait_event("w", lambda e: (e["reason"], e["message"]) == (reason, message))


async def test_a_dynamic_add_and_remove_are_measured_and_reported(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await running_worker(h)
        # the volume the pod started with is not a dynamic one
        assert _sample(h, "kubelet_dynamic_volume_mount_duration_seconds_count",
                       volume_plugin=EMPTY_DIR) is None
        keep = {"name": "keep", "emptyDir": {}}
        keep_mount = {"name": "keep", "mountPath": "/keep"}
        await _edit_dynamic(h, [keep, {"name": "extra", "emptyDir": {}}],
                            [keep_mount, {"name": "extra", "mountPath": "/extra"}])
        await h.wait_pod("w", lambda p: "extra" in _mounts(p)
                         and "running" in container_status(p)["state"])
        assert _sample(h, "kubelet_dynamic_volume_mount_duration_seconds_count",
                       volume_plugin=EMPTY_DIR) == 1.0
        assert _sample(h, "kubelet_dynamic_volume_mount_duration_seconds_bucket",
                       volume_plugin=EMPTY_DIR, le="+Inf") == 1.0
        assert _sample(h, "kubelet_dynamic_allocations_total", result="admitted") == 1.0
        assert _sample(h, "kubelet_dynamic_pending_allocations") == 0.0
        allocated = await _event(h, "SuccessfulAllocation", (
            "Allocated pod update: added volumes=[extra], removed volumes=[], "
            "added containers=[], removed containers=[]"))
        assert allocated["type"] == "Normal" and allocated["source"]["component"] == "kubelet"
        await _event(h, "SuccessfulMountVolume", 'MountVolume.SetUp succeeded for volume "extra"')
        killing = await _event(h, "Killing", "Container c definition changed, will be restarted")
        assert killing["involvedObject"]["fieldPath"] == "spec.containers{c}"

        async def starts() -> int:  # the first start and the restart with /extra
            return sum(int(e.get("count") or 1) for e in await h.events("w")
                       if (e["reason"], e["message"]) == ("Started", "Started container c"))

        await wait_until(lambda: _equals(starts(), 2))

        await _edit_dynamic(h, [keep], [keep_mount])
        await h.wait_pod("w", lambda p: _mounts(p) == ["keep"] and not any(
            v["name"] == "extra" for v in p["status"].get("volumeStatuses") or []))
        await wait_until(lambda: _sample(
            h, "kubelet_dynamic_volume_unmount_duration_seconds_count",
            volume_plugin=EMPTY_DIR) == 1.0)
        assert _sample(h, "kubelet_dynamic_allocations_total", result="admitted") == 2.0
        await _event(h, "SuccessfulAllocation", (
            "Allocated pod update: added volumes=[], removed volumes=[extra], "
            "added containers=[], removed containers=[]"))
        await _event(h, "SuccessfulUnMountVolume",
                     'UnmountVolume.TearDown succeeded for volume "extra"')
        assert _sample(h, "kubelet_dynamic_volume_errors_total", operation="mount",
                       volume_plugin=EMPTY_DIR) is None
        # deleting the pod tears "keep" down: not a dynamic unmount
        await h.api.delete(resource_path("pods", "default", "w"))
        await h.wait_gone("w")
        assert _sample(h, "kubelet_dynamic_volume_unmount_duration_seconds_count",
                       volume_plugin=EMPTY_DIR) == 1.0


async def test_a_failing_dynamic_mount_counts_errors(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await running_worker(h)
        await h.api.create(resource_path("configmaps", "default"), {
            "metadata": {"name": "cfg"}, "data": {"present": "1"}})
        bad = {"name": "cfg", "configMap": {"name": "cfg",
                                            "items": [{"key": "missing", "path": "m"}]}}
        await _edit_dynamic(h, [{"name": "keep", "emptyDir": {}}, bad],
                            [{"name": "keep", "mountPath": "/keep"},
                             {"name": "cfg", "mountPath": "/cfg"}])
        message = ('MountVolume.SetUp failed for volume "cfg" : configmap references '
                   "non-existent config key: missing")
        event = await _event(h, "FailedMount", message)
        assert event["type"] == "Warning"
        p = await h.wait_pod("w", lambda p: any(
            v["name"] == "cfg" and v["hostPhase"] == "ErrorMounting"
            for v in p["status"].get("volumeStatuses") or []))
        assert "running" in container_status(p)["state"]  # still the old instance, without /cfg
        errors = _sample(h, "kubelet_dynamic_volume_errors_total", operation="mount",
                         volume_plugin="kubernetes.io/configmap")
        assert errors is not None and errors >= 1.0
        assert _sample(h, "kubelet_dynamic_volume_mount_duration_seconds_count",
                       volume_plugin="kubernetes.io/configmap") is None
        assert _sample(h, "kubelet_dynamic_allocations_total", result="admitted") == 1.0


async def test_a_deferred_change_is_counted_and_pending(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await running_worker(h)
        keep = {"name": "keep", "emptyDir": {}}
        keep_mount = {"name": "keep", "mountPath": "/keep"}
        await _edit_dynamic(h, [keep, {"name": "huge", "emptyDir": {"medium": "Memory",
                                                                    "sizeLimit": "100Pi"}}],
                            [keep_mount, {"name": "huge", "mountPath": "/huge"}])
        await h.wait_event("w", lambda e: e["reason"] == "FailedAllocation")
        assert _sample(h, "kubelet_dynamic_allocations_total", result="deferred") == 1.0
        assert _sample(h, "kubelet_dynamic_pending_allocations") == 1.0
        await h.kubelet.allocation.allocate_pending()  # a retry for the same reason
        assert _sample(h, "kubelet_dynamic_allocations_total", result="deferred") == 1.0
        await _edit_dynamic(h, [keep], [keep_mount])  # withdrawn
        await wait_until(lambda: _sample(h, "kubelet_dynamic_pending_allocations") == 0.0)
        assert _sample(h, "kubelet_dynamic_allocations_total", result="admitted") is None


# --- the allocation fixes ------------------------------------------------------------------


class _BlockingStore:
    """Wraps `AllocationCheckpoint.store`: records the thread and how many writes overlap,
    and holds each write until `release` is set."""

    def __init__(self, checkpoint: AllocationCheckpoint) -> None:
        self.inner = checkpoint.store
        self.release = threading.Event()
        self.release.set()
        self.threads: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.threads.append(threading.current_thread().name)
        try:
            assert self.release.wait(20)
            self.inner(pods)
        finally:
            with self._lock:
                self.in_flight -= 1


async def test_the_checkpoint_is_written_off_the_loop_before_actuation(
        tmp_path: Path) -> None:
    """The kubelet's writes go to its checkpoint writer process: with that process stopped
    (SIGSTOP) the write waits, the loop runs on, and nothing of the pod is set up until the
    write is done."""
    async with running_kubelet(tmp_path) as h:
        writer = h.kubelet.allocation.checkpoint.writer_pid
        assert writer is not None
        os.kill(writer, signal.SIGSTOP)
        try:
            created = await h.create(pod("held", argv=["sleep", "3600"]))
            uid = created["metadata"]["uid"]
            await wait_until(lambda: h.kubelet.pod_admission.admitting == {uid})
            # the loop runs on (the API answers, the kubelet syncs) while the write waits,
            # and nothing of the pod is set up yet
            for _ in range(5):
                assert await h.get("held") is not None
                await asyncio.sleep(0.05)
            assert not h.runtime.sandboxes
            assert not (h.root / "pods" / uid).exists()
            assert uid not in AllocationCheckpoint(h.root).load()
        finally:
            os.kill(writer, signal.SIGCONT)
        await h.wait_pod("held", lambda p: p["status"].get("phase") == "Running")
        assert uid in AllocationCheckpoint(h.root).load()
        assert h.kubelet.allocation.checkpoint.writer_pid == writer  # the same process


async def test_concurrent_allocations_share_serialized_writes(tmp_path: Path) -> None:
    checkpoint = AllocationCheckpoint(tmp_path)
    store = _BlockingStore(checkpoint)
    checkpoint.store = store  # type: ignore[method-assign]

    manager = AllocationManager(checkpoint, node_allocatable=lambda: {"memory": "1Gi"})
    pods = [{"metadata": {"name": f"p{i}", "namespace": "default", "uid": f"u{i}"},
             "spec": {"containers": [{"name": "c", "image": "busybox"}]}} for i in range(6)]
    store.release.clear()
    tasks = [asyncio.ensure_future(manager.allocate_new(p)) for p in pods]
    await wait_until(lambda: store.calls == 1)
    assert not manager.allocated  # nothing is allocated before it is on disk
    store.release.set()
    await asyncio.gather(*tasks)
    assert store.max_in_flight == 1
    assert store.calls == 2  # the first pod's write, then one for the five staged meanwhile
    assert sorted(AllocationCheckpoint(tmp_path).load()) == [f"u{i}" for i in range(6)]
    assert sorted(manager.allocated) == [f"u{i}" for i in range(6)]


def _with_empty_dir(name: str, empty_dir: Obj, **requests: str) -> Obj:
    body = pod(name, volumes=[{"name": "scratch", "emptyDir": empty_dir}])
    body["metadata"]["uid"] = name
    if requests:
        body["spec"]["containers"][0]["resources"] = {"requests": requests}
    return body


@pytest.mark.parametrize(("empty_dir", "resource"), [
    ({"sizeLimit": "600Mi"}, "ephemeral-storage"),
    ({"medium": "Memory", "sizeLimit": "600Mi"}, "memory"),
])
async def test_admission_of_a_pod_and_of_a_change_count_empty_dirs_alike(
        tmp_path: Path, empty_dir: Obj, resource: str) -> None:
    allocatable = {"cpu": "4", "memory": "1Gi", "ephemeral-storage": "1Gi", "pods": "10"}
    other = _with_empty_dir("other", empty_dir)
    newcomer = _with_empty_dir("new", empty_dir)
    expected = (f"Node didn't have enough resource: {resource}, requested: 629145600, "
                f"used: 629145600, capacity: 1073741824")
    result = admit(newcomer, [other], allocatable, {})
    assert (result.admit, result.reason, result.message) == (
        False, f"OutOf{resource}", expected)
    assert admit(newcomer, [], allocatable, {}).admit
    # the same pod reached by a dynamic change to an allocated pod: the same verdict
    manager = AllocationManager(AllocationCheckpoint(tmp_path),
                                node_allocatable=lambda: allocatable)
    before = pod("new")
    before["metadata"]["uid"] = "new"
    await manager.allocate_new(other)
    await manager.allocate_new(before)
    result_change = await manager.try_allocate(newcomer)
    assert (result_change.allocated, result_change.message) == (False, expected)


async def test_admission_reads_the_current_allocatable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with running_kubelet(tmp_path) as h:
        big = pod("big", argv=["sleep", "3600"])
        big["spec"]["containers"][0]["resources"] = {"requests": {"memory": "1Gi"}}
        real = node_module.machine_capacity

        def small(root_dir: Path, max_pods: int = 110) -> dict[str, str]:
            return {**real(root_dir, max_pods), "memory": "614400Ki"}  # 600Mi

        monkeypatch.setattr(node_module, "machine_capacity", small)
        # 600Mi less the 100Mi hard eviction threshold (Quantity arithmetic: "500Mi")
        await wait_until(lambda: h.kubelet.node_allocatable.get("memory") == "500Mi")
        await h.create(big)
        rejected = await h.wait_pod("big", lambda p: p["status"].get("phase") == "Failed")
        assert rejected["status"]["reason"] == "OutOfmemory"
        assert rejected["status"]["message"] == (
            "Pod was rejected: Node didn't have enough resource: memory, requested: "
            "1073741824, used: 0, capacity: 524288000")
        assert _sample(h, "kubelet_admission_rejections_total", reason="OutOfmemory") == 1.0
        node = await h.api.get(resource_path("nodes", name=h.kubelet.node_name))
        assert node["status"]["allocatable"]["memory"] == "500Mi"


async def test_a_restart_swap_is_one_status_write_and_its_events_follow_it(
        tmp_path: Path) -> None:
    """Issue 12 item 5: the statuses of a swap's syncs (`Pending`, then `Unmounting` while
    the container stops, then the restarted container) reach the API as one write when the
    swap is quick (a second one prunes the old volume if torn down later), and the swap's
    Normal events are posted after that write."""
    async with running_kubelet(tmp_path) as h:
        first = await running_worker(h)
        uid, old_id = first["metadata"]["uid"], container_status(first)["containerID"]
        await wait_until(h.kubelet.status.is_settled)
        slowed(h.kubelet.runtime, "stop_container", 0.05)  # as a real container's stop
        writes = h.kubelet.status.writes

        def swapped(p: dict[str, Any]) -> bool:
            return (_mounts(p) == ["new"] and container_status(p)["containerID"] != old_id
                    and "running" in container_status(p)["state"])

        async def first_swapped() -> dict[str, Any]:
            """The first version of the pod with the swap done, as a watch sees each write
            (a poll could miss it for the write after)."""
            async for event in h.api.watch(resource_path("pods", "default"),
                                           field_selector="metadata.name=w",
                                           resource_version=first["metadata"]
                                           ["resourceVersion"], timeout_seconds=10):
                if event.type == "MODIFIED" and swapped(event.object):
                    return event.object
            raise AssertionError("the swap never reached the pod's status")

        watching = asyncio.create_task(first_swapped())
        keep = {"name": "keep", "emptyDir": {}}
        await _edit_dynamic(h, [keep, {"name": "new", "emptyDir": {}}],
                            [{"name": "new", "mountPath": "/keep"}])
        done = await asyncio.wait_for(watching, 15)
        await wait_until(lambda: [v["name"] for v in (h.kubelet.status.get(uid) or {})
                                  .get("volumeStatuses") or []] == ["new"])
        await wait_until(h.kubelet.status.is_settled)
        # Pending, Unmounting and the restarted container coalesce into one write; the old
        # volume's pruning is a second one, unless its teardown ended before the first write
        # was sent (then that write carries it): never one write per sync.
        assert h.kubelet.status.writes - writes in (1, 2)
        started = await h.wait_event("w", lambda e: e["reason"] == "Started"
                                     and e.get("count") == 2)
        assert int(started["metadata"]["resourceVersion"]) > \
            int(done["metadata"]["resourceVersion"])

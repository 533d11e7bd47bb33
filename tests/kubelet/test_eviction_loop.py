"""The kubelet's eviction manager wired into the agent (issue 6): a kubelet on the fake
runtime, real files written into a pod's emptyDir, one `EvictionManager.synchronize()` (what the
`--eviction-interval` loop runs), and the pod `Failed` / `Evicted` with upstream's or
KEP-6386's exact message, the `Evicted` event, the `kubelet_evictions` metric, the
`/stats/summary` document, and admission under DiskPressure."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kubelet_harness import Harness, pod, running_kubelet

from ephemera.api.quantity import Quantity, QuantityFormat, quantity_from_json
from ephemera.client import resource_path
from ephemera.kubelet.eviction import parse_eviction_hard
from ephemera.kubelet.stats import disk_usage

MiB = 1 << 20


def _phase(p: dict[str, Any]) -> str:
    return str((p.get("status") or {}).get("phase"))


def _write(path: Path, size: int) -> None:
    with open(path, "wb") as f:  # real (non-sparse) blocks
        f.write(b"x" * size)
        f.flush()


async def _running_with_scratch(h: Harness, name: str, empty_dir: dict[str, Any],
                                **spec: Any) -> tuple[dict[str, Any], Path]:
    body = pod(name, argv=["sleep", "3600"],
               volumes=[{"name": "scratch", "emptyDir": empty_dir}], **spec)
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch",
                                                      "mountPath": "/scratch"}]
    created = await h.create(body)
    await h.wait_pod(name, lambda p: _phase(p) == "Running")
    uid = created["metadata"]["uid"]
    host_dir = h.kubelet.volumes.mounted_volumes(uid)["scratch"]
    return created, Path(host_dir)


async def test_empty_dir_over_its_size_limit_is_evicted(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        _, scratch = await _running_with_scratch(h, "over", {"sizeLimit": "1Mi"})
        _write(scratch / "data", 2 * MiB)
        started = await h.kubelet.eviction_manager.synchronize()
        assert [e.signal for e in started] == ["emptydirfs.limit"]
        message = 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '
        evicted = await h.wait_pod("over", lambda p: _phase(p) == "Failed")
        assert evicted["status"]["reason"] == "Evicted"
        assert evicted["status"]["message"] == message
        cstatus = evicted["status"]["containerStatuses"][0]
        assert "terminated" in cstatus["state"], cstatus
        event = await h.wait_event("over", lambda e: e["reason"] == "Evicted")
        assert event["type"] == "Warning" and event["message"] == message
        metrics = h.kubelet.metrics.render().decode()
        assert 'kubelet_evictions{eviction_signal="emptydirfs.limit"} 1.0' in metrics
        # Evicted once: the next pass leaves it alone.
        assert await h.kubelet.eviction_manager.synchronize() == []


async def test_empty_dir_within_its_size_limit_stays(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        _, scratch = await _running_with_scratch(h, "within", {"sizeLimit": "4Mi"})
        _write(scratch / "data", 1 * MiB)
        assert await h.kubelet.eviction_manager.synchronize() == []
        summary = await h.kubelet.stats_summary()
        [stats] = [p for p in summary["pods"] if p["podRef"]["name"] == "within"]
        [volume] = stats["volume"]
        assert volume["name"] == "scratch"
        assert volume["usedBytes"] == disk_usage(scratch).bytes
        assert stats["ephemeral-storage"]["usedBytes"] == disk_usage(scratch).bytes
        assert summary["node"]["nodeName"] == "fake-node"
        assert summary["node"]["fs"]["capacityBytes"] > 0
        p = await h.get("within")
        assert p is not None and _phase(p) == "Running"
        # The same document through the apiserver's node proxy.
        proxied = await h.api.get("/api/v1/nodes/fake-node/proxy/stats/summary")
        [through] = [p for p in proxied["pods"] if p["podRef"]["name"] == "within"]
        assert through["ephemeral-storage"]["usedBytes"] == disk_usage(scratch).bytes


async def test_pod_level_limit_exceeded_gives_the_kep_6386_message(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        _, scratch = await _running_with_scratch(
            h, "podlevel", {}, resources={"limits": {"ephemeral-storage": "1Mi"}})
        _write(scratch / "data", 2 * MiB)
        used = disk_usage(scratch).bytes
        started = await h.kubelet.eviction_manager.synchronize()
        assert [e.signal for e in started] == ["ephemeralpodfs.limit"]
        evicted = await h.wait_pod("podlevel", lambda p: _phase(p) == "Failed")
        quantity = Quantity.from_int(used, QuantityFormat.BINARY_SI)
        assert evicted["status"]["reason"] == "Evicted"
        assert evicted["status"]["message"] == (
            f"Evicted: Pod ephemeral local storage usage ({quantity}) exceeds pod-level limit "
            "(1Mi)")


async def test_pod_arriving_under_disk_pressure_is_rejected(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        h.kubelet.eviction_manager.node_conditions = ["DiskPressure"]
        await h.create(pod("late", argv=["sleep", "3600"]))
        rejected = await h.wait_pod("late", lambda p: _phase(p) == "Failed")
        assert rejected["status"]["reason"] == "Evicted"
        assert rejected["status"]["message"] == (
            "Pod was rejected: The node had condition: [DiskPressure]. ")


async def test_disk_pressure_is_checked_before_the_resource_fit(tmp_path: Path) -> None:
    """The eviction manager's admit handler runs before the resource fit (upstream's order,
    `Kubelet.admit`): a pod too big for the node is rejected as `Evicted` while the node has
    DiskPressure, and as `OutOfephemeral-storage` once it has not."""
    def oversized(name: str) -> dict[str, Any]:
        body = pod(name, argv=["sleep", "3600"])
        body["spec"]["containers"][0]["resources"] = {
            "requests": {"ephemeral-storage": "100Pi"}}
        return body

    async with running_kubelet(tmp_path) as h:
        h.kubelet.eviction_manager.node_conditions = ["DiskPressure"]
        await h.create(oversized("under-pressure"))
        rejected = await h.wait_pod("under-pressure", lambda p: _phase(p) == "Failed")
        assert rejected["status"]["reason"] == "Evicted"
        assert rejected["status"]["message"] == (
            "Pod was rejected: The node had condition: [DiskPressure]. ")

        h.kubelet.eviction_manager.node_conditions = []
        await h.create(oversized("no-pressure"))
        rejected = await h.wait_pod("no-pressure", lambda p: _phase(p) == "Failed")
        capacity = quantity_from_json(h.kubelet.node_allocatable["ephemeral-storage"]).value()
        assert rejected["status"]["reason"] == "OutOfephemeral-storage"
        assert rejected["status"]["message"] == (
            "Pod was rejected: Node didn't have enough resource: ephemeral-storage, "
            f"requested: {100 << 50}, used: 0, capacity: {capacity}")


async def test_disk_pressure_sets_the_condition_and_evicts_one_pod_per_pass(
        tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        for name in ("a", "b"):
            await h.create(pod(name, argv=["sleep", "3600"]))
        for name in ("a", "b"):
            await h.wait_pod(name, lambda p: _phase(p) == "Running")
        # Met on any host whose filesystem is more than 1% used.
        h.kubelet.eviction_manager.thresholds = parse_eviction_hard("nodefs.available<99%")
        started = await h.kubelet.eviction_manager.synchronize()
        assert [e.signal for e in started] == ["nodefs.available"]
        assert h.kubelet.eviction_manager.node_conditions == ["DiskPressure"]
        node = await h.api.get(resource_path("nodes", name="fake-node"))
        disk = [c for c in node["status"]["conditions"] if c["type"] == "DiskPressure"]
        assert disk[0]["status"] == "True" and disk[0]["reason"] == "KubeletHasDiskPressure"
        victim = str(started[0].pod["metadata"]["name"])
        evicted = await h.wait_pod(victim, lambda p: _phase(p) == "Failed")
        assert evicted["status"]["reason"] == "Evicted"
        assert evicted["status"]["message"].startswith(
            "The node was low on resource: ephemeral-storage. Threshold quantity: ")
        survivor = "b" if victim == "a" else "a"
        p = await h.get(survivor)
        assert p is not None and _phase(p) == "Running"
        # Under DiskPressure a new pod is rejected.
        await h.create(pod("late", argv=["sleep", "3600"]))
        rejected = await h.wait_pod("late", lambda p: _phase(p) == "Failed")
        assert rejected["status"]["message"] == (
            "Pod was rejected: The node had condition: [DiskPressure]. ")


async def test_memory_pressure_evicts_the_pod_over_its_request(tmp_path: Path) -> None:
    """allocatableMemory.available (a copy of the default memory.available<100Mi) against the
    pods' modelled working sets: MemoryPressure on the Node, the BestEffort pod above its
    request evicted with upstream's message and annotations, BestEffort pods refused while
    the burstable ones are admitted."""
    async with running_kubelet(tmp_path) as h:
        h.kubelet.stats.pods_memory_limit = 400 * MiB  # as --system-reserved would leave
        await h.create(pod("hog", argv=["use-memory", "350Mi"]))
        small = pod("small", argv=["use-memory", "10Mi"])
        small["spec"]["containers"][0]["resources"] = {"requests": {"memory": "64Mi"}}
        await h.create(small)
        for name in ("hog", "small"):
            await h.wait_pod(name, lambda p: _phase(p) == "Running")
        summary = await h.kubelet.stats_summary()
        [pods_memory] = summary["node"]["systemContainers"]
        assert (pods_memory["name"], pods_memory["memory"]["availableBytes"]) == (
            "pods", 40 * MiB)
        started = await h.kubelet.eviction_manager.synchronize()
        assert [(e.signal, e.pod["metadata"]["name"]) for e in started] == [
            ("allocatableMemory.available", "hog")]
        message = ("The node was low on resource: memory. Threshold quantity: 100Mi, "
                   "available: 40Mi. Container c was using 350Mi, request is 0, has larger "
                   "consumption of memory. ")
        evicted = await h.wait_pod("hog", lambda p: _phase(p) == "Failed")
        assert (evicted["status"]["reason"], evicted["status"]["message"]) == (
            "Evicted", message)
        event = await h.wait_event("hog", lambda e: e["reason"] == "Evicted")
        assert event["message"] == message
        assert event["metadata"]["annotations"] == {
            "offending_containers": "c", "offending_containers_usage": "350Mi",
            "starved_resource": "memory"}
        assert h.kubelet.eviction_manager.node_conditions == ["MemoryPressure"]
        node = await h.api.get(resource_path("nodes", name="fake-node"))
        [memory] = [c for c in node["status"]["conditions"] if c["type"] == "MemoryPressure"]
        assert (memory["status"], memory["reason"]) == ("True", "KubeletHasInsufficientMemory")
        metrics = h.kubelet.metrics.render().decode()
        assert 'kubelet_evictions{eviction_signal="allocatableMemory.available"} 1.0' in metrics
        await h.create(pod("besteffort", argv=["sleep", "3600"]))
        rejected = await h.wait_pod("besteffort", lambda p: _phase(p) == "Failed")
        assert rejected["status"]["message"] == (
            "Pod was rejected: The node had condition: [MemoryPressure]. ")
        burstable = pod("burstable", argv=["sleep", "3600"])
        burstable["spec"]["containers"][0]["resources"] = {"requests": {"memory": "1Mi"}}
        await h.create(burstable)
        await h.wait_pod("burstable", lambda p: _phase(p) == "Running")
        p = await h.get("small")
        assert p is not None and _phase(p) == "Running"


async def test_pid_pressure_evicts_the_pod_with_the_most_tasks(tmp_path: Path) -> None:
    """pid.available from the node's task limit and count (real: met by a threshold of the
    whole limit), the pods' tasks from the runtime (fake: one per running container):
    PIDPressure on the Node, the pod with more tasks evicted with upstream's message."""
    async with running_kubelet(tmp_path) as h:
        two = pod("two", argv=["sleep", "3600"])
        two["spec"]["containers"].append({"name": "d", "image": "busybox",
                                          "command": ["sleep", "3600"]})
        await h.create(two)
        await h.create(pod("one", argv=["sleep", "3600"]))
        for name in ("two", "one"):
            await h.wait_pod(name, lambda p: _phase(p) == "Running")
        summary = await h.kubelet.stats_summary()
        maxpid = summary["node"]["rlimit"]["maxpid"]
        assert {p["podRef"]["name"]: p["process_stats"]["process_count"]
                for p in summary["pods"]} == {"two": 2, "one": 1}
        h.kubelet.eviction_manager.thresholds = parse_eviction_hard(f"pid.available<{maxpid}")
        started = await h.kubelet.eviction_manager.synchronize()
        assert [(e.signal, e.pod["metadata"]["name"]) for e in started] == [
            ("pid.available", "two")]
        evicted = await h.wait_pod("two", lambda p: _phase(p) == "Failed")
        assert re.fullmatch(rf"The node was low on resource: pids\. Threshold quantity: "
                            rf"{maxpid}, available: \d+\. ", evicted["status"]["message"])
        assert h.kubelet.eviction_manager.node_conditions == ["PIDPressure"]
        node = await h.api.get(resource_path("nodes", name="fake-node"))
        [pid] = [c for c in node["status"]["conditions"] if c["type"] == "PIDPressure"]
        assert (pid["status"], pid["reason"]) == ("True", "KubeletHasInsufficientPID")

"""A hollow node admits, rejects and allocates exactly as a kubelet does (both run
`ephemera.kubelet.podadmission`): one in-process apiserver, a real `Kubelet` on the fake
runtime and one hollow node given the kubelet's allocatable; the same pods on each end with
the same status and the same Events: pod-level `ephemeral-storage` beyond the node (Failed,
`OutOfephemeral-storage`, upstream's message, a Warning), a `/dynamic` change that does not
fit (`FailedAllocation`, the volume `Pending`, the new container `Unallocated`) and one that
does (`SuccessfulAllocation`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kubelet_harness import (
    FAST,
    NODE,
    Harness,
    container_status,
    pod,
    running_kubelet,
    wait_until,
)

from ephemera.client import resource_path
from ephemera.kubelet.hollow import STATE_FILE, HollowConfig, HollowNodes

Obj = dict[str, Any]
HOLLOW = "hollow-node-0"


@contextlib.asynccontextmanager
async def hollow_node(h: Harness, root: Path) -> AsyncIterator[HollowNodes]:
    """One hollow node with the kubelet's allocatable as its capacity, on the same API."""
    node = await h.api.get(resource_path("nodes", name=NODE))
    capacity = {k: str(v) for k, v in node["status"]["allocatable"].items()
                if k in ("cpu", "memory", "pods", "ephemeral-storage")}
    nodes = HollowNodes(h.api, HollowConfig(count=1, root_dir=root, capacity=capacity,
                                            node_status_interval=0.5,
                                            lease_renew_interval=0.5, relist_period=0.1,
                                            reconcile_period=0.2, settings=FAST))
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(nodes.run(stop, ready=ready.set))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        yield nodes
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)


def _volume(p: Obj, name: str) -> str | None:
    for entry in p["status"].get("volumeStatuses") or []:
        if entry["name"] == name:
            return str(entry["hostPhase"])
    return None


async def _event(h: Harness, name: str, reason: str) -> tuple[str, str, str]:
    """The pod's Event of `reason`, reported by the kubelet of the pod's node."""
    event = await h.wait_event(name, lambda e: e["reason"] == reason)
    node = NODE if name.endswith("-kubelet") else HOLLOW
    assert event["source"] == {"component": "kubelet", "host": node}
    return event["type"], event["reason"], event["message"]


def _worker(name: str, node: str) -> Obj:
    body = pod(name, node=node, volumes=[{"name": "keep", "emptyDir": {}}])
    main = body["spec"]["containers"][0]
    main["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}
    main["volumeMounts"] = [{"name": "keep", "mountPath": "/keep"}]
    return body


async def test_a_hollow_node_rejects_and_allocates_as_the_kubelet_does(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h, hollow_node(h, tmp_path / "hollow") as nodes:
        # Pod-level ephemeral-storage beyond the node's allocatable.
        rejected: dict[str, tuple[Any, ...]] = {}
        for name, node in (("big-kubelet", NODE), ("big-hollow", HOLLOW)):
            await h.create(pod(name, node=node,
                               resources={"requests": {"ephemeral-storage": "100Pi"}}))
        for name in ("big-kubelet", "big-hollow"):
            got = await h.wait_pod(name, lambda p: p["status"].get("phase") == "Failed")
            status = got["status"]
            rejected[name] = (status["phase"], status["reason"], status["message"],
                              await _event(h, name, status["reason"]))
        assert rejected["big-hollow"] == rejected["big-kubelet"]
        phase, reason, message, event = rejected["big-hollow"]
        assert phase == "Failed"
        assert reason == "OutOfephemeral-storage"
        assert message.startswith("Pod was rejected: Node didn't have enough resource: "
                                  "ephemeral-storage, requested: ")
        assert event == ("Warning", reason, message.removeprefix("Pod was rejected: "))
        # Deleted, a rejected pod (no worker) leaves nothing in either status manager.
        managers = {"big-kubelet": h.kubelet.status, "big-hollow": nodes.nodes[HOLLOW].status}
        uids = {name: (await h.api.get(resource_path("pods", "default", name)))["metadata"]
                ["uid"] for name in managers}
        assert all(managers[name].get(uids[name]) is not None for name in managers)
        for name in managers:
            await h.api.delete(resource_path("pods", "default", name))
        await wait_until(lambda: all(managers[name].get(uids[name]) is None
                                     for name in managers))

        # /dynamic changes: one that does not fit, then one that does.
        for name, node in (("w-kubelet", NODE), ("w-hollow", HOLLOW)):
            await h.create(_worker(name, node))
        outcomes: dict[str, list[Any]] = {}
        for name in ("w-kubelet", "w-hollow"):
            await h.wait_pod(name, lambda p: _volume(p, "keep") == "HostMounted" and
                             "running" in container_status(p)["state"])
            dynamic = resource_path("pods", "default", name) + "/dynamic"
            await h.api.patch(dynamic, {"spec": {
                "volumes": [{"name": "keep", "emptyDir": {}},
                            {"name": "huge", "emptyDir": {"sizeLimit": "100Pi"}}],
                "containers": [{"name": "late", "image": "busybox", "volumeMounts": [
                    {"name": "huge", "mountPath": "/huge"}]}]}}, patch_type="strategic")
            pending = await h.wait_pod(name, lambda p: _volume(p, "huge") == "Pending" and
                                       any(s["name"] == "late" for s in
                                           p["status"].get("containerStatuses") or []))
            failed = await _event(h, name, "FailedAllocation")
            current = await h.api.get(dynamic)
            current["spec"]["volumes"] = [{"name": "keep", "emptyDir": {}},
                                          {"name": "extra", "emptyDir": {}}]
            current["spec"]["containers"] = [c for c in current["spec"]["containers"]
                                             if c["name"] != "late"]
            current["spec"]["containers"][0]["volumeMounts"].append(
                {"name": "extra", "mountPath": "/extra"})
            await h.api.update(dynamic, current)
            await h.wait_pod(name, lambda p: _volume(p, "extra") == "HostMounted")
            allocated = await _event(h, name, "SuccessfulAllocation")
            outcomes[name] = [container_status(pending, "late")["state"], failed, allocated]
        assert outcomes["w-hollow"] == outcomes["w-kubelet"]
        assert outcomes["w-hollow"][1][0] == "Warning"
        assert outcomes["w-hollow"][1][2].startswith(
            "Node didn't have enough resource: ephemeral-storage, ")
        assert outcomes["w-hollow"][2][:2] == ("Normal", "SuccessfulAllocation")
        # The kubelet made its pods' directories; the hollow node, whose volumes and logs
        # are never on disk, none (`WorkerSettings.pod_dirs`, off whatever it was given).
        assert FAST.pod_dirs
        uid = (await h.api.get(resource_path("pods", "default", "w-kubelet")))["metadata"]["uid"]
        assert any(path.name == uid for path in tmp_path.rglob("*") if path.is_dir())
        assert not [path for path in (tmp_path / "hollow").rglob("*") if path.is_dir()]


async def test_a_killed_hollow_node_counts_the_restart(tmp_path: Path) -> None:
    """The hollow nodes' process killed (no state written at its stop) and started again is
    a reboot of their nodes: the fake runtime forgot every container, each starts again,
    and its restartCount counts on from the status, as a kubelet's does from its container
    logs after a reboot. (A clean stop is adopted instead: tests/integration/
    test_hollow_nodes.py.)"""
    def running(p: Obj, not_id: str = "") -> bool:
        statuses = p["status"].get("containerStatuses") or []
        return bool(statuses) and "running" in statuses[0].get("state", {}) and \
            statuses[0].get("containerID") != not_id

    async with running_kubelet(tmp_path) as h:
        async with hollow_node(h, tmp_path / "hollow"):
            await h.create(pod("survivor", node=HOLLOW))
            before = container_status(await h.wait_pod("survivor", running))
            assert before["restartCount"] == 0
        # what a SIGKILL leaves: nothing of the runtime (the clean stop's state removed)
        (tmp_path / "hollow" / STATE_FILE).unlink()
        async with hollow_node(h, tmp_path / "hollow"):
            after = container_status(await h.wait_pod(
                "survivor", lambda p: running(p, before["containerID"])))
        assert after["restartCount"] == 1

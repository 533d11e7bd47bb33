"""Live hot-plug actuation on the fake runtime (`kubelet/hotplug.py`; the runtime's live mounts
are tested with real runc and crun in tests/runtime/test_livemount.py): a `NotRequired`
container gets mounts added, changed in place and removed without a restart (same containerID,
restartCount 0), the host side follows (set up before, torn down after), a failing live mount
leaves the container running with a `FailedMount` event and is retried, a restarted kubelet
neither mounts twice nor loses a removal, and with DynamicVolumeHotPlug off the kubelet
restarts the container instead. The swap's path: the containers listed while the change's
checkpoint is written (and that read dropped after a runtime event), no listing after the
live change."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from kubelet_harness import (
    FAST,
    Harness,
    container_status,
    pod,
    running_kubelet,
    slowed,
    wait_until,
)

from ephemera.client import resource_path

Obj = dict[str, Any]
DYNAMIC = resource_path("pods", "default", "w") + "/dynamic"


async def _live_worker(h: Harness) -> Obj:
    body = pod("w", volumes=[{"name": "keep", "emptyDir": {}}])
    main = body["spec"]["containers"][0]
    main["dynamicVolumePolicy"] = {"restartPolicy": "NotRequired"}
    main["volumeMounts"] = [{"name": "keep", "mountPath": "/keep"}]
    body["spec"]["containers"].append({"name": "side", "image": "busybox"})
    await h.create(body)
    return await h.wait_pod("w", lambda p: p["status"].get("phase") == "Running" and all(
        "running" in s["state"] for s in p["status"]["containerStatuses"]))


def _mounts(p: Obj, name: str = "c") -> list[tuple[str, str, bool]]:
    return sorted((m["name"], m["mountPath"], bool(m.get("readOnly")))
                  for m in container_status(p, name).get("volumeMounts") or [])


def _phase(p: Obj, name: str) -> str | None:
    for entry in p["status"].get("volumeStatuses") or []:
        if entry["name"] == name:
            return str(entry.get("hostPhase"))
    return None


async def _change(h: Harness, volumes: list[Obj], mounts: list[Obj]) -> None:
    current = await h.api.get(DYNAMIC)
    current["spec"]["volumes"] = volumes
    current["spec"]["containers"][0]["volumeMounts"] = mounts
    await h.api.update(DYNAMIC, current)


KEEP = {"name": "keep", "emptyDir": {}}
EXTRA = {"name": "extra", "emptyDir": {}}


async def test_mounts_come_and_go_without_a_restart(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        before = await _live_worker(h)
        uid = before["metadata"]["uid"]
        main_id = container_status(before)["containerID"]
        side_id = container_status(before, "side")["containerID"]
        await _change(h, [KEEP, EXTRA], [{"name": "keep", "mountPath": "/keep"},
                                         {"name": "extra", "mountPath": "/extra"}])
        added = await h.wait_pod("w", lambda p: ("extra", "/extra", False) in _mounts(p))
        for name, cid in (("c", main_id), ("side", side_id)):
            status = container_status(added, name)
            assert (status["containerID"], status["restartCount"]) == (cid, 0)
            assert "running" in status["state"]
        assert _phase(added, "extra") == "HostMounted"
        assert ("mount_live", main_id.split("//")[1], "/extra") in h.runtime.calls
        assert not any(call[0] == "stop_container" for call in h.runtime.calls)

        # in place: same path, now read-only (a removal and an addition in one update)
        await _change(h, [KEEP, EXTRA], [{"name": "keep", "mountPath": "/keep"},
                                         {"name": "extra", "mountPath": "/extra",
                                          "readOnly": True}])
        changed = await h.wait_pod("w", lambda p: ("extra", "/extra", True) in _mounts(p))
        assert container_status(changed)["containerID"] == main_id

        # removed: detached in the container, then torn down on the host
        extra_dir = h.root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "extra"
        assert extra_dir.is_dir()
        await _change(h, [KEEP], [{"name": "keep", "mountPath": "/keep"}])
        gone = await h.wait_pod("w", lambda p: _phase(p, "extra") is None
                                and _mounts(p) == [("keep", "/keep", False)])
        assert container_status(gone)["containerID"] == main_id
        assert container_status(gone)["restartCount"] == 0
        await wait_until(lambda: not extra_dir.exists())
        calls = [c for c in h.runtime.calls if c[0] in ("mount_live", "unmount_live")]
        assert calls[-1][0] == "unmount_live" and calls[-1][2] == "/extra"


async def test_a_failing_live_mount_is_reported_and_retried(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        before = await _live_worker(h)
        main_id = container_status(before)["containerID"]
        h.runtime.live_mount_errors["/extra"] = 20  # ENOTDIR: a file at the mount path
        await _change(h, [KEEP, EXTRA], [{"name": "keep", "mountPath": "/keep"},
                                         {"name": "extra", "mountPath": "/extra"}])
        event = await h.wait_event("w", lambda e: e["reason"] == "FailedMount")
        assert event["type"] == "Warning"
        assert event["message"] == (
            'MountVolume.LiveMount failed for volume "extra" : mounting "/extra" in running '
            'container "c": not a directory')
        p = await h.get("w")
        assert p is not None
        status = container_status(p)
        assert (status["containerID"], "running" in status["state"]) == (main_id, True)
        assert ("extra", "/extra", False) not in _mounts(p)
        del h.runtime.live_mount_errors["/extra"]  # fixed: the back-off retry mounts it
        fixed = await h.wait_pod("w", lambda p: ("extra", "/extra", False) in _mounts(p))
        assert container_status(fixed)["containerID"] == main_id
        attempts = [c for c in h.runtime.calls if c[0] == "mount_live" and c[2] == "/extra"]
        assert len(attempts) >= 2


async def test_a_read_only_root_takes_live_mounts_only_where_the_directory_exists(
        tmp_path: Path) -> None:
    """readOnlyRootFilesystem reaches the runtime; a live mount where the directory cannot be
    made fails with the usual FailedMount event and is retried; one at a directory of the
    image works (the fake runtime's model of a read-only root)."""
    async with running_kubelet(tmp_path) as h:
        body = pod("w", volumes=[KEEP])
        main = body["spec"]["containers"][0]
        main["dynamicVolumePolicy"] = {"restartPolicy": "NotRequired"}
        main["volumeMounts"] = [{"name": "keep", "mountPath": "/keep"}]
        main["securityContext"] = {"readOnlyRootFilesystem": True}
        await h.create(body)
        before = await h.wait_pod("w", lambda p: p["status"].get("phase") == "Running")
        main_id = container_status(before)["containerID"]
        assert next(c for c in h.runtime.containers.values() if c.name == "c").read_only_root
        await _change(h, [KEEP, EXTRA], [{"name": "keep", "mountPath": "/keep"},
                                         {"name": "extra", "mountPath": "/extra"}])
        event = await h.wait_event("w", lambda e: e["reason"] == "FailedMount")
        assert (event["type"], event["message"]) == ("Warning", (
            'MountVolume.LiveMount failed for volume "extra" : mounting "/extra" in running '
            'container "c": read-only file system'))
        await wait_until(lambda: len([c for c in h.runtime.calls
                                      if c[0] == "mount_live" and c[2] == "/extra"]) >= 2)
        p = await h.get("w")
        assert p is not None and ("extra", "/extra", False) not in _mounts(p)
        assert container_status(p)["containerID"] == main_id
        await _change(h, [KEEP, EXTRA], [{"name": "keep", "mountPath": "/keep"},
                                         {"name": "extra", "mountPath": "/tmp"}])
        moved = await h.wait_pod("w", lambda p: ("extra", "/tmp", False) in _mounts(p))
        assert (container_status(moved)["containerID"],
                container_status(moved)["restartCount"]) == (main_id, 0)


async def test_a_restarted_kubelet_keeps_live_mounts(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        before = await _live_worker(h)
        main_id = container_status(before)["containerID"]
        await _change(h, [KEEP, EXTRA], [{"name": "keep", "mountPath": "/keep"},
                                         {"name": "extra", "mountPath": "/extra"}])
        await h.wait_pod("w", lambda p: ("extra", "/extra", False) in _mounts(p))
        await h.restart()
        await wait_until(lambda: h.kubelet.workers.get(before["metadata"]["uid"]) is not None)
        await _change(h, [KEEP], [{"name": "keep", "mountPath": "/keep"}])
        gone = await h.wait_pod("w", lambda p: _phase(p, "extra") is None
                                and _mounts(p) == [("keep", "/keep", False)])
        assert container_status(gone)["containerID"] == main_id
        assert [c[0] for c in h.runtime.calls if c[0].endswith("mount_live")] == \
            ["unmount_live"]  # the new kubelet mounted nothing again


async def test_gate_off_restarts_a_not_required_container(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path, dataclasses.replace(FAST, hot_plug=False)) as h:
        before = await _live_worker(h)
        main_id = container_status(before)["containerID"]
        await _change(h, [KEEP, EXTRA], [{"name": "keep", "mountPath": "/keep"},
                                         {"name": "extra", "mountPath": "/extra"}])
        after = await h.wait_pod("w", lambda p: ("extra", "/extra", False) in _mounts(p)
                                 and "running" in container_status(p)["state"]
                                 and container_status(p)["containerID"] != main_id)
        assert container_status(after, "side")["restartCount"] == 0
        assert not any(c[0] == "mount_live" for c in h.runtime.calls)


async def test_a_container_restarted_for_another_reason_gets_its_mounts_from_its_config(
        tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        before = await _live_worker(h)
        await _change(h, [KEEP, EXTRA], [{"name": "keep", "mountPath": "/keep"},
                                         {"name": "extra", "mountPath": "/extra"}])
        added = await h.wait_pod("w", lambda p: ("extra", "/extra", False) in _mounts(p))
        cid = container_status(added)["containerID"]
        assert cid == container_status(before)["containerID"]
        await h.runtime.stop_container(cid.split("//")[1], 0)  # it crashes
        after = await h.wait_pod("w", lambda p: container_status(p)["restartCount"] == 1
                                 and "running" in container_status(p)["state"])
        assert _mounts(after) == [("extra", "/extra", False), ("keep", "/keep", False)]
        new_id = container_status(after)["containerID"].split("//")[1]
        created = await h.runtime.container_status(new_id)
        assert {m.container_path for m in created.mounts} == {"/keep", "/extra"}
        assert not any(c[0] == "mount_live" and c[1] == new_id for c in h.runtime.calls)


async def test_a_live_swap_is_one_status_write_when_allocated_during_a_sync(
        tmp_path: Path) -> None:
    """Issue 12 item 5: the worker's sync that the pod's update starts sees the change not
    allocated yet; when the allocation lands while that sync runs, its status is not written
    on its own: the next sync's (the new mount attached) is the swap's one write, and a second
    one prunes the old volume once torn down."""
    async with running_kubelet(tmp_path) as h:
        before = await _live_worker(h)
        uid, main_id = before["metadata"]["uid"], container_status(before)["containerID"]
        await wait_until(h.kubelet.status.is_settled)
        # the allocation's checkpoint lands while the sync lists the containers
        slowed(h.kubelet.runtime, "list_containers", 0.05)
        writes = h.kubelet.status.writes
        await _change(h, [EXTRA], [{"name": "extra", "mountPath": "/keep"}])
        swapped = await h.wait_pod("w", lambda p: _mounts(p) == [("extra", "/keep", False)])
        assert container_status(swapped)["containerID"] == main_id
        await wait_until(lambda: [v["name"] for v in (h.kubelet.status.get(uid) or {})
                                  .get("volumeStatuses") or []] == ["extra"])
        await wait_until(h.kubelet.status.is_settled)
        assert h.kubelet.status.writes - writes == 2


async def test_a_live_change_s_status_needs_no_listing_after_it(tmp_path: Path) -> None:
    """The sync that changes mounts live publishes the container's new mounts without
    listing the containers again (as the runtime recorded them), and the old volume's
    teardown still follows at once (the worker's in-use view knows it is unmounted)."""
    async with running_kubelet(tmp_path) as h:
        before = await _live_worker(h)
        uid, main_id = before["metadata"]["uid"], container_status(before)["containerID"]
        await wait_until(h.kubelet.status.is_settled)
        timeline: list[str] = []
        runtime, status = h.runtime, h.kubelet.status
        list_containers, change_live = runtime.list_containers, runtime.change_live
        set_pod_status = status.set_pod_status

        async def listing(*args: Any) -> Any:
            timeline.append("list")
            return await list_containers(*args)

        async def changing(*args: Any) -> Any:
            errors = await change_live(*args)
            timeline.append("change")
            return errors

        def publishing(pod: Obj, new: Obj) -> None:
            mounts = [m["name"] for c in new.get("containerStatuses") or []
                      if c["name"] == "c" for m in c.get("volumeMounts") or []]
            if mounts == ["extra"] and "published" not in timeline:
                timeline.append("published")
            set_pod_status(pod, new)

        runtime.list_containers = listing  # type: ignore[method-assign]
        runtime.change_live = changing  # type: ignore[method-assign]
        status.set_pod_status = publishing  # type: ignore[method-assign]
        await _change(h, [EXTRA], [{"name": "extra", "mountPath": "/keep"}])
        swapped = await h.wait_pod("w", lambda p: _mounts(p) == [("extra", "/keep", False)])
        assert container_status(swapped)["containerID"] == main_id
        changed = timeline.index("change")
        assert timeline[changed:changed + 2] == ["change", "published"]
        recorded = await runtime.container_status(main_id.split("//")[1])
        assert [(m.volume_name, m.container_path) for m in recorded.mounts
                if m.volume_name] == [("extra", "/keep")]
        await wait_until(lambda: [v["name"] for v in (status.get(uid) or {})
                                  .get("volumeStatuses") or []] == ["extra"])


async def test_a_changes_new_volume_is_set_up_while_its_checkpoint_is_written(
        tmp_path: Path) -> None:
    """The kubelet's wiring of the early set-up: while the change's checkpoint write is held,
    its new emptyDir is mounted on the host already (the allocation manager's
    `staged_change`), not yet in the container nor in `volumeStatuses`; once written it is
    mounted live."""
    async with running_kubelet(tmp_path) as h:
        before = await _live_worker(h)
        uid = before["metadata"]["uid"]
        checkpoint = h.kubelet.allocation.checkpoint
        store = checkpoint.store_async
        release = asyncio.Event()

        async def held(pods: Any) -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), 10)
            await store(pods)

        checkpoint.store_async = held  # type: ignore[method-assign]
        try:
            await _change(h, [KEEP, EXTRA], [{"name": "keep", "mountPath": "/keep"},
                                             {"name": "extra", "mountPath": "/extra"}])
            await wait_until(lambda: h.kubelet.allocation.staged_change(uid) is not None)
            await wait_until(lambda: h.kubelet.volumes.is_volume_mounted(uid, "extra"))
            assert ("extra", "/extra", False) not in _mounts(await h.api.get(
                resource_path("pods", "default", "w")))
            assert [v["name"] for v in h.kubelet.volumes.volume_statuses(uid)] == ["keep"]
        finally:
            release.set()
        await h.wait_pod("w", lambda p: ("extra", "/extra", False) in _mounts(p))
        assert h.kubelet.allocation.staged_change(uid) is None



async def test_a_live_swap_s_listing_is_read_while_its_checkpoint_is_written(
        tmp_path: Path) -> None:
    """The pod's containers are listed while the change's checkpoint is written (nothing
    is actuated before it is on disk: the live change comes after), and the swap ends
    right."""
    async with running_kubelet(tmp_path) as h:
        before = await _live_worker(h)
        main_id = container_status(before)["containerID"]
        await wait_until(h.kubelet.status.is_settled)
        timeline: list[str] = []
        runtime, checkpoint = h.runtime, h.kubelet.allocation.checkpoint
        list_containers, change_live, store = runtime.list_containers, runtime.change_live, \
            checkpoint.store_async
        release = asyncio.Event()

        async def listing(*args: Any) -> Any:
            if args and args[0]:  # the worker's listing of its sandbox (not the relister's)
                timeline.append("list")
            return await list_containers(*args)

        async def changing(*args: Any) -> Any:
            timeline.append("change")
            return await change_live(*args)

        async def held(pods: Any) -> None:
            timeline.append("checkpoint")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), 10)
            timeline.append("written")
            await store(pods)

        runtime.list_containers = listing  # type: ignore[method-assign]
        runtime.change_live = changing  # type: ignore[method-assign]
        checkpoint.store_async = held  # type: ignore[method-assign]
        try:
            await _change(h, [EXTRA], [{"name": "extra", "mountPath": "/keep"}])
            await wait_until(lambda: "list" in timeline[timeline.index("checkpoint"):]
                             if "checkpoint" in timeline else False)
            assert "change" not in timeline
        finally:
            release.set()
        swapped = await h.wait_pod("w", lambda p: _mounts(p) == [("extra", "/keep", False)])
        assert container_status(swapped)["containerID"] == main_id
        assert timeline.index("written") < timeline.index("change")


async def test_a_listing_read_ahead_is_used_only_while_nothing_has_happened_since(
        tmp_path: Path) -> None:
    """`PodWorker.prefetch_listing` reads the sandbox and containers between syncs; the next
    sync's listing is that read (no runtime call) unless a runtime or probe event for the pod
    (`PodWorkers.runtime_changed`) came after it began (a volume event does not count); none
    is read during a sync."""
    async with running_kubelet(tmp_path) as h:
        before = await _live_worker(h)
        uid, main_id = before["metadata"]["uid"], container_status(before)["containerID"]
        await wait_until(lambda: h.kubelet.status.is_settled() and h.kubelet.workers.is_idle())
        on_changed = h.kubelet.relister.on_changed
        h.kubelet.relister.on_changed = lambda uid: None  # only the test's own events
        worker = h.kubelet.workers.get(uid)
        assert worker is not None
        runtime = h.runtime
        reads: list[str] = []
        list_containers = runtime.list_containers

        async def listing(*args: Any) -> Any:
            if args and args[0]:
                reads.append(args[0])
            return await list_containers(*args)

        runtime.list_containers = listing  # type: ignore[method-assign]
        worker.prefetch_listing()
        sandbox, instances = await worker._listing()
        assert len(reads) == 1 and sandbox is not None and sandbox.ready
        assert [c.id for c in instances["c"]] == [main_id.split("//")[1]]
        worker.prefetch_listing()
        assert worker._prefetched is not None
        await worker._prefetched[1]
        worker.runtime_events += 1  # as `PodWorkers.runtime_changed` counts an event
        await worker._listing()
        assert len(reads) == 3  # read ahead, then read again
        worker.syncing = True
        worker.prefetch_listing()
        worker.syncing = False
        await worker._listing()
        assert len(reads) == 4  # nothing read ahead during a sync
        # The relister's and the probes' events count; a volume event changes no container.
        events = worker.runtime_events
        h.kubelet.workers.wake(uid)
        assert worker.runtime_events == events
        on_changed(uid)
        assert worker.runtime_events == events + 1

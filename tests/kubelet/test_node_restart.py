"""The pieces of a node restart (issue 11, item 1): the node shutdown (containers stopped and
forgotten, everything under `pods/` unmounted, the disk kept), the restart count read from a
container's log directory (upstream's `calcRestartCountByLogDir`), and the status of a
container the runtime no longer has (upstream's `convertToAPIContainerStatuses`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ephemera.kubelet.nodeshutdown import shut_down_node
from ephemera.kubelet.podutil import restart_count_from_log_dir
from ephemera.kubelet.runtime.base import ContainerConfig, ContainerState, SandboxConfig
from ephemera.kubelet.runtime.fake import FakeRuntime
from ephemera.kubelet.status import PodRuntimeView, generate_pod_status
from ephemera.kubelet.volumes import mounts

NOW = "2026-01-01T00:00:00Z"
UNKNOWN = {"terminated": {
    "exitCode": 137, "reason": "ContainerStatusUnknown",
    "message": "The container could not be located when the pod was deleted.  The container "
               "used to be Running"}}


# --- the restart count from the log directory ---------------------------------------------


def test_restart_count_is_one_past_the_newest_log_file(tmp_path: Path) -> None:
    assert restart_count_from_log_dir(tmp_path / "missing") == 0
    assert restart_count_from_log_dir(tmp_path) == 0
    for name in ("0.log", "3.log", "2.log.20260101-000000.gz", "notes.txt", "x4.log"):
        (tmp_path / name).write_text("")
    (tmp_path / "9.log").mkdir()  # a directory does not count
    assert restart_count_from_log_dir(tmp_path) == 4
    (tmp_path / "7.log.1").write_text("")  # a rotated file counts
    assert restart_count_from_log_dir(tmp_path) == 8


# --- the status of a container the runtime forgot ------------------------------------------


def pod(deleting: bool = False) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "u1"}
    if deleting:
        md["deletionTimestamp"] = NOW
    return {"metadata": md, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def old_status(state: dict[str, Any], restarts: int = 2,
               last: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"phase": "Running", "containerStatuses": [
        {"name": "c", "image": "busybox", "imageID": "sha256:abc", "ready": True,
         "restartCount": restarts, "started": True, "state": state,
         "lastState": last or {}, "containerID": "crun://old"}]}


def status_without_instances(old: dict[str, Any], deleting: bool = False,
                             waiting: dict[str, tuple[str, str]] | None = None
                             ) -> dict[str, Any]:
    view = PodRuntimeView(sandbox=None, runtime_name="crun", waiting=waiting or {})
    status = generate_pod_status(pod(deleting), view, host_ip="127.0.0.1", old_status=old,
                                 now=NOW)
    return dict(status["containerStatuses"][0])


def test_a_forgotten_running_container_counts_as_terminated_and_restarted() -> None:
    got = status_without_instances(old_status({"running": {"startedAt": NOW}}))
    assert got["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert got["lastState"] == UNKNOWN
    assert got["restartCount"] == 3
    assert got["ready"] is False and "containerID" not in got


def test_a_pod_being_deleted_does_not_count_a_restart() -> None:
    got = status_without_instances(old_status({"running": {"startedAt": NOW}}), deleting=True)
    assert got["lastState"] == UNKNOWN
    assert got["restartCount"] == 2


def test_a_known_termination_is_kept() -> None:
    last = {"terminated": {"exitCode": 1, "reason": "Error"}}
    got = status_without_instances(old_status({"waiting": {"reason": "CrashLoopBackOff"}},
                                              last=last))
    assert got["lastState"] == last
    assert got["restartCount"] == 2
    terminated = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    kept = status_without_instances(old_status(terminated))
    assert kept["state"] == terminated
    assert kept["restartCount"] == 2
    # Waiting to be started again: the termination moves to lastState.
    again = status_without_instances(old_status(terminated),
                                     waiting={"c": ("CrashLoopBackOff", "back-off 10s")})
    assert again["state"] == {"waiting": {"reason": "CrashLoopBackOff",
                                          "message": "back-off 10s"}}
    assert again["lastState"] == terminated


def test_a_container_never_seen_waits_with_no_history() -> None:
    got = status_without_instances({})
    assert got["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert got["lastState"] == {}
    assert got["restartCount"] == 0


# --- the node shutdown -----------------------------------------------------------------------


async def test_shutdown_stops_and_forgets_containers_and_unmounts_but_keeps_the_disk(
        tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    sandbox = await runtime.run_pod_sandbox(SandboxConfig("u1", "ns", "p", "p"))
    cid = await runtime.create_container(
        sandbox, ContainerConfig(name="c", attempt=0, image="busybox", image_id="sha256:abc",
                                 rootfs_layers=(), argv=("sleep", "1000")),
        SandboxConfig("u1", "ns", "p", "p"))
    await runtime.start_container(cid)
    volumes = tmp_path / "pods" / "u1" / "volumes"
    disk = volumes / "kubernetes.io~empty-dir" / "disk"
    memory = volumes / "kubernetes.io~empty-dir" / "mem"
    disk.mkdir(parents=True)
    memory.mkdir(parents=True)
    (disk / "file").write_text("kept")
    mounts.mount_tmpfs(memory, 1 << 20)
    try:
        (memory / "file").write_text("lost")
        await shut_down_node(runtime, tmp_path, grace=1)
        assert await runtime.list_containers() == []
        assert await runtime.list_pod_sandboxes() == []
        assert mounts.mountpoints_under(tmp_path / "pods") == []
        assert (disk / "file").read_text() == "kept"
        assert memory.is_dir() and os.listdir(memory) == []  # the tmpfs went with its data
    finally:
        mounts.unmount_all_under(tmp_path)
    # Stopped with the grace period first (SIGTERM), then removed with its sandbox.
    assert ("stop_container", cid, "1") in runtime.calls
    assert ("remove_pod_sandbox", sandbox) in runtime.calls


async def test_shutdown_leaves_exited_containers_unsignalled(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    config = SandboxConfig("u1", "ns", "p", "p")
    sandbox = await runtime.run_pod_sandbox(config)
    cid = await runtime.create_container(
        sandbox, ContainerConfig(name="c", attempt=0, image="busybox", image_id="sha256:abc",
                                 rootfs_layers=(), argv=("true",)), config)
    await runtime.start_container(cid)
    await runtime.stop_container(cid, 0)
    assert (await runtime.container_status(cid)).state == ContainerState.EXITED
    runtime.calls.clear()
    await shut_down_node(runtime, tmp_path, grace=1)
    assert not any(call[0] == "stop_container" and call[2] == "1" for call in runtime.calls)
    assert await runtime.list_containers() == []

"""The fake runtime: same interface as the OCI backend, no processes; argv-driven exit
behaviour, CRI log lines for echo, exec/attach sessions and adoption through its state file."""

from __future__ import annotations

import dataclasses
import errno
import uuid
from pathlib import Path

import pytest

from ephemera.kubelet.images.base import DIRECTORIES
from ephemera.kubelet.runtime import make_runtime
from ephemera.kubelet.runtime.base import (
    ContainerConfig,
    ContainerState,
    LiveMountError,
    Mount,
    NotFoundError,
    RuntimeError_,
    SandboxConfig,
)
from ephemera.kubelet.runtime.fake import IMAGE_DIRS, FakeRuntime


def sandbox() -> SandboxConfig:
    return SandboxConfig(pod_uid=str(uuid.uuid4()), namespace="ns", name="pod", hostname="pod")


def config(name: str, *argv: str, attempt: int = 0, log_path: Path | None = None,
           env: tuple[tuple[str, str], ...] = ()) -> ContainerConfig:
    return ContainerConfig(name=name, attempt=attempt, image="busybox", image_id="sha256:1",
                           rootfs_layers=(), argv=argv, env=env, log_path=log_path)


async def start(runtime: FakeRuntime, cfg: ContainerConfig) -> tuple[str, str]:
    pod = sandbox()
    sandbox_id = await runtime.run_pod_sandbox(pod)
    container_id = await runtime.create_container(sandbox_id, cfg, pod)
    await runtime.start_container(container_id)
    return sandbox_id, container_id


async def test_exit_behaviours(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    expectations = {("exit", "0"): (0, "Completed"), ("exit", "3"): (3, "Error"),
                    ("oom",): (137, "OOMKilled")}
    for argv, (code, reason) in expectations.items():
        _, container_id = await start(runtime, config("c", *argv))
        status = await runtime.container_status(container_id)
        assert (status.state, status.exit_code, status.reason) == (ContainerState.EXITED, code,
                                                                   reason)
    _, container_id = await start(runtime, config("c", "sleep", "0"))
    assert (await runtime.container_status(container_id)).reason == "Completed"


async def test_runs_until_stopped(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    sandbox_id, container_id = await start(runtime, config("c", "/server"))
    assert (await runtime.container_status(container_id)).state == ContainerState.RUNNING
    await runtime.stop_container(container_id, 30)
    status = await runtime.container_status(container_id)
    assert (status.state, status.exit_code, status.reason) == (ContainerState.EXITED, 143,
                                                               "Error")
    _, other = await start(runtime, config("d", "/server"))
    await runtime.stop_container(other, 0)
    assert (await runtime.container_status(other)).exit_code == 137
    await runtime.remove_pod_sandbox(sandbox_id)
    with pytest.raises(NotFoundError):
        await runtime.container_status(container_id)


async def test_ignore_term_waits_for_the_grace_period(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    _, container_id = await start(runtime, config("c", "ignore-term"))
    await runtime.stop_container(container_id, 0.05)
    assert (await runtime.container_status(container_id)).exit_code == 137


async def test_start_failure(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    pod = sandbox()
    sandbox_id = await runtime.run_pod_sandbox(pod)
    container_id = await runtime.create_container(
        sandbox_id, config("c", "fail-start", "exec: not found"), pod)
    with pytest.raises(RuntimeError_, match="not found"):
        await runtime.start_container(container_id)
    status = await runtime.container_status(container_id)
    assert (status.exit_code, status.reason, status.message) == (128, "StartError",
                                                                 "exec: not found")


async def test_echo_writes_cri_log_lines(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    log = tmp_path / "logs" / "c" / "0.log"
    await start(runtime, config("c", "echo", "hello", "world", log_path=log))
    [line] = log.read_text().splitlines()
    stamp, stream, tag, text = line.split(" ", 3)
    assert (stream, tag, text) == ("stdout", "F", "hello world")
    assert stamp.endswith("Z") and "T" in stamp


async def test_sandbox_idempotent_and_name_attempt_unique(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    pod = sandbox()
    sandbox_id = await runtime.run_pod_sandbox(pod)
    assert await runtime.run_pod_sandbox(pod) == sandbox_id
    await runtime.create_container(sandbox_id, config("c", "x"), pod)
    with pytest.raises(RuntimeError_, match="already exists"):
        await runtime.create_container(sandbox_id, config("c", "x"), pod)
    await runtime.create_container(sandbox_id, config("c", "x", attempt=1), pod)
    assert [s.attempt for s in await runtime.list_containers(sandbox_id)] == [0, 1]
    assert await runtime.pod_sandbox_status(sandbox_id) == (
        await runtime.list_pod_sandboxes())[0]
    await runtime.stop_pod_sandbox(sandbox_id)
    [status] = await runtime.list_pod_sandboxes()
    assert not status.ready
    assert await runtime.pod_sandbox_status(sandbox_id) == status  # by id, as listed
    assert await runtime.pod_sandbox_status("no-such-sandbox") is None
    with pytest.raises(RuntimeError_, match="not ready"):
        await runtime.create_container(sandbox_id, config("d", "x"), pod)
    assert await runtime.run_pod_sandbox(pod) != sandbox_id  # a new sandbox after a stop


async def test_exec_and_attach(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    _, container_id = await start(runtime, config("c", "/server", env=(("A", "1"),)))
    result = await runtime.exec_sync(container_id, ["echo", "hi"])
    assert (result.exit_code, result.stdout) == (0, b"hi\n")
    assert (await runtime.exec_sync(container_id, ["exit", "4"])).exit_code == 4
    assert (await runtime.exec_sync(container_id, ["env"])).stdout == b"A=1\n"
    session = await runtime.exec(container_id, ["cat"], tty=False, stdin=True)
    await session.write_stdin(b"data")
    await session.write_stdin(b"")
    assert b"".join([chunk async for chunk in session.stdout]) == b"data"
    assert await session.wait() == 0
    attach = await runtime.attach(container_id)
    await attach.write_stdin(b"x")
    assert await anext(attach.stdout) == b"x"
    await attach.close()
    assert ("exec_sync", container_id, "echo", "hi") in runtime.calls


async def test_a_new_instance_on_the_same_root_adopts_the_state(tmp_path: Path) -> None:
    runtime = make_runtime("fake", tmp_path, "node-1")
    assert isinstance(runtime, FakeRuntime)
    sandbox_id, container_id = await start(runtime, config("c", "/server"))
    restarted = FakeRuntime(tmp_path, "node-1")
    [status] = await restarted.list_containers()
    assert (status.id, status.state) == (container_id, ContainerState.RUNNING)
    assert [s.id for s in await restarted.list_pod_sandboxes()] == [sandbox_id]
    assert await FakeRuntime(tmp_path / "elsewhere").list_containers() == []
    assert await FakeRuntime(None).list_containers() == []


async def test_custom_behaviour(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path, persist=False,
                          behaviour=lambda argv: ("exit", 42, "") if argv == ("x",) else None)
    _, container_id = await start(runtime, config("c", "x"))
    assert (await runtime.container_status(container_id)).exit_code == 42
    assert not (tmp_path / "runtime" / "fake-state.json").exists()


async def test_memory_stats_model_use_memory(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    pod = sandbox()
    sandbox_id = await runtime.run_pod_sandbox(pod)
    ids = []
    for cfg in (config("hog", "use-memory", "300Mi"), config("idle", "/server"),
                config("done", "use-memory", "1Gi")):
        ids.append(await runtime.create_container(sandbox_id, cfg, pod))
        await runtime.start_container(ids[-1])
    await runtime.stop_container(ids[2], 0)  # a stopped container uses no memory
    snapshot = await runtime.memory_stats()
    assert snapshot is not None
    usage = snapshot.by_pod[pod.pod_uid]
    assert {name: u.working_set_bytes for name, u in usage.containers.items()} == {
        "hog": 300 * 1024 * 1024, "idle": 0}
    assert usage.pod is not None and usage.pod.working_set_bytes == 300 * 1024 * 1024
    assert snapshot.pods is not None and snapshot.pods.working_set_bytes == 300 * 1024 * 1024
    assert snapshot.node == snapshot.pods  # the modelled machine runs nothing else
    assert await runtime.process_counts() == {pod.pod_uid: 2}  # one task per running one


async def test_live_mounts_are_modelled(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    _, container_id = await start(runtime, config("app", "run"))
    await runtime.mount_live(container_id, Mount("/data", "/host/a", volume_name="a"))
    await runtime.mount_live(container_id, Mount("/data/", "/host/b", volume_name="b"))
    status = await runtime.container_status(container_id)
    assert status.mounts == (Mount("/data/", "/host/b", volume_name="b"),)
    runtime.live_mount_errors["/bad"] = 20
    with pytest.raises(LiveMountError) as caught:
        await runtime.mount_live(container_id, Mount("/bad", "/host/c"))
    assert (str(caught.value), caught.value.errno) == (
        'mounting "/bad" in running container "app": not a directory', 20)
    await runtime.unmount_live(container_id, "/data")
    adopted = FakeRuntime(tmp_path)
    assert (await adopted.container_status(container_id)).mounts == ()
    await adopted.stop_container(container_id, 0)
    with pytest.raises(LiveMountError, match="the container is not running"):
        await adopted.mount_live(container_id, Mount("/x", "/host/x"))


def test_the_fake_images_have_the_base_images_directories() -> None:
    assert {f"/{path}" for path, _ in DIRECTORIES} == IMAGE_DIRS


async def test_a_read_only_root_is_modelled_for_live_mounts(tmp_path: Path) -> None:
    """With a read-only root a live mount works at a directory that exists (the image's, a
    start-time mount's target) or below a writable mount, and fails with EROFS elsewhere
    (naming the first missing directory, as the real runtime does)."""
    cfg = dataclasses.replace(config("app", "run"), read_only_root=True, mounts=(
        Mount("/data/rw", "/host/rw"), Mount("/cfg", "/host/cfg", read_only=True)))
    runtime = FakeRuntime(tmp_path)
    _, container_id = await start(runtime, cfg)
    for target, cause in (("/live", "read-only file system"),
                          ("/var/lib/x", "/var/lib: read-only file system"),
                          ("/cfg/x", "read-only file system")):
        with pytest.raises(LiveMountError) as caught:
            await runtime.mount_live(container_id, Mount(target, "/host/v"))
        assert (str(caught.value), caught.value.errno) == (
            f'mounting "{target}" in running container "app": {cause}', errno.EROFS)
    assert len((await runtime.container_status(container_id)).mounts) == 2
    for target in ("/tmp", "/data", "/data/rw/sub", "/cfg"):
        await runtime.mount_live(container_id, Mount(target, "/h"))
    adopted = FakeRuntime(tmp_path)  # the record survives an adoption
    await adopted.unmount_live(container_id, "/tmp")
    await adopted.mount_live(container_id, Mount("/tmp", "/h2"))
    with pytest.raises(LiveMountError, match="read-only file system"):
        await adopted.mount_live(container_id, Mount("/other", "/h"))
    writable = FakeRuntime(tmp_path)
    _, other = await start(writable, config("app", "run"))
    await writable.mount_live(other, Mount("/anywhere/at/all", "/h"))


async def test_sandboxes_take_addresses_from_the_pod_cidr_without_cni(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path)
    before = await runtime.run_pod_sandbox(SandboxConfig("u0", "ns", "early", "early"))
    await runtime.update_runtime_config("10.244.7.0/24")
    a = await runtime.run_pod_sandbox(SandboxConfig("u1", "ns", "a", "a"))
    b = await runtime.run_pod_sandbox(SandboxConfig("u2", "ns", "b", "b"))
    host = await runtime.run_pod_sandbox(SandboxConfig("u3", "ns", "h", "h", host_network=True))
    ips = {s.id: s.ip for s in await runtime.list_pod_sandboxes()}
    assert ips[before] == ""  # made before the node had a pod CIDR
    assert (ips[a], ips[b]) == ("10.244.7.2", "10.244.7.3")  # .1 is the gateway
    assert ips[host] == ""  # the kubelet reports the node's address for host-network pods
    await runtime.remove_pod_sandbox(a)
    c = await runtime.run_pod_sandbox(SandboxConfig("u4", "ns", "c", "c"))
    assert {s.id: s.ip for s in await runtime.list_pod_sandboxes()}[c] == "10.244.7.2"

"""The pieces a hollow node swaps in (`ephemera.kubelet.hollow`): its fake runtime runs the
hollow command for `pod_lifetime` seconds (or until stopped) and leaves the fake runtime's
own commands alone, keeps no call log; every image is present and runs the hollow command;
the allocation checkpoint lives in memory."""

from __future__ import annotations

from ephemera.kubelet.hollow import (
    HOLLOW_COMMAND,
    HollowImages,
    HollowRuntime,
    MemoryCheckpoint,
)
from ephemera.kubelet.runtime.base import ContainerConfig, ContainerState, SandboxConfig


def test_the_hollow_command_runs_for_the_pod_lifetime() -> None:
    assert HollowRuntime("n", 30.0)._decide(HOLLOW_COMMAND) == ("sleep", 30.0)
    assert HollowRuntime("n", None)._decide(HOLLOW_COMMAND) is None
    assert HollowRuntime("n", 30.0)._decide(("exit", "1")) == ("exit", 1, "")


async def test_a_container_exits_after_its_lifetime_and_no_call_is_kept() -> None:
    runtime = HollowRuntime("n", 0.0)
    sandbox = SandboxConfig(pod_uid="u", namespace="default", name="p", hostname="p",
                            host_network=False, labels={})
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    config = ContainerConfig(name="c", attempt=0, image="busybox", image_id="sha256:x",
                             rootfs_layers=(), argv=HOLLOW_COMMAND, env=(), working_dir="/",
                             mounts=(), log_path=None, tty=False, stdin=False,
                             stdin_once=False, labels={})
    cid = await runtime.create_container(sandbox_id, config, sandbox)
    await runtime.start_container(cid)
    status = await runtime.container_status(cid)
    assert status.state == ContainerState.EXITED and status.exit_code == 0
    assert list(runtime.calls) == []


def test_every_image_is_present_and_runs_the_hollow_command() -> None:
    images = HollowImages()
    image = images.resolve("registry.example/app:1")
    assert image is images.resolve("registry.example/app:1")
    assert image.cmd == HOLLOW_COMMAND and image.id.startswith("sha256:")


def test_the_checkpoint_lives_in_memory() -> None:
    checkpoint = MemoryCheckpoint()
    assert checkpoint.load() == {}
    checkpoint.store({"u": {"metadata": {"uid": "u"}}})
    assert checkpoint.load() == {"u": {"metadata": {"uid": "u"}}}
    checkpoint.remove()
    assert checkpoint.load() == {}

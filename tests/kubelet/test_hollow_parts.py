"""The pieces a hollow node swaps in (`ephemera.kubelet.hollow`): its fake runtime runs the
hollow command for `pod_lifetime` seconds (or until stopped) and leaves the fake runtime's
own commands alone, keeps no call log; every image is present and runs the hollow command;
the allocation checkpoint lives in memory."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

from ephemera.client.api import ApiClient
from ephemera.client.kubeconfig import ClientConfig
from ephemera.kubelet.hollow import (
    HEARTBEAT_TICK,
    HOLLOW_COMMAND,
    HollowConfig,
    HollowImages,
    HollowNodes,
    HollowRuntime,
    MemoryCheckpoint,
    _Gate,
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


async def test_heartbeats_due_within_a_tick_go_at_one_wakeup(tmp_path: Path) -> None:
    """A hundred Leases at random phases of a two-second interval: the fifty or so due in the
    first second are renewed in at most one group a `HEARTBEAT_TICK` (about twenty), not at
    a wakeup each (about fifty)."""
    config = HollowConfig(count=100, root_dir=tmp_path, lease_renew_interval=2.0)
    api = ApiClient(ClientConfig(server="https://127.0.0.1:1"))  # never called here
    nodes = HollowNodes(api, config)
    renewed: list[float] = []

    async def renew(node: object, gate: object) -> None:
        renewed.append(time.monotonic())

    nodes._renew = renew
    stop = asyncio.Event()
    running = asyncio.ensure_future(nodes._heartbeats(
        stop, ("lease",), _Gate(config.heartbeat_qps, config.heartbeat_concurrency)))
    await asyncio.sleep(1.0)
    stop.set()
    await running
    await api.close()
    assert len(renewed) >= 30, len(renewed)
    wakeups = 1 + sum(1 for a, b in itertools.pairwise(renewed) if b - a > 0.001)
    assert HEARTBEAT_TICK == 0.05
    assert wakeups <= 23, wakeups  # 1 s / 50 ms, and the ends


async def test_a_node_relists_only_after_a_change_or_when_an_exit_falls_due(
        tmp_path: Path) -> None:
    """A settled node's relist would list the same runtime again, so the relister skips it;
    a started container makes the next one due, and so does a `sleep` container's exit time
    passing (the container exits as it is listed, and the relist reports the pod)."""
    config = HollowConfig(count=1, root_dir=tmp_path, pod_lifetime=60.0)
    api = ApiClient(ClientConfig(server="https://127.0.0.1:1"))  # never called here
    node = HollowNodes(api, config).nodes["hollow-node-0"]
    changed: list[str] = []
    node.relister.on_changed = changed.append
    now = time.time()
    assert node.relist_due(now)  # never listed
    await node.relist_once()
    assert not node.relist_due(now)

    runtime = node.runtime
    sandbox = SandboxConfig(pod_uid="u", namespace="default", name="p", hostname="p",
                            host_network=False, labels={})
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    config_c = ContainerConfig(name="c", attempt=0, image="busybox", image_id="sha256:x",
                               rootfs_layers=(), argv=HOLLOW_COMMAND, env=(),
                               working_dir="/", mounts=(), log_path=None, tty=False,
                               stdin=False, stdin_once=False, labels={})
    cid = await runtime.create_container(sandbox_id, config_c, sandbox)
    await runtime.start_container(cid)
    assert node.relist_due(time.time())
    await node.relist_once()
    assert changed == ["u"]
    assert not node.relist_due(time.time())

    # Its sixty seconds are up a minute from now: due then, not before.
    assert not node.relist_due(time.time() + 59)
    assert node.relist_due(time.time() + 61)
    runtime.containers[cid].run_until = time.time() - 1  # as if the minute had passed
    runtime._exits = [(runtime.containers[cid].run_until, cid)]
    assert node.relist_due(time.time())
    await node.relist_once()
    assert changed == ["u", "u"]
    assert runtime.containers[cid].state == ContainerState.EXITED.value
    # The exit was a change made while that relist ran: one more relist, which finds
    # nothing new, and then nothing is due.
    assert node.relist_due(time.time())
    await node.relist_once()
    assert changed == ["u", "u"]
    assert not node.relist_due(time.time() + 3600)
    await api.close()

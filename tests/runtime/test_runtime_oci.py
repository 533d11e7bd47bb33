"""The OCI backend with real runc and crun (as root): CRI logs, exit codes and reasons,
graceful stop, shared pod namespaces, hostNetwork, bind mounts, adoption by a new runtime
instance, exec/exec_sync/attach, and removal leaving no mount, state or directory."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import uuid
from pathlib import Path

import pytest
from runtime_testing import (
    container_config,
    host_namespace,
    sandbox_config,
    teardown_runtime,
    wait_exited,
    wait_for_file_text,
)

from ephemera.kubelet.runtime import cgroups, crun_probe, crun_works, make_runtime, select_kind
from ephemera.kubelet.runtime.base import (
    ContainerState,
    ExecTimeoutError,
    Mount,
    NotFoundError,
    RuntimeError_,
)
from ephemera.kubelet.runtime.oci import (
    OciRuntime,
    mounts_under,
    read_kv,
    read_small,
    write_json,
)

CRI_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z) (stdout|stderr) (F|P) (.*)$")


def cri_lines(path: Path) -> list[tuple[str, str, str]]:
    result = []
    for line in path.read_text().splitlines():
        match = CRI_LINE.match(line)
        assert match, f"not a CRI log line: {line!r}"
        result.append((match.group(2), match.group(3), match.group(4)))
    return result


async def run_to_exit(runtime: OciRuntime, layer: Path, script: str, tmp_path: Path,
                      **kwargs: object) -> tuple[str, Path]:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    log = tmp_path / "logs" / f"{uuid.uuid4().hex}.log"
    config = container_config(layer, "main", script, log_path=log, **kwargs)  # type: ignore[arg-type]
    container_id = await runtime.create_container(sandbox_id, config, sandbox)
    await runtime.start_container(container_id)
    await wait_exited(runtime, container_id)
    return container_id, log


async def test_stdout_and_stderr_become_cri_log_lines(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    long_line = "x" * 20000
    container_id, log = await run_to_exit(
        runtime, busybox_layer,
        f"echo hello; echo oops >&2; echo {long_line}; printf unterminated", tmp_path)
    status = await runtime.container_status(container_id)
    assert (status.state, status.exit_code, status.reason) == (ContainerState.EXITED, 0,
                                                               "Completed")
    assert status.created_at <= status.started_at <= status.finished_at
    lines = cri_lines(log)
    assert ("stdout", "F", "hello") in lines
    assert ("stderr", "F", "oops") in lines
    assert ("stdout", "P", "x" * 16384) in lines  # containerd's 16 KiB split
    assert ("stdout", "F", "x" * (20000 - 16384)) in lines
    assert lines[-1] == ("stdout", "P", "unterminated") or ("stdout", "P", "unterminated") in lines


async def test_exit_codes_and_reasons(runtime: OciRuntime, busybox_layer: Path,
                                      tmp_path: Path) -> None:
    container_id, _ = await run_to_exit(runtime, busybox_layer, "exit 3", tmp_path)
    status = await runtime.container_status(container_id)
    assert (status.exit_code, status.reason) == (3, "Error")
    container_id, _ = await run_to_exit(runtime, busybox_layer, "exit 255", tmp_path)
    status = await runtime.container_status(container_id)
    assert (status.exit_code, status.reason) == (255, "Error")


async def test_missing_executable_is_a_start_error(runtime: OciRuntime, busybox_layer: Path,
                                                   tmp_path: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    config = dataclasses.replace(container_config(busybox_layer, "main", ""),
                                 argv=("/no/such/binary",))
    container_id = await runtime.create_container(sandbox_id, config, sandbox)
    with pytest.raises(RuntimeError_, match="/no/such/binary"):
        await runtime.start_container(container_id)
    status = await runtime.container_status(container_id)
    assert (status.state, status.exit_code, status.reason) == (ContainerState.EXITED, 128,
                                                               "StartError")
    assert "/no/such/binary" in status.message


async def test_memory_limit_oom_killed(runtime: OciRuntime, busybox_layer: Path,
                                       tmp_path: Path) -> None:
    container_id, _ = await run_to_exit(
        runtime, busybox_layer, "dd if=/dev/zero of=/dev/null bs=64M count=1", tmp_path,
        memory_limit_bytes=16 * 1024 * 1024)
    status = await runtime.container_status(container_id)
    assert (status.exit_code, status.reason) == (137, "OOMKilled")


async def test_stop_sends_term_then_kill_after_the_grace_period(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    ignores = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "ignores", "trap '' TERM; echo ready; while true; do sleep 0.1; done",
        log_path=tmp_path / "ignores.log"), sandbox)
    handles = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "handles", "trap 'echo got-term; exit 0' TERM; echo ready; "
        "sleep 1000 & wait", log_path=tmp_path / "handles.log"), sandbox)
    for container_id in (ignores, handles):
        await runtime.start_container(container_id)
    await wait_for_file_text(tmp_path / "ignores.log", "ready")
    await wait_for_file_text(tmp_path / "handles.log", "ready")

    await runtime.stop_container(ignores, 0.5)
    status = await runtime.container_status(ignores)
    assert (status.state, status.exit_code, status.reason) == (ContainerState.EXITED, 137,
                                                               "Error")
    await runtime.stop_container(handles, 60)
    status = await runtime.container_status(handles)
    assert (status.state, status.exit_code, status.reason) == (ContainerState.EXITED, 0,
                                                               "Completed")
    assert ("stdout", "F", "got-term") in cri_lines(tmp_path / "handles.log")
    await runtime.stop_container(handles, 1)  # stopping an exited container is a no-op


async def test_pod_containers_share_network_ipc_and_uts(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    sandbox = sandbox_config(name="web-0")
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    assert await runtime.run_pod_sandbox(sandbox) == sandbox_id  # idempotent per pod UID
    server = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "server",
        "echo shared > /dev/shm/token; echo listening; "
        "while true; do echo pong | nc -l -p 8080; done",
        log_path=tmp_path / "server.log"), sandbox)
    client = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "client", "sleep 1000"), sandbox)
    for container_id in (server, client):
        await runtime.start_container(container_id)
    await wait_for_file_text(tmp_path / "server.log", "listening")

    result = await runtime.exec_sync(client, [
        "sh", "-c", "for i in $(seq 100); do nc 127.0.0.1 8080 </dev/null && exit 0; "
        "sleep 0.1; done; exit 1"], timeout=30)
    assert (result.exit_code, result.stdout) == (0, b"pong\n")

    script = "for ns in net ipc uts; do readlink /proc/self/ns/$ns; done; hostname; " \
             "cat /dev/shm/token"
    seen = [await runtime.exec_sync(c, ["sh", "-c", script]) for c in (server, client)]
    assert seen[0].stdout == seen[1].stdout
    net, ipc, uts, hostname, token = seen[0].stdout.decode().split()
    assert (hostname, token) == ("web-0", "shared")
    assert net != host_namespace("net") and ipc != host_namespace("ipc")
    assert uts != host_namespace("uts")
    pids = [await runtime.exec_sync(c, ["readlink", "/proc/self/ns/pid"]) for c in (server,
                                                                                   client)]
    assert pids[0].stdout != pids[1].stdout  # each container has its own PID namespace
    links = await runtime.exec_sync(client, ["ip", "-o", "link"])
    assert [line.split(":")[1].strip() for line in links.stdout.decode().splitlines()] == ["lo"]


async def test_host_network_sees_the_host_interfaces(
        runtime: OciRuntime, busybox_layer: Path) -> None:
    sandbox = sandbox_config(host_network=True)
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    container_id = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "main", "sleep 1000"), sandbox)
    await runtime.start_container(container_id)
    result = await runtime.exec_sync(container_id, ["sh", "-c", "ls /sys/class/net; "
                                                    "readlink /proc/self/ns/net; hostname"])
    *interfaces, net, hostname = result.stdout.decode().split()
    assert sorted(interfaces) == sorted(os.listdir("/sys/class/net"))
    assert net == host_namespace("net")
    assert hostname == os.uname().nodename
    ipc = await runtime.exec_sync(container_id, ["readlink", "/proc/self/ns/ipc"])
    assert ipc.stdout.decode().strip() != host_namespace("ipc")
    [status] = await runtime.list_pod_sandboxes()
    assert status.ready and status.pod_uid == sandbox.pod_uid


async def test_bind_mounts_rw_and_ro(runtime: OciRuntime, busybox_layer: Path,
                                     tmp_path: Path) -> None:
    data, config_dir = tmp_path / "data", tmp_path / "config"
    data.mkdir()
    config_dir.mkdir()
    (config_dir / "setting").write_text("on\n")
    mounts = (Mount("/data", str(data), volume_name="data"),
              Mount("/etc/app", str(config_dir), read_only=True, volume_name="config"))
    container_id, log = await run_to_exit(
        runtime, busybox_layer,
        "cat /etc/app/setting; echo written > /data/out; echo x > /etc/app/new; "
        "echo rc=$?; grep -E ' /(data|etc/app) ' /proc/self/mountinfo", tmp_path,
        mounts=mounts)
    lines = cri_lines(log)
    assert ("stdout", "F", "on") in lines
    # Volumes are nosuid,nodev, as live mounts are (the per-mount options, field 6).
    options = {text.split()[4]: set(text.split()[5].split(",")) for stream, _, text in lines
               if stream == "stdout" and text.count(" ") > 6}
    assert options.keys() == {"/data", "/etc/app"}, lines
    assert options["/data"] >= {"rw", "nosuid", "nodev"}
    assert options["/etc/app"] >= {"ro", "nosuid", "nodev"}
    assert ("stdout", "F", "rc=1") in lines
    assert any(stream == "stderr" and "Read-only file system" in text
               for stream, _, text in lines)
    assert (data / "out").read_text() == "written\n"
    assert not (config_dir / "new").exists()
    status = await runtime.container_status(container_id)
    assert {m.container_path for m in status.mounts} == {"/data", "/etc/app"}


async def test_a_new_runtime_instance_adopts_running_containers(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    container_id = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "main", "trap 'exit 0' TERM; while true; do echo tick; sleep 0.1; done",
        log_path=tmp_path / "main.log"), sandbox)
    await runtime.start_container(container_id)
    before = await runtime.container_status(container_id)
    await runtime.close()

    restarted = OciRuntime(runtime.name, runtime.root, runtime.node_name)
    try:
        [status] = await restarted.list_containers()
        assert (status.id, status.state, status.pid) == (container_id, ContainerState.RUNNING,
                                                         before.pid)
        assert status.started_at == before.started_at
        [sandbox_status] = await restarted.list_pod_sandboxes()
        assert sandbox_status.id == sandbox_id and sandbox_status.ready
        # The log keeps growing (the shim outlives its kubelet), and the new instance can
        # stop it and learns the exit code.
        size = (tmp_path / "main.log").stat().st_size
        await wait_for_file_text(tmp_path / "main.log", "tick")
        while (tmp_path / "main.log").stat().st_size == size:
            await asyncio.sleep(0.05)
        await restarted.stop_container(container_id, 10)
        status = await restarted.container_status(container_id)
        assert (status.state, status.exit_code, status.reason) == (ContainerState.EXITED, 0,
                                                                   "Completed")
    finally:
        await teardown_runtime(restarted)


async def test_exec_sync_output_exit_code_env_and_timeout(
        runtime: OciRuntime, busybox_layer: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    config = dataclasses.replace(container_config(
        busybox_layer, "main", "sleep 1000", env=(("GREETING", "hi there"),)),
        working_dir="/work", uid=1000, gid=1000)
    container_id = await runtime.create_container(sandbox_id, config, sandbox)
    await runtime.start_container(container_id)
    result = await runtime.exec_sync(container_id, ["sh", "-c",
                                                    'echo "$GREETING"; echo err >&2; exit 4'])
    assert (result.exit_code, result.stdout, result.stderr) == (4, b"hi there\n", b"err\n")
    # The container's working directory and user, as for its own process.
    result = await runtime.exec_sync(container_id, ["sh", "-c", "pwd; id -u; id -g"])
    assert result.stdout == b"/work\n1000\n1000\n"
    # A background process holding stdout does not keep exec_sync waiting.
    result = await runtime.exec_sync(container_id, ["sh", "-c", "sleep 60 & echo started"],
                                     timeout=20)
    assert (result.exit_code, result.stdout) == (0, b"started\n")
    with pytest.raises(ExecTimeoutError):
        await runtime.exec_sync(container_id, ["sleep", "30"], timeout=0.3)


def _v1_cgroups(proc_cgroup: str) -> dict[str, str]:
    """The v1 hierarchies of a /proc/PID/cgroup text: controllers → path."""
    return {controllers: path for _, controllers, path in
            (line.split(":", 2) for line in proc_cgroup.splitlines()) if controllers}


async def test_container_and_exec_processes_sit_in_the_container_s_cgroups(
        runtime: OciRuntime, busybox_layer: Path) -> None:
    """The container's init and an exec'd process are in the container's own cgroup in
    every v1 hierarchy (crun: the shim and the exec wrapper move the runtime there through
    each cgroup's `tasks` file; runc places them itself). No cgroup namespace: the
    container sees the host's paths."""
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    config = container_config(busybox_layer, "main", "sleep 1000")
    container_id = await runtime.create_container(sandbox_id, config, sandbox)
    await runtime.start_container(container_id)
    status = await runtime.container_status(container_id)
    assert status.state == ContainerState.RUNNING and status.pid
    init = _v1_cgroups(Path(f"/proc/{status.pid}/cgroup").read_text())
    assert len(init) >= 5 and all(
        path.endswith(f"/pod{sandbox.pod_uid}/{container_id}") for path in init.values()), init
    result = await runtime.exec_sync(container_id, ["cat", "/proc/self/cgroup"])
    assert result.exit_code == 0
    assert _v1_cgroups(result.stdout.decode()) == init


async def test_interactive_exec_with_stdin_and_with_a_tty(
        runtime: OciRuntime, busybox_layer: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    container_id = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "main", "sleep 1000"), sandbox)
    await runtime.start_container(container_id)

    session = await runtime.exec(container_id, ["sh", "-c", "tr a-z A-Z; exit 5"], tty=False,
                                 stdin=True)
    await session.write_stdin(b"hello\n")
    await session.write_stdin(b"")
    output = b"".join([chunk async for chunk in session.stdout])
    assert output == b"HELLO\n"
    assert await session.wait() == 5

    session = await runtime.exec(container_id, ["sh", "-c", "tty; read line; echo got-$line; "
                                                "exit 7"], tty=True, stdin=True)
    await session.resize(100, 30)
    await session.write_stdin(b"abc\r")
    assert session.stderr is None
    output = b"".join([chunk async for chunk in session.stdout])
    assert b"/dev/pts/" in output and b"got-abc" in output
    assert await session.wait() == 7
    await session.close()


async def test_attach_streams_output_and_writes_stdin(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    container_id = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "main", "while read line; do echo echo-$line; done; exit 9",
        stdin=True, log_path=tmp_path / "main.log"), sandbox)
    await runtime.start_container(container_id)
    session = await runtime.attach(container_id)
    await session.write_stdin(b"one\n")
    chunk = await anext(session.stdout)
    assert chunk == b"echo-one\n"
    await session.write_stdin(b"")  # EOF: the loop ends and the container exits
    assert await session.wait() == 9
    await session.close()
    status = await wait_exited(runtime, container_id)
    assert status.exit_code == 9
    assert ("stdout", "F", "echo-one") in cri_lines(tmp_path / "main.log")


async def test_remove_leaves_no_mount_state_or_directory(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    volume = tmp_path / "vol"
    volume.mkdir()
    container_ids = []
    for name in ("a", "b"):
        container_id = await runtime.create_container(sandbox_id, container_config(
            busybox_layer, name, "sleep 1000", mounts=(Mount("/vol", str(volume)),),
            log_path=tmp_path / f"{name}.log"), sandbox)
        await runtime.start_container(container_id)
        container_ids.append(container_id)
    instance = runtime.root / "pods" / sandbox.pod_uid / "containers" / "a" / "0"
    assert (instance / "merged" / "bin" / "busybox").exists()
    assert mounts_under(runtime.root)

    await runtime.remove_container(container_ids[0])
    assert not instance.exists()
    with pytest.raises(NotFoundError):
        await runtime.container_status(container_ids[0])
    await runtime.stop_pod_sandbox(sandbox_id)
    [stopped] = await runtime.list_pod_sandboxes()
    assert not stopped.ready
    await runtime.remove_pod_sandbox(sandbox_id)
    await runtime.remove_pod_sandbox(sandbox_id)  # removing twice is fine

    with open("/proc/self/mountinfo") as f:
        assert str(runtime.root) not in f.read()
    state_dir = runtime.root / "runtime"
    for sub in (f"{runtime.name}-state", "sandboxes", "containers"):
        assert list((state_dir / sub).iterdir()) == []
    assert not (runtime.root / "pods" / sandbox.pod_uid / "containers").exists()
    assert await runtime.list_containers() == []
    assert (tmp_path / "a.log").exists()  # logs are the kubelet's to remove
    pod_cgroups = cgroups.pod_dirs(runtime.node_parent, sandbox.pod_uid)
    assert len(pod_cgroups) >= 2 and not any(map(os.path.exists, pod_cgroups))
    assert not any(os.path.exists(os.path.dirname(d)) for d in pod_cgroups)  # the node's too


async def test_two_roots_never_see_each_other(runtime: OciRuntime, busybox_layer: Path,
                                              tmp_path: Path) -> None:
    other = OciRuntime(runtime.name, tmp_path / "other-root", runtime.node_name)
    try:
        sandbox = sandbox_config()
        sandbox_id = await runtime.run_pod_sandbox(sandbox)
        container_id = await runtime.create_container(sandbox_id, container_config(
            busybox_layer, "main", "sleep 1000"), sandbox)
        await runtime.start_container(container_id)
        assert await other.list_containers() == []
        assert await other.list_pod_sandboxes() == []
        with pytest.raises(NotFoundError):
            await other.container_status(container_id)
        await other.remove_container(container_id)  # unknown there: a no-op
        assert (await runtime.container_status(container_id)).state == ContainerState.RUNNING
    finally:
        await teardown_runtime(other)


async def test_auto_selection(tmp_path: Path, crun_available: bool) -> None:
    expected = "crun" if crun_available else "runc"
    assert select_kind("auto", tmp_path) == expected
    assert crun_works(tmp_path) == crun_available
    runtime = make_runtime("auto", tmp_path / "root", "node-auto")
    try:
        assert runtime.name == expected
        assert re.fullmatch(rf"{expected}://\d+\.\d+\.\d+", await runtime.version())
    finally:
        await runtime.close()
    assert make_runtime("runc", tmp_path / "root", "n").name == "runc"
    assert make_runtime("fake", tmp_path / "root", "n").name == "fake"
    with pytest.raises(ValueError):
        make_runtime("docker", tmp_path / "root", "n")


async def test_tty_container_logs_and_attach(runtime: OciRuntime, busybox_layer: Path,
                                             tmp_path: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    container_id = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "main", "tty; read line; echo got-$line; exit 3", tty=True, stdin=True,
        log_path=tmp_path / "main.log"), sandbox)
    await runtime.start_container(container_id)
    session = await runtime.attach(container_id)
    assert session.stderr is None
    await session.resize(120, 40)
    await session.write_stdin(b"abc\r")
    output = b""
    async for chunk in session.stdout:
        output += chunk
        if b"got-abc" in output:
            break
    assert await session.wait() == 3
    await session.close()
    status = await wait_exited(runtime, container_id)
    assert (status.exit_code, status.reason) == (3, "Error")
    lines = cri_lines(tmp_path / "main.log")
    assert ("stdout", "F", "/dev/pts/0") in lines
    assert ("stdout", "F", "got-abc") in lines


async def test_restart_attempts_in_one_sandbox(runtime: OciRuntime, busybox_layer: Path,
                                               tmp_path: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    ids = []
    for attempt in (0, 1):
        container_id = await runtime.create_container(sandbox_id, container_config(
            busybox_layer, "main", f"echo run-{attempt} >> /data/runs; exit 1",
            attempt=attempt, mounts=(Mount("/data", str(tmp_path)),)), sandbox)
        await runtime.start_container(container_id)
        await wait_exited(runtime, container_id)
        ids.append(container_id)
    with pytest.raises(RuntimeError_, match="already exists"):
        await runtime.create_container(sandbox_id, container_config(
            busybox_layer, "main", "true", attempt=1), sandbox)
    assert (tmp_path / "runs").read_text() == "run-0\nrun-1\n"  # a fresh writable layer each
    statuses = await runtime.list_containers(sandbox_id)
    assert [(s.id, s.attempt, s.exit_code) for s in statuses] == [(ids[0], 0, 1),
                                                                 (ids[1], 1, 1)]
    with pytest.raises(RuntimeError_, match="already started"):
        await runtime.start_container(ids[0])


async def test_a_dead_shim_leaves_the_container_running_and_stoppable(
        runtime: OciRuntime, busybox_layer: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    container_id = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "main", "sleep 1000"), sandbox)
    await runtime.start_container(container_id)
    instance = runtime.root / "pods" / sandbox.pod_uid / "containers" / "main" / "0"
    started = dict(line.split("=", 1) for line in (instance / "started").read_text().split())
    os.kill(int(started["shim_pid"]), 9)
    status = await runtime.container_status(container_id)
    assert (status.state, status.pid) == (ContainerState.RUNNING, int(started["pid"]))
    await runtime.stop_container(container_id, 0)
    status = await runtime.container_status(container_id)
    assert (status.state, status.exit_code, status.reason) == (ContainerState.EXITED, 255,
                                                               "Error")
    assert "shim" in status.message


async def test_starts_survive_a_dead_fork_server(runtime: OciRuntime,
                                                 busybox_layer: Path) -> None:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    first = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "first", "sleep 1000"), sandbox)
    await runtime.start_container(first)
    server = runtime._shim_server.process
    assert server is not None and server.poll() is None
    server.kill()
    server.wait()
    second = await runtime.create_container(sandbox_id, container_config(
        busybox_layer, "second", "sleep 1000"), sandbox)
    await runtime.start_container(second)  # a new server is started
    statuses = await runtime.list_containers(sandbox_id)
    assert [s.state for s in statuses] == [ContainerState.RUNNING, ContainerState.RUNNING]
    await runtime.close()
    assert server is not runtime._shim_server.process and runtime._shim_server.process is None
    assert (await runtime.container_status(first)).state == ContainerState.RUNNING


def test_a_failing_crun_probe_shows_crun_s_error(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A crun that cannot run the probe container: the probe answers with crun's own words
    and exit code, `auto` falls back to runc, and `crun_works` says no."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "crun"
    fake.write_text("#!/bin/sh\n"
                    "case \"$*\" in *' run '*) echo 'crun: cannot set up the probe: "
                    "Operation not permitted' >&2; exit 3;; esac\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    root = tmp_path / "root"
    error = crun_probe(root)
    assert error is not None
    assert "crun: cannot set up the probe: Operation not permitted" in error
    assert "exited with code 3" in error
    assert not crun_works(root)
    assert select_kind("auto", root) == "runc"


def test_no_crun_on_path_is_a_probe_failure(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert crun_probe(tmp_path) == "crun is not installed (no crun on PATH)"


async def test_memory_stats_read_the_container_pod_and_node_cgroups(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    """A container holding a 24 MiB buffer (dd blocked writing into a pipe nobody reads):
    its working set, its pod's and the node's pods cgroup's include it, the pod's tasks count
    dd and sleep; once it has exited, the container is no longer reported."""
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    config = container_config(busybox_layer, "hog",
                              "dd if=/dev/zero bs=24M count=1 | sleep 30",
                              log_path=tmp_path / "hog.log")
    container_id = await runtime.create_container(sandbox_id, config, sandbox)
    await runtime.start_container(container_id)
    mib = 1024 * 1024
    for _ in range(100):
        snapshot = await runtime.memory_stats()
        assert snapshot is not None
        usage = snapshot.by_pod[sandbox.pod_uid]
        hog = usage.containers.get("hog")
        if hog is not None and hog.working_set_bytes >= 24 * mib:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail(f"the container's working set never reached 24Mi: {snapshot}")
    assert hog.usage_bytes >= hog.working_set_bytes
    assert usage.pod is not None and usage.pod.working_set_bytes >= hog.working_set_bytes
    assert snapshot.pods is not None
    assert snapshot.pods.working_set_bytes >= usage.pod.working_set_bytes
    assert snapshot.node is not None  # the machine's root cgroup holds them all
    assert snapshot.node.working_set_bytes >= snapshot.pods.working_set_bytes
    counts = await runtime.process_counts()
    assert counts is not None and counts[sandbox.pod_uid] >= 2  # dd and sleep at least
    await runtime.stop_container(container_id, 0)
    after = await runtime.memory_stats()
    assert after is not None and "hog" not in after.by_pod[sandbox.pod_uid].containers


async def test_one_sandbox_s_status_and_containers_without_the_other_pods(
        runtime: OciRuntime, busybox_layer: Path) -> None:
    """`pod_sandbox_status` answers for one sandbox as the listing does (None once it is
    gone), and a sandbox's container listing reads no state of another pod's containers;
    `pod_sandbox_and_containers` answers both at once."""
    first = sandbox_config(name="one")
    second = dataclasses.replace(sandbox_config(name="two"), pod_uid=str(uuid.uuid4()))
    one = await runtime.run_pod_sandbox(first)
    two = await runtime.run_pod_sandbox(second)
    mine = await runtime.create_container(one, container_config(busybox_layer, "a", "true"),
                                          first)
    theirs = await runtime.create_container(two, container_config(busybox_layer, "b", "true"),
                                            second)
    listed = {s.id: s for s in await runtime.list_pod_sandboxes()}
    assert await runtime.pod_sandbox_status(one) == listed[one]
    assert (await runtime.pod_sandbox_status(two) or listed[one]).name == "two"
    assert [c.id for c in await runtime.list_containers()] == [mine, theirs]  # learns both
    # the other pod's record made unreadable: a listing of this sandbox never opens it
    record = runtime._instance_dir(theirs) / "container.json"
    saved = record.read_text()
    record.write_text("{")
    assert [c.id for c in await runtime.list_containers(one)] == [mine]
    # both read in one go, as the two calls answer
    assert await runtime.pod_sandbox_and_containers(one) == (
        listed[one], await runtime.list_containers(one))
    record.write_text(saved)
    await runtime.remove_container(theirs)
    await runtime.remove_pod_sandbox(two)
    assert await runtime.pod_sandbox_status(two) is None
    assert await runtime.pod_sandbox_status("no-such-sandbox") is None
    assert await runtime.pod_sandbox_and_containers(two) == (None, [])


def test_records_are_read_and_written_in_few_system_calls(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime's records (read and written in worker threads on a live swap's path,
    where each system call lets go of the GIL) take open, write, close, rename to write and
    open, read until empty, close to read; the text round-trips, a large one too."""
    calls: list[str] = []
    for name in ("open", "read", "write", "close", "replace", "stat", "fstat", "lseek"):
        real = getattr(os, name)

        def counted(*args: object, _name: str = name, _real: object = real) -> object:
            calls.append(_name)
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(os, name, counted)
    record = {"name": "c", "mounts": [{"container_path": f"/m{i}"} for i in range(5000)]}
    write_json(tmp_path / "container.json", record)
    assert [c for c in calls if c != "write"] == ["open", "close", "replace"]
    calls.clear()
    assert json.loads(read_small(tmp_path / "container.json")) == record
    assert calls[0] == "open" and calls[-1] == "close" and set(calls[1:-1]) == {"read"}
    calls.clear()
    (tmp_path / "started").write_text("pid=7\nstart_time=42\n")
    calls.clear()
    assert read_kv(tmp_path / "started") == {"pid": "7", "start_time": "42"}
    assert calls == ["open", "read", "read", "close"]
    assert read_kv(tmp_path / "missing") == {}

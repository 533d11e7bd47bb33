"""Live mounts into running runc and crun containers (livemount.py through the runtime seam):
the container keeps its process, the files are visible from an exec, read-only mounts refuse
writes, hostile symlinks at the target never mount anything outside the container's root (and
the host's mount table gains nothing), unmounting removes it from the container's table, and
a record interrupted by a crash is settled from the mount table."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from pathlib import Path

import pytest
from runtime_testing import container_config, sandbox_config

from ephemera.kubelet.runtime import livemount
from ephemera.kubelet.runtime.base import ContainerState, LiveMountError, Mount
from ephemera.kubelet.runtime.livemount import (
    container_mounts,
    mount_source,
    parse_mountinfo,
)
from ephemera.kubelet.runtime.oci import OciRuntime


async def running(runtime: OciRuntime, layer: Path, script: str = "sleep 1000",
                  mounts: tuple[Mount, ...] = ()) -> str:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    config = container_config(layer, "app", script, mounts=mounts)
    container_id = await runtime.create_container(sandbox_id, config, sandbox)
    await runtime.start_container(container_id)
    status = await runtime.container_status(container_id)
    assert status.state == ContainerState.RUNNING
    return container_id


async def sh(runtime: OciRuntime, container_id: str, script: str) -> tuple[int, str]:
    result = await runtime.exec_sync(container_id, ["sh", "-c", script], timeout=20)
    return result.exit_code, (result.stdout + result.stderr).decode()


def host_mounts_of(path: Path) -> list[str]:
    """Mount points in the host's table that show the directory `path` (clones of it)."""
    device, root = mount_source(str(path))
    with open("/proc/self/mountinfo") as table:
        return [m.mount_point for m in parse_mountinfo(table.read())
                if (m.device, m.root) == (device, root)]


def source_dir(tmp_path: Path, name: str = "vol") -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "file").write_text("from-host\n")
    return directory


async def test_mount_live_and_unmount_keep_the_process(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    container_id = await running(runtime, busybox_layer)
    before = await runtime.container_status(container_id)
    volume = source_dir(tmp_path)
    await runtime.mount_live(container_id, Mount("/data/live", str(volume), volume_name="v"))
    assert await sh(runtime, container_id, "cat /data/live/file") == (0, "from-host\n")
    assert await sh(runtime, container_id, "echo back > /data/live/new") == (0, "")
    assert (volume / "new").read_text() == "back\n"
    after = await runtime.container_status(container_id)
    assert (after.id, after.pid, after.started_at, after.state) == (
        before.id, before.pid, before.started_at, ContainerState.RUNNING)
    assert Mount("/data/live", str(volume), volume_name="v") in after.mounts
    table = {m.mount_point: m for m in container_mounts(after.pid)}
    assert "nosuid" in table["/data/live"].options and "nodev" in table["/data/live"].options
    assert host_mounts_of(volume) == []  # the host's table never saw it

    await runtime.mount_live(container_id, Mount("/data/live", str(volume), volume_name="v"))
    assert [m.mount_point for m in container_mounts(after.pid)].count("/data/live") == 1

    await runtime.unmount_live(container_id, "/data/live")
    assert "/data/live" not in {m.mount_point for m in container_mounts(after.pid)}
    assert await sh(runtime, container_id, "ls /data/live") == (0, "")
    assert all(m.container_path != "/data/live"
               for m in (await runtime.container_status(container_id)).mounts)
    await runtime.unmount_live(container_id, "/data/live")  # idempotent
    assert (await runtime.container_status(container_id)).pid == before.pid


async def test_without_the_helper_a_forked_child_mounts(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """When the mount helper cannot run, the same sequence runs in a forked child."""
    monkeypatch.setattr(livemount._helper, "request", lambda pidfd, request: None)
    container_id = await running(runtime, busybox_layer)
    volume = source_dir(tmp_path)
    await runtime.mount_live(container_id, Mount("/fallback", str(volume), read_only=True))
    code, output = await sh(runtime, container_id, "cat /fallback/file; touch /fallback/x")
    assert code != 0 and "from-host" in output and "Read-only file system" in output
    with pytest.raises(LiveMountError, match="too many levels of symbolic links"):
        assert (await sh(runtime, container_id, "ln -s /etc /evil"))[0] == 0
        await runtime.mount_live(container_id, Mount("/evil", str(volume)))
    await runtime.unmount_live(container_id, "/fallback")
    assert await sh(runtime, container_id, "ls /fallback") == (0, "")
    assert host_mounts_of(volume) == []


async def test_a_helper_that_died_is_started_again(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    container_id = await running(runtime, busybox_layer)
    volume = source_dir(tmp_path)
    await runtime.mount_live(container_id, Mount("/one", str(volume)))
    helper = livemount._helper.process
    assert helper is not None and helper.poll() is None
    helper.kill()
    helper.wait()
    await runtime.mount_live(container_id, Mount("/two", str(volume)))
    assert livemount._helper.process is not None and livemount._helper.process is not helper
    assert await sh(runtime, container_id, "cat /one/file /two/file") == (
        0, "from-host\nfrom-host\n")


async def test_a_mount_changed_in_place_in_one_batch(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Same path and host directory, now read-only: detached, then attached again, in one
    call (the runtime's stale view of the mount table must not skip the new mount); such a
    swap needs no read of the container's mount table."""
    container_id = await running(runtime, busybox_layer)
    volume = source_dir(tmp_path)
    await runtime.mount_live(container_id, Mount("/d", str(volume), volume_name="v"))
    assert await sh(runtime, container_id, "touch /d/rw") == (0, "")
    errors = await runtime.change_live(container_id, ["/d"], [
        Mount("/d", str(volume), read_only=True, volume_name="v"), Mount("/x", "/nonexistent")])
    assert errors[:2] == [None, None]
    assert isinstance(errors[2], LiveMountError)
    assert str(errors[2]) == ('mounting "/x" in running container "app": /nonexistent: '
                              "no such file or directory")
    code, output = await sh(runtime, container_id, "touch /d/ro")
    assert code != 0 and "Read-only file system" in output
    status = await runtime.container_status(container_id)
    assert status.mounts == (Mount("/d", str(volume), read_only=True, volume_name="v"),)
    pid = status.pid
    assert [m.mount_point for m in container_mounts(pid)].count("/d") == 1
    # a swap at the same path does not read the container's mount table (nothing there to
    # check: the path is being freed)
    reads: list[int] = []
    monkeypatch.setattr(livemount, "container_mounts",
                        lambda pid: reads.append(pid) or container_mounts(pid))
    assert await runtime.change_live(container_id, ["/d"], [
        Mount("/d", str(volume), volume_name="v")]) == [None, None]
    assert reads == []
    assert await sh(runtime, container_id, "touch /d/rw-again") == (0, "")


async def test_a_batch_is_one_helper_request_and_a_failed_removal_blocks_its_path(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The changes of one update go to the mount helper in one request; a mount at a path
    whose removal failed in that request is not tried (EBUSY), the others are done."""
    container_id = await running(runtime, busybox_layer)
    volume = source_dir(tmp_path)
    assert (await sh(runtime, container_id, "ln -s /proc/1/root /magic"))[0] == 0
    requests: list[dict[str, object]] = []
    send = livemount._helper.request

    def counting(pidfd: int, request: dict[str, object]) -> dict[str, object] | None:
        requests.append(request)
        return send(pidfd, request)

    monkeypatch.setattr(livemount._helper, "request", counting)
    errors = await runtime.change_live(container_id, ["/magic/x"], [
        Mount("/magic/x", str(volume), volume_name="v"), Mount("/ok", str(volume))])
    assert [r["op"] for r in requests] == ["batch"]
    assert isinstance(errors[0], LiveMountError) and errors[0].errno == errno.ELOOP
    assert str(errors[1]) == ('mounting "/magic/x" in running container "app": the mount '
                              "there could not be removed")
    assert errors[2] is None
    assert await sh(runtime, container_id, "cat /ok/file") == (0, "from-host\n")
    status = await runtime.container_status(container_id)
    assert [m.container_path for m in status.mounts if m.host_path == str(volume)] == ["/ok"]
    assert host_mounts_of(volume) == []


async def test_read_only_live_mount_refuses_writes(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    container_id = await running(runtime, busybox_layer)
    volume = source_dir(tmp_path)
    await runtime.mount_live(container_id, Mount("/ro", str(volume), read_only=True))
    code, output = await sh(runtime, container_id, "cat /ro/file; echo x > /ro/other")
    assert code != 0 and "from-host" in output and "Read-only file system" in output
    assert not (volume / "other").exists()
    # a target whose directory cannot be made (a read-only filesystem there): EROFS
    with pytest.raises(LiveMountError) as caught:
        await runtime.mount_live(container_id, Mount("/ro/deeper/x", str(source_dir(
            tmp_path, "other"))))
    assert str(caught.value) == ('mounting "/ro/deeper/x" in running container "app": '
                                 "/ro/deeper: read-only file system")
    assert caught.value.errno == 30
    assert not (volume / "deeper").exists()


async def test_a_config_mount_can_be_removed_live(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    volume = source_dir(tmp_path)
    container_id = await running(runtime, busybox_layer, mounts=(Mount("/cfg", str(volume)),))
    assert await sh(runtime, container_id, "cat /cfg/file") == (0, "from-host\n")
    await runtime.unmount_live(container_id, "/cfg")
    assert await sh(runtime, container_id, "ls /cfg") == (0, "")
    assert (await runtime.container_status(container_id)).mounts == ()


HOSTILE = {
    "etc": "ln -s /etc /plant",
    "proc-root": "ln -s /proc/1/root /plant",
    "dotdot": "ln -s ../../.. /plant",
}


@pytest.mark.parametrize("plant", sorted(HOSTILE))
async def test_a_symlink_at_the_target_is_refused(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path, plant: str) -> None:
    container_id = await running(runtime, busybox_layer)
    assert (await sh(runtime, container_id, HOSTILE[plant]))[0] == 0
    pid = (await runtime.container_status(container_id)).pid
    volume = source_dir(tmp_path)
    table_before = container_mounts(pid)
    with pytest.raises(LiveMountError) as caught:
        await runtime.mount_live(container_id, Mount("/plant", str(volume)))
    assert str(caught.value) == ('mounting "/plant" in running container "app": '
                                 "too many levels of symbolic links")
    assert container_mounts(pid) == table_before
    assert host_mounts_of(volume) == []
    status = await runtime.container_status(container_id)
    assert status.state == ContainerState.RUNNING and status.mounts == ()


async def test_symlinks_in_parents_stay_inside_the_root(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    container_id = await running(runtime, busybox_layer)
    assert (await sh(runtime, container_id, "ln -s ../../.. /up; ln -s /proc/1/root /pr"))[0] == 0
    pid = (await runtime.container_status(container_id)).pid
    volume = source_dir(tmp_path)
    await runtime.mount_live(container_id, Mount("/up/inside", str(volume)))
    # ../../.. from / is / itself: the mount lands at the container's /inside
    assert await sh(runtime, container_id, "cat /inside/file") == (0, "from-host\n")
    assert host_mounts_of(volume) == []
    with pytest.raises(LiveMountError) as caught:
        await runtime.mount_live(container_id, Mount("/pr/x", str(volume)))
    assert "too many levels of symbolic links" in str(caught.value)
    assert not any(m.mount_point.endswith("/x") for m in container_mounts(pid))


async def test_a_file_at_the_target_is_not_a_directory(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    container_id = await running(runtime, busybox_layer)
    with pytest.raises(LiveMountError) as caught:
        await runtime.mount_live(container_id, Mount("/etc/passwd", str(source_dir(tmp_path))))
    assert str(caught.value) == ('mounting "/etc/passwd" in running container "app": '
                                 "not a directory")
    assert caught.value.errno == 20
    assert (await sh(runtime, container_id, "cat /etc/passwd"))[1].startswith("root:")


async def test_a_container_that_exited_is_reported(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    container_id = await running(runtime, busybox_layer)
    await runtime.stop_container(container_id, 0)
    with pytest.raises(LiveMountError) as caught:
        await runtime.mount_live(container_id, Mount("/d", str(source_dir(tmp_path))))
    assert str(caught.value) == ('mounting "/d" in running container "app": '
                                 "the container is not running")


async def test_an_interrupted_record_is_settled_from_the_mount_table(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    """As after a kill -9 between the syscall and the record: the pending change is applied
    when the mount is there and dropped when it is not."""
    container_id = await running(runtime, busybox_layer)
    volume = source_dir(tmp_path)
    await runtime.mount_live(container_id, Mount("/a", str(volume)))
    meta_path = Path(os.readlink(runtime.containers_dir / container_id)) / "container.json"
    meta = json.loads(meta_path.read_text())
    mounted, missing = dict(meta["mounts"][0]), dict(meta["mounts"][0], container_path="/b")
    meta["mounts"] = []
    meta["pending"] = {"op": "mount", "mount": mounted}
    meta_path.write_text(json.dumps(meta))
    assert [m.container_path for m in (await runtime.container_status(container_id)).mounts] \
        == ["/a"]
    meta = json.loads(meta_path.read_text())
    meta["pending"] = {"op": "mount", "mount": missing}
    meta_path.write_text(json.dumps(meta))
    assert [m.container_path for m in (await runtime.container_status(container_id)).mounts] \
        == ["/a"]
    assert "pending" not in json.loads(meta_path.read_text())


def test_parse_mountinfo_unescapes_and_splits_optional_fields() -> None:
    line = ("36 35 98:0 /mnt1 /mnt\\040with\\040space rw,noatime master:1 shared:7 - ext3 "
            "/dev/root rw,errors=continue")
    (entry,) = parse_mountinfo(line)
    assert (entry.mount_id, entry.parent_id, entry.device, entry.root) == (36, 35, "98:0",
                                                                          "/mnt1")
    assert (entry.mount_point, entry.fstype, entry.source) == ("/mnt with space", "ext3",
                                                               "/dev/root")
    assert entry.options == ("rw", "noatime")


async def test_a_file_is_mounted_live_onto_a_file(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    """A mount whose source is a file (a subPath naming one key of a Secret) gets an empty
    file made at its missing target (as runc makes one at start), not a directory that the
    move refuses; a directory at the target is EISDIR; unmounting leaves the file."""
    container_id = await running(runtime, busybox_layer)
    volume = source_dir(tmp_path)
    key = volume / "file"
    await runtime.mount_live(container_id, Mount("/conf/key", str(key), volume_name="v"))
    assert await sh(runtime, container_id, "cat /conf/key") == (0, "from-host\n")
    pid = (await runtime.container_status(container_id)).pid
    assert "/conf/key" in {m.mount_point for m in container_mounts(pid)}
    with pytest.raises(LiveMountError) as caught:
        await runtime.mount_live(container_id, Mount("/etc", str(key), volume_name="w"))
    assert str(caught.value) == ('mounting "/etc" in running container "app": '
                                 "is a directory")
    await runtime.unmount_live(container_id, "/conf/key")
    assert "/conf/key" not in {m.mount_point for m in container_mounts(pid)}
    assert await sh(runtime, container_id, "test -f /conf/key && wc -c < /conf/key") == (
        0, "0\n")


# -- a read-only root (securityContext.readOnlyRootFilesystem) ---------------------------------


async def read_only_root_container(runtime: OciRuntime, layer: Path,
                                   mounts: tuple[Mount, ...] = ()) -> str:
    sandbox = sandbox_config()
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    config = dataclasses.replace(container_config(layer, "app", "sleep 1000", mounts=mounts),
                                 read_only_root=True)
    container_id = await runtime.create_container(sandbox_id, config, sandbox)
    await runtime.start_container(container_id)
    assert (await runtime.container_status(container_id)).state == ContainerState.RUNNING
    return container_id


async def test_a_read_only_root_refuses_writes_and_its_mounts_stay_writable(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    """The root is read-only for real; the volume (whose target the image lacks: the runtime
    made it before the root went read-only), /dev/shm and /etc/hosts stay writable."""
    volume = source_dir(tmp_path)
    container_id = await read_only_root_container(
        runtime, busybox_layer, mounts=(Mount("/data/vol", str(volume)),))
    for target in ("/new", "/tmp/new", "/etc/new"):
        code, output = await sh(runtime, container_id, f"touch {target}")
        assert code != 0 and "Read-only file system" in output, (target, output)
    assert await sh(runtime, container_id,
                    "echo v > /data/vol/w && echo s > /dev/shm/w && echo '# x' >> /etc/hosts "
                    "&& cat /data/vol/file") == (0, "from-host\n")
    assert (volume / "w").read_text() == "v\n"
    pid = (await runtime.container_status(container_id)).pid
    root = next(m for m in container_mounts(pid) if m.mount_point == "/")
    assert "ro" in root.options


async def test_live_mounts_into_a_read_only_root(
        runtime: OciRuntime, busybox_layer: Path, tmp_path: Path) -> None:
    """Where the directory is missing it cannot be made: EROFS, the container keeps running
    and nothing is mounted anywhere. At a directory of the image, or below a writable volume,
    the live mount works (mounting onto a directory writes nothing), and removal too."""
    writable = source_dir(tmp_path, "writable")
    container_id = await read_only_root_container(
        runtime, busybox_layer, mounts=(Mount("/data", str(writable)),))
    before = await runtime.container_status(container_id)
    table_before = container_mounts(before.pid)
    volume = source_dir(tmp_path)
    for target, where in (("/live", ""), ("/var/lib/live", "/var/lib: ")):
        with pytest.raises(LiveMountError) as caught:
            await runtime.mount_live(container_id, Mount(target, str(volume)))
        assert str(caught.value) == (f'mounting "{target}" in running container "app": '
                                     f"{where}read-only file system")
        assert caught.value.errno == errno.EROFS
    assert container_mounts(before.pid) == table_before
    assert host_mounts_of(volume) == []
    status = await runtime.container_status(container_id)
    assert (status.state, status.pid, status.mounts) == (
        ContainerState.RUNNING, before.pid, before.mounts)

    await runtime.mount_live(container_id, Mount("/tmp", str(volume), read_only=True))
    await runtime.mount_live(container_id, Mount("/data/sub", str(volume)))
    assert await sh(runtime, container_id, "cat /tmp/file /data/sub/file") == (
        0, "from-host\nfrom-host\n")
    assert (writable / "sub").is_dir()  # made in the writable volume
    await runtime.unmount_live(container_id, "/tmp")
    await runtime.unmount_live(container_id, "/data/sub")
    assert {"/tmp", "/data/sub"}.isdisjoint(m.mount_point for m in container_mounts(before.pid))
    assert (await runtime.container_status(container_id)).pid == before.pid
    assert host_mounts_of(volume) == []

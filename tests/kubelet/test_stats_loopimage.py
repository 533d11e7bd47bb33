"""The loop-image accounting backend on real loop devices and ext4 images: a pod's usage read
with `statvfs` agrees with `du` on the same files (and with the walk backend) within one
block per file; set-up, adoption by a restarted kubelet and release leave no mount, no loop
device and no file behind; a mount left below blocks the release; enforcement fails writes
past the pod's limit with ENOSPC while the usage still passes the limit (so the eviction
manager evicts the pod as without enforcement); a real container's writable layer lands on
the image. Needs root, `/dev/loop-control` and `mkfs.ext4`, as the backend does."""

from __future__ import annotations

import asyncio
import errno
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubelet_harness import du, log_dir, release_images, write
from runtime_testing import build_busybox_layer

from ephemera.kubelet.eviction import local_storage_eviction
from ephemera.kubelet.runtime.oci import OciRuntime
from ephemera.kubelet.stats import (
    DuBackend,
    LoopImageAccounting,
    StatsProvider,
    WalkAccounting,
    make_accounting,
    pod_paths,
)
from ephemera.kubelet.stats.accounting import ENFORCE_SLACK
from ephemera.kubelet.stats.loopdev import devices_backed_by
from ephemera.kubelet.stats.loopimage import BLOCK_SIZE, probe
from ephemera.kubelet.volumes import mounts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices need root")

EMPTY_DIR = "volumes/kubernetes.io~empty-dir"






def pod(name: str, limit: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app"}
    if limit is not None:
        container["resources"] = {"limits": {"ephemeral-storage": limit}}
    return {"metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": {"containers": [container],
                     "volumes": [{"name": "cache", "emptyDir": {}}]}}








def test_the_probe_works_here(tmp_path: Path) -> None:
    assert probe(tmp_path) == ""
    assert os.listdir(tmp_path) == []
    assert isinstance(make_accounting("auto", tmp_path / "a"), LoopImageAccounting)
    assert isinstance(make_accounting("walk", tmp_path / "b"), WalkAccounting)
    with pytest.raises(ValueError, match="unknown storage accounting 'quota'"):
        make_accounting("quota", tmp_path / "c")


async def test_usage_agrees_with_du_and_the_walk_within_one_block_per_file(root: Path) -> None:
    accounting = LoopImageAccounting(root)
    p = pod("files")
    uid = p["metadata"]["uid"]
    await accounting.prepare_pod(p, log_dir(root, p))
    point = root / "pods" / uid
    assert mounts.is_mountpoint(point)
    empty = accounting.pod_usage(uid)
    assert empty is not None and (empty.bytes, empty.inodes) == (BLOCK_SIZE, 1)  # logs/
    # the kinds of files du counts differently from their sizes
    volume = point / EMPTY_DIR / "cache"
    files = 0
    for size in (0, 1, 4095, 4096, 4097, 100_000, 3 << 20):
        write(volume / f"f{size}", size)
        files += 1
    with open(volume / "sparse", "wb") as f:  # 1 GiB apparent, 8 KiB allocated
        f.seek(1 << 29)
        f.write(b"y" * 8192)
        f.truncate(1 << 30)
    files += 1
    os.link(volume / "f100000", volume / "hardlink")  # counted once
    (volume / "symlink").symlink_to("f1")
    files += 1
    for i in range(200):
        write(volume / "many" / f"{i % 7}" / f"small{i}", 10)
        files += 1
    upper = point / "containers" / "app" / "0" / "upper"
    write(upper / "tmp" / "layer", 2 << 20)
    write(log_dir(root, p) / "app" / "0.log", 50_000)  # through the log symlink
    files += 2
    assert (point / "logs" / "app" / "0.log").stat().st_size == 50_000

    usage = accounting.pod_usage(uid)
    assert usage is not None
    # du of the same files: the pod directory's entries but lost+found, not the top dir
    expected = du(point, "-B1", "--exclude=lost+found") - os.lstat(point).st_blocks * 512
    expected_inodes = du(point, "--inodes", "--exclude=lost+found") - 1
    assert abs(usage.bytes - expected) <= BLOCK_SIZE * files, (usage.bytes, expected)
    assert usage.inodes == expected_inodes
    assert usage.bytes >= (3 << 20) + (2 << 20) + 50_000

    # the walk backend on the directories the kubelet measures agrees with du too
    walk = DuBackend()
    tops = [point / "containers", point / EMPTY_DIR, point / "logs"]
    await walk.measure(tops)
    walked = sum(walk.usage(t).bytes for t in tops)  # type: ignore[union-attr]
    expected_walk = du(point, "-B1", "--exclude=lost+found", "--exclude=volumes") \
        - os.lstat(point).st_blocks * 512 + du(point / EMPTY_DIR, "-B1")
    assert abs(walked - expected_walk) <= BLOCK_SIZE * files, (walked, expected_walk)
    assert abs(walked - usage.bytes) <= BLOCK_SIZE * files

    # the Summary: per-container and per-volume from the walk, the pod total from statvfs
    paths = pod_paths(root, p, {"cache": volume}, log_dir(root, p))
    provider = StatsProvider("n", root, accounting.walk, pod_totals=accounting.pod_usage)
    summary = await provider.get([paths])
    stats = summary.pods[0]
    assert stats.ephemeral_storage is not None
    assert stats.ephemeral_storage.used_bytes == accounting.pod_usage(uid).bytes  # type: ignore[union-attr]
    cache = stats.volume("cache")
    assert cache is not None and cache.fs.used_bytes == du(volume, "-B1")
    # the volume's filesystem is the pod's image
    assert cache.fs.capacity_bytes == os.statvfs(point).f_blocks * BLOCK_SIZE

    # deleting gives the space back at once
    (volume / "f3145728").unlink()
    after = accounting.pod_usage(uid)
    assert after is not None and usage.bytes - after.bytes >= 3 << 20
    await accounting.release_pod(uid)


async def test_lifecycle_adoption_and_release_leave_nothing_behind(root: Path) -> None:
    accounting = LoopImageAccounting(root)
    a, b = pod("a"), pod("b")
    for p in (a, b):
        await accounting.prepare_pod(p, log_dir(root, p))
        await accounting.prepare_pod(p, log_dir(root, p))  # idempotent
    uid_a, uid_b = a["metadata"]["uid"], b["metadata"]["uid"]
    image_a = root / "pod-storage" / f"{uid_a}.img"
    assert len(devices_backed_by(image_a)) == 1
    assert log_dir(root, a).is_symlink()
    write(root / "pods" / uid_a / EMPTY_DIR / "cache" / "data", 1 << 20)
    before = accounting.pod_usage(uid_a)

    # a restarted kubelet (a new backend on the same root) adopts the mounted images
    restarted = LoopImageAccounting(root)
    adopted = restarted.pod_usage(uid_a)
    assert adopted is not None and before is not None
    assert (adopted.bytes, adopted.inodes) == (before.bytes, before.inodes)
    await restarted.prepare_pod(a, log_dir(root, a))  # no second image, no second mount
    assert len(devices_backed_by(image_a)) == 1
    assert [m.mount_point for m in mounts.mountpoints_under(root / "pods" / uid_a)] == \
        [str(root / "pods" / uid_a)]

    # housekeeping releases the image of a pod it does not know
    await restarted.release_orphans({uid_a})
    assert not mounts.is_mountpoint(root / "pods" / uid_b)
    assert not (root / "pod-storage" / f"{uid_b}.img").exists()
    assert not os.path.lexists(log_dir(root, b))
    assert restarted.pod_usage(uid_b) is None

    # a volume still mounted below keeps the image (retried later)
    tmpfs = root / "pods" / uid_a / "volumes" / "kubernetes.io~secret" / "token"
    tmpfs.mkdir(parents=True)
    mounts.mount_tmpfs(tmpfs)
    with pytest.raises(OSError, match="mounts left under"):
        await restarted.release_pod(uid_a)
    assert mounts.is_mountpoint(root / "pods" / uid_a)
    mounts.unmount(tmpfs)
    await restarted.release_pod(uid_a)
    await restarted.release_pod(uid_a)  # idempotent
    assert devices_backed_by(image_a) == []
    assert not image_a.exists()
    assert mounts.mountpoints_under(root) == []
    assert os.listdir(root / "pod-storage") == []
    assert os.listdir(root / "logs" / "pods") == []


async def test_an_unmounted_image_is_mounted_again_with_its_files(root: Path) -> None:
    """After a reboot the image file is there but not mounted: the pod gets it back."""
    accounting = LoopImageAccounting(root)
    p = pod("reboot")
    uid = p["metadata"]["uid"]
    await accounting.prepare_pod(p, log_dir(root, p))
    write(root / "pods" / uid / EMPTY_DIR / "cache" / "kept", 4096)
    mounts.unmount(root / "pods" / uid, lazy_on_busy=False)
    os.unlink(log_dir(root, p))
    fresh = LoopImageAccounting(root)
    assert fresh.pod_usage(uid) is None
    await fresh.prepare_pod(p, log_dir(root, p))
    assert (root / "pods" / uid / EMPTY_DIR / "cache" / "kept").stat().st_size == 4096
    usage = fresh.pod_usage(uid)
    assert usage is not None and usage.bytes >= 4096
    await fresh.release_pod(uid)
    assert devices_backed_by(root / "pod-storage" / f"{uid}.img") == []


async def test_a_pod_directory_with_files_gets_no_image(root: Path) -> None:
    """A pod started without an image (e.g. under the walk backend) keeps its directory."""
    accounting = LoopImageAccounting(root)
    p = pod("older")
    uid = p["metadata"]["uid"]
    write(root / "pods" / uid / "containers" / "app" / "0" / "upper" / "f", 10)
    await accounting.prepare_pod(p, log_dir(root, p))
    assert not mounts.is_mountpoint(root / "pods" / uid)
    assert accounting.pod_usage(uid) is None
    assert not (root / "pod-storage" / f"{uid}.img").exists()


async def test_enforcement_fails_writes_past_the_limit_and_eviction_still_applies(
        root: Path) -> None:
    accounting = LoopImageAccounting(root, enforce_limits=True)
    limit = 8 << 20
    p = pod("filler", "8Mi")
    uid = p["metadata"]["uid"]
    await accounting.prepare_pod(p, log_dir(root, p))
    target = root / "pods" / uid / EMPTY_DIR / "cache" / "fill"
    target.parent.mkdir(parents=True)
    written = 0
    with pytest.raises(OSError) as caught, open(target, "wb") as f:
        for _ in range(16):
            written += f.write(b"z" * (1 << 20))
            f.flush()
    assert caught.value.errno == errno.ENOSPC
    usage = accounting.pod_usage(uid)
    assert usage is not None
    assert limit < usage.bytes <= limit + ENFORCE_SLACK + 4 * BLOCK_SIZE, usage.bytes
    assert written < 16 << 20

    paths = pod_paths(root, p, {"cache": target.parent}, log_dir(root, p))
    provider = StatsProvider("n", root, accounting.walk, pod_totals=accounting.pod_usage)
    (eviction,) = local_storage_eviction([p], await provider.get([paths]))
    assert eviction.message == \
        "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. "
    # a pod without a limit gets an image as large as the node's filesystem
    free = pod("free")
    await accounting.prepare_pod(free, log_dir(root, free))
    st = os.statvfs(root / "pods" / free["metadata"]["uid"])
    assert st.f_bavail * st.f_frsize > 1 << 30
    await accounting.release_pod(uid)
    await accounting.release_pod(free["metadata"]["uid"])
    assert mounts.mountpoints_under(root) == []


@pytest.fixture
def runtime_images(oci_runtime: OciRuntime) -> Iterator[OciRuntime]:
    """`oci_runtime` whose pod images are released afterwards (before the runtime's own
    teardown removes its containers and unmounts what is left)."""
    try:
        yield oci_runtime
    finally:
        release_images(oci_runtime.root)


async def test_a_real_containers_writable_layer_lands_on_the_image(
        tmp_path: Path, runtime_images: OciRuntime) -> None:
    from ephemera.kubelet.runtime.base import ContainerConfig, ContainerState, SandboxConfig

    runtime = runtime_images
    accounting = LoopImageAccounting(runtime.root)
    p = pod("writer")
    uid = p["metadata"]["uid"]
    await accounting.prepare_pod(p, log_dir(runtime.root, p))
    layer = build_busybox_layer(tmp_path / "layer")
    sandbox_config = SandboxConfig(uid, "default", "writer", "writer")
    sandbox = await runtime.run_pod_sandbox(sandbox_config)
    (log_dir(runtime.root, p) / "app").mkdir(parents=True)
    config = ContainerConfig(
        name="app", attempt=0, image="busybox", image_id="sha256:" + "0" * 64,
        rootfs_layers=(layer,),
        argv=("/bin/sh", "-c", "dd if=/dev/zero of=/data bs=1M count=3 2>/dev/null; sync"),
        log_path=log_dir(runtime.root, p) / "app" / "0.log")
    container = await runtime.create_container(sandbox, config, sandbox_config)
    await runtime.start_container(container)
    for _ in range(1000):
        if (await runtime.container_status(container)).state == ContainerState.EXITED:
            break
        await asyncio.sleep(0.02)
    assert (await runtime.container_status(container)).exit_code == 0
    upper = runtime.root / "pods" / uid / "containers" / "app" / "0" / "upper"
    assert os.stat(upper).st_dev == os.stat(runtime.root / "pods" / uid).st_dev
    usage = accounting.pod_usage(uid)
    assert usage is not None and usage.bytes >= du(upper, "-B1") >= 3 << 20
    await runtime.remove_container(container)
    await runtime.remove_pod_sandbox(sandbox)
    await accounting.release_pod(uid)
    assert devices_backed_by(runtime.root / "pod-storage" / f"{uid}.img") == []
    assert mounts.mountpoints_under(runtime.root) == []

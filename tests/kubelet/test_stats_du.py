"""The du-style walk and the stats provider on real files: allocated blocks (sparse files),
hard links counted once, other filesystems skipped, bounded passes over a large tree, and
the Summary API document for a kubelet-shaped directory layout; compared with `du -s -x -B1`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubelet_harness import du, write
from runtime_testing import build_busybox_layer

from ephemera.kubelet.runtime.oci import OciRuntime
from ephemera.kubelet.stats import (
    DirectoryWalk,
    DuBackend,
    StatsProvider,
    disk_usage,
    pod_paths,
    summary_json,
)


def test_sparse_file_counts_allocated_blocks_only(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    with open(tree / "sparse", "wb") as f:
        f.truncate(1 << 30)  # 1 GiB apparent, nothing allocated
    write(tree / "real", 1 << 20)
    usage = disk_usage(tree)
    assert (tree / "sparse").stat().st_size == 1 << 30
    assert usage.bytes < 2 << 20  # not 1 GiB
    assert usage.bytes == du(tree, "-B1")
    assert usage.inodes == 3 == du(tree, "--inodes")


def test_hard_links_are_counted_once(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    write(tree / "a", 256 * 1024)
    os.link(tree / "a", tree / "b")
    (tree / "sub").mkdir()
    os.link(tree / "a", tree / "sub" / "c")
    usage = disk_usage(tree)
    single = (tree / "a").stat().st_blocks * 512
    directories = sum(p.stat().st_blocks * 512 for p in (tree, tree / "sub"))
    assert usage.bytes == single + directories == du(tree, "-B1")
    assert usage.inodes == 3 == du(tree, "--inodes")  # tree, sub, one file


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside / "big", 2 << 20)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(outside)
    usage = disk_usage(tree)
    assert usage.bytes < 1 << 20
    assert usage.bytes == du(tree, "-B1")


def test_missing_path_measures_zero(tmp_path: Path) -> None:
    usage = disk_usage(tmp_path / "nope")
    assert (usage.bytes, usage.inodes) == (0, 0)


@pytest.fixture
def tmpfs_below(tmp_path: Path) -> Iterator[Path]:
    tree = tmp_path / "tree"
    mount_point = tree / "mnt"
    mount_point.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
                   check=True)
    try:
        yield tree
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_another_filesystem_below_the_root_is_skipped(tmpfs_below: Path) -> None:
    write(tmpfs_below / "mnt" / "in-tmpfs", 4 << 20)
    write(tmpfs_below / "local", 8192)
    usage = disk_usage(tmpfs_below)
    assert usage.bytes < 1 << 20
    assert usage.bytes == du(tmpfs_below, "-B1")
    assert usage.inodes == du(tmpfs_below, "--inodes")
    # measured from its own root, the tmpfs counts what it holds
    assert disk_usage(tmpfs_below / "mnt").bytes >= 4 << 20


def make_tree(root: Path, files: int, per_dir: int = 500) -> None:
    for i in range(files):
        d = root / f"d{i // per_dir}"
        if i % per_dir == 0:
            d.mkdir(parents=True)
        (d / f"f{i}").write_bytes(b"hello\n")


def test_large_tree_is_measured_over_bounded_passes(tmp_path: Path) -> None:
    tree = tmp_path / "big"
    make_tree(tree, 5000)
    expected = disk_usage(tree)
    assert expected.bytes == du(tree, "-B1")
    assert expected.inodes == 5000 + 10 + 1 == du(tree, "--inodes")

    walk = DirectoryWalk(tree)
    steps = []
    while not walk.done:
        steps.append(walk.step(1000))
    walk.close()
    assert all(n <= 1000 for n in steps)
    assert len(steps) >= 5
    assert (walk.bytes, walk.inodes) == (expected.bytes, expected.inodes)

    backend = DuBackend(max_entries_per_pass=1000)
    small = tmp_path / "small"
    write(small / "f", 4096)
    passes = 0
    while backend.usage(tree) is None:
        backend.measure_blocking([tree, small])
        passes += 1
        assert backend.last_pass_entries <= 1000
    assert passes >= 5
    result = backend.usage(tree)
    assert result is not None and (result.bytes, result.inodes) == (expected.bytes,
                                                                    expected.inodes)
    small_usage = backend.usage(small)
    assert small_usage is not None and small_usage.bytes == du(small, "-B1")


async def test_backend_keeps_last_result_until_a_new_walk_finishes(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    make_tree(tree, 300, per_dir=100)
    backend = DuBackend(max_entries_per_pass=100)
    while backend.usage(tree) is None:
        await backend.measure([tree])
    first = backend.usage(tree)
    assert first is not None
    write(tree / "more", 1 << 20)
    await backend.measure([tree])  # a partial walk: the previous result stands
    assert backend.usage(tree) == first
    for _ in range(10):
        await backend.measure([tree])
    latest = backend.usage(tree)
    assert latest is not None and latest.bytes == du(tree, "-B1") > first.bytes
    await backend.measure([])  # no longer asked for: forgotten
    assert backend.usage(tree) is None


async def test_summary_of_a_kubelet_layout(tmp_path: Path) -> None:
    root = tmp_path / "kubelet"
    uid = "0f0e-uid"
    pod = {
        "metadata": {"name": "web", "namespace": "default", "uid": uid},
        "spec": {
            "containers": [{"name": "app"}, {"name": "sidecar"}],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "ram", "emptyDir": {"medium": "Memory"}},
                {"name": "conf", "configMap": {"name": "c"}},
                {"name": "host", "hostPath": {"path": "/tmp"}},
            ],
        },
        "status": {"startTime": "2026-11-29T10:00:00Z"},
    }
    pod_dir = root / "pods" / uid
    write(pod_dir / "containers" / "app" / "0" / "upper" / "old", 1 << 20)  # an old attempt
    write(pod_dir / "containers" / "app" / "1" / "upper" / "data", 3 << 20)
    write(pod_dir / "containers" / "sidecar" / "0" / "upper" / "data", 1 << 20)
    log_dir = root / "logs" / "pods" / f"default_web_{uid}"
    write(log_dir / "app" / "0.log", 64 * 1024)
    write(log_dir / "app" / "1.log", 64 * 1024)
    volumes = pod_dir / "volumes"
    write(volumes / "kubernetes.io~empty-dir" / "scratch" / "blob", 2 << 20)
    write(volumes / "kubernetes.io~empty-dir" / "ram" / "blob", 5 << 20)  # memory: not counted
    write(volumes / "kubernetes.io~configmap" / "conf" / "key", 10)
    mounted = {
        "scratch": volumes / "kubernetes.io~empty-dir" / "scratch",
        "ram": volumes / "kubernetes.io~empty-dir" / "ram",
        "conf": volumes / "kubernetes.io~configmap" / "conf",
        "host": Path("/tmp"),
    }
    paths = pod_paths(root, pod, mounted, log_dir)
    provider = StatsProvider("node-a", root, DuBackend())
    summary = await provider.get([paths])
    doc = summary_json(summary)

    assert doc["node"]["nodeName"] == "node-a"
    st = os.statvfs(root)
    assert doc["node"]["fs"]["capacityBytes"] == st.f_blocks * st.f_frsize
    assert doc["node"]["fs"]["inodes"] == st.f_files
    assert set(doc["node"]["fs"]) >= {"availableBytes", "inodesFree", "usedBytes", "time"}

    (pod_doc,) = doc["pods"]
    assert pod_doc["podRef"] == {"name": "web", "namespace": "default", "uid": uid}
    assert pod_doc["startTime"] == "2026-11-29T10:00:00Z"
    by_name = {c["name"]: c for c in pod_doc["containers"]}
    app_upper = pod_dir / "containers" / "app" / "1" / "upper"
    assert by_name["app"]["rootfs"]["usedBytes"] == du(app_upper, "-B1")
    assert by_name["app"]["logs"]["usedBytes"] == du(log_dir / "app", "-B1")
    assert by_name["app"]["logs"]["inodesUsed"] == 3
    assert "logs" not in by_name["sidecar"]  # no log dir yet
    volume_doc = {v["name"]: v for v in pod_doc["volume"]}
    assert set(volume_doc) == {"scratch", "ram", "conf"}  # hostPath has no metrics
    assert volume_doc["scratch"]["usedBytes"] == du(mounted["scratch"], "-B1")
    assert volume_doc["ram"]["usedBytes"] == du(mounted["ram"], "-B1")

    expected = (du(app_upper, "-B1") + du(log_dir / "app", "-B1")
                + du(pod_dir / "containers" / "sidecar" / "0" / "upper", "-B1")
                + du(mounted["scratch"], "-B1") + du(mounted["conf"], "-B1"))
    assert pod_doc["ephemeral-storage"]["usedBytes"] == expected
    assert pod_doc["ephemeral-storage"]["capacityBytes"] == doc["node"]["fs"]["capacityBytes"]
    assert summary.pods[0].ephemeral_storage is not None


# --- a real container's writes --------------------------------------------------------------


async def test_a_real_containers_writable_layer_and_logs(tmp_path: Path,
                                                        oci_runtime: OciRuntime) -> None:
    from ephemera.kubelet.eviction import local_storage_eviction
    from ephemera.kubelet.runtime.base import ContainerConfig, ContainerState, SandboxConfig

    runtime = oci_runtime
    layer = build_busybox_layer(tmp_path / "layer")
    uid = str(uuid.uuid4())
    pod: dict[str, Any] = {"metadata": {"name": "writer", "namespace": "default", "uid": uid},
           "spec": {"containers": [{"name": "app", "resources": {
               "limits": {"ephemeral-storage": "2Mi"}}}]}}
    sandbox = await runtime.run_pod_sandbox(SandboxConfig(uid, "default", "writer", "writer"))
    log_dir = runtime.root / "logs" / "pods" / f"default_writer_{uid}"
    (log_dir / "app").mkdir(parents=True)
    config = ContainerConfig(
        name="app", attempt=0, image="busybox", image_id="sha256:" + "0" * 64,
        rootfs_layers=(layer,),
        argv=("/bin/sh", "-c", "dd if=/dev/zero of=/data bs=1M count=3 2>/dev/null; "
              "sync; echo written"),
        log_path=log_dir / "app" / "0.log")
    container = await runtime.create_container(sandbox, config, SandboxConfig(
        uid, "default", "writer", "writer"))
    await runtime.start_container(container)
    for _ in range(1000):
        if (await runtime.container_status(container)).state == ContainerState.EXITED:
            break
        await asyncio.sleep(0.02)
    assert (await runtime.container_status(container)).exit_code == 0

    upper = runtime.root / "pods" / uid / "containers" / "app" / "0" / "upper"
    assert (upper / "data").stat().st_size == 3 << 20
    paths = pod_paths(runtime.root, pod, {}, log_dir)
    summary = await StatsProvider("n", runtime.root, DuBackend()).get([paths])
    (container_stats,) = summary.pods[0].containers
    assert container_stats.rootfs is not None and container_stats.logs is not None
    assert container_stats.rootfs.used_bytes == du(upper, "-B1") >= 3 << 20
    assert container_stats.logs.used_bytes == du(log_dir / "app", "-B1") > 0
    # the one limited container sets the pod's aggregate limit, checked first
    (eviction,) = local_storage_eviction([pod], summary)
    assert eviction.message == (
        "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. ")
    # with a roomy pod-level limit the container's own limit is what is exceeded
    pod["spec"]["resources"] = {"limits": {"ephemeral-storage": "1Gi"}}
    (eviction,) = local_storage_eviction([pod], summary)
    assert eviction.message == 'Container app exceeded its local ephemeral storage limit "2Mi". '

"""Node-level reclaim before a node-pressure eviction, and the imagefs signals, on a kubelet
(fake runtime) whose root, and in the split case whose image store, are small tmpfs
filesystems of the test's own: real `statvfs` numbers, real files freed.

- one filesystem: DiskPressure on `nodefs.available` first removes the dead containers (a
  Failed pod's exited container and its log file) and the unused images (not the base
  image, not one a pod names); when that frees enough, no pod is evicted; when it does not,
  one pod is, and its `Evicted` event carries upstream's annotations;
- the image store on a filesystem of its own (`st_dev` differs): the Summary's
  `runtime.imageFs` is that filesystem, `imagefs.available` is its own signal (DiskPressure),
  and reclaim follows upstream's split layout: `imagefs.*` deletes unused images only,
  `nodefs.*` dead containers only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from images_testing import entry, tar_of, write_layout
from kubelet_harness import Harness, pod, running_kubelet

from ephemera.client import resource_path
from ephemera.kubelet.eviction import parse_eviction_hard
from ephemera.kubelet.runtime.base import ContainerStatus

MiB = 1 << 20
FILLER = "example.com/filler:1"


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def available(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _phase(p: dict[str, Any]) -> str:
    return str((p.get("status") or {}).get("phase"))


def import_filler(h: Harness, tmp_path: Path, size: int) -> str:
    """Import an image of `size` random bytes named FILLER; its id."""
    layer = tar_of([entry("filler", tarfile.REGTYPE, os.urandom(size))])
    write_layout(tmp_path / "filler-layout", [layer])
    [image] = h.kubelet.image_store.import_archive(tmp_path / "filler-layout", name=FILLER)
    return str(image.id)


def image_names(h: Harness) -> list[str]:
    return sorted(t for i in h.kubelet.image_store.list() for t in i.repo_tags)


async def dead_container(h: Harness, name: str, log_bytes: int) -> ContainerStatus:
    """A Failed pod `name` whose exited container wrote `log_bytes` of logs."""
    await h.create(pod(name, argv=["exit", "1"], restartPolicy="Never"))
    failed = await h.wait_pod(name, lambda p: _phase(p) == "Failed")
    uid = failed["metadata"]["uid"]
    sandboxes = {s.id for s in await h.runtime.list_pod_sandboxes() if s.pod_uid == uid}
    [container] = [c for c in await h.runtime.list_containers() if c.sandbox_id in sandboxes]
    assert container.log_path is not None
    container.log_path.parent.mkdir(parents=True, exist_ok=True)
    container.log_path.write_bytes(os.urandom(log_bytes))
    return container


async def runtime_ids(h: Harness) -> set[str]:
    return {c.id for c in await h.runtime.list_containers()}


async def node_event(h: Harness, reason: str) -> tuple[str, str, str]:
    """The first event about the Node with `reason` (waited for: events post in the
    background)."""
    for _ in range(200):
        listed = await h.api.list(resource_path("events", "default"))
        for e in listed["items"]:
            if e["involvedObject"].get("kind") == "Node" and e["reason"] == reason:
                return (e["type"], e["reason"], e["message"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {reason} event about the node")


async def test_reclaiming_dead_containers_and_unused_images_avoids_an_eviction(
        tmp_path: Path) -> None:
    with tmpfs(tmp_path / "kubelet", "64m") as root:
        async with running_kubelet(tmp_path) as h:
            assert not h.kubelet.stats.dedicated_image_fs
            await h.create(pod("keeper", argv=["sleep", "3600"]))
            await h.wait_pod("keeper", lambda p: _phase(p) == "Running")
            dead = await dead_container(h, "done", 8 * MiB)
            import_filler(h, tmp_path, 4 * MiB)
            assert image_names(h) == ["docker.io/library/busybox:latest", FILLER]
            # Met now; no longer met once the 8Mi log and the 8Mi of image are gone.
            h.kubelet.eviction_manager.thresholds = parse_eviction_hard(
                f"nodefs.available<{available(root) + 4 * MiB}")
            assert await h.kubelet.eviction_manager.synchronize() == []
            assert h.kubelet.eviction_manager.node_conditions == ["DiskPressure"]
            assert dead.id not in await runtime_ids(h)
            assert dead.log_path is not None and not dead.log_path.exists()
            # the base image is pinned; the running pod's image is in use anyway
            assert image_names(h) == ["docker.io/library/busybox:latest"]
            keeper = await h.get("keeper")
            assert keeper is not None and _phase(keeper) == "Running"
            assert await node_event(h, "EvictionThresholdMet") == (
                "Warning", "EvictionThresholdMet", "Attempting to reclaim ephemeral-storage")


async def test_when_reclaim_is_not_enough_one_pod_is_evicted_with_annotations(
        tmp_path: Path) -> None:
    with tmpfs(tmp_path / "kubelet", "64m") as root:
        async with running_kubelet(tmp_path) as h:
            await h.create(pod("victim", argv=["sleep", "3600"]))
            await h.wait_pod("victim", lambda p: _phase(p) == "Running")
            dead = await dead_container(h, "done", 1 * MiB)
            # More than the filesystem holds: still met after the reclaim.
            h.kubelet.eviction_manager.thresholds = parse_eviction_hard(
                f"nodefs.available<{available(root) + 128 * MiB}")
            started = await h.kubelet.eviction_manager.synchronize()
            assert dead.id not in await runtime_ids(h)
            assert [(e.pod["metadata"]["name"], e.signal) for e in started] == [
                ("victim", "nodefs.available")]
            evicted = await h.wait_pod("victim", lambda p: _phase(p) == "Failed")
            assert evicted["status"]["reason"] == "Evicted"
            assert evicted["status"]["message"].startswith(
                "The node was low on resource: ephemeral-storage. Threshold quantity: ")
            event = await h.wait_event("victim", lambda e: e["reason"] == "Evicted")
            assert event["type"] == "Warning"
            assert event["message"] == evicted["status"]["message"]
            # The fake runtime makes no writable layers: no container is offending.
            assert event["metadata"]["annotations"] == {
                "offending_containers": "", "offending_containers_usage": "",
                "starved_resource": "ephemeral-storage"}


async def test_image_store_on_its_own_filesystem_is_the_imagefs(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "kubelet", "64m") as root, \
            tmpfs(root / "images", "48m") as images:
        async with running_kubelet(tmp_path) as h:
            assert h.kubelet.stats.dedicated_image_fs
            await h.create(pod("keeper", argv=["sleep", "3600"]))
            await h.wait_pod("keeper", lambda p: _phase(p) == "Running")
            dead = await dead_container(h, "done", 1 * MiB)
            import_filler(h, tmp_path, 8 * MiB)
            await h.kubelet.eviction_manager.synchronize()
            summary = await h.kubelet.stats_summary()
            image_fs = summary["node"]["runtime"]["imageFs"]
            assert image_fs["capacityBytes"] == 48 * MiB
            assert image_fs["availableBytes"] == available(images)
            assert summary["node"]["fs"]["capacityBytes"] == 64 * MiB
            # nodefs pressure (split layout): dead containers only, the images stay
            h.kubelet.eviction_manager.thresholds = parse_eviction_hard(
                f"nodefs.available<{available(root) + 512 * 1024}")
            assert await h.kubelet.eviction_manager.synchronize() == []
            assert dead.id not in await runtime_ids(h)
            assert FILLER in image_names(h)
            # imagefs pressure: unused images only; DiskPressure; no pod evicted
            h.kubelet.eviction_manager.thresholds = parse_eviction_hard(
                f"imagefs.available<{available(images) + 4 * MiB}")
            assert await h.kubelet.eviction_manager.synchronize() == []
            assert h.kubelet.eviction_manager.node_conditions == ["DiskPressure"]
            assert image_names(h) == ["docker.io/library/busybox:latest"]
            keeper = await h.get("keeper")
            assert keeper is not None and _phase(keeper) == "Running"

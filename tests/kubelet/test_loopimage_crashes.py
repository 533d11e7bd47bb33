"""Pod storage images after a crash, and their release while usage walks are under way, on
real loop devices and ext4 images (root, `/dev/loop-control`, `mkfs.ext4`):

- housekeeping deletes the partial image (`.<uid>.img.tmp`) a crash during `mkfs` left for a
  pod it does not know, not one of a pod it knows;
- a crash between the mount and the log symlink: the restarted kubelet's set-up makes the
  link again (also over an empty directory or a wrong link);
- an unfinished directory walk (open directories on the image) does not keep the image busy:
  `release_pod` closes it first.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubelet_harness import log_dir

from ephemera.kubelet.stats import LoopImageAccounting
from ephemera.kubelet.stats.loopdev import devices_backed_by
from ephemera.kubelet.volumes import mounts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices need root")


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": {"containers": [{"name": "app"}]}}






async def test_partial_images_of_unknown_pods_are_swept(root: Path) -> None:
    accounting = LoopImageAccounting(root)
    storage = root / "pod-storage"
    storage.mkdir()
    known, orphan = str(uuid.uuid4()), str(uuid.uuid4())
    for uid in (known, orphan):
        with open(storage / f".{uid}.img.tmp", "wb") as f:
            f.truncate(64 << 20)
    await accounting.release_orphans({known})
    assert os.listdir(storage) == [f".{known}.img.tmp"]
    accounting.close()


@pytest.mark.parametrize("left", ["nothing", "empty dir", "wrong link"])
async def test_the_log_link_is_made_again_after_a_crash(root: Path, left: str) -> None:
    accounting = LoopImageAccounting(root)
    p = pod("a")
    uid = p["metadata"]["uid"]
    link = log_dir(root, p)
    await accounting.prepare_pod(p, link)
    (root / "pods" / uid / "logs" / "app").mkdir()
    link.unlink()  # the crash came before the link was made
    if left == "empty dir":
        link.mkdir()
    elif left == "wrong link":
        link.symlink_to(root / "elsewhere")
    restarted = LoopImageAccounting(root)  # adopts the mounted image
    await restarted.prepare_pod(p, link)
    assert link.is_symlink()
    assert os.readlink(link) == str(root / "pods" / uid / "logs")
    assert os.listdir(link) == ["app"]
    assert len(devices_backed_by(root / "pod-storage" / f"{uid}.img")) == 1
    accounting.close()
    restarted.close()


async def test_an_unfinished_walk_does_not_keep_the_image_busy(root: Path) -> None:
    accounting = LoopImageAccounting(root)
    p = pod("busy")
    uid = p["metadata"]["uid"]
    await accounting.prepare_pod(p, log_dir(root, p))
    data = root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "cache"
    for d in range(4):
        (data / f"d{d}").mkdir(parents=True)
        for f in range(20):
            (data / f"d{d}" / f"f{f}").write_bytes(b"x")
    walks = accounting.walk
    walks.max_entries_per_pass = 10
    await walks.measure([data])
    assert walks.usage(data) is None  # unfinished: its directories are open on the image
    await accounting.release_pod(uid)
    assert not mounts.is_mountpoint(root / "pods" / uid)
    assert not (root / "pod-storage" / f"{uid}.img").exists()
    await walks.measure([data])  # measuring again works (the directory is gone)
    assert walks.usage(data) is None
    accounting.close()

"""`mounts.is_mountpoint` against real filesystems: a btrfs subvolume (its own device number,
no mount) is not a mount point, a bind mount within one filesystem (its parent's device) is;
the kernel's answer (statx) and the mount table's agree."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ephemera.kubelet.volumes import mounts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")


@pytest.fixture
def btrfs(tmp_path: Path) -> Iterator[Path]:
    if shutil.which("mkfs.btrfs") is None:
        pytest.fail("mkfs.btrfs is missing (btrfs-progs, `make setup`)")
    image = tmp_path / "fs.img"
    with image.open("wb") as f:
        f.truncate(128 << 20)
    subprocess.run(["mkfs.btrfs", "-q", str(image)], check=True)
    point = tmp_path / "mnt"
    point.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(point)], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.mark.parametrize("kernel", [True, False], ids=["statx", "mountinfo"])
def test_mount_points_on_btrfs(btrfs: Path, kernel: bool,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    if not kernel:
        monkeypatch.setattr(mounts, "_statx", None)
    else:
        assert mounts._mount_root(str(btrfs)) is True  # the kernel answers (5.8+)
    subvolume = btrfs / "sub"
    subprocess.run(["btrfs", "-q", "subvolume", "create", str(subvolume)], check=True)
    assert os.stat(subvolume).st_dev != os.stat(btrfs).st_dev
    plain = btrfs / "plain"
    plain.mkdir()
    source = btrfs / "source"
    source.mkdir()
    bound = btrfs / "bound"
    bound.mkdir()
    mounts.bind_mount(source, bound)
    try:
        assert os.stat(bound).st_dev == os.stat(btrfs).st_dev
        missing = btrfs / "missing"
        answers = {p.name: mounts.is_mountpoint(p)
                   for p in (btrfs, subvolume, plain, bound, missing)}
        assert answers == {"mnt": True, "sub": False, "plain": False, "bound": True,
                           "missing": False}
    finally:
        mounts.unmount(bound)

"""Per-pod sparse ext4 images, loop-mounted on the pod directory: the storage of the O(1)
accounting backend (`accounting.py`). Blocking; the backend calls it from threads.

Layout for a pod with an image (the paths everything else uses do not change):

- `<root>/pod-storage/<uid>.img`: the image, a sparse file (only what the pod writes, plus
  about 2 MiB of ext4 metadata, takes host disk; `discard` gives freed blocks back);
- `<root>/pods/<uid>/`: the image's mount point, so the containers' bundles and writable
  layers (`containers/<name>/<attempt>/{upper,work}`, runtime/oci.py) and the pod's volumes
  (`volumes/...`, disk emptyDirs among them) are on it;
- `<root>/pods/<uid>/logs/`: the container logs; `<root>/logs/pods/<ns>_<name>_<uid>` (the
  CRI log directory) is a symlink to it.

The image is made with `mkfs.ext4 -F -q -b 4096 -m 0 -N <size/4096, at most 2^24>
-O ^has_journal,^resize_inode -E lazy_itable_init=1,nodiscard -G 1024` (no journal, no
reserved blocks, inode tables never written: about 25 ms and 2 MiB of host disk for a
250 GiB image) and mounted `discard,noinit_itable` through an autoclear loop device
(`loopdev.py`).

With a `capacity` (enforcement) the filesystem is made a little larger than that and a
ballast file (`lost+found/.ephemera-ballast`, fallocated) takes the rest, so exactly about
`capacity` bytes stay available: a write past it fails with ENOSPC.

**Usage** is `statvfs` of the mount: `(f_blocks - f_bfree) * f_frsize` and
`f_files - f_ffree`, minus the baseline of an empty image (the root directory's blocks, the
reserved inodes, `lost+found` with the ballast), read in about 0.03 ms whatever the pod
holds. It counts what du counts on the same files (allocated blocks, hard links once,
directories, extent blocks), for everything the pod wrote on the image.

**Crash safety**: `adopt()` finds the images mounted by an earlier kubelet in
/proc/self/mountinfo (the mount point `<root>/pods/<uid>` on `/dev/loopN` whose backing file
is `<root>/pod-storage/<uid>.img`); `ensure` mounts an image file that exists but is not
mounted (after a reboot) instead of making a new one, and makes the log symlink again when a
crash came between the mount and the link; `release_orphans` also deletes the partial
images (`.<uid>.img.tmp`) of a crash during `mkfs`; `release` unmounts (never lazily: a
mount left below, e.g. a volume, makes it fail and it is retried), checks that no loop device
is still bound to the image (autoclear detaches it on unmount) and deletes the file. A pod
directory that already holds files (a pod started without an image) never gets one.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ephemera.kubelet.stats import loopdev
from ephemera.kubelet.stats.du import DiskUsage, disk_usage
from ephemera.kubelet.volumes import mounts

__all__ = [
    "BLOCK_SIZE",
    "IMAGES_DIR",
    "PodImage",
    "PodImages",
    "mkfs_command",
]

log = logging.getLogger(__name__)

IMAGES_DIR: Final = "pod-storage"
BLOCK_SIZE: Final = 4096
MOUNT_OPTIONS: Final = "discard,noinit_itable"
BALLAST: Final = ".ephemera-ballast"
MAX_INODES: Final = 1 << 24
RESERVED_INODES: Final = 10  # ext4: inodes 1..10 are reserved (the root directory is 2)
# Room for ext4's own metadata (inode tables: 256 B per 4 KiB; delalloc reserve: 2% up to
# 16 MiB; bitmaps, descriptors) when an image must leave exactly `capacity` available.
_OVERHEAD_FRACTION: Final = 8
_OVERHEAD_BYTES: Final = 64 << 20


def mkfs_command(image: Path, size_bytes: int, mkfs: str = "mkfs.ext4") -> list[str]:
    inodes = max(min(size_bytes // BLOCK_SIZE, MAX_INODES), 1024)
    return [mkfs, "-q", "-F", "-b", str(BLOCK_SIZE), "-m", "0", "-N", str(inodes),
            "-O", "^has_journal,^resize_inode", "-E", "lazy_itable_init=1,nodiscard",
            "-G", "1024", str(image)]


@dataclass(frozen=True)
class PodImage:
    """A mounted pod image and the usage of its empty state."""

    uid: str
    image: Path
    mount_point: Path
    device: str
    baseline_bytes: int
    baseline_inodes: int


def _is_empty_dir(path: Path) -> bool:
    try:
        with os.scandir(path) as entries:
            return next(entries, None) is None
    except FileNotFoundError:
        return True


def _baseline(mount_point: Path) -> tuple[int, int]:
    """What an empty image uses: the root directory, the reserved inodes, lost+found (with
    the ballast)."""
    root = os.lstat(mount_point)
    lost = disk_usage(mount_point / "lost+found")
    return root.st_blocks * 512 + lost.bytes, RESERVED_INODES + lost.inodes


class PodImages:
    """The pod images of the kubelet rooted at `root_dir` (see the module docstring)."""

    def __init__(self, root_dir: Path, mkfs: str = "mkfs.ext4") -> None:
        self.root_dir = Path(os.path.realpath(root_dir))
        self.images_dir = self.root_dir / IMAGES_DIR
        self.pods_dir = self.root_dir / "pods"
        self.logs_dir = self.root_dir / "logs" / "pods"
        self.mkfs = mkfs
        self._mounted: dict[str, PodImage] = {}
        self._lock = threading.Lock()

    def image_path(self, uid: str) -> Path:
        return self.images_dir / f"{uid}.img"

    def mount_point(self, uid: str) -> Path:
        return self.pods_dir / uid

    def mounted(self) -> dict[str, PodImage]:
        return dict(self._mounted)

    def get(self, uid: str) -> PodImage | None:
        return self._mounted.get(uid)

    # -- adoption --------------------------------------------------------------------------

    def _find_mount(self, uid: str) -> str | None:
        """The loop device of the image of `uid` mounted on its pod directory, or None."""
        point = str(self.mount_point(uid))
        image = str(self.image_path(uid))
        for m in mounts.mountinfo():
            if m.mount_point == point and m.source.startswith("/dev/loop") and \
                    loopdev.backing_file(m.source) == image:
                return m.source
        return None

    def adopt(self) -> list[str]:
        """Record the images mounted by an earlier kubelet; their UIDs."""
        with self._lock:
            found = []
            by_point = {m.mount_point: m for m in mounts.mountinfo()}
            with contextlib.suppress(FileNotFoundError):
                for name in sorted(os.listdir(self.images_dir)):
                    if not name.endswith(".img"):
                        continue
                    uid = name.removesuffix(".img")
                    m = by_point.get(str(self.mount_point(uid)))
                    if m is None or not m.source.startswith("/dev/loop") or \
                            loopdev.backing_file(m.source) != str(self.image_path(uid)):
                        continue
                    self._record(uid, m.source)
                    found.append(uid)
            return found

    def _record(self, uid: str, device: str) -> PodImage:
        point = self.mount_point(uid)
        baseline_bytes, baseline_inodes = _baseline(point)
        image = PodImage(uid, self.image_path(uid), point, device, baseline_bytes,
                         baseline_inodes)
        self._mounted[uid] = image
        return image

    # -- set-up ----------------------------------------------------------------------------

    def ensure(self, uid: str, log_dir: Path, size_bytes: int,
               capacity: int | None = None) -> PodImage | None:
        """The pod's image mounted on its directory, made (`size_bytes`, or sized to leave
        `capacity` available) when there is none. None when the pod directory or its log
        directory already holds files written without an image."""
        with self._lock:
            log_dir = Path(log_dir)
            point = self.mount_point(uid)
            image = self._mounted.get(uid)
            if image is not None:
                _link_logs(point, log_dir)  # adopted: a crash may have come before the link
                return image
            device = self._find_mount(uid)
            if device is not None:
                _link_logs(point, log_dir)
                return self._record(uid, device)
            if not _is_empty_dir(point) or (not log_dir.is_symlink()
                                            and not _is_empty_dir(log_dir)):
                return None
            path = self.image_path(uid)
            point.mkdir(parents=True, exist_ok=True)
            if path.exists():  # made earlier (e.g. before a reboot): mount it again
                device = loopdev.attach_and_mount(path, point, "ext4", MOUNT_OPTIONS)
            else:
                device = self._create(path, point, size_bytes, capacity)
            try:
                _link_logs(point, log_dir)
                return self._record(uid, device)
            except BaseException:
                with contextlib.suppress(OSError):
                    mounts.unmount(point, lazy_on_busy=False)
                raise

    def _create(self, path: Path, point: Path, size_bytes: int, capacity: int | None) -> str:
        if capacity is not None:
            size_bytes = capacity + capacity // _OVERHEAD_FRACTION + _OVERHEAD_BYTES
        size_bytes = -(-size_bytes // BLOCK_SIZE) * BLOCK_SIZE
        self.images_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.tmp")
        try:
            with open(partial, "wb") as fh:
                fh.truncate(size_bytes)
            result = subprocess.run(mkfs_command(partial, size_bytes, self.mkfs),
                                    stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                    timeout=120)
            if result.returncode != 0:
                raise loopdev.LoopError(errno.EIO, f"{self.mkfs} {partial}: "
                                           f"{(result.stderr or result.stdout).strip()}")
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        try:
            device = loopdev.attach_and_mount(path, point, "ext4", MOUNT_OPTIONS)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        if capacity is not None:
            try:
                _fill_ballast(point, capacity)
            except BaseException:
                with contextlib.suppress(OSError):
                    mounts.unmount(point, lazy_on_busy=False)
                path.unlink(missing_ok=True)
                raise
        return device

    # -- usage -----------------------------------------------------------------------------

    def usage(self, uid: str) -> DiskUsage | None:
        """What the pod wrote on its image (statvfs minus the empty image), or None when it
        has none."""
        image = self._mounted.get(uid)
        if image is None:
            return None
        try:
            st = os.statvfs(image.mount_point)
        except OSError:
            return None
        used = (st.f_blocks - st.f_bfree) * st.f_frsize - image.baseline_bytes
        inodes = (st.f_files - st.f_ffree) - image.baseline_inodes
        return DiskUsage(max(used, 0), max(inodes, 0), time.time())

    # -- clean-up --------------------------------------------------------------------------

    def release(self, uid: str) -> None:
        """Unmount the pod's image, check its loop device is gone, delete the file and the
        log symlink. Raises (to be retried) when something is still mounted below."""
        with self._lock:
            point = self.mount_point(uid)
            path = self.image_path(uid)
            device = self._find_mount(uid)
            if device is not None:
                below = [m.mount_point for m in mounts.mountpoints_under(point)
                         if m.mount_point != str(point)]
                if below:
                    raise loopdev.LoopError(errno.EBUSY, f"mounts left under {point}: {below}")
                mounts.unmount(point, lazy_on_busy=False)
            self._mounted.pop(uid, None)
            self._remove_log_link(uid)
            for leftover in loopdev.devices_backed_by(path):
                for _ in range(100):  # autoclear runs on the last close: give it a moment
                    if loopdev.backing_file(leftover) is None:
                        break
                    time.sleep(0.01)
                else:
                    loopdev.detach(leftover)
            path.unlink(missing_ok=True)

    def _remove_log_link(self, uid: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.logs_dir):
                entry = self.logs_dir / name
                if name.endswith(f"_{uid}") and entry.is_symlink():
                    entry.unlink(missing_ok=True)

    def image_uids(self) -> set[str]:
        """The pods with an image file or a mounted image."""
        uids = set(self._mounted)
        with contextlib.suppress(FileNotFoundError):
            uids.update(n.removesuffix(".img") for n in os.listdir(self.images_dir)
                        if n.endswith(".img"))
        return uids

    def partial_uids(self) -> set[str]:
        """The pods with a partial image (`.<uid>.img.tmp`: being made, or left by a crash
        during `mkfs`)."""
        with contextlib.suppress(FileNotFoundError):
            return {n[1:].removesuffix(".img.tmp") for n in os.listdir(self.images_dir)
                    if n.startswith(".") and n.endswith(".img.tmp")}
        return set()

    def release_orphans(self, known: set[str]) -> list[str]:
        """Release the images of pods not in `known`, and delete their partial images; the
        UIDs released."""
        for uid in sorted(self.partial_uids() - set(known)):
            log.info("deleting the partial storage image of orphaned pod %s", uid)
            with contextlib.suppress(FileNotFoundError):
                (self.images_dir / f".{uid}.img.tmp").unlink()
        released = []
        for uid in sorted(self.image_uids() - set(known)):
            try:
                self.release(uid)
                released.append(uid)
            except OSError as err:
                log.warning("releasing the storage image of orphaned pod %s: %s", uid, err)
        return released


def _link_logs(point: Path, log_dir: Path) -> None:
    """Make `log_dir` (the CRI log directory) a symlink to the image's `logs/`, unless it
    is one already. An empty directory or a wrong link there is replaced; a directory
    holding files is left alone (logged)."""
    target = point / "logs"
    target.mkdir(exist_ok=True)
    if log_dir.is_symlink():
        if os.readlink(log_dir) == str(target):
            return
        log_dir.unlink()
    elif log_dir.exists():
        if not _is_empty_dir(log_dir):
            log.warning("log directory %s holds files: not linked to %s", log_dir, target)
            return
        log_dir.rmdir()
    log_dir.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, log_dir)


def _fill_ballast(point: Path, capacity: int) -> None:
    """Fallocate the ballast file until about `capacity` bytes stay available (at most two
    blocks fewer: each extension may cost an extent block)."""
    ballast = point / "lost+found" / BALLAST
    fd = os.open(ballast, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    try:
        size = 0
        for _ in range(8):
            st = os.statvfs(point)
            extra = (st.f_bavail * st.f_frsize - capacity) // BLOCK_SIZE * BLOCK_SIZE
            if extra <= 0:
                break
            os.posix_fallocate(fd, size, extra)
            size += extra
        st = os.statvfs(point)
        if st.f_bavail * st.f_frsize < capacity - 2 * BLOCK_SIZE:
            raise loopdev.LoopError(errno.ENOSPC, f"pod image at {point} leaves "
                                        f"{st.f_bavail * st.f_frsize} bytes, not {capacity}")
    finally:
        os.close(fd)


def probe(work_dir: Path, mkfs: str = "mkfs.ext4") -> str:
    """Whether pod images work here: "" when a small image can be made, mounted and
    released, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which(mkfs) is None:
        return f"{mkfs} is not installed"
    if not os.path.exists(loopdev.LOOP_CONTROL):
        return f"{loopdev.LOOP_CONTROL} is missing"
    probe_dir = Path(work_dir) / f".probe-{os.getpid()}-{threading.get_ident()}"
    images = PodImages(probe_dir, mkfs)
    try:
        images.ensure("probe", probe_dir / "logs" / "pods" / "probe_probe_probe", 16 << 20)
        images.release("probe")
        return ""
    except (OSError, subprocess.SubprocessError) as err:
        return str(err)
    finally:
        with contextlib.suppress(OSError):
            images.release("probe")
        shutil.rmtree(probe_dir, ignore_errors=True)

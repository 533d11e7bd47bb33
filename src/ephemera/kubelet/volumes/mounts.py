"""Mount helpers for the volume plugins: tmpfs with a size, read-only bind, read-only overlay,
unmount, and reading `/proc/self/mountinfo`.

Mounts are made with the `mount(2)` and `umount2(2)` system calls through ctypes (libc), not
by running `mount`/`umount`: no fork per mount, exact errno values, and no dependence on the
util-linux binaries. Every function here blocks (they are system calls and directory walks);
callers on the event loop run them with `asyncio.to_thread`. Paths are compared after
`os.path.realpath`, the form the kernel writes into mountinfo.

The kubelet runs in the host mount namespace, whose propagation is private on the machines
ephemera targets (see linux-runtime-facts.md section 11), so a mount made here is seen by a
container only when the runtime bind-mounts it at container creation.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MNT_DETACH",
    "MS_BIND",
    "MS_NODEV",
    "MS_NOEXEC",
    "MS_NOSUID",
    "MS_RDONLY",
    "MS_REC",
    "MS_REMOUNT",
    "MountError",
    "MountInfo",
    "bind_mount",
    "is_mountpoint",
    "mount_device",
    "mount_overlay_readonly",
    "mount_tmpfs",
    "mountinfo",
    "mountpoints_under",
    "unmount",
    "unmount_all_under",
]

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MNT_DETACH = 0x2

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]
_libc.mount.restype = ctypes.c_int
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.umount2.restype = ctypes.c_int


class MountError(OSError):
    """A mount or unmount system call failed; `errno` is set, the message names the call."""


@dataclass(frozen=True)
class MountInfo:
    """One line of /proc/self/mountinfo (the fields ephemera uses)."""

    mount_id: int
    parent_id: int
    mount_point: str
    options: str
    fs_type: str
    source: str
    super_options: str


def _b(value: str | os.PathLike[str] | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def _mount(
    source: str, target: Path, fs_type: str | None, flags: int, data: str | None
) -> None:
    data_b = _b(data)
    rc = _libc.mount(_b(source), _b(target), _b(fs_type), flags, data_b)
    if rc != 0:
        err = ctypes.get_errno()
        what = f"mount -t {fs_type or 'none'} {source} {target}"
        if data:
            what += f" -o {data}"
        raise MountError(err, f"{what}: {os.strerror(err)}")


def mount_tmpfs(target: Path, size_bytes: int | None = None, mode: int = 0o777) -> None:
    """Mount a tmpfs at `target` (which must exist). `size=` is set when `size_bytes` > 0;
    `noswap` is added when the kernel supports it (6.4 and newer), as upstream does."""
    options = [f"mode={mode:o}"]
    if size_bytes is not None and size_bytes > 0:
        options.append(f"size={size_bytes}")
    try:
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, ",".join([*options, "noswap"]))
    except MountError as exc:
        if exc.errno != errno.EINVAL:
            raise
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, ",".join(options))


def mount_device(device: str, target: Path, fs_type: str, options: str = "") -> None:
    """Mount the block device `device` (e.g. a loop device) with filesystem `fs_type` at
    `target` (which must exist), with the filesystem options `options`."""
    _mount(device, target, fs_type, 0, options or None)


def bind_mount(source: Path, target: Path, read_only: bool = False) -> None:
    """Bind-mount `source` on `target`; a read-only bind needs a second, remounting call."""
    _mount(str(source), target, None, MS_BIND | MS_REC, None)
    if read_only:
        try:
            _mount(str(source), target, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)
        except MountError:
            unmount(target)
            raise


def mount_overlay_readonly(lower_dirs: list[Path], target: Path) -> None:
    """An overlay of two or more lower dirs (top first) with no upper dir: read-only by
    construction. The kernel refuses a single lower dir without an upper dir; bind instead."""
    if len(lower_dirs) < 2:
        raise ValueError("an overlay without an upper dir needs at least two lower dirs")
    data = "lowerdir=" + ":".join(_escape_overlay(os.path.realpath(p)) for p in lower_dirs)
    if len(data) >= _PAGE_SIZE:
        raise MountError(
            errno.E2BIG,
            f"overlay options for {len(lower_dirs)} layers exceed one page ({_PAGE_SIZE} bytes)",
        )
    _mount("overlay", target, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, data)


def _escape_overlay(path: str) -> str:
    return path.replace("\\", "\\\\").replace(":", "\\:").replace(",", "\\,")


def unmount(target: Path, lazy_on_busy: bool = True) -> None:
    """Unmount `target`. On EBUSY (a process has its cwd or a file open there) fall back to a
    lazy detach when `lazy_on_busy`, so the mount leaves the mount table either way; the
    filesystem itself lives on until the last user lets go. EINVAL (not a mount point) is not
    an error."""
    rc = _libc.umount2(_b(target), 0)
    if rc == 0:
        return
    err = ctypes.get_errno()
    if err == errno.EINVAL or err == errno.ENOENT:
        return
    if err == errno.EBUSY and lazy_on_busy:
        if _libc.umount2(_b(target), MNT_DETACH) == 0:
            return
        err = ctypes.get_errno()
    raise MountError(err, f"umount {target}: {os.strerror(err)}")


def _unescape(field: str) -> str:
    if "\\" not in field:
        return field
    out: list[str] = []
    i = 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mountinfo(pid: int | str = "self") -> list[MountInfo]:
    """The mount table of a process's mount namespace, in mount order."""
    result: list[MountInfo] = []
    with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            fields = line.split()
            try:
                sep = fields.index("-", 6)
            except ValueError:
                continue
            result.append(
                MountInfo(
                    mount_id=int(fields[0]),
                    parent_id=int(fields[1]),
                    mount_point=_unescape(fields[4]),
                    options=fields[5],
                    fs_type=fields[sep + 1],
                    source=_unescape(fields[sep + 2]) if len(fields) > sep + 2 else "",
                    super_options=fields[sep + 3] if len(fields) > sep + 3 else "",
                )
            )
    return result


def is_mountpoint(path: Path) -> bool:
    """`path` is itself a mount point. The kernel says so without the mount table (statx's
    `STATX_ATTR_MOUNT_ROOT`, Linux 5.8+; reading and parsing the table costs milliseconds on
    a host with hundreds of mounts); an older kernel's answer is the table's
    (/proc/self/mountinfo). Neither compares devices: a btrfs subvolume has its own device
    number without being a mount point, and a bind mount within one filesystem shares its
    parent's."""
    real = os.path.realpath(path)
    root = _mount_root(real)
    if root is not None:
        return root
    return any(m.mount_point == real for m in mountinfo())


_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_AT_NO_AUTOMOUNT = 0x800
_STATX_ATTR_MOUNT_ROOT = 0x2000
_STATX_SIZE = 256  # struct statx
_STATX_ATTRIBUTES = 8  # offset of stx_attributes (u64)
_STATX_ATTRIBUTES_MASK = 56  # offset of stx_attributes_mask (u64)
_statx = getattr(_libc, "statx", None)
if _statx is not None:
    _statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint,
                       ctypes.c_void_p]
    _statx.restype = ctypes.c_int


def _mount_root(path: str) -> bool | None:
    """statx's `STATX_ATTR_MOUNT_ROOT` of `path` (False when nothing is there), or None when
    the kernel (or libc) does not report it."""
    if _statx is None:
        return None
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    if _statx(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW | _AT_NO_AUTOMOUNT, 0,
              buf) != 0:
        # nothing there is no mount point; other errors (ENOSYS...): the table's answer
        return False if ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR) else None
    raw = buf.raw
    if not int.from_bytes(raw[_STATX_ATTRIBUTES_MASK:_STATX_ATTRIBUTES_MASK + 8],
                          sys.byteorder) & _STATX_ATTR_MOUNT_ROOT:
        return None
    return bool(int.from_bytes(raw[_STATX_ATTRIBUTES:_STATX_ATTRIBUTES + 8], sys.byteorder)
                & _STATX_ATTR_MOUNT_ROOT)


def mountpoints_under(path: Path) -> list[MountInfo]:
    """Mounts at `path` or below it, deepest first (the order to unmount them in)."""
    real = os.path.realpath(path)
    prefix = real.rstrip("/") + "/"
    found = [m for m in mountinfo() if m.mount_point == real or m.mount_point.startswith(prefix)]
    # Later mounts stack on earlier ones; deeper paths must go before their parents.
    order = {id(m): i for i, m in enumerate(found)}
    found.sort(key=lambda m: (m.mount_point.count("/"), order[id(m)]), reverse=True)
    return found


def unmount_all_under(path: Path) -> None:
    """Unmount everything at or below `path` (stacked mounts included), deepest first."""
    for _ in range(64):  # stacked mounts on one point need one call each
        found = mountpoints_under(path)
        if not found:
            return
        for m in found:
            unmount(Path(m.mount_point))
    remaining = [m.mount_point for m in mountpoints_under(path)]
    if remaining:
        raise MountError(errno.EBUSY, f"mounts remain under {path}: {remaining}")

"""Loop devices for the loop-image accounting backend: attach an image file to a free loop
device and mount it in one step, find the devices backed by a file, detach one.

Everything is done with ioctls on `/dev/loop-control` and `/dev/loopN` (no `losetup` or
`mount` process), the way util-linux's `mount -o loop` does it:

1. `LOOP_CTL_GET_FREE` names a free device (the kernel creates `/dev/loopN` on demand);
2. `LOOP_CONFIGURE` (Linux 5.8+; `LOOP_SET_FD` + `LOOP_SET_STATUS64` before that) binds the
   image with `LO_FLAGS_AUTOCLEAR`; a device another process took meanwhile answers EBUSY
   and the next free one is tried;
3. the device is mounted while our descriptor is still open, then the descriptor is closed.

With autoclear the kernel detaches the device on its last close: when the filesystem is
unmounted, or, if the kubelet dies between steps 2 and 3, when its descriptor is closed by
the exit. So a loop device is never leaked by a crash and never needs an explicit detach;
`detach` is kept for devices attached without autoclear by something else.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import time
from pathlib import Path
from typing import Final

from ephemera.kubelet.volumes import mounts

__all__ = ["LoopError", "attach_and_mount", "backing_file", "detach", "devices_backed_by"]

LOOP_CONTROL: Final = "/dev/loop-control"
LOOP_SET_FD: Final = 0x4C00
LOOP_CLR_FD: Final = 0x4C01
LOOP_SET_STATUS64: Final = 0x4C04
LOOP_CONFIGURE: Final = 0x4C0A
LOOP_CTL_GET_FREE: Final = 0x4C82
LO_FLAGS_AUTOCLEAR: Final = 4
_NAME_SIZE: Final = 64
# struct loop_info64: 5 x u64, 4 x u32 (lo_flags last), file name, crypt name, key, 2 x u64.
_INFO64: Final = struct.Struct(f"=5Q4I{_NAME_SIZE}s{_NAME_SIZE}s32s2Q")
_ATTEMPTS: Final = 16


class LoopError(OSError):
    """Attaching, mounting or detaching a loop device failed."""


def _info64(image: Path) -> bytes:
    name = os.fsencode(image)[: _NAME_SIZE - 1]
    return _INFO64.pack(0, 0, 0, 0, 0, 0, 0, 0, LO_FLAGS_AUTOCLEAR, name, b"", b"", 0, 0)


def _bind(loop_fd: int, image_fd: int, image: Path) -> None:
    """Bind `image_fd` to the loop device `loop_fd` with autoclear."""
    config = struct.pack("=II", image_fd, 0) + _info64(image) + bytes(64)
    try:
        fcntl.ioctl(loop_fd, LOOP_CONFIGURE, config)
        return
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOTTY):
            raise
    fcntl.ioctl(loop_fd, LOOP_SET_FD, image_fd)  # kernels before 5.8
    try:
        fcntl.ioctl(loop_fd, LOOP_SET_STATUS64, _info64(image))
    except OSError:
        with contextlib.suppress(OSError):
            fcntl.ioctl(loop_fd, LOOP_CLR_FD, 0)
        raise


def attach_and_mount(image: Path, target: Path, fs_type: str = "ext4",
                     options: str = "") -> str:
    """Attach `image` to a free loop device (autoclear) and mount it at `target`; the
    device path (`/dev/loopN`)."""
    image_fd = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        control = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
        try:
            for _ in range(_ATTEMPTS):
                number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
                device = f"/dev/loop{number}"
                try:
                    loop_fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
                except FileNotFoundError:
                    time.sleep(0.001)  # devtmpfs has not made the node yet
                    continue
                try:
                    try:
                        _bind(loop_fd, image_fd, image)
                    except OSError as err:
                        if err.errno == errno.EBUSY:
                            continue  # taken by another process meanwhile
                        raise LoopError(err.errno, f"attaching {image} to {device}: "
                                                   f"{os.strerror(err.errno or 0)}") from None
                    mounts.mount_device(device, target, fs_type, options)
                    return device
                finally:
                    os.close(loop_fd)  # autoclear: the device detaches when unmounted
            raise LoopError(errno.EBUSY, f"no free loop device for {image}")
        finally:
            os.close(control)
    finally:
        os.close(image_fd)


def backing_file(device: str) -> str | None:
    """The file `device` (`/dev/loopN` or `loopN`) is bound to, or None when it is free."""
    name = os.path.basename(device)
    try:
        text = Path(f"/sys/block/{name}/loop/backing_file").read_text().strip()
    except (FileNotFoundError, NotADirectoryError, OSError):
        return None
    return text.removesuffix(" (deleted)") or None


def devices_backed_by(image: Path) -> list[str]:
    """The loop devices bound to `image` (compared by real path)."""
    wanted = os.path.realpath(image)
    found = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir("/sys/block"):
            if name.startswith("loop") and backing_file(name) == wanted:
                found.append(f"/dev/{name}")
    return sorted(found)


def detach(device: str) -> None:
    """Detach `device` (`LOOP_CLR_FD`); a free device is not an error."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        fcntl.ioctl(fd, LOOP_CLR_FD, 0)
    except OSError as err:
        if err.errno != errno.ENXIO:
            raise LoopError(err.errno, f"detaching {device}: {os.strerror(err.errno or 0)}") \
                from None
    finally:
        os.close(fd)

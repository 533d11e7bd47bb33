"""One process per directory: `ephemera up` holds `<data-dir>/up.lock`, a kubelet holds
`<root-dir>/kubelet.lock`, for as long as it runs.

The lock is an exclusive `flock(2)` on the file, taken before the command starts anything;
the kernel releases it when the process ends, however it ends (a `kill -9` leaves no stale
lock). The holder writes its PID into the file, so a second process refused names it. The
descriptor is not inherited by child processes (Python's default), so a component `up`
starts, or a container shim the kubelet leaves running, never holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

__all__ = ["DirLock", "DirLockedError", "lock_dir"]

UP_LOCK = "up.lock"
KUBELET_LOCK = "kubelet.lock"


class DirLockedError(Exception):
    """Another live process holds the directory's lock."""

    def __init__(self, directory: Path, holder: int | None) -> None:
        who = f"process {holder}" if holder is not None else "another process"
        super().__init__(f"{directory} is in use by {who}; stop it first, or use another "
                         f"directory")
        self.directory = directory
        self.holder = holder


class DirLock:
    """A held lock; `release()` (or the process's end) lets it go."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


def _holder(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text else None
    return None


def lock_dir(directory: Path, name: str) -> DirLock:
    """Take `directory/name` (the directory is made if missing); raise `DirLockedError`
    when a live process holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise DirLockedError(directory, holder) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return DirLock(path, fd)

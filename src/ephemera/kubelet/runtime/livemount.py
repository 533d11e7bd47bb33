"""Live mounts: attaching a host directory to a running container, and detaching it, without
restarting the container (`restartPolicy: NotRequired`, KEP-6395's deferred "Live Hot-Plug").

The sequence (`linux-runtime-facts.md` §6; the way Incus' `forkmount` does it):

1. In the caller (the host's mount namespace): a pidfd of the container's init names the
   container race-free; `/proc/PID/root` opened as an `O_PATH` directory is the container's
   root (a directory of the container's mount namespace); `open_tree(OPEN_TREE_CLONE |
   AT_RECURSIVE)` of the host path is a detached copy of the host mount, and `mount_setattr`
   makes it `nosuid,nodev` (and read-only for a read-only mount) before anyone sees it.
2. In a forked helper process (`setns` of a mount namespace needs a single-threaded caller;
   the kubelet has threads): `setns(pidfd, CLONE_NEWNS)`, then the target is resolved and
   created component by component under the container's root with `openat2(RESOLVE_IN_ROOT |
   RESOLVE_NO_MAGICLINKS)`: a symlink in a *parent* component is followed as the container
   sees it (inside its root, as runc resolves mount destinations at start); magic links
   (`/proc/1/root`) are refused (ELOOP); the *last* component must be a directory and not a
   symlink (ENOTDIR, ELOOP), so a symlink the container plants at the mount path never
   redirects the mount. `move_mount(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)` then
   attaches the tree to the opened directory itself (no path is looked up a second time).
3. Removal: the same helper, the parent directory resolved the same way, `fchdir` to it and
   `umount2(name, MNT_DETACH | UMOUNT_NOFOLLOW)`. A target that is not (or no longer) a mount
   point is not an error: removal is idempotent.

A failure before `move_mount` leaves nothing behind: the detached tree dissolves when its file
descriptor is closed. Errors are `LiveMountError`s naming the container, the path and the
cause (Go's spelling of the errno, as upstream's messages print it), with the errno kept.

`container_mounts(pid)` reads the container's mount table (`/proc/PID/mountinfo`, read from the
host: the container's own procfs belongs to its pid namespace) and `mount_source(path)` tells
which mount and filesystem root a host path is, so a restarted kubelet can tell whether a
live mount is already there (no double mount) or still there (no lost unmount).

Syscall numbers are x86_64's (the only architecture ephemera runs on).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from dataclasses import dataclass

from ephemera.api.goformat import go_quote
from ephemera.kubelet.runtime.base import LiveMountError

_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_OPENAT2 = 437
_SYS_MOUNT_SETATTR = 442

_OPEN_TREE_CLONE = 0x1
_AT_RECURSIVE = 0x8000
_AT_EMPTY_PATH = 0x1000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOVE_MOUNT_T_EMPTY_PATH = 0x40
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_MS_PRIVATE = 1 << 18
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE_IN_ROOT = 0x10
_CLONE_NEWNS = 0x20000
_MNT_DETACH = 0x2
_UMOUNT_NOFOLLOW = 0x8
_AT_FDCWD = -100

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.mkdirat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def go_strerror(err: int) -> str:
    """The errno's text as Go's syscall.Errno prints it (lower-case first letter)."""
    text = os.strerror(err)
    return text[:1].lower() + text[1:]


def _syscall(number: int, *args: object) -> int:
    result = int(_libc.syscall(number, *args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    how = _OpenHow(flags=flags | os.O_CLOEXEC, mode=0, resolve=resolve)
    return _syscall(_SYS_OPENAT2, ctypes.c_int(dirfd), path.encode(), ctypes.byref(how),
                    ctypes.c_size_t(ctypes.sizeof(how)))


def components(container_path: str) -> list[str]:
    """The path's components; an absolute, normalized path other than "/" is required."""
    if not container_path.startswith("/"):
        raise ValueError("not an absolute path")
    parts = [p for p in container_path.split("/") if p]
    if not parts:
        raise ValueError("cannot mount over the container's root")
    if any(p in (".", "..") for p in parts):
        raise ValueError("not a normalized path")
    return parts


_DIR = os.O_PATH | os.O_DIRECTORY


def _open_parent(root: int, parts: list[str], create: bool) -> int:
    """An O_PATH fd of the target's parent directory, resolved inside the container's root
    (symlinks followed as the container sees them, magic links refused); missing directories
    are created one at a time when `create`."""
    fd = os.dup(root)
    for depth in range(1, len(parts)):
        prefix = "/".join(parts[:depth])
        try:
            nxt = _openat2(root, prefix, _DIR, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
        except FileNotFoundError:
            if not create:
                os.close(fd)
                raise
            _mkdir(fd, parts[depth - 1], "/" + prefix)
            nxt = _openat2(root, prefix, _DIR, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        fd = nxt
    return fd


def _mkdir(parent: int, name: str, shown: str) -> None:
    if _libc.mkdirat(parent, name.encode(), 0o755) != 0:
        err = ctypes.get_errno()
        if err != errno.EEXIST:
            raise OSError(err, os.strerror(err), shown)


def _open_target(root: int, parts: list[str]) -> int:
    """An O_PATH fd of the target directory itself, created when missing; the last component
    must be a real directory (a symlink there is ELOOP, a file ENOTDIR)."""
    parent = _open_parent(root, parts, create=True)
    try:
        last = parts[-1]
        try:
            return _openat2(parent, last, _DIR, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
        except FileNotFoundError:
            _mkdir(parent, last, "/" + "/".join(parts))
            return _openat2(parent, last, _DIR, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
    finally:
        os.close(parent)


def _pid_of(pidfd: int) -> int:
    with open(f"/proc/self/fdinfo/{pidfd}") as info:
        for line in info:
            if line.startswith("Pid:"):
                pid = int(line.split()[1])
                if pid > 0:
                    return pid
    raise ProcessLookupError(errno.ESRCH, "the container's process has exited")


def _alive(pidfd: int) -> None:
    import signal

    signal.pidfd_send_signal(pidfd, 0)


def _in_helper(pidfd: int, work: object) -> None:
    """Run `work()` in a forked child that has joined the container's mount namespace; an
    OSError there comes back as an OSError here (errno and the path it names)."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the helper: single-threaded, exits without running Python's cleanup
        code = 0
        try:
            os.close(read_end)
            if _libc.setns(pidfd, _CLONE_NEWNS) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), "setns")
            work()  # type: ignore[operator]
        except OSError as exc:
            code = 1
            with contextlib.suppress(BaseException):
                os.write(write_end, f"{exc.errno or 0}\0{exc.filename or ''}".encode())
        except BaseException as exc:
            code = 2
            with contextlib.suppress(BaseException):
                os.write(write_end, f"0\0{type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        report = b""
        while chunk := os.read(read_end, 4096):
            report += chunk
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0 and not report:
        return
    err_text, _, where = report.decode(errors="replace").partition("\0")
    err = int(err_text or 0)
    if err:
        raise OSError(err, os.strerror(err), where)
    raise OSError(0, where or f"the helper process failed ({status})")


def _error(action: str, container: str, container_path: str, exc: OSError) -> LiveMountError:
    err = exc.errno or 0
    where = exc.filename if isinstance(exc.filename, str) and exc.filename else ""
    cause = go_strerror(err) if err else str(exc.strerror or exc)
    detail = f"{where}: {cause}" if where and where != container_path else cause
    return LiveMountError(f"{action} {go_quote(container_path)} in running container "
                          f"{go_quote(container)}: {detail}", err)


def mount_into(pidfd: int, container: str, host_path: str, container_path: str,
               read_only: bool) -> None:
    """Attach a copy of the host mount at `host_path` to the running container whose init
    `pidfd` names, at `container_path` (created if missing). Raises LiveMountError."""
    try:
        parts = components(container_path)
    except ValueError as exc:
        raise LiveMountError(f"mounting {go_quote(container_path)} in running container "
                             f"{go_quote(container)}: {exc}", errno.EINVAL) from None
    root = tree = -1
    try:
        pid = _pid_of(pidfd)
        root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        _alive(pidfd)  # the root is this very process's (its pid cannot have been reused)
        try:
            tree = _syscall(_SYS_OPEN_TREE, ctypes.c_int(_AT_FDCWD), host_path.encode(),
                            ctypes.c_uint(_OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_RECURSIVE))
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, host_path) from None
        attr = _MountAttr(attr_set=_MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV
                          | (_MOUNT_ATTR_RDONLY if read_only else 0),
                          attr_clr=0, propagation=_MS_PRIVATE, userns_fd=0)
        _syscall(_SYS_MOUNT_SETATTR, ctypes.c_int(tree), b"",
                 ctypes.c_uint(_AT_EMPTY_PATH | _AT_RECURSIVE), ctypes.byref(attr),
                 ctypes.c_size_t(ctypes.sizeof(attr)))

        def attach() -> None:
            target = _open_target(root, parts)
            try:
                _syscall(_SYS_MOVE_MOUNT, ctypes.c_int(tree), b"", ctypes.c_int(target), b"",
                         ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH))
            finally:
                os.close(target)

        _in_helper(pidfd, attach)
    except OSError as exc:
        raise _error("mounting", container, container_path, exc) from None
    finally:
        for fd in (tree, root):
            if fd >= 0:
                os.close(fd)


def unmount_from(pidfd: int, container: str, container_path: str) -> bool:
    """Detach what is mounted at `container_path` in the running container (lazily, as
    `umount -l`). False when nothing was mounted there (already gone). Raises LiveMountError."""
    try:
        parts = components(container_path)
    except ValueError as exc:
        raise LiveMountError(f"unmounting {go_quote(container_path)} in running container "
                             f"{go_quote(container)}: {exc}", errno.EINVAL) from None
    root = -1
    try:
        pid = _pid_of(pidfd)
        root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        _alive(pidfd)

        def detach() -> None:
            try:
                parent = _open_parent(root, parts, create=False)
            except FileNotFoundError:
                raise OSError(errno.EINVAL, "not mounted") from None
            try:
                os.fchdir(parent)
            finally:
                os.close(parent)
            if _libc.umount2(parts[-1].encode(), _MNT_DETACH | _UMOUNT_NOFOLLOW) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))

        try:
            _in_helper(pidfd, detach)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):  # not a mount point, or no path
                return False
            raise
        return True
    except OSError as exc:
        raise _error("unmounting", container, container_path, exc) from None
    finally:
        if root >= 0:
            os.close(root)


# -- mount tables ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MountInfo:
    """One line of /proc/PID/mountinfo (proc(5)); paths unescaped."""

    mount_id: int
    parent_id: int
    device: str  # "major:minor"
    root: str  # the directory of the filesystem mounted here
    mount_point: str
    options: tuple[str, ...]
    fstype: str
    source: str


def _unescape(field: str) -> str:
    if "\\" not in field:
        return field
    out, i = bytearray(), 0
    raw = field.encode()
    while i < len(raw):
        if raw[i] == 0x5C and i + 3 < len(raw) and raw[i + 1:i + 4].isdigit():
            out.append(int(raw[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return out.decode(errors="surrogateescape")


def parse_mountinfo(text: str) -> list[MountInfo]:
    result = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < 10 or "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        result.append(MountInfo(
            mount_id=int(fields[0]), parent_id=int(fields[1]), device=fields[2],
            root=_unescape(fields[3]), mount_point=_unescape(fields[4]),
            options=tuple(fields[5].split(",")), fstype=fields[dash + 1],
            source=_unescape(fields[dash + 2])))
    return result


def container_mounts(pid: int) -> list[MountInfo]:
    """The mount table of the process `pid` (a container's init), mount points as the
    container sees them."""
    with open(f"/proc/{pid}/mountinfo") as table:
        return parse_mountinfo(table.read())


def mount_source(host_path: str) -> tuple[str, str]:
    """(device, root) that a clone of `host_path` shows in a mount table: the device of the
    host mount holding it and the path inside that filesystem."""
    path = os.path.realpath(host_path)
    with open("/proc/self/mountinfo") as table:
        mounts = parse_mountinfo(table.read())
    best: MountInfo | None = None
    for entry in mounts:
        point = entry.mount_point.rstrip("/") or "/"
        if (path == point or path.startswith(point.rstrip("/") + "/")) and (
                best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = entry  # the last (topmost) of equally long mount points wins
    if best is None:
        raise LiveMountError(f"no mount holds {go_quote(host_path)}")
    point = best.mount_point.rstrip("/") or "/"
    rest = path[len(point):].lstrip("/") if point != "/" else path.lstrip("/")
    root = best.root.rstrip("/") + "/" + rest if rest else best.root
    return best.device, root or "/"


def is_live_mounted(pid: int, host_path: str, container_path: str) -> bool:
    """Whether the topmost mount at `container_path` in the container is a mount of
    `host_path` (what `mount_into` made)."""
    device, root = mount_source(host_path)
    top: MountInfo | None = None
    for entry in container_mounts(pid):
        if entry.mount_point == container_path:
            top = entry
    return top is not None and (top.device, top.root) == (device, root)

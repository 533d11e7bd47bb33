"""The syscalls of a live mount (`livemount.py` has the why), standard library only, so that
the same code runs in the kubelet's mount helper, a small single-threaded process started with
`python -I -S` (as shim.py is: `setns` into a mount namespace needs a single-threaded caller,
and forking the kubelet costs milliseconds per fork where a request to a running helper costs
microseconds).

- `mount(pidfd, host_path, parts, read_only)`: in the caller's (the host's) namespace a
  detached clone of the host mount (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`), made
  `nosuid,nodev` (and read-only) with `mount_setattr`, and the container's root
  (`/proc/PID/root` of the pidfd's process, checked alive after the open); then `setns` into
  the container's mount namespace, the target resolved and created under that root
  (`openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` for the parents, the last component a
  real directory, or a real file when the clone is a file's (a subPath naming a file):
  `RESOLVE_NO_SYMLINKS`), `move_mount` onto it, and `setns` back to the namespace the
  process started in.
- `unmount(pidfd, parts)`: the parent resolved the same way, `fchdir` to it,
  `umount2(name, MNT_DETACH | UMOUNT_NOFOLLOW)`; False when nothing was mounted there.
- `batch`: the changes of one update in one request (one round trip): each is done as its
  own request would be, in order; one whose `after` names an earlier change that failed is
  skipped (`{"skipped": true}`: a mount waiting for the removal of the old mount at its path).
- `serve(fd)`: the helper's loop. Each request is a JSON message with the container's pidfd
  attached (SCM_RIGHTS); each answer a JSON message: `{"ok": true, ...}` or `{"errno": N,
  "where": "..."}` (a SOCK_SEQPACKET socket: one message each). If it cannot return to its
  own namespace it exits (the client starts a new one), so no request ever runs in a
  container's namespace by mistake.

Errors are OSErrors whose `filename` names the path (in the container) where it happened.
x86_64 syscall numbers.
"""

from __future__ import annotations

import array
import ctypes
import errno
import json
import os
import signal
import socket
import stat
import sys
from collections.abc import Callable
from typing import Any

SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_OPENAT2 = 437
SYS_MOUNT_SETATTR = 442

OPEN_TREE_CLONE = 0x1
AT_RECURSIVE = 0x8000
AT_EMPTY_PATH = 0x1000
AT_FDCWD = -100
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOVE_MOUNT_T_EMPTY_PATH = 0x40
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MS_PRIVATE = 1 << 18
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10
CLONE_NEWNS = 0x20000
CLONE_FS = 0x200
MNT_DETACH = 0x2
UMOUNT_NOFOLLOW = 0x8

_DIR = os.O_PATH | os.O_DIRECTORY

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.mkdirat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def _errno_error(where: str = "") -> OSError:
    err = ctypes.get_errno()
    return OSError(err, os.strerror(err), where) if where else OSError(err, os.strerror(err))


def _syscall(number: int, *args: object) -> int:
    result = int(_libc.syscall(number, *args))
    if result < 0:
        raise _errno_error()
    return result


# How often an openat2 that met a concurrent mount or rename is tried again.
OPENAT2_ATTEMPTS = 32


def _openat2(dirfd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    """openat2(2). With RESOLVE_IN_ROOT or RESOLVE_BENEATH the kernel answers EAGAIN when a
    mount or rename anywhere on the host raced a `..` of the path (it cannot then prove the
    walk stayed inside); the call is safe to repeat, as openat2(2) says and libpathrs does."""
    how = _OpenHow(flags=flags | os.O_CLOEXEC, mode=mode, resolve=resolve)
    for attempt in range(OPENAT2_ATTEMPTS):
        try:
            return _syscall(SYS_OPENAT2, ctypes.c_int(dirfd), path.encode(),
                            ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        except OSError as err:
            if err.errno != errno.EAGAIN or attempt + 1 == OPENAT2_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _mkdir(parent: int, name: str, shown: str) -> None:
    if _libc.mkdirat(parent, name.encode(), 0o755) != 0 and ctypes.get_errno() != errno.EEXIST:
        raise _errno_error(shown)


def _open_parent(root: int, parts: list[str], create: bool) -> int:
    """O_PATH fd of the target's parent, resolved inside the container's root (symlinks as the
    container sees them, magic links refused); missing directories made one at a time."""
    fd = os.dup(root)
    try:
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS
            try:
                nxt = _openat2(root, prefix, _DIR, resolve)
            except FileNotFoundError:
                if not create:
                    raise
                _mkdir(fd, parts[depth - 1], "/" + prefix)
                nxt = _openat2(root, prefix, _DIR, resolve)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_target(root: int, parts: list[str], directory: bool = True) -> int:
    """O_PATH fd of the target itself, made when missing: a directory, or for a file's mount
    (a subPath naming a file) an empty file, as runc makes them. A symlink there is ELOOP;
    a file where a directory goes ENOTDIR, a directory where a file goes EISDIR."""
    parent = _open_parent(root, parts, create=True)
    shown = "/" + "/".join(parts)
    beneath = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
    try:
        if directory:
            try:
                return _openat2(parent, parts[-1], _DIR, beneath)
            except FileNotFoundError:
                _mkdir(parent, parts[-1], shown)
                return _openat2(parent, parts[-1], _DIR, beneath)
        try:
            target = _openat2(parent, parts[-1], os.O_PATH, beneath)
        except FileNotFoundError:
            try:
                os.close(_openat2(parent, parts[-1], os.O_CREAT | os.O_EXCL | os.O_RDONLY,
                                  beneath, 0o644))
            except FileExistsError:
                pass  # made meanwhile: opened (and checked) below
            target = _openat2(parent, parts[-1], os.O_PATH, beneath)
        if stat.S_ISDIR(os.fstat(target).st_mode):
            os.close(target)
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        return target
    finally:
        os.close(parent)


def _container_root(pidfd: int) -> int:
    """The container's root directory (of the pidfd's process, alive after the open)."""
    pid = 0
    with open(f"/proc/self/fdinfo/{pidfd}") as info:
        for line in info:
            if line.startswith("Pid:"):
                pid = int(line.split()[1])
    if pid <= 0:
        raise OSError(errno.ESRCH, "the container's process has exited")
    root = os.open(f"/proc/{pid}/root", _DIR | os.O_CLOEXEC)
    try:
        signal.pidfd_send_signal(pidfd, 0)  # so the root was this very process's
    except BaseException:
        os.close(root)
        raise
    return root


def clone_tree(host_path: str, read_only: bool) -> int:
    """A detached, nosuid,nodev (read-only) clone of the mount at `host_path`."""
    try:
        tree = _syscall(SYS_OPEN_TREE, ctypes.c_int(AT_FDCWD), host_path.encode(),
                        ctypes.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, host_path) from None
    try:
        attr = _MountAttr(attr_set=MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                          | (MOUNT_ATTR_RDONLY if read_only else 0),
                          attr_clr=0, propagation=MS_PRIVATE, userns_fd=0)
        _syscall(SYS_MOUNT_SETATTR, ctypes.c_int(tree), b"",
                 ctypes.c_uint(AT_EMPTY_PATH | AT_RECURSIVE), ctypes.byref(attr),
                 ctypes.c_size_t(ctypes.sizeof(attr)))
    except BaseException:
        os.close(tree)
        raise
    return tree


class Namespaces:
    """Entering a container's mount namespace and coming back (`home`: an fd of the mount
    namespace the process started in; None in a throwaway forked child)."""

    def __init__(self, home: int | None) -> None:
        self.home = home

    def run(self, pidfd: int, work: Callable[[], Any]) -> Any:
        if self.home is None and _libc.unshare(CLONE_FS) != 0:
            # setns(2): a task that shares its filesystem attributes with another (CLONE_FS)
            # cannot join a mount namespace (EINVAL); a forked child shares them with any
            # thread a library's fork handler started in it.
            raise _errno_error("unshare")
        if _libc.setns(pidfd, CLONE_NEWNS) != 0:
            raise _errno_error("setns")
        try:
            return work()
        finally:
            if self.home is not None and _libc.setns(self.home, CLONE_NEWNS) != 0:
                os._exit(70)  # stuck in a container's namespace: never serve from there

    def mount(self, pidfd: int, host_path: str, parts: list[str], read_only: bool) -> None:
        root = _container_root(pidfd)
        try:
            tree = clone_tree(host_path, read_only)
            try:
                directory = stat.S_ISDIR(os.fstat(tree).st_mode)

                def attach() -> None:
                    target = _open_target(root, parts, directory)
                    try:
                        _syscall(SYS_MOVE_MOUNT, ctypes.c_int(tree), b"", ctypes.c_int(target),
                                 b"", ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH
                                                    | MOVE_MOUNT_T_EMPTY_PATH))
                    finally:
                        os.close(target)

                self.run(pidfd, attach)
            finally:
                os.close(tree)
        finally:
            os.close(root)

    def unmount(self, pidfd: int, parts: list[str]) -> bool:
        root = _container_root(pidfd)
        try:
            def detach() -> bool:
                try:
                    parent = _open_parent(root, parts, create=False)
                except FileNotFoundError:
                    return False
                try:
                    os.fchdir(parent)
                finally:
                    os.close(parent)
                if _libc.umount2(parts[-1].encode(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0:
                    err = ctypes.get_errno()
                    if err in (errno.EINVAL, errno.ENOENT):  # not a mount point, or no path
                        return False
                    raise OSError(err, os.strerror(err))
                return True

            return bool(self.run(pidfd, detach))
        finally:
            os.close(root)


def handle(namespaces: Namespaces, request: dict[str, Any], pidfd: int) -> dict[str, Any]:
    """One request: {"op": "mount", "host": H, "parts": [...], "ro": bool}, {"op":
    "unmount", "parts": [...]} or {"op": "batch", "ops": [request, ...]} (each may name with
    "after": N an earlier one it needs done); the answer ({"ok": true, "answers": [...]} for
    a batch)."""
    if request["op"] == "batch":
        answers: list[dict[str, Any]] = []
        for one in request["ops"]:
            after = one.get("after")
            if isinstance(after, int) and 0 <= after < len(answers) and \
                    not answers[after].get("ok"):
                answers.append({"skipped": True})
            else:
                answers.append(handle(namespaces, one, pidfd))
        return {"ok": True, "answers": answers}
    try:
        if request["op"] == "mount":
            namespaces.mount(pidfd, str(request["host"]), list(request["parts"]),
                             bool(request["ro"]))
            return {"ok": True}
        return {"ok": True, "mounted": namespaces.unmount(pidfd, list(request["parts"]))}
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else ""
        return {"errno": exc.errno or 0, "message": exc.strerror or str(exc), "where": where}


def serve(fd: int) -> int:
    """The helper's loop on the connected socket `fd` until it closes."""
    namespaces = Namespaces(os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC))
    sock = socket.socket(fileno=fd)  # SOCK_SEQPACKET: one request per message
    while True:
        fds = array.array("i")
        try:
            data, ancdata, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(4 * fds.itemsize))
        except InterruptedError:
            continue
        if not data:
            return 0
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
        try:
            request = json.loads(data)
            answer = handle(namespaces, request, fds[0]) if fds else {
                "errno": errno.EBADF, "message": "no pidfd", "where": ""}
        except (ValueError, KeyError, TypeError) as exc:
            answer = {"errno": errno.EINVAL, "message": f"bad request: {exc}", "where": ""}
        finally:
            for passed in fds:
                os.close(passed)
        sock.sendall(json.dumps(answer).encode())


def main(argv: list[str]) -> int:
    options = dict(arg.split("=", 1) for arg in argv[2:] if "=" in arg)
    if len(argv) < 2 or argv[1] != "serve" or "fd" not in options:
        print("usage: mountns.py serve fd=N", file=sys.stderr)
        return 2
    return serve(int(options["fd"]))

"""Live mounts: attaching a host directory to a running container, and detaching it, without
restarting the container (`restartPolicy: NotRequired`, KEP-6395's deferred "Live Hot-Plug").

The sequence (`linux-runtime-facts.md` §6; the way Incus' `forkmount` does it):

1. In the host's mount namespace: a pidfd of the container's init (opened by the caller and
   passed on) names the container race-free; `/proc/PID/root` opened as an `O_PATH`
   directory is the container's root (a directory of the container's mount namespace);
   `open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)` of the host path is a detached copy of the
   host mount, and `mount_setattr` makes it `nosuid,nodev` (and read-only for a read-only
   mount) before anyone sees it.
2. In the mount helper, a small single-threaded process (`setns` of a mount namespace needs a
   single-threaded caller; the kubelet has threads), started once and kept (`MountHelper`;
   forking the kubelet instead cost 25-170 ms per fork under load, a request to the helper
   0.3 ms): `setns(pidfd, CLONE_NEWNS)`, then the target is resolved and
   created component by component under the container's root with `openat2(RESOLVE_IN_ROOT |
   RESOLVE_NO_MAGICLINKS)`: a symlink in a *parent* component is followed as the container
   sees it (inside its root, as runc resolves mount destinations at start); magic links
   (`/proc/1/root`) are refused (ELOOP); the *last* component must be a directory and not a
   symlink (ENOTDIR, ELOOP), so a symlink the container plants at the mount path never
   redirects the mount. `move_mount(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)` then
   attaches the tree to the opened directory itself (no path is looked up a second time),
   and the helper `setns`es back to its own namespace (or exits if it cannot). Steps 1 and 2
   both run in the helper (`mountns.py`, standard library only); a forked child of the
   caller runs them when the helper cannot be started.
3. One update's changes go to the helper in one request (`change_in`: one round trip for
   the removals and additions of one container); a mount at a path whose old mount could not
   be removed in the same request is not tried.
4. Removal: the same helper, the parent directory resolved the same way, `fchdir` to it and
   `umount2(name, MNT_DETACH | UMOUNT_NOFOLLOW)`. A target that is not (or no longer) a mount
   point is not an error: removal is idempotent.

A failure before `move_mount` leaves nothing behind: the detached tree dissolves when its file
descriptor is closed. Errors are `LiveMountError`s naming the container, the path and the
cause (Go's spelling of the errno, as upstream's messages print it), with the errno kept.

`container_mounts(pid)` reads the container's mount table (`/proc/PID/mountinfo`, read from the
host: the container's own procfs belongs to its pid namespace) and `mount_source(path)` tells
which mount and filesystem root a host path is, so a restarted kubelet can tell whether a
live mount is already there (no double mount) or still there (no lost unmount).

This module is the client side (paths checked, errors worded, the helper driven, mount tables
read); the syscalls are in `mountns.py`. Syscall numbers are x86_64's (the only architecture
ephemera runs on).
"""

from __future__ import annotations

import array
import contextlib
import errno
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ephemera.api.goformat import go_quote
from ephemera.kubelet.helperprocess import ServedHelper, isolated_command
from ephemera.kubelet.runtime import mountns
from ephemera.kubelet.runtime.base import LiveMountError

MOUNTNS = Path(mountns.__file__)


def go_strerror(err: int) -> str:
    """The errno's text as Go's syscall.Errno prints it (lower-case first letter)."""
    text = os.strerror(err)
    return text[:1].lower() + text[1:]


def components(container_path: str) -> list[str]:
    """The path's components; a normalized path other than "/" is required. A relative
    path is taken from the container's root, as upstream's kubelet makes it absolute
    (`makeAbsolutePath`) before the runtime mounts it at a start."""
    parts = [p for p in container_path.split("/") if p]
    if not parts:
        raise ValueError("cannot mount over the container's root")
    if any(p in (".", "..") for p in parts):
        raise ValueError("not a normalized path")
    return parts


def helper_command(*options: str) -> list[str]:
    """argv of the mount helper: mountns.py in a fresh, isolated interpreter (stdlib only)."""
    return isolated_command(MOUNTNS, "serve", *options)


class MountHelper(ServedHelper):
    """The client of the mount helper process: started on first use, one request at a time,
    started again when it died. `request` returns None when no helper can run (the caller
    then forks); a request sent to a helper that then died without answering is reported as
    an EIO error, never sent again (it may have been done)."""

    def _spawn(self) -> None:
        self.spawn(MOUNTNS, socket.SOCK_SEQPACKET)

    def _stop(self) -> None:
        self.stop()

    def request(self, pidfd: int, request: dict[str, Any]) -> dict[str, Any] | None:
        message = json.dumps(request).encode()
        fds = array.array("i", [pidfd])
        with self.lock:
            for _ in range(2):
                if not self.running:
                    self._stop()
                    try:
                        self._spawn()
                    except OSError:
                        return None
                assert self.sock is not None
                try:
                    self.sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                   fds.tobytes())])
                except OSError:
                    self._stop()  # not sent: a new helper may run it
                    continue
                try:
                    answer = self.sock.recv(65536)
                    if not answer:
                        raise ConnectionError("the mount helper closed the connection")
                    result: dict[str, Any] = json.loads(answer)
                    return result
                except (OSError, ValueError):
                    # Sent but not answered: it may have been done. Never run it twice (a
                    # second mount would stack); the caller looks at the mount table again.
                    self._stop()
                    return {"errno": errno.EIO, "where": "",
                            "message": "the mount helper exited before answering"}
        return None

    def close(self) -> None:
        with self.lock:
            self._stop()


_helper = MountHelper()


def close_helper() -> None:
    """Stop the mount helper (it is started again on the next live mount)."""
    _helper.close()


def _in_child(work: Any) -> Any:
    """Run `work()` in a forked child (the fallback when the helper cannot run); its OSError
    comes back as an OSError, its result (a bool) as the result."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # single-threaded; exits without Python's cleanup
        answer: dict[str, Any]
        try:
            os.close(read_end)
            answer = {"ok": True, "result": work()}
        except OSError as exc:
            answer = {"errno": exc.errno or 0, "message": exc.strerror or str(exc),
                      "where": exc.filename if isinstance(exc.filename, str) else ""}
        except BaseException as exc:  # reported to the parent, never raised here
            answer = {"errno": 0, "message": f"{type(exc).__name__}: {exc}", "where": ""}
        with contextlib.suppress(BaseException):
            os.write(write_end, json.dumps(answer).encode())
        os._exit(0)
    os.close(write_end)
    try:
        report = b""
        while chunk := os.read(read_end, 65536):
            report += chunk
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    answer = json.loads(report) if report else {"errno": 0, "message": "the child failed"}
    _raise_for(answer)
    return answer.get("result")


def _raise_for(answer: dict[str, Any]) -> None:
    if not answer.get("ok"):
        err = int(answer.get("errno") or 0)
        raise OSError(err, str(answer.get("message") or (os.strerror(err) if err else "")),
                      str(answer.get("where") or ""))


def _error(action: str, container: str, container_path: str, exc: OSError) -> LiveMountError:
    err = exc.errno or 0
    where = exc.filename if isinstance(exc.filename, str) and exc.filename else ""
    cause = go_strerror(err) if err else str(exc.strerror or exc)
    detail = f"{where}: {cause}" if where and where != container_path else cause
    return LiveMountError(f"{action} {go_quote(container_path)} in running container "
                          f"{go_quote(container)}: {detail}", err)


def _parts(action: str, container: str, container_path: str) -> list[str]:
    try:
        return components(container_path)
    except ValueError as exc:
        raise LiveMountError(f"{action} {go_quote(container_path)} in running container "
                             f"{go_quote(container)}: {exc}", errno.EINVAL) from None


def mount_into(pidfd: int, container: str, host_path: str, container_path: str,
               read_only: bool) -> None:
    """Attach a copy of the host mount at `host_path` to the running container whose init
    `pidfd` names, at `container_path` (created if missing). Raises LiveMountError."""
    parts = _parts("mounting", container, container_path)
    try:
        answer = _helper.request(pidfd, {"op": "mount", "host": host_path, "parts": parts,
                                         "ro": read_only})
        if answer is None:
            _in_child(lambda: mountns.Namespaces(None).mount(pidfd, host_path, parts,
                                                             read_only))
        else:
            _raise_for(answer)
    except OSError as exc:
        raise _error("mounting", container, container_path, exc) from None


def unmount_from(pidfd: int, container: str, container_path: str) -> bool:
    """Detach what is mounted at `container_path` in the running container (lazily, as
    `umount -l`). False when nothing was mounted there (already gone). Raises LiveMountError."""
    parts = _parts("unmounting", container, container_path)
    try:
        answer = _helper.request(pidfd, {"op": "unmount", "parts": parts})
        if answer is None:
            return bool(_in_child(lambda: mountns.Namespaces(None).unmount(pidfd, parts)))
        _raise_for(answer)
        return bool(answer.get("mounted"))
    except OSError as exc:
        raise _error("unmounting", container, container_path, exc) from None


@dataclass(frozen=True)
class Change:
    """One live change of `change_in`: an addition (`host_path` set) or a removal (`host_path`
    empty) at `container_path`; `after`: the index of an earlier change (the removal of the old
    mount at the same path) that must succeed first."""

    container_path: str
    host_path: str = ""
    read_only: bool = False
    after: int | None = None


def change_in(pidfd: int, container: str, changes: list[Change]) -> list[LiveMountError | None]:
    """Do `changes` in order in the running container whose init `pidfd` names, in one
    request to the helper (each one as `mount_into` / `unmount_from` would; a forked child
    each when the helper cannot run); each one's error or None. A change whose `after` failed
    is not tried (EBUSY: the mount there could not be removed)."""
    results: list[LiveMountError | None] = []
    parts: list[list[str]] = []
    for change in changes:
        try:
            parts.append(_parts(_action(change), container, change.container_path))
            results.append(None)
        except LiveMountError as err:
            parts.append([])
            results.append(err)
    # The changes sent: those not failed yet; `after` as an index into the batch.
    sent: list[int] = []
    batch: list[dict[str, Any]] = []
    for i, change in enumerate(changes):
        if results[i] is not None:
            continue
        if change.after is not None and results[change.after] is not None:
            results[i] = _busy(container, change)
            continue
        request: dict[str, Any] = {"op": "mount", "host": change.host_path, "parts": parts[i],
                                   "ro": change.read_only} if change.host_path else \
            {"op": "unmount", "parts": parts[i]}
        if change.after is not None and change.after in sent:
            request["after"] = sent.index(change.after)
        sent.append(i)
        batch.append(request)
    if not batch:
        return results
    answers: list[dict[str, Any]] | None = None
    answer = _helper.request(pidfd, {"op": "batch", "ops": batch})
    if answer is not None:
        listed = answer.get("answers")
        # A helper that died before answering: each change fails as its own request would.
        answers = list(listed) if answer.get("ok") and isinstance(listed, list) and \
            len(listed) == len(batch) else [answer] * len(batch)
    for n, i in enumerate(sent):
        change = changes[i]
        if change.after is not None and results[change.after] is not None:
            results[i] = _busy(container, change)  # not tried
            continue
        try:
            if answers is not None:
                _raise_for(answers[n])
            elif change.host_path:
                _in_child(lambda c=change, p=parts[i]: mountns.Namespaces(None).mount(
                    pidfd, c.host_path, p, c.read_only))
            else:
                _in_child(lambda p=parts[i]: mountns.Namespaces(None).unmount(pidfd, p))
        except OSError as exc:
            results[i] = _error(_action(change), container, change.container_path, exc)
    return results


def _action(change: Change) -> str:
    return "mounting" if change.host_path else "unmounting"


def _busy(container: str, change: Change) -> LiveMountError:
    return LiveMountError(f"mounting {go_quote(change.container_path)} in running container "
                          f"{go_quote(container)}: the mount there could not be removed",
                          errno.EBUSY)


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


def is_live_mounted(pid: int, host_path: str, container_path: str,
                    table: list[MountInfo] | None = None) -> bool:
    """Whether the topmost mount at `container_path` in the container (its mount `table`,
    read when not given) is a mount of `host_path` (what `mount_into` made). The host's
    table is read only when something is mounted there."""
    top: MountInfo | None = None
    for entry in container_mounts(pid) if table is None else table:
        if entry.mount_point == container_path:
            top = entry
    return top is not None and (top.device, top.root) == mount_source(host_path)

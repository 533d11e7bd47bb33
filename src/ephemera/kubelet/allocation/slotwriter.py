"""How a slot of the allocation checkpoint is written (`write_slot`), and the process that
writes them for the kubelet (`serve`): standard library only, so that it runs in a fresh,
isolated interpreter (`ephemera.kubelet.helperprocess`).

Why a process: a thread of the kubelet takes the GIL back after each of the write's system
calls (open, pwrite, fdatasync, close) and after it is woken, and while the event loop sets
up the change's volumes beside it each of those turns waits. A change's checkpoint is on the
way from the API to its container (`docs/design.md`, "Allocation checkpoint writes"); in this
process the write waits on the disk alone.

Protocol on a stream socket, one request at a time: a header `!BI` (flags, length) and
`length` bytes of body. Flags: bit 0 is the slot (the first or the second path given at
start), bit 1 says the slot's file is new (its directory is flushed too). The answer is `!iI`
(errno, 0 when the write is done and flushed; the length of the text after it: the error's
message). The process exits when the socket closes.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import sys

REQUEST = struct.Struct("!BI")
ANSWER = struct.Struct("!iI")
SLOT_BIT = 1
NEW_BIT = 2
_SLOT_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC


def write_slot(path: str, body: bytes, new: bool) -> None:
    """Overwrite the file `path` from offset 0 with `body` and flush its data (made, with its
    directory, when missing); when `new`, flush the directory too, so that its name outlives
    a power loss. `body` is padded with spaces to the file's size when the file is longer
    (a write whose end its caller never saw may have made it so): the JSON reader takes
    trailing spaces, not an older write's tail."""
    try:
        fd = os.open(path, _SLOT_FLAGS, 0o600)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, _SLOT_FLAGS, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size > len(body):
            body += b" " * (size - len(body))
        view = memoryview(body)
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], written)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    if new:
        dir_fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    """`size` bytes from `sock`; None when it closed first."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        try:
            count = sock.recv_into(view[got:])
        except InterruptedError:
            continue
        except OSError:  # the kubelet went away
            return None
        if count == 0:
            return None
        got += count
    return bytes(buffer)


def serve(fd: int, slots: tuple[str, str]) -> int:
    """Write the requests from the connected socket `fd` until it closes."""
    sock = socket.socket(fileno=fd)
    while True:
        header = _read_exactly(sock, REQUEST.size)
        if header is None:
            return 0
        flags, length = REQUEST.unpack(header)
        body = _read_exactly(sock, length)
        if body is None:
            return 0
        try:
            write_slot(slots[flags & SLOT_BIT], body, bool(flags & NEW_BIT))
            answer = ANSWER.pack(0, 0)
        except OSError as exc:
            text = (exc.strerror or str(exc)).encode()
            answer = ANSWER.pack(exc.errno or errno.EIO, len(text)) + text
        try:
            sock.sendall(answer)
        except OSError:  # the kubelet went away (it closed the socket, or it died)
            return 0


def main(argv: list[str]) -> int:
    options = dict(arg.split("=", 1) for arg in argv[2:] if "=" in arg)
    if len(argv) < 2 or argv[1] != "serve" or not {"fd", "slot0", "slot1"} <= set(options):
        print("usage: slotwriter.py serve fd=N slot0=PATH slot1=PATH", file=sys.stderr)
        return 2
    return serve(int(options["fd"]), (options["slot0"], options["slot1"]))

"""Long-lived helper processes of the kubelet: stdlib-only modules (the runtime's shim.py and
mountns.py, the allocation checkpoint's slotwriter.py) run in a fresh, isolated interpreter,
and served over one socket pair.

`isolated_command(module, mode, *options)` is the argv; `ServedHelper` owns the process and
the kubelet's end of its socket (`spawn`, `stop`), for the shim's fork server, the mount
helper and the checkpoint's writer alike. The module is imported rather than run as a script,
so its compiled bytecode is cached (about 8 ms a start).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO


def isolated_command(module: Path, mode: str, *options: str) -> list[str]:
    """argv running `module`'s `main(argv)` in a fresh, isolated interpreter (-I -S)."""
    code = (f"import sys; sys.path.append({str(module.parent)!r}); import {module.stem}; "
            f"sys.exit({module.stem}.main(sys.argv))")
    return [sys.executable, "-I", "-S", "-c", code, mode, *options]


class ServedHelper:
    """One helper process and the kubelet's end of its socket; callers on threads hold
    `lock` around a request and its answer (the checkpoint's writer, used from one event
    loop, is held to one request at a time by its own caller)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.lock = threading.Lock()

    @property
    def running(self) -> bool:
        """The helper process has been started and has not exited."""
        return self.process is not None and self.process.poll() is None

    def spawn(self, module: Path, sock_type: socket.SocketKind = socket.SOCK_STREAM,
              output: IO[bytes] | int = subprocess.DEVNULL, options: Sequence[str] = ()) -> None:
        """Start `module` in `serve` mode with the other end of a new socket pair as
        `fd=N`, and `options` after it."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, sock_type)
        try:
            self.process = subprocess.Popen(
                isolated_command(module, "serve", f"fd={theirs.fileno()}", *options),
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=output,
                stderr=output if output is not subprocess.DEVNULL else None,
                start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours

    def stop(self) -> None:
        """Close the socket (the helper's cue to exit) and reap the process, killing it after
        5 seconds."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

"""Timing marks for benchmarks, off by default: what this module owns is the one switch and
the one format.

When the environment variable `EPHEMERA_TRACE` names a file when a process starts, `mark(event,
key)` appends one line to it: the wall-clock time (seconds, microseconds), the process id, the
event and a key (a pod's name, a request path), separated by single spaces. The file is opened
with `O_APPEND`, so every component of one `ephemera up` (they inherit the environment) can
share it; each line is one `write`. A benchmark (`bench.dynamic_swap`) reads the lines of the
objects it timed and merges them with its own milestones on the same clock.

Off (the variable unset or empty) `mark` returns at its first test: callers on hot paths may
also test `ENABLED` first to skip building the key.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["ENABLED", "ENV", "mark", "name_of"]

ENV = "EPHEMERA_TRACE"

_path = os.environ.get(ENV, "")
_fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600) \
    if _path else -1
ENABLED = _fd >= 0


def mark(event: str, key: str = "") -> None:
    """Append `time pid event key` to the trace file, when tracing is on."""
    if _fd < 0:
        return
    os.write(_fd, f"{time.time():.6f} {os.getpid()} {event} {key}\n".encode())


def name_of(obj: Mapping[str, Any]) -> str:
    """An object's `metadata.name` as a mark's key when tracing is on ("" when it is off, so
    that a hot path builds no key)."""
    if _fd < 0:
        return ""
    return str((obj.get("metadata") or {}).get("name"))

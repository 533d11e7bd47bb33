"""Container logs: reading the CRI log files the runtime writes, as upstream's
`pkg/kubelet/kuberuntime/logs` does for `kubectl logs`.

A CRI log line is `<RFC3339Nano time> <stream> <tags> <content>\\n`, stream `stdout` or
`stderr`, tags `F` (a full line) or `P` (part of a longer line, continued in the next record).
`stream_log(path, options, write, still_running)` writes the content (a newline after each
full line) to `write`, honouring `tailLines` (the last N records), `sinceTime`,
`timestamps` (each record prefixed with its time and a space), `limitBytes`, and `follow`:
after the end of the file it waits for more until the container is no longer running and
nothing more arrived.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["LogLine", "LogOptions", "parse_cri_line", "parse_time", "stream_log"]

FOLLOW_POLL_INTERVAL = 0.1
_CHUNK = 64 * 1024
_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$")


@dataclass(frozen=True)
class LogLine:
    timestamp: str
    stream: str
    full: bool
    content: bytes


@dataclass(frozen=True)
class LogOptions:
    follow: bool = False
    tail_lines: int | None = None
    timestamps: bool = False
    since_ns: int | None = None  # unix nanoseconds; records before it are skipped
    limit_bytes: int | None = None


def parse_time(text: str) -> int | None:
    """An RFC 3339 time (with up to 9 fractional digits) as unix nanoseconds."""
    m = _TIME.match(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    frac = (m.group(7) or "").ljust(9, "0")
    zone = m.group(8)
    try:
        base = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    seconds = int(base.timestamp())
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds * 1_000_000_000 + int(frac)


def parse_cri_line(raw: bytes) -> LogLine | None:
    """One record of a CRI log file (without or with its trailing newline); None when it
    is not one."""
    line = raw[:-1] if raw.endswith(b"\n") else raw
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return None
    timestamp, stream, tags = parts[0], parts[1], parts[2]
    content = parts[3] if len(parts) > 3 else b""
    if stream not in (b"stdout", b"stderr"):
        return None
    full = b"P" not in tags.split(b":")
    return LogLine(timestamp.decode(errors="replace"), stream.decode(), full, content)


class _Limit(Exception):
    pass


class _Writer:
    def __init__(self, options: LogOptions,
                 write: Callable[[bytes], Awaitable[None]]) -> None:
        self.options = options
        self.write = write
        self.left = options.limit_bytes

    async def record(self, raw: bytes) -> None:
        parsed = parse_cri_line(raw)
        if parsed is None:
            return
        if self.options.since_ns is not None:
            at = parse_time(parsed.timestamp)
            if at is not None and at < self.options.since_ns:
                return
        out = parsed.content + (b"\n" if parsed.full else b"")
        if self.options.timestamps:
            out = parsed.timestamp.encode() + b" " + out
        if self.left is not None:
            if len(out) >= self.left:
                await self.write(out[:self.left])
                raise _Limit
            self.left -= len(out)
        await self.write(out)


def _tail_start(data: bytes, lines: int) -> int:
    """The offset where the last `lines` records of `data` start."""
    if lines <= 0:
        return len(data)
    end = len(data)
    if data.endswith(b"\n"):
        end -= 1
    count = 0
    pos = end
    while pos > 0:
        pos = data.rfind(b"\n", 0, pos)
        if pos < 0:
            return 0
        count += 1
        if count == lines:
            return pos + 1
    return 0


async def stream_log(path: Path, options: LogOptions,
                     write: Callable[[bytes], Awaitable[None]],
                     still_running: Callable[[], Awaitable[bool]] | None = None) -> None:
    """Write the log at `path` as `kubectl logs` shows it (see the module docstring)."""
    writer = _Writer(options, write)
    try:
        data = await asyncio.to_thread(_read_all, path)
    except FileNotFoundError:
        data = b""
    start = _tail_start(data, options.tail_lines) if options.tail_lines is not None else 0
    offset = len(data)
    complete_end = data.rfind(b"\n") + 1
    try:
        for raw in data[start:complete_end].splitlines(keepends=True):
            await writer.record(raw)
        pending = data[max(start, complete_end):]
        if not options.follow:
            if pending:
                await writer.record(pending)
            return
        while True:
            more = await asyncio.to_thread(_read_from, path, offset)
            if more:
                offset += len(more)
                pending += more
                cut = pending.rfind(b"\n") + 1
                for raw in pending[:cut].splitlines(keepends=True):
                    await writer.record(raw)
                pending = pending[cut:]
                continue
            if still_running is not None and not await still_running():
                # One last read: what was written just before the container stopped.
                more = await asyncio.to_thread(_read_from, path, offset)
                if more:
                    offset += len(more)
                    pending += more
                    continue
                if pending:
                    await writer.record(pending)
                return
            await asyncio.sleep(FOLLOW_POLL_INTERVAL)
    except _Limit:
        return


def _read_all(path: Path) -> bytes:
    return path.read_bytes()


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(_CHUNK)
    except FileNotFoundError:
        return b""

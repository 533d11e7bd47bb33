"""Container logs, served: which CRI log file a `kubectl logs` request reads (upstream's
`kubelet.GetContainerLogs`: `log_source`), the `/containerLogs` handler of the kubelet's
server (`serve_container_logs`, with its query options), and reading the CRI log files the
runtime writes, as upstream's `pkg/kubelet/kuberuntime/logs` does.

`GET /containerLogs/NS/POD/CONTAINER?follow=&tailLines=&previous=&timestamps=&sinceSeconds=
&sinceTime=&limitBytes=`: the container's log as plain text, streamed while `follow` lasts. A
container with no log to show is a 400 whose text is upstream's (`container "c" in pod "p" is
waiting to start: ContainerCreating`, `previous terminated container "c" in pod "p" not
found`, ...); an unknown pod or container a 404.

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
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from ephemera.kubelet.podutil import container_log_path
from ephemera.kubelet.runtime.base import ContainerState, RuntimeError_, RuntimeService

__all__ = [
    "LogHost",
    "LogLine",
    "LogLookupError",
    "LogOptions",
    "LogSource",
    "log_options",
    "log_source",
    "parse_cri_line",
    "parse_time",
    "serve_container_logs",
    "stream_log",
]

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


# --- which file: upstream's GetContainerLogs --------------------------------------------------


class LogLookupError(Exception):
    """No log to show: `code` 400 (the container's state says why) or 404 (no such pod)."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class LogSource:
    """Where a container instance's log is, and whether it may still grow."""

    path: Path
    still_running: Callable[[], Awaitable[bool]]


async def log_source(pod: Mapping[str, Any] | None, status: Mapping[str, Any],
                     pod_name: str, container: str, previous: bool,
                     runtime: RuntimeService, root_dir: Path) -> LogSource:
    """The log a `kubectl logs` of `container` in `pod` (None: not found) reads, from the
    pod's `status` as the kubelet computed it: the running or last terminated instance, or
    with `previous` the one before."""
    if pod is None:
        raise LogLookupError(f'pod "{pod_name}" does not exist', 404)
    spec = pod.get("spec") or {}
    names = [str(c.get("name")) for c in [*(spec.get("initContainers") or []),
                                          *(spec.get("containers") or [])]]
    if container not in names:
        raise LogLookupError(f'container "{container}" not found in pod "{pod_name}"', 404)
    cstatus = None
    for s in [*(status.get("containerStatuses") or []),
              *(status.get("initContainerStatuses") or [])]:
        if s.get("name") == container:
            cstatus = s
    if cstatus is None:
        raise LogLookupError(f'container "{container}" in pod "{pod_name}" is not '
                             f'available')
    state = cstatus.get("state") or {}
    last = (cstatus.get("lastState") or {}).get("terminated")
    restarts = int(cstatus.get("restartCount") or 0)
    container_id = ""
    attempt = restarts
    if previous:
        if not last or not last.get("containerID"):
            raise LogLookupError(f'previous terminated container "{container}" in pod '
                                 f'"{pod_name}" not found')
        container_id = str(last["containerID"])
        attempt = restarts if state.get("waiting") else restarts - 1
    elif state.get("running"):
        container_id = str(cstatus.get("containerID") or "")
    elif state.get("terminated"):
        container_id = str(state["terminated"].get("containerID") or "") or \
            str((last or {}).get("containerID") or "")
        if not container_id:
            raise LogLookupError(f'container "{container}" in pod "{pod_name}" is '
                                 f'terminated')
    elif last:
        container_id = str(last.get("containerID") or "")
        if not container_id:
            raise LogLookupError(f'container "{container}" in pod "{pod_name}" is '
                                 f'terminated')
    elif state.get("waiting"):
        reason = state["waiting"].get("reason")
        if reason == "ErrImagePull":
            detail = "image can't be pulled"
        elif reason == "ImagePullBackOff":
            detail = "trying and failing to pull image"
        else:
            detail = str(reason)
        raise LogLookupError(f'container "{container}" in pod "{pod_name}" is waiting to '
                             f'start: {detail}')
    else:
        raise LogLookupError(f'container "{container}" in pod "{pod_name}" is waiting to '
                             f'start - no logs yet')
    runtime_id = container_id.split("://", 1)[-1]
    path: Path | None = None
    try:
        found = await runtime.container_status(runtime_id)
        path = found.log_path
    except (RuntimeError_, KeyError, LookupError):
        path = None
    if path is None:
        path = container_log_path(root_dir, pod, container, max(attempt, 0))

    async def still_running() -> bool:
        try:
            current = await runtime.container_status(runtime_id)
        except (RuntimeError_, KeyError, LookupError):
            return False
        return current.state in (ContainerState.RUNNING, ContainerState.CREATED)

    return LogSource(Path(path), still_running)


# --- the /containerLogs handler ---------------------------------------------------------------


class LogHost(Protocol):
    """What the log handler asks of the kubelet."""

    async def log_source(self, namespace: str, pod: str, container: str,
                         previous: bool) -> LogSource: ...


def _bool(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "t", "true")


def _int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f'invalid {name} "{raw}"') from None


def log_options(request: web.Request) -> LogOptions:
    """The request's `follow`, `tailLines`, `timestamps`, `sinceSeconds`/`sinceTime` and
    `limitBytes`."""
    since_ns = None
    since_seconds = _int(request, "sinceSeconds")
    if since_seconds is not None:
        since_ns = time.time_ns() - since_seconds * 1_000_000_000
    since_time = request.query.get("sinceTime")
    if since_time:
        since_ns = parse_time(since_time)
        if since_ns is None:
            raise web.HTTPBadRequest(text=f'invalid sinceTime "{since_time}"')
    tail = _int(request, "tailLines")
    limit = _int(request, "limitBytes")
    return LogOptions(follow=_bool(request, "follow"),
                      tail_lines=tail if tail is not None and tail >= 0 else None,
                      timestamps=_bool(request, "timestamps"), since_ns=since_ns,
                      limit_bytes=limit if limit is not None and limit > 0 else None)


async def serve_container_logs(request: web.Request, host: LogHost) -> web.StreamResponse:
    """`GET /containerLogs/{namespace}/{pod}/{container}`."""
    ns = request.match_info["namespace"]
    pod = request.match_info["pod"]
    container = request.match_info["container"]
    options = log_options(request)
    try:
        source = await host.log_source(ns, pod, container, _bool(request, "previous"))
    except LogLookupError as err:
        return web.Response(status=err.code, text=err.message)
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)

    async def write(data: bytes) -> None:
        await response.write(data)

    try:
        await stream_log(source.path, options, write,
                         source.still_running if options.follow else None)
    except (ConnectionResetError, ConnectionError):
        return response
    await response.write_eof()
    return response

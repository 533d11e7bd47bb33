"""A supervisor of component processes, as `ephemera up` runs them: one child process per
component, its output appended to `<log dir>/<name>.log`, restarted with exponential back-off
when it dies (with a line saying so), terminated (SIGTERM, then SIGKILL after a grace period)
on shutdown in the reverse order of starting. The pid of each running child is in
`<pid dir>/<name>.pid`.

Children run in their own session, so a Ctrl-C at the terminal reaches only `ephemera up`,
which then stops them in order; and they get SIGTERM if `ephemera up` itself dies
(`PR_SET_PDEATHSIG`), so no component outlives its supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ephemera.cli.flags import write_atomic

INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 10.0
# A child that ran this long before dying is restarted after the initial back-off again.
STABLE_AFTER = 10.0
STOP_GRACE = 10.0

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM when the parent dies."""
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class Component:
    """One supervised process. `argv` is called at every (re)start, so it can change (for
    example once a port is known)."""

    name: str
    argv: Callable[[], list[str]]
    env: dict[str, str] | None = None


@dataclass
class _Child:
    component: Component
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None
    restarts: int = 0
    backoff: float = INITIAL_BACKOFF
    started: asyncio.Event = field(default_factory=asyncio.Event)


class Supervisor:
    def __init__(self, log_dir: Path, say: Callable[[str], None],
                 pid_dir: Path | None = None) -> None:
        self.log_dir = log_dir
        self.pid_dir = pid_dir
        self.say = say
        self._children: list[_Child] = []
        self._stopping = asyncio.Event()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def pid(self, name: str) -> int | None:
        for child in self._children:
            proc = child.process
            if child.component.name == name and proc is not None and proc.returncode is None:
                return proc.pid
        return None

    def restarts(self, name: str) -> int:
        return sum(c.restarts for c in self._children if c.component.name == name)

    async def start(self, component: Component) -> None:
        """Start a component and keep it running until `stop()`."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        child = _Child(component, self.log_path(component.name))
        self._children.append(child)
        child.task = asyncio.create_task(self._keep_running(child),
                                         name=f"supervise-{component.name}")
        await child.started.wait()

    async def _spawn(self, child: _Child) -> asyncio.subprocess.Process:
        argv = child.component.argv()
        env = None
        if child.component.env is not None:
            env = {**os.environ, **child.component.env}
        with open(child.log_path, "ab") as log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            log.write(f"--- {stamp} starting {child.component.name}: {' '.join(argv)}\n"
                      .encode())
            log.flush()
            return await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True, preexec_fn=die_with_parent)

    async def _keep_running(self, child: _Child) -> None:
        loop = asyncio.get_running_loop()
        name = child.component.name
        while not self.stopping:
            began = loop.time()
            child.process = await self._spawn(child)
            if self.pid_dir is not None:  # replaced whole: a reader never sees it empty
                write_atomic(self.pid_dir / f"{name}.pid", f"{child.process.pid}\n")
            child.started.set()
            code = await child.process.wait()
            if self.stopping:
                return
            if loop.time() - began >= STABLE_AFTER:
                child.backoff = INITIAL_BACKOFF
            self.say(f"{name} (pid {child.process.pid}) exited: {describe_exit(code)}; "
                     f"restarting in {child.backoff:g}s (log: {child.log_path})")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(child.backoff):
                    await self._stopping.wait()
            if self.stopping:
                return
            child.backoff = min(child.backoff * 2, MAX_BACKOFF)
            child.restarts += 1

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Stop restarting, then terminate the children, last started first."""
        self._stopping.set()
        for child in reversed(self._children):
            proc = child.process
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    async with asyncio.timeout(grace):
                        await proc.wait()
                except TimeoutError:
                    self.say(f"{child.component.name} did not stop in {grace:g}s; killing it")
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()
            if child.task is not None:
                await child.task

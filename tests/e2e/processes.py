"""Helpers for e2e tests that run ephemera's components as processes of their own: one
polling loop (`until`) and one component process with its log (`Proc`), shared by the
leader-election, multi-apiserver, chaos and controller suites."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

WAIT = 60.0


def until(check: Callable[[], Any], what: str, timeout: float = WAIT,
          logs: Callable[[], str] = str, interval: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy (returned); on timeout fail the test,
    naming `what` and showing `logs()`."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what} ({timeout:g}s)\n{logs()}")
        time.sleep(interval)


@dataclass
class Proc:
    """One `python -m ephemera.cli ARGV...` process, its output appended to `log`."""

    name: str
    argv: Sequence[str]
    log: Path
    process: subprocess.Popen[bytes] = field(init=False)

    def start(self) -> Proc:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "ephemera.cli", *self.argv],
                                            stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        return self

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL, reaped."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM, then SIGKILL after `timeout`; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


def tails(procs: Sequence[Proc], chars: int = 3000) -> Callable[[], str]:
    """The end of each process's log, for `until(..., logs=tails(procs))`."""
    return lambda: "\n".join(f"--- {p.name}\n{p.text()[-chars:]}" for p in procs)

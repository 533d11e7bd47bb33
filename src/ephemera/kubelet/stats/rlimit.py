"""The node's task limit and count, for the `pid.available` signal (upstream
`pkg/kubelet/stats/pidlimit`): `maxpid` is the smaller of `kernel.pid_max` and
`kernel.threads-max` (both bound the tasks of the whole system), `curproc` the tasks that
exist (the total of /proc/loadavg's `running/total` field; the processes listed in /proc
when that cannot be read, where upstream falls back to sysinfo's count)."""

from __future__ import annotations

import contextlib
import os

__all__ = ["node_tasks"]


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _running_tasks() -> int | None:
    try:
        with open("/proc/loadavg") as f:
            fields = f.read().split()
    except OSError:
        fields = []
    if len(fields) >= 5:
        _, sep, total = fields[3].partition("/")
        if sep and total.isdigit():
            return int(total)
    with contextlib.suppress(OSError):
        return sum(1 for entry in os.listdir("/proc") if entry.isdigit())
    return None


def node_tasks() -> tuple[int, int] | None:
    """(maxpid, curproc), or None when neither limit can be read."""
    limits = [v for v in (_read_int("/proc/sys/kernel/pid_max"),
                          _read_int("/proc/sys/kernel/threads-max")) if v is not None]
    tasks = _running_tasks()
    if not limits or tasks is None:
        return None
    return min(limits), tasks

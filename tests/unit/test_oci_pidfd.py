"""The OCI runtime's pidfd of a container's init (`OciRuntime._init_pidfd`): a pidfd of the
verified init, else None without leaking one, also when pidfds cannot be had (EMFILE,
ENOSYS): stopping a container then falls back to polling instead of failing."""

from __future__ import annotations

import errno
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from ephemera.kubelet.runtime import oci
from ephemera.kubelet.runtime.oci import OciRuntime


class Instance:
    """What `_init_pidfd` reads of a runtime: the container's instance dir."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _container_meta(self, container_id: str) -> tuple[Path, dict[str, Any]]:
        return self.directory, {}

    _init_pidfd = OciRuntime._init_pidfd


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def instance(tmp_path: Path) -> Instance:
    pid = os.getpid()
    (tmp_path / "started").write_text(
        f"pid={pid}\nstart_time={oci._proc_start_time(pid)}\n")
    return Instance(tmp_path)


def test_the_init_s_pidfd_once_its_start_time_matches(instance: Instance) -> None:
    before = _open_fds()
    pidfd = OciRuntime._init_pidfd(instance, "c")  # type: ignore[arg-type]
    assert pidfd is not None
    os.close(pidfd)
    (instance.directory / "started").write_text(f"pid={os.getpid()}\nstart_time=1\n")
    assert OciRuntime._init_pidfd(instance, "c") is None  # type: ignore[arg-type]
    assert _open_fds() == before  # the mismatching pid's pidfd is closed


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENOSYS, errno.ESRCH])
def test_no_pidfd_is_none(instance: Instance, monkeypatch: pytest.MonkeyPatch,
                          code: int) -> None:
    def refuse(pid: int, flags: int = 0) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(oci.os, "pidfd_open", refuse)
    assert OciRuntime._init_pidfd(instance, "c") is None  # type: ignore[arg-type]


def _finishes_without_suspending(coro: Coroutine[Any, Any, None]) -> bool:
    """Whether `coro` finishes on its first step, never waiting for anything (a coroutine
    that suspends is closed, running its cleanup)."""
    try:
        coro.send(None)
    except StopIteration:
        return True
    coro.close()
    return False


async def test_waiting_without_a_pidfd_returns_at_once(instance: Instance,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def refuse(pid: int, flags: int = 0) -> int:
        asked.append(pid)
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(oci.os, "pidfd_open", refuse)
    before = _open_fds()
    assert _finishes_without_suspending(
        OciRuntime._init_exited(instance, "c", 30.0))  # type: ignore[arg-type]
    assert asked == [os.getpid()]  # it did try, and gave up at once
    assert _open_fds() == before


async def test_waiting_with_a_pidfd_waits_for_the_exit(instance: Instance) -> None:
    """The init (this test's own process) is alive: the wait suspends on its pidfd, and a
    wait given up closes the pidfd."""
    before = _open_fds()
    assert not _finishes_without_suspending(
        OciRuntime._init_exited(instance, "c", 30.0))  # type: ignore[arg-type]
    assert _open_fds() == before

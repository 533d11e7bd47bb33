"""Running blocking network code inside a pod's network namespace.

Pods have their own network namespace (the sandbox's; only `lo` until pods get a network),
so a probe that reaches "the pod's port" must open its socket in there. `run_in_netns` runs a
function in a fresh thread that first joins the namespace with `setns(2)` (which changes the
calling thread only); the thread ends with the call, so no thread of the kubelet is left in a
pod's namespace. Sockets keep the namespace they were created in.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["NetnsError", "run_in_netns"]

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(Exception):
    """The pod's network namespace could not be joined."""


def _setns(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise NetnsError(f"opening network namespace {path}: {err.strerror}") from None
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise NetnsError(f"joining network namespace {path}: {os.strerror(errno)}")
    finally:
        os.close(fd)


async def run_in_netns(netns: str, fn: Callable[[], T]) -> T:
    """`fn()` in a thread inside the network namespace at path `netns` ("": the host's)."""
    if not netns:
        return await asyncio.to_thread(fn)
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(value: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    def body() -> None:
        value: T | None = None
        error: BaseException | None = None
        try:
            _setns(netns)
            value = fn()
        except BaseException as err:  # delivered to the awaiting coroutine
            error = err
        with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
            loop.call_soon_threadsafe(deliver, value, error)

    threading.Thread(target=body, name="netns-probe", daemon=True).start()
    return await future

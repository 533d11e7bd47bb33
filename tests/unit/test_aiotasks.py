"""`cancel_and_wait`: every task cancelled and ended, their failures dropped, the caller's own
cancellation kept."""

from __future__ import annotations

import asyncio

import pytest

from ephemera.aiotasks import cancel_and_wait


async def test_tasks_are_cancelled_and_ended() -> None:
    cleaned: list[str] = []

    async def loop(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # an await in its cleanup: the helper must wait for it
            cleaned.append(name)

    tasks = [asyncio.create_task(loop(n)) for n in ("a", "b")]
    await asyncio.sleep(0)
    await cancel_and_wait(*tasks)
    assert all(t.cancelled() for t in tasks)
    assert sorted(cleaned) == ["a", "b"]


async def test_a_failure_is_taken_not_raised() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    failed = asyncio.create_task(fails())
    await asyncio.sleep(0)
    assert failed.done()
    await cancel_and_wait(failed)  # does not raise ValueError
    assert isinstance(failed.exception(), ValueError)


async def test_the_callers_own_cancellation_propagates() -> None:
    release = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()

    task = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    closer = asyncio.create_task(cancel_and_wait(task))
    await asyncio.sleep(0)
    closer.cancel()
    release.set()  # the closer still waits for the task to end, then is cancelled
    with pytest.raises(asyncio.CancelledError):
        await closer
    assert task.cancelled()


async def test_no_tasks() -> None:
    await cancel_and_wait()

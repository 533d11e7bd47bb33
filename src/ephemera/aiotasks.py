"""Stopping asyncio tasks: `cancel_and_wait`, the one way a component ends the background
tasks it owns (a loop, a watch, a server's handlers) when it closes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

__all__ = ["cancel_and_wait"]

log = logging.getLogger(__name__)


async def cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    """Cancel `tasks` and wait until every one has ended. How each ended (its result, its
    cancellation or an exception) is taken and dropped, an exception logged at DEBUG: a task
    whose failure matters reports it itself, or its owner awaits it instead of cancelling it.
    A caller cancelled while it waits is cancelled (its own cancellation is not swallowed)."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    for task, outcome in zip(tasks, await asyncio.gather(*tasks, return_exceptions=True),
                             strict=True):
        if isinstance(outcome, Exception):
            name = task.get_name() if isinstance(task, asyncio.Task) else "a future"
            log.debug("%s had failed before it was cancelled: %s", name, outcome)

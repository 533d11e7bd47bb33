"""upstream's `slowStartBatch` (`pkg/controller/replicaset`, used by the Job controller too):
`count` calls made in concurrent batches of 1, 2, 4, ... so that a burst that fails (a
quota, a webhook, a bad template) fails after one call rather than hundreds; the first batch
with a failure ends it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["SLOW_START_INITIAL_BATCH", "slow_start"]

SLOW_START_INITIAL_BATCH = 1


async def slow_start(count: int, call: Callable[[int], Awaitable[None]], *,
                     initial: int = SLOW_START_INITIAL_BATCH
                     ) -> tuple[int, BaseException | None]:
    """Make `call(i)` for i in 0..count-1, batch by batch. Returns how many succeeded and
    the first error (None when all did); the calls after a failing batch are not made."""
    done, batch = 0, min(count, initial)
    while batch > 0:
        results = await asyncio.gather(*(call(done + i) for i in range(batch)),
                                       return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        done += batch - len(errors)
        if errors:
            return done, errors[0]
        batch = min(2 * batch, count - done)
    return done, None

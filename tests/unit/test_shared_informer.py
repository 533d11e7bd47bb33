"""An informer shared by several runners (upstream's shared informers) lists and watches
once, tells a late handler every cached object, and stops watching with its last runner."""

from __future__ import annotations

import asyncio
from typing import cast

from informer_fakes import CountingApi

from ephemera.client.api import ApiClient
from ephemera.client.informer import Informer


async def test_a_shared_informer_lists_and_watches_once_until_its_last_runner_stops() -> None:
    """Several controllers run one informer (upstream's shared informers): one list and
    one watch for all; a handler added after the sync is told every cached object; the
    watch ends only when the last runner is cancelled."""
    api = CountingApi()
    informer = Informer(cast(ApiClient, api), "/api/v1/pods")
    first = asyncio.create_task(informer.run())
    second = asyncio.create_task(informer.run())
    await asyncio.wait_for(api.watching.wait(), 5)
    assert (api.lists, api.watches) == (1, 1)
    seen: list[str] = []
    informer.add_handler(on_add=lambda obj: seen.append(obj["metadata"]["name"]))
    assert sorted(seen) == ["p1", "q1"]
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    runner = informer._runner
    assert runner is not None and not runner.done()
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    assert runner.done() and informer._runner is None
    api.watching.clear()
    third = asyncio.create_task(informer.run())  # run again after all stopped: a new list
    await asyncio.wait_for(api.watching.wait(), 5)
    assert (api.lists, api.watches) == (2, 2)
    third.cancel()
    await asyncio.gather(third, return_exceptions=True)

"""The informer's namespace index (upstream's NamespaceIndex): `list(namespace)` answers
from the index kept with the cache through lists and watch events, never a stale entry; an
informer shared by several runners lists and watches once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from ephemera.client.api import ApiClient, WatchEvent
from ephemera.client.informer import Informer


def pod(namespace: str, name: str, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": rv}}


def names(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def test_list_by_namespace_follows_lists_and_watch_events() -> None:
    informer = Informer(cast(ApiClient, None), "/api/v1/pods")
    informer.replace([pod("a", "p1"), pod("a", "p2"), pod("b", "q1")], "5")
    assert names(informer.list("a")) == ["p1", "p2"]
    assert names(informer.list("b")) == ["q1"]
    assert informer.list("c") == []

    informer.apply(WatchEvent("ADDED", pod("c", "r1", "6")))
    informer.apply(WatchEvent("MODIFIED", pod("a", "p1", "7")))
    informer.apply(WatchEvent("DELETED", pod("b", "q1", "8")))
    assert names(informer.list("a")) == ["p1", "p2"]
    assert [o["metadata"]["resourceVersion"] for o in informer.list("a")
            if o["metadata"]["name"] == "p1"] == ["7"]
    assert informer.list("b") == []
    assert names(informer.list("c")) == ["r1"]

    # a relist drops what the new list lacks from the index too
    informer.replace([pod("c", "r1", "9")], "9")
    assert informer.list("a") == []
    assert names(informer.list("c")) == ["r1"]
    assert names(informer.list()) == ["r1"]


def test_cluster_scoped_objects_are_under_the_empty_namespace() -> None:
    informer = Informer(cast(ApiClient, None), "/api/v1/nodes")
    informer.replace([{"metadata": {"name": "n1", "resourceVersion": "1"}}], "1")
    assert names(informer.list("")) == ["n1"]


class _CountingApi:
    """Answers one list of two pods, then a watch that stays open; counts both."""

    def __init__(self) -> None:
        self.lists = 0
        self.watches = 0
        self.watching = asyncio.Event()

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.lists += 1
        return {"metadata": {"resourceVersion": "5"},
                "items": [pod("a", "p1"), pod("b", "q1")]}

    async def watch(self, path: str, **params: Any) -> AsyncIterator[WatchEvent]:
        self.watches += 1
        self.watching.set()
        await asyncio.Event().wait()
        yield WatchEvent("ADDED", pod("a", "never"))  # pragma: no cover


async def test_a_shared_informer_lists_and_watches_once_until_its_last_runner_stops() -> None:
    """Several controllers run one informer (upstream's shared informers): one list and
    one watch for all; a handler added after the sync is told every cached object; the
    watch ends only when the last runner is cancelled."""
    api = _CountingApi()
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

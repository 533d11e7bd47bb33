"""A fake API client for informer tests: one list of two pods, then a watch that stays
open, both counted (`CountingApi`), and the pods it lists (`pod`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from ephemera.client.api import WatchEvent


def pod(namespace: str, name: str, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": rv}}


class CountingApi:
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

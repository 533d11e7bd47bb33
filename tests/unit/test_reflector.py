"""The shared list-then-watch loop (`ephemera.client.reflector.Reflector`) over a scripted
source: paged lists at one resource version, the full-list fallback of an expired continue
token, watch events in order, a clean end watched again from where it stopped, a 410 listed
again at once, a broken watch opened again from its last version (no list), other failures
(and very short empty watches) listed again after a doubling back-off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import pytest

from ephemera.client.reflector import (
    Expired,
    ListChunk,
    ListWatchError,
    Reflector,
)

Step = tuple[str, str | None] | Exception


class Source:
    """Items "a".."e" listed at `list_rv`; each watch plays the next script (its steps, then
    a clean end); when the scripts run out, a watch blocks until the test cancels."""

    def __init__(self, scripts: Sequence[Sequence[Step]] = (), *, list_rv: str = "10",
                 expire_continue: bool = False) -> None:
        self.items = ["a", "b", "c", "d", "e"]
        self.list_rv = list_rv
        self.scripts = [list(s) for s in scripts]
        self.expire_continue = expire_continue
        self.lists: list[tuple[int, str]] = []
        self.list_versions: list[str] = []
        self.watches: list[str] = []
        self.idle = asyncio.Event()  # a watch waits with nothing more to play

    async def list(self, limit: int, continue_token: str, resource_version: str = ""
                   ) -> ListChunk[str]:
        self.lists.append((limit, continue_token))
        self.list_versions.append(resource_version)
        if continue_token and self.expire_continue:
            self.expire_continue = False
            raise Expired("continue token expired")
        start = int(continue_token) if continue_token else 0
        end = start + limit if limit else len(self.items)
        more = end < len(self.items)
        return ListChunk(self.items[start:end], self.list_rv, str(end) if more else "")

    async def watch(self, resource_version: str) -> AsyncGenerator[tuple[str, str | None], None]:
        self.watches.append(resource_version)
        if not self.scripts:
            self.idle.set()
            await asyncio.Event().wait()
        for step in self.scripts.pop(0):
            if isinstance(step, Exception):
                raise step
            yield step


class Sink:
    def __init__(self) -> None:
        self.log: list[Any] = []

    def replace(self, items: Sequence[str], resource_version: str) -> None:
        self.log.append(("replace", list(items), resource_version))

    def apply(self, event: str) -> None:
        self.log.append(("apply", event))


class Recording(Reflector[str, str]):
    """Records its back-off pauses instead of sleeping."""

    def __init__(self, source: Source, sink: Sink, **kwargs: Any) -> None:
        super().__init__(source, sink, name="test", **kwargs)
        self.pauses: list[float] = []

    async def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)


async def run_until_idle(reflector: Recording, source: Source) -> None:
    task = asyncio.get_running_loop().create_task(reflector.run())
    try:
        async with asyncio.timeout(30):
            await source.idle.wait()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_lists_in_pages_at_the_first_page_s_version() -> None:
    source, sink = Source(), Sink()
    reflector = Recording(source, sink, page_size=2)
    assert await reflector.relist() == "10"
    assert source.lists == [(2, ""), (2, "2"), (2, "4")]
    # the first list at `0` (any: the watch cache), its next pages at the token's version
    assert source.list_versions == ["0", "", ""]
    assert sink.log == [("replace", ["a", "b", "c", "d", "e"], "10")]
    assert reflector.has_synced and reflector.resource_version == "10"
    # a list again reads not older than the last version, in one request
    await reflector.relist()
    assert (source.lists[-1], source.list_versions[-1]) == ((0, ""), "10")


async def test_an_expired_continue_token_lists_again_in_one_request() -> None:
    source, sink = Source(expire_continue=True), Sink()
    reflector = Recording(source, sink, page_size=2)
    await reflector.relist()
    assert source.lists == [(2, ""), (2, "2"), (0, "")]
    assert sink.log == [("replace", ["a", "b", "c", "d", "e"], "10")]


async def test_events_in_order_and_a_clean_end_watches_again_from_the_last_version() -> None:
    source = Source([[("11", "x"), ("12", None), ("13", "y")]])
    sink = Sink()
    reflector = Recording(source, sink)
    await run_until_idle(reflector, source)
    assert sink.log == [("replace", ["a", "b", "c", "d", "e"], "10"), ("apply", "x"),
                        ("apply", "y")]
    assert source.watches == ["10", "13"]  # the bookmark moved it too; no second list
    assert len(source.lists) == 1 and reflector.pauses == []
    assert reflector.resource_version == "13" and reflector.ready


async def test_a_410_lists_again_at_once() -> None:
    source = Source([[("11", "x"), Expired("too old resource version: 11 (20)")]])
    reflector = Recording(source, Sink())
    await run_until_idle(reflector, source)
    assert len(source.lists) == 2 and reflector.pauses == []
    assert source.watches == ["10", "10"]  # the second list's version
    # the version is gone: the list after the 410 is a consistent one (client-go's
    # isLastSyncResourceVersionUnavailable)
    assert source.list_versions == ["0", ""]


async def test_failures_back_off_doubling_and_start_over_after_a_delivery() -> None:
    broken = ListWatchError("connection reset")
    source = Source([[broken], [broken], [broken], [("11", "x"), broken], [broken]])
    reflector = Recording(source, Sink(), initial_backoff=0.5, max_backoff=1.5)
    await run_until_idle(reflector, source)
    assert reflector.pauses == [0.5, 1.0, 1.5, 0.5, 1.0]
    # A broken watch is opened again from the last version seen, without a list.
    assert len(source.lists) == 1
    assert source.watches == ["10", "10", "10", "10", "11", "11"]
    assert reflector.watch_resumes == 5 and reflector.relists == 0


async def test_a_resumed_watch_whose_version_is_gone_lists_again() -> None:
    source = Source([[("11", "x"), ListWatchError("connection refused")],
                     [Expired("too old resource version: 11 (20)")]])
    sink = Sink()
    reflector = Recording(source, sink, initial_backoff=0.5)
    await run_until_idle(reflector, source)
    assert source.watches == ["10", "11", "10"]  # resumed at 11; after the list, at its 10
    assert reflector.pauses == [0.5] and reflector.relists == 1
    assert sink.log[-1] == ("replace", ["a", "b", "c", "d", "e"], "10")


async def test_a_failed_list_lists_again() -> None:
    source = Source()
    calls = 0
    real_list = source.list

    async def flaky(limit: int, continue_token: str, resource_version: str = ""
                    ) -> ListChunk[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ListWatchError("connection refused")
        return await real_list(limit, continue_token, resource_version)

    source.list = flaky  # type: ignore[method-assign]
    reflector = Recording(source, Sink(), initial_backoff=0.5)
    await run_until_idle(reflector, source)
    assert calls == 2 and reflector.pauses == [0.5] and source.watches == ["10"]


async def test_a_very_short_empty_watch_is_a_failure() -> None:
    source = Source([[]])
    reflector = Recording(source, Sink(), initial_backoff=0.25)
    await run_until_idle(reflector, source)
    assert reflector.pauses == [0.25]
    assert len(source.lists) == 2


async def test_an_unexpected_error_is_retried_too(caplog: pytest.LogCaptureFixture) -> None:
    source = Source([[RuntimeError("bug")]])
    reflector = Recording(source, Sink())
    await run_until_idle(reflector, source)
    assert reflector.pauses == [0.2]
    assert any(r.exc_info for r in caplog.records if "list and watch failed" in r.message)


async def test_start_lists_first_and_raises_what_the_list_raises() -> None:
    class Failing(Source):
        async def list(self, limit: int, continue_token: str, resource_version: str = ""
                       ) -> ListChunk[str]:
            raise ListWatchError("unreachable")

    reflector = Recording(Failing(), Sink())
    with pytest.raises(ListWatchError, match="unreachable"):
        await reflector.start()
    assert not reflector.has_synced and not reflector.ready
    source = Source()
    started = Recording(source, Sink())
    await started.start()
    try:
        assert started.ready and started.has_synced
        async with asyncio.timeout(30):
            await source.idle.wait()
        assert source.watches == ["10"] and len(source.lists) == 1
    finally:
        await started.close()
    assert not started.ready

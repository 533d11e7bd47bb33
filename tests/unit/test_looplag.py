"""`ephemera.looplag`: a loop that falls behind is one WARNING line at once, then at most one
a report interval with the worst lag and the count since the last line."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest

from ephemera import looplag


def test_lags_under_the_threshold_say_nothing() -> None:
    lag = looplag.LoopLag("apiserver", threshold=1.0, report_every=60.0)
    assert lag.observe(0.4, now=100.0) is None
    assert lag.observe(1.0, now=101.0) is None


def test_the_first_late_sleep_is_told_then_at_most_one_line_a_report_interval() -> None:
    lag = looplag.LoopLag("apiserver", threshold=1.0, report_every=60.0)
    assert lag.observe(3.24, now=100.0) == \
        "apiserver: event loop behind by up to 3.2 s (1 time over 1 s since the last report)"
    assert lag.observe(1.5, now=110.0) is None
    assert lag.observe(7.0, now=120.0) is None
    assert lag.observe(0.1, now=150.0) is None  # on time: not counted
    assert lag.observe(1.2, now=161.0) == \
        "apiserver: event loop behind by up to 7.0 s (3 times over 1 s since the last report)"
    assert lag.observe(1.1, now=170.0) is None  # the worst is counted afresh
    assert lag.observe(1.3, now=222.0) == \
        "apiserver: event loop behind by up to 1.3 s (2 times over 1 s since the last report)"


async def test_a_blocked_loop_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ephemera.looplag")
    watching = asyncio.create_task(looplag.watch("hollow-nodes", interval=0.05,
                                                 threshold=0.2))
    await asyncio.sleep(0.1)
    time.sleep(0.5)  # the loop held by one callback
    await asyncio.sleep(0.1)
    watching.cancel()
    await asyncio.gather(watching, return_exceptions=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "ephemera.looplag"]
    assert len(lines) == 1
    assert lines[0].startswith("hollow-nodes: event loop behind by up to 0.")


async def test_watching_ends_its_watch_with_the_block() -> None:
    before = set(asyncio.all_tasks())
    async with looplag.watching("apiserver"):
        started = set(asyncio.all_tasks()) - before
        assert [t.get_name() for t in started] == ["apiserver loop lag"]
    assert all(t.done() for t in started)


def test_the_line_tells_the_garbage_collectors_share_since_the_last_report() -> None:
    clock = iter([10.0, 12.5, 20.0, 20.4, 30.0, 30.01]).__next__
    cpu_clock = iter([1.0, 1.5, 2.0, 2.4, 3.0, 3.01]).__next__
    collector = looplag.GcPauses(clock=clock, cpu_clock=cpu_clock)
    lag = looplag.LoopLag("hollow-nodes", threshold=1.0, report_every=60.0,
                          collector=collector)
    for generation in (2, 1):  # two collections: 2.5 s (0.5 of CPU) and 0.4 s (0.4)
        collector.on_collection("start", {"generation": generation})
        collector.on_collection("stop", {"generation": generation})
    assert lag.observe(3.0, now=100.0) == (
        "hollow-nodes: event loop behind by up to 3.0 s (1 time over 1 s since the last "
        "report; garbage collection 2.9 s (0.9 s of CPU), the longest 2.5 s (generation 2))")
    collector.on_collection("start", {"generation": 0})  # 10 ms: not worth a mention
    collector.on_collection("stop", {"generation": 0})
    assert lag.observe(1.5, now=200.0) == \
        "hollow-nodes: event loop behind by up to 1.5 s (1 time over 1 s since the last report)"


def test_gc_pauses_hooks_the_collector_while_installed() -> None:
    with looplag.GcPauses() as collector:
        assert collector.on_collection in gc.callbacks
        gc.collect()
        share = collector.take()
        assert 0.0 < share.longest <= share.total and share.generation == 2  # a full one
        assert share.cpu > 0.0
        assert collector.take() == looplag.GcShare()
    assert collector.on_collection not in gc.callbacks

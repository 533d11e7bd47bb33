"""The Store conformance suite: every test runs against both backends (sqlite and a real etcd)
through the `store` / `make_store` fixtures of tests/store/conftest.py."""

from __future__ import annotations

import asyncio

import pytest
from store_fixtures import StoreFactory

from ephemera.store import (
    Compacted,
    Event,
    FutureRevision,
    KeyExists,
    KeyNotFound,
    KeyValue,
    Progress,
    RevisionMismatch,
    Store,
    Watcher,
    WatcherDropped,
)

DEADLINE = 15.0  # seconds before a test waiting for events gives up (a failure, not a timing)


async def next_events(watcher: Watcher, count: int) -> list[Event]:
    """The next `count` events of `watcher`, skipping Progress."""
    events: list[Event] = []
    iterator = aiter(watcher)
    async with asyncio.timeout(DEADLINE):
        while len(events) < count:
            item = await anext(iterator)
            if isinstance(item, Event):
                events.append(item)
    return events


async def test_revision_grows_with_every_write(store: Store) -> None:
    start = await store.current_revision()
    created = await store.create("/r/a", b"1")
    updated = await store.update("/r/a", b"2", created.mod_revision)
    other = await store.create("/r/b", b"1")
    deleted = await store.delete("/r/a")
    revisions = [start, created.mod_revision, updated.mod_revision, other.mod_revision]
    revisions.append(deleted.mod_revision)
    assert revisions == sorted(set(revisions))
    assert await store.current_revision() == deleted.mod_revision
    assert created.create_revision == created.mod_revision
    assert updated.create_revision == created.create_revision


async def test_create_get_and_key_exists(store: Store) -> None:
    assert await store.get("/c/a") is None
    created = await store.create("/c/a", b"value")
    assert created == KeyValue("/c/a", b"value", created.mod_revision, created.mod_revision)
    assert await store.get("/c/a") == created
    with pytest.raises(KeyExists) as raised:
        await store.create("/c/a", b"other")
    assert raised.value.key == "/c/a"
    assert await store.get("/c/a") == created
    assert await store.current_revision() == created.mod_revision


async def test_list_by_prefix_in_key_order(store: Store) -> None:
    for key in ["/l/b", "/l/a", "/l/c", "/la", "/k/z", "/l/a/deep"]:
        await store.create(key, key.encode())
    result = await store.list("/l/")
    assert [kv.key for kv in result.kvs] == ["/l/a", "/l/a/deep", "/l/b", "/l/c"]
    assert [kv.value for kv in result.kvs] == [b"/l/a", b"/l/a/deep", b"/l/b", b"/l/c"]
    assert result.more is False
    assert result.revision == await store.current_revision()
    assert (await store.list("/nothing/")).kvs == []


async def test_list_pagination_with_limit_and_start_after(store: Store) -> None:
    keys = [f"/pg/{i:02d}" for i in range(7)]
    for key in reversed(keys):
        await store.create(key, b"x")
    await store.create("/pg0", b"outside")
    first = await store.list("/pg/", limit=3)
    assert [kv.key for kv in first.kvs] == keys[:3] and first.more
    assert first.remaining == 4
    # Later writes do not show in pages read at the first page's revision.
    await store.create("/pg/03a", b"late")
    second = await store.list(
        "/pg/", limit=3, start_after=first.kvs[-1].key, revision=first.revision
    )
    assert [kv.key for kv in second.kvs] == keys[3:6] and second.more
    assert second.revision == first.revision and second.remaining == 1
    third = await store.list(
        "/pg/", limit=3, start_after=second.kvs[-1].key, revision=first.revision
    )
    assert [kv.key for kv in third.kvs] == keys[6:] and not third.more
    assert third.remaining == 0
    exact = await store.list("/pg/", limit=7, revision=first.revision)
    assert len(exact.kvs) == 7 and not exact.more
    now = await store.list("/pg/", start_after="/pg/03")
    assert [kv.key for kv in now.kvs] == ["/pg/03a", *keys[4:]]


async def test_list_at_an_old_revision_sees_old_values(store: Store) -> None:
    a = await store.create("/h/a", b"a1")
    b = await store.create("/h/b", b"b1")
    at = await store.current_revision()
    await store.update("/h/a", b"a2", a.mod_revision)
    await store.delete("/h/b", b.mod_revision)
    await store.create("/h/c", b"c1")
    old = await store.list("/h/", revision=at)
    assert old.revision == at
    assert old.kvs == [a, b]
    before_b = await store.list("/h/", revision=a.mod_revision)
    assert before_b.kvs == [a]
    now = await store.list("/h/")
    assert [(kv.key, kv.value) for kv in now.kvs] == [("/h/a", b"a2"), ("/h/c", b"c1")]
    with pytest.raises(FutureRevision):
        await store.list("/h/", revision=now.revision + 100)


async def test_pages_at_an_old_revision_see_that_revision_on_every_page(store: Store) -> None:
    made = [await store.create(f"/op/{i}", f"v{i}".encode()) for i in range(5)]
    at = await store.current_revision()
    await store.delete("/op/0", made[0].mod_revision)
    await store.update("/op/3", b"changed", made[3].mod_revision)
    await store.create("/op/2a", b"late")
    await store.delete("/op/4", made[4].mod_revision)
    pages: list[list[KeyValue]] = []
    start = ""
    while True:
        page = await store.list("/op/", limit=2, start_after=start, revision=at)
        assert page.revision == at
        assert page.remaining == 5 - 2 * (len(pages) + 1) if page.more else page.remaining == 0
        pages.append(page.kvs)
        if not page.more:
            break
        start = page.kvs[-1].key
    assert pages == [made[0:2], made[2:4], made[4:5]]
    now = await store.list("/op/", limit=2, start_after="/op/2")
    assert [(kv.key, kv.value) for kv in now.kvs] == [("/op/2a", b"late"), ("/op/3", b"changed")]
    assert not now.more


async def test_update_compare_and_swap(store: Store) -> None:
    created = await store.create("/u/a", b"1")
    updated = await store.update("/u/a", b"2", created.mod_revision)
    assert updated.value == b"2" and updated.mod_revision > created.mod_revision
    with pytest.raises(RevisionMismatch) as raised:
        await store.update("/u/a", b"3", created.mod_revision)
    assert raised.value.current == updated
    assert await store.get("/u/a") == updated
    with pytest.raises(RevisionMismatch):
        await store.update("/u/a", b"3", 0)
    with pytest.raises(KeyNotFound):
        await store.update("/u/missing", b"1", created.mod_revision)
    with pytest.raises(KeyNotFound):
        await store.update("/u/missing", b"1", 0)
    assert await store.get("/u/missing") is None


async def test_delete_compare_and_swap(store: Store) -> None:
    created = await store.create("/d/a", b"1")
    updated = await store.update("/d/a", b"2", created.mod_revision)
    with pytest.raises(RevisionMismatch) as raised:
        await store.delete("/d/a", created.mod_revision)
    assert raised.value.current == updated
    deleted = await store.delete("/d/a", updated.mod_revision)
    assert deleted.value == b"2" and deleted.create_revision == created.create_revision
    assert deleted.mod_revision == await store.current_revision()
    assert await store.get("/d/a") is None
    with pytest.raises(KeyNotFound):
        await store.delete("/d/a")
    with pytest.raises(KeyNotFound):
        await store.delete("/d/a", updated.mod_revision)
    again = await store.create("/d/a", b"3")
    assert (await store.delete("/d/a")).value == b"3"  # unconditional
    assert again.create_revision > deleted.mod_revision


async def test_watch_delivers_history_then_live_in_order(store: Store) -> None:
    start = await store.current_revision()
    a = await store.create("/w/a", b"1")
    a2 = await store.update("/w/a", b"2", a.mod_revision)
    watcher = await store.watch("/w/", start)
    b = await store.create("/w/b", b"1")
    gone = await store.delete("/w/a")
    events = await next_events(watcher, 4)
    assert [(e.type, e.kv) for e in events] == [
        ("PUT", a),
        ("PUT", a2),
        ("PUT", b),
        ("DELETE", gone),
    ]
    assert events[0].prev is None
    assert events[1].prev == a
    assert events[2].prev is None
    await watcher.close()


async def test_delete_event_carries_the_last_value(store: Store) -> None:
    start = await store.current_revision()
    created = await store.create("/dv/a", b"first")
    updated = await store.update("/dv/a", b"last", created.mod_revision)
    deleted = await store.delete("/dv/a")
    for after in (start, updated.mod_revision):  # replayed from history, and live
        watcher = await store.watch("/dv/", after)
        events = await next_events(watcher, 3 if after == start else 1)
        event = events[-1]
        assert event.type == "DELETE"
        assert event.kv.key == "/dv/a" and event.kv.value == b"last"
        assert event.kv.mod_revision == deleted.mod_revision == event.revision
        assert event.prev == updated
        await watcher.close()
    live = await store.watch("/dv/", await store.current_revision())
    recreated = await store.create("/dv/a", b"again")
    removed = await store.delete("/dv/a", recreated.mod_revision)
    events = await next_events(live, 2)
    assert [(e.type, e.kv) for e in events] == [("PUT", recreated), ("DELETE", removed)]
    assert events[1].kv.value == b"again"
    await live.close()


async def test_watch_from_now_sees_only_later_events(store: Store) -> None:
    await store.create("/wn/old", b"x")
    watcher = await store.watch("/wn/", await store.current_revision())
    new = await store.create("/wn/new", b"y")
    events = await next_events(watcher, 1)
    assert [e.kv for e in events] == [new]
    await watcher.close()


async def test_watch_with_concurrent_writer_has_no_gap_and_no_duplicate(store: Store) -> None:
    start = await store.current_revision()
    total = 300
    acknowledged: list[KeyValue] = []
    halfway = asyncio.Event()

    async def writer() -> None:
        for i in range(total):
            acknowledged.append(await store.create(f"/cw/{i:04d}", b"v"))
            if i == total // 3:
                halfway.set()

    task = asyncio.create_task(writer())
    await halfway.wait()
    watcher = await store.watch("/cw/", start)  # while the writer keeps going
    events = await next_events(watcher, total)
    await task
    assert [e.kv for e in events] == acknowledged
    revisions = [e.revision for e in events]
    assert revisions == sorted(set(revisions))
    # Nothing more: the next item is a Progress, not a duplicate event.
    async with asyncio.timeout(DEADLINE):
        item = await anext(aiter(watcher))
    assert isinstance(item, Progress) and item.revision >= acknowledged[-1].mod_revision
    await watcher.close()


async def test_several_watchers_from_different_revisions(store: Store) -> None:
    start = await store.current_revision()
    written = [await store.create(f"/mw/{i}", b"v") for i in range(10)]
    watchers = [await store.watch("/mw/", kv.mod_revision) for kv in [written[2], written[7]]]
    watchers.insert(0, await store.watch("/mw/", start))
    more = [await store.create(f"/mw/x{i}", b"v") for i in range(3)]
    assert [e.kv for e in await next_events(watchers[0], 13)] == written + more
    assert [e.kv for e in await next_events(watchers[1], 10)] == written[3:] + more
    assert [e.kv for e in await next_events(watchers[2], 5)] == written[8:] + more
    for watcher in watchers:
        await watcher.close()


async def test_watch_of_a_prefix_does_not_see_other_prefixes(store: Store) -> None:
    start = await store.current_revision()
    watcher = await store.watch("/iso/a/", start)
    await store.create("/iso/b/1", b"x")
    await store.create("/iso/a", b"x")
    await store.create("/iso/ab", b"x")
    mine = await store.create("/iso/a/1", b"x")
    await store.create("/iso/b/2", b"x")
    mine2 = await store.update("/iso/a/1", b"y", mine.mod_revision)
    events = await next_events(watcher, 2)
    assert [e.kv for e in events] == [mine, mine2]
    await watcher.close()


async def test_compaction_then_list_and_watch_below_it_raise_compacted(store: Store) -> None:
    a = await store.create("/cp/a", b"1")
    await store.create("/cp/b", b"1")
    a2 = await store.update("/cp/a", b"2", a.mod_revision)
    await store.delete("/cp/b")
    c = await store.create("/cp/c", b"1")
    target = c.mod_revision
    await store.compact(target)
    assert await store.compacted_revision() >= target
    with pytest.raises(Compacted) as raised:
        await store.list("/cp/", revision=target - 1)
    assert raised.value.requested == target - 1
    assert raised.value.compacted >= target
    assert (await store.list("/cp/", revision=target)).kvs == [a2, c]
    with pytest.raises(Compacted):
        await store.watch("/cp/", target - 2)
    # A watch from the compacted revision itself is complete.
    later = await store.update("/cp/c", b"2", c.mod_revision)
    watcher = await store.watch("/cp/", target - 1)
    assert [e.kv for e in await next_events(watcher, 2)] == [c, later]
    await watcher.close()
    await store.compact(target)  # compacting again to the same revision is a no-op
    with pytest.raises(FutureRevision):
        await store.compact(await store.current_revision() + 100)
    assert (await store.list("/cp/")).kvs == [a2, later]


async def test_progress_events_arrive_when_idle(store: Store) -> None:
    start = await store.current_revision()
    watcher = await store.watch("/pr/mine/", start)
    mine = await store.create("/pr/mine/a", b"x")
    elsewhere = await store.create("/pr/other/a", b"x")
    items: list[Event | Progress] = []
    async with asyncio.timeout(DEADLINE):
        async for item in watcher:
            items.append(item)
            if isinstance(item, Progress) and item.revision >= elsewhere.mod_revision:
                break
    assert isinstance(items[0], Event) and items[0].kv == mine
    progress = [item.revision for item in items[1:]]
    assert all(isinstance(item, Progress) for item in items[1:])
    assert progress == sorted(progress) and progress[0] >= mine.mod_revision
    await watcher.close()


async def test_progress_on_a_quiet_store_repeats(store: Store) -> None:
    watcher = await store.watch("/quiet/", await store.current_revision())
    iterator = aiter(watcher)
    async with asyncio.timeout(DEADLINE):
        first = await anext(iterator)
        second = await anext(iterator)
    assert isinstance(first, Progress) and isinstance(second, Progress)
    assert second.revision >= first.revision
    await watcher.close()


async def test_slow_watcher_is_dropped(make_store: StoreFactory) -> None:
    store = await make_store(watch_capacity=5)
    watcher = await store.watch("/slow/", await store.current_revision())
    for i in range(40):
        await store.create(f"/slow/{i}", b"v")
    async with asyncio.timeout(DEADLINE):
        while not getattr(watcher, "dropped", False):
            await asyncio.sleep(0.01)
    with pytest.raises(WatcherDropped):
        await next_events(watcher, 40)
    # A keeping-up watcher on the same store is not affected.
    fast = await store.watch("/slow/", await store.current_revision())
    more = [await store.create(f"/slow/more{i}", b"v") for i in range(3)]
    assert [e.kv for e in await next_events(fast, 3)] == more
    await fast.close()
    await watcher.close()


async def test_closed_watcher_stops_iterating(store: Store) -> None:
    watcher = await store.watch("/cl/", await store.current_revision())
    created = await store.create("/cl/a", b"v")
    assert [e.kv for e in await next_events(watcher, 1)] == [created]
    await watcher.close()
    await store.create("/cl/b", b"v")
    assert [item async for item in watcher] == []


async def test_a_key_written_with_a_ttl_is_deleted_when_it_expires(store: Store) -> None:
    """As a key attached to an etcd lease: the expiry is a delete at a revision of its own,
    with a DELETE event carrying the last value; a write without a TTL makes a key
    permanent, and keys written without one never expire."""
    start = await store.current_revision()
    watcher = await store.watch("/ttl/", start)
    try:
        await store.create("/ttl/expiring", b"1", ttl=1)
        await store.create("/ttl/permanent", b"2")
        kept = await store.create("/ttl/kept", b"3", ttl=1)
        await store.update("/ttl/kept", b"4", kept.mod_revision)
        updated = await store.create("/ttl/updated", b"5")
        await store.update("/ttl/updated", b"6", updated.mod_revision, ttl=1)
        events = await next_events(watcher, 8)
    finally:
        await watcher.close()
    assert [e.type for e in events[:6]] == ["PUT"] * 6
    expired = events[6:]
    assert sorted((e.type, e.kv.key, e.kv.value) for e in expired) == [
        ("DELETE", "/ttl/expiring", b"1"), ("DELETE", "/ttl/updated", b"6")]
    assert expired[0].kv.mod_revision < expired[1].kv.mod_revision
    assert await store.get("/ttl/expiring") is None
    assert await store.get("/ttl/updated") is None
    remaining = await store.list("/ttl/")
    assert [(kv.key, kv.value) for kv in remaining.kvs] == [
        ("/ttl/kept", b"4"), ("/ttl/permanent", b"2")]

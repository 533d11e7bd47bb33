"""The apiserver's own caches list the store in pages, as client-go's reflector lists the API:
`apiserver.informers.Reflector` reads 500 keys at a time, every page at the first page's
revision, continuing after the last key read (on etcd, where a list in one read was what
failed with "Received message larger than max")."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from ephemera.apiserver.informers import Reflector
from ephemera.client.reflector import DEFAULT_PAGE_SIZE
from ephemera.store import Event, KeyValue, ListResult, open_store

pytestmark = pytest.mark.etcd

KEYS = 2 * DEFAULT_PAGE_SIZE + 201


class Keys:
    """A sink that keeps the keys it was given."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.revision = 0

    def replace(self, kvs: Sequence[KeyValue], revision: int) -> None:
        self.keys, self.revision = [kv.key for kv in kvs], revision

    def apply(self, event: Event) -> None:
        self.keys.append(event.kv.key)


async def test_the_store_reflector_lists_in_pages_at_one_revision(
        etcd_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store("etcd", endpoints=[etcd_endpoint], prefix=f"/t-{uuid.uuid4().hex[:12]}")
    try:
        await asyncio.gather(*(store.create(f"/registry/things/{i:05}", b"{}")
                               for i in range(KEYS)))
        reads: list[tuple[int, str, int, int]] = []
        original = store.list

        async def recording(prefix: str, **options: Any) -> ListResult:
            result = await original(prefix, **options)
            reads.append((options.get("limit", 0), options.get("start_after", ""),
                          options.get("revision", 0), result.revision))
            return result

        monkeypatch.setattr(store, "list", recording)
        sink = Keys()
        reflector = Reflector(store, "/registry/things/", sink, name="things")
        await reflector.start()
        await reflector.close()
        assert sink.keys == [f"/registry/things/{i:05}" for i in range(KEYS)]
        assert [limit for limit, *_ in reads] == [DEFAULT_PAGE_SIZE] * 3
        first_revision = reads[0][3]
        assert sink.revision == first_revision
        assert [(after, pinned) for _, after, pinned, _ in reads] == [
            ("", 0),
            (f"/registry/things/{DEFAULT_PAGE_SIZE - 1:05}", first_revision),
            (f"/registry/things/{2 * DEFAULT_PAGE_SIZE - 1:05}", first_revision)]
    finally:
        await store.close()

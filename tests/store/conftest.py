"""Fixtures of the store tests: `make_store` opens stores of the parametrized backend
(sqlite in a temp dir, or etcd under a unique key prefix of this worker's etcd) and closes
them after the test; `store` is one such store with a short progress interval."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from store_fixtures import StoreFactory

from ephemera.store import Store, open_store

PROGRESS_INTERVAL = 0.1


@pytest.fixture(params=["sqlite", pytest.param("etcd", marks=pytest.mark.etcd)])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    kind: str = request.param
    endpoint = request.getfixturevalue("etcd_endpoint") if kind == "etcd" else None
    opened: list[Store] = []

    async def factory(
        *, progress_interval: float = PROGRESS_INTERVAL, watch_capacity: int = 10_000
    ) -> Store:
        if kind == "sqlite":
            store = open_store(
                "sqlite",
                data_dir=tmp_path / f"store-{len(opened)}",
                progress_interval=progress_interval,
                watch_capacity=watch_capacity,
            )
        else:
            assert endpoint is not None
            store = open_store(
                "etcd",
                endpoints=[endpoint],
                prefix=f"/t-{uuid.uuid4().hex[:12]}",
                progress_interval=progress_interval,
                watch_capacity=watch_capacity,
            )
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.close()


@pytest.fixture
async def store(make_store: StoreFactory) -> Store:
    return await make_store()

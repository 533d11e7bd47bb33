"""Shared test fixtures: a real etcd server per test process (xdist worker), `etcd_endpoint`.

The etcd binary comes from Debian's etcd-server, which `make test` installs; a missing binary
fails the tests that need it rather than skipping them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from hypothesis import settings

from etcdserver import ETCD_BINARY, EtcdServer

# Property tests run beside e2e tests on two cores: no per-example deadline (timing is not
# what they assert).
settings.register_profile("ephemera", deadline=None)
settings.load_profile("ephemera")


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    if shutil.which(ETCD_BINARY) is None:
        pytest.fail("the etcd binary is missing: `make test` installs it (Debian etcd-server)")
    with EtcdServer() as server:
        yield server


@pytest.fixture(scope="session")
def etcd_endpoint(etcd_server: EtcdServer) -> str:
    """`http://127.0.0.1:<port>` of this worker's etcd. Tests share it: put your keys under a
    unique prefix (the etcd store's `prefix=`)."""
    return etcd_server.endpoint


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup`, every e2e module without a group of its own runs on one
    worker: its module-scoped cluster then starts once, not once per worker that got one of
    its tests (before xdist turns the marks into groups)."""
    for item in items:
        if "e2e" in item.path.parts and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(f"e2e-{item.path.stem}"))

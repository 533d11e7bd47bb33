"""The kubelet's Lease renewal (`NodeAgent.renew_lease`) sends what upstream's node lease
controller sends: a create when there is no Lease, then GET-less PUTs of the Lease it last got
back with `renewTime` changed; a conflict reads the Lease again; a failed renewal falls back to
reading it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from ephemera.api import errors
from ephemera.client import ApiClient, ApiUnavailable
from ephemera.kubelet.node import (
    MAX_LEASE_UPDATE_RETRIES,
    NodeAgent,
    NodeConfig,
    heartbeat_timeout,
)

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


class FakeLeases:
    """The Leases API of one node: a stored Lease with a resourceVersion, conflicts on a stale
    one, and failures to inject."""

    def __init__(self) -> None:
        self.stored: dict[str, Any] | None = None
        self.version = 0
        self.calls: list[tuple[str, str]] = []
        self.timeouts: list[float | None] = []  # each request's own bound
        self.fail: list[Exception] = []  # raised by the next requests, in order

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version),
                                       "uid": "lease-uid"}}
        self.stored = stored
        return {**stored, "metadata": dict(stored["metadata"])}

    def _maybe_fail(self, params: dict[str, Any]) -> None:
        self.timeouts.append(params.get("request_timeout"))
        if self.fail:
            raise self.fail.pop(0)

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.calls.append(("GET", path))
        self._maybe_fail(params)
        if self.stored is None:
            raise errors.not_found("leases", "n1", "coordination.k8s.io")
        return {**self.stored, "metadata": dict(self.stored["metadata"])}

    async def create(self, path: str, body: dict[str, Any], **params: Any) -> dict[str, Any]:
        self.calls.append(("POST", path))
        self._maybe_fail(params)
        assert "resourceVersion" not in body["metadata"]
        return self._store(body)

    async def update(self, path: str, body: dict[str, Any], **params: Any) -> dict[str, Any]:
        self.calls.append(("PUT", path))
        self._maybe_fail(params)
        assert self.stored is not None
        if body["metadata"]["resourceVersion"] != self.stored["metadata"]["resourceVersion"]:
            raise errors.conflict("leases", "n1", group="coordination.k8s.io")
        return self._store(body)


def agent(api: FakeLeases, tmp_path: Path, node_uid: str | None = "node-uid") -> NodeAgent:
    a = NodeAgent(cast(ApiClient, api), NodeConfig("n1", tmp_path, {}))
    if node_uid is not None:
        a.node = {"metadata": {"name": "n1", "uid": node_uid}}
    return a


def test_creates_then_renews_with_put_of_the_lease_it_last_got_back(tmp_path: Path) -> None:
    api = FakeLeases()
    a = agent(api, tmp_path)

    async def run() -> None:
        await a.renew_lease()
        assert api.calls == [("GET", LEASE), ("POST", LEASES)]
        assert api.stored is not None
        created = api.stored
        assert created["spec"]["holderIdentity"] == "n1"
        assert created["spec"]["leaseDurationSeconds"] == 40
        assert created["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid"}]
        api.calls.clear()
        for _ in range(3):
            await a.renew_lease()
        assert api.calls == [("PUT", LEASE)] * 3
        assert api.stored["metadata"]["resourceVersion"] == "4"
        assert api.stored["spec"]["renewTime"] >= created["spec"]["renewTime"]

    asyncio.run(run())


def test_a_conflict_reads_the_lease_again_and_renews_that(tmp_path: Path) -> None:
    api = FakeLeases()
    a = agent(api, tmp_path)

    async def run() -> None:
        await a.renew_lease()
        assert api.stored is not None
        api.stored = {**api.stored, "metadata": {**api.stored["metadata"],
                                                 "resourceVersion": "99"}}  # another writer
        api.calls.clear()
        await a.renew_lease()
        assert api.calls == [("PUT", LEASE), ("GET", LEASE), ("PUT", LEASE)]
        assert a.lease is not None and a.lease["metadata"]["resourceVersion"] == \
            api.stored["metadata"]["resourceVersion"]

    asyncio.run(run())


def test_failed_renewals_are_retried_then_the_lease_is_read_again(tmp_path: Path) -> None:
    api = FakeLeases()
    a = agent(api, tmp_path)

    async def run() -> None:
        await a.renew_lease()
        api.calls.clear()
        api.fail = [ApiUnavailable("connection refused")] * MAX_LEASE_UPDATE_RETRIES
        await a.renew_lease()
        assert api.calls == [("PUT", LEASE)] * MAX_LEASE_UPDATE_RETRIES + [
            ("GET", LEASE), ("PUT", LEASE)]
        # Every try failing: the error reaches the caller, which tries at its next turn.
        api.calls.clear()
        api.fail = [ApiUnavailable("connection refused")] * (MAX_LEASE_UPDATE_RETRIES + 1)
        with pytest.raises(ApiUnavailable):
            await a.renew_lease()
        assert api.calls == [("PUT", LEASE)] * MAX_LEASE_UPDATE_RETRIES + [("GET", LEASE)]

    asyncio.run(run())


def test_the_owner_is_set_once_the_node_is_known(tmp_path: Path) -> None:
    api = FakeLeases()
    a = agent(api, tmp_path, node_uid=None)

    async def run() -> None:
        await a.renew_lease()
        assert api.stored is not None
        assert "ownerReferences" not in api.stored["metadata"]
        a.node = {"metadata": {"name": "n1", "uid": "node-uid"}}
        await a.renew_lease()
        assert api.stored["metadata"]["ownerReferences"][0]["uid"] == "node-uid"

    asyncio.run(run())


def test_heartbeats_are_bounded_as_upstreams_heartbeat_client(tmp_path: Path) -> None:
    """Every request of a renewal carries the heartbeat timeout: the status update frequency,
    at most the lease duration (upstream's kubelet and kubemark set it on their heartbeat
    client)."""
    assert heartbeat_timeout(10.0) == 10.0
    assert heartbeat_timeout(60.0) == 40.0
    api = FakeLeases()
    a = agent(api, tmp_path)

    async def run() -> None:
        await a.renew_lease()  # GET, POST
        await a.renew_lease()  # PUT
        api.fail = [errors.conflict("leases", "n1", group="coordination.k8s.io")]
        await a.renew_lease()  # PUT (409), GET, PUT

    asyncio.run(run())
    assert len(api.timeouts) == 6
    assert api.timeouts == [10.0] * 6

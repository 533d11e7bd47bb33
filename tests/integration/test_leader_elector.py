"""`ephemera.client.leaderelection` against the in-process apiserver on a real loopback
socket: the Lease a first candidate creates, a follower that waits out the lease duration
(on a clock the test moves) and then takes over with `leaseTransitions` bumped, a race for an
expired Lease that exactly one candidate wins (the resourceVersion), a release on stop that
lets the next candidate in at once, a leader that loses its Lease stopping its work, the
`LeaderElection` events, and the bootstrap RBAC of the scheduler and the controller-manager
on their Leases."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, eventually, serve, serve_users

from ephemera.api.errors import StatusError
from ephemera.apiserver.authn import AUTHENTICATED_GROUP, UserInfo
from ephemera.client import ApiClient, ClientConfig, EventRecorder, resource_path
from ephemera.client.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionError,
    LeaderElector,
    LeaseLock,
)
from ephemera.store import open_store

LEASE = resource_path("leases", "kube-system", "kube-scheduler", group="coordination.k8s.io")


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def url_of(api: Api) -> str:
    return str(api.client.server.make_url("")).rstrip("/")


@pytest.fixture(params=["sqlite", pytest.param("etcd", marks=pytest.mark.etcd)])
async def client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ApiClient]:
    """A client of the in-process apiserver on SQLite, and on etcd (whose compare-and-swap
    is what makes a Lease update with a stale resourceVersion fail)."""
    if request.param == "sqlite":
        store = open_store("sqlite", data_dir=tmp_path / "data")
    else:
        store = open_store("etcd", endpoints=[request.getfixturevalue("etcd_endpoint")],
                           prefix=f"/le-{uuid.uuid4().hex}")
    try:
        async for api in serve(store):
            async with ApiClient(ClientConfig(server=url_of(api)),
                                 user_agent="le-test") as c:
                yield c
    finally:
        await store.close()


def elector(client: ApiClient, identity: str, clock: Clock | None = None, *,
            name: str = "kube-scheduler", lease: float = 15, renew: float = 10,
            retry: float = 2, release: bool = False) -> LeaderElector:
    config = LeaderElectionConfig("kube-system", name, identity, lease_duration=lease,
                                  renew_deadline=renew, retry_period=retry,
                                  release_on_cancel=release)
    lock = LeaseLock(client, "kube-system", name, identity,
                     EventRecorder(client, "default-scheduler"))
    if clock is None:
        return LeaderElector(config, lock)
    return LeaderElector(config, lock, clock=clock)


async def lease_spec(client: ApiClient) -> dict[str, Any]:
    spec: dict[str, Any] = (await client.get(LEASE))["spec"]
    return spec


async def election_events(client: ApiClient) -> list[tuple[str, str, str]]:
    listed = await client.list(resource_path("events", "kube-system"))
    return [(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["message"])
            for e in listed["items"] if e["reason"] == "LeaderElection"]


async def test_first_candidate_creates_the_lease_and_renews_it(client: ApiClient) -> None:
    clock = Clock()
    a = elector(client, "host_a", clock)
    assert await a.try_acquire_or_renew()
    spec = await lease_spec(client)
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"],
            spec["leaseTransitions"]) == ("host_a", 15, 0)
    assert spec["acquireTime"] == spec["renewTime"]
    first_rv = (await client.get(LEASE))["metadata"]["resourceVersion"]

    clock.now += 2
    assert await a.try_acquire_or_renew()
    renewed = await client.get(LEASE)
    assert renewed["metadata"]["resourceVersion"] != first_rv
    assert renewed["spec"]["acquireTime"] == spec["acquireTime"]
    assert renewed["spec"]["renewTime"] != spec["renewTime"]
    assert renewed["spec"]["leaseTransitions"] == 0
    assert a.is_leader() and a.leader() == "host_a"


async def test_a_follower_waits_out_the_lease_then_takes_over(client: ApiClient) -> None:
    a_clock, b_clock = Clock(), Clock()
    a = elector(client, "host_a", a_clock)
    b = elector(client, "host_b", b_clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert b.leader() == "host_a" and not b.is_leader()

    # The leader keeps renewing: each renewal b sees restarts its wait.
    for _ in range(3):
        a_clock.now += 10
        b_clock.now += 10
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()

    # The leader stops; 14 s after b last saw a change, the Lease is still a's ...
    b_clock.now += 14
    assert not await b.try_acquire_or_renew()
    # ... past 15 s b takes it over, a new term.
    b_clock.now += 1.5
    assert await b.try_acquire_or_renew()
    spec = await lease_spec(client)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("host_b", 1)
    assert spec["acquireTime"] == spec["renewTime"]

    # The old leader, back, finds its write refused (409) and the Lease another's.
    a_clock.now += 1
    assert not await a.try_acquire_or_renew()
    assert a.leader() == "host_b" and not a.is_leader()
    assert (await lease_spec(client))["holderIdentity"] == "host_b"


async def test_two_candidates_racing_for_an_expired_lease_one_wins(client: ApiClient) -> None:
    dead = elector(client, "host_dead", Clock())
    assert await dead.try_acquire_or_renew()
    clocks = [Clock() for _ in range(4)]
    candidates = [elector(client, f"host_{i}", clocks[i]) for i in range(4)]
    for c in candidates:
        assert not await c.try_acquire_or_renew()
    for clock in clocks:
        clock.now += 16
    won = await asyncio.gather(*(c.try_acquire_or_renew() for c in candidates))
    assert won.count(True) == 1
    winner = f"host_{won.index(True)}"
    spec = await lease_spec(client)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == (winner, 1)


async def test_run_leads_and_a_stop_releases_for_the_next(client: ApiClient) -> None:
    a = elector(client, "host_a", lease=3, renew=2, retry=0.2, release=True)
    stop = asyncio.Event()
    leading = asyncio.Event()
    cancelled = asyncio.Event()

    async def lead() -> None:
        leading.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    running = asyncio.create_task(a.run(lead, stop))
    await asyncio.wait_for(leading.wait(), 10)
    spec = await lease_spec(client)
    assert spec["holderIdentity"] == "host_a"
    stop.set()
    assert await asyncio.wait_for(running, 10) is True
    assert cancelled.is_set()
    released = await lease_spec(client)
    assert (released["holderIdentity"], released["leaseDurationSeconds"],
            released["leaseTransitions"]) == ("", 1, 0)

    # The released Lease has no holder: the next candidate takes it on its first try.
    b = elector(client, "host_b", Clock())
    assert await b.try_acquire_or_renew()
    assert (await lease_spec(client))["leaseTransitions"] == 1
    events = await election_events(client)
    assert ("Lease", "kube-scheduler", "host_a became leader") in events
    assert ("Lease", "kube-scheduler", "host_a stopped leading") in events


async def test_a_leader_that_cannot_renew_stops_its_work(client: ApiClient) -> None:
    a = elector(client, "host_a", lease=3, renew=1, retry=0.2)
    work_cancelled = asyncio.Event()

    async def lead() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            work_cancelled.set()
            raise

    running = asyncio.create_task(a.run(lead, asyncio.Event()))
    await eventually(lambda: a.is_leader())
    # Someone else writes the Lease as theirs: every renewal of a's now conflicts or finds
    # the Lease held, until the renew deadline ends a's leadership.
    async def steal() -> bool:
        current = await client.get(LEASE)
        current["spec"]["holderIdentity"] = "host_thief"
        try:
            await client.update(LEASE, current)
        except StatusError as err:
            assert err.code == 409  # a's renewal came in between
            return False
        return True

    await eventually(steal)
    assert await asyncio.wait_for(running, 10) is False
    assert work_cancelled.is_set()
    assert a.leader() == "host_thief"
    assert ("Lease", "kube-scheduler", "host_a stopped leading") in await election_events(
        client)


async def test_stop_before_leading_returns_without_leading(client: ApiClient) -> None:
    holder = elector(client, "host_a", Clock())
    assert await holder.try_acquire_or_renew()
    b = elector(client, "host_b", lease=3, renew=1, retry=0.2)
    stop = asyncio.Event()
    started = False

    async def lead() -> None:
        nonlocal started
        started = True

    running = asyncio.create_task(b.run(lead, stop))
    await eventually(lambda: b.leader() == "host_a")
    stop.set()
    assert await asyncio.wait_for(running, 10) is True
    assert not started
    assert (await lease_spec(client))["holderIdentity"] == "host_a"


@pytest.mark.parametrize(("lease", "renew", "retry", "message"), [
    (10, 10, 2, "leaseDuration must be greater than renewDeadline"),
    (15, 2.4, 2, "renewDeadline must be greater than retryPeriod*JitterFactor"),
    (15, 10, 0, "retryPeriod must be greater than zero"),
])
def test_configurations_client_go_refuses(lease: float, renew: float, retry: float,
                                          message: str) -> None:
    config = LeaderElectionConfig("kube-system", "kube-scheduler", "id", lease, renew, retry)
    with pytest.raises(LeaderElectionError) as err:
        config.validate()
    assert str(err.value) == message


# --- the bootstrap policy: each component may hold its own Lease, not the other's -----------


TOKENS = {"sched": UserInfo("system:kube-scheduler", (AUTHENTICATED_GROUP,)),
          "kcm": UserInfo("system:kube-controller-manager", (AUTHENTICATED_GROUP,))}


async def test_the_components_may_write_their_own_leases_only(tmp_path: Path) -> None:
    async for users in serve_users(open_store("sqlite", data_dir=tmp_path / "data"), TOKENS):
        url = str(users.api.client.server.make_url("")).rstrip("/")
        # The controller-manager's identity also holds the garbage collector's role (update
        # and delete of every resource, upstream's `generic-garbage-collector`, which
        # ephemera binds to the one controller-manager user), so only the scheduler's is
        # refused another component's Lease.
        for token, own, other in (("sched", "kube-scheduler", "kube-controller-manager"),):
            async with ApiClient(ClientConfig(server=url, token=token)) as as_component:
                mine = elector(as_component, f"{token}_1", Clock(), name=own)
                assert await mine.try_acquire_or_renew()
                assert await mine.try_acquire_or_renew()  # get and update
                assert (await as_component.get(resource_path(
                    "leases", "kube-system", own, group="coordination.k8s.io"))
                    )["spec"]["holderIdentity"] == f"{token}_1"
                # Reading kube-system's Leases is granted (ephemera's apiserver-endpoints
                # reader role); writing another component's Lease is not.
                other_lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                               "metadata": {"name": other, "namespace": "kube-system"},
                               "spec": {"holderIdentity": f"{token}_1"}}
                with pytest.raises(StatusError) as err:
                    await as_component.update(resource_path(
                        "leases", "kube-system", other, group="coordination.k8s.io"),
                        other_lease)
                assert err.value.code == 403


class StallingProxy:
    """A TCP proxy to an apiserver that can stall: its connections stay open and take
    requests, but nothing gets through (an apiserver stopped with SIGSTOP, as the client
    sees it on a kept-alive connection)."""

    def __init__(self, target: str) -> None:
        host_port = target.split("://", 1)[1]
        self.host, port = host_port.rsplit(":", 1)
        self.port = int(port)
        self.stalled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        for pump in (self._pump(reader, up_writer), self._pump(up_reader, writer)):
            task = asyncio.create_task(pump)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await source.read(65536):
                while self.stalled:
                    await asyncio.sleep(0.05)
                sink.write(data)
                await sink.drain()
        sink.close()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()


async def test_a_leader_renews_through_another_apiserver_when_its_own_stalls(
        client: ApiClient) -> None:
    """Two apiservers (a proxy in front of the one under test, then the one itself): the
    first stalls while the elector leads through it. Its renewal there gets half the renew
    deadline, then the next try goes to the other, and the leadership is kept."""
    direct = client.server
    proxy = StallingProxy(direct)
    through_proxy = await proxy.start()
    try:
        async with ApiClient(ClientConfig(server=direct), user_agent="le-test",
                             endpoints=[through_proxy]) as both:
            a = elector(both, "host_a", lease=4, renew=2, retry=0.25)
            stop = asyncio.Event()
            running = asyncio.create_task(a.run(asyncio.Event().wait, stop))
            await eventually(lambda: a.is_leader())
            assert both.server == through_proxy
            before = (await lease_spec(client))["renewTime"]
            proxy.stalled = True
            await asyncio.sleep(4)  # twice the renew deadline
            assert a.is_leader() and not running.done()
            assert both.server == direct
            assert (await lease_spec(client))["renewTime"] != before
            stop.set()
            assert await asyncio.wait_for(running, 10) is True
    finally:
        await proxy.close()


async def test_a_new_leader_renews_while_its_event_is_still_being_posted(
        client: ApiClient) -> None:
    """The "became leader" Event goes through an apiserver that stalls; the Lease is written
    through another. As client-go's recorder, posting the event does not hold up renewals."""
    proxy = StallingProxy(client.server)
    proxy.stalled = True
    try:
        async with ApiClient(ClientConfig(server=await proxy.start()),
                             user_agent="le-test") as stalled:
            config = LeaderElectionConfig("kube-system", "kube-scheduler", "host_a",
                                          lease_duration=4, renew_deadline=2,
                                          retry_period=0.25)
            lock = LeaseLock(client, "kube-system", "kube-scheduler", "host_a",
                             EventRecorder(stalled, "default-scheduler"))
            a = LeaderElector(config, lock)
            stop = asyncio.Event()
            running = asyncio.create_task(a.run(asyncio.Event().wait, stop))
            await eventually(lambda: a.is_leader())
            first = (await lease_spec(client))["renewTime"]
            await eventually(lambda: _renewed_since(client, first), timeout=3)
            assert a.is_leader() and not running.done()
            assert await election_events(client) == []
            stop.set()
            assert await asyncio.wait_for(running, 10) is True
    finally:
        await proxy.close()


async def _renewed_since(client: ApiClient, renew_time: str) -> bool:
    return (await lease_spec(client))["renewTime"] != renew_time

"""The etcd store's lease manager: upstream's lease reuse (one lease per reuse window of
min(60 s, 5% of the TTL), at most 1,000 keys on one lease, each granted with the window added
to its TTL so that no key expires before its own TTL)."""

from __future__ import annotations

from ephemera.store.etcd import LeaseManager


class Leases:
    def __init__(self) -> None:
        self.now = 1000.0
        self.granted: list[int] = []  # the TTL of each lease granted

    def clock(self) -> float:
        return self.now

    async def grant(self, ttl: int) -> int:
        self.granted.append(ttl)
        return len(self.granted)


async def test_a_lease_is_reused_within_its_window_then_a_new_one_is_granted() -> None:
    leases = Leases()
    manager = LeaseManager(leases.grant, clock=leases.clock)
    first = await manager.lease_for(3600)
    assert leases.granted == [3660]  # the TTL plus the 60 s window
    leases.now += 59
    assert await manager.lease_for(3600) == first  # expires within 1 h + 60 s of now
    leases.now += 2  # 61 s on: the first lease would end before this key's hour
    second = await manager.lease_for(3600)
    assert second != first and leases.granted == [3660, 3660]


async def test_the_window_is_five_percent_of_a_short_ttl() -> None:
    leases = Leases()
    manager = LeaseManager(leases.grant, clock=leases.clock)
    await manager.lease_for(100)
    assert leases.granted == [105]
    await manager.lease_for(10)  # a TTL too short to share the 105 s lease: 5% is 0 s
    assert leases.granted == [105, 10]


async def test_at_most_a_thousand_keys_share_a_lease() -> None:
    leases = Leases()
    manager = LeaseManager(leases.grant, clock=leases.clock)
    ids = {await manager.lease_for(3600) for _ in range(1000)}
    assert ids == {1}
    assert await manager.lease_for(3600) == 2

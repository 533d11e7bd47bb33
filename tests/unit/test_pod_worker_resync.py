"""A pod worker's resync comes 1 to 1.5 periods after its last sync, at random, as
upstream's pod workers jitter theirs (`wait.Jitter(resyncInterval, 0.5)`): pods started
together spread their resyncs instead of all syncing in the same second every period."""

from __future__ import annotations

import random

from ephemera.kubelet.podworkers import resync_interval


def test_the_resync_is_one_to_one_and_a_half_periods_after_the_sync() -> None:
    assert resync_interval(60.0, rand=lambda: 0.0) == 60.0
    assert resync_interval(60.0, rand=lambda: 0.999) == 60.0 * 1.4995
    rng = random.Random(7)
    draws = [resync_interval(60.0, rand=rng.random) for _ in range(1000)]
    assert all(60.0 <= d < 90.0 for d in draws)
    # spread over the whole window: a tenth of the pods in each 3 s, roughly
    buckets = [sum(1 for d in draws if 60 + 3 * i <= d < 63 + 3 * i) for i in range(10)]
    assert min(buckets) > 50, buckets

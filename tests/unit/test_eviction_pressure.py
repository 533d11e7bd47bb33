"""Node-pressure eviction: `--eviction-hard` parsing (upstream errors), signal observations,
thresholds met, the disk-pressure ranking (reference 4.5, pod-level requests), the one-pod
pass with upstream's message, and a whole pass (`decide`)."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.api.quantity import Quantity
from ephemera.kubelet.eviction import (
    PressureConditions,
    decide,
    node_conditions,
    node_pressure_eviction,
    observe,
    parse_eviction_hard,
    rank_for_disk_pressure,
    thresholds_met,
)
from ephemera.kubelet.eviction.thresholds import ThresholdError, threshold_quantity
from ephemera.kubelet.stats.provider import (
    ContainerStats,
    FsStats,
    NodeStats,
    PodStats,
    Summary,
    VolumeStats,
)

Mi = 1024 * 1024
Gi = 1024 * Mi


def node(available: int, capacity: int = 100 * Gi, inodes_free: int = 1_000_000,
         inodes: int = 1_000_000) -> NodeStats:
    return NodeStats("n", 0.0, FsStats(time=1.0, available_bytes=available,
                                       capacity_bytes=capacity, inodes_free=inodes_free,
                                       inodes=inodes))


# --- parsing --------------------------------------------------------------------------------


def test_parse_defaults_and_flag() -> None:
    defaults = {t.signal for t in parse_eviction_hard(None)}
    assert defaults == {"memory.available", "nodefs.available", "nodefs.inodesFree",
                        "imagefs.available", "imagefs.inodesFree",
                        "allocatableMemory.available"}  # copied from memory.available
    parsed = parse_eviction_hard("nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<2Gi")
    assert [(t.signal, t.quantity) for t in parsed] == [
        ("nodefs.available", None), ("nodefs.inodesFree", None),
        ("imagefs.available", Quantity.parse("2Gi"))]
    assert parse_eviction_hard("nodefs.available<0%,nodefs.inodesFree<100%") == []


@pytest.mark.parametrize(("flag", "message"), [
    ("disk.available<10%", "unsupported eviction signal disk.available"),
    ("nodefs.available<150%", "eviction percentage threshold nodefs.available must be <= 100%: "
                              "150%"),
    ("nodefs.available<-5%", "eviction percentage threshold nodefs.available must be >= 0%: "
                             "-5%"),
    ("nodefs.available<0", "eviction threshold nodefs.available must be positive: 0"),
    ("nodefs.available<-1Gi", "eviction threshold nodefs.available must be positive: -1Gi"),
    ("nodefs.available=10%", "malformed pair, expect string<string: nodefs.available=10%"),
])
def test_parse_errors(flag: str, message: str) -> None:
    with pytest.raises(ThresholdError) as err:
        parse_eviction_hard(flag)
    assert str(err.value) == message


def test_percentage_uses_float32_and_truncates() -> None:
    (threshold,) = parse_eviction_hard("nodefs.available<10%")
    # float32(0.1) is 0.100000001490116..., upstream's int64(float64(capacity) * that)
    assert threshold_quantity(threshold, Quantity.from_int(1000)).value() == 100
    # so 10% of 100Gi is 160 bytes more than 10Gi, as upstream prints it
    assert str(threshold_quantity(threshold, Quantity.from_int(100 * Gi))) == "10737418400"
    capacity = 270553174016
    assert threshold_quantity(threshold, Quantity.from_int(capacity)).value() == int(
        capacity * 0.10000000149011612)


# --- observations and thresholds ------------------------------------------------------------


def test_thresholds_met_and_conditions() -> None:
    thresholds = parse_eviction_hard("nodefs.available<10%,nodefs.inodesFree<5%,"
                                     "imagefs.available<15%")
    low = Summary(node(available=9 * Gi, inodes_free=40_000))
    observations = observe(low)
    assert set(observations) == {"nodefs.available", "nodefs.inodesFree"}  # no imagefs stats
    met = thresholds_met(thresholds, observations)
    assert [t.signal for t in met] == ["nodefs.available", "nodefs.inodesFree"]
    assert node_conditions(met) == ["DiskPressure"]
    exactly = Summary(node(available=10737418400))  # float32 10% of 100Gi
    assert thresholds_met(thresholds, observe(exactly)) == []  # threshold > available: strict
    assert thresholds_met(thresholds, observe(Summary(node(available=10737418399))))


def test_imagefs_observed_from_runtime_image_fs() -> None:
    image_fs = FsStats(time=1.0, available_bytes=1 * Gi, capacity_bytes=10 * Gi,
                       inodes_free=10, inodes=1000)
    summary = Summary(NodeStats("n", 0.0, None, image_fs))
    met = thresholds_met(parse_eviction_hard("imagefs.available<15%,imagefs.inodesFree<5%"),
                         observe(summary))
    assert [t.signal for t in met] == ["imagefs.available", "imagefs.inodesFree"]


# --- ranking --------------------------------------------------------------------------------


def pod(uid: str, *, request: str | None = None, pod_request: str | None = None,
        priority: int | None = None, init: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app"}
    if request is not None:
        container["resources"] = {"requests": {"ephemeral-storage": request}}
    spec: dict[str, Any] = {"containers": [container],
                            "volumes": [{"name": "scratch", "emptyDir": {}},
                                        {"name": "ram", "emptyDir": {"medium": "Memory"}}]}
    if pod_request is not None:
        spec["resources"] = {"requests": {"ephemeral-storage": pod_request}}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": uid, "namespace": "ns", "uid": uid}, "spec": spec}


def pod_stats(uid: str, rootfs: int, logs: int = 0, scratch: int = 0, ram: int = 0) -> PodStats:
    def fs(n: int) -> FsStats:
        return FsStats(time=1.0, used_bytes=n, inodes_used=1)

    return PodStats(uid, "ns", uid, 0.0, (ContainerStats("app", 0.0, fs(rootfs), fs(logs)),),
                    (VolumeStats("scratch", fs(scratch)), VolumeStats("ram", fs(ram))))


def uids(pods: list[Any]) -> list[str]:
    return [p["metadata"]["uid"] for p in pods]


def test_rank_over_request_first_then_priority_then_usage_above_request() -> None:
    pods = [
        pod("within-low-prio", request="100Mi", priority=-10),
        pod("over-high-prio", request="10Mi", priority=1000),
        pod("over-low-prio-small", request="10Mi", priority=0),
        pod("over-low-prio-big", request="10Mi", priority=0),
        pod("no-stats", request="1Gi", priority=5000),
    ]
    summary = Summary(node(1 * Gi), (
        pod_stats("within-low-prio", 50 * Mi),
        pod_stats("over-high-prio", 500 * Mi),
        pod_stats("over-low-prio-small", 20 * Mi),
        pod_stats("over-low-prio-big", 15 * Mi, logs=5 * Mi, scratch=30 * Mi, ram=900 * Mi),
    ))
    assert uids(rank_for_disk_pressure(pods, summary, "nodefs.available")) == [
        "no-stats", "over-low-prio-big", "over-low-prio-small", "over-high-prio",
        "within-low-prio"]


def test_rank_uses_pod_level_request_when_set() -> None:
    # 60Mi used. Container request 100Mi but pod-level request 50Mi: over its request.
    pods = [pod("protected", pod_request="200Mi", priority=0),
            pod("pod-level-over", request="10Mi", pod_request="50Mi", priority=0)]
    summary = Summary(node(1 * Gi), (pod_stats("protected", 150 * Mi),
                                     pod_stats("pod-level-over", 60 * Mi)))
    assert uids(rank_for_disk_pressure(pods, summary, "nodefs.available")) == [
        "pod-level-over", "protected"]


def test_split_imagefs_ranks_nodefs_by_all_pod_usage_and_imagefs_by_requests() -> None:
    """ephemera's writable layers live on nodefs: an image store on its own filesystem is
    upstream's split layout (nodefs ranks by rootfs, logs and volumes; imagefs by images,
    which no pod's stats hold)."""
    pods = [pod("big-rootfs", request="100Mi"), pod("big-volume", request="1Mi")]
    stats = (pod_stats("big-rootfs", 900 * Mi), pod_stats("big-volume", 1 * Mi, scratch=50 * Mi))
    shared = Summary(node(1 * Gi), stats, dedicated_image_fs=False)
    split = Summary(node(1 * Gi), stats, dedicated_image_fs=True)
    for summary in (shared, split):
        assert uids(rank_for_disk_pressure(pods, summary, "nodefs.available")) == [
            "big-rootfs", "big-volume"]
    # imagefs: no pod uses any of it, so the smaller request goes first
    assert uids(rank_for_disk_pressure(pods, split, "imagefs.available")) == [
        "big-volume", "big-rootfs"]


def test_node_pressure_eviction_picks_one_pod_with_upstream_message() -> None:
    thresholds = parse_eviction_hard("nodefs.available<10%")
    summary = Summary(node(available=9 * Gi), (pod_stats("a", 50 * Mi, logs=10 * Mi),
                                                pod_stats("b", 1 * Mi)))
    observations = observe(summary)
    met = thresholds_met(thresholds, observations)
    eviction = node_pressure_eviction([pod("b", request="1Gi"), pod("a", request="10Mi")],
                                      summary, met, observations)
    assert eviction is not None
    assert eviction.pod["metadata"]["uid"] == "a"
    assert eviction.signal == "nodefs.available"
    assert eviction.message == (
        "The node was low on resource: ephemeral-storage. "
        "Threshold quantity: 10737418400, available: 9Gi. "
        "Container app was using 60Mi, request is 10Mi, has larger consumption of "
        "ephemeral-storage. ")
    assert eviction.annotations == {"offending_containers": "app",
                                    "offending_containers_usage": "60Mi",
                                    "starved_resource": "ephemeral-storage"}
    assert eviction.condition == {"type": "DisruptionTarget", "status": "True",
                                  "reason": "TerminationByKubelet", "message": eviction.message}
    assert eviction.grace_period_seconds == 1


def test_node_pressure_message_without_request_says_zero() -> None:
    thresholds = parse_eviction_hard("nodefs.available<1Gi")
    summary = Summary(node(available=512 * Mi), (pod_stats("a", 3 * Mi),))
    observations = observe(summary)
    eviction = node_pressure_eviction([pod("a")], summary,
                                      thresholds_met(thresholds, observations), observations)
    assert eviction is not None
    assert eviction.message == (
        "The node was low on resource: ephemeral-storage. "
        "Threshold quantity: 1Gi, available: 512Mi. "
        "Container app was using 3Mi, request is 0, has larger consumption of "
        "ephemeral-storage. ")


def test_critical_pods_are_passed_over() -> None:
    thresholds = parse_eviction_hard("nodefs.available<10%")
    summary = Summary(node(available=1 * Gi), (pod_stats("crit", 900 * Mi),
                                                pod_stats("b", 1 * Mi)))
    observations = observe(summary)
    met = thresholds_met(thresholds, observations)
    critical = pod("crit", priority=2_000_000_000)
    eviction = node_pressure_eviction([critical, pod("b")], summary, met, observations)
    assert eviction is not None and eviction.pod["metadata"]["uid"] == "b"
    assert node_pressure_eviction([critical], summary, met, observations) is None


def test_decide_local_storage_first_then_reclaim() -> None:
    thresholds = parse_eviction_hard("nodefs.available<10%")
    limited = pod("limited")
    limited["spec"]["volumes"][0]["emptyDir"] = {"sizeLimit": "1Mi"}
    summary = Summary(node(available=1 * Gi), (pod_stats("limited", 1 * Mi, scratch=2 * Mi),))
    decision = decide([limited], summary, thresholds)
    assert decision.conditions == ["DiskPressure"]
    assert [e.signal for e in decision.local_evictions] == ["emptydirfs.limit"]
    assert decision.to_reclaim is None

    calm = Summary(node(available=1 * Gi), (pod_stats("limited", 1 * Mi),))
    decision = decide([limited], calm, thresholds)
    assert decision.local_evictions == []
    assert decision.to_reclaim is not None and decision.to_reclaim.signal == "nodefs.available"

    fine = Summary(node(available=50 * Gi), (pod_stats("limited", 1 * Mi),))
    decision = decide([limited], fine, thresholds)
    assert (decision.conditions, decision.to_reclaim, decision.local_evictions) == ([], None, [])


def test_pressure_condition_kept_for_the_transition_period() -> None:
    tracker = PressureConditions(transition_period=300)
    assert tracker.update([], now=0) == []
    assert tracker.update(["DiskPressure"], now=10) == ["DiskPressure"]
    assert tracker.update([], now=309) == ["DiskPressure"]
    assert tracker.update([], now=310) == []

"""Memory and PID eviction: the `memory.available` and `allocatableMemory.available` signals
from the Summary's memory stats, the MemoryPressure condition, upstream's `rankMemoryPressure`,
the eviction message and annotations (container and pod-level), the pass decision (memory
before disk), `pid.available` and `rankPIDPressure`, allocatable with reservations and hard
thresholds, cgroup working sets, the Summary JSON and the flags' errors."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ephemera.api.quantity import Quantity
from ephemera.kubelet.eviction import (
    decide,
    node_conditions,
    node_pressure_eviction,
    observe,
    parse_eviction_hard,
    thresholds_met,
)
from ephemera.kubelet.eviction.ranking import rank_for_memory_pressure, rank_for_pid_pressure
from ephemera.kubelet.eviction.thresholds import (
    hard_eviction_reservation,
    without_container_fs,
)
from ephemera.kubelet.node import allocatable, parse_reserved, total_reserved
from ephemera.kubelet.runtime.base import MemoryUsage
from ephemera.kubelet.runtime.cgroups import memory_usage
from ephemera.kubelet.stats.provider import (
    ContainerStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodStats,
    RlimitStats,
    Summary,
)
from ephemera.kubelet.stats.summary import summary_json

Mi = 1024 * 1024
Gi = 1024 * Mi


def mem(working_set: int, available: int | None = None) -> MemoryStats:
    return MemoryStats(time=1.0, available_bytes=available, usage_bytes=working_set,
                       working_set_bytes=working_set, rss_bytes=working_set)


def node(available: int, working_set: int, pods: tuple[int, int] | None = None,
         fs_available: int = 50 * Gi) -> NodeStats:
    system = () if pods is None else (
        ContainerStats("pods", 0.0, memory=mem(pods[1], pods[0])),)
    return NodeStats("n", 0.0, FsStats(1.0, fs_available, 100 * Gi, inodes_free=10**6,
                                       inodes=10**6),
                     memory=mem(working_set, available), system_containers=system)


def pod(uid: str, *, request: str | None = None, priority: int | None = None,
        pod_request: str | None = None, critical: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app"}
    if request is not None:
        container["resources"] = {"requests": {"memory": request}}
    spec: dict[str, Any] = {"containers": [container]}
    if priority is not None:
        spec["priority"] = priority
    if pod_request is not None:
        spec["resources"] = {"requests": {"memory": pod_request}}
    if critical:
        spec["priority"] = 2_000_000_000
    return {"metadata": {"name": uid, "namespace": "ns", "uid": uid}, "spec": spec}


def pod_stats(uid: str, working_set: int | None) -> PodStats:
    container = ContainerStats("app", 0.0, memory=None if working_set is None
                               else mem(working_set))
    return PodStats(uid, "ns", uid, 0.0, (container,),
                    memory=None if working_set is None else mem(working_set))


def uids(pods: list[Any]) -> list[str]:
    return [p["metadata"]["uid"] for p in pods]


# --- signals --------------------------------------------------------------------------------


def test_memory_signals_are_observed_from_node_and_pods_memory() -> None:
    summary = Summary(node(available=80 * Mi, working_set=(4 * Gi) - 80 * Mi,
                           pods=(300 * Mi, 100 * Mi)))
    observations = observe(summary)
    memory = observations["memory.available"]
    assert (memory.available, memory.capacity) == (Quantity.parse("80Mi"),
                                                   Quantity.parse("4Gi"))
    allocatable_memory = observations["allocatableMemory.available"]
    assert (allocatable_memory.available, allocatable_memory.capacity) == (
        Quantity.parse("300Mi"), Quantity.parse("400Mi"))
    met = thresholds_met(parse_eviction_hard("memory.available<100Mi"), observations)
    assert [t.signal for t in met] == ["memory.available"]
    assert node_conditions(met) == ["MemoryPressure"]


def test_no_memory_stats_no_memory_signal() -> None:
    summary = Summary(NodeStats("n", 0.0, FsStats(1.0, 50 * Gi, 100 * Gi)))
    assert "memory.available" not in observe(summary)
    assert "allocatableMemory.available" not in observe(summary)


def test_allocatable_threshold_is_copied_from_memory_available() -> None:
    thresholds = parse_eviction_hard("memory.available<5%,nodefs.available<10%")
    assert [t.signal for t in thresholds] == ["memory.available", "nodefs.available",
                                              "allocatableMemory.available"]
    summary = Summary(node(available=3 * Gi, working_set=1 * Gi, pods=(10 * Mi, 390 * Mi)))
    met = thresholds_met(thresholds, observe(summary))
    # 5% of the pods' 400Mi is 20Mi > 10Mi available; 5% of 4Gi < 3Gi available
    assert [t.signal for t in met] == ["allocatableMemory.available"]
    assert node_conditions(met) == ["MemoryPressure"]
    assert parse_eviction_hard("nodefs.available<10%")[-1].signal == "nodefs.available"


# --- ranking --------------------------------------------------------------------------------


def test_rank_no_stats_then_over_request_then_priority_then_usage_above_request() -> None:
    pods = [pod("within", request="1Gi"), pod("over-high", request="10Mi", priority=100),
            pod("over-small", request="10Mi"), pod("over-big", request="100Mi"),
            pod("no-stats")]
    summary = Summary(node(1 * Gi, 1 * Gi), (
        pod_stats("within", 500 * Mi), pod_stats("over-high", 900 * Mi),
        pod_stats("over-small", 50 * Mi), pod_stats("over-big", 300 * Mi)))
    assert uids(rank_for_memory_pressure(pods, summary)) == [
        "no-stats", "over-big", "over-small", "over-high", "within"]


def test_rank_pod_level_request_replaces_the_containers() -> None:
    pods = [pod("pod-level", request="10Mi", pod_request="1Gi"), pod("plain", request="10Mi")]
    summary = Summary(node(1 * Gi, 1 * Gi), (pod_stats("pod-level", 200 * Mi),
                                             pod_stats("plain", 100 * Mi)))
    assert uids(rank_for_memory_pressure(pods, summary)) == ["plain", "pod-level"]
    off = {"PodLevelResources": False}
    assert uids(rank_for_memory_pressure(pods, summary, off)) == ["pod-level", "plain"]


# --- the one-pod pass -----------------------------------------------------------------------


def test_memory_eviction_message_annotations_and_condition() -> None:
    thresholds = parse_eviction_hard("memory.available<100Mi")
    summary = Summary(node(available=60 * Mi, working_set=2 * Gi),
                      (pod_stats("hog", 300 * Mi), pod_stats("quiet", 1 * Mi)))
    observations = observe(summary)
    met = thresholds_met(thresholds, observations)
    eviction = node_pressure_eviction([pod("quiet"), pod("hog", request="64Mi")], summary,
                                      met, observations)
    assert eviction is not None
    message = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: "
               "60Mi. Container app was using 300Mi, request is 64Mi, has larger consumption "
               "of memory. ")
    assert (eviction.pod["metadata"]["name"], eviction.signal, eviction.message) == (
        "hog", "memory.available", message)
    assert eviction.annotations == {"offending_containers": "app",
                                    "offending_containers_usage": "300Mi",
                                    "starved_resource": "memory"}
    assert eviction.condition == {"type": "DisruptionTarget", "status": "True",
                                  "reason": "TerminationByKubelet", "message": message}
    assert eviction.grace_period_seconds == 1


def test_memory_message_of_a_pod_within_its_request_and_a_pod_level_request() -> None:
    thresholds = parse_eviction_hard("memory.available<100Mi")
    summary = Summary(node(available=60 * Mi, working_set=2 * Gi),
                      (pod_stats("p", 300 * Mi),))
    observations = observe(summary)
    met = thresholds_met(thresholds, observations)
    within = node_pressure_eviction([pod("p", request="1Gi")], summary, met, observations)
    assert within is not None
    assert within.message == ("The node was low on resource: memory. Threshold quantity: "
                              "100Mi, available: 60Mi. ")
    assert within.annotations["offending_containers"] == ""
    pod_level = node_pressure_eviction([pod("p", pod_request="256Mi")], summary, met,
                                       observations)
    assert pod_level is not None
    assert pod_level.message == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 60Mi. "
        "Pod p was using 300Mi, request is 256Mi, has larger consumption of memory. "
        "Container app was using 300Mi, request is 0, has larger consumption of memory. ")
    assert (pod_level.annotations["offending_pod"],
            pod_level.annotations["offending_pod_usage"]) == ("p", "300Mi")


def test_critical_pods_are_skipped() -> None:
    thresholds = parse_eviction_hard("memory.available<100Mi")
    summary = Summary(node(available=60 * Mi, working_set=2 * Gi),
                      (pod_stats("critical", 900 * Mi), pod_stats("small", 10 * Mi)))
    observations = observe(summary)
    met = thresholds_met(thresholds, observations)
    eviction = node_pressure_eviction([pod("critical", critical=True), pod("small")], summary,
                                      met, observations)
    assert eviction is not None and eviction.pod["metadata"]["name"] == "small"


def test_the_pass_reclaims_memory_before_disk() -> None:
    thresholds = parse_eviction_hard("memory.available<100Mi,nodefs.available<10%")
    summary = Summary(node(available=60 * Mi, working_set=2 * Gi, fs_available=1 * Gi),
                      (pod_stats("p", 300 * Mi),))
    decision = decide([pod("p")], summary, thresholds)
    assert decision.conditions == ["MemoryPressure", "DiskPressure"]
    assert decision.to_reclaim is not None
    assert decision.to_reclaim.signal == "memory.available"


# --- allocatable ----------------------------------------------------------------------------


def test_allocatable_subtracts_reservations_and_the_hard_thresholds() -> None:
    capacity = {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "100Gi", "pods": "110"}
    reserved = parse_reserved("cpu=500m,memory=1Gi")
    kube = parse_reserved("memory=512Mi,ephemeral-storage=1Gi")
    thresholds = parse_eviction_hard("memory.available<200Mi,nodefs.available<10Gi")

    def reservation(capacity: Mapping[str, Quantity]) -> dict[str, Quantity]:
        return total_reserved(reserved, kube, hard_eviction_reservation(thresholds, capacity))

    assert allocatable(capacity, reservation) == {
        "cpu": "1500m", "memory": "2360Mi", "ephemeral-storage": "89Gi", "pods": "110"}
    assert allocatable({"memory": "1Gi"},
                       lambda _: parse_reserved("memory=2Gi"))["memory"] == "0"


@pytest.mark.parametrize(("flag", "message"), [
    ("pid=100", 'cannot reserve "pid" resource: ephemera does not limit pids'),
    ("gpu=1", 'cannot reserve "gpu" resource'),
    ("memory=-1Gi", 'resource quantity for "memory" cannot be negative: -1Gi'),
    ("memory", "malformed pair, expect string=string: memory"),
])
def test_parse_reserved_errors(flag: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_reserved(flag)
    assert str(err.value) == message


def test_parse_reserved_bad_quantity() -> None:
    with pytest.raises(ValueError, match=r'^failed to parse quantity "lots" for "memory" '):
        parse_reserved("memory=lots")


# --- cgroups and the Summary ----------------------------------------------------------------


def test_working_set_is_usage_minus_inactive_file(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "memory.usage_in_bytes").write_text(f"{500 * Mi}\n")
    (v1 / "memory.stat").write_text(f"cache 1\ninactive_file 7\ntotal_rss {300 * Mi}\n"
                                    f"total_inactive_file {150 * Mi}\n")
    assert memory_usage(v1) == MemoryUsage(500 * Mi, 350 * Mi, 300 * Mi)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.current").write_text("1000\n")
    (v2 / "memory.stat").write_text("anon 600\nfile 400\ninactive_file 1200\n")
    assert memory_usage(v2) == MemoryUsage(1000, 0, 600)  # never below zero
    assert memory_usage(tmp_path / "gone") is None


def test_summary_json_memory_fields() -> None:
    summary = Summary(node(available=60 * Mi, working_set=2 * Gi, pods=(1 * Mi, 2 * Mi)),
                      (pod_stats("p", 300 * Mi),))
    doc = summary_json(summary)
    assert doc["node"]["memory"] == {"time": "1970-01-01T00:00:01Z", "availableBytes": 60 * Mi,
                                     "usageBytes": 2 * Gi, "workingSetBytes": 2 * Gi,
                                     "rssBytes": 2 * Gi}
    assert [(c["name"], c["memory"]["availableBytes"])
            for c in doc["node"]["systemContainers"]] == [("pods", 1 * Mi)]
    assert doc["pods"][0]["memory"]["workingSetBytes"] == 300 * Mi
    assert doc["pods"][0]["containers"][0]["memory"]["workingSetBytes"] == 300 * Mi
    assert "availableBytes" not in doc["pods"][0]["memory"]


# --- pid.available ---------------------------------------------------------------------------


def test_pid_available_is_observed_ranked_and_evicts_with_upstreams_message() -> None:
    base = node(available=3 * Gi, working_set=1 * Gi)
    rlimit = RlimitStats(1.0, maxpid=4_194_304, curproc=4_000_000)
    summary = Summary(dataclasses.replace(base, rlimit=rlimit), (
        dataclasses.replace(pod_stats("many", 1 * Mi), process_count=50),
        dataclasses.replace(pod_stats("few", 1 * Mi), process_count=2),
        dataclasses.replace(pod_stats("low-priority", 1 * Mi), process_count=1)))
    observations = observe(summary)
    pid = observations["pid.available"]
    assert (pid.available, pid.capacity) == (Quantity.parse("194304"),
                                             Quantity.parse("4194304"))
    met = thresholds_met(parse_eviction_hard("pid.available<10%"), observations)
    assert node_conditions(met) == ["PIDPressure"]
    pods = [pod("few"), pod("many"), pod("low-priority", priority=-5), pod("no-stats")]
    assert uids(rank_for_pid_pressure(pods, summary)) == [
        "low-priority", "no-stats", "many", "few"]
    eviction = node_pressure_eviction(pods[:2], summary, met, observations)
    assert eviction is not None and eviction.pod["metadata"]["name"] == "many"
    assert eviction.signal == "pid.available"
    assert eviction.message == ("The node was low on resource: pids. Threshold quantity: "
                                "419430, available: 194304. ")
    assert eviction.annotations == {"offending_containers": "",
                                    "offending_containers_usage": "",
                                    "starved_resource": "pids"}
    doc = summary_json(summary)
    assert doc["node"]["rlimit"] == {"time": "1970-01-01T00:00:01Z", "maxpid": 4_194_304,
                                     "curproc": 4_000_000}
    assert doc["pods"][0]["process_stats"] == {"process_count": 50}


# --- signals ephemera does not observe ------------------------------------------------------


def test_containerfs_dropped_with_upstreams_warning() -> None:
    kept, warnings = without_container_fs(parse_eviction_hard(
        "containerfs.available<10%,nodefs.available<10%,containerfs.inodesFree<5%"))
    assert [t.signal for t in kept] == ["nodefs.available"]
    assert warnings == ["found containerfs.available for hard eviction. ignoring",
                        "found containerfs.inodesFree for hard eviction. ignoring"]


@pytest.mark.parametrize(("argv", "error"), [
    (["up", "--system-reserved", "pid=10"],
     'ephemera up: error: --system-reserved: cannot reserve "pid" resource: ephemera does not '
     "limit pids"),
    (["up", "--eviction-hard", "memory.available<100Mi,disk.available<5%"],
     "ephemera up: error: --eviction-hard: unsupported eviction signal disk.available"),
    (["kubelet", "--kubeconfig", "/nonexistent", "--kube-reserved", "memory=-1Gi"],
     'ephemera kubelet: error: --kube-reserved: resource quantity for "memory" cannot be '
     "negative: -1Gi"),
])
def test_bad_flags_stop_before_anything_starts(tmp_path: Path, argv: list[str],
                                               error: str) -> None:
    """A usage error (exit 2) before the data dir or root dir is made."""
    where = ["--data-dir", str(tmp_path / "data")] if argv[0] == "up" else [
        "--root-dir", str(tmp_path / "data")]
    done = subprocess.run([sys.executable, "-m", "ephemera.cli", *argv, *where],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == error
    assert not (tmp_path / "data").exists()

"""Local-storage eviction decisions: the upstream order per pod (emptyDir sizeLimit, pod
limit, container limits), strict greater-than, pod-level (KEP-6386) vs container-aggregate
messages, exact strings."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.kubelet.eviction import local_storage_eviction
from ephemera.kubelet.stats.provider import (
    ContainerStats,
    FsStats,
    NodeStats,
    PodStats,
    Summary,
    VolumeStats,
)

Mi = 1024 * 1024


def fs(used: int) -> FsStats:
    return FsStats(time=0.0, used_bytes=used, inodes_used=1)


def make_pod(
    *,
    uid: str = "u1",
    containers: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    pod_resources: dict[str, Any] | None = None,
    priority: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers or [{"name": "app"}]}
    if volumes:
        spec["volumes"] = volumes
    if pod_resources is not None:
        spec["resources"] = pod_resources
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": "p", "namespace": "ns", "uid": uid}, "spec": spec}


def ctr(name: str, limit: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name}
    if limit is not None:
        c["resources"] = {"limits": {"ephemeral-storage": limit}}
    return c


def stats(
    *,
    uid: str = "u1",
    containers: dict[str, tuple[int, int]] | None = None,  # name -> (rootfs, logs)
    volumes: dict[str, int] | None = None,
    total: int | None = None,
    dedicated_image_fs: bool = False,
) -> Summary:
    cs = tuple(ContainerStats(n, 0.0, fs(r), fs(lg)) for n, (r, lg) in (containers or {}).items())
    vs = tuple(VolumeStats(n, fs(u)) for n, u in (volumes or {}).items())
    if total is None:
        total = sum(r + lg for r, lg in (containers or {}).values()) + sum((volumes or {}).values())
    pod = PodStats(uid, "ns", "p", 0.0, cs, vs, fs(total))
    return Summary(NodeStats("n", 0.0), (pod,), dedicated_image_fs)


CASES = [
    pytest.param(
        make_pod(volumes=[{"name": "cache", "emptyDir": {"sizeLimit": "50Mi"}}],
                 pod_resources={"limits": {"ephemeral-storage": "200Mi"}}),
        stats(volumes={"cache": 60 * Mi}, containers={"app": (1 * Mi, 0)}),
        "emptydirfs.limit", 'Usage of EmptyDir volume "cache" exceeds the limit "50Mi". ',
        id="sizeLimit-before-pod-limit"),
    pytest.param(
        make_pod(volumes=[{"name": "cache", "emptyDir": {"medium": "Memory",
                                                          "sizeLimit": "1Mi"}}]),
        stats(volumes={"cache": 2 * Mi}),
        "emptydirfs.limit", 'Usage of EmptyDir volume "cache" exceeds the limit "1Mi". ',
        id="sizeLimit-any-medium"),
    pytest.param(
        make_pod(volumes=[{"name": "cache", "emptyDir": {"sizeLimit": "50Mi"}}]),
        stats(volumes={"cache": 50 * Mi}),
        None, None, id="sizeLimit-equal-is-fine"),
    pytest.param(
        make_pod(volumes=[{"name": "cache", "emptyDir": {"sizeLimit": "0"}}]),
        stats(volumes={"cache": 50 * Mi}),
        None, None, id="sizeLimit-zero-ignored"),
    pytest.param(
        make_pod(containers=[ctr("a"), ctr("b")],
                 volumes=[{"name": "shared", "emptyDir": {}}],
                 pod_resources={"limits": {"ephemeral-storage": "100Mi"}}),
        stats(containers={"a": (40 * Mi, 20 * Mi), "b": (1 * Mi, 0)},
              volumes={"shared": 50 * Mi}),
        "ephemeralpodfs.limit",
        "Evicted: Pod ephemeral local storage usage (111Mi) exceeds pod-level limit (100Mi)",
        id="pod-level-limit-kep6386-message"),
    pytest.param(
        make_pod(pod_resources={"limits": {"ephemeral-storage": "100Mi"}}),
        stats(containers={"app": (100 * Mi + 1, 0)}),
        "ephemeralpodfs.limit",
        "Evicted: Pod ephemeral local storage usage (104857601) exceeds pod-level limit (100Mi)",
        id="pod-level-limit-odd-bytes"),
    pytest.param(
        make_pod(pod_resources={"limits": {"ephemeral-storage": "100Mi"}}),
        stats(containers={"app": (100 * Mi, 0)}),
        None, None, id="pod-level-limit-equal-is-fine"),
    pytest.param(
        make_pod(containers=[ctr("app", "100Mi"), ctr("sidecar", "20Mi")]),
        stats(containers={"app": (90 * Mi, 0), "sidecar": (10 * Mi, 0)}, total=121 * Mi),
        "ephemeralpodfs.limit",
        "Pod ephemeral local storage usage exceeds the total limit of containers 120Mi. ",
        id="aggregate-container-limit-upstream-message"),
    pytest.param(
        make_pod(containers=[ctr("app"), ctr("sidecar", "20Mi")],
                 volumes=[{"name": "shared", "emptyDir": {}}]),
        stats(containers={"app": (5 * Mi, 0), "sidecar": (1 * Mi, 0)},
              volumes={"shared": 30 * Mi}),
        "ephemeralpodfs.limit",
        "Pod ephemeral local storage usage exceeds the total limit of containers 20Mi. ",
        id="sidecar-pitfall-one-limit-bounds-the-pod"),
    pytest.param(
        make_pod(containers=[ctr("app", "10Mi")],
                 pod_resources={"limits": {"ephemeral-storage": "100Mi"}}),
        stats(containers={"app": (8 * Mi, 3 * Mi)}),
        "ephemeralcontainerfs.limit",
        'Container app exceeded its local ephemeral storage limit "10Mi". ',
        id="container-limit-rootfs-plus-logs"),
    pytest.param(
        make_pod(containers=[ctr("app", "10Mi")]),
        stats(containers={"app": (8 * Mi, 3 * Mi)}, total=11 * Mi, dedicated_image_fs=True),
        "ephemeralpodfs.limit",
        "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ",
        id="pod-limit-before-container-limit"),
    pytest.param(
        make_pod(containers=[ctr("app", "10Mi"), ctr("b")],
                 pod_resources={"limits": {"ephemeral-storage": "1Gi"}}),
        stats(containers={"app": (8 * Mi, 3 * Mi)}, dedicated_image_fs=True),
        None, None, id="dedicated-imagefs-counts-logs-only"),
    pytest.param(
        make_pod(containers=[ctr("app", "10Mi")],
                 volumes=[{"name": "v", "emptyDir": {}}],
                 pod_resources={"limits": {"ephemeral-storage": "1Gi"}}),
        stats(containers={"app": (1 * Mi, 0)}, volumes={"v": 500 * Mi}),
        None, None, id="emptyDir-never-counts-toward-container-limit"),
    pytest.param(
        make_pod(containers=[ctr("app")]),
        stats(containers={"app": (10_000 * Mi, 0)}),
        None, None, id="no-limits-no-eviction"),
]


@pytest.mark.parametrize(("pod", "summary", "signal", "message"), CASES)
def test_local_storage_eviction(pod: dict[str, Any], summary: Summary, signal: str | None,
                                message: str | None) -> None:
    evictions = local_storage_eviction([pod], summary)
    if signal is None:
        assert evictions == []
        return
    (eviction,) = evictions
    assert eviction.pod is pod
    assert (eviction.signal, eviction.message) == (signal, message)
    assert eviction.reason == "Evicted"
    assert eviction.grace_period_seconds == 1
    assert eviction.condition is None


def test_pod_level_limit_with_gate_off_falls_back_to_containers() -> None:
    pod = make_pod(containers=[ctr("app", "50Mi")],
                   pod_resources={"limits": {"ephemeral-storage": "100Mi"}})
    summary = stats(containers={"app": (30 * Mi, 0)}, volumes={}, total=60 * Mi)
    assert local_storage_eviction([pod], summary) == []  # 60Mi within the pod-level 100Mi
    (eviction,) = local_storage_eviction(
        [pod], summary, gates={"PodLevelResourcesEphemeralStorage": False})
    assert eviction.message == (
        "Pod ephemeral local storage usage exceeds the total limit of containers 50Mi. ")


def test_pod_level_cpu_only_keeps_container_aggregate_message() -> None:
    pod = make_pod(containers=[ctr("app", "50Mi")], pod_resources={"limits": {"cpu": "1"}})
    (eviction,) = local_storage_eviction([pod], stats(containers={"app": (30 * Mi, 0)},
                                                      total=51 * Mi))
    assert eviction.message == (
        "Pod ephemeral local storage usage exceeds the total limit of containers 50Mi. ")


def test_pods_without_stats_and_critical_pods_are_skipped() -> None:
    over = stats(containers={"app": (2 * Mi, 0)})
    no_stats = make_pod(uid="other", containers=[ctr("app", "1Mi")])
    critical = make_pod(containers=[ctr("app", "1Mi")], priority=2_000_000_000)
    static = make_pod(containers=[ctr("app", "1Mi")])
    static["metadata"]["annotations"] = {"kubernetes.io/config.source": "file"}
    assert local_storage_eviction([no_stats, critical, static], over) == []


def test_every_offending_pod_is_reported_once() -> None:
    p1 = make_pod(uid="a", containers=[ctr("app", "1Mi")],
                  volumes=[{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}])
    p2 = make_pod(uid="b", containers=[ctr("app", "1Mi")])
    s1, s2 = (stats(uid="a", containers={"app": (2 * Mi, 0)}, volumes={"v": 2 * Mi}),
              stats(uid="b", containers={"app": (2 * Mi, 0)}))
    summary = Summary(NodeStats("n", 0.0), s1.pods + s2.pods)
    evictions = local_storage_eviction([p1, p2], summary)
    assert [(e.pod["metadata"]["uid"], e.signal) for e in evictions] == [
        ("a", "emptydirfs.limit"), ("b", "ephemeralpodfs.limit")]

"""The kubelet's Prometheus metrics, all of them (served as `GET /metrics` by
`ephemera.kubelet.server`). Each `KubeletMetrics` has a registry of its own, so several
kubelets in one process (tests) never mix.

Upstream's names: `kubelet_node_name`, `kubelet_running_pods`, `kubelet_running_containers`,
`kubelet_started_containers_total`, `kubelet_started_containers_errors_total`,
`kubelet_started_pods_total`, `kubelet_pod_start_duration_seconds`,
`kubelet_pod_worker_duration_seconds`, `kubelet_pleg_relist_duration_seconds`,
`kubelet_evictions{eviction_signal}`, `kubelet_admission_rejections_total{reason}`,
`prober_probe_total{probe_type,result,container,pod,namespace,pod_uid}` (result `successful`,
`failed` or `unknown`; a container's series go when its probe worker ends).

KEP-6395 dynamic volumes (its beta criteria ask for mount/unmount latency and error rates;
the KEP leaves the names open, these are ours). A volume is *dynamic* when it is added to, or
removed from, a pod the kubelet already runs (`VolumeOperation.dynamic`); the volumes a pod
starts or stops with are not counted. `volume_plugin` is upstream's plugin name
(`kubernetes.io/empty-dir`, `kubernetes.io/configmap`, ...).

- `kubelet_dynamic_volume_mount_duration_seconds{volume_plugin}` (histogram): the SetUp
  that first mounts a dynamic volume on the host (resyncs of a mounted volume excluded).
- `kubelet_dynamic_volume_unmount_duration_seconds{volume_plugin}` (histogram): the TearDown
  of a volume removed from a running pod.
- `kubelet_dynamic_volume_errors_total{operation=mount|unmount, volume_plugin}`: failed
  SetUps and TearDowns of dynamic volumes (every failed attempt, retries included).
- `kubelet_dynamic_allocations_total{result=admitted|deferred|error}`: outcomes of the
  allocation of pod changes (`/dynamic`): `admitted` per change allocated; `deferred` per
  change left pending for a new reason and `error` per change whose checkpoint write failed
  for a new reason (each one `FailedAllocation` event: a retry failing with the same
  message counts nothing).
- `kubelet_dynamic_pending_allocations` (gauge): pods with a change the node has not
  allocated yet.

The histograms' buckets: 1 ms doubling to about 16 s (`ExponentialBuckets(0.001, 2, 15)`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from ephemera.kubelet.volumes.manager import MOUNT

__all__ = [
    "DYNAMIC_VOLUME_BUCKETS",
    "EvictionsCounter",
    "KubeletMetrics",
]

DYNAMIC_VOLUME_BUCKETS = tuple(0.001 * 2 ** i for i in range(15))


class EvictionsCounter:
    """`kubelet_evictions{eviction_signal=...}`: evictions per signal, under upstream's exact
    name (prometheus-client's `Counter` would add `_total`; exposed untyped)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def inc(self, signal: str) -> None:
        self.counts[signal] = self.counts.get(signal, 0) + 1

    def collect(self) -> Iterator[Metric]:
        metric = Metric("kubelet_evictions",
                        "Cumulative number of pod evictions by eviction signal", "unknown")
        for signal, count in sorted(self.counts.items()):
            metric.add_sample("kubelet_evictions", {"eviction_signal": signal}, float(count))
        yield metric


class KubeletMetrics:
    """The kubelet's Prometheus metrics (see the module docstring)."""

    def __init__(self, node_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.node_name = Gauge("kubelet_node_name", "The node's name. The count is always 1.",
                               ["node"], registry=self.registry)
        self.node_name.labels(node=node_name).set(1)
        self.running_pods = Gauge("kubelet_running_pods",
                                  "Number of pods that have a running pod sandbox",
                                  registry=self.registry)
        self.running_containers = Gauge("kubelet_running_containers",
                                        "Number of containers currently running",
                                        ["container_state"], registry=self.registry)
        self.started_containers = Counter("kubelet_started_containers",
                                          "Cumulative number of containers started",
                                          ["container_type"], registry=self.registry)
        self.started_containers_errors = Counter(
            "kubelet_started_containers_errors", "Cumulative number of errors when starting "
            "containers", ["code", "container_type"], registry=self.registry)
        self.started_pods = Counter("kubelet_started_pods",
                                    "Cumulative number of pods started",
                                    registry=self.registry)
        self.pod_start_duration = Histogram(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod for the first time to the pod "
            "starting to run", registry=self.registry,
            buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 45, 60, 120))
        self.pod_worker_duration = Histogram(
            "kubelet_pod_worker_duration_seconds",
            "Duration in seconds to sync a single pod", ["operation"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.pleg_relist_duration = Histogram(
            "kubelet_pleg_relist_duration_seconds",
            "Duration in seconds for relisting pods in PLEG", registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
        self.node_status_updates = Counter("ephemera_kubelet_node_status_updates",
                                           "Node status writes", registry=self.registry)
        self.evictions = EvictionsCounter()
        self.registry.register(self.evictions)
        self.admission_rejections = Counter(
            "kubelet_admission_rejections", "Cumulative number pod admission rejections by "
            "the Kubelet.", ["reason"], registry=self.registry)
        self.prober_probe_total = Counter(
            "prober_probe", "Cumulative number of a liveness, readiness or startup probe for "
            "a container by result.",
            ["probe_type", "result", "container", "pod", "namespace", "pod_uid"],
            registry=self.registry)
        # KEP-6395 dynamic volumes (see the module docstring).
        self.dynamic_volume_mount_duration = Histogram(
            "kubelet_dynamic_volume_mount_duration_seconds",
            "Duration in seconds of the host setup (SetUp) of a volume added to a running "
            "pod", ["volume_plugin"], registry=self.registry, buckets=DYNAMIC_VOLUME_BUCKETS)
        self.dynamic_volume_unmount_duration = Histogram(
            "kubelet_dynamic_volume_unmount_duration_seconds",
            "Duration in seconds of the host teardown (TearDown) of a volume removed from a "
            "running pod", ["volume_plugin"], registry=self.registry,
            buckets=DYNAMIC_VOLUME_BUCKETS)
        self.dynamic_volume_errors = Counter(
            "kubelet_dynamic_volume_errors", "Cumulative number of failed host setups "
            "(operation=mount) and teardowns (operation=unmount) of dynamic volumes",
            ["operation", "volume_plugin"], registry=self.registry)
        self.dynamic_allocations = Counter(
            "kubelet_dynamic_allocations", "Cumulative number of pod change allocation "
            "outcomes (admitted, deferred, error)", ["result"], registry=self.registry)
        self.dynamic_pending_allocations = Gauge(
            "kubelet_dynamic_pending_allocations",
            "Number of pods with a change the node has not allocated yet",
            registry=self.registry)

    def observe_dynamic_volume(self, operation: str, volume_plugin: str, seconds: float,
                               failed: bool) -> None:
        """One finished SetUp (`mount`) or TearDown (`unmount`) of a dynamic volume."""
        if failed:
            self.dynamic_volume_errors.labels(operation=operation,
                                              volume_plugin=volume_plugin).inc()
            return
        histogram = self.dynamic_volume_mount_duration if operation == MOUNT else \
            self.dynamic_volume_unmount_duration
        histogram.labels(volume_plugin=volume_plugin).observe(seconds)

    def track_pending_allocations(self, count: Callable[[], int]) -> None:
        """`kubelet_dynamic_pending_allocations` reads `count()` at each scrape."""
        self.dynamic_pending_allocations.set_function(lambda: float(count()))

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))

"""What a pod's sync needs from the rest of the kubelet: its settings (`WorkerSettings`:
back-off policies, mount timeout, resync and relist periods...) and its collaborators
(`WorkerDeps`: the API client, the runtime seam, the image store, the volume manager, the
status manager, events, callbacks for metrics), shared by the pod workers (`podworkers`) and
the per-pod container actions (`podactions`). The agent builds them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ephemera.client import ApiClient
from ephemera.kubelet.backoff import BackOffPolicy
from ephemera.kubelet.dnsconfig import DnsConfigurer
from ephemera.kubelet.events import KubeletEvents
from ephemera.kubelet.runtime.base import RuntimeService
from ephemera.kubelet.status import ProbeStates, StatusManager

Offload = Callable[..., Awaitable[Any]]

__all__ = [
    "MINIMUM_GRACE_PERIOD",
    "QUIET_WAIT",
    "ImageLookup",
    "PodStorage",
    "ProbesLike",
    "VolumesLike",
    "WorkerDeps",
    "WorkerSettings",
    "run_inline",
]

MINIMUM_GRACE_PERIOD = 2.0
# How long background clean-up (an old container instance's removal) waits for the kubelet
# to be quiet (`WorkerDeps.quiet`) before it runs anyway.
QUIET_WAIT = 1.0


async def run_inline(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`WorkerDeps.offload` for a kubelet whose blocking work is in memory or a mkdir (the
    hollow nodes): run it on the event loop, sparing the thread hop."""
    return fn(*args, **kwargs)


class ImageLookup(Protocol):
    def resolve(self, ref: str) -> Any: ...


class VolumesLike(Protocol):
    async def wait_for_pod_volumes(self, pod: Mapping[str, Any], timeout: float) -> None: ...

    def mounted_volumes(self, pod_uid: str) -> dict[str, Path]: ...

    def volume_errors(self, pod_uid: str) -> dict[str, str]: ...

    async def teardown_pod(self, pod_uid: str) -> None: ...


class PodStorage(Protocol):
    """The pod's storage set-up (`ephemera.kubelet.stats.accounting`: e.g. a loop-mounted
    image on the pod directory): prepared before anything is written for the pod, released
    once its containers and volumes are gone."""

    async def prepare_pod(self, pod: Mapping[str, Any], log_dir: Path) -> None: ...

    async def release_pod(self, uid: str) -> None: ...


class ProbesLike(Protocol):
    """The prober manager (`ephemera.kubelet.prober.manager.ProbeManager`)."""

    def update_pod(self, pod: Mapping[str, Any]) -> None: ...

    def remove_pod(self, uid: str) -> None: ...

    def probe_states(self, uid: str) -> ProbeStates: ...

    def failed_probe(self, uid: str, name: str,
                     container_id: str) -> tuple[str, float | None] | None: ...

    def started(self, uid: str, name: str, container_id: str) -> bool: ...


@dataclass(frozen=True)
class WorkerSettings:
    backoff: BackOffPolicy = field(default_factory=BackOffPolicy)
    image_backoff: BackOffPolicy = field(default_factory=BackOffPolicy)
    mount_timeout: float = 123.0  # upstream's 2m3s
    mount_wait_slice: float = 0.5
    resync_period: float = 10.0
    relist_period: float = 1.0
    retry_delay: float = 1.0
    minimum_grace_period: float = MINIMUM_GRACE_PERIOD
    # Instances kept per container (the latest and the previous one).
    keep_instances: int = 2
    # DynamicVolumeHotPlug: `NotRequired` containers get mount changes while they run (off:
    # they are restarted as for `RestartContainer`).
    hot_plug: bool = True
    # Each pod's directory and container log directories on disk, made before its first
    # sync and removed at its end (off for hollow nodes, whose volumes and logs are never on
    # disk: those mkdirs cost a hollow pod 13-32% of its CPU, docs/benchmarks.md).
    pod_dirs: bool = True


@dataclass
class WorkerDeps:
    api: ApiClient
    runtime: RuntimeService
    images: ImageLookup
    volumes: VolumesLike
    status: StatusManager
    events: KubeletEvents
    root_dir: Path
    node_name: str
    host_ip: str
    get_configmap: Callable[[str, str], Awaitable[dict[str, Any] | None]]
    get_secret: Callable[[str, str], Awaitable[dict[str, Any] | None]]
    node_allocatable: Mapping[str, Any] = field(default_factory=dict)
    # The service environment variables of a pod (`serviceenv`); raises
    # ContainerConfigError while the Services have not been listed yet.
    service_env: Callable[[Mapping[str, Any]], Mapping[str, str]] = lambda pod: {}
    settings: WorkerSettings = field(default_factory=WorkerSettings)
    # Called when the set of pods whose volumes are needed changes.
    on_volumes_changed: Callable[[], None] = lambda: None
    # Called with (container type, error code or "") on every container start attempt.
    on_container_started: Callable[[str, str], None] = lambda kind, code: None
    # Called with seconds from first seeing the pod to its containers running.
    on_pod_started: Callable[[float], None] = lambda seconds: None
    on_sync_done: Callable[[str, float], None] = lambda operation, seconds: None
    # Prepares and releases the pod's storage (None: plain directories).
    pod_storage: PodStorage | None = None
    # Runs the containers' probes (None: none run; running containers are ready at once).
    probes: ProbesLike | None = None
    # Forms each pod's resolv.conf by its dnsPolicy (None: the host's file as it is).
    dns: DnsConfigurer | None = None
    # Returns once the kubelet is quiet (no pod worker in a sync, no pod status waiting to
    # be written): what background clean-up waits for, at most `QUIET_WAIT` seconds.
    quiet: Callable[[], Awaitable[None]] | None = None
    # Runs the sync's blocking file work (pod and log directories, subPaths, the image
    # store): `asyncio.to_thread` (the fsync or a slow disk never blocks the event loop), or
    # `run_inline`.
    offload: Offload = asyncio.to_thread

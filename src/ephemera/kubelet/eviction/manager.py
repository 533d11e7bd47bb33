"""The eviction manager's loop (upstream `pkg/kubelet/eviction/eviction_manager.go`): the
state a pass keeps and the actions it takes, on top of the pure decisions of this package.

Every `eviction_interval` (`--eviction-interval`, default 10 s) `EvictionManager.synchronize`
measures the admitted pods' writable layers, logs and volumes (the `StatsProvider` over the
accounting backend `--storage-accounting` chooses, `ephemera.kubelet.stats`), decides (`decide`:
local-storage limits first, then the `--eviction-hard` thresholds, memory ones before disk ones;
memory read from the cgroups through `RuntimeService.memory_stats`), keeps the MemoryPressure
and DiskPressure conditions for the pressure transition period (`PressureConditions`; the Node
status and admission read `node_conditions`), and evicts through the kubelet's pod killer
(containers killed with the eviction's grace period, `phase: Failed`, `reason: Evicted`, the
message), with a Warning `Evicted` event and `kubelet_evictions{eviction_signal}`. Under node
pressure it evicts one pod per pass, after node-level reclaim (`ephemera.kubelet.gc`: dead
containers, unused images; a Warning `EvictionThresholdMet` node event) left a threshold met.
`summary()` is the last measurements (the kubelet's `/stats/summary`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ephemera.api.featuregates import FeatureGates
from ephemera.kubelet import events
from ephemera.kubelet.events import KubeletEvents
from ephemera.kubelet.eviction.api import Eviction
from ephemera.kubelet.eviction.decision import (
    PressureConditions,
    by_eviction_priority,
    decide,
)
from ephemera.kubelet.eviction.ranking import node_pressure_eviction
from ephemera.kubelet.eviction.reclaim import (
    ABLE_TO_RECLAIM_LOG,
    ATTEMPTING_TO_RECLAIM_LOG,
    DEAD_CONTAINERS,
    EVICTION_THRESHOLD_MET,
    MUST_EVICT_LOG,
    RECLAIM_EVENT_MESSAGE,
    UNUSED_IMAGES,
    node_reclaim_funcs,
)
from ephemera.kubelet.eviction.thresholds import (
    Threshold,
    observe,
    parse_eviction_hard,
    thresholds_met,
    without_container_fs,
)
from ephemera.kubelet.gc import ImageGCStore, delete_all_unused_containers, delete_unused_images
from ephemera.kubelet.images import BASE_IMAGE_REF
from ephemera.kubelet.podutil import pod_log_dir
from ephemera.kubelet.runtime.base import RuntimeError_, RuntimeService
from ephemera.kubelet.stats import PodPaths, StatsProvider, pod_paths, summary_json

__all__ = ["EvictionHost", "EvictionManager"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class EvictionHost(Protocol):
    """What the eviction manager asks of the kubelet."""

    def known_pods(self) -> list[Obj] | None:
        """The admitted pods the workers run (terminal ones too), with their statuses;
        None before the pod workers run."""
        ...

    def is_evicted(self, uid: str) -> bool: ...

    def is_terminating(self, uid: str) -> bool: ...

    def kill_pod(self, uid: str, grace_period_seconds: float, reason: str, message: str,
                 condition: Mapping[str, str] | None) -> bool:
        """Evict the pod through its worker; False when it has none or is already done."""
        ...

    def spawn(self, work: Awaitable[Any], *, pod: Mapping[str, Any] | None = None) -> None:
        """Run `work` (an event post) in the background."""
        ...

    def mounted_volumes(self, uid: str) -> Mapping[str, Path]: ...

    def needed_images(self) -> set[str]:
        """The image references image GC keeps besides those of the runtime's
        containers."""
        ...

    async def relist(self) -> None: ...

    async def update_node_status(self) -> None: ...


def _terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid"))


class EvictionManager:
    """One node's eviction manager (see the module docstring)."""

    def __init__(self, host: EvictionHost, *, node_name: str, root_dir: Path,
                 stats: StatsProvider, events: KubeletEvents, runtime: RuntimeService,
                 image_store: ImageGCStore, gates: FeatureGates,
                 eviction_hard: str | None, pressure_transition_period: float,
                 count_eviction: Callable[[str], None] = lambda signal: None) -> None:
        self.host = host
        self.node_name = node_name
        self.root_dir = root_dir
        self.stats = stats
        self.events = events
        self.runtime = runtime
        self.image_store = image_store
        self.gates = gates
        self.count_eviction = count_eviction
        self.thresholds: list[Threshold]
        self.thresholds, ignored = without_container_fs(parse_eviction_hard(eviction_hard))
        for warning in ignored:
            log.warning("Eviction manager: %s", warning)
        self.pressure = PressureConditions(pressure_transition_period)
        self.node_conditions: list[str] = []

    # -- what a pass looks at --

    def _active_pods(self, known: Sequence[Obj]) -> list[Obj]:
        """The pods the eviction manager may evict: not terminal, not being deleted, not
        evicted already."""
        return [p for p in known if not _terminal(p)
                and not (p.get("metadata") or {}).get("deletionTimestamp")
                and not self.host.is_evicted(_uid(p))]

    def _pod_paths(self, pod: Obj) -> PodPaths:
        return pod_paths(self.root_dir, pod, dict(self.host.mounted_volumes(_uid(pod))),
                         pod_log_dir(self.root_dir, pod))

    def _measured_paths(self, known: Sequence[Obj]) -> list[PodPaths]:
        """The directories of the pods measured: not those whose worker is terminating
        them (a walk's open directories would keep their storage busy while it is
        released)."""
        return [self._pod_paths(p) for p in known if not self.host.is_terminating(_uid(p))]

    async def summary(self) -> dict[str, Any]:
        """The Summary API document (`/stats/summary`), from the last measurements."""
        known = self.host.known_pods()
        paths = self._measured_paths(known) if known is not None else []
        return summary_json(await self.stats.get(paths, update=False))

    # -- one pass --

    async def synchronize(self) -> list[Eviction]:
        """One pass (upstream `synchronize`): measure, update the node conditions, evict the
        pods over their local-storage limits, or under node pressure (after node-level
        reclaim) one pod. The evictions started."""
        known = self.host.known_pods()
        if known is None:
            return []
        active = self._active_pods(known)
        summary = await self.stats.get(self._measured_paths(known))
        decision = decide(active, summary, self.thresholds, self.gates)
        conditions = self.pressure.update(decision.conditions, time.monotonic())
        if conditions != self.node_conditions:
            log.info("node %s: pressure conditions now %s", self.node_name, conditions)
            self.node_conditions = conditions
            await self.host.update_node_status()
        evictions = list(decision.local_evictions)
        if decision.to_reclaim is not None:
            resource = decision.to_reclaim.resource
            log.warning(ATTEMPTING_TO_RECLAIM_LOG, resource)
            self.host.spawn(self.events.node(
                {"metadata": {"name": self.node_name}}, events.WARNING,
                EVICTION_THRESHOLD_MET, RECLAIM_EVENT_MESSAGE.format(resource=resource)))
            reclaims = node_reclaim_funcs(decision.to_reclaim.signal,
                                          summary.dedicated_image_fs)
            if reclaims:
                await self.reclaim_node_level_resources(reclaims, known)
                known = self.host.known_pods() or []
                active = self._active_pods(known)
                summary = await self.stats.get(self._measured_paths(known))
            observations = observe(summary)
            met = by_eviction_priority(thresholds_met(self.thresholds, observations))
            if reclaims and not met:
                log.info(ABLE_TO_RECLAIM_LOG, resource)
            else:
                log.info(MUST_EVICT_LOG, resource)
                chosen = node_pressure_eviction(active, summary, met, observations,
                                                self.gates)
                if chosen is not None:
                    evictions.append(chosen)
        return [e for e in evictions if self._evict(e)]

    async def reclaim_node_level_resources(self, reclaims: Sequence[str],
                                           known: Sequence[Obj]) -> None:
        """Run the node-level garbage collections `reclaims` (`ephemera.kubelet.eviction.
        reclaim`) in order; an error is logged, never raised (upstream's
        `reclaimNodeLevelResources`)."""
        done = {_uid(p) for p in known if _terminal(p) or self.host.is_evicted(_uid(p))}
        for reclaim in reclaims:
            try:
                if reclaim == DEAD_CONTAINERS:
                    removed = await delete_all_unused_containers(
                        self.runtime, done.__contains__, lambda c: c.log_path)
                    log.info("Eviction manager: container GC removed %d dead container(s)",
                             len(removed))
                elif reclaim == UNUSED_IMAGES:
                    used = {c.image_id for c in await self.runtime.list_containers()}
                    images = await asyncio.to_thread(delete_unused_images, self.image_store,
                                                     used, self.host.needed_images(),
                                                     [BASE_IMAGE_REF])
                    log.info("Eviction manager: image GC removed %d unused image(s)",
                             len(images))
            except Exception as err:
                log.warning("Eviction manager: unexpected error when attempting to reduce "
                            "resource pressure (%s): %s", reclaim, err)
        with contextlib.suppress(RuntimeError_):
            await self.host.relist()

    def _evict(self, eviction: Eviction) -> bool:
        pod = eviction.pod
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not self.host.kill_pod(uid, eviction.grace_period_seconds, eviction.reason,
                                  eviction.message, eviction.condition):
            return False
        log.info("evicting pod %s/%s (%s): %s", (pod.get("metadata") or {}).get("namespace"),
                 (pod.get("metadata") or {}).get("name"), eviction.signal, eviction.message)
        self.count_eviction(eviction.signal)
        self.host.spawn(self.events.pod(pod, events.WARNING, eviction.reason,
                                        eviction.message, annotations=eviction.annotations),
                        pod=pod)
        return True

"""The probe manager (upstream's `prober_manager.go`): one worker per container and probe
kind of every pod the kubelet runs (regular containers and sidecars; plain init containers are
not probed), the three results caches, and what the rest of the kubelet asks of them:

- `update_pod(pod)` when the pod worker sees the pod (workers for containers added to the
  spec start, those of removed containers stop), `remove_pod(uid)` when it is gone;
- `probe_states(uid)`: the `started` and `ready` of each running container for the status
  (upstream's `UpdatePodStatus`: not started while a startup probe has not succeeded; ready
  when started and the readiness probe's last result is Success, or it has none);
- `failed_probe(uid, name, container_id)`: the probe (`liveness`, `startup`) a running
  instance failed and its grace period, so that the pod sync kills it (upstream's
  `computePodActions`);
- `on_update(pod_uid)` is called whenever a result changes, so the pod's worker syncs.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ephemera.kubelet.prober.handlers import ProbeTarget
from ephemera.kubelet.prober.prober import EventSink, ProbeKind, Prober
from ephemera.kubelet.prober.results import Result, ResultsCache
from ephemera.kubelet.prober.worker import ProbeWorker
from ephemera.kubelet.runtime.base import RuntimeService

__all__ = ["PodProbeStates", "ProbeManager"]

Key = tuple[str, str, ProbeKind]


def _probed_containers(pod: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], bool]]:
    spec = pod.get("spec") or {}
    found: list[tuple[Mapping[str, Any], bool]] = [
        (c, True) for c in spec.get("initContainers") or []
        if isinstance(c, dict) and c.get("restartPolicy") == "Always"]
    found += [(c, False) for c in spec.get("containers") or [] if isinstance(c, dict)]
    return found


class PodProbeStates:
    """What the probes say about one pod's containers (for the status generation)."""

    def __init__(self, manager: ProbeManager, uid: str) -> None:
        self.manager = manager
        self.uid = uid

    def started(self, name: str, container_id: str) -> bool:
        """Of a running container: started once its startup probe has succeeded (at once
        without one)."""
        result = self.manager.startup.get(container_id)
        if result is not None:
            return result == Result.SUCCESS
        return (self.uid, name, ProbeKind.STARTUP) not in self.manager.workers

    def ready(self, name: str, container_id: str) -> bool:
        """Of a running, started container: ready when its readiness probe last succeeded
        (at once without one). A readiness probe that has not run against this instance yet
        is run at once (upstream's manual trigger; upstream triggers whenever the instance is
        not ready, but ephemera generates the status far more often than upstream's pod
        syncs, so a failing probe would run more often than its period)."""
        if self.manager.readiness.get(container_id) == Result.SUCCESS:
            return True
        worker = self.manager.workers.get((self.uid, name, ProbeKind.READINESS))
        if worker is None:
            return True
        if worker.probed_id != container_id:
            worker.trigger()
        return False


class ProbeManager:
    def __init__(self, runtime: RuntimeService, post_event: EventSink, *,
                 pod_status: Callable[[str], Mapping[str, Any] | None],
                 target: Callable[[str, Mapping[str, Any]], Awaitable[ProbeTarget]],
                 on_update: Callable[[str], None] = lambda uid: None,
                 clock: Callable[[], float] = time.time,
                 on_result: Callable[[Mapping[str, str]], None] | None = None,
                 on_worker_end: Callable[[Mapping[str, str]], None] | None = None) -> None:
        self.prober = Prober(runtime, post_event)
        self.pod_status = pod_status
        self.target = target
        self.clock = clock
        self.on_update = on_update
        self.on_result = on_result  # prober_probe_total (see ProbeWorker)
        self.on_worker_end = on_worker_end
        self.liveness = ResultsCache(self._updated)
        self.readiness = ResultsCache(self._updated)
        self.startup = ResultsCache(self._updated)
        self.workers: dict[Key, ProbeWorker] = {}
        # Workers that ended by themselves (a terminal pod, a container that will not run
        # again): not started again by later updates of the pod.
        self.ended: set[Key] = set()
        self.started_at = time.monotonic()

    def _updated(self, uid: str, container_id: str, result: Result) -> None:
        self.on_update(uid)

    def _cache(self, kind: ProbeKind) -> ResultsCache:
        return {ProbeKind.LIVENESS: self.liveness, ProbeKind.READINESS: self.readiness,
                ProbeKind.STARTUP: self.startup}[kind]

    def update_pod(self, pod: Mapping[str, Any]) -> None:
        """Start the workers the pod's containers need; stop those of removed containers;
        later probes see this version of the pod (its deletion, for instance)."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        wanted: set[Key] = set()
        for container, init in _probed_containers(pod):
            for kind in ProbeKind:
                if not isinstance(container.get(kind.field), dict):
                    continue
                key = (uid, str(container.get("name")), kind)
                wanted.add(key)
                if key in self.ended:
                    continue
                worker = self.workers.get(key)
                if worker is not None and worker.container.get(kind.field) == \
                        container.get(kind.field):
                    worker.pod = pod
                    worker.container = container
                    continue
                if worker is not None:
                    worker.stop()
                worker = ProbeWorker(kind=kind, pod=pod, container=container, init=init,
                                     prober=self.prober, results=self._cache(kind),
                                     pod_status=self.pod_status, target=self.target,
                                     clock=self.clock, on_result=self.on_result,
                                     on_end=self.on_worker_end)
                self.workers[key] = worker
                worker.start(self.started_at)
                self._forget_when_done(key, worker)
        for key in [k for k in self.workers if k[0] == uid and k not in wanted]:
            self.workers.pop(key).stop()
        self.ended -= {k for k in self.ended if k[0] == uid and k not in wanted}

    def _forget_when_done(self, key: Key, worker: ProbeWorker) -> None:
        def done(_: object) -> None:
            if self.workers.get(key) is worker:  # ended by itself, not stopped
                del self.workers[key]
                self.ended.add(key)

        assert worker.task is not None
        worker.task.add_done_callback(done)

    def remove_pod(self, uid: str) -> None:
        for key in [k for k in self.workers if k[0] == uid]:
            self.workers.pop(key).stop()
        self.ended -= {k for k in self.ended if k[0] == uid}

    def probe_states(self, uid: str) -> PodProbeStates:
        return PodProbeStates(self, uid)

    def started(self, uid: str, name: str, container_id: str) -> bool:
        """The running instance has started (its startup probe succeeded, or it has none)."""
        return PodProbeStates(self, uid).started(name, container_id)

    def failed_probe(self, uid: str, name: str,
                     container_id: str) -> tuple[str, float | None] | None:
        """Which probe (`liveness` or `startup`) this running instance failed, so that the
        pod sync kills it (upstream's `computePodActions`), and that probe's
        `terminationGracePeriodSeconds` (None: the pod's); None when it failed neither."""
        for kind, cache in ((ProbeKind.LIVENESS, self.liveness),
                            (ProbeKind.STARTUP, self.startup)):
            if cache.get(container_id) != Result.FAILURE:
                continue
            worker = self.workers.get((uid, name, kind))
            grace = (worker.container.get(kind.field) or {}).get(
                "terminationGracePeriodSeconds") if worker is not None else None
            return kind.lower(), float(grace) if isinstance(grace, int) else None
        return None

    async def close(self) -> None:
        workers = list(self.workers.values())
        self.workers.clear()
        for worker in workers:
            await worker.close()

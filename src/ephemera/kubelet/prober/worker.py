"""One probe worker: the periodic probing of one container of a pod for one kind of probe
(upstream's `prober/worker.go`), as a state machine `do_probe` and the loop `run` around it.

Each probe:
1. reads the pod's status as the kubelet last generated it (the status manager's): no status
   yet, or no container id yet → wait; a terminal pod → the worker ends;
2. a new container instance (id) → its result starts at the initial value (readiness
   Failure, liveness Success, startup Unknown) and a held worker resumes;
3. held (after a liveness or startup failure, until the container is replaced) → wait;
4. a container that is not running → Failure; the worker ends if it will not be restarted;
5. a pod being deleted → liveness and startup report Success and end (a quiet shutdown);
6. within `initialDelaySeconds` of the container's start → wait;
7. startup gating: liveness and readiness wait until the container has `started`; the
   startup probe stops probing once it has;
8. the probe (`Prober.probe`); an errored probe is thrown away; a result that has not come
   `failureThreshold` (or `successThreshold`) times in a row leaves the state as it is;
   otherwise it is recorded; a liveness or startup failure puts the worker on hold.

The loop waits a random part of `periodSeconds` first when the kubelet started less than a
period ago (upstream's jitter, so that a restarted kubelet does not fire every probe at once),
then probes every `periodSeconds`, or at once when triggered.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.kubelet.prober.handlers import ProbeTarget
from ephemera.kubelet.prober.prober import ProbeErrored, ProbeKind, Prober
from ephemera.kubelet.prober.results import Result, ResultsCache

__all__ = ["INITIAL_RESULTS", "ProbeWorker", "parse_container_id"]

log = logging.getLogger(__name__)

INITIAL_RESULTS = {ProbeKind.READINESS: Result.FAILURE, ProbeKind.LIVENESS: Result.SUCCESS,
                   ProbeKind.STARTUP: Result.UNKNOWN}


def parse_container_id(value: str) -> str:
    """`runc://abc` → `abc` (upstream's `ParseContainerID`, the id part)."""
    return value.split("://", 1)[1] if "://" in value else value


def _find_status(status: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for key in ("containerStatuses", "initContainerStatuses"):
        for s in status.get(key) or []:
            if isinstance(s, dict) and s.get("name") == name and s.get("containerID"):
                return s
    return None


def _started_seconds_ago(running: Mapping[str, Any], now: float) -> float:
    try:
        started = datetime.fromisoformat(str(running.get("startedAt")).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return now - started.timestamp()


class ProbeWorker:
    """Probes one container of a pod for one kind of probe."""

    def __init__(self, *, kind: ProbeKind, pod: Mapping[str, Any],
                 container: Mapping[str, Any], init: bool, prober: Prober,
                 results: ResultsCache,
                 pod_status: Callable[[str], Mapping[str, Any] | None],
                 target: Callable[[str, Mapping[str, Any]], Awaitable[ProbeTarget]],
                 clock: Callable[[], float] = time.time,
                 on_result: Callable[[Mapping[str, str]], None] | None = None,
                 on_end: Callable[[Mapping[str, str]], None] | None = None) -> None:
        self.kind = kind
        self.pod = pod
        self.container = container
        self.init = init
        self.spec: Mapping[str, Any] = container.get(kind.field) or {}
        self.prober = prober
        self.results = results
        self.pod_status = pod_status
        self.target = target
        self.clock = clock
        self.initial_value = INITIAL_RESULTS[kind]
        # prober_probe_total: called with its labels after each probe, and when the worker
        # ends (to drop the container's series).
        self.on_result = on_result or (lambda labels: None)
        self.on_end = on_end or (lambda labels: None)
        self.container_id = ""
        self.probed_id = ""  # the container instance the last probe ran against
        self.last_result: Result | None = None
        self.result_run = 0
        self.on_hold = False
        self._stopped = asyncio.Event()
        self._trigger = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def uid(self) -> str:
        return str((self.pod.get("metadata") or {}).get("uid") or "")

    @property
    def name(self) -> str:
        return str(self.container.get("name"))

    def _threshold(self, key: str) -> int:
        value = self.spec.get(key)
        return int(value) if isinstance(value, int) and value > 0 else \
            (3 if key == "failureThreshold" else 1)

    async def do_probe(self) -> bool:
        """Probe once and record the result; whether the worker should go on."""
        status = self.pod_status(self.uid)
        if status is None:
            return True
        if status.get("phase") in ("Succeeded", "Failed"):
            return False
        c = _find_status(status, self.name)
        if c is None:
            return True
        container_id = parse_container_id(str(c.get("containerID")))
        if container_id != self.container_id:
            if self.container_id:
                self.results.remove(self.container_id)
            self.container_id = container_id
            self.results.set(container_id, self.initial_value, self.uid)
            self.on_hold = False  # a new container: probe it
        if self.on_hold:
            return True
        state = c.get("state") or {}
        running = state.get("running")
        if not isinstance(running, dict):
            self.results.set(container_id, Result.FAILURE, self.uid)
            restart_policy = (self.container.get("restartPolicy")
                              or (self.pod.get("spec") or {}).get("restartPolicy") or "Always")
            return "terminated" not in state or restart_policy != "Never"
        if (self.pod.get("metadata") or {}).get("deletionTimestamp") and \
                self.kind in (ProbeKind.LIVENESS, ProbeKind.STARTUP):
            self.results.set(container_id, Result.SUCCESS, self.uid)
            return False
        delay = self.spec.get("initialDelaySeconds") or 0
        if int(_started_seconds_ago(running, self.clock())) < delay:
            return True
        if c.get("started"):
            if self.kind == ProbeKind.STARTUP:
                return True  # kept for the next instance of the container
        elif self.kind != ProbeKind.STARTUP:
            return True  # startup gating
        try:
            result = await self.prober.probe(self.kind, self.pod, self.container,
                                             container_id, await self.target(self.uid, status),
                                             init=self.init)
        except ProbeErrored:
            return True
        self.probed_id = container_id
        self.on_result({**self.metric_labels(),
                        "result": "successful" if result == Result.SUCCESS else "failed"})
        if self.last_result == result:
            self.result_run += 1
        else:
            self.last_result = result
            self.result_run = 1
        if (result == Result.FAILURE and self.result_run < self._threshold("failureThreshold")) \
                or (result == Result.SUCCESS and
                    self.result_run < self._threshold("successThreshold")):
            return True
        self.results.set(container_id, result, self.uid)
        if self.kind in (ProbeKind.LIVENESS, ProbeKind.STARTUP) and result == Result.FAILURE:
            # It will be restarted: wait for the new container before probing again.
            self.on_hold = True
            self.result_run = 0
        return True

    def metric_labels(self) -> dict[str, str]:
        """The labels of this worker's `prober_probe_total` series, but `result`."""
        md = self.pod.get("metadata") or {}
        return {"probe_type": str(self.kind), "container": self.name,
                "pod": str(md.get("name") or ""), "namespace": str(md.get("namespace") or ""),
                "pod_uid": self.uid}

    # -- the loop --

    def start(self, kubelet_started: float) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self.run(kubelet_started), name=f"probe-{self.kind}-{self.uid}-{self.name}")

    def stop(self) -> None:
        self._stopped.set()

    def trigger(self) -> None:
        """Probe now (upstream's manual trigger)."""
        self._trigger.set()

    async def _wait(self, seconds: float) -> bool:
        """Wait for the next tick or a trigger; False when stopped."""
        waiters = [asyncio.ensure_future(self._stopped.wait()),
                   asyncio.ensure_future(self._trigger.wait())]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        self._trigger.clear()
        return not self._stopped.is_set()

    async def run(self, kubelet_started: float) -> None:
        period = float(self.spec.get("periodSeconds") or 10)
        try:
            if period > time.monotonic() - kubelet_started and \
                    not await self._wait(random.random() * period):
                return
            while not self._stopped.is_set():
                try:
                    going = await self.do_probe()
                except Exception:  # a bug must not end probing silently
                    log.exception("%s probe of container %s of pod %s failed", self.kind,
                                  self.name, self.uid)
                    going = True
                if not going or not await self._wait(period):
                    return
        finally:
            if self.container_id:
                self.results.remove(self.container_id)
            self.on_end(self.metric_labels())

    async def close(self) -> None:
        self.stop()
        if self.task is not None:
            await cancel_and_wait(self.task)

"""The probe worker's state machine (`ephemera.kubelet.prober.worker`) on the fake runtime:
initial results, thresholds, initial delay, startup gating, hold after a liveness failure,
the events with upstream's messages, and the manager's `started`/`ready` for the status."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ephemera.kubelet.prober.handlers import ProbeTarget
from ephemera.kubelet.prober.manager import ProbeManager
from ephemera.kubelet.prober.prober import ProbeKind, Prober
from ephemera.kubelet.prober.results import Result, ResultsCache
from ephemera.kubelet.prober.worker import ProbeWorker
from ephemera.kubelet.runtime.base import ContainerConfig, SandboxConfig
from ephemera.kubelet.runtime.fake import FakeRuntime
from ephemera.kubelet.status import PodRuntimeView, generate_pod_status, rfc3339

UID = "uid-1"
START = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str, str]] = []

    async def __call__(self, pod: Mapping[str, Any], container: str, type_: str, reason: str,
                       message: str, init: bool) -> None:
        self.posted.append((container, type_, reason, message))


async def _target(uid: str, status: Mapping[str, Any]) -> ProbeTarget:
    return ProbeTarget()


def _pod(kind: ProbeKind, probe: dict[str, Any], *, restart_policy: str = "Always",
         deleting: bool = False) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "p", "namespace": "default", "uid": UID}
    if deleting:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1,
            "failureThreshold": 3, **probe}
    return {"metadata": md, "spec": {"restartPolicy": restart_policy,
                                     "containers": [{"name": "c", "image": "busybox",
                                                     kind.field: spec}]}}


class Setup:
    def __init__(self, runtime: FakeRuntime, container_id: str) -> None:
        self.runtime = runtime
        self.container_id = container_id
        self.clock = Clock()
        self.events = Events()
        self.results = ResultsCache()
        self.started = True
        self.running = True
        self.phase = "Running"

    def status(self, uid: str) -> dict[str, Any]:
        state: dict[str, Any] = (
            {"running": {"startedAt": rfc3339(START)}} if self.running
            else {"terminated": {"exitCode": 1, "finishedAt": rfc3339(START)}})
        return {"phase": self.phase, "containerStatuses": [
            {"name": "c", "containerID": f"fake://{self.container_id}", "state": state,
             "started": self.started, "ready": False}]}

    def worker(self, kind: ProbeKind, pod: dict[str, Any]) -> ProbeWorker:
        return ProbeWorker(kind=kind, pod=pod, container=pod["spec"]["containers"][0],
                           init=False, prober=Prober(self.runtime, self.events),
                           results=self.results, pod_status=self.status, target=_target,
                           clock=self.clock)

    def execs(self) -> int:
        return sum(1 for call in self.runtime.calls if call[0] == "exec_sync")


async def _container(runtime: FakeRuntime, attempt: int = 0) -> str:
    sandbox = SandboxConfig(pod_uid=UID, namespace="default", name="p", hostname="p")
    sid = await runtime.run_pod_sandbox(sandbox)
    cid = await runtime.create_container(
        sid, ContainerConfig(name="c", attempt=attempt, image="busybox", image_id="sha256:1",
                             rootfs_layers=(), argv=("run",)), sandbox)
    await runtime.start_container(cid)
    return cid


@pytest.fixture
async def setup(tmp_path: Path) -> Setup:
    runtime = FakeRuntime(tmp_path, persist=False)
    return Setup(runtime, await _container(runtime))


async def test_initial_results_per_kind(setup: Setup) -> None:
    pending = {ProbeKind.READINESS: Result.FAILURE, ProbeKind.LIVENESS: Result.SUCCESS,
               ProbeKind.STARTUP: Result.UNKNOWN}
    setup.started = False
    for kind, initial in pending.items():
        worker = setup.worker(kind, _pod(kind, {"exec": {"command": ["exit", "0"]},
                                                "initialDelaySeconds": 60}))
        assert await worker.do_probe()
        assert setup.results.get(setup.container_id) == initial
    assert setup.execs() == 0


async def test_failure_threshold_then_hold_until_a_new_container(setup: Setup) -> None:
    pod = _pod(ProbeKind.LIVENESS, {"exec": {"command": ["fail", "it is dead"]},
                                     "failureThreshold": 3})
    worker = setup.worker(ProbeKind.LIVENESS, pod)
    for _ in range(2):
        assert await worker.do_probe()
        assert setup.results.get(setup.container_id) == Result.SUCCESS
    assert await worker.do_probe()
    assert setup.results.get(setup.container_id) == Result.FAILURE
    assert setup.events.posted == [("c", "Warning", "Unhealthy",
                                    "Liveness probe failed: it is dead\n")] * 3
    assert worker.on_hold
    before = setup.execs()
    assert await worker.do_probe()
    assert setup.execs() == before  # held: the failing container is not probed again
    old_id = setup.container_id
    setup.container_id = await _container(setup.runtime, attempt=1)
    assert await worker.do_probe()
    assert not worker.on_hold and setup.execs() == before + 1
    assert setup.results.get(old_id) is None
    assert setup.results.get(setup.container_id) == Result.SUCCESS  # one failure of three


async def test_success_threshold(setup: Setup) -> None:
    answers = iter([(0, b""), (1, b"no\n"), (0, b""), (0, b"")])
    setup.runtime.exec_handler = lambda name, argv: next(answers)
    pod = _pod(ProbeKind.READINESS, {"exec": {"command": ["check"]}, "successThreshold": 2})
    worker = setup.worker(ProbeKind.READINESS, pod)
    seen = []
    for _ in range(4):
        assert await worker.do_probe()
        seen.append(setup.results.get(setup.container_id))
    # A success, a failure (below its threshold of 3), then two successes in a row.
    assert seen == [Result.FAILURE, Result.FAILURE, Result.FAILURE, Result.SUCCESS]


async def test_initial_delay(setup: Setup) -> None:
    pod = _pod(ProbeKind.READINESS, {"exec": {"command": ["exit", "0"]},
                                     "initialDelaySeconds": 5, "successThreshold": 1})
    worker = setup.worker(ProbeKind.READINESS, pod)
    setup.clock.now = START + 4.9
    assert await worker.do_probe()
    assert setup.execs() == 0
    assert setup.results.get(setup.container_id) == Result.FAILURE
    setup.clock.now = START + 5.0
    assert await worker.do_probe()
    assert setup.execs() == 1
    assert setup.results.get(setup.container_id) == Result.SUCCESS


async def test_startup_gates_liveness_and_readiness(setup: Setup) -> None:
    setup.started = False
    readiness = setup.worker(ProbeKind.READINESS,
                             _pod(ProbeKind.READINESS, {"exec": {"command": ["exit", "0"]}}))
    assert await readiness.do_probe()
    assert setup.execs() == 0  # not started yet: readiness waits
    startup = ProbeWorker(kind=ProbeKind.STARTUP,
                          pod=_pod(ProbeKind.STARTUP, {"exec": {"command": ["exit", "0"]}}),
                          container={"name": "c", "startupProbe": {
                              "exec": {"command": ["exit", "0"]}, "failureThreshold": 3,
                              "successThreshold": 1, "periodSeconds": 10}},
                          init=False, prober=Prober(setup.runtime, setup.events),
                          results=ResultsCache(), pod_status=setup.status, target=_target,
                          clock=setup.clock)
    assert await startup.do_probe()
    assert startup.results.get(setup.container_id) == Result.SUCCESS
    assert setup.execs() == 1
    setup.started = True  # the status now says started
    assert await startup.do_probe()
    assert setup.execs() == 1  # the startup probe stops once started
    assert await readiness.do_probe()
    assert setup.execs() == 2
    assert setup.results.get(setup.container_id) == Result.SUCCESS


async def test_not_running_and_terminal_and_deleting(setup: Setup) -> None:
    pod = _pod(ProbeKind.READINESS, {"exec": {"command": ["exit", "0"]}},
               restart_policy="Never")
    worker = setup.worker(ProbeKind.READINESS, pod)
    setup.running = False
    assert not await worker.do_probe()  # exited under Never: the worker ends
    assert setup.results.get(setup.container_id) == Result.FAILURE
    setup.running = True
    setup.phase = "Succeeded"
    assert not await worker.do_probe()
    setup.phase = "Running"
    liveness = setup.worker(ProbeKind.LIVENESS,
                            _pod(ProbeKind.LIVENESS, {"exec": {"command": ["fail", "x"]},
                                                      "failureThreshold": 1}, deleting=True))
    assert not await liveness.do_probe()
    assert setup.results.get(setup.container_id) == Result.SUCCESS
    assert setup.execs() == 0


async def test_exec_timeout_and_errored_probe(setup: Setup) -> None:
    pod = _pod(ProbeKind.LIVENESS, {"exec": {"command": ["hang", "$(WHO)"]},
                                     "failureThreshold": 1})
    pod["spec"]["containers"][0]["env"] = [{"name": "WHO", "value": "me"}]
    worker = setup.worker(ProbeKind.LIVENESS, pod)
    assert await worker.do_probe()
    assert setup.results.get(setup.container_id) == Result.FAILURE
    assert setup.events.posted[-1][3] == 'Liveness probe failed: command "hang me" timed out'
    readiness = setup.worker(ProbeKind.READINESS,
                             _pod(ProbeKind.READINESS, {"tcpSocket": {"port": "http"}}))
    assert await readiness.do_probe()
    assert setup.events.posted[-1][2:] == (
        "Unhealthy", 'Readiness probe errored and resulted in unknown state: '
                     'strconv.Atoi: parsing "http": invalid syntax')
    assert readiness.last_result is None  # thrown away


async def test_manager_started_ready_and_status_conditions(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path, persist=False)
    cid = await _container(runtime)
    updates: list[str] = []
    statuses: dict[str, dict[str, Any]] = {}
    manager = ProbeManager(runtime, Events(), pod_status=statuses.get, target=_target,
                           on_update=updates.append)
    pod = _pod(ProbeKind.READINESS, {"exec": {"command": ["fail", "never"]}})
    pod["spec"]["containers"][0]["startupProbe"] = {"exec": {"command": ["exit", "0"]},
                                                    "periodSeconds": 10}
    manager.update_pod(pod)
    try:
        instance = (await runtime.list_containers())[0]
        view = PodRuntimeView(containers={"c": [instance]}, runtime_name="fake",
                              probes=manager.probe_states(UID))
        status = generate_pod_status(pod, view, host_ip="10.0.0.1")
        c = status["containerStatuses"][0]
        assert (c["started"], c["ready"]) == (False, False)
        manager.startup.set(cid, Result.SUCCESS, UID)
        status = generate_pod_status(pod, view, host_ip="10.0.0.1")
        c = status["containerStatuses"][0]
        assert (c["started"], c["ready"]) == (True, False)
        conditions = {x["type"]: x for x in status["conditions"]}
        assert conditions["Ready"]["status"] == "False"
        assert conditions["ContainersReady"]["message"] == \
            "containers with unready status: [c]"
        readiness = manager.workers[(UID, "c", ProbeKind.READINESS)]
        assert readiness._trigger.is_set()  # not probed yet: it runs at once
        readiness._trigger.clear()
        readiness.probed_id = cid
        generate_pod_status(pod, view, host_ip="10.0.0.1")
        assert not readiness._trigger.is_set()  # probed: its period decides
        manager.readiness.set(cid, Result.SUCCESS, UID)
        status = generate_pod_status(pod, view, host_ip="10.0.0.1")
        assert status["containerStatuses"][0]["ready"] is True
        assert {x["type"]: x["status"] for x in status["conditions"]}["Ready"] == "True"
        assert updates == [UID, UID]
        assert manager.failed_probe(UID, "c", cid) is None
        manager.liveness.set(cid, Result.FAILURE, UID)
        assert manager.failed_probe(UID, "c", cid) == ("liveness", None)
        # A container removed from the spec loses its workers.
        manager.update_pod({**pod, "spec": {"containers": [{"name": "d", "image": "x"}]}})
        assert not manager.workers
    finally:
        await manager.close()


async def test_a_worker_that_ended_is_not_started_again(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path, persist=False)
    cid = await _container(runtime)
    statuses = {UID: {"phase": "Failed", "containerStatuses": [
        {"name": "c", "containerID": f"fake://{cid}", "state": {"running": {}}}]}}
    manager = ProbeManager(runtime, Events(), pod_status=statuses.get, target=_target)
    pod = _pod(ProbeKind.READINESS, {"exec": {"command": ["exit", "0"]}, "periodSeconds": 1})
    try:
        manager.update_pod(pod)
        worker = manager.workers[(UID, "c", ProbeKind.READINESS)]
        assert worker.task is not None
        await worker.task  # a terminal pod: the worker ends by itself
        assert not manager.workers
        manager.update_pod(pod)
        assert not manager.workers
        manager.remove_pod(UID)
        manager.update_pod(pod)  # a pod seen afresh gets its workers again
        assert (UID, "c", ProbeKind.READINESS) in manager.workers
    finally:
        await manager.close()

"""Probes end to end in the kubelet on the fake runtime, against an in-process apiserver:
readiness drives `ready` and the Ready/ContainersReady conditions, a startup probe gates
`started`, a liveness failure restarts the container with upstream's events, and `Never`
keeps a killed container down."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kubelet_harness import FAST, container_status, pod, running_kubelet, wait_until

from ephemera.client import resource_path
from ephemera.kubelet.backoff import BackOffPolicy


def _condition(p: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in p["status"]["conditions"] if c["type"] == kind)


def _with_probes(name: str, restart_policy: str = "Always", **probes: Any) -> dict[str, Any]:
    body = pod(name, restartPolicy=restart_policy, terminationGracePeriodSeconds=1)
    body["spec"]["containers"][0].update(probes)
    return body


def _exec(*argv: str, **more: Any) -> dict[str, Any]:
    return {"exec": {"command": list(argv)}, "periodSeconds": 1, **more}


def _running(p: dict[str, Any]) -> bool:
    return "running" in (container_status(p).get("state") or {}) if \
        p["status"].get("containerStatuses") else False


async def test_readiness_follows_the_probe(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        ready = {"now": False}
        h.runtime.exec_handler = lambda name, argv: (
            (0, b"") if ready["now"] else (1, b"not yet\n")) if argv == ["check"] else None
        await h.create(_with_probes("r", readinessProbe=_exec("check")))
        p = await h.wait_pod("r", _running)
        event = await h.wait_event("r", lambda e: e["reason"] == "Unhealthy")
        assert (event["type"], event["message"]) == ("Warning",
                                                     "Readiness probe failed: not yet\n")
        assert event["involvedObject"]["fieldPath"] == "spec.containers{c}"
        p = await h.wait_pod("r", lambda p: True)
        assert container_status(p)["ready"] is False
        assert container_status(p)["started"] is True
        assert (_condition(p, "Ready")["status"], _condition(p, "Ready")["reason"]) == (
            "False", "ContainersNotReady")
        assert _condition(p, "ContainersReady")["message"] == \
            "containers with unready status: [c]"
        ready["now"] = True
        p = await h.wait_pod("r", lambda p: _condition(p, "Ready")["status"] == "True")
        assert container_status(p)["ready"] is True
        assert _condition(p, "ContainersReady")["status"] == "True"
        assert container_status(p)["restartCount"] == 0
        registry = h.kubelet.metrics.registry
        labels = {"probe_type": "Readiness", "container": "c", "pod": "r",
                  "namespace": "default", "pod_uid": p["metadata"]["uid"]}
        failed = registry.get_sample_value("prober_probe_total", labels | {"result": "failed"})
        assert failed is not None and failed >= 1
        assert registry.get_sample_value("prober_probe_total",
                                         labels | {"result": "successful"}) is not None
        await h.api.delete(resource_path("pods", "default", "r"))
        await h.wait_gone("r")
        await wait_until(lambda: registry.get_sample_value(
            "prober_probe_total", labels | {"result": "failed"}) is None)


async def test_startup_probe_gates_started_and_readiness(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        up = {"now": False}
        h.runtime.exec_handler = lambda name, argv: (
            ((0, b"") if up["now"] else (1, b"")) if argv == ["started"] else None)
        await h.create(_with_probes("s", startupProbe=_exec("started", failureThreshold=30),
                                    readinessProbe=_exec("exit", "0")))
        p = await h.wait_pod("s", _running)
        assert container_status(p)["started"] is False
        # Readiness is not probed before the container has started.
        assert not [c for c in h.runtime.calls if c[0] == "exec_sync" and c[2:] == ("exit", "0")]
        up["now"] = True
        p = await h.wait_pod("s", lambda p: _condition(p, "Ready")["status"] == "True")
        assert container_status(p)["started"] is True and container_status(p)["ready"] is True


async def test_liveness_failure_restarts_the_container(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await h.create(_with_probes("l", livenessProbe=_exec("fail", "dead",
                                                             failureThreshold=2)))
        p = await h.wait_pod("l", lambda p: _running(p) and
                             container_status(p)["restartCount"] == 1)
        last = container_status(p)["lastState"]["terminated"]
        assert last["exitCode"] == 143  # SIGTERM
        killing = await h.wait_event("l", lambda e: e["reason"] == "Killing")
        assert killing["message"] == "Container c failed liveness probe, will be restarted"
        unhealthy = await h.wait_event("l", lambda e: e["reason"] == "Unhealthy")
        assert unhealthy["message"] == "Liveness probe failed: dead\n"
        assert unhealthy["count"] >= 2


async def test_repeated_liveness_failures_back_off(tmp_path: Path) -> None:
    # Upstream's doBackOff: the restart after the first kill is immediate (no exited
    # instance yet), the second starts the back-off, the third waits in CrashLoopBackOff.
    settings = dataclasses.replace(FAST, backoff=BackOffPolicy(60.0, 120.0))
    async with running_kubelet(tmp_path, settings) as h:
        await h.create(_with_probes("b", livenessProbe=_exec("fail", "dead",
                                                             failureThreshold=1)))
        p = await h.wait_pod("b", lambda p: bool(p["status"].get("containerStatuses")) and (
            container_status(p)["state"].get("waiting") or {}).get("reason") ==
            "CrashLoopBackOff")
        assert container_status(p)["restartCount"] == 2
        backoff = await h.wait_event("b", lambda e: e["reason"] == "BackOff")
        assert backoff["message"] == \
            f"Back-off restarting failed container c in pod b_default({p['metadata']['uid']})"


async def test_liveness_failure_under_never_stops_it(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await h.create(_with_probes("n", "Never",
                                    livenessProbe=_exec("fail", "x", failureThreshold=1)))
        p = await h.wait_pod("n", lambda p: p["status"].get("phase") == "Failed")
        assert container_status(p)["restartCount"] == 0
        assert container_status(p)["state"]["terminated"]["exitCode"] == 143
        killing = await h.wait_event("n", lambda e: e["reason"] == "Killing")
        assert killing["message"] == "Container c failed liveness probe"


async def test_a_sidecar_failing_liveness_is_restarted(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        body = pod("side", terminationGracePeriodSeconds=1)
        body["spec"]["initContainers"] = [{"name": "s", "image": "busybox",
                                           "restartPolicy": "Always",
                                           "livenessProbe": _exec("fail", "gone",
                                                                  failureThreshold=1)}]
        await h.create(body)
        p = await h.wait_pod("side", lambda p: any(
            s["name"] == "s" and s["restartCount"] >= 1 and "running" in s["state"]
            for s in p["status"].get("initContainerStatuses") or []))
        killing = await h.wait_event("side", lambda e: e["reason"] == "Killing")
        assert killing["message"] == "Init container s failed liveness probe"
        assert killing["involvedObject"]["fieldPath"] == "spec.initContainers{s}"
        unhealthy = await h.wait_event("side", lambda e: e["reason"] == "Unhealthy")
        assert unhealthy["involvedObject"]["fieldPath"] == "spec.initContainers{s}"
        assert container_status(p)["restartCount"] == 0  # the main container is untouched

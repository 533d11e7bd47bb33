"""Probes in a real `ephemera up` with real containers (the OCI runtime), met through
kubectl: a readiness exec probe that never succeeds keeps the pod 0/1 with Ready False, and
the pod becomes Ready when the file the probe reads appears; a liveness failure restarts the
container (restartCount 1, upstream's Unhealthy and Killing events); httpGet and tcpSocket
probes reach busybox `httpd` listening on the pod's IP; a refused port and a 404 fail with
upstream's messages (naming the pod IP)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    Cluster,
    Kubectl,
    container,
    namespaced_kubectl,
    run_kubelet_cluster,
    wait,
    wait_pod,
)

pytestmark = pytest.mark.e2e

NODE = "probe-node"


@pytest.fixture(scope="module")
def probe_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from run_kubelet_cluster(tmp_path_factory, "probe-cluster", NODE)


@pytest.fixture
def k(probe_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
      ) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(probe_cluster, tmp_path, request)


def _pod(name: str, script: str, **probes: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", script], **probes}]}}


def _create(k: Kubectl, *objects: dict[str, Any]) -> None:
    k("create", "-f", "-", input=yaml.safe_dump_all(objects))


def _condition(p: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in p.get("status", {}).get("conditions") or []
                 if c["type"] == kind), {})


def _events(k: Kubectl, name: str, reason: str) -> list[dict[str, Any]]:
    listed = k.json("get", "events", "--field-selector",
                    f"involvedObject.name={name},reason={reason}")
    return list(listed["items"])


def _event(k: Kubectl, name: str, reason: str, message: str) -> dict[str, Any]:
    found: dict[str, Any] = wait(lambda: next(
        (e for e in _events(k, name, reason) if e["message"] == message), None),
        f"event {reason} {message!r} of pod {name} (seen: "
        f"{[e['message'] for e in _events(k, name, reason)]})", k.cluster)
    return found


def _running(p: dict[str, Any]) -> bool:
    return "running" in (container(p).get("state") or {})


def _ready_column(k: Kubectl, name: str) -> str:
    return k("get", "pod", name, "--no-headers").stdout.split()[1]


def test_readiness_exec_probe_gates_ready(k: Kubectl) -> None:
    _create(k, _pod("gate", "sleep 3600", readinessProbe={
        "exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}))
    wait_pod(k, "gate", _running, "running")
    event = _event(k, "gate", "Unhealthy", "Readiness probe failed: cat: can't open "
                   "'/tmp/ready': No such file or directory\n")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["fieldPath"] == "spec.containers{c}"
    p = wait_pod(k, "gate", _running, "running")
    assert container(p)["ready"] is False and container(p)["started"] is True
    assert (_condition(p, "Ready")["status"], _condition(p, "Ready")["reason"]) == (
        "False", "ContainersNotReady")
    assert _condition(p, "ContainersReady")["message"] == \
        "containers with unready status: [c]"
    assert _ready_column(k, "gate") == "0/1"
    k("exec", "gate", "--", "touch", "/tmp/ready")
    k("wait", "--for=condition=Ready", "pod/gate", "--timeout=30s", timeout=40)
    assert _ready_column(k, "gate") == "1/1"
    p = wait_pod(k, "gate", _running, "running")
    assert container(p)["ready"] is True and container(p)["restartCount"] == 0


def test_liveness_failure_restarts_the_container(k: Kubectl) -> None:
    _create(k, _pod("alive", "touch /tmp/alive; sleep 2; rm /tmp/alive; exec sleep 3600",
                    livenessProbe={"exec": {"command": ["cat", "/tmp/alive"]},
                                   "periodSeconds": 1, "failureThreshold": 2,
                                   "terminationGracePeriodSeconds": 2}))
    p = wait_pod(k, "alive", lambda p: container(p).get("restartCount", 0) >= 1,
                 "a restart")
    killing = _event(k, "alive", "Killing",
                     "Container c failed liveness probe, will be restarted")
    assert killing["involvedObject"]["fieldPath"] == "spec.containers{c}"
    _event(k, "alive", "Unhealthy", "Liveness probe failed: cat: can't open '/tmp/alive': "
           "No such file or directory\n")
    terminated = container(p)["lastState"]["terminated"]
    assert terminated["exitCode"] in (137, 143) and terminated["reason"] == "Error"
    # A new container is started at once (no crash back-off for a liveness kill).
    wait_pod(k, "alive", lambda p: _running(p) and container(p)["restartCount"] >= 1,
             "the restarted container running")


def test_http_get_and_tcp_socket_probes_reach_the_pod(k: Kubectl) -> None:
    serve = "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"
    # `web` listens on its pod IP only: the probes reach the pod at its IP, as upstream's
    only_pod_ip = ("mkdir -p /www && echo ok > /www/index.html && "
                   "ip=$(ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1) && "
                   "exec httpd -f -p $ip:8080 -h /www")
    _create(k, _pod("web", only_pod_ip,
                    ports=[{"name": "http", "containerPort": 8080}],
                    readinessProbe={"httpGet": {"path": "/index.html", "port": "http"},
                                    "periodSeconds": 1},
                    livenessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1,
                                   "failureThreshold": 1}))
    k("wait", "--for=condition=Ready", "pod/web", "--timeout=60s", timeout=70)
    assert _ready_column(k, "web") == "1/1"
    _create(k, _pod("web404", serve,
                    readinessProbe={"httpGet": {"path": "/missing", "port": 8080},
                                    "periodSeconds": 1}),
            _pod("closed", "exec sleep 3600",
                 readinessProbe={"tcpSocket": {"port": 9999}, "periodSeconds": 1}))
    _event(k, "web404", "Unhealthy", "Readiness probe failed: HTTP probe failed with "
           "statuscode: 404")
    closed_ip = wait_pod(k, "closed", lambda p: bool(p["status"].get("podIP")),
                         "an IP")["status"]["podIP"]
    _event(k, "closed", "Unhealthy", f"Readiness probe failed: dial tcp {closed_ip}:9999: "
           "connect: connection refused")
    assert _ready_column(k, "web404") == "0/1"
    assert _ready_column(k, "closed") == "0/1"
    # The liveness probe kept succeeding: no restart.
    assert container(wait_pod(k, "web", _running, "running"))["restartCount"] == 0

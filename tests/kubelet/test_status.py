"""Pure pieces of the kubelet: pod status generation (phase, conditions, container
statuses), the status patch, back-off, Go durations, CRI log reading, container config (env,
argv, mounts), admission, node status and the node lifecycle decisions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ephemera.controllers.nodelifecycle import desired_taints, unknown_conditions
from ephemera.kubelet import containerconfig
from ephemera.kubelet.backoff import BackOff, BackOffPolicy
from ephemera.kubelet.eviction.thresholds import hard_eviction_reservation, parse_eviction_hard
from ephemera.kubelet.logs import LogOptions, parse_cri_line, stream_log
from ephemera.kubelet.node import NodeConfig, NodeStatusBuilder, Pressure, allocatable
from ephemera.kubelet.podadmission import admit
from ephemera.kubelet.podutil import format_pod, go_duration
from ephemera.kubelet.runtime.base import ContainerState, ContainerStatus, Mount, SandboxStatus
from ephemera.kubelet.status import (
    PodRuntimeView,
    generate_pod_status,
    get_phase,
    status_patch,
)

NOW = "2026-01-01T00:00:00Z"


def make_pod(*names: str, init: tuple[str, ...] = (), restart: str = "Always",
             **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"restartPolicy": restart,
                     "containers": [{"name": n, "image": "busybox"} for n in names],
                     "initContainers": [{"name": n, "image": "busybox"} for n in init],
                     **spec}}


def inst(name: str, state: ContainerState, attempt: int = 0, exit_code: int = 0,
         mounts: tuple[Mount, ...] = ()) -> ContainerStatus:
    return ContainerStatus(id=f"{name}-{attempt}", sandbox_id="s", name=name, attempt=attempt,
                           image="busybox", image_id="sha256:abc", state=state,
                           created_at=1_000_000.0, started_at=1_000_001.0,
                           finished_at=1_000_002.0 if state == ContainerState.EXITED else 0.0,
                           exit_code=exit_code,
                           reason=("Completed" if exit_code == 0 else "Error")
                           if state == ContainerState.EXITED else "", mounts=mounts)


SANDBOX = SandboxStatus(id="s", pod_uid="u1", namespace="ns", name="p", ready=True, ip="",
                        created_at=1.0)


def status_of(pod: dict[str, Any], **view: Any) -> dict[str, Any]:
    return generate_pod_status(pod, PodRuntimeView(sandbox=SANDBOX, runtime_name="runc",
                                                   **view),
                               host_ip="127.0.0.1", now=NOW)


def cond(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


# --- status --------------------------------------------------------------------------------


def test_a_new_pod_waits_in_container_creating() -> None:
    status = status_of(make_pod("a", "b"))
    assert status["phase"] == "Pending"
    assert [s["state"] for s in status["containerStatuses"]] == [
        {"waiting": {"reason": "ContainerCreating"}}] * 2
    ready = cond(status, "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False", "ContainersNotReady", "containers with unready status: [a b]")
    assert cond(status, "PodReadyToStartContainers")["status"] == "True"
    assert status["hostIPs"] == [{"ip": "127.0.0.1"}] and status["startTime"] == NOW


def test_a_host_network_pod_has_the_nodes_address_whatever_the_sandbox_says() -> None:
    pod = make_pod("c", hostNetwork=True)
    sandbox = SandboxStatus(id="s", pod_uid="u1", namespace="ns", name="p", ready=True,
                            ip="192.0.2.2", created_at=1.0)  # a runtime's external address
    status = generate_pod_status(pod, PodRuntimeView(sandbox=sandbox, runtime_name="runc"),
                                 host_ip="198.18.0.7", now=NOW)
    assert status["podIP"] == status["hostIP"] == "198.18.0.7"
    assert status["podIPs"] == status["hostIPs"] == [{"ip": "198.18.0.7"}]


def test_pods_with_init_containers_wait_in_pod_initializing() -> None:
    pod = make_pod("c", init=("i1", "i2"))
    status = status_of(pod, containers={"i1": [inst("i1", ContainerState.RUNNING)]})
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    init = cond(status, "Initialized")
    assert (init["status"], init["reason"], init["message"]) == (
        "False", "ContainersNotInitialized", "containers with incomplete status: [i1 i2]")
    assert status["phase"] == "Pending"


def test_a_running_pod() -> None:
    mounts = (Mount("/data", "/h/data", False, volume_name="data"),
              Mount("/cfg", "/h/cfg", True, volume_name="cfg"),
              Mount("/etc/hosts", "/h/hosts"))
    pod = make_pod("c")
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "cfg", "mountPath": "/cfg", "readOnly": True},
        {"name": "data", "mountPath": "/data"}]
    status = status_of(pod, containers={"c": [inst("c", ContainerState.RUNNING, mounts=mounts)]})
    assert status["phase"] == "Running"
    c = status["containerStatuses"][0]
    assert c["containerID"] == "runc://c-0"
    assert c["ready"] is True and c["started"] is True and c["restartCount"] == 0
    assert c["state"] == {"running": {"startedAt": "1970-01-12T13:46:41Z"}}
    assert c["volumeMounts"] == [
        {"name": "cfg", "mountPath": "/cfg", "readOnly": True, "recursiveReadOnly": "Disabled"},
        {"name": "data", "mountPath": "/data"}]
    assert all(cond(status, k)["status"] == "True" for k in
               ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                "PodScheduled"))


def test_a_crash_looping_container_is_waiting_with_its_last_termination() -> None:
    pod = make_pod("c")
    instances = [inst("c", ContainerState.EXITED, 0, 1), inst("c", ContainerState.EXITED, 1, 1)]
    status = status_of(pod, containers={"c": instances},
                       waiting={"c": ("CrashLoopBackOff", "back-off 10s ...")})
    c = status["containerStatuses"][0]
    assert c["state"] == {"waiting": {"reason": "CrashLoopBackOff",
                                      "message": "back-off 10s ..."}}
    assert c["lastState"]["terminated"]["containerID"] == "runc://c-1"
    assert c["lastState"]["terminated"]["exitCode"] == 1
    assert c["restartCount"] == 1
    assert status["phase"] == "Running"


@pytest.mark.parametrize(("restart", "codes", "terminal", "phase"), [
    ("Never", [0, 0], False, "Succeeded"),
    ("Never", [0, 1], False, "Failed"),
    ("OnFailure", [0, 0], False, "Succeeded"),
    ("OnFailure", [0, 1], False, "Running"),
    ("Always", [0, 0], False, "Running"),
    ("Always", [0, 143], True, "Failed"),
    ("Always", [0, 0], True, "Succeeded"),
])
def test_get_phase(restart: str, codes: list[int], terminal: bool, phase: str) -> None:
    pod = make_pod("a", "b", restart=restart)
    status = status_of(pod, containers={
        n: [inst(n, ContainerState.EXITED, 0, code)] for n, code in zip("ab", codes,
                                                                       strict=True)},
        terminal=terminal)
    assert status["phase"] == phase
    if phase == "Succeeded":
        assert cond(status, "Ready")["reason"] == "PodCompleted"
        assert cond(status, "Initialized")["reason"] == "PodCompleted"


def test_a_failed_init_container_fails_only_a_never_pod() -> None:
    for restart, phase in (("Never", "Failed"), ("Always", "Pending")):
        pod = make_pod("c", init=("i",), restart=restart)
        init = {"i": {"state": {"terminated": {"exitCode": 1}}}}
        assert get_phase(pod, init, {}, False) == phase


def test_terminal_phases_stick_and_transition_times_are_kept() -> None:
    pod = make_pod("c")
    first = status_of(pod, containers={"c": [inst("c", ContainerState.RUNNING)]})
    later = generate_pod_status(pod, PodRuntimeView(
        sandbox=SANDBOX, containers={"c": [inst("c", ContainerState.RUNNING)]}),
        host_ip="127.0.0.1", old_status=first, now="2026-02-02T00:00:00Z")
    assert cond(later, "Ready")["lastTransitionTime"] == NOW
    assert later["startTime"] == NOW
    done = dict(first, phase="Failed")
    again = generate_pod_status(pod, PodRuntimeView(sandbox=SANDBOX), host_ip="127.0.0.1",
                                old_status=done)
    assert again["phase"] == "Failed"


def test_readiness_gates_and_foreign_conditions() -> None:
    pod = make_pod("c", readinessGates=[{"conditionType": "example.com/ok"}])
    old = {"conditions": [{"type": "example.com/ok", "status": "False"}]}
    status = generate_pod_status(pod, PodRuntimeView(
        sandbox=SANDBOX, containers={"c": [inst("c", ContainerState.RUNNING)]}),
        host_ip="127.0.0.1", old_status=old, now=NOW)
    ready = cond(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReadinessGatesNotReady")
    assert ready["message"] == 'the status of pod readiness gate "example.com/ok" is not ' \
        '"True", but False'
    assert cond(status, "example.com/ok") == {"type": "example.com/ok", "status": "False"}


def test_status_patch_sends_changes_and_removes_kubelet_fields() -> None:
    old = {"phase": "Running", "podIP": "10.0.0.1", "qosClass": "BestEffort",
           "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}]}
    new = {"phase": "Running", "qosClass": "BestEffort",
           "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}]}
    assert status_patch(old, new) == {"podIP": None}
    assert status_patch(new, dict(new, phase="Failed")) == {"phase": "Failed"}


# --- back-off and durations ----------------------------------------------------------------


def test_back_off_is_immediate_then_doubles_to_the_maximum_and_resets() -> None:
    now = [1000.0]
    backoff = BackOff(BackOffPolicy(10, 40), clock=lambda: now[0])
    assert backoff.remaining("k", now[0]) == 0  # first crash: restart at once
    backoff.next("k", now[0])
    now[0] += 1
    assert backoff.remaining("k", now[0]) == 10  # second crash a second later
    now[0] += 10
    assert backoff.remaining("k", now[0] - 10) == 0
    delays = []
    for _ in range(4):
        backoff.next("k", now[0])
        delays.append(backoff.get("k"))
    assert delays == [20, 40, 40, 40]
    now[0] += 81  # ran longer than twice the maximum: forgotten
    assert backoff.remaining("k", now[0]) == 0
    backoff.next("k", now[0])
    assert backoff.get("k") == 10


@pytest.mark.parametrize(("seconds", "text"), [
    (10, "10s"), (20, "20s"), (80, "1m20s"), (160, "2m40s"), (300, "5m0s"), (0.3, "300ms"),
    (1.5, "1.5s"), (3700, "1h1m40s")])
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_format_pod() -> None:
    assert format_pod(make_pod("c")) == "p_ns(u1)"


# --- logs ----------------------------------------------------------------------------------


def test_parse_cri_lines() -> None:
    line = parse_cri_line(b"2026-01-01T00:00:00.5Z stdout F hello world\n")
    assert line is not None
    assert (line.timestamp, line.stream, line.full, line.content) == (
        "2026-01-01T00:00:00.5Z", "stdout", True, b"hello world")
    partial = parse_cri_line(b"2026-01-01T00:00:00Z stderr P part")
    assert partial is not None and not partial.full and partial.stream == "stderr"
    assert parse_cri_line(b"garbage") is None


async def read(path: Path, **options: Any) -> bytes:
    out = bytearray()

    async def write(data: bytes) -> None:
        out.extend(data)

    await stream_log(path, LogOptions(**options), write)
    return bytes(out)


async def test_stream_log_options(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"2026-01-01T00:00:01Z stdout F one\n"
                     b"2026-01-01T00:00:02Z stderr P tw\n"
                     b"2026-01-01T00:00:02Z stderr F o\n"
                     b"2026-01-01T00:00:03Z stdout F three\n")
    assert await read(path) == b"one\ntwo\nthree\n"
    assert await read(path, tail_lines=1) == b"three\n"
    assert await read(path, tail_lines=0) == b""
    assert await read(path, timestamps=True, tail_lines=1) == \
        b"2026-01-01T00:00:03Z three\n"
    assert await read(path, limit_bytes=6) == b"one\ntw"
    since = 1767225602 * 1_000_000_000  # 2026-01-01T00:00:02Z
    assert await read(path, since_ns=since) == b"two\nthree\n"


async def test_follow_stops_when_the_container_stops(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"2026-01-01T00:00:01Z stdout F one\n")
    running = [True]
    out = bytearray()

    async def write(data: bytes) -> None:
        out.extend(data)

    async def still_running() -> bool:
        return running[0]

    task = asyncio.create_task(stream_log(path, LogOptions(follow=True), write, still_running))
    await asyncio.sleep(0.3)
    with path.open("ab") as f:
        f.write(b"2026-01-01T00:00:02Z stdout F two\n")
    await asyncio.sleep(0.3)
    assert bytes(out) == b"one\ntwo\n"
    running[0] = False
    await asyncio.wait_for(task, 5)


# --- container config ----------------------------------------------------------------------


def test_expand() -> None:
    env = {"A": "x", "B": "y"}
    assert containerconfig.expand("$(A)-$(B)", env) == "x-y"
    assert containerconfig.expand("$$(A) $(C) $(A", env) == "$(A) $(C) $(A"


def test_argv_merges_the_pod_and_the_image() -> None:
    image = (["/entry"], ["cmd", "arg"])
    assert containerconfig.build_argv({}, *image, {}) == ["/entry", "cmd", "arg"]
    assert containerconfig.build_argv({"args": ["a"]}, *image, {}) == ["/entry", "a"]
    assert containerconfig.build_argv({"command": ["sh"]}, *image, {}) == ["sh"]
    assert containerconfig.build_argv({"command": ["sh"], "args": ["$(X)"]}, *image,
                                      {"X": "1"}) == ["sh", "1"]


async def test_env_errors_and_optional_references() -> None:
    async def missing(ns: str, name: str) -> dict[str, Any] | None:
        return None

    async def present(ns: str, name: str) -> dict[str, Any] | None:
        return {"data": {"k": "v"}}

    pod = make_pod("c")
    ref = {"name": "E", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nope"}}}
    with pytest.raises(containerconfig.ContainerConfigError,
                       match=r"^couldn't find key nope in ConfigMap ns/cm$"):
        await containerconfig.build_env(pod, {"env": [ref]}, (), get_configmap=present,
                                        get_secret=missing, host_ip="", pod_ip="")
    with pytest.raises(containerconfig.ContainerConfigError, match=r'^secret "s" not found$'):
        await containerconfig.build_env(
            pod, {"envFrom": [{"secretRef": {"name": "s"}}]}, (), get_configmap=present,
            get_secret=missing, host_ip="", pod_ip="")
    ref["valueFrom"]["configMapKeyRef"]["optional"] = True
    env = await containerconfig.build_env(
        pod, {"env": [ref, {"name": "PATH", "value": "/x"},
                      {"name": "CPU", "valueFrom": {"resourceFieldRef": {
                          "resource": "limits.cpu"}}}]},
        (("PATH", "/bin"), ("HOME", "/root")), get_configmap=present, get_secret=missing,
        host_ip="10.0.0.1", pod_ip="", node_allocatable={"cpu": "2"})
    assert env == [("PATH", "/x"), ("HOME", "/root"), ("CPU", "2")]


def test_mounts_resolve_sub_paths_and_refuse_escapes(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    vol.mkdir()
    (vol / "link").symlink_to("/etc")
    pod = make_pod("c", volumes=[{"name": "v", "emptyDir": {}},
                                 {"name": "cm", "configMap": {"name": "x"}}])
    container = {"volumeMounts": [{"name": "v", "mountPath": "/a", "subPath": "x/y"},
                                  {"name": "v", "mountPath": "/b", "subPathExpr": "$(P)"},
                                  {"name": "cm", "mountPath": "/c"}]}
    mounts = containerconfig.build_mounts(pod, container, {"v": vol, "cm": tmp_path},
                                          {"P": "per-pod"})
    assert [(m.container_path, m.host_path, m.read_only, m.volume_name) for m in mounts] == [
        ("/a", str(vol / "x" / "y"), False, "v"), ("/b", str(vol / "per-pod"), False, "v"),
        ("/c", str(tmp_path), True, "cm")]
    assert (vol / "x" / "y").is_dir()
    for bad in ("../etc", "link"):
        with pytest.raises(containerconfig.ContainerConfigError):
            containerconfig.build_mounts(
                pod, {"volumeMounts": [{"name": "v", "mountPath": "/a", "subPath": bad}]},
                {"v": vol}, {})


# --- admission, node, node lifecycle --------------------------------------------------------


def test_admission_messages() -> None:
    def requesting(cpu: str) -> dict[str, Any]:
        pod = make_pod("c")
        pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
        return pod

    node = {"cpu": "2", "memory": "1Gi", "pods": "3"}
    assert admit(requesting("1"), [requesting("500m")], node, {}).admit
    result = admit(requesting("1500m"), [requesting("1")], node, {})
    assert (result.admit, result.reason, result.message) == (
        False, "OutOfcpu",
        "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000")
    full = admit(make_pod("c"), [make_pod("c")] * 3, node, {})
    assert (full.reason, full.message) == (
        "OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 3, "
        "capacity: 3")


def test_node_status(tmp_path: Path) -> None:
    builder = NodeStatusBuilder(NodeConfig("n1", tmp_path, {"DynamicContainers": True},
                                           kubelet_port=1234))
    status = builder.build(None, pressure=Pressure(disk=True))
    disk = next(c for c in status["conditions"] if c["type"] == "DiskPressure")
    assert (disk["status"], disk["reason"], disk["message"]) == (
        "True", "KubeletHasDiskPressure", "kubelet has disk pressure")
    assert status["declaredFeatures"] == ["DynamicContainers"]
    assert status["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"},
                                   {"type": "Hostname", "address": "n1"}]
    later = builder.build(status, pressure=Pressure(disk=True))
    assert next(c for c in later["conditions"] if c["type"] == "DiskPressure")[
        "lastTransitionTime"] == disk["lastTransitionTime"]
    defaults = parse_eviction_hard(None)
    assert allocatable({"memory": "1048576Ki", "ephemeral-storage": "1000Ki"},
                       lambda capacity: hard_eviction_reservation(defaults, capacity)) == {
        "memory": "924Mi", "ephemeral-storage": "900Ki"}  # Quantity arithmetic, as upstream
    assert allocatable({"memory": "1Gi"}) == {"memory": "1Gi"}  # nothing held back


def test_node_lifecycle_decisions() -> None:
    node = {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "mine",
                                                            "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady"}]}}
    conditions = unknown_conditions(node, NOW)
    assert conditions is not None
    by_type = {c["type"]: c for c in conditions}
    assert (by_type["Ready"]["status"], by_type["Ready"]["reason"],
            by_type["Ready"]["message"]) == ("Unknown", "NodeStatusUnknown",
                                             "Kubelet stopped posting node status.")
    assert by_type["DiskPressure"]["reason"] == "NodeStatusNeverUpdated"
    node["status"]["conditions"] = conditions
    assert unknown_conditions(node, NOW) is None
    taints = desired_taints(node, NOW)
    # every taint added carries timeAdded (upstream's SwapNodeControllerTaint)
    assert taints == [{"key": "mine", "effect": "NoSchedule"},
                      {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule",
                       "timeAdded": NOW},
                      {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                       "timeAdded": NOW}]
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert desired_taints(node, NOW) == [{"key": "mine", "effect": "NoSchedule"}]

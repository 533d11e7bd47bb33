"""The kubelet inside a real `ephemera up`, with the real OCI runtime (crun where it works on
this host, else runc), met through kubectl: every node-local volume type seen from inside a
busybox container and read back with `kubectl logs`; a Secret update reaching the files;
restart policies and CrashLoopBackOff; `kubectl logs -f`, `--previous`, `-c`; a volume that
cannot be mounted (FailedMount); the kubelet killed with SIGKILL and adopting the running
containers; and `kubectl delete` leaving no mount, runtime state or directory behind.

One cluster per module; each test uses its own namespace and deletes its pods, and the
module's teardown checks that nothing is left (mounts, runtime state, pod directories)."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    Cluster,
    Kubectl,
    assert_kubelet_clean,
    container,
    entries,
    mounts_under,
    namespaced_kubectl,
    pod_json,
    run_kubelet_cluster,
    wait,
    wait_pod,
)

pytestmark = pytest.mark.e2e

def _assert_clean(cluster: Cluster) -> None:
    assert_kubelet_clean(cluster, logs_and_runtime=True)


@pytest.fixture(scope="module")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from run_kubelet_cluster(tmp_path_factory, "kubelet-cluster", "e2e-node",
                                   after_delete=_assert_clean)


@pytest.fixture
def k(node_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
      ) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(node_cluster, tmp_path, request)


def create(k: Kubectl, *objects: dict[str, Any]) -> None:
    k("create", "-f", "-", input=yaml.safe_dump_all(objects))


def phase_is(expected: str) -> Callable[[dict[str, Any]], bool]:
    return lambda p: p.get("status", {}).get("phase") == expected


def busybox_pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", script]}], **spec}}


SHOW_VOLUMES = r"""
echo "empty=$(cat /scratch/seed 2>/dev/null || echo none)"; echo hi > /scratch/f
echo "mem=$(grep ' /mem ' /proc/mounts | cut -d' ' -f3,4 | cut -d, -f1-2)"
echo "cm=$(cat /cm/greeting)"; echo "cm-link=$(readlink /cm/greeting)"
echo "secret=$(cat /sec/password)"; echo "secret-fs=$(grep ' /sec ' /proc/mounts | cut -d' ' -f3)"
echo "labels=$(cat /dapi/labels)"; echo "podname=$(cat /dapi/name)"
echo "proj=$(cat /proj/greeting)/$(cat /proj/password)/$(cat /proj/ns)"
echo "img=$(ls /img/bin/busybox)"; touch /img/x 2>/dev/null || echo "img-ro=yes"
touch /cm/x 2>/dev/null || echo "cm-ro=yes"
echo "sub=$(cat /sub/deep 2>/dev/null || echo empty)"
sleep 3600
"""


def test_every_volume_type_seen_from_the_container(k: Kubectl) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"},
          "data": {"greeting": "hello-cm"}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
              "stringData": {"password": "s3cr3t"}}
    body = busybox_pod("vols", SHOW_VOLUMES, volumes=[
        {"name": "scratch", "emptyDir": {}},
        {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        {"name": "cm", "configMap": {"name": "cm1"}},
        {"name": "sec", "secret": {"secretName": "s1"}},
        {"name": "dapi", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
        {"name": "proj", "projected": {"sources": [
            {"configMap": {"name": "cm1", "items": [{"key": "greeting", "path": "greeting"}]}},
            {"secret": {"name": "s1"}},
            {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {
                "fieldPath": "metadata.namespace"}}]}}]}},
        {"name": "img", "image": {"reference": "busybox", "pullPolicy": "IfNotPresent"}}])
    body["metadata"]["labels"] = {"app": "demo"}
    body["spec"]["containers"][0]["volumeMounts"] = [
        {"name": n, "mountPath": f"/{p}"} for n, p in (
            ("scratch", "scratch"), ("mem", "mem"), ("cm", "cm"), ("sec", "sec"),
            ("dapi", "dapi"), ("proj", "proj"), ("img", "img"))] + [
        {"name": "scratch", "mountPath": "/sub", "subPath": "a/b"}]
    create(k, cm, secret, body)
    p = wait_pod(k, "vols", phase_is("Running"), "Running")
    wait(lambda: "sub=" in k("logs", "vols").stdout, "the script's output", k.cluster)
    out = k("logs", "vols", "-c", "c").stdout
    ns = k.namespace
    for line in ("empty=none", "mem=tmpfs rw,nosuid", "cm=hello-cm",
                 "cm-link=..data/greeting", "secret=s3cr3t", "secret-fs=tmpfs",
                 'labels=app="demo"', "podname=vols", f"proj=hello-cm/s3cr3t/{ns}",
                 "img=/img/bin/busybox", "img-ro=yes", "cm-ro=yes", "sub=empty"):
        assert line in out.splitlines(), f"{line!r} not in:\n{out}"
    mounts = container(p)["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/scratch", "/mem", "/cm", "/sec", "/dapi",
                                                "/proj", "/img", "/sub"]
    # the emptyDir really is the host dir the kubelet made
    uid = p["metadata"]["uid"]
    host = k.cluster.data_dir / "kubelet" / "pods" / uid / "volumes"
    assert (host / "kubernetes.io~empty-dir" / "scratch" / "f").read_text() == "hi\n"
    assert (host / "kubernetes.io~empty-dir" / "scratch" / "a" / "b").is_dir()

    # a Secret update reaches the files within a sync period, as the container sees them
    assert k("exec", "vols", "--", "cat", "/sec/password").stdout == "s3cr3t"
    k("patch", "secret", "s1", "-p", json.dumps({"stringData": {"password": "n3w"}}))
    wait(lambda: k("exec", "vols", "--", "cat", "/sec/password", check=False).stdout == "n3w",
         "the new secret in the container", k.cluster)


def test_restart_policy_always_backs_off(k: Kubectl) -> None:
    create(k, busybox_pod("crash", "echo run $(cat /proc/uptime); exit 3"))
    p = wait_pod(k, "crash", lambda p: container(p).get("state", {}).get("waiting", {}).get(
        "reason") == "CrashLoopBackOff", "CrashLoopBackOff")
    c = container(p)
    assert c["restartCount"] >= 1
    uid = p["metadata"]["uid"]
    assert re.fullmatch(rf"back-off \d+s restarting failed container=c pod=crash_"
                        rf"{k.namespace}\({uid}\)", c["state"]["waiting"]["message"])
    assert c["lastState"]["terminated"]["exitCode"] == 3
    assert p["status"]["phase"] == "Running"
    assert "CrashLoopBackOff" in k("get", "pod", "crash").stdout
    previous = k("logs", "crash", "--previous").stdout
    assert previous.startswith("run ")
    events = k("get", "events", "--field-selector", "involvedObject.name=crash",
               "-o", "json")
    reasons = {e["reason"] for e in json.loads(events.stdout)["items"]}
    assert {"Created", "Started", "BackOff"} <= reasons


def test_restart_policies_never_and_on_failure(k: Kubectl) -> None:
    create(k, busybox_pod("never", "exit 4", restartPolicy="Never"),
           busybox_pod("onfail", "exit 0", restartPolicy="OnFailure"))
    p = wait_pod(k, "never", phase_is("Failed"), "Failed")
    assert container(p)["state"]["terminated"]["exitCode"] == 4
    assert container(p)["restartCount"] == 0
    p = wait_pod(k, "onfail", phase_is("Succeeded"), "Succeeded")
    assert container(p)["state"]["terminated"]["reason"] == "Completed"


def test_logs_follow_previous_and_container(k: Kubectl) -> None:
    body = busybox_pod("talk", "for i in 1 2 3; do echo line $i; sleep 0.5; done",
                       restartPolicy="Never")
    body["spec"]["containers"].append({"name": "side", "image": "busybox",
                                       "command": ["sh", "-c", "echo from side"]})
    create(k, body)
    wait_pod(k, "talk", lambda p: container(p).get("state", {}).get("running")
             or container(p).get("state", {}).get("terminated"), "started")
    follow = k("logs", "-f", "talk", "-c", "c", timeout=30)
    assert follow.stdout == "line 1\nline 2\nline 3\n"
    wait_pod(k, "talk", phase_is("Succeeded"), "Succeeded")
    assert k("logs", "talk", "-c", "side").stdout == "from side\n"
    assert k("logs", "talk", "-c", "c", "--tail=1").stdout == "line 3\n"
    stamped = k("logs", "talk", "-c", "c", "--timestamps").stdout.splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z line 1", stamped[0])
    missing = k("logs", "talk", "-c", "c", "--previous", check=False)
    assert missing.returncode != 0
    assert 'previous terminated container "c" in pod "talk" not found' in missing.stderr


def test_a_volume_that_cannot_be_mounted_says_why(k: Kubectl) -> None:
    body = busybox_pod("bad", "sleep 3600",
                       volumes=[{"name": "cm", "configMap": {"name": "missing"}}])
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "cm", "mountPath": "/cm"}]
    create(k, body)

    def failed_mount() -> bool:
        events = json.loads(k("get", "events", "--field-selector",
                              "involvedObject.name=bad", "-o", "json").stdout)["items"]
        return any(e["reason"] == "FailedMount" and e["message"] ==
                   'MountVolume.SetUp failed for volume "cm" : configmap "missing" not found'
                   for e in events)

    wait(failed_mount, "the FailedMount event", k.cluster)
    # The status is written on its own schedule, not ordered with the event.
    p = wait_pod(k, "bad", lambda p: "state" in container(p), "a container status")
    assert p["status"]["phase"] == "Pending"
    assert container(p)["state"]["waiting"]["reason"] == "ContainerCreating"
    logs = k("logs", "bad", check=False)
    assert 'container "c" in pod "bad" is waiting to start: ContainerCreating' in logs.stderr
    describe = k("describe", "pod", "bad").stdout
    assert "FailedMount" in describe


def test_the_kubelet_killed_adopts_running_containers(k: Kubectl) -> None:
    create(k, busybox_pod("survivor", "sleep 3600"))
    before = container(wait_pod(k, "survivor", phase_is("Running"), "Running"))
    cluster = k.cluster
    old_pid = cluster.pid_of("kubelet")
    os.kill(old_pid, signal.SIGKILL)
    wait(lambda: _pid_changed(cluster, old_pid), "a new kubelet", cluster)
    # the new kubelet works (it starts a new pod) ...
    create(k, busybox_pod("newcomer", "sleep 3600"))
    wait_pod(k, "newcomer", phase_is("Running"), "Running")
    # ... and left the old container alone
    after = container(pod_json(k, "survivor"))
    assert after["containerID"] == before["containerID"]
    assert after["restartCount"] == before["restartCount"] == 0
    assert after["state"]["running"]["startedAt"] == before["state"]["running"]["startedAt"]


def _pid_changed(cluster: Cluster, old: int) -> bool:
    try:
        return cluster.pid_of("kubelet") != old
    except (OSError, ValueError):
        return False


def test_delete_leaves_nothing_behind(k: Kubectl) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s2"},
              "stringData": {"k": "v"}}
    body = busybox_pod("tidy", "sleep 3600", volumes=[
        {"name": "mem", "emptyDir": {"medium": "Memory"}},
        {"name": "sec", "secret": {"secretName": "s2"}},
        {"name": "img", "image": {"reference": "busybox"}}])
    body["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "mem", "mountPath": "/mem"}, {"name": "sec", "mountPath": "/sec"},
        {"name": "img", "mountPath": "/img"}]
    create(k, secret, body)
    p = wait_pod(k, "tidy", phase_is("Running"), "Running")
    uid = p["metadata"]["uid"]
    kubelet_dir = k.cluster.data_dir / "kubelet"
    assert any(uid in m for m in mounts_under(kubelet_dir))
    k("delete", "pod", "tidy", timeout=60)
    assert k("get", "pod", "tidy", check=False).returncode != 0
    assert not [m for m in mounts_under(kubelet_dir) if uid in m]
    assert not (kubelet_dir / "pods" / uid).exists()
    assert not [d for d in entries(kubelet_dir / "logs" / "pods") if uid in d]
    container_id = container(p)["containerID"].split("://", 1)[1]
    leftovers = [str(path) for path in (kubelet_dir / "runtime").rglob("*")
                 if container_id in path.name or uid in path.name]
    assert not leftovers

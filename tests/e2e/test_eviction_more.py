"""More of the eviction manager in a real `ephemera up --eviction-interval 1` with real
containers, through kubectl: the KEP-6386 test-plan cases and the per-container check.

- a container over its own ephemeral-storage limit (the pod's total within the sum of
  limits): `Container c1 exceeded its local ephemeral storage limit "4Mi". `;
- KEP-6386 "Pod-Level Ephemeral Storage Limit Eviction": pod limit 100Mi, 60Mi written to a
  container's writable layer and 50Mi to a shared emptyDir by another container:
  `Evicted: Pod ephemeral local storage usage (<used>) exceeds pod-level limit (100Mi)`;
- KEP-6386 "Eviction Precedence with emptyDir.sizeLimit": pod limit 200Mi, an emptyDir with
  `sizeLimit: 50Mi`, 60Mi written to it: the emptyDir message wins;
- a pod whose emptyDir, added through `PUT .../pods/NAME/dynamic` (KEP-6395, `kubectl replace
  --subresource=dynamic`), takes it past its pod-level limit;
- KEP-6386 "Scheduling Fit": a pod-level request larger than the node stays Pending with
  `Insufficient ephemeral-storage`;
- KEP-6386 "Disk Pressure Eviction Priority", on a cluster of its own whose data dir is a
  small tmpfs: under `nodefs.available<120Mi` the pod using more than its pod-level request
  is evicted (upstream's message, the `Evicted` event's annotations, the node's
  `EvictionThresholdMet` event and DiskPressure condition) and the pod within its request
  keeps running; the next pass reclaims the evicted pod's dead container instead of
  evicting again.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    Cluster,
    Kubectl,
    namespaced_kubectl,
    node_ready,
    run_kubelet_cluster,
    start_cluster,
    wait,
    wait_pod,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("eviction-more")]

NODE = "evict-more-node"
PRESSURE_NODE = "pressure-node"


@pytest.fixture(scope="module")
def more_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from run_kubelet_cluster(tmp_path_factory, "eviction-more-cluster", NODE,
                                   ["--eviction-interval", "1"])


@pytest.fixture
def k(more_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
      ) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(more_cluster, tmp_path, request)


def busybox(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "command": ["sh", "-c", script], **extra}


def pod_body(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": list(containers),
                     **spec}}


def create(k: Kubectl, body: dict[str, Any]) -> None:
    k("create", "-f", "-", input=yaml.safe_dump(body))


def failed(p: dict[str, Any]) -> bool:
    return p["status"].get("phase") == "Failed"


def evicted_events(k: Kubectl, name: str) -> list[dict[str, Any]]:
    events = k.json("get", "events", "--field-selector", f"involvedObject.name={name}")
    return [e for e in events["items"] if e["reason"] == "Evicted"]


def fill(path: str, mib: int) -> str:
    return f"dd if=/dev/zero of={path} bs=1M count={mib} 2>/dev/null"


SCRATCH = {"name": "scratch", "mountPath": "/scratch"}
SLEEP = "trap 'exit 0' TERM; while true; do sleep 0.2; done"


def test_a_container_over_its_own_limit(k: Kubectl) -> None:
    """The pod's total (6Mi) is within the sum of the limits (104Mi): the per-container
    check is the one that hits."""
    limit = {"resources": {"limits": {"ephemeral-storage": "4Mi"}}}
    roomy = {"resources": {"limits": {"ephemeral-storage": "100Mi"}}}
    create(k, pod_body("greedy", busybox("c1", f"{fill('/tmp/layer', 6)}; {SLEEP}", **limit),
                       busybox("c2", SLEEP, **roomy)))
    evicted = wait_pod(k, "greedy", failed, "evicted")
    message = 'Container c1 exceeded its local ephemeral storage limit "4Mi". '
    assert (evicted["status"]["reason"], evicted["status"]["message"]) == ("Evicted", message)
    assert [(e["type"], e["message"]) for e in evicted_events(k, "greedy")] == [
        ("Warning", message)]


def pod_level_message(p: dict[str, Any], limit: str) -> int:
    """The usage (bytes) in KEP-6386's message, which must name `limit`."""
    match = re.fullmatch(r"Evicted: Pod ephemeral local storage usage \((\d+)(Ki|Mi)\) exceeds "
                         rf"pod-level limit \({limit}\)", p["status"]["message"])
    assert match is not None, p["status"]["message"]
    return int(match.group(1)) << (10 if match.group(2) == "Ki" else 20)


def test_kep6386_pod_level_limit_of_a_multi_container_pod(k: Kubectl) -> None:
    """Test plan: limit 100Mi; 60Mi in a writable layer and 50Mi in a shared emptyDir."""
    create(k, pod_body(
        "shared", busybox("writer", f"{fill('/tmp/layer', 60)}; {SLEEP}"),
        busybox("filler", f"sleep 1; {fill('/scratch/vol', 50)}; {SLEEP}",
                volumeMounts=[SCRATCH]),
        volumes=[{"name": "scratch", "emptyDir": {}}],
        resources={"limits": {"ephemeral-storage": "100Mi"}}))
    evicted = wait_pod(k, "shared", failed, "evicted")
    assert evicted["status"]["reason"] == "Evicted"
    assert pod_level_message(evicted, "100Mi") > 100 << 20
    assert [e["message"] for e in evicted_events(k, "shared")] == [
        evicted["status"]["message"]]


def test_kep6386_empty_dir_size_limit_wins_over_the_pod_level_limit(k: Kubectl) -> None:
    """Test plan: limit 200Mi, an emptyDir with sizeLimit 50Mi, 60Mi written to it."""
    create(k, pod_body("capped", busybox("c", f"{fill('/scratch/vol', 60)}; {SLEEP}",
                                         volumeMounts=[SCRATCH]),
                       volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "50Mi"}}],
                       resources={"limits": {"ephemeral-storage": "200Mi"}}))
    evicted = wait_pod(k, "capped", failed, "evicted")
    message = 'Usage of EmptyDir volume "scratch" exceeds the limit "50Mi". '
    assert (evicted["status"]["reason"], evicted["status"]["message"]) == ("Evicted", message)


def test_a_dynamically_added_empty_dir_takes_the_pod_past_its_limit(
        k: Kubectl, tmp_path: Path) -> None:
    script = (f"[ -f /keep/base ] || {fill('/keep/base', 10)}; "
              f"if [ -d /extra ]; then {fill('/extra/more', 10)}; fi; echo ready; {SLEEP}")
    create(k, pod_body("grows", busybox("c", script,
                                        dynamicVolumePolicy={"restartPolicy": "RestartContainer"},
                                        volumeMounts=[{"name": "keep", "mountPath": "/keep"}]),
                       volumes=[{"name": "keep", "emptyDir": {}}],
                       resources={"limits": {"ephemeral-storage": "16Mi"}}))
    wait(lambda: "ready" in k("logs", "grows", check=False).stdout, "10Mi written", k.cluster)
    assert k.json("get", "pod", "grows")["status"]["phase"] == "Running"
    # PUT /dynamic: the pod as that subresource shows it, with a volume and a mount added.
    current = k.json("get", "pod", "grows", "--subresource=dynamic")
    current["spec"]["volumes"].append({"name": "extra", "emptyDir": {}})
    current["spec"]["containers"][0]["volumeMounts"].append(
        {"name": "extra", "mountPath": "/extra"})
    edited = tmp_path / "grows.json"
    edited.write_text(json.dumps(current))
    assert k("replace", "--subresource=dynamic", "-f", str(edited)).stdout == \
        "pod/grows replaced\n"
    evicted = wait_pod(k, "grows", failed, "evicted")
    assert evicted["status"]["reason"] == "Evicted"
    assert pod_level_message(evicted, "16Mi") > 16 << 20


def test_kep6386_a_pod_level_request_bigger_than_the_node_stays_pending(k: Kubectl) -> None:
    create(k, pod_body("huge", busybox("c", SLEEP),
                       resources={"requests": {"ephemeral-storage": "100Ti"}}))

    def unschedulable() -> dict[str, Any] | None:
        p = k.json("get", "pod", "huge")
        for c in p["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                return dict(c)
        return None

    condition = wait(unschedulable, "the Unschedulable condition", k.cluster)
    assert condition["status"] == "False"
    assert condition["message"].startswith(
        "0/1 nodes are available: 1 Insufficient ephemeral-storage. preemption: 0/1 nodes "
        "are available: 1 "), condition["message"]
    p = k.json("get", "pod", "huge")
    assert p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName")


# --- node disk pressure, on a cluster of its own -------------------------------------------


@pytest.fixture
def pressure_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """`ephemera up` whose data dir is a 256Mi tmpfs, with `nodefs.available<120Mi`."""
    data = tmp_path / "data"
    data.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(data)],
                   check=True)
    try:
        running = start_cluster(data, tmp_path / "home", [
            "--node-name", PRESSURE_NODE, "--eviction-interval", "1",
            "--eviction-hard", "nodefs.available<120Mi"])
        try:
            wait(lambda: node_ready(running, PRESSURE_NODE), "the node to be Ready", running)
            yield running
            running.kubectl("delete", "pods", "--all", "--all-namespaces",
                            "--grace-period=1", "--wait=true", timeout=120)
        finally:
            code = running.stop()
            assert code == 0, f"ephemera up exited {code}\n{running.output}"
    finally:
        subprocess.run(["umount", "-l", str(data)], check=True)


def kubelet_log(cluster: Cluster) -> str:
    return (cluster.data_dir / "logs" / "kubelet.log").read_text(errors="replace")


def test_kep6386_disk_pressure_spares_the_pod_within_its_pod_level_request(
        pressure_cluster: Cluster, tmp_path: Path) -> None:
    kc = Kubectl(pressure_cluster, tmp_path / "kubectl-home", "default")
    kc.home.mkdir()
    ready = f"{fill('/tmp/layer', 40)}; echo ready; {SLEEP}"
    create(kc, pod_body("within", busybox("c", ready),
                        resources={"requests": {"ephemeral-storage": "100Mi"}}))
    create(kc, pod_body("above", busybox("c", ready),
                        resources={"requests": {"ephemeral-storage": "10Mi"}}))
    for name in ("within", "above"):
        wait(lambda n=name: "ready" in kc("logs", n, check=False).stdout,  # type: ignore[misc]
             f"{name} to write 40Mi", pressure_cluster)
    # 80Mi more in "above" leaves less than 120Mi of the 256Mi.
    kc("exec", "above", "--", "sh", "-c", fill("/tmp/more", 80), timeout=120)
    evicted = wait_pod(kc, "above", failed, "evicted")
    assert evicted["status"]["reason"] == "Evicted"
    message = evicted["status"]["message"]
    match = re.fullmatch(
        r"The node was low on resource: ephemeral-storage\. Threshold quantity: 120Mi, "
        r"available: (\d+)Ki\. Container c was using (\d+(?:Ki|Mi)), request is 0, "
        r"has larger consumption of ephemeral-storage\. ", message)
    assert match is not None, message
    assert int(match.group(1)) < 120 * 1024
    conditions = {c["type"]: c for c in evicted["status"].get("conditions") or []}
    assert conditions["DisruptionTarget"]["reason"] == "TerminationByKubelet"
    [event] = evicted_events(kc, "above")
    assert (event["type"], event["message"]) == ("Warning", message)
    assert event["metadata"]["annotations"] == {
        "offending_containers": "c", "offending_containers_usage": match.group(2),
        "starved_resource": "ephemeral-storage"}
    node = kc.json("get", "node", PRESSURE_NODE)
    disk = [c for c in node["status"]["conditions"] if c["type"] == "DiskPressure"]
    assert disk[0]["status"] == "True"
    node_events = kc.json("get", "events", "--field-selector", "involvedObject.kind=Node")
    assert ("Warning", "Attempting to reclaim ephemeral-storage") in [
        (e["type"], e["message"]) for e in node_events["items"]
        if e["reason"] == "EvictionThresholdMet"]
    log = kubelet_log(pressure_cluster)
    assert "Eviction manager: attempting to reclaim resourceName=ephemeral-storage" in log
    assert "Eviction manager: must evict pod(s) to reclaim resourceName=ephemeral-storage" in log
    # The next pass removes the evicted pod's dead container (its 120Mi writable layer):
    # pressure relieved without a second eviction.
    wait(lambda: "Eviction manager: able to reduce resource pressure without evicting pods."
         in kubelet_log(pressure_cluster), "reclaim without eviction", pressure_cluster)
    within = kc.json("get", "pod", "within")
    assert within["status"]["phase"] == "Running"
    assert not evicted_events(kc, "within")

"""Deployments end to end: one `ephemera up --runtime fake` for the module (the runtime is
not what is tested), the real kubectl as a user drives it. A Deployment of 3 rolls out,
scales to 10 and to 1, rolls a new template and back with `maxSurge` and `maxUnavailable`
held at every moment (checked on a pod watch, event by event), shows its revisions, events
and `get all`; a `kill -9` of the controller-manager during a scale-up ends with exactly the
desired pods."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster, Kubectl, namespace_for, start_cluster, wait
from kubernetes import client, config, watch

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("workloads")]


@pytest.fixture(scope="module")
def fake_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("workloads")
    running = start_cluster(base / "data", base / "home", ["--runtime", "fake"])
    try:
        yield running
    finally:
        code = running.stop()
        assert code == 0, f"ephemera up exited {code}\n{running.output}"


@pytest.fixture
def k(fake_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> Kubectl:
    namespace = namespace_for(request.node.name)
    runner = Kubectl(fake_cluster, tmp_path / "home", namespace)
    runner.home.mkdir()
    runner("create", "namespace", namespace)
    return runner


def live_pods(k: Kubectl, prefix: str) -> list[dict[str, Any]]:
    return [p for p in k.json("get", "pods")["items"]
            if p["metadata"]["name"].startswith(prefix)
            and not p["metadata"].get("deletionTimestamp")]


def rollout(k: Kubectl, name: str) -> None:
    out = k("rollout", "status", f"deployment/{name}", "--timeout=90s", timeout=120).stdout
    assert out.strip().endswith(f'deployment "{name}" successfully rolled out'), out


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True"
               for c in (pod.status.conditions or []))


@dataclass
class PodWatch:
    """Every pod of a namespace, as a watch reports it, event by event; after each event,
    the live (not terminating) pods and the ready ones among them are counted."""

    api: client.ApiClient
    namespace: str
    pods: dict[str, Any] = field(default_factory=dict)
    counts: list[tuple[int, int]] = field(default_factory=list)  # (live, live and ready)
    stop: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    error: list[BaseException] = field(default_factory=list)

    def run(self) -> None:
        v1 = client.CoreV1Api(self.api)
        try:
            listed = v1.list_namespaced_pod(self.namespace, label_selector="app=web")
            for pod in listed.items:
                self.pods[pod.metadata.name] = pod
            self._count()
            self.started.set()
            w = watch.Watch()
            for event in w.stream(v1.list_namespaced_pod, self.namespace,
                                  label_selector="app=web",
                                  resource_version=listed.metadata.resource_version,
                                  timeout_seconds=120):
                pod = event["object"]
                if event["type"] == "DELETED":
                    self.pods.pop(pod.metadata.name, None)
                else:
                    self.pods[pod.metadata.name] = pod
                self._count()
                if self.stop.is_set():
                    w.stop()
        except BaseException as err:  # reported by the test
            self.error.append(err)
            self.started.set()

    def _count(self) -> None:
        live = [p for p in self.pods.values() if p.metadata.deletion_timestamp is None]
        self.counts.append((len(live), sum(1 for p in live if _ready(p))))


def test_deployment_rollout_scale_and_rollback(k: Kubectl, fake_cluster: Cluster) -> None:
    assert k("create", "deployment", "web", "--image=busybox", "--replicas=3", "--",
             "sleep", "3600").stdout == "deployment.apps/web created\n"
    rollout(k, "web")
    row = re.split(r"\s{2,}", k("get", "deployment", "web").stdout.splitlines()[1])
    assert row[:4] == ["web", "3/3", "3", "3"]
    assert len(live_pods(k, "web-")) == 3

    assert k("scale", "deployment", "web", "--replicas=10").stdout == \
        "deployment.apps/web scaled\n"
    rollout(k, "web")
    assert len(live_pods(k, "web-")) == 10
    k("scale", "deployment", "web", "--replicas=1")
    wait(lambda: len(live_pods(k, "web-")) == 1, "a scale-down to 1")

    # 4 replicas, at most 1 extra and 1 missing pod while a new template rolls out
    k("patch", "deployment", "web", "--type=merge", "-p",
      '{"spec":{"replicas":4,"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":1}}}}')
    rollout(k, "web")
    api = config.new_client_from_config(config_file=str(fake_cluster.kubeconfig))
    watcher = PodWatch(api, str(k.namespace))
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    assert watcher.started.wait(30) and not watcher.error, watcher.error
    k("set", "image", "deployment/web", "busybox=docker.io/library/busybox:latest")
    rollout(k, "web")
    k("rollout", "undo", "deployment/web")
    rollout(k, "web")
    wait(lambda: len(live_pods(k, "web-")) == 4 and len(k.json("get", "pods")["items"]) == 4,
         "the old pods to go")
    watcher.stop.set()
    k("label", "pod", live_pods(k, "web-")[0]["metadata"]["name"], "touch=1")  # an event
    thread.join(30)
    api.close()
    assert not watcher.error, watcher.error
    assert len(watcher.counts) > 12
    assert max(live for live, _ in watcher.counts) <= 4 + 1, watcher.counts
    assert min(ready for _, ready in watcher.counts) >= 4 - 1, watcher.counts

    history = k("rollout", "history", "deployment/web").stdout
    revisions = [line.split()[0] for line in history.splitlines()[2:] if line.strip()]
    assert revisions == ["2", "3"], history
    images = {p["spec"]["containers"][0]["image"] for p in live_pods(k, "web-")}
    assert images == {"busybox"}
    sets = k.json("get", "replicasets")["items"]
    assert sorted(rs["spec"]["replicas"] for rs in sets) == [0, 4]

    described = k("describe", "deployment", "web").stdout
    assert "Progressing    True    NewReplicaSetAvailable" in described
    assert re.search(r"ScalingReplicaSet\s+.*deployment-controller\s+Scaled up replica set "
                     r"web-[a-z0-9]+ from 0 to", described), described
    listed = k("get", "all").stdout
    assert "deployment.apps/web" in listed and "replicaset.apps/web-" in listed
    assert "pod/web-" in listed


def test_kill_controller_manager_during_scale_up(k: Kubectl, fake_cluster: Cluster) -> None:
    k("create", "deployment", "burst", "--image=busybox", "--replicas=1", "--", "sleep",
      "3600")
    rollout(k, "burst")
    old = fake_cluster.pid_of("controller-manager")
    k("scale", "deployment", "burst", "--replicas=30")
    wait(lambda: len(live_pods(k, "burst-")) >= 2, "the scale-up to start", timeout=30)
    os.kill(old, signal.SIGKILL)
    at_kill = len(live_pods(k, "burst-"))
    # the dead leader's Lease would hold the restarted one back for its 15 s; an operator
    # may delete it (what is tested is the controllers' restart, not the election)
    fake_cluster.kubectl("delete", "lease", "-n", "kube-system", "kube-controller-manager",
                         home=k.home)
    wait(lambda: fake_cluster.pid_of("controller-manager") != old,
         "the controller-manager to be restarted", timeout=30)
    rollout(k, "burst")
    assert len(live_pods(k, "burst-")) == 30, f"{at_kill} pods when it was killed"
    time.sleep(1)  # nothing more comes
    pods = k.json("get", "pods")["items"]
    assert len([p for p in pods if p["metadata"]["name"].startswith("burst-")]) == 30


POOL = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: pool}
spec:
  replicas: 2
  selector: {matchLabels: {app: pool}}
  template:
    metadata: {labels: {app: pool}}
    spec:
      containers:
      - name: worker
        image: busybox
        command: [sleep, "3600"]
        dynamicVolumePolicy: {restartPolicy: RestartContainer}
"""


def test_dynamic_volumes_keep_the_pod_a_replica(k: Kubectl) -> None:
    """KEP-6395 with a Deployment: a pod that got a volume through `/dynamic` keeps its
    ReplicaSet, its pod-template-hash and its place as a replica (nothing replaces it); a
    rollout replaces it with pods that have the template's volumes only."""
    k("apply", "-f", "-", input=POOL)
    rollout(k, "pool")
    before = live_pods(k, "pool-")
    assert len(before) == 2
    target = before[0]
    name, uid = target["metadata"]["name"], target["metadata"]["uid"]
    patch = [{"op": "add", "path": "/spec/volumes", "value": [
                 {"name": "scratch", "emptyDir": {}}]},
             {"op": "add", "path": "/spec/containers/0/volumeMounts", "value": [
                 {"name": "scratch", "mountPath": "/scratch"}]}]
    k("patch", "pod", name, "--subresource=dynamic", "--type=json", "-p", json.dumps(patch))

    def mounted() -> bool:
        pod = k.json("get", "pod", name)
        return any(v.get("name") == "scratch" and v.get("hostPhase") == "HostMounted"
                   for v in pod["status"].get("volumeStatuses") or [])
    wait(mounted, "the dynamic volume to be mounted")
    time.sleep(1)  # the controllers have seen the change
    after = {p["metadata"]["name"]: p for p in live_pods(k, "pool-")}
    assert set(after) == {p["metadata"]["name"] for p in before}
    changed = after[name]
    assert changed["metadata"]["uid"] == uid
    assert changed["metadata"]["labels"] == target["metadata"]["labels"]
    assert changed["metadata"]["ownerReferences"] == target["metadata"]["ownerReferences"]
    (rs,) = k.json("get", "replicasets")["items"]
    assert (rs["status"]["replicas"], rs["status"].get("readyReplicas")) == (2, 2)

    k("rollout", "restart", "deployment/pool")
    rollout(k, "pool")
    wait(lambda: name not in {p["metadata"]["name"] for p in k.json("get", "pods")["items"]},
         "the changed pod to be replaced")
    fresh = live_pods(k, "pool-")
    assert len(fresh) == 2
    assert all(not p["spec"].get("volumes") for p in fresh)

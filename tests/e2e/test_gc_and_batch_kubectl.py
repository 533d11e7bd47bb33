"""The garbage collector and batch/v1 as a kubectl user meets them, on one `ephemera up` with
the fake runtime (the runtime is not what is tested; `command: [exit, N]` ends a container
with code N): `kubectl delete --cascade=background|foreground|orphan` of a ConfigMap that
owns a ConfigMap and a Pod leaves what upstream leaves; a Job of 5 completions, 2 at a
time, completes; one past its backoff limit fails with upstream's condition; `kubectl
create cronjob` and `kubectl create job --from=cronjob/NAME`. (The CronJob's own runs on its
schedule are tested on a driven clock in tests/integration/test_cronjob_controller.py: a
real `*/1` schedule needs two minutes for two runs.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster, Kubectl, namespace_for, start_cluster, wait

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("gc-batch")]


@pytest.fixture(scope="module")
def gc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("gc-cluster")
    running = start_cluster(base / "data", base / "home", ["--runtime", "fake"])
    try:
        yield running
    finally:
        code = running.stop()
        assert code == 0, f"ephemera up exited {code}\n{running.output}"


@pytest.fixture
def k(gc_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> Kubectl:
    runner = Kubectl(gc_cluster, tmp_path / "home", namespace_for(request.node.name))
    runner.home.mkdir()
    runner("create", "namespace", str(runner.namespace))
    return runner


def owned(k: Kubectl, *, hold: bool = False) -> dict[str, Any]:
    """ConfigMap `owner` with dependents: ConfigMap `dep` (blocking its owner's deletion,
    and held by a finalizer of its own with `hold`) and Pod `worker`; and an ownerless
    ConfigMap `free`."""
    k("create", "configmap", "owner")
    k("create", "configmap", "free")
    owner = k.json("get", "configmap", "owner")
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
           "uid": owner["metadata"]["uid"]}
    dep_md: dict[str, Any] = {"name": "dep",
                              "ownerReferences": [{**ref, "blockOwnerDeletion": True}]}
    if hold:
        dep_md["finalizers"] = ["example.com/hold"]
    items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": dep_md},
             {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "worker", "ownerReferences": [ref]},
              "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}]
    for item in items:
        k("create", "-f", "-", input=json.dumps(item))
    return owner


def names(k: Kubectl) -> set[str]:
    out = k("get", "configmaps,pods", "-o", "name").stdout.split()
    return {line for line in out if not line.endswith("/kube-root-ca.crt")}


def test_delete_cascade_background(k: Kubectl) -> None:
    owned(k)
    out = k("delete", "configmap", "owner", "--cascade=background")
    assert out.stdout.strip() == 'configmap "owner" deleted'
    wait(lambda: names(k) == {"configmap/free"}, "the dependents to be collected")


def test_delete_cascade_foreground_removes_the_owner_last(k: Kubectl) -> None:
    owned(k, hold=True)
    k("delete", "configmap", "owner", "--cascade=foreground", "--wait=false")
    wait(lambda: "pod/worker" not in names(k), "the non-blocking dependent to go")
    owner = k.json("get", "configmap", "owner")  # waits for the blocking dependent
    assert owner["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert owner["metadata"]["deletionTimestamp"]
    dep = k.json("get", "configmap", "dep")
    assert dep["metadata"]["deletionTimestamp"]
    k("patch", "configmap", "dep", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    wait(lambda: names(k) == {"configmap/free"}, "the owner to go after its dependents")


def test_delete_cascade_orphan_keeps_the_dependents(k: Kubectl) -> None:
    owned(k)
    k("delete", "configmap", "owner", "--cascade=orphan")  # waits until the owner is gone
    assert names(k) == {"configmap/free", "configmap/dep", "pod/worker"}
    wait(lambda: all("ownerReferences" not in k.json("get", kind, name)["metadata"]
                     for kind, name in (("configmap", "dep"), ("pod", "worker"))),
         "the dependents to lose their reference to the owner")


JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: five
spec:
  completions: 5
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: busybox
        command: ["exit", "0"]
"""


def job_row(k: Kubectl, name: str) -> list[str]:
    lines = k("get", "job", name).stdout.splitlines()
    assert lines[0].split()[:5] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    return lines[1].split()


def test_job_of_five_completions_two_at_a_time(k: Kubectl) -> None:
    k("create", "-f", "-", input=JOB)
    k("wait", "--for=condition=complete", "job/five", "--timeout=60s", timeout=70)
    job = k.json("get", "job", "five")
    assert job["status"]["succeeded"] == 5
    assert [c["type"] for c in job["status"]["conditions"]] == ["SuccessCriteriaMet",
                                                                "Complete"]
    row = job_row(k, "five")
    assert row[:3] == ["five", "Complete", "5/5"]
    pods = k.json("get", "pods", "-l", "batch.kubernetes.io/job-name=five")["items"]
    assert len(pods) == 5
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)
    assert all("batch.kubernetes.io/job-tracking" not in (p["metadata"].get("finalizers")
                                                          or []) for p in pods)
    # kubectl deletes in the background: the pods go with the Job
    k("delete", "job", "five")
    wait(lambda: not k.json("get", "pods", "-l", "batch.kubernetes.io/job-name=five")["items"],
         "the Job's pods to be collected")


def test_job_past_its_backoff_limit_fails(k: Kubectl) -> None:
    doomed = JOB.replace("name: five", "name: doomed").replace(
        "completions: 5\n  parallelism: 2", "backoffLimit: 0").replace('"0"]', '"3"]')
    k("create", "-f", "-", input=doomed)
    k("wait", "--for=condition=failed", "job/doomed", "--timeout=60s", timeout=70)
    job = k.json("get", "job", "doomed")
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert (failed["reason"], failed["message"]) == (
        "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert job_row(k, "doomed")[:3] == ["doomed", "Failed", "0/1"]
    wait(lambda: "BackoffLimitExceeded" in k(
        "get", "events", "--field-selector", "involvedObject.name=doomed").stdout,
        "the BackoffLimitExceeded event")  # recorded right after the status


def test_create_cronjob_and_a_job_from_it(k: Kubectl) -> None:
    k("create", "cronjob", "tick", "--image=busybox", "--schedule=*/1 * * * *", "--",
      "exit", "0")
    lines = k("get", "cronjob", "tick").stdout.splitlines()
    assert lines[0].split() == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE",
                                "LAST", "SCHEDULE", "AGE"]
    assert lines[1].split()[:8] == ["tick", "*/1", "*", "*", "*", "*", "<none>", "False"]
    cronjob = k.json("get", "cronjob", "tick")
    k("create", "job", "by-hand", "--from=cronjob/tick")
    job = k.json("get", "job", "by-hand")
    assert job["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    ref = job["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"]) == ("CronJob", cronjob["metadata"]["uid"])
    k("wait", "--for=condition=complete", "job/by-hand", "--timeout=60s", timeout=70)

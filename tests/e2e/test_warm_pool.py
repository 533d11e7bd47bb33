"""The warm-pool example (`examples/warm-pool/`) on a real `ephemera up` with real containers:
the operator runs with `kopf run` as its ServiceAccount (the example's RBAC, through a token
kubeconfig), keeps a pool of ready pods, binds claims with their Secrets swapped in live
(`pods/NAME/dynamic`, no restart), queues a claim while the pool is empty, hands the
recycled pod to the queued claim with the first claim's Secret gone, and, killed with
SIGKILL between claims and started again, binds the next claim exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    LOOP,
    Kubectl,
    exec_in,
    kubelet_cluster_fixtures,
    wait,
)

pytestmark = pytest.mark.e2e

warm_cluster, k = kubelet_cluster_fixtures("warm_cluster", "warm-pool-cluster", "warm-node")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "warm-pool"
TOKEN_PATH = "/var/run/claim/secret/token"


def _sa_kubeconfig(k: Kubectl, path: Path) -> Path:
    """A kubeconfig for the operator's ServiceAccount (a TokenRequest token)."""
    token = k.cluster.kubectl("create", "token", "warm-pool-operator", "-n", "warm-pool",
                              "--duration=1h").stdout.strip()
    admin = yaml.safe_load(k.cluster.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": cluster["name"],
                                                      "user": "operator"}}],
        "current-context": "operator"}))
    return path


class Operator:
    def __init__(self, k: Kubectl, kubeconfig: Path, log: Path) -> None:
        self.k, self.kubeconfig, self.log = k, kubeconfig, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace",
                str(self.k.namespace), str(EXAMPLE / "operator.py")]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(argv, env=env, stdout=out,
                                            stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def operator(k: Kubectl, tmp_path: Path) -> Iterator[Operator]:
    k.cluster.kubectl("apply", "-f", str(EXAMPLE / "crds.yaml"))
    k.cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                      "crd/warmpools.warmpool.ephemera.dev", "crd/claims.warmpool.ephemera.dev")
    k.cluster.kubectl("create", "namespace", "warm-pool", check=False)
    k.cluster.kubectl("apply", "-f", str(EXAMPLE / "rbac.yaml"))
    running = Operator(k, _sa_kubeconfig(k, tmp_path / "operator.kubeconfig"),
                       tmp_path / "operator.log")
    running.start()
    try:
        yield running
    finally:
        running.stop()
        log = running.log.read_text(errors="replace")
        assert "Traceback" not in log or "CancelledError" in log, log[-6000:]


def _claim(name: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": "warmpool.ephemera.dev/v1alpha1", "kind": "Claim",
            "metadata": {"name": name}, "spec": {"poolName": "pool", "secretName": secret}}


def _bound(k: Kubectl, name: str) -> dict[str, Any] | None:
    claim: dict[str, Any] = k.json("get", "claim", name)
    conditions = {c["type"]: c["status"] for c in (claim.get("status") or {}).get(
        "conditions") or []}
    return claim if conditions.get("Ready") == "True" else None


def _bound_pods(k: Kubectl) -> dict[str, str]:
    """pod -> claim uid, for the pool's pods that carry a claim."""
    pods = k.json("get", "pods", "-l", "warmpool.ephemera.dev/pool=pool")["items"]
    return {p["metadata"]["name"]: p["metadata"]["labels"]["warmpool.ephemera.dev/claim"]
            for p in pods if "warmpool.ephemera.dev/claim" in p["metadata"]["labels"]}


def _free_pods(k: Kubectl) -> list[str]:
    pods = k.json("get", "pods", "-l", "warmpool.ephemera.dev/pool=pool")["items"]
    return [p["metadata"]["name"] for p in pods
            if "warmpool.ephemera.dev/claim" not in p["metadata"]["labels"]
            and not p["metadata"].get("deletionTimestamp")]


def test_claims_bind_live_queue_recycle_and_survive_an_operator_kill(
        k: Kubectl, operator: Operator) -> None:
    for n in range(1, 5):
        k("create", "secret", "generic", f"s{n}", f"--from-literal=token=secret-{n}")
    pool = {"apiVersion": "warmpool.ephemera.dev/v1alpha1", "kind": "WarmPool",
            "metadata": {"name": "pool"},
            "spec": {"replicas": 2, "template": {
                "metadata": {"labels": {"app": "sandbox"}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                    {"name": "c", "image": "busybox", "command": ["sh", "-c", LOOP]}]}}}}
    k("create", "-f", "-", input=json.dumps(pool))
    wait(lambda: (k.json("get", "warmpool", "pool").get("status") or {}).get("available") == 2,
         "two ready pods in the pool", k.cluster, timeout=120)

    # two claims bind at once
    k("create", "-f", "-", input=yaml.safe_dump_all([_claim("c1", "s1"), _claim("c2", "s2")]))
    c1 = wait(lambda: _bound(k, "c1"), "c1 bound", k.cluster)
    c2 = wait(lambda: _bound(k, "c2"), "c2 bound", k.cluster)
    pod1, pod2 = c1["status"]["podName"], c2["status"]["podName"]
    assert pod1 != pod2
    assert c1["status"]["bindMilliseconds"] >= 0
    assert exec_in(k, pod1, "c", f"cat {TOKEN_PATH}") == "secret-1"
    assert exec_in(k, pod2, "c", f"cat {TOKEN_PATH}") == "secret-2"
    assert exec_in(k, pod1, "c", "ls /var/run/claim/secret") == "token\n"  # only its own
    started = exec_in(k, pod1, "c", "cut -d' ' -f22 /proc/1/stat")
    pod = k.json("get", "pod", pod1)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0  # swapped in live

    # an empty pool (scaled to 0 through the scale subresource): a claim waits
    assert k("scale", "warmpool", "pool", "--replicas=0").stdout == \
        "warmpool.warmpool.ephemera.dev/pool scaled\n"
    wait(lambda: len(_free_pods(k)) == 0, "no free pod left", k.cluster)
    k("create", "-f", "-", input=json.dumps(_claim("c3", "s3")))
    wait(lambda: (k.json("get", "claim", "c3").get("status") or {}).get("phase") == "Pending",
         "c3 queued", k.cluster)
    pending = k.json("get", "claim", "c3")["status"]
    assert pending["conditions"][0]["reason"] == "NoPodAvailable"
    k("scale", "warmpool", "pool", "--replicas=2")
    c3 = wait(lambda: _bound(k, "c3"), "c3 bound once the pool refilled", k.cluster,
              timeout=120)
    pod3 = c3["status"]["podName"]
    assert pod3 not in (pod1, pod2)
    assert exec_in(k, pod3, "c", f"cat {TOKEN_PATH}") == "secret-3"

    # releasing c1 swaps its secret out; the pod goes back to the pool, same process
    k("delete", "claim", "c1", "--timeout=60s")
    wait(lambda: pod1 not in _bound_pods(k), "pod1 back in the pool", k.cluster)
    assert exec_in(k, pod1, "c", f"test -e {TOKEN_PATH} && echo present || echo gone") \
        == "gone\n"
    assert exec_in(k, pod1, "c", "cut -d' ' -f22 /proc/1/stat") == started

    # the operator killed, a claim created while it is down, the operator back
    operator.stop(signal.SIGKILL)
    k("create", "-f", "-", input=json.dumps(_claim("c4", "s4")))
    operator.start()
    c4 = wait(lambda: _bound(k, "c4"), "c4 bound after the restart", k.cluster, timeout=90)
    pod4 = c4["status"]["podName"]
    assert exec_in(k, pod4, "c", f"cat {TOKEN_PATH}") == "secret-4"
    bound = _bound_pods(k)
    assert sorted(bound.values()) == sorted({*bound.values()})  # no claim holds two pods
    assert len(bound) == 3  # c2, c3, c4
    for pod_name in bound:
        tokens = exec_in(k, pod_name, "c", f"cat {TOKEN_PATH}")
        assert tokens in ("secret-2", "secret-3", "secret-4")
    events = k.json("get", "events", "--field-selector", "involvedObject.name=c2")["items"]
    assert any(e["reason"] == "Bound" for e in events)

"""Helpers for the KEP-6386 and KEP-6395/5972 suites that drive the real kubectl against a
real `ephemera up` without a kubelet (`test_kep6386_kubectl.py`, `test_dynamic_kubectl.py`).

No kubelet runs in these clusters: nodes are API objects (`node_manifest`: capacity and
allocatable with `ephemeral-storage` and `pods`, a `Ready` condition, `status.declaredFeatures`)
and a pod is made "running" by writing its status through `kubectl patch --subresource=status`
(`make_running`). `RawApi` speaks plain HTTPS to the apiserver with the admin certificate, for
what kubectl does not show (status codes, `details.causes`). `kubectl_in` gives a test a
kubectl user and a namespace of its own on any cluster. `downgraded_cluster` starts a cluster
with every gate on, lets the caller put objects in it, and restarts it on the same data dir
with `GATES_OFF` (the KEPs' downgrade step).
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from cluster import Cluster, Kubectl, namespace_for, start_cluster

# The nodes of these suites are API objects: no kubelet registers one of its own.
NO_KUBELET = ("--no-kubelet",)
GATES_OFF = ("--feature-gates",
             "PodLevelResourcesEphemeralStorage=false,DynamicNodeLocalEphemeralVolumes=false")
WAIT = 30.0

PLRES = "PodLevelResourcesEphemeralStorage"
DNLEV = "DynamicNodeLocalEphemeralVolumes"
DYNAMIC_CONTAINERS = "DynamicContainers"

T = TypeVar("T")


def node_manifest(name: str, *, es: str = "10Gi", pods: str = "20",
                  declared: Sequence[str] = (), taints: Sequence[dict[str, str]] = ()
                  ) -> dict[str, Any]:
    """A Ready node as a kubelet would register it, declaring `declared`."""
    allocatable = {"cpu": "4", "memory": "8Gi", "ephemeral-storage": es, "pods": pods}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": list(taints)} if taints else {},
        "status": {"capacity": allocatable, "allocatable": allocatable,
                   "conditions": [{"type": "Ready", "status": "True",
                                   "reason": "KubeletReady",
                                   "message": "kubelet is posting ready status"}],
                   "declaredFeatures": list(declared)}}


def as_input(*objects: dict[str, Any]) -> str:
    """Objects as the JSON stream `kubectl create -f -` reads."""
    return "\n".join(json.dumps(o) for o in objects)


RUNNING_STATUS: dict[str, Any] = {
    "phase": "Running",
    "conditions": [{"type": "Initialized", "status": "True"},
                   {"type": "PodScheduled", "status": "True"}]}


def make_running(k: Kubectl, name: str, status: dict[str, Any] | None = None) -> None:
    """Set the status a kubelet would write for a started pod (phase Running, Initialized)
    plus `status`'s extra keys."""
    k("patch", "pod", name, "--subresource=status", "--type=merge",
      "-p", json.dumps({"status": {**RUNNING_STATUS, **(status or {})}}))


def wait_until(probe: Callable[[], T | None], what: str, timeout: float = WAIT) -> T:
    """Poll `probe` until it returns something truthy; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def kubectl_in(cluster: Cluster, tmp_path: Path, test_name: str) -> Kubectl:
    """A kubectl user (own HOME) on `cluster` in a fresh namespace named after the test."""
    namespace = namespace_for(test_name)
    runner = Kubectl(cluster, tmp_path / f"home-{namespace}", namespace)
    runner.home.mkdir(parents=True)
    runner("create", "namespace", namespace)
    return runner


@contextmanager
def running_cluster(base: Path, extra_args: Sequence[str] = ()) -> Iterator[Cluster]:
    """`ephemera up --no-kubelet` on `base/data`; stopped (and checked to exit 0) after."""
    cluster = start_cluster(base / "data", base / "home", [*NO_KUBELET, *extra_args])
    try:
        yield cluster
    finally:
        code = cluster.stop()
        assert code == 0, f"ephemera up exited {code}\n{cluster.output}"


@contextmanager
def downgraded_cluster(base: Path, seed: Callable[[Cluster], None]) -> Iterator[Cluster]:
    """A cluster started with every gate on, `seed`ed, stopped, and started again on the same
    data dir with `GATES_OFF`: objects the gates allowed are stored, the gates are now off."""
    with running_cluster(base) as enabled:
        seed(enabled)
    with running_cluster(base, GATES_OFF) as disabled:
        yield disabled


class RawApi:
    """Plain HTTPS to a cluster's apiserver as the admin (the data dir's certificates)."""

    def __init__(self, cluster: Cluster) -> None:
        context = ssl.create_default_context(cafile=str(cluster.ca_path))
        pki = cluster.data_dir / "pki"
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.client = httpx.Client(base_url=cluster.server, verify=context, timeout=30)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
        """The status code and the parsed JSON reply of one request."""
        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            headers["Content-Type"] = content_type
            content = json.dumps(body)
        reply = self.client.request(method, path, content=content, headers=headers)
        return reply.status_code, reply.json()

    def close(self) -> None:
        self.client.close()


def pod_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    return f"{path}/{subresource}" if subresource else path

"""The garbage collector as a kubectl user meets it (`ephemera up` with the fake runtime:
the runtime is not what is tested): `kubectl delete --cascade=background|foreground|orphan`
of a ConfigMap that owns a ConfigMap and a Pod leaves what upstream leaves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster, Kubectl, namespace_for, start_cluster, wait

pytestmark = pytest.mark.e2e


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
    for kind, name in (("configmap", "dep"), ("pod", "worker")):
        assert "ownerReferences" not in k.json("get", kind, name)["metadata"]

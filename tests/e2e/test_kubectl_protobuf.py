"""The real kubectl's protobuf request bodies against a real `ephemera up`.

kubectl 1.32's typed-client commands (`create configmap|secret|namespace|serviceaccount|
quota|...`, `debug node/...` and `debug --copy-to`, the pod evictions of `drain`) send
`Content-Type: application/vnd.kubernetes.protobuf` whatever the server serves. Each object
is read back with `kubectl get -o json` and compared with what kubectl prints for the same
command with `--dry-run=client -o json` (Go's own JSON of the object it sent).
`kubectl run` sends JSON; it is here because users meet it next to these.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cluster import Kubectl, kubectl, shared_cluster  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e

BINARY = bytes([0, 1, 2, 0xFE, 0xFF, 0x80])


def assert_contains(expected: Any, actual: Any, path: str = "") -> None:
    """Every field of `expected` is in `actual` with the same value (the server adds more);
    nulls in `expected` (a zero creationTimestamp) stand for anything."""
    if expected is None:
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: {actual!r} is not an object"
        for key, value in expected.items():
            assert key in actual, f"{path}.{key} missing from {actual!r}"
            assert_contains(value, actual[key], f"{path}.{key}")
        return
    assert expected == actual, f"{path}: {actual!r} != {expected!r}"


def created_like_dry_run(kubectl: Kubectl, kind: str, name: str,  # noqa: F811
                         *create: str) -> dict[str, Any]:
    """Run `kubectl create ...`, then compare the stored object with the dry-run JSON."""
    expected = kubectl.json("create", *create, "--dry-run=client")
    result = kubectl("create", *create)
    assert f"{kind}/{name} created" in result.stdout
    stored: dict[str, Any] = kubectl.json("get", kind, name)
    assert_contains(expected, stored)
    assert stored["metadata"]["uid"] and stored["metadata"]["resourceVersion"]
    return stored


def test_create_configmap_round_trips(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "blob").write_bytes(BINARY)
    (tmp_path / "notes.txt").write_text("line 1\nline 2\n")
    stored = created_like_dry_run(
        kubectl, "configmap", "settings", "configmap", "settings", "--from-literal=a=b",
        "--from-literal=empty=", f"--from-file={tmp_path / 'notes.txt'}",
        f"--from-file=blob={tmp_path / 'blob'}")
    assert stored["data"] == {"a": "b", "empty": "", "notes.txt": "line 1\nline 2\n"}
    assert base64.b64decode(stored["binaryData"]["blob"]) == BINARY
    jsonpath = kubectl("get", "configmap", "settings", "-o", "jsonpath={.data.a}").stdout
    assert jsonpath == "b"


def test_create_secret_generic_round_trips(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "key").write_bytes(BINARY)
    stored = created_like_dry_run(
        kubectl, "secret", "creds", "secret", "generic", "creds", "--from-literal=user=admin",
        "--from-literal=password=s3cr3t!", f"--from-file=key={tmp_path / 'key'}")
    assert stored["type"] == "Opaque"
    decoded = {k: base64.b64decode(v) for k, v in stored["data"].items()}
    assert decoded == {"user": b"admin", "password": b"s3cr3t!", "key": BINARY}


def test_create_namespace_serviceaccount_and_quota(kubectl: Kubectl) -> None:  # noqa: F811
    namespace = f"{kubectl.namespace}-x"[:63]
    ns_runner = Kubectl(kubectl.cluster, kubectl.home, None)
    stored_ns = created_like_dry_run(ns_runner, "namespace", namespace, "namespace", namespace)
    assert stored_ns["status"]["phase"] == "Active"
    assert "namespace" not in stored_ns["metadata"]
    created_like_dry_run(kubectl, "serviceaccount", "robot", "serviceaccount", "robot")
    quota = created_like_dry_run(kubectl, "resourcequota", "limits", "quota", "limits",
                                 "--hard=cpu=1500m,memory=2Gi,pods=10")
    assert quota["spec"]["hard"] == {"cpu": "1500m", "memory": "2Gi", "pods": "10"}
    ns_runner("delete", "namespace", namespace, "--wait=false")


def test_kubectl_run_sets_the_command(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("run", "sleeper", "--image=busybox", "--", "sleep", "1")
    pod = kubectl.json("get", "pod", "sleeper")
    assert pod["spec"]["containers"][0]["image"] == "busybox"
    assert pod["spec"]["containers"][0]["args"] == ["sleep", "1"]
    kubectl("run", "sleeper2", "--image=busybox", "--command", "--", "sleep", "1")
    pod = kubectl.json("get", "pod", "sleeper2")
    assert pod["spec"]["containers"][0]["command"] == ["sleep", "1"]
    assert "args" not in pod["spec"]["containers"][0]


def make_node(kubectl: Kubectl) -> str:  # noqa: F811
    node = f"node-{kubectl.namespace}"[:63]
    kubectl("create", "-f", "-", "--validate=false", input=json.dumps(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    return node


def test_debug_node_creates_its_pod_as_protobuf(kubectl: Kubectl) -> None:  # noqa: F811
    node = make_node(kubectl)
    try:
        result = kubectl("debug", f"node/{node}", "--image=busybox", "--profile=general")
        assert "Creating debugging pod" in result.stdout
        pods = kubectl.json("get", "pods")["items"]
        assert len(pods) == 1, pods
        spec = pods[0]["spec"]
        assert pods[0]["metadata"]["name"].startswith(f"node-debugger-{node}-"[:40])
        assert spec["nodeName"] == node
        assert spec["hostPID"] is True and spec["hostNetwork"] is True
        assert spec["volumes"][0]["hostPath"]["path"] == "/"
        assert spec["containers"][0]["volumeMounts"] == [
            {"name": "host-root", "mountPath": "/host"}]
        assert spec["tolerations"] == [{"operator": "Exists"}]
    finally:
        kubectl("delete", "node", node, "--wait=false", check=False)


def test_drain_evicts_pods_with_protobuf_evictions(kubectl: Kubectl) -> None:  # noqa: F811
    node = make_node(kubectl)
    try:
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "worker"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}}))
        result = kubectl("drain", node, "--force", "--ignore-daemonsets", "--grace-period=5",
                         "--timeout=2s", check=False)
        assert "unrecognized" not in result.stderr, result.stderr
        assert "UnsupportedMediaType" not in result.stderr, result.stderr
        assert "deleting Pods that declare no controller" in result.stderr, result.stderr
        # through `pods/NAME/eviction` (a protobuf Eviction), which discovery lists
        assert "evicting pod " in result.stdout, result.stdout
        left = kubectl("get", "pod", "worker", "-o", "json", check=False)
        if left.returncode == 0:  # no kubelet confirmed yet: deleted gracefully, as asked
            metadata = json.loads(left.stdout)["metadata"]
            assert metadata["deletionTimestamp"]
            assert metadata["deletionGracePeriodSeconds"] == 5
        assert kubectl.json("get", "node", node)["spec"]["unschedulable"] is True
    finally:
        kubectl("delete", "node", node, "--wait=false", check=False)

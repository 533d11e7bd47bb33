"""The audit log of a real `ephemera up` (default policy, `<data-dir>/audit/audit.log`), read
after real kubectl use: every `pods/dynamic` request is there in full (user, time, request
and resulting pod), a refused one too with its 403 and the authorizer's verdict, and no
Secret data is written anywhere in the log."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cluster import (
    Cluster,
    Kubectl,
    as_identity,
    kubelet_cluster_fixtures,
    running,
    wait_pod,
)

from ephemera.apiserver.audit import read_events

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("audit")]

SECRET_VALUE = "s3cret-Value-9f2c"


audit_cluster, k = kubelet_cluster_fixtures("audit_cluster", "audit-cluster", "audit-node")


def audit_events(cluster: Cluster) -> list[dict[str, Any]]:
    log = cluster.data_dir / "audit" / "audit.log"
    return [e for path in [*sorted(log.parent.glob("audit-*.log")), log]
            for e in read_events(path)]


def dynamic_events(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return [e for e in audit_events(cluster)
            if e.get("objectRef", {}).get("subresource") == "dynamic"
            and e["objectRef"].get("namespace") == namespace]


def test_dynamic_requests_are_recorded_in_full_and_secrets_never(k: Kubectl,
                                                                 tmp_path: Path) -> None:
    ns = k.namespace
    assert ns is not None
    k("create", "secret", "generic", "creds", f"--from-literal=token={SECRET_VALUE}")
    k("create", "configmap", "cfg", f"--from-literal=also={SECRET_VALUE}")
    k("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "worker"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": "busybox", "command": ["sleep", "3600"],
            "dynamicVolumePolicy": {"restartPolicy": "RestartContainer"}}]}}))
    pod = wait_pod(k, "worker", running, "running")
    pod["spec"]["volumes"] = [*pod["spec"].get("volumes", []),
                              {"name": "creds", "secret": {"secretName": "creds"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [
        *pod["spec"]["containers"][0].get("volumeMounts", []),
        {"name": "creds", "mountPath": "/creds", "readOnly": True}]
    body = tmp_path / "pod.json"
    body.write_text(json.dumps(pod))
    k("replace", "--raw", f"/api/v1/namespaces/{ns}/pods/worker/dynamic", "-f", str(body))
    # jane may not: the refusal is recorded too.
    jane = as_identity(k, "jane", tmp_path)
    refused = jane("replace", "--raw", f"/api/v1/namespaces/{ns}/pods/worker/dynamic", "-f",
                   str(body), check=False)
    assert refused.returncode == 1
    k("get", "secret", "creds", "-o", "yaml")  # a read of the Secret, which returns its data

    events = dynamic_events(k.cluster, ns)
    done = [e for e in events if e["stage"] == "ResponseComplete"]
    assert [(e["verb"], e["user"]["username"], e["responseStatus"]["code"]) for e in done] == [
        ("update", "kubernetes-admin", 200), ("update", "jane", 403)]
    admitted, denied = done
    assert admitted["level"] == "RequestResponse"
    assert admitted["objectRef"] == {"resource": "pods", "namespace": ns, "name": "worker",
                                     "apiVersion": "v1", "subresource": "dynamic"}
    assert admitted["requestObject"]["spec"]["volumes"][-1] == {
        "name": "creds", "secret": {"secretName": "creds"}}
    response_volumes = admitted["responseObject"]["spec"]["volumes"]
    assert response_volumes[-1]["name"] == "creds"
    assert admitted["annotations"]["authorization.k8s.io/decision"] == "allow"
    assert admitted["requestReceivedTimestamp"] <= admitted["stageTimestamp"]
    assert denied["annotations"]["authorization.k8s.io/decision"] == "forbid"
    assert denied["responseStatus"]["reason"] == "Forbidden"
    assert "requestObject" not in denied  # refused before its body was read, as upstream

    secret_events = [e for e in audit_events(k.cluster)
                     if e.get("objectRef", {}).get("resource") == "secrets"
                     and e["objectRef"].get("namespace") == ns]
    assert {"create", "get"} <= {e["verb"] for e in secret_events}
    assert {e["level"] for e in secret_events} == {"Metadata"}
    log_dir = k.cluster.data_dir / "audit"
    raw = b"".join(p.read_bytes() for p in log_dir.iterdir())
    assert SECRET_VALUE.encode() not in raw
    assert base64.b64encode(SECRET_VALUE.encode()) not in raw

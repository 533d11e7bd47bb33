"""The quota controller as a user meets it: `ephemera up` runs `ephemera controller-manager`
as a supervised child, which fills a new ResourceQuota's status, and releases a deleted pod's
usage so that the next pod fits; kubectl shows upstream's quota message."""

from __future__ import annotations

import json
import os
import signal

import pytest
from cluster import Cluster, cluster  # noqa: F401  (cluster is a fixture)
from processes import until

pytestmark = pytest.mark.e2e

QUOTA = """
apiVersion: v1
kind: ResourceQuota
metadata:
  name: q
spec:
  hard:
    pods: "1"
    requests.ephemeral-storage: 2Gi
"""


def pod_manifest(name: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}],
                 "resources": {"requests": {"ephemeral-storage": "1Gi"}}}})


def quota_used(cluster: Cluster) -> dict[str, str]:  # noqa: F811
    out = cluster.kubectl("get", "resourcequota", "q", "-o", "json").stdout
    return dict(json.loads(out).get("status", {}).get("used") or {})


def test_controller_releases_usage_after_a_pod_delete(cluster: Cluster) -> None:  # noqa: F811
    until(lambda: (cluster.data_dir / "run" / "controller-manager.pid").exists(),
             "the controller-manager to start")
    cluster.kubectl("apply", "-f", "-", input=QUOTA)
    until(lambda: quota_used(cluster) == {"pods": "0", "requests.ephemeral-storage": "0"},
             "the controller to fill the quota's status")

    cluster.kubectl("apply", "-f", "-", input=pod_manifest("p1"))
    assert quota_used(cluster) == {"pods": "1", "requests.ephemeral-storage": "1Gi"}
    refused = cluster.kubectl("apply", "-f", "-", input=pod_manifest("p2"), check=False)
    assert refused.returncode == 1
    assert ('pods "p2" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, '
            "limited: pods=1") in refused.stderr

    # The controller survives a kill -9 (the supervisor restarts it) and still releases.
    os.kill(cluster.pid_of("controller-manager"), signal.SIGKILL)
    cluster.kubectl("delete", "pod", "p1", "--wait=true")
    until(lambda: quota_used(cluster) == {"pods": "0", "requests.ephemeral-storage": "0"},
             "the deleted pod's usage to be released")
    cluster.kubectl("apply", "-f", "-", input=pod_manifest("p2"))
    assert quota_used(cluster) == {"pods": "1", "requests.ephemeral-storage": "1Gi"}

"""The Node authorizer and NodeRestriction on a real `ephemera up` with a real kubelet, through
kubectl with node client certificates issued from the cluster CA: node B (the kubelet's node)
cannot read a Secret used only by a pod bound to node A, can read it right after a
`pods/dynamic` update adds it as a volume to B's running pod (and the kubelet mounts it), and
cannot once the volume's removal completed (pruned from `status.volumeStatuses`); node B cannot
write the status of A's pod."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from cluster import (
    LOOP,
    Kubectl,
    as_identity,
    container,
    kubelet_cluster_fixtures,
    volume_phases,
    wait_pod,
)

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, load_kubeconfig, resource_path

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("node-authorizer")]

NODE_B = "nauthz-b"  # the kubelet of the cluster
NODE_A = "nauthz-a"  # a node identity without a kubelet


authz_cluster, k = kubelet_cluster_fixtures("authz_cluster", "node-authorizer-cluster", NODE_B)


def as_node(k: Kubectl, node: str, tmp_path: Path) -> Kubectl:
    """kubectl in `k`'s namespace as `system:node:<node>` (group `system:nodes`)."""
    return as_identity(k, f"system:node:{node}", tmp_path, ("system:nodes",))


async def patch_status(k: Kubectl, pod: str) -> tuple[int, str]:
    """Merge-patch the status of Pod `pod` with `k`'s kubeconfig; (code, message) of the
    refusal, (200, "") when it went through."""
    assert k.namespace is not None
    async with ApiClient(load_kubeconfig(k.cluster.kubeconfig)) as api:
        try:
            await api.patch(resource_path("pods", k.namespace, pod, "status"),
                            {"status": {"message": "mine"}}, patch_type="merge")
        except StatusError as err:
            return err.code, err.message
    return 200, ""


def forbidden_secret(node: str, namespace: str, name: str) -> str:
    return (f'Error from server (Forbidden): secrets "{name}" is forbidden: User '
            f'"system:node:{node}" cannot get resource "secrets" in API group "" in the '
            f"namespace \"{namespace}\": no relationship found between node '{node}' and "
            "this object")


def test_node_reads_secrets_of_its_pods_following_dynamic_volumes(
        k: Kubectl, tmp_path: Path) -> None:
    ns = k.namespace
    assert ns is not None
    k("create", "secret", "generic", "top", "--from-literal=token=s3cret")
    on_a = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "on-a"},
            "spec": {"nodeName": NODE_A, "volumes": [{"name": "s",
                                                      "secret": {"secretName": "top"}}],
                     "containers": [{"name": "c", "image": "busybox"}]}}
    on_b = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "on-b"},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", LOOP],
                                     "dynamicVolumePolicy": {
                                         "restartPolicy": "RestartContainer"}}]}}
    k("create", "-f", "-", input=yaml.safe_dump_all([on_a, on_b]))
    node_a, node_b = as_node(k, NODE_A, tmp_path), as_node(k, NODE_B, tmp_path)
    try:
        wait_pod(k, "on-b", lambda p: "running" in container(p).get("state", {}), "running")

        assert node_a("get", "secret", "top", "-o", "name").stdout.strip() == "secret/top"
        denied = node_b("get", "secret", "top", check=False)
        assert denied.returncode == 1
        assert denied.stderr.strip() == forbidden_secret(NODE_B, ns, "top")

        # The kubelet's own client, patching status as the kubelet does (kubectl would
        # first GET pods/status, which no node may).
        assert asyncio.run(patch_status(node_b, "on-a")) == (
            403, f'pods "on-a" is forbidden: node "{NODE_B}" can only update pod status for '
            "pods with spec.nodeName set to itself")

        # Nor may B have a token bound to A's pod (NodeRestriction on serviceaccounts/token).
        uid = k("get", "pod", "on-a", "-o", "jsonpath={.metadata.uid}").stdout.strip()
        denied = node_b("create", "token", "default", "--bound-object-kind=Pod",
                        "--bound-object-name=on-a", f"--bound-object-uid={uid}", check=False)
        assert denied.stderr.strip() == (
            'error: failed to create token: serviceaccounts "default" is forbidden: node '
            "requested token bound to a pod scheduled on a different node")

        # A dynamic Secret volume on B's pod: B may read the Secret at once.
        k("patch", "pod", "on-b", "--subresource=dynamic", "--type=json", "-p", json.dumps([
            {"op": "add", "path": "/spec/volumes",
             "value": [{"name": "creds", "secret": {"secretName": "top"}}]},
            {"op": "add", "path": "/spec/containers/0/volumeMounts",
             "value": [{"name": "creds", "mountPath": "/creds"}]}]))
        assert node_b("get", "secret", "top", "-o", "name").stdout.strip() == "secret/top"
        # ... and so did the kubelet, which mounted it.
        wait_pod(k, "on-b", lambda p: volume_phases(p).get("creds") == "HostMounted",
                 "creds HostMounted")

        # Removed, torn down and pruned from volumeStatuses: B may not read it any more.
        k("patch", "pod", "on-b", "--subresource=dynamic", "--type=json", "-p", json.dumps([
            {"op": "remove", "path": "/spec/containers/0/volumeMounts"},
            {"op": "remove", "path": "/spec/volumes/0"}]))
        wait_pod(k, "on-b", lambda p: "creds" not in volume_phases(p), "creds pruned")
        denied = node_b("get", "secret", "top", check=False)
        assert denied.stderr.strip() == forbidden_secret(NODE_B, ns, "top")
    finally:
        # No kubelet will ever finish a graceful deletion of the pod bound to node A.
        k("delete", "pod", "on-a", "--grace-period=0", "--force", check=False)

"""RBAC on a real `ephemera up` with a real kubelet, through the real kubectl as users with
client certificates issued from the cluster CA: `jane` (no groups) and `ed` (bound to the
default `edit` role in the test's namespace) get upstream's 403 on `pods/NAME/dynamic`
(KEP-6395: restricted to cluster administrators by default) and `kubectl auth can-i update
pods --subresource=dynamic` says no (kubectl reads `pods/dynamic` as the pod named
`dynamic`); after a RoleBinding to a Role with `pods/dynamic` update, jane's PUT
goes through and can-i says yes. The kubelet (Node authorizer), scheduler and
controller-manager (their own identities and roles) keep the pod running meanwhile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster import (
    LOOP,
    Kubectl,
    as_identity,
    container,
    kubelet_cluster_fixtures,
    pod_json,
    wait_pod,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("rbac")]

NODE = "rbac-node"


rbac_cluster, k = kubelet_cluster_fixtures("rbac_cluster", "rbac-cluster", NODE)


def as_user(k: Kubectl, user: str, tmp_path: Path) -> Kubectl:
    """kubectl in `k`'s namespace as `user` (no groups)."""
    return as_identity(k, user, tmp_path)


def forbidden_dynamic(user: str, namespace: str, pod: str) -> str:
    return (f'Error from server (Forbidden): pods "{pod}" is forbidden: User "{user}" cannot '
            f'update resource "pods/dynamic" in API group "" in the namespace "{namespace}"')


def can_i(k: Kubectl, *args: str) -> str:
    result = k("auth", "can-i", *args, check=False)
    assert result.returncode in (0, 1), result.stderr
    return result.stdout.strip()


def test_dynamic_needs_a_grant_beyond_edit(k: Kubectl, tmp_path: Path) -> None:
    ns = k.namespace
    assert ns is not None
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "worker"},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "busybox",
                                    "command": ["sh", "-c", LOOP],
                                    "dynamicVolumePolicy": {
                                        "restartPolicy": "RestartContainer"}}]}}
    k("create", "-f", "-", input=json.dumps(pod))
    wait_pod(k, "worker", lambda p: "running" in container(p).get("state", {}), "running")
    jane, ed = as_user(k, "jane", tmp_path), as_user(k, "ed", tmp_path)
    k("create", "rolebinding", "ed-edit", "--clusterrole=edit", "--user=ed")

    changed = pod_json(k, "worker")
    changed["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    changed["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch",
                                                         "mountPath": "/scratch"}]
    body = tmp_path / "worker.json"
    body.write_text(json.dumps(changed))
    path = f"/api/v1/namespaces/{ns}/pods/worker/dynamic"

    for user, runner in (("jane", jane), ("ed", ed)):
        denied = runner("replace", "--raw", path, "-f", str(body), check=False)
        assert denied.returncode == 1
        assert denied.stderr.strip() == forbidden_dynamic(user, ns, "worker")
        assert can_i(runner, "update", "pods", "--subresource=dynamic") == "no"
    assert can_i(ed, "create", "pods") == "yes"
    assert can_i(ed, "update", "pods") == "yes"
    assert can_i(jane, "get", "pods") == "no"
    assert can_i(k, "update", "pods", "--subresource=dynamic") == "yes"  # system:masters

    k("create", "role", "dynamic-updater", "--verb=update", "--resource=pods/dynamic")
    k("create", "rolebinding", "jane-dynamic", "--role=dynamic-updater", "--user=jane")
    assert can_i(jane, "update", "pods", "--subresource=dynamic") == "yes"
    assert can_i(ed, "update", "pods", "--subresource=dynamic") == "no"
    replaced = json.loads(jane("replace", "--raw", path, "-f", str(body)).stdout)
    assert [v["name"] for v in replaced["spec"]["volumes"]] == ["scratch"]
    wait_pod(k, "worker", lambda p: any(v.get("name") == "scratch" and
                                        v.get("hostPhase") == "HostMounted"
                                        for v in p["status"].get("volumeStatuses") or []),
             "the dynamic volume mounted")

    listed = jane("auth", "can-i", "--list").stdout
    assert any(line.split()[:1] == ["pods/dynamic"] and "[update]" in line
               for line in listed.splitlines()), listed
    bindings = k("get", "rolebindings", "-o", "wide").stdout.splitlines()
    assert bindings[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS",
                                   "SERVICEACCOUNTS"]
    assert any(line.split()[:2] == ["jane-dynamic", "Role/dynamic-updater"]
               and line.split()[3] == "jane" for line in bindings), bindings

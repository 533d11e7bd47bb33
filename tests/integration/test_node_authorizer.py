"""The Node authorizer (`ephemera.apiserver.authz.node`) over a Registry on a real store, and
the NodeRestriction admission plugin (`ephemera.apiserver.admission.noderestriction`) in the
registry's write pipeline: a node reads only what its pods reference (following KEP-6395
dynamic volumes without waiting for its watch) and writes only its own objects."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import eventually

from ephemera.api.errors import StatusError
from ephemera.apiserver.admission import build_chain
from ephemera.apiserver.admissioncontext import RegistryAdmissionContext
from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz import Attributes, Decision, forbidden_message
from ephemera.apiserver.authz.node import NodeAuthorizer
from ephemera.apiserver.registry import DeleteOptions, Registry
from ephemera.apiserver.resources import core_resource, lookup
from ephemera.pods.references import SECRET
from ephemera.store.sqlite import SqliteStore

PODS = core_resource("pods")
SECRETS = core_resource("secrets")
NODES = core_resource("nodes")
LEASES = lookup("coordination.k8s.io", "v1", "leases")
NODE_A = UserInfo("system:node:a", ("system:nodes", "system:authenticated"))
NODE_B = UserInfo("system:node:b", ("system:nodes", "system:authenticated"))
ADMIN = UserInfo("admin", ("system:masters", "system:authenticated"))


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[Registry]:
    store = SqliteStore(tmp_path / "data")
    try:
        chain = build_chain(["NodeRestriction"])
        registry = Registry(store, admission=chain)
        chain.set_context(RegistryAdmissionContext(registry))
        yield registry
    finally:
        await store.close()


@pytest.fixture
async def authorizer(registry: Registry) -> AsyncIterator[NodeAuthorizer]:
    authz = NodeAuthorizer(registry, retry_interval=0.1)
    await authz.start()
    try:
        yield authz
    finally:
        await authz.stop()


def pod(name: str, node: str, volumes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "volumes": volumes,
                     "containers": [{"name": "c", "image": "busybox:1.36"}]}}


def get_secret(user: UserInfo, name: str, verb: str = "get") -> Attributes:
    return Attributes(user=user, verb=verb, api_version="v1", resource="secrets",
                      namespace="default", name=name)


async def change(registry: Registry, name: str, fn: Callable[[dict[str, Any]], None]) -> None:
    async def update(current: dict[str, Any] | None) -> dict[str, Any]:
        assert current is not None
        fn(current)
        return current

    await registry.update(PODS, "default", name, update)


async def test_node_reads_a_secret_only_through_its_pods_and_follows_dynamic_volumes(
        registry: Registry, authorizer: NodeAuthorizer) -> None:
    await registry.create(SECRETS, {"apiVersion": "v1", "kind": "Secret",
                                    "metadata": {"name": "top", "namespace": "default"},
                                    "data": {}})
    await registry.create(PODS, pod("on-a", "a", [{"name": "s",
                                                   "secret": {"secretName": "top"}}]))
    await registry.create(PODS, pod("on-b", "b", [{"name": "scratch", "emptyDir": {}}]))
    top = (SECRET, "default", "top")
    await eventually(lambda: authorizer.graph.pod("default", "on-b") is not None)

    assert await authorizer.authorize(get_secret(NODE_A, "top")) == (Decision.ALLOW, "")
    denied = await authorizer.authorize(get_secret(NODE_B, "top"))
    assert denied == (Decision.NO_OPINION,
                      "no relationship found between node 'b' and this object")
    assert forbidden_message(get_secret(NODE_B, "top"), denied[1]) == (
        'User "system:node:b" cannot get resource "secrets" in API group "" in the namespace '
        "\"default\": no relationship found between node 'b' and this object")
    assert (await authorizer.authorize(get_secret(NODE_B, "top", "delete")))[1] == \
        "can only read resources of this type"
    assert (await authorizer.authorize(get_secret(NODE_A, "", "list")))[1] == \
        "No Object name found"

    # A dynamic volume: readable as soon as the spec change is stored.
    await change(registry, "on-b", lambda p: p["spec"]["volumes"].append(
        {"name": "creds", "secret": {"secretName": "top"}}))
    assert await authorizer.authorize(get_secret(NODE_B, "top")) == (Decision.ALLOW, "")
    await eventually(lambda: authorizer.graph.has_path("b", top))

    def mounted(p: dict[str, Any]) -> None:
        p["status"] = {"volumeStatuses": [{"name": "scratch", "hostPhase": "HostMounted"},
                                          {"name": "creds", "hostPhase": "HostMounted"}]}

    await change(registry, "on-b", mounted)

    # Removed from the spec, still held by the kubelet: still readable.
    await change(registry, "on-b", lambda p: p["spec"]["volumes"].pop())
    assert await authorizer.authorize(get_secret(NODE_B, "top")) == (Decision.ALLOW, "")
    await eventually(lambda: len((authorizer.graph.pod("default", "on-b")
                                  or pytest.fail("no pod")).volumes) == 2
                     and authorizer.graph.has_path("b", top))

    # The kubelet pruned it from volumeStatuses: denied at once.
    await change(registry, "on-b", lambda p: p["status"]["volumeStatuses"].pop())
    assert (await authorizer.authorize(get_secret(NODE_B, "top")))[0] is Decision.NO_OPINION
    await eventually(lambda: not authorizer.graph.has_path("b", top))
    assert (await authorizer.authorize(get_secret(NODE_B, "top")))[0] is Decision.NO_OPINION

    # Deleting the pod on a removes a's edge.
    await registry.delete(PODS, "default", "on-a", DeleteOptions(grace_period_seconds=0))
    await eventually(lambda: not authorizer.graph.has_path("a", top))
    assert (await authorizer.authorize(get_secret(NODE_A, "top")))[0] is Decision.NO_OPINION


async def test_graph_relists_after_a_restart(registry: Registry) -> None:
    await registry.create(PODS, pod("p", "a", [{"name": "c", "configMap": {"name": "cm"}}]))
    authz = NodeAuthorizer(registry)
    await authz.start()
    await authz.stop()
    await registry.create(PODS, pod("q", "b", [{"name": "c", "configMap": {"name": "cm"}}]))
    await authz.start()
    try:
        assert authz.graph.has_path("a", ("configmap", "default", "cm"))
        assert authz.graph.has_path("b", ("configmap", "default", "cm"))
    finally:
        await authz.stop()


@pytest.mark.parametrize(("attrs", "decision", "reason"), [
    (Attributes(ADMIN, "get", resource="secrets", namespace="default", name="top"),
     Decision.NO_OPINION, ""),
    (Attributes(UserInfo("system:node:a", ()), "get", resource="pods"),
     Decision.NO_OPINION, ""),
    (Attributes(UserInfo("system:node:", ("system:nodes",)), "get", resource="pods"),
     Decision.NO_OPINION, 'unknown node for user "system:node:"'),
    (Attributes(NODE_A, "watch", resource="pods"), Decision.ALLOW, ""),
    (Attributes(NODE_A, "patch", resource="pods", subresource="status", namespace="default",
                name="x"), Decision.ALLOW, ""),
    (Attributes(NODE_A, "update", resource="pods", subresource="dynamic",
                namespace="default", name="x"), Decision.NO_OPINION, ""),
    (Attributes(NODE_A, "create", resource="nodes"), Decision.ALLOW, ""),
    (Attributes(NODE_A, "patch", resource="nodes", subresource="status", name="a"),
     Decision.ALLOW, ""),
    (Attributes(NODE_A, "create", resource="events", namespace="default"),
     Decision.ALLOW, ""),
    (Attributes(NODE_A, "delete", resource="namespaces", name="default"),
     Decision.NO_OPINION, ""),
    (Attributes(NODE_A, "patch", api_group="coordination.k8s.io", resource="leases",
                namespace="kube-node-lease", name="a"), Decision.ALLOW, ""),
    (Attributes(NODE_A, "create", api_group="coordination.k8s.io", resource="leases",
                namespace="kube-node-lease"), Decision.ALLOW, ""),
    (Attributes(NODE_A, "patch", api_group="coordination.k8s.io", resource="leases",
                namespace="kube-node-lease", name="b"), Decision.NO_OPINION,
     "can only access node lease with the same name as the requesting node"),
    (Attributes(NODE_A, "get", api_group="coordination.k8s.io", resource="leases",
                namespace="default", name="a"), Decision.NO_OPINION,
     'can only access leases in the "kube-node-lease" system namespace'),
    (Attributes(NODE_A, "list", api_group="coordination.k8s.io", resource="leases",
                namespace="kube-node-lease"), Decision.NO_OPINION,
     "can only get, create, update, patch, or delete a node lease"),
    (Attributes(NODE_A, "create", resource="serviceaccounts", subresource="token",
                namespace="default", name="other"), Decision.NO_OPINION,
     "no relationship found between node 'a' and this object"),
    (Attributes(NODE_A, "get", resource="serviceaccounts", namespace="default",
                name="default"), Decision.NO_OPINION,
     "can only create tokens for individual service accounts"),
    (Attributes(NODE_A, "get", resource="configmaps", name="cm"), Decision.NO_OPINION,
     "can only read namespaced object of this type"),
    (Attributes(NODE_A, "get", path="/api", resource_request=False),
     Decision.NO_OPINION, ""),
    # upstream subdivides these too, rather than leaving them to the static node rules
    (Attributes(NODE_A, "get", resource="persistentvolumes", name="pv"), Decision.NO_OPINION,
     "no relationship found between node 'a' and this object"),
    (Attributes(NODE_A, "get", api_group="storage.k8s.io", resource="volumeattachments",
                name="va"), Decision.NO_OPINION,
     "no relationship found between node 'a' and this object"),
    (Attributes(NODE_A, "update", resource="persistentvolumeclaims", subresource="status",
                namespace="default", name="claim"), Decision.NO_OPINION,
     "no relationship found between node 'a' and this object"),
    (Attributes(NODE_A, "update", api_group="storage.k8s.io", resource="csinodes", name="a"),
     Decision.ALLOW, ""),
    (Attributes(NODE_A, "update", api_group="storage.k8s.io", resource="csinodes", name="b"),
     Decision.NO_OPINION, "can only access CSINode with the same name as the requesting node"),
    (Attributes(NODE_A, "list", api_group="node.k8s.io", resource="runtimeclasses"),
     Decision.ALLOW, ""),
])
async def test_decisions_for_other_requests(authorizer: NodeAuthorizer, attrs: Attributes,
                                            decision: Decision, reason: str) -> None:
    assert await authorizer.authorize(attrs) == (decision, reason)


async def test_service_account_token_for_a_pod_on_the_node(
        registry: Registry, authorizer: NodeAuthorizer) -> None:
    body = pod("p", "a", [])
    body["spec"]["serviceAccountName"] = "runner"
    await registry.create(PODS, body)
    attrs = Attributes(NODE_A, "create", resource="serviceaccounts", subresource="token",
                       namespace="default", name="runner")
    assert await authorizer.authorize(attrs) == (Decision.ALLOW, "")


# --- NodeRestriction --------------------------------------------------------------------


async def forbidden(call: Any) -> str:
    with pytest.raises(StatusError) as caught:
        await call
    assert caught.value.code == 403, caught.value.message
    return caught.value.message


async def test_node_updates_status_only_of_its_own_pods(registry: Registry) -> None:
    stored = await registry.create(PODS, pod("on-a", "a", []))
    new = copy.deepcopy(stored)
    new["status"]["phase"] = "Running"
    message = await forbidden(registry.prepare_update(PODS, new, stored, subresource="status",
                                                      user=NODE_B))
    assert message == ('pods "on-a" is forbidden: node "b" can only update pod status for '
                       "pods with spec.nodeName set to itself")
    await registry.prepare_update(PODS, copy.deepcopy(new), stored, subresource="status",
                                  user=NODE_A)
    relabelled = copy.deepcopy(new)
    relabelled["metadata"]["labels"] = {"x": "y"}
    assert await forbidden(registry.prepare_update(
        PODS, relabelled, stored, subresource="status", user=NODE_A)) == (
        'pods "on-a" is forbidden: node "a" cannot update labels through pod status')
    assert await forbidden(registry.prepare_update(
        PODS, copy.deepcopy(new), stored, subresource="dynamic", user=NODE_A)) == (
        'pods "on-a" is forbidden: unexpected pod subresource "dynamic", only \'status\' and '
        "'eviction' are allowed")
    assert await forbidden(registry.prepare_update(PODS, copy.deepcopy(new), stored,
                                                   user=NODE_A)) == (
        'pods "on-a" is forbidden: unexpected operation "UPDATE", node "a" can only create '
        "and delete mirror pods")
    # Anyone else is not this plugin's business.
    await registry.prepare_update(PODS, copy.deepcopy(new), stored, subresource="status",
                                  user=ADMIN)


async def test_node_deletes_only_its_own_pods(registry: Registry) -> None:
    await registry.create(PODS, pod("on-a", "a", []))
    assert await forbidden(registry.delete(PODS, "default", "on-a", DeleteOptions(),
                                           user=NODE_B)) == (
        'pods "on-a" is forbidden: node "b" can only delete pods with spec.nodeName set to '
        "itself")
    result = await registry.delete(PODS, "default", "on-a",
                                   DeleteOptions(grace_period_seconds=0), user=NODE_A)
    assert result.deleted


async def test_node_creates_only_mirror_pods_of_its_own(registry: Registry) -> None:
    node = await registry.create(NODES, {"apiVersion": "v1", "kind": "Node",
                                         "metadata": {"name": "a"}}, user=NODE_A)
    assert await forbidden(registry.create(PODS, pod("p", "a", []), user=NODE_A)) == (
        'pods "p" is forbidden: pod does not have "kubernetes.io/config.mirror" annotation, '
        'node "a" can only create mirror pods')
    mirror = pod("p", "a", [])
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "hash"}
    mirror["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "a",
                                              "uid": node["metadata"]["uid"],
                                              "controller": True}]
    other = copy.deepcopy(mirror)
    other["spec"]["nodeName"] = "b"
    assert await forbidden(registry.create(PODS, other, user=NODE_A)) == (
        'pods "p" is forbidden: node "a" can only create pods with spec.nodeName set to '
        "itself")
    with_secret = copy.deepcopy(mirror)
    with_secret["spec"]["volumes"] = [{"name": "s", "secret": {"secretName": "top"}}]
    assert await forbidden(registry.create(PODS, with_secret, user=NODE_A)) == (
        'pods "p" is forbidden: node "a" can not create pods that reference secrets')
    stored = await registry.create(PODS, mirror, user=NODE_A)
    assert stored["metadata"]["name"] == "p"


async def test_node_writes_only_its_own_node_and_lease(registry: Registry) -> None:
    assert LEASES is not None
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "a", "labels": {"kubernetes.io/hostname": "a",
                                                 "node.kubernetes.io/pool": "x"}}}
    assert await forbidden(registry.create(NODES, copy.deepcopy(node), user=NODE_B)) == (
        'nodes "a" is forbidden: node "b" is not allowed to modify node "a"')
    labelled = copy.deepcopy(node)
    labelled["metadata"]["labels"]["node-restriction.kubernetes.io/secure"] = "true"
    labelled["metadata"]["labels"]["kubernetes.io/role"] = "master"
    assert await forbidden(registry.create(NODES, labelled, user=NODE_A)) == (
        'nodes "a" is forbidden: node "a" is not allowed to set the following labels: '
        "kubernetes.io/role, node-restriction.kubernetes.io/secure")
    stored = await registry.create(NODES, copy.deepcopy(node), user=NODE_A)
    tainted = copy.deepcopy(stored)
    tainted["spec"] = {"taints": [{"key": "k", "effect": "NoSchedule"}]}
    assert await forbidden(registry.prepare_update(NODES, tainted, stored, user=NODE_A)) == (
        'nodes "a" is forbidden: node "a" is not allowed to modify taints')
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""
    assert await forbidden(registry.prepare_update(NODES, relabelled, stored,
                                                   user=NODE_A)) == (
        'nodes "a" is forbidden: is not allowed to modify labels: '
        "node-role.kubernetes.io/control-plane")

    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "a", "namespace": "kube-node-lease"},
             "spec": {"holderIdentity": "a"}}
    assert await forbidden(registry.create(LEASES, copy.deepcopy(lease), user=NODE_B)) == (
        'leases.coordination.k8s.io "a" is forbidden: can only access node lease with the '
        "same name as the requesting node")
    await registry.create(LEASES, lease, user=NODE_A)


async def test_node_requests_tokens_only_for_pods_bound_to_it(registry: Registry) -> None:
    stored = await registry.create(PODS, pod("on-a", "a", []))
    accounts = core_resource("serviceaccounts")

    def token_request(**ref: str) -> Any:
        req = registry.admission_request(
            "CREATE", accounts, "default", "default",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"boundObjectRef": ref}}, subresource="token", user=NODE_B)
        return registry.admit(req)

    assert await forbidden(token_request(kind="Secret", apiVersion="v1", name="s")) == (
        'serviceaccounts "default" is forbidden: node requested token not bound to a pod')
    assert await forbidden(token_request(kind="Pod", apiVersion="v1", name="on-a")) == (
        'serviceaccounts "default" is forbidden: node requested token with a pod binding '
        "without a uid")
    assert await forbidden(token_request(kind="Pod", apiVersion="v1", name="on-a",
                                         uid=stored["metadata"]["uid"])) == (
        'serviceaccounts "default" is forbidden: node requested token bound to a pod '
        "scheduled on a different node")

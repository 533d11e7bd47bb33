"""The Node authorizer's graph (`ephemera.apiserver.authz.nodegraph`) and what a pod
references (`ephemera.pods.references`): pods add and remove edges, KEP-6395 dynamic volumes
add an edge at once and keep it while the kubelet still lists the removed volume in
`status.volumeStatuses`."""

from __future__ import annotations

import copy
from typing import Any

from ephemera.apiserver.authz.nodegraph import NodeGraph
from ephemera.pods.references import (
    CONFIGMAP,
    PVC,
    SECRET,
    SERVICEACCOUNT,
    held_volume_names,
    pod_level_references,
    pod_volume_references,
)


def pod(name: str, node: str, *, uid: str = "", volumes: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}],
                     "volumes": volumes or [], **spec}}


def secret_volume(name: str, secret: str) -> dict[str, Any]:
    return {"name": name, "secret": {"secretName": secret}}


def test_every_reference_a_pod_makes() -> None:
    p = pod("p", "a", serviceAccountName="sa", imagePullSecrets=[{"name": "pull"}],
            initContainers=[{"name": "i", "envFrom": [{"secretRef": {"name": "init-env"}}]}],
            volumes=[
                secret_volume("s", "vol-secret"),
                {"name": "cm", "configMap": {"name": "vol-cm"}},
                {"name": "pr", "projected": {"sources": [
                    {"secret": {"name": "proj-secret"}}, {"configMap": {"name": "proj-cm"}},
                    {"downwardAPI": {"items": []}}]}},
                {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "eph", "ephemeral": {"volumeClaimTemplate": {}}},
                {"name": "csi", "csi": {"driver": "d",
                                        "nodePublishSecretRef": {"name": "csi-secret"}}},
                {"name": "scratch", "emptyDir": {}},
            ])
    p["spec"]["containers"][0]["env"] = [
        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
        {"name": "C", "value": "plain"}]
    p["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "envfrom-cm"}}]
    assert pod_level_references(p) == {
        (SECRET, "ns", "pull"), (SECRET, "ns", "init-env"), (SECRET, "ns", "env-secret"),
        (CONFIGMAP, "ns", "env-cm"), (CONFIGMAP, "ns", "envfrom-cm"),
        (SERVICEACCOUNT, "ns", "sa")}
    assert pod_volume_references(p) == {
        "s": {(SECRET, "ns", "vol-secret")},
        "cm": {(CONFIGMAP, "ns", "vol-cm")},
        "pr": {(SECRET, "ns", "proj-secret"), (CONFIGMAP, "ns", "proj-cm")},
        "claim": {(PVC, "ns", "data")},
        "eph": {(PVC, "ns", "p-eph")},
        "csi": {(SECRET, "ns", "csi-secret")},
        "scratch": frozenset(),
    }


def test_a_pod_links_its_objects_to_its_node_only() -> None:
    graph = NodeGraph()
    graph.apply_pod(pod("p", "a", volumes=[secret_volume("s", "top")]))
    assert graph.has_path("a", (SECRET, "ns", "top"))
    assert not graph.has_path("b", (SECRET, "ns", "top"))
    assert not graph.has_path("a", (SECRET, "other", "top"))
    graph.delete_pod("ns", "p")
    assert not graph.has_path("a", (SECRET, "ns", "top"))
    assert len(graph) == 0


def test_an_unbound_pod_is_not_in_the_graph() -> None:
    graph = NodeGraph()
    graph.apply_pod(pod("p", "", volumes=[secret_volume("s", "top")]))
    assert len(graph) == 0


def test_two_pods_on_one_node_keep_the_edge_until_both_are_gone() -> None:
    graph = NodeGraph()
    graph.apply_pod(pod("p1", "a", volumes=[secret_volume("s", "top")]))
    graph.apply_pod(pod("p2", "a", volumes=[secret_volume("s", "top")]))
    graph.delete_pod("ns", "p1")
    assert graph.has_path("a", (SECRET, "ns", "top"))
    graph.delete_pod("ns", "p2")
    assert not graph.has_path("a", (SECRET, "ns", "top"))


def test_a_dynamic_volume_is_an_edge_at_once_and_goes_once_the_kubelet_pruned_it() -> None:
    graph = NodeGraph()
    running = pod("p", "b", volumes=[{"name": "scratch", "emptyDir": {}}])
    graph.apply_pod(running)
    assert not graph.has_path("b", (SECRET, "ns", "top"))

    added = copy.deepcopy(running)
    added["spec"]["volumes"].append(secret_volume("creds", "top"))
    graph.apply_pod(added)
    assert graph.has_path("b", (SECRET, "ns", "top"))

    mounted = copy.deepcopy(added)
    mounted["status"] = {"volumeStatuses": [{"name": "scratch", "hostPhase": "HostMounted"},
                                            {"name": "creds", "hostPhase": "HostMounted"}]}
    graph.apply_pod(mounted)

    removed = copy.deepcopy(mounted)
    removed["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    graph.apply_pod(removed)
    assert graph.has_path("b", (SECRET, "ns", "top")), "still listed in volumeStatuses"

    unmounting = copy.deepcopy(removed)
    unmounting["status"]["volumeStatuses"][1]["hostPhase"] = "Unmounting"
    graph.apply_pod(unmounting)
    assert graph.has_path("b", (SECRET, "ns", "top"))

    pruned = copy.deepcopy(unmounting)
    pruned["status"]["volumeStatuses"] = [{"name": "scratch", "hostPhase": "HostMounted"}]
    graph.apply_pod(pruned)
    assert not graph.has_path("b", (SECRET, "ns", "top"))

    # Once pruned, a later status listing the name again does not bring it back.
    graph.apply_pod(unmounting)
    assert not graph.has_path("b", (SECRET, "ns", "top"))


def test_a_container_status_mount_holds_the_volume_too() -> None:
    graph = NodeGraph()
    p = pod("p", "b", volumes=[secret_volume("creds", "top")])
    graph.apply_pod(p)
    removed = copy.deepcopy(p)
    removed["spec"]["volumes"] = []
    removed["status"] = {"containerStatuses": [
        {"name": "c", "volumeMounts": [{"name": "creds", "mountPath": "/c"}]}]}
    assert held_volume_names(removed) == {"creds"}
    graph.apply_pod(removed)
    assert graph.has_path("b", (SECRET, "ns", "top"))


def test_a_recreated_pod_does_not_inherit_removed_volumes() -> None:
    graph = NodeGraph()
    graph.apply_pod(pod("p", "b", uid="one", volumes=[secret_volume("creds", "top")]))
    again = pod("p", "b", uid="two")
    again["status"] = {"volumeStatuses": [{"name": "creds", "hostPhase": "Unmounting"}]}
    graph.apply_pod(again)
    assert not graph.has_path("b", (SECRET, "ns", "top"))


def test_a_pod_seen_first_without_the_volume_in_spec_has_no_edge() -> None:
    graph = NodeGraph()
    p = pod("p", "b")
    p["status"] = {"volumeStatuses": [{"name": "creds", "hostPhase": "Unmounting"}]}
    graph.apply_pod(p)
    assert not graph.has_path("b", (SECRET, "ns", "top"))


def test_replace_forgets_pods_that_are_gone_and_keeps_memory_of_the_others() -> None:
    graph = NodeGraph()
    graph.apply_pod(pod("gone", "a", volumes=[secret_volume("s", "g")]))
    kept = pod("kept", "b", volumes=[secret_volume("creds", "top")])
    graph.apply_pod(kept)
    removed = copy.deepcopy(kept)
    removed["spec"]["volumes"] = []
    removed["status"] = {"volumeStatuses": [{"name": "creds", "hostPhase": "Unmounting"}]}
    graph.replace([removed])
    assert not graph.has_path("a", (SECRET, "ns", "g"))
    assert graph.has_path("b", (SECRET, "ns", "top"))
    assert [key for key, _ in graph.pods_linking("b", (SECRET, "ns", "top"))] == [
        ("ns", "kept")]

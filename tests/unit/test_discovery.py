"""Discovery documents and the Accept decision between legacy and aggregated discovery."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.apiserver import discovery
from ephemera.apiserver.discovery import (
    AGGREGATED_DISCOVERY_CONTENT_TYPE,
    aggregated_discovery,
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
    version_info,
    wants_aggregated_discovery,
)

KUBECTL_DISCOVERY_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)


def test_version_reports_1_38() -> None:
    info = version_info()
    assert (info["major"], info["minor"], info["gitVersion"]) == ("1", "38", "v1.38.0")
    assert info["platform"].count("/") == 1


def test_api_versions() -> None:
    assert api_versions() == {"kind": "APIVersions", "versions": ["v1"]}
    with_address = api_versions("127.0.0.1:6443")
    assert with_address["serverAddressByClientCIDRs"] == [
        {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]


def test_group_list_has_coordination_but_not_core() -> None:
    body = api_group_list()
    assert body["kind"] == "APIGroupList" and body["apiVersion"] == "v1"
    names = [g["name"] for g in body["groups"]]
    assert {"coordination.k8s.io", "authorization.k8s.io", "rbac.authorization.k8s.io"
            } <= set(names)
    assert "" not in names
    group = body["groups"][names.index("coordination.k8s.io")]
    assert group["preferredVersion"] == {"groupVersion": "coordination.k8s.io/v1",
                                         "version": "v1"}
    assert api_group("coordination.k8s.io") is not None
    assert api_group("example.com") is None
    assert api_group("") is None


def _by_name(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in body["resources"]}


def test_core_resource_list() -> None:
    body = api_resource_list("", "v1")
    assert body is not None
    assert (body["kind"], body["groupVersion"]) == ("APIResourceList", "v1")
    entries = _by_name(body)
    pods = entries["pods"]
    assert pods["namespaced"] is True and pods["kind"] == "Pod"
    assert pods["singularName"] == "pod"
    assert pods["shortNames"] == ["po"]
    assert pods["categories"] == ["all"]
    assert pods["storageVersionHash"] == "xPOwRZ+Yhw8="  # the value a real 1.3x server sends
    assert set(pods["verbs"]) == {"create", "delete", "deletecollection", "get", "list",
                                  "patch", "update", "watch"}
    assert entries["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert entries["pods/status"]["singularName"] == ""
    assert entries["pods/dynamic"] == {"name": "pods/dynamic", "singularName": "",
                                       "namespaced": True, "kind": "Pod",
                                       "verbs": ["get", "patch", "update"]}
    assert entries["pods/binding"]["verbs"] == ["create"]
    assert entries["pods/binding"]["kind"] == "Binding"
    # upstream's entry, which kubectl drain looks for before it evicts
    assert entries["pods/eviction"] == {"name": "pods/eviction", "singularName": "",
                                        "namespaced": True, "group": "policy",
                                        "version": "v1", "kind": "Eviction",
                                        "verbs": ["create"]}
    assert entries["nodes"]["namespaced"] is False
    assert entries["nodes"]["shortNames"] == ["no"]
    assert "nodes/status" in entries
    assert "resourcequotas/status" in entries
    assert entries["namespaces"]["shortNames"] == ["ns"]
    assert {"configmaps", "secrets", "serviceaccounts", "events", "limitranges"} <= set(entries)
    names = [e["name"] for e in body["resources"]]
    assert names == sorted(names)
    assert "leases" not in entries


def test_group_resource_list_and_unknown_group_version() -> None:
    body = api_resource_list("coordination.k8s.io", "v1")
    assert body is not None
    assert body["groupVersion"] == "coordination.k8s.io/v1"
    assert _by_name(body)["leases"]["namespaced"] is True
    assert api_resource_list("coordination.k8s.io", "v1beta1") is None
    assert api_resource_list("", "v2") is None


def test_aggregated_discovery_core() -> None:
    body = aggregated_discovery(core=True)
    assert body["kind"] == "APIGroupDiscoveryList"
    assert body["apiVersion"] == "apidiscovery.k8s.io/v2"
    [item] = body["items"]
    assert "name" not in item["metadata"]
    [version] = item["versions"]
    assert version["version"] == "v1" and version["freshness"] == "Current"
    pods = next(r for r in version["resources"] if r["resource"] == "pods")
    assert pods["responseKind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert pods["scope"] == "Namespaced" and pods["singularResource"] == "pod"
    assert pods["shortNames"] == ["po"] and pods["categories"] == ["all"]
    subs = {s["subresource"]: s for s in pods["subresources"]}
    assert set(subs) == {"status", "binding", "eviction", "dynamic", "allocated", "log",
                         "exec", "attach", "portforward", "proxy"}
    assert subs["eviction"]["responseKind"] == {"group": "policy", "version": "v1",
                                                "kind": "Eviction"}
    assert subs["portforward"]["verbs"] == ["create", "get"]
    assert subs["portforward"]["responseKind"]["kind"] == "PodPortForwardOptions"
    assert subs["proxy"]["verbs"] == ["create", "delete", "get", "patch", "update"]
    assert subs["proxy"]["responseKind"]["kind"] == "PodProxyOptions"
    assert subs["exec"]["verbs"] == ["create", "get"]
    assert subs["exec"]["responseKind"]["kind"] == "PodExecOptions"
    assert subs["attach"]["responseKind"]["kind"] == "PodAttachOptions"
    assert subs["allocated"]["verbs"] == ["get"]
    assert subs["binding"]["verbs"] == ["create"]
    assert subs["binding"]["responseKind"]["kind"] == "Binding"
    assert subs["dynamic"]["verbs"] == ["get", "patch", "update"]
    nodes = next(r for r in version["resources"] if r["resource"] == "nodes")
    assert nodes["scope"] == "Cluster"


def test_aggregated_discovery_groups() -> None:
    body = aggregated_discovery(core=False)
    items = {i["metadata"]["name"]: i for i in body["items"]}
    item = items["coordination.k8s.io"]
    assert [r["resource"] for r in item["versions"][0]["resources"]] == ["leases"]
    rbac = items["rbac.authorization.k8s.io"]["versions"][0]["resources"]
    assert [r["resource"] for r in rbac] == ["clusterrolebindings", "clusterroles",
                                             "rolebindings", "roles"]
    reviews = items["authorization.k8s.io"]["versions"][0]["resources"]
    assert {r["resource"]: r["verbs"] for r in reviews} == {
        "localsubjectaccessreviews": ["create"], "selfsubjectaccessreviews": ["create"],
        "selfsubjectrulesreviews": ["create"], "subjectaccessreviews": ["create"]}


def test_aggregated_content_type_is_exact() -> None:
    assert AGGREGATED_DISCOVERY_CONTENT_TYPE == (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    assert discovery.DISCOVERY_GROUP == "apidiscovery.k8s.io"


@pytest.mark.parametrize(("accept", "expected"), [
    (KUBECTL_DISCOVERY_ACCEPT, True),
    ("application/json", False),
    ("application/json, */*", False),
    ("*/*", False),
    (None, False),
    ("", False),
    # only v2beta1 asked for: not served, fall back to legacy
    ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
     "application/json", False),
    # q weights reorder
    ("application/json;q=0.9,"
     "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", True),
    ("application/json,"
     "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.5", False),
    ("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;"
     "as=APIGroupDiscoveryList,application/json", False),
])
def test_wants_aggregated_discovery(accept: str | None, expected: bool) -> None:
    assert wants_aggregated_discovery(accept) is expected

"""The OpenAPI documents: the v3 index and per-group-version documents that kubectl reads for
validation, client-side apply and explain, and the v2 document."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from scripts_testing import gen_schema

from ephemera.apiserver import openapi
from ephemera.apiserver.resources import GROUP_VERSIONS, RESOURCES, lookup

CORE = "io.k8s.api.core.v1."
METHODS = ("get", "put", "post", "patch", "delete")


@pytest.fixture(scope="module")
def core() -> dict[str, Any]:
    return openapi.openapi_v3_document("", "v1")


def refs(node: Any) -> set[str]:
    return set(re.findall(r'"\$ref": ?"([^"]+)"', json.dumps(node)))


def test_index_points_at_each_group_version_with_its_content_hash() -> None:
    index = openapi.openapi_v3_index()
    assert set(index["paths"]) == {openapi.openapi_v3_path(g, v) for g, v in GROUP_VERSIONS}
    assert {"api/v1", "apis/coordination.k8s.io/v1", "apis/rbac.authorization.k8s.io/v1",
            "apis/authorization.k8s.io/v1"} <= set(index["paths"])
    for group, version in GROUP_VERSIONS:
        url = index["paths"][openapi.openapi_v3_path(group, version)]["serverRelativeURL"]
        body = openapi.openapi_v3_document_bytes(group, version)
        digest = hashlib.sha512(body).hexdigest().upper()
        assert url == f"/openapi/v3/{openapi.openapi_v3_path(group, version)}?hash={digest}"
        assert openapi.document_hash(group, version) == digest


def test_documents_are_served_by_path() -> None:
    assert openapi.openapi_v3_document_for_path("api/v1") == (
        openapi.openapi_v3_document_bytes("", "v1"))
    assert openapi.openapi_v3_document_for_path("apis/coordination.k8s.io/v1/") == (
        openapi.openapi_v3_document_bytes("coordination.k8s.io", "v1"))
    assert openapi.openapi_v3_document_for_path("apis/example.com/v1") is None
    assert openapi.openapi_v3_document_for_path("api") is None
    with pytest.raises(KeyError):
        openapi.openapi_v3_document("example.com", "v1")


def test_dict_results_are_fresh_copies() -> None:
    openapi.openapi_v3_document("", "v1")["paths"].clear()
    openapi.openapi_v3_index()["paths"].clear()
    assert openapi.openapi_v3_document("", "v1")["paths"]
    assert openapi.openapi_v3_index()["paths"]


@pytest.mark.parametrize(("group", "version"), GROUP_VERSIONS)
def test_every_ref_resolves_in_components(group: str, version: str) -> None:
    doc = openapi.openapi_v3_document(group, version)
    assert doc["openapi"].startswith("3.0")
    schemas = doc["components"]["schemas"]
    found = refs(doc)
    assert found
    for ref in found:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def test_ref_with_siblings_is_wrapped_in_all_of(core: dict[str, Any]) -> None:
    for node in _walk(core["components"]["schemas"]):
        if "$ref" in node:
            assert set(node) == {"$ref"}, node


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def test_pod_schema_carries_gvk_and_patch_metadata(core: dict[str, Any]) -> None:
    schemas = core["components"]["schemas"]
    pod = schemas[CORE + "Pod"]
    assert {"group": "", "version": "v1", "kind": "Pod"} in pod[
        "x-kubernetes-group-version-kind"]
    assert set(pod["properties"]) >= {"apiVersion", "kind", "metadata", "spec", "status"}
    containers = schemas[CORE + "PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-patch-strategy"] == "merge"
    assert containers["items"] == {"$ref": "#/components/schemas/" + CORE + "Container"}
    policy = schemas[CORE + "Container"]["properties"]["dynamicVolumePolicy"]
    assert policy["allOf"] == [
        {"$ref": "#/components/schemas/" + CORE + "ContainerDynamicVolumePolicy"}]
    assert policy["description"]
    statuses = schemas[CORE + "PodStatus"]["properties"]["volumeStatuses"]
    assert statuses["x-kubernetes-list-map-keys"] == ["name"]
    meta = schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
    assert "labels" in meta["properties"]


def test_quantity_and_int_or_string_take_two_json_types(core: dict[str, Any]) -> None:
    schemas = core["components"]["schemas"]
    quantity = schemas["io.k8s.apimachinery.pkg.api.resource.Quantity"]
    assert quantity["oneOf"] == [{"type": "string"}, {"type": "number"}]
    assert "type" not in quantity
    ios = schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]
    assert ios["oneOf"] == [{"type": "integer"}, {"type": "string"}]
    assert ios["format"] == "int-or-string"


def _param_names(operation: dict[str, Any]) -> set[str]:
    return {p["name"] for p in operation.get("parameters", ())}


def test_create_only_resources_have_only_a_create() -> None:
    ssar = lookup("authorization.k8s.io", "v1", "selfsubjectaccessreviews")
    assert ssar is not None
    doc = openapi.openapi_v3_document(ssar.group, ssar.version)
    collection = doc["paths"]["/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"]
    assert set(collection) & set(METHODS) == {"post"}
    assert "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews/{name}" not in doc["paths"]


def test_every_resource_has_collection_and_item_operations() -> None:
    for r in RESOURCES:
        if r.verbs == ("create",):
            continue  # the access reviews, above
        doc = openapi.openapi_v3_document(r.group, r.version)
        prefix = f"/apis/{r.group}/{r.version}" if r.group else f"/api/{r.version}"
        ns = "/namespaces/{namespace}" if r.namespaced else ""
        collection = doc["paths"][f"{prefix}{ns}/{r.plural}"]
        item = doc["paths"][f"{prefix}{ns}/{r.plural}/{{name}}"]
        assert {"get", "post"} <= set(collection)
        assert {"get", "put", "patch", "delete"} <= set(item)
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        for entry in (collection, item):
            for method in METHODS:
                if method in entry:
                    assert entry[method]["x-kubernetes-group-version-kind"] == gvk
        for op in (collection["post"], item["put"], item["patch"]):
            assert "fieldValidation" in _param_names(op)
            assert "dryRun" in _param_names(op)
        path_params = {p["name"] for p in item["parameters"] if p["in"] == "path"}
        assert path_params == ({"name", "namespace"} if r.namespaced else {"name"})
        patch_body = item["patch"]["requestBody"]["content"]
        assert set(patch_body) == set(openapi.PATCH_CONTENT_TYPES)
        assert {"application/json-patch+json", "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml"} == set(patch_body)
        get_response = item["get"]["responses"]["200"]["content"]["application/json"]
        assert get_response["schema"]["$ref"].endswith(r.definition)


def test_pod_subresources(core: dict[str, Any]) -> None:
    base = "/api/v1/namespaces/{namespace}/pods/{name}"
    for sub in ("status", "dynamic"):
        entry = core["paths"][f"{base}/{sub}"]
        assert set(entry) - {"parameters"} == {"get", "put", "patch"}
        assert entry["patch"]["x-kubernetes-group-version-kind"]["kind"] == "Pod"
        assert "fieldValidation" in _param_names(entry["put"])
    binding = core["paths"][f"{base}/binding"]
    assert set(binding) - {"parameters"} == {"post"}
    assert binding["post"]["x-kubernetes-group-version-kind"] == {
        "group": "", "version": "v1", "kind": "Binding"}
    assert "io.k8s.api.core.v1.Binding" in core["components"]["schemas"]
    assert core["paths"]["/api/v1/pods"]["get"]["operationId"] == (
        "listCoreV1PodForAllNamespaces")
    assert core["paths"][base]["patch"]["operationId"] == "patchCoreV1NamespacedPod"
    lease = openapi.openapi_v3_document("coordination.k8s.io", "v1")
    assert lease["paths"][
        "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"]["get"][
        "operationId"] == "readCoordinationV1NamespacedLease"


def test_kubectl_finds_a_patch_with_field_validation_for_each_kind() -> None:
    """kubectl's check before it sends fieldValidation=Strict: some PATCH operation with the
    kind's GVK lists the fieldValidation query parameter."""
    for r in RESOURCES:
        if "patch" not in r.verbs:
            continue  # the access reviews: create only
        doc = openapi.openapi_v3_document(r.group, r.version)
        ok = any(
            entry["patch"]["x-kubernetes-group-version-kind"]["kind"] == r.kind
            and any(p["name"] == "fieldValidation" and p["in"] == "query"
                    for p in entry["patch"]["parameters"])
            for entry in doc["paths"].values() if "patch" in entry)
        assert ok, r.kind


def test_group_documents_only_carry_what_they_use() -> None:
    lease = openapi.openapi_v3_document("coordination.k8s.io", "v1")
    schemas = lease["components"]["schemas"]
    assert "io.k8s.api.coordination.v1.Lease" in schemas
    assert CORE + "Pod" not in schemas


def test_v2_document() -> None:
    doc = openapi.openapi_v2_document()
    assert doc["swagger"] == "2.0"
    for ref in refs(doc):
        assert ref.removeprefix("#/definitions/") in doc["definitions"], ref
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" in patch["consumes"]
    assert patch["parameters"][0]["in"] == "body"
    assert "fieldValidation" in _param_names(patch)
    assert "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases" in doc["paths"]


def test_parameter_descriptions_are_our_own() -> None:
    """No 6-word run of a parameter's description is in upstream's parameter prose (checked
    against the fingerprints the repository keeps, scripts/gen_schema.py)."""
    theirs = gen_schema.load_fingerprints()["parameters_runs6"]
    assert len(theirs) > 1000
    for name, (_, text) in openapi._QUERY_PARAMETERS.items():
        assert not gen_schema.fingerprints(gen_schema.word_runs(text, 6)) & theirs, name
    copied = "bookmarks are sent at the server's discretion"
    assert gen_schema.fingerprints(gen_schema.word_runs(copied, 6)) & theirs

"""CustomResourceDefinitions on the in-process apiserver: conditions, serving of every
served version (namespaced and cluster-scoped), discovery and OpenAPI, schema validation,
defaulting, pruning, CEL, status and scale, printer columns, selectors, and deletion."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from apiserver_fixtures import TABLE_ACCEPT, Api, eventually, open_watch

from ephemera.api.crd import cel
from ephemera.api.crd import schema as crschema
from ephemera.apiserver import resources
from ephemera.apiserver.app import REGISTRY
from ephemera.apiserver.customresources import CustomResourceStrategy

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CT = "/apis/stable.example.com/v1/namespaces/default/crontabs"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["cronSpec"],
            "x-kubernetes-validations": [
                {"rule": "self.replicas <= self.maxReplicas",
                 "message": "replicas must not exceed maxReplicas"},
                {"rule": "!has(self.image) || self.image != 'bad'",
                 "messageExpression": "'image ' + self.image + ' is not allowed'"},
            ],
            "properties": {
                "cronSpec": {"type": "string",
                             "pattern": r"^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$"},
                "image": {"type": "string"},
                "replicas": {"type": "integer", "minimum": 0, "default": 1},
                "maxReplicas": {"type": "integer", "default": 10},
                "port": {"x-kubernetes-int-or-string": True},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "required": ["name"],
                                    "properties": {"name": {"type": "string"},
                                                   "port": {"type": "integer"}}}},
            },
        },
        "status": {"type": "object", "properties": {
            "replicas": {"type": "integer"}, "phase": {"type": "string"},
            "selector": {"type": "string"}}},
    },
}


def crd(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {"plural": "crontabs", "kind": "CronTab", "shortNames": ["ct"],
                      "categories": ["all"]},
            "versions": [
                {"name": "v1", "served": True, "storage": True,
                 "schema": {"openAPIV3Schema": copy.deepcopy(SCHEMA)},
                 "subresources": {"status": {}, "scale": {
                     "specReplicasPath": ".spec.replicas",
                     "statusReplicasPath": ".status.replicas",
                     "labelSelectorPath": ".status.selector"}},
                 "additionalPrinterColumns": [
                     {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
                     {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}],
                 "selectableFields": [{"jsonPath": ".spec.image"}]},
                {"name": "v1beta1", "served": True, "storage": False,
                 "schema": {"openAPIV3Schema": copy.deepcopy(SCHEMA)}},
            ],
        },
    }
    body["spec"].update(overrides)
    return body


def crontab(name: str, api_version: str = "stable.example.com/v1", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "CronTab", "metadata": {"name": name},
            "spec": {"cronSpec": "* * * * */5", **spec}}


async def make_crd(api: Api, body: dict[str, Any] | None = None) -> dict[str, Any]:
    status, created = await api.post(CRDS, body or crd())
    assert status == 201, created
    return created


async def test_crd_is_established_and_served_when_its_create_returns(api: Api) -> None:
    created = await make_crd(api)
    assert created["spec"]["names"]["singular"] == "crontab"
    assert created["spec"]["names"]["listKind"] == "CronTabList"
    assert created["spec"]["conversion"] == {"strategy": "None"}
    status, got = await api.get(f"{CRDS}/crontabs.stable.example.com")
    conditions = {c["type"]: c for c in got["status"]["conditions"]}
    assert conditions["NamesAccepted"]["status"] == "True"
    assert conditions["NamesAccepted"]["reason"] == "NoConflicts"
    assert conditions["Established"]["status"] == "True"
    assert conditions["Established"]["reason"] == "InitialNamesAccepted"
    assert got["status"]["acceptedNames"]["shortNames"] == ["ct"]
    assert got["status"]["storedVersions"] == ["v1"]
    status, body = await api.post(CT, crontab("a"))
    assert status == 201, body
    # the group's discovery prefers v1 over v1beta1; both are listed
    status, group = await api.get("/apis/stable.example.com")
    assert group["preferredVersion"]["version"] == "v1"
    assert [v["version"] for v in group["versions"]] == ["v1", "v1beta1"]
    status, resources = await api.get("/apis/stable.example.com/v1")
    names = {r["name"]: r for r in resources["resources"]}
    assert set(names) == {"crontabs", "crontabs/status", "crontabs/scale"}
    assert names["crontabs"]["shortNames"] == ["ct"]
    assert names["crontabs"]["categories"] == ["all"]
    assert names["crontabs"]["namespaced"] is True


async def test_versions_share_storage_and_apiversion_is_rewritten(api: Api) -> None:
    await make_crd(api)
    status, body = await api.post(
        "/apis/stable.example.com/v1beta1/namespaces/default/crontabs",
        crontab("old", "stable.example.com/v1beta1"))
    assert status == 201, body
    assert body["apiVersion"] == "stable.example.com/v1beta1"
    raw = await api.store.get("/registry/stable.example.com/crontabs/default/old")
    assert raw is not None and b'"apiVersion":"stable.example.com/v1"' in raw.value
    status, got = await api.get(f"{CT}/old")
    assert got["apiVersion"] == "stable.example.com/v1"
    status, listed = await api.get("/apis/stable.example.com/v1beta1/crontabs")
    assert [i["apiVersion"] for i in listed["items"]] == ["stable.example.com/v1beta1"]


async def test_defaults_pruning_and_int_or_string(api: Api) -> None:
    await make_crd(api)
    body = crontab("d", port="http", extra={"anything": {"goes": 1}}, bogus=True)
    status, created = await api.post(CT, body)
    assert status == 201
    spec = created["spec"]
    assert spec["replicas"] == 1 and spec["maxReplicas"] == 10
    assert spec["port"] == "http"
    assert spec["extra"] == {"anything": {"goes": 1}}
    assert "bogus" not in spec
    status, strict = await api.post(f"{CT}?fieldValidation=Strict", crontab("s", bogus=1))
    assert status == 400
    assert strict["message"] == ('CronTab in version "v1" cannot be handled as a CronTab: '
                                 'strict decoding error: unknown field "spec.bogus"')


async def test_schema_errors_have_upstream_messages(api: Api) -> None:
    await make_crd(api)
    status, body = await api.post(CT, crontab("bad", replicas="three", mode="c"))
    assert status == 422
    assert body["message"] == (
        'CronTab.stable.example.com "bad" is invalid: ['
        'spec.replicas: Invalid value: "string": spec.replicas in body must be of type '
        'integer: "string", spec.mode: Unsupported value: "c": supported values: "a", "b", '
        '<nil>: Invalid value: "null": some validation rules were not checked because the '
        "object was invalid; correct the existing errors to complete validation, "
        '.spec.replicas: Invalid value: 0: .spec.replicas accessor error: three is of the '
        'type string, expected int64]')
    causes = {c["field"]: c for c in body["details"]["causes"][:3]}
    assert causes["spec.replicas"]["reason"] == "FieldValueTypeInvalid"
    assert causes["spec.mode"]["reason"] == "FieldValueNotSupported"
    assert causes["<nil>"]["reason"] == "FieldValueInvalid"  # Go's nil field.Path
    status, body = await api.post(CT, {"apiVersion": "stable.example.com/v1", "kind": "CronTab",
                                       "metadata": {"name": "nospec"}, "spec": {}})
    assert status == 422
    assert "spec.cronSpec: Required value" in body["message"]
    status, body = await api.post(CT, crontab("pat", cronSpec="nope"))
    assert "spec.cronSpec in body should match" in body["message"]
    status, body = await api.post(CT, crontab(
        "dup", ports=[{"name": "a", "port": 1}, {"name": "a", "port": 2}]))
    assert status == 422
    assert 'spec.ports[1]: Duplicate value: {"name":"a"}' \
        in body["message"]


async def test_cel_rules_and_message_expression(api: Api) -> None:
    await make_crd(api)
    status, body = await api.post(CT, crontab("c1", replicas=20, maxReplicas=5))
    assert status == 422
    assert body["message"] == ('CronTab.stable.example.com "c1" is invalid: spec: Invalid '
                               'value: "object": replicas must not exceed maxReplicas')
    status, body = await api.post(CT, crontab("c2", image="bad"))
    assert status == 422
    assert body["message"].endswith('spec: Invalid value: "object": image bad is not allowed')


async def test_status_and_scale_subresources(api: Api) -> None:
    await make_crd(api)
    status, created = await api.post(CT, {**crontab("s"), "status": {"replicas": 9}})
    assert status == 201 and "status" not in created
    assert created["metadata"]["generation"] == 1
    obj = copy.deepcopy(created)
    obj["status"] = {"replicas": 2, "phase": "Running", "selector": "app=x"}
    status, updated = await api.put(f"{CT}/s/status", obj)
    assert status == 200, updated
    assert updated["status"]["phase"] == "Running"
    assert updated["metadata"]["generation"] == 1
    status, scale = await api.get(f"{CT}/s/scale")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 1}
    assert scale["status"] == {"replicas": 2, "selector": "app=x"}
    status, scaled = await api.patch(f"{CT}/s/scale", {"spec": {"replicas": 4}},
                                     content_type="application/merge-patch+json")
    assert status == 200, scaled
    assert scaled["spec"]["replicas"] == 4
    for value in ("3", 2.5):  # decoded into autoscaling/v1 Scale, as for built-in kinds
        status, body = await api.patch(f"{CT}/s/scale", {"spec": {"replicas": value}},
                                       content_type="application/merge-patch+json")
        assert status == 422, body
        assert body["message"].endswith(
            f"json: cannot unmarshal {'string' if value == '3' else 'number 2.5'} into Go "
            "struct field ScaleSpec.spec.replicas of type int32")
    scaled["spec"]["replicas"] = "3"
    status, body = await api.put(f"{CT}/s/scale", scaled)
    assert status == 400, body
    assert body["message"] == (
        'Scale in version "v1" cannot be handled as a Scale: json: cannot unmarshal string '
        "into Go struct field ScaleSpec.spec.replicas of type int32")
    status, got = await api.get(f"{CT}/s")
    assert got["spec"]["replicas"] == 4
    assert got["metadata"]["generation"] == 2
    assert got["status"]["phase"] == "Running"
    # a main-resource write keeps the status
    got["status"] = {"phase": "Lost"}
    status, kept = await api.put(f"{CT}/s", got)
    assert kept["status"]["phase"] == "Running"
    status, _ = await api.patch(f"{CT}/s", {"spec": {"replicas": 2}},
                                content_type="application/strategic-merge-patch+json")
    assert status == 415


async def test_table_columns_and_selectors(api: Api) -> None:
    await make_crd(api)
    await api.post(CT, crontab("t1", image="nginx"))
    await api.post(CT, crontab("t2", image="busybox"))
    status, table = await api.get(CT, headers={"Accept": TABLE_ACCEPT})
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Spec", "Replicas"]
    assert table["rows"][0]["cells"] == ["t1", "* * * * */5", 1]
    status, listed = await api.get(f"{CT}?fieldSelector=spec.image=busybox")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["t2"]
    status, listed = await api.get(f"{CT}?fieldSelector=metadata.name=t1")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["t1"]
    status, body = await api.get(f"{CT}?fieldSelector=spec.cronSpec=x")
    assert status == 400 and body["message"] == "field label not supported: spec.cronSpec"


async def test_scale_subresource_table_has_the_crd_columns(api: Api) -> None:
    """Upstream's scale endpoint of a custom resource keeps the custom resource's table
    convertor: the CRD's columns, evaluated against the Scale."""
    await make_crd(api)
    await api.post(CT, crontab("t1", replicas=2))
    status, table = await api.get(f"{CT}/t1/scale", headers={"Accept": TABLE_ACCEPT})
    assert status == 200, table
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Spec", "Replicas"]
    [row] = table["rows"]
    assert row["cells"] == ["t1", None, 2]  # a Scale has no .spec.cronSpec
    assert row["object"]["metadata"]["name"] == "t1"


async def test_cluster_scoped_and_openapi(api: Api) -> None:
    body = crd(scope="Cluster")
    body["spec"]["versions"] = body["spec"]["versions"][:1]
    await make_crd(api, body)
    status, created = await api.post("/apis/stable.example.com/v1/crontabs", crontab("c"))
    assert status == 201, created
    assert "namespace" not in created["metadata"]
    status, doc = await api.get("/openapi/v3/apis/stable.example.com/v1")
    assert status == 200
    schemas = doc["components"]["schemas"]
    assert "com.example.stable.v1.CronTab" in schemas
    spec = schemas["com.example.stable.v1.CronTab"]["properties"]["spec"]
    assert spec["properties"]["cronSpec"]["type"] == "string"
    status, index = await api.get("/openapi/v3")
    assert "apis/stable.example.com/v1" in index["paths"]


async def test_crd_validation_messages(api: Api) -> None:
    bad = crd(group="example")
    bad["metadata"]["name"] = "wrong"
    bad["spec"]["versions"][1]["storage"] = True
    status, body = await api.post(CRDS, bad)
    assert status == 422
    message = body["message"]
    assert 'metadata.name: Invalid value: "wrong": must be spec.names.plural+"."+spec.group' \
        in message
    assert 'spec.group: Invalid value: "example": should be a domain with at least one dot' \
        in message
    assert "must have exactly one version marked as storage version" in message
    webhook = crd(conversion={"strategy": "Webhook"})
    status, body = await api.post(CRDS, webhook)
    assert status == 422
    assert "spec.conversion.strategy: Forbidden: Webhook conversion is not supported" \
        in body["message"]
    nontyped = crd()
    nontyped["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["loose"] = {"description": "no type"}
    status, body = await api.post(CRDS, nontyped)
    assert status == 422
    assert ("spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[loose].type: "
            "Required value: must not be empty for specified object fields") in body["message"]
    badrule = crd()
    badrule["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"] = [{"rule": "self.replicas <="}]
    status, body = await api.post(CRDS, badrule)
    assert status == 422
    assert "x-kubernetes-validations[0].rule: Invalid value" in body["message"]
    assert "compilation failed" in body["message"]
    await make_crd(api)
    status, created = await api.get(f"{CRDS}/crontabs.stable.example.com")
    created["spec"]["scope"] = "Cluster"
    status, body = await api.put(f"{CRDS}/crontabs.stable.example.com", created)
    assert status == 422
    assert 'spec.scope: Invalid value: "Cluster": field is immutable' in body["message"]


async def make_conflicting_crd(api: Api) -> dict[str, Any]:
    """The crontabs CRD established, then `crontabz` of the same kind (its names not
    accepted); the latter as read back."""
    await make_crd(api)
    other = crd()
    other["metadata"]["name"] = "crontabz.stable.example.com"
    other["spec"]["names"] = {"plural": "crontabz", "kind": "CronTab"}
    status, _ = await api.post(CRDS, other)
    assert status == 201
    status, got = await api.get(f"{CRDS}/crontabz.stable.example.com")
    assert status == 200
    return got


async def test_names_conflict_is_not_accepted(api: Api) -> None:
    got = await make_conflicting_crd(api)
    conditions = {c["type"]: c for c in got["status"]["conditions"]}
    assert conditions["NamesAccepted"]["status"] == "False"
    # upstream checks kind, then listKind: the last conflict is the one reported
    assert conditions["NamesAccepted"]["reason"] == "ListKindConflict"
    assert conditions["NamesAccepted"]["message"] == '"CronTabList" is already in use'
    assert conditions["Established"]["status"] == "False"
    status, _ = await api.get("/apis/stable.example.com/v1/namespaces/default/crontabz")
    assert status == 404


async def test_deleting_the_crd_deletes_its_objects(api: Api) -> None:
    await make_crd(api)
    await api.post(CT, crontab("x"))
    status, _ = await api.delete(f"{CRDS}/crontabs.stable.example.com")
    assert status == 200

    async def gone() -> bool:
        status, _ = await api.get(f"{CRDS}/crontabs.stable.example.com")
        return status == 404

    await eventually(gone)
    assert await api.store.get("/registry/stable.example.com/crontabs/default/x") is None
    status, _ = await api.get(CT)
    assert status == 404
    status, groups = await api.get("/apis")
    assert "stable.example.com" not in {g["name"] for g in groups["groups"]}


async def test_watches_end_cleanly_when_their_crd_is_deleted(api: Api) -> None:
    """As upstream's CRD handler stops the resource's cacher once the CRD is gone: every
    watch of it (each served version, one namespace or all) gets the DELETED of each object
    the finalizer deleted, then its stream ends without an ERROR event, long before its
    timeout; the resource is a 404 afterwards. A watch of another CRD's resource goes on."""
    await make_crd(api)
    other = crd()
    other["metadata"]["name"] = "others.stable.example.com"
    other["spec"]["names"] = {"plural": "others", "kind": "Other"}
    await make_crd(api, other)
    others = "/apis/stable.example.com/v1/namespaces/default/others"
    status, _ = await api.post(CT, crontab("x"))
    assert status == 201
    _, listed = await api.get(CT)
    rv = listed["metadata"]["resourceVersion"]
    query = f"?watch=true&resourceVersion={rv}&timeoutSeconds=300"
    watches = [await open_watch(api, f"{CT}{query}"),
               await open_watch(api, f"/apis/stable.example.com/v1beta1/crontabs{query}")]
    survivor = await open_watch(api, f"{others}{query}")
    status, _ = await api.delete(f"{CRDS}/crontabs.stable.example.com")
    assert status == 200
    for watch in watches:
        event = await watch.next_non_bookmark()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("DELETED", "x")
        assert await watch.ended(timeout=30)
    status, body = await api.get(f"{CT}{query}")
    assert (status, body["reason"]) == (404, "NotFound")
    status, created = await api.post(others, {**crontab("y"), "kind": "Other"})
    assert status == 201, created
    event = await survivor.next_non_bookmark()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "y")
    survivor.close()


async def test_a_crd_deleted_before_it_was_established_leaves_no_strategy(api: Api) -> None:
    """The finalizer of a CRD never established (its kind taken) registers its storage
    version only to delete its objects: once the CRD is gone, nothing of it is left in the
    registry, as nothing is of an established one deleted."""
    registry = api.app[REGISTRY]

    def registered(plural: str) -> list[Any]:
        return [r for r in registry._strategies if r.custom and r.plural == plural]

    got = await make_conflicting_crd(api)
    assert {c["type"]: c["status"] for c in got["status"]["conditions"]}["Established"] == \
        "False"

    async def delete_and_wait(plural: str) -> None:
        status, _ = await api.delete(f"{CRDS}/{plural}.stable.example.com")
        assert status == 200

        async def gone() -> bool:
            status, _ = await api.get(f"{CRDS}/{plural}.stable.example.com")
            return status == 404 and registered(plural) == []

        await eventually(gone)

    await delete_and_wait("crontabz")
    assert registered("crontabs") != []  # the established one is still served
    await delete_and_wait("crontabs")


async def test_deleting_a_namespace_deletes_its_custom_resources(api: Api) -> None:
    await make_crd(api)
    await api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": "tmp"}})
    status, _ = await api.post("/apis/stable.example.com/v1/namespaces/tmp/crontabs",
                               crontab("in-tmp"))
    assert status == 201
    status, _ = await api.delete("/api/v1/namespaces/tmp")
    assert status == 200

    async def gone() -> bool:
        status, _ = await api.get("/api/v1/namespaces/tmp")
        return status == 404

    await eventually(gone)
    assert await api.store.get("/registry/stable.example.com/crontabs/tmp/in-tmp") is None


async def test_a_namespace_stuck_on_a_finalizer_says_why(api: Api) -> None:
    """Upstream's namespace deleter conditions: the five of them, the content and its
    finalizers remaining; all clear once the finalizer is removed, then the namespace goes."""
    await make_crd(api)
    await api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": "stuck"}})
    held = crontab("held")
    held["metadata"]["finalizers"] = ["x.io/f"]
    path = "/apis/stable.example.com/v1/namespaces/stuck/crontabs"
    status, _ = await api.post(path, held)
    assert status == 201
    status, _ = await api.delete("/api/v1/namespaces/stuck")
    assert status == 200

    async def conditions() -> dict[str, tuple[str, str, str]] | None:
        _, ns = await api.get("/api/v1/namespaces/stuck")
        found = {c["type"]: (c["status"], c["reason"], c["message"])
                 for c in (ns.get("status") or {}).get("conditions") or []}
        return found or None

    await eventually(conditions)
    _, ns = await api.get("/api/v1/namespaces/stuck")
    assert ns["status"]["phase"] == "Terminating"
    assert [c["type"] for c in ns["status"]["conditions"]] == [
        "NamespaceDeletionDiscoveryFailure", "NamespaceDeletionGroupVersionParsingFailure",
        "NamespaceDeletionContentFailure", "NamespaceContentRemaining",
        "NamespaceFinalizersRemaining"]
    assert all(c["lastTransitionTime"] for c in ns["status"]["conditions"])
    assert await conditions() == {
        "NamespaceDeletionDiscoveryFailure": (
            "False", "ResourcesDiscovered", "All resources successfully discovered"),
        "NamespaceDeletionGroupVersionParsingFailure": (
            "False", "ParsedGroupVersions", "All legacy kube types successfully parsed"),
        "NamespaceDeletionContentFailure": (
            "False", "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization"),
        "NamespaceContentRemaining": (
            "True", "SomeResourcesRemain",
            "Some resources are remaining: crontabs.stable.example.com has 1 resource "
            "instances"),
        "NamespaceFinalizersRemaining": (
            "True", "SomeFinalizersRemain",
            "Some content in the namespace has finalizers remaining: x.io/f in 1 resource "
            "instances"),
    }
    status, _ = await api.patch(f"{path}/held", {"metadata": {"finalizers": None}},
                                "application/merge-patch+json")
    assert status == 200

    async def gone() -> bool:
        status, _ = await api.get("/api/v1/namespaces/stuck")
        return status == 404

    await eventually(gone)


async def test_watch_streams_custom_resources_in_the_version_asked(api: Api) -> None:
    await make_crd(api)
    _, listed = await api.get(CT)
    rv = listed["metadata"]["resourceVersion"]
    await api.post(CT, crontab("w"))
    response = await api.client.get(
        f"/apis/stable.example.com/v1beta1/namespaces/default/crontabs?watch=true"
        f"&resourceVersion={rv}&timeoutSeconds=1")
    text = await response.text()
    first = json.loads(text.splitlines()[0])
    assert first["type"] == "ADDED"
    assert first["object"]["apiVersion"] == "stable.example.com/v1beta1"
    assert first["object"]["metadata"]["name"] == "w"


async def test_a_body_of_another_version_or_kind_is_refused_as_upstream(api: Api) -> None:
    await make_crd(api)
    status, body = await api.post(CT, crontab("v", "stable.example.com/v2"))
    assert (status, body["message"]) == (400, (
        "the API version in the data (stable.example.com/v2) does not match the expected API "
        "version (stable.example.com/v1)"))
    other = {**crontab("k"), "kind": "SomethingElse"}
    status, body = await api.post(CT, other)
    assert (status, body["message"]) == (422, (
        'SomethingElse.stable.example.com "k" is invalid: kind: Invalid value: '
        '"SomethingElse": must be CronTab'))


async def test_cel_cost_far_over_budget_is_refused_and_rules_warn_about_cost(
        api: Api) -> None:
    quadratic = crd()
    spec = quadratic["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["tags"] = {"type": "array", "items": {"type": "string"}}
    spec["x-kubernetes-validations"].append(
        {"rule": "self.tags.all(a, self.tags.exists_one(b, a == b))"})
    status, body, _ = await api.request("POST", CRDS, quadratic)
    assert status == 422
    assert body["details"]["causes"] == [{
        "reason": "FieldValueForbidden",
        "field": "spec.versions[0].schema.openAPIV3Schema.properties[spec]"
                 ".x-kubernetes-validations[2].rule",
        "message": "Forbidden: estimated rule cost exceeds budget by factor of more than 100x "
                   "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength "
                   "where arrays, maps, and strings are declared)"}]
    spec["properties"]["tags"]["maxItems"] = 100
    status, body, response = await api.request("POST", CRDS, quadratic)
    assert status == 201, body
    warnings = response.headers.getall("Warning", [])
    assert warnings == ['299 - "spec.versions[0].schema.openAPIV3Schema.properties[spec]'
                        '.x-kubernetes-validations: this server checks only a lower bound of '
                        'the estimated cost of x-kubernetes-validations rules (upstream '
                        'refuses a rule whose estimated cost exceeds its budget); it applies '
                        "upstream's runtime cost limits with an approximate count, and "
                        'evaluates rules far more slowly (within those limits a write can '
                        'take minutes); bound arrays, maps and strings with maxItems, '
                        'maxProperties and maxLength"'], warnings


async def test_cel_rules_share_one_runtime_cost_budget_per_object(api: Api) -> None:
    """Two rules on every item of `spec.items`, each within upstream's estimated cost (12
    items of 9,000 characters: 12 x 900 x 900 < 10,000,000): at run time a request of 7 such
    items runs out of the object's budget at the seventh item's first rule, with upstream's
    message, and nothing after it is checked; a request of cheap items passes."""
    body = crd()
    spec = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["items"] = {
        "type": "array", "maxItems": 12,
        "items": {"type": "string", "maxLength": 9000, "x-kubernetes-validations": [
            {"rule": "self.contains(self)", "message": "a"},
            {"rule": "self.contains(self)", "message": "b"}]}}
    spec["properties"]["later"] = {"type": "integer", "x-kubernetes-validations": [
        {"rule": "self > 0", "message": "later must be positive"}]}
    await make_crd(api, body)
    big = [str(i) * 9000 for i in range(8)]
    status, body = await api.post(CT, crontab("costly", items=big, later=0))
    assert status == 422, body
    assert body["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "spec.items[6]",
        "message": 'Invalid value: "string": validation failed due to running out of cost '
                   "budget, no further validation rules will be run"}]
    status, body = await api.post(CT, crontab("cheap", items=["x" * 100] * 12, later=0))
    assert (status, body["details"]["causes"][0]["field"]) == (422, "spec.later")
    status, body = await api.post(CT, crontab("fine", items=["x" * 100] * 12, later=1))
    assert status == 201, body
async def test_a_deprecated_version_warns_on_every_request(api: Api) -> None:
    """upstream's CRD handler: every request to a deprecated served version (reads, writes,
    watches, errors, subresources) carries its `deprecationWarning`, else `GROUP/VERSION
    KIND is deprecated; use GROUP/NEWEST KIND`; the other versions carry none."""
    body = crd()
    body["spec"]["versions"][1] |= {"deprecated": True}
    body["spec"]["versions"].append({
        "name": "v1alpha1", "served": True, "storage": False, "deprecated": True,
        "deprecationWarning": "v1alpha1 CronTabs go away in 2027",
        "schema": {"openAPIV3Schema": copy.deepcopy(SCHEMA)}})
    await make_crd(api, body)
    beta = "/apis/stable.example.com/v1beta1/namespaces/default/crontabs"
    default = ('299 - "stable.example.com/v1beta1 CronTab is deprecated; '
               'use stable.example.com/v1 CronTab"')

    async def warnings(method: str, path: str, payload: Any = None) -> list[str]:
        _, _, response = await api.request(method, path, payload)
        return response.headers.getall("Warning", [])

    assert await warnings("POST", beta, crontab("a", "stable.example.com/v1beta1")) == [
        default]
    assert await warnings("GET", f"{beta}/a") == [default]
    assert await warnings("GET", f"{beta}/missing") == [default]  # a 404 too
    assert await warnings("GET", "/apis/stable.example.com/v1alpha1/crontabs") == [
        '299 - "v1alpha1 CronTabs go away in 2027"']
    assert await warnings("GET", f"{CT}/a") == []
    assert await warnings("GET", f"{CT}/a/status") == []
    response = await api.client.get(f"{beta}?watch=true&timeoutSeconds=1")
    assert response.headers.getall("Warning", []) == [default]
    await response.release()
    # the deprecation warning comes before the request's own (an unknown field, dropped)
    got = await warnings("POST", f"{beta}?fieldValidation=Warn",
                         {**crontab("b", "stable.example.com/v1beta1"), "junk": 1})
    assert got[0] == default and len(got) == 2 and "junk" in got[1]

    # deprecationWarning as upstream validates it
    bad = crd()
    bad["metadata"]["name"] = "others.stable.example.com"
    bad["spec"]["names"] = {"plural": "others", "kind": "Other"}
    bad["spec"]["versions"][0]["deprecationWarning"] = "not deprecated"
    bad["spec"]["versions"][1] |= {"deprecated": True, "deprecationWarning": "x" * 257}
    status, refused = await api.post(CRDS, bad)
    assert status == 422
    assert [c["message"] for c in refused["details"]["causes"]
            if c["field"].endswith("deprecationWarning")] == [
        'Invalid value: "not deprecated": can only be set for deprecated versions',
        f'Invalid value: "{"x" * 257}": must be <= 256 characters long']


async def test_cel_rules_are_evaluated_off_the_event_loop(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A create and a patch of a custom resource whose rules take long (here: held until the
    test lets them go) leave the apiserver answering other requests meanwhile: a GET sent
    while the rules run completes before the write does. Built-in kinds and custom
    resources without rules are validated inline. So are the rules the Warning pass
    evaluates."""
    await make_crd(api)
    registry = api.app[REGISTRY]
    crontabs = resources.lookup("stable.example.com", "v1", "crontabs")
    assert crontabs is not None
    assert registry.strategy(crontabs).validates_in_thread
    assert not CustomResourceStrategy(crontabs, {"name": "v1"}).validates_in_thread
    assert not registry.strategy(resources.core_resource("pods")).validates_in_thread

    started, release = threading.Event(), threading.Event()
    evaluate = cel.evaluate
    order: list[str] = []

    def held(*args: Any, **kwargs: Any) -> Any:
        started.set()
        release.wait(5)  # a guard only: inline evaluation would hold the loop this long
        order.append("rule")
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(cel, "evaluate", held)

    async def while_rules_run(write: Callable[[], Awaitable[tuple[int, Any]]]) -> None:
        started.clear()
        release.clear()
        order.clear()

        async def written() -> int:
            status, body = await write()
            order.append("write")
            assert status in (200, 201), body
            return status

        task = asyncio.create_task(written())
        assert await asyncio.to_thread(started.wait, 10)
        status, _ = await api.get("/api/v1/namespaces/default")
        order.append("get")
        release.set()
        await task
        # the GET was answered while the first rule was being evaluated
        assert status == 200
        assert order[0] == "get" and order[-1] == "write" and "rule" in order, order

    await while_rules_run(lambda: api.post(CT, crontab("slow")))
    await while_rules_run(lambda: api.patch(f"{CT}/slow", {"spec": {"replicas": 2}},
                                            "application/merge-patch+json"))
    # the Warning pass (for a schema whose rules may call a function ephemera's CEL has
    # not, which it evaluates) too, on a create, an update and a patch
    monkeypatch.setattr(crschema, "may_leave_rules_unchecked", lambda _schema: True)
    await while_rules_run(lambda: api.post(CT, crontab("slower")))
    _, slower = await api.get(f"{CT}/slower")
    await while_rules_run(lambda: api.put(f"{CT}/slower", {**slower, "spec": {
        **slower["spec"], "replicas": 3}}))
    await while_rules_run(lambda: api.patch(f"{CT}/slower", {"spec": {"replicas": 2}},
                                            "application/merge-patch+json"))


def warning_texts(response: Any) -> list[str]:
    """The texts of a response's `Warning` headers (`299 - "TEXT"`, Go-quoted)."""
    return [json.loads(h.removeprefix("299 - ")) for h in response.headers.getall("Warning", [])]


PREFER_QUALIFIED = ("prefer a domain-qualified finalizer name including a path (/) to avoid "
                    "accidental conflicts with other finalizer writers")


async def test_custom_resource_finalizers_are_checked_as_apimachinery_does_and_warned(
        api: Api) -> None:
    """Custom resources get apimachinery's finalizer check, not the built-in kinds'
    standard-name rule: a finalizer without a `/` is stored, with a warning on the create or
    main-resource update that adds it."""
    await make_crd(api)
    body = crontab("f")
    body["metadata"]["finalizers"] = ["crontab.stable.example.com", "example.com/clean"]
    status, created, response = await api.request("POST", CT, body)
    assert status == 201, created
    assert created["metadata"]["finalizers"] == ["crontab.stable.example.com",
                                                 "example.com/clean"]
    assert warning_texts(response) == [
        f'metadata.finalizers: "crontab.stable.example.com": {PREFER_QUALIFIED}']
    status, patched, response = await api.request(
        "PATCH", f"{CT}/f", {"metadata": {"finalizers": [
            "crontab.stable.example.com", "example.com/clean", "other"]}},
        content_type="application/merge-patch+json")
    assert status == 200, patched
    assert warning_texts(response) == [f'metadata.finalizers: "other": {PREFER_QUALIFIED}']
    bad = crontab("g")
    bad["metadata"]["finalizers"] = ["bad name"]
    status, refused = await api.post(CT, bad)
    assert status == 422
    assert [c["field"] for c in refused["details"]["causes"]] == ["metadata.finalizers"]


async def test_a_put_without_resource_version_is_refused_for_custom_resources_and_crds(
        api: Api) -> None:
    """Custom resources (main resource and /status) and CRDs do not AllowUnconditionalUpdate:
    a PUT must carry the resourceVersion it replaces (a PATCH needs none)."""
    crd_obj = await make_crd(api)
    status, created = await api.post(CT, crontab("u"))
    assert status == 201, created
    message = ('crontabs.stable.example.com "u" is invalid: metadata.resourceVersion: '
               'Invalid value: 0x0: must be specified for an update')
    for path in (f"{CT}/u", f"{CT}/u/status"):
        body = copy.deepcopy(created)
        del body["metadata"]["resourceVersion"]
        status, refused = await api.put(path, body)
        assert status == 422, refused
        assert refused["message"] == message
        assert refused["details"] == {
            "name": "u", "group": "stable.example.com", "kind": "crontabs",
            "causes": [{"reason": "FieldValueInvalid", "field": "metadata.resourceVersion",
                        "message": "Invalid value: 0x0: must be specified for an update"}]}
    status, updated = await api.put(f"{CT}/u", created)
    assert status == 200, updated
    del crd_obj["metadata"]["resourceVersion"]
    status, refused = await api.put(f"{CRDS}/crontabs.stable.example.com", crd_obj)
    assert status == 422
    assert refused["message"] == (
        'customresourcedefinitions.apiextensions.k8s.io "crontabs.stable.example.com" is '
        "invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update")
    status, patched = await api.patch(f"{CT}/u", {"spec": {"image": "x"}},
                                      content_type="application/merge-patch+json")
    assert status == 200, patched


async def test_a_status_write_changes_the_status_alone(api: Api) -> None:
    """upstream's custom resource status strategy: the stored object with the written status
    (and managedFields); labels, annotations and finalizers stay as stored; a `/status` PUT
    without a status removes it."""
    await make_crd(api)
    status, created = await api.post(CT, crontab("st"))
    assert status == 201, created
    write = {"metadata": {"labels": {"via": "status"}, "annotations": {"a": "b"},
                          "finalizers": ["x.io/f"]},
             "spec": {"image": "changed"}, "status": {"phase": "S"}}
    status, after = await api.patch(f"{CT}/st/status", write,
                                    content_type="application/merge-patch+json")
    assert status == 200, after
    assert after["status"] == {"phase": "S"}
    assert not {"labels", "annotations", "finalizers"} & set(after["metadata"])
    assert "image" not in after["spec"]
    assert [(m["manager"], m.get("subresource")) for m in after["metadata"]["managedFields"]
            ][-1][1] == "status"
    del after["status"]
    status, cleared = await api.put(f"{CT}/st/status", after)
    assert status == 200, cleared
    assert "status" not in cleared


@pytest.mark.parametrize(("metadata", "error"), [
    ({"annotations": {"a": 1}},
     "json: cannot unmarshal number into Go struct field ObjectMeta.annotations of type string"),
    ({"ownerReferences": "x"},
     "json: cannot unmarshal string into Go struct field ObjectMeta.ownerReferences of type "
     "[]v1.OwnerReference"),
    ({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u",
                           "controller": "yes"}]},
     "json: cannot unmarshal string into Go struct field OwnerReference.ownerReferences."
     "controller of type bool"),
])
async def test_custom_resource_metadata_is_decoded_as_objectmeta(
        api: Api, metadata: dict[str, Any], error: str) -> None:
    """upstream's apiextensions decoder reads a custom object's metadata into a typed
    ObjectMeta: a value of the wrong type is the decoder's 400 on create and update, and a
    patch that makes one is refused (422 on `patch`, as for the built-in kinds)."""
    await make_crd(api)
    body = crontab("m")
    body["metadata"].update(metadata)
    status, refused = await api.post(CT, body)
    assert status == 400, refused
    assert refused["message"] == f'CronTab in version "v1" cannot be handled as a CronTab: {error}'
    status, created = await api.post(CT, crontab("m"))
    assert status == 201, created
    created["metadata"].update(metadata)
    status, refused = await api.put(f"{CT}/m", created)
    assert status == 400, refused
    assert refused["message"].endswith(error)
    status, refused = await api.patch(f"{CT}/m", {"metadata": metadata},
                                      content_type="application/merge-patch+json")
    assert status == 422, refused
    assert refused["details"]["causes"][0]["field"] == "patch"
    assert refused["details"]["causes"][0]["message"].endswith(f": {error}")


async def test_a_root_rule_error_is_at_gos_nil_path(api: Api) -> None:
    """A rule on the CRD's root schema errs at `<nil>`, as upstream's CEL validator (nil
    root path) reports it."""
    body = crd()
    version = body["spec"]["versions"][0]
    version["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = [
        {"rule": "self.metadata.name.startsWith('g')", "message": "name must start with g"}]
    await make_crd(api, body)
    status, refused = await api.post(CT, crontab("x1"))
    assert status == 422
    assert refused["message"] == ('CronTab.stable.example.com "x1" is invalid: <nil>: Invalid '
                                  'value: "object": name must start with g')
    assert refused["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "<nil>",
        "message": 'Invalid value: "object": name must start with g'}]
    status, created = await api.post(CT, crontab("g1"))
    assert status == 201, created

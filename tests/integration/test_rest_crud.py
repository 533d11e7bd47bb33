"""The REST verbs on the in-process apiserver (SqliteStore in a tmp dir): create, get, list,
update, delete, dryRun, with upstream's Status errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
from apiserver_fixtures import Api, configmap, pod

from ephemera.api.meta import GENERATE_NAME_ALPHABET
from ephemera.apiserver.app import REGISTRY

PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"


def status_of(body: dict[str, object]) -> tuple[object, object, object]:
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    return body["code"], body["reason"], body["message"]


async def test_default_namespaces_exist(api: Api) -> None:
    status, body = await api.get("/api/v1/namespaces")
    assert status == 200
    names = {i["metadata"]["name"] for i in body["items"]}
    assert names == {"default", "kube-system", "kube-public", "kube-node-lease"}
    ns = body["items"][0]
    assert ns["status"] == {"phase": "Active"}
    assert ns["spec"] == {"finalizers": ["kubernetes"]}
    assert ns["metadata"]["labels"]["kubernetes.io/metadata.name"] == ns["metadata"]["name"]


async def test_create_fills_system_fields(api: Api) -> None:
    created = await api.create_pod("p1")
    md = created["metadata"]
    assert md["namespace"] == "default"
    assert re.fullmatch(r"[0-9a-f-]{36}", md["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", md["creationTimestamp"])
    assert int(md["resourceVersion"]) > 0
    assert md["generation"] == 1
    assert created["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert created["spec"]["restartPolicy"] == "Always"
    status, got = await api.get(f"{PODS}/p1")
    assert status == 200
    assert got["metadata"]["resourceVersion"] == md["resourceVersion"]
    assert got["metadata"]["uid"] == md["uid"]


async def test_create_records_managed_fields_for_the_field_manager(api: Api) -> None:
    status, body = await api.post(f"{PODS}?fieldManager=kubectl-create", pod("p1"))
    assert status == 201
    managers = [e["manager"] for e in body["metadata"]["managedFields"]]
    assert managers == ["kubectl-create"]


async def test_generate_name_uses_upstream_alphabet(api: Api) -> None:
    body = pod("")
    body["metadata"] = {"generateName": "web-"}
    status, created = await api.post(PODS, body)
    assert status == 201
    name = created["metadata"]["name"]
    assert name.startswith("web-") and len(name) == len("web-") + 5
    assert all(c in GENERATE_NAME_ALPHABET for c in name[4:])


async def test_create_duplicate_is_already_exists(api: Api) -> None:
    await api.create_pod("p1")
    status, body = await api.post(PODS, pod("p1"))
    assert status == 409
    assert status_of(body) == (409, "AlreadyExists", 'pods "p1" already exists')
    assert body["details"] == {"name": "p1", "kind": "pods"}


async def test_create_needs_a_name(api: Api) -> None:
    body = pod("")
    body["metadata"] = {}
    status, out = await api.post(PODS, body)
    assert status == 422
    assert status_of(out) == (
        422, "Invalid",
        'Pod "" is invalid: metadata.name: Required value: name or generateName is required')
    assert out["details"]["causes"] == [{"reason": "FieldValueRequired",
                                         "message": "Required value: name or generateName is "
                                                    "required",
                                         "field": "metadata.name"}]


async def test_create_in_missing_namespace_is_not_found(api: Api) -> None:
    status, body = await api.post("/api/v1/namespaces/nope/pods", pod("p1"))
    assert status == 404
    assert status_of(body) == (404, "NotFound", 'namespaces "nope" not found')


async def test_create_rejects_mismatched_body(api: Api) -> None:
    body = pod("p1")
    body["metadata"]["namespace"] = "other"
    status, out = await api.post(PODS, body)
    assert (status, out["message"]) == (
        400, "the namespace of the provided object does not match the namespace sent on the "
             "request")
    status, out = await api.post(PODS, configmap("c1"))
    assert status == 400
    assert out["message"] == ('ConfigMap in version "v1" cannot be handled as a Pod: converting '
                              "(v1.ConfigMap) to (core.Pod): unknown conversion")
    status, out = await api.post(PODS, {**pod("p1"), "kind": "Foo"})
    assert status == 400
    assert out["message"].startswith('Foo in version "v1" cannot be handled as a Pod: no kind '
                                     '"Foo" is registered for version "v1"')
    status, out = await api.post(PODS, {**pod("p1"), "metadata": {"name": "p1",
                                                                  "resourceVersion": "3"}})
    assert (status, out["message"]) == (400,
                                        "resourceVersion can not be set for create requests")
    status, out = await api.post(PODS, b"[1, 2]")
    assert status == 400
    assert out["message"].startswith("the object provided is unrecognized (must be of type Pod)")


async def test_create_invalid_name(api: Api) -> None:
    status, out = await api.post(CMS, configmap("Bad_Name"))
    assert status == 422
    assert out["message"] == (
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase '
        "RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
        "must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
        r"validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


async def test_field_validation_strict_warn_ignore(api: Api) -> None:
    body = pod("p1")
    body["spec"]["containers"][0]["foo"] = 1
    status, out = await api.post(f"{PODS}?fieldValidation=Strict", body)
    assert status == 400
    assert status_of(out) == (400, "BadRequest",
                              'Pod in version "v1" cannot be handled as a Pod: strict decoding '
                              'error: unknown field "spec.containers[0].foo"')
    status, out, response = await api.request("POST", PODS, body)
    assert status == 201
    assert response.headers.getall("Warning") == [
        '299 - "unknown field \\"spec.containers[0].foo\\""']
    assert "foo" not in out["spec"]["containers"][0]
    body["metadata"]["name"] = "p2"
    status, out, response = await api.request("POST", f"{PODS}?fieldValidation=Ignore", body)
    assert status == 201
    assert "Warning" not in response.headers
    assert "foo" not in out["spec"]["containers"][0]


async def test_dry_run_create_stores_nothing(api: Api) -> None:
    status, out = await api.post(f"{PODS}?dryRun=All", pod("p1"))
    assert status == 201
    assert out["metadata"]["name"] == "p1" and "resourceVersion" not in out["metadata"]
    status, _ = await api.get(f"{PODS}/p1")
    assert status == 404
    status, out = await api.post(f"{PODS}?dryRun=Bogus", pod("p1"))
    assert status == 422
    assert out["message"] == ('CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported '
                              'value: []string{"Bogus"}: supported values: "All"')


async def test_get_missing_is_not_found(api: Api) -> None:
    status, body = await api.get(f"{PODS}/nope")
    assert status == 404
    assert status_of(body) == (404, "NotFound", 'pods "nope" not found')
    status, body = await api.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/x")
    assert body["message"] == 'leases.coordination.k8s.io "x" not found'
    assert body["details"] == {"name": "x", "group": "coordination.k8s.io", "kind": "leases"}


async def test_list_has_resource_version_and_items(api: Api) -> None:
    await api.create_pod("a")
    b = await api.create_pod("b")
    status, body = await api.get(PODS)
    assert status == 200
    assert body["kind"] == "PodList" and body["apiVersion"] == "v1"
    assert int(body["metadata"]["resourceVersion"]) >= int(b["metadata"]["resourceVersion"])
    assert [i["metadata"]["name"] for i in body["items"]] == ["a", "b"]
    assert body["items"][1]["metadata"]["resourceVersion"] == b["metadata"]["resourceVersion"]
    assert body["items"][0]["kind"] == "Pod"


async def test_list_across_namespaces(api: Api) -> None:
    await api.post("/api/v1/namespaces", {"metadata": {"name": "other"}})
    await api.create_pod("a")
    await api.create_pod("b", namespace="other")
    status, body = await api.get("/api/v1/pods")
    assert status == 200
    assert sorted((i["metadata"]["namespace"], i["metadata"]["name"])
                  for i in body["items"]) == [("default", "a"), ("other", "b")]
    status, body = await api.get("/api/v1/pods?fieldSelector=metadata.namespace%3Dother")
    assert [i["metadata"]["name"] for i in body["items"]] == ["b"]


async def test_list_with_selectors(api: Api) -> None:
    await api.create_pod("a", labels={"app": "web"}, node="n1")
    await api.create_pod("b", labels={"app": "db"})
    await api.create_pod("c")

    async def names(query: str) -> list[str]:
        status, body = await api.get(f"{PODS}?{query}")
        assert status == 200, body
        return [i["metadata"]["name"] for i in body["items"]]

    assert await names("labelSelector=app%3Dweb") == ["a"]
    assert await names("labelSelector=app") == ["a", "b"]
    assert await names("labelSelector=app+notin+(web)") == ["b", "c"]
    assert await names("labelSelector=!app") == ["c"]
    assert await names("fieldSelector=spec.nodeName%3Dn1") == ["a"]
    assert await names("fieldSelector=spec.nodeName%3D") == ["b", "c"]
    assert await names("fieldSelector=status.phase%3DPending") == ["a", "b", "c"]
    assert await names("fieldSelector=metadata.name%3Db%2Cmetadata.name%3Db") == ["b"]
    assert await names("fieldSelector=metadata.name%3Dzz") == []
    status, body = await api.get(f"{PODS}?fieldSelector=spec.bogus%3Dx")
    assert status == 400
    assert status_of(body) == (400, "BadRequest", "field label not supported: spec.bogus")
    status, body = await api.get(f"{CMS}?fieldSelector=spec.nodeName%3Dx")
    assert body["message"] == "field label not supported: spec.nodeName"
    status, body = await api.get(f"{PODS}?labelSelector=a+in+b")
    assert status == 400


async def test_events_filter_on_involved_object(api: Api) -> None:
    for i, name in enumerate(["p1", "p2"]):
        event = {"apiVersion": "v1", "kind": "Event",
                 "metadata": {"name": f"e{i}"}, "reason": "Scheduled", "type": "Normal",
                 "involvedObject": {"kind": "Pod", "name": name, "namespace": "default",
                                    "uid": f"u{i}"}}
        status, body = await api.post("/api/v1/namespaces/default/events", event)
        assert status == 201, body
    status, body = await api.get(
        "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dp1%2C"
        "involvedObject.namespace%3Ddefault%2CinvolvedObject.uid%3Du0&limit=500")
    assert status == 200
    assert [e["metadata"]["name"] for e in body["items"]] == ["e0"]


async def test_list_pagination_with_continue(api: Api) -> None:
    for i in range(5):
        await api.create_pod(f"p{i}")
    status, first = await api.get(f"{PODS}?limit=2")
    assert [i["metadata"]["name"] for i in first["items"]] == ["p0", "p1"]
    token = first["metadata"]["continue"]
    rv = first["metadata"]["resourceVersion"]
    await api.create_pod("p5")  # after the first page: not in this list
    status, second = await api.get(f"{PODS}?limit=2&continue={token}")
    assert [i["metadata"]["name"] for i in second["items"]] == ["p2", "p3"]
    assert second["metadata"]["resourceVersion"] == rv
    status, third = await api.get(f"{PODS}?limit=2&continue={second['metadata']['continue']}")
    assert [i["metadata"]["name"] for i in third["items"]] == ["p4"]
    assert "continue" not in third["metadata"]
    status, _ = await api.get(f"{PODS}?limit=2&continue=bogus!")
    assert status == 400


async def test_list_pagination_with_selector(api: Api) -> None:
    for i in range(6):
        await api.create_pod(f"p{i}", labels={"even": str(i % 2 == 0).lower()})
    seen: list[str] = []
    token = ""
    while True:
        status, page = await api.get(f"{PODS}?limit=2&labelSelector=even%3Dtrue"
                                     + (f"&continue={token}" if token else ""))
        assert status == 200
        seen += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert seen == ["p0", "p2", "p4"]


async def test_continue_after_compaction_is_expired(api: Api) -> None:
    for i in range(3):
        await api.create_pod(f"p{i}")
    _, first = await api.get(f"{PODS}?limit=1")
    for i in range(3):
        await api.patch(f"{PODS}/p{i}", {"metadata": {"labels": {"x": "y"}}},
                        "application/merge-patch+json")
    await api.store.compact(await api.store.current_revision())
    status, body = await api.get(f"{PODS}?limit=1&continue={first['metadata']['continue']}")
    assert status == 410
    assert body["reason"] == "Expired"
    assert body["message"].startswith("The provided continue parameter is too old to display a "
                                      "consistent list result.")
    fresh = body["metadata"]["continue"]
    status, rest = await api.get(f"{PODS}?continue={fresh}")
    assert status == 200
    assert [i["metadata"]["name"] for i in rest["items"]] == ["p1", "p2"]


async def test_list_at_exact_compacted_revision_is_gone(api: Api) -> None:
    created = await api.create_pod("p1")
    old_rv = created["metadata"]["resourceVersion"]
    await api.create_pod("p2")
    await api.store.compact(await api.store.current_revision())
    status, body = await api.get(f"{PODS}?resourceVersion={old_rv}&resourceVersionMatch=Exact")
    assert status == 410
    assert (body["reason"], body["message"]) == (
        "Expired", "The resourceVersion for the provided list is too old.")
    api.app[REGISTRY].block_timeout = 0.1
    status, body = await api.get(f"{PODS}?resourceVersion=999999")
    assert status == 504
    assert body["message"].startswith("Timeout: Too large resource version: 999999, current: ")


async def test_update_conflict_and_unconditional(api: Api) -> None:
    created = await api.create_pod("p1")
    stale = dict(created)
    created["metadata"]["labels"] = {"v": "1"}
    status, updated = await api.put(f"{PODS}/p1", created)
    assert status == 200
    assert updated["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]
    stale["metadata"] = dict(stale["metadata"], labels={"v": "2"})
    status, body = await api.put(f"{PODS}/p1", stale)
    assert status == 409
    assert status_of(body) == (
        409, "Conflict",
        'Operation cannot be fulfilled on pods "p1": the object has been modified; please apply '
        "your changes to the latest version and try again")
    unconditional = dict(updated)
    unconditional["metadata"] = {k: v for k, v in updated["metadata"].items()
                                 if k != "resourceVersion"}
    unconditional["metadata"]["labels"] = {"v": "3"}
    status, body = await api.put(f"{PODS}/p1", unconditional)
    assert status == 200
    assert body["metadata"]["labels"] == {"v": "3"}


async def test_update_missing_pod_is_not_found_but_events_are_created(api: Api) -> None:
    status, body = await api.put(f"{PODS}/ghost", pod("ghost"))
    assert status == 404
    assert body["message"] == 'pods "ghost" not found'
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
             "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R"}
    status, body = await api.put("/api/v1/namespaces/default/events/e1", event)
    assert status == 201
    assert body["metadata"]["uid"]


async def test_update_name_mismatch(api: Api) -> None:
    await api.create_pod("p1")
    status, body = await api.put(f"{PODS}/p1", pod("p2"))
    assert (status, body["message"]) == (
        400, "the name of the object (p2) does not match the name on the URL (p1)")


async def test_main_update_ignores_status_and_bumps_generation_on_spec_change(api: Api) -> None:
    created = await api.create_pod("p1")
    created["status"] = {"phase": "Running"}
    created["metadata"]["labels"] = {"a": "b"}
    status, body = await api.put(f"{PODS}/p1", created)
    assert status == 200
    assert body["status"]["phase"] == "Pending"
    assert body["metadata"]["generation"] == 1
    body["spec"]["activeDeadlineSeconds"] = 30
    status, body = await api.put(f"{PODS}/p1", body)
    assert body["metadata"]["generation"] == 2


async def test_update_keeps_system_metadata(api: Api) -> None:
    _, cm = await api.post(CMS, configmap("c1"))
    uid = cm["metadata"]["uid"]
    cm["metadata"]["uid"] = "other"
    status, body = await api.put(f"{CMS}/c1", cm)
    assert status == 422
    assert body["message"] == ('ConfigMap "c1" is invalid: metadata.uid: Invalid value: '
                               '"other": field is immutable')
    cm["metadata"].pop("uid")
    cm["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z"
    status, body = await api.put(f"{CMS}/c1", cm)
    assert status == 200
    assert body["metadata"]["creationTimestamp"] != "2000-01-01T00:00:00Z"
    assert body["metadata"]["uid"] == uid


async def test_dry_run_update_and_delete_change_nothing(api: Api) -> None:
    status, cm = await api.post(CMS, configmap("c1"))
    cm["data"] = {"k": "changed"}
    status, body = await api.put(f"{CMS}/c1?dryRun=All", cm)
    assert status == 200 and body["data"] == {"k": "changed"}
    status, body = await api.delete(f"{CMS}/c1", {"dryRun": ["All"]})
    assert status == 200
    status, body = await api.delete(f"{CMS}/c1?dryRun=All")
    assert status == 200
    status, stored = await api.get(f"{CMS}/c1")
    assert stored["data"] == {"k": "v"}
    assert stored["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]


async def test_delete_configmap_answers_success_status(api: Api) -> None:
    _, cm = await api.post(CMS, configmap("c1"))
    status, body = await api.delete(f"{CMS}/c1", {"propagationPolicy": "Background"})
    assert status == 200
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": "c1", "kind": "configmaps",
                                "uid": cm["metadata"]["uid"]}}
    status, body = await api.delete(f"{CMS}/c1")
    assert status == 404
    assert body["message"] == 'configmaps "c1" not found'


async def test_delete_preconditions(api: Api) -> None:
    _, cm = await api.post(CMS, configmap("c1"))
    status, body = await api.delete(f"{CMS}/c1", {"preconditions": {"uid": "nope"}})
    assert status == 409
    assert body["message"] == (
        'Operation cannot be fulfilled on ConfigMap "c1": the UID in the precondition (nope) '
        f"does not match the UID in record ({cm['metadata']['uid']}). The object might have "
        "been deleted and then recreated")
    status, body = await api.delete(f"{CMS}/c1", {"preconditions": {"resourceVersion": "1"}})
    assert status == 409
    assert "the ResourceVersion in the precondition (1) does not match" in body["message"]
    status, body = await api.delete(
        f"{CMS}/c1", {"preconditions": {"uid": cm["metadata"]["uid"],
                                        "resourceVersion": cm["metadata"]["resourceVersion"]}})
    assert status == 200


async def test_delete_options_validation(api: Api) -> None:
    await api.post(CMS, configmap("c1"))
    status, body = await api.delete(f"{CMS}/c1?propagationPolicy=Sideways")
    assert status == 422
    assert body["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
        '"Sideways": supported values: "Foreground", "Background", "Orphan"')


@pytest.mark.parametrize(("options", "message"), [
    ({"dryRun": "All"}, "json: cannot unmarshal string into Go struct field "
                        "DeleteOptions.dryRun of type []string"),
    ({"gracePeriodSeconds": "5"}, "json: cannot unmarshal string into Go struct field "
                                  "DeleteOptions.gracePeriodSeconds of type int64"),
    ({"propagationPolicy": 5}, "json: cannot unmarshal number into Go struct field "
                               "DeleteOptions.propagationPolicy of type v1.DeletionPropagation"),
    ({"preconditions": {"uid": 1}}, "json: cannot unmarshal number into Go struct field "
                                    "Preconditions.preconditions.uid of type string"),
])
async def test_a_delete_body_of_the_wrong_types(api: Api, options: dict[str, Any],
                                                 message: str) -> None:
    """The delete handler decodes DeleteOptions typed and answers its decoder's error as it
    is (not a Status error: 500, no reason); nothing is deleted."""
    await api.post(CMS, configmap("c1"))
    status, body = await api.delete(f"{CMS}/c1", options)
    assert (status, body) == (500, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                    "status": "Failure", "message": message, "code": 500})
    assert (await api.get(f"{CMS}/c1"))[0] == 200


async def test_delete_collection_with_selector(api: Api) -> None:
    for name, app in (("a", "web"), ("b", "web"), ("c", "db")):
        await api.post(CMS, configmap(name, labels={"app": app}))
    status, body = await api.delete(f"{CMS}?labelSelector=app%3Dweb")
    assert status == 200
    assert body["kind"] == "ConfigMapList"
    assert sorted(i["metadata"]["name"] for i in body["items"]) == ["a", "b"]
    _, left = await api.get(CMS)
    assert [i["metadata"]["name"] for i in left["items"]] == ["c"]


async def test_finalizers_hold_deletion_until_removed(api: Api) -> None:
    await api.post(CMS, configmap("c1", finalizers=["example.com/hold"]))
    status, body = await api.delete(f"{CMS}/c1")
    assert status == 200
    assert body["metadata"]["deletionTimestamp"]
    assert body["metadata"]["deletionGracePeriodSeconds"] == 0
    status, _ = await api.get(f"{CMS}/c1")
    assert status == 200
    status, _ = await api.patch(f"{CMS}/c1", {"metadata": {"finalizers": None}},
                                "application/merge-patch+json")
    assert status == 200
    status, _ = await api.get(f"{CMS}/c1")
    assert status == 404


async def test_secrets_fold_string_data(api: Api) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
              "stringData": {"password": "hunter2"}}
    status, body = await api.post("/api/v1/namespaces/default/secrets", secret)
    assert status == 201
    assert body["data"] == {"password": "aHVudGVyMg=="}
    assert body["type"] == "Opaque"
    assert "stringData" not in body
    bad = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s2"},
           "data": {"x": "!!!"}}
    status, body = await api.post("/api/v1/namespaces/default/secrets", bad)
    assert status == 400
    assert body["message"].startswith('Secret in version "v1" cannot be handled as a Secret: '
                                      "illegal base64 data at input byte 0")


async def test_cluster_scoped_nodes(api: Api) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "status": {"capacity": {"cpu": "4"}}}
    status, body = await api.post("/api/v1/nodes", node)
    assert status == 201
    assert "namespace" not in body["metadata"]
    status, body = await api.get("/api/v1/nodes/n1")
    assert status == 200 and body["status"]["capacity"] == {"cpu": "4"}
    status, _ = await api.get("/api/v1/namespaces/default/nodes/n1")
    assert status == 404


async def test_leases_in_their_group(api: Api) -> None:
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1",
                                                  "leaseDurationSeconds": 40}}
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    status, body = await api.post(path, lease)
    assert status == 201, body
    status, body = await api.put(f"{path}/n2", {**lease, "metadata": {"name": "n2"}})
    assert status == 201
    status, body = await api.get(path)
    assert [i["metadata"]["name"] for i in body["items"]] == ["n1", "n2"]
    status, body = await api.post(path, {**lease, "apiVersion": "v1"})
    assert status == 400


async def test_pagination_of_a_narrowed_cluster_wide_list(api: Api) -> None:
    await api.post("/api/v1/namespaces", {"metadata": {"name": "other"}})
    for i in range(3):
        await api.create_pod(f"p{i}", namespace="other")
        await api.create_pod(f"p{i}")
    query = "/api/v1/pods?limit=2&fieldSelector=metadata.namespace%3Dother"
    _, first = await api.get(query)
    _, second = await api.get(f"{query}&continue={first['metadata']['continue']}")
    names = [(i["metadata"]["namespace"], i["metadata"]["name"])
             for i in first["items"] + second["items"]]
    assert names == [("other", "p0"), ("other", "p1"), ("other", "p2")]

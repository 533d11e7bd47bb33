"""PATCH in its four content types, server-side apply, the no-op rule, and the pod
subresources (`status`, `binding`, `dynamic`), graceful deletion and namespace deletion."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from apiserver_fixtures import Api, configmap, open_watch, pod, serve

from ephemera.apiserver import namespaces
from ephemera.store import open_store

PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


async def test_merge_patch(api: Api) -> None:
    await api.post(CMS, configmap("c1", {"a": "1", "b": "2"}))
    status, body = await api.patch(f"{CMS}/c1", {"data": {"a": None, "c": "3"}}, MERGE)
    assert status == 200
    assert body["data"] == {"b": "2", "c": "3"}


async def test_json_patch(api: Api) -> None:
    await api.post(CMS, configmap("c1", {"a": "1"}))
    ops = [{"op": "add", "path": "/data/b", "value": "2"},
           {"op": "replace", "path": "/data/a", "value": "x"}]
    status, body = await api.patch(f"{CMS}/c1", ops, JSON_PATCH)
    assert status == 200
    assert body["data"] == {"a": "x", "b": "2"}
    status, body = await api.patch(f"{CMS}/c1", [{"op": "test", "path": "/data/a",
                                                  "value": "nope"}], JSON_PATCH)
    assert status == 422


async def test_strategic_merge_patch_merges_containers_by_name(api: Api) -> None:
    body = pod("p1")
    body["spec"]["containers"].append({"name": "d", "image": "busybox"})
    await api.post(PODS, body)
    patch = {"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "d"}],
                      "containers": [{"name": "d", "image": "nginx"}]}}
    status, out = await api.patch(f"{PODS}/p1", patch, STRATEGIC)
    assert status == 200, out
    assert [(c["name"], c["image"]) for c in out["spec"]["containers"]] == [
        ("c", "busybox:1.36"), ("d", "nginx")]
    assert out["metadata"]["generation"] == 2


async def test_unsupported_patch_type_is_415(api: Api) -> None:
    await api.post(CMS, configmap("c1"))
    status, body = await api.patch(f"{CMS}/c1", {"data": {}}, "application/json")
    assert status == 415
    assert body["reason"] == "UnsupportedMediaType"


async def test_patch_of_missing_object_is_not_found(api: Api) -> None:
    status, body = await api.patch(f"{CMS}/nope", {"data": {}}, MERGE)
    assert status == 404
    assert body["message"] == 'configmaps "nope" not found'


async def test_no_op_patch_keeps_resource_version(api: Api) -> None:
    _, cm = await api.post(CMS, configmap("c1", {"a": "1"}))
    rv = cm["metadata"]["resourceVersion"]
    revision = await api.store.current_revision()
    status, body = await api.patch(f"{CMS}/c1", {"data": {"a": "1"}}, MERGE)
    assert status == 200
    assert body["metadata"]["resourceVersion"] == rv
    status, body = await api.patch(f"{CMS}/c1", {}, STRATEGIC)
    assert body["metadata"]["resourceVersion"] == rv
    assert await api.store.current_revision() == revision


async def test_patch_with_stale_resource_version_conflicts(api: Api) -> None:
    await api.post(CMS, configmap("c1"))
    status, body = await api.patch(f"{CMS}/c1", {"metadata": {"resourceVersion": "1"},
                                                 "data": {"k": "x"}}, MERGE)
    assert status == 409
    assert body["reason"] == "Conflict"


async def test_patch_field_validation(api: Api) -> None:
    await api.post(CMS, configmap("c1"))
    status, body, response = await api.request(
        "PATCH", f"{CMS}/c1", {"data": {"k": "2"}, "bogus": 1}, content_type=MERGE)
    assert status == 200
    assert "bogus" not in body
    assert response.headers.getall("Warning") == ['299 - "unknown field \\"bogus\\""']
    status, body = await api.patch(f"{CMS}/c1?fieldValidation=Strict", {"bogus": 1}, MERGE)
    assert status == 422
    assert body["message"].endswith('strict decoding error: unknown field "bogus"')


async def test_strategic_patch_strict_error_prints_the_patch_as_go_does(api: Api) -> None:
    """Upstream's value is `%+v` of the patch map (not the patched object): ints as int64,
    other numbers as float64 (`1e+06`), keys sorted; a wrong type says the same."""
    await api.post(CMS, configmap("c1", {"a": "1"}))
    status, body = await api.patch(f"{CMS}/c1?fieldValidation=Strict",
                                   {"data": {"b": "2"}, "bogus": 1e6, "n": 1000000},
                                   STRATEGIC)
    assert status == 422
    assert body["details"]["causes"][0]["message"] == (
        'Invalid value: "map[bogus:1e+06 data:map[b:2] n:1000000]": strict decoding error: '
        'unknown field "bogus", unknown field "n"')
    status, body = await api.patch(f"{CMS}/c1", {"data": {"b": 2.5}}, STRATEGIC)
    assert status == 422
    assert body["details"]["causes"][0]["message"].startswith(
        'Invalid value: "map[data:map[b:2.5]]": ')


async def testserver_side_apply_creates_then_merges(api: Api) -> None:
    applied = configmap("c1", {"a": "1"})
    status, body = await api.patch(f"{CMS}/c1?fieldManager=kubectl&force=false", applied,
                                   APPLY)
    assert status == 201, body
    assert body["metadata"]["uid"]
    assert [m["manager"] for m in body["metadata"]["managedFields"]] == ["kubectl"]
    assert body["metadata"]["managedFields"][0]["operation"] == "Apply"
    applied["data"] = {"a": "2"}
    status, body = await api.patch(f"{CMS}/c1?fieldManager=kubectl", applied, APPLY)
    assert status == 200
    assert body["data"] == {"a": "2"}
    rv = body["metadata"]["resourceVersion"]
    status, body = await api.patch(f"{CMS}/c1?fieldManager=kubectl", applied, APPLY)
    assert body["metadata"]["resourceVersion"] == rv  # a no-op apply writes nothing


async def testserver_side_apply_needs_a_field_manager(api: Api) -> None:
    status, body = await api.patch(f"{CMS}/c1", configmap("c1"), APPLY)
    assert status == 422
    assert body["message"] == ('PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required '
                               "value: is required for apply patch")
    status, body = await api.patch(f"{CMS}/c1?force=true", {"data": {}}, MERGE)
    assert status == 422
    assert "force: Forbidden: may not be specified for non-apply patch" in body["message"]


async def testserver_side_apply_of_a_pod(api: Api) -> None:
    status, body = await api.patch(f"{PODS}/p1?fieldManager=kubectl", pod("p1"), APPLY)
    assert status == 201, body
    assert body["status"]["phase"] == "Pending"
    assert body["spec"]["restartPolicy"] == "Always"
    assert body["metadata"]["managedFields"][0]["manager"] == "kubectl"


async def test_apply_of_a_null_object_merges_nothing_into_the_live_one(api: Api) -> None:
    """A null struct in an apply configuration (structured-merge-diff: a null map merged into
    a non-empty live map keeps the live entries; the manager owns the field itself): a
    status apply with `status: null` leaves the pod's status as `{}` does."""
    await api.create_pod("p1")
    await api.patch(f"{PODS}/p1/status?fieldManager=kubelet",
                    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"},
                     "status": {"message": "hi", "conditions": [
                         {"type": "Ready", "status": "False"}]}}, APPLY)
    _, before = await api.get(f"{PODS}/p1")
    for applied in ({}, None):
        status, body = await api.patch(
            f"{PODS}/p1/status?fieldManager=other",
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"},
             "status": applied}, APPLY)
        assert status == 200, body
        assert body["status"] == before["status"], applied


async def test_status_subresource_changes_only_status(api: Api) -> None:
    created = await api.create_pod("p1")
    changed = dict(created)
    changed["spec"] = dict(created["spec"], activeDeadlineSeconds=5)
    changed["status"] = {"phase": "Running", "podIP": "10.0.0.5"}
    status, body = await api.put(f"{PODS}/p1/status", changed)
    assert status == 200, body
    assert body["status"]["phase"] == "Running"
    assert body["status"]["qosClass"] == "BestEffort"  # backfilled from the old status
    assert "activeDeadlineSeconds" not in body["spec"]
    volume_statuses = [{"name": "v", "hostPhase": "Pending"}]
    status, body = await api.patch(f"{PODS}/p1/status",
                                   {"status": {"volumeStatuses": volume_statuses}}, MERGE)
    assert status == 200
    assert body["status"]["volumeStatuses"] == volume_statuses
    status, got = await api.get(f"{PODS}/p1/status")
    assert got["status"]["podIP"] == "10.0.0.5"
    status, body = await api.patch(f"{PODS}/p1", {"status": {"phase": "Failed"}}, MERGE)
    assert status == 200 and body["status"]["phase"] == "Running"


async def test_binding_sets_node_once(api: Api) -> None:
    await api.create_pod("p1")
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    status, body = await api.post(f"{PODS}/p1/binding", binding)
    assert status == 201
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "code": 201}
    _, got = await api.get(f"{PODS}/p1")
    assert got["spec"]["nodeName"] == "n1"
    assert got["status"]["conditions"][0]["type"] == "PodScheduled"
    assert got["status"]["conditions"][0]["status"] == "True"
    binding["target"]["name"] = "n2"
    status, body = await api.post(f"{PODS}/p1/binding", binding)
    assert status == 409
    assert body["message"] == ('Operation cannot be fulfilled on pods "p1": pod p1 is already '
                               'assigned to node "n1"')
    status, body = await api.post(f"{PODS}/p1/binding",
                                  {**binding, "target": {"kind": "Node"}})
    assert status == 422
    assert body["message"] == 'Binding "p1" is invalid: target.name: Required value'
    status, body = await api.get(f"{PODS}/p1/binding")
    assert status == 405


async def test_dynamic_subresource_updates_the_whole_pod(api: Api) -> None:
    created = await api.create_pod("p1")
    # containers change only in a Running pod (the rules: tests/integration/test_dynamic_*)
    status, body = await api.patch(f"{PODS}/p1/status", {"status": {"phase": "Running"}},
                                   MERGE)
    assert status == 200, body
    created = body
    status, got = await api.get(f"{PODS}/p1/dynamic")
    assert status == 200 and got["metadata"]["uid"] == created["metadata"]["uid"]
    got["spec"]["containers"].append({"name": "extra", "image": "busybox"})
    status, body = await api.put(f"{PODS}/p1/dynamic", got)
    assert status == 200, body
    assert [c["name"] for c in body["spec"]["containers"]] == ["c", "extra"]
    assert body["metadata"]["generation"] == 2
    got["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, body = await api.put(f"{PODS}/p1/dynamic", got)
    assert status == 409
    status, body = await api.patch(
        f"{PODS}/p1/dynamic", {"spec": {"containers": [{"name": "extra", "image": "nginx"}]}},
        STRATEGIC)
    assert status == 200
    assert body["spec"]["containers"][1]["image"] == "nginx"
    status, body = await api.patch(f"{PODS}/nope/dynamic", {}, MERGE)
    assert status == 404


async def test_unbound_pod_is_deleted_at_once(api: Api) -> None:
    await api.create_pod("p1")
    status, body = await api.delete(f"{PODS}/p1", {"propagationPolicy": "Background"})
    assert status == 200
    assert body["kind"] == "Pod" and body["metadata"]["name"] == "p1"
    status, _ = await api.get(f"{PODS}/p1")
    assert status == 404


async def test_bound_pod_is_deleted_gracefully(api: Api) -> None:
    created = await api.create_pod("p1", node="n1")
    watch = await open_watch(
        api, f"{PODS}?watch=true&resourceVersion={created['metadata']['resourceVersion']}")
    status, body = await api.delete(f"{PODS}/p1")
    assert status == 200
    md = body["metadata"]
    assert md["deletionGracePeriodSeconds"] == 30
    assert md["deletionTimestamp"]
    assert md["generation"] == 2
    event = await watch.next_non_bookmark()
    assert event["type"] == "MODIFIED"
    assert event["object"]["metadata"]["deletionGracePeriodSeconds"] == 30
    status, again = await api.delete(f"{PODS}/p1")  # still pending: nothing changes
    assert again["metadata"]["resourceVersion"] == md["resourceVersion"]
    status, shorter = await api.delete(f"{PODS}/p1?gracePeriodSeconds=10")
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 10
    assert shorter["metadata"]["deletionTimestamp"] < md["deletionTimestamp"]
    status, body = await api.delete(f"{PODS}/p1", {"gracePeriodSeconds": 0})
    assert status == 200
    status, _ = await api.get(f"{PODS}/p1")
    assert status == 404
    types = [(await watch.next_non_bookmark())["type"] for _ in range(2)]
    assert types == ["MODIFIED", "DELETED"]
    watch.close()


async def test_namespace_deletion_removes_content(api: Api) -> None:
    status, ns = await api.post("/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert status == 201
    await api.create_pod("p1", namespace="team")
    await api.post("/api/v1/namespaces/team/configmaps", configmap("c1"))
    watch = await open_watch(api, "/api/v1/namespaces/team/configmaps?watch=1&resourceVersion="
                             + ns["metadata"]["resourceVersion"])
    status, body = await api.delete("/api/v1/namespaces/team")
    assert status == 200
    assert body["status"]["phase"] == "Terminating"
    assert body["metadata"]["deletionTimestamp"]
    status, body = await api.post("/api/v1/namespaces/team/configmaps", configmap("c2"))
    if status != 404:  # unless the namespace is already gone
        assert status == 403
        assert body["message"] == ('configmaps "c2" is forbidden: unable to create new content '
                                   "in namespace team because it is being terminated")
    await api.settle_namespaces()
    status, _ = await api.get("/api/v1/namespaces/team")
    assert status == 404
    status, body = await api.get("/api/v1/namespaces/team/pods")
    assert body["items"] == []
    added = await watch.next_non_bookmark()
    assert (added["type"], added["object"]["metadata"]["name"]) == ("ADDED", "c1")
    deleted = await watch.next_non_bookmark()
    assert (deleted["type"], deleted["object"]["metadata"]["name"]) == ("DELETED", "c1")
    watch.close()


async def test_namespace_deletion_empties_the_namespace_page_by_page(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The namespace's content is listed and deleted in pages (here of 3 objects): all
    eight configmaps go, and the namespace with them."""
    monkeypatch.setattr(namespaces, "LIST_PAGE", 3)
    await api.post("/api/v1/namespaces", {"metadata": {"name": "many"}})
    for i in range(8):
        status, _ = await api.post("/api/v1/namespaces/many/configmaps", configmap(f"c{i}"))
        assert status == 201
    status, _ = await api.delete("/api/v1/namespaces/many")
    assert status == 200
    await api.settle_namespaces()
    status, _ = await api.get("/api/v1/namespaces/many")
    assert status == 404
    _, body = await api.get("/api/v1/namespaces/many/configmaps")
    assert body["items"] == []


async def test_namespace_with_bound_pod_waits_for_it(api: Api) -> None:
    await api.post("/api/v1/namespaces", {"metadata": {"name": "team"}})
    await api.create_pod("p1", namespace="team", node="n1")
    await api.delete("/api/v1/namespaces/team")
    await asyncio.sleep(0.3)
    status, ns = await api.get("/api/v1/namespaces/team")
    assert status == 200 and ns["status"]["phase"] == "Terminating"
    status, p = await api.get("/api/v1/namespaces/team/pods/p1")
    assert p["metadata"]["deletionTimestamp"]
    await api.delete("/api/v1/namespaces/team/pods/p1", {"gracePeriodSeconds": 0})
    await api.settle_namespaces()
    status, _ = await api.get("/api/v1/namespaces/team")
    assert status == 404


async def test_immortal_namespaces(api: Api) -> None:
    status, body = await api.delete("/api/v1/namespaces/default")
    assert status == 403
    assert body["message"] == ('namespaces "default" is forbidden: this namespace may not be '
                               "deleted")
    status, _ = await api.delete("/api/v1/namespaces/kube-node-lease")
    assert status == 200


async def test_dry_run_patch_changes_nothing(api: Api) -> None:
    _, cm = await api.post(CMS, configmap("c1", {"a": "1"}))
    status, body = await api.patch(f"{CMS}/c1?dryRun=All", {"data": {"a": "2"}}, MERGE)
    assert status == 200 and body["data"] == {"a": "2"}
    status, body = await api.patch(f"{CMS}/c2?dryRun=All&fieldManager=m", configmap("c2"),
                                   APPLY)
    assert status == 201
    _, stored = await api.get(f"{CMS}/c1")
    assert stored["data"] == {"a": "1"}
    assert stored["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]
    status, _ = await api.get(f"{CMS}/c2")
    assert status == 404


async def test_namespace_finalize_subresource(api: Api) -> None:
    ns = {"metadata": {"name": "team"}, "spec": {"finalizers": ["example.com/x"]}}
    status, body = await api.post("/api/v1/namespaces", ns)
    assert body["spec"]["finalizers"] == ["example.com/x", "kubernetes"]
    await api.delete("/api/v1/namespaces/team")
    await api.settle_namespaces()
    status, body = await api.get("/api/v1/namespaces/team")
    assert status == 200
    assert body["spec"]["finalizers"] == ["example.com/x"]
    assert body["status"]["phase"] == "Terminating"
    body["spec"]["finalizers"] = []
    status, body = await api.put("/api/v1/namespaces/team/finalize", body)
    assert status == 200, body
    await api.settle_namespaces()
    status, _ = await api.get("/api/v1/namespaces/team")
    assert status == 404


async def test_terminating_namespace_is_finished_after_a_restart(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    try:
        async for api in serve(store):
            await api.post("/api/v1/namespaces", {"metadata": {"name": "team"}})
            await api.create_pod("p1", namespace="team", node="n1")
            await api.delete("/api/v1/namespaces/team")
        async for api in serve(store):
            status, ns = await api.get("/api/v1/namespaces/team")
            assert ns["status"]["phase"] == "Terminating"
            await api.delete("/api/v1/namespaces/team/pods/p1", {"gracePeriodSeconds": 0})
            await api.settle_namespaces()
            status, _ = await api.get("/api/v1/namespaces/team")
            assert status == 404
    finally:
        await store.close()


async def test_patch_cannot_rename(api: Api) -> None:
    await api.post(CMS, configmap("c1"))
    status, body = await api.patch(f"{CMS}/c1", {"metadata": {"name": "c2"}}, MERGE)
    assert status == 422
    assert body["message"] == ('ConfigMap "c2" is invalid: metadata.name: Invalid value: "c2": '
                               "field is immutable")


LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


def _lease(name: str, renew: str) -> dict[str, object]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": renew}}


async def test_times_and_quantities_are_stored_as_go_writes_them(api: Api) -> None:
    """A create, a patch and a server-side apply store a MicroTime in UTC with six digits
    and a quantity in canonical form, as upstream's decode into Go structs does; applying
    the configuration again in that form is a no-op. (Re-applying `1000m` differs from the
    live `1` before the decode, so it renews the manager's time, and the object's version
    with it when a second has passed since: not a no-op to assert.)"""
    status, body = await api.post(LEASES, _lease("l1", "2026-12-02T15:00:00.123456+01:00"))
    assert status == 201, body
    assert body["spec"]["renewTime"] == "2026-12-02T14:00:00.123456Z"
    status, body = await api.patch(f"{LEASES}/l1",
                                   {"spec": {"renewTime": "2026-12-02T10:00:00,500000-05:00"}},
                                   MERGE)
    assert status == 200, body
    assert body["spec"]["renewTime"] == "2026-12-02T15:00:00.500000Z"
    applied = pod("p1")
    applied["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1000m",
                                                                 "memory": "1024Mi"}}
    status, body = await api.patch(f"{PODS}/p1?fieldManager=kubectl", applied, APPLY)
    assert status == 201, body
    assert body["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1",
                                                                    "memory": "1Gi"}
    applied["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1", "memory": "1Gi"}
    status, again = await api.patch(f"{PODS}/p1?fieldManager=kubectl", applied, APPLY)
    assert status == 200, again
    assert again["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]
    assert again["metadata"]["managedFields"] == body["metadata"]["managedFields"]
    status, body = await api.patch(f"{LEASES}/l2?fieldManager=x",
                                   _lease("l2", "2026-12-02T15:00:00.123456+01:00"), APPLY)
    assert status == 201, body
    assert body["spec"]["renewTime"] == "2026-12-02T14:00:00.123456Z"


async def test_a_day_its_month_does_not_have_is_a_bad_request(api: Api) -> None:
    status, body = await api.post(LEASES, _lease("l1", "2023-02-29T00:00:00.000000Z"))
    assert status == 400
    assert body["message"] == (
        'Lease in version "v1" cannot be handled as a Lease: parsing time '
        '"2023-02-29T00:00:00.000000Z": day out of range')

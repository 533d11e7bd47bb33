"""Pod semantics through the HTTP API of the in-process apiserver: defaulting (the pod rules
of `ephemera.pods` plus the defaults of the admission plugins ServiceAccount, Priority and
DefaultTolerationSeconds) visible on create, 422s with exact messages and field paths, the
immutability of a plain update, `/status` validation, generic metadata validation of other
kinds, feature gates off, `pods/NAME/allocated`, and a bad apply answered 400."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, configmap, pod, serve

from ephemera.api.featuregates import (
    DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES,
    IMAGE_VOLUME,
    POD_LEVEL_RESOURCES,
    POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE,
    FeatureGates,
)
from ephemera.pods.validation import UPDATABLE_POD_SPEC_FIELDS
from ephemera.store import open_store

PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"


def causes(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]]


def with_pod_resources(p: dict[str, Any], **resources: Any) -> dict[str, Any]:
    p["spec"]["resources"] = resources
    return p


def with_container_resources(p: dict[str, Any], i: int = 0, **resources: Any
                             ) -> dict[str, Any]:
    p["spec"]["containers"][i]["resources"] = resources
    return p


# --- defaulting ---------------------------------------------------------------------------


async def test_create_shows_the_defaults_of_the_pod_rules_and_the_admission_plugins(
        api: Api) -> None:
    created = await api.create_pod("p1")
    spec = created["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["securityContext"] == {}
    assert spec["enableServiceLinks"] is True
    # ServiceAccount, Priority, DefaultTolerationSeconds
    assert spec["serviceAccountName"] == spec["serviceAccount"] == "default"
    assert spec["priority"] == 0
    assert spec["preemptionPolicy"] == "PreemptLowerPriority"
    assert spec["tolerations"] == [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
    ]
    assert spec["containers"] == [{
        "name": "c", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "resources": {}}]
    assert created["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert created["metadata"]["generation"] == 1
    status, got = await api.get(f"{PODS}/p1")
    assert status == 200 and got["spec"] == spec


async def test_volume_and_image_defaults(api: Api) -> None:
    body = pod("p1", volumes=[
        {"name": "scratch"},
        {"name": "config", "configMap": {"name": "cfg"}},
        {"name": "tools", "image": {"reference": "example.com/tools:latest"}},
    ])
    body["spec"]["containers"][0]["image"] = "nginx"
    status, created = await api.post(PODS, body)
    assert status == 201, created
    volumes = created["spec"]["volumes"]
    assert volumes[0] == {"name": "scratch", "emptyDir": {}}
    assert volumes[1]["configMap"] == {"name": "cfg", "defaultMode": 420}
    assert volumes[2]["image"] == {"reference": "example.com/tools:latest",
                                   "pullPolicy": "Always"}
    assert created["spec"]["containers"][0]["imagePullPolicy"] == "Always"


async def test_pod_level_ephemeral_storage_defaults_and_qos(api: Api) -> None:
    """KEP-6386 follows KEP-2837: with a pod-level limit and no pod-level request, the request
    is the aggregate of the containers' requests; container requests default to their
    limits; the sum of container limits may exceed the pod limit."""
    body = with_pod_resources(pod("p1"), limits={"ephemeral-storage": "4Gi"})
    with_container_resources(body, requests={"ephemeral-storage": "1Gi"})
    body["spec"]["containers"].append({"name": "d", "image": "busybox:1.36", "resources": {
        "limits": {"ephemeral-storage": "3Gi"}}})
    status, created = await api.post(PODS, body)
    assert status == 201, created
    assert created["spec"]["resources"] == {"limits": {"ephemeral-storage": "4Gi"},
                                            "requests": {"ephemeral-storage": "4Gi"}}
    assert created["spec"]["containers"][1]["resources"] == {
        "limits": {"ephemeral-storage": "3Gi"}, "requests": {"ephemeral-storage": "3Gi"}}
    assert created["status"]["qosClass"] == "BestEffort"  # ephemeral-storage never counts

    body = with_pod_resources(pod("p2"), limits={"ephemeral-storage": "4Gi"})
    with_container_resources(body, limits={"ephemeral-storage": "3Gi"},
                             requests={"ephemeral-storage": "1Gi"})
    body["spec"]["containers"].append({"name": "d", "image": "busybox:1.36", "resources": {
        "limits": {"ephemeral-storage": "3Gi"}, "requests": {"ephemeral-storage": "1Gi"}}})
    status, created = await api.post(PODS, body)
    assert status == 201, created
    assert created["spec"]["resources"]["requests"] == {"ephemeral-storage": "2Gi"}

    body = with_pod_resources(pod("p3"), requests={"cpu": "500m", "memory": "1Gi"},
                              limits={"cpu": "500m", "memory": "1Gi"})
    status, created = await api.post(PODS, body)
    assert status == 201, created
    assert created["status"]["qosClass"] == "Guaranteed"


# --- validation on create -----------------------------------------------------------------


@pytest.mark.parametrize(("edit", "expected"), [
    pytest.param(
        lambda p: with_container_resources(
            with_pod_resources(p, requests={"ephemeral-storage": "1Gi"}),
            requests={"ephemeral-storage": "2Gi"}),
        [("FieldValueInvalid", "spec.resources.requests[ephemeral-storage]",
          'Invalid value: "1Gi": must be greater than or equal to aggregate container '
          "requests of 2Gi")],
        id="aggregate container requests above the pod request"),
    pytest.param(
        lambda p: with_container_resources(
            with_pod_resources(p, limits={"ephemeral-storage": "1Gi"}),
            limits={"ephemeral-storage": "2Gi"}, requests={"ephemeral-storage": "100Mi"}),
        [("FieldValueInvalid", "spec.resources.containers[0][ephemeral-storage].limits",
          'Invalid value: "2Gi": must be less than or equal to pod limits of 1Gi')],
        id="a container limit above the pod limit"),
    pytest.param(
        lambda p: with_container_resources(p, limits={"ephemeral-storage": "1Gi"},
                                           requests={"ephemeral-storage": "2Gi"}),
        [("FieldValueInvalid", "spec.containers[0].resources.requests",
          'Invalid value: "2Gi": must be less than or equal to ephemeral-storage limit of 1Gi')],
        id="container request above its limit"),
    pytest.param(
        lambda p: p["spec"]["containers"].append({"name": "c", "image": ""}) or p,
        [("FieldValueRequired", "spec.containers[1].image", "Required value"),
         ("FieldValueDuplicate", "spec.containers[1].name", 'Duplicate value: "c"')],
        id="duplicate container name and missing image"),
    pytest.param(
        lambda p: p["spec"]["containers"][0].update(
            volumeMounts=[{"name": "nope", "mountPath": "/x"}]) or p,
        [("FieldValueNotFound", "spec.containers[0].volumeMounts[0].name",
          'Not found: "nope"')],
        id="mount of a volume that does not exist"),
    pytest.param(
        lambda p: p["spec"].update(restartPolicy="Sometimes") or p,
        [("FieldValueNotSupported", "spec.restartPolicy",
          'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"')],
        id="restart policy"),
])
async def test_invalid_pods_are_422_with_causes(api: Api, edit: Any,
                                                expected: list[tuple[str, str, str]]) -> None:
    status, body = await api.post(PODS, edit(pod("p1")))
    assert status == 422, body
    assert body["reason"] == "Invalid"
    assert body["details"]["kind"] == "Pod" and body["details"]["name"] == "p1"
    assert causes(body) == expected
    joined = ", ".join(f"{f}: {m}" for _, f, m in expected)
    shown = joined if len(expected) == 1 else f"[{joined}]"
    assert body["message"] == f'Pod "p1" is invalid: {shown}'
    assert (await api.get(f"{PODS}/p1"))[0] == 404


async def test_metadata_errors_of_a_pod_are_reported_once(api: Api) -> None:
    status, body = await api.post(PODS, pod("p1", labels={"-bad": "x"}))
    assert status == 422
    assert [c["field"] for c in body["details"]["causes"]] == ["metadata.labels"]


async def test_every_kind_gets_metadata_validation(api: Api) -> None:
    status, body = await api.post(CMS, configmap("Bad_Name"))
    assert status == 422
    assert causes(body) == [(
        "FieldValueInvalid", "metadata.name",
        'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case '
        "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
        "character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")]
    status, body = await api.post(CMS, configmap("c1", finalizers=["nope"]))
    assert status == 422
    assert causes(body) == [(
        "FieldValueInvalid", "metadata.finalizers[0]",
        'Invalid value: "nope": name is neither a standard finalizer name nor is it fully '
        "qualified")]
    status, created = await api.post(CMS, configmap("c1"))
    assert status == 201
    created["metadata"]["labels"] = {"a": "-x-"}
    status, body = await api.put(f"{CMS}/c1", created)
    assert status == 422
    assert [c["field"] for c in body["details"]["causes"]] == ["metadata.labels"]


# --- updates ------------------------------------------------------------------------------


async def test_plain_update_may_change_only_what_upstream_allows(api: Api) -> None:
    created = await api.create_pod("p1", volumes=[{"name": "v", "emptyDir": {}}])
    changed = copy.deepcopy(created)
    changed["spec"]["containers"][0]["image"] = "busybox:1.37"
    status, body = await api.put(f"{PODS}/p1", changed)
    assert status == 200, body
    assert body["metadata"]["generation"] == 2
    assert body["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"

    added = copy.deepcopy(body)
    added["spec"]["containers"].append({"name": "d", "image": "busybox:1.36"})
    status, out = await api.put(f"{PODS}/p1", added)
    assert status == 422
    assert causes(out) == [("FieldValueForbidden", "spec.containers",
                            "Forbidden: pod updates may not add or remove containers")]

    status, out = await api.patch(
        f"{PODS}/p1", {"spec": {"volumes": [{"name": "v"}, {"name": "w", "emptyDir": {}}]}},
        MERGE)
    assert status == 422
    [(reason, path, message)] = causes(out)
    assert (reason, path) == ("FieldValueForbidden", "spec")
    assert message.startswith("Forbidden: pod updates may not change fields other than "
                              + ",".join(UPDATABLE_POD_SPEC_FIELDS) + "\n")
    assert out["message"].startswith('Pod "p1" is invalid: spec: Forbidden: pod updates may')

    mounted = copy.deepcopy(body)
    mounted["spec"]["containers"][0]["volumeMounts"] = [{"name": "v", "mountPath": "/v"}]
    status, out = await api.put(f"{PODS}/p1", mounted)
    assert status == 422
    assert [c["field"] for c in out["details"]["causes"]] == ["spec"]

    status, got = await api.get(f"{PODS}/p1")
    assert got["spec"]["containers"] == body["spec"]["containers"]


async def test_update_without_the_admission_defaults_keeps_them(api: Api) -> None:
    """A client that PUTs the pod it first sent (without priority, tolerations, service
    account) gets the stored values back, as the admission plugins fill them again."""
    created = await api.create_pod("p1")
    sent = pod("p1")
    sent["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    sent["spec"]["activeDeadlineSeconds"] = 60
    status, body = await api.put(f"{PODS}/p1", sent)
    assert status == 422  # serviceAccountName is not refilled on update, as upstream
    assert [c["field"] for c in body["details"]["causes"]] == ["spec"]
    assert "ServiceAccountName" in body["details"]["causes"][0]["message"]
    assert "Priority:" not in body["details"]["causes"][0]["message"]
    assert "Tolerations" not in body["details"]["causes"][0]["message"]


async def test_status_update_is_validated(api: Api) -> None:
    await api.create_pod("p1")
    status, body = await api.patch(
        f"{PODS}/p1/status",
        {"status": {"qosClass": "Guaranteed",
                    "volumeStatuses": [{"name": "v", "hostPhase": "Bogus"}]}}, MERGE)
    assert status == 422
    assert causes(body) == [
        ("FieldValueInvalid", "status.qosClass", 'Invalid value: "Guaranteed": field is immutable'),
        ("FieldValueNotSupported", "status.volumeStatuses[0].hostPhase",
         'Unsupported value: "Bogus": supported values: "ErrorMounting", "HostMounted", '
         '"Pending", "Unmounting"'),
    ]
    status, body = await api.patch(
        f"{PODS}/p1/status", {"status": {"phase": "Running", "volumeStatuses": [
            {"name": "v", "hostPhase": "HostMounted"}]}}, MERGE)
    assert status == 200, body
    assert body["status"]["volumeStatuses"] == [{"name": "v", "hostPhase": "HostMounted"}]
    assert body["metadata"]["generation"] == 1


# --- the ServiceAccount and Priority plugins ---------------------------------------------


async def test_service_account_must_exist(api: Api) -> None:
    status, body = await api.post(PODS, pod("p1", serviceAccountName="robot"))
    assert status == 403
    assert body["reason"] == "Forbidden"
    assert body["message"] == ('pods "p1" is forbidden: error looking up service account '
                               'default/robot: serviceaccount "robot" not found')
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"},
               "imagePullSecrets": [{"name": "registry-key"}]}
    status, _ = await api.post("/api/v1/namespaces/default/serviceaccounts", account)
    assert status == 201
    status, created = await api.post(PODS, pod("p1", serviceAccountName="robot"))
    assert status == 201, created
    assert created["spec"]["serviceAccount"] == "robot"
    assert created["spec"]["imagePullSecrets"] == [{"name": "registry-key"}]


async def test_a_new_namespace_gets_its_default_service_account(api: Api) -> None:
    status, _ = await api.post("/api/v1/namespaces",
                               {"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": "team"}})
    assert status == 201
    status, account = await api.get("/api/v1/namespaces/team/serviceaccounts/default")
    assert status == 200
    assert account["metadata"]["namespace"] == "team"
    status, _ = await api.post("/api/v1/namespaces/team/pods", pod("p1"))
    assert status == 201
    status, _ = await api.delete("/api/v1/namespaces/team/serviceaccounts/default")
    assert status == 200
    status, body = await api.post("/api/v1/namespaces/team/pods", pod("p2"))
    assert status == 403
    assert body["message"] == ('pods "p2" is forbidden: error looking up service account '
                               'team/default: serviceaccount "default" not found')
    status, body = await api.post("/api/v1/namespaces?dryRun=All",
                                  {"metadata": {"name": "dry"}})
    assert status == 201, body
    status, _ = await api.get("/api/v1/namespaces/dry/serviceaccounts/default")
    assert status == 404
    for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
        status, _ = await api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
        assert status == 200, name


async def test_priority_plugin(api: Api) -> None:
    status, body = await api.post(PODS, pod("p1", priorityClassName="gold"))
    assert status == 403
    assert body["message"] == 'pods "p1" is forbidden: no PriorityClass with name gold was found'
    status, body = await api.post(PODS, pod("p1", priority=7))
    assert status == 403
    assert body["message"] == (
        'pods "p1" is forbidden: the integer value of priority (7) must not be provided in '
        "pod spec; priority admission controller computed 0 from the given PriorityClass name")
    status, created = await api.post(PODS, pod("p1", priorityClassName="system-node-critical"))
    assert status == 201
    assert created["spec"]["priority"] == 2000001000


async def test_generate_name_in_forbidden_messages(api: Api) -> None:
    body = pod("")
    body["metadata"] = {"generateName": "web-"}
    body["spec"]["serviceAccountName"] = "robot"
    status, out = await api.post(PODS, body)
    assert status == 403
    assert out["message"].startswith('pods "web-" is forbidden: error looking up service')


# --- feature gates off --------------------------------------------------------------------


@pytest.fixture
async def gates_off_api(tmp_path: Path) -> AsyncIterator[Api]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    gates = FeatureGates({POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE: False, IMAGE_VOLUME: False,
                          DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES: False})
    try:
        async for served in serve(store, feature_gates=gates):
            yield served
    finally:
        await store.close()


async def test_gate_off_rejects_pod_level_ephemeral_storage_as_upstream(
        gates_off_api: Api) -> None:
    api = gates_off_api
    body = with_pod_resources(pod("p1"), requests={"ephemeral-storage": "1Gi", "cpu": "1"})
    status, out = await api.post(PODS, body)
    assert status == 422
    assert out["message"] == (
        'Pod "p1" is invalid: spec.resources.requests[ephemeral-storage]: Unsupported value: '
        '"ephemeral-storage": supported values: "cpu", "hugepages-", "memory"')
    assert causes(out) == [(
        "FieldValueNotSupported", "spec.resources.requests[ephemeral-storage]",
        'Unsupported value: "ephemeral-storage": supported values: "cpu", "hugepages-", '
        '"memory"')]
    body = with_pod_resources(pod("p1"), requests={"cpu": "1"})
    status, created = await api.post(PODS, body)
    assert status == 201, created
    assert created["spec"]["resources"] == {"requests": {"cpu": "1"}}


async def test_gates_off_drop_the_fields_they_own_on_create(gates_off_api: Api) -> None:
    body = pod("p1", volumes=[{"name": "tools", "image": {"reference": "tools:1"}},
                              {"name": "v", "emptyDir": {}}])
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "tools", "mountPath": "/t"},
                                                     {"name": "v", "mountPath": "/v"}]
    body["spec"]["containers"][0]["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}
    status, created = await gates_off_api.post(PODS, body)
    assert status == 201, created
    assert created["spec"]["volumes"] == [{"name": "v", "emptyDir": {}}]
    container = created["spec"]["containers"][0]
    assert container["volumeMounts"] == [{"name": "v", "mountPath": "/v"}]
    assert "dynamicVolumePolicy" not in container


async def test_pod_level_resources_gate_off_drops_spec_resources(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    try:
        async for api in serve(store, feature_gates=FeatureGates({POD_LEVEL_RESOURCES: False})):
            body = with_pod_resources(pod("p1"), limits={"cpu": "1", "memory": "1Gi"})
            status, created = await api.post(PODS, body)
            assert status == 201, created
            assert "resources" not in created["spec"]
            assert created["status"]["qosClass"] == "BestEffort"
    finally:
        await store.close()


# --- pods/NAME/allocated ------------------------------------------------------------------


async def test_allocated_is_routed_to_the_pods_node(api: Api) -> None:
    status, body = await api.get(f"{PODS}/nope/allocated")
    assert (status, body["message"]) == (404, 'pods "nope" not found')
    await api.create_pod("p1")
    status, body = await api.get(f"{PODS}/p1/allocated")
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == "pod p1 does not have a host assigned"
    await api.create_pod("p2", node="n1")
    status, body = await api.get(f"{PODS}/p2/allocated")
    assert (status, body["message"]) == (404, 'nodes "n1" not found')
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    assert (await api.post("/api/v1/nodes", node))[0] == 201
    status, body = await api.get(f"{PODS}/p2/allocated")
    assert status == 503
    assert body["reason"] == "ServiceUnavailable"
    assert body["message"] == "the pod's node \"n1\" has no reachable kubelet"
    status, _ = await api.put(f"{PODS}/p2/allocated", pod("p2"))
    assert status == 405
    status, resources = await api.get("/api/v1")
    allocated = next(r for r in resources["resources"] if r["name"] == "pods/allocated")
    assert allocated["verbs"] == ["get"]


# --- server-side apply of unknown fields ----------------------------------------------------


async def test_apply_with_unknown_fields_is_a_bad_request(api: Api) -> None:
    applied = pod("p1")
    applied["spec"]["containers"][0]["bogus"] = 1
    status, body = await api.patch(f"{PODS}/p1?fieldManager=kubectl", applied, APPLY)
    assert status == 400
    assert body["reason"] == "BadRequest"
    assert body["message"] == (
        "failed to create typed patch object (default/p1; /v1, Kind=Pod): "
        '.spec.containers[name="c"].bogus: field not declared in schema')

"""The workload kinds over HTTP (in-process apiserver): apps/v1 Deployments, ReplicaSets,
StatefulSets, DaemonSets, ControllerRevisions and core/v1 ReplicationControllers: defaults,
upstream's validation messages, the immutable selector, generation and status, the
`scale` subresource, strategic merge patch by merge key, Table columns and discovery."""

from __future__ import annotations

import copy
from typing import Any

from apiserver_fixtures import TABLE_ACCEPT, Api

DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
RSS = "/apis/apps/v1/namespaces/default/replicasets"
RCS = "/api/v1/namespaces/default/replicationcontrollers"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def deployment(name: str, replicas: int | None = 3, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}},
                 **spec},
    }
    if replicas is not None:
        body["spec"]["replicas"] = replicas
    return body


async def test_deployment_defaults_generation_and_empty_status(api: Api) -> None:
    status, d = await api.post(DEPLOYS, deployment("web", replicas=None))
    assert status == 201, d
    spec = d["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "RollingUpdate",
                                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert (spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (10, 600)
    tspec = spec["template"]["spec"]
    assert (tspec["restartPolicy"], tspec["dnsPolicy"], tspec["terminationGracePeriodSeconds"],
            tspec["schedulerName"]) == ("Always", "ClusterFirst", 30, "default-scheduler")
    assert "enableServiceLinks" not in tspec  # a template gets PodSpec defaults only
    assert tspec["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert d["metadata"]["generation"] == 1
    assert d["status"] == {}

    # a status write does not bump the generation; a spec change does
    d["status"] = {"observedGeneration": 1, "replicas": 1}
    status, after = await api.put(f"{DEPLOYS}/web/status", d)
    assert status == 200, after
    assert after["metadata"]["generation"] == 1
    assert after["status"]["observedGeneration"] == 1
    status, after = await api.patch(f"{DEPLOYS}/web", {"metadata": {"labels": {"x": "y"}}},
                                    MERGE)
    assert after["metadata"]["generation"] == 1
    status, after = await api.patch(f"{DEPLOYS}/web", {"spec": {"replicas": 4}}, MERGE)
    assert status == 200, after
    assert after["metadata"]["generation"] == 2
    assert after["status"]["replicas"] == 1  # the main resource keeps the status


async def test_deployment_validation_messages(api: Api) -> None:
    bad = deployment("web", replicas=-1)
    bad["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    bad["spec"]["strategy"] = {"type": "RollingUpdate",
                               "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}}
    bad["spec"]["minReadySeconds"] = 700
    status, body = await api.post(DEPLOYS, bad)
    assert status == 422, body
    assert body["message"] == (
        'Deployment.apps "web" is invalid: ['
        "spec.replicas: Invalid value: -1: must be greater than or equal to 0, "
        'spec.template.metadata.labels: Invalid value: map[string]string{"app":"web"}: '
        "`selector` does not match template `labels`, "
        'spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: '
        '"Always", '
        'spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, '
        'IntVal:0, StrVal:""}: may not be 0 when `maxSurge` is 0, '
        "spec.progressDeadlineSeconds: Invalid value: 600: must be greater than "
        "minReadySeconds]")
    assert body["details"]["group"] == "apps"

    no_selector = deployment("web")
    del no_selector["spec"]["selector"]
    status, body = await api.post(DEPLOYS, no_selector)
    assert status == 422
    assert body["message"] == ('Deployment.apps "web" is invalid: spec.selector: '
                               "Required value")
    empty = deployment("web")
    empty["spec"]["selector"] = {}
    status, body = await api.post(DEPLOYS, empty)
    assert "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil)" \
        ", MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid " \
        "for deployment" in body["message"]
    deadline = deployment("web")
    deadline["spec"]["template"]["spec"]["activeDeadlineSeconds"] = 5
    status, body = await api.post(DEPLOYS, deadline)
    assert body["message"] == (
        'Deployment.apps "web" is invalid: spec.template.spec.activeDeadlineSeconds: '
        "Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported")


async def test_a_missing_or_null_template_is_the_zero_template(api: Api) -> None:
    """An apps kind's `spec.template` is a struct value upstream: missing or null, it decodes
    to the empty template, which is defaulted (restartPolicy Always) and then reported for
    what it lacks; a ReplicationController's is a pointer, `Required value`. A StatefulSet
    does not validate its template's pod spec (upstream's TODO), and a DaemonSet without a
    selector matches no labels."""
    no_labels = ("spec.template.metadata.labels: Invalid value: map[string]string(nil): "
                 "`selector` does not match template `labels`")
    containers = "spec.template.spec.containers: Required value"
    for plural, kind, want in (
            ("deployments", "Deployment", f"[{no_labels}, {containers}]"),
            ("replicasets", "ReplicaSet", f"[{no_labels}, {containers}]"),
            ("statefulsets", "StatefulSet", no_labels),
            ("daemonsets", "DaemonSet", f"[{no_labels}, {containers}]")):
        for template in ({"template": None}, {}):
            body = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w"},
                    "spec": {"selector": {"matchLabels": {"app": "w"}}, **template}}
            status, err = await api.post(f"/apis/apps/v1/namespaces/default/{plural}", body)
            assert status == 422, err
            assert err["message"] == f'{kind}.apps "w" is invalid: {want}', (plural, template)
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "w"},
          "spec": {"template": {"metadata": {"labels": {"app": "w"}}, "spec": {
              "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}
    status, err = await api.post("/apis/apps/v1/namespaces/default/daemonsets", ds)
    assert err["message"] == ('DaemonSet.apps "w" is invalid: spec.template.metadata.labels: '
                              'Invalid value: map[string]string{"app":"w"}: `selector` does '
                              "not match template `labels`")
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "w"},
          "spec": {"selector": {"app": "w"}, "template": None}}
    status, err = await api.post(RCS, rc)
    assert err["message"] == ('ReplicationController "w" is invalid: spec.template: '
                              "Required value")


async def test_template_gets_the_pod_rules_of_both_keps(api: Api) -> None:
    """The template is validated as a pod: pod-level ephemeral-storage (KEP-6386) and
    dynamicVolumePolicy (KEP-6395) with the pod's messages, under `spec.template.spec`."""
    d = deployment("web")
    tspec = d["spec"]["template"]["spec"]
    tspec["resources"] = {"requests": {"ephemeral-storage": "2Gi"},
                          "limits": {"ephemeral-storage": "1Gi"}}
    tspec["containers"][0]["dynamicVolumePolicy"] = {"restartPolicy": "Sometimes"}
    status, body = await api.post(DEPLOYS, d)
    assert status == 422, body
    fields = {c["field"] for c in body["details"]["causes"]}
    assert "spec.template.spec.resources.requests" in fields or \
        "spec.template.spec.resources.requests[ephemeral-storage]" in fields, body
    assert "spec.template.spec.containers[0].dynamicVolumePolicy.restartPolicy" in fields, body

    ok = deployment("web")
    ok["spec"]["template"]["spec"]["resources"] = {"limits": {"ephemeral-storage": "1Gi"}}
    status, body = await api.post(DEPLOYS, ok)
    assert status == 201, body
    # SetDefaults_Pod (requests from limits) is the pod's, not the template's
    assert body["spec"]["template"]["spec"]["resources"] == {
        "limits": {"ephemeral-storage": "1Gi"}}


async def test_selector_is_immutable(api: Api) -> None:
    assert (await api.post(DEPLOYS, deployment("web")))[0] == 201
    patch = {"spec": {"selector": {"matchLabels": {"app": "web", "tier": "x"}},
                      "template": {"metadata": {"labels": {"tier": "x"}}}}}
    status, body = await api.patch(f"{DEPLOYS}/web", patch, STRATEGIC)
    assert status == 422, body
    assert body["message"] == (
        'Deployment.apps "web" is invalid: spec.selector: Invalid value: v1.LabelSelector'
        '{MatchLabels:map[string]string{"app":"web", "tier":"x"}, '
        "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable")


async def test_strategic_merge_patch_uses_container_names(api: Api) -> None:
    d = deployment("web")
    d["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "busybox:1"})
    assert (await api.post(DEPLOYS, d))[0] == 201
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "side", "image": "busybox:2"}]}}}}
    status, body = await api.patch(f"{DEPLOYS}/web", patch, STRATEGIC)
    assert status == 200, body
    images = [(c["name"], c["image"]) for c in body["spec"]["template"]["spec"]["containers"]]
    assert images == [("c", "busybox:1.36"), ("side", "busybox:2")]
    assert body["metadata"]["generation"] == 2


async def test_scale_subresource(api: Api) -> None:
    assert (await api.post(DEPLOYS, deployment("web")))[0] == 201
    status, scale = await api.get(f"{DEPLOYS}/web/scale")
    assert status == 200, scale
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": 0, "selector": "app=web"}
    status, scale = await api.patch(f"{DEPLOYS}/web/scale", {"spec": {"replicas": 10}}, MERGE)
    assert status == 200, scale
    assert scale["spec"]["replicas"] == 10
    status, d = await api.get(f"{DEPLOYS}/web")
    assert d["spec"]["replicas"] == 10
    assert d["metadata"]["generation"] == 2

    scale["spec"]["replicas"] = -2
    status, body = await api.put(f"{DEPLOYS}/web/scale", scale)
    assert status == 422
    assert body["message"] == ('Scale.autoscaling "web" is invalid: spec.replicas: Invalid '
                               "value: -2: must be greater than or equal to 0")
    stale = copy.deepcopy(scale)
    stale["spec"]["replicas"] = 2
    stale["metadata"]["resourceVersion"] = "1"
    status, body = await api.put(f"{DEPLOYS}/web/scale", stale)
    assert status == 409, body
    status, body = await api.get(f"{DEPLOYS}/nope/scale")
    assert status == 404
    assert body["message"] == 'deployments.apps "nope" not found'


SCALE_REPLICAS_TYPE = "into Go struct field ScaleSpec.spec.replicas of type int32"


async def test_scale_subresource_table(api: Api) -> None:
    """`kubectl get deploy web --subresource=scale`: upstream's Scale columns and cells."""
    assert (await api.post(DEPLOYS, deployment("web")))[0] == 201
    status, scale = await api.get(f"{DEPLOYS}/web/scale")
    status, table = await api.get(f"{DEPLOYS}/web/scale", headers={"Accept": TABLE_ACCEPT})
    assert status == 200, table
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert [(c["name"], c["type"], c["format"]) for c in table["columnDefinitions"]] == [
        ("Name", "string", ""), ("Desired", "integer", ""), ("Available", "integer", ""),
        ("Age", "string", "")]
    [row] = table["rows"]
    assert row["cells"][:3] == ["web", 3, 0]
    assert row["cells"][3].endswith("s")  # seconds old
    assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": scale["metadata"]}
    assert table["metadata"] == {"resourceVersion": scale["metadata"]["resourceVersion"]}
    status, full = await api.get(f"{DEPLOYS}/web/scale?includeObject=Object",
                                 headers={"Accept": TABLE_ACCEPT})
    assert full["rows"][0]["object"] == scale
    status, body = await api.get(f"{DEPLOYS}/nope/scale", headers={"Accept": TABLE_ACCEPT})
    assert status == 404, body


async def test_scale_write_of_a_non_integer_is_a_decode_error(api: Api) -> None:
    """A Scale decodes into autoscaling/v1 Scale: replicas of another type is refused (a
    patch 422 on the field `patch`, a PUT 400) and the parent keeps its replicas."""
    assert (await api.post(DEPLOYS, deployment("web")))[0] == 201
    for value, shown in (("3", "string"), ("x", "string"), (2.5, "number 2.5"),
                         (True, "bool")):
        for content_type in (MERGE, STRATEGIC):
            status, body = await api.patch(f"{DEPLOYS}/web/scale",
                                           {"spec": {"replicas": value}}, content_type)
            assert status == 422, body
            assert body["reason"] == "Invalid"
            assert body["message"].startswith(' "" is invalid: patch: Invalid value: "')
            assert body["message"].endswith(
                f"json: cannot unmarshal {shown} {SCALE_REPLICAS_TYPE}")
            assert body["details"]["causes"][0]["field"] == "patch"
    status, scale = await api.get(f"{DEPLOYS}/web/scale")
    scale["spec"]["replicas"] = "3"
    status, body = await api.put(f"{DEPLOYS}/web/scale", scale)
    assert status == 400, body
    assert body["message"] == ('Scale in version "v1" cannot be handled as a Scale: '
                               f"json: cannot unmarshal string {SCALE_REPLICAS_TYPE}")
    status, d = await api.get(f"{DEPLOYS}/web")
    assert d["spec"]["replicas"] == 3
    assert d["metadata"]["generation"] == 1


async def test_replicaset_and_replicationcontroller(api: Api) -> None:
    rs = deployment("rs")
    rs["kind"] = "ReplicaSet"
    status, body = await api.post(RSS, rs)
    assert status == 201, body
    assert "strategy" not in body["spec"]
    assert body["status"] == {"replicas": 0}  # `replicas` is not omitempty upstream
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
          "spec": {"template": {"metadata": {"labels": {"app": "rc"}},
                                "spec": {"containers": [{"name": "c", "image": "b"}]}}}}
    status, body = await api.post(RCS, rc)
    assert status == 201, body
    # SetDefaults_ReplicationController: selector and labels from the template
    assert body["spec"]["selector"] == {"app": "rc"}
    assert body["metadata"]["labels"] == {"app": "rc"}
    assert body["spec"]["replicas"] == 1
    status, scale = await api.get(f"{RCS}/rc/scale")
    assert scale["status"]["selector"] == "app=rc"

    status, table = await api.get(RSS, headers={"Accept": TABLE_ACCEPT})
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Desired", "Current", "Ready", "Age", "Containers", "Images", "Selector"]
    assert table["rows"][0]["cells"][:4] == ["rs", 3, 0, 0]
    assert table["rows"][0]["cells"][5:] == ["c", "busybox:1.36", "app=rs"]


async def test_deployment_table_and_discovery(api: Api) -> None:
    assert (await api.post(DEPLOYS, deployment("web")))[0] == 201
    status, table = await api.get(DEPLOYS, headers={"Accept": TABLE_ACCEPT})
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name", "Ready", "Up-to-date", "Available", "Age"]
    assert table["rows"][0]["cells"][:4] == ["web", "0/3", 0, 0]
    status, resources = await api.get("/apis/apps/v1")
    assert status == 200
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["deployments"]["shortNames"] == ["deploy"]
    assert by_name["deployments"]["categories"] == ["all"]
    assert (by_name["deployments/scale"]["group"], by_name["deployments/scale"]["version"],
            by_name["deployments/scale"]["kind"]) == ("autoscaling", "v1", "Scale")
    assert "daemonsets/scale" not in by_name
    status, groups = await api.get("/apis")
    assert "apps" in [g["name"] for g in groups["groups"]]
    status, doc = await api.get("/openapi/v3/apis/apps/v1")
    assert status == 200
    assert "io.k8s.api.autoscaling.v1.Scale" in doc["components"]["schemas"]


async def test_statefulset_daemonset_controllerrevision(api: Api) -> None:
    sts = deployment("db")
    sts["kind"] = "StatefulSet"
    sts["spec"]["serviceName"] = "db"
    status, body = await api.post("/apis/apps/v1/namespaces/default/statefulsets", sts)
    assert status == 201, body
    assert body["spec"]["podManagementPolicy"] == "OrderedReady"
    assert body["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"partition": 0}}
    body["spec"]["serviceName"] = "other"
    status, err = await api.put("/apis/apps/v1/namespaces/default/statefulsets/db", body)
    assert status == 422
    assert "updates to statefulset spec for fields other than 'replicas'" in err["message"]

    ds = deployment("agent", replicas=None)
    ds["kind"] = "DaemonSet"
    status, body = await api.post("/apis/apps/v1/namespaces/default/daemonsets", ds)
    assert status == 201, body
    assert body["spec"]["updateStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    generation = "deprecated.daemonset.template.generation"
    assert body["metadata"]["annotations"] == {generation: "1"}
    assert "templateGeneration" not in body["spec"]  # not a v1 field
    assert body["status"] == {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                              "desiredNumberScheduled": 0, "numberReady": 0}
    status, body = await api.patch(
        "/apis/apps/v1/namespaces/default/daemonsets/agent",
        {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "b:2"}]}}}},
        STRATEGIC)
    assert status == 200, body
    assert body["metadata"]["annotations"] == {generation: "2"}

    cr = {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "r1"},
          "revision": 1}
    status, body = await api.post("/apis/apps/v1/namespaces/default/controllerrevisions", cr)
    assert status == 422
    assert body["message"] == ('ControllerRevision.apps "r1" is invalid: data: Required '
                               "value: data is mandatory")


async def test_warnings_for_what_no_controller_acts_on(api: Api) -> None:
    d = deployment("web")
    d["spec"]["template"]["spec"]["hostAliases"] = [{"ip": "10.0.0.1", "hostnames": ["a"]}]
    status, _, response = await api.request("POST", DEPLOYS, d)
    assert status == 201
    warnings = response.headers.getall("Warning", [])
    assert any("spec.template.spec.hostAliases" in w for w in warnings), warnings
    sts = deployment("db")
    sts["kind"] = "StatefulSet"
    sts["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "data"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
    status, _, response = await api.request(
        "POST", "/apis/apps/v1/namespaces/default/statefulsets", sts)
    assert status == 201
    assert any("spec.volumeClaimTemplates: ephemera serves no PersistentVolumeClaims (not "
               "implemented)" in w for w in response.headers.getall("Warning", [])), \
        response.headers


async def test_a_status_write_keeps_the_labels_of_a_deployment_only(api: Api) -> None:
    """upstream's deploymentStatusStrategy keeps the stored spec and labels; the status
    strategies of ReplicaSets (and StatefulSets, DaemonSets, Jobs) keep the spec alone."""
    write = {"metadata": {"labels": {"via": "status"}, "annotations": {"a": "b"}},
             "status": {"observedGeneration": 1}}
    await api.post(DEPLOYS, deployment("labelled"))
    status, after = await api.patch(f"{DEPLOYS}/labelled/status", write, MERGE)
    assert status == 200, after
    assert "labels" not in after["metadata"]
    assert after["metadata"]["annotations"] == {"a": "b"}
    assert after["status"]["observedGeneration"] == 1
    rs = deployment("rs")
    rs["kind"] = "ReplicaSet"
    await api.post(RSS, rs)
    status, after = await api.patch(f"{RSS}/rs/status", write, MERGE)
    assert status == 200, after
    assert after["metadata"]["labels"] == {"via": "status"}

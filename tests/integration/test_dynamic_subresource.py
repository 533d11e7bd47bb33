"""`pods/NAME/dynamic` end to end through the HTTP API (KEP-5972 and KEP-6395): a running
worker pod (its status set through `/status`) gains and loses volumes, mounts and containers
through `/dynamic` only; every class of rule rejects with a 422 naming the field; the node's
declared features (NodeDeclaredFeatureValidator, 403) and the feature gates."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, pod, serve

from ephemera.api.featuregates import (
    DYNAMIC_CONTAINERS,
    DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES,
    NODE_DECLARED_FEATURES,
    FeatureGates,
)
from ephemera.pods.validation import UPDATABLE_POD_SPEC_FIELDS
from ephemera.store import open_store

PODS = "/api/v1/namespaces/default/pods"
WORKER = f"{PODS}/worker"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
ALL_DYNAMIC = ["DynamicContainers", "DynamicNodeLocalEphemeralVolumes"]
RESTART = {"restartPolicy": "RestartContainer"}

Pod = dict[str, Any]


def causes(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]]


async def add_node(api: Api, name: str, features: list[str]) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"declaredFeatures": features}}
    status, body = await api.post("/api/v1/nodes", node)
    assert status == 201, body


def worker(node: str = "n1") -> Pod:
    """A warm worker (KEP-6395 story 4): an init container, a `runner` that mounts a
    configMap, an unmounted scratch emptyDir."""
    body = pod("worker", node=node, volumes=[
        {"name": "config", "configMap": {"name": "task-1"}},
        {"name": "scratch", "emptyDir": {}},
    ])
    body["spec"]["initContainers"] = [{"name": "setup", "image": "busybox:1.36",
                                       "volumeMounts": [{"name": "config", "mountPath": "/cfg"}]}]
    body["spec"]["containers"] = [{"name": "runner", "image": "busybox:1.36",
                                   "volumeMounts": [{"name": "config", "mountPath": "/etc/task"}]}]
    return body


RUNNING_STATUS: dict[str, Any] = {
    "phase": "Running",
    "conditions": [{"type": "Initialized", "status": "True"},
                   {"type": "Ready", "status": "True"}],
    "initContainerStatuses": [{"name": "setup", "ready": False, "restartCount": 0,
                               "image": "busybox:1.36", "imageID": "",
                               "state": {"terminated": {"exitCode": 0}}}],
    "containerStatuses": [
        {"name": "runner", "ready": True, "restartCount": 0, "image": "busybox:1.36",
         "imageID": "", "state": {"running": {}},
         "volumeMounts": [{"name": "config", "mountPath": "/etc/task"}]},
        {"name": "old-helper", "ready": False, "restartCount": 0, "image": "busybox:1.36",
         "imageID": "", "state": {"terminated": {"exitCode": 0}},
         "volumeMounts": [{"name": "leftover", "mountPath": "/l"}]},
    ],
    "volumeStatuses": [{"name": "config", "hostPhase": "HostMounted"},
                       {"name": "scratch", "hostPhase": "HostMounted"},
                       {"name": "retired", "hostPhase": "Unmounting"}],
}


async def start_worker(api: Api, node: str = "n1", status: dict[str, Any] | None = None
                       ) -> Pod:
    """Create the worker and make it Running through `/status`, as a kubelet would."""
    code, created = await api.post(PODS, worker(node))
    assert code == 201, created
    code, body = await api.patch(f"{WORKER}/status",
                                 {"status": status if status is not None else RUNNING_STATUS},
                                 MERGE)
    assert code == 200, body
    return dict(body)


@pytest.fixture
async def running(api: Api) -> Pod:
    await add_node(api, "n1", ALL_DYNAMIC)
    return await start_worker(api)


def runner(p: Pod) -> dict[str, Any]:
    c: dict[str, Any] = p["spec"]["containers"][0]
    return c


# --- what /dynamic allows -----------------------------------------------------------------


async def test_add_a_volume_and_its_mount_with_restart_container(api: Api, running: Pod
                                                                 ) -> None:
    status, got = await api.get(f"{WORKER}/dynamic")
    assert status == 200 and got["metadata"]["uid"] == running["metadata"]["uid"]
    got["spec"]["volumes"].append({"name": "creds", "secret": {"secretName": "task-1-creds"}})
    runner(got)["volumeMounts"].append({"name": "creds", "mountPath": "/run/creds"})
    runner(got)["dynamicVolumePolicy"] = RESTART
    got["status"] = {"phase": "Pending"}  # ignored: /dynamic never changes status
    status, body = await api.put(f"{WORKER}/dynamic", got)
    assert status == 200, body
    assert body["spec"]["volumes"][2] == {"name": "creds", "secret": {
        "secretName": "task-1-creds", "defaultMode": 420}}
    assert runner(body)["volumeMounts"][1] == {"name": "creds", "mountPath": "/run/creds"}
    assert runner(body)["dynamicVolumePolicy"] == RESTART
    assert body["metadata"]["generation"] == running["metadata"]["generation"] + 1
    assert body["status"] == running["status"]
    status, stored = await api.get(WORKER)
    assert stored["spec"] == body["spec"]

    # and away again: the volume and its mount leave together
    body["spec"]["volumes"].pop()
    runner(body)["volumeMounts"].pop()
    status, out = await api.put(f"{WORKER}/dynamic", body)
    assert status == 200, out
    assert [v["name"] for v in out["spec"]["volumes"]] == ["config", "scratch"]


async def test_patch_dynamic_adds_a_container(api: Api, running: Pod) -> None:
    status, body = await api.patch(
        f"{WORKER}/dynamic",
        {"spec": {"containers": [{"name": "helper", "image": "busybox:1.36",
                                  "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}]}},
        STRATEGIC)
    assert status == 200, body
    helper = next(c for c in body["spec"]["containers"] if c["name"] == "helper")
    assert {c["name"] for c in body["spec"]["containers"]} == {"runner", "helper"}
    assert helper["imagePullPolicy"] == "IfNotPresent"  # defaulted
    status, body = await api.patch(f"{WORKER}/dynamic?dryRun=All", {"spec": {"volumes": [
        {"name": "config", "configMap": {"name": "task-1"}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "extra", "emptyDir": {}}]}}, MERGE)
    assert status == 200, body
    assert [v["name"] for v in body["spec"]["volumes"]] == ["config", "scratch", "extra"]
    status, stored = await api.get(WORKER)
    assert [v["name"] for v in stored["spec"]["volumes"]] == ["config", "scratch"]


async def test_the_same_changes_through_pods_are_immutable(api: Api, running: Pod) -> None:
    changed = copy.deepcopy(running)
    changed["spec"]["volumes"].append({"name": "extra", "emptyDir": {}})
    status, body = await api.put(WORKER, changed)
    assert status == 422
    [(reason, path, message)] = causes(body)
    assert (reason, path) == ("FieldValueForbidden", "spec")
    assert message.startswith("Forbidden: pod updates may not change fields other than "
                              + ",".join(UPDATABLE_POD_SPEC_FIELDS))
    changed = copy.deepcopy(running)
    changed["spec"]["containers"].append({"name": "helper", "image": "busybox:1.36"})
    status, body = await api.put(WORKER, changed)
    assert status == 422
    assert causes(body) == [("FieldValueForbidden", "spec.containers",
                             "Forbidden: pod updates may not add or remove containers")]
    status, body = await api.patch(WORKER, {"spec": {"containers": [
        {"name": "runner", "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}]}},
        STRATEGIC)
    assert status == 422
    assert [c["field"] for c in body["details"]["causes"]] == ["spec"]


# --- every rule class rejects with a 422 naming the field ---------------------------------


def _edit(fn: Callable[[Pod], Any]) -> Callable[[Pod], None]:
    def edit(p: Pod) -> None:
        fn(p)
    return edit


def _add_volume(volume: dict[str, Any]) -> Callable[[Pod], None]:
    return _edit(lambda p: p["spec"]["volumes"].append(volume))


def _add_container(c: dict[str, Any]) -> Callable[[Pod], None]:
    return _edit(lambda p: p["spec"]["containers"].append({"image": "busybox:1.36", **c}))


def _remove_volume(name: str) -> Callable[[Pod], None]:
    def edit(p: Pod) -> None:
        p["spec"]["volumes"] = [v for v in p["spec"]["volumes"] if v["name"] != name]
    return edit


REJECTIONS = [
    pytest.param(
        _add_volume({"name": "host", "hostPath": {"path": "/tmp"}}),
        [("FieldValueNotSupported", "spec.volumes[2]",
          'Unsupported value: "hostPath": supported values: "configMap", "secret", '
          '"projected", "emptyDir", "image"')],
        id="unsupported volume type"),
    pytest.param(
        _add_volume({"name": "retired", "emptyDir": {}}),
        [("FieldValueDuplicate", "spec.volumes[2].name",
          'Duplicate value: "retired": a volume with this name is still reported in '
          "status.volumeStatuses; the name can be reused once its teardown finished")],
        id="name still in status.volumeStatuses"),
    pytest.param(
        _add_volume({"name": "leftover", "emptyDir": {}}),
        [("FieldValueDuplicate", "spec.volumes[2].name",
          'Duplicate value: "leftover": a volume with this name is still mounted in container '
          '"old-helper" (status.containerStatuses[*].volumeMounts); the name can be reused '
          "once that container no longer mounts it")],
        id="name still mounted in a container status"),
    pytest.param(
        _edit(lambda p: p["spec"]["volumes"][0]["configMap"].update(name="task-2")),
        [("FieldValueForbidden", "spec.volumes[0]",
          'Forbidden: volume "config" already exists and may not be changed; remove it and '
          "add a volume with a new name")],
        id="volume changed in place"),
    pytest.param(
        _remove_volume("config"),
        [("FieldValueForbidden", "spec.initContainers[0].volumeMounts[0].name",
          'Forbidden: volume "config" is removed from spec.volumes but still mounted here; '
          "remove the mount or the container in the same update"),
         ("FieldValueForbidden", "spec.containers[0].volumeMounts[0].name",
          'Forbidden: volume "config" is removed from spec.volumes but still mounted here; '
          "remove the mount or the container in the same update")],
        id="dangling mount"),
    pytest.param(
        _edit(lambda p: runner(p)["volumeMounts"].append({"name": "scratch",
                                                           "mountPath": "/s"})),
        [("FieldValueRequired", "spec.containers[0].dynamicVolumePolicy.restartPolicy",
          'Required value: must be "NotRequired" (mounted into the running container) or '
          '"RestartContainer" to add, remove or change volume mounts of a container already '
          "in the pod; without it, mounts may only come and go with their container")],
        id="mount change without RestartContainer"),
    pytest.param(
        _edit(lambda p: p["spec"]["initContainers"][0]["volumeMounts"].append(
            {"name": "scratch", "mountPath": "/s"})),
        [("FieldValueForbidden", "spec.initContainers[0].volumeMounts",
          "Forbidden: volume mounts of init containers may not be changed")],
        id="init container mounts"),
    pytest.param(
        _edit(lambda p: p["spec"].update(containers=[])),
        [("FieldValueForbidden", "spec.containers",
          "Forbidden: the last container may not be removed; a pod must keep at least one "
          "container")],
        id="last container removed"),
    pytest.param(
        _add_container({"name": "old-helper"}),
        [("FieldValueDuplicate", "spec.containers[1].name",
          'Duplicate value: "old-helper": a container with this name is still reported in '
          "status.containerStatuses; the name can be reused once that status is gone")],
        id="container name still in status"),
    pytest.param(
        _add_container({"name": "root", "securityContext": {"privileged": True}}),
        [("FieldValueForbidden", "spec.containers[1].securityContext.privileged",
          "Forbidden: privileged containers may not be added to a running pod")],
        id="privileged container"),
    pytest.param(
        _add_container({"name": "greedy", "resources": {"requests": {"cpu": "100m"}}}),
        [("FieldValueInvalid", "spec",
          'Invalid value: "Burstable": Pod QOS Class may not change as a result of adding or '
          'removing containers (it is "BestEffort")')],
        id="QoS class change"),
    pytest.param(
        _add_container({"name": "porter", "ports": [{"containerPort": 80, "hostPort": 80}]}),
        [("FieldValueForbidden", "spec.containers[1].ports[0].hostPort",
          "Forbidden: containers added to a running pod may not use host ports")],
        id="host port"),
    pytest.param(
        _edit(lambda p: p["spec"]["initContainers"].append({"name": "setup2",
                                                             "image": "busybox:1.36"})),
        [("FieldValueForbidden", "spec.initContainers",
          "Forbidden: init containers may not be added or removed; only main containers can "
          "be")],
        id="init container added"),
]


@pytest.mark.parametrize(("edit", "expected"), REJECTIONS)
async def test_dynamic_rules_reject_with_422(api: Api, running: Pod,
                                             edit: Callable[[Pod], None],
                                             expected: list[tuple[str, str, str]]) -> None:
    _, got = await api.get(f"{WORKER}/dynamic")
    edit(got)
    status, body = await api.put(f"{WORKER}/dynamic", got)
    assert status == 422, body
    assert body["reason"] == "Invalid"
    assert causes(body) == expected
    _, stored = await api.get(WORKER)
    assert stored["metadata"]["resourceVersion"] == running["metadata"]["resourceVersion"]


async def test_a_dynamic_update_may_not_change_other_fields(api: Api, running: Pod) -> None:
    _, got = await api.get(f"{WORKER}/dynamic")
    runner(got)["command"] = ["sleep", "1"]
    status, body = await api.put(f"{WORKER}/dynamic", got)
    assert status == 422
    [(reason, path, message)] = causes(body)
    assert (reason, path) == ("FieldValueForbidden", "spec")
    assert message.startswith("Forbidden: pod updates may not change fields other than ")
    runner(got).pop("command")
    runner(got)["image"] = "busybox:1.37"  # what a plain update may change, /dynamic may too
    status, body = await api.put(f"{WORKER}/dynamic", got)
    assert status == 200, body


# --- the pod's state ----------------------------------------------------------------------


async def test_volumes_change_only_in_a_running_initialized_pod(api: Api) -> None:
    await add_node(api, "n1", ALL_DYNAMIC)
    not_initialized = dict(RUNNING_STATUS, conditions=[{"type": "Initialized",
                                                        "status": "False"}])
    await start_worker(api, status=not_initialized)
    _, got = await api.get(f"{WORKER}/dynamic")
    got["spec"]["volumes"].append({"name": "extra", "emptyDir": {}})
    status, body = await api.put(f"{WORKER}/dynamic", got)
    assert status == 422
    assert causes(body) == [("FieldValueForbidden", "status.conditions",
                             "Forbidden: containers and volumes may only be changed once the "
                             "pod is initialized (condition Initialized is not True)")]
    status, _ = await api.patch(f"{WORKER}/status", {"status": {"phase": "Succeeded"}}, MERGE)
    assert status == 200
    got["metadata"].pop("resourceVersion")
    status, body = await api.put(f"{WORKER}/dynamic", got)
    assert status == 422
    assert ("FieldValueForbidden", "status.phase",
            "Forbidden: containers and volumes may only be changed while the pod is Running "
            '(phase is "Succeeded")') in causes(body)


async def test_no_changes_once_the_pod_is_being_deleted(api: Api, running: Pod) -> None:
    status, deleting = await api.delete(WORKER)
    assert status == 200 and deleting["metadata"]["deletionTimestamp"]
    _, got = await api.get(f"{WORKER}/dynamic")
    got["spec"]["volumes"].append({"name": "extra", "emptyDir": {}})
    status, body = await api.put(f"{WORKER}/dynamic", got)
    assert status == 422
    assert causes(body) == [("FieldValueForbidden", "metadata.deletionTimestamp",
                             "Forbidden: containers and volumes may not be changed once the "
                             "pod is being deleted")]


# --- node declared features (403 from admission) -----------------------------------------


async def test_the_node_must_declare_the_features_of_the_change(api: Api) -> None:
    await add_node(api, "n1", ["DynamicContainers"])
    await start_worker(api)
    _, got = await api.get(f"{WORKER}/dynamic")
    volume_change = copy.deepcopy(got)
    volume_change["spec"]["volumes"].append({"name": "extra", "emptyDir": {}})
    status, body = await api.put(f"{WORKER}/dynamic", volume_change)
    assert status == 403
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods "worker" is forbidden: pod update requires features '
        'DynamicNodeLocalEphemeralVolumes which are not available on node "n1"')
    assert body["details"] == {"name": "worker", "kind": "pods"}
    both = copy.deepcopy(volume_change)
    both["spec"]["containers"].append({"name": "helper", "image": "busybox:1.36"})
    status, body = await api.put(f"{WORKER}/dynamic", both)
    assert status == 403
    assert "requires features DynamicNodeLocalEphemeralVolumes which" in body["message"]
    container_change = copy.deepcopy(got)
    container_change["spec"]["containers"].append({"name": "helper", "image": "busybox:1.36"})
    status, body = await api.put(f"{WORKER}/dynamic", container_change)
    assert status == 200, body  # DynamicContainers is declared
    image_change = copy.deepcopy(body)
    image_change["spec"]["containers"][0]["image"] = "busybox:1.37"
    status, body = await api.put(f"{WORKER}/dynamic", image_change)
    assert status == 200, body  # needs no feature


async def test_a_missing_node_declares_nothing(api: Api) -> None:
    await start_worker(api, node="gone")
    _, got = await api.get(f"{WORKER}/dynamic")
    got["spec"]["volumes"].append({"name": "extra", "emptyDir": {}})
    status, body = await api.put(f"{WORKER}/dynamic", got)
    assert status == 403
    assert body["message"] == 'pods "worker" is forbidden: node "gone" not found'
    got["spec"]["volumes"][2]["hostPath"] = {"path": "/x"}
    got["spec"]["volumes"][2].pop("emptyDir")
    status, body = await api.put(f"{WORKER}/dynamic", got)
    assert status == 422  # validation answers before validating admission


async def test_binding_needs_the_pod_level_ephemeral_storage_feature(api: Api) -> None:
    await add_node(api, "old", [])
    await add_node(api, "new", ["PodLevelResourcesEphemeralStorage"])
    body = pod("p1")
    body["spec"]["resources"] = {"limits": {"ephemeral-storage": "1Gi"}}
    assert (await api.post(PODS, body))[0] == 201
    binding: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "old"}}
    status, out = await api.post(f"{PODS}/p1/binding", binding)
    assert status == 403
    assert out["message"] == (
        'pods "p1" is forbidden: pod requires features PodLevelResourcesEphemeralStorage which '
        'are not available on node "old"')
    _, stored = await api.get(f"{PODS}/p1")
    assert "nodeName" not in stored["spec"]
    binding["target"]["name"] = "new"
    status, out = await api.post(f"{PODS}/p1/binding", binding)
    assert status == 201, out
    # a pod without pod-level ephemeral-storage binds anywhere
    assert (await api.post(PODS, pod("p2")))[0] == 201
    binding = {**binding, "metadata": {"name": "p2"},
               "target": {"kind": "Node", "name": "old"}}
    assert (await api.post(f"{PODS}/p2/binding", binding))[0] == 201
    # and a create that names the node is checked the same way
    body = pod("p3", node="old")
    body["spec"]["resources"] = {"requests": {"ephemeral-storage": "1Gi"}}
    status, out = await api.post(PODS, body)
    assert status == 403
    assert out["message"].endswith('which are not available on node "old"')


# --- gates ---------------------------------------------------------------------------------


async def _serve_with(tmp_path: Path, overrides: dict[str, bool],
                      check: Callable[[Api], Any]) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    try:
        async for api in serve(store, feature_gates=FeatureGates(overrides)):
            await check(api)
    finally:
        await store.close()


async def test_volumes_gate_off_rejects_volume_changes(tmp_path: Path) -> None:
    async def check(api: Api) -> None:
        await add_node(api, "n1", ALL_DYNAMIC)
        await start_worker(api)
        _, got = await api.get(f"{WORKER}/dynamic")
        got["spec"]["volumes"].append({"name": "extra", "emptyDir": {}})
        status, body = await api.put(f"{WORKER}/dynamic", got)
        assert status == 422
        assert causes(body) == [(
            "FieldValueForbidden", "spec.volumes",
            "Forbidden: Dynamic Node-Local Ephemeral Volumes are disabled: volumes and volume "
            "mounts may not be changed (feature gate DynamicNodeLocalEphemeralVolumes is off)")]
        got["spec"]["volumes"].pop()
        runner(got)["volumeMounts"].append({"name": "scratch", "mountPath": "/s"})
        runner(got)["dynamicVolumePolicy"] = RESTART  # dropped: the gate owns the field
        status, body = await api.put(f"{WORKER}/dynamic", got)
        assert status == 422
        assert [c["field"] for c in body["details"]["causes"]] == [
            "spec.containers[0].volumeMounts"]
        got["spec"]["volumes"] = got["spec"]["volumes"][:2]
        runner(got)["volumeMounts"].pop()
        got["spec"]["containers"].append({"name": "helper", "image": "busybox:1.36"})
        status, body = await api.put(f"{WORKER}/dynamic", got)
        assert status == 200, body  # containers are still dynamic

    await _serve_with(tmp_path, {DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES: False}, check)


async def test_dynamic_containers_gate_off_hides_the_subresource(tmp_path: Path) -> None:
    async def check(api: Api) -> None:
        await api.create_pod("p1")
        for sub in ("dynamic", "allocated"):
            status, body = await api.get(f"{PODS}/p1/{sub}")
            assert status == 404, sub
            assert body["message"] == "the server could not find the requested resource"

    await _serve_with(tmp_path, {DYNAMIC_CONTAINERS: False}, check)


async def test_node_declared_features_gate_off_checks_nothing(tmp_path: Path) -> None:
    async def check(api: Api) -> None:
        await start_worker(api, node="gone")
        _, got = await api.get(f"{WORKER}/dynamic")
        got["spec"]["volumes"].append({"name": "extra", "emptyDir": {}})
        status, body = await api.put(f"{WORKER}/dynamic", got)
        assert status == 200, body

    await _serve_with(tmp_path, {NODE_DECLARED_FEATURES: False}, check)


# --- fields accepted without effect are warned about --------------------------------------

NO_EFFECT = "has no effect in ephemera (not implemented)"


async def test_unimplemented_fields_are_warned_on_create_update_and_dynamic(api: Api) -> None:
    await add_node(api, "n1", ALL_DYNAMIC)
    body = worker()
    body["spec"]["hostAliases"] = [{"ip": "10.0.0.1", "hostnames": ["db"]}]
    status, created, response = await api.request("POST", PODS, body)
    assert status == 201, created
    assert response.headers.getall("Warning") == [
        f'299 - "spec.hostAliases: adding /etc/hosts entries {NO_EFFECT}"']
    # The same pod written back as it is: nothing new, no warning.
    status, _, response = await api.request("PUT", WORKER, created)
    assert status == 200 and "Warning" not in response.headers
    # Status writes are never warned about.
    status, _, response = await api.request("PATCH", f"{WORKER}/status",
                                            {"status": RUNNING_STATUS}, content_type=MERGE)
    assert status == 200 and "Warning" not in response.headers
    # A container added through /dynamic with a hook earns its own warning.
    hook = {"postStart": {"exec": {"command": ["true"]}}}
    status, patched, response = await api.request(
        "PATCH", f"{WORKER}/dynamic",
        {"spec": {"containers": [{"name": "helper", "image": "busybox:1.36",
                                  "lifecycle": hook}]}}, content_type=STRATEGIC)
    assert status == 200, patched
    at = [c["name"] for c in patched["spec"]["containers"]].index("helper")
    assert response.headers.getall("Warning") == [
        f'299 - "spec.containers[{at}].lifecycle: lifecycle hooks have no effect in ephemera '
        '(not implemented)"']

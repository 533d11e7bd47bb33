"""KEP-6395 (dynamic node-local ephemeral volumes) and KEP-5972 (dynamic containers) through
the real kubectl against a real `ephemera up` without a kubelet: `kubectl patch --subresource=
dynamic` (strategic, merge and JSON patches), `kubectl replace --subresource=dynamic`, `kubectl
replace --raw .../dynamic` and raw HTTPS, with kubectl's exact lines for every accepted change
and every rejection class; the same change through the plain pod; the nodes' declared
features; `pods/NAME/allocated`; the `DynamicNodeLocalEphemeralVolumes` gate turned off on a
cluster whose pods already use it (the KEP's downgrade).

Nodes are API objects (`kep6395-node` declares the features, `kep6395-old-node` nothing,
`kep6395-containers-node` only DynamicContainers); a pod is "running" once its status says so
(`make_running`). Manifests are in `manifests/kep6395/`. The module is one xdist group: one
cluster with every gate on, one downgraded, a namespace per test.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Cluster, Kubectl, kubectl  # noqa: F401  (fixture)
from kep_e2e import (
    DNLEV,
    DYNAMIC_CONTAINERS,
    PLRES,
    RawApi,
    as_input,
    downgraded_cluster,
    kubectl_in,
    make_running,
    node_manifest,
    pod_path,
    running_cluster,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("kep6395")]

MANIFESTS = Path(__file__).parent / "manifests" / "kep6395"
NODE = "kep6395-node"
OLD_NODE = "kep6395-old-node"
CONTAINERS_NODE = "kep6395-containers-node"
POLICY = {"restartPolicy": "RestartContainer"}
SUPPORTED = '"configMap", "secret", "projected", "emptyDir", "image"'
IMMUTABLE = ("spec: Forbidden: pod updates may not change fields other than "
             "`spec.containers[*].image`,`spec.initContainers[*].image`,"
             "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
             "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
             "was previously negative)")
VOLUMES_OFF = ("Forbidden: Dynamic Node-Local Ephemeral Volumes are disabled: volumes and volume "
               "mounts may not be changed (feature gate DynamicNodeLocalEphemeralVolumes is off)")
RESTART_REQUIRED = ('Required value: must be "NotRequired" (mounted into the running container) '
                    'or "RestartContainer" to add, remove or change volume mounts of a container '
                    "already in the pod; without it, mounts may only come and go with their "
                    "container")


def nodes() -> list[dict[str, Any]]:
    return [node_manifest(NODE, declared=[DNLEV, DYNAMIC_CONTAINERS, PLRES]),
            node_manifest(OLD_NODE),
            node_manifest(CONTAINERS_NODE, declared=[DYNAMIC_CONTAINERS])]


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The module's cluster, every gate on, no kubelet, with this module's nodes."""
    with running_cluster(tmp_path_factory.mktemp("kep6395")) as cluster:
        cluster.kubectl("create", "-f", "-", input=as_input(*nodes()))
        yield cluster


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((MANIFESTS / f"{name}.yaml").read_text())
    return loaded


def start(k: Kubectl, pod: dict[str, Any], status: dict[str, Any] | None = None,
          running: bool = True) -> str:
    """Create `pod`, and unless not `running`, give it a running pod's status (plus
    `status`). Its name."""
    k("create", "-f", "-", input=as_input(pod))
    name = str(pod["metadata"]["name"])
    if running:
        make_running(k, name, status)
    return name


def dynamic(k: Kubectl, name: str, patch: Any, patch_type: str = "json",
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """`kubectl patch pod NAME --subresource=dynamic`."""
    return k("patch", "pod", name, "--subresource=dynamic", f"--type={patch_type}",
             "-p", json.dumps(patch), check=check)


def invalid(name: str, *lines: str) -> str:
    if len(lines) == 1:
        return f'The Pod "{name}" is invalid: {lines[0]}'
    return f'The Pod "{name}" is invalid: \n' + "\n".join(f"* {line}" for line in lines)


def forbidden(name: str, message: str) -> str:
    return f'Error from server (Forbidden): pods "{name}" is forbidden: {message}'


def rejected(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout
    assert result.stdout == ""
    return result.stderr.strip()


def add_volume(volume: dict[str, Any], mount_path: str = "/mnt/new") -> list[dict[str, Any]]:
    """A JSON patch adding `volume` and a mount of it to the first container (which has
    mounts already)."""
    return [{"op": "add", "path": "/spec/volumes/-", "value": volume},
            {"op": "add", "path": "/spec/containers/0/volumeMounts/-",
             "value": {"name": volume["name"], "mountPath": mount_path}}]


def add_container(**fields: Any) -> list[dict[str, Any]]:
    return [{"op": "add", "path": "/spec/containers/-",
             "value": {"name": "tool", "image": "busybox:1.36", **fields}}]


SCRATCH = {"name": "scratch", "emptyDir": {}}


def container_status(name: str, mounts: list[dict[str, str]] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"name": name, "ready": True, "restartCount": 0,
                              "image": "busybox:1.36", "imageID": "",
                              "state": {"running": {"startedAt": "2026-09-25T14:00:00Z"}}}
    if mounts is not None:
        status["volumeMounts"] = mounts
    return status


# --- accepted changes ----------------------------------------------------------------------

# volume added (strategic merge patch, with a mount on `app`) -> the volume as stored
ADDED_VOLUMES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "configMap": ({"name": "settings", "configMap": {"name": "settings"}},
                  {"name": "settings", "configMap": {"name": "settings", "defaultMode": 420}}),
    "secret": ({"name": "creds", "secret": {"secretName": "creds"}},
               {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 420}}),
    "emptyDir": ({"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
                 {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}),
    "projected": (
        {"name": "tools", "projected": {"sources": [
            {"configMap": {"name": "tool-config"}},
            {"serviceAccountToken": {"path": "token"}}]}},
        {"name": "tools", "projected": {"defaultMode": 420, "sources": [
            {"configMap": {"name": "tool-config"}},
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}),
    "image": ({"name": "dataset", "image": {"reference": "busybox:latest"}},
              {"name": "dataset", "image": {"reference": "busybox:latest",
                                            "pullPolicy": "Always"}}),
    "no source": ({"name": "blank"}, {"name": "blank", "emptyDir": {}}),
}


@pytest.mark.parametrize("kind", sorted(ADDED_VOLUMES))
def test_volume_added_to_a_restartable_container(kubectl: Kubectl,  # noqa: F811
                                                 kind: str) -> None:
    volume, stored = ADDED_VOLUMES[kind]
    name = start(kubectl, load("runner"))
    before = kubectl.json("get", "pod", name)
    patch = {"spec": {"volumes": [volume], "containers": [
        {"name": "app", "volumeMounts": [{"name": volume["name"], "mountPath": "/mnt/new"}]}]}}
    assert dynamic(kubectl, name, patch, "strategic").stdout == f"pod/{name} patched\n"

    after = kubectl.json("get", "pod", name)
    # strategic merge puts the patch's new items first, as upstream's does
    assert after["spec"]["volumes"] == [stored, {"name": "base", "emptyDir": {}}]
    app, plain = after["spec"]["containers"]
    assert app["volumeMounts"] == [{"name": volume["name"], "mountPath": "/mnt/new"},
                                   {"name": "base", "mountPath": "/base"}]
    assert app["dynamicVolumePolicy"] == POLICY
    assert plain == before["spec"]["containers"][1]
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert after["status"] == before["status"]


def test_dynamic_container_brings_its_own_volumes(kubectl: Kubectl) -> None:  # noqa: F811
    """KEP-6395 Story 2 and the KEP-5972 synergy e2e case: a projected credentials volume,
    a scratch emptyDir and two containers mounting them, added in one request to a sandbox
    whose runner has no volume policy (mounts come with their container); then taken away
    together."""
    name = start(kubectl, load("warm-sandbox"))
    tool = {"name": "tool", "image": "busybox:1.36",
            "volumeMounts": [{"name": "creds", "mountPath": "/creds", "readOnly": True},
                             {"name": "workspace", "mountPath": "/workspace"}]}
    helper = {"name": "helper", "image": "busybox:1.36",
              "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}]}
    patch = {"spec": {
        "volumes": [{"name": "creds", "projected": {"sources": [
                        {"secret": {"name": "tenant-creds"}},
                        {"configMap": {"name": "tool-config"}}]}},
                    {"name": "workspace", "emptyDir": {}}],
        "containers": [tool, helper]}}
    assert dynamic(kubectl, name, patch, "strategic").stdout == f"pod/{name} patched\n"
    spec = kubectl.json("get", "pod", name)["spec"]
    assert [c["name"] for c in spec["containers"]] == ["tool", "helper", "runner"]
    assert [v["name"] for v in spec["volumes"]] == ["creds", "workspace"]
    assert "volumeMounts" not in spec["containers"][2]

    # the containers and their volumes leave together (JSON patch; the runner is last)
    removal = [{"op": "remove", "path": "/spec/containers/1"},
               {"op": "remove", "path": "/spec/containers/0"},
               {"op": "remove", "path": "/spec/volumes"}]
    assert dynamic(kubectl, name, removal).stdout == f"pod/{name} patched\n"
    spec = kubectl.json("get", "pod", name)["spec"]
    assert [c["name"] for c in spec["containers"]] == ["runner"]
    assert "volumes" not in spec


def test_task_worker_swaps_its_volumes(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    """KEP-6395 Stories 1 and 4 through `kubectl replace --subresource=dynamic` and `kubectl
    replace --raw`: task 1 gets a config and a scratch volume; task 2 swaps the scratch for a
    fresh one and adds credentials; a name still torn down on the node cannot be reused."""
    name = start(kubectl, load("task-worker"))
    pod = kubectl.json("get", "pod", name, "--subresource=dynamic")
    pod["spec"]["volumes"] = [{"name": "task-config", "configMap": {"name": "task-1"}},
                              {"name": "scratch", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "task-config", "mountPath": "/task", "readOnly": True},
        {"name": "scratch", "mountPath": "/mnt/scratch"}]
    task1 = tmp_path / "task1.json"
    task1.write_text(json.dumps(pod))
    assert kubectl("replace", "--subresource=dynamic", "-f", str(task1)).stdout == \
        f"pod/{name} replaced\n"

    # the node reports the volumes mounted, the container restarted with them
    mounts = [{"name": "task-config", "mountPath": "/task"},
              {"name": "scratch", "mountPath": "/mnt/scratch"}]
    make_running(kubectl, name, {
        "volumeStatuses": [{"name": "task-config", "hostPhase": "HostMounted"},
                           {"name": "scratch", "hostPhase": "HostMounted"}],
        "containerStatuses": [container_status("worker", mounts)]})

    # task 2, as a YAML body PUT by `replace --raw`
    pod = kubectl.json("get", "pod", name)
    pod["spec"]["volumes"] = [{"name": "task-config", "configMap": {"name": "task-1"}},
                              {"name": "creds", "secret": {"secretName": "task-2"}},
                              {"name": "scratch-2", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "task-config", "mountPath": "/task", "readOnly": True},
        {"name": "creds", "mountPath": "/creds"},
        {"name": "scratch-2", "mountPath": "/mnt/scratch"}]
    task2 = tmp_path / "task2.yaml"
    task2.write_text(yaml.safe_dump(pod))
    path = pod_path(kubectl.namespace or "", name, "dynamic")
    replaced = json.loads(kubectl("replace", "--raw", path, "-f", str(task2)).stdout)
    assert [v["name"] for v in replaced["spec"]["volumes"]] == [
        "task-config", "creds", "scratch-2"]
    assert replaced["spec"]["volumes"][1]["secret"] == {"secretName": "task-2",
                                                         "defaultMode": 420}

    # "scratch" is still being torn down on the node: re-adding it is refused (the anti-race
    # rule), under another name it is fine
    make_running(kubectl, name, {
        "volumeStatuses": [{"name": "task-config", "hostPhase": "HostMounted"},
                           {"name": "scratch", "hostPhase": "Unmounting"}],
        "containerStatuses": [container_status("worker", [])]})
    result = dynamic(kubectl, name, add_volume(SCRATCH, mount_path="/mnt/old"), check=False)
    assert rejected(result) == invalid(
        name, 'spec.volumes[3].name: Duplicate value: "scratch": a volume with this name is '
              "still reported in status.volumeStatuses; the name can be reused once its "
              "teardown finished")
    fresh = {"name": "scratch-3", "emptyDir": {}}
    assert dynamic(kubectl, name, add_volume(fresh, mount_path="/mnt/old")).stdout == \
        f"pod/{name} patched\n"


def test_policy_may_be_set_with_the_mount(kubectl: Kubectl) -> None:  # noqa: F811
    """`plain` has no policy: setting RestartContainer in the same update lets the mount in
    (a merge patch replaces the container list whole)."""
    name = start(kubectl, load("runner"))
    containers = kubectl.json("get", "pod", name)["spec"]["containers"]
    containers[1]["dynamicVolumePolicy"] = POLICY
    containers[1]["volumeMounts"] = [{"name": "base", "mountPath": "/shared"}]
    patch = {"spec": {"containers": containers}}
    assert dynamic(kubectl, name, patch, "merge").stdout == f"pod/{name} patched\n"
    plain = kubectl.json("get", "pod", name)["spec"]["containers"][1]
    assert plain["dynamicVolumePolicy"] == POLICY
    assert plain["volumeMounts"] == [{"name": "base", "mountPath": "/shared"}]


# --- every rejection class ---------------------------------------------------------------


@dataclass
class Rejection:
    """A change through `/dynamic` (a JSON patch) of a pod (`manifest`, changed by `edit`)
    with `status` (None: left Pending), and kubectl's text for it."""

    manifest: str
    patch: list[dict[str, Any]]
    lines: list[str]
    status: dict[str, Any] | None = field(default_factory=dict)
    edit: dict[str, Any] = field(default_factory=dict)
    delete_first: bool = False


NEW_CONTAINER = "spec.containers[2]"
REJECTIONS: dict[str, Rejection] = {
    "hostPath volume": Rejection("runner", add_volume(
        {"name": "host", "hostPath": {"path": "/var/lib"}}),
        [f'spec.volumes[1]: Unsupported value: "hostPath": supported values: {SUPPORTED}']),
    "PVC volume": Rejection("runner", add_volume(
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}),
        ['spec.volumes[1]: Unsupported value: "persistentVolumeClaim": supported values: '
         f"{SUPPORTED}"]),
    "CSI volume": Rejection("runner", add_volume(
        {"name": "inline", "csi": {"driver": "inline.csi.example.com"}}),
        [f'spec.volumes[1]: Unsupported value: "csi": supported values: {SUPPORTED}']),
    "name in status.volumeStatuses": Rejection(
        "runner", add_volume(SCRATCH),
        ['spec.volumes[1].name: Duplicate value: "scratch": a volume with this name is still '
         "reported in status.volumeStatuses; the name can be reused once its teardown "
         "finished"],
        status={"volumeStatuses": [{"name": "base", "hostPhase": "HostMounted"},
                                   {"name": "scratch", "hostPhase": "Unmounting"}]}),
    "name still mounted in a container": Rejection(
        "runner", add_volume(SCRATCH),
        ['spec.volumes[1].name: Duplicate value: "scratch": a volume with this name is still '
         'mounted in container "app" (status.containerStatuses[*].volumeMounts); the name can '
         "be reused once that container no longer mounts it"],
        status={"containerStatuses": [container_status("app", [
            {"name": "base", "mountPath": "/base"},
            {"name": "scratch", "mountPath": "/scratch"}]), container_status("plain")]}),
    "name already in spec.volumes": Rejection(
        "runner", add_volume({"name": "base", "emptyDir": {}}),
        ['spec.volumes[1].name: Duplicate value: "base"']),
    "dangling mount": Rejection(
        "runner", [{"op": "remove", "path": "/spec/volumes/0"}],
        ['spec.containers[0].volumeMounts[0].name: Forbidden: volume "base" is removed from '
         "spec.volumes but still mounted here; remove the mount or the container in the same "
         "update"]),
    "mount of a missing volume": Rejection(
        "runner", [{"op": "add", "path": "/spec/containers/0/volumeMounts/-",
                    "value": {"name": "nope", "mountPath": "/nope"}}],
        ['spec.containers[0].volumeMounts[1].name: Not found: "nope"']),
    "mount added without RestartContainer": Rejection(
        "runner", [{"op": "add", "path": "/spec/volumes/-", "value": SCRATCH},
                   {"op": "add", "path": "/spec/containers/1/volumeMounts",
                    "value": [{"name": "scratch", "mountPath": "/scratch"}]}],
        [f"spec.containers[1].dynamicVolumePolicy.restartPolicy: {RESTART_REQUIRED}"]),
    "mount removed with the policy": Rejection(
        "runner", [{"op": "remove", "path": "/spec/containers/0/dynamicVolumePolicy"},
                   {"op": "remove", "path": "/spec/containers/0/volumeMounts"}],
        [f"spec.containers[0].dynamicVolumePolicy.restartPolicy: {RESTART_REQUIRED}"]),
    "volume changed in place": Rejection(
        "runner", [{"op": "replace", "path": "/spec/volumes/0",
                    "value": {"name": "base", "configMap": {"name": "other"}}}],
        ['spec.volumes[0]: Forbidden: volume "base" already exists and may not be changed; '
         "remove it and add a volume with a new name"]),
    "hostPath volume removed": Rejection(
        "runner", [{"op": "remove", "path": "/spec/volumes/1"}],
        ['spec.volumes: Forbidden: volume "host" may not be removed: only configMap, secret, '
         "projected, emptyDir and image volumes can be removed from a running pod"],
        edit={"volumes": [{"name": "base", "emptyDir": {}},
                          {"name": "host", "hostPath": {"path": "/var/lib", "type": ""}}]}),
    "init container mounts": Rejection(
        "runner-with-init", [{"op": "add", "path": "/spec/volumes/-", "value": SCRATCH},
                             {"op": "add", "path": "/spec/initContainers/0/volumeMounts/-",
                              "value": {"name": "scratch", "mountPath": "/scratch"}}],
        ["spec.initContainers[0].volumeMounts: Forbidden: volume mounts of init containers may "
         "not be changed"]),
    "init container added": Rejection(
        "runner", [{"op": "add", "path": "/spec/initContainers",
                    "value": [{"name": "late", "image": "busybox:1.36"}]}],
        ["spec.initContainers: Forbidden: init containers may not be added or removed; only "
         "main containers can be"]),
    "pod not Running": Rejection(
        "runner", add_volume(SCRATCH),
        ['status.phase: Forbidden: containers and volumes may only be changed while the pod is '
         'Running (phase is "Pending")'], status=None),
    "pod not initialized": Rejection(
        "runner-with-init", add_volume(SCRATCH),
        ["status.conditions: Forbidden: containers and volumes may only be changed once the "
         "pod is initialized (condition Initialized is not True)"],
        status={"conditions": [{"type": "Initialized", "status": "False",
                                "reason": "ContainersNotInitialized"}]}),
    "pod being deleted": Rejection(
        "runner", add_volume(SCRATCH),
        ["metadata.deletionTimestamp: Forbidden: containers and volumes may not be changed "
         "once the pod is being deleted"], delete_first=True),
    "privileged container added": Rejection(
        "runner", add_container(securityContext={"privileged": True}),
        [f"{NEW_CONTAINER}.securityContext.privileged: Forbidden: privileged containers may "
         "not be added to a running pod"]),
    "capability beyond the pod's": Rejection(
        "runner", add_container(securityContext={"capabilities": {"add": ["NET_ADMIN"]}}),
        [f'{NEW_CONTAINER}.securityContext.capabilities.add[0]: Invalid value: "NET_ADMIN": '
         "must be a capability that a container already in the pod adds"]),
    "host port on an added container": Rejection(
        "runner", add_container(ports=[{"containerPort": 80, "hostPort": 8080}]),
        [f"{NEW_CONTAINER}.ports[0].hostPort: Forbidden: containers added to a running pod may "
         "not use host ports"]),
    "container name still in status": Rejection(
        "runner", [{"op": "add", "path": "/spec/containers/-",
                    "value": {"name": "retired", "image": "busybox:1.36"}}],
        [f'{NEW_CONTAINER}.name: Duplicate value: "retired": a container with this name is '
         "still reported in status.containerStatuses; the name can be reused once that status "
         "is gone"],
        status={"containerStatuses": [container_status("app"), container_status("plain"),
                                      container_status("retired")]}),
    "storage requests on an added container": Rejection(
        "runner", add_container(resources={"requests": {"ephemeral-storage": "1Gi"}}),
        [f"{NEW_CONTAINER}.resources.requests[ephemeral-storage]: Unsupported value: "
         '"ephemeral-storage": supported values: "cpu", "memory"']),
    "security weaker than every container's": Rejection(
        "runner", add_container(),
        [f"{NEW_CONTAINER}.securityContext.capabilities.drop: Required value: must drop "
         '"ALL": every container already in the pod drops them',
         f"{NEW_CONTAINER}.securityContext.runAsNonRoot: Required value: must be true: every "
         "container already in the pod sets it",
         f"{NEW_CONTAINER}.securityContext.allowPrivilegeEscalation: Required value: must be "
         "false: every container already in the pod sets it to false"],
        edit={"containers": [
            {"name": name, "image": "busybox:1.36", "securityContext": {
                "runAsNonRoot": True, "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]}}} for name in ("app", "plain")]}),
    "QoS class change": Rejection(
        "runner", add_container(resources={"requests": {"cpu": "100m"}}),
        ['spec: Invalid value: "Burstable": Pod QOS Class may not change as a result of '
         'adding or removing containers (it is "BestEffort")']),
    "last container removed": Rejection(
        "warm-sandbox", [{"op": "remove", "path": "/spec/containers/0"}],
        ["spec.containers: Forbidden: the last container may not be removed; a pod must keep "
         "at least one container"]),
}


@pytest.mark.parametrize("case", sorted(REJECTIONS))
def test_dynamic_change_is_rejected(kubectl: Kubectl, case: str) -> None:  # noqa: F811
    spec = REJECTIONS[case]
    pod = load(spec.manifest)
    pod["spec"].update(copy.deepcopy(spec.edit))
    name = start(kubectl, pod, spec.status, running=spec.status is not None)
    if spec.delete_first:
        kubectl("delete", "pod", name, "--wait=false")
    before = kubectl.json("get", "pod", name)

    assert rejected(dynamic(kubectl, name, spec.patch, check=False)) == invalid(
        name, *spec.lines)
    after = kubectl.json("get", "pod", name)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_rejections_through_every_kubectl_route(kubectl: Kubectl,  # noqa: F811
                                                tmp_path: Path) -> None:
    """One rejection (a hostPath volume) as each route reports it, and as raw HTTPS: a 422
    Invalid Status whose cause names the field."""
    name = start(kubectl, load("runner"))
    line = invalid(name, f'spec.volumes[0]: Unsupported value: "hostPath": supported values: '
                         f"{SUPPORTED}")
    host = {"name": "host", "hostPath": {"path": "/var/lib"}}
    strategic = {"spec": {"volumes": [host], "containers": [
        {"name": "app", "volumeMounts": [{"name": "host", "mountPath": "/host"}]}]}}
    assert rejected(dynamic(kubectl, name, strategic, "strategic", check=False)) == line

    pod = kubectl.json("get", "pod", name)
    pod["spec"]["volumes"].append(host)
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "host", "mountPath": "/host"})
    edited = tmp_path / "pod.json"
    edited.write_text(json.dumps(pod))
    line = line.replace("spec.volumes[0]", "spec.volumes[1]")
    assert rejected(kubectl("replace", "--subresource=dynamic", "-f", str(edited),
                            check=False)) == line
    path = pod_path(kubectl.namespace or "", name, "dynamic")
    assert rejected(kubectl("replace", "--raw", path, "-f", str(edited), check=False)) == line

    api = RawApi(kubectl.cluster)
    try:
        code, status = api.request("PUT", path, pod)
        assert code == 422
        assert {k: status[k] for k in ("kind", "status", "reason", "code")} == {
            "kind": "Status", "status": "Failure", "reason": "Invalid", "code": 422}
        assert status["details"] == {"name": name, "kind": "Pod", "causes": [{
            "reason": "FieldValueNotSupported",
            "message": f'Unsupported value: "hostPath": supported values: {SUPPORTED}',
            "field": "spec.volumes[1]"}]}
        code, current = api.request("GET", path)
        assert code == 200 and current["spec"]["volumes"] == [{"name": "base", "emptyDir": {}}]
    finally:
        api.close()


# --- the plain pod: the upstream immutability error ---------------------------------------


def test_plain_pod_update_cannot_change_volumes_or_containers(kubectl: Kubectl,  # noqa: F811
                                                              tmp_path: Path) -> None:
    name = start(kubectl, load("runner"))
    plain = kubectl("patch", "pod", name, "--type=json", "-p",
                    json.dumps(add_volume(SCRATCH)), check=False)
    text = rejected(plain)
    assert text.splitlines()[0] == invalid(name, IMMUTABLE)
    # The diff marks only the added volume and mount (upstream's go-cmp shape).
    assert [line for line in text.splitlines() if line[:1] in "-+"] == [
        '+ \t\t{Name: "scratch", VolumeSource: {EmptyDir: &{}}},',
        '+ \t\t\t\t{Name: "scratch", MountPath: "/mnt/new"},']

    pod = kubectl.json("get", "pod", name)
    pod["spec"]["containers"].append({"name": "tool", "image": "busybox:1.36"})
    edited = tmp_path / "pod.json"
    edited.write_text(json.dumps(pod))
    assert rejected(kubectl("replace", "-f", str(edited), check=False)) == invalid(
        name, "spec.containers: Forbidden: pod updates may not add or remove containers")

    # the same two changes through /dynamic are accepted
    assert dynamic(kubectl, name, add_volume(SCRATCH)).stdout == f"pod/{name} patched\n"
    pod = kubectl.json("get", "pod", name)
    pod["spec"]["containers"].append({"name": "tool", "image": "busybox:1.36"})
    edited.write_text(json.dumps(pod))
    assert kubectl("replace", "--subresource=dynamic", "-f", str(edited)).stdout == \
        f"pod/{name} replaced\n"
    spec = kubectl.json("get", "pod", name)["spec"]
    assert [c["name"] for c in spec["containers"]] == ["app", "plain", "tool"]
    assert [v["name"] for v in spec["volumes"]] == ["base", "scratch"]


def test_other_fields_stay_immutable_through_dynamic(kubectl: Kubectl) -> None:  # noqa: F811
    name = start(kubectl, load("runner"))
    patch = [{"op": "add", "path": "/spec/containers/0/command", "value": ["sh"]}]
    text = rejected(dynamic(kubectl, name, patch, check=False))
    assert text.splitlines()[0] == invalid(name, IMMUTABLE)
    # ... while what a plain update may change, may change here too (an image)
    patch = [{"op": "replace", "path": "/spec/containers/1/image", "value": "busybox:1.37"}]
    assert dynamic(kubectl, name, patch).stdout == f"pod/{name} patched\n"


# --- the node's declared features ------------------------------------------------------------


def test_node_without_the_features_refuses_with_403(kubectl: Kubectl) -> None:  # noqa: F811
    def on(node: str, pod_name: str) -> str:
        pod = load("runner")
        pod["metadata"]["name"] = pod_name
        pod["spec"]["nodeName"] = node
        return start(kubectl, pod)

    old = on(OLD_NODE, "on-old-node")
    assert rejected(dynamic(kubectl, old, add_volume(SCRATCH), check=False)) == forbidden(
        old, "pod update requires features DynamicNodeLocalEphemeralVolumes which are not "
             f'available on node "{OLD_NODE}"')
    assert rejected(dynamic(kubectl, old, add_container(), check=False)) == forbidden(
        old, f'pod update requires features DynamicContainers which are not available on node '
             f'"{OLD_NODE}"')
    # an image update needs no feature
    patch = [{"op": "replace", "path": "/spec/containers/1/image", "value": "busybox:1.37"}]
    assert dynamic(kubectl, old, patch).stdout == f"pod/{old} patched\n"

    partial = on(CONTAINERS_NODE, "on-containers-node")
    assert dynamic(kubectl, partial, add_container()).stdout == f"pod/{partial} patched\n"
    assert rejected(dynamic(kubectl, partial, add_volume(SCRATCH), check=False)) == forbidden(
        partial, "pod update requires features DynamicNodeLocalEphemeralVolumes which are not "
                 f'available on node "{CONTAINERS_NODE}"')

    ghost = on("kep6395-ghost", "on-missing-node")
    assert rejected(dynamic(kubectl, ghost, add_volume(SCRATCH), check=False)) == forbidden(
        ghost, 'node "kep6395-ghost" not found')

    api = RawApi(kubectl.cluster)
    try:
        path = pod_path(kubectl.namespace or "", old, "dynamic")
        code, status = api.request("PATCH", path, add_volume(SCRATCH),
                                   "application/json-patch+json")
        assert (code, status["reason"], status["details"]) == (
            403, "Forbidden", {"name": old, "kind": "pods"})
    finally:
        api.close()


def test_node_starting_to_declare_the_feature(kubectl: Kubectl) -> None:  # noqa: F811
    node = "kep6395-upgraded-node"
    kubectl("create", "-f", "-", input=as_input(node_manifest(node)))
    try:
        pod = load("runner")
        pod["spec"]["nodeName"] = node
        name = start(kubectl, pod)
        assert rejected(dynamic(kubectl, name, add_volume(SCRATCH), check=False)) == \
            forbidden(name, "pod update requires features DynamicNodeLocalEphemeralVolumes "
                            f'which are not available on node "{node}"')
        kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p",
                json.dumps({"status": {"declaredFeatures": [DNLEV]}}))
        assert dynamic(kubectl, name, add_volume(SCRATCH)).stdout == f"pod/{name} patched\n"
    finally:
        kubectl("delete", "node", node, "--wait=false")


def test_a_live_change_needs_a_node_declaring_hot_plug(kubectl: Kubectl) -> None:  # noqa: F811
    """A mount change of a NotRequired container (made live) needs the node to declare
    ephemera's DynamicVolumeHotPlug; a RestartContainer change on the same node does not."""
    live = [{"op": "replace", "path": "/spec/containers/0/dynamicVolumePolicy",
             "value": {"restartPolicy": "NotRequired"}}]
    name = start(kubectl, load("runner"))
    assert rejected(dynamic(kubectl, name, add_volume(SCRATCH) + live, check=False)) == \
        forbidden(name, "pod update requires features DynamicVolumeHotPlug which are not "
                        f'available on node "{NODE}"')
    assert dynamic(kubectl, name, add_volume(SCRATCH)).stdout == f"pod/{name} patched\n"


# --- the API fields and pods/NAME/allocated --------------------------------------------------


def test_api_fields_are_validated(kubectl: Kubectl) -> None:  # noqa: F811
    pod = load("runner")
    pod["spec"]["containers"][0]["dynamicVolumePolicy"] = {"restartPolicy": "Sometimes"}
    result = kubectl("create", "-f", "-", input=as_input(pod), check=False)
    assert rejected(result) == invalid(
        "runner", 'spec.containers[0].dynamicVolumePolicy.restartPolicy: Unsupported value: '
                  '"Sometimes": supported values: "NotRequired", "RestartContainer"')

    name = start(kubectl, load("runner"))
    bad = {"status": {"volumeStatuses": [{"name": "base", "hostPhase": "Mounted"}]}}
    result = kubectl("patch", "pod", name, "--subresource=status", "--type=merge",
                     "-p", json.dumps(bad), check=False)
    assert rejected(result) == invalid(
        name, 'status.volumeStatuses[0].hostPhase: Unsupported value: "Mounted": supported '
              'values: "ErrorMounting", "HostMounted", "Pending", "Unmounting"')
    statuses = [{"name": "base", "hostPhase": "ErrorMounting",
                 "errorMessage": "mount failed: no space left on device"}]
    make_running(kubectl, name, {"volumeStatuses": statuses})
    assert kubectl.json("get", "pod", name)["status"]["volumeStatuses"] == statuses


def test_allocated_is_routed_to_the_node(kubectl: Kubectl) -> None:  # noqa: F811
    name = start(kubectl, load("runner"))
    base = f"/api/v1/namespaces/{kubectl.namespace}/pods"
    result = kubectl("get", "--raw", f"{base}/{name}/allocated", check=False)
    assert rejected(result) == (f'Error from server (ServiceUnavailable): the pod\'s node '
                                f'"{NODE}" has no reachable kubelet')

    unbound = load("runner")
    unbound["metadata"]["name"] = "unbound"
    del unbound["spec"]["nodeName"]
    unbound["spec"]["schedulerName"] = "manual"
    start(kubectl, unbound, running=False)
    result = kubectl("get", "--raw", f"{base}/unbound/allocated", check=False)
    assert rejected(result) == \
        "Error from server (BadRequest): pod unbound does not have a host assigned"
    result = kubectl("get", "--raw", f"{base}/missing/allocated", check=False)
    assert rejected(result) == 'Error from server (NotFound): pods "missing" not found'

    api = RawApi(kubectl.cluster)
    try:
        code, status = api.request("GET", f"{base}/{name}/allocated")
        assert (code, status["kind"], status["reason"]) == (503, "Status", "ServiceUnavailable")
    finally:
        api.close()


# --- the gate turned off on a cluster whose pods use it (the KEP's downgrade) ---------------


def _seed_before_downgrade(cluster: Cluster) -> None:
    """With the gates on: a worker that got a volume through /dynamic, reported mounted."""
    cluster.kubectl("create", "-f", "-", input=as_input(*nodes()))
    k = Kubectl(cluster, cluster.home, "default")
    name = start(k, load("task-worker"))
    assert dynamic(k, name, {"spec": {
        "volumes": [{"name": "task", "emptyDir": {}}],
        "containers": [{"name": "worker", "volumeMounts": [
            {"name": "task", "mountPath": "/task"}]}]}}, "strategic").returncode == 0
    make_running(k, name, {"volumeStatuses": [{"name": "task", "hostPhase": "HostMounted"}]})


@pytest.fixture(scope="module")
def downgraded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with downgraded_cluster(tmp_path_factory.mktemp("kep6395-off"),
                            _seed_before_downgrade) as cluster:
        yield cluster


@pytest.fixture
def gates_off(downgraded: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> Kubectl:
    return kubectl_in(downgraded, tmp_path, request.node.name)


def test_downgraded_pod_keeps_its_volumes_but_may_not_change_them(
        downgraded: Cluster, tmp_path: Path) -> None:
    k = Kubectl(downgraded, tmp_path / "home", "default")
    k.home.mkdir()
    pod = k.json("get", "pod", "task-worker")
    worker = pod["spec"]["containers"][0]
    assert pod["spec"]["volumes"] == [{"name": "task", "emptyDir": {}}]
    assert worker["volumeMounts"] == [{"name": "task", "mountPath": "/task"}]
    assert worker["dynamicVolumePolicy"] == POLICY
    assert pod["status"]["volumeStatuses"] == [{"name": "task", "hostPhase": "HostMounted"}]

    # a plain update keeps the fields the pod already uses
    assert k("label", "pod", "task-worker", "task=2").stdout == "pod/task-worker labeled\n"
    assert k.json("get", "pod", "task-worker")["spec"]["containers"][0][
        "dynamicVolumePolicy"] == POLICY

    # removing (or adding) a volume through /dynamic is refused; containers still come and go
    removal = [{"op": "remove", "path": "/spec/volumes"},
               {"op": "remove", "path": "/spec/containers/0/volumeMounts"}]
    assert rejected(dynamic(k, "task-worker", removal, check=False)) == invalid(
        "task-worker", f"spec.volumes: {VOLUMES_OFF}",
        f"spec.containers[0].volumeMounts: {VOLUMES_OFF}")
    assert dynamic(k, "task-worker", add_container()).stdout == "pod/task-worker patched\n"


def test_gate_off_drops_the_fields_of_new_pods(gates_off: Kubectl) -> None:
    name = start(gates_off, load("runner"))
    pod = gates_off.json("get", "pod", name)
    assert "dynamicVolumePolicy" not in pod["spec"]["containers"][0]

    # status.volumeStatuses is dropped too while no status of the pod uses it
    make_running(gates_off, name, {"volumeStatuses": [{"name": "base",
                                                       "hostPhase": "HostMounted"}]})
    status = gates_off.json("get", "pod", name)["status"]
    assert status["phase"] == "Running" and "volumeStatuses" not in status

    result = dynamic(gates_off, name, add_volume(SCRATCH), check=False)
    assert rejected(result) == invalid(name, f"spec.volumes: {VOLUMES_OFF}",
                                       f"spec.containers[0].volumeMounts: {VOLUMES_OFF}")


def test_a_container_added_with_fields_without_effect_is_warned(
        kubectl: Kubectl) -> None:  # noqa: F811
    """kubectl prints the apiserver's `Warning` for what an added container asks for that
    ephemera does not implement; the change itself is made."""
    name = start(kubectl, load("runner"))
    hook = {"preStop": {"exec": {"command": ["true"]}}}
    added = dynamic(kubectl, name, add_container(lifecycle=hook))
    assert added.stdout == f"pod/{name} patched\n"
    assert added.stderr.splitlines() == [
        f"Warning: {NEW_CONTAINER}.lifecycle: lifecycle hooks have no effect in ephemera "
        "(not implemented)"]
    assert [c["name"] for c in kubectl.json("get", "pod", name)["spec"]["containers"]][-1] \
        == "tool"

"""Table-driven tests of the `pods/dynamic` rules (`ephemera.pods.dynamic`): KEP-5972 dynamic
containers and KEP-6395 dynamic node-local ephemeral volumes, with exact messages and paths.

Every case starts from the same running, initialized pod (`_running_pod`), applies an edit to
a copy (the request body) and, optionally, to the stored pod (its state), then compares the
full list of errors, as `str(FieldError)` (`<path>: <message>`)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from ephemera.api.featuregates import (
    DYNAMIC_CONTAINERS,
    DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES,
    DYNAMIC_VOLUME_HOT_PLUG,
)
from ephemera.pods import defaults, dynamic, validation

Pod = dict[str, Any]
Edit = Callable[[Pod], None]

GATES_ON: dict[str, bool] = {}


def _running_pod() -> Pod:
    """A warm worker pod (KEP-6395 story 4): one init container, a `runner` container that
    mounts a configMap, running on node-1."""
    pod: Pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "worker", "namespace": "default", "uid": "0b6c-uid",
                     "resourceVersion": "7", "creationTimestamp": "2026-09-25T14:00:00Z"},
        "spec": {
            "nodeName": "node-1",
            "securityContext": {"runAsUser": 1000},
            "initContainers": [{"name": "setup", "image": "busybox:1.36",
                                "volumeMounts": [{"name": "config", "mountPath": "/cfg"}]}],
            "containers": [{
                "name": "runner",
                "image": "registry.k8s.io/pause:3.10",
                "volumeMounts": [{"name": "config", "mountPath": "/etc/task"}],
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "capabilities": {"add": ["NET_BIND_SERVICE"],
                                                     "drop": ["NET_RAW"]}},
            }],
            "volumes": [{"name": "config", "configMap": {"name": "task-1"}},
                        {"name": "scratch", "emptyDir": {}}],
        },
        "status": {
            "phase": "Running",
            "qosClass": "BestEffort",
            "conditions": [{"type": "Initialized", "status": "True"},
                           {"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "setup", "ready": False,
                                       "state": {"terminated": {"exitCode": 0}}}],
            "containerStatuses": [{
                "name": "runner", "ready": True,
                "state": {"running": {"startedAt": "2026-09-25T14:00:00Z"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/task"}],
            }],
            "volumeStatuses": [{"name": "config", "hostPhase": "HostMounted"},
                               {"name": "scratch", "hostPhase": "HostMounted"}],
        },
    }
    defaults.default_pod(pod, GATES_ON)
    return pod


def _spec(pod: Pod) -> dict[str, Any]:
    spec: dict[str, Any] = pod["spec"]
    return spec


def _runner(pod: Pod) -> dict[str, Any]:
    runner: dict[str, Any] = _spec(pod)["containers"][0]
    return runner


def _container(name: str, **extra: Any) -> dict[str, Any]:
    pod: Pod = {"spec": {"containers": [{"name": name, "image": "busybox:1.36", **extra}]}}
    defaults.default_pod(pod, GATES_ON)
    c: dict[str, Any] = pod["spec"]["containers"][0]
    return c


def _volume(volume: dict[str, Any]) -> dict[str, Any]:
    pod: Pod = {"spec": {"containers": [], "volumes": [volume]}}
    defaults.default_pod(pod, GATES_ON)
    out: dict[str, Any] = pod["spec"]["volumes"][0]
    return out


def _restart(pod: Pod) -> None:
    _runner(pod)["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}


def _live(pod: Pod) -> None:
    _runner(pod)["dynamicVolumePolicy"] = {"restartPolicy": "NotRequired"}


_POLICY_REQUIRED = ('Required value: must be "NotRequired" (mounted into the running '
                    'container) or "RestartContainer" to add, remove or change volume mounts '
                    "of a container already in the pod; without it, mounts may only come and "
                    "go with their container")


def _add_volume(volume: dict[str, Any]) -> Edit:
    def edit(pod: Pod) -> None:
        _spec(pod)["volumes"].append(_volume(volume))
    return edit


def _mount(name: str, path: str, **extra: Any) -> Edit:
    def edit(pod: Pod) -> None:
        _runner(pod).setdefault("volumeMounts", []).append(
            {"name": name, "mountPath": path, **extra})
    return edit


def _add_container(c: dict[str, Any]) -> Edit:
    def edit(pod: Pod) -> None:
        _spec(pod)["containers"].append(c)
    return edit


def _all(*edits: Edit) -> Edit:
    def edit(pod: Pod) -> None:
        for e in edits:
            e(pod)
    return edit


def _set(path: str, value: Any) -> Edit:
    """Set a dotted path (list indexes as numbers); `None` deletes the key."""
    def edit(pod: Pod) -> None:
        *parents, last = path.split(".")
        node: Any = pod
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return edit


def _remove_volume(name: str) -> Edit:
    def edit(pod: Pod) -> None:
        _spec(pod)["volumes"] = [v for v in _spec(pod)["volumes"] if v["name"] != name]
    return edit


def _remove_container(name: str) -> Edit:
    def edit(pod: Pod) -> None:
        _spec(pod)["containers"] = [c for c in _spec(pod)["containers"] if c["name"] != name]
    return edit


def _noop(pod: Pod) -> None:
    return None


def _check(edit: Edit, old_edit: Edit = _noop, gates: dict[str, bool] | None = None
           ) -> list[str]:
    old = _running_pod()
    old_edit(old)
    new = copy.deepcopy(old)
    edit(new)
    errs = dynamic.validate_dynamic_update(new, old, gates if gates is not None else GATES_ON)
    return [str(e) for e in errs]


# A second, already-running dynamic container (KEP-5972 warm pool), used by several cases.
def _with_sidecar(pod: Pod) -> None:
    _spec(pod)["containers"].append(_container(
        "tool", volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
        securityContext={"allowPrivilegeEscalation": False,
                         "capabilities": {"drop": ["NET_RAW"]}}))
    pod["status"]["containerStatuses"].append({
        "name": "tool", "ready": True, "state": {"running": {}},
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]})


_SAFE = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["NET_RAW"]}}

# --- accepted -------------------------------------------------------------------------------

ACCEPTED: list[tuple[str, Edit, Edit]] = [
    ("KEP-6395 example: emptyDir added and mounted into runner with RestartContainer",
     _all(_add_volume({"name": "dynamic-scratch", "emptyDir": {}}),
          _mount("dynamic-scratch", "/mnt/scratch"), _restart), _noop),
    ("story 2: projected volume plus a dynamic sidecar that mounts it, empty policy",
     _all(_add_volume({"name": "creds", "projected": {"sources": [
         {"secret": {"name": "agent-token"}}, {"configMap": {"name": "tools"}}]}}),
          _add_container(_container("agent", securityContext=_SAFE, volumeMounts=[
              {"name": "creds", "mountPath": "/var/run/creds", "readOnly": True}]))), _noop),
    ("KEP-6395 e2e: configMap and secret added, container restarted to mount both",
     _all(_add_volume({"name": "task-cm", "configMap": {"name": "task-2"}}),
          _add_volume({"name": "task-secret", "secret": {"secretName": "task-2"}}),
          _mount("task-cm", "/etc/task-2"), _mount("task-secret", "/var/run/secrets/task"),
          _restart), _noop),
    ("configMap volume added", _add_volume({"name": "v", "configMap": {"name": "cm"}}), _noop),
    ("secret volume added", _add_volume({"name": "v", "secret": {"secretName": "s"}}), _noop),
    ("emptyDir volume added with a sizeLimit",
     _add_volume({"name": "v", "emptyDir": {"sizeLimit": "64Mi"}}), _noop),
    ("image volume added", _add_volume({"name": "v", "image": {"reference": "busybox:1.36"}}),
     _noop),
    ("a volume without a source defaults to emptyDir and is accepted",
     _add_volume({"name": "v"}), _noop),
    ("story 1: swap the scratch volume and restart the task container",
     _all(_remove_volume("scratch"), _add_volume({"name": "scratch-2", "emptyDir": {}}),
          _mount("scratch-2", "/scratch"), _restart), _noop),
    ("story 4: remove the task config mount and its volume with RestartContainer",
     _all(_set("spec.containers.0.volumeMounts", None), _restart, _remove_volume("config"),
          _set("spec.initContainers", None)),
     _set("spec.initContainers", None)),
    ("container removed together with the only volume it mounts (empty policy)",
     _all(_remove_container("tool"), _remove_volume("scratch")), _with_sidecar),
    ("KEP-5972: a main container added that mounts an existing volume",
     _add_container(_container("worker-2", securityContext=_SAFE,
                               volumeMounts=[{"name": "scratch", "mountPath": "/s"}])), _noop),
    ("KEP-5972: several containers added and removed in one request",
     _all(_remove_container("tool"), _add_container(_container("a", securityContext=_SAFE)),
          _add_container(_container("b", securityContext=_SAFE))), _with_sidecar),
    ("a container added in front of the existing ones (matched by name)",
     lambda p: _spec(p)["containers"].insert(0, _container("first", securityContext=_SAFE)),
     _noop),
    ("an image update goes through /dynamic as through the main resource, in any phase",
     _set("spec.containers.0.image", "registry.k8s.io/pause:3.11"),
     _set("status.phase", "Pending")),
    ("a toleration added while the pod is being deleted is not a dynamic change",
     _set("spec.tolerations", [{"key": "k", "operator": "Exists"}]),
     _set("metadata.deletionTimestamp", "2026-09-25T15:00:00Z")),
    ("dynamicVolumePolicy set alone on a running container",
     _restart, _noop),
    ("NotRequired (DynamicVolumeHotPlug): a mount added to a running container",
     _all(_add_volume({"name": "dynamic-scratch", "emptyDir": {}}),
          _mount("dynamic-scratch", "/mnt/scratch"), _live), _noop),
    ("NotRequired: a mount changed in place (same path, other volume, readOnly) and one removed",
     _all(_add_volume({"name": "other", "emptyDir": {}}),
          _set("spec.containers.0.volumeMounts.0.name", "other"),
          _set("spec.containers.0.volumeMounts.0.readOnly", True)), _live),
    ("NotRequired on one container, RestartContainer on another, in one update",
     _all(_add_volume({"name": "dynamic-scratch", "emptyDir": {}}),
          _mount("dynamic-scratch", "/mnt/scratch"), _live,
          lambda p: _spec(p)["containers"][1]["volumeMounts"].append(
              {"name": "dynamic-scratch", "mountPath": "/d"}),
          _set("spec.containers.1.dynamicVolumePolicy", {"restartPolicy": "RestartContainer"})),
     _with_sidecar),
    ("NotRequired kept with the gate on and a mount propagation it already had",
     _set("spec.containers.0.image", "registry.k8s.io/pause:3.11"),
     _all(_live, _set("spec.containers.0.volumeMounts.0.mountPropagation",
                      "HostToContainer"))),
    ("a new volume added but not mounted yet", _add_volume({"name": "later", "emptyDir": {}}),
     _noop),
    ("a removed container's name reused once its status is gone",
     _add_container(_container("tool", securityContext=_SAFE)), _noop),
    ("a pod without init containers needs no Initialized condition",
     _add_volume({"name": "v", "emptyDir": {}}),
     _all(_set("spec.initContainers", None), _set("status.conditions", []))),
    ("new container within the escalation bounds: same caps, pod's runAsUser, drops NET_RAW",
     _add_container(_container("c2", securityContext={
         "runAsUser": 1000, "allowPrivilegeEscalation": False,
         "capabilities": {"add": ["CAP_NET_BIND_SERVICE"], "drop": ["ALL"]}})), _noop),
    ("Guaranteed pod gains a Guaranteed container",
     _add_container(_container("c2", securityContext=_SAFE, resources={
         "limits": {"cpu": "100m", "memory": "64Mi"},
         "requests": {"cpu": "100m", "memory": "64Mi"}})),
     _all(_set("spec.containers.0.resources", {
         "limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}),
          _set("spec.initContainers", None), _set("status.qosClass", "Guaranteed"))),
    ("Burstable pod gains a BestEffort container",
     _add_container(_container("c2", securityContext=_SAFE)),
     _all(_set("spec.containers.0.resources", {"requests": {"cpu": "100m"}}),
          _set("status.qosClass", "Burstable"))),
]


@pytest.mark.parametrize(("edit", "old_edit"), [(e, o) for _, e, o in ACCEPTED],
                         ids=[name for name, _, _ in ACCEPTED])
def test_accepted(edit: Edit, old_edit: Edit) -> None:
    assert _check(edit, old_edit) == []


# --- rejected -------------------------------------------------------------------------------

_STATE = "containers and volumes may"
_ADD_SCRATCH = _all(_add_volume({"name": "dynamic-scratch", "emptyDir": {}}),
                    _mount("dynamic-scratch", "/mnt/scratch"), _restart)
_SOURCES = 'supported values: "configMap", "secret", "projected", "emptyDir", "image"'

REJECTED: list[tuple[str, Edit, Edit, list[str]]] = [
    # pod state
    ("pod Pending", _ADD_SCRATCH, _set("status.phase", "Pending"),
     [f'status.phase: Forbidden: {_STATE} only be changed while the pod is Running '
      '(phase is "Pending")']),
    ("pod Succeeded, container added", _add_container(_container("c2", securityContext=_SAFE)),
     _set("status.phase", "Succeeded"),
     [f'status.phase: Forbidden: {_STATE} only be changed while the pod is Running '
      '(phase is "Succeeded")']),
    ("pod without a phase", _ADD_SCRATCH, _set("status.phase", None),
     [f'status.phase: Forbidden: {_STATE} only be changed while the pod is Running '
      '(phase is "")']),
    ("pod not initialized", _ADD_SCRATCH,
     _set("status.conditions", [{"type": "Initialized", "status": "False"}]),
     [f"status.conditions: Forbidden: {_STATE} only be changed once the pod is initialized "
      "(condition Initialized is not True)"]),
    ("pod with init containers and no conditions", _ADD_SCRATCH, _set("status.conditions", None),
     [f"status.conditions: Forbidden: {_STATE} only be changed once the pod is initialized "
      "(condition Initialized is not True)"]),
    ("deletionTimestamp set, volume added", _ADD_SCRATCH,
     _set("metadata.deletionTimestamp", "2026-09-25T15:00:00Z"),
     [f"metadata.deletionTimestamp: Forbidden: {_STATE} not be changed once the pod is being "
      "deleted"]),
    ("deletionTimestamp set, container removed", _remove_container("tool"),
     _all(_with_sidecar, _set("metadata.deletionTimestamp", "2026-09-25T15:00:00Z")),
     [f"metadata.deletionTimestamp: Forbidden: {_STATE} not be changed once the pod is being "
      "deleted"]),
    ("Windows pod", _ADD_SCRATCH,
     _all(_set("spec.os", {"name": "windows"}), _set("spec.securityContext", {}),
          _set("spec.containers.0.securityContext", {}),
          _set("spec.initContainers", None)),
     [f"spec.os.name: Forbidden: {_STATE} not be changed on Windows pods"]),
    # supported volume types
    ("hostPath volume added", _add_volume({"name": "host", "hostPath": {"path": "/etc"}}), _noop,
     [f'spec.volumes[2]: Unsupported value: "hostPath": {_SOURCES}']),
    ("persistentVolumeClaim volume added",
     _add_volume({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}), _noop,
     [f'spec.volumes[2]: Unsupported value: "persistentVolumeClaim": {_SOURCES}']),
    ("csi volume added",
     _add_volume({"name": "csi", "csi": {"driver": "inline.storage.kubernetes.io"}}), _noop,
     [f'spec.volumes[2]: Unsupported value: "csi": {_SOURCES}']),
    ("downwardAPI volume added",
     _add_volume({"name": "info", "downwardAPI": {"items": [
         {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}), _noop,
     [f'spec.volumes[2]: Unsupported value: "downwardAPI": {_SOURCES}']),
    ("nfs volume added",
     _add_volume({"name": "share", "nfs": {"server": "10.0.0.1", "path": "/x"}}), _noop,
     [f'spec.volumes[2]: Unsupported value: "nfs": {_SOURCES}']),
    ("an existing hostPath volume removed",
     _all(_remove_volume("host"), _set("spec.containers.0.volumeMounts", None), _restart),
     _all(_add_volume({"name": "host", "hostPath": {"path": "/etc"}}),
          _mount("host", "/host")),
     ['spec.volumes: Forbidden: volume "host" may not be removed: only configMap, secret, '
      "projected, emptyDir and image volumes can be removed from a running pod"]),
    ("an existing volume changed in place",
     _set("spec.volumes.1.emptyDir", {"medium": "Memory"}), _noop,
     ['spec.volumes[1]: Forbidden: volume "scratch" already exists and may not be changed; '
      "remove it and add a volume with a new name"]),
    # name uniqueness and the anti-race rule
    ("duplicate volume name in spec.volumes",
     _add_volume({"name": "scratch", "emptyDir": {}}), _noop,
     ['spec.volumes[2].name: Duplicate value: "scratch"']),
    ("volume name still in status.volumeStatuses (rapid re-add)",
     _add_volume({"name": "old-scratch", "emptyDir": {}}),
     lambda p: p["status"]["volumeStatuses"].append(
         {"name": "old-scratch", "hostPhase": "Unmounting"}),
     ['spec.volumes[2].name: Duplicate value: "old-scratch": a volume with this name is still '
      "reported in status.volumeStatuses; the name can be reused once its teardown finished"]),
    ("volume name still mounted in a container status",
     _add_volume({"name": "old-scratch", "emptyDir": {}}),
     lambda p: p["status"]["containerStatuses"][0]["volumeMounts"].append(
         {"name": "old-scratch", "mountPath": "/old"}),
     ['spec.volumes[2].name: Duplicate value: "old-scratch": a volume with this name is still '
      'mounted in container "runner" (status.containerStatuses[*].volumeMounts); the name can '
      "be reused once that container no longer mounts it"]),
    ("container name still in status.containerStatuses (removed, not yet GC'd)",
     _add_container(_container("gone", securityContext=_SAFE)),
     lambda p: p["status"]["containerStatuses"].append(
         {"name": "gone", "state": {"terminated": {"exitCode": 0}}}),
     ['spec.containers[1].name: Duplicate value: "gone": a container with this name is still '
      "reported in status.containerStatuses; the name can be reused once that status is gone"]),
    ("container name equal to an init container's",
     _add_container(_container("setup", securityContext=_SAFE)), _noop,
     ['spec.initContainers[0].name: Duplicate value: "setup"',
      'spec.containers[1].name: Duplicate value: "setup": a container with this name is still '
      "reported in status.initContainerStatuses; the name can be reused once that status is "
      "gone"]),
    # dangling mounts
    ("volume removed while runner still mounts it", _remove_volume("config"),
     _set("spec.initContainers", None),
     ['spec.containers[0].volumeMounts[0].name: Forbidden: volume "config" is removed from '
      "spec.volumes but still mounted here; remove the mount or the container in the same "
      "update"]),
    ("volume removed while an init container mounts it",
     _all(_remove_volume("config"), _set("spec.containers.0.volumeMounts", None), _restart),
     _noop,
     ['spec.initContainers[0].volumeMounts[0].name: Forbidden: volume "config" is removed from '
      "spec.volumes but still mounted here; remove the mount or the container in the same "
      "update"]),
    ("volume removed while an ephemeral container mounts it",
     _all(_remove_volume("scratch")),
     _set("spec.ephemeralContainers", [{
         "name": "debugger", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
         "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
         "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}]),
     ['spec.ephemeralContainers[0].volumeMounts[0].name: Forbidden: volume "scratch" is '
      "removed from spec.volumes but still mounted here; remove the mount or the container in "
      "the same update"]),
    # dynamicVolumePolicy
    ("mount added to a running container with the empty policy",
     _all(_add_volume({"name": "dynamic-scratch", "emptyDir": {}}),
          _mount("dynamic-scratch", "/mnt/scratch")), _noop,
     [f"spec.containers[0].dynamicVolumePolicy.restartPolicy: {_POLICY_REQUIRED}"]),
    ("mount removed from a running container with the empty policy",
     _set("spec.containers.0.volumeMounts", None), _noop,
     [f"spec.containers[0].dynamicVolumePolicy.restartPolicy: {_POLICY_REQUIRED}"]),
    ("mount mutated (readOnly) on a running container with an empty restartPolicy",
     _all(_set("spec.containers.0.volumeMounts.0.readOnly", True),
          _set("spec.containers.0.dynamicVolumePolicy", {"restartPolicy": ""})), _noop,
     [f"spec.containers[0].dynamicVolumePolicy.restartPolicy: {_POLICY_REQUIRED}"]),
    ("unknown restartPolicy value (standard validation)",
     _all(_mount("scratch", "/s"), _set("spec.containers.0.dynamicVolumePolicy",
                                        {"restartPolicy": "Always"})), _noop,
     ['spec.containers[0].dynamicVolumePolicy.restartPolicy: Unsupported value: "Always": '
      'supported values: "NotRequired", "RestartContainer"']),
    ("NotRequired: a mount added live may not set mount propagation",
     _all(_mount("scratch", "/s", mountPropagation="HostToContainer"), _live), _noop,
     ["spec.containers[0].volumeMounts[1].mountPropagation: Forbidden: may not be set on a "
      'mount added to a running container whose dynamicVolumePolicy.restartPolicy is '
      '"NotRequired"']),
    # init containers
    ("init container mount added",
     lambda p: _spec(p)["initContainers"][0]["volumeMounts"].append(
         {"name": "scratch", "mountPath": "/s"}), _noop,
     ["spec.initContainers[0].volumeMounts: Forbidden: volume mounts of init containers may "
      "not be changed"]),
    ("init container added",
     lambda p: _spec(p)["initContainers"].append(_container("init-2")), _noop,
     ["spec.initContainers: Forbidden: init containers may not be added or removed; only main "
      "containers can be"]),
    ("init container removed", _set("spec.initContainers", None), _noop,
     ["spec.initContainers: Forbidden: init containers may not be added or removed; only main "
      "containers can be"]),
    # containers
    ("last container removed", _remove_container("runner"), _noop,
     ["spec.containers: Forbidden: the last container may not be removed; a pod must keep at "
      "least one container"]),
    ("privileged container added",
     _add_container(_container("root", securityContext={"privileged": True})),
     _set("spec.containers.0.securityContext", None),
     ["spec.containers[1].securityContext.privileged: Forbidden: privileged containers may not "
      "be added to a running pod"]),
    ("container with a hostPort added",
     _add_container(_container("web", securityContext=_SAFE, ports=[
         {"containerPort": 80, "protocol": "TCP"},
         {"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}])), _noop,
     ["spec.containers[1].ports[1].hostPort: Forbidden: containers added to a running pod may "
      "not use host ports"]),
    ("container with ephemeral-storage added (not resizable in place)",
     _add_container(_container("c2", securityContext=_SAFE, resources={
         "limits": {"ephemeral-storage": "1Gi"}, "requests": {"ephemeral-storage": "1Gi"}})),
     _noop,
     ['spec.containers[1].resources.limits[ephemeral-storage]: Unsupported value: '
      '"ephemeral-storage": supported values: "cpu", "memory"',
      'spec.containers[1].resources.requests[ephemeral-storage]: Unsupported value: '
      '"ephemeral-storage": supported values: "cpu", "memory"']),
    ("BestEffort pod gains requests (QoS change)",
     _add_container(_container("c2", securityContext=_SAFE,
                               resources={"requests": {"memory": "64Mi"}})), _noop,
     ['spec: Invalid value: "Burstable": Pod QOS Class may not change as a result of adding or '
      'removing containers (it is "BestEffort")']),
    ("Guaranteed pod gains a container without limits (QoS change)",
     _add_container(_container("c2", securityContext=_SAFE)),
     _all(_set("spec.containers.0.resources", {
         "limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}),
          _set("spec.initContainers", None), _set("status.qosClass", "Guaranteed")),
     ['spec: Invalid value: "Burstable": Pod QOS Class may not change as a result of adding or '
      'removing containers (it is "Guaranteed")']),
    ("Burstable pod loses its only container with requests (QoS change)",
     _remove_container("runner"),
     _all(_with_sidecar, _set("spec.containers.0.resources", {"requests": {"cpu": "100m"}}),
          _set("status.qosClass", "Burstable")),
     ['spec: Invalid value: "BestEffort": Pod QOS Class may not change as a result of adding '
      'or removing containers (it is "Burstable")']),
    # security escalation
    ("capability no container adds",
     _add_container(_container("c2", securityContext={
         **_SAFE, "capabilities": {"add": ["NET_BIND_SERVICE", "SYS_ADMIN"],
                                   "drop": ["NET_RAW"]}})), _noop,
     ['spec.containers[1].securityContext.capabilities.add[1]: Invalid value: "SYS_ADMIN": '
      "must be a capability that a container already in the pod adds"]),
    ("capability every container drops is kept",
     _add_container(_container("c2", securityContext={"allowPrivilegeEscalation": False})),
     _noop,
     ['spec.containers[1].securityContext.capabilities.drop: Required value: must drop '
      '"NET_RAW": every container already in the pod drops them']),
    ("runAsUser no one uses",
     _add_container(_container("c2", securityContext={**_SAFE, "runAsUser": 0})), _noop,
     ["spec.containers[1].securityContext.runAsUser: Invalid value: 0: must be a value that "
      "the pod or a container already in the pod uses"]),
    ("runAsGroup no one uses",
     _add_container(_container("c2", securityContext={**_SAFE, "runAsGroup": 0})), _noop,
     ["spec.containers[1].securityContext.runAsGroup: Invalid value: 0: must be a value that "
      "the pod or a container already in the pod uses"]),
    ("seLinuxOptions no one uses",
     _add_container(_container("c2", securityContext={
         **_SAFE, "seLinuxOptions": {"type": "spc_t"}})), _noop,
     ['spec.containers[1].securityContext.seLinuxOptions: Invalid value: {"type":"spc_t"}: '
      "must be a value that the pod or a container already in the pod uses"]),
    ("seccompProfile Unconfined no one uses",
     _add_container(_container("c2", securityContext={
         **_SAFE, "seccompProfile": {"type": "Unconfined"}})), _noop,
     ["spec.containers[1].securityContext.seccompProfile: Invalid value: "
      '{"type":"Unconfined"}: must be a value that the pod or a container already in the pod '
      "uses"]),
    ("appArmorProfile Unconfined no one uses",
     _add_container(_container("c2", securityContext={
         **_SAFE, "appArmorProfile": {"type": "Unconfined"}})), _noop,
     ["spec.containers[1].securityContext.appArmorProfile: Invalid value: "
      '{"type":"Unconfined"}: must be a value that the pod or a container already in the pod '
      "uses"]),
    ("allowPrivilegeEscalation left unset while every container disables it",
     _add_container(_container("c2", securityContext={"capabilities": {"drop": ["NET_RAW"]}})),
     _noop,
     ["spec.containers[1].securityContext.allowPrivilegeEscalation: Required value: must be "
      "false: every container already in the pod sets it to false"]),
    ("allowPrivilegeEscalation true while every container disables it",
     _add_container(_container("c2", securityContext={**_SAFE,
                                                      "allowPrivilegeEscalation": True})),
     _noop,
     ["spec.containers[1].securityContext.allowPrivilegeEscalation: Invalid value: true: must "
      "be false: every container already in the pod sets it to false"]),
    ("runAsNonRoot false while every container runs as non-root",
     _add_container(_container("c2", securityContext={**_SAFE, "runAsNonRoot": False})),
     _set("spec.securityContext.runAsNonRoot", True),
     ["spec.containers[1].securityContext.runAsNonRoot: Invalid value: false: must be true: "
      "every container already in the pod sets it"]),
    ("readOnlyRootFilesystem unset while every container sets it",
     _add_container(_container("c2", securityContext=_SAFE)),
     _all(_set("spec.containers.0.securityContext.readOnlyRootFilesystem", True),
          _set("spec.initContainers.0.securityContext", {"readOnlyRootFilesystem": True,
                                                         "capabilities": {"drop": ["NET_RAW"]},
                                                         "allowPrivilegeEscalation": False})),
     ["spec.containers[1].securityContext.readOnlyRootFilesystem: Required value: must be "
      "true: every container already in the pod sets it"]),
    ("procMount Unmasked no one uses",
     _add_container(_container("c2", securityContext={**_SAFE, "procMount": "Unmasked"})),
     _set("spec.hostUsers", False),
     ['spec.containers[1].securityContext.procMount: Invalid value: "Unmasked": may only be '
      '"Unmasked" when a container already in the pod uses it']),
    # feature gates are handled in their own tests below
]


@pytest.mark.parametrize(("edit", "old_edit", "expected"),
                         [(e, o, x) for _, e, o, x in REJECTED],
                         ids=[name for name, _, _, _ in REJECTED])
def test_rejected(edit: Edit, old_edit: Edit, expected: list[str]) -> None:
    assert _check(edit, old_edit) == expected


def test_changes_outside_dynamic_keep_upstream_immutability_error() -> None:
    """A kept container's command and the pod's nodeName are as immutable as on a plain
    update; the error is upstream's, its diff shows only what /dynamic does not open."""
    errs = _check(_all(_ADD_SCRATCH, _set("spec.containers.0.command", ["sh"])))
    assert len(errs) == 1
    assert errs[0].startswith("spec: Forbidden: pod updates may not change fields other than "
                              "`spec.containers[*].image`,")
    changed = [line for line in errs[0].splitlines() if line[:1] in "-+"]
    # The volume change is /dynamic's: only the command is marked.
    assert changed == ["- \t\t\tCommand:      nil,", '+ \t\t\tCommand:      []string{"sh"},']


def test_resources_of_kept_containers_stay_immutable() -> None:
    errs = _check(_set("spec.containers.0.resources", {"requests": {"cpu": "1"}}))
    assert len(errs) == 1 and errs[0].startswith("spec: Forbidden: pod updates may not change")


def test_standard_validation_applies_to_the_new_pod() -> None:
    errs = _check(_all(_add_volume({"name": "Bad_Name", "emptyDir": {}})))
    assert errs == ['spec.volumes[2].name: Invalid value: "Bad_Name": a lowercase RFC 1123 '
                    "label must consist of lower case alphanumeric characters or '-', and must "
                    "start and end with an alphanumeric character (e.g. 'my-name',  or "
                    "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]


def test_mount_of_a_missing_volume_keeps_upstream_not_found() -> None:
    errs = _check(_add_container(_container("c2", securityContext=_SAFE, volumeMounts=[
        {"name": "nowhere", "mountPath": "/x"}])))
    assert errs == ['spec.containers[1].volumeMounts[0].name: Not found: "nowhere"']


def test_all_state_errors_at_once() -> None:
    errs = _check(_ADD_SCRATCH, _all(
        _set("status.phase", "Failed"), _set("status.conditions", []),
        _set("metadata.deletionTimestamp", "2026-09-25T15:00:00Z")))
    assert [e.split(":")[0] for e in errs] == [
        "metadata.deletionTimestamp", "status.phase", "status.conditions"]


# --- feature gates ----------------------------------------------------------------------------

_CONTAINERS_OFF = ("spec.containers: Forbidden: Dynamic Containers are disabled: adding or "
                   "removing main containers is not allowed (feature gate DynamicContainers is "
                   "off)")
_VOLUMES_OFF = ("Forbidden: Dynamic Node-Local Ephemeral Volumes are disabled: volumes and "
                "volume mounts may not be changed (feature gate DynamicNodeLocalEphemeralVolumes "
                "is off)")

GATED: list[tuple[str, dict[str, bool], Edit, Edit, list[str]]] = [
    ("DynamicVolumeHotPlug off: NotRequired is an unsupported value",
     {DYNAMIC_VOLUME_HOT_PLUG: False},
     _all(_add_volume({"name": "dynamic-scratch", "emptyDir": {}}),
          _mount("dynamic-scratch", "/mnt/scratch"), _live), _noop,
     ['spec.containers[0].dynamicVolumePolicy.restartPolicy: Unsupported value: "NotRequired": '
      'supported values: "RestartContainer"']),
    ("DynamicVolumeHotPlug off: the empty policy asks for RestartContainer",
     {DYNAMIC_VOLUME_HOT_PLUG: False},
     _all(_add_volume({"name": "dynamic-scratch", "emptyDir": {}}),
          _mount("dynamic-scratch", "/mnt/scratch")), _noop,
     ['spec.containers[0].dynamicVolumePolicy.restartPolicy: Required value: must be '
      '"RestartContainer" to add, remove or change volume mounts of a container already in the '
      "pod; without it, mounts may only come and go with their container"]),
    ("DynamicVolumeHotPlug off: a pod already using NotRequired keeps it",
     {DYNAMIC_VOLUME_HOT_PLUG: False},
     _all(_add_volume({"name": "dynamic-scratch", "emptyDir": {}}),
          _mount("dynamic-scratch", "/mnt/scratch")), _live, []),
    ("DynamicContainers off: container added", {DYNAMIC_CONTAINERS: False},
     _add_container(_container("c2", securityContext=_SAFE)), _noop, [_CONTAINERS_OFF]),
    ("DynamicContainers off: container removed", {DYNAMIC_CONTAINERS: False},
     _remove_container("tool"), _with_sidecar, [_CONTAINERS_OFF]),
    ("DynamicContainers off: volume change still allowed", {DYNAMIC_CONTAINERS: False},
     _ADD_SCRATCH, _noop, []),
    ("volumes gate off: volume added", {DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES: False},
     _add_volume({"name": "v", "emptyDir": {}}), _noop, [f"spec.volumes: {_VOLUMES_OFF}"]),
    ("volumes gate off: volume and mount added", {DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES: False},
     _ADD_SCRATCH, _noop,
     [f"spec.volumes: {_VOLUMES_OFF}", f"spec.containers[0].volumeMounts: {_VOLUMES_OFF}"]),
    ("volumes gate off: mount removed", {DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES: False},
     _all(_set("spec.containers.0.volumeMounts", None), _restart), _noop,
     [f"spec.containers[0].volumeMounts: {_VOLUMES_OFF}"]),
    ("volumes gate off: container with an existing volume still added",
     {DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES: False},
     _add_container(_container("c2", securityContext=_SAFE,
                               volumeMounts=[{"name": "scratch", "mountPath": "/s"}])),
     _noop, []),
    ("both gates off: image update still allowed",
     {DYNAMIC_CONTAINERS: False, DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES: False},
     _set("spec.containers.0.image", "registry.k8s.io/pause:3.11"), _noop, []),
]


@pytest.mark.parametrize(("gates", "edit", "old_edit", "expected"),
                         [(g, e, o, x) for _, g, e, o, x in GATED],
                         ids=[name for name, *_ in GATED])
def test_feature_gates(gates: dict[str, bool], edit: Edit, old_edit: Edit,
                       expected: list[str]) -> None:
    assert _check(edit, old_edit, gates=gates) == expected


# --- NodeDeclaredFeatures -------------------------------------------------------------------

_BOTH = [DYNAMIC_CONTAINERS, DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES]

# Which features a change needs; the check against the node is the NodeDeclaredFeatureValidator
# admission plugin's (403, tests/integration/test_dynamic_subresource.py).
NODE_FEATURES: list[tuple[str, Edit, list[str]]] = [
    ("volume change", _ADD_SCRATCH, [DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES]),
    ("container added", _add_container(_container("c2", securityContext=_SAFE)),
     [DYNAMIC_CONTAINERS]),
    ("container and volume added",
     _all(_ADD_SCRATCH, _add_container(_container("c2", securityContext=_SAFE))), _BOTH),
    ("a mount changed live (NotRequired) needs DynamicVolumeHotPlug too",
     _all(_ADD_SCRATCH, _live), [DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES, DYNAMIC_VOLUME_HOT_PLUG]),
    ("NotRequired set with no mount change needs nothing more",
     _all(_add_volume({"name": "later", "emptyDir": {}}), _live),
     [DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES]),
    ("no dynamic change needs no feature",
     _set("spec.containers.0.image", "registry.k8s.io/pause:3.11"), []),
]


@pytest.mark.parametrize(("edit", "expected"), [(e, x) for _, e, x in NODE_FEATURES],
                         ids=[name for name, *_ in NODE_FEATURES])
def test_required_node_features(edit: Edit, expected: list[str]) -> None:
    old = _running_pod()
    new = copy.deepcopy(old)
    edit(new)
    assert dynamic.required_node_features(dynamic.dynamic_change(new, old)) == expected


# --- the plain update (main resource) ---------------------------------------------------------


def test_plain_update_rejects_container_addition() -> None:
    old = _running_pod()
    new = copy.deepcopy(old)
    _add_container(_container("c2"))(new)
    assert [str(e) for e in validation.validate_pod_update(new, old, GATES_ON)] == [
        "spec.containers: Forbidden: pod updates may not add or remove containers"]


@pytest.mark.parametrize("edit", [_ADD_SCRATCH, _add_volume({"name": "v", "emptyDir": {}}),
                                  _remove_volume("scratch")],
                         ids=["volume and mount", "volume added", "volume removed"])
def test_plain_update_rejects_volume_changes(edit: Edit) -> None:
    old = _running_pod()
    new = copy.deepcopy(old)
    edit(new)
    errs = [str(e) for e in validation.validate_pod_update(new, old, GATES_ON)]
    assert len(errs) == 1
    assert errs[0].startswith(
        "spec: Forbidden: pod updates may not change fields other than "
        "`spec.containers[*].image`,`spec.initContainers[*].image`,"
        "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
        "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
        "previously negative)\n")


# --- the helpers ------------------------------------------------------------------------------


def test_dynamic_change_describes_the_update() -> None:
    old = _running_pod()
    _with_sidecar(old)
    new = copy.deepcopy(old)
    _all(_remove_container("tool"), _add_container(_container("agent")),
         _remove_volume("scratch"), _add_volume({"name": "creds", "secret": {"secretName": "s"}}),
         _mount("creds", "/creds"), _set("spec.volumes.0.configMap.name", "task-2"))(new)
    change = dynamic.dynamic_change(new, old)
    assert change == dynamic.DynamicChange(
        added_containers=("agent",), removed_containers=("tool",),
        remounted_containers=("runner",), added_volumes=("creds",),
        removed_volumes=("scratch",), changed_volumes=("config",))
    assert change.changes_containers and change.changes_volumes and change.is_dynamic
    assert dynamic.required_node_features(change) == _BOTH


def test_dynamic_change_ignores_unset_versus_empty() -> None:
    old = _running_pod()
    new = copy.deepcopy(old)
    _runner(new)["volumeMounts"][0]["readOnly"] = False
    _spec(new)["containers"].insert(0, _spec(new)["containers"].pop())
    change = dynamic.dynamic_change(new, old)
    assert not change.is_dynamic
    assert dynamic.required_node_features(change) == []


def test_dynamic_update_base_copies_only_what_dynamic_opens() -> None:
    old = _running_pod()
    new = copy.deepcopy(old)
    _all(_ADD_SCRATCH, _set("spec.containers.0.command", ["sh"]),
         _add_container(_container("c2")))(new)
    base = dynamic.dynamic_update_base(new, old)
    assert [c["name"] for c in base["spec"]["containers"]] == ["runner", "c2"]
    runner = base["spec"]["containers"][0]
    assert runner["volumeMounts"] == _runner(new)["volumeMounts"]
    assert runner["dynamicVolumePolicy"] == {"restartPolicy": "RestartContainer"}
    assert "command" not in runner
    assert base["spec"]["volumes"] == _spec(new)["volumes"]
    assert base["status"] == old["status"]
    assert "dynamicVolumePolicy" not in _runner(old)  # the old pod is not modified

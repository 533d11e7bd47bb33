"""Pod status: computing it from what the runtime reports (upstream's
`generateAPIPodStatus`, `getPhase`, `convertToAPIContainerStatuses` and
`pkg/kubelet/status/generate.go`), and the status manager that writes it back.

`generate_pod_status(pod, view, host_ip=..., old_status=...)` is pure: the pod, a
`PodRuntimeView` (the sandbox, every container instance the runtime has for each container
name, oldest first, and the waiting reasons the pod worker recorded at its last sync, such as
`CrashLoopBackOff` or `ErrImagePull`) in, a `status` dict out:

- `phase` as upstream's `getPhase` (init containers first; a container waiting to restart
  after a termination counts as stopped, so a crash-looping pod with `restartPolicy: Always`
  is `Running`); a pod whose status already says `Succeeded` or `Failed` never leaves it;
- `conditions` PodReadyToStartContainers, Initialized, Ready, ContainersReady, PodScheduled
  (upstream's order, reasons and messages: `containers with unready status: [c1]`,
  `containers with incomplete status: [init]`, `PodCompleted`, ...), transition times kept
  while a condition's status stays; conditions the kubelet does not own are kept as they are;
- `containerStatuses`, `initContainerStatuses`: state (waiting with the default reason
  `ContainerCreating`, or `PodInitializing` in a pod with init containers), lastState (the
  previous instance's termination), ready, started, restartCount (the latest instance's
  attempt), image, imageID, containerID (`<runtime>://<id>`) and `volumeMounts`: the mounts
  the runtime really gave the latest instance (name, mountPath, readOnly as the spec asks,
  `recursiveReadOnly: Disabled` for read-only mounts, as upstream);
- hostIP/hostIPs, podIP/podIPs (the sandbox's, when it has one; the node's for a
  `hostNetwork` pod), startTime (kept once set),
  qosClass kept.

`started` and `ready` of a running container come from the probes (`PodRuntimeView.probes`,
the prober manager's view, upstream's `UpdatePodStatus`): started once its startup probe has
succeeded (at once without one), ready once started and its readiness probe has succeeded (at
once without one); a plain init container is ready once it has exited 0, as upstream's.

`StatusManager` keeps, per pod UID, the status last known to be in the API (from the pod
informer and its own writes) and the status the kubelet wants; a background writer PATCHes
`pods/NAME/status` (a merge patch of the changed top-level fields, with `metadata.uid` so a
pod recreated under the same name is never written) only when they differ. Statuses a pod
worker publishes during one sync (`hold` ... `release`: the `Unmounting` shown before a
restart's stop, then the restarted container) are merged into one write of the latest, unless
the sync outlasts `max_hold` (a long stop: the intermediate status is written then, as
before). What a sync published is due at its `release`: when the worker begins its next sync
before the writer has run (woken again meanwhile), that next sync's hold does not hold it
back; the writer sends the status as released (`_PodEntry.released`), and what the next sync
publishes follows in a write of its own. Upstream's status manager merges the same way (it
writes the latest status when its sync gets to the pod).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from ephemera import trace
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, resource_path
from ephemera.kubelet.runtime.base import ContainerState, ContainerStatus, SandboxStatus

__all__ = [
    "CONTAINER_CREATING",
    "KUBELET_CONDITIONS",
    "POD_INITIALIZING",
    "PodRuntimeView",
    "ProbeStates",
    "StatusManager",
    "generate_pod_status",
    "get_phase",
    "rfc3339",
]

log = logging.getLogger(__name__)

CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
TERMINAL_PHASES = ("Succeeded", "Failed")
# The pod conditions the kubelet owns, in the order it writes them.
KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                      "PodScheduled")
# Top-level status fields the kubelet writes (and so may remove).
KUBELET_STATUS_FIELDS = ("phase", "conditions", "containerStatuses", "initContainerStatuses",
                         "hostIP", "hostIPs", "podIP", "podIPs", "startTime", "reason",
                         "message", "volumeStatuses")

Obj = dict[str, Any]


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ProbeStates(Protocol):
    """What the probes say about a pod's running containers (the prober manager)."""

    def started(self, name: str, container_id: str) -> bool: ...

    def ready(self, name: str, container_id: str) -> bool: ...


@dataclass
class PodRuntimeView:
    """What the runtime and the pod worker know about one pod."""

    sandbox: SandboxStatus | None = None
    # Every instance of each container (by container name), oldest attempt first.
    containers: Mapping[str, Sequence[ContainerStatus]] = field(default_factory=dict)
    # Reason and message of a container that is waiting (set by the pod worker: image pull
    # errors, back-off, create errors); overrides the state of an exited instance.
    waiting: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    runtime_name: str = "runc"
    # The pod is terminal (its containers will not run again): phase Succeeded or Failed.
    terminal: bool = False
    # started/ready of running containers (None: no probes, started and ready at once).
    probes: ProbeStates | None = None


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, dict) else {}


def _containers(pod: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [c for c in _spec(pod).get(key) or [] if isinstance(c, dict)]


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _terminated(instance: ContainerStatus, runtime_name: str) -> Obj:
    state: Obj = {"exitCode": instance.exit_code}
    if instance.reason:
        state["reason"] = instance.reason
    if instance.message:
        state["message"] = instance.message
    if instance.started_at:
        state["startedAt"] = rfc3339(instance.started_at)
    state["finishedAt"] = rfc3339(instance.finished_at or instance.started_at
                                  or instance.created_at)
    state["containerID"] = f"{runtime_name}://{instance.id}"
    return {"terminated": state}


def _waiting(reason: str, message: str = "") -> Obj:
    waiting: Obj = {"reason": reason}
    if message:
        waiting["message"] = message
    return {"waiting": waiting}


def _volume_mounts(spec_container: Mapping[str, Any],
                   instance: ContainerStatus) -> list[Obj]:
    """The mounts of the instance that come from pod volumes, in the spec's order."""
    spec_mounts = {str(m.get("mountPath")): m for m in spec_container.get("volumeMounts") or []
                   if isinstance(m, dict)}
    order = {path: i for i, path in enumerate(spec_mounts)}
    result: list[tuple[int, Obj]] = []
    for mount in instance.mounts:
        if not mount.volume_name:
            continue
        spec_mount = spec_mounts.get(mount.container_path)
        read_only = (bool(spec_mount.get("readOnly")) if spec_mount is not None
                     else mount.read_only)
        entry: Obj = {"name": mount.volume_name, "mountPath": mount.container_path}
        if read_only:
            entry["readOnly"] = True
            entry["recursiveReadOnly"] = "Disabled"
        result.append((order.get(mount.container_path, len(order)), entry))
    result.sort(key=lambda pair: pair[0])
    return [entry for _, entry in result]


def container_status(spec_container: Mapping[str, Any], instances: Sequence[ContainerStatus],
                     waiting: tuple[str, str] | None, default_reason: str,
                     runtime_name: str, probes: ProbeStates | None = None, *,
                     old: Mapping[str, Any] | None = None, deleting: bool = False,
                     plain_init: bool = False) -> Obj:
    """The API status of one container from its runtime instances (oldest first); `old` is
    its status as last written, which only counts when the runtime has no instance;
    `plain_init`: an init container that is not a sidecar (ready once it exited 0)."""
    name = str(spec_container.get("name"))
    status: Obj = {"name": name, "image": spec_container.get("image") or "", "imageID": "",
                   "ready": False, "restartCount": 0, "started": False}
    latest = instances[-1] if instances else None
    previous = instances[-2] if len(instances) > 1 else None
    if latest is None:
        return _status_without_instance(status, old, waiting, default_reason, deleting)
    status["containerID"] = f"{runtime_name}://{latest.id}"
    status["image"] = latest.image or status["image"]  # what runs, as upstream's cs.Image
    status["imageID"] = latest.image_id
    status["restartCount"] = latest.attempt
    last_state: Obj = _terminated(previous, runtime_name) if previous is not None else {}
    if latest.state == ContainerState.RUNNING:
        state = {"running": {"startedAt": rfc3339(latest.started_at or latest.created_at)}}
        started = probes is None or probes.started(name, latest.id)
        status["started"] = started
        status["ready"] = started and not plain_init and (
            probes is None or probes.ready(name, latest.id))
    elif latest.state == ContainerState.EXITED:
        state = _terminated(latest, runtime_name)
        status["ready"] = plain_init and latest.exit_code == 0 and waiting is None
        if waiting is not None:  # to be restarted: waiting, with the termination as lastState
            last_state = state
            state = _waiting(*waiting)
    elif waiting is not None:
        state = _waiting(*waiting)
    else:
        state = _waiting(default_reason)
    status["state"] = state
    status["lastState"] = last_state
    mounts = _volume_mounts(spec_container, latest)
    if mounts:
        status["volumeMounts"] = mounts
    return status


def _status_without_instance(status: Obj, old: Mapping[str, Any] | None,
                             waiting: tuple[str, str] | None, default_reason: str,
                             deleting: bool) -> Obj:
    """A container the runtime has no instance of (not started yet, or forgotten, as after
    a node shutdown), as upstream's `convertToAPIContainerStatuses`: a terminated old status
    is kept; otherwise its restartCount and lastState carry over, and one that was running
    counts as terminated with an unknown status (`ContainerStatusUnknown`, exit code 137)
    and, unless the pod is being deleted, as restarted once more."""
    status["state"] = _waiting(default_reason)
    status["lastState"] = {}
    if old is not None and isinstance(_state_of(old).get("terminated"), dict):
        status = {**old, "ready": False, "started": False}
    elif old is not None:
        status["restartCount"] = int(old.get("restartCount") or 0)
        last = old.get("lastState")
        status["lastState"] = dict(last) if isinstance(last, dict) else {}
        if _state_of(old).get("running") is not None and _last_terminated(status) is None:
            status["lastState"] = {"terminated": {
                "exitCode": 137, "reason": "ContainerStatusUnknown",
                "message": "The container could not be located when the pod was deleted.  "
                           "The container used to be Running"}}
            if not deleting:
                status["restartCount"] += 1
    if waiting is not None:
        if isinstance(_state_of(status).get("terminated"), dict):
            status["lastState"] = status["state"]
        status["state"] = _waiting(*waiting)
    return status


def _state_of(status: Mapping[str, Any]) -> Mapping[str, Any]:
    state = status.get("state")
    return state if isinstance(state, dict) else {}


def _last_terminated(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    last = status.get("lastState")
    if isinstance(last, dict) and isinstance(last.get("terminated"), dict):
        return last["terminated"]
    return None


def _has_any_regular_started(pod: Mapping[str, Any],
                             statuses: Mapping[str, Mapping[str, Any]]) -> bool:
    for c in _containers(pod, "containers"):
        s = statuses.get(str(c.get("name")))
        if s is None:
            continue
        state = _state_of(s)
        if state.get("running") or state.get("terminated") or _last_terminated(s):
            return True
    return False


def get_phase(pod: Mapping[str, Any], init_statuses: Mapping[str, Mapping[str, Any]],
              statuses: Mapping[str, Mapping[str, Any]], pod_is_terminal: bool) -> str:
    """Upstream's `getPhase`."""
    spec = _spec(pod)
    pending_init = failed_init = 0
    for c in _containers(pod, "initContainers"):
        s = init_statuses.get(str(c.get("name")))
        if _is_sidecar(c):
            if s is None or not s.get("started"):
                pending_init += 1
            continue
        if s is None:
            pending_init += 1
            continue
        state = _state_of(s)
        if state.get("running"):
            pending_init += 1
        elif isinstance(state.get("terminated"), dict):
            if state["terminated"].get("exitCode", 0) != 0:
                failed_init += 1
        elif state.get("waiting"):
            last = _last_terminated(s)
            if last is not None:
                if last.get("exitCode", 0) != 0:
                    failed_init += 1
            else:
                pending_init += 1
        else:
            pending_init += 1
    unknown = running = waiting = stopped = succeeded = 0
    for c in _containers(pod, "containers"):
        s = statuses.get(str(c.get("name")))
        if s is None:
            unknown += 1
            continue
        state = _state_of(s)
        if state.get("running"):
            running += 1
        elif isinstance(state.get("terminated"), dict):
            stopped += 1
            if state["terminated"].get("exitCode", 0) == 0:
                succeeded += 1
        elif state.get("waiting"):
            if _last_terminated(s) is not None:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1
    restart_policy = spec.get("restartPolicy") or "Always"
    if failed_init > 0 and restart_policy == "Never":
        return "Failed"
    if (pending_init > 0 and not _has_any_regular_started(pod, statuses)) or waiting > 0:
        return "Pending"
    if running > 0 and unknown == 0:
        return "Running"
    if running == 0 and stopped > 0 and unknown == 0:
        if pod_is_terminal:
            return "Succeeded" if stopped == succeeded else "Failed"
        if restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def _go_list(names: Sequence[str]) -> str:
    return "[" + " ".join(names) + "]"


def _initialized_condition(pod: Mapping[str, Any],
                           init_statuses: Mapping[str, Mapping[str, Any]],
                           statuses: Mapping[str, Mapping[str, Any]], phase: str) -> Obj:
    unknown: list[str] = []
    incomplete: list[str] = []
    for c in _containers(pod, "initContainers"):
        name = str(c.get("name"))
        s = init_statuses.get(name)
        if s is None:
            unknown.append(name)
            continue
        if _is_sidecar(c):
            if not s.get("started"):
                incomplete.append(name)
            continue
        terminated = _state_of(s).get("terminated")
        if not isinstance(terminated, dict) or terminated.get("exitCode", 0) != 0:
            incomplete.append(name)
    if phase == "Succeeded" and not unknown:
        return {"type": "Initialized", "status": "True", "reason": "PodCompleted"}
    if _has_any_regular_started(pod, statuses):
        return {"type": "Initialized", "status": "True"}
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_go_list(unknown)}")
    if incomplete:
        messages.append(f"containers with incomplete status: {_go_list(incomplete)}")
    if messages:
        return {"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized",
                "message": ", ".join(messages)}
    return {"type": "Initialized", "status": "True"}


def _containers_ready_condition(pod: Mapping[str, Any],
                                init_statuses: Mapping[str, Mapping[str, Any]],
                                statuses: Mapping[str, Mapping[str, Any]], phase: str) -> Obj:
    unknown: list[str] = []
    unready: list[str] = []
    for c in _containers(pod, "initContainers"):
        if not _is_sidecar(c):
            continue
        name = str(c.get("name"))
        s = init_statuses.get(name)
        if s is None:
            unknown.append(name)
        elif not s.get("ready"):
            unready.append(name)
    for c in _containers(pod, "containers"):
        name = str(c.get("name"))
        s = statuses.get(name)
        if s is None:
            unknown.append(name)
        elif not s.get("ready"):
            unready.append(name)
    if phase == "Succeeded" and not unknown:
        return {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"}
    if phase == "Failed":
        return {"type": "ContainersReady", "status": "False", "reason": "PodFailed"}
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_go_list(unknown)}")
    if unready:
        messages.append(f"containers with unready status: {_go_list(unready)}")
    if messages:
        return {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
                "message": ", ".join(messages)}
    return {"type": "ContainersReady", "status": "True"}


def _ready_condition(pod: Mapping[str, Any], containers_ready: Obj,
                     conditions: Mapping[str, Mapping[str, Any]]) -> Obj:
    if containers_ready["status"] != "True":
        ready = dict(containers_ready)
        ready["type"] = "Ready"
        return ready
    unready_gates = []
    for gate in _spec(pod).get("readinessGates") or []:
        kind = str((gate or {}).get("conditionType") or "")
        cond = conditions.get(kind)
        if cond is None:
            unready_gates.append(
                f'corresponding condition of pod readiness gate "{kind}" does not exist.')
        elif cond.get("status") != "True":
            unready_gates.append(
                f'the status of pod readiness gate "{kind}" is not "True", but '
                f'{cond.get("status")}')
    if unready_gates:
        return {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady",
                "message": ", ".join(unready_gates)}
    return {"type": "Ready", "status": "True"}


def _with_times(condition: Obj, previous: Mapping[str, Any] | None, now: str) -> Obj:
    out: Obj = {"type": condition["type"], "status": condition["status"],
                "lastProbeTime": None}
    same = previous is not None and previous.get("status") == condition["status"]
    out["lastTransitionTime"] = (previous or {}).get("lastTransitionTime") if same else now
    if not out["lastTransitionTime"]:
        out["lastTransitionTime"] = now
    for key in ("reason", "message"):
        if condition.get(key):
            out[key] = condition[key]
    return out


def _by_name(statuses: Any) -> dict[str, Mapping[str, Any]]:
    return {str(st.get("name")): st for st in statuses or [] if isinstance(st, dict)}


def generate_pod_status(pod: Mapping[str, Any], view: PodRuntimeView, *, host_ip: str,
                        old_status: Mapping[str, Any] | None = None,
                        now: str | None = None) -> Obj:
    """The pod's `status` as the kubelet writes it (see the module docstring)."""
    now = now or _now()
    old = dict(old_status or {})
    has_init = bool(_containers(pod, "initContainers"))
    default_reason = POD_INITIALIZING if has_init else CONTAINER_CREATING
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    old_init = _by_name(old.get("initContainerStatuses"))
    init_statuses: dict[str, Obj] = {}
    for c in _containers(pod, "initContainers"):
        name = str(c.get("name"))
        init_statuses[name] = container_status(c, view.containers.get(name, ()),
                                               view.waiting.get(name), default_reason,
                                               view.runtime_name, view.probes,
                                               old=old_init.get(name), deleting=deleting,
                                               plain_init=not _is_sidecar(c))
    old_regular = _by_name(old.get("containerStatuses"))
    statuses: dict[str, Obj] = {}
    for c in _containers(pod, "containers"):
        name = str(c.get("name"))
        statuses[name] = container_status(c, view.containers.get(name, ()),
                                          view.waiting.get(name), default_reason,
                                          view.runtime_name, view.probes,
                                          old=old_regular.get(name), deleting=deleting)
    phase = get_phase(pod, init_statuses, statuses, view.terminal)
    if old.get("phase") in TERMINAL_PHASES:
        phase = str(old["phase"])
    if phase in TERMINAL_PHASES:
        for s in [*init_statuses.values(), *statuses.values()]:
            s["ready"] = False
    old_conditions = {str(c.get("type")): c for c in old.get("conditions") or []
                      if isinstance(c, dict)}
    sandbox_ready = view.sandbox is not None and view.sandbox.ready and phase not in \
        TERMINAL_PHASES
    generated = [
        {"type": "PodReadyToStartContainers", "status": "True" if sandbox_ready else "False"},
        _initialized_condition(pod, init_statuses, statuses, phase),
    ]
    containers_ready = _containers_ready_condition(pod, init_statuses, statuses, phase)
    generated.append(_ready_condition(pod, containers_ready, old_conditions))
    generated.append(containers_ready)
    scheduled = old_conditions.get("PodScheduled")
    if scheduled is not None and scheduled.get("status") == "True":
        generated.append(dict(scheduled))
    else:
        generated.append({"type": "PodScheduled", "status": "True"})
    conditions = []
    for condition in generated:
        if condition["type"] == "PodScheduled" and "lastTransitionTime" in condition:
            conditions.append(condition)
        else:
            conditions.append(_with_times(condition, old_conditions.get(condition["type"]),
                                          now))
    conditions += [c for kind, c in old_conditions.items() if kind not in KUBELET_CONDITIONS]

    status: Obj = {k: v for k, v in old.items() if k not in KUBELET_STATUS_FIELDS}
    status["phase"] = phase
    status["conditions"] = conditions
    if host_ip:
        status["hostIP"] = host_ip
        status["hostIPs"] = [{"ip": host_ip}]
    pod_ip = view.sandbox.ip if view.sandbox is not None else ""
    if _spec(pod).get("hostNetwork") and view.sandbox is not None:
        pod_ip = host_ip  # a host-network pod has the node's address
    if pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    elif old.get("podIP"):
        status["podIP"] = old["podIP"]
        status["podIPs"] = old.get("podIPs") or [{"ip": old["podIP"]}]
    status["startTime"] = old.get("startTime") or now
    if init_statuses:
        status["initContainerStatuses"] = list(init_statuses.values())
    status["containerStatuses"] = list(statuses.values())
    for key in ("reason", "message"):
        if old.get(key) and phase in TERMINAL_PHASES:
            status[key] = old[key]
    return status


def rejected_status(old_status: Mapping[str, Any] | None, reason: str, message: str) -> Obj:
    """The status of a pod the kubelet refused to admit: `Failed`, the reason, and the
    message `Pod was rejected: <message>`."""
    status: Obj = {k: v for k, v in (old_status or {}).items()
                   if k not in ("phase", "reason", "message")}
    status.update({"phase": "Failed", "reason": reason,
                   "message": f"Pod was rejected: {message}"})
    return status


# --- the status manager ---------------------------------------------------------------------


def normalized(value: Any) -> Any:
    """`value` without null members (the API drops them); `same_value` compares by it."""
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def same_value(a: Any, b: Any) -> bool:
    """`normalized(a) == normalized(b)`, without building either: plain equality first (C
    speed, and what an unchanged status meets), then a walk that treats a null member as an
    absent one and stops at the first difference."""
    if a is b or a == b:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        present = 0
        for key, value in a.items():
            if value is None:
                continue
            present += 1
            other = b.get(key)
            if other is None or not same_value(value, other):
                return False
        return present == sum(1 for value in b.values() if value is not None)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return False


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    return same_value(dict(a or {}), dict(b or {}))


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> Obj:
    """A merge patch of `status` turning `old` into `new` at the top level (kubelet-owned
    fields removed with null)."""
    patch: Obj = {}
    for key, value in new.items():
        if not same_value(old.get(key), value):
            patch[key] = value
    for key in KUBELET_STATUS_FIELDS:
        if key in old and key not in new:
            patch[key] = None
    return patch


@dataclass
class _PodEntry:
    namespace: str
    name: str
    api_status: Obj
    desired: Obj | None = None
    # The status as the worker's last sync left it at `release`, until the writer takes it:
    # due even while the worker's next sync holds the pod.
    released: Obj | None = None


# How long a status published during its worker's sync may wait for the sync's end.
DEFAULT_MAX_HOLD = 0.25


class StatusManager:
    """Writes pod statuses to the API, only when they changed."""

    def __init__(self, api: ApiClient, *, retry_interval: float = 1.0,
                 max_hold: float = DEFAULT_MAX_HOLD) -> None:
        self.api = api
        self.retry_interval = retry_interval
        self.max_hold = max_hold
        self._pods: dict[str, _PodEntry] = {}
        self._dirty: set[str] = set()
        # Pods whose worker is in a sync (`hold`): a status they publish meanwhile waits for
        # the sync's end, at most `max_hold` seconds from when it was published.
        self._held: dict[str, int] = {}
        self._dirty_since: dict[str, float] = {}
        self._wake = asyncio.Event()
        # Set while no status is waiting to be written, held or being written (`settled`).
        self._settled = asyncio.Event()
        self._settled.set()
        self._writing = False
        self.writes = 0  # PATCHes sent (metrics and tests)

    def observe(self, pod: Mapping[str, Any]) -> None:
        """The pod as the API has it now (from the informer)."""
        md = pod.get("metadata") or {}
        uid = str(md.get("uid") or "")
        if not uid:
            return
        status = dict(pod.get("status") or {})
        entry = self._pods.get(uid)
        if entry is None:
            self._pods[uid] = _PodEntry(str(md.get("namespace") or ""), str(md.get("name")),
                                        status)
        else:
            entry.api_status = status
            if entry.desired is not None and not same_status(entry.desired, status):
                self._mark(uid)

    def set_pod_status(self, pod: Mapping[str, Any], status: Obj) -> None:
        """What the kubelet wants the pod's status to be; written in the background if it
        differs from the API's."""
        md = pod.get("metadata") or {}
        uid = str(md.get("uid") or "")
        entry = self._pods.get(uid)
        if entry is None:
            entry = self._pods[uid] = _PodEntry(str(md.get("namespace") or ""),
                                                str(md.get("name")),
                                                dict(pod.get("status") or {}))
        entry.desired = status
        if not same_status(status, entry.api_status):
            self._mark(uid)

    def get(self, uid: str) -> Obj | None:
        """The status the kubelet last wanted for the pod (else the API's)."""
        entry = self._pods.get(uid)
        if entry is None:
            return None
        return entry.desired if entry.desired is not None else entry.api_status

    def desired_phase(self, uid: str) -> str | None:
        """The phase of the status the kubelet last wanted for the pod (None: it wanted
        none yet)."""
        entry = self._pods.get(uid)
        if entry is None or entry.desired is None:
            return None
        return entry.desired.get("phase")

    def forget(self, uid: str) -> None:
        self._pods.pop(uid, None)
        self._dirty.discard(uid)
        self._dirty_since.pop(uid, None)
        self._held.pop(uid, None)
        self._refresh_settled()

    def hold(self, uid: str) -> None:
        """The pod's worker begins a sync (or a container waits for the volumes a change
        needs): statuses it publishes before `release` are merged into one write (the
        latest), unless that lasts longer than `max_hold` from the first of them."""
        self._held[uid] = self._held.get(uid, 0) + 1
        self._settled.clear()

    def release(self, uid: str) -> None:
        """The pod's worker ended its sync: its status is written now if it changed."""
        count = self._held.get(uid, 0) - 1
        if count > 0:
            self._held[uid] = count
            return
        self._held.pop(uid, None)
        if uid in self._dirty:
            if trace.ENABLED:
                trace.mark("kubelet.status_released", uid)
            entry = self._pods.get(uid)
            if entry is not None:
                entry.released = entry.desired
            self._wake.set()
        self._refresh_settled()

    def _refresh_settled(self) -> None:
        if not self._dirty and not self._held and not self._writing:
            self._settled.set()
        else:
            self._settled.clear()

    def _mark(self, uid: str) -> None:
        if uid not in self._dirty:
            self._dirty_since[uid] = asyncio.get_running_loop().time()
        self._dirty.add(uid)
        self._settled.clear()
        self._wake.set()

    def _held_for(self, uid: str, now: float) -> float:
        """How much longer the pod's status waits for its worker's sync to end (0: due)."""
        entry = self._pods.get(uid)
        if uid not in self._held or (entry is not None and entry.released is not None):
            return 0.0
        return max(0.0, self._dirty_since.get(uid, now) + self.max_hold - now)

    def is_settled(self) -> bool:
        """No status is waiting to be written, none is held (a pod worker in a sync, or a
        change waiting for its volumes), none is being written."""
        return self._settled.is_set()

    async def settled(self) -> None:
        """Return once no status is waiting to be written or being written (what the
        kubelet's events wait for: a status write goes first)."""
        await self._settled.wait()

    async def write(self, uid: str) -> bool:
        """Write the pod's desired status now if it differs; True when the API has it (or
        the pod is gone)."""
        entry = self._pods.get(uid)
        if entry is None or entry.desired is None:
            return True
        entry.released = None
        return await self._send(uid, entry, entry.desired)

    async def _write_due(self, uid: str) -> bool:
        """The writer's write of a due status: while the worker's next sync holds the pod,
        the status its last sync released (what the next one publishes is written when that
        sync ends); else the latest."""
        entry = self._pods.get(uid)
        if entry is None or entry.desired is None:
            return True
        desired, entry.released = entry.released, None
        if desired is None or uid not in self._held:
            desired = entry.desired
        elif desired is not entry.desired:
            self._mark(uid)  # the newer status waits for its own sync's end
        return await self._send(uid, entry, desired)

    async def _send(self, uid: str, entry: _PodEntry, desired: Obj) -> bool:
        patch = status_patch(entry.api_status, desired)
        if not patch:
            return True
        path = resource_path("pods", entry.namespace, entry.name, "status")
        trace.mark("kubelet.status_patch", path)
        try:
            result = await self.api.patch(path, {"metadata": {"uid": uid}, "status": patch},
                                          patch_type="merge")
        except StatusError as err:
            if err.code == 404:
                log.debug("pod %s/%s is gone; status not written", entry.namespace,
                          entry.name)
                return True
            log.warning("writing the status of pod %s/%s: %s", entry.namespace, entry.name,
                        err.message)
            return False
        except ApiUnavailable as err:
            log.warning("writing the status of pod %s/%s: %s", entry.namespace, entry.name,
                        err)
            return False
        self.writes += 1
        trace.mark("kubelet.status_patched", path)
        if (result.get("metadata") or {}).get("uid") == uid:
            entry.api_status = dict(result.get("status") or {})
        return True

    async def run(self) -> None:
        """Write dirty statuses until cancelled; failed writes are retried."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            failed = []
            loop = asyncio.get_running_loop()
            now = loop.time()
            waits = [w for w in (self._held_for(uid, now) for uid in dirty) if w > 0]
            if waits:  # wake when the first held one is due (release wakes us earlier)
                loop.call_later(min(waits), self._wake.set)
            self._writing = True
            try:
                for uid in dirty:
                    if self._held_for(uid, now) > 0:
                        self._dirty.add(uid)
                        continue
                    self._dirty_since.pop(uid, None)
                    if not await self._write_due(uid):
                        failed.append(uid)
            finally:
                self._writing = False
            if failed:
                self._dirty.update(failed)
                await asyncio.sleep(self.retry_interval)
                self._wake.set()
            else:
                self._refresh_settled()

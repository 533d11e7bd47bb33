"""The validation rules of the `pods/NAME/dynamic` subresource: KEP-5972 (Dynamic Containers)
and KEP-6395 (Dynamic Node-Local Ephemeral Volumes), reference/k8s-semantics.md section 1.2.

`validate_dynamic_update(new, old, gates)` returns every rejection as
a `FieldError`; the apiserver turns a non-empty list into a 422 `Invalid` Status. `old` is the
stored pod: the pod's state (phase, conditions, statuses, `deletionTimestamp`) is read from it,
since a `/dynamic` update never changes status. Pure: no I/O.

How the rules are composed (one rule in one place)
---------------------------------------------------
* Standard pod validation and the immutability of everything `/dynamic` does not open are
  `ephemera.pods.validation.validate_pod_update`, called with a *base* pod
  (`dynamic_update_base`): the old pod into which the changes that `/dynamic` allows have been
  copied from the new pod (the container and init container lists in their new order, added
  containers whole, `volumeMounts` and `dynamicVolumePolicy` of kept containers, and
  `spec.volumes`). Whatever else differs (a container's `command`, `env`, `resources`, the
  pod's `nodeName`, ...) gets upstream's `spec: Forbidden: pod updates may not change fields
  other than ...` with its diff; the fields a plain update may change (images, tolerations,
  ...) stay changeable through `/dynamic`, as KEP-5972 says.
* The rules of this module then judge the changes the base pod let through, described by
  `dynamic_change(new, old)`.
* Where a rule of this module reports a problem that standard validation also reports, this
  module's error replaces upstream's: a mount of a volume removed in the same update (upstream:
  `...volumeMounts[j].name: Not found`) and the removal of the last container (upstream:
  `spec.containers: Required value`).
* A plain update of the main resource that changes containers or volumes is rejected by
  `validate_pod_update` itself (`spec.containers: Forbidden: pod updates may not add or remove
  containers`, or the `pod updates may not change fields other than` error).

Readings of the KEPs (decisions)
--------------------------------
* "Initialized": the pod has no init containers, or its `Initialized` condition is `True`
  (as the kubelet sets it once every init container completed and every sidecar started).
* The state rules (Running, initialized, no `deletionTimestamp`, not Windows) apply when the
  update changes containers or volumes (a container added or removed, a volume added, removed
  or changed, a container's or init container's mounts changed); other updates through
  `/dynamic` (an image, a toleration) are judged like a plain update.
* An "existing" or "already-running" container is one in the old pod's `spec.containers`;
  `RestartContainer` is needed to change its `volumeMounts` (any difference: a mount added,
  removed, edited or reordered). The policy read is the new one, so it may be set in the same
  update. A container's list position may change; containers are matched by name.
* "Existing containers" for the security rules are the old pod's main containers (not its
  init containers, which may hold setup privileges the running pod no longer uses, nor its
  ephemeral containers). Values "already used" include the pod's `securityContext`;
  `runAsNonRoot` is compared as the effective value (container, else pod). (The newest
  KEP-5972 draft moved these rules to "Alternatives", relying on fail-closed admission instead;
  ephemera keeps them, as the reference's section 1.2 lists them.)
* Resources of an added container: only `cpu` and `memory` (what in-place resize supports).
  Removing a container is always allowed resource-wise.
* Volumes: adding and removing is limited to the five node-local types, both ways; a volume
  kept under the same name may not change (remove it and add one under a new name).
* The resize part of `/dynamic` (KEP-5972 lets it resize like `/resize`) is not served:
  container resources stay immutable here, as on a plain update.

Messages
--------
Upstream has no code for these KEPs; every message below is ephemera's. Placeholders in angle
brackets; a message wrapped below is one line (wrapped lines join with one space). Whether the
pod's node declares the features a change needs (`required_node_features`) is not judged here:
the apiserver's NodeDeclaredFeatureValidator admission plugin answers it with upstream's 403
(`ephemera.apiserver.admission.nodefeatures`).

- `spec.containers`:
    `Forbidden: Dynamic Containers are disabled: adding or removing main containers is not allowed
    (feature gate DynamicContainers is off)`
- `spec.volumes`, `spec.containers[i].volumeMounts`:
    `Forbidden: Dynamic Node-Local Ephemeral Volumes are disabled: volumes and volume mounts may
    not be changed (feature gate DynamicNodeLocalEphemeralVolumes is off)`
- `metadata.deletionTimestamp`:
    `Forbidden: containers and volumes may not be changed once the pod is being deleted`
- `status.phase`:
    `Forbidden: containers and volumes may only be changed while the pod is Running (phase is
    "<phase>")`
- `status.conditions`:
    `Forbidden: containers and volumes may only be changed once the pod is initialized (condition
    Initialized is not True)`
- `spec.os.name`:
    `Forbidden: containers and volumes may not be changed on Windows pods`
- `spec.initContainers`:
    `Forbidden: init containers may not be added or removed; only main containers can be`
- `spec.initContainers[i].volumeMounts`:
    `Forbidden: volume mounts of init containers may not be changed`
- `spec.containers`:
    `Forbidden: the last container may not be removed; a pod must keep at least one container`
- `spec.containers[i].name`:
    `Duplicate value: "<name>": a container with this name is still reported in status.<list>; the
    name can be reused once that status is gone`
- `spec.containers[i].securityContext.privileged`:
    `Forbidden: privileged containers may not be added to a running pod`
- `spec.containers[i].ports[j].hostPort`:
    `Forbidden: containers added to a running pod may not use host ports`
- `spec.containers[i].resources.<requests or limits>[<r>]`:
    `Unsupported value: "<r>": supported values: "cpu", "memory"`
- `spec.containers[i].securityContext.capabilities.add[k]`:
    `Invalid value: "<cap>": must be a capability that a container already in the pod adds`
- `spec.containers[i].securityContext.capabilities.drop`:
    `Required value: must drop <"CAP", ...>: every container already in the pod drops them`
- `spec.containers[i].securityContext.<key>`, key one of runAsUser, runAsGroup,
  seLinuxOptions, seccompProfile, appArmorProfile:
    `Invalid value: <value>: must be a value that the pod or a container already in the pod uses`
- `spec.containers[i].securityContext.<runAsNonRoot, readOnlyRootFilesystem>`:
    `Required value: must be true: every container already in the pod sets it` (`Invalid value:
    false: ...` when set to false)
- `spec.containers[i].securityContext.allowPrivilegeEscalation`:
    `Required value: must be false: every container already in the pod sets it to false` (`Invalid
    value: true: ...` when true)
- `spec.containers[i].securityContext.procMount`:
    `Invalid value: "Unmasked": may only be "Unmasked" when a container already in the pod uses
    it`
- `spec`:
    `Invalid value: "<new class>": Pod QOS Class may not change as a result of adding or removing
    containers (it is "<old class>")`
- `spec.volumes[i]`:
    `Unsupported value: "<source>": supported values: "configMap", "secret", "projected",
    "emptyDir", "image"`
- `spec.volumes`:
    `Forbidden: volume "<name>" may not be removed: only configMap, secret, projected, emptyDir
    and image volumes can be removed from a running pod`
- `spec.volumes[i]`:
    `Forbidden: volume "<name>" already exists and may not be changed; remove it and add a volume
    with a new name`
- `spec.volumes[i].name`:
    `Duplicate value: "<name>": a volume with this name is still reported in
    status.volumeStatuses; the name can be reused once its teardown finished`
- `spec.volumes[i].name`:
    `Duplicate value: "<name>": a volume with this name is still mounted in container "<c>"
    (status.<list>[*].volumeMounts); the name can be reused once that container no longer mounts
    it`
- `<containers list>[i].volumeMounts[j].name`:
    `Forbidden: volume "<name>" is removed from spec.volumes but still mounted here; remove the
    mount or the container in the same update`
- `spec.containers[i].dynamicVolumePolicy.restartPolicy`:
    `Required value: must be "RestartContainer" to add, remove or change volume mounts of a
    container already in the pod; without it, mounts may only come and go with their container`
    (with DynamicVolumeHotPlug on: `Required value: must be "NotRequired" (mounted into the
    running container) or "RestartContainer" to add, ...` and the rest as above)
- `spec.containers[i].volumeMounts[j].mountPropagation` (a mount added or changed on a
  `NotRequired` container; a live mount is private):
    `Forbidden: may not be set on a mount added to a running container whose
    dynamicVolumePolicy.restartPolicy is "NotRequired"`
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ephemera.api import field
from ephemera.api.featuregates import (
    DYNAMIC_CONTAINERS,
    DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES,
    DYNAMIC_VOLUME_HOT_PLUG,
    gate_enabled,
)
from ephemera.api.field import FieldError, Path
from ephemera.api.quantity import QuantityError, quantity_from_json
from ephemera.pods import resources, validation

__all__ = [
    "DYNAMIC_CONTAINER_FIELDS",
    "DYNAMIC_CONTAINER_RESOURCES",
    "DYNAMIC_VOLUME_NOT_REQUIRED",
    "DYNAMIC_VOLUME_RESTART_CONTAINER",
    "DYNAMIC_VOLUME_SOURCES",
    "DynamicChange",
    "dynamic_change",
    "dynamic_update_base",
    "required_node_features",
    "validate_dynamic_update",
]

# KEP-6395's `dynamicVolumePolicy.restartPolicy` values (defined with the enum's validation).
DYNAMIC_VOLUME_RESTART_CONTAINER = validation.DYNAMIC_VOLUME_RESTART_CONTAINER
DYNAMIC_VOLUME_NOT_REQUIRED = validation.DYNAMIC_VOLUME_NOT_REQUIRED
# KEP-6395 "Supported Volume Sources", in the KEP's order.
DYNAMIC_VOLUME_SOURCES = ("configMap", "secret", "projected", "emptyDir", "image")
# What a kept container may change through /dynamic beyond what a plain update allows.
DYNAMIC_CONTAINER_FIELDS = ("volumeMounts", "dynamicVolumePolicy")
# Resources an added container may set: those in-place resize supports (KEP-5972).
DYNAMIC_CONTAINER_RESOURCES = ("cpu", "memory")

_CONTAINER_STATUS_LISTS = (
    "containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses",
)
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_CONTAINER_STATUS_OF = {"initContainers": "initContainerStatuses",
                        "containers": "containerStatuses",
                        "ephemeralContainers": "ephemeralContainerStatuses"}

_CONTAINERS_GATE_OFF = ("Dynamic Containers are disabled: adding or removing main containers "
                        "is not allowed (feature gate DynamicContainers is off)")
_VOLUMES_GATE_OFF = ("Dynamic Node-Local Ephemeral Volumes are disabled: volumes and volume "
                     "mounts may not be changed (feature gate DynamicNodeLocalEphemeralVolumes "
                     "is off)")
_DELETING = "containers and volumes may not be changed once the pod is being deleted"
_NOT_INITIALIZED = ("containers and volumes may only be changed once the pod is initialized "
                    "(condition Initialized is not True)")
_WINDOWS = "containers and volumes may not be changed on Windows pods"
_INIT_ADDED_REMOVED = "init containers may not be added or removed; only main containers can be"
_INIT_MOUNTS = "volume mounts of init containers may not be changed"
_LAST_CONTAINER = ("the last container may not be removed; a pod must keep at least one "
                   "container")
_PRIVILEGED = "privileged containers may not be added to a running pod"
_HOST_PORT = "containers added to a running pod may not use host ports"
_CAP_ADD = "must be a capability that a container already in the pod adds"
_ALREADY_USED = "must be a value that the pod or a container already in the pod uses"
_MUST_BE_TRUE = "must be true: every container already in the pod sets it"
_MUST_BE_FALSE = "must be false: every container already in the pod sets it to false"
_PROC_MOUNT = 'may only be "Unmasked" when a container already in the pod uses it'
_VOLUME_CHANGED = ("volume {name} already exists and may not be changed; remove it and add a "
                   "volume with a new name")
_VOLUME_REMOVAL_UNSUPPORTED = ("volume {name} may not be removed: only configMap, secret, "
                               "projected, emptyDir and image volumes can be removed from a "
                               "running pod")
_DANGLING = ("volume {name} is removed from spec.volumes but still mounted here; remove the "
             "mount or the container in the same update")
_RESTART_REQUIRED = ('must be "RestartContainer" to add, remove or change volume mounts of a '
                     "container already in the pod; without it, mounts may only come and go "
                     "with their container")
_LIVE_PROPAGATION = ('may not be set on a mount added to a running container whose '
                     'dynamicVolumePolicy.restartPolicy is "NotRequired"')
_POLICY_REQUIRED = ('must be "NotRequired" (mounted into the running container) or '
                    '"RestartContainer" to add, remove or change volume mounts of a container '
                    "already in the pod; without it, mounts may only come and go with their "
                    "container")


# --- small readers ----------------------------------------------------------------------


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict):
                yield i, item


def _name(item: Mapping[str, Any]) -> str:
    name = item.get("name")
    return name if isinstance(name, str) else ""


def _by_name(value: Any) -> dict[str, tuple[int, dict[str, Any]]]:
    """Named entries of a list by name, the first one winning (validation reports the rest)."""
    out: dict[str, tuple[int, dict[str, Any]]] = {}
    for i, item in _items(value):
        name = _name(item)
        if name and name not in out:
            out[name] = (i, item)
    return out


def _spec(pod: Mapping[str, Any]) -> dict[str, Any]:
    return _d(pod.get("spec"))


def _status(pod: Mapping[str, Any]) -> dict[str, Any]:
    return _d(pod.get("status"))


def _quoted(value: str) -> str:
    return field.go_value(value)


def _loose(value: Any, key: str = "") -> Any:
    """A comparable form of a volume or mount: unset, null, false, zero, empty are the same,
    quantities compare by value."""
    if key == "sizeLimit" and value is not None:
        try:
            return ("quantity", quantity_from_json(value).as_fraction())
        except (QuantityError, TypeError, ValueError):
            return value
    if isinstance(value, dict):
        out = {k: _loose(x, k) for k, x in value.items()}
        return tuple(sorted((k, x) for k, x in out.items() if x is not None))
    if isinstance(value, list):
        items = tuple(_loose(x) for x in value)
        return items or None
    if value is None or value is False or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return None
    return value


def _same(a: Any, b: Any) -> bool:
    return bool(_loose(a) == _loose(b))


# --- what an update changes -------------------------------------------------------------


@dataclass(frozen=True)
class DynamicChange:
    """What a `/dynamic` update changes in containers and volumes (names, in the order of the
    pod that has them)."""

    added_containers: tuple[str, ...] = ()
    removed_containers: tuple[str, ...] = ()
    remounted_containers: tuple[str, ...] = ()  # kept main containers whose mounts changed
    # ... of which those whose new dynamicVolumePolicy is NotRequired (changed live)
    live_remounted_containers: tuple[str, ...] = ()
    added_init_containers: tuple[str, ...] = ()
    removed_init_containers: tuple[str, ...] = ()
    remounted_init_containers: tuple[str, ...] = ()
    added_volumes: tuple[str, ...] = ()
    removed_volumes: tuple[str, ...] = ()
    changed_volumes: tuple[str, ...] = ()  # same name, another definition

    @property
    def changes_containers(self) -> bool:
        """Main containers added or removed (KEP-5972)."""
        return bool(self.added_containers or self.removed_containers)

    @property
    def changes_volumes(self) -> bool:
        """Volumes or volume mounts changed (KEP-6395)."""
        return bool(self.added_volumes or self.removed_volumes or self.changed_volumes
                    or self.remounted_containers or self.remounted_init_containers)

    @property
    def changes_init_containers(self) -> bool:
        return bool(self.added_init_containers or self.removed_init_containers)

    @property
    def is_dynamic(self) -> bool:
        """Anything only `/dynamic` may do (the state rules apply)."""
        return self.changes_containers or self.changes_volumes or self.changes_init_containers


def _container_diff(new: Any, old: Any) -> tuple[tuple[str, ...], tuple[str, ...],
                                                  tuple[str, ...]]:
    new_by, old_by = _by_name(new), _by_name(old)
    added = tuple(n for n in new_by if n not in old_by)
    removed = tuple(n for n in old_by if n not in new_by)
    remounted = tuple(n for n, (_, c) in new_by.items()
                      if n in old_by and not _same(c.get("volumeMounts"),
                                                   old_by[n][1].get("volumeMounts")))
    return added, removed, remounted


def dynamic_change(new: Mapping[str, Any], old: Mapping[str, Any]) -> DynamicChange:
    """The containers and volumes an update of `old` into `new` adds, removes or changes."""
    new_spec, old_spec = _spec(new), _spec(old)
    added, removed, remounted = _container_diff(new_spec.get("containers"),
                                                old_spec.get("containers"))
    init_added, init_removed, init_remounted = _container_diff(
        new_spec.get("initContainers"), old_spec.get("initContainers"))
    new_vols, old_vols = _by_name(new_spec.get("volumes")), _by_name(old_spec.get("volumes"))
    new_containers = _by_name(new_spec.get("containers"))
    return DynamicChange(
        added_containers=added,
        removed_containers=removed,
        remounted_containers=remounted,
        live_remounted_containers=tuple(
            n for n in remounted if _d(new_containers[n][1].get("dynamicVolumePolicy")).get(
                "restartPolicy") == DYNAMIC_VOLUME_NOT_REQUIRED),
        added_init_containers=init_added,
        removed_init_containers=init_removed,
        remounted_init_containers=init_remounted,
        added_volumes=tuple(n for n in new_vols if n not in old_vols),
        removed_volumes=tuple(n for n in old_vols if n not in new_vols),
        changed_volumes=tuple(n for n, (_, vol) in new_vols.items()
                              if n in old_vols and not _same(vol, old_vols[n][1])),
    )


def required_node_features(change: DynamicChange) -> list[str]:
    """The NodeDeclaredFeatures an update needs from the pod's node, in this order: container
    additions or removals need `DynamicContainers`, volume and volume mount changes
    `DynamicNodeLocalEphemeralVolumes`, mount changes of a `NotRequired` container (made live)
    ephemera's `DynamicVolumeHotPlug`. The apiserver's NodeDeclaredFeatureValidator admission
    plugin checks them against the node's `status.declaredFeatures`."""
    needed: list[str] = []
    if change.changes_containers:
        needed.append(DYNAMIC_CONTAINERS)
    if change.changes_volumes:
        needed.append(DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES)
    if change.live_remounted_containers:
        needed.append(DYNAMIC_VOLUME_HOT_PLUG)
    return needed


def dynamic_update_base(new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """The old pod with the changes `/dynamic` opens copied in from `new`, for
    `validate_pod_update`'s immutability check: the container and init container lists in
    their new order (added ones whole, kept ones with their new `volumeMounts` and
    `dynamicVolumePolicy`) and `spec.volumes`. What still differs from `new` is what a plain
    update may change (judged by `validate_pod_update`) or what may not change at all.
    Only the dicts and lists on the way to what it replaces are new: the rest is shared
    with `old` and `new`, so the base is for reading."""
    base = dict(old)
    spec = base.get("spec")
    if not isinstance(spec, dict):
        return base
    spec = base["spec"] = dict(spec)
    new_spec = _spec(new)
    for key in ("containers", "initContainers"):
        new_list = new_spec.get(key)
        if not isinstance(new_list, list):
            if key in spec and key not in new_spec:
                del spec[key]  # removed outright: judged by this module, not by the diff
            continue
        old_by = _by_name(spec.get(key))
        merged: list[Any] = []
        for item in new_list:
            name = _name(item) if isinstance(item, dict) else ""
            if name in old_by:
                kept = dict(old_by[name][1])
                for member in DYNAMIC_CONTAINER_FIELDS:
                    if member in item:
                        kept[member] = item[member]
                    else:
                        kept.pop(member, None)
                merged.append(kept)
            else:
                merged.append(item)
        spec[key] = merged
    if "volumes" in new_spec:
        spec["volumes"] = new_spec["volumes"]
    else:
        spec.pop("volumes", None)
    return base


# --- the rules --------------------------------------------------------------------------


def _state_errors(old: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    if _d(old.get("metadata")).get("deletionTimestamp"):
        errs.append(field.forbidden(Path("metadata", "deletionTimestamp"), _DELETING))
    status = _status(old)
    phase = status.get("phase")
    if phase != "Running":
        phase_text = phase if isinstance(phase, str) else ""
        errs.append(field.forbidden(
            Path("status", "phase"),
            "containers and volumes may only be changed while the pod is Running "
            f"(phase is {_quoted(phase_text)})"))
    if _spec(old).get("initContainers") and not any(
            c.get("type") == "Initialized" and c.get("status") == "True"
            for _, c in _items(status.get("conditions"))):
        errs.append(field.forbidden(Path("status", "conditions"), _NOT_INITIALIZED))
    if _d(_spec(old).get("os")).get("name") == "windows":
        errs.append(field.forbidden(Path("spec", "os", "name"), _WINDOWS))
    return errs


def _status_container_names(old: Mapping[str, Any]) -> dict[str, str]:
    """Container names reported in any status list -> the list's name."""
    out: dict[str, str] = {}
    status = _status(old)
    for key in _CONTAINER_STATUS_LISTS:
        for _, cs in _items(status.get(key)):
            out.setdefault(_name(cs), key)
    out.pop("", None)
    return out


def _sc(container: Mapping[str, Any]) -> dict[str, Any]:
    return _d(container.get("securityContext"))


def _cap(name: Any) -> str:
    return str(name).upper().removeprefix("CAP_")


def _caps(container: Mapping[str, Any], which: str) -> set[str]:
    raw = _d(_sc(container).get("capabilities")).get(which)
    return {_cap(x) for x in raw} if isinstance(raw, list) else set()


def _security_errors(c: Mapping[str, Any], path: Path, existing: list[dict[str, Any]],
                     pod_sc: Mapping[str, Any]) -> list[FieldError]:
    """KEP-5972: an added container may not escalate beyond what the pod already has."""
    errs: list[FieldError] = []
    sc = _sc(c)
    sc_path = path.child("securityContext")
    if sc.get("privileged") is True:
        errs.append(field.forbidden(sc_path.child("privileged"), _PRIVILEGED))

    caps = _d(sc.get("capabilities"))
    allowed_adds: set[str] = set().union(*(_caps(e, "add") for e in existing))
    if "ALL" not in allowed_adds and isinstance(caps.get("add"), list):
        for k, cap in enumerate(caps["add"]):
            if _cap(cap) not in allowed_adds:
                errs.append(field.invalid(sc_path.child("capabilities", "add").index(k), cap,
                                          _CAP_ADD))
    drops = [_caps(e, "drop") for e in existing]
    required_drops = set.intersection(*drops) if drops else set()
    own_drops = _caps(c, "drop")
    if "ALL" not in own_drops:
        missing = sorted(required_drops - own_drops)
        if missing:
            listed = ", ".join(_quoted(m) for m in missing)
            errs.append(field.required(
                sc_path.child("capabilities", "drop"),
                f"must drop {listed}: every container already in the pod drops them"))

    for key in ("runAsUser", "runAsGroup", "seLinuxOptions", "seccompProfile",
                "appArmorProfile"):
        value = sc.get(key)
        if value is None:
            continue
        used = [pod_sc.get(key)] + [_sc(e).get(key) for e in existing]
        if not any(u is not None and _same(u, value) for u in used):
            errs.append(field.invalid(sc_path.child(key), value, _ALREADY_USED))

    def effective_non_root(container: Mapping[str, Any]) -> Any:
        own = _sc(container).get("runAsNonRoot")
        return own if own is not None else pod_sc.get("runAsNonRoot")

    if existing and all(effective_non_root(e) is True for e in existing):
        value = effective_non_root(c)
        if value is not True:
            errs.append(_must(sc_path.child("runAsNonRoot"), sc.get("runAsNonRoot"),
                              _MUST_BE_TRUE))
    if existing and all(_sc(e).get("readOnlyRootFilesystem") is True for e in existing):
        value = sc.get("readOnlyRootFilesystem")
        if value is not True:
            errs.append(_must(sc_path.child("readOnlyRootFilesystem"), value, _MUST_BE_TRUE))
    if existing and all(_sc(e).get("allowPrivilegeEscalation") is False for e in existing):
        value = sc.get("allowPrivilegeEscalation")
        if value is not False:
            errs.append(_must(sc_path.child("allowPrivilegeEscalation"), value, _MUST_BE_FALSE))
    if sc.get("procMount") == "Unmasked" and not any(
            _sc(e).get("procMount") == "Unmasked" for e in existing):
        errs.append(field.invalid(sc_path.child("procMount"), "Unmasked", _PROC_MOUNT))
    return errs


def _must(path: Path, value: Any, detail: str) -> FieldError:
    """`Required value` when unset, `Invalid value` when set to the wrong value."""
    if value is None:
        return field.required(path, detail)
    return field.invalid(path, value, detail)


def _added_container_errors(c: Mapping[str, Any], path: Path, old: Mapping[str, Any],
                            status_names: Mapping[str, str]) -> list[FieldError]:
    errs: list[FieldError] = []
    name = _name(c)
    if name in status_names:
        errs.append(FieldError(
            "Duplicate", str(path.child("name")),
            f"a container with this name is still reported in status.{status_names[name]}; "
            "the name can be reused once that status is gone", name))
    old_spec = _spec(old)
    existing = [e for _, e in _items(old_spec.get("containers"))]
    errs.extend(_security_errors(c, path, existing, _d(old_spec.get("securityContext"))))
    for j, port in _items(c.get("ports")):
        if port.get("hostPort"):
            errs.append(field.forbidden(path.child("ports").index(j).child("hostPort"),
                                        _HOST_PORT))
    res = _d(c.get("resources"))
    for kind in ("limits", "requests"):
        for resource in _d(res.get(kind)):
            if resource not in DYNAMIC_CONTAINER_RESOURCES:
                errs.append(field.not_supported(path.child("resources", kind).key(resource),
                                                resource, list(DYNAMIC_CONTAINER_RESOURCES)))
    return errs


def _container_errors(new: Mapping[str, Any], old: Mapping[str, Any], change: DynamicChange,
                      gates: Mapping[str, bool], supersedes: set[tuple[str, str]]
                      ) -> list[FieldError]:
    errs: list[FieldError] = []
    spec_path = Path("spec")
    if change.changes_init_containers:
        errs.append(field.forbidden(spec_path.child("initContainers"), _INIT_ADDED_REMOVED))
    init_by = _by_name(_spec(new).get("initContainers"))
    for name in change.remounted_init_containers:
        errs.append(field.forbidden(
            spec_path.child("initContainers").index(init_by[name][0]).child("volumeMounts"),
            _INIT_MOUNTS))
    if not change.changes_containers:
        return errs
    if not gate_enabled(gates, DYNAMIC_CONTAINERS):
        errs.append(field.forbidden(spec_path.child("containers"), _CONTAINERS_GATE_OFF))
        return errs
    new_by = _by_name(_spec(new).get("containers"))
    if not new_by:
        errs.append(field.forbidden(spec_path.child("containers"), _LAST_CONTAINER))
        supersedes.add(("Required", str(spec_path.child("containers"))))
    status_names = _status_container_names(old)
    for name in change.added_containers:
        i, c = new_by[name]
        errs.extend(_added_container_errors(c, spec_path.child("containers").index(i), old,
                                            status_names))
    old_qos = resources.qos_class(old, gates=gates)
    new_qos = resources.compute_qos_class(new, gates=gates)
    if new_qos != old_qos:
        errs.append(field.invalid(
            spec_path, new_qos, "Pod QOS Class may not change as a result of adding or "
            f"removing containers (it is {_quoted(old_qos)})"))
    return errs


def _volume_source_kinds(volume: Mapping[str, Any]) -> list[str]:
    return [k for k, x in volume.items() if k != "name" and x is not None]


def _dangling_mounts(new: Mapping[str, Any], change: DynamicChange
                     ) -> list[tuple[Path, str]]:
    """Mounts, in any container of the new pod, of a volume the update removes."""
    removed = set(change.removed_volumes)
    out: list[tuple[Path, str]] = []
    if not removed:
        return out
    spec = _spec(new)
    for key in _CONTAINER_LISTS:
        for i, c in _items(spec.get(key)):
            for j, mount in _items(c.get("volumeMounts")):
                if _name(mount) in removed:
                    out.append((Path("spec", key).index(i).child("volumeMounts").index(j)
                                .child("name"), _name(mount)))
    return out


def _volume_errors(new: Mapping[str, Any], old: Mapping[str, Any], change: DynamicChange,
                   gates: Mapping[str, bool], supersedes: set[tuple[str, str]]
                   ) -> list[FieldError]:
    errs: list[FieldError] = []
    vols_path = Path("spec", "volumes")
    new_spec, old_spec = _spec(new), _spec(old)
    containers_by = _by_name(new_spec.get("containers"))
    if not gate_enabled(gates, DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES):
        if change.added_volumes or change.removed_volumes or change.changed_volumes:
            errs.append(field.forbidden(vols_path, _VOLUMES_GATE_OFF))
        for name in change.remounted_containers:
            errs.append(field.forbidden(Path("spec", "containers").index(containers_by[name][0])
                                        .child("volumeMounts"), _VOLUMES_GATE_OFF))
        return errs

    new_vols, old_vols = _by_name(new_spec.get("volumes")), _by_name(old_spec.get("volumes"))
    status = _status(old)
    volume_statuses = {_name(vs) for _, vs in _items(status.get("volumeStatuses"))}
    mounted_in: dict[str, tuple[str, str]] = {}
    for key in _CONTAINER_STATUS_LISTS:
        for _, cs in _items(status.get(key)):
            for _, mount in _items(cs.get("volumeMounts")):
                mounted_in.setdefault(_name(mount), (_name(cs), key))

    for name in change.removed_volumes:
        kinds = _volume_source_kinds(old_vols[name][1])
        if any(k not in DYNAMIC_VOLUME_SOURCES for k in kinds):
            errs.append(field.forbidden(vols_path,
                                        _VOLUME_REMOVAL_UNSUPPORTED.format(name=_quoted(name))))
    for name, (i, volume) in new_vols.items():
        path = vols_path.index(i)
        if name in change.changed_volumes:
            errs.append(field.forbidden(path, _VOLUME_CHANGED.format(name=_quoted(name))))
            continue
        if name not in change.added_volumes:
            continue
        for kind in _volume_source_kinds(volume):
            if kind not in DYNAMIC_VOLUME_SOURCES:
                errs.append(field.not_supported(path, kind, list(DYNAMIC_VOLUME_SOURCES)))
        if name in volume_statuses:
            errs.append(FieldError(
                "Duplicate", str(path.child("name")),
                "a volume with this name is still reported in status.volumeStatuses; the name "
                "can be reused once its teardown finished", name))
        elif name in mounted_in:
            container, key = mounted_in[name]
            errs.append(FieldError(
                "Duplicate", str(path.child("name")),
                f"a volume with this name is still mounted in container {_quoted(container)} "
                f"(status.{key}[*].volumeMounts); the name can be reused once that container "
                "no longer mounts it", name))

    for mount_path, name in _dangling_mounts(new, change):
        errs.append(field.forbidden(mount_path, _DANGLING.format(name=_quoted(name))))
        supersedes.add(("NotFound", str(mount_path)))

    for name in change.remounted_containers:
        i, c = containers_by[name]
        policy = _d(c.get("dynamicVolumePolicy")).get("restartPolicy")
        if policy in (None, ""):
            hot_plug = gate_enabled(gates, DYNAMIC_VOLUME_HOT_PLUG)
            errs.append(field.required(Path("spec", "containers").index(i)
                                       .child("dynamicVolumePolicy", "restartPolicy"),
                                       _POLICY_REQUIRED if hot_plug else _RESTART_REQUIRED))
        elif policy == DYNAMIC_VOLUME_NOT_REQUIRED:
            old_mounts = [m for _, m in _items(_d(_by_name(old_spec.get("containers"))
                                                  .get(name, (0, {}))[1]).get("volumeMounts"))]
            for j, mount in _items(c.get("volumeMounts")):
                if mount not in old_mounts and mount.get("mountPropagation") not in (None, "",
                                                                                     "None"):
                    errs.append(field.forbidden(
                        Path("spec", "containers").index(i).child("volumeMounts").index(j)
                        .child("mountPropagation"), _LIVE_PROPAGATION))
    return errs


def validate_dynamic_update(new: dict[str, Any], old: dict[str, Any], gates: Mapping[str, bool]
                            ) -> list[FieldError]:
    """Every rule of a `PUT pods/NAME/dynamic` that turns `old` (stored) into `new` (defaulted):
    standard pod validation, the immutability of what `/dynamic` does not open, the state of
    the pod, container additions and removals (KEP-5972) and volume changes (KEP-6395)."""
    change = dynamic_change(new, old)
    # (type, field) of upstream errors that an error of this module replaces
    supersedes: set[tuple[str, str]] = set()
    own: list[FieldError] = []
    if change.is_dynamic:
        own.extend(_state_errors(old))
    own.extend(_container_errors(new, old, change, gates, supersedes))
    if change.changes_volumes:
        own.extend(_volume_errors(new, old, change, gates, supersedes))

    standard = validation.validate_pod_update(new, dynamic_update_base(new, old), gates, old)
    return [e for e in standard if (e.type, e.field) not in supersedes] + own

"""LimitRange semantics for pods: the object's defaulting and validation, and what the
LimitRanger admission plugin does to a pod (defaults in, then min/max/ratio checks), as
upstream's `plugin/pkg/admission/limitranger` and `ValidateLimitRange` do it
(reference/k8s-semantics.md section 7.2), with KEP-6386's pod-level `ephemeral-storage`.

Types `Container` and `Pod` are served (`PersistentVolumeClaim` items are validated as objects
but never applied: ephemera serves no claims).

- `default_limit_range` is `SetDefaults_LimitRangeItem` (type Container: `default` from `max`,
  `defaultRequest` from `default`, then from `min`).
- `validate_limit_range` is `ValidateLimitRange` without the metadata part, with upstream's
  messages (`min value 1Gi is greater than max value 500Mi`, ...). For type Pod, `default` and
  `defaultRequest` are forbidden (``may not be specified when `type` is 'Pod'``) unless
  `PodLevelResourcesEphemeralStorage` is on; then they may hold `ephemeral-storage` only
  (another key: `Unsupported value: "cpu": supported values: "ephemeral-storage"`). An update
  may keep Pod defaults the old object already had (the gate's fields stay valid once used).
- `default_pod_resources` is the mutating half: the `defaultRequest` and `default` of every
  `Container` item fill the missing requests and limits of every container and init container,
  recorded in the `kubernetes.io/limit-ranger` annotation (`LimitRanger plugin set: cpu,
  memory request for container app; ...`). With `PodLevelResourcesEphemeralStorage` on, a
  `Pod` item's `default`/`defaultRequest` for `ephemeral-storage` fill a missing
  `spec.resources.limits`/`requests[ephemeral-storage]` (part `ephemeral-storage limit for
  pod`). A pod-level limit set this way also gets the pod-level request pod defaulting would
  have given it (the aggregate container request, else the limit), since defaulting ran before
  admission. On a `/dynamic` update only added containers are defaulted, and only with the
  resources an added container may set.
- `validate_pod_limits` is the validating half, returning upstream's messages (`minimum
  memory usage per Container is 1Gi, but request is 512Mi`, ...). Type Pod checks the pod's
  effective requests and limits without overhead (pod-level values replace the aggregate, per
  `ephemera.pods.resources`). On an update a resource whose request and limit are both unchanged
  is not checked again, as upstream does for resize.

Pure: no I/O; objects are JSON dicts, gates a mapping of gate name to bool.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, Final

from ephemera.api import field
from ephemera.api import validation as v
from ephemera.api.featuregates import POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE, gate_enabled
from ephemera.api.field import FieldError, Path
from ephemera.api.quantity import MAX_INT64, Quantity
from ephemera.pods import resources
from ephemera.pods.validation import validate_container_resource_name, validate_resource_name

__all__ = [
    "LIMIT_RANGER_ANNOTATION",
    "LIMIT_TYPES",
    "LIMIT_TYPE_CONTAINER",
    "LIMIT_TYPE_POD",
    "LIMIT_TYPE_PVC",
    "POD_DEFAULT_RESOURCES",
    "aggregate_messages",
    "default_limit_range",
    "default_pod_resources",
    "validate_limit_range",
    "validate_pod_limits",
]

LIMIT_TYPE_POD: Final = "Pod"
LIMIT_TYPE_CONTAINER: Final = "Container"
LIMIT_TYPE_PVC: Final = "PersistentVolumeClaim"
LIMIT_TYPES: Final = (LIMIT_TYPE_POD, LIMIT_TYPE_CONTAINER, LIMIT_TYPE_PVC)
LIMIT_RANGER_ANNOTATION: Final = "kubernetes.io/limit-ranger"
_ANNOTATION_PREFIX: Final = "LimitRanger plugin set:"
# KEP-6386: what a type Pod item may default (behind PodLevelResourcesEphemeralStorage).
POD_DEFAULT_RESOURCES: Final = (resources.RESOURCE_EPHEMERAL_STORAGE,)
_POD_FORBIDDEN: Final = "may not be specified when `type` is 'Pod'"
# resource.MaxMilliValue: the largest value whose milli value fits an int64.
_MAX_MILLI_VALUE: Final = MAX_INT64 // 1000


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict):
                yield i, item


def _limit_items(limit_range: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [item for _, item in _items(_d(limit_range.get("spec")).get("limits"))]


# --- the LimitRange object --------------------------------------------------------------


def default_limit_range(limit_range: dict[str, Any]) -> None:
    """`SetDefaults_LimitRangeItem` on every item, in place: for type Container a missing
    `default` comes from `max`, a missing `defaultRequest` from `default`, then from `min`."""
    for item in _limit_items(limit_range):
        if item.get("type") != LIMIT_TYPE_CONTAINER:
            continue
        defaults = item.get("default")
        if not isinstance(defaults, dict):
            defaults = item["default"] = {}
        default_requests = item.get("defaultRequest")
        if not isinstance(default_requests, dict):
            default_requests = item["defaultRequest"] = {}
        for name, value in _d(item.get("max")).items():
            defaults.setdefault(name, value)
        for name, value in defaults.items():
            default_requests.setdefault(name, value)
        for name, value in _d(item.get("min")).items():
            default_requests.setdefault(name, value)


def _validate_type_name(value: Any, path: Path) -> list[FieldError]:
    """`validateLimitRangeTypeName`."""
    text = value if isinstance(value, str) else ""
    errs = v.validate_qualified_name(text, path)
    if errs:
        return errs
    if "/" not in text and text not in LIMIT_TYPES:
        return [field.invalid(path, text, "must be a standard limit type or fully qualified")]
    return []


def _validate_resource_name_for(limit_type: Any, name: str, path: Path) -> list[FieldError]:
    """`validateLimitRangeResourceName`: container resource names for Pod and Container."""
    if limit_type in (LIMIT_TYPE_POD, LIMIT_TYPE_CONTAINER):
        return validate_container_resource_name(name, path)
    return validate_resource_name(name, path)


def _old_pod_defaults_in_use(old: Mapping[str, Any] | None) -> bool:
    return any(item.get("type") == LIMIT_TYPE_POD
               and (_d(item.get("default")) or _d(item.get("defaultRequest")))
               for item in _limit_items(old or {}))


def _ratio_limit_error(ratio: Quantity, lo: Quantity, hi: Quantity) -> str | None:
    """`ratio %s is greater than max/min = %f` when maxLimitRequestRatio exceeds max/min."""
    ratio_value: float = float(ratio.value())
    lo_value, hi_value = lo.value(), hi.value()
    if ratio.value() < _MAX_MILLI_VALUE and lo_value < _MAX_MILLI_VALUE \
            and hi_value < _MAX_MILLI_VALUE:
        ratio_value = ratio.milli_value() / 1000
        lo_value, hi_value = lo.milli_value(), hi.milli_value()
    if lo_value == 0:
        limit = float("inf") if hi_value > 0 else float("nan")
    else:
        limit = hi_value / lo_value
    if ratio_value > limit:
        return f"ratio {ratio} is greater than max/min = {_go_float(limit)}"
    return None


def _go_float(value: float) -> str:
    """Go's `%f`."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:f}"


def validate_limit_range(limit_range: Mapping[str, Any], gates: Mapping[str, bool],
                         old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """`ValidateLimitRange` without the metadata (the registry validates that), after
    `default_limit_range`. `old` is the stored object on an update."""
    errs: list[FieldError] = []
    pod_defaults = (gate_enabled(gates, POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE)
                    or _old_pod_defaults_in_use(old))
    path = Path("spec", "limits")
    seen_types: set[Any] = set()
    for i, item in _items(_d(limit_range.get("spec")).get("limits")):
        ipath = path.index(i)
        limit_type = item.get("type")
        errs.extend(_validate_type_name(limit_type, ipath.child("type")))
        if isinstance(limit_type, str) and limit_type in seen_types:
            errs.append(field.duplicate(ipath.child("type"), limit_type))
        seen_types.add(limit_type)
        errs.extend(_validate_item(item, ipath, pod_defaults))
    return errs


def _validate_item(item: Mapping[str, Any], ipath: Path, pod_defaults: bool
                   ) -> list[FieldError]:
    errs: list[FieldError] = []
    limit_type = item.get("type")
    found: dict[str, dict[str, Quantity]] = {}
    keys: list[str] = []

    def collect(kind: str) -> None:
        for name in _d(item.get(kind)):
            errs.extend(_validate_resource_name_for(limit_type, name,
                                                    ipath.child(kind).key(name)))
            if name not in keys:
                keys.append(name)
        found[kind] = resources.resource_list(item.get(kind))

    collect("max")
    collect("min")
    for kind in ("default", "defaultRequest"):
        if limit_type == LIMIT_TYPE_POD and not pod_defaults:
            if _d(item.get(kind)):
                errs.append(field.forbidden(ipath.child(kind), _POD_FORBIDDEN))
            found[kind] = {}
            continue
        collect(kind)
        if limit_type == LIMIT_TYPE_POD:
            errs.extend(field.not_supported(ipath.child(kind).key(name), name,
                                            list(POD_DEFAULT_RESOURCES))
                        for name in _d(item.get(kind)) if name not in POD_DEFAULT_RESOURCES)
    if limit_type == LIMIT_TYPE_PVC and "storage" not in found["min"] \
            and "storage" not in found["max"]:
        errs.append(field.required(
            ipath.child("limits"),
            "either minimum or maximum storage value is required, but neither was provided"))
    collect("maxLimitRequestRatio")
    errs.extend(_item_consistency(ipath, found, keys))
    return errs


def _item_consistency(ipath: Path, found: Mapping[str, Mapping[str, Quantity]],
                      keys: Sequence[str]) -> list[FieldError]:
    errs: list[FieldError] = []
    one = Quantity.from_int(1)
    for name in keys:
        lo = found["min"].get(name)
        hi = found["max"].get(name)
        limit = found["default"].get(name)
        request = found["defaultRequest"].get(name)
        ratio = found["maxLimitRequestRatio"].get(name)
        if lo is not None and hi is not None and lo > hi:
            errs.append(field.invalid(ipath.child("min").key(name), str(lo),
                                      f"min value {lo} is greater than max value {hi}"))
        if request is not None and lo is not None and lo > request:
            errs.append(field.invalid(
                ipath.child("defaultRequest").key(name), str(request),
                f"min value {lo} is greater than default request value {request}"))
        if request is not None and hi is not None and request > hi:
            errs.append(field.invalid(
                ipath.child("defaultRequest").key(name), str(request),
                f"default request value {request} is greater than max value {hi}"))
        if request is not None and limit is not None and request > limit:
            errs.append(field.invalid(
                ipath.child("defaultRequest").key(name), str(request),
                f"default request value {request} is greater than default limit value {limit}"))
        if limit is not None and lo is not None and lo > limit:
            errs.append(field.invalid(ipath.child("default").key(name), str(lo),
                                      f"min value {lo} is greater than default value {limit}"))
        if limit is not None and hi is not None and limit > hi:
            errs.append(field.invalid(ipath.child("default").key(name), str(hi),
                                      f"default value {limit} is greater than max value {hi}"))
        if ratio is not None and ratio < one:
            errs.append(field.invalid(ipath.child("maxLimitRequestRatio").key(name), str(ratio),
                                      f"ratio {ratio} is less than 1"))
        if ratio is not None and lo is not None and hi is not None:
            message = _ratio_limit_error(ratio, lo, hi)
            if message:
                errs.append(field.invalid(ipath.child("maxLimitRequestRatio").key(name),
                                          str(ratio), message))
        if not resources.is_overcommit_allowed(name) and limit is not None \
                and request is not None and limit != request:
            errs.append(field.invalid(
                ipath.child("defaultRequest").key(name), str(request),
                f"default value {limit} must equal to defaultRequest value {request} in {name}"))
    return errs


# --- mutating: defaults into a pod --------------------------------------------------------


def _container_defaults(limit_range: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`defaultContainerResourceRequirements`: (requests, limits) from the Container items'
    `defaultRequest` and `default` (a later item wins)."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    for item in _limit_items(limit_range):
        if item.get("type") == LIMIT_TYPE_CONTAINER:
            requests.update(_d(item.get("defaultRequest")))
            limits.update(_d(item.get("default")))
    return requests, limits


def _pod_defaults(limit_range: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """KEP-6386: (requests, limits) from the Pod items' `defaultRequest` and `default`, for the
    resources a Pod item may default."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    for item in _limit_items(limit_range):
        if item.get("type") == LIMIT_TYPE_POD:
            for name, value in _d(item.get("defaultRequest")).items():
                if name in POD_DEFAULT_RESOURCES:
                    requests[name] = value
            for name, value in _d(item.get("default")).items():
                if name in POD_DEFAULT_RESOURCES:
                    limits[name] = value
    return requests, limits


def _merge(target: dict[str, Any], key: str, defaults: Mapping[str, Any],
           allowed: Collection[str] | None) -> list[str]:
    """Fill the missing keys of `target[key]` from `defaults`; the names set, sorted."""
    current = target.get(key)
    if not isinstance(current, dict):
        current = target[key] = {}
    added: list[str] = []
    for name, value in defaults.items():
        if allowed is not None and name not in allowed:
            continue
        if name not in current:
            current[name] = value
            added.append(name)
    return sorted(added)


def _merge_container(container: dict[str, Any], requests: Mapping[str, Any],
                     limits: Mapping[str, Any], what: str, allowed: Collection[str] | None,
                     parts: list[str]) -> None:
    """`mergeContainerResources`: limits first, then requests; annotation parts for both."""
    res = container.get("resources")
    if not isinstance(res, dict):
        res = container["resources"] = {}
    set_limits = _merge(res, "limits", limits, allowed)
    set_requests = _merge(res, "requests", requests, allowed)
    name = container.get("name") or ""
    if set_requests:
        parts.append(f"{', '.join(set_requests)} request for {what} {name}")
    if set_limits:
        parts.append(f"{', '.join(set_limits)} limit for {what} {name}")


def _merge_pod_level(pod: dict[str, Any], requests: Mapping[str, Any],
                     limits: Mapping[str, Any], parts: list[str]) -> None:
    spec = pod.get("spec")
    if not isinstance(spec, dict) or (not requests and not limits):
        return
    pod_resources = spec.get("resources")
    created = not isinstance(pod_resources, dict)
    if created:
        pod_resources = spec["resources"] = {}
    assert isinstance(pod_resources, dict)
    set_limits = _merge(pod_resources, "limits", limits, None)
    set_requests = _merge(pod_resources, "requests", requests, None)
    # As pod defaulting does for a pod-level limit (it ran before admission): the request is
    # the containers' aggregate request, else the limit.
    aggregate = resources.aggregate_container_requests(pod)
    pod_requests = pod_resources["requests"]
    for name in set_limits:
        if name not in pod_requests:
            pod_requests[name] = str(aggregate[name]) if name in aggregate \
                else pod_resources["limits"][name]
            set_requests.append(name)
    for key in ("limits", "requests"):
        if not pod_resources.get(key):
            pod_resources.pop(key, None)
    if created and not pod_resources:
        spec.pop("resources", None)
    if set_requests:
        parts.append(f"{', '.join(sorted(set_requests))} request for pod")
    if set_limits:
        parts.append(f"{', '.join(set_limits)} limit for pod")


def _drop_empty(container: dict[str, Any]) -> None:
    res = container.get("resources")
    if isinstance(res, dict):
        for key in ("limits", "requests"):
            if key in res and not res[key]:
                del res[key]


def default_pod_resources(pod: dict[str, Any], limit_ranges: Sequence[Mapping[str, Any]],
                          gates: Mapping[str, bool], *,
                          containers: Collection[str] | None = None,
                          allowed: Collection[str] | None = None) -> bool:
    """LimitRanger's Admit on a pod, in place, for each LimitRange in order (so the first that
    sets a value wins). `containers`: the only container names to default (the added ones of a
    `/dynamic` update; pod-level defaults are then skipped too); `allowed`: the only resource
    names to default. Returns whether anything was set."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return False
    changed = False
    for limit_range in limit_ranges:
        requests, limits = _container_defaults(limit_range)
        parts: list[str] = []
        for key, what in (("containers", "container"), ("initContainers", "init container")):
            for _, container in _items(spec.get(key)):
                if containers is not None and container.get("name") not in containers:
                    continue
                _merge_container(container, requests, limits, what, allowed, parts)
                _drop_empty(container)
        if containers is None and gate_enabled(gates, POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE):
            pod_requests, pod_limits = _pod_defaults(limit_range)
            _merge_pod_level(pod, pod_requests, pod_limits, parts)
        if parts:
            metadata = pod.get("metadata")
            if not isinstance(metadata, dict):
                metadata = pod["metadata"] = {}
            annotations = metadata.get("annotations")
            if not isinstance(annotations, dict):
                annotations = metadata["annotations"] = {}
            annotations[LIMIT_RANGER_ANNOTATION] = f"{_ANNOTATION_PREFIX} {'; '.join(parts)}"
            changed = True
    return changed


# --- validating: a pod against the items --------------------------------------------------


def _compared(request: Quantity | None, limit: Quantity | None, enforced: Quantity
              ) -> tuple[int, int, int]:
    """`requestLimitEnforcedValues`: milli values when none overflows, else whole values."""
    zero = Quantity()
    req, lim = request or zero, limit or zero
    values = (req.value(), lim.value(), enforced.value())
    if all(x <= _MAX_MILLI_VALUE for x in values):
        return req.milli_value(), lim.milli_value(), enforced.milli_value()
    return values


def _min_constraint(limit_type: str, name: str, enforced: Quantity,
                    requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]
                    ) -> str | None:
    req, lim = requests.get(name), limits.get(name)
    observed_req, observed_lim, enforced_value = _compared(req, lim, enforced)
    if req is None:
        return (f"minimum {name} usage per {limit_type} is {enforced}.  "
                "No request is specified")
    if observed_req < enforced_value:
        return f"minimum {name} usage per {limit_type} is {enforced}, but request is {req}"
    if lim is not None and observed_lim < enforced_value:
        return f"minimum {name} usage per {limit_type} is {enforced}, but limit is {lim}"
    return None


def _max_constraint(limit_type: str, name: str, enforced: Quantity,
                    requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]
                    ) -> str | None:
    req, lim = requests.get(name), limits.get(name)
    observed_req, observed_lim, enforced_value = _compared(req, lim, enforced)
    if lim is None:
        return f"maximum {name} usage per {limit_type} is {enforced}.  No limit is specified"
    if observed_lim > enforced_value:
        return f"maximum {name} usage per {limit_type} is {enforced}, but limit is {lim}"
    if req is not None and observed_req > enforced_value:
        return f"maximum {name} usage per {limit_type} is {enforced}, but request is {req}"
    return None


def _ratio_constraint(limit_type: str, name: str, enforced: Quantity,
                      requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]
                      ) -> str | None:
    req, lim = requests.get(name), limits.get(name)
    observed_req, observed_lim, _ = _compared(req, lim, enforced)
    head = f"{name} max limit to request ratio per {limit_type} is {enforced}"
    if req is None or observed_req == 0:
        return f"{head}, but no request is specified or request is 0"
    if lim is None or observed_lim == 0:
        return f"{head}, but no limit is specified or limit is 0"
    observed = observed_lim / observed_req
    shown = observed
    allowed = float(enforced.value())
    if enforced.value() <= _MAX_MILLI_VALUE:
        observed *= 1000
        allowed = float(enforced.milli_value())
    if observed > allowed:
        return f"{head}, but provided ratio is {shown:f}"
    return None


_CONSTRAINTS = (("min", _min_constraint), ("max", _max_constraint),
                ("maxLimitRequestRatio", _ratio_constraint))


def _check(item: Mapping[str, Any], limit_type: str, requests: Mapping[str, Quantity],
           limits: Mapping[str, Quantity], skip: Collection[str]) -> list[str]:
    out: list[str] = []
    for kind, constraint in _CONSTRAINTS:
        for name, enforced in sorted(resources.resource_list(item.get(kind)).items()):
            if name in skip:
                continue
            message = constraint(limit_type, name, enforced, requests, limits)
            if message:
                out.append(message)
    return out


def _unchanged(names: Collection[str], new: tuple[Mapping[str, Quantity], Mapping[str, Quantity]],
               old: tuple[Mapping[str, Quantity], Mapping[str, Quantity]] | None) -> set[str]:
    """The resources whose request and limit both equal the old ones (not checked again)."""
    if old is None:
        return set()
    return {name for name in names
            if new[0].get(name) == old[0].get(name) and new[1].get(name) == old[1].get(name)}


def _item_names(item: Mapping[str, Any]) -> set[str]:
    return {name for kind, _ in _CONSTRAINTS for name in _d(item.get(kind))}


def _containers_by_name(pod: Mapping[str, Any]) -> dict[tuple[str, Any], Mapping[str, Any]]:
    spec = _d(pod.get("spec"))
    return {(key, c.get("name")): c for key in ("containers", "initContainers")
            for _, c in _items(spec.get(key))}


def _validate_against(pod: Mapping[str, Any], limit_range: Mapping[str, Any],
                      gates: Mapping[str, bool], old_pod: Mapping[str, Any] | None) -> list[str]:
    """`PodValidateLimitFunc` for one LimitRange."""
    out: list[str] = []
    spec = _d(pod.get("spec"))
    old_containers = _containers_by_name(old_pod) if old_pod is not None else {}
    for item in _limit_items(limit_range):
        limit_type = item.get("type")
        names = _item_names(item)
        if limit_type == LIMIT_TYPE_CONTAINER:
            for key in ("containers", "initContainers"):
                for _, container in _items(spec.get(key)):
                    own = (resources.container_requests(container),
                           resources.container_limits(container))
                    before = old_containers.get((key, container.get("name")))
                    previous = None if before is None else (
                        resources.container_requests(before), resources.container_limits(before))
                    skip = _unchanged(names, own, previous)
                    out.extend(_check(item, LIMIT_TYPE_CONTAINER, own[0], own[1], skip))
        elif limit_type == LIMIT_TYPE_POD:
            effective = _pod_effective(pod, gates)
            previous = None if old_pod is None else _pod_effective(old_pod, gates)
            skip = _unchanged(names, effective, previous)
            out.extend(_check(item, LIMIT_TYPE_POD, effective[0], effective[1], skip))
    return out


def _pod_effective(pod: Mapping[str, Any], gates: Mapping[str, bool]
                   ) -> tuple[resources.ResourceList, resources.ResourceList]:
    """LimitRanger's `podRequests`/`podLimits`: the sidecar formula, pod-level values
    replacing it per supported key, no overhead."""
    return (resources.pod_requests(pod, gates=gates, exclude_overhead=True),
            resources.pod_limits(pod, gates=gates, exclude_overhead=True))


def validate_pod_limits(pod: Mapping[str, Any], limit_ranges: Sequence[Mapping[str, Any]],
                        gates: Mapping[str, bool], *,
                        old_pod: Mapping[str, Any] | None = None) -> list[str]:
    """LimitRanger's Validate on a pod: every violation of every LimitRange, upstream's
    messages, duplicates removed. `old_pod` on an update (unchanged resources are skipped)."""
    out: list[str] = []
    for limit_range in limit_ranges:
        for message in _validate_against(pod, limit_range, gates, old_pod):
            if message not in out:
                out.append(message)
    return out


def aggregate_messages(messages: Sequence[str]) -> str:
    """apimachinery's `NewAggregate(errs).Error()`: one as is, several as `[e1, e2]`."""
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"

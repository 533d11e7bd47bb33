"""ResourceQuota semantics: what an object costs, which quotas it is charged to, the admission
check with upstream's messages, the usage a quota controller computes, and the ResourceQuota
object's validation (reference/k8s-semantics.md section 7.1; upstream's
`k8s.io/apiserver/pkg/admission/plugin/resourcequota` `CheckRequest`,
`pkg/quota/v1/evaluator/core/pods.go` and `ValidateResourceQuota`).

Evaluators (one per kind of object):
- `PodEvaluator`: `count/pods` is 1 for every pod; a pod that is not terminal (Failed or
  Succeeded) and not past `deletionTimestamp + deletionGracePeriodSeconds` is also charged
  `pods` 1 and its effective requests and limits (`ephemera.pods.resources.pod_requests` /
  `pod_limits`, pod-level aware, overhead included, allocated resources counted):
  `cpu`/`requests.cpu`, `limits.cpu`, likewise `memory`, `ephemeral-storage` and
  `requests.ephemeral-storage` (requests), `limits.ephemeral-storage`, `hugepages-*` and
  `requests.hugepages-*`, `requests.<extended>`. It handles CREATE and UPDATE of the `dynamic`
  (KEP-5972) and `resize` subresources. A quota tracking cpu or memory needs every container
  to set it, unless the pod sets pod-level resources:
  `must specify limits.cpu for: c1; requests.memory for: c1,c2`. ephemeral-storage is
  deliberately not in that set. Scopes: Terminating, NotTerminating, BestEffort,
  NotBestEffort, PriorityClass, CrossNamespacePodAffinity.
- `ObjectCountEvaluator`: `count/<resource>[.<group>]` (and the legacy `configmaps`,
  `secrets`, `resourcequotas`, ...) is 1 per object, charged on CREATE.

Admission (`plan_charges`, then `charge` per quota inside a compare-and-swap of its
`status.used`): a quota matches an object when its `status.hard` names a resource the
evaluator tracks and every scope matches; then, in this order, `failed quota: <q>: <err>`,
`status unknown for quota: <q>, resources: <names>`, `quota usage is negative for
resource(s): <names>`, and on UPDATE the delta `max(new - old, 0)` per resource; zero deltas
charge nothing; `exceeded quota: <q>, requested: <r=v,...>, used: <r=v,...>, limited:
<r=v,...>` (each list sorted, restricted to the exceeded resources). The caller wraps the
message as a 403 (`pods "p1" is forbidden: ...`).

Pure: no I/O. Objects are JSON dicts; quantities `ephemera.api.quantity.Quantity`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

from ephemera.api import field as fields
from ephemera.api import meta
from ephemera.api.featuregates import POD_LEVEL_RESOURCES, gate_enabled
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import go_slice
from ephemera.api.quantity import Quantity, QuantityError, QuantityFormat, quantity_from_json
from ephemera.pods import resources
from ephemera.pods.resources import ResourceList
from ephemera.pods.validation import validate_resource_name, validate_resource_quantity_value

__all__ = [
    "CREATE",
    "POD_OBJECT_COUNT",
    "QUOTA_SCOPES",
    "UPDATE",
    "Charge",
    "Evaluator",
    "ObjectCountEvaluator",
    "PodEvaluator",
    "QuotaRejected",
    "add",
    "charge",
    "compute_used",
    "counted_kinds",
    "evaluator_for",
    "hard_of",
    "object_count_name",
    "plan_charges",
    "pretty_print",
    "release",
    "resource_list_json",
    "scope_selectors",
    "used_of",
    "validate_resource_quota",
]

CREATE: Final = "CREATE"
UPDATE: Final = "UPDATE"

POD_OBJECT_COUNT: Final = "count/pods"

SCOPE_TERMINATING: Final = "Terminating"
SCOPE_NOT_TERMINATING: Final = "NotTerminating"
SCOPE_BEST_EFFORT: Final = "BestEffort"
SCOPE_NOT_BEST_EFFORT: Final = "NotBestEffort"
SCOPE_PRIORITY_CLASS: Final = "PriorityClass"
SCOPE_CROSS_NAMESPACE_POD_AFFINITY: Final = "CrossNamespacePodAffinity"
SCOPE_VOLUME_ATTRIBUTES_CLASS: Final = "VolumeAttributesClass"
QUOTA_SCOPES: Final = (
    SCOPE_TERMINATING, SCOPE_NOT_TERMINATING, SCOPE_BEST_EFFORT, SCOPE_NOT_BEST_EFFORT,
    SCOPE_PRIORITY_CLASS, SCOPE_CROSS_NAMESPACE_POD_AFFINITY, SCOPE_VOLUME_ATTRIBUTES_CLASS,
)

OP_IN: Final = "In"
OP_NOT_IN: Final = "NotIn"
OP_EXISTS: Final = "Exists"
OP_DOES_NOT_EXIST: Final = "DoesNotExist"

_REQUESTS_PREFIX: Final = "requests."
_HUGEPAGES: Final = resources.RESOURCE_HUGEPAGES_PREFIX

# The resources the pod evaluator tracks (podResources).
_POD_RESOURCES: Final = frozenset({
    POD_OBJECT_COUNT, "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory",
    "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage",
    "pods",
})
_POD_RESOURCE_PREFIXES: Final = (_HUGEPAGES, _REQUESTS_PREFIX + _HUGEPAGES)
# A quota on one of these needs every container to set it (a mistake upstream keeps).
_VALIDATION_SET: Final = frozenset({
    "cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory",
})
# helper.IsStandardQuotaResourceName
_STANDARD_QUOTA_RESOURCES: Final = frozenset({
    "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory", "requests.storage",
    "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage",
    "pods", "services", "replicationcontrollers", "resourcequotas", "secrets",
    "persistentvolumeclaims", "configmaps", "services.nodeports", "services.loadbalancers",
})
_POD_OBJECT_COUNT_RESOURCES: Final = frozenset({"pods"})
_POD_COMPUTE_RESOURCES: Final = frozenset({
    "cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory",
})
# Object kinds with a legacy quota name besides `count/<resource>`.
_LEGACY_COUNT_NAMES: Final = {
    ("", "configmaps"): "configmaps", ("", "secrets"): "secrets",
    ("", "resourcequotas"): "resourcequotas", ("", "services"): "services",
    ("", "replicationcontrollers"): "replicationcontrollers",
    ("", "persistentvolumeclaims"): "persistentvolumeclaims",
}
_SCOPE_OPERATOR_EXISTS_ONLY = (
    "must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, "
    "ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, "
    "ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity")


class QuotaRejected(Exception):
    """An object the quotas do not admit; `str()` is upstream's message (without the
    `pods "x" is forbidden: ` the caller puts in front)."""


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# --- resource lists (k8s.io/apiserver/pkg/quota/v1/resources.go) ----------------------------


def add(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """`quota.Add`: every key of either, summed."""
    out: ResourceList = dict(a)
    for name, value in b.items():
        current = out.get(name)
        out[name] = value if current is None else current + value
    return out


def _subtract_non_negative(a: Mapping[str, Quantity], b: Mapping[str, Quantity]
                           ) -> ResourceList:
    """`quota.SubtractWithNonNegativeResult`."""
    zero = Quantity()
    out: ResourceList = {}
    for name, value in a.items():
        diff = value - b[name] if name in b else value
        out[name] = diff if diff.sign() > 0 else zero
    for name in b:
        if name not in out:
            out[name] = zero
    return out


def _mask(rl: Mapping[str, Quantity], names: Collection[str]) -> ResourceList:
    return {name: value for name, value in rl.items() if name in names}


def pretty_print(rl: Mapping[str, Quantity]) -> str:
    """`prettyPrint`: `name=value` sorted by name, joined with commas."""
    return ",".join(f"{name}={rl[name]}" for name in sorted(rl))


def _pretty_names(names: Iterable[str]) -> str:
    return ",".join(sorted(names))


def resource_list_json(rl: Mapping[str, Quantity]) -> dict[str, str]:
    """A ResourceList as JSON, keys sorted."""
    return {name: str(rl[name]) for name in sorted(rl)}


def hard_of(quota: Mapping[str, Any]) -> ResourceList:
    """`status.hard`: what admission enforces (the controller copies it from `spec.hard`)."""
    return resources.resource_list(_d(quota.get("status")).get("hard"))


def used_of(quota: Mapping[str, Any]) -> ResourceList:
    return resources.resource_list(_d(quota.get("status")).get("used"))


def object_count_name(plural: str, group: str = "") -> str:
    """`ObjectCountQuotaResourceNameFor`: `count/<resource>[.<group>]`."""
    return f"count/{plural}.{group}" if group else f"count/{plural}"


# --- scopes -------------------------------------------------------------------------------


def scope_selectors(quota: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`getScopeSelectorsFromQuota`: `spec.scopes` as `Exists` requirements, then
    `spec.scopeSelector.matchExpressions`."""
    spec = _d(quota.get("spec"))
    out: list[dict[str, Any]] = [{"scopeName": s, "operator": OP_EXISTS}
                                 for s in spec.get("scopes") or [] if isinstance(s, str)]
    expressions = _d(spec.get("scopeSelector")).get("matchExpressions")
    if isinstance(expressions, list):
        out.extend(e for e in expressions if isinstance(e, dict))
    return out


def _selector_matches(selector: Mapping[str, Any], key: str, labels: Mapping[str, str]) -> bool:
    """A one-requirement label selector over `labels`."""
    operator = selector.get("operator")
    values = [x for x in selector.get("values") or [] if isinstance(x, str)]
    if operator == OP_IN:
        return key in labels and labels[key] in values
    if operator == OP_NOT_IN:
        return key not in labels or labels[key] not in values
    if operator == OP_EXISTS:
        return key in labels
    if operator == OP_DOES_NOT_EXIST:
        return key not in labels
    return False


def _cross_namespace_terms(terms: Any) -> bool:
    for term in terms or []:
        if not isinstance(term, dict):
            continue
        inner = _d(term.get("podAffinityTerm")) or term
        if inner.get("namespaces") or inner.get("namespaceSelector") is not None:
            return True
    return False


def _uses_cross_namespace_pod_affinity(pod: Mapping[str, Any]) -> bool:
    affinity = _d(_d(pod.get("spec")).get("affinity"))
    for key in ("podAffinity", "podAntiAffinity"):
        section = _d(affinity.get(key))
        for terms in ("requiredDuringSchedulingIgnoredDuringExecution",
                      "preferredDuringSchedulingIgnoredDuringExecution"):
            if _cross_namespace_terms(section.get(terms)):
                return True
    return False


def is_terminating(pod: Mapping[str, Any]) -> bool:
    """`IsTerminating`: `activeDeadlineSeconds >= 0` (a scope, not the deletion state)."""
    deadline = _d(pod.get("spec")).get("activeDeadlineSeconds")
    return isinstance(deadline, int) and not isinstance(deadline, bool) and deadline >= 0


# --- evaluators ---------------------------------------------------------------------------


class Evaluator(Protocol):
    """What quota needs to know about one kind of object (upstream's `quota.Evaluator`)."""

    def handles(self, operation: str, subresource: str, obj: Mapping[str, Any],
                old: Mapping[str, Any] | None) -> bool: ...

    def matching_resources(self, names: Iterable[str]) -> list[str]: ...

    def matches_scope(self, selector: Mapping[str, Any], obj: Mapping[str, Any]) -> bool: ...

    def constraints(self, required: Collection[str], obj: Mapping[str, Any]) -> str | None: ...

    def usage(self, obj: Mapping[str, Any]) -> ResourceList: ...


def _compute_usage(requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]
                   ) -> ResourceList:
    """`podComputeUsageHelper`."""
    result: ResourceList = {"pods": Quantity.from_int(1)}
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in requests:
            result[name] = requests[name]
            result[_REQUESTS_PREFIX + name] = requests[name]
        if name in limits:
            result["limits." + name] = limits[name]
    for name, value in requests.items():
        if name.startswith(_HUGEPAGES):
            result[name] = value
            result[_REQUESTS_PREFIX + name] = value
        elif not resources.is_native_resource(name):
            result[_REQUESTS_PREFIX + name] = value
    return result


def _is_extended_for_quota(name: str) -> bool:
    return not resources.is_native_resource(name) and name.startswith(_REQUESTS_PREFIX)


@dataclass(frozen=True)
class PodEvaluator:
    """Pods (`pkg/quota/v1/evaluator/core/pods.go`). `now` decides whether a deleted pod's
    grace period is over (None: the current time)."""

    gates: Mapping[str, bool] = field(default_factory=dict)
    now: datetime | None = None

    def handles(self, operation: str, subresource: str, obj: Mapping[str, Any],
                old: Mapping[str, Any] | None) -> bool:
        if subresource == "":
            if operation == UPDATE and old is not None:
                return is_terminating(old) != is_terminating(obj)
            return operation == CREATE
        if subresource in ("dynamic", "resize"):
            return operation == UPDATE
        return False

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        out: list[str] = []
        for name in names:
            if name in _POD_RESOURCES or name.startswith(_POD_RESOURCE_PREFIXES) \
                    or _is_extended_for_quota(name):
                out.append(name)
        return out

    def matches_scope(self, selector: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
        scope = selector.get("scopeName")
        if scope == SCOPE_TERMINATING:
            return is_terminating(obj)
        if scope == SCOPE_NOT_TERMINATING:
            return not is_terminating(obj)
        if scope == SCOPE_BEST_EFFORT:
            return self._best_effort(obj)
        if scope == SCOPE_NOT_BEST_EFFORT:
            return not self._best_effort(obj)
        if scope == SCOPE_PRIORITY_CLASS:
            name = _d(obj.get("spec")).get("priorityClassName") or ""
            if selector.get("operator") == OP_EXISTS:
                return bool(name)
            labels = {SCOPE_PRIORITY_CLASS: name} if name else {}
            return _selector_matches(selector, SCOPE_PRIORITY_CLASS, labels)
        if scope == SCOPE_CROSS_NAMESPACE_POD_AFFINITY:
            return _uses_cross_namespace_pod_affinity(obj)
        return False

    def _best_effort(self, pod: Mapping[str, Any]) -> bool:
        return resources.qos_class(pod, gates=self.gates) == resources.QOS_BEST_EFFORT

    def constraints(self, required: Collection[str], obj: Mapping[str, Any]) -> str | None:
        """`Constraints`: with pod-level resources set, nothing is required of containers."""
        if gate_enabled(self.gates, POD_LEVEL_RESOURCES) and \
                resources.is_pod_level_resources_set(obj, self.gates):
            return None
        required_set = set(required) & _VALIDATION_SET
        if not required_set:
            return None
        missing: dict[str, set[str]] = {}
        spec = _d(obj.get("spec"))
        for key in ("containers", "initContainers"):
            for container in spec.get(key) or []:
                if not isinstance(container, dict):
                    continue
                have = set(_compute_usage(resources.container_requests(container),
                                          resources.container_limits(container)))
                for name in required_set - have:
                    missing.setdefault(name, set()).add(str(container.get("name") or ""))
        if not missing:
            return None
        parts = [f"{name} for: {','.join(sorted(missing[name]))}" for name in sorted(missing)]
        return "must specify " + "; ".join(parts)

    def charged(self, pod: Mapping[str, Any]) -> bool:
        """`QuotaV1Pod`: not terminal, and not past its deletion grace period."""
        phase = _d(pod.get("status")).get("phase")
        if phase in ("Failed", "Succeeded"):
            return False
        md = _d(pod.get("metadata"))
        stamp, grace = md.get("deletionTimestamp"), md.get("deletionGracePeriodSeconds")
        if isinstance(stamp, str) and isinstance(grace, int) and not isinstance(grace, bool):
            try:
                deadline = meta.parse_rfc3339(stamp) + timedelta(seconds=grace)
            except ValueError:
                return True
            if (self.now or meta.now()) > deadline:
                return False
        return True

    def usage(self, obj: Mapping[str, Any]) -> ResourceList:
        """`PodUsageFunc`."""
        result: ResourceList = {POD_OBJECT_COUNT: Quantity.from_int(1)}
        if not self.charged(obj):
            return result
        requests = resources.pod_requests(obj, gates=self.gates, use_status_resources=True)
        limits = resources.pod_limits(obj, gates=self.gates, use_status_resources=True)
        return add(result, _compute_usage(requests, limits))


@dataclass(frozen=True)
class ObjectCountEvaluator:
    """Any other namespaced kind: `count/<resource>` (and a legacy name) per object."""

    plural: str
    group: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        legacy = _LEGACY_COUNT_NAMES.get((self.group, self.plural))
        count = object_count_name(self.plural, self.group)
        return (count, legacy) if legacy else (count,)

    def handles(self, operation: str, subresource: str, obj: Mapping[str, Any],
                old: Mapping[str, Any] | None) -> bool:
        return operation == CREATE and subresource == ""

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        own = self.names
        return [name for name in names if name in own]

    def matches_scope(self, selector: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
        return False

    def constraints(self, required: Collection[str], obj: Mapping[str, Any]) -> str | None:
        return None

    def usage(self, obj: Mapping[str, Any]) -> ResourceList:
        return {name: Quantity.from_int(1) for name in self.names}


def evaluator_for(plural: str, group: str = "", gates: Mapping[str, bool] | None = None,
                  now: datetime | None = None) -> Evaluator:
    if plural == "pods" and not group:
        return PodEvaluator(dict(gates or {}), now)
    return ObjectCountEvaluator(plural, group)


# --- admission ----------------------------------------------------------------------------


def _matches(quota: Mapping[str, Any], obj: Mapping[str, Any], evaluator: Evaluator) -> bool:
    """`generic.Matches`: a tracked resource in `status.hard`, and every scope matches."""
    if not evaluator.matching_resources(hard_of(quota)):
        return False
    return all(evaluator.matches_scope(s, obj) for s in scope_selectors(quota))


@dataclass(frozen=True)
class Charge:
    """What one quota is charged for an object: the non-zero delta of the resources in its
    `status.hard`."""

    quota: str
    usage: ResourceList


def _quota_name(quota: Mapping[str, Any]) -> str:
    return str(_d(quota.get("metadata")).get("name") or "")


def plan_charges(quotas: Sequence[Mapping[str, Any]], evaluator: Evaluator, operation: str,
                 obj: Mapping[str, Any], old: Mapping[str, Any] | None = None,
                 subresource: str = "") -> list[Charge]:
    """`CheckRequest` against the quotas as read: the charges to make, one per quota that
    matches and has a non-zero delta, each already checked against that quota's status.
    Raises `QuotaRejected` with upstream's message."""
    if not evaluator.handles(operation, subresource, obj, old):
        return []
    interesting: list[Mapping[str, Any]] = []
    for quota in quotas:
        if not _matches(quota, obj, evaluator):
            continue
        hard = hard_of(quota)
        restricted = evaluator.matching_resources(hard)
        failure = evaluator.constraints(restricted, obj)
        if failure:
            raise QuotaRejected(f"failed quota: {_quota_name(quota)}: {failure}")
        used = used_of(quota)
        if any(name in restricted and name not in used for name in hard):
            raise QuotaRejected(f"status unknown for quota: {_quota_name(quota)}, "
                                f"resources: {_pretty_names(restricted)}")
        interesting.append(quota)
    if not interesting:
        return []
    delta = evaluator.usage(obj)
    negative = [name for name, value in delta.items() if value.sign() < 0]
    if negative:
        raise QuotaRejected(
            f"quota usage is negative for resource(s): {_pretty_names(negative)}")
    if operation == UPDATE and old is not None and _d(old.get("metadata")).get("resourceVersion"):
        delta = _subtract_non_negative(delta, evaluator.usage(old))
    delta = {name: value for name, value in delta.items() if not value.is_zero()}
    if not delta:
        return []
    charges: list[Charge] = []
    for quota in interesting:
        requested = _mask(delta, hard_of(quota))
        if not requested:
            continue
        item = Charge(_quota_name(quota), requested)
        charge(quota, item)
        charges.append(item)
    return charges


def charge(quota: Mapping[str, Any], item: Charge) -> dict[str, str]:
    """`status.used` of `quota` after `item`, checked against its `status.hard`; raises
    `QuotaRejected` (`exceeded quota: ...`) when a resource would exceed it."""
    hard = hard_of(quota)
    used = used_of(quota)
    requested = _mask(item.usage, hard)
    new_used = add(used, requested)
    exceeded = sorted(name for name in requested
                      if name in hard and new_used[name] > hard[name])
    if exceeded:
        raise QuotaRejected(
            f"exceeded quota: {_quota_name(quota)}, "
            f"requested: {pretty_print(_mask(requested, exceeded))}, "
            f"used: {pretty_print(_mask(used, exceeded))}, "
            f"limited: {pretty_print(_mask(hard, exceeded))}")
    return resource_list_json(new_used)


def release(quota: Mapping[str, Any], item: Charge) -> dict[str, str]:
    """`status.used` of `quota` with `item` taken back (not below zero): undoes a charge whose
    sibling charge on another quota failed."""
    used = used_of(quota)
    return resource_list_json({**used, **_subtract_non_negative(_mask(used, item.usage),
                                                                item.usage)})


# --- the controller's view ------------------------------------------------------------------


def compute_used(quota: Mapping[str, Any], objects: Mapping[tuple[str, str], Sequence[
        Mapping[str, Any]]], gates: Mapping[str, bool] | None = None,
        now: datetime | None = None) -> dict[str, Any]:
    """The status a quota controller writes (`syncResourceQuota`): `hard` = `spec.hard`, and
    `used` for every hard resource some evaluator tracks, summed over the namespace's objects
    (`objects`: (group, plural) -> the objects of the quota's namespace) that match the
    quota's scopes; a used value the controller cannot compute is kept from the old status."""
    spec_hard = resources.resource_list(_d(quota.get("spec")).get("hard"))
    old_used = used_of(quota)
    used: ResourceList = dict(old_used)
    selectors = scope_selectors(quota)
    for (group, plural), items in objects.items():
        evaluator = evaluator_for(plural, group, gates, now)
        tracked = evaluator.matching_resources(spec_hard)
        if not tracked:
            continue
        total: ResourceList = {name: Quantity(0, 0, QuantityFormat.DECIMAL_SI)
                               for name in tracked}
        for obj in items:
            if all(evaluator.matches_scope(s, obj) for s in selectors):
                total = add(total, _mask(evaluator.usage(obj), tracked))
        used.update(total)
    used = _mask(used, spec_hard)
    return {"hard": resource_list_json(spec_hard), "used": resource_list_json(used)}


def counted_kinds(quota: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (group, plural) kinds whose objects the quota's `spec.hard` counts: `("", "pods")`
    for any pod resource, and each `count/<resource>[.<group>]` or legacy count name."""
    out: list[tuple[str, str]] = []
    names = list(_d(_d(quota.get("spec")).get("hard")))
    if PodEvaluator().matching_resources(names):
        out.append(("", "pods"))
    legacy = {name: kind for kind, name in _LEGACY_COUNT_NAMES.items()}
    for name in names:
        kind: tuple[str, str] | None = legacy.get(name)
        if name.startswith("count/"):
            plural, _, group = name[len("count/"):].partition(".")
            kind = (group, plural) if plural else None
        if kind is not None and kind not in out:
            out.append(kind)
    return out


# --- the ResourceQuota object ---------------------------------------------------------------


def _is_standard_quota_resource(name: str) -> bool:
    return (name in _STANDARD_QUOTA_RESOURCES or name.startswith(_HUGEPAGES)
            or name.startswith(_REQUESTS_PREFIX + _HUGEPAGES))


def _validate_quota_resource_name(name: str, path: Path) -> list[FieldError]:
    """`ValidateResourceQuotaResourceName`."""
    errs = validate_resource_name(name, path)
    if "/" not in name and not _is_standard_quota_resource(name):
        errs.append(fields.invalid(path, name, "must be a standard resource for quota"))
    return errs


def _validate_resource_list(raw: Any, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    for name, value in _d(raw).items():
        rpath = path.key(name)
        errs.extend(_validate_quota_resource_name(name, rpath))
        try:
            quantity = quantity_from_json(value)
        except (QuantityError, TypeError) as err:
            errs.append(fields.invalid(rpath, value, str(err)))
            continue
        errs.extend(validate_resource_quantity_value(name, quantity, rpath))
    return errs


def _scope_valid_for(scope: Any, name: str) -> bool:
    """`IsResourceQuotaScopeValidForResource`."""
    if scope in (SCOPE_TERMINATING, SCOPE_NOT_TERMINATING, SCOPE_NOT_BEST_EFFORT,
                 SCOPE_PRIORITY_CLASS, SCOPE_CROSS_NAMESPACE_POD_AFFINITY,
                 SCOPE_VOLUME_ATTRIBUTES_CLASS):
        return name in _POD_OBJECT_COUNT_RESOURCES or name in _POD_COMPUTE_RESOURCES
    if scope == SCOPE_BEST_EFFORT:
        return name in _POD_OBJECT_COUNT_RESOURCES
    return True


_CONFLICTING_SCOPES = ((SCOPE_BEST_EFFORT, SCOPE_NOT_BEST_EFFORT),
                       (SCOPE_TERMINATING, SCOPE_NOT_TERMINATING))


def _validate_scopes(spec: Mapping[str, Any], path: Path) -> list[FieldError]:
    scopes = spec.get("scopes")
    if not isinstance(scopes, list) or not scopes:
        return []
    errs: list[FieldError] = []
    hard = sorted(_d(spec.get("hard")))
    spath = path.child("scopes")
    shown = go_slice([str(s) for s in scopes], "core.ResourceQuotaScope")
    for scope in scopes:
        if scope not in QUOTA_SCOPES:
            errs.append(fields.invalid(spath, shown, "unsupported scope"))
        for name in hard:
            if _is_standard_quota_resource(name) and not _scope_valid_for(scope, name):
                errs.append(fields.invalid(spath, shown, "unsupported scope applied to resource"))
    for pair in _CONFLICTING_SCOPES:
        if all(s in scopes for s in pair):
            errs.append(fields.invalid(spath, shown, "conflicting scopes"))
    return errs


def _validate_scope_selector(spec: Mapping[str, Any], path: Path) -> list[FieldError]:
    selector = spec.get("scopeSelector")
    if not isinstance(selector, dict):
        return []
    errs: list[FieldError] = []
    hard = sorted(_d(spec.get("hard")))
    epath = path.child("scopeSelector", "matchExpressions")
    seen: set[Any] = set()
    for req in selector.get("matchExpressions") or []:
        if not isinstance(req, dict):
            continue
        scope, operator = req.get("scopeName"), req.get("operator")
        values = req.get("values") or []
        if scope not in QUOTA_SCOPES:
            errs.append(fields.invalid(epath.child("scopeName"), scope, "unsupported scope"))
        for name in hard:
            if _is_standard_quota_resource(name) and not _scope_valid_for(scope, name):
                errs.append(fields.invalid(epath, selector,
                                           "unsupported scope applied to resource"))
        if scope in (SCOPE_BEST_EFFORT, SCOPE_NOT_BEST_EFFORT, SCOPE_TERMINATING,
                     SCOPE_NOT_TERMINATING, SCOPE_CROSS_NAMESPACE_POD_AFFINITY) \
                and operator != OP_EXISTS:
            errs.append(fields.invalid(epath.child("operator"), operator,
                                       _SCOPE_OPERATOR_EXISTS_ONLY))
        if operator in (OP_IN, OP_NOT_IN):
            if not values:
                errs.append(fields.required(
                    epath.child("values"),
                    "must be at least one value when `operator` is 'In' or 'NotIn' for scope "
                    "selector"))
        elif operator in (OP_EXISTS, OP_DOES_NOT_EXIST):
            if values:
                errs.append(fields.invalid(
                    epath.child("values"), values,
                    "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope "
                    "selector"))
        else:
            errs.append(fields.invalid(epath.child("operator"), operator,
                                       "not a valid selector operator"))
        seen.add(scope)
    for pair in _CONFLICTING_SCOPES:
        if all(s in seen for s in pair):
            errs.append(fields.invalid(epath, selector, "conflicting scopes"))
    return errs


def validate_resource_quota(quota: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateResourceQuota` without the metadata: `spec.hard` names and quantities
    (standard quota resources or fully qualified; not negative; whole numbers for counted
    resources), scopes and the scope selector, and `status.hard`/`status.used`."""
    spec = _d(quota.get("spec"))
    status = _d(quota.get("status"))
    path = Path("spec")
    errs = _validate_resource_list(spec.get("hard"), path.child("hard"))
    errs.extend(_validate_scopes(spec, path))
    errs.extend(_validate_scope_selector(spec, path))
    errs.extend(_validate_resource_list(status.get("hard"), Path("status", "hard")))
    errs.extend(_validate_resource_list(status.get("used"), Path("status", "used")))
    return errs

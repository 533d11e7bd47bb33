"""The workload kinds' API rules: apps/v1 Deployment, ReplicaSet, StatefulSet, DaemonSet,
ControllerRevision and core/v1 ReplicationController, and the autoscaling/v1 Scale of their
`scale` subresource. Upstream's v1 defaults (`SetDefaults_Deployment` & co.), validation
(`pkg/apis/apps/validation`, core's `ValidateReplicationController`) with its messages, and
the update rules of their REST strategies (an immutable selector, the generation bumped on a
spec change). The pod template is defaulted and validated with the pod rules of
`ephemera.pods` (`default_pod_template`, `validate_pod_template_spec`), both KEPs' fields
included; pure."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from ephemera.api import field, meta
from ephemera.api import labelselector as ls
from ephemera.api import validation as v
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import GoText, go_quote, go_string_map
from ephemera.pods.defaults import default_pod_template
from ephemera.pods.validation import validate_pod_template_spec

DEPLOYMENTS, REPLICASETS, STATEFULSETS = "deployments", "replicasets", "statefulsets"
DAEMONSETS, CONTROLLERREVISIONS = "daemonsets", "controllerrevisions"
REPLICATIONCONTROLLERS = "replicationcontrollers"

# apps/v1 keeps a DaemonSet's template generation (internal `spec.templateGeneration`) in
# this annotation; the server sets it, and bumps it with the template.
DAEMONSET_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
DEFAULT_MAX_SURGE = DEFAULT_MAX_UNAVAILABLE = "25%"
DEFAULT_REVISION_HISTORY_LIMIT = 10
DEFAULT_PROGRESS_DEADLINE_SECONDS = 600

_KIND_WORD = {DEPLOYMENTS: "deployment", REPLICASETS: "deployment",  # sic: upstream's RS text
              STATEFULSETS: "statefulset", DAEMONSETS: "daemonset"}
_TEMPLATE_KIND = {DEPLOYMENTS: "ReplicaSet", REPLICASETS: "ReplicaSet",
                  DAEMONSETS: "DaemonSet", STATEFULSETS: "StatefulSet",
                  REPLICATIONCONTROLLERS: "ReplicationController"}

_PERCENT = re.compile(r"[0-9]+%")
_PERCENT_ERROR = meta.regex_error("a valid percent string must be a numeric string followed "
                                  "by an ending '%'", "[0-9]+%", "1%", "93%")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    return _d(obj.get("spec"))


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


# --- defaults -------------------------------------------------------------------------------


def default_workload(plural: str, obj: dict[str, Any], gates: Mapping[str, bool]) -> None:
    """The kind's v1 defaults, in place, template included."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        if plural == CONTROLLERREVISIONS:
            return
        spec = obj["spec"] = {}
    if plural == CONTROLLERREVISIONS:
        return
    if plural == REPLICATIONCONTROLLERS:
        labels = _d(_d(spec.get("template")).get("metadata")).get("labels")
        if isinstance(labels, dict) and labels:
            if not spec.get("selector"):
                spec["selector"] = dict(labels)
            md = meta.ensure_metadata(obj)
            if not md.get("labels"):
                md["labels"] = dict(labels)
    if plural != DAEMONSETS and spec.get("replicas") is None:
        spec["replicas"] = 1
    if plural == DEPLOYMENTS:
        strategy = spec.get("strategy")
        if not isinstance(strategy, dict):
            strategy = spec["strategy"] = {}
        if not strategy.get("type"):
            strategy["type"] = "RollingUpdate"
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.get("rollingUpdate")
            if not isinstance(rolling, dict):
                rolling = strategy["rollingUpdate"] = {}
            rolling.setdefault("maxUnavailable", DEFAULT_MAX_UNAVAILABLE)
            rolling.setdefault("maxSurge", DEFAULT_MAX_SURGE)
            if rolling["maxUnavailable"] is None:
                rolling["maxUnavailable"] = DEFAULT_MAX_UNAVAILABLE
            if rolling["maxSurge"] is None:
                rolling["maxSurge"] = DEFAULT_MAX_SURGE
        if spec.get("progressDeadlineSeconds") is None:
            spec["progressDeadlineSeconds"] = DEFAULT_PROGRESS_DEADLINE_SECONDS
    if plural == STATEFULSETS:
        if not spec.get("podManagementPolicy"):
            spec["podManagementPolicy"] = "OrderedReady"
        strategy = spec.get("updateStrategy")
        if not isinstance(strategy, dict):
            strategy = spec["updateStrategy"] = {}
        if not strategy.get("type"):
            strategy["type"] = "RollingUpdate"
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.get("rollingUpdate")
            if not isinstance(rolling, dict):
                rolling = strategy["rollingUpdate"] = {}
            if rolling.get("partition") is None:
                rolling["partition"] = 0
        policy = spec.get("persistentVolumeClaimRetentionPolicy")
        if not isinstance(policy, dict):
            policy = spec["persistentVolumeClaimRetentionPolicy"] = {}
        policy.setdefault("whenDeleted", "Retain")
        policy.setdefault("whenScaled", "Retain")
    if plural == DAEMONSETS:
        strategy = spec.get("updateStrategy")
        if not isinstance(strategy, dict):
            strategy = spec["updateStrategy"] = {}
        if not strategy.get("type"):
            strategy["type"] = "RollingUpdate"
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.get("rollingUpdate")
            if not isinstance(rolling, dict):
                rolling = strategy["rollingUpdate"] = {}
            if rolling.get("maxUnavailable") is None:
                rolling["maxUnavailable"] = 1
            if rolling.get("maxSurge") is None:
                rolling["maxSurge"] = 0
    if plural in (DEPLOYMENTS, STATEFULSETS, DAEMONSETS) and \
            spec.get("revisionHistoryLimit") is None:
        spec["revisionHistoryLimit"] = DEFAULT_REVISION_HISTORY_LIMIT
    if plural == REPLICATIONCONTROLLERS:  # a pointer: a missing template stays unset
        template = spec.get("template")
        if isinstance(template, dict):
            default_pod_template(template, gates)
        return
    # the apps kinds' template is a struct value: missing or null, it is the zero template,
    # defaulted like any other (restartPolicy Always, ...), which validation then judges
    default_pod_template(meta.child_object(spec, "template"), gates)


# --- int or percent ---------------------------------------------------------------------------


def go_int_or_string(value: Any) -> GoText:
    """Go's `%#v` of an `intstr.IntOrString`."""
    if isinstance(value, str):
        return GoText(f"intstr.IntOrString{{Type:1, IntVal:0, StrVal:{go_quote(value)}}}")
    return GoText(f"intstr.IntOrString{{Type:0, IntVal:{_int(value)}, StrVal:\"\"}}")


def _int_or_percent_value(value: Any) -> int:
    """getIntOrPercentValue: the number of a valid percent, else the integer (0 for a
    string that is no percent, as IntValue() of an unparsable string)."""
    if isinstance(value, str):
        if _PERCENT.fullmatch(value):
            return int(value[:-1])
        try:
            return int(value)
        except ValueError:
            return 0
    return _int(value)


def _validate_positive_int_or_percent(value: Any, path: Path) -> list[FieldError]:
    if isinstance(value, str):
        return [] if _PERCENT.fullmatch(value) else [
            field.invalid(path, go_int_or_string(value), _PERCENT_ERROR)]
    return [field.invalid(path, go_int_or_string(value), v.IS_NEGATIVE)] \
        if _int(value) < 0 else []


def _not_more_than_100_percent(value: Any, path: Path) -> list[FieldError]:
    if isinstance(value, str) and _PERCENT.fullmatch(value) and int(value[:-1]) > 100:
        return [field.invalid(path, go_int_or_string(value), "must not be greater than 100%")]
    return []


def scaled_value(value: Any, total: int, round_up: bool) -> int:
    """`intstr.GetScaledValueFromIntOrPercent`: an integer as it is, a percent of `total`
    rounded up or down."""
    if isinstance(value, str) and _PERCENT.fullmatch(value):
        scaled = int(value[:-1]) * total
        return -(-scaled // 100) if round_up else scaled // 100
    return _int(value)


# --- validation -------------------------------------------------------------------------------


def _go_selector(selector: Any) -> GoText:
    return ls.go_label_selector(selector)


def _validate_selector(plural: str, spec: Mapping[str, Any], path: Path) -> list[FieldError]:
    """The selector rules shared by the apps kinds (required, valid, not empty)."""
    selector = spec.get("selector")
    errs: list[FieldError] = []
    if not isinstance(selector, dict):
        if plural != DAEMONSETS:
            errs.append(field.required(path.child("selector")))
        return errs
    errs.extend(ls.validate_label_selector(selector, path.child("selector")))
    if ls.is_empty(selector):
        errs.append(field.invalid(path.child("selector"), _go_selector(selector),
                                  f"empty selector is invalid for {_KIND_WORD[plural]}"))
    return errs


def _template_errors(plural: str, spec: Mapping[str, Any], path: Path,
                     gates: Mapping[str, bool], old_template: Mapping[str, Any] | None,
                     selector_matches: bool | None) -> list[FieldError]:
    """ValidatePodTemplateSpecForReplicaSet and its siblings: the selector matches the
    template's labels, the template is a valid pod template that restarts `Always` and has
    no active deadline."""
    template = spec.get("template")
    tpath = path.child("template")
    if not isinstance(template, dict):
        if plural == REPLICATIONCONTROLLERS:  # a pointer; the apps kinds' is a struct value
            return [field.required(tpath)]
        template = {}
    errs: list[FieldError] = []
    if selector_matches is False:
        labels = _d(template.get("metadata")).get("labels")
        errs.append(field.invalid(tpath.child("metadata", "labels"), _go_labels(labels),
                                  "`selector` does not match template `labels`"))
    if plural == STATEFULSETS:
        md = _d(template.get("metadata"))
        errs.extend(v.validate_labels(md.get("labels"), tpath.child("labels")))
        errs.extend(v.validate_annotations(md.get("annotations"), tpath.child("annotations")))
    else:
        errs.extend(validate_pod_template_spec(template, tpath, gates, old_template))
    tspec = _spec(template)
    policy = tspec.get("restartPolicy")
    if policy != "Always":
        errs.append(field.not_supported(tpath.child("spec", "restartPolicy"), policy or "",
                                        ["Always"]))
    if tspec.get("activeDeadlineSeconds") is not None:
        errs.append(field.forbidden(tpath.child("spec", "activeDeadlineSeconds"),
                                    f"activeDeadlineSeconds in {_TEMPLATE_KIND[plural]} is not "
                                    "Supported"))
    return errs


def _go_labels(labels: Any) -> GoText:
    """Go's `%#v` of a template's labels: `map[string]string(nil)` when there are none (a
    nil map: no `labels`, or `null`), else the map."""
    if not isinstance(labels, dict):
        return GoText("map[string]string(nil)")
    return go_string_map({str(k): str(x) for k, x in labels.items()})


def _selector_matches(spec: Mapping[str, Any], plural: str = "") -> bool | None:
    """None when there is nothing to check (no or an unconvertible selector, or an empty
    one), else whether the template's labels match. A DaemonSet's missing selector is
    checked too, as upstream's `LabelSelectorAsSelector(nil)` is a selector that matches
    nothing."""
    selector = spec.get("selector")
    if plural == DAEMONSETS and selector is None:
        return False
    if not isinstance(selector, dict) or ls.is_empty(selector):
        return None
    sel = ls.as_selector(selector)
    if sel is None:
        return None
    labels = _d(_d(_d(spec.get("template")).get("metadata")).get("labels"))
    return sel.matches({str(k): str(x) for k, x in labels.items()})


def _nonnegative(spec: Mapping[str, Any], key: str, path: Path) -> list[FieldError]:
    value = spec.get(key)
    if value is None:
        return []
    return v.validate_nonnegative_field(_int(value), path.child(key))


def _validate_deployment_strategy(strategy: Any, path: Path) -> list[FieldError]:
    strategy = _d(strategy)
    kind = strategy.get("type")
    rolling = strategy.get("rollingUpdate")
    if kind == "Recreate":
        if rolling is not None:
            return [field.forbidden(path.child("rollingUpdate"),
                                    "may not be specified when strategy `type` is 'Recreate'")]
        return []
    if kind == "RollingUpdate":
        if not isinstance(rolling, dict):
            return [field.required(path.child("rollingUpdate"),
                                   "this should be defaulted and never be nil")]
        rpath = path.child("rollingUpdate")
        unavailable, surge = rolling.get("maxUnavailable"), rolling.get("maxSurge")
        errs = _validate_positive_int_or_percent(unavailable, rpath.child("maxUnavailable"))
        errs.extend(_validate_positive_int_or_percent(surge, rpath.child("maxSurge")))
        if _int_or_percent_value(unavailable) == 0 and _int_or_percent_value(surge) == 0:
            errs.append(field.invalid(rpath.child("maxUnavailable"),
                                      go_int_or_string(unavailable),
                                      "may not be 0 when `maxSurge` is 0"))
        errs.extend(_not_more_than_100_percent(unavailable, rpath.child("maxUnavailable")))
        return errs
    return [field.not_supported(path, GoText(_go_strategy(strategy)),
                                ["Recreate", "RollingUpdate"])]


def _go_strategy(strategy: Mapping[str, Any]) -> str:
    return (f"apps.DeploymentStrategy{{Type:{go_quote(str(strategy.get('type') or ''))}, "
            f"RollingUpdate:(*apps.RollingUpdateDeployment)(nil)}}")


def _validate_statefulset_spec(spec: Mapping[str, Any], path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    policy = spec.get("podManagementPolicy")
    if not policy:
        errs.append(field.required(path.child("podManagementPolicy")))
    elif policy not in ("OrderedReady", "Parallel"):
        errs.append(field.invalid(path.child("podManagementPolicy"), policy,
                                  "must be 'OrderedReady' or 'Parallel'"))
    strategy = _d(spec.get("updateStrategy"))
    kind = strategy.get("type")
    spath = path.child("updateStrategy")
    if not kind:
        errs.append(field.required(spath))
    elif kind == "OnDelete":
        if strategy.get("rollingUpdate") is not None:
            errs.append(field.invalid(spath.child("rollingUpdate"), strategy["rollingUpdate"],
                                      "only allowed for updateStrategy 'RollingUpdate'"))
    elif kind == "RollingUpdate":
        rolling = _d(strategy.get("rollingUpdate"))
        rpath = spath.child("rollingUpdate")
        errs.extend(_nonnegative(rolling, "partition", rpath))
        if rolling.get("maxUnavailable") is not None:
            value = rolling["maxUnavailable"]
            errs.extend(_validate_positive_int_or_percent(value, rpath.child("maxUnavailable")))
            if _int_or_percent_value(value) == 0:
                errs.append(field.invalid(rpath.child("maxUnavailable"),
                                          go_int_or_string(value), "cannot be 0"))
            errs.extend(_not_more_than_100_percent(value, rpath.child("maxUnavailable")))
    else:
        errs.append(field.invalid(spath, strategy, "must be 'RollingUpdate' or 'OnDelete'"))
    retention = spec.get("persistentVolumeClaimRetentionPolicy")
    if isinstance(retention, dict):
        for key in ("whenDeleted", "whenScaled"):
            value = retention.get(key)
            if value not in ("Retain", "Delete"):
                errs.append(field.not_supported(
                    path.child("persistentVolumeClaimRetentionPolicy", key), value or "",
                    ["Retain", "Delete"]))
    errs.extend(_nonnegative(spec, "replicas", path))
    errs.extend(_nonnegative(spec, "minReadySeconds", path))
    ordinals = spec.get("ordinals")
    if isinstance(ordinals, dict) and ordinals.get("start") is not None:
        errs.extend(v.validate_nonnegative_field(_int(ordinals["start"]),
                                                 path.child("ordinals.start")))
    return errs


def _validate_daemonset_strategy(strategy: Any, path: Path) -> list[FieldError]:
    strategy = _d(strategy)
    kind = strategy.get("type")
    if kind == "OnDelete":
        return []
    if kind == "RollingUpdate":
        rolling = strategy.get("rollingUpdate")
        if not isinstance(rolling, dict):
            return [field.required(path.child("rollingUpdate"))]
        rpath = path.child("rollingUpdate")
        unavailable, surge = rolling.get("maxUnavailable"), rolling.get("maxSurge")
        errs = _validate_positive_int_or_percent(unavailable, rpath.child("maxUnavailable"))
        errs.extend(_validate_positive_int_or_percent(surge, rpath.child("maxSurge")))
        errs.extend(_not_more_than_100_percent(unavailable, rpath.child("maxUnavailable")))
        errs.extend(_not_more_than_100_percent(surge, rpath.child("maxSurge")))
        has_unavailable = _int_or_percent_value(unavailable) != 0
        has_surge = _int_or_percent_value(surge) != 0
        if has_unavailable and has_surge:
            errs.append(field.invalid(rpath.child("maxSurge"), go_int_or_string(surge),
                                      "may not be set when maxUnavailable is non-zero"))
        elif not has_unavailable and not has_surge:
            errs.append(field.required(rpath.child("maxUnavailable"),
                                       "cannot be 0 when maxSurge is 0"))
        return errs
    return [field.not_supported(path, strategy, ["RollingUpdate", "OnDelete"])]


def validate_workload_spec(plural: str, obj: Mapping[str, Any], gates: Mapping[str, bool],
                           old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """The kind's spec validation (ValidateDeploymentSpec, ValidateReplicaSetSpec,
    ValidateStatefulSetSpec, ValidateDaemonSetSpec, ValidateReplicationControllerSpec,
    ValidateControllerRevision's data and revision), on create and on update."""
    path = Path("spec")
    if plural == CONTROLLERREVISIONS:
        errs: list[FieldError] = []
        if obj.get("data") is None:
            errs.append(field.required(Path("data"), "data is mandatory"))
        errs.extend(v.validate_nonnegative_field(_int(obj.get("revision")), Path("revision")))
        return errs
    spec = _spec(obj)
    old_template = _d(_spec(old or {}).get("template")) if old is not None else None
    if plural == REPLICATIONCONTROLLERS:
        errs = _nonnegative(spec, "minReadySeconds", path)
        selector = _d(spec.get("selector"))
        if not selector:
            errs.append(field.required(path.child("selector")))
        errs.extend(_nonnegative(spec, "replicas", path))
        matches: bool | None = None
        if selector:
            labels = _d(_d(_d(spec.get("template")).get("metadata")).get("labels"))
            matches = all(labels.get(k) == x for k, x in selector.items())
        errs.extend(_template_errors(plural, spec, path, gates, old_template, matches))
        return errs
    if plural == STATEFULSETS:
        errs = _validate_statefulset_spec(spec, path)
        errs.extend(_validate_selector(plural, spec, path))
        errs.extend(_template_errors(plural, spec, path, gates, old_template,
                                     _selector_matches(spec)))
        return errs
    if plural == DAEMONSETS:
        errs = _validate_selector(plural, spec, path)
        errs.extend(_template_errors(plural, spec, path, gates, old_template,
                                     _selector_matches(spec, plural)))
        errs.extend(_nonnegative(spec, "minReadySeconds", path))
        errs.extend(_validate_daemonset_strategy(spec.get("updateStrategy"),
                                                 path.child("updateStrategy")))
        errs.extend(_nonnegative(spec, "revisionHistoryLimit", path))
        return errs
    errs = _nonnegative(spec, "replicas", path)
    if plural == REPLICASETS:
        errs.extend(_nonnegative(spec, "minReadySeconds", path))
    errs.extend(_validate_selector(plural, spec, path))
    errs.extend(_template_errors(plural, spec, path, gates, old_template,
                                 _selector_matches(spec)))
    if plural == DEPLOYMENTS:
        errs.extend(_validate_deployment_strategy(spec.get("strategy"),
                                                  path.child("strategy")))
        errs.extend(_nonnegative(spec, "minReadySeconds", path))
        errs.extend(_nonnegative(spec, "revisionHistoryLimit", path))
        deadline = spec.get("progressDeadlineSeconds")
        if deadline is not None:
            errs.extend(_nonnegative(spec, "progressDeadlineSeconds", path))
            if _int(deadline) <= _int(spec.get("minReadySeconds")):
                errs.append(field.invalid(path.child("progressDeadlineSeconds"), _int(deadline),
                                          "must be greater than minReadySeconds"))
    return errs


def validate_workload_update(plural: str, new: Mapping[str, Any], old: Mapping[str, Any],
                             gates: Mapping[str, bool]) -> list[FieldError]:
    """The update rules beyond the spec's validation: apps/v1 selectors are immutable, a
    StatefulSet changes only some fields, a ControllerRevision's data is immutable."""
    errs = validate_workload_spec(plural, new, gates, old)
    new_spec, old_spec = _spec(new), _spec(old)
    if plural == CONTROLLERREVISIONS:
        errs.extend(v.validate_immutable_field(new.get("data"), old.get("data"), Path("data")))
        return errs
    if plural == STATEFULSETS:
        mutable = ("replicas", "ordinals", "template", "updateStrategy",
                   "persistentVolumeClaimRetentionPolicy", "minReadySeconds")
        rest_new = {k: x for k, x in new_spec.items() if k not in mutable}
        rest_old = {k: x for k, x in old_spec.items() if k not in mutable}
        if rest_new != rest_old:
            errs.append(field.forbidden(
                Path("spec"), "updates to statefulset spec for fields other than 'replicas', "
                "'ordinals', 'template', 'updateStrategy', "
                "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"))
        return errs
    if plural in (DEPLOYMENTS, REPLICASETS, DAEMONSETS) and \
            new_spec.get("selector") != old_spec.get("selector"):
        errs.append(field.invalid(Path("spec", "selector"),
                                  _go_selector(new_spec.get("selector")), v.FIELD_IMMUTABLE))
    return errs


_STATUS_COUNTS = {
    DEPLOYMENTS: ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas",
                  "availableReplicas", "unavailableReplicas", "collisionCount"),
    REPLICASETS: ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas",
                  "observedGeneration"),
    REPLICATIONCONTROLLERS: ("replicas", "fullyLabeledReplicas", "readyReplicas",
                             "availableReplicas", "observedGeneration"),
    STATEFULSETS: ("replicas", "readyReplicas", "currentReplicas", "updatedReplicas",
                   "availableReplicas", "observedGeneration", "collisionCount"),
    DAEMONSETS: ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled",
                 "numberReady", "observedGeneration", "updatedNumberScheduled",
                 "numberAvailable", "numberUnavailable", "collisionCount"),
}
_NOT_ABOVE_REPLICAS = {
    DEPLOYMENTS: ("updatedReplicas", "readyReplicas", "availableReplicas"),
    REPLICASETS: ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"),
    REPLICATIONCONTROLLERS: ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"),
    STATEFULSETS: ("readyReplicas", "currentReplicas", "updatedReplicas", "availableReplicas"),
    DAEMONSETS: (),
}


def validate_workload_status(plural: str, new: Mapping[str, Any], old: Mapping[str, Any]
                             ) -> list[FieldError]:
    """The kind's status validation on a `/status` update (counts not negative, not above
    `status.replicas`, available not above ready, collisionCount not decremented)."""
    if plural not in _STATUS_COUNTS:
        return []
    status, path = _d(new.get("status")), Path("status")
    errs: list[FieldError] = []
    for key in _STATUS_COUNTS[plural]:
        errs.extend(_nonnegative(status, key, path))
    replicas = _int(status.get("replicas"))
    for key in _NOT_ABOVE_REPLICAS[plural]:
        if _int(status.get(key)) > replicas:
            errs.append(field.invalid(path.child(key), _int(status.get(key)),
                                      "cannot be greater than status.replicas"))
    if plural != DAEMONSETS and \
            _int(status.get("availableReplicas")) > _int(status.get("readyReplicas")):
        text = ("cannot be greater than status.readyReplicas" if plural == STATEFULSETS
                else "cannot be greater than readyReplicas")
        errs.append(field.invalid(path.child("availableReplicas"),
                                  _int(status.get("availableReplicas")), text))
    old_count = _d(old.get("status")).get("collisionCount")
    new_count = status.get("collisionCount")
    if isinstance(old_count, int) and (new_count is None or _int(new_count) < old_count):
        errs.append(field.invalid(path.child("collisionCount"), _int(new_count),
                                  "cannot be decremented"))
    return errs


# The status fields upstream's JSON always writes (no `omitempty` on the Go field, whether
# or not the OpenAPI lists them as required: a StatefulSet's `availableReplicas` is not).
_REQUIRED_STATUS = {
    REPLICASETS: ("replicas",), REPLICATIONCONTROLLERS: ("replicas",),
    STATEFULSETS: ("replicas", "availableReplicas"),
    DAEMONSETS: ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled",
                 "numberReady"),
}


def initial_status(plural: str) -> dict[str, Any]:
    """The status of a new object: upstream's zero status as its JSON shows it."""
    return {key: 0 for key in _REQUIRED_STATUS.get(plural, ())}


def fill_status_zeros(plural: str, obj: dict[str, Any]) -> None:
    """A written status as upstream stores it: the fields its JSON always writes are 0 when
    the writer left them out (decoded into the Go struct and encoded again)."""
    status = obj.get("status")
    if isinstance(status, dict):
        for key in _REQUIRED_STATUS.get(plural, ()):
            status.setdefault(key, 0)


def spec_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether an update changes the spec (which bumps `metadata.generation`)."""
    return new.get("spec") != old.get("spec")


# --- scale ------------------------------------------------------------------------------------


def scale_of(plural: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The autoscaling/v1 Scale of a Deployment, ReplicaSet, StatefulSet or
    ReplicationController: its metadata, `spec.replicas`, `status.replicas` and the
    selector as text."""
    md = _d(obj.get("metadata"))
    spec, status = _spec(obj), _d(obj.get("status"))
    selector = spec.get("selector")
    if plural == REPLICATIONCONTROLLERS:
        text = ",".join(f"{k}={x}" for k, x in sorted(_d(selector).items()))
    else:
        text = ls.query_string(selector if isinstance(selector, dict) else None)
    scale_md = {k: copy.deepcopy(md[k]) for k in
                ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in md}
    out_status: dict[str, Any] = {"replicas": _int(status.get("replicas"))}
    if text:
        out_status["selector"] = text
    return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": scale_md,
            "spec": {"replicas": _int(spec.get("replicas"))}, "status": out_status}


def validate_scale(scale: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateScale`: a valid name and `spec.replicas` not negative."""
    md = _d(scale.get("metadata"))
    errs = v.validate_object_meta(md, namespaced=True)
    replicas = _d(scale.get("spec")).get("replicas")
    if isinstance(replicas, int) and replicas < 0:
        errs.append(field.invalid(Path("spec", "replicas"), replicas, v.IS_NEGATIVE))
    return errs

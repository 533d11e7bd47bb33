"""Jobs (`batch/v1`) as upstream's `pkg/apis/batch` (v1 defaults, validation) and
`pkg/registry/batch/job` (the generated selector and labels, what create and update keep):
pure functions over plain dicts.

The pod template is checked with the pod rules (`ephemera.pods.validation.validate_pod_spec`)
plus upstream's template rules (labels and annotations of the template, no ephemeral
containers) and the Job's own: `restartPolicy` `OnFailure` or `Never` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ephemera.api import conditions, field, meta
from ephemera.api import validation as meta_validation
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import go_string_map
from ephemera.api.labelselector import selector_matches, validate_label_selector
from ephemera.api.meta import child_object
from ephemera.pods.defaults import default_pod_template
from ephemera.pods.unimplemented import unimplemented_warnings, unimplemented_warnings_on_update
from ephemera.pods.validation import validate_pod_spec

__all__ = [
    "CONTROLLER_UID_LABEL",
    "JOB_COMPLETION_INDEX",
    "JOB_NAME_LABEL",
    "JOB_TRACKING_FINALIZER",
    "LEGACY_CONTROLLER_UID_LABEL",
    "LEGACY_JOB_NAME_LABEL",
    "default_job",
    "default_job_spec_template",
    "generate_selector",
    "has_condition",
    "unimplemented_job_warnings",
    "validate_job",
    "validate_job_spec",
    "validate_job_status",
    "validate_job_template_pod",
    "validate_job_update",
]

LEGACY_JOB_NAME_LABEL = "job-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"

NON_INDEXED, INDEXED = "NonIndexed", "Indexed"
MAX_PARALLELISM_INDEXED = 100000
MAX_INT32 = 2**31 - 1
POD_FAILURE_ACTIONS = ["Count", "FailIndex", "FailJob", "Ignore"]
POD_FAILURE_OPERATORS = ["In", "NotIn"]
REPLACEMENT_POLICIES = ["Failed", "TerminatingOrFailed"]
_TEMPLATE_MUTABLE_WHEN_SUSPENDED = ("nodeSelector", "tolerations", "affinity",
                                    "schedulingGates")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def has_condition(job: Mapping[str, Any], type_: str) -> bool:
    """Whether the Job has condition `type_` with status True."""
    return conditions.is_true(job.get("status"), type_)


# --- defaults -------------------------------------------------------------------------------


def default_job_spec_template(spec: dict[str, Any], gates: Mapping[str, bool]) -> None:
    """The pod template defaults of a JobSpec (also a CronJob's `jobTemplate.spec`)."""
    default_pod_template(child_object(spec, "template"), gates)  # a struct value


def default_job(job: dict[str, Any], gates: Mapping[str, bool]) -> None:
    """upstream's `SetDefaults_Job` and the template's pod defaults."""
    spec = child_object(job, "spec")
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
    template_labels = _d(spec.get("template")).get("metadata", {}) or {}
    labels = _d(template_labels).get("labels")
    md = child_object(job, "metadata")
    if labels and not md.get("labels"):
        md["labels"] = dict(labels)
    if not spec.get("completionMode"):
        spec["completionMode"] = NON_INDEXED
    if spec.get("suspend") is None:
        spec["suspend"] = False
    policy = spec.get("podFailurePolicy")
    if isinstance(policy, dict):
        for rule in policy.get("rules") or []:
            for pattern in _d(rule).get("onPodConditions") or []:
                if isinstance(pattern, dict) and not pattern.get("status"):
                    pattern["status"] = "True"
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = "Failed" if policy is not None else "TerminatingOrFailed"
    default_job_spec_template(spec, gates)


def generate_selector(job: dict[str, Any]) -> None:
    """upstream's `generateSelectorIfNeeded` (create): unless `manualSelector`, label the
    template with the Job's name and UID (both spellings) and select the UID label."""
    spec = child_object(job, "spec")
    if spec.get("manualSelector"):
        return
    md = job.get("metadata") or {}
    labels = child_object(child_object(child_object(spec, "template"), "metadata"), "labels")
    for key in (LEGACY_JOB_NAME_LABEL, JOB_NAME_LABEL):
        labels.setdefault(key, md.get("name", ""))
    for key in (LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL):
        labels.setdefault(key, md.get("uid", ""))
    child_object(child_object(spec, "selector"), "matchLabels").setdefault(
        CONTROLLER_UID_LABEL, md.get("uid", ""))


# --- validation -----------------------------------------------------------------------------


def _has_label(labels: Mapping[str, str], path: Path, key: str, value: str
               ) -> list[FieldError]:
    """`ValidateHasLabel`."""
    if key not in labels:
        return [field.required(path.child("labels").key(key), value)]
    if labels[key] != value:
        return [field.invalid(path.child("labels").key(key), go_string_map(labels),
                              f"must be '{value}'")]
    return []


def _generated_selector_errors(job: Mapping[str, Any]) -> list[FieldError]:
    """upstream's `validateGeneratedSelector`."""
    spec = _d(job.get("spec"))
    if spec.get("manualSelector"):
        return []
    tmd = _d(_d(spec.get("template")).get("metadata"))
    labels = tmd.get("labels")
    if labels is None:
        return []
    md = _d(job.get("metadata"))
    uid, name = str(md.get("uid") or ""), str(md.get("name") or "")
    errs: list[FieldError] = []
    if not uid:
        errs.append(field.required(Path("metadata", "uid")))
    at = Path("spec", "template", "metadata")
    errs.extend(_has_label(labels, at, LEGACY_CONTROLLER_UID_LABEL, uid))
    errs.extend(_has_label(labels, at, LEGACY_JOB_NAME_LABEL, name))
    errs.extend(_has_label(labels, at, CONTROLLER_UID_LABEL, uid))
    errs.extend(_has_label(labels, at, JOB_NAME_LABEL, name))
    selector = spec.get("selector")
    if isinstance(selector, dict) and not validate_label_selector(selector, Path("x")) and \
            not selector_matches(selector, {CONTROLLER_UID_LABEL: uid}):
        errs.append(field.invalid(Path("spec", "selector"), selector,
                                  "`selector` not auto-generated"))
    return errs


def validate_job_template_pod(template: Any, path: Path, gates: Mapping[str, bool]
                              ) -> list[FieldError]:
    """`ValidatePodTemplateSpec`: the template's labels and annotations, its pod spec with
    the pod rules, no ephemeral containers."""
    template = _d(template)
    tmd = _d(template.get("metadata"))
    errs = meta_validation.validate_labels(tmd.get("labels"), path.child("labels"))
    errs.extend(meta_validation.validate_annotations(tmd.get("annotations"),
                                                     path.child("annotations")))
    spec = _d(template.get("spec"))
    errs.extend(validate_pod_spec(spec, tmd, path.child("spec"), gates))
    if spec.get("ephemeralContainers"):
        errs.append(field.forbidden(path.child("spec", "ephemeralContainers"),
                                    "ephemeral containers not allowed in pod template"))
    return errs


def _nonnegative(spec: Mapping[str, Any], name: str, path: Path) -> list[FieldError]:
    value = _int(spec.get(name))
    if value is None:
        return []
    return meta_validation.validate_nonnegative_field(value, path.child(name))


def _validate_pod_failure_policy(spec: Mapping[str, Any], path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    rules = _d(spec.get("podFailurePolicy")).get("rules") or []
    container_names = {str(c.get("name")) for c in
                       _d(_d(spec.get("template")).get("spec")).get("containers") or []
                       if isinstance(c, dict)}
    for i, rule in enumerate(rules):
        at = path.child("rules").index(i)
        rule = _d(rule)
        action = rule.get("action")
        if action not in POD_FAILURE_ACTIONS:
            errs.append(field.not_supported(at.child("action"), action, POD_FAILURE_ACTIONS))
        elif action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            errs.append(field.invalid(at.child("action"), action,
                                      "requires the backoffLimitPerIndex to be set"))
        exit_codes = rule.get("onExitCodes")
        conditions = rule.get("onPodConditions")
        if exit_codes is not None and conditions is not None:
            errs.append(field.invalid(at, "",
                                      "specifying both OnExitCodes and OnPodConditions is "
                                      "not supported"))
        elif exit_codes is None and not conditions:
            errs.append(field.invalid(at, "",
                                      "specifying one of OnExitCodes and OnPodConditions is "
                                      "required"))
        if isinstance(exit_codes, dict):
            ec = path.child("rules").index(i).child("onExitCodes")
            container = exit_codes.get("containerName")
            if container is not None and container not in container_names:
                errs.append(field.invalid(ec.child("containerName"), container,
                                          "must be one of the container or initContainer "
                                          "names in the pod template"))
            operator = exit_codes.get("operator")
            if operator not in POD_FAILURE_OPERATORS:
                errs.append(field.not_supported(ec.child("operator"), operator,
                                                POD_FAILURE_OPERATORS))
            values = exit_codes.get("values") or []
            if not values:
                errs.append(field.invalid(ec.child("values"), values,
                                          "at least one value is required"))
            seen: set[int] = set()
            previous: int | None = None
            for j, value in enumerate(values):
                if operator == "In" and value == 0:
                    errs.append(field.invalid(ec.child("values").index(j), value,
                                              "must not be 0 for the In operator"))
                if value in seen:
                    errs.append(field.duplicate(ec.child("values").index(j), value))
                if previous is not None and isinstance(value, int) and value < previous:
                    errs.append(field.invalid(ec.child("values").index(j), value,
                                              "must be ordered"))
                seen.add(value)
                previous = value if isinstance(value, int) else previous
        for j, pattern in enumerate(conditions or []):
            pc = at.child("onPodConditions").index(j)
            pattern = _d(pattern)
            if pattern.get("status") not in ("True", "False", "Unknown"):
                errs.append(field.not_supported(pc.child("status"), pattern.get("status"),
                                                ["True", "False", "Unknown"]))
            errs.extend(meta_validation.validate_qualified_name(str(pattern.get("type") or ""),
                                                                pc.child("type")))
    return errs


def validate_job_spec(spec: Mapping[str, Any], path: Path, gates: Mapping[str, bool]
                      ) -> list[FieldError]:
    """upstream's `validateJobSpec` (no selector rules: a CronJob's template has none)."""
    errs: list[FieldError] = []
    for name in ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit",
                 "ttlSecondsAfterFinished", "backoffLimitPerIndex", "maxFailedIndexes"):
        errs.extend(_nonnegative(spec, name, path))
    mode = spec.get("completionMode")
    completions = _int(spec.get("completions"))
    parallelism = _int(spec.get("parallelism"))
    if mode is not None:
        if mode not in (NON_INDEXED, INDEXED):
            errs.append(field.not_supported(path.child("completionMode"), mode,
                                            [NON_INDEXED, INDEXED]))
        if mode == INDEXED:
            if spec.get("completions") is None:
                errs.append(field.required(path.child("completions"),
                                           f"when completion mode is {INDEXED}"))
            if parallelism is not None and parallelism > MAX_PARALLELISM_INDEXED:
                errs.append(field.invalid(
                    path.child("parallelism"), parallelism,
                    f"must be less than or equal to {MAX_PARALLELISM_INDEXED} when "
                    f"completion mode is {INDEXED}"))
            max_failed = _int(spec.get("maxFailedIndexes"))
            if completions is not None and max_failed is not None and \
                    max_failed > completions:
                errs.append(field.invalid(path.child("maxFailedIndexes"), max_failed,
                                          "must be less than or equal to completions"))
    if mode in (None, NON_INDEXED):
        for name in ("backoffLimitPerIndex", "maxFailedIndexes"):
            if spec.get(name) is not None:
                errs.append(field.invalid(path.child(name), spec[name],
                                          "requires indexed completion mode"))
    if spec.get("podFailurePolicy") is not None:
        errs.extend(_validate_pod_failure_policy(spec, path.child("podFailurePolicy")))
    replacement = spec.get("podReplacementPolicy")
    if replacement is not None:
        if replacement not in REPLACEMENT_POLICIES:
            errs.append(field.not_supported(path.child("podReplacementPolicy"), replacement,
                                            REPLACEMENT_POLICIES))
        elif spec.get("podFailurePolicy") is not None and replacement != "Failed":
            errs.append(field.not_supported(path.child("podReplacementPolicy"), replacement,
                                            ["Failed"]))
    errs.extend(validate_job_template_pod(spec.get("template"), path.child("template"), gates))
    restart = _d(_d(spec.get("template")).get("spec")).get("restartPolicy")
    restart_path = path.child("template", "spec", "restartPolicy")
    if restart in ("Always", "", None):
        errs.append(field.required(restart_path, 'valid values: "OnFailure", "Never"'))
    elif restart not in ("OnFailure", "Never"):
        errs.append(field.not_supported(restart_path, restart, ["OnFailure", "Never"]))
    elif spec.get("podFailurePolicy") is not None and restart != "Never":
        errs.append(field.invalid(restart_path, restart,
                                  'only "Never" is supported when podFailurePolicy is '
                                  "specified"))
    return errs


def _validate_job_spec_with_selector(spec: Mapping[str, Any], path: Path,
                                     gates: Mapping[str, bool]) -> list[FieldError]:
    """upstream's `ValidateJobSpec`: the spec, a valid selector, and the template's labels
    selected by it."""
    errs = validate_job_spec(spec, path, gates)
    selector = spec.get("selector")
    if selector is None:
        errs.append(field.required(path.child("selector")))
        return errs
    selector_errs = validate_label_selector(selector, path.child("selector"))
    errs.extend(selector_errs)
    labels = _d(_d(spec.get("template")).get("metadata")).get("labels") or {}
    if not selector_errs and not selector_matches(selector, labels):
        errs.append(field.invalid(path.child("template", "metadata", "labels"),
                                  go_string_map(labels),
                                  "`selector` does not match template `labels`"))
    return errs


def validate_job(job: Mapping[str, Any], gates: Mapping[str, bool]) -> list[FieldError]:
    """upstream's `ValidateJob` beyond the object metadata."""
    errs = _generated_selector_errors(job)
    spec = _d(job.get("spec"))
    errs.extend(_validate_job_spec_with_selector(spec, Path("spec"), gates))
    completions = _int(spec.get("completions"))
    if spec.get("completionMode") == INDEXED and completions is not None and completions > 0:
        name = str(_d(job.get("metadata")).get("name") or "")
        hostname = f"{name}-{completions - 1}"
        if meta.dns1123_label_errors(hostname):
            errs.append(field.invalid(Path("metadata", "name"), name,
                                      "will not able to create pod with invalid DNS label: "
                                      f"{hostname}"))
    return errs


def _template_scheduling_only(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether two templates differ only in what a suspended Job that never started may
    change: labels, annotations, node selector, tolerations, affinity, scheduling gates."""
    def strip(template: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(template)
        out["metadata"] = {k: v for k, v in _d(template.get("metadata")).items()
                           if k not in ("labels", "annotations")}
        out["spec"] = {k: v for k, v in _d(template.get("spec")).items()
                       if k not in _TEMPLATE_MUTABLE_WHEN_SUSPENDED}
        return out
    return strip(new) == strip(old)


def validate_job_update(new: Mapping[str, Any], old: Mapping[str, Any],
                        gates: Mapping[str, bool]) -> list[FieldError]:
    """upstream's `ValidateJobUpdate` beyond the object metadata: the new Job valid, and
    selector, completion mode, pod failure and success policies, managedBy,
    backoffLimitPerIndex immutable; completions too, except in step with parallelism for an
    Indexed Job; the template too, except its scheduling directives while the Job is
    suspended and has not started."""
    path = Path("spec")
    spec, old_spec = _d(new.get("spec")), _d(old.get("spec"))
    errs = _validate_job_spec_with_selector(spec, path, gates)
    if spec.get("completions") != old_spec.get("completions"):
        indexed = spec.get("completionMode") == INDEXED
        if not indexed:
            errs.extend(meta_validation.validate_immutable_field(
                spec.get("completions"), old_spec.get("completions"), path.child("completions")))
        elif spec.get("completions") is not None and \
                spec.get("completions") != spec.get("parallelism"):
            errs.append(field.invalid(path.child("completions"), spec.get("completions"),
                                      "can only be modified in tandem with spec.parallelism"))
    errs.extend(meta_validation.validate_immutable_field(
        spec.get("selector"), old_spec.get("selector"), path.child("selector")))
    template, old_template = _d(spec.get("template")), _d(old_spec.get("template"))
    suspended_never_started = bool(old_spec.get("suspend")) and \
        not _d(old.get("status")).get("startTime")
    if template != old_template and not (
            suspended_never_started and _template_scheduling_only(template, old_template)):
        errs.extend(meta_validation.validate_immutable_field(template, old_template,
                                                             path.child("template")))
    for name in ("completionMode", "podFailurePolicy", "backoffLimitPerIndex", "managedBy",
                 "successPolicy"):
        errs.extend(meta_validation.validate_immutable_field(
            spec.get(name), old_spec.get(name), path.child(name)))
    return errs


def validate_job_status(job: Mapping[str, Any]) -> list[FieldError]:
    """The counters of `status` are never negative."""
    status = _d(job.get("status"))
    errs: list[FieldError] = []
    for name in ("active", "succeeded", "failed", "ready", "terminating"):
        errs.extend(_nonnegative(status, name, Path("status")))
    return errs


# JobSpec fields the apiserver accepts but ephemera's Job controller does not act on.
_UNIMPLEMENTED_JOB_FIELDS = {
    "successPolicy": "success policies",
    "backoffLimitPerIndex": "per-index backoff limits",
    "maxFailedIndexes": "maxFailedIndexes (it needs backoffLimitPerIndex)",
}
NO_EFFECT = "have no effect in ephemera (not implemented)"


def unimplemented_job_warnings(spec: Mapping[str, Any], old_spec: Mapping[str, Any] | None,
                               path: str = "spec") -> list[str]:
    """The `Warning` texts of a JobSpec at `path` (`spec`, or a CronJob's
    `spec.jobTemplate.spec`): its fields the controller ignores, and its pod template's
    (`ephemera.pods.unimplemented`); on update only those newly set."""
    out: list[str] = []
    for name, what in _UNIMPLEMENTED_JOB_FIELDS.items():
        if spec.get(name) is not None and (old_spec is None or old_spec.get(name) is None):
            out.append(f"{path}.{name}: {what} {NO_EFFECT}")
    template_spec = _d(_d(spec.get("template")).get("spec"))
    at = f"{path}.template.spec"
    if old_spec is None:
        out.extend(unimplemented_warnings(template_spec, at))
    else:
        out.extend(unimplemented_warnings_on_update(
            template_spec, _d(_d(old_spec.get("template")).get("spec")), at))
    return out

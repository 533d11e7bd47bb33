"""What one sync of a Job decides, as upstream's job controller (`syncJob`) does, pure:
given the Job, its pods and the time, the new status (counts through
`uncountedTerminatedPods` and the `batch.kubernetes.io/job-tracking` finalizer, as upstream
tracks them), the pods to create (with the completion index of an Indexed Job), to delete
and to release (finalizer off), the conditions (`SuccessCriteriaMet` then `Complete`;
`FailureTarget` then `Failed`, with upstream's reasons and messages), the events, and when
to look again.

Counting: a finished pod that still carries the tracking finalizer is first recorded in
`uncountedTerminatedPods`; once its finalizer is removed (by the controller, after that
status is written) it moves into `succeeded`/`failed`. So a crash between the steps never
counts a pod twice or loses it. Pods deleted before they finished count as failed unless
`podReplacementPolicy: Failed` (then they are waited for).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ephemera.api import conditions
from ephemera.batch.jobs import JOB_COMPLETION_INDEX, JOB_TRACKING_FINALIZER

__all__ = ["JobSync", "compute", "format_indexes", "parse_indexes", "rfc3339"]

BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")


def rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def parse_indexes(text: str) -> set[int]:
    """`1,3-5` -> {1, 3, 4, 5}."""
    out: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(part))
    return out


def format_indexes(indexes: set[int]) -> str:
    """{1, 3, 4, 5} -> `1,3-5` (upstream's compressed interval list)."""
    parts: list[str] = []
    ordered = sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def _md(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def pod_index(pod: Mapping[str, Any]) -> int | None:
    raw = (_md(pod).get("annotations") or {}).get(JOB_COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _has_finalizer(pod: Mapping[str, Any]) -> bool:
    return JOB_TRACKING_FINALIZER in (_md(pod).get("finalizers") or [])


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _deleting(pod: Mapping[str, Any]) -> bool:
    return bool(_md(pod).get("deletionTimestamp"))


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _condition(status: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    found = conditions.find(status, type_)
    return dict(found) if found is not None else None


def _true(status: Mapping[str, Any], type_: str) -> bool:
    return conditions.is_true(status, type_)


def _set_condition(status: dict[str, Any], type_: str, state: str, reason: str, message: str,
                   now: str) -> bool:
    """Set a condition; True when it changed."""
    conditions = status.setdefault("conditions", [])
    for c in conditions:
        if c.get("type") == type_:
            if c.get("status") == state and c.get("reason") == reason:
                return False
            c.update({"status": state, "reason": reason, "message": message,
                      "lastProbeTime": now, "lastTransitionTime": now})
            return True
    conditions.append({"type": type_, "status": state, "reason": reason, "message": message,
                       "lastProbeTime": now, "lastTransitionTime": now})
    return True


def _exit_codes(pod: Mapping[str, Any]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            code = term.get("exitCode")
            if isinstance(code, int) and code != 0:
                out.append((str(cs.get("name") or ""), code))
    return out


def match_pod_failure_policy(job: Mapping[str, Any], pod: Mapping[str, Any]
                             ) -> tuple[str, str] | None:
    """The action of the first pod failure policy rule the failed pod matches, and the
    message upstream gives a FailJob match; None when no rule matches (counted)."""
    policy = (job.get("spec") or {}).get("podFailurePolicy") or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    md = _md(pod)
    for i, rule in enumerate(policy.get("rules") or []):
        action = str(rule.get("action") or "")
        on_codes = rule.get("onExitCodes")
        if isinstance(on_codes, dict):
            values = on_codes.get("values") or []
            container = on_codes.get("containerName")
            for name, code in _exit_codes(pod):
                if container is not None and name != container:
                    continue
                hit = code in values if on_codes.get("operator") == "In" else code not in values
                if hit:
                    return action, (f"Container {name} for pod {md.get('namespace')}/"
                                    f"{md.get('name')} failed with exit code {code} matching "
                                    f"{action} rule at index {i}")
        for pattern in rule.get("onPodConditions") or []:
            for c in conditions:
                if c.get("type") == pattern.get("type") and \
                        c.get("status") == (pattern.get("status") or "True"):
                    return action, (f"Pod {md.get('namespace')}/{md.get('name')} has condition "
                                    f"{c.get('type')} matching {action} rule at index {i}")
    return None


@dataclass
class JobSync:
    status: dict[str, Any]
    create: list[int | None] = field(default_factory=list)  # completion indexes (None: any)
    delete: list[str] = field(default_factory=list)  # pod names
    release: list[str] = field(default_factory=list)  # pod names: remove the finalizer
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, msg)
    requeue_after: float | None = None
    new_failures: bool = False


def _delete_rank(pod: Mapping[str, Any]) -> tuple[int, int, str]:
    """Pods deleted first when there are too many: unscheduled, then not ready, then the
    newest (upstream's `ActivePods` order, in short)."""
    scheduled = 1 if (pod.get("spec") or {}).get("nodeName") else 0
    return (scheduled, 1 if _ready(pod) else 0,
            "".join(chr(255 - ord(c)) for c in str(_md(pod).get("creationTimestamp") or "")))


def compute(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], now: datetime, *,
            backoff_remaining: float = 0.0) -> JobSync:
    """One sync of `job` over its `pods`; `backoff_remaining`: seconds before a failed pod
    may be replaced (the controller's back-off)."""
    spec = job.get("spec") or {}
    status: dict[str, Any] = copy.deepcopy(dict(job.get("status") or {}))
    stamp = rfc3339(now)
    result = JobSync(status)
    indexed = spec.get("completionMode") == "Indexed"
    completions = spec.get("completions")
    parallelism = int(spec.get("parallelism") or 0)
    only_failed = spec.get("podReplacementPolicy") == "Failed"

    uncounted = status.get("uncountedTerminatedPods") or {}
    unc_succeeded = list(uncounted.get("succeeded") or [])
    unc_failed = list(uncounted.get("failed") or [])
    by_uid = {str(_md(p).get("uid")): p for p in pods}
    completed = parse_indexes(str(status.get("completedIndexes") or ""))

    # 1. finished pods that are still tracked: recorded as uncounted, then released
    fail_job: tuple[str, str] | None = None
    for pod in pods:
        if not _has_finalizer(pod):
            continue
        uid, name = str(_md(pod).get("uid")), str(_md(pod).get("name"))
        phase = _phase(pod)
        failed = phase == "Failed" or (not only_failed and _deleting(pod)
                                       and phase != "Succeeded")
        if phase == "Succeeded":
            if uid not in unc_succeeded:
                unc_succeeded.append(uid)
                index = pod_index(pod)
                if indexed and index is not None:
                    completed.add(index)
            result.release.append(name)
        elif failed:
            matched = match_pod_failure_policy(job, pod) if phase == "Failed" else None
            action = matched[0] if matched else "Count"
            if action == "Ignore":
                result.release.append(name)
                continue
            if action == "FailJob" and matched and fail_job is None:
                fail_job = ("PodFailurePolicy", matched[1])
            if uid not in unc_failed:
                unc_failed.append(uid)
                result.new_failures = True
            result.release.append(name)
    # 2. uncounted pods whose finalizer is gone are counted
    succeeded = int(status.get("succeeded") or 0)
    failed_count = int(status.get("failed") or 0)
    for uid in list(unc_succeeded):
        tracked = by_uid.get(uid)
        if tracked is None or not _has_finalizer(tracked):
            unc_succeeded.remove(uid)
            succeeded += 1
    for uid in list(unc_failed):
        tracked = by_uid.get(uid)
        if tracked is None or not _has_finalizer(tracked):
            unc_failed.remove(uid)
            failed_count += 1
    status["succeeded"] = succeeded
    status["failed"] = failed_count
    status["uncountedTerminatedPods"] = ({k: v for k, v in
                                          (("succeeded", unc_succeeded), ("failed", unc_failed))
                                          if v})
    if indexed:
        status["completedIndexes"] = format_indexes(completed)
    total_succeeded = succeeded + len(unc_succeeded)
    total_failed = failed_count + len(unc_failed)

    active = [p for p in pods if _phase(p) not in ("Succeeded", "Failed") and not _deleting(p)]
    terminating = [p for p in pods if _deleting(p) and _phase(p) not in ("Succeeded", "Failed")]
    finished = _true(status, "Complete") or _true(status, "Failed")
    if finished:
        result.delete = [str(_md(p).get("name")) for p in active]
        _store_counts(status, [], terminating)
        return result

    suspended = bool(spec.get("suspend"))
    if suspended:
        if _set_condition(status, "Suspended", "True", "JobSuspended", "Job suspended", stamp):
            result.events.append(("Normal", "Suspended", "Job suspended"))
        result.delete = [str(_md(p).get("name")) for p in active]
        _store_counts(status, [], terminating)
        return result
    if _condition(status, "Suspended") is not None and _true(status, "Suspended"):
        _set_condition(status, "Suspended", "False", "JobResumed", "Job resumed", stamp)
        result.events.append(("Normal", "Resumed", "Job resumed"))
        status["startTime"] = stamp
    if not status.get("startTime"):
        status["startTime"] = stamp

    # 3. failure
    target = _condition(status, "FailureTarget")
    if target is None or target.get("status") != "True":
        reason: tuple[str, str] | None = None
        deadline = spec.get("activeDeadlineSeconds")
        start = _parse(status.get("startTime"))
        if fail_job is not None:
            reason = fail_job
        elif total_failed > (spec["backoffLimit"] if isinstance(spec.get("backoffLimit"), int)
                             else 6):
            reason = BACKOFF_LIMIT_EXCEEDED
        elif isinstance(deadline, int) and start is not None and \
                (now - start).total_seconds() >= deadline:
            reason = DEADLINE_EXCEEDED
        elif isinstance(deadline, int) and start is not None:
            result.requeue_after = max(0.0, deadline - (now - start).total_seconds())
        if reason is not None:
            _set_condition(status, "FailureTarget", "True", reason[0], reason[1], stamp)
            target = _condition(status, "FailureTarget")
    if target is not None and target.get("status") == "True":
        result.delete = [str(_md(p).get("name")) for p in active]
        if not active and not terminating and not result.release and \
                not status.get("uncountedTerminatedPods"):
            _set_condition(status, "Failed", "True", str(target.get("reason")),
                           str(target.get("message")), stamp)
            result.events.append(("Warning", str(target.get("reason")),
                                  str(target.get("message"))))
            result.requeue_after = None
        _store_counts(status, [] if not result.delete else active, terminating)
        status["active"] = 0
        return result

    # 4. success
    if indexed:
        met = completions is not None and len(completed) >= int(completions)
    elif completions is None:
        met = total_succeeded > 0 and not active
    else:
        met = total_succeeded >= int(completions)
    if met or _true(status, "SuccessCriteriaMet"):
        _set_condition(status, "SuccessCriteriaMet", "True", *COMPLETIONS_REACHED, stamp)
        result.delete = [str(_md(p).get("name")) for p in active]
        if not active and not terminating and not result.release and \
                not status.get("uncountedTerminatedPods"):
            _set_condition(status, "Complete", "True", *COMPLETIONS_REACHED, stamp)
            status["completionTime"] = stamp
            result.events.append(("Normal", "Completed", "Job completed"))
        _store_counts(status, [], terminating)
        return result

    # 5. the active pods: as many as parallelism and the remaining completions allow
    busy = len(active) + (len(terminating) if only_failed else 0)
    if indexed:
        running = {pod_index(p) for p in active} | (
            {pod_index(p) for p in terminating} if only_failed else set())
        pending = [i for i in range(int(completions or 0))
                   if i not in completed and i not in running]
        want = min(parallelism, int(completions or 0) - len(completed))
    elif completions is None:
        pending = []
        want = len(active) if total_succeeded > 0 else parallelism
    else:
        pending = []
        want = min(parallelism, max(0, int(completions) - total_succeeded))
    if busy > want:
        extra = sorted(active, key=_delete_rank)[:busy - want]
        result.delete = [str(_md(p).get("name")) for p in extra]
    elif busy < want:
        if backoff_remaining > 0:
            result.requeue_after = min(result.requeue_after or backoff_remaining,
                                       backoff_remaining)
        else:
            count = want - busy
            result.create = list(pending[:count]) if indexed else [None] * count
    _store_counts(status, active, terminating)
    return result


def _store_counts(status: dict[str, Any], active: Sequence[Mapping[str, Any]],
                  terminating: Sequence[Mapping[str, Any]]) -> None:
    status["active"] = len(active)
    status["ready"] = sum(1 for p in active if _ready(p))
    status["terminating"] = len(terminating)
    for key in ("active", "succeeded", "failed"):
        if not status.get(key):
            status.pop(key, None)
    if not status.get("uncountedTerminatedPods"):
        status["uncountedTerminatedPods"] = {}
    if status.get("completedIndexes") == "":
        status.pop("completedIndexes", None)

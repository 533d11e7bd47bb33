"""The rules of upstream's `pkg/controller/deployment/util`: the pod template hash and the
ReplicaSet it names, revisions and the annotations a Deployment hands its ReplicaSets, the
rolling update's fenceposts (`maxSurge`, `maxUnavailable`), how many pods the new
ReplicaSet may have, proportional scaling, and the Progressing and Available conditions with
upstream's reasons and messages. Pure; the loop is `ephemera.controllers.deployment`."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ephemera.api import conditions, meta
from ephemera.controllers.objects import int_or_zero as _int
from ephemera.controllers.objects import metadata as _md
from ephemera.pods.workloads import scaled_value

Obj = Mapping[str, Any]
T = TypeVar("T", bound=Mapping[str, Any])

POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
REVISION_HISTORY_ANNOTATION = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS_ANNOTATION = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS_ANNOTATION = "deployment.kubernetes.io/max-replicas"
ROLLBACK_TO_ANNOTATION = "deprecated.deployment.rollback.to"
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
_NOT_COPIED = {LAST_APPLIED_ANNOTATION, REVISION_ANNOTATION, REVISION_HISTORY_ANNOTATION,
               DESIRED_REPLICAS_ANNOTATION, MAX_REPLICAS_ANNOTATION, ROLLBACK_TO_ANNOTATION}

# Reasons of the Progressing and Available conditions.
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
RS_UPDATED = "ReplicaSetUpdated"
TIMED_OUT = "ProgressDeadlineExceeded"
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"
MIN_AVAILABLE = "MinimumReplicasAvailable"
MIN_UNAVAILABLE = "MinimumReplicasUnavailable"
FAILED_RS_CREATE = "ReplicaSetCreateError"

_SAFE_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
MAX_INT32 = 2**31 - 1


def _spec(obj: Obj) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def replicas(obj: Obj) -> int:
    return _int(_spec(obj).get("replicas"))


def status_int(obj: Obj, name: str) -> int:
    return _int((obj.get("status") or {}).get(name))


# --- the template hash --------------------------------------------------------------------


def compute_hash(template: Obj, collision_count: int | None) -> str:
    """`ComputeHash`: FNV-1a (32 bit) of the template, then of the collision count (4
    bytes, little endian) when there is one, its decimal digits mapped onto upstream's
    safe alphabet (`rand.SafeEncodeString`). The template is hashed as canonical JSON, not
    as Go's spew dump, so the value differs from upstream's; it is stable for one template."""
    h = 0x811C9DC5
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count is not None:
        data += (collision_count & 0xFFFFFFFF).to_bytes(4, "little")
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHANUMS[ord(c) % len(_SAFE_ALPHANUMS)] for c in str(h))


def _template_without_hash(template: Obj) -> dict[str, Any]:
    t = copy.deepcopy(dict(template))
    md = t.get("metadata")
    if isinstance(md, dict):
        labels = md.get("labels")
        if isinstance(labels, dict):
            labels.pop(POD_TEMPLATE_HASH_LABEL, None)
            if not labels:
                md.pop("labels")
        if not md:
            t.pop("metadata")
    return t


def equal_ignore_hash(a: Obj, b: Obj) -> bool:
    """`EqualIgnoreHash`: two templates equal but for the pod-template-hash label."""
    return _template_without_hash(a) == _template_without_hash(b)


def _created(obj: Obj) -> tuple[str, str]:
    return (str(_md(obj).get("creationTimestamp") or ""), str(_md(obj).get("name") or ""))


def by_creation(sets: Sequence[T]) -> list[T]:
    """`ReplicaSetsByCreationTimestamp`: oldest first, ties by name."""
    return sorted(sets, key=_created)


def find_new_replica_set(deployment: Obj, sets: Sequence[T]) -> T | None:
    """`FindNewReplicaSet`: the oldest ReplicaSet whose template is the Deployment's."""
    template = _spec(deployment).get("template") or {}
    for rs in by_creation(sets):
        if equal_ignore_hash(_spec(rs).get("template") or {}, template):
            return rs
    return None


def find_old_replica_sets(deployment: Obj, sets: Sequence[T]) -> list[T]:
    new = find_new_replica_set(deployment, sets)
    new_uid = _md(new).get("uid") if new is not None else None
    return [rs for rs in sets if _md(rs).get("uid") != new_uid]


def filter_active(sets: Sequence[T | None]) -> list[T]:
    return [rs for rs in sets if rs is not None and replicas(rs) > 0]


def replica_count(sets: Sequence[Obj | None]) -> int:
    """`GetReplicaCountForReplicaSets`: the sum of `spec.replicas`."""
    return sum(replicas(rs) for rs in sets if rs is not None)


def actual_replica_count(sets: Sequence[Obj | None]) -> int:
    return sum(status_int(rs, "replicas") for rs in sets if rs is not None)


def ready_replica_count(sets: Sequence[Obj | None]) -> int:
    return sum(status_int(rs, "readyReplicas") for rs in sets if rs is not None)


def available_replica_count(sets: Sequence[Obj | None]) -> int:
    return sum(status_int(rs, "availableReplicas") for rs in sets if rs is not None)


def pods_upper_bound(sets: Sequence[Obj | None]) -> int:
    """At most how many pods the ReplicaSets have or are making: each one's `spec.replicas`,
    or its `status.replicas` while pods of a scale-down are not yet deleted. Upstream sums
    `spec.replicas` alone, which lets a new ReplicaSet's pods appear before an old one's
    surplus is deleted; ephemera counts both, so `maxSurge` holds at every moment."""
    return sum(max(replicas(rs), status_int(rs, "replicas")) for rs in sets if rs is not None)


def available_lower_bound(sets: Sequence[Obj | None]) -> int:
    """At least how many pods are available: each one's `status.availableReplicas`, but no
    more than its `spec.replicas` (a status written before a scale-down's deletions were
    seen still counts the deleted pods). Upstream sums the status alone; the bound keeps
    `maxUnavailable` at every moment."""
    return sum(min(replicas(rs), status_int(rs, "availableReplicas"))
               for rs in sets if rs is not None)


# --- revisions and annotations ------------------------------------------------------------


def revision(obj: Obj) -> int:
    try:
        return int((_md(obj).get("annotations") or {}).get(REVISION_ANNOTATION, 0))
    except (TypeError, ValueError):
        return 0


def max_revision(sets: Sequence[Obj]) -> int:
    return max((revision(rs) for rs in sets), default=0)


def set_new_replica_set_annotations(deployment: Obj, rs: dict[str, Any], new_revision: str,
                                    exists: bool) -> bool:
    """`SetNewReplicaSetAnnotations`: the Deployment's annotations (but its own), the
    revision (never lowered; the old one recorded in revision-history), and on creation the
    desired and max replicas. True when anything changed."""
    md = rs.setdefault("metadata", {})
    annotations = md.get("annotations")
    if not isinstance(annotations, dict):
        annotations = md["annotations"] = {}
    changed = False
    for key, value in (_md(deployment).get("annotations") or {}).items():
        if key in _NOT_COPIED:
            continue
        if annotations.get(key) != value:
            annotations[key] = value
            changed = True
    old = annotations.get(REVISION_ANNOTATION, "")
    try:
        old_number = int(old) if old else 0
    except ValueError:
        old_number = 0
    if old_number < int(new_revision):
        annotations[REVISION_ANNOTATION] = new_revision
        changed = True
        if old:
            history = annotations.get(REVISION_HISTORY_ANNOTATION, "")
            annotations[REVISION_HISTORY_ANNOTATION] = f"{history},{old}" if history else old
    if not exists:
        max_surge = max_surge_of(deployment)
        annotations[DESIRED_REPLICAS_ANNOTATION] = str(replicas(deployment))
        annotations[MAX_REPLICAS_ANNOTATION] = str(replicas(deployment) + max_surge)
        changed = True
    return changed


def desired_replicas_annotation(rs: Obj) -> int | None:
    try:
        return int((_md(rs).get("annotations") or {})[DESIRED_REPLICAS_ANNOTATION])
    except (KeyError, TypeError, ValueError):
        return None


def max_replicas_annotation(rs: Obj) -> int | None:
    try:
        return int((_md(rs).get("annotations") or {})[MAX_REPLICAS_ANNOTATION])
    except (KeyError, TypeError, ValueError):
        return None


def replicas_annotations_need_update(rs: Obj, desired: int, max_replicas: int) -> bool:
    annotations = _md(rs).get("annotations") or {}
    return (annotations.get(DESIRED_REPLICAS_ANNOTATION) != str(desired)
            or annotations.get(MAX_REPLICAS_ANNOTATION) != str(max_replicas))


def set_replicas_annotations(rs: dict[str, Any], desired: int, max_replicas: int) -> None:
    annotations = rs.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[DESIRED_REPLICAS_ANNOTATION] = str(desired)
    annotations[MAX_REPLICAS_ANNOTATION] = str(max_replicas)


# --- fenceposts ---------------------------------------------------------------------------


def is_rolling_update(deployment: Obj) -> bool:
    return (_spec(deployment).get("strategy") or {}).get("type") == "RollingUpdate"


def resolve_fenceposts(deployment: Obj) -> tuple[int, int]:
    """`ResolveFenceposts`: (maxSurge, maxUnavailable) in pods; both 0 would stall, so
    maxUnavailable is then 1."""
    rolling = (_spec(deployment).get("strategy") or {}).get("rollingUpdate") or {}
    desired = replicas(deployment)
    surge = scaled_value(rolling.get("maxSurge"), desired, True)
    unavailable = scaled_value(rolling.get("maxUnavailable"), desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_unavailable_of(deployment: Obj) -> int:
    if not is_rolling_update(deployment) or replicas(deployment) == 0:
        return 0
    return min(resolve_fenceposts(deployment)[1], replicas(deployment))


def max_surge_of(deployment: Obj) -> int:
    if not is_rolling_update(deployment):
        return 0
    return resolve_fenceposts(deployment)[0]


def new_rs_new_replicas(deployment: Obj, all_sets: Sequence[Obj | None], new_rs: Obj) -> int:
    """`NewRSNewReplicas`: how many pods the new ReplicaSet may have now."""
    if not is_rolling_update(deployment):
        return replicas(deployment)
    surge = max_surge_of(deployment)
    current = pods_upper_bound(all_sets)
    max_total = replicas(deployment) + surge
    if current >= max_total:
        return replicas(new_rs)
    scale_up = min(max_total - current, replicas(deployment) - replicas(new_rs))
    return replicas(new_rs) + scale_up


def is_saturated(deployment: Obj, rs: Obj | None) -> bool:
    if rs is None:
        return False
    desired = desired_replicas_annotation(rs)
    return (desired == replicas(deployment) and replicas(rs) == replicas(deployment)
            and status_int(rs, "availableReplicas") == replicas(deployment))


def find_active_or_latest(new_rs: T | None, old_sets: Sequence[T]) -> T | None:
    if new_rs is None and not old_sets:
        return None
    newest_first = list(reversed(by_creation(old_sets)))
    active = filter_active([*newest_first, new_rs])
    if not active:
        return new_rs if new_rs is not None else newest_first[0]
    if len(active) == 1:
        return active[0]
    return None


def replica_set_fraction(rs: Obj, deployment: Obj) -> int:
    """`getReplicaSetFraction`: the share of a scaling `rs` should take."""
    if replicas(deployment) == 0:
        return -replicas(rs)
    deployment_replicas = replicas(deployment) + max_surge_of(deployment)
    annotated = max_replicas_annotation(rs)
    if annotated is None:
        annotated = status_int(deployment, "replicas")
    if annotated == 0:
        return 0
    size = replicas(rs) * deployment_replicas / annotated
    return math.floor(size + 0.5) - replicas(rs)


def proportion(rs: Obj, deployment: Obj, to_add: int, added: int) -> int:
    """`GetProportion`."""
    if replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = replica_set_fraction(rs, deployment)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


# --- status and conditions ----------------------------------------------------------------


def new_condition(type_: str, status: str, reason: str, message: str, now: datetime
                  ) -> dict[str, Any]:
    return {"type": type_, "status": status, "lastUpdateTime": meta.rfc3339(now),
            "lastTransitionTime": meta.rfc3339(now), "reason": reason, "message": message}


def get_condition(status: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    return conditions.find(status, type_)


def set_condition(status: dict[str, Any], condition: dict[str, Any]) -> None:
    """`SetDeploymentCondition`: same status and reason changes nothing; same status keeps
    the transition time."""
    current = get_condition(status, condition["type"])
    if current is not None and current.get("status") == condition["status"] and \
            current.get("reason") == condition["reason"]:
        return
    if current is not None and current.get("status") == condition["status"]:
        condition = {**condition, "lastTransitionTime": current.get("lastTransitionTime")}
    others = [c for c in status.get("conditions") or [] if c.get("type") != condition["type"]]
    status["conditions"] = [*others, condition]


def remove_condition(status: dict[str, Any], type_: str) -> None:
    status["conditions"] = [c for c in status.get("conditions") or []
                            if c.get("type") != type_]
    if not status["conditions"]:
        status.pop("conditions")


def calculate_status(all_sets: Sequence[Obj | None], new_rs: Obj | None, deployment: Obj,
                     now: datetime) -> dict[str, Any]:
    """`calculateStatus` with the Available condition; zero counts left out."""
    available = available_replica_count(all_sets)
    total = replica_count(all_sets)
    unavailable = max(0, total - available)
    old = deployment.get("status") or {}
    status: dict[str, Any] = {}
    generation = _int(_md(deployment).get("generation"))
    counts = (("observedGeneration", generation), ("replicas", actual_replica_count(all_sets)),
              ("updatedReplicas", status_int(new_rs, "replicas") if new_rs else 0),
              ("readyReplicas", ready_replica_count(all_sets)),
              ("availableReplicas", available), ("unavailableReplicas", unavailable))
    for name, value in counts:
        if value:
            status[name] = value
    if old.get("collisionCount") is not None:
        status["collisionCount"] = old["collisionCount"]
    conditions = [dict(c) for c in old.get("conditions") or [] if isinstance(c, dict)]
    if conditions:
        status["conditions"] = conditions
    if available >= replicas(deployment) - max_unavailable_of(deployment):
        set_condition(status, new_condition("Available", "True", MIN_AVAILABLE,
                                            "Deployment has minimum availability.", now))
    else:
        set_condition(status, new_condition("Available", "False", MIN_UNAVAILABLE,
                                            "Deployment does not have minimum availability.",
                                            now))
    return status


def has_progress_deadline(deployment: Obj) -> bool:
    deadline = _spec(deployment).get("progressDeadlineSeconds")
    return isinstance(deadline, int) and deadline != MAX_INT32


def deployment_complete(deployment: Obj, status: Mapping[str, Any]) -> bool:
    want = replicas(deployment)
    return (_int(status.get("updatedReplicas")) == want and _int(status.get("replicas")) == want
            and _int(status.get("availableReplicas")) == want
            and _int(status.get("observedGeneration")) >= _int(_md(deployment).get("generation")))


def deployment_progressing(deployment: Obj, status: Mapping[str, Any]) -> bool:
    old = deployment.get("status") or {}
    old_old = _int(old.get("replicas")) - _int(old.get("updatedReplicas"))
    new_old = _int(status.get("replicas")) - _int(status.get("updatedReplicas"))
    return (_int(status.get("updatedReplicas")) > _int(old.get("updatedReplicas"))
            or new_old < old_old
            or _int(status.get("readyReplicas")) > _int(old.get("readyReplicas"))
            or _int(status.get("availableReplicas")) > _int(old.get("availableReplicas")))


def _parse(value: Any) -> datetime | None:
    try:
        return meta.parse_rfc3339(str(value)) if value else None
    except ValueError:
        return None


def deployment_timed_out(deployment: Obj, status: Mapping[str, Any], now: datetime) -> bool:
    if not has_progress_deadline(deployment):
        return False
    condition = get_condition(status, "Progressing")
    if condition is None or condition.get("reason") == NEW_RS_AVAILABLE:
        return False
    if condition.get("reason") == TIMED_OUT:
        return True
    since = _parse(condition.get("lastUpdateTime"))
    if since is None:
        return False
    deadline = timedelta(seconds=_int(_spec(deployment).get("progressDeadlineSeconds")))
    return since + deadline < now


def progress_requeue_after(deployment: Obj, status: Mapping[str, Any], now: datetime
                           ) -> float | None:
    """`requeueStuckDeployment`: when to look again for a progress deadline (None: no
    deadline to watch)."""
    condition = get_condition(status, "Progressing")
    if not has_progress_deadline(deployment) or condition is None or \
            condition.get("reason") in (NEW_RS_AVAILABLE, TIMED_OUT):
        return None
    if deployment_complete(deployment, status):
        return None
    since = _parse(condition.get("lastUpdateTime"))
    if since is None:
        return None
    deadline = timedelta(seconds=_int(_spec(deployment).get("progressDeadlineSeconds")))
    return max(1.0, (since + deadline - now).total_seconds() + 1)

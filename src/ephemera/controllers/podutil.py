"""What the workload controllers read of a pod, as upstream's `pkg/api/v1/pod` and
`pkg/controller/controller_utils.go`: active, ready, available (ready for
`minReadySeconds`), the pod made from a template for an owner, and the ranking of pods to
delete first on a scale-down (`ActivePodsWithRanks`, with the LogarithmicScaleDown and
PodDeletionCost rules on, as upstream's defaults). Pure."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ephemera.api import meta
from ephemera.controllers.objects import metadata as _md
from ephemera.controllers.objects import queue_key

Obj = Mapping[str, Any]
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}


def pod_key(pod: Obj) -> str:
    return queue_key(pod)


def is_active(pod: Obj) -> bool:
    """`IsPodActive`: not Succeeded or Failed and not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not _md(pod).get("deletionTimestamp")


def _ready_condition(pod: Obj) -> Mapping[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c
    return None


def is_ready(pod: Obj) -> bool:
    c = _ready_condition(pod)
    return c is not None and c.get("status") == "True"


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return meta.parse_rfc3339(value)
    except ValueError:
        return None


def is_available(pod: Obj, min_ready_seconds: int, now: datetime) -> bool:
    """`IsPodAvailable`: ready, for at least `min_ready_seconds`."""
    if not is_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = _time((_ready_condition(pod) or {}).get("lastTransitionTime"))
    return since is not None and since + timedelta(seconds=min_ready_seconds) < now


def available_in(pod: Obj, min_ready_seconds: int, now: datetime) -> float | None:
    """Seconds until a ready pod becomes available, None when it is not ready."""
    if not is_ready(pod):
        return None
    since = _time((_ready_condition(pod) or {}).get("lastTransitionTime")) or now
    return max(0.0, (since + timedelta(seconds=min_ready_seconds) - now).total_seconds())


def pod_from_template(template: Obj, owner: Obj, controller_ref: Mapping[str, Any]
                      ) -> dict[str, Any]:
    """`GetPodFromTemplate`: the template's labels, annotations, finalizers and spec, a
    `generateName` of the owner's name and a dash, the owner's controller reference."""
    tmd = template.get("metadata") or {}
    md: dict[str, Any] = {"generateName": f"{_md(owner).get('name')}-",
                          "namespace": _md(owner).get("namespace"),
                          "ownerReferences": [dict(controller_ref)]}
    for key in ("labels", "annotations"):
        if tmd.get(key):
            md[key] = dict(tmd[key])
    if tmd.get("finalizers"):
        md["finalizers"] = list(tmd["finalizers"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": copy.deepcopy(template.get("spec") or {})}


def _deletion_cost(pod: Obj) -> int:
    try:
        return int((_md(pod).get("annotations") or {}).get(DELETION_COST_ANNOTATION, 0))
    except (TypeError, ValueError):
        return 0


def _restarts(pod: Obj) -> int:
    return max((int(s.get("restartCount") or 0)
                for s in (pod.get("status") or {}).get("containerStatuses") or []), default=0)


def _log_rank_diff(t1: datetime, t2: datetime, now: datetime) -> int:
    def rank(t: datetime) -> int:
        d = (now - t).total_seconds() * 1e9
        return int(math.log2(d)) if d > 0 else -1
    return rank(t1) - rank(t2)


def _after_or_zero(t1: datetime | None, t2: datetime | None) -> bool:
    if t1 is None or t2 is None:
        return t1 is None
    return t1 > t2


def _ranked_less(a: tuple[Obj, int], b: tuple[Obj, int], now: datetime) -> bool:
    pa, ra = a
    pb, rb = b
    na, nb = (pa.get("spec") or {}).get("nodeName") or "", (pb.get("spec") or {}).get(
        "nodeName") or ""
    if na != nb and (not na or not nb):
        return not na
    pha = _PHASE_ORDINAL.get(str((pa.get("status") or {}).get("phase")), 0)
    phb = _PHASE_ORDINAL.get(str((pb.get("status") or {}).get("phase")), 0)
    if pha != phb:
        return pha < phb
    if is_ready(pa) != is_ready(pb):
        return not is_ready(pa)
    ca, cb = _deletion_cost(pa), _deletion_cost(pb)
    if ca != cb:
        return ca < cb
    if ra != rb:
        return ra > rb
    if is_ready(pa) and is_ready(pb):
        ta = _time((_ready_condition(pa) or {}).get("lastTransitionTime"))
        tb = _time((_ready_condition(pb) or {}).get("lastTransitionTime"))
        if ta != tb:
            if ta is None or tb is None:
                return _after_or_zero(ta, tb)
            diff = _log_rank_diff(ta, tb, now)
            if diff != 0:
                return diff < 0
            return str(_md(pa).get("uid")) < str(_md(pb).get("uid"))
    if _restarts(pa) != _restarts(pb):
        return _restarts(pa) > _restarts(pb)
    ta, tb = _time(_md(pa).get("creationTimestamp")), _time(_md(pb).get("creationTimestamp"))
    if ta != tb:
        if ta is None or tb is None:
            return _after_or_zero(ta, tb)
        diff = _log_rank_diff(ta, tb, now)
        if diff != 0:
            return diff < 0
        return str(_md(pa).get("uid")) < str(_md(pb).get("uid"))
    return False


def pods_to_delete(pods: Sequence[Obj], related: Sequence[Obj], count: int,
                   now: datetime | None = None) -> list[Obj]:
    """The `count` pods to delete first (`getPodsToDelete`): ranked by
    `ActivePodsWithRanks`, each pod's rank being the number of active `related` pods
    (those of the owner and of its siblings under one Deployment) on its node."""
    if count >= len(pods):
        return list(pods)
    now = now or datetime.now(UTC)
    on_node: dict[str, int] = {}
    for pod in related:
        if is_active(pod):
            node = (pod.get("spec") or {}).get("nodeName") or ""
            on_node[node] = on_node.get(node, 0) + 1
    ranked = [(pod, on_node.get((pod.get("spec") or {}).get("nodeName") or "", 0))
              for pod in pods]

    def compare(a: tuple[Obj, int], b: tuple[Obj, int]) -> int:
        if _ranked_less(a, b, now):
            return -1
        if _ranked_less(b, a, now):
            return 1
        return 0

    ranked.sort(key=functools.cmp_to_key(compare))
    return [pod for pod, _ in ranked[:count]]

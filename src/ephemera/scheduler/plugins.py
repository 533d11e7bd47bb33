"""The scheduler's filter and score plugins, with upstream's names, order and reasons.

Filters run in upstream's default order and stop at the first that rejects a node:

- NodeUnschedulable: `spec.unschedulable` and no toleration of
  `node.kubernetes.io/unschedulable:NoSchedule`: `node(s) were unschedulable`;
- TaintToleration: a `NoSchedule`/`NoExecute` taint the pod does not tolerate:
  `node(s) had untolerated taint(s)`;
- NodeAffinity: `spec.nodeSelector` or the required node affinity does not match the
  node: `node(s) didn't match Pod's node affinity/selector`;
- NodeResourcesFit: one reason per resource short: `Too many pods`, `Insufficient cpu`,
  `Insufficient memory`, `Insufficient ephemeral-storage`, `Insufficient <name>`;
- NodeDeclaredFeatures: the node's `status.declaredFeatures` lacks a feature the pod needs:
  `node(s) didn't match Pod's required features`.

Every rejection but NodeResourcesFit's is one preemption cannot resolve (upstream's
`UnschedulableAndUnresolvable`). As upstream's PreFilter `Skip`, a filter that cannot reject
any node for the pod is left out of its `PodInfo.filters` (`pre_filter`): NodeAffinity for a
pod without a nodeSelector or required node affinity, NodeDeclaredFeatures for a pod that
needs no feature.

Taints include those upstream's node lifecycle controller derives from conditions
(TaintNodesByCondition), which ephemera applies here since it has no such controller:
`Ready=False` is `node.kubernetes.io/not-ready:NoSchedule`, `Ready=Unknown` is
`node.kubernetes.io/unreachable:NoSchedule`, `MemoryPressure`, `DiskPressure`, `PIDPressure`
and `NetworkUnavailable` `True` are `node.kubernetes.io/<memory|disk|pid>-pressure` and
`node.kubernetes.io/network-unavailable` (`NoSchedule`). A node without a `Ready` condition is
not tainted. A pod that tolerates a taint may land there, as upstream.

The only feature a pod needs at scheduling time in ephemera is
`PodLevelResourcesEphemeralStorage`: a pod with pod-level `ephemeral-storage` in
`spec.resources` requests or limits (checked with the `NodeDeclaredFeatures` gate on).

Scoring is NodeResourcesFit's LeastAllocated over cpu and memory, weight 1 each:
`sum((allocatable - requested) * 100 / allocatable) / 2` with the non-zero requests of the
node's pods plus the incoming pod. A node keeps its scores by the pod's (cpu, memory) request
until the node or its pods change (`NodeInfo.scores`): most nodes a pod is tried on are as
the previous pod found them. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ephemera.api.featuregates import NODE_DECLARED_FEATURES, gate_enabled
from ephemera.pods.resources import pod_placement_features
from ephemera.scheduler.nodeinfo import (
    Gates,
    NodeInfo,
    Resources,
    pod_fit_request,
    pod_score_request,
)

__all__ = [
    "FILTERS",
    "REASON_AFFINITY",
    "REASON_FEATURES",
    "REASON_TAINT",
    "REASON_TOO_MANY_PODS",
    "REASON_UNSCHEDULABLE",
    "FilterStatus",
    "PodInfo",
    "Taint",
    "compute_least_allocated_score",
    "effective_taints",
    "has_node_constraints",
    "least_allocated_score",
    "matches_node_affinity",
    "node_labels",
    "pre_filter",
    "required_node_features",
    "run_filters",
    "tolerates",
]

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_TAINT = "node(s) had untolerated taint(s)"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
REASON_FEATURES = "node(s) didn't match Pod's required features"

TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "NoExecute"
MAX_NODE_SCORE = 100

# TaintNodesByCondition: (condition type, status) -> taint key, all NoSchedule.
CONDITION_TAINTS: Mapping[tuple[str, str], str] = {
    ("Ready", "False"): "node.kubernetes.io/not-ready",
    ("Ready", "Unknown"): "node.kubernetes.io/unreachable",
    ("MemoryPressure", "True"): "node.kubernetes.io/memory-pressure",
    ("DiskPressure", "True"): "node.kubernetes.io/disk-pressure",
    ("PIDPressure", "True"): "node.kubernetes.io/pid-pressure",
    ("NetworkUnavailable", "True"): "node.kubernetes.io/network-unavailable",
}


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


@dataclass(frozen=True)
class FilterStatus:
    """A node rejected: the plugin, its reasons, and whether preemption could not help
    (upstream's `UnschedulableAndUnresolvable`)."""

    plugin: str
    reasons: tuple[str, ...]
    unresolvable: bool


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE


@dataclass
class PodInfo:
    """What the filters and scores need of the pod being scheduled, computed once."""

    pod: Mapping[str, Any]
    gates: Gates = None
    fit_request: Resources = field(default_factory=Resources)
    score_request: Resources = field(default_factory=Resources)
    required_features: tuple[str, ...] = ()
    tolerations: list[Mapping[str, Any]] = field(default_factory=list)
    # Whether the pod has a nodeSelector or a required node affinity (without either every
    # node matches, and NodeAffinity need not look at the node's labels).
    node_constrained: bool = True
    # The filters that can reject a node for this pod, in order (`pre_filter`).
    filters: tuple[Filter, ...] = field(init=False, default=())
    # What LeastAllocated reads of `score_request`: (milli_cpu, memory).
    score_key: tuple[int, int] = field(init=False, default=(0, 0))

    def __post_init__(self) -> None:
        self.filters = pre_filter(self)
        self.score_key = (self.score_request.milli_cpu, self.score_request.memory)

    @classmethod
    def of(cls, pod: Mapping[str, Any], gates: Gates = None) -> PodInfo:
        spec = _map(pod.get("spec"))
        return cls(pod, gates, pod_fit_request(pod, gates), pod_score_request(pod, gates),
                   required_node_features(pod, gates), _items(spec.get("tolerations")),
                   has_node_constraints(pod))


# --- taints and tolerations ------------------------------------------------------------------


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """upstream's `Toleration.ToleratesTaint`: same effect unless the toleration's is empty,
    same key unless the toleration's is empty, and `Exists` or an equal value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return str(toleration.get("value") or "") == taint.value
    return False


def effective_taints(node: Mapping[str, Any]) -> list[Taint]:
    """`spec.taints` plus the taints the node's conditions imply (TaintNodesByCondition)."""
    taints = [Taint(str(t.get("key") or ""), str(t.get("value") or ""),
                    str(t.get("effect") or ""))
              for t in _items(_map(node.get("spec")).get("taints"))]
    present = {(t.key, t.effect) for t in taints}
    for condition in _items(_map(node.get("status")).get("conditions")):
        key = CONDITION_TAINTS.get((str(condition.get("type")), str(condition.get("status"))))
        if key is not None and (key, NO_SCHEDULE) not in present:
            taints.append(Taint(key, "", NO_SCHEDULE))
            present.add((key, NO_SCHEDULE))
    return taints


# --- node affinity ---------------------------------------------------------------------------


def _int(text: Any) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def _expression_matches(expr: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    key, operator = str(expr.get("key") or ""), expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in values_of
    value = values_of.get(key, "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        have, bound = _int(value), _int(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    """A NodeSelectorTerm: all its expressions and fields match; an empty term matches
    nothing."""
    expressions = _items(term.get("matchExpressions"))
    fields = _items(term.get("matchFields"))
    if not expressions and not fields:
        return False
    if not all(_expression_matches(e, labels) for e in expressions):
        return False
    return all(f.get("key") == "metadata.name"
               and _expression_matches(f, {"metadata.name": name}) for f in fields)


def _required_affinity(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(_map(_map(spec.get("affinity")).get("nodeAffinity"))
                .get("requiredDuringSchedulingIgnoredDuringExecution"))


def has_node_constraints(pod: Mapping[str, Any]) -> bool:
    """Whether `matches_node_affinity` can be false for some node: the pod has a non-empty
    `spec.nodeSelector` or required node affinity terms."""
    spec = _map(pod.get("spec"))
    return bool(_map(spec.get("nodeSelector"))) or "nodeSelectorTerms" in _required_affinity(
        spec)


def node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    """The node's labels as strings (what selectors and affinity terms match)."""
    md = _map(node.get("metadata"))
    return {str(k): str(v) for k, v in _map(md.get("labels")).items()}


def matches_node_affinity(pod: Mapping[str, Any], node: Mapping[str, Any],
                          labels: Mapping[str, str] | None = None) -> bool:
    """`spec.nodeSelector` (every label equal) and the required node affinity (some term
    matching) of upstream's `RequiredNodeAffinity.Match`. `labels`: `node_labels(node)`, when
    the caller keeps them."""
    spec = _map(pod.get("spec"))
    md = _map(node.get("metadata"))
    if labels is None:
        labels = node_labels(node)
    for key, value in _map(spec.get("nodeSelector")).items():
        if labels.get(str(key)) != str(value):
            return False
    required = _required_affinity(spec)
    if "nodeSelectorTerms" not in required:
        return True
    return any(_term_matches(t, labels, str(md.get("name") or ""))
               for t in _items(required.get("nodeSelectorTerms")))


# --- declared features -------------------------------------------------------------------------


def required_node_features(pod: Mapping[str, Any], gates: Gates = None) -> tuple[str, ...]:
    """The node features a pod needs to be placed (none with `NodeDeclaredFeatures` off):
    `PodLevelResourcesEphemeralStorage` for pod-level ephemeral-storage."""
    if not gate_enabled(gates, NODE_DECLARED_FEATURES):
        return ()
    return tuple(pod_placement_features(pod))


# --- filters -------------------------------------------------------------------------------


def node_unschedulable(pod: PodInfo, node: NodeInfo) -> FilterStatus | None:
    if not node.unschedulable:
        return None
    taint = Taint(TAINT_UNSCHEDULABLE, "", NO_SCHEDULE)
    if any(tolerates(t, taint) for t in pod.tolerations):
        return None
    return FilterStatus("NodeUnschedulable", (REASON_UNSCHEDULABLE,), True)


def taint_toleration(pod: PodInfo, node: NodeInfo) -> FilterStatus | None:
    # `effective_taints` of the node, computed once per node object (looked up here, not in
    # a function of its own: this runs for every node a pod is tried on).
    taints: list[Taint] | None = node.derived.get("taints")
    if taints is None:
        taints = node.derived["taints"] = effective_taints(node.node)
    tolerations = pod.tolerations
    for taint in taints:
        if taint.effect not in (NO_SCHEDULE, NO_EXECUTE):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return FilterStatus("TaintToleration", (REASON_TAINT,), True)
    return None


def _node_labels(node: NodeInfo) -> dict[str, str]:
    """`node_labels` of the node, computed once per node object."""
    labels: dict[str, str] | None = node.derived.get("labels")
    if labels is None:
        labels = node.derived["labels"] = node_labels(node.node)
    return labels


def node_affinity(pod: PodInfo, node: NodeInfo) -> FilterStatus | None:
    if matches_node_affinity(pod.pod, node.node, _node_labels(node)):
        return None
    return FilterStatus("NodeAffinity", (REASON_AFFINITY,), True)


def node_resources_fit(pod: PodInfo, node: NodeInfo) -> FilterStatus | None:
    """upstream's `fitsRequest`: the pod count first, then every requested resource (a zero
    request never fails) against allocatable minus what the node's pods request."""
    reasons: list[str] = []
    allocatable, requested, want = node.allocatable, node.requested, pod.fit_request
    if node.pod_count + 1 > allocatable.allowed_pod_number:
        reasons.append(REASON_TOO_MANY_PODS)
    # (Written out, not looped over a table: this runs for every node a pod is tried on.)
    if want.milli_cpu > 0 and want.milli_cpu > allocatable.milli_cpu - requested.milli_cpu:
        reasons.append("Insufficient cpu")
    if want.memory > 0 and want.memory > allocatable.memory - requested.memory:
        reasons.append("Insufficient memory")
    if want.ephemeral_storage > 0 and want.ephemeral_storage > (
            allocatable.ephemeral_storage - requested.ephemeral_storage):
        reasons.append("Insufficient ephemeral-storage")
    if want.scalars:
        for name in sorted(want.scalars):
            amount = want.scalars[name]
            if amount > 0 and amount > (allocatable.scalars.get(name, 0)
                                        - requested.scalars.get(name, 0)):
                reasons.append(f"Insufficient {name}")
    if not reasons:
        return None
    return FilterStatus("NodeResourcesFit", tuple(reasons), False)


def node_declared_features(pod: PodInfo, node: NodeInfo) -> FilterStatus | None:
    declared = _map(node.node.get("status")).get("declaredFeatures")
    have = {str(f) for f in declared} if isinstance(declared, list) else set()
    if all(f in have for f in pod.required_features):
        return None
    return FilterStatus("NodeDeclaredFeatures", (REASON_FEATURES,), True)


Filter = Callable[[PodInfo, NodeInfo], FilterStatus | None]

FILTERS: Sequence[Filter] = (node_unschedulable, taint_toleration, node_affinity,
                             node_resources_fit, node_declared_features)


def pre_filter(pod: PodInfo) -> tuple[Filter, ...]:
    """`FILTERS` less those that cannot reject any node for `pod` (upstream's PreFilter
    `Skip`): NodeAffinity for a pod without a nodeSelector or required node affinity,
    NodeDeclaredFeatures for a pod that needs no feature."""
    skip: set[Filter] = set()
    if not pod.node_constrained:
        skip.add(node_affinity)
    if not pod.required_features:
        skip.add(node_declared_features)
    return tuple(plugin for plugin in FILTERS if plugin not in skip)


def run_filters(pod: PodInfo, node: NodeInfo) -> FilterStatus | None:
    """The first rejection of `node` for `pod` (of `pod.filters`), or None when it fits."""
    for plugin in pod.filters:
        status = plugin(pod, node)
        if status is not None:
            return status
    return None


def missing_features(pod: PodInfo, node: NodeInfo) -> list[str]:
    """The features of `pod.required_features` the node does not declare (for logs)."""
    declared = _map(node.node.get("status")).get("declaredFeatures")
    have = {str(f) for f in declared} if isinstance(declared, list) else set()
    return [f for f in pod.required_features if f not in have]


# --- scoring -------------------------------------------------------------------------------


# How many scores a node keeps (`NodeInfo.scores`: one per pod size met since the node or
# its pods last changed) before it starts again.
SCORES_KEPT = 16


def _least_requested(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def least_allocated_score(pod: PodInfo, node: NodeInfo) -> int:
    """`compute_least_allocated_score`, kept on the node for pods of the same size until the
    node or its pods change (the arithmetic on memory's large integers is most of a node's
    scoring)."""
    score = node.scores.get(pod.score_key)
    if score is None:
        if len(node.scores) >= SCORES_KEPT:
            node.scores.clear()
        score = node.scores[pod.score_key] = compute_least_allocated_score(pod, node)
    return score


def compute_least_allocated_score(pod: PodInfo, node: NodeInfo) -> int:
    """LeastAllocated: the weighted mean over cpu and memory of the free share (0-100) left
    after placing the pod, skipping a resource the node has none of."""
    used, allocatable, want = node.non_zero_requested, node.allocatable, pod.score_request
    score = weights = 0
    # LeastAllocated's default resources, cpu and memory, weight 1 each (written out: this
    # runs for every feasible node).
    if allocatable.milli_cpu:
        score += _least_requested(used.milli_cpu + want.milli_cpu, allocatable.milli_cpu)
        weights += 1
    if allocatable.memory:
        score += _least_requested(used.memory + want.memory, allocatable.memory)
        weights += 1
    return score // weights if weights else 0

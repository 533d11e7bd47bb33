"""One scheduling decision: filter the nodes until enough are feasible, score those, pick one
of the best; or the failure message upstream's scheduler would write.

`schedule_pod(pod, nodes, gates, start=i)` returns a `ScheduleResult`: the chosen node (the
highest LeastAllocated score; ties go to one of the best at random, as upstream's `selectHost`
does), or the `FitError` message. As upstream's `findNodesThatPassFilters`, the nodes are
tried from index `start` round the list, and the search stops once
`num_feasible_nodes_to_find(len(nodes))` feasible nodes are found (all nodes below 100;
42% at 1,000, at least 100 and 5%): the caller moves its start by `result.processed` for the
next pod, so every node gets its turn. When no node fits, every node was tried, and the
message is:

    0/3 nodes are available: 3 Insufficient ephemeral-storage. preemption: 0/3 nodes are
    available: 3 No preemption victims found for incoming pod.

(one line). The first part counts each rejection reason over the nodes (`"<count> <reason>"`,
sorted as strings, joined with `", "`, then `"."`), as `FitError.Error()` does. The second is
what upstream's DefaultPreemption PostFilter appends: a node rejected only for resources
"might" be helped by preemption and, ephemera having no pod priorities to preempt by, counts
as `No preemption victims found for incoming pod`; a node rejected by any other plugin is
`Preemption is not helpful for scheduling`. A pod with `preemptionPolicy: Never` gets
`preemption: not eligible due to preemptionPolicy=Never.`. With no nodes at all the message is
`no nodes available to schedule pods`. Pure: no I/O.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from ephemera.scheduler.nodeinfo import Gates, NodeInfo
from ephemera.scheduler.plugins import (
    FilterStatus,
    PodInfo,
    least_allocated_score,
    run_filters,
)

__all__ = [
    "NO_NODES_AVAILABLE",
    "NO_VICTIMS",
    "PREEMPTION_NOT_HELPFUL",
    "ScheduleResult",
    "fit_error_message",
    "num_feasible_nodes_to_find",
    "schedule_pod",
    "truncate_message",
]

NO_NODES_AVAILABLE = "no nodes available to schedule pods"
NO_VICTIMS = "No preemption victims found for incoming pod"
PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
# upstream's validation.NoteLengthLimit, the longest event message the scheduler sends.
NOTE_LENGTH_LIMIT = 1024
# upstream's minFeasibleNodesToFind and minFeasibleNodesPercentageToFind, and the base of
# the adaptive percentage of nodes to score (percentageOfNodesToScore unset).
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
BASE_PERCENTAGE_OF_NODES_TO_SCORE = 50


@dataclass
class ScheduleResult:
    node_name: str | None
    message: str = ""  # why no node fits (the PodScheduled condition's message)
    statuses: dict[str, FilterStatus] = field(default_factory=dict)  # rejected nodes
    scores: dict[str, int] = field(default_factory=dict)  # feasible nodes
    num_nodes: int = 0
    processed: int = 0  # how many nodes were tried (the next pod starts that much further)

    @property
    def feasible(self) -> int:
        return len(self.scores)


def _histogram(counts: Counter[str]) -> str:
    return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))


def _available(num_nodes: int, counts: Counter[str]) -> str:
    message = f"0/{num_nodes} nodes are available:"
    if counts:
        message += f" {_histogram(counts)}."
    return message


def fit_error_message(num_nodes: int, statuses: Mapping[str, FilterStatus],
                      pod: Mapping[str, Any] | None = None) -> str:
    """upstream's `FitError.Error()` with DefaultPreemption's PostFilter message."""
    if num_nodes == 0:
        return NO_NODES_AVAILABLE
    reasons: Counter[str] = Counter()
    for status in statuses.values():
        reasons.update(status.reasons)
    message = _available(num_nodes, reasons)
    spec = (pod or {}).get("spec") or {}
    if spec.get("preemptionPolicy") == "Never":
        return f"{message} preemption: {NOT_ELIGIBLE_NEVER}"
    preemption: Counter[str] = Counter()
    for status in statuses.values():
        preemption[PREEMPTION_NOT_HELPFUL if status.unresolvable else NO_VICTIMS] += 1
    return f"{message} preemption: {_available(num_nodes, preemption)}"


def truncate_message(message: str, limit: int = NOTE_LENGTH_LIMIT) -> str:
    """upstream's `truncateMessage` for event notes."""
    if len(message) <= limit:
        return message
    suffix = " ..."
    return message[:limit - len(suffix)] + suffix


def num_feasible_nodes_to_find(num_all_nodes: int) -> int:
    """upstream's `numFeasibleNodesToFind` with `percentageOfNodesToScore` unset: every node
    below 100 nodes; else (50 - nodes/125)%, at least 5%, and at least 100 nodes."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    percentage = max(BASE_PERCENTAGE_OF_NODES_TO_SCORE - num_all_nodes // 125,
                     MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def schedule_pod(pod: Mapping[str, Any], nodes: Sequence[NodeInfo], gates: Gates = None, *,
                 start: int = 0, rng: random.Random | None = None) -> ScheduleResult:
    """Filter `nodes` for `pod` from index `start` on until enough are feasible, score the
    feasible ones, choose one of the best (at random: `rng`, default the module's)."""
    info = PodInfo.of(pod, gates)
    result = ScheduleResult(None, num_nodes=len(nodes))
    if not nodes:
        result.message = NO_NODES_AVAILABLE
        return result
    wanted = num_feasible_nodes_to_find(len(nodes))
    scores, statuses = result.scores, result.statuses
    start %= len(nodes)
    for node in chain(nodes[start:], nodes[:start]):
        status = run_filters(info, node)
        if status is not None:
            statuses[node.name] = status
            continue
        scores[node.name] = least_allocated_score(info, node)
        if len(scores) >= wanted:
            break
    result.processed = len(scores) + len(statuses)
    if not result.scores:
        result.message = fit_error_message(len(nodes), result.statuses, pod)
        return result
    best = max(result.scores.values())
    result.node_name = (rng or random).choice(
        [name for name, score in result.scores.items() if score == best])
    return result

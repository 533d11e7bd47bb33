"""What a pod needs of the node, and whether it fits: one rule for the admission of a new pod
(`ephemera.kubelet.agent.admit`) and of a change to an allocated pod
(`AllocationManager.check`, KEP-6395 "node ES or memory must cover the requested emptyDirs").

- `node_need(pod, resource, gates)`: the pod's effective request (`pod_requests`, pod-level
  aware; milli-CPU for `cpu`, bytes otherwise) plus, for `memory`, the `sizeLimit`s of its
  `medium: Memory` emptyDirs and, for `ephemeral-storage`, those of its disk emptyDirs
  (`medium` "" or absent: upstream's local ephemeral volumes, reference section 4.3).
  HugePages emptyDirs (`medium: HugePages`, `HugePages-<size>`) add to neither: they use the
  pod's hugepages. An emptyDir without a `sizeLimit` adds nothing.
- `insufficient(pod, others, allocatable, gates, baseline=None)`: the first of cpu, memory,
  ephemeral-storage the pod needs more of than the node's `allocatable` has left next to
  `others` (their needs by the same rule), as `Shortage(resource, message)` with upstream's
  message `Node didn't have enough resource: R, requested: N, used: N, capacity: N`; None when
  it fits. A resource the pod needs none of, or the node does not list, is not checked. With
  `baseline` (the allocated pod before a change) only resources the pod needs more of than
  the baseline did are checked, as upstream's resize admission. `needs`: how the others'
  needs are had (default: `pod_needs` of each, computed now); the allocation manager passes
  its memo (`AllocationManager.needs`), so that admitting a pod next to N others does not
  parse N pods' quantities again (upstream's NodeInfo keeps its pods' requests summed).
- `pod_needs(pod, gates)`: `node_need` of every checked resource at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ephemera.api.quantity import QuantityError, quantity_from_json
from ephemera.pods import resources as podresources

__all__ = ["Shortage", "insufficient", "node_need", "pod_needs"]

_CHECKED_RESOURCES = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True)
class Shortage:
    resource: str
    message: str


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _bytes(value: Any) -> int:
    try:
        return int(quantity_from_json(value).value())
    except (QuantityError, TypeError, ValueError):
        return 0


def _emptydir_bytes(pod: Mapping[str, Any], medium: str) -> int:
    """The `sizeLimit`s of the pod's emptyDirs of `medium` ("" for disk, "Memory")."""
    total = 0
    for volume in _spec(pod).get("volumes") or []:
        empty = volume.get("emptyDir")
        if not isinstance(empty, Mapping):
            continue
        if str(empty.get("medium") or "") == medium and empty.get("sizeLimit") is not None:
            total += _bytes(empty["sizeLimit"])
    return total


def node_need(pod: Mapping[str, Any], resource: str, gates: Mapping[str, bool]) -> int:
    """What the pod needs of `resource` on the node (milli-CPU, bytes)."""
    return _need(pod, podresources.pod_requests(pod, gates=gates), resource)


def pod_needs(pod: Mapping[str, Any], gates: Mapping[str, bool]) -> dict[str, int]:
    """`node_need` of every checked resource, from one `pod_requests`."""
    requests = podresources.pod_requests(pod, gates=gates)
    return {resource: _need(pod, requests, resource) for resource in _CHECKED_RESOURCES}


def _need(pod: Mapping[str, Any], requests: Mapping[str, Any], resource: str) -> int:
    request = requests.get(resource)
    amount = 0
    if request is not None:
        amount = int(request.milli_value()) if resource == "cpu" else int(request.value())
    if resource == "memory":
        amount += _emptydir_bytes(pod, "Memory")
    elif resource == "ephemeral-storage":
        amount += _emptydir_bytes(pod, "")
    return amount


def _capacity(allocatable: Mapping[str, Any], resource: str) -> int | None:
    if resource not in allocatable:
        return None
    value = allocatable[resource]
    if isinstance(value, str):  # what a Node's allocatable holds: parsed once
        return _parsed_capacity(value, resource == "cpu")
    return _amount(value, resource == "cpu")


@functools.lru_cache(maxsize=256)
def _parsed_capacity(value: str, milli: bool) -> int | None:
    return _amount(value, milli)


def _amount(value: Any, milli: bool) -> int | None:
    try:
        q = quantity_from_json(value)
    except (QuantityError, TypeError, ValueError):
        return None
    return int(q.milli_value()) if milli else int(q.value())


def insufficient(pod: Mapping[str, Any], others: Sequence[Mapping[str, Any]],
                 allocatable: Mapping[str, Any], gates: Mapping[str, bool], *,
                 baseline: Mapping[str, Any] | None = None,
                 needs: Callable[[Mapping[str, Any]], Mapping[str, int]] | None = None
                 ) -> Shortage | None:
    """See the module docstring."""
    own = pod_needs(pod, gates)
    floors = None if baseline is None else \
        needs(baseline) if needs is not None else pod_needs(baseline, gates)
    used_by: list[Mapping[str, int]] | None = None  # the others' needs, each had once
    for resource in _CHECKED_RESOURCES:
        capacity = _capacity(allocatable, resource)
        if capacity is None:
            continue
        need = own[resource]
        floor = floors[resource] if floors is not None else 0
        if need <= floor:
            continue
        if used_by is None:
            used_by = [needs(other) for other in others] if needs is not None else \
                [pod_needs(other, gates) for other in others]
        used = sum(other_needs[resource] for other_needs in used_by)
        if need + used > capacity:
            return Shortage(resource, f"Node didn't have enough resource: {resource}, "
                                      f"requested: {need}, used: {used}, capacity: {capacity}")
    return None

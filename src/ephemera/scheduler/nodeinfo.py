"""What the scheduler knows about a node: its allocatable resources and the requests of the
pods on it, as upstream's `framework.NodeInfo` and `framework.Resource` keep them.

Requests come from `ephemera.pods.resources.pod_requests` (pod-level aware: a key set in
`spec.resources` replaces the containers' aggregate; overhead added), converted to integers
as upstream does: cpu in millicores (`MilliValue`), everything else rounded up (`Value`).
A node's `requested` sums the pods on it; `non_zero_requested` does the same with upstream's
defaults (100m cpu, 200Mi memory) for a container that requests neither, for scoring.
What the scheduler's plugins derive from a node is kept on it: from the node object alone in
`derived` (until `set_node`), the LeastAllocated scores in `scores` (until the node or its
pods change). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ephemera.api.featuregates import POD_LEVEL_RESOURCES, gate_enabled
from ephemera.api.quantity import Quantity
from ephemera.pods.resources import (
    RESOURCE_CPU,
    RESOURCE_EPHEMERAL_STORAGE,
    RESOURCE_MEMORY,
    RESOURCE_PODS,
    ResourceList,
    is_hugepages,
    is_pod_level_requests_set,
    pod_requests,
    resource_list,
)

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "NodeInfo",
    "Resources",
    "assigned_pod_requests",
    "pod_fit_request",
    "pod_score_request",
    "request_inputs",
]

# upstream's schedutil.DefaultMilliCPURequest and DefaultMemoryRequest
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

Gates = Mapping[str, bool] | None


def _is_scalar(name: str) -> bool:
    """Resources counted by name beyond cpu, memory and ephemeral-storage: hugepages and
    extended or prefixed resources (`example.com/gpu`, `kubernetes.io/...`)."""
    return is_hugepages(name) or "/" in name


@dataclass
class Resources:
    """upstream's `framework.Resource`: integer amounts by resource."""

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    allowed_pod_number: int = 0
    scalars: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, resources: Mapping[str, Quantity]) -> Resources:
        out = cls()
        out.add_list(resources)
        return out

    def add_list(self, resources: Mapping[str, Quantity]) -> None:
        """`Resource.Add`: cpu in millicores, pods as a count, the rest rounded up."""
        for name, quantity in resources.items():
            if name == RESOURCE_CPU:
                self.milli_cpu += quantity.milli_value()
            elif name == RESOURCE_MEMORY:
                self.memory += quantity.value()
            elif name == RESOURCE_EPHEMERAL_STORAGE:
                self.ephemeral_storage += quantity.value()
            elif name == RESOURCE_PODS:
                self.allowed_pod_number += quantity.value()
            elif _is_scalar(name):
                self.scalars[name] = self.scalars.get(name, 0) + quantity.value()

    def add(self, other: Resources, sign: int = 1) -> None:
        self.milli_cpu += sign * other.milli_cpu
        self.memory += sign * other.memory
        self.ephemeral_storage += sign * other.ephemeral_storage
        self.allowed_pod_number += sign * other.allowed_pod_number
        for name, amount in other.scalars.items():
            self.scalars[name] = self.scalars.get(name, 0) + sign * amount

    def is_zero(self) -> bool:
        return (self.milli_cpu == 0 and self.memory == 0 and self.ephemeral_storage == 0
                and not any(self.scalars.values()))


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _defaults() -> ResourceList:
    return {RESOURCE_CPU: Quantity.from_milli(DEFAULT_MILLI_CPU_REQUEST),
            RESOURCE_MEMORY: Quantity.from_int(DEFAULT_MEMORY_REQUEST)}


def pod_fit_request(pod: Mapping[str, Any], gates: Gates = None) -> Resources:
    """What NodeResourcesFit checks for a pod to be placed: `PodRequests(pod)`."""
    return Resources.of(pod_requests(pod, gates=gates))


def pod_score_request(pod: Mapping[str, Any], gates: Gates = None) -> Resources:
    """What least-allocated scoring counts for a pod to be placed: its requests with the
    non-zero defaults for a container without a cpu or memory request."""
    return Resources.of(pod_requests(pod, gates=gates, non_missing_container_requests=_defaults()))


def assigned_pod_requests(pod: Mapping[str, Any], gates: Gates = None
                          ) -> tuple[Resources, Resources]:
    """(requested, non-zero requested) of a pod on a node, as `NodeInfo.AddPod` counts it:
    the larger of spec, allocated and actuated resources (in-place resize), and the non-zero
    defaults only for cpu and memory the pod requests nowhere (`getNonMissingContainerRequests`)."""
    requests = pod_requests(pod, gates=gates, use_status_resources=True)
    if gate_enabled(gates, POD_LEVEL_RESOURCES) and is_pod_level_requests_set(pod, gates):
        non_missing = {k: v for k, v in _defaults().items() if k not in requests}
    else:
        non_missing = _defaults()
    non_zero = pod_requests(pod, gates=gates, use_status_resources=True,
                            non_missing_container_requests=non_missing)
    return Resources.of(requests), Resources.of(non_zero)


def request_inputs(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """What `assigned_pod_requests` reads of a pod: its spec, the allocated and actuated
    resources of the container statuses that have any, and the `PodResizePending`
    condition. Two pods with equal inputs request the same (a status update of a running pod
    does not change them)."""
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    statuses = tuple(
        (key, item.get("name"), item.get("allocatedResources"), item.get("resources"))
        for key in ("containerStatuses", "initContainerStatuses")
        for item in ((status or {}).get(key) or ()) if isinstance(item, Mapping)
        and (item.get("allocatedResources") is not None or item.get("resources") is not None))
    resize = tuple(c.get("reason") for c in ((status or {}).get("conditions") or ())
                   if isinstance(c, Mapping) and c.get("type") == "PodResizePending")
    return pod.get("spec"), statuses, resize


@dataclass
class _Accounted:
    pod: Mapping[str, Any]
    requested: Resources
    non_zero: Resources
    inputs: tuple[Any, ...]


class NodeInfo:
    """A node and the pods the scheduler counts on it (bound, and assumed while binding)."""

    def __init__(self, node: Mapping[str, Any], gates: Gates = None) -> None:
        self.gates = gates
        self.node: Mapping[str, Any] = {}
        self.allocatable = Resources()
        self.requested = Resources()
        self.non_zero_requested = Resources()
        self._pods: dict[str, _Accounted] = {}
        # What the filters derive from the node object alone (its effective taints, its
        # labels), kept until the object is replaced: every pod's scheduling cycle filters
        # many nodes.
        self.derived: dict[str, Any] = {}
        # LeastAllocated's scores by the incoming pod's (cpu, memory) score request, for the
        # node and its pods as they are: cleared when either changes (`set_node`, `add_pod`,
        # `remove_pod`). A pod's cycle scores hundreds of nodes, nearly all of them as the
        # previous pod of the same size found them.
        self.scores: dict[tuple[int, int], int] = {}
        self.name = ""  # metadata.name
        self.unschedulable = False  # spec.unschedulable
        self.pod_count = 0  # the pods counted
        self.set_node(node)

    def set_node(self, node: Mapping[str, Any]) -> None:
        self.node = node
        self.derived = {}
        self.scores = {}
        md = node.get("metadata")
        self.name = str((md if isinstance(md, Mapping) else {}).get("name") or "")
        spec = node.get("spec")
        self.unschedulable = bool((spec if isinstance(spec, Mapping) else {}).get(
            "unschedulable"))
        status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
        self.allocatable = Resources.of(resource_list((status or {}).get("allocatable")))

    def pods(self) -> list[Mapping[str, Any]]:
        return [a.pod for a in self._pods.values()]

    def has_pod(self, uid: str) -> bool:
        return uid in self._pods

    def add_pod(self, uid: str, pod: Mapping[str, Any]) -> None:
        """Count `pod` (replacing what was counted for `uid`; its requests are computed
        again only when what they are computed from changed: `request_inputs`)."""
        inputs = request_inputs(pod)
        previous = self._pods.get(uid)
        if previous is not None and previous.inputs == inputs:
            previous.pod = pod
            return
        self.remove_pod(uid)
        requested, non_zero = assigned_pod_requests(pod, self.gates)
        self._pods[uid] = _Accounted(pod, requested, non_zero, inputs)
        self.requested.add(requested)
        self.non_zero_requested.add(non_zero)
        self._pods_changed()

    def remove_pod(self, uid: str) -> None:
        accounted = self._pods.pop(uid, None)
        if accounted is not None:
            self.requested.add(accounted.requested, -1)
            self.non_zero_requested.add(accounted.non_zero, -1)
            self._pods_changed()

    def _pods_changed(self) -> None:
        """The pods counted changed: their count, and no score kept holds."""
        self.pod_count = len(self._pods)
        self.scores = {}

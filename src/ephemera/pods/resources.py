"""Pod resource helpers: effective pod requests and limits, pod-level resources, QoS class.

The one place that knows which resources a pod may set at pod level (`spec.resources`) and how
a pod's effective requests and limits are computed, for validation, defaulting, LimitRanger,
ResourceQuota, the scheduler and the kubelet. It follows upstream's
`k8s.io/component-helpers/resource/helpers.go` (`PodRequests`, `PodLimits`,
`AggregateContainerRequests`, `AggregateContainerLimits`, `IsPodLevelResourcesSet`, ...), the
v1 helpers (`IsOvercommitAllowed`, `GetResourceRequestQuantity`) and
`pkg/apis/core/v1/helper/qos` (`GetPodQOS`, `ComputePodQOS`), see
reference/k8s-semantics.md sections 3.1-3.5:

- containers are aggregated with the KEP-753 sidecar formula: the sum of the regular
  containers and the restartable init containers, at least the largest "init container plus
  the sidecars started before it";
- a supported key set in `spec.resources` replaces the container aggregate for that key
  (`cpu`, `memory`, `hugepages-*`, and `ephemeral-storage` when the
  `PodLevelResourcesEphemeralStorage` gate is on; nothing at all when `PodLevelResources` is
  off);
- `spec.overhead` is added to every request, and only to limits that exist and are non-zero.

Pods are plain JSON dicts. Missing keys are absent, not zero. A value that does not parse as a
quantity is ignored here (validation rejects such pods). Gates are any mapping of gate name to
bool (`ephemera.api.featuregates.FeatureGates` is one); a gate missing from it takes ephemera's
default. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from ephemera.api.featuregates import (
    POD_LEVEL_RESOURCES,
    POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE,
    gate_enabled,
)
from ephemera.api.quantity import Quantity, QuantityError, QuantityFormat, quantity_from_json

__all__ = [
    "QOS_BEST_EFFORT",
    "QOS_BURSTABLE",
    "QOS_GUARANTEED",
    "RESOURCE_CPU",
    "RESOURCE_EPHEMERAL_STORAGE",
    "RESOURCE_HUGEPAGES_PREFIX",
    "RESOURCE_MEMORY",
    "RESOURCE_PODS",
    "RESOURCE_STORAGE",
    "ResourceList",
    "add_resource_lists",
    "aggregate_container_limits",
    "aggregate_container_requests",
    "all_containers_have_limit_for_resource",
    "compute_qos_class",
    "container_limits",
    "container_requests",
    "is_hugepages",
    "is_native_resource",
    "is_overcommit_allowed",
    "is_pod_level_limits_set",
    "is_pod_level_requests_set",
    "is_pod_level_resources_set",
    "is_restartable_init_container",
    "is_supported_pod_level_resource",
    "max_resource_lists",
    "pod_limits",
    "pod_requests",
    "qos_class",
    "resource_list",
    "resource_request_quantity",
    "supported_pod_level_resources",
]

ResourceList = dict[str, Quantity]
# Reads one container's resource list: (container, its status or None, resize infeasible).
_ContainerResources = Callable[[Mapping[str, Any], Mapping[str, Any] | None, bool], ResourceList]

RESOURCE_CPU: Final = "cpu"
RESOURCE_MEMORY: Final = "memory"
RESOURCE_EPHEMERAL_STORAGE: Final = "ephemeral-storage"
RESOURCE_STORAGE: Final = "storage"
RESOURCE_PODS: Final = "pods"
RESOURCE_HUGEPAGES_PREFIX: Final = "hugepages-"
_DEFAULT_NAMESPACE_PREFIX: Final = "kubernetes.io/"

QOS_GUARANTEED: Final = "Guaranteed"
QOS_BURSTABLE: Final = "Burstable"
QOS_BEST_EFFORT: Final = "BestEffort"

# KEP-2837's pod-level resources; KEP-6386 adds ephemeral-storage behind its gate.
_POD_LEVEL_RESOURCES: Final = frozenset({RESOURCE_CPU, RESOURCE_MEMORY})
_QOS_COMPUTE_RESOURCES: Final = (RESOURCE_CPU, RESOURCE_MEMORY)

# --- gates and resource names ---------------------------------------------------------------


def supported_pod_level_resources(gates: Mapping[str, bool] | None = None) -> frozenset[str]:
    """Upstream's `SupportedPodLevelResources()`: the names, plus the `hugepages-` prefix, that
    `spec.resources` may hold; what validation lists in its `Unsupported value` message
    (`"cpu", "hugepages-", "memory"`, and `"ephemeral-storage"` with the gate on)."""
    names = set(_POD_LEVEL_RESOURCES)
    if gate_enabled(gates, POD_LEVEL_RESOURCES) and gate_enabled(
        gates, POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE
    ):
        names.add(RESOURCE_EPHEMERAL_STORAGE)
    names.add(RESOURCE_HUGEPAGES_PREFIX)
    return frozenset(names)


def is_supported_pod_level_resource(name: str, gates: Mapping[str, bool] | None = None) -> bool:
    """Upstream's `IsSupportedPodLevelResource`, with KEP-6386's `ephemeral-storage`."""
    if name.startswith(RESOURCE_HUGEPAGES_PREFIX):
        return True
    return name in supported_pod_level_resources(gates)


def is_hugepages(name: str) -> bool:
    """`IsHugePageResourceName`."""
    return name.startswith(RESOURCE_HUGEPAGES_PREFIX)


def is_native_resource(name: str) -> bool:
    """`IsNativeResource`: no domain, or the `kubernetes.io/` domain."""
    return "/" not in name or name.startswith(_DEFAULT_NAMESPACE_PREFIX)


def is_overcommit_allowed(name: str) -> bool:
    """`IsOvercommitAllowed`: native and not hugepages (extended resources and hugepages need
    request == limit)."""
    return is_native_resource(name) and not is_hugepages(name)


# --- reading pods ---------------------------------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Any]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def resource_list(raw: Any) -> ResourceList:
    """A JSON ResourceList (`{"cpu": "500m", ...}`) as Quantities; unparseable values are left
    out (validation reports them)."""
    out: ResourceList = {}
    for name, value in _mapping(raw).items():
        if isinstance(value, Quantity):
            out[name] = value
            continue
        try:
            out[name] = quantity_from_json(value)
        except (QuantityError, TypeError):
            continue
    return out


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(pod.get("spec"))


def _status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(pod.get("status"))


def container_requests(container: Mapping[str, Any]) -> ResourceList:
    """`container.resources.requests`."""
    return resource_list(_mapping(container.get("resources")).get("requests"))


def container_limits(container: Mapping[str, Any]) -> ResourceList:
    """`container.resources.limits`."""
    return resource_list(_mapping(container.get("resources")).get("limits"))


def is_restartable_init_container(container: Mapping[str, Any]) -> bool:
    """A sidecar: an init container with `restartPolicy: Always`."""
    return container.get("restartPolicy") == "Always"


def _pod_level(pod: Mapping[str, Any], key: str) -> ResourceList:
    return resource_list(_mapping(_spec(pod).get("resources")).get(key))


def _has_supported_key(raw: Any, gates: Mapping[str, bool] | None) -> bool:
    return any(is_supported_pod_level_resource(name, gates) for name in _mapping(raw))


def is_pod_level_requests_set(
    pod: Mapping[str, Any], gates: Mapping[str, bool] | None = None
) -> bool:
    """`IsPodLevelRequestsSet`: some supported key in `spec.resources.requests` (unsupported
    keys do not count)."""
    return _has_supported_key(_mapping(_spec(pod).get("resources")).get("requests"), gates)


def is_pod_level_limits_set(
    pod: Mapping[str, Any], gates: Mapping[str, bool] | None = None
) -> bool:
    """`IsPodLevelLimitsSet`: some supported key in `spec.resources.limits`."""
    return _has_supported_key(_mapping(_spec(pod).get("resources")).get("limits"), gates)


def is_pod_level_resources_set(
    pod: Mapping[str, Any], gates: Mapping[str, bool] | None = None
) -> bool:
    """`IsPodLevelResourcesSet`: some supported key in pod-level requests or limits."""
    return is_pod_level_requests_set(pod, gates) or is_pod_level_limits_set(pod, gates)


def all_containers_have_limit_for_resource(pod: Mapping[str, Any], name: str) -> bool:
    """Every container (init and regular) sets a limit for `name`; used by `defaultPodLimits`."""
    spec = _spec(pod)
    return all(
        name in _mapping(_mapping(c.get("resources")).get("limits"))
        for c in [*_items(spec.get("initContainers")), *_items(spec.get("containers"))]
    )


# --- resource list arithmetic ----------------------------------------------------------------


def add_resource_lists(total: ResourceList, more: Mapping[str, Quantity]) -> None:
    """`addResourceList`: add `more` into `total` in place (a missing key is copied)."""
    for name, quantity in more.items():
        current = total.get(name)
        total[name] = quantity if current is None else current + quantity


def max_resource_lists(total: ResourceList, other: Mapping[str, Quantity]) -> None:
    """`maxResourceList`: per key of `other`, keep the larger value in `total`, in place."""
    for name, quantity in other.items():
        current = total.get(name)
        if current is None or quantity > current:
            total[name] = quantity


def _max_of(first: Mapping[str, Quantity] | None, *others: Mapping[str, Quantity]) -> ResourceList:
    result: ResourceList = dict(first or {})
    for other in others:
        max_resource_lists(result, other)
    return result


# --- container aggregation (KEP-753 sidecar formula) -----------------------------------------


def _is_resize_infeasible(pod: Mapping[str, Any]) -> bool:
    """`IsPodResizeInfeasible`: condition `PodResizePending` with reason `Infeasible`."""
    for condition in _items(_status(pod).get("conditions")):
        if condition.get("type") == "PodResizePending":
            return condition.get("reason") == "Infeasible"
    return False


def _container_status(pod: Mapping[str, Any], name: Any) -> Mapping[str, Any] | None:
    status = _status(pod)
    for key in ("containerStatuses", "initContainerStatuses"):
        for item in _items(status.get(key)):
            if item.get("name") == name:
                return item
    return None


def _spec_requests(c: Mapping[str, Any], cs: Mapping[str, Any] | None, _inf: bool) -> ResourceList:
    return container_requests(c)


def _spec_limits(c: Mapping[str, Any], cs: Mapping[str, Any] | None, _inf: bool) -> ResourceList:
    return container_limits(c)


def _allocated_requests(
    c: Mapping[str, Any], cs: Mapping[str, Any] | None, infeasible: bool
) -> ResourceList:
    if cs is not None and cs.get("allocatedResources") is not None:
        return resource_list(cs.get("allocatedResources"))
    return {} if infeasible else container_requests(c)


def _actuated_requests(
    c: Mapping[str, Any], cs: Mapping[str, Any] | None, infeasible: bool
) -> ResourceList:
    if cs is not None:
        status_resources = _mapping(cs.get("resources"))
        if status_resources.get("requests") is not None:
            return resource_list(status_resources.get("requests"))
        if cs.get("allocatedResources") is not None:
            return resource_list(cs.get("allocatedResources"))
    return {} if infeasible else container_requests(c)


def _actuated_limits(
    c: Mapping[str, Any], cs: Mapping[str, Any] | None, infeasible: bool
) -> ResourceList:
    if cs is not None:
        status_resources = _mapping(cs.get("resources"))
        if status_resources.get("limits") is not None:
            return resource_list(status_resources.get("limits"))
    return {} if infeasible else container_limits(c)


def _apply_non_missing(
    resources: ResourceList, non_missing: Mapping[str, Quantity] | None
) -> ResourceList:
    if not non_missing:
        return resources
    out = dict(resources)
    for name, quantity in non_missing.items():
        if name not in resources:
            out[name] = Quantity() + quantity
    return out


def _aggregate(
    pod: Mapping[str, Any],
    get: _ContainerResources,
    *,
    use_status_resources: bool,
    non_missing: Mapping[str, Quantity] | None,
) -> ResourceList:
    """`aggregateContainerResourcesByFn`: regular containers plus sidecars, at least the
    largest init container plus the sidecars started before it."""
    spec = _spec(pod)
    infeasible = _is_resize_infeasible(pod) if use_status_resources else False

    def of(container: Mapping[str, Any]) -> ResourceList:
        cs = _container_status(pod, container.get("name")) if use_status_resources else None
        return _apply_non_missing(get(container, cs, infeasible), non_missing)

    result: ResourceList = {}
    for container in _items(spec.get("containers")):
        add_resource_lists(result, of(container))

    sidecars: ResourceList = {}
    init_max: ResourceList = {}
    for container in _items(spec.get("initContainers")):
        resources = of(container)
        if is_restartable_init_container(container):
            add_resource_lists(result, resources)
            add_resource_lists(sidecars, resources)
            candidate = dict(sidecars)
        else:
            candidate = {}
            add_resource_lists(candidate, resources)
            add_resource_lists(candidate, sidecars)
        max_resource_lists(init_max, candidate)
    max_resource_lists(result, init_max)
    return result


def aggregate_container_requests(
    pod: Mapping[str, Any],
    *,
    use_status_resources: bool = False,
    non_missing_container_requests: Mapping[str, Quantity] | None = None,
) -> ResourceList:
    """`AggregateContainerRequests`: the containers' requests by the sidecar formula.

    With `use_status_resources` (KEP-1287), per key the largest of the spec, allocated and
    actuated requests (only allocated and actuated when a resize is infeasible).
    `non_missing_container_requests` stands in for a key a container does not request (an
    explicit zero is kept); the scheduler's scoring uses it.
    """

    def aggregate(get: _ContainerResources) -> ResourceList:
        return _aggregate(
            pod,
            get,
            use_status_resources=use_status_resources,
            non_missing=non_missing_container_requests,
        )

    spec_requests = aggregate(_spec_requests)
    if not use_status_resources:
        return spec_requests
    allocated = aggregate(_allocated_requests)
    actuated = aggregate(_actuated_requests)
    if _is_resize_infeasible(pod):
        return _max_of(actuated, allocated)
    return _max_of(spec_requests, actuated, allocated)


def aggregate_container_limits(
    pod: Mapping[str, Any], *, use_status_resources: bool = False
) -> ResourceList:
    """`AggregateContainerLimits`: the containers' limits by the sidecar formula. A container
    without a limit for a key adds nothing, so one limited container sets the aggregate."""
    spec_limits = _aggregate(pod, _spec_limits, use_status_resources=False, non_missing=None)
    if not use_status_resources:
        return spec_limits
    actuated = _aggregate(pod, _actuated_limits, use_status_resources=True, non_missing=None)
    if _is_resize_infeasible(pod):
        return actuated
    return _max_of(spec_limits, actuated)


# --- effective pod requests and limits -------------------------------------------------------


def _apply_pod_level(
    result: ResourceList, pod_level: Mapping[str, Quantity], gates: Mapping[str, bool] | None
) -> None:
    for name, quantity in pod_level.items():
        if is_supported_pod_level_resource(name, gates):
            result[name] = quantity


def pod_requests(
    pod: Mapping[str, Any],
    *,
    gates: Mapping[str, bool] | None = None,
    exclude_overhead: bool = False,
    use_status_resources: bool = False,
    non_missing_container_requests: Mapping[str, Quantity] | None = None,
    skip_pod_level_resources: bool = False,
    skip_container_level_resources: bool = False,
) -> ResourceList:
    """`PodRequests`: the pod's effective requests.

    The container aggregate (unless `skip_container_level_resources`); then every supported key
    set in `spec.resources.requests` replaces it (unless `skip_pod_level_resources` or the
    `PodLevelResources` gate is off), so the result mixes pod-level and container values per
    key; then `spec.overhead` is added to every key (unless `exclude_overhead`).
    """
    requests: ResourceList = {}
    if not skip_container_level_resources:
        requests = aggregate_container_requests(
            pod,
            use_status_resources=use_status_resources,
            non_missing_container_requests=non_missing_container_requests,
        )
    if (
        not skip_pod_level_resources
        and gate_enabled(gates, POD_LEVEL_RESOURCES)
        and is_pod_level_requests_set(pod, gates)
    ):
        _apply_pod_level(requests, _pod_level(pod, "requests"), gates)
    if not exclude_overhead:
        add_resource_lists(requests, resource_list(_spec(pod).get("overhead")))
    return requests


def pod_limits(
    pod: Mapping[str, Any],
    *,
    gates: Mapping[str, bool] | None = None,
    exclude_overhead: bool = False,
    use_status_resources: bool = False,
    skip_pod_level_resources: bool = False,
) -> ResourceList:
    """`PodLimits`: the pod's effective limits.

    The container aggregate; then, when pod-level requests or limits are set, every supported
    key of `spec.resources.limits` replaces it; then `spec.overhead` is added only to a limit
    that exists and is non-zero (unless `exclude_overhead`).
    """
    limits = aggregate_container_limits(pod, use_status_resources=use_status_resources)
    if (
        not skip_pod_level_resources
        and gate_enabled(gates, POD_LEVEL_RESOURCES)
        and is_pod_level_resources_set(pod, gates)
    ):
        _apply_pod_level(limits, _pod_level(pod, "limits"), gates)
    if not exclude_overhead:
        for name, quantity in resource_list(_spec(pod).get("overhead")).items():
            current = limits.get(name)
            if current is not None and not current.is_zero():
                limits[name] = current + quantity
    return limits


def resource_request_quantity(
    pod: Mapping[str, Any], name: str, *, gates: Mapping[str, bool] | None = None
) -> Quantity:
    """`GetResourceRequestQuantity` (eviction ranking): the pod's request for `name` without
    overhead, from pod-level values alone when pod-level resources are set (a key not set at
    pod level then reads as 0); the overhead is added only to a non-zero total."""
    pod_level = gate_enabled(gates, POD_LEVEL_RESOURCES) and is_pod_level_resources_set(pod, gates)
    fmt = (
        QuantityFormat.BINARY_SI
        if name in (RESOURCE_MEMORY, RESOURCE_STORAGE, RESOURCE_EPHEMERAL_STORAGE)
        else QuantityFormat.DECIMAL_SI
    )
    total = Quantity(0, 0, fmt)
    requests = pod_requests(
        pod, gates=gates, exclude_overhead=True, skip_container_level_resources=pod_level
    )
    if name in requests:
        total = total + requests[name]
    overhead = resource_list(_spec(pod).get("overhead"))
    if name in overhead and not total.is_zero():
        total = total + overhead[name]
    return total


# --- QoS ------------------------------------------------------------------------------------


def _resources_qos(resources: Mapping[str, Any]) -> str:
    """`resourceQOS` for one set of requirements (cpu and memory only)."""
    raw_requests = _mapping(resources.get("requests"))
    raw_limits = _mapping(resources.get("limits"))
    if not raw_requests and not raw_limits:
        return QOS_BEST_EFFORT
    requests = resource_list(raw_requests)
    limits = resource_list(raw_limits)
    zero = Quantity()
    qos = ""
    for name in _QOS_COMPUTE_RESOURCES:
        request = requests.get(name, zero)
        limit = limits.get(name, zero)
        if request != limit:
            return QOS_BURSTABLE
        best_effort = request.is_zero() and limit.is_zero()
        if not qos:
            qos = QOS_BEST_EFFORT if best_effort else QOS_GUARANTEED
        elif best_effort != (qos == QOS_BEST_EFFORT):
            return QOS_BURSTABLE
    return qos


def _all_containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield from _items(spec.get("initContainers"))
    yield from _items(spec.get("containers"))


def compute_qos_class(pod: Mapping[str, Any], *, gates: Mapping[str, bool] | None = None) -> str:
    """`ComputePodQOS`: `Guaranteed`, `Burstable` or `BestEffort` from the spec.

    With `PodLevelResources` on and `spec.resources` present, the pod-level requirements alone
    decide. Otherwise a pod is BestEffort when no container sets cpu or memory, Guaranteed when
    every container sets cpu and memory limits equal to its requests, Burstable otherwise.
    ephemeral-storage never counts.
    """
    spec = _spec(pod)
    if gate_enabled(gates, POD_LEVEL_RESOURCES) and spec.get("resources") is not None:
        return _resources_qos(_mapping(spec.get("resources")))
    pod_qos = ""
    for container in _all_containers(spec):
        qos = _resources_qos(_mapping(container.get("resources")))
        if qos == QOS_BURSTABLE:
            return qos
        if not pod_qos:
            pod_qos = qos
        elif pod_qos != qos:
            return QOS_BURSTABLE
    return pod_qos or QOS_BEST_EFFORT


def qos_class(pod: Mapping[str, Any], *, gates: Mapping[str, bool] | None = None) -> str:
    """`GetPodQOS`: `status.qosClass` when set, else `compute_qos_class`."""
    recorded = _status(pod).get("qosClass")
    if isinstance(recorded, str) and recorded:
        return recorded
    return compute_qos_class(pod, gates=gates)


def pod_placement_features(pod: Mapping[str, Any]) -> list[str]:
    """The NodeDeclaredFeatures a node must declare to run `pod` at all (the scheduler filters
    on it, the apiserver checks it on binding): `PodLevelResourcesEphemeralStorage` for a pod
    with pod-level `ephemeral-storage` requests or limits (KEP-6386)."""
    spec = pod.get("spec")
    resources = spec.get("resources") if isinstance(spec, Mapping) else None
    if not isinstance(resources, Mapping):
        return []
    for kind in ("requests", "limits"):
        values = resources.get(kind)
        if isinstance(values, Mapping) and RESOURCE_EPHEMERAL_STORAGE in values:
            return ["PodLevelResourcesEphemeralStorage"]
    return []

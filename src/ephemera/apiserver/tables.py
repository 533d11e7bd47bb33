"""Server-side printing: `meta.k8s.io/v1` Table responses (`Accept: ...;as=Table;...`) with the
columns kubectl users know, ported from upstream's `pkg/printers/internalversion/printers.go`
(pod status logic as of v1.35) and `duration.HumanDuration`.

The server always prints the wide cells (upstream's table convertor passes `Wide: true`);
kubectl hides `priority: 1` columns unless `-o wide`. Pure functions over plain dict objects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from ephemera.api import apiservice, ingress, labelselector
from ephemera.api.meta import parse_time
from ephemera.api.quantity import QuantityError, quantity_from_json
from ephemera.apiserver.accept import parse_accept
from ephemera.apiserver.resources import Resource

IncludeObject = Literal["PartialObjectMetadata", "Object", "None"]
Obj = Mapping[str, Any]

TABLE_GROUP = "meta.k8s.io"
TABLE_VERSIONS = ("v1", "v1beta1")

_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def _col(name: str, description: str, *, type_: str = "string", priority: int = 0,
         format_: str = "") -> dict[str, Any]:
    return {"name": name, "type": type_, "format": format_, "description": description,
            "priority": priority}


def _name_col(priority: int = 0) -> dict[str, Any]:
    return _col("Name", _NAME_DOC, format_="name", priority=priority)


def _age_col() -> dict[str, Any]:
    return _col("Age", _AGE_DOC)


# ---------------------------------------------------------------------------------------------
# Time


def human_duration(seconds: float) -> str:
    """`k8s.io/apimachinery/pkg/util/duration.HumanDuration` for a duration in seconds."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 60 * 2:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        s = whole % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def since(value: Any, now: datetime) -> str:
    """Upstream's `translateTimestampSince`: `<unknown>` for an unset time."""
    t = parse_time(value)
    if t is None:
        return "<unknown>"
    return human_duration((now - t).total_seconds())


# ---------------------------------------------------------------------------------------------
# Helpers over plain dicts


def _d(obj: Any, *path: str) -> dict[str, Any]:
    cur = obj
    for key in path:
        cur = cur.get(key) if isinstance(cur, Mapping) else None
    return dict(cur) if isinstance(cur, Mapping) else {}


def _l(obj: Any, *path: str) -> list[Any]:
    cur = obj
    for key in path:
        cur = cur.get(key) if isinstance(cur, Mapping) else None
    return list(cur) if isinstance(cur, list) else []


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _has_true_condition(conditions: Iterable[Any], type_: str) -> bool:
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == type_:
            return c.get("status") == "True"
    return False


def _later(current: datetime | None, candidate: Any) -> datetime | None:
    t = parse_time(candidate)
    if t is None:
        return current
    return t if current is None or current < t else current


# ---------------------------------------------------------------------------------------------
# Pods

POD_COLUMNS = [
    _name_col(),
    _col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "The aggregate status of the containers in this pod."),
    _col("Restarts", "The number of times the containers in this pod have been restarted and "
                     "when the last container in this pod has restarted."),
    _age_col(),
    _col("IP", "podIP address allocated to the pod. Routable at least within the cluster. "
               "Empty if not yet allocated.", priority=1),
    _col("Node", "NodeName indicates in which node this pod is scheduled. If empty, this pod "
                 "is a candidate for scheduling by the scheduler defined in schedulerName.",
         priority=1),
    _col("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods "
                           "on the node, but it cannot be scheduled right away as preemption "
                           "victims receive their graceful termination periods.", priority=1),
    _col("Readiness Gates", "If specified, all readiness gates will be evaluated for pod "
                            "readiness.", priority=1),
]


def _restartable(container: Any) -> bool:
    return isinstance(container, Mapping) and container.get("restartPolicy") == "Always"


def _terminated_reason(term: Mapping[str, Any], prefix: str = "") -> str:
    if term.get("reason"):
        return prefix + str(term["reason"])
    if _int(term.get("signal")) != 0:
        return f"{prefix}Signal:{_int(term.get('signal'))}"
    return f"{prefix}ExitCode:{_int(term.get('exitCode'))}"


def pod_status_cells(pod: Obj, now: datetime) -> tuple[str, str, str]:
    """READY, STATUS and RESTARTS of a pod, as upstream's `printPod` computes them."""
    spec, status, meta = _d(pod, "spec"), _d(pod, "status"), _d(pod, "metadata")
    conditions = _l(status, "conditions")
    restarts = 0
    restartable_init_restarts = 0
    total = len(_l(spec, "containers"))
    ready = 0
    last_restart: datetime | None = None
    last_restartable_init_restart: datetime | None = None

    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or phase)
    for c in conditions:
        if (isinstance(c, Mapping) and c.get("type") == "PodScheduled"
                and c.get("reason") == "SchedulingGated"):
            reason = "SchedulingGated"

    init_specs = _l(spec, "initContainers")
    init_by_name = {c.get("name"): c for c in init_specs if isinstance(c, Mapping)}
    total += sum(1 for c in init_specs if _restartable(c))

    initializing = False
    for i, cs in enumerate(_l(status, "initContainerStatuses")):
        if not isinstance(cs, Mapping):
            continue
        restartable = _restartable(init_by_name.get(cs.get("name")))
        restarts += _int(cs.get("restartCount"))
        last_term = _d(cs, "lastState").get("terminated")
        if isinstance(last_term, Mapping):
            last_restart = _later(last_restart, last_term.get("finishedAt"))
        if restartable:
            restartable_init_restarts += _int(cs.get("restartCount"))
            if isinstance(last_term, Mapping):
                last_restartable_init_restart = _later(
                    last_restartable_init_restart, last_term.get("finishedAt"))
        state = _d(cs, "state")
        term, waiting = state.get("terminated"), state.get("waiting")
        if isinstance(term, Mapping) and _int(term.get("exitCode")) == 0:
            continue
        if restartable and cs.get("started") is True:
            if cs.get("ready"):
                ready += 1
            continue
        if isinstance(term, Mapping):
            reason = _terminated_reason(term, "Init:")
        elif (isinstance(waiting, Mapping) and waiting.get("reason")
              and waiting.get("reason") != "PodInitializing"):
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _has_true_condition(conditions, "Initialized"):
        restarts = restartable_init_restarts
        last_restart = last_restartable_init_restart
        has_running = False
        error_reason = ""
        for cs in reversed(_l(status, "containerStatuses")):
            if not isinstance(cs, Mapping):
                continue
            restarts += _int(cs.get("restartCount"))
            last_term = _d(cs, "lastState").get("terminated")
            if isinstance(last_term, Mapping):
                last_restart = _later(last_restart, last_term.get("finishedAt"))
            state = _d(cs, "state")
            term, waiting = state.get("terminated"), state.get("waiting")
            if isinstance(waiting, Mapping) and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif isinstance(term, Mapping):
                reason = _terminated_reason(term)
                if _int(term.get("exitCode")) != 0:
                    error_reason = reason
            elif cs.get("ready") and isinstance(state.get("running"), Mapping):
                has_running = True
                ready += 1
        if reason == "Completed":
            if has_running and _has_true_condition(conditions, "Ready"):
                reason = "Running"
            elif error_reason:
                reason = error_reason
            elif has_running:
                reason = "NotReady"

    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"

    restarts_text = str(restarts)
    if restarts != 0 and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration((now - last_restart).total_seconds())} ago)"
    return f"{ready}/{total}", reason, restarts_text


def _pod_cells(pod: Obj, now: datetime) -> list[Any]:
    spec, status, meta = _d(pod, "spec"), _d(pod, "status"), _d(pod, "metadata")
    ready, reason, restarts = pod_status_cells(pod, now)
    ips = [p.get("ip") for p in _l(status, "podIPs") if isinstance(p, Mapping)]
    pod_ip = (ips[0] if ips else status.get("podIP")) or "<none>"
    gates = _l(spec, "readinessGates")
    readiness = "<none>"
    if gates:
        conditions = [c for c in _l(status, "conditions") if isinstance(c, Mapping)]
        true_count = 0
        for gate in gates:
            for c in conditions:
                if isinstance(gate, Mapping) and c.get("type") == gate.get("conditionType"):
                    true_count += c.get("status") == "True"
                    break
        readiness = f"{true_count}/{len(gates)}"
    return [
        meta.get("name", ""), ready, reason, restarts, since(meta.get("creationTimestamp"), now),
        pod_ip, spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
        readiness,
    ]


def _pod_conditions(pod: Obj) -> list[dict[str, str]] | None:
    phase = _d(pod, "status").get("phase")
    if phase == "Succeeded":
        return [{"type": "Completed", "status": "True", "reason": "Succeeded",
                 "message": "The pod has completed successfully."}]
    if phase == "Failed":
        return [{"type": "Completed", "status": "True", "reason": "Failed",
                 "message": "The pod failed."}]
    return None


# ---------------------------------------------------------------------------------------------
# Nodes

NODE_COLUMNS = [
    _name_col(),
    _col("Status", "The status of the node"),
    _col("Roles", "The roles of the node"),
    _age_col(),
    _col("Version", "Kubelet Version reported by the node."),
    _col("Internal-IP", "List of addresses reachable to the node.", priority=1),
    _col("External-IP", "List of addresses reachable to the node.", priority=1),
    _col("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux "
                     "7 (wheezy)).", priority=1),
    _col("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. "
                           "3.16.0-0.bpo.4-amd64).", priority=1),
    _col("Container-Runtime", "ContainerRuntime Version reported by the node through runtime "
                              "remote API (e.g. containerd://1.4.2).", priority=1),
]

_NODE_ROLE_PREFIX = "node-role.kubernetes.io/"
_NODE_ROLE_LABEL = "kubernetes.io/role"


def node_status(node: Obj) -> str:
    """`Ready`, `NotReady` or `Unknown`, with `,SchedulingDisabled` when cordoned."""
    statuses: list[str] = []
    conditions = {c.get("type"): c for c in _l(node, "status", "conditions")
                  if isinstance(c, Mapping)}
    ready = conditions.get("Ready")
    if ready is not None:
        statuses.append("Ready" if ready.get("status") == "True" else "NotReady")
    if not statuses:
        statuses.append("Unknown")
    if _d(node, "spec").get("unschedulable"):
        statuses.append("SchedulingDisabled")
    return ",".join(statuses)


def node_roles(node: Obj) -> str:
    roles: set[str] = set()
    for key, value in _d(node, "metadata", "labels").items():
        if key.startswith(_NODE_ROLE_PREFIX):
            role = key[len(_NODE_ROLE_PREFIX):]
            if role:
                roles.add(role)
        elif key == _NODE_ROLE_LABEL and value:
            roles.add(str(value))
    return ",".join(sorted(roles)) or "<none>"


def _node_address(node: Obj, type_: str) -> str:
    for address in _l(node, "status", "addresses"):
        if isinstance(address, Mapping) and address.get("type") == type_:
            return str(address.get("address", ""))
    return "<none>"


def _node_cells(node: Obj, now: datetime) -> list[Any]:
    meta, info = _d(node, "metadata"), _d(node, "status", "nodeInfo")
    return [
        meta.get("name", ""), node_status(node), node_roles(node),
        since(meta.get("creationTimestamp"), now), info.get("kubeletVersion", ""),
        _node_address(node, "InternalIP"), _node_address(node, "ExternalIP"),
        info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


# ---------------------------------------------------------------------------------------------
# Events

EVENT_COLUMNS = [
    _col("Last Seen", "The time at which the most recent occurrence of this event was "
                      "recorded."),
    _col("Type", "Type of this event (Normal, Warning), new types could be added in the "
                 "future"),
    _col("Reason", "This should be a short, machine understandable string that gives the "
                   "reason for the transition into the object's current status."),
    _col("Object", "The object that this event is about."),
    _col("Subobject", "If referring to a piece of an object instead of an entire object, this "
                      "string should contain a valid JSON/Go field access statement, such as "
                      "desiredState.manifest.containers[2].", priority=1),
    _col("Source", "The component reporting this event. Should be a short machine "
                   "understandable string.", priority=1),
    _col("Message", "A human-readable description of the status of this operation."),
    _col("First Seen", "The time at which the event was first recorded. (Time of server "
                       "receipt is in TypeMeta.)", priority=1),
    _col("Count", "The number of times this event has occurred.", priority=1),
    _name_col(priority=1),
]


def _event_source(event: Obj) -> str:
    source = _d(event, "source")
    component = source.get("component") or event.get("reportingComponent") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    if not component:
        return "<unknown>"
    return f"{component}, {instance}" if instance else str(component)


def _event_cells(event: Obj, now: datetime) -> list[Any]:
    involved = _d(event, "involvedObject")
    first = since(event.get("firstTimestamp"), now)
    if parse_time(event.get("firstTimestamp")) is None:
        first = since(event.get("eventTime"), now)
    last = since(event.get("lastTimestamp"), now)
    if parse_time(event.get("lastTimestamp")) is None:
        last = first
    count = _int(event.get("count"))
    series = event.get("series")
    if isinstance(series, Mapping):
        last = since(series.get("lastObservedTime"), now)
        count = _int(series.get("count"))
    elif count == 0:
        count = 1
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    return [
        last, event.get("type", ""), event.get("reason", ""), target,
        involved.get("fieldPath", ""), _event_source(event),
        str(event.get("message", "")).strip(), first, count,
        _d(event, "metadata").get("name", ""),
    ]


# ---------------------------------------------------------------------------------------------
# The simpler kinds

NAMESPACE_COLUMNS = [_name_col(), _col("Status", "The status of the namespace"), _age_col()]
CONFIGMAP_COLUMNS = [
    _name_col(),
    _col("Data", "Data contains the configuration data. Each key must consist of alphanumeric "
                 "characters, '-', '_' or '.'."),
    _age_col(),
]
SECRET_COLUMNS = [
    _name_col(),
    _col("Type", "Used to facilitate programmatic handling of secret data."),
    _col("Data", "Data contains the secret data. Each key must consist of alphanumeric "
                 "characters, '-', '_' or '.'."),
    _age_col(),
]
SERVICEACCOUNT_COLUMNS = [
    _name_col(),
    _col("Secrets", "Secrets is a list of the secrets in the same namespace that pods running "
                    "using this ServiceAccount are allowed to use."),
    _age_col(),
]
RESOURCEQUOTA_COLUMNS = [
    _name_col(),
    _age_col(),
    _col("Request", "Request represents a minimum amount of cpu/memory that a container may "
                    "consume."),
    _col("Limit", "Limits control the maximum amount of cpu/memory that a container may use "
                  "independent of contention on the node."),
]
LEASE_COLUMNS = [
    _name_col(),
    _col("Holder", "holderIdentity contains the identity of the holder of a current lease."),
    _age_col(),
]
APISERVICE_COLUMNS = [
    _name_col(),
    _col("Service", "The reference to the service that hosts the API endpoint."),
    _col("Available", "Whether this service is available."),
    _age_col(),
]
INGRESS_COLUMNS = [
    _name_col(),
    _col("Class", "The IngressClass the Ingress names."),
    _col("Hosts", "The hosts of its rules."),
    _col("Address", "The addresses its controller reported."),
    _col("Ports", "The ports it is exposed on."),
    _age_col(),
]
NETWORKPOLICY_COLUMNS = [
    _name_col(),
    _col("Pod-Selector", "The pods the policy selects, as a label selector."),
    _age_col(),
]
CSISTORAGECAPACITY_COLUMNS = [  # upstream prints no Age here
    _name_col(),
    _col("StorageClassName", "The storage class the capacity is for."),
    _col("Capacity", "The free space the CSI driver reported."),
]
ROLEBINDING_COLUMNS = [
    _name_col(),
    _col("Role", "RoleRef can reference a Role in the current namespace or a ClusterRole in "
                 "the global namespace. If the RoleRef cannot be resolved, the Authorizer must "
                 "return an error."),
    _age_col(),
    _col("Users", "Users in the roleBinding", priority=1),
    _col("Groups", "Groups in the roleBinding", priority=1),
    _col("ServiceAccounts", "ServiceAccounts in the roleBinding", priority=1),
]
SERVICE_COLUMNS = [
    _name_col(),
    _col("Type", "The type of the service"),
    _col("Cluster-IP", "The cluster IP of the service"),
    _col("External-IP", "The external IP of the service"),
    _col("Port(s)", "The ports of the service"),
    _age_col(),
    _col("Selector", "The labels of the pods that back the service.", priority=1),
]
ENDPOINTS_COLUMNS = [
    _name_col(),
    _col("Endpoints", "The addresses and ports behind the service."),
    _age_col(),
]
ENDPOINTSLICE_COLUMNS = [
    _name_col(),
    _col("AddressType", "The type of the addresses of this slice: IPv4, IPv6 or FQDN."),
    _col("Ports", "The ports of this slice's endpoints."),
    _col("Endpoints", "The addresses of this slice's endpoints."),
    _age_col(),
]
# Upstream's default table convertor, used for kinds without a printer (limitranges; roles
# and clusterroles, whose upstream printer has the same columns).
DEFAULT_COLUMNS = [_name_col(), _col("Created At", _AGE_DOC, type_="date")]


def _quota_cells(quota: Obj, now: datetime) -> list[Any]:
    meta = _d(quota, "metadata")
    hard, used = _d(quota, "status", "hard"), _d(quota, "status", "used")
    requests: list[str] = []
    limits: list[str] = []
    for name in sorted(hard):
        column = limits if name.split(".")[0] == "limits" and "." in name else requests
        column.append(f"{name}: {used.get(name, '0')}/{hard[name]}")
    return [meta.get("name", ""), since(meta.get("creationTimestamp"), now),
            ", ".join(requests), ", ".join(limits)]


def _binding_cells(binding: Obj, now: datetime) -> list[Any]:
    """upstream's `printRoleBinding` / `printClusterRoleBinding` (wide)."""
    ref = _d(binding, "roleRef")
    users, groups, accounts = [], [], []
    for subject in _l(binding, "subjects"):
        kind, name = subject.get("kind"), subject.get("name", "")
        if kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        elif kind == "ServiceAccount":
            accounts.append(f"{subject.get('namespace', '')}/{name}")
    return [_d(binding, "metadata").get("name", ""), f"{ref.get('kind', '')}/{ref.get('name', '')}",
            _age(binding, now), ", ".join(users), ", ".join(groups), ", ".join(accounts)]


def _service_external_ip(spec: Obj, status: Obj) -> str:
    """upstream's `getServiceExternalIP` (not wide)."""
    kind = spec.get("type")
    external = [str(ip) for ip in spec.get("externalIPs") or []]
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external) if external else "<none>"
    if kind == "LoadBalancer":
        ingress = [str(i.get("ip") or i.get("hostname") or "")
                   for i in _l(status, "loadBalancer", "ingress") if isinstance(i, dict)]
        found = [x for x in ingress if x] + external
        return ",".join(found) if found else "<pending>"
    if kind == "ExternalName":
        return str(spec.get("externalName") or "")
    return "<unknown>"


def _service_cells(svc: Obj, now: datetime) -> list[Any]:
    """upstream's `printService`: ports as `port[:nodePort]/protocol`, selector as
    `k=v,...` (both `<none>` when empty)."""
    spec = _d(svc, "spec")
    ports = []
    for port in _l(svc, "spec", "ports"):
        if not isinstance(port, dict):
            continue
        protocol = port.get("protocol") or "TCP"
        if port.get("nodePort"):
            ports.append(f"{port.get('port')}:{port['nodePort']}/{protocol}")
        else:
            ports.append(f"{port.get('port')}/{protocol}")
    selector = _d(svc, "spec", "selector")
    return [_name(svc, now), spec.get("type", ""), spec.get("clusterIP") or "<none>",
            _service_external_ip(spec, _d(svc, "status")), ",".join(ports) or "<none>",
            _age(svc, now),
            ",".join(f"{k}={selector[k]}" for k in sorted(selector)) or "<none>"]


def _join_host_port(host: str, port: Any) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _format_endpoints(endpoints: Obj) -> str:
    """upstream's `formatEndpoints`: at most three `ip:port`, then `+ N more...`."""
    subsets = [s for s in _l(endpoints, "subsets") if isinstance(s, dict)]
    if not subsets:
        return "<none>"
    shown: list[str] = []
    count, limit, more = 0, 3, False
    for subset in subsets:
        addresses = [str(a.get("ip", "")) for a in _l(subset, "addresses")
                     if isinstance(a, dict)]
        ports: list[Obj | None] = [p for p in _l(subset, "ports") if isinstance(p, dict)]
        for port in ports or [None]:
            count += len(addresses)
            for ip in addresses:
                if len(shown) == limit:
                    more = True
                    break
                shown.append(ip if port is None else _join_host_port(ip, port.get("port")))
    text = ",".join(shown)
    return f"{text} + {count - limit} more..." if more else text


def _list_with_more(shown: list[str], more: bool, count: int, limit: int) -> str:
    text = ",".join(shown)
    if more:
        return f"{text} + {count - limit} more..."
    return text or "<unset>"


def _endpointslice_cells(eps: Obj, now: datetime) -> list[Any]:
    """upstream's `printEndpointSlice` (`formatDiscoveryPorts`, `formatDiscoveryEndpoints`)."""
    ports: list[str] = []
    count, more = 0, False
    for port in _l(eps, "ports"):
        if not isinstance(port, dict):
            continue
        if len(ports) < 3:
            number = port.get("port")
            ports.append(str(number) if number is not None else str(port.get("name") or "*"))
        else:
            more = True
        count += 1
    port_text = _list_with_more(ports, more, count, 3)
    addresses: list[str] = []
    count, more = 0, False
    for endpoint in _l(eps, "endpoints"):
        for address in _l(endpoint, "addresses"):
            if len(addresses) < 3:
                addresses.append(str(address))
            else:
                more = True
            count += 1
    return [_name(eps, now), eps.get("addressType", ""), port_text,
            _list_with_more(addresses, more, count, 3), _age(eps, now)]


def _created_at(value: Any) -> str:
    t = parse_time(value)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if t else ""


def _simple(*cells: Callable[[Obj, datetime], Any]) -> Callable[[Obj, datetime], list[Any]]:
    return lambda obj, now: [cell(obj, now) for cell in cells]


def _name(obj: Obj, now: datetime) -> Any:
    return _d(obj, "metadata").get("name", "")


def _capacity(obj: Obj, now: datetime) -> str:
    """A CSIStorageCapacity's capacity in canonical form, `<unset>` without one."""
    raw = obj.get("capacity")
    if raw is None:
        return "<unset>"
    try:
        return str(quantity_from_json(raw))
    except (QuantityError, TypeError):
        return str(raw)


def _age(obj: Obj, now: datetime) -> str:
    return since(_d(obj, "metadata").get("creationTimestamp"), now)


# Workloads (upstream's printers.go column texts).

_CONTAINERS_COL = _col("Containers", "Names of each container in the template.", priority=1)
_IMAGES_COL = _col("Images", "Images referenced by each container in the template.",
                   priority=1)
_SELECTOR_COL = _col("Selector", "Label selector for pods.", priority=1)
DEPLOYMENT_COLUMNS = [
    _name_col(),
    _col("Ready", "Number of the pod with ready state"),
    _col("Up-to-date", "Total number of non-terminated pods targeted by this deployment that "
                       "have the desired template spec.", type_="integer"),
    _col("Available", "Total number of available pods (ready for at least minReadySeconds) "
                      "targeted by this deployment.", type_="integer"),
    _age_col(), _CONTAINERS_COL, _IMAGES_COL, _SELECTOR_COL,
]
REPLICASET_COLUMNS = [
    _name_col(),
    _col("Desired", "Number of desired pods.", type_="integer"),
    _col("Current", "Number of actual running pods.", type_="integer"),
    _col("Ready", "Number of ready pods.", type_="integer"),
    _age_col(), _CONTAINERS_COL, _IMAGES_COL, _SELECTOR_COL,
]
STATEFULSET_COLUMNS = [
    _name_col(),
    _col("Ready", "Number of the pod with ready state"),
    _age_col(), _CONTAINERS_COL, _IMAGES_COL,
]
DAEMONSET_COLUMNS = [
    _name_col(),
    _col("Desired", "The desired number of pods.", type_="integer"),
    _col("Current", "The current number of pods.", type_="integer"),
    _col("Ready", "The number of pods ready.", type_="integer"),
    _col("Up-to-date", "The number of pods updated.", type_="integer"),
    _col("Available", "The number of pods available.", type_="integer"),
    _col("Node Selector", "The node selector of the template's pods."),
    _age_col(), _CONTAINERS_COL, _IMAGES_COL, _SELECTOR_COL,
]
CONTROLLERREVISION_COLUMNS = [
    _name_col(),
    _col("Controller", "Controller of the object."),
    _col("Revision", "Revision of the ControllerRevision.", type_="integer"),
    _age_col(),
]


# The autoscaling/v1 Scale of a built-in kind's `scale` subresource (upstream's
# `scaleColumnDefinitions` and `printScale`; its Name column has no `name` format).
SCALE_COLUMNS = [
    _col("Name", _NAME_DOC),
    _col("Desired", "replicas is the desired number of instances for the scaled object.",
         type_="integer"),
    _col("Available", "replicas is the actual number of observed instances of the scaled "
                      "object.", type_="integer"),
    _age_col(),
]


def _scale_cells(scale: Obj, now: datetime) -> list[Any]:
    return [_name(scale, now), _int(_d(scale, "spec").get("replicas")),
            _int(_d(scale, "status").get("replicas")), _age(scale, now)]


def _template_cells(obj: Obj) -> list[str]:
    containers = _l(obj, "spec", "template", "spec", "containers")
    return [",".join(str(_d(c).get("name", "")) for c in containers),
            ",".join(str(_d(c).get("image", "")) for c in containers)]


def _selector_text(obj: Obj) -> str:
    selector = _d(obj, "spec").get("selector")
    if isinstance(selector, Mapping) and "matchLabels" not in selector and \
            "matchExpressions" not in selector:  # a ReplicationController's map
        return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"
    return labelselector.format_label_selector(selector if isinstance(selector, dict)
                                               else None)


def _deployment_cells(obj: Obj, now: datetime) -> list[Any]:
    spec, status = _d(obj, "spec"), _d(obj, "status")
    return [_name(obj, now), f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas'))}",
            _int(status.get("updatedReplicas")), _int(status.get("availableReplicas")),
            _age(obj, now), *_template_cells(obj), _selector_text(obj)]


def _replicaset_cells(obj: Obj, now: datetime) -> list[Any]:
    spec, status = _d(obj, "spec"), _d(obj, "status")
    return [_name(obj, now), _int(spec.get("replicas")), _int(status.get("replicas")),
            _int(status.get("readyReplicas")), _age(obj, now), *_template_cells(obj),
            _selector_text(obj)]


def _statefulset_cells(obj: Obj, now: datetime) -> list[Any]:
    spec, status = _d(obj, "spec"), _d(obj, "status")
    return [_name(obj, now), f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas'))}",
            _age(obj, now), *_template_cells(obj)]


def _daemonset_cells(obj: Obj, now: datetime) -> list[Any]:
    status = _d(obj, "status")
    node_selector = _d(obj, "spec", "template", "spec", "nodeSelector")
    return [_name(obj, now), _int(status.get("desiredNumberScheduled")),
            _int(status.get("currentNumberScheduled")), _int(status.get("numberReady")),
            _int(status.get("updatedNumberScheduled")), _int(status.get("numberAvailable")),
            ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>",
            _age(obj, now), *_template_cells(obj), _selector_text(obj)]


def _controllerrevision_cells(obj: Obj, now: datetime) -> list[Any]:
    controller = "<none>"
    for ref in _l(obj, "metadata", "ownerReferences"):
        ref = _d(ref)
        if ref.get("controller"):
            group = str(ref.get("apiVersion", "")).split("/")[0] if "/" in str(
                ref.get("apiVersion", "")) else ""
            kind = f"{ref.get('kind', '')}.{group}" if group else str(ref.get("kind", ""))
            controller = f"{kind.lower()}/{ref.get('name', '')}"
    return [_name(obj, now), controller, _int(obj.get("revision")), _age(obj, now)]


# --- batch/v1 (upstream's `printJob`, `printCronJob`) -----------------------------------------

JOB_COLUMNS = [
    _name_col(),
    _col("Status", "Whether the job runs, is suspended, completed or failed."),
    _col("Completions", "Pods succeeded out of the completions wanted."),
    _col("Duration", "How long the job has run, or took."),
    _age_col(),
    _CONTAINERS_COL, _IMAGES_COL,
    _col("Selector", "The label query over the job's pods.", priority=1),
]
CRONJOB_COLUMNS = [
    _name_col(),
    _col("Schedule", "The cron schedule the jobs are started on."),
    _col("Timezone", "The time zone of the schedule."),
    _col("Suspend", "Whether new runs are held back.", type_="boolean"),
    _col("Active", "How many of its jobs are running.", type_="integer"),
    _col("Last Schedule", "When a job was last started."),
    _age_col(),
    _CONTAINERS_COL, _IMAGES_COL,
    _col("Selector", "The label query over the jobs' pods.", priority=1),
]


def _container_cells(template_spec: Obj) -> tuple[str, str]:
    """upstream's `layoutContainerCells`: names and images, comma-separated."""
    containers = [c for c in _l(template_spec, "containers") if isinstance(c, Mapping)]
    return (",".join(str(c.get("name", "")) for c in containers),
            ",".join(str(c.get("image", "")) for c in containers))


def _job_cells(job: Obj, now: datetime) -> list[Any]:
    spec, status, meta = _d(job, "spec"), _d(job, "status"), _d(job, "metadata")
    succeeded = _int(status.get("succeeded"))
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{_int(spec.get('completions'))}"
    elif _int(spec.get("parallelism")) > 1:
        completions = f"{succeeded}/1 of {_int(spec.get('parallelism'))}"
    else:
        completions = f"{succeeded}/1"
    start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    duration = ""
    if start is not None:
        duration = human_duration(((end or now) - start).total_seconds())
    conditions = _l(status, "conditions")
    if _has_true_condition(conditions, "Complete"):
        state = "Complete"
    elif _has_true_condition(conditions, "Failed"):
        state = "Failed"
    elif meta.get("deletionTimestamp"):
        state = "Terminating"
    elif _has_true_condition(conditions, "Suspended"):
        state = "Suspended"
    elif _has_true_condition(conditions, "FailureTarget"):
        state = "FailureTarget"
    elif _has_true_condition(conditions, "SuccessCriteriaMet"):
        state = "SuccessCriteriaMet"
    else:
        state = "Running"
    names, images = _container_cells(_d(spec, "template", "spec"))
    return [meta.get("name", ""), state, completions, duration, _age(job, now), names, images,
            labelselector.format_label_selector(spec.get("selector"))]


def _cronjob_cells(cronjob: Obj, now: datetime) -> list[Any]:
    spec, status = _d(cronjob, "spec"), _d(cronjob, "status")
    last = status.get("lastScheduleTime")
    job_spec = _d(spec, "jobTemplate", "spec")
    names, images = _container_cells(_d(job_spec, "template", "spec"))
    suspend = spec.get("suspend")
    return [_name(cronjob, now), spec.get("schedule", ""), spec.get("timeZone") or "<none>",
            "<unset>" if suspend is None else ("True" if suspend else "False"),
            len(_l(status, "active")), since(last, now) if last else "<none>",
            _age(cronjob, now), names, images,
            labelselector.format_label_selector(job_spec.get("selector"))]


_PRINTERS: dict[tuple[str, str], tuple[list[dict[str, Any]], Callable[[Obj, datetime], list[Any]]]]
_PRINTERS = {
    ("", "pods"): (POD_COLUMNS, _pod_cells),
    ("", "nodes"): (NODE_COLUMNS, _node_cells),
    ("", "events"): (EVENT_COLUMNS, _event_cells),
    ("", "namespaces"): (NAMESPACE_COLUMNS, _simple(
        _name, lambda o, n: _d(o, "status").get("phase", ""), _age)),
    ("", "configmaps"): (CONFIGMAP_COLUMNS, _simple(
        _name, lambda o, n: len(_d(o, "data")) + len(_d(o, "binaryData")), _age)),
    ("", "secrets"): (SECRET_COLUMNS, _simple(
        _name, lambda o, n: o.get("type", ""), lambda o, n: len(_d(o, "data")), _age)),
    ("", "serviceaccounts"): (SERVICEACCOUNT_COLUMNS, _simple(
        _name, lambda o, n: len(_l(o, "secrets")), _age)),
    ("", "resourcequotas"): (RESOURCEQUOTA_COLUMNS, _quota_cells),
    ("", "services"): (SERVICE_COLUMNS, _service_cells),
    ("", "endpoints"): (ENDPOINTS_COLUMNS, _simple(
        _name, lambda o, n: _format_endpoints(o), _age)),
    ("discovery.k8s.io", "endpointslices"): (ENDPOINTSLICE_COLUMNS, _endpointslice_cells),
    ("coordination.k8s.io", "leases"): (LEASE_COLUMNS, _simple(
        _name, lambda o, n: _d(o, "spec").get("holderIdentity") or "", _age)),
    ("rbac.authorization.k8s.io", "rolebindings"): (ROLEBINDING_COLUMNS, _binding_cells),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): (ROLEBINDING_COLUMNS, _binding_cells),
    ("apps", "deployments"): (DEPLOYMENT_COLUMNS, _deployment_cells),
    ("apps", "replicasets"): (REPLICASET_COLUMNS, _replicaset_cells),
    ("", "replicationcontrollers"): (REPLICASET_COLUMNS, _replicaset_cells),
    ("apps", "statefulsets"): (STATEFULSET_COLUMNS, _statefulset_cells),
    ("apps", "daemonsets"): (DAEMONSET_COLUMNS, _daemonset_cells),
    ("apps", "controllerrevisions"): (CONTROLLERREVISION_COLUMNS, _controllerrevision_cells),
    ("batch", "jobs"): (JOB_COLUMNS, _job_cells),
    ("batch", "cronjobs"): (CRONJOB_COLUMNS, _cronjob_cells),
    ("apiregistration.k8s.io", "apiservices"): (APISERVICE_COLUMNS, lambda o, n: [
        _name(o, n), *apiservice.table_cells(o), _age(o, n)]),
    ("networking.k8s.io", "ingresses"): (INGRESS_COLUMNS, lambda o, n: [
        _name(o, n), *ingress.table_cells(o), _age(o, n)]),
    ("networking.k8s.io", "networkpolicies"): (NETWORKPOLICY_COLUMNS, _simple(
        _name, lambda o, n: labelselector.format_label_selector(_d(o, "spec").get("podSelector")),
        _age)),
    ("storage.k8s.io", "csistoragecapacities"): (CSISTORAGECAPACITY_COLUMNS, _simple(
        _name, lambda o, n: o.get("storageClassName", ""), _capacity)),
}
_DEFAULT_PRINTER = (DEFAULT_COLUMNS, _simple(
    _name, lambda o, n: _created_at(_d(o, "metadata").get("creationTimestamp"))))


Printer = tuple[list[dict[str, Any]], Callable[[Obj, datetime], list[Any]]]
# The printers of custom resources (their CRD's additionalPrinterColumns), set by
# `ephemera.apiserver.customresources`.
_custom_printers: dict[Resource, Printer] = {}


def set_custom_printers(printers: Mapping[Resource, Printer]) -> None:
    _custom_printers.clear()
    _custom_printers.update(printers)


def _printer(resource: Resource, subresource: str = "") -> Printer:
    """The printer of `resource`'s objects, or of what its `subresource` answers. A custom
    resource's Scale prints with the CRD's columns, as upstream's scale endpoint keeps the
    custom resource's table convertor; a built-in kind's Scale with the Scale printer."""
    custom = _custom_printers.get(resource)
    if custom is not None:
        return custom
    if subresource == "scale":
        return SCALE_COLUMNS, _scale_cells
    return _PRINTERS.get((resource.group, resource.plural), _DEFAULT_PRINTER)


def column_definitions(resource: Resource, subresource: str = "") -> list[dict[str, Any]]:
    columns, _ = _printer(resource, subresource)
    return [dict(c) for c in columns]


def row_cells(resource: Resource, obj: Obj, now: datetime | None = None,
              subresource: str = "") -> list[Any]:
    _, cells = _printer(resource, subresource)
    return cells(obj, now or datetime.now(UTC))


# ---------------------------------------------------------------------------------------------
# The Table


def partial_object_metadata(obj: Obj) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": dict(_d(obj, "metadata"))}


def to_table(
    resource: Resource,
    objects: Iterable[Obj],
    *,
    include_object: IncludeObject = "PartialObjectMetadata",
    with_columns: bool = True,
    now: datetime | None = None,
    metadata: Mapping[str, Any] | None = None,
    api_version: str = "meta.k8s.io/v1",
    subresource: str = "",
) -> dict[str, Any]:
    """A Table of `objects` (one row each), of `resource` or of what its `subresource`
    answers (a Scale). `metadata` is the list metadata to carry (`resourceVersion`,
    `continue`); `with_columns=False` sends `columnDefinitions: null`, as watch events after
    the first may."""
    now = now or datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    for obj in objects:
        row: dict[str, Any] = {"cells": row_cells(resource, obj, now, subresource)}
        if resource.plural == "pods" and not resource.group:
            conditions = _pod_conditions(obj)
            if conditions:
                row["conditions"] = conditions
        if include_object == "PartialObjectMetadata":
            row["object"] = partial_object_metadata(obj)
        elif include_object == "Object":
            row["object"] = dict(obj)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": dict(metadata or {}),
        "columnDefinitions": (column_definitions(resource, subresource) if with_columns
                              else None),
        "rows": rows,
    }


def table_api_version(accept: str | None) -> str | None:
    """`meta.k8s.io/v1` or `meta.k8s.io/v1beta1` when the most preferred JSON range of the
    Accept header that asks for a specific form asks for a Table; None otherwise."""
    for media in parse_accept(accept):
        if not media.matches_json():
            continue
        as_ = media.params.get("as")
        if as_ is None:
            return None
        if (as_ == "Table" and media.params.get("g") == TABLE_GROUP
                and media.params.get("v") in TABLE_VERSIONS):
            return f"{TABLE_GROUP}/{media.params['v']}"
    return None


def wants_table(accept_header: str | None) -> bool:
    """True when the client prefers a Table (kubectl's `get` sends
    `application/json;as=Table;v=v1;g=meta.k8s.io,...,application/json`)."""
    return table_api_version(accept_header) is not None


def parse_include_object(value: str | None) -> IncludeObject:
    """The `includeObject` query parameter; upstream's default is PartialObjectMetadata."""
    if value == "Object":
        return "Object"
    if value == "None":
        return "None"
    return "PartialObjectMetadata"


# ---------------------------------------------------------------------------------------------
# Custom resources: a CRD version's additionalPrinterColumns


_JSONPATH_STEP = re.compile(r"""\.([^.\[]+)|\[(\d+|\*)\]"""
                            r"""|\[\?\(@\.([\w.-]+)\s*==\s*["']([^"']*)["']\)\]""")


def jsonpath_values(obj: Any, path: str) -> list[Any]:
    """The values kubectl's JSONPath subset used by printer columns finds in `obj`: fields
    (`.status.replicas`), indexes (`[0]`, `[*]`) and equality filters
    (`.status.conditions[?(@.type=="Ready")].status`)."""
    values: list[Any] = [obj]
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    pos = 0
    while pos < len(text):
        m = _JSONPATH_STEP.match(text, pos)
        if m is None:
            return []
        pos = m.end()
        name, index, key, wanted = m.groups()
        out: list[Any] = []
        for value in values:
            if name is not None:
                if isinstance(value, Mapping) and name in value:
                    out.append(value[name])
            elif index is not None:
                if isinstance(value, list):
                    if index == "*":
                        out.extend(value)
                    elif int(index) < len(value):
                        out.append(value[int(index)])
            elif isinstance(value, list):
                for item in value:
                    found = jsonpath_values(item, "." + key)
                    if found and str(found[0]) == wanted:
                        out.append(item)
        values = out
    return values


def _custom_cell(type_: str, values: list[Any], now: datetime) -> Any:
    """upstream's `cellForJSONValue`: the first value, as the column's type says (None when
    there is none or it has another type); a `date` is shown as its age, as `kubectl get`
    shows any (`<invalid>` when the string is no time)."""
    if not values:
        return None
    value = values[0]
    if type_ == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return str(value)
        return json.dumps(value, separators=(",", ":"))
    if type_ == "integer":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return int(value) if float(value).is_integer() else None
    if type_ == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if type_ == "boolean":
        return value if isinstance(value, bool) else None
    if type_ == "date":
        if not isinstance(value, str):
            return None
        return "<invalid>" if parse_time(value) is None else since(value, now)
    return None


def custom_printer(columns: Iterable[Mapping[str, Any]]) -> Printer:
    """The Table columns and cells of a custom resource version: Name, then its
    additionalPrinterColumns (an `Age` column of the creation time when it has none, as
    upstream)."""
    specs = list(columns) or [{"name": "Age", "type": "date",
                               "jsonPath": ".metadata.creationTimestamp",
                               "description": _AGE_DOC}]
    definitions = [_name_col()] + [
        _col(str(c.get("name", "")), str(c.get("description") or ""),
             type_=str(c.get("type", "string")), priority=int(c.get("priority") or 0),
             format_=str(c.get("format") or "")) for c in specs]

    def cells(obj: Obj, now: datetime) -> list[Any]:
        row: list[Any] = [_d(obj, "metadata").get("name", "")]
        for c in specs:
            row.append(_custom_cell(str(c.get("type", "string")),
                                    jsonpath_values(obj, str(c.get("jsonPath", ""))), now))
        return row

    return definitions, cells

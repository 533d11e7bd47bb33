"""The service environment variables of a container, as upstream's kubelet makes them
(`pkg/kubelet/envvars`, `getServiceEnvVarMap` in `kubelet_pods.go`).

Which Services: those with a cluster IP (not headless, not `ExternalName`) of the pod's
namespace when the pod's `enableServiceLinks` is true (its default), and always `kubernetes`
in `default` (a Service of that name in the pod's own namespace wins when links are on).

For each, with NAME the Service's name upper-cased and `-` made `_`:
`NAME_SERVICE_HOST` (the ClusterIP), `NAME_SERVICE_PORT` (the first port),
`NAME_SERVICE_PORT_<PORT NAME>` per named port, and Docker's link variables: `NAME_PORT`
(`tcp://IP:PORT` of the first port), then per port `NAME_PORT_<port>_<PROTO>` (the same URL),
`..._PROTO` (lower case), `..._PORT` and `..._ADDR`.

The kubelet appends them after the pod's own variables, leaving out the names the pod
defines, and `$(VAR)` references in the pod's `env` expand to them (`containerconfig`).
Upstream's order is Go's map order (random); ephemera's is by variable name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_NAMESPACE = "default"
MASTER_SERVICES = frozenset({"kubernetes"})


def _variable_name(name: str) -> str:
    return name.replace("-", "_").upper()


def has_cluster_ip(service: Mapping[str, Any]) -> bool:
    """upstream's `IsServiceIPSet`: a ClusterIP other than "" and "None"."""
    ip = str((service.get("spec") or {}).get("clusterIP") or "")
    return ip not in ("", "None")


def _host_port(ip: str, port: int) -> str:
    try:
        if ipaddress.ip_address(ip).version == 6:
            return f"[{ip}]:{port}"
    except ValueError:
        pass
    return f"{ip}:{port}"


def service_variables(service: Mapping[str, Any]) -> list[tuple[str, str]]:
    """One Service's variables, in upstream's order (`envvars.FromServices`)."""
    spec = service.get("spec") or {}
    ports = list(spec.get("ports") or [])
    if not has_cluster_ip(service) or not ports:
        return []
    ip = str(spec["clusterIP"])
    prefix = _variable_name(str((service.get("metadata") or {}).get("name") or ""))
    out = [(f"{prefix}_SERVICE_HOST", ip),
           (f"{prefix}_SERVICE_PORT", str(int(ports[0].get("port") or 0)))]
    for port in ports:
        if port.get("name"):
            out.append((f"{prefix}_SERVICE_PORT_{_variable_name(str(port['name']))}",
                        str(int(port.get("port") or 0))))
    for n, port in enumerate(ports):
        protocol = str(port.get("protocol") or "TCP")
        number = int(port.get("port") or 0)
        url = f"{protocol.lower()}://{_host_port(ip, number)}"
        if n == 0:
            out.append((f"{prefix}_PORT", url))
        port_prefix = f"{prefix}_PORT_{number}_{protocol.upper()}"
        out += [(port_prefix, url), (f"{port_prefix}_PROTO", protocol.lower()),
                (f"{port_prefix}_PORT", str(number)), (f"{port_prefix}_ADDR", ip)]
    return out


def service_env(services: Iterable[Mapping[str, Any]], namespace: str,
                enable_service_links: bool) -> dict[str, str]:
    """The variables for a pod in `namespace` (see the module docstring), sorted by name."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for service in services:
        if not has_cluster_ip(service):
            continue
        md = service.get("metadata") or {}
        name, ns = str(md.get("name") or ""), str(md.get("namespace") or "")
        if ns == DEFAULT_NAMESPACE and name in MASTER_SERVICES:
            chosen.setdefault(name, service)
        elif ns == namespace and enable_service_links:
            chosen[name] = service
    found: dict[str, str] = {}
    for service in chosen.values():
        found.update(service_variables(service))
    return dict(sorted(found.items()))

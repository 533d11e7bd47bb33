"""Services' defaulting and validation, as upstream's `SetDefaults_Service`
(`pkg/apis/core/v1/defaults.go`), the service strategy's ClusterIP/ClusterIPs
normalisation (`pkg/registry/core/service/strategy.go`) and `ValidateService` /
`ValidateServiceUpdate` (`pkg/apis/core/validation`), with upstream's messages. Pure.

The cluster is single-stack IPv4: a service's `ipFamilies` default to `[IPv4]` and its
`ipFamilyPolicy` to `SingleStack`; IPv6 and `RequireDualStack` are refused as upstream's
allocator refuses them on such a cluster. Allocation of ClusterIPs and NodePorts is not here
(`ephemera.apiserver.serviceallocator`).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from ephemera.api import field, meta
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import GoText, go_quote, go_slice
from ephemera.api.validation import (
    port_name_errors,
    port_num_errors,
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_labels,
    validate_qualified_name,
)

CLUSTER_IP_NONE = "None"
SERVICE_TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
SESSION_AFFINITIES = ["ClientIP", "None"]
IP_FAMILIES = ["IPv4", "IPv6"]
IP_FAMILY_POLICIES = ["PreferDualStack", "RequireDualStack", "SingleStack"]
TRAFFIC_POLICIES = ["Cluster", "Local"]

_SPEC = Path("spec")

DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_RE = re.compile(f"^{DNS1035_LABEL_FMT}$")
_DNS1035_LABEL_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or "
                      "'-', start with an alphabetic character, and end with an alphanumeric "
                      "character")


def service_name_errors(name: str, prefix: bool) -> list[str]:
    """`ValidateServiceName` (`NameIsDNS1035Label`; a generateName may end in a dash)."""
    if prefix and name.endswith("-"):
        name = name[:-1] + "a"
    errs: list[str] = []
    if len(name) > meta.DNS1123_LABEL_MAX:
        errs.append(f"must be no more than {meta.DNS1123_LABEL_MAX} characters")
    if not _DNS1035_LABEL_RE.match(name):
        errs.append(meta.regex_error(_DNS1035_LABEL_MSG, DNS1035_LABEL_FMT, "my-name",
                                     "abc-123"))
    return errs


def _spec(svc: dict[str, Any]) -> dict[str, Any]:
    spec = svc.get("spec")
    if not isinstance(spec, dict):
        spec = svc["spec"] = {}
    return spec


def _ports(spec: dict[str, Any]) -> list[dict[str, Any]]:
    ports = spec.get("ports")
    return [p for p in ports if isinstance(p, dict)] if isinstance(ports, list) else []


def is_headless(svc: dict[str, Any]) -> bool:
    return _spec(svc).get("clusterIP") == CLUSTER_IP_NONE


def needs_node_ports(svc: dict[str, Any]) -> bool:
    """NodePort services, and LoadBalancer ones unless `allocateLoadBalancerNodePorts` is
    false, get a node port per service port."""
    spec = _spec(svc)
    kind = spec.get("type")
    if kind == "NodePort":
        return True
    return kind == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is not False


def needs_health_check(svc: dict[str, Any]) -> bool:
    """`NeedsHealthCheck`: LoadBalancer services with `externalTrafficPolicy: Local` get a
    `healthCheckNodePort`."""
    spec = _spec(svc)
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def needs_cluster_ip(svc: dict[str, Any]) -> bool:
    """Every type but ExternalName has cluster IPs, unless headless."""
    return _spec(svc).get("type") != "ExternalName" and not is_headless(svc)


# --- defaults ------------------------------------------------------------------------------


def default_service(svc: dict[str, Any]) -> None:
    """`SetDefaults_Service` and `SetDefaults_ServicePort`."""
    spec = _spec(svc)
    spec.setdefault("sessionAffinity", "None")
    if not spec.get("type"):
        spec["type"] = "ClusterIP"
    for port in _ports(spec):
        if not port.get("protocol"):
            port["protocol"] = "TCP"
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")
    kind = spec["type"]
    if kind in ("NodePort", "LoadBalancer") or spec.get("externalIPs"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if kind != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if kind == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    status = svc.get("status")
    ingress = ((status or {}).get("loadBalancer") or {}).get("ingress") \
        if isinstance(status, dict) else None
    for item in ingress if isinstance(ingress, list) else []:
        if isinstance(item, dict) and item.get("ip") and not item.get("ipMode"):
            item["ipMode"] = "VIP"
    if spec.get("sessionAffinity") == "None":
        spec.pop("sessionAffinityConfig", None)  # upstream clears it: back from ClientIP
    if spec.get("sessionAffinity") == "ClientIP":
        config = spec.setdefault("sessionAffinityConfig", {})
        if isinstance(config, dict):
            client_ip = config.setdefault("clientIP", {})
            if isinstance(client_ip, dict):
                client_ip.setdefault("timeoutSeconds", 10800)


def normalize_cluster_ips(svc: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """The strategy's `NormalizeClusterIPs`: `clusterIP` and `clusterIPs[0]` kept in step,
    whichever one the client set (or changed)."""
    spec = _spec(svc)
    ip, ips = spec.get("clusterIP") or "", spec.get("clusterIPs") or []
    if old is None:
        if ip and not ips:
            spec["clusterIPs"] = [ip]
        elif ips and not ip and isinstance(ips, list) and isinstance(ips[0], str):
            spec["clusterIP"] = ips[0]
        return
    old_spec = old.get("spec") or {}
    old_ip, old_ips = old_spec.get("clusterIP") or "", old_spec.get("clusterIPs") or []
    if ip != old_ip and ips == old_ips:
        # The client changed only clusterIP (kubectl apply of an older manifest, or a clear).
        spec["clusterIPs"] = [ip] if ip else []
        if not ip:
            spec.pop("clusterIPs", None)
    elif ips != old_ips and ip == old_ip and isinstance(ips, list):
        if ips and isinstance(ips[0], str):
            spec["clusterIP"] = ips[0]
        else:
            spec.pop("clusterIP", None)


def init_ip_families(svc: dict[str, Any]) -> None:
    """The allocator's `initIPFamilyFields` on a single-stack IPv4 cluster: ExternalName
    services have none; the others default to SingleStack `[IPv4]`."""
    spec = _spec(svc)
    if spec.get("type") == "ExternalName":
        spec.pop("ipFamilies", None)
        spec.pop("ipFamilyPolicy", None)
        return
    if not spec.get("ipFamilyPolicy"):
        spec["ipFamilyPolicy"] = "SingleStack"
    if not spec.get("ipFamilies"):
        spec["ipFamilies"] = ["IPv4"]


def drop_type_dependent_fields(new: dict[str, Any], old: dict[str, Any]) -> None:
    """The strategy's `dropTypeDependentFields` on update: a type change clears what the new
    type has no use for (cluster IPs and IP families, node ports, the external traffic
    policy, allocateLoadBalancerNodePorts), unless the client changed that field too."""
    spec, old_spec = _spec(new), old.get("spec") or {}
    if old_spec.get("type") != "ExternalName" and spec.get("type") == "ExternalName":
        if (spec.get("clusterIP"), spec.get("clusterIPs")) == (old_spec.get("clusterIP"),
                                                              old_spec.get("clusterIPs")):
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
        for key in ("ipFamilies", "ipFamilyPolicy"):
            if spec.get(key) == old_spec.get(key):
                spec.pop(key, None)
    if needs_node_ports(old) and not needs_node_ports(new):
        old_ports = [p.get("nodePort") for p in old_spec.get("ports") or []
                     if isinstance(p, dict)]
        if [p.get("nodePort") for p in _ports(spec)] == old_ports:
            for port in _ports(spec):
                port.pop("nodePort", None)
    if needs_health_check(old) and not needs_health_check(new) and \
            spec.get("healthCheckNodePort") == old_spec.get("healthCheckNodePort"):
        spec.pop("healthCheckNodePort", None)
    if old_spec.get("type") == "LoadBalancer" and spec.get("type") != "LoadBalancer" and \
            spec.get("allocateLoadBalancerNodePorts") == \
            old_spec.get("allocateLoadBalancerNodePorts"):
        spec.pop("allocateLoadBalancerNodePorts", None)

    def external(s: dict[str, Any]) -> bool:
        return s.get("type") in ("NodePort", "LoadBalancer") or bool(s.get("externalIPs"))

    if external(old_spec) and not external(spec) and \
            spec.get("externalTrafficPolicy") == old_spec.get("externalTrafficPolicy"):
        spec.pop("externalTrafficPolicy", None)


def patch_allocated_values(new: dict[str, Any], old: dict[str, Any]) -> None:
    """The strategy's `patchAllocatedValues` on update: a client that leaves out the
    allocated cluster IPs or node ports keeps them (unless the type change drops them)."""
    spec, old_spec = _spec(new), old.get("spec") or {}
    if needs_cluster_ip(new) and old_spec.get("type") != "ExternalName":
        if not spec.get("clusterIP") and old_spec.get("clusterIP"):
            spec["clusterIP"] = old_spec["clusterIP"]
        if not spec.get("clusterIPs") and old_spec.get("clusterIPs"):
            spec["clusterIPs"] = list(old_spec["clusterIPs"])
    if needs_health_check(new) and not spec.get("healthCheckNodePort") and \
            old_spec.get("healthCheckNodePort"):
        spec["healthCheckNodePort"] = old_spec["healthCheckNodePort"]
    if needs_node_ports(new):
        old_ports = {(p.get("protocol"), p.get("port")): p.get("nodePort")
                     for p in old_spec.get("ports") or [] if isinstance(p, dict)}
        for port in _ports(spec):
            if not port.get("nodePort"):
                node_port = old_ports.get((port.get("protocol"), port.get("port")))
                if node_port:
                    port["nodePort"] = node_port


# --- validation ----------------------------------------------------------------------------


def _valid_ip_errors(value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            ipaddress.ip_address(value)
            return []
        except ValueError:
            pass
    return ["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]


def _port_errors(port: dict[str, Any], require_name: bool, names: set[str],
                 path: Path) -> list[FieldError]:
    """`validateServicePort`."""
    errs: list[FieldError] = []
    name = port.get("name") or ""
    if require_name and not name:
        errs.append(field.required(path.child("name")))
    elif name:
        errs.extend(validate_dns1123_label(name, path.child("name")))
        if name in names:
            errs.append(field.duplicate(path.child("name"), name))
        names.add(name)
    number = port.get("port")
    errs.extend(field.invalid(path.child("port"), number, m)
                for m in port_num_errors(number if isinstance(number, int) else 0))
    protocol = port.get("protocol") or ""
    if not protocol:
        errs.append(field.required(path.child("protocol")))
    elif protocol not in PROTOCOLS:
        errs.append(field.not_supported(path.child("protocol"), protocol, PROTOCOLS))
    target = port.get("targetPort")
    if isinstance(target, str):
        errs.extend(field.invalid(path.child("targetPort"), target, m)
                    for m in port_name_errors(target))
    else:
        errs.extend(field.invalid(path.child("targetPort"), target, m)
                    for m in port_num_errors(target if isinstance(target, int) else 0))
    app_protocol = port.get("appProtocol")
    if isinstance(app_protocol, str):
        errs.extend(validate_qualified_name(app_protocol, path.child("appProtocol")))
    return errs


def _cluster_ip_errors(svc: dict[str, Any]) -> list[FieldError]:
    """`ValidateServiceClusterIPsRelatedFields` (single-stack: the dual-stack pairings need
    two families, which the allocator refuses first)."""
    spec = _spec(svc)
    errs: list[FieldError] = []
    if spec.get("type") == "ExternalName":
        return errs
    ips_path = _SPEC.child("clusterIPs")
    ip = spec.get("clusterIP") or ""
    ips = [str(v) for v in spec.get("clusterIPs") or []]
    if ip:
        if not ips:
            errs.append(field.required(ips_path))
        elif ips[0] != ip:
            errs.append(field.invalid(ips_path, go_slice(ips),
                                      "first value must match `clusterIP`"))
    elif ips:
        errs.append(field.invalid(ips_path, go_slice(ips),
                                  "must be empty when `clusterIP` is not specified"))
    families_path = _SPEC.child("ipFamilies")
    seen: set[str] = set()
    for i, family in enumerate(spec.get("ipFamilies") or []):
        if family not in IP_FAMILIES:
            errs.append(field.not_supported(families_path.index(i), family, IP_FAMILIES))
        if family in seen:
            errs.append(field.duplicate(families_path.index(i), family))
        seen.add(family)
    policy = spec.get("ipFamilyPolicy")
    if policy is not None and policy not in IP_FAMILY_POLICIES:
        errs.append(field.not_supported(_SPEC.child("ipFamilyPolicy"), policy,
                                        IP_FAMILY_POLICIES))
    for i, value in enumerate(ips):
        if i == 0 and value == CLUSTER_IP_NONE:
            if len(ips) > 1:
                errs.append(field.invalid(ips_path, go_slice(ips),
                                          "'None' must be the first and only value"))
            continue
        errs.extend(field.invalid(ips_path.index(i), value, m) for m in _valid_ip_errors(value))
    if len(ips) > 2:
        errs.append(field.invalid(ips_path, go_slice(ips), "may only hold up to 2 values"))
    return errs


def _traffic_policy_errors(svc: dict[str, Any]) -> list[FieldError]:
    """`validateServiceExternalTrafficPolicy` and the internal policy's values."""
    spec = _spec(svc)
    errs: list[FieldError] = []
    external = spec.get("externalTrafficPolicy")
    external_path = _SPEC.child("externalTrafficPolicy")
    externally_reachable = (spec.get("type") in ("NodePort", "LoadBalancer")
                            or bool(spec.get("externalIPs")))
    if not external:
        if externally_reachable:
            errs.append(field.required(external_path))
    elif not externally_reachable:
        errs.append(field.invalid(external_path, external,
                                  "may only be set for externally-accessible services"))
    elif external not in TRAFFIC_POLICIES:
        errs.append(field.not_supported(external_path, external, TRAFFIC_POLICIES))
    internal = spec.get("internalTrafficPolicy")
    internal_path = _SPEC.child("internalTrafficPolicy")
    if spec.get("type") != "ExternalName":
        if not internal:
            errs.append(field.required(internal_path))
        elif internal not in TRAFFIC_POLICIES:
            errs.append(field.not_supported(internal_path, internal, TRAFFIC_POLICIES))
    return errs


def validate_service(svc: dict[str, Any]) -> list[FieldError]:
    """`ValidateService` without the metadata checks (the strategy adds those)."""
    spec = _spec(svc)
    errs: list[FieldError] = []
    ports = _ports(spec)
    kind = spec.get("type") or ""
    if not ports and not is_headless(svc) and kind != "ExternalName":
        errs.append(field.required(_SPEC.child("ports")))
    if kind == "ExternalName":
        if spec.get("clusterIPs"):
            errs.append(field.forbidden(_SPEC.child("clusterIPs"),
                                        "may not be set for ExternalName services"))
        external_name = str(spec.get("externalName") or "").removesuffix(".")
        if not external_name:
            errs.append(field.required(_SPEC.child("externalName")))
        else:
            errs.extend(validate_dns1123_subdomain(external_name, _SPEC.child("externalName")))
    names: set[str] = set()
    for i, port in enumerate(ports):
        errs.extend(_port_errors(port, len(ports) > 1, names, _SPEC.child("ports").index(i)))
    if spec.get("selector") is not None:
        errs.extend(validate_labels(spec["selector"], _SPEC.child("selector")))
    affinity = spec.get("sessionAffinity") or ""
    if not affinity:
        errs.append(field.required(_SPEC.child("sessionAffinity")))
    elif affinity not in SESSION_AFFINITIES:
        errs.append(field.not_supported(_SPEC.child("sessionAffinity"), affinity,
                                        SESSION_AFFINITIES))
    if affinity == "None" and spec.get("sessionAffinityConfig") is not None:
        errs.append(field.forbidden(_SPEC.child("sessionAffinityConfig"),
                                    "must not be set when session affinity is None"))
    errs.extend(_cluster_ip_errors(svc))
    for i, ip in enumerate(spec.get("externalIPs") or []):
        errs.extend(field.invalid(_SPEC.child("externalIPs").index(i), ip, m)
                    for m in _valid_ip_errors(ip))
    if not kind:
        errs.append(field.required(_SPEC.child("type")))
    elif kind not in SERVICE_TYPES:
        errs.append(field.not_supported(_SPEC.child("type"), kind, SERVICE_TYPES))
    if kind == "ClusterIP":
        for i, port in enumerate(ports):
            if port.get("nodePort"):
                errs.append(field.forbidden(_SPEC.child("ports").index(i).child("nodePort"),
                                            "may not be used when `type` is 'ClusterIP'"))
    seen_node_ports: set[tuple[Any, Any]] = set()
    for i, port in enumerate(ports):
        if not port.get("nodePort"):
            continue
        key = (port.get("protocol"), port.get("nodePort"))
        if key in seen_node_ports:
            errs.append(field.duplicate(_SPEC.child("ports").index(i).child("nodePort"),
                                        port.get("nodePort")))
        seen_node_ports.add(key)
    seen_ports: set[tuple[Any, Any]] = set()
    for i, port in enumerate(ports):
        key = (port.get("protocol"), port.get("port"))
        if key in seen_ports:
            errs.append(field.duplicate(
                _SPEC.child("ports").index(i),
                GoText(f"core.ServicePort{{Name:\"\", Protocol:{go_quote(str(key[0]))}, "
                       f"AppProtocol:(*string)(nil), Port:{key[1]}, "
                       "TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, "
                       "NodePort:0}")))
        seen_ports.add(key)
    ranges = spec.get("loadBalancerSourceRanges") or []
    if ranges:
        # upstream's path spells the field with a capital L (a historical accident).
        ranges_path = _SPEC.child("LoadBalancerSourceRanges")
        if kind != "LoadBalancer":
            errs.append(field.forbidden(ranges_path,
                                        "may only be used when `type` is 'LoadBalancer'"))
        for i, value in enumerate(ranges):
            text = str(value).strip()
            try:
                ipaddress.ip_network(text, strict=False)
                valid = "/" in text
            except ValueError:
                valid = False
            if not valid:
                errs.append(field.invalid(ranges_path.index(i), text,
                                          "must be a valid CIDR value, (e.g. 10.9.8.0/24 or "
                                          "2001:db8::/64)"))
    errs.extend(_traffic_policy_errors(svc))
    if spec.get("healthCheckNodePort") and not needs_health_check(svc):
        errs.append(field.forbidden(_SPEC.child("healthCheckNodePort"),
                                    "may only be set when `type` is 'LoadBalancer' and "
                                    "`externalTrafficPolicy` is 'Local'"))
    return errs


def validate_service_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """`ValidateServiceUpdate` without the metadata checks: the primary cluster IP may not
    change (unless the type changes to or from ExternalName), then `ValidateService`."""
    errs: list[FieldError] = []
    spec, old_spec = _spec(new), old.get("spec") or {}
    if "ExternalName" not in (spec.get("type"), old_spec.get("type")):
        old_ips, ips = old_spec.get("clusterIPs") or [], spec.get("clusterIPs") or []
        if old_ips and (not ips or ips[0] != old_ips[0]):
            errs.append(field.invalid(_SPEC.child("clusterIPs").index(0),
                                      ips[0] if ips else "", "may not change once set"))
    errs.extend(validate_service(new))
    return errs


LOAD_BALANCER_IP_MODES = ["Proxy", "VIP"]


def validate_service_status(svc: dict[str, Any]) -> list[FieldError]:
    """`ValidateServiceStatusUpdate` without the metadata checks: the load balancer's
    ingress points (only on LoadBalancer services)."""
    errs: list[FieldError] = []
    status = svc.get("status")
    balancer = status.get("loadBalancer") if isinstance(status, dict) else None
    ingress = (balancer.get("ingress") if isinstance(balancer, dict) else None) or []
    path = Path("status", "loadBalancer", "ingress")
    if _spec(svc).get("type") != "LoadBalancer" and ingress:
        return [field.forbidden(path, "may only be used when `spec.type` is 'LoadBalancer'")]
    for i, item in enumerate(ingress):
        item = item if isinstance(item, dict) else {}
        item_path = path.index(i)
        ip, mode, hostname = item.get("ip"), item.get("ipMode"), item.get("hostname")
        if ip:
            errs.extend(field.invalid(item_path.child("ip"), ip, m)
                        for m in _valid_ip_errors(ip))
        if mode is not None and not ip:
            errs.append(field.forbidden(item_path.child("ipMode"),
                                        "may not be specified when `ip` is not set"))
        elif mode is not None and mode not in LOAD_BALANCER_IP_MODES:
            errs.append(field.not_supported(item_path.child("ipMode"), mode,
                                            LOAD_BALANCER_IP_MODES))
        elif mode is None and ip:
            errs.append(field.required(item_path.child("ipMode"),
                                       "must be specified when `ip` is set"))
        if hostname:
            errs.extend(validate_dns1123_subdomain(str(hostname), item_path.child("hostname")))
            if not _valid_ip_errors(hostname):
                errs.append(field.invalid(item_path.child("hostname"), hostname,
                                          "must be a DNS name, not an IP address"))
    return errs


def single_stack_errors(svc: dict[str, Any]) -> list[FieldError]:
    """What an IPv4 single-stack cluster's allocator refuses (`initIPFamilyFields`)."""
    spec = _spec(svc)
    errs: list[FieldError] = []
    if spec.get("type") == "ExternalName":
        return errs
    if spec.get("ipFamilyPolicy") == "RequireDualStack":
        errs.append(field.invalid(_SPEC.child("ipFamilyPolicy"), "RequireDualStack",
                                  "this cluster is not configured for dual-stack services"))
    for i, family in enumerate(spec.get("ipFamilies") or []):
        if family == "IPv6":
            errs.append(field.invalid(_SPEC.child("ipFamilies").index(i), family,
                                      "not configured on this cluster"))
    if len(spec.get("ipFamilies") or []) > 1:
        errs.append(field.invalid(_SPEC.child("ipFamilies"), go_slice(spec["ipFamilies"],
                                                                      "core.IPFamily"),
                                  "when multiple IP families are specified, the service must "
                                  "be dual-stack"))
    return errs


def unimplemented_warnings(svc: dict[str, Any]) -> list[str]:
    """What a Service asks that ephemera's proxy does not do, said as the pod fields are
    (`ephemera.pods.unimplemented`): the apiserver's `Warning`s on create and update, and
    the proxy's log. Its zero values never warn; ExternalName and headless Services are not
    proxied at all, so they do not either."""
    spec = _spec(svc)
    if spec.get("type") == "ExternalName" or spec.get("clusterIP") == CLUSTER_IP_NONE:
        return []
    out = []
    if spec.get("sessionAffinity") == "ClientIP":
        out.append("spec.sessionAffinity: ClientIP affinity has no effect in ephemera (not "
                   "implemented): connections are balanced as with None")
    if spec.get("externalIPs"):
        out.append("spec.externalIPs: external IPs have no effect in ephemera (not "
                   "implemented)")
    return out

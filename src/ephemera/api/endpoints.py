"""Validation of Endpoints (`ValidateEndpoints`, `pkg/apis/core/validation`) and
EndpointSlices (`ValidateEndpointSlice`, `pkg/apis/discovery/validation`), with upstream's
messages, and the EndpointSlice port default (`protocol: TCP`). Pure.

As upstream, an endpoint's IP may not be unspecified, loopback, link-local or link-local
multicast: nothing outside the host could reach it."""

from __future__ import annotations

import ipaddress
from typing import Any

from ephemera.api import field
from ephemera.api.field import FieldError, Path
from ephemera.api.validation import (
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_qualified_name,
)

ADDRESS_TYPES = ["FQDN", "IPv4", "IPv6"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100
MAX_PORTS = 20000
# Go's `IsLinkLocalMulticast` (the message names ff02::/10 as upstream's does).
_LINK_LOCAL_MULTICAST = (ipaddress.ip_network("224.0.0.0/24"), ipaddress.ip_network("ff02::/16"))


def special_ip_errors(ip: str) -> list[str]:
    """`ValidateNonSpecialIP`'s reasons."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return []
    if addr.is_unspecified:
        return ["may not be unspecified (0.0.0.0)"]
    if addr.is_loopback:
        return ["may not be in the loopback range (127.0.0.0/8, ::1/128)"]
    if addr.is_link_local:
        return ["may not be in the link-local range (169.254.0.0/16, fe80::/10)"]
    if any(addr in net for net in _LINK_LOCAL_MULTICAST):
        return ["may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"]
    return []


def _address_errors(address: Any, path: Path) -> list[FieldError]:
    if not isinstance(address, dict):
        return [field.required(path.child("ip"))]
    errs: list[FieldError] = []
    ip = address.get("ip")
    try:
        ipaddress.ip_address(str(ip))
    except ValueError:
        errs.append(field.invalid(path.child("ip"), ip, "must be a valid IP address, (e.g. "
                                                         "10.9.8.7 or 2001:db8::ffff)"))
    else:
        errs.extend(field.invalid(path.child("ip"), ip, m) for m in special_ip_errors(str(ip)))
    if address.get("hostname"):
        errs.extend(validate_dns1123_label(str(address["hostname"]), path.child("hostname")))
    if address.get("nodeName"):
        errs.extend(validate_dns1123_subdomain(str(address["nodeName"]),
                                               path.child("nodeName")))
    return errs


def _port_errors(port: Any, require_name: bool, path: Path) -> list[FieldError]:
    if not isinstance(port, dict):
        return [field.required(path.child("port"))]
    errs: list[FieldError] = []
    name = port.get("name") or ""
    if require_name and not name:
        errs.append(field.required(path.child("name")))
    elif name:
        errs.extend(validate_dns1123_label(name, path.child("name")))
    number = port.get("port")
    if not isinstance(number, int) or not 0 < number <= 65535:
        errs.append(field.invalid(path.child("port"), number,
                                  "must be between 1 and 65535, inclusive"))
    protocol = port.get("protocol") or ""
    if not protocol:
        errs.append(field.required(path.child("protocol")))
    elif protocol not in PROTOCOLS:
        errs.append(field.not_supported(path.child("protocol"), protocol, PROTOCOLS))
    if isinstance(port.get("appProtocol"), str):
        errs.extend(validate_qualified_name(port["appProtocol"], path.child("appProtocol")))
    return errs


def default_endpoints(obj: dict[str, Any]) -> None:
    """`SetDefaults_EndpointPort`: protocol TCP."""
    for subset in obj.get("subsets") or []:
        for port in (subset or {}).get("ports") or [] if isinstance(subset, dict) else []:
            if isinstance(port, dict) and not port.get("protocol"):
                port["protocol"] = "TCP"


def validate_endpoints(obj: dict[str, Any]) -> list[FieldError]:
    """`ValidateEndpoints` without the metadata checks."""
    errs: list[FieldError] = []
    for i, subset in enumerate(obj.get("subsets") or []):
        path = Path("subsets").index(i)
        subset = subset if isinstance(subset, dict) else {}
        ready, not_ready = subset.get("addresses") or [], subset.get("notReadyAddresses") or []
        if not ready and not not_ready:
            errs.append(field.required(path, "must specify `addresses` or "
                                             "`notReadyAddresses`"))
        for n, address in enumerate(ready):
            errs.extend(_address_errors(address, path.child("addresses").index(n)))
        for n, address in enumerate(not_ready):
            errs.extend(_address_errors(address, path.child("notReadyAddresses").index(n)))
        ports = subset.get("ports") or []
        for n, port in enumerate(ports):
            errs.extend(_port_errors(port, len(ports) > 1, path.child("ports").index(n)))
    return errs


def default_endpoint_slice(obj: dict[str, Any]) -> None:
    """`SetDefaults_EndpointPort` (discovery): protocol TCP, name ""."""
    for port in obj.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("name", "")
            if not port.get("protocol"):
                port["protocol"] = "TCP"


def _slice_address_errors(address: Any, address_type: str, path: Path) -> list[FieldError]:
    text = str(address)
    if address_type in ("IPv4", "IPv6"):
        try:
            parsed = ipaddress.ip_address(text)
            good = parsed.version == (4 if address_type == "IPv4" else 6)
        except ValueError:
            good = False
        if not good:
            return [field.invalid(path, address, f"must be a valid {address_type} address")]
        return [field.invalid(path, address, m) for m in special_ip_errors(text)]
    if address_type == "FQDN":
        return validate_dns1123_subdomain(text, path)
    return []


def validate_endpoint_slice(obj: dict[str, Any]) -> list[FieldError]:
    """`ValidateEndpointSlice` without the metadata checks."""
    errs: list[FieldError] = []
    address_type = obj.get("addressType") or ""
    if not address_type:
        errs.append(field.required(Path("addressType")))
    elif address_type not in ADDRESS_TYPES:
        errs.append(field.not_supported(Path("addressType"), address_type, ADDRESS_TYPES))
    endpoints = obj.get("endpoints") or []
    if len(endpoints) > MAX_ENDPOINTS:
        errs.append(field.FieldError("TooMany", "endpoints",
                                     f"must have at most {MAX_ENDPOINTS} items",
                                     len(endpoints)))
    for i, endpoint in enumerate(endpoints):
        path = Path("endpoints").index(i)
        endpoint = endpoint if isinstance(endpoint, dict) else {}
        addresses = endpoint.get("addresses") or []
        addresses_path = path.child("addresses")
        if not addresses:
            errs.append(field.required(addresses_path, "must contain at least 1 address"))
        elif len(addresses) > MAX_ADDRESSES:
            errs.append(field.FieldError("TooMany", str(addresses_path),
                                         f"must have at most {MAX_ADDRESSES} items",
                                         len(addresses)))
        for n, address in enumerate(addresses):
            errs.extend(_slice_address_errors(address, address_type, addresses_path.index(n)))
        if endpoint.get("nodeName"):
            errs.extend(validate_dns1123_subdomain(str(endpoint["nodeName"]),
                                                   path.child("nodeName")))
        if endpoint.get("hostname"):
            errs.extend(validate_dns1123_label(str(endpoint["hostname"]),
                                               path.child("hostname")))
    ports = obj.get("ports") or []
    names: set[str] = set()
    for i, port in enumerate(ports):
        path = Path("ports").index(i)
        port = port if isinstance(port, dict) else {}
        name = port.get("name") or ""
        if name:
            errs.extend(validate_dns1123_label(name, path.child("name")))
        if name in names:
            errs.append(field.duplicate(path.child("name"), name))
        names.add(name)
        protocol = port.get("protocol") or ""
        if not protocol:
            errs.append(field.required(path.child("protocol")))
        elif protocol not in PROTOCOLS:
            errs.append(field.not_supported(path.child("protocol"), protocol, PROTOCOLS))
        if isinstance(port.get("appProtocol"), str):
            errs.extend(validate_qualified_name(port["appProtocol"], path.child("appProtocol")))
    return errs


def validate_endpoint_slice_update(new: dict[str, Any], old: dict[str, Any]
                                   ) -> list[FieldError]:
    errs = validate_endpoint_slice(new)
    if new.get("addressType") != old.get("addressType"):
        errs.append(field.invalid(Path("addressType"), new.get("addressType"),
                                  "field is immutable"))
    return errs

"""networking.k8s.io/v1 NetworkPolicy: upstream's v1 defaults (`SetDefaults_NetworkPolicy`,
`SetDefaults_NetworkPolicyPort`) and validation (`ValidateNetworkPolicySpec` and its peer,
port and ipBlock rules in `pkg/apis/networking/validation`) with its messages and paths.

ephemera stores and serves NetworkPolicies but nothing enforces them (its node proxy and pod
network filter no traffic): the apiserver says so in a `Warning` on create (`WARNING`).
Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from ephemera.api import field
from ephemera.api import labelselector as ls
from ephemera.api import validation as v
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import GoText, go_quote

WARNING = ("NetworkPolicies are not enforced in ephemera (not implemented): traffic to and "
           "from the selected pods is not restricted")
POLICY_TYPES = ["Ingress", "Egress"]
PROTOCOLS = ["TCP", "UDP", "SCTP"]
_CIDR_ERROR = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
_SPEC = Path("spec")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def default_network_policy(obj: dict[str, Any]) -> None:
    """Ports' protocol TCP; without policyTypes, `Ingress`, and `Egress` too when the policy
    has egress rules. The spec and its podSelector are Go structs upstream, so they are
    always written (`{}` when absent)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = obj["spec"] = {}
    if not isinstance(spec.get("podSelector"), dict):
        spec["podSelector"] = {}
    for direction in ("ingress", "egress"):
        for rule in _l(spec.get(direction)):
            for port in _l(_d(rule).get("ports")):
                if isinstance(port, dict) and port.get("protocol") is None:
                    port["protocol"] = "TCP"
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def validate_network_policy(obj: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateNetworkPolicySpec` (create and update alike)."""
    spec = _d(obj.get("spec"))
    errs = ls.validate_label_selector(_d(spec.get("podSelector")), _SPEC.child("podSelector"))
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(_l(spec.get(direction))):
            path = _SPEC.child(direction).index(i)
            for j, port in enumerate(_l(_d(rule).get("ports"))):
                errs.extend(_port_errors(_d(port), path.child("ports").index(j)))
            for j, peer in enumerate(_l(_d(rule).get(peers))):
                errs.extend(_peer_errors(_d(peer), path.child(peers).index(j)))
    types = _l(spec.get("policyTypes"))
    if len(types) > len(POLICY_TYPES):
        shown = GoText("[]networking.PolicyType{" + ", ".join(go_quote(str(t)) for t in types)
                       + "}")  # Go's %#v of the list (the field error dereferences it)
        errs.append(field.invalid(_SPEC.child("policyTypes"), shown,
                                  "may not specify more than two policyTypes"))
        return errs
    for i, kind in enumerate(types):
        if kind not in POLICY_TYPES:
            errs.append(field.not_supported(_SPEC.child("policyTypes").index(i), kind,
                                            POLICY_TYPES))
    return errs


def _port_errors(port: dict[str, Any], path: Path) -> list[FieldError]:
    """`ValidateNetworkPolicyPort`."""
    errs: list[FieldError] = []
    protocol = port.get("protocol")
    if protocol is not None and protocol not in PROTOCOLS:
        errs.append(field.not_supported(path.child("protocol"), protocol, PROTOCOLS))
    number, end = port.get("port"), port.get("endPort")
    if number is None:
        if end is not None:
            errs.append(field.invalid(path.child("endPort"), end,
                                      "may not be specified when `port` is not specified"))
    elif isinstance(number, int):
        errs.extend(field.invalid(path.child("port"), number, m)
                    for m in v.port_num_errors(number))
        if isinstance(end, int):
            if end < number:
                errs.append(field.invalid(path.child("endPort"), end,
                                          "must be greater than or equal to `port`"))
            errs.extend(field.invalid(path.child("endPort"), end, m)
                        for m in v.port_num_errors(end))
    else:
        if end is not None:
            errs.append(field.invalid(path.child("endPort"), end,
                                      "may not be specified when `port` is non-numeric"))
        errs.extend(field.invalid(path.child("port"), number, m)
                    for m in v.port_name_errors(str(number)))
    return errs


def _peer_errors(peer: dict[str, Any], path: Path) -> list[FieldError]:
    """`ValidateNetworkPolicyPeer`: exactly one kind of peer when one is an ipBlock."""
    errs: list[FieldError] = []
    count = 0
    for key in ("podSelector", "namespaceSelector"):
        if peer.get(key) is not None:
            count += 1
            errs.extend(ls.validate_label_selector(_d(peer[key]), path.child(key)))
    block = peer.get("ipBlock")
    if block is not None:
        count += 1
        errs.extend(_ip_block_errors(_d(block), path.child("ipBlock")))
    if count == 0:
        errs.append(field.required(path, "must specify a peer"))
    elif count > 1 and block is not None:
        errs.append(field.forbidden(path, "may not specify both ipBlock and another peer"))
    return errs


def _network(text: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    if not isinstance(text, str) or "/" not in text:
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _ip_block_errors(block: dict[str, Any], path: Path) -> list[FieldError]:
    """`ValidateIPBlock`: a CIDR, and excepts that are strict subsets of it."""
    cidr = block.get("cidr") or ""
    if not cidr:
        return [field.required(path.child("cidr"))]
    network = _network(cidr)
    if network is None:
        return [field.invalid(path.child("cidr"), cidr, _CIDR_ERROR)]
    errs: list[FieldError] = []
    for i, text in enumerate(_l(block.get("except"))):
        except_path = path.child("except").index(i)
        excepted = _network(text)
        if excepted is None:
            errs.append(field.invalid(except_path, text, _CIDR_ERROR))
            continue
        if excepted.version != network.version or \
                excepted.network_address not in network or \
                network.prefixlen >= excepted.prefixlen:
            errs.append(field.invalid(except_path, text, "must be a strict subset of `cidr`"))
    return errs

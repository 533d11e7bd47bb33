"""What the proxy's nftables table holds for a set of Services and EndpointSlices: pure, no I/O.

The layout is upstream's nftables proxy mode (`pkg/proxy/nftables/proxier.go`), in nftables'
JSON expression syntax (`libnftables-json(5)`):

- verdict maps keyed by destination: `service-ips` (`ip daddr . meta l4proto . th dport` of a
  ClusterIP port → `goto service-…`), `service-nodeports` (`meta l4proto . th dport` of a
  node port, for the addresses of the set `nodeport-ips` → `goto external-…`), and
  `no-endpoint-services` / `no-endpoint-nodeports` (→ `goto reject-chain`, or `drop` when a
  `Local` traffic policy finds no endpoint on this node), looked up by filter chains before
  anything is forwarded or delivered, so a Service without endpoints is refused at once;
- one chain per service port (`service-HASH-ns/name/proto/port`: `numgen random mod N vmap`
  over its endpoint chains, the load balancing; `local-…` with the node's own endpoints for a
  `Local` traffic policy; `external-…` for node port traffic: mark for masquerade, then the
  policy chain), one per endpoint (`endpoint-HASH-ns/name/proto/port__ip/port`: hairpin
  masquerade mark, then `dnat`);
- `mark-for-masquerade` sets bit 0x4000 of the packet mark, `masquerading` (postrouting)
  masquerades marked packets (`fully-random`), as upstream.

ephemera's departures, for clusters side by side on one machine that all use the default
service range 10.96.0.0/12: ClusterIP traffic is taken (DNAT and reject alike) only from the
cluster's own pod CIDR (`--cluster-cidr`), and host-originated traffic to a ClusterIP is not
redirected (its packets say nothing of which cluster they mean). Node ports answer on the
node's own addresses only (its InternalIPs from Node status, loopback excluded, and the pod
bridge's gateway, the first address of `spec.podCIDR`), which no other cluster shares, from
pods, from the host and from elsewhere.

Endpoints as upstream's `CategorizeEndpoints`: the ready ones (`ready` unset counts as
ready); when none is ready, the ones both `serving` and `terminating`. Headless and
ExternalName Services are skipped; `sessionAffinity: ClientIP` and `externalIPs` are not
implemented and come back as warnings (`ephemera.api.services.unimplemented_warnings`, which
the apiserver also answers with), the Service balanced as with `None`.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ephemera.api.services import unimplemented_warnings

Expr = dict[str, Any]
Rule = list[Expr]

FAMILY = "ip"
MASQUERADE_BIT = 0x4000

# Upstream's names.
NAT_PREROUTING = "nat-prerouting"
NAT_OUTPUT = "nat-output"
NAT_POSTROUTING = "nat-postrouting"
FILTER_INPUT = "filter-input"
FILTER_FORWARD = "filter-forward"
FILTER_OUTPUT = "filter-output"
SERVICES = "services"
NODEPORTS = "nodeports"
SERVICE_ENDPOINTS_CHECK = "service-endpoints-check"
NODEPORT_ENDPOINTS_CHECK = "nodeport-endpoints-check"
REJECT_CHAIN = "reject-chain"
MARK_MASQ = "mark-for-masquerade"
MASQUERADING = "masquerading"
SERVICE_IPS = "service-ips"
SERVICE_NODEPORTS = "service-nodeports"
NO_ENDPOINT_SERVICES = "no-endpoint-services"
NO_ENDPOINT_NODEPORTS = "no-endpoint-nodeports"
NODEPORT_IPS = "nodeport-ips"

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
HEADLESS_LABEL = "service.kubernetes.io/headless"
# What upstream's kube-proxy lists: Services and slices not claimed by another proxy, and no
# slices of headless Services.
SERVICE_SELECTOR = f"!{PROXY_NAME_LABEL}"
SLICE_SELECTOR = f"!{PROXY_NAME_LABEL},!{HEADLESS_LABEL}"

NFT_CHAIN_MAXNAMELEN = 256


@dataclass(frozen=True)
class BaseChain:
    """A chain hooked into the kernel: its type, hook and priority."""

    type: str
    hook: str
    prio: int


BASE_CHAINS: dict[str, BaseChain] = {
    FILTER_INPUT: BaseChain("filter", "input", -110),
    FILTER_FORWARD: BaseChain("filter", "forward", -110),
    FILTER_OUTPUT: BaseChain("filter", "output", -110),
    NAT_PREROUTING: BaseChain("nat", "prerouting", -100),
    NAT_OUTPUT: BaseChain("nat", "output", -100),
    NAT_POSTROUTING: BaseChain("nat", "postrouting", 100),
}

# Map and set types, as `add map` / `add set` take them.
MAP_TYPES: dict[str, list[str] | str] = {
    SERVICE_IPS: ["ipv4_addr", "inet_proto", "inet_service"],
    NO_ENDPOINT_SERVICES: ["ipv4_addr", "inet_proto", "inet_service"],
    SERVICE_NODEPORTS: ["inet_proto", "inet_service"],
    NO_ENDPOINT_NODEPORTS: ["inet_proto", "inet_service"],
}
SET_TYPES: dict[str, str] = {NODEPORT_IPS: "ipv4_addr"}


@dataclass(frozen=True)
class ProxyConfig:
    """What the table depends on besides Services and slices."""

    node_name: str
    cluster_cidr: str
    node_ips: tuple[str, ...] = ()
    masquerade_all: bool = False


@dataclass(frozen=True)
class Endpoint:
    ip: str
    port: int
    node_name: str
    ready: bool
    serving: bool
    terminating: bool


@dataclass
class Stats:
    service_ports: int = 0
    endpoints: int = 0
    no_endpoints: int = 0
    node_ports: int = 0


@dataclass
class Ruleset:
    """The whole content of the table: chains (base and regular) with their rules in order,
    map elements (key, verdict) and set elements."""

    chains: dict[str, list[Rule]] = field(default_factory=dict)
    maps: dict[str, list[tuple[Any, Expr]]] = field(default_factory=dict)
    sets: dict[str, list[str]] = field(default_factory=dict)
    stats: Stats = field(default_factory=Stats)
    # (namespace/name, message) of what a Service asks and the proxy does not do.
    warnings: list[tuple[str, str]] = field(default_factory=list)


# --- JSON expressions -----------------------------------------------------------------------

def payload(protocol: str, name: str) -> Expr:
    return {"payload": {"protocol": protocol, "field": name}}


def meta(key: str) -> Expr:
    return {"meta": {"key": key}}


def match(left: Any, right: Any, op: str = "==") -> Expr:
    return {"match": {"op": op, "left": left, "right": right}}


def prefix(cidr: str) -> Expr:
    net = ipaddress.IPv4Network(cidr, strict=False)
    return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}


def jump(target: str) -> Expr:
    return {"jump": {"target": target}}


def goto(target: str) -> Expr:
    return {"goto": {"target": target}}


def _dest_key() -> Expr:
    return {"concat": [payload("ip", "daddr"), meta("l4proto"), payload("th", "dport")]}


def _port_key() -> Expr:
    return {"concat": [meta("l4proto"), payload("th", "dport")]}


def _ct_new() -> Expr:
    return match({"ct": {"key": "state"}}, "new", "in")


def _from_pods(config: ProxyConfig) -> Expr:
    return match(payload("ip", "saddr"), prefix(config.cluster_cidr))


def _local_source() -> Expr:
    return match({"fib": {"result": "type", "flags": ["saddr"]}}, "local")


# --- names ----------------------------------------------------------------------------------

def _hashed(prefix_: str, base: str) -> str:
    """upstream's chain names: PREFIX-HASH-BASE, HASH the first 8 characters of the base32
    SHA-256 of BASE, truncated to nftables' name limit."""
    digest = base64.b32encode(hashlib.sha256(base.encode()).digest()).decode()[:8]
    return f"{prefix_}-{digest}-{base}"[:NFT_CHAIN_MAXNAMELEN - 1]


@dataclass(frozen=True)
class ServicePort:
    namespace: str
    name: str
    port_name: str
    protocol: str  # lower case: tcp, udp, sctp
    cluster_ip: str
    port: int
    node_port: int
    external_local: bool
    internal_local: bool

    @property
    def key(self) -> str:
        """upstream's ServicePortName string: `ns/name:port`."""
        return f"{self.namespace}/{self.name}:{self.port_name}"

    @property
    def base(self) -> str:
        return f"{self.namespace}/{self.name}/{self.protocol}/{self.port_name}"

    @property
    def cluster_chain(self) -> str:
        return _hashed("service", self.base)

    @property
    def local_chain(self) -> str:
        return _hashed("local", self.base)

    @property
    def external_chain(self) -> str:
        return _hashed("external", self.base)

    def endpoint_chain(self, ep: Endpoint) -> str:
        return _hashed("endpoint", f"{self.base}__{ep.ip}/{ep.port}")


# --- reading Services and slices ------------------------------------------------------------

def _key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace') or ''}/{md.get('name') or ''}"


def is_proxied(svc: Mapping[str, Any]) -> bool:
    """Whether the proxy programs anything for the Service: not headless, not ExternalName,
    an IPv4 ClusterIP."""
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return False
    ip = spec.get("clusterIP") or ""
    if ip in ("", "None"):
        return False
    try:
        return ipaddress.ip_address(ip).version == 4
    except ValueError:
        return False


def service_ports(svc: Mapping[str, Any]) -> list[ServicePort]:
    md = svc.get("metadata") or {}
    spec = svc.get("spec") or {}
    if not is_proxied(svc):
        return []
    out = []
    for port in spec.get("ports") or []:
        out.append(ServicePort(
            namespace=str(md.get("namespace") or ""), name=str(md.get("name") or ""),
            port_name=str(port.get("name") or ""),
            protocol=str(port.get("protocol") or "TCP").lower(),
            cluster_ip=str(spec["clusterIP"]), port=int(port.get("port") or 0),
            node_port=int(port.get("nodePort") or 0),
            external_local=spec.get("externalTrafficPolicy") == "Local",
            internal_local=spec.get("internalTrafficPolicy") == "Local"))
    return out


def slice_endpoints(slices: Iterable[Mapping[str, Any]]
                    ) -> dict[tuple[str, str, str], list[Endpoint]]:
    """The endpoints of every (`ns/service`, port name, protocol) from IPv4 EndpointSlices,
    one per address and port (the first address of each endpoint, as upstream), sorted."""
    found: dict[tuple[str, str, str], dict[tuple[str, int], Endpoint]] = {}
    for es in slices:
        if es.get("addressType") != "IPv4":
            continue
        md = es.get("metadata") or {}
        service = (md.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if not service:
            continue
        svc_key = f"{md.get('namespace') or ''}/{service}"
        for port in es.get("ports") or []:
            number = port.get("port")
            if not isinstance(number, int):
                continue
            key = (svc_key, str(port.get("name") or ""),
                   str(port.get("protocol") or "TCP").lower())
            bucket = found.setdefault(key, {})
            for ep in es.get("endpoints") or []:
                addresses = ep.get("addresses") or []
                if not addresses:
                    continue
                cond = ep.get("conditions") or {}
                ready = cond.get("ready") is not False
                serving = ready if cond.get("serving") is None else bool(cond["serving"])
                endpoint = Endpoint(ip=str(addresses[0]), port=number,
                                    node_name=str(ep.get("nodeName") or ""), ready=ready,
                                    serving=serving,
                                    terminating=bool(cond.get("terminating")))
                here = bucket.get((endpoint.ip, endpoint.port))
                if here is None or (endpoint.ready and not here.ready):
                    bucket[(endpoint.ip, endpoint.port)] = endpoint
    return {key: sorted(bucket.values(), key=lambda e: (ipaddress.IPv4Address(e.ip), e.port))
            for key, bucket in found.items()}


def usable(endpoints: list[Endpoint]) -> list[Endpoint]:
    """upstream's choice: the ready endpoints, else the serving and terminating ones."""
    ready = [e for e in endpoints if e.ready]
    return ready or [e for e in endpoints if e.serving and e.terminating]


# --- the table ------------------------------------------------------------------------------

def _static_chains(config: ProxyConfig) -> dict[str, list[Rule]]:
    masq_off = match({"&": [meta("mark"), MASQUERADE_BIT]}, 0)
    return {
        FILTER_INPUT: [[_ct_new(), jump(NODEPORT_ENDPOINTS_CHECK)]],
        FILTER_FORWARD: [[_ct_new(), _from_pods(config), jump(SERVICE_ENDPOINTS_CHECK)]],
        FILTER_OUTPUT: [[_ct_new(), jump(NODEPORT_ENDPOINTS_CHECK)]],
        NAT_PREROUTING: [[_from_pods(config), jump(SERVICES)], [jump(NODEPORTS)]],
        NAT_OUTPUT: [[jump(NODEPORTS)]],
        NAT_POSTROUTING: [[jump(MASQUERADING)]],
        SERVICES: [[{"vmap": {"key": _dest_key(), "data": f"@{SERVICE_IPS}"}}]],
        NODEPORTS: [[match(payload("ip", "daddr"), f"@{NODEPORT_IPS}"),
                     {"vmap": {"key": _port_key(), "data": f"@{SERVICE_NODEPORTS}"}}]],
        SERVICE_ENDPOINTS_CHECK: [[{"vmap": {"key": _dest_key(),
                                             "data": f"@{NO_ENDPOINT_SERVICES}"}}]],
        NODEPORT_ENDPOINTS_CHECK: [[match(payload("ip", "daddr"), f"@{NODEPORT_IPS}"),
                                    {"vmap": {"key": _port_key(),
                                              "data": f"@{NO_ENDPOINT_NODEPORTS}"}}]],
        REJECT_CHAIN: [[{"reject": None}]],
        MARK_MASQ: [[{"mangle": {"key": meta("mark"),
                                 "value": {"|": [meta("mark"), MASQUERADE_BIT]}}}]],
        MASQUERADING: [
            [masq_off, {"return": None}],
            [{"mangle": {"key": meta("mark"), "value": {"^": [meta("mark"), MASQUERADE_BIT]}}}],
            [{"masquerade": {"flags": ["fully-random"]}}],
        ],
    }


def _balance(chains: list[str]) -> Rule:
    """`numgen random mod N vmap { 0 : goto c0, ... }`: one of the chains at random."""
    return [{"vmap": {"key": {"numgen": {"mode": "random", "mod": len(chains), "offset": 0}},
                      "data": {"set": [[i, goto(c)] for i, c in enumerate(chains)]}}}]


def build(services: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]],
          config: ProxyConfig) -> Ruleset:
    """The table for these Services and slices on the node of `config`."""
    rs = Ruleset(chains=_static_chains(config),
                 maps={name: [] for name in MAP_TYPES},
                 sets={NODEPORT_IPS: sorted(set(config.node_ips),
                                            key=ipaddress.IPv4Address)})
    endpoints_of = slice_endpoints(slices)
    ordered = sorted(services, key=_key)
    for svc in ordered:
        rs.warnings.extend((_key(svc), w) for w in unimplemented_warnings(dict(svc)))
        for sp in service_ports(svc):
            _add_service_port(rs, sp, endpoints_of.get(
                (f"{sp.namespace}/{sp.name}", sp.port_name, sp.protocol), []), config)
    return rs


def _add_service_port(rs: Ruleset, sp: ServicePort, endpoints: list[Endpoint],
                      config: ProxyConfig) -> None:
    rs.stats.service_ports += 1
    cluster_eps = usable(endpoints)
    local_eps = usable([e for e in endpoints if e.node_name == config.node_name])
    has_endpoints = bool(cluster_eps)
    internal_eps = local_eps if sp.internal_local else cluster_eps
    external_eps = local_eps if sp.external_local else cluster_eps
    reachable = {*cluster_eps, *local_eps}
    if sp.node_port:
        rs.stats.node_ports += 1
    for ep in sorted(reachable, key=lambda e: (ipaddress.IPv4Address(e.ip), e.port)):
        rs.stats.endpoints += 1
        rs.chains[sp.endpoint_chain(ep)] = [
            [match(payload("ip", "saddr"), ep.ip), jump(MARK_MASQ)],  # hairpin
            [match(meta("l4proto"), sp.protocol),
             {"dnat": {"family": "ip", "addr": ep.ip, "port": ep.port}}],
        ]

    def policy_chain(name: str, eps: list[Endpoint]) -> None:
        rules: list[Rule] = []
        if config.masquerade_all:
            rules.append([match(payload("ip", "daddr"), sp.cluster_ip),
                          match(payload(sp.protocol, "dport"), sp.port), jump(MARK_MASQ)])
        rules.append(_balance([sp.endpoint_chain(e) for e in eps]))
        rs.chains[name] = rules

    if cluster_eps:
        policy_chain(sp.cluster_chain, cluster_eps)
    if local_eps and (sp.internal_local or sp.external_local):
        policy_chain(sp.local_chain, local_eps)
    if not has_endpoints:
        rs.stats.no_endpoints += 1
    dest = [sp.cluster_ip, sp.protocol, sp.port]
    if internal_eps:
        internal = sp.local_chain if sp.internal_local else sp.cluster_chain
        rs.maps[SERVICE_IPS].append(({"concat": dest}, goto(internal)))
    else:
        # No endpoint at all: reject; a Local policy with none on this node: drop.
        verdict: Expr = goto(REJECT_CHAIN) if not has_endpoints else {"drop": None}
        rs.maps[NO_ENDPOINT_SERVICES].append(({"concat": dest}, verdict))
    if not sp.node_port:
        return
    port_key = {"concat": [sp.protocol, sp.node_port]}
    if has_endpoints:
        ext: list[Rule] = []
        if not sp.external_local:
            ext.append([jump(MARK_MASQ)])
        else:
            # Pods and the host itself reach a Local Service through every endpoint.
            ext.append([_from_pods(config), goto(sp.cluster_chain)])
            ext.append([_local_source(), jump(MARK_MASQ)])
            ext.append([_local_source(), goto(sp.cluster_chain)])
        if external_eps:
            ext.append([goto(sp.local_chain if sp.external_local else sp.cluster_chain)])
        rs.chains[sp.external_chain] = ext
        rs.maps[SERVICE_NODEPORTS].append((port_key, goto(sp.external_chain)))
    if not external_eps:
        verdict = goto(REJECT_CHAIN) if not has_endpoints else {"drop": None}
        rs.maps[NO_ENDPOINT_NODEPORTS].append((port_key, verdict))

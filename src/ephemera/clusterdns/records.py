"""The cluster domain's records, as CoreDNS's `kubernetes` plugin serves them (its
`parse.go`, `kubernetes.go` `findServices`/`findPods`, `reverse.go` and the shared
`backend_lookup.go`), computed from the Services, EndpointSlices and Namespaces this index
is fed. Pure: no I/O; the server (`ephemera.clusterdns.server`) feeds it from informers and
asks `answer(qname, qtype)`.

Names, under the zone `Z` (`cluster.local` by default):
- `svc.ns.svc.Z`: A of a ClusterIP Service's clusterIPs; of a headless Service, the ready
  addresses of its EndpointSlices (`ready` unset counts as ready, as upstream); CNAME of an
  ExternalName Service's `externalName`.
- `host.svc.ns.svc.Z`: A of the endpoint whose hostname is `host`, or, without a hostname,
  whose address dashed (`10-0-0-1`) is `host` (any Service kind, as CoreDNS).
- `_port._proto.svc.ns.svc.Z` (and `svc.ns.svc.Z` for every port): SRV, priority 0, weight
  `100 / n` over the n answers, the port, and the target `svc.ns.svc.Z` (ClusterIP) or
  `host.svc.ns.svc.Z` (headless, with the addresses in the additional section). Port and
  protocol compare without case; an unnamed port has no `_port` name.
- `a-b-c-d.ns.pod.Z`: A `a.b.c.d` for any address in an existing namespace (CoreDNS's
  `pods insecure`, kubeadm's default; `pods disabled` answers NXDOMAIN).
- `dns-version.Z` TXT `1.1.0`; the apex's SOA and NS (`ns.dns.Z`, whose A is the listen
  address unless a Service's endpoints point at it: then that Service's name); PTR of the
  `in-addr.arpa`/`ip6.arpa` name of a clusterIP or an endpoint address.
- A name that cannot exist (unknown namespace, Service, endpoint or port; more labels than
  the shapes above) is NXDOMAIN; a name that exists without records of the asked type is
  NODATA (NOERROR, no answer); both carry the zone's SOA in the authority section (serial:
  the Unix time of the last change, minimum TTL the record TTL). Zone transfers are REFUSED.
  A reverse name of an address the cluster does not know, and every name outside the zone,
  is not answered here (`answer` returns None): the server forwards it or refuses it.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dns.exception
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.reversename
import dns.rrset

__all__ = ["DEFAULT_TTL", "DNS_SCHEMA_VERSION", "Answer", "ClusterRecords"]

DNS_SCHEMA_VERSION = "1.1.0"
DEFAULT_TTL = 5
SERVICE_NAME_LABEL = "kubernetes.io/service-name"

Obj = Mapping[str, Any]


class _NameError(Exception):
    """The name cannot exist (CoreDNS's errNoItems / errInvalidRequest / errNsNotExposed)."""


@dataclass
class Answer:
    """What to send back: the rcode, the sections, and whether the answer is authoritative."""

    rcode: int = dns.rcode.NOERROR
    answer: list[dns.rrset.RRset] = field(default_factory=list)
    authority: list[dns.rrset.RRset] = field(default_factory=list)
    additional: list[dns.rrset.RRset] = field(default_factory=list)
    authoritative: bool = True


@dataclass(frozen=True)
class _Item:
    """One backend answer (CoreDNS's `msg.Service`): the owner name it stands for, an IP
    address or a CNAME target, and a port (-1: none)."""

    key: dns.name.Name
    host: str
    port: int = -1


@dataclass(frozen=True)
class _Request:
    """A name parsed as `parseRequest` does."""

    kind: str = ""  # "svc", "pod" or "" (the apex, `svc.Z`, `pod.Z`)
    namespace: str = ""
    service: str = ""
    endpoint: str = ""
    port: str = ""
    protocol: str = ""


def _md(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def endpoint_hostname(hostname: str, address: str) -> str:
    """The label of an endpoint: its hostname, else its address with dashes (an IPv6
    address ending in `-` gets a `0`), as CoreDNS's `endpointHostname`."""
    if hostname:
        return hostname
    if "." in address:
        return address.replace(".", "-")
    if ":" in address:
        dashed = address.replace(":", "-")
        return dashed + "0" if dashed.endswith("-") else dashed
    return ""


def _same(a: str, b: str) -> bool:
    return a.lower() == b.lower()


class ClusterRecords:
    """The index the informers feed (`set_*`/`delete_*`) and the queries read (`answer`)."""

    def __init__(self, zone: str = "cluster.local", *, ttl: int = DEFAULT_TTL,
                 own_addresses: Iterable[str] = (), pods: str = "insecure") -> None:
        self.zone = dns.name.from_text(zone)
        self.ttl = ttl
        self.own_addresses = [a for a in own_addresses if _ip(a) is not None]
        self.pods = pods
        self.services: dict[tuple[str, str], Obj] = {}
        self.slices: dict[tuple[str, str], dict[str, Obj]] = {}  # by (namespace, service)
        self.namespaces: set[str] = set()
        self.modified = int(time.time())

    # -- the informers' side --

    def _touch(self) -> None:
        self.modified = int(time.time())

    def set_namespace(self, obj: Obj) -> None:
        self.namespaces.add(str(_md(obj).get("name") or ""))
        self._touch()

    def delete_namespace(self, obj: Obj) -> None:
        self.namespaces.discard(str(_md(obj).get("name") or ""))
        self._touch()

    def set_service(self, obj: Obj) -> None:
        md = _md(obj)
        self.services[(str(md.get("namespace") or ""), str(md.get("name") or ""))] = obj
        self._touch()

    def delete_service(self, obj: Obj) -> None:
        md = _md(obj)
        self.services.pop((str(md.get("namespace") or ""), str(md.get("name") or "")), None)
        self._touch()

    @staticmethod
    def _slice_key(obj: Obj) -> tuple[tuple[str, str], str]:
        md = _md(obj)
        service = str((md.get("labels") or {}).get(SERVICE_NAME_LABEL) or "")
        return (str(md.get("namespace") or ""), service), str(md.get("name") or "")

    def set_slice(self, obj: Obj) -> None:
        key, name = self._slice_key(obj)
        for (namespace, _service), slices in self.slices.items():
            if namespace == key[0]:  # its service label may have changed
                slices.pop(name, None)
        self.slices.setdefault(key, {})[name] = obj
        self._touch()

    def delete_slice(self, obj: Obj) -> None:
        key, name = self._slice_key(obj)
        self.slices.get(key, {}).pop(name, None)
        self._touch()

    # -- what a Service has --

    @staticmethod
    def _cluster_ips(svc: Obj) -> list[str]:
        spec = svc.get("spec") or {}
        ips = [str(ip) for ip in spec.get("clusterIPs") or [] if ip]
        return ips or ([str(spec["clusterIP"])] if spec.get("clusterIP") else [])

    def _headless(self, svc: Obj) -> bool:
        ips = self._cluster_ips(svc)
        return bool(ips) and ips[0] == "None"

    def _endpoints(self, namespace: str, service: str
                   ) -> Iterable[tuple[str, str, list[tuple[str, int, str]]]]:
        """(address, hostname, ports as (name, port, protocol)) of the ready endpoints of the
        Service's slices; a slice without ports has the sentinel port -1."""
        for sl in (self.slices.get((namespace, service)) or {}).values():
            ports = [(str(p.get("name") or ""),
                      int(p["port"]) if isinstance(p.get("port"), int) else -1,
                      str(p.get("protocol") or "")) for p in sl.get("ports") or []]
            ports = ports or [("", -1, "")]
            for ep in sl.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready") is False:
                    continue
                for address in ep.get("addresses") or []:
                    yield str(address), str(ep.get("hostname") or ""), ports

    # -- names --

    def _svc_name(self, namespace: str, service: str) -> dns.name.Name:
        return dns.name.from_text(f"{service}.{namespace}.svc", origin=self.zone)

    def _parse(self, name: dns.name.Name) -> _Request:
        labels = [label.decode(errors="replace").lower()
                  for label in name.relativize(self.zone).labels if label]
        if not labels or labels in (["svc"], ["pod"]):
            return _Request()
        kind = labels[-1]
        if kind not in ("svc", "pod"):
            raise _NameError
        rest = labels[:-1]
        request = {"kind": kind}
        for attr in ("namespace", "service"):
            if rest:
                request[attr] = rest.pop()
        if len(rest) == 1:
            request["endpoint"] = rest[0]
        elif len(rest) == 2:
            request["protocol"] = rest[1].removeprefix("_")
            request["port"] = rest[0].removeprefix("_")
        elif rest:
            raise _NameError
        return _Request(**request)

    # -- the backend (CoreDNS's Records/findServices/findPods) --

    def _records(self, name: dns.name.Name) -> list[_Item]:
        r = self._parse(name)
        if not r.kind:
            return []
        if r.namespace not in self.namespaces:
            raise _NameError
        if not r.service:
            return []  # `ns.svc.Z`: NODATA
        if r.kind == "pod":
            return self._pods(r, name)
        return self._services(r)

    def _pods(self, r: _Request, name: dns.name.Name) -> list[_Item]:
        if self.pods != "insecure" or r.endpoint or r.port:
            raise _NameError
        podname = r.service
        if podname.count("-") == 3 and "--" not in podname:
            text = podname.replace("-", ".")
        else:
            text = podname.replace("-", ":")
        if _ip(text) is None:
            raise _NameError
        return [_Item(name, text)]

    def _services(self, r: _Request) -> list[_Item]:
        svc = self.services.get((r.namespace, r.service))
        if svc is None:
            raise _NameError
        spec = svc.get("spec") or {}
        key = self._svc_name(r.namespace, r.service)
        items: list[_Item] = []
        if spec.get("type") == "ExternalName":
            if r.endpoint or r.port or r.protocol or not spec.get("externalName"):
                raise _NameError
            return [_Item(key, str(spec["externalName"]))]
        if self._headless(svc) or r.endpoint:
            for address, hostname, ports in self._endpoints(r.namespace, r.service):
                label = endpoint_hostname(hostname, address)
                if r.endpoint and not _same(r.endpoint, label):
                    continue
                for pname, port, proto in ports:
                    if self._port_matches(r, pname, proto):
                        items.append(_Item(dns.name.Name((label.encode(), *key.labels)),
                                           address, port))
            if not items:
                raise _NameError
            return items
        ports = [(str(p.get("name") or ""), int(p.get("port") or 0),
                  str(p.get("protocol") or "TCP")) for p in spec.get("ports") or []]
        matched = False
        if not self._cluster_ips(svc):
            raise _NameError  # no address yet
        for pname, port, proto in ports or [("", -1, "")]:
            if self._port_matches(r, pname, proto):
                matched = True
                items.extend(_Item(key, ip, port) for ip in self._cluster_ips(svc))
        if not matched:
            raise _NameError
        return items

    @staticmethod
    def _port_matches(r: _Request, name: str, protocol: str) -> bool:
        return ((not r.port or _same(r.port, name))
                and (not r.protocol or _same(r.protocol, protocol)))

    def _ns_addresses(self) -> list[tuple[dns.name.Name, str]]:
        """CoreDNS's `nsAddrs`: the Services whose endpoints are this server, else
        `ns.dns.Z` at the listen addresses."""
        found: list[tuple[dns.name.Name, str]] = []
        for (namespace, service), slices in sorted(self.slices.items()):
            svc = self.services.get((namespace, service))
            if svc is None:
                continue
            key = self._svc_name(namespace, service)
            for sl in slices.values():
                for ep in sl.get("endpoints") or []:
                    addresses = [str(a) for a in ep.get("addresses") or []]
                    if not set(addresses) & set(self.own_addresses):
                        continue
                    if self._headless(svc):
                        found += [(dns.name.Name((endpoint_hostname(
                            str(ep.get("hostname") or ""), a).encode(), *key.labels)), a)
                            for a in addresses]
                    else:
                        found += [(key, ip) for ip in self._cluster_ips(svc)]
        if found:
            return list(dict.fromkeys(found))
        ns = dns.name.from_text("ns.dns", origin=self.zone)
        return [(ns, a) for a in self.own_addresses]

    # -- records --

    def _rrset(self, name: dns.name.Name, rdtype: dns.rdatatype.RdataType, texts: Iterable[str],
               ttl: int | None = None) -> dns.rrset.RRset:
        return dns.rrset.from_text_list(name, self.ttl if ttl is None else ttl,
                                        dns.rdataclass.IN, rdtype, list(texts))

    def soa(self) -> dns.rrset.RRset:
        ns = dns.name.from_text("ns.dns", origin=self.zone)
        mbox = dns.name.from_text("hostmaster", origin=self.zone)
        return self._rrset(self.zone, dns.rdatatype.SOA, [
            f"{ns} {mbox} {self.modified & 0xFFFFFFFF} 7200 1800 86400 {self.ttl}"],
            ttl=min(self.ttl, 300))

    def _address_rrsets(self, qname: dns.name.Name, items: list[_Item],
                        rdtype: dns.rdatatype.RdataType) -> list[dns.rrset.RRset]:
        out: list[dns.rrset.RRset] = []
        addresses: list[str] = []
        for item in items:
            ip = _ip(item.host)
            if ip is None:  # ExternalName: the CNAME; the client follows it
                target = dns.name.from_text(item.host)
                if target != qname:
                    out.append(self._rrset(qname, dns.rdatatype.CNAME, [target.to_text()]))
                continue
            if (ip.version == 4) == (rdtype == dns.rdatatype.A) and item.host not in addresses:
                addresses.append(item.host)
        if addresses:
            out.append(self._rrset(qname, rdtype, addresses))
        return out

    def _srv(self, qname: dns.name.Name, items: list[_Item]) -> tuple[
            list[dns.rrset.RRset], list[dns.rrset.RRset]]:
        weight = max(1, math.floor(100 / max(1, len(items))))
        srvs: list[str] = []
        extra: dict[tuple[dns.name.Name, str], None] = {}
        for item in items:
            ip = _ip(item.host)
            if item.port == -1 or ip is None:
                continue
            srv = f"0 {weight} {item.port} {item.key.to_text()}"
            if srv not in srvs:
                srvs.append(srv)
            extra[(item.key, item.host)] = None
        additional: list[dns.rrset.RRset] = []
        for name, host in extra:
            rdtype = dns.rdatatype.A if ":" not in host else dns.rdatatype.AAAA
            for rrset in additional:
                if rrset.name == name and rrset.rdtype == rdtype:
                    rrset.add(dns.rdata.from_text(dns.rdataclass.IN, rdtype, host))
                    break
            else:
                additional.append(self._rrset(name, rdtype, [host]))
        answer = [self._rrset(qname, dns.rdatatype.SRV, srvs)] if srvs else []
        return answer, additional

    def _reverse(self, qname: dns.name.Name) -> list[dns.name.Name]:
        try:
            address = dns.reversename.to_address(qname)
        except (dns.exception.SyntaxError, ValueError):
            return []
        targets: list[dns.name.Name] = []
        for (namespace, service), svc in self.services.items():
            if address in self._cluster_ips(svc):
                targets.append(self._svc_name(namespace, service))
            for ep_address, hostname, _ports in self._endpoints(namespace, service):
                if ep_address == address:
                    label = endpoint_hostname(hostname, ep_address)
                    targets.append(dns.name.Name(
                        (label.encode(), *self._svc_name(namespace, service).labels)))
        return list(dict.fromkeys(targets))

    # -- the query --

    def is_ours(self, qname: dns.name.Name) -> bool:
        return qname.is_subdomain(self.zone)

    def answer(self, qname: dns.name.Name, qtype: dns.rdatatype.RdataType) -> Answer | None:
        """The reply to one question, or None when the name is not this server's."""
        if not self.is_ours(qname):
            if qtype == dns.rdatatype.PTR:
                targets = self._reverse(qname)
                if targets:
                    return Answer(answer=[self._rrset(qname, dns.rdatatype.PTR,
                                                      [t.to_text() for t in targets])])
            return None
        if qtype in (dns.rdatatype.AXFR, dns.rdatatype.IXFR):
            return Answer(rcode=dns.rcode.REFUSED, authoritative=False)
        try:
            reply = self._lookup(qname, qtype)
        except _NameError:
            return Answer(rcode=dns.rcode.NXDOMAIN, authority=[self.soa()])
        if not reply.answer:
            reply.authority = [self.soa()]
        return reply

    def _lookup(self, qname: dns.name.Name, qtype: dns.rdatatype.RdataType) -> Answer:
        relative = qname.relativize(self.zone)
        if qname == self.zone:
            if qtype == dns.rdatatype.SOA:
                return Answer(answer=[self.soa()])
            if qtype == dns.rdatatype.NS:
                addresses = self._ns_addresses()
                names = list(dict.fromkeys(n for n, _ in addresses))
                return Answer(
                    answer=[self._rrset(qname, dns.rdatatype.NS, [n.to_text() for n in names])]
                    if names else [],
                    additional=[self._rrset(n, dns.rdatatype.A if ":" not in a
                                            else dns.rdatatype.AAAA, [a])
                                for n, a in addresses])
            return Answer()
        if relative == dns.name.from_text("dns-version", origin=None):
            if qtype == dns.rdatatype.TXT:
                return Answer(answer=[self._rrset(qname, dns.rdatatype.TXT,
                                                  [f'"{DNS_SCHEMA_VERSION}"'], ttl=28800)])
            raise _NameError
        if relative == dns.name.from_text("ns.dns", origin=None):
            items = [_Item(qname, a) for n, a in self._ns_addresses()]
            if qtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
                return Answer(answer=self._address_rrsets(qname, items, qtype))
            return Answer()
        items = self._records(qname)
        if qtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            return Answer(answer=self._address_rrsets(qname, items, qtype))
        if qtype == dns.rdatatype.SRV:
            answer, additional = self._srv(qname, items)
            return Answer(answer=answer, additional=additional)
        if qtype == dns.rdatatype.CNAME:
            return Answer(answer=[r for r in self._address_rrsets(qname, items,
                                                                  dns.rdatatype.A)
                                  if r.rdtype == dns.rdatatype.CNAME])
        return Answer()  # the name exists (no _NameError): NODATA

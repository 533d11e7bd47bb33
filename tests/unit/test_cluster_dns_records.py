"""The cluster domain's records (`ephemera.clusterdns.records`) from fake Services, slices
and namespaces, as CoreDNS's kubernetes plugin answers them."""

from __future__ import annotations

from typing import Any

import dns.name
import dns.rcode
import dns.rdatatype
import pytest

from ephemera.clusterdns.publish import kube_dns_ip
from ephemera.clusterdns.records import Answer, ClusterRecords, endpoint_hostname


def svc(name: str, cluster_ip: str, ports: list[dict[str, Any]] | None = None,
        namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name},
            "spec": {"clusterIP": cluster_ip, "ports": ports if ports is not None else [
                {"name": "http", "port": 80, "protocol": "TCP"},
                {"name": "dns", "port": 53, "protocol": "UDP"}], **spec}}


def eps(name: str, service: str, endpoints: list[dict[str, Any]],
        ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name,
                         "labels": {"kubernetes.io/service-name": service}},
            "ports": ports if ports is not None else [
                {"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": endpoints}


@pytest.fixture
def records() -> ClusterRecords:
    r = ClusterRecords("cluster.local", own_addresses=["10.0.0.5"])
    for ns in ("default", "kube-system"):
        r.set_namespace({"metadata": {"name": ns}})
    r.set_service(svc("web", "10.96.0.20"))
    r.set_service(svc("hl", "None"))
    r.set_slice(eps("hl-1", "hl", [
        {"addresses": ["10.1.0.2"], "hostname": "a", "conditions": {"ready": True}},
        {"addresses": ["10.1.0.3"], "conditions": {}},  # ready unset: ready
        {"addresses": ["10.1.0.4"], "conditions": {"ready": False}}]))
    r.set_service(svc("ext", "", type="ExternalName", externalName="db.example.com"))
    return r


def ask(r: ClusterRecords, name: str, rdtype: str = "A") -> Answer:
    answer = r.answer(dns.name.from_text(name), dns.rdatatype.from_text(rdtype))
    assert answer is not None
    return answer


def texts(rrsets: list[Any]) -> list[str]:
    return sorted(rdata.to_text() for rrset in rrsets for rdata in rrset)


def test_clusterip_service_a_and_case_insensitive(records: ClusterRecords) -> None:
    answer = ask(records, "Web.Default.SVC.cluster.local")
    assert answer.rcode == dns.rcode.NOERROR and texts(answer.answer) == ["10.96.0.20"]
    assert answer.answer[0].ttl == 5


def test_srv_per_named_port_and_for_every_port(records: ClusterRecords) -> None:
    answer = ask(records, "_dns._udp.web.default.svc.cluster.local", "SRV")
    assert texts(answer.answer) == ["0 100 53 web.default.svc.cluster.local."]
    assert texts(answer.additional) == ["10.96.0.20"]
    # The protocol must match too.
    assert ask(records, "_dns._tcp.web.default.svc.cluster.local", "SRV").rcode == \
        dns.rcode.NXDOMAIN
    # No port named: every port, the weight shared.
    answer = ask(records, "web.default.svc.cluster.local", "SRV")
    assert texts(answer.answer) == ["0 50 53 web.default.svc.cluster.local.",
                                    "0 50 80 web.default.svc.cluster.local."]


def test_headless_ready_endpoints_and_their_names(records: ClusterRecords) -> None:
    assert texts(ask(records, "hl.default.svc.cluster.local").answer) == [
        "10.1.0.2", "10.1.0.3"]
    answer = ask(records, "_http._tcp.hl.default.svc.cluster.local", "SRV")
    assert texts(answer.answer) == ["0 50 8080 10-1-0-3.hl.default.svc.cluster.local.",
                                    "0 50 8080 a.hl.default.svc.cluster.local."]
    assert {(r.name.to_text(), r[0].to_text()) for r in answer.additional} == {
        ("a.hl.default.svc.cluster.local.", "10.1.0.2"),
        ("10-1-0-3.hl.default.svc.cluster.local.", "10.1.0.3")}
    assert texts(ask(records, "a.hl.default.svc.cluster.local").answer) == ["10.1.0.2"]
    assert texts(ask(records, "10-1-0-3.hl.default.svc.cluster.local").answer) == [
        "10.1.0.3"]
    # Not ready: no name.
    assert ask(records, "10-1-0-4.hl.default.svc.cluster.local").rcode == dns.rcode.NXDOMAIN


def test_headless_without_ready_endpoints_is_nxdomain(records: ClusterRecords) -> None:
    records.set_slice(eps("hl-1", "hl", [{"addresses": ["10.1.0.2"],
                                           "conditions": {"ready": False}}]))
    assert ask(records, "hl.default.svc.cluster.local").rcode == dns.rcode.NXDOMAIN
    records.delete_slice(eps("hl-1", "hl", []))
    assert ask(records, "hl.default.svc.cluster.local").rcode == dns.rcode.NXDOMAIN


def test_headless_without_ports_still_has_addresses() -> None:
    r = ClusterRecords()
    r.set_namespace({"metadata": {"name": "default"}})
    r.set_service(svc("np", "None", ports=[]))
    r.set_slice(eps("np-1", "np", [{"addresses": ["10.1.0.9"]}], ports=[]))
    assert texts(ask(r, "np.default.svc.cluster.local").answer) == ["10.1.0.9"]
    answer = ask(r, "np.default.svc.cluster.local", "SRV")  # port -1: no SRV, NODATA
    assert answer.rcode == dns.rcode.NOERROR and not answer.answer


def test_external_name_is_a_cname(records: ClusterRecords) -> None:
    answer = ask(records, "ext.default.svc.cluster.local")
    assert [r.rdtype for r in answer.answer] == [dns.rdatatype.CNAME]
    assert texts(answer.answer) == ["db.example.com."]
    assert ask(records, "_http._tcp.ext.default.svc.cluster.local", "SRV").rcode == \
        dns.rcode.NXDOMAIN


@pytest.mark.parametrize("name", [
    "nope.default.svc.cluster.local",     # no such Service
    "web.nons.svc.cluster.local",         # no such namespace
    "nons.svc.cluster.local",
    "x.y.z.web.default.svc.cluster.local",  # too long
    "web.default.other.cluster.local",    # neither svc nor pod
    "x.hl.default.svc.cluster.local",     # no such endpoint
    "not-an-ip.default.pod.cluster.local",
])
def test_names_that_cannot_exist_are_nxdomain_with_soa(records: ClusterRecords,
                                                        name: str) -> None:
    answer = ask(records, name)
    assert answer.rcode == dns.rcode.NXDOMAIN and not answer.answer
    [soa] = answer.authority
    assert soa.rdtype == dns.rdatatype.SOA and soa.name.to_text() == "cluster.local."
    fields = soa[0].to_text().split()
    assert fields[:2] == ["ns.dns.cluster.local.", "hostmaster.cluster.local."]
    assert fields[3:] == ["7200", "1800", "86400", "5"]


@pytest.mark.parametrize("name,rdtype", [
    ("default.svc.cluster.local", "A"),   # an existing namespace
    ("svc.cluster.local", "A"),
    ("cluster.local", "A"),
    ("web.default.svc.cluster.local", "AAAA"),
    ("web.default.svc.cluster.local", "TXT"),
    ("web.default.svc.cluster.local", "MX"),
])
def test_names_that_exist_without_that_type_are_nodata(records: ClusterRecords, name: str,
                                                        rdtype: str) -> None:
    answer = ask(records, name, rdtype)
    assert answer.rcode == dns.rcode.NOERROR and not answer.answer
    assert [r.rdtype for r in answer.authority] == [dns.rdatatype.SOA]


def test_pods_insecure_and_disabled(records: ClusterRecords) -> None:
    assert texts(ask(records, "10-2-3-4.default.pod.cluster.local").answer) == ["10.2.3.4"]
    assert ask(records, "10-2-3-4.nons.pod.cluster.local").rcode == dns.rcode.NXDOMAIN
    records.pods = "disabled"
    assert ask(records, "10-2-3-4.default.pod.cluster.local").rcode == dns.rcode.NXDOMAIN


def test_apex_soa_ns_and_dns_version(records: ClusterRecords) -> None:
    assert [r.rdtype for r in ask(records, "cluster.local", "SOA").answer] == [
        dns.rdatatype.SOA]
    answer = ask(records, "cluster.local", "NS")
    assert texts(answer.answer) == ["ns.dns.cluster.local."]
    assert texts(answer.additional) == ["10.0.0.5"]
    assert texts(ask(records, "ns.dns.cluster.local").answer) == ["10.0.0.5"]
    assert texts(ask(records, "dns-version.cluster.local", "TXT").answer) == ['"1.1.0"']
    # Once a Service's endpoints point at this server, the NS is that Service's name.
    records.set_service(svc("kube-dns", "10.96.0.10", namespace="kube-system"))
    records.set_slice({"metadata": {"namespace": "kube-system", "name": "kube-dns-x",
                                    "labels": {"kubernetes.io/service-name": "kube-dns"}},
                       "endpoints": [{"addresses": ["10.0.0.5"]}]})
    answer = ask(records, "cluster.local", "NS")
    assert texts(answer.answer) == ["kube-dns.kube-system.svc.cluster.local."]
    assert texts(answer.additional) == ["10.96.0.10"]


def test_zone_transfers_refused(records: ClusterRecords) -> None:
    assert ask(records, "cluster.local", "AXFR").rcode == dns.rcode.REFUSED


def test_ptr_of_cluster_ips_and_endpoints(records: ClusterRecords) -> None:
    assert texts(ask(records, "20.0.96.10.in-addr.arpa", "PTR").answer) == [
        "web.default.svc.cluster.local."]
    assert texts(ask(records, "2.0.1.10.in-addr.arpa", "PTR").answer) == [
        "a.hl.default.svc.cluster.local."]
    # Unknown addresses and other names are not this server's to answer.
    assert records.answer(dns.name.from_text("9.9.9.9.in-addr.arpa"),
                          dns.rdatatype.PTR) is None
    assert records.answer(dns.name.from_text("example.com"), dns.rdatatype.A) is None


def test_updates_and_deletes_followed(records: ClusterRecords) -> None:
    records.set_service(svc("web", "10.96.0.21"))
    assert texts(ask(records, "web.default.svc.cluster.local").answer) == ["10.96.0.21"]
    records.delete_service(svc("web", ""))
    assert ask(records, "web.default.svc.cluster.local").rcode == dns.rcode.NXDOMAIN
    # A slice moved to another Service (its label changed) leaves the first one.
    records.set_service(svc("hl2", "None"))
    moved = eps("hl-1", "hl2", [{"addresses": ["10.1.0.7"]}])
    records.set_slice(moved)
    assert ask(records, "hl.default.svc.cluster.local").rcode == dns.rcode.NXDOMAIN
    assert texts(ask(records, "hl2.default.svc.cluster.local").answer) == ["10.1.0.7"]


def test_endpoint_hostname() -> None:
    assert endpoint_hostname("web-0", "10.0.0.1") == "web-0"
    assert endpoint_hostname("", "10.0.0.1") == "10-0-0-1"
    assert endpoint_hostname("", "fd00::") == "fd00--0"


def test_service_without_an_address_yet_is_nxdomain(records: ClusterRecords) -> None:
    records.set_service(svc("pending", ""))
    assert ask(records, "pending.default.svc.cluster.local").rcode == dns.rcode.NXDOMAIN


def test_kube_dns_ip_is_the_tenth_address() -> None:
    assert kube_dns_ip("10.96.0.0/12") == "10.96.0.10"
    assert kube_dns_ip("172.20.0.0/16") == "172.20.0.10"
    assert kube_dns_ip("fd00:10:96::/108") == "fd00:10:96::a"

"""The cluster DNS server (`ephemera.clusterdns`) against an in-process apiserver, queried
over real UDP and TCP on loopback with dnspython: A of a ClusterIP Service, SRV of a named
port, a headless Service's ready endpoints, NXDOMAIN with the SOA, REFUSED outside the
domain, forwarding to an upstream, changes followed, and the kube-dns Service and slice."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import dns.asyncquery
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
from aiohttp.test_utils import TestServer
from apiserver_fixtures import eventually

from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, resource_path
from ephemera.client.kubeconfig import ClientConfig
from ephemera.clusterdns.publish import ensure_kube_dns
from ephemera.clusterdns.records import ClusterRecords
from ephemera.clusterdns.server import DnsServer, DnsService, Upstream
from ephemera.store import open_store

SLICES = resource_path("endpointslices", "default", group="discovery.k8s.io")


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path) -> AsyncIterator[ApiClient]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    server = TestServer(create_app(store, ApiserverConfig(watch_bookmark_interval=0.2)))
    await server.start_server()
    try:
        async with ApiClient(ClientConfig(server=str(server.make_url("")).rstrip("/")),
                             user_agent="dns-test") as api:
            yield api
    finally:
        await server.close()
        await store.close()


def service(name: str, cluster_ip: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                            "spec": {"ports": [{"name": "http", "port": 80,
                                                "targetPort": 8080}], **spec}}
    if cluster_ip:
        body["spec"]["clusterIP"] = cluster_ip
    return body


def endpoint_slice(name: str, service_name: str,
                   endpoints: list[tuple[str, bool]]) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service_name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}}
                          for ip, ready in endpoints]}


async def ask(port: int, name: str, rdtype: str = "A", *, tcp: bool = False
              ) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype)
    if tcp:
        return await dns.asyncquery.tcp(query, "127.0.0.1", port=port, timeout=2)
    return await dns.asyncquery.udp(query, "127.0.0.1", port=port, timeout=2)


def addresses(reply: dns.message.Message) -> set[str]:
    return {rdata.to_text() for rrset in reply.answer for rdata in rrset
            if rrset.rdtype == dns.rdatatype.A}


async def test_records_served_over_udp_and_tcp_and_changes_followed(tmp_path: Path) -> None:
    async with cluster(tmp_path) as api:
        await api.create(resource_path("services", "default"), service("web", "10.96.0.50"))
        await api.create(resource_path("services", "default"),
                         service("db", "None"))
        await api.create(SLICES, endpoint_slice("db-1", "db", [("10.244.0.5", True),
                                                               ("10.244.0.6", False)]))
        dns_service = DnsService(api, ClusterRecords("cluster.local"))
        _, port = await dns_service.start("127.0.0.1", 0)
        try:
            reply = await ask(port, "web.default.svc.cluster.local")
            assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.AA
            assert addresses(reply) == {"10.96.0.50"}
            reply = await ask(port, "web.default.svc.cluster.local", tcp=True)
            assert addresses(reply) == {"10.96.0.50"}

            reply = await ask(port, "_http._tcp.web.default.svc.cluster.local", "SRV")
            [srv] = [r.to_text() for rrset in reply.answer for r in rrset]
            assert srv == "0 100 80 web.default.svc.cluster.local."
            assert {r.to_text() for rrset in reply.additional for r in rrset} == {"10.96.0.50"}
            reply = await ask(port, "_https._tcp.web.default.svc.cluster.local", "SRV")
            assert reply.rcode() == dns.rcode.NXDOMAIN

            # Headless: the ready endpoints only; the SRV targets name each endpoint.
            reply = await ask(port, "db.default.svc.cluster.local")
            assert addresses(reply) == {"10.244.0.5"}
            reply = await ask(port, "_http._tcp.db.default.svc.cluster.local", "SRV")
            assert [r.to_text() for rrset in reply.answer for r in rrset] == [
                "0 100 8080 10-244-0-5.db.default.svc.cluster.local."]

            reply = await ask(port, "nothing.default.svc.cluster.local")
            assert reply.rcode() == dns.rcode.NXDOMAIN
            assert [rrset.rdtype for rrset in reply.authority] == [dns.rdatatype.SOA]
            reply = await ask(port, "web.nonamespace.svc.cluster.local")
            assert reply.rcode() == dns.rcode.NXDOMAIN
            reply = await ask(port, "web.default.svc.cluster.local", "AAAA")
            assert reply.rcode() == dns.rcode.NOERROR and not reply.answer  # NODATA
            reply = await ask(port, "example.com")
            assert reply.rcode() == dns.rcode.REFUSED and not reply.answer

            # Changes are followed: a new Service, an endpoint turning ready, a deletion.
            await api.create(resource_path("services", "default"),
                             service("late", "10.96.0.51"))
            slice_path = resource_path("endpointslices", "default", "db-1",
                                       group="discovery.k8s.io")
            current = await api.get(slice_path)
            current["endpoints"][1]["conditions"]["ready"] = True
            await api.update(slice_path, current)
            await api.delete(resource_path("services", "default", "web"))

            async def followed() -> bool:
                late = await ask(port, "late.default.svc.cluster.local")
                db = await ask(port, "db.default.svc.cluster.local")
                web = await ask(port, "web.default.svc.cluster.local")
                return (addresses(late) == {"10.96.0.51"}
                        and addresses(db) == {"10.244.0.5", "10.244.0.6"}
                        and web.rcode() == dns.rcode.NXDOMAIN)

            await eventually(followed)
        finally:
            await dns_service.close()


async def test_other_names_forwarded_to_the_upstream() -> None:
    """A second server stands in for the upstream resolver: its answer (here its REFUSED of
    the name, with the id of the client's query) comes back through the first; an upstream
    that does not answer is SERVFAIL."""
    upstream_records = ClusterRecords("example.com")
    upstream_records.set_namespace({"metadata": {"name": "ns"}})
    upstream = DnsServer(upstream_records)
    _, upstream_port = await upstream.start("127.0.0.1", 0)
    front = DnsServer(ClusterRecords("cluster.local"),
                      [Upstream("127.0.0.1", upstream_port)], upstream_timeout=0.5)
    _, port = await front.start("127.0.0.1", 0)
    try:
        query = dns.message.make_query("1-2-3-4.ns.pod.example.com", "A")
        reply = await dns.asyncquery.udp(query, "127.0.0.1", port=port, timeout=2)
        assert reply.id == query.id
        assert addresses(reply) == {"1.2.3.4"}
        reply = await ask(port, "1-2-3-4.ns.pod.example.com", tcp=True)
        assert addresses(reply) == {"1.2.3.4"}
    finally:
        await upstream.close()
    reply = await ask(port, "1-2-3-4.ns.pod.example.com")
    assert reply.rcode() == dns.rcode.SERVFAIL
    await front.close()


class HeldUpstream(asyncio.DatagramProtocol):
    """An upstream resolver that keeps the queries it gets until the test answers them."""

    def __init__(self) -> None:
        self.held: list[tuple[bytes, Any]] = []
        self.transport: asyncio.DatagramTransport | None = None
        self.arrived = asyncio.Event()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.held.append((data, addr))
        self.arrived.set()

    async def wait_for(self, count: int) -> None:
        while len(self.held) < count:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 5)

    def answer_all(self) -> None:
        assert self.transport is not None
        for data, addr in self.held:
            reply = dns.message.make_response(dns.message.from_wire(data))
            reply.set_rcode(dns.rcode.NXDOMAIN)
            self.transport.sendto(reply.to_wire(), addr)
        self.held.clear()


async def test_forwarded_queries_in_flight_are_bounded_and_one_more_is_refused() -> None:
    """CoreDNS's forward max_concurrent: with 2 forwarded queries waiting on the upstream, a
    third is REFUSED at once (not queued, no task made for it), while the cluster domain is
    still answered; once the upstream answers, forwarding takes queries again."""
    loop = asyncio.get_running_loop()
    transport, upstream = await loop.create_datagram_endpoint(
        HeldUpstream, local_addr=("127.0.0.1", 0))
    upstream_port = transport.get_extra_info("sockname")[1]
    records = ClusterRecords("cluster.local")
    records.set_namespace({"metadata": {"name": "default"}})
    front = DnsServer(records, [Upstream("127.0.0.1", upstream_port)], upstream_timeout=5,
                      max_concurrent=2)
    _, port = await front.start("127.0.0.1", 0)
    try:
        waiting = [asyncio.ensure_future(ask(port, f"n{i}.example.org")) for i in range(2)]
        await upstream.wait_for(2)
        assert front.forwarding == 2 and len(front._tasks) == 2
        over = await ask(port, "n3.example.org")
        assert over.rcode() == dns.rcode.REFUSED
        over_tcp = await ask(port, "n4.example.org", tcp=True)
        assert over_tcp.rcode() == dns.rcode.REFUSED
        assert front.refused_over_limit == 2 and len(front._tasks) == 2
        assert len(upstream.held) == 2  # the refused ones never reached the upstream
        local = await ask(port, "1-2-3-4.default.pod.cluster.local")
        assert addresses(local) == {"1.2.3.4"}
        upstream.answer_all()
        assert [r.rcode() for r in await asyncio.gather(*waiting)] == [dns.rcode.NXDOMAIN] * 2
        assert front.forwarding == 0
        again = asyncio.ensure_future(ask(port, "n5.example.org"))
        await upstream.wait_for(1)
        upstream.answer_all()
        assert (await again).rcode() == dns.rcode.NXDOMAIN
        assert front.refused_over_limit == 2
    finally:
        await front.close()
        transport.close()


async def test_garbage_and_other_opcodes() -> None:
    server = DnsServer(ClusterRecords("cluster.local"))
    query = dns.message.make_query("x.cluster.local", "A")
    wire = bytearray(query.to_wire())
    assert await server.handle(bytes(wire[:12]) + b"\xff", tcp=False) is not None
    reply = dns.message.from_wire(await server.handle(bytes(wire[:12]) + b"\xff",
                                                      tcp=False) or b"")
    assert reply.rcode() == dns.rcode.FORMERR and reply.id == query.id
    assert await server.handle(b"\x01", tcp=False) is None
    wire[2] = (wire[2] & 0x87) | (4 << 3)  # opcode NOTIFY
    reply = dns.message.from_wire(await server.handle(bytes(wire), tcp=False) or b"")
    assert reply.rcode() == dns.rcode.NOTIMP


@pytest.mark.parametrize("address", ["10.20.30.40", "127.0.0.1"])
async def test_kube_dns_service_and_slice(tmp_path: Path, address: str) -> None:
    async with cluster(tmp_path) as api:
        await ensure_kube_dns(api, "10.96.0.10", address, 5353)
        await ensure_kube_dns(api, "10.96.0.10", address, 5353)  # idempotent
        svc = await api.get(resource_path("services", "kube-system", "kube-dns"))
        assert svc["spec"]["clusterIP"] == "10.96.0.10"
        assert "selector" not in svc["spec"]
        assert [(p["name"], p["port"], p["protocol"]) for p in svc["spec"]["ports"]] == [
            ("dns", 53, "UDP"), ("dns-tcp", 53, "TCP")]
        slices = (await api.get(resource_path("endpointslices", "kube-system",
                                              group="discovery.k8s.io")))["items"]
        if address.startswith("127."):  # pods cannot reach it: not published
            assert slices == []
            return
        [sl] = slices
        assert sl["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == \
            "dns.ephemera.io"
        assert sl["endpoints"][0]["addresses"] == [address]
        assert {(p["name"], p["port"], p["protocol"]) for p in sl["ports"]} == {
            ("dns", 5353, "UDP"), ("dns-tcp", 5353, "TCP")}
        await ensure_kube_dns(api, "10.96.0.10", address, 5454)  # a new port is followed
        sl = await api.get(resource_path("endpointslices", "kube-system", sl["metadata"]["name"],
                                         group="discovery.k8s.io"))
        assert {p["port"] for p in sl["ports"]} == {5454}


async def test_server_waits_for_sync(tmp_path: Path) -> None:
    """The server binds only once the informers have listed (no early NXDOMAIN)."""
    async with cluster(tmp_path) as api:
        await api.create(resource_path("services", "default"), service("web", "10.96.0.60"))
        dns_service = DnsService(api, ClusterRecords("cluster.local"))
        _, port = await asyncio.wait_for(dns_service.start("127.0.0.1", 0), 10)
        try:
            assert addresses(await ask(port, "web.default.svc.cluster.local")) == {
                "10.96.0.60"}
        finally:
            await dns_service.close()


async def test_large_answers_truncated_over_udp_whole_over_tcp() -> None:
    """100 endpoints do not fit in 512 bytes: UDP without EDNS gets TC (the client retries
    over TCP), EDNS with a large buffer and TCP get them all."""
    records = ClusterRecords("cluster.local")
    records.set_namespace({"metadata": {"name": "default"}})
    records.set_service({"metadata": {"namespace": "default", "name": "big"},
                         "spec": {"clusterIP": "None", "ports": []}})
    records.set_slice({"metadata": {"namespace": "default", "name": "big-1",
                                    "labels": {"kubernetes.io/service-name": "big"}},
                       "endpoints": [{"addresses": [f"10.2.0.{i}"]} for i in range(1, 101)]})
    server = DnsServer(records)
    query = dns.message.make_query("big.default.svc.cluster.local", "A")
    udp = dns.message.from_wire(await server.handle(query.to_wire(), tcp=False) or b"")
    assert udp.flags & dns.flags.TC and not udp.answer
    tcp = dns.message.from_wire(await server.handle(query.to_wire(), tcp=True) or b"")
    assert not tcp.flags & dns.flags.TC and len(addresses(tcp)) == 100
    edns = dns.message.make_query("big.default.svc.cluster.local", "A", use_edns=0,
                                  payload=4096)
    reply = dns.message.from_wire(await server.handle(edns.to_wire(), tcp=False) or b"")
    assert len(addresses(reply)) == 100 and reply.edns == 0

"""The cluster DNS server: answers the cluster domain from `ClusterRecords` over UDP and TCP,
forwards other names to upstream resolvers when some are configured (CoreDNS's `forward`),
and refuses them (REFUSED) otherwise.

Wire format by dnspython; the sockets are asyncio's (a datagram endpoint, and a stream
server whose messages carry the two-byte length prefix of RFC 1035 4.2.2). A UDP reply
larger than the client's buffer (512 bytes, or its EDNS payload size) is sent truncated
(TC set, sections empty) so the client retries over TCP. A message that does not parse gets
FORMERR when its header can be read and is dropped otherwise; an opcode other than QUERY
gets NOTIMP, a query without exactly one question FORMERR. Forwarding tries the upstreams in
order (2 s each, over the client's transport, TCP after a truncated UDP answer) and answers
SERVFAIL when none answers.

Concurrency is bounded as CoreDNS's `forward` plugin bounds it with `max_concurrent` (kubeadm's
Corefile sets 1000, our default): at most `max_concurrent` forwarded queries are in flight,
and one more is answered REFUSED at once, not queued (it counts in `refused_over_limit`,
CoreDNS's `coredns_forward_max_concurrent_rejects_total`). Cluster-domain queries never wait,
so a UDP datagram answered from the records is answered in its receive callback, without a
task; only a forwarded one gets a task, so the tasks in flight are bounded too. Over TCP each
connection is served one message at a time.

`DnsService` wires it to the API: informers of Services, EndpointSlices and Namespaces
(`ephemera.client.Informer`) feed the records; the server binds once all three have synced,
so it never answers NXDOMAIN for a name it has not seen yet. One log line per change of a
Service's records and per upstream failure; queries are not logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype

from ephemera.aiotasks import cancel_and_wait
from ephemera.client import ApiClient, Informer, resource_path
from ephemera.clusterdns.records import ClusterRecords

__all__ = ["MAX_CONCURRENT", "DnsServer", "DnsService", "Upstream", "parse_hostport"]

log = logging.getLogger("ephemera.dns")

UPSTREAM_TIMEOUT = 2.0
MAX_CONCURRENT = 1000  # kubeadm's Corefile: forward . /etc/resolv.conf {max_concurrent 1000}
DISCOVERY = "discovery.k8s.io"


@dataclass(frozen=True)
class Upstream:
    host: str
    port: int = 53

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_hostport(text: str, default_port: int) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT`, `HOST` or `:PORT` (all addresses); raises ValueError."""
    host, port = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"missing ']' in address {text!r}")
        host, rest = text[1:end], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad address {text!r}")
        port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not port:
        return host, default_port
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad port in address {text!r}")
    return host, int(port)


class DnsServer:
    """Answers queries (wire in, wire out); `start()` binds UDP and TCP on one address."""

    def __init__(self, records: ClusterRecords, upstreams: Sequence[Upstream] = (), *,
                 upstream_timeout: float = UPSTREAM_TIMEOUT,
                 max_concurrent: int = MAX_CONCURRENT) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
        self.records = records
        self.upstreams = list(upstreams)
        self.upstream_timeout = upstream_timeout
        self.max_concurrent = max_concurrent
        self.forwarding = 0  # forwarded queries in flight
        self.refused_over_limit = 0
        self._transport: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- the answer --

    async def handle(self, wire: bytes, *, tcp: bool) -> bytes | None:
        """The reply to one message (None: none is sent)."""
        local = self.answer_local(wire, tcp=tcp)
        if not isinstance(local, dns.message.Message):
            return local
        return await self._forward(local, tcp)

    def answer_local(self, wire: bytes, *, tcp: bool) -> bytes | dns.message.Message | None:
        """The reply when it needs no upstream (None: none is sent); else the parsed query,
        to forward, with its slot taken (`forwarding` counts it until `_forward`, which
        the caller must call, gives it back)."""
        try:
            query = dns.message.from_wire(wire)
        except dns.exception.DNSException:
            return self._formerr(wire)
        if query.flags & dns.flags.QR:
            return None  # a response: not for us
        if query.opcode() != dns.opcode.QUERY:
            return self._reply(query, dns.rcode.NOTIMP, tcp)
        if len(query.question) != 1:
            return self._reply(query, dns.rcode.FORMERR, tcp)
        question = query.question[0]
        answer = self.records.answer(question.name, dns.rdatatype.RdataType(question.rdtype))
        if answer is None:
            if not self.upstreams:
                return self._reply(query, dns.rcode.REFUSED, tcp)
            if self.forwarding >= self.max_concurrent:
                self.refused_over_limit += 1
                return self._reply(query, dns.rcode.REFUSED, tcp)
            self.forwarding += 1
            return query
        response = dns.message.make_response(query)
        response.set_rcode(dns.rcode.Rcode(answer.rcode))
        if answer.authoritative:
            response.flags |= dns.flags.AA
        response.answer = answer.answer
        response.authority = answer.authority
        response.additional = answer.additional
        return self._to_wire(query, response, tcp)

    @staticmethod
    def _formerr(wire: bytes) -> bytes | None:
        if len(wire) < 12:
            return None
        msg_id, flags = struct.unpack("!HH", wire[:4])
        if flags & 0x8000:
            return None
        # QR set, the opcode and RD echoed, rcode FORMERR, all counts 0.
        return struct.pack("!HHHHHH", msg_id, 0x8000 | (flags & 0x7900) | 1, 0, 0, 0, 0)

    def _reply(self, query: dns.message.Message, rcode: int, tcp: bool) -> bytes:
        response = dns.message.make_response(query)
        response.set_rcode(dns.rcode.Rcode(rcode))
        return self._to_wire(query, response, tcp)

    @staticmethod
    def _to_wire(query: dns.message.Message, response: dns.message.Message,
                 tcp: bool) -> bytes:
        limit = 65535 if tcp else max(512, query.payload if query.edns >= 0 else 512)
        try:
            return response.to_wire(max_size=limit)
        except dns.exception.TooBig:
            response.answer, response.authority, response.additional = [], [], []
            response.flags |= dns.flags.TC
            return response.to_wire(max_size=limit)

    async def _forward(self, query: dns.message.Message, tcp: bool) -> bytes:
        """The upstreams' reply to `query`, whose slot (`answer_local`) it gives back."""
        try:
            return await self._ask_upstreams(query, tcp)
        finally:
            self.forwarding -= 1

    async def _ask_upstreams(self, query: dns.message.Message, tcp: bool) -> bytes:
        for upstream in self.upstreams:
            try:
                if tcp:
                    reply = await dns.asyncquery.tcp(query, upstream.host,
                                                     timeout=self.upstream_timeout,
                                                     port=upstream.port)
                else:
                    reply, _ = await dns.asyncquery.udp_with_fallback(
                        query, upstream.host, timeout=self.upstream_timeout,
                        port=upstream.port)
            except (dns.exception.DNSException, OSError) as err:
                log.warning("upstream %s failed for %s: %s", upstream,
                            query.question[0].name, err or type(err).__name__)
                continue
            reply.id = query.id
            return self._to_wire(query, reply, tcp)
        return self._reply(query, dns.rcode.SERVFAIL, tcp)

    # -- the sockets --

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind UDP and TCP on `host:port` (port 0: a free one, the same for both); returns
        the bound address."""
        loop = asyncio.get_running_loop()
        server = self

        class Datagrams(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: Any) -> None:
                server._datagram(data, addr)

        for _attempt in range(20):
            self._tcp = await asyncio.start_server(self._serve_stream, host or None, port,
                                                   reuse_address=True)
            bound = self._tcp.sockets[0].getsockname()
            try:
                transport, _ = await loop.create_datagram_endpoint(
                    Datagrams, local_addr=(host or "0.0.0.0", bound[1]))
            except OSError:
                self._tcp.close()
                await self._tcp.wait_closed()
                if port:
                    raise
                continue  # the free TCP port is taken for UDP: try another
            self._transport = transport
            return str(bound[0]), int(bound[1])
        raise OSError(f"no free port for both UDP and TCP on {host}")

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _datagram(self, data: bytes, addr: Any) -> None:
        """Answer one datagram: at once from the records, or in a task when forwarded (at
        most `max_concurrent` of them)."""
        local = self.answer_local(data, tcp=False)
        if isinstance(local, dns.message.Message):
            self._spawn(self._forward_datagram(local, addr))
        elif local is not None and self._transport is not None:
            self._transport.sendto(local, addr)

    async def _forward_datagram(self, query: dns.message.Message, addr: Any) -> None:
        reply = await self._forward(query, tcp=False)
        if self._transport is not None:
            self._transport.sendto(reply, addr)

    async def _serve_stream(self, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    header = await asyncio.wait_for(reader.readexactly(2), timeout=30)
                    data = await asyncio.wait_for(
                        reader.readexactly(struct.unpack("!H", header)[0]), timeout=10)
                except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                    return
                reply = await self.handle(data, tcp=True)
                if reply is None:
                    return
                writer.write(struct.pack("!H", len(reply)) + reply)
                await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        if self._tcp is not None:
            self._tcp.close()
            await self._tcp.wait_closed()
        for task in list(self._tasks):
            task.cancel()


class DnsService:
    """The records fed by informers over the API, and the server on top."""

    def __init__(self, api: ApiClient, records: ClusterRecords,
                 upstreams: Sequence[Upstream] = (), *,
                 max_concurrent: int = MAX_CONCURRENT) -> None:
        self.records = records
        self.server = DnsServer(records, upstreams, max_concurrent=max_concurrent)
        self.informers = [
            Informer(api, resource_path("namespaces"), name="dns namespaces"),
            Informer(api, resource_path("services"), name="dns services"),
            Informer(api, resource_path("endpointslices", group=DISCOVERY),
                     name="dns endpointslices"),
        ]
        namespaces, services, slices = self.informers
        namespaces.add_handler(on_add=records.set_namespace,
                               on_update=lambda old, new: records.set_namespace(new),
                               on_delete=records.delete_namespace)
        services.add_handler(on_add=self._service_added, on_update=self._service_updated,
                             on_delete=self._service_deleted)
        slices.add_handler(on_add=self._slice_changed,
                           on_update=lambda old, new: self._slice_changed(new),
                           on_delete=self._slice_deleted)
        self._tasks: list[asyncio.Task[None]] = []

    def _service_added(self, obj: dict[str, Any]) -> None:
        self.records.set_service(obj)
        log.info("serving %s", self._describe(obj))

    def _service_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.records.set_service(new)
        if (old.get("spec") or {}) != (new.get("spec") or {}):
            log.info("serving %s", self._describe(new))

    def _service_deleted(self, obj: dict[str, Any]) -> None:
        self.records.delete_service(obj)
        md = obj.get("metadata") or {}
        log.info("no longer serving %s.%s.svc.%s", md.get("name"), md.get("namespace"),
                 self.records.zone.to_text(omit_final_dot=True))

    def _slice_changed(self, obj: dict[str, Any]) -> None:
        before = self._ready_count(obj)
        self.records.set_slice(obj)
        self._log_endpoints(obj, before)

    def _slice_deleted(self, obj: dict[str, Any]) -> None:
        before = self._ready_count(obj)
        self.records.delete_slice(obj)
        self._log_endpoints(obj, before)

    def _ready_count(self, obj: dict[str, Any]) -> tuple[str, str, int]:
        md = obj.get("metadata") or {}
        namespace = str(md.get("namespace") or "")
        service = str((md.get("labels") or {}).get("kubernetes.io/service-name") or "")
        ready = sum(len(ep.get("addresses") or [])
                    for sl in (self.records.slices.get((namespace, service)) or {}).values()
                    for ep in sl.get("endpoints") or []
                    if (ep.get("conditions") or {}).get("ready") is not False)
        return namespace, service, ready

    def _log_endpoints(self, obj: dict[str, Any], before: tuple[str, str, int]) -> None:
        namespace, service, ready = self._ready_count(obj)
        if ready != before[2] and (namespace, service) in self.records.services:
            log.info("%s.%s.svc.%s: %d ready endpoint addresses", service, namespace,
                     self.records.zone.to_text(omit_final_dot=True), ready)

    def _describe(self, svc: dict[str, Any]) -> str:
        md, spec = svc.get("metadata") or {}, svc.get("spec") or {}
        name = (f"{md.get('name')}.{md.get('namespace')}.svc."
                f"{self.records.zone.to_text(omit_final_dot=True)}")
        if spec.get("type") == "ExternalName":
            return f"{name} (CNAME {spec.get('externalName')})"
        if spec.get("clusterIP") == "None":
            return f"{name} (headless: its ready endpoints)"
        return f"{name} (A {', '.join(spec.get('clusterIPs') or [spec.get('clusterIP') or ''])})"

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Start the informers, wait until they have synced, then bind."""
        self._tasks = [asyncio.create_task(i.run(), name=f"informer {i.name}")
                       for i in self.informers]
        await asyncio.gather(*(i.wait_synced() for i in self.informers))
        bound = await self.server.start(host, port)
        log.info("serving %s on %s:%s (UDP and TCP) for %d services; other names: %s",
                 self.records.zone.to_text(omit_final_dot=True), bound[0], bound[1],
                 len(self.records.services),
                 ", ".join(map(str, self.server.upstreams)) or "refused")
        return bound

    async def close(self) -> None:
        await self.server.close()
        await cancel_and_wait(*self._tasks)

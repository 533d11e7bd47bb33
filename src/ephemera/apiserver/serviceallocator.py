"""ClusterIP and NodePort allocation, as upstream's bitmap allocators
(`pkg/registry/core/service/{allocator,ipallocator,portallocator}`) backed by its
`RangeAllocation` objects in the store (`/registry/ranges/serviceips`,
`/registry/ranges/servicenodeports`).

Every allocation and release is a compare-and-swap of the range's bitmap on the store's
revision, retried when another apiserver wrote it first, so apiservers sharing one store
never hand out one IP or port twice. The bitmap is upstream's: bit `i` is the range's
`i`-th usable value (IPs from the network address + 1, IPv4's broadcast address left out;
ports from the range's first), stored as the big-endian bytes of a big integer in `data`
(base64 in JSON). A dynamic allocation picks a random free value in the upper part of the
range first and only then in the lower part, which is kept for static choices (upstream's
`randomScanStrategyWithOffset`: offset `min(max(16, size/16), 256)` for IPs and
`min(max(16, size/32), 128)` for ports).

The service hooks (`ServiceAllocations`) run on create, update and delete as upstream's
service REST storage does (`alloc.go`: allocateCreate, allocateUpdate, releaseForDelete).
Upstream's repair loops run in every apiserver every 3 minutes (`repair`): the values the
stored Services hold are marked taken, and a taken value no Service holds (an apiserver died
between the allocation and the write) is released once three passes in a row found it so.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ephemera.api import errors, meta, services
from ephemera.api import field as fields
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import go_slice
from ephemera.apiserver.registry import Registry
from ephemera.apiserver.resources import core_resource
from ephemera.store import KeyExists, KeyNotFound, RevisionMismatch, Store

log = logging.getLogger(__name__)

DEFAULT_SERVICE_CIDR = "10.96.0.0/12"
DEFAULT_NODE_PORT_RANGE = "30000-32767"
SERVICE_IPS_KEY = "/registry/ranges/serviceips"
NODE_PORTS_KEY = "/registry/ranges/servicenodeports"
CAS_ATTEMPTS = 64
# upstream's numRepairsBeforeLeakCleanup, and its repair interval (seconds).
LEAK_CHECKS = 3
REPAIR_INTERVAL = 180.0
# Told whether the write was stored (the registry's `FinishFn`).
FinishFn = Callable[[bool], Awaitable[None]]

ERR_ALLOCATED_IP = "provided IP is already allocated"
ERR_ALLOCATED_PORT = "provided port is already allocated"
ERR_FULL = "range is full"


class AllocationError(Exception):
    """An allocation refused: the value is taken, outside the range, or the range is full."""


def _range_offset(size: int, step: int, upper: int) -> int:
    """`calculateRangeOffset`: the low part kept for static allocation."""
    lower = 16
    if size <= lower:
        return 0
    return min(max(lower, size // step), upper)


class Bitmap:
    """upstream's `AllocationBitmap`: `size` bits, bit i set when value i is taken."""

    def __init__(self, size: int, offset: int, data: bytes = b"") -> None:
        self.size = size
        self.offset = offset
        self.bits = bytearray(int.from_bytes(data, "big").to_bytes((size + 7) // 8, "little"))

    def snapshot(self) -> bytes:
        value = int.from_bytes(self.bits, "little")
        return value.to_bytes((value.bit_length() + 7) // 8, "big")

    def has(self, i: int) -> bool:
        return bool(self.bits[i >> 3] & (1 << (i & 7)))

    def set(self, i: int) -> None:
        self.bits[i >> 3] |= 1 << (i & 7)

    def clear(self, i: int) -> None:
        self.bits[i >> 3] &= ~(1 << (i & 7)) & 0xFF

    def allocated(self) -> list[int]:
        return [n * 8 + bit for n, byte in enumerate(self.bits) if byte
                for bit in range(8) if byte & (1 << bit)]

    def _free_in(self, lo: int, hi: int, rng: random.Random) -> int | None:
        if hi <= lo:
            return None
        start = rng.randrange(lo, hi)
        for i in (*range(start, hi), *range(lo, start)):
            if not self.bits[i >> 3] & (1 << (i & 7)):
                return i
        return None

    def next_free(self, rng: random.Random) -> int | None:
        """A free bit, the upper part of the range first."""
        found = self._free_in(self.offset, self.size, rng)
        return found if found is not None else self._free_in(0, self.offset, rng)


@dataclass(frozen=True)
class IPRange:
    cidr: ipaddress.IPv4Network | ipaddress.IPv6Network

    @property
    def size(self) -> int:
        n = self.cidr.num_addresses
        if self.cidr.version == 6:
            n = min(n, 65536)
        else:
            n -= 1
        return max(n - 1, 0)

    @property
    def offset(self) -> int:
        return _range_offset(self.cidr.num_addresses, 16, 256)

    def index(self, ip: str) -> int | None:
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return None
        if addr not in self.cidr:
            return None
        i = int(addr) - int(self.cidr.network_address) - 1
        return i if 0 <= i < self.size else None

    def value(self, i: int) -> str:
        return str(ipaddress.ip_address(int(self.cidr.network_address) + 1 + i))

    def first(self) -> str:
        """The range's first address (the `kubernetes` Service's)."""
        return self.value(0)


@dataclass(frozen=True)
class PortRange:
    base: int
    count: int

    @classmethod
    def parse(cls, text: str) -> PortRange:
        """`net.ParsePortRange`: `30000-32767`, or one port."""
        lo, sep, hi = text.strip().partition("-")
        first = int(lo)
        last = int(hi) if sep else first
        if not 0 < first <= last <= 65535:
            raise ValueError(f"invalid port range {text!r}")
        return cls(first, last - first + 1)

    def __str__(self) -> str:
        return f"{self.base}-{self.base + self.count - 1}"

    @property
    def size(self) -> int:
        return self.count

    @property
    def offset(self) -> int:
        return _range_offset(self.count, 32, 128)

    def index(self, port: int) -> int | None:
        i = port - self.base
        return i if 0 <= i < self.count else None

    def value(self, i: int) -> int:
        return self.base + i


class StoreRange:
    """One range's bitmap in the store, changed only by compare-and-swap."""

    def __init__(self, store: Store, key: str, spec: str, size: int, offset: int) -> None:
        self.store, self.key, self.spec = store, key, spec
        self.size, self.offset = size, offset
        self.rng = random.Random()

    async def _change(self, change: Any) -> Any:
        """Read the bitmap, apply `change(bitmap)` (which returns a result or raises),
        write it back if changed; retried on a lost race."""
        for _ in range(CAS_ATTEMPTS):
            kv = await self.store.get(self.key)
            data = b""
            if kv is not None:
                stored = json.loads(kv.value)
                if stored.get("range") == self.spec:
                    data = base64.b64decode(stored.get("data") or "")
            bitmap = Bitmap(self.size, self.offset, data)
            before = bytes(bitmap.bits)
            result = change(bitmap)
            if bytes(bitmap.bits) == before:
                return result
            value = json.dumps({
                "kind": "RangeAllocation", "apiVersion": "v1",
                "metadata": {"creationTimestamp": meta.now_rfc3339()},
                "range": self.spec,
                "data": base64.b64encode(bitmap.snapshot()).decode(),
            }, separators=(",", ":")).encode()
            try:
                if kv is None:
                    await self.store.create(self.key, value)
                else:
                    await self.store.update(self.key, value, kv.mod_revision)
            except (KeyExists, KeyNotFound, RevisionMismatch):
                continue
            return result
        raise errors.conflict("rangeallocations", self.key.rsplit("/", 1)[-1],
                              "too many concurrent updates, try again")

    async def allocate(self, indexes: Iterable[int]) -> None:
        """Take every index or none (AllocationError: one is taken)."""
        wanted = list(indexes)

        def take(bitmap: Bitmap) -> None:
            for i in wanted:
                if bitmap.has(i):
                    raise AllocationError(i)
            for i in wanted:
                bitmap.set(i)

        await self._change(take)

    async def allocate_next(self, count: int) -> list[int]:
        def take(bitmap: Bitmap) -> list[int]:
            out: list[int] = []
            for _ in range(count):
                i = bitmap.next_free(self.rng)
                if i is None:
                    raise AllocationError(ERR_FULL)
                bitmap.set(i)
                out.append(i)
            return out

        result: list[int] = await self._change(take)
        return result

    async def release(self, indexes: Iterable[int]) -> None:
        gone = list(indexes)

        def clear(bitmap: Bitmap) -> None:
            for i in gone:
                bitmap.clear(i)

        if gone:
            await self._change(clear)

    async def allocated(self) -> list[int]:
        def read(bitmap: Bitmap) -> list[int]:
            return bitmap.allocated()

        result: list[int] = await self._change(read)
        return result

    async def repair(self, in_use: set[int], suspects: dict[int, int]) -> list[int]:
        """upstream's repair loop for one range: every value in use is marked taken; a taken
        value no service uses is a suspect, released once seen so `LEAK_CHECKS` times in a
        row (it may belong to a create not yet stored). `suspects` (value: times seen) is
        updated; returns the values released."""
        def fix(bitmap: Bitmap) -> tuple[dict[int, int], list[int]]:
            for i in in_use:
                if i < bitmap.size:
                    bitmap.set(i)
            seen: dict[int, int] = {}
            released: list[int] = []
            for i in bitmap.allocated():
                if i in in_use:
                    continue
                count = suspects.get(i, 0) + 1
                if count >= LEAK_CHECKS:
                    bitmap.clear(i)
                    released.append(i)
                else:
                    seen[i] = count
            return seen, released

        seen, released = await self._change(fix)
        suspects.clear()
        suspects.update(seen)
        return released


@dataclass
class Allocated:
    """What one write allocated: released again if the write does not happen."""

    ips: list[int] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)


_SPEC = Path("spec")


class ServiceAllocations:
    """The ClusterIP and NodePort allocators of one apiserver, over the shared store."""

    def __init__(self, store: Store, cluster_ip_range: str = DEFAULT_SERVICE_CIDR,
                 node_port_range: str = DEFAULT_NODE_PORT_RANGE) -> None:
        self.ip_range = IPRange(ipaddress.ip_network(cluster_ip_range, strict=False))
        self.port_range = PortRange.parse(node_port_range)
        self.ips = StoreRange(store, SERVICE_IPS_KEY, str(self.ip_range.cidr),
                              self.ip_range.size, self.ip_range.offset)
        self.ports = StoreRange(store, NODE_PORTS_KEY, str(self.port_range),
                                self.port_range.size, self.port_range.offset)
        self._ip_suspects: dict[int, int] = {}
        self._port_suspects: dict[int, int] = {}

    def _invalid(self, svc: dict[str, Any], errs: list[FieldError]) -> errors.StatusError:
        return errors.invalid("Service", meta.name_of(svc), errs)

    # -- cluster IPs ------------------------------------------------------------------------

    async def _allocate_ip(self, svc: dict[str, Any], dry_run: bool) -> list[int]:
        spec = svc["spec"]
        ip = spec.get("clusterIP") or ""
        if ip:
            i = self.ip_range.index(ip)
            if i is None:
                raise self._invalid(svc, [fields.invalid(
                    _SPEC.child("clusterIPs"), go_slice(spec.get("clusterIPs") or [ip]),
                    f"failed to allocate IP {ip}: the provided IP ({ip}) is not in the "
                    f"valid range. The range of valid IPs is {self.ip_range.cidr}")])
            if dry_run:
                return []
            try:
                await self.ips.allocate([i])
            except AllocationError:
                raise self._invalid(svc, [fields.invalid(
                    _SPEC.child("clusterIPs"), go_slice(spec.get("clusterIPs") or [ip]),
                    f"failed to allocate IP {ip}: {ERR_ALLOCATED_IP}")]) from None
            return [i]
        if dry_run:
            spec["clusterIP"] = str(self.ip_range.cidr.network_address)
            spec["clusterIPs"] = [spec["clusterIP"]]
            return []
        try:
            (i,) = await self.ips.allocate_next(1)
        except AllocationError:
            raise errors.internal_error(
                f"failed to allocate a serviceIP: {ERR_FULL}") from None
        spec["clusterIP"] = self.ip_range.value(i)
        spec["clusterIPs"] = [spec["clusterIP"]]
        return [i]

    # -- node ports -------------------------------------------------------------------------

    async def _allocate_node_ports(self, svc: dict[str, Any], keep: set[int],
                                   dry_run: bool) -> list[int]:
        """Node ports for every port of `svc` that needs one; those in `keep` are the
        service's already."""
        ports = [p for p in svc["spec"].get("ports") or [] if isinstance(p, dict)]
        taken: list[int] = []
        try:
            static: dict[int, int] = {}
            for n, port in enumerate(ports):
                value = port.get("nodePort")
                if not value or value in keep or value in static:
                    continue
                i = self.port_range.index(value)
                if i is None:
                    raise self._invalid(svc, [fields.invalid(
                        _SPEC.child("ports").index(n).child("nodePort"), value,
                        "provided port is not in the valid range. The range of valid ports "
                        f"is {self.port_range}")])
                if not dry_run:
                    try:
                        await self.ports.allocate([i])
                    except AllocationError:
                        raise self._invalid(svc, [fields.invalid(
                            _SPEC.child("ports").index(n).child("nodePort"), value,
                            ERR_ALLOCATED_PORT)]) from None
                    taken.append(i)
                static[value] = i
            missing = [p for p in ports if not p.get("nodePort")]
            if missing:
                if dry_run:
                    for port in missing:
                        port["nodePort"] = self.port_range.base
                    return taken
                try:
                    fresh = await self.ports.allocate_next(len(missing))
                except AllocationError:
                    raise errors.internal_error(
                        f"failed to allocate a nodePort: {ERR_FULL}") from None
                taken.extend(fresh)
                for port, i in zip(missing, fresh, strict=True):
                    port["nodePort"] = self.port_range.value(i)
        except BaseException:
            await self.ports.release(taken)
            raise
        return taken

    # -- the hooks --------------------------------------------------------------------------

    async def allocate_create(self, svc: dict[str, Any], dry_run: bool) -> Allocated:
        """allocateCreate: families checked, a cluster IP and node ports allocated."""
        errs = services.single_stack_errors(svc)
        if errs:
            raise self._invalid(svc, errs)
        done = Allocated()
        try:
            if services.needs_cluster_ip(svc):
                done.ips = await self._allocate_ip(svc, dry_run)
            if services.needs_node_ports(svc):
                done.ports = await self._allocate_node_ports(svc, set(), dry_run)
            if services.needs_health_check(svc):
                done.ports += await self._allocate_health_check(svc, set(), dry_run)
        except BaseException:
            await self.rollback(done)
            raise
        return done

    async def allocate_update(self, new: dict[str, Any], old: dict[str, Any],
                              dry_run: bool) -> tuple[Allocated, Allocated]:
        """allocateUpdate: what the new service needs beyond the old one is allocated now;
        what the old one had and the new one drops is returned, to release once the update
        is stored."""
        errs = services.single_stack_errors(new)
        if errs:
            raise self._invalid(new, errs)
        done, dropped = Allocated(), Allocated()
        old_ips = self._ip_indexes(old)
        try:
            if services.needs_cluster_ip(new):
                if not old_ips or (new["spec"].get("clusterIP") or "") == "":
                    done.ips = await self._allocate_ip(new, dry_run)
            else:
                dropped.ips = old_ips
            old_ports = self._port_values(old)
            if services.needs_node_ports(new):
                done.ports = await self._allocate_node_ports(new, old_ports, dry_run)
                dropped.ports = sorted(self._indexes_of_ports(old_ports - self._port_values(new)))
            else:
                for port in new["spec"].get("ports") or []:
                    if isinstance(port, dict) and new["spec"].get("type") == "ClusterIP":
                        port.pop("nodePort", None)
                dropped.ports = sorted(self._indexes_of_ports(old_ports))
            if services.needs_health_check(new):
                done.ports += await self._allocate_health_check(new, old_ports, dry_run)
                dropped.ports = sorted(self._indexes_of_ports(old_ports - self._port_values(new)))
        except BaseException:
            await self.rollback(done)
            raise
        return done, dropped

    def _ip_indexes(self, svc: dict[str, Any]) -> list[int]:
        spec = svc.get("spec") or {}
        if not services.needs_cluster_ip(svc):
            return []
        out = []
        for ip in spec.get("clusterIPs") or []:
            i = self.ip_range.index(ip) if isinstance(ip, str) else None
            if i is not None:
                out.append(i)
        return out

    @staticmethod
    def _port_values(svc: dict[str, Any]) -> set[int]:
        """The node ports `svc` holds: its ports' and its health check's."""
        spec = svc.get("spec") or {}
        out: set[int] = set()
        if services.needs_node_ports(svc):
            out = {p["nodePort"] for p in spec.get("ports") or []
                   if isinstance(p, dict) and isinstance(p.get("nodePort"), int)
                   and p["nodePort"]}
        health = spec.get("healthCheckNodePort")
        if services.needs_health_check(svc) and isinstance(health, int) and health:
            out.add(health)
        return out

    async def _allocate_health_check(self, svc: dict[str, Any], keep: set[int],
                                     dry_run: bool) -> list[int]:
        """The `healthCheckNodePort` (the given one, or the next free one)."""
        spec = svc["spec"]
        value = spec.get("healthCheckNodePort")
        path = _SPEC.child("healthCheckNodePort")
        if isinstance(value, int) and value:
            if value in keep:
                return []
            i = self.port_range.index(value)
            if i is None:
                raise self._invalid(svc, [fields.invalid(
                    path, value, "provided port is not in the valid range. The range of "
                    f"valid ports is {self.port_range}")])
            if dry_run:
                return []
            try:
                await self.ports.allocate([i])
            except AllocationError:
                raise self._invalid(svc, [fields.invalid(path, value,
                                                         ERR_ALLOCATED_PORT)]) from None
            return [i]
        if dry_run:
            spec["healthCheckNodePort"] = self.port_range.base
            return []
        try:
            (i,) = await self.ports.allocate_next(1)
        except AllocationError:
            raise errors.internal_error(
                f"failed to allocate a nodePort: {ERR_FULL}") from None
        spec["healthCheckNodePort"] = self.port_range.value(i)
        return [i]

    def _indexes_of_ports(self, values: Iterable[int]) -> list[int]:
        return [i for i in (self.port_range.index(v) for v in values) if i is not None]

    async def rollback(self, done: Allocated) -> None:
        """Release what a write that did not happen allocated."""
        await self.ips.release(done.ips)
        await self.ports.release(done.ports)

    async def repair(self, services_: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
        """One pass of upstream's ClusterIP and NodePort repair loops over every stored
        Service: allocations a Service holds are marked, leaks released after
        `LEAK_CHECKS` passes. Returns the IPs and ports released."""
        ips = {i for svc in services_ for i in self._ip_indexes(svc)}
        ports = {i for svc in services_
                 for i in self._indexes_of_ports(self._port_values(svc))}
        freed_ips = await self.ips.repair(ips, self._ip_suspects)
        freed_ports = await self.ports.repair(ports, self._port_suspects)
        return ([self.ip_range.value(i) for i in freed_ips],
                [self.port_range.value(i) for i in freed_ports])

    async def release_for_delete(self, svc: dict[str, Any]) -> None:
        """releaseForDelete: the deleted service's cluster IPs and node ports."""
        await self.rollback(Allocated(self._ip_indexes(svc),
                                      self._indexes_of_ports(self._port_values(svc))))

    # -- the registry's write hooks (`ephemera.apiserver.registry.WriteHooks`) -------------

    async def begin_create(self, obj: dict[str, Any], dry_run: bool) -> FinishFn:
        done = await self.allocate_create(obj, dry_run)

        async def finish(stored: bool) -> None:
            if not stored:
                await self.rollback(done)

        return finish

    async def begin_update(self, new: dict[str, Any], old: dict[str, Any],
                           dry_run: bool) -> FinishFn:
        done, dropped = await self.allocate_update(new, old, dry_run)

        async def finish(stored: bool) -> None:
            await self.rollback(dropped if stored else done)

        return finish

    async def after_delete(self, obj: dict[str, Any], dry_run: bool) -> None:
        if not dry_run:
            await self.release_for_delete(obj)


async def repair_periodically(registry: Registry, allocations: ServiceAllocations,
                              interval: float = REPAIR_INTERVAL) -> None:
    """Run `ServiceAllocations.repair` over the stored Services now and every `interval`."""
    services_resource = core_resource("services")
    codec = registry.codec(services_resource)
    while True:
        try:
            page = await registry.list(services_resource, "")
            stored = [obj if obj is not None else codec.decode(kv)
                      for kv, obj in zip(page.kvs, page.objects, strict=True)]
            ips, ports = await allocations.repair(stored)
            if ips or ports:
                log.warning("released leaked service allocations: IPs %s, node ports %s",
                            ips, ports)
        except Exception as err:  # the store may be away: next time
            log.warning("repairing the service allocations failed: %s", err)
        await asyncio.sleep(interval)

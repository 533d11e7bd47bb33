"""The proxy's loop: informers on Services, EndpointSlices and this node's Node, and a sync
runner that keeps the node's nftables table equal to `rules.build` of what they hold.

As upstream's: nothing is written until the Services and slices have been listed; then
every change (an informer event) asks for a sync, run at most once per `min_sync_period`
(the changes of that time together), as a partial transaction against the table last
applied; every `sync_period`, and after a failed sync, a full one that replaces the table
whole. The first sync is full, so a table a `kill -9`ed proxy left behind is replaced. One
log line per sync says what the table holds. On stop the table is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import Callable
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.client import ApiClient, Informer, resource_path
from ephemera.proxy import nft, rules

log = logging.getLogger("ephemera.proxy")

DEFAULT_SYNC_PERIOD = 30.0
DEFAULT_MIN_SYNC_PERIOD = 1.0
RETRY_AFTER = 5.0  # after a failed sync

Apply = Callable[[list[nft.Command]], None]


def node_addresses(node: dict[str, Any] | None) -> tuple[str, ...]:
    """Where node ports answer: the Node's InternalIPs (IPv4, loopback excluded: 127.0.0.1 is
    every cluster's on this machine, and the kernel will not route it to a pod) and the pod
    bridge's gateway, the first address of `spec.podCIDR`."""
    if not node:
        return ()
    found: list[str] = []
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") != "InternalIP":
            continue
        try:
            ip = ipaddress.ip_address(str(addr.get("address")))
        except ValueError:
            continue
        if ip.version == 4 and not ip.is_loopback:
            found.append(str(ip))
    cidr = (node.get("spec") or {}).get("podCIDR")
    if cidr:
        with contextlib.suppress(ValueError):
            net = ipaddress.IPv4Network(str(cidr), strict=False)
            found.append(str(net.network_address + 1))
    return tuple(dict.fromkeys(found))


class Proxier:
    def __init__(self, api: ApiClient, *, node_name: str, cluster_cidr: str,
                 masquerade_all: bool = False, sync_period: float = DEFAULT_SYNC_PERIOD,
                 min_sync_period: float = DEFAULT_MIN_SYNC_PERIOD,
                 apply: Apply | None = None) -> None:
        self.api = api
        self.node_name = node_name
        self.cluster_cidr = cluster_cidr
        self.masquerade_all = masquerade_all
        self.sync_period = sync_period
        self.min_sync_period = min_sync_period
        self.table = nft.table_name(cluster_cidr, node_name)
        self._apply: Apply = apply or nft.run
        self.services = Informer(api, resource_path("services"),
                                 label_selector=rules.SERVICE_SELECTOR, name="services")
        self.slices = Informer(api, "/apis/discovery.k8s.io/v1/endpointslices",
                               label_selector=rules.SLICE_SELECTOR, name="endpointslices")
        self.node = Informer(api, resource_path("nodes"),
                             field_selector=f"metadata.name={node_name}", name="node")
        self._changed = asyncio.Event()
        self._applied: rules.Ruleset | None = None
        self._stale: list[str] = []
        self._last_full = 0.0
        self._warned: set[tuple[str, str]] = set()
        self.syncs = 0
        for informer in (self.services, self.slices, self.node):
            informer.add_handler(on_add=self._touch, on_update=self._touch2,
                                 on_delete=self._touch)

    def _touch(self, _obj: dict[str, Any]) -> None:
        self._changed.set()

    def _touch2(self, _old: dict[str, Any], _new: dict[str, Any]) -> None:
        self._changed.set()

    def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], rules.ProxyConfig]:
        """What the caches hold now (taken on the event loop, which alone changes them)."""
        config = rules.ProxyConfig(node_name=self.node_name, cluster_cidr=self.cluster_cidr,
                                   node_ips=node_addresses(self.node.get(self.node_name)),
                                   masquerade_all=self.masquerade_all)
        return self.services.list(), self.slices.list(), config

    def sync(self, services: list[dict[str, Any]], slices: list[dict[str, Any]],
             config: rules.ProxyConfig, *, full: bool = False) -> bool:
        """Build the table and apply it (partial unless `full`, or nothing was applied
        yet, or the base chains changed); False when a partial one had nothing to do."""
        started = time.monotonic()
        wanted = rules.build(services, slices, config)
        self._warn(wanted)
        old = self._applied
        full = full or old is None or any(
            old.chains.get(name) != wanted.chains.get(name) for name in rules.BASE_CHAINS)
        if not full and old is not None and not self._stale and (
                old.chains, old.maps, old.sets) == (wanted.chains, wanted.maps, wanted.sets):
            return False  # an event that changes nothing in the table (a Node heartbeat)
        try:
            if full or old is None:
                self._apply(nft.full_transaction(self.table, wanted))
                self._stale = []
                self._last_full = time.monotonic()
            else:
                commands, stale = nft.partial_transaction(self.table, old, wanted,
                                                          self._stale)
                self._apply(commands)
                self._stale = stale
        except nft.NftError:
            self._applied = None  # the next sync replaces the table whole
            raise
        self._applied = wanted
        self.syncs += 1
        s = wanted.stats
        log.info("synced nftables table %s (%s): %d service ports, %d endpoints, %d without "
                 "endpoints, %d node ports on %s, in %.0f ms", self.table,
                 "full" if full else "partial", s.service_ports, s.endpoints, s.no_endpoints,
                 s.node_ports, ",".join(config.node_ips) or "no address",
                 (time.monotonic() - started) * 1000)
        return True

    def _warn(self, rs: rules.Ruleset) -> None:
        """Log what a Service asks and the proxy does not do, once per Service and text."""
        seen = set(rs.warnings)
        for key, message in rs.warnings:
            if (key, message) not in self._warned:
                log.warning("service %s: %s", key, message)
        self._warned = seen

    def delete_table(self) -> None:
        self._apply(nft.delete_table_command(self.table))
        log.info("deleted nftables table %s", self.table)

    async def run(self, stop: asyncio.Event) -> None:
        """Sync until `stop`, then delete the table."""
        tasks = [asyncio.create_task(i.run(), name=f"informer-{i.name}")
                 for i in (self.services, self.slices, self.node)]
        try:
            waiting: asyncio.Future[Any] = asyncio.gather(self.services.wait_synced(),
                                                          self.slices.wait_synced())
            stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if stop.is_set():
                await cancel_and_wait(waiting)
                return
            # The Node may not exist yet (a proxy started with its kubelet): a short wait,
            # then node ports come when it does.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):
                    await self.node.wait_synced()
            await self._loop(stop)
        finally:
            await cancel_and_wait(*tasks)
            try:
                await asyncio.to_thread(self.delete_table)
            except nft.NftError as err:
                log.error("deleting nftables table %s failed: %s", self.table, err)

    async def _loop(self, stop: asyncio.Event) -> None:
        last = 0.0
        full = True
        while not stop.is_set():
            self._changed.clear()
            try:
                await asyncio.to_thread(self.sync, *self.snapshot(), full=full)
                full = False
            except nft.NftError as err:
                log.error("syncing nftables table %s failed: %s", self.table, err)
                full = True
            last = time.monotonic()
            # Wait for a change or the full resync, then let changes gather up to the
            # minimum period.
            until_full = max(0.0, self._last_full + self.sync_period - time.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(until_full if not full else RETRY_AFTER):
                    await _first(self._changed, stop)
            if time.monotonic() - self._last_full >= self.sync_period:
                full = True
            pause = last + self.min_sync_period - time.monotonic()
            if pause > 0 and not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await stop.wait()


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()

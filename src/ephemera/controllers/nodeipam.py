"""Node IPAM: upstream's range allocator (`pkg/controller/nodeipam/ipam/range_allocator.go`)
for one IPv4 cluster CIDR.

Every Node without a `spec.podCIDR` gets the lowest block of `--node-cidr-mask-size` (24 by
default) inside `--cluster-cidr` that no Node holds, written as `spec.podCIDR` and
`spec.podCIDRs` (a merge patch, as upstream's `PatchNodeCIDRs`). Blocks of deleted Nodes are
free again (the allocator's state is the Nodes' specs as the informer has them, plus the
assignments still in flight). A cluster CIDR with no free block left gets upstream's
`CIDRNotAvailable` event on the Node.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer, resource_path

__all__ = [
    "DEFAULT_NODE_CIDR_MASK_SIZE", "FreeBlocks", "NodeIpamController", "next_free_cidr",
]

log = logging.getLogger("ephemera.controllers.nodeipam")

DEFAULT_NODE_CIDR_MASK_SIZE = 24


def _cidr_of(node: Mapping[str, Any]) -> str:
    return str((node.get("spec") or {}).get("podCIDR") or "")


class FreeBlocks:
    """The `/mask_size` blocks of a cluster CIDR that none of `used` overlaps, lowest first:
    each used CIDR (a Node's, of any size, or garbage) is turned into the range of block
    numbers it covers, and `take` walks the gaps between those ranges. One pass costs the
    sort of the used CIDRs, not (as comparing every block with every used CIDR did) the
    blocks times the Nodes: a thousand Nodes in a /14 are allocated at once."""

    def __init__(self, cluster_cidr: str, mask_size: int, used: Iterable[str]) -> None:
        cluster = ipaddress.IPv4Network(cluster_cidr)
        self._base = int(cluster.network_address)
        self._shift = 32 - mask_size
        self._mask_size = mask_size
        self._count = 1 << (mask_size - cluster.prefixlen)
        taken: list[tuple[int, int]] = []  # block numbers, inclusive
        for cidr in used:
            try:
                net = ipaddress.IPv4Network(cidr, strict=False)
            except ValueError:
                continue
            if not net.overlaps(cluster):
                continue
            first = max(int(net.network_address), self._base) - self._base
            last = min(int(net.broadcast_address), int(cluster.broadcast_address)) - self._base
            taken.append((first >> self._shift, last >> self._shift))
        taken.sort()
        self._taken = taken
        self._next = 0  # no block below this one is free
        self._index = 0  # the taken ranges before it are behind `_next`

    def take(self) -> str:
        """The lowest free block, now no longer free; "" when none is left."""
        while self._index < len(self._taken) and self._taken[self._index][0] <= self._next:
            self._next = max(self._next, self._taken[self._index][1] + 1)
            self._index += 1
        if self._next >= self._count:
            return ""
        block = self._next
        self._next += 1
        address = ipaddress.IPv4Address(self._base + (block << self._shift))
        return f"{address}/{self._mask_size}"


def next_free_cidr(cluster_cidr: str, mask_size: int, used: Iterable[str]) -> str:
    """The lowest `/mask_size` block of `cluster_cidr` overlapping none of `used`, or ""."""
    return FreeBlocks(cluster_cidr, mask_size, used).take()


class NodeIpamController:
    """Gives each Node a pod CIDR; see the module docstring."""

    def __init__(self, api: ApiClient, cluster_cidr: str,
                 mask_size: int = DEFAULT_NODE_CIDR_MASK_SIZE) -> None:
        self.api = api
        self.cluster_cidr = self.check(cluster_cidr, mask_size)
        self.mask_size = mask_size
        self.nodes = Informer(api, resource_path("nodes"), name="nodes")
        self.recorder = EventRecorder(api, "cidrAllocator")
        self._wake = asyncio.Event()
        self._assigned: dict[str, str] = {}  # node name -> the block patched, until seen
        self._told: set[str] = set()  # nodes told there is no block left, while they wait

    @staticmethod
    def check(cluster_cidr: str, mask_size: int) -> str:
        """The cluster CIDR normalized; ValueError if it or the mask size is not usable."""
        try:
            network = ipaddress.IPv4Network(cluster_cidr)
        except ValueError as err:
            raise ValueError(f"invalid IPv4 CIDR {cluster_cidr!r}: {err}") from None
        if not network.prefixlen <= mask_size <= 30:
            raise ValueError(f"the node CIDR mask size {mask_size} must be between the "
                             f"cluster CIDR's prefix length {network.prefixlen} and 30")
        return str(network)

    def _node_added(self, node: Mapping[str, Any]) -> None:
        if not _cidr_of(node):
            self._wake.set()

    def _node_updated(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Only a Node that needs a block, or whose block changed, is worth a pass: not the
        heartbeats of a thousand Nodes that have theirs."""
        if not _cidr_of(new) or _cidr_of(old) != _cidr_of(new):
            self._wake.set()

    def _node_deleted(self, node: Mapping[str, Any]) -> None:
        self._wake.set()  # its block is free again

    async def allocate_once(self) -> None:
        nodes = self.nodes.list()
        names = {str(n["metadata"]["name"]) for n in nodes}
        for name in list(self._assigned):  # settled (seen in the informer) or deleted
            node = self.nodes.get(name)
            if name not in names or (node is not None and _cidr_of(node)):
                del self._assigned[name]
        used = [c for c in (_cidr_of(n) for n in nodes) if c] + list(self._assigned.values())
        free = FreeBlocks(self.cluster_cidr, self.mask_size, used)
        self._told &= names
        waiting: list[str] = []
        for node in sorted(nodes, key=lambda n: str(n["metadata"].get("creationTimestamp"))):
            name = str(node["metadata"]["name"])
            if _cidr_of(node) or name in self._assigned:
                self._told.discard(name)
                continue
            cidr = free.take()
            if not cidr:
                waiting.append(name)
                continue
            try:
                await self.api.patch(resource_path("nodes", name=name),
                                     {"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}},
                                     patch_type="merge")
            except (StatusError, ApiUnavailable) as err:
                log.warning("node %s: assigning pod CIDR %s: %s", name, cidr,
                            getattr(err, "message", err))
                continue
            log.info("node %s: pod CIDR %s", name, cidr)
            self._assigned[name] = cidr
        await self._tell_exhausted(waiting)

    async def _tell_exhausted(self, waiting: list[str]) -> None:
        """Nodes left without a block: upstream's `CIDRNotAvailable` event on each, and one
        log line for them all, once per Node (not at every pass while it waits: with a
        thousand Nodes and a small range that was thousands of lines a minute)."""
        new = [name for name in waiting if name not in self._told]
        if not new:
            return
        self._told.update(new)
        shown = ", ".join(new[:5]) + (f" and {len(new) - 5} more" if len(new) > 5 else "")
        log.warning("no pod CIDR left in %s (/%d blocks) for %d node(s): %s; %d wait in all",
                    self.cluster_cidr, self.mask_size, len(new), shown, len(waiting))
        for name in new:
            await self.recorder.record(
                {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "uid": name}},
                "Normal", "CIDRNotAvailable", f"Node {name} status is now: CIDRNotAvailable")

    async def run(self) -> None:
        self.nodes.add_handler(on_add=self._node_added, on_update=self._node_updated,
                               on_delete=self._node_deleted)
        informer = asyncio.create_task(self.nodes.run(), name="nodeipam-nodes-informer")
        try:
            await self.nodes.wait_synced()
            while True:
                self._wake.clear()
                try:
                    await self.allocate_once()
                except Exception:
                    log.exception("node IPAM: allocation failed")
                try:
                    async with asyncio.timeout(30):
                        await self._wake.wait()
                except TimeoutError:
                    pass
        finally:
            await cancel_and_wait(informer)

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

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer, resource_path

__all__ = ["DEFAULT_NODE_CIDR_MASK_SIZE", "NodeIpamController", "next_free_cidr"]

log = logging.getLogger("ephemera.controllers.nodeipam")

DEFAULT_NODE_CIDR_MASK_SIZE = 24


def _cidr_of(node: Mapping[str, Any]) -> str:
    return str((node.get("spec") or {}).get("podCIDR") or "")


def next_free_cidr(cluster_cidr: str, mask_size: int, used: Iterable[str]) -> str:
    """The lowest `/mask_size` block of `cluster_cidr` overlapping none of `used`, or ""."""
    cluster = ipaddress.IPv4Network(cluster_cidr)
    taken = []
    for cidr in used:
        try:
            taken.append(ipaddress.IPv4Network(cidr, strict=False))
        except ValueError:
            continue
    for block in cluster.subnets(new_prefix=mask_size):
        if not any(block.overlaps(other) for other in taken):
            return str(block)
    return ""


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

    def _node_changed(self, *_: Any) -> None:
        self._wake.set()

    async def allocate_once(self) -> None:
        nodes = self.nodes.list()
        names = {str(n["metadata"]["name"]) for n in nodes}
        for name in list(self._assigned):  # settled (seen in the informer) or deleted
            node = self.nodes.get(name)
            if name not in names or (node is not None and _cidr_of(node)):
                del self._assigned[name]
        used = [c for c in (_cidr_of(n) for n in nodes) if c] + list(self._assigned.values())
        for node in sorted(nodes, key=lambda n: str(n["metadata"].get("creationTimestamp"))):
            name = str(node["metadata"]["name"])
            if _cidr_of(node) or name in self._assigned:
                continue
            cidr = next_free_cidr(self.cluster_cidr, self.mask_size, used)
            if not cidr:
                log.warning("node %s: no pod CIDR left in %s", name, self.cluster_cidr)
                await self.recorder.record(
                    {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name,
                                                                      "uid": name}},
                    "Normal", "CIDRNotAvailable", f"Node {name} status is now: "
                                                  "CIDRNotAvailable")
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
            used.append(cidr)

    async def run(self) -> None:
        self.nodes.add_handler(on_add=self._node_changed, on_update=self._node_changed,
                               on_delete=self._node_changed)
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
            informer.cancel()
            await asyncio.gather(informer, return_exceptions=True)

"""Node-level reclaim before evicting pods under disk pressure: which garbage collections
a pressured signal runs (upstream `buildSignalToNodeReclaimFuncs`, `reclaimNodeLevelResources`)
and the strings the eviction manager logs and records. Pure; the collections themselves are
`ephemera.kubelet.gc`.

ephemera keeps the writable layers and logs under the kubelet root (nodefs) and the images
in the image store (`<root>/images`). When the store is on the kubelet root's filesystem
(one device) every disk signal runs both collections: dead containers, then unused images.
When the store is on a filesystem of its own, the layout is upstream's split one (container
filesystem = nodefs, images on imagefs): `nodefs.*` pressure deletes dead containers,
`imagefs.*` pressure deletes unused images.
"""

from __future__ import annotations

from typing import Final

from ephemera.kubelet.eviction.thresholds import (
    SIGNAL_CONTAINER_FS_AVAILABLE,
    SIGNAL_CONTAINER_FS_INODES_FREE,
    SIGNAL_IMAGE_FS_AVAILABLE,
    SIGNAL_IMAGE_FS_INODES_FREE,
    SIGNAL_NODE_FS_AVAILABLE,
    SIGNAL_NODE_FS_INODES_FREE,
)

__all__ = [
    "ABLE_TO_RECLAIM_LOG",
    "ATTEMPTING_TO_RECLAIM_LOG",
    "DEAD_CONTAINERS",
    "EVICTION_THRESHOLD_MET",
    "MUST_EVICT_LOG",
    "RECLAIM_EVENT_MESSAGE",
    "UNUSED_IMAGES",
    "node_reclaim_funcs",
]

DEAD_CONTAINERS: Final = "dead containers"  # containerGC.DeleteAllUnusedContainers
UNUSED_IMAGES: Final = "unused images"  # imageGC.DeleteUnusedImages

# Node event (Warning) recorded before reclaiming, and the log lines around the reclaim.
EVICTION_THRESHOLD_MET: Final = "EvictionThresholdMet"
RECLAIM_EVENT_MESSAGE: Final = "Attempting to reclaim {resource}"
ATTEMPTING_TO_RECLAIM_LOG: Final = "Eviction manager: attempting to reclaim resourceName=%s"
ABLE_TO_RECLAIM_LOG: Final = ("Eviction manager: able to reduce resource pressure without "
                              "evicting pods. resourceName=%s")
MUST_EVICT_LOG: Final = "Eviction manager: must evict pod(s) to reclaim resourceName=%s"

_DISK_SIGNALS: Final = (SIGNAL_NODE_FS_AVAILABLE, SIGNAL_NODE_FS_INODES_FREE,
                        SIGNAL_IMAGE_FS_AVAILABLE, SIGNAL_IMAGE_FS_INODES_FREE,
                        SIGNAL_CONTAINER_FS_AVAILABLE, SIGNAL_CONTAINER_FS_INODES_FREE)


def node_reclaim_funcs(signal: str, dedicated_image_fs: bool) -> tuple[str, ...]:
    """The collections to run, in order, for pressure on `signal` (empty: none)."""
    if signal not in _DISK_SIGNALS:
        return ()
    if not dedicated_image_fs:
        return (DEAD_CONTAINERS, UNUSED_IMAGES)
    if signal in (SIGNAL_IMAGE_FS_AVAILABLE, SIGNAL_IMAGE_FS_INODES_FREE):
        return (UNUSED_IMAGES,)
    return (DEAD_CONTAINERS,)

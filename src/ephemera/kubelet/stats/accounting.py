"""Usage accounting backends for local ephemeral storage, behind one interface
(`StorageAccounting`), chosen by `--storage-accounting=auto|walk|loopimage`:

- **walk** (`WalkAccounting`): the bounded du-style directory walk (`du.py`) of every
  writable layer, log directory and volume, in a worker thread. Works anywhere; costs about
  3 µs per file warm, 10 µs cold, so a pod's total lags by one or more passes on big trees.
- **loopimage** (`LoopImageAccounting`): each pod gets a sparse ext4 image loop-mounted on
  its directory (`loopimage.py`), holding its writable layers, logs and disk volumes; the pod
  total (`ephemeral-storage`, what pod-level limits and node-pressure ranking use) is one
  `statvfs`, O(1) whatever the pod holds. The per-container (`rootfs`, `logs`) and
  per-volume numbers of the Summary API still come from the bounded walk of those
  directories (one image per pod keeps set-up at one mkfs and one mount; the split only
  changes what container-limit and emptyDir `sizeLimit` checks see). Set-up costs about
  40 ms per pod (mkfs + mount) and root, loop devices and `mkfs.ext4`. With
  `enforce_limits` (`--storage-limit-enforcement`) a pod with an ephemeral-storage limit
  (`PodLimits`, pod-level aware) gets an image that leaves `limit + ENFORCE_SLACK` (2 MiB
  and 16 KiB) bytes: writing past that fails with ENOSPC, and since the usage still passes
  the limit the eviction manager evicts the pod exactly as without enforcement. A pod that
  fills its image cannot write its logs either (they are part of its usage). Without it (the
  default) and for pods without a limit the image is as large as the node's filesystem, so
  it never fills before the node does (sparse: the size costs nothing).
- **auto** (the default): loopimage when `loopimage.probe` can make, mount and release a
  small image (root, `/dev/loop-control`, `mkfs.ext4`), else walk.

The pod's usage on an image also counts what upstream's sum leaves out: the previous
container instance kept for `--previous`, the bundles' small files and the top-level
directories (a few blocks per container).

The kubelet calls `prepare_pod(pod)` before anything is written for the pod (the pod
workers' first sync), `release_pod(uid)` after its containers and volumes are gone, and
`release_orphans(known_uids)` in housekeeping. Both backends release images left by an
earlier kubelet, so switching the flag is safe.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Protocol

from ephemera.kubelet.stats import loopimage
from ephemera.kubelet.stats.du import DiskUsage, DuBackend
from ephemera.pods.resources import RESOURCE_EPHEMERAL_STORAGE, pod_limits

__all__ = [
    "ACCOUNTING_MODES",
    "AUTO",
    "ENFORCE_SLACK",
    "LOOPIMAGE",
    "WALK",
    "LoopImageAccounting",
    "StorageAccounting",
    "WalkAccounting",
    "make_accounting",
    "pod_storage_limit",
]

log = logging.getLogger(__name__)

AUTO: Final = "auto"
WALK: Final = "walk"
LOOPIMAGE: Final = "loopimage"
ACCOUNTING_MODES: Final = (AUTO, WALK, LOOPIMAGE)
# What an enforced image leaves beyond the limit, so that the usage passes the limit before
# ENOSPC and the eviction manager evicts as without enforcement: near full, ext4 refuses a
# whole page-cache folio (up to 2 MiB, the PMD size) at once, plus a few blocks of metadata.
ENFORCE_SLACK: Final = (2 << 20) + 4 * loopimage.BLOCK_SIZE


class StorageAccounting(Protocol):
    """A usage accounting backend (see the module docstring)."""

    name: str

    @property
    def walk(self) -> DuBackend:
        """The directory measurements (`UsageBackend`) for the per-container and
        per-volume numbers."""

    def pod_usage(self, uid: str) -> DiskUsage | None:
        """The pod's whole usage when measured in O(1), else None (sum the directories)."""

    async def prepare_pod(self, pod: Mapping[str, Any], log_dir: Path) -> None:
        """Set up the pod's storage before anything is written for it."""

    async def release_pod(self, uid: str) -> None:
        """Remove the pod's storage (its containers and volumes are gone)."""

    async def release_orphans(self, known: set[str]) -> None:
        """Remove the storage of pods not in `known`."""

    def close(self) -> None: ...


def pod_storage_limit(pod: Mapping[str, Any], gates: Mapping[str, bool] | None) -> int | None:
    """The pod's ephemeral-storage limit as the eviction manager checks it (`PodLimits`), in
    bytes; None when it has none."""
    limit = pod_limits(pod, gates=gates).get(RESOURCE_EPHEMERAL_STORAGE)
    if limit is None or limit.is_zero():
        return None
    return int(limit.value())


class _ImageCleanup:
    """Releasing pod images (any backend may find images an earlier kubelet made)."""

    def __init__(self, root_dir: Path, mkfs: str = "mkfs.ext4") -> None:
        self.images = loopimage.PodImages(root_dir, mkfs)
        self._walk = DuBackend()

    @property
    def walk(self) -> DuBackend:
        return self._walk

    async def release_pod(self, uid: str) -> None:
        if uid in self.images.image_uids():
            # The walks' open directories on the image would make the unmount fail.
            point = self.images.mount_point(uid)
            await asyncio.to_thread(self._walk.pause_under, point)
            try:
                await asyncio.to_thread(self.images.release, uid)
            finally:
                self._walk.resume_under(point)

    async def release_orphans(self, known: set[str]) -> None:
        if (self.images.image_uids() | self.images.partial_uids()) - set(known):
            await asyncio.to_thread(self.images.release_orphans, set(known))

    def close(self) -> None:
        self._walk.close()


class WalkAccounting(_ImageCleanup):
    """The directory-walk backend: no per-pod set-up."""

    name = WALK

    def __init__(self, root_dir: Path, mkfs: str = "mkfs.ext4") -> None:
        super().__init__(root_dir, mkfs)
        self.images.adopt()  # only to release them with their pods

    def pod_usage(self, uid: str) -> DiskUsage | None:
        return None

    async def prepare_pod(self, pod: Mapping[str, Any], log_dir: Path) -> None:
        return None


class LoopImageAccounting(_ImageCleanup):
    """The O(1) backend: a loop-mounted ext4 image per pod."""

    name = LOOPIMAGE

    def __init__(self, root_dir: Path, *, enforce_limits: bool = False,
                 gates: Mapping[str, bool] | None = None, mkfs: str = "mkfs.ext4") -> None:
        super().__init__(root_dir, mkfs)
        self.root_dir = Path(root_dir)
        self.enforce_limits = enforce_limits
        self.gates = gates
        adopted = self.images.adopt()
        if adopted:
            log.info("adopted the storage images of %d pods", len(adopted))

    def node_capacity(self) -> int:
        """The size of the kubelet root's filesystem (an unenforced image's size)."""
        self.root_dir.mkdir(parents=True, exist_ok=True)
        st = os.statvfs(self.root_dir)
        return st.f_blocks * st.f_frsize

    def pod_usage(self, uid: str) -> DiskUsage | None:
        return self.images.usage(uid)

    def image_capacity(self, pod: Mapping[str, Any]) -> int | None:
        """The bytes the pod's image leaves available: its limit plus the slack with
        enforcement, else None (as large as the node's filesystem)."""
        if not self.enforce_limits:
            return None
        limit = pod_storage_limit(pod, self.gates)
        return None if limit is None else limit + ENFORCE_SLACK

    async def prepare_pod(self, pod: Mapping[str, Any], log_dir: Path) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        # An adopted image goes through `ensure` too: it repairs a missing log symlink.
        capacity = self.image_capacity(pod)
        size = self.node_capacity()
        image = await asyncio.to_thread(self.images.ensure, uid, log_dir, size, capacity)
        if image is None:
            log.info("pod %s already has files outside a storage image: accounted by the "
                     "directory walk", uid)


def make_accounting(mode: str, root_dir: Path, *, enforce_limits: bool = False,
                    gates: Mapping[str, bool] | None = None,
                    mkfs: str = "mkfs.ext4") -> WalkAccounting | LoopImageAccounting:
    """The backend `mode` names; `auto` probes for loop images (see the module docstring)."""
    if mode not in ACCOUNTING_MODES:
        raise ValueError(f"unknown storage accounting {mode!r}: one of "
                         f"{', '.join(ACCOUNTING_MODES)}")
    if mode == AUTO:
        Path(root_dir).mkdir(parents=True, exist_ok=True)
        why_not = loopimage.probe(Path(root_dir), mkfs)
        if why_not:
            log.info("storage accounting: walk (loop images do not work here: %s)", why_not)
            mode = WALK
        else:
            mode = LOOPIMAGE
    if mode == LOOPIMAGE:
        return LoopImageAccounting(root_dir, enforce_limits=enforce_limits, gates=gates,
                                   mkfs=mkfs)
    return WalkAccounting(root_dir, mkfs)

"""The `emptyDir` volume plugin (`kubernetes.io/empty-dir`), reference section 5.5.

- Default medium: a directory, mode 0777 whatever the umask. `sizeLimit` is not enforced
  here (project quotas do not work on the target kernels); the eviction manager enforces it.
- `medium: Memory`: a tmpfs whose `size=` is the effective limit upstream computes with
  SizeMemoryBackedVolumes: node allocatable memory, then the pod's memory limit if
  0 < it <= that, then `sizeLimit` if 0 < it <= that (`memory_backed_size`). `noswap` when the
  kernel has it.
- `medium: HugePages*`: not supported by ephemera (error). Any other medium:
  `unknown storage medium "X"`.

Setup is idempotent: an existing directory keeps its files; an existing tmpfs is not
remounted. The secret, downwardAPI and projected plugins use `memory_backed_size` for their
own tmpfs, as upstream wraps them in a memory emptyDir.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ephemera.api.quantity import QuantityError, quantity_from_json
from ephemera.kubelet.volumes.atomicwriter import FileProjection, write_volume
from ephemera.kubelet.volumes.base import (
    VolumeHost,
    VolumePlugin,
    VolumeSetupError,
    ensure_dir,
    setup_tmpfs_dir,
)
from ephemera.pods.resources import (
    RESOURCE_MEMORY,
    all_containers_have_limit_for_resource,
    pod_limits,
)

__all__ = [
    "EmptyDirPlugin",
    "memory_backed_size",
    "pod_memory_limit",
    "write_memory_backed_volume",
]


def pod_memory_limit(pod: Mapping[str, Any]) -> int | None:
    """The pod's memory limit as its cgroup would get it (`ResourceConfigForPod`): set only
    when every container declares one, or when the pod-level limit is set."""
    spec = pod.get("spec") or {}
    pod_level = ((spec.get("resources") or {}).get("limits") or {}).get(RESOURCE_MEMORY)
    if pod_level is None and not all_containers_have_limit_for_resource(pod, RESOURCE_MEMORY):
        return None
    limit = pod_limits(pod).get(RESOURCE_MEMORY)
    return None if limit is None else limit.value()


def memory_backed_size(
    pod: Mapping[str, Any], node_allocatable_memory: int, size_limit: Any = None
) -> int:
    """The `size=` of a memory-backed volume, in bytes (0: no `size=` option)."""
    size = max(int(node_allocatable_memory), 0)
    limit = pod_memory_limit(pod)
    if limit is not None and 0 < limit <= size:
        size = limit
    if size_limit is not None:
        try:
            volume_limit = quantity_from_json(size_limit).value()
        except (QuantityError, TypeError, ValueError):
            volume_limit = 0
        if 0 < volume_limit <= size:
            size = volume_limit
    return size


async def write_memory_backed_volume(
    pod: Mapping[str, Any],
    host: VolumeHost,
    host_dir: Path,
    payload: Mapping[str, FileProjection],
) -> None:
    """Write `payload` atomically into `host_dir`, a tmpfs sized by `memory_backed_size`
    (secret, downwardAPI and projected volumes), on the loop (`VolumePlugin.setup`)."""
    size = memory_backed_size(pod, host.node_allocatable_memory)
    write_volume(host_dir, payload, size)


class EmptyDirPlugin(VolumePlugin):
    name = "kubernetes.io/empty-dir"
    source_key = "emptyDir"

    async def setup(
        self,
        pod: Mapping[str, Any],
        volume: Mapping[str, Any],
        host_dir: Path,
        host: VolumeHost,
    ) -> None:
        source = self.source_of(volume)
        medium = str(source.get("medium") or "")
        if medium == "":
            ensure_dir(host_dir, 0o777)
        elif medium == "Memory":
            size = memory_backed_size(pod, host.node_allocatable_memory, source.get("sizeLimit"))
            setup_tmpfs_dir(host_dir, size)
        elif medium == "HugePages" or medium.startswith("HugePages-"):
            raise VolumeSetupError(f"medium {medium}: hugePages storage is not supported")
        else:
            raise VolumeSetupError(f'unknown storage medium "{medium}"')

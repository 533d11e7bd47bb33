"""The volume plugin interface, the `VolumeHost` the plugins reach the node and the API
through, and helpers shared by the plugins.

A plugin serves one volume source (`emptyDir`, `configMap`, ...):

- `name`: upstream's plugin name (`kubernetes.io/empty-dir`); its escaped form
  (`kubernetes.io~empty-dir`) is the directory under `<root>/pods/<uid>/volumes/`.
- `can_support(volume)`: the `spec.volumes[]` entry uses this plugin's source.
- `async setup(pod, volume, host_dir, host)`: make `host_dir` hold the volume. Idempotent:
  it is called again on an already set-up volume (periodic resync, a kubelet restart that
  finds the volume on disk) and must then keep what is there (an emptyDir's files, a mounted
  tmpfs) and only refresh what changed. Raises `VolumeSetupError` whose message is the cause
  as upstream words it (`configmap "x" not found`); the manager adds the volume name.
- `async teardown(host_dir)`: unmount whatever is mounted at or below `host_dir` and remove
  it. Idempotent.
- `needs_resync`: setup must be re-run periodically (configMap, secret, downwardAPI,
  projected), so API changes reach the files.

Blocking work (system calls, file writes) runs in threads (`asyncio.to_thread`).
"""

from __future__ import annotations

import abc
import asyncio
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ephemera.kubelet.volumes import mounts

__all__ = [
    "ImageLike",
    "ImageStoreLike",
    "VolumeHost",
    "VolumePlugin",
    "VolumeSetupError",
    "aggregate_errors",
    "ensure_dir",
    "escape_plugin_name",
    "pod_namespace",
    "pod_uid",
    "setup_tmpfs_dir",
    "teardown_dir",
]


class VolumeSetupError(Exception):
    """A volume could not be set up; the message is the cause (no volume name)."""


@runtime_checkable
class ImageLike(Protocol):
    """What the image plugin needs of `ephemera.kubelet.images.Image`."""

    id: str
    layers: tuple[Path, ...]  # unpacked layer dirs, top layer first


class ImageStoreLike(Protocol):
    def resolve(self, ref: str) -> Any: ...  # Image | None; blocking


class VolumeHost(Protocol):
    """What the volume manager and its plugins need from the kubelet.

    `get_configmap`/`get_secret` return the object as a dict, or None when it does not exist
    (any other failure raises; its message becomes the volume's error); the kubelet serves
    them from its watch-based cache (`ephemera.kubelet.objectcache`). The attributes are
    read-only here, so plain attributes and properties both satisfy the protocol.
    Optional attributes read with defaults: `node_allocatable_cpu_millis: int` (default: CPU
    count x 1000) and `node_allocatable_ephemeral_storage: int | None`, used by downwardAPI
    `resourceFieldRef` limits of containers that set none.
    """

    @property
    def node_name(self) -> str: ...

    @property
    def node_allocatable_memory(self) -> int: ...

    @property
    def image_store(self) -> ImageStoreLike | None: ...

    async def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None: ...


def escape_plugin_name(name: str) -> str:
    """`kubernetes.io/empty-dir` -> `kubernetes.io~empty-dir`, as upstream escapes it."""
    return name.replace("/", "~")


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def pod_namespace(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("namespace") or "default")


class VolumePlugin(abc.ABC):
    """One volume source. Subclasses set `name` and `source_key`."""

    name: str
    source_key: str
    needs_resync: bool = False

    @property
    def dir_name(self) -> str:
        return escape_plugin_name(self.name)

    def can_support(self, volume: Mapping[str, Any]) -> bool:
        return volume.get(self.source_key) is not None

    def source_of(self, volume: Mapping[str, Any]) -> Mapping[str, Any]:
        """The `spec.volumes[]` entry's source for this plugin (`{}` when it is null)."""
        return volume.get(self.source_key) or {}

    @abc.abstractmethod
    async def setup(
        self,
        pod: Mapping[str, Any],
        volume: Mapping[str, Any],
        host_dir: Path,
        host: VolumeHost,
    ) -> None:
        """Set the volume up at `host_dir`. Work that waits on no disk (a directory made, a
        tmpfs mounted, files written to a tmpfs, nothing flushed) runs on the event loop:
        on a thread each of its few system calls waited for the GIL again while the loop and
        the allocation checkpoint's thread worked, and a dynamic volume's setup is on the
        way from its change to the container (bench.dynamic_swap --trace, live swap, p50:
        3.9-4.4 ms a volume on a thread, 0.9-1.4 on the loop). What may wait on a disk or an
        image (a ConfigMap's files on disk, which writeback may throttle; a teardown's tree
        removal; an image volume's layers) goes to a thread."""

    async def teardown(self, host_dir: Path) -> None:
        await asyncio.to_thread(teardown_dir, host_dir)


# -- shared helpers (`VolumePlugin.setup` says which run on the loop) ------------------------


def ensure_dir(path: Path, mode: int = 0o777) -> None:
    """Create `path` (and parents) and give it `mode` whatever the umask."""
    path.mkdir(parents=True, exist_ok=True)
    if (os.stat(path).st_mode & 0o7777) != mode:
        os.chmod(path, mode)


def setup_tmpfs_dir(path: Path, size_bytes: int | None) -> None:
    """`path` exists and is a tmpfs mount (mounted now unless it already is one)."""
    path.mkdir(parents=True, exist_ok=True)
    if not mounts.is_mountpoint(path):
        mounts.mount_tmpfs(path, size_bytes)
    if (os.stat(path).st_mode & 0o7777) != 0o777:
        os.chmod(path, 0o777)


def teardown_dir(host_dir: Path) -> None:
    """Unmount everything at or below `host_dir`, then remove it."""
    if not os.path.lexists(host_dir):
        return
    mounts.unmount_all_under(host_dir)
    if os.path.isdir(host_dir) and not os.path.islink(host_dir):
        shutil.rmtree(host_dir)
    else:
        os.remove(host_dir)


# -- messages ----------------------------------------------------------------------------


def aggregate_errors(messages: Sequence[str]) -> str:
    """apimachinery's `utilerrors.NewAggregate(...).Error()`: one message as is, several as
    `[a, b]` (duplicates dropped, first order kept)."""
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"



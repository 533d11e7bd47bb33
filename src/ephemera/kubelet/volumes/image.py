"""The `image` volume plugin (KEP-4639; reference section 5.6): a read-only view of an image
from the node's image store at `<pod>/volumes/kubernetes.io~image/<name>`.

The reference is resolved with `host.image_store.resolve(ref)` (in a thread). Its unpacked
layers are mounted as an overlay with only lower dirs (top layer first), which the kernel
makes read-only; a single-layer image, which overlayfs refuses without an upper dir, is a
read-only bind of its layer directory. `subPath` is the kubelet's business when it builds the
container's mounts. The mount is made once per pod (upstream re-resolves an image volume only
when the pod is recreated), so setup on an existing mount does nothing.

`pullPolicy` (defaulted like a container's: `Always` for `:latest` or no tag, else
`IfNotPresent`): ephemera pulls from no registry, so a missing image fails with
`Container image "x" is not present with pull policy of Never` under `Never` (upstream's
ErrImageNeverPull message) and with `Failed to pull image "x": ...` otherwise.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ephemera.kubelet.volumes import mounts
from ephemera.kubelet.volumes.base import VolumeHost, VolumePlugin, VolumeSetupError
from ephemera.pods.defaults import default_pull_policy

__all__ = ["ImagePlugin", "mount_image_layers"]


def mount_image_layers(layers: tuple[Path, ...] | list[Path], host_dir: Path) -> None:
    """Mount `layers` (top first) read-only at `host_dir` unless something is mounted there
    already. Blocking."""
    host_dir.mkdir(parents=True, exist_ok=True)
    if mounts.is_mountpoint(host_dir):
        return
    layer_dirs = [Path(p) for p in layers]
    for layer in layer_dirs:
        if not layer.is_dir():
            raise VolumeSetupError(f"image layer {layer} is missing from the image store")
    if len(layer_dirs) == 1:
        mounts.bind_mount(layer_dirs[0], host_dir, read_only=True)
    else:
        mounts.mount_overlay_readonly(layer_dirs, host_dir)
    os.stat(host_dir)  # fail here, not in the container, if the mount is unusable


class ImagePlugin(VolumePlugin):
    name = "kubernetes.io/image"
    source_key = "image"

    async def setup(
        self,
        pod: Mapping[str, Any],
        volume: Mapping[str, Any],
        host_dir: Path,
        host: VolumeHost,
    ) -> None:
        source = self.source_of(volume)
        ref = str(source.get("reference") or "")
        if not ref:
            raise VolumeSetupError("image volume has no reference")
        policy = str(source.get("pullPolicy") or default_pull_policy(ref))
        if await asyncio.to_thread(mounts.is_mountpoint, host_dir):
            return
        store = host.image_store
        if store is None:
            raise VolumeSetupError("this node has no image store")
        image = await asyncio.to_thread(store.resolve, ref)
        if image is None:
            if policy == "Never":
                raise VolumeSetupError(
                    f'Container image "{ref}" is not present with pull policy of Never'
                )
            raise VolumeSetupError(
                f'Failed to pull image "{ref}": not in the node\'s image store '
                "(ephemera pulls from no registry; import it with `ephemera images import`)"
            )
        layers = tuple(getattr(image, "layers", ()) or ())
        if not layers:
            raise VolumeSetupError(f'image "{ref}" has no layers')
        try:
            await asyncio.to_thread(mount_image_layers, layers, host_dir)
        except OSError as exc:
            raise VolumeSetupError(f'mounting image "{ref}": {exc}') from exc

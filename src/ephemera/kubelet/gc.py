"""Node-level garbage collection the eviction manager runs before evicting pods under disk
pressure (upstream `containerGC.DeleteAllUnusedContainers` and `imageGC.DeleteUnusedImages`;
which one a signal runs is `ephemera.kubelet.eviction.reclaim`).

**Dead containers** (`delete_all_unused_containers`): exited container instances the runtime
still holds, each with its writable layer (`<root>/pods/<uid>/containers/<name>/<attempt>/`)
and its log file. Every exited instance of a pod whose runtime is done (`phase` Succeeded or
Failed, evicted) is removed; for other pods the newest exited instance of each container is
kept (upstream's `MaxPerPodContainer` = 1: it backs `lastState` and `kubectl logs
--previous`) and older ones go. Running and created (not yet started) instances stay.

**Unused images** (`delete_unused_images`): images of the store that no container the
runtime lists (any state) was created from, that no non-terminal pod bound to the node
names (containers, init and ephemeral containers, image volumes: ephemera pulls from no
registry, so an image a pending pod needs would be lost for good; upstream simply pulls it
again), that the node's allocated pods do not name and no image volume still mounted uses
(the caller's `needed_refs`: the agent's `_needed_images`), and that are not pinned (the
base image, as upstream pins the sandbox image).

Each removal is logged; both return what they removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ephemera.kubelet.runtime.base import (
    ContainerState,
    ContainerStatus,
    RuntimeError_,
    RuntimeService,
)

__all__ = [
    "ImageGCStore",
    "RemovedContainer",
    "delete_all_unused_containers",
    "delete_unused_images",
    "pod_image_refs",
]

log = logging.getLogger(__name__)


class ImageGCStore(Protocol):
    """What image GC needs of `ephemera.kubelet.images.ImageStore`."""

    def list(self) -> Any: ...

    def resolve(self, ref: str) -> Any: ...

    def remove(self, ref_or_id: str) -> Sequence[str]: ...


@dataclass(frozen=True)
class RemovedContainer:
    pod_uid: str
    name: str
    attempt: int
    id: str


async def delete_all_unused_containers(
    runtime: RuntimeService,
    runtime_done: Callable[[str], bool],
    log_path: Callable[[ContainerStatus], Path | None],
    max_per_container: int = 1,
) -> list[RemovedContainer]:
    """Remove dead container instances (see the module docstring). `runtime_done(uid)`:
    whether every instance of pod `uid` may go; `log_path(c)`: the log file to delete with
    instance `c`."""
    sandboxes = {s.id: s.pod_uid for s in await runtime.list_pod_sandboxes()}
    units: dict[tuple[str, str], list[ContainerStatus]] = {}
    for container in await runtime.list_containers():
        uid = sandboxes.get(container.sandbox_id)
        if uid is None or container.state != ContainerState.EXITED:
            continue
        units.setdefault((uid, container.name), []).append(container)
    removed: list[RemovedContainer] = []
    for (uid, name), dead in units.items():
        dead.sort(key=lambda c: (c.attempt, c.created_at))
        doomed = dead if runtime_done(uid) else dead[:max(len(dead) - max_per_container, 0)]
        for container in doomed:
            try:
                await runtime.remove_container(container.id)
            except RuntimeError_ as err:
                log.warning("container GC: removing container %s (pod %s, attempt %d): %s",
                            name, uid, container.attempt, err)
                continue
            path = log_path(container)
            if path is not None:
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(path.unlink, True)
            log.info("container GC: removed dead container %s of pod %s (attempt %d, %s)",
                     name, uid, container.attempt, container.id)
            removed.append(RemovedContainer(uid, name, container.attempt, container.id))
    return removed


def pod_image_refs(pod: Mapping[str, Any]) -> list[str]:
    """The image references a pod names: its containers' and its image volumes'."""
    spec = pod.get("spec") or {}
    refs: list[str] = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, Mapping) and container.get("image"):
                refs.append(str(container["image"]))
    for volume in spec.get("volumes") or []:
        image = volume.get("image") if isinstance(volume, Mapping) else None
        if isinstance(image, Mapping) and image.get("reference"):
            refs.append(str(image["reference"]))
    return refs


def _resolve_ids(store: ImageGCStore, refs: Iterable[str]) -> set[str]:
    ids: set[str] = set()
    for ref in refs:
        try:
            image = store.resolve(ref)
        except Exception:  # an invalid reference names no stored image
            continue
        if image is not None:
            ids.add(str(image.id))
    return ids


def delete_unused_images(store: ImageGCStore, used_ids: Iterable[str],
                         needed_refs: Iterable[str], pinned_refs: Iterable[str]) -> list[str]:
    """Remove every image whose id is not in `used_ids` (the runtime's containers) and that
    `needed_refs` (pods' references) and `pinned_refs` do not resolve to; the removed ids.
    Blocks (the store's lock): run it in a thread."""
    keep = set(used_ids) | _resolve_ids(store, needed_refs) | _resolve_ids(store, pinned_refs)
    removed: list[str] = []
    for image in store.list():
        if image.id in keep:
            continue
        try:
            store.remove(image.id)
        except Exception as err:
            log.warning("image GC: removing image %s: %s", image.id, err)
            continue
        names = ", ".join(getattr(image, "repo_tags", ())) or "<none>"
        log.info("image GC: removed unused image %s (%s, %d bytes)", image.id, names,
                 int(getattr(image, "size", 0)))
        removed.append(str(image.id))
    return removed

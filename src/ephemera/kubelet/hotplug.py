"""Live actuation of volume mount changes (KEP-6395's "Live Hot-Plug", ephemera's preview
behind the feature gate `DynamicVolumeHotPlug`): a running container whose
`dynamicVolumePolicy.restartPolicy` is `NotRequired` gets its added mounts attached and its
removed ones detached while it runs (`RuntimeService.mount_live` / `unmount_live`), keeping
its process, container ID and restart count.

One pass (`LiveMounts.actuate`, called by the pod worker for such a container once every
volume it mounts is set up on the host):

1. The wanted runtime mounts are built as for a start (`containerconfig.build_mounts`: the
   host directory of the volume, subPath, read-only for the read-only volume types) and
   compared with what the container has (`ContainerStatus.mounts`: its config's, changed by
   earlier live changes). A mount is the same only with the same path, host directory,
   volume and read-only flag, so changing a mount in place (other volume, `readOnly`,
   `subPath`) is a removal and an addition.
2. Removals first (a changed mount frees its path before the new one arrives; an addition
   waits while the old mount at its path could not be removed), then additions, in one
   runtime call (`RuntimeService.change_live`). The host teardown of a removed volume waits
   until the worker's next listing shows no container mounting it (`IsVolumeInUseByPod`),
   i.e. until the live unmount is done.
3. Failures. A failure leaves the container running and nothing mounted: a `FailedMount`
   (or `FailedUnMount`) event on the pod names the volume, container, path and cause, and
   that one change is retried with upstream's volume back-off (0.5 s doubling to 2m2s),
   while the others go on.

`mounts_stale` is the cheap test the worker runs on every sync to decide whether a pass is
needed. A kubelet restart needs nothing special: the runtime's record of the container's
mounts (settled against its mount table after a crash, `runtime/oci.py`) is what step 1
compares against, so nothing is mounted twice and no removal is lost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ephemera import trace
from ephemera.api.goformat import go_quote
from ephemera.kubelet import containerconfig, events
from ephemera.kubelet.events import KubeletEvents
from ephemera.kubelet.runtime.base import (
    ContainerStatus,
    Mount,
    RuntimeService,
    mounts_after_live_changes,
)

__all__ = ["LIVE_MOUNT_BACKOFF", "NOT_REQUIRED", "LiveMounts", "mounts_stale", "wants_live"]

NOT_REQUIRED = "NotRequired"
# Upstream's exponential back-off of volume operations (initial 500 ms, at most 2m2s).
LIVE_MOUNT_BACKOFF = (0.5, 122.0)


class BackOffLike(Protocol):
    def remaining(self, key: str, event_time: float) -> float: ...

    def next(self, key: str, event_time: float) -> None: ...

    def forget_prefix(self, prefix: str) -> None: ...


def wants_live(container: Mapping[str, Any]) -> bool:
    """The container's mounts are changed while it runs (`restartPolicy: NotRequired`)."""
    return (container.get("dynamicVolumePolicy") or {}).get("restartPolicy") == NOT_REQUIRED


def _volume_kinds(pod: Mapping[str, Any]) -> dict[str, str]:
    kinds = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if isinstance(volume, dict):
            kinds[str(volume.get("name"))] = next((str(k) for k in volume if k != "name"), "")
    return kinds


def mounts_stale(pod: Mapping[str, Any], container: Mapping[str, Any],
                 instance: ContainerStatus) -> bool:
    """Whether the instance's pod-volume mounts differ from the spec's: a mount added or
    removed, or one whose volume, subPath or read-only flag changed."""
    kinds = _volume_kinds(pod)
    wanted = set()
    for vm in container.get("volumeMounts") or []:
        name = str(vm.get("name"))
        read_only = bool(vm.get("readOnly")) or \
            kinds.get(name) in containerconfig.READ_ONLY_VOLUME_SOURCES
        wanted.add((name, _path(str(vm.get("mountPath"))), read_only,
                    str(vm.get("subPath") or vm.get("subPathExpr") or "")))
    have = {(m.volume_name, _path(m.container_path), m.read_only, m.sub_path)
            for m in instance.mounts if m.volume_name}
    if any(vm.get("subPathExpr") for vm in container.get("volumeMounts") or []):
        # An expanded subPathExpr cannot be compared without the environment.
        return {w[:3] for w in wanted} != {h[:3] for h in have}
    return wanted != have


def _path(path: str) -> str:
    return path.rstrip("/") or "/"


def _key(mount: Mount) -> tuple[str, str, bool, str]:
    return (_path(mount.container_path), mount.host_path, mount.read_only, mount.volume_name)


class LiveMounts:
    """The kubelet's live mount actuation (one per kubelet; state: the back-off)."""

    def __init__(self, runtime: RuntimeService, recorder: KubeletEvents, backoff: BackOffLike,
                 spawn: Callable[[Awaitable[Any]], None]) -> None:
        self.runtime = runtime
        self.events = recorder
        self.backoff = backoff
        self.spawn = spawn
        self._failed_at: dict[str, float] = {}  # change key -> time of its last failure

    async def actuate(self, pod: Mapping[str, Any], container: Mapping[str, Any],
                      instance: ContainerStatus, volume_dirs: Mapping[str, Path],
                      env: Mapping[str, str]) -> tuple[float, tuple[Mount, ...]]:
        """One pass; the delay until the next one is due (0: nothing left to do; else the
        shortest back-off of a failed change), and the container's mounts after it (as the
        runtime records them: `mounts_after_live_changes`)."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        name = str(container.get("name"))
        try:
            if any(vm.get("subPath") or vm.get("subPathExpr")
                   for vm in container.get("volumeMounts") or []):
                # a subPath is resolved (and created) on the host: blocking
                wanted = await asyncio.to_thread(containerconfig.build_mounts, pod, container,
                                                 volume_dirs, env)
            else:  # computed only: no thread hop on the swap's way
                wanted = containerconfig.build_mounts(pod, container, volume_dirs, env)
        except containerconfig.ContainerConfigError as err:
            self.spawn(self.events.pod(pod, events.WARNING, events.FAILED_MOUNT,
                                       f"Error: container {go_quote(name)}: {err}"))
            return LIVE_MOUNT_BACKOFF[0], instance.mounts
        wanted_keys = {_key(m) for m in wanted}
        have = [m for m in instance.mounts if m.volume_name]
        removed = [m for m in have if _key(m) not in wanted_keys]
        kept = {_key(m) for m in have} - {_key(m) for m in removed}
        added = [m for m in wanted if _key(m) not in kept]
        pending = {self._key_of(uid, name, m, remove=True) for m in removed} | \
            {self._key_of(uid, name, m, remove=False) for m in added}
        prefix = f"{uid}/{name}/"
        for key in [k for k in self._failed_at if k.startswith(prefix) and k not in pending]:
            del self._failed_at[key]  # a change no longer wanted: its back-off goes too
            self.backoff.forget_prefix(key)
        delay = 0.0
        due: list[tuple[Mount, bool]] = []
        blocked: set[str] = set()  # paths whose old mount is still there
        for mount, remove in [(m, True) for m in removed] + [(m, False) for m in added]:
            left = self._left(self._key_of(uid, name, mount, remove=remove))
            path = _path(mount.container_path)
            if left > 0 or (not remove and path in blocked):
                delay = _shortest(delay, left or LIVE_MOUNT_BACKOFF[0])
                if remove:
                    blocked.add(path)
                continue
            due.append((mount, remove))
        if not due:
            return delay, instance.mounts
        removals = [m.container_path for m, remove in due if remove]
        additions = [m for m, remove in due if not remove]
        pod_name = trace.name_of(pod)
        trace.mark("kubelet.live_change", pod_name)
        errors = await self.runtime.change_live(instance.id, removals, additions)
        trace.mark("kubelet.live_changed", pod_name)
        for (mount, remove), error in zip(due, errors, strict=True):
            key = self._key_of(uid, name, mount, remove=remove)
            if error is None:
                self.backoff.forget_prefix(key)
                self._failed_at.pop(key, None)
                continue
            failed_at = self._failed_at[key] = time.time()
            self.backoff.next(key, failed_at)
            if remove:
                reason = events.FAILED_UNMOUNT
                message = (f"UnmountVolume.LiveUnmount failed for volume "
                           f"{go_quote(mount.volume_name)} : {error}")
            else:
                reason = events.FAILED_MOUNT
                message = (f"MountVolume.LiveMount failed for volume "
                           f"{go_quote(mount.volume_name)} : {error}")
            self.spawn(self.events.pod(pod, events.WARNING, reason, message))
            delay = _shortest(delay, max(self.backoff.remaining(key, failed_at),
                                         LIVE_MOUNT_BACKOFF[0]))
        return delay, mounts_after_live_changes(instance.mounts, removals, additions, errors)

    def _left(self, key: str) -> float:
        """Seconds until the change `key` may be tried again (0: now)."""
        failed_at = self._failed_at.get(key)
        return 0.0 if failed_at is None else self.backoff.remaining(key, failed_at)

    @staticmethod
    def _key_of(uid: str, container: str, mount: Mount, *, remove: bool) -> str:
        # "|" ends the key, so forgetting it by prefix forgets it alone.
        return (f"{uid}/{container}/{'-' if remove else '+'}{_path(mount.container_path)}"
                f"/{mount.volume_name}|")


def _shortest(a: float, b: float) -> float:
    if a <= 0:
        return b
    if b <= 0:
        return a
    return min(a, b)

"""The relister, upstream's PLEG (`pkg/kubelet/pleg/generic.go`): every `period` (1 s) it
lists the runtime's sandboxes and containers, keeps the listing as a `RuntimeSnapshot`, and
reports every pod whose containers changed (started, exited, appeared, vanished) or whose
sandbox changed readiness, so its pod worker syncs at once. `healthy` turns False while
listing fails (the Node's runtime condition reads it); `relist_shared` lets several callers
asking at once share one listing."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ephemera.kubelet.runtime.base import ContainerStatus, RuntimeService, SandboxStatus

__all__ = ["Relister", "RuntimeSnapshot"]

log = logging.getLogger(__name__)


@dataclass
class RuntimeSnapshot:
    sandboxes: dict[str, SandboxStatus] = field(default_factory=dict)  # id -> status
    containers: dict[str, ContainerStatus] = field(default_factory=dict)  # id -> status

    def pod_sandboxes(self, uid: str) -> list[SandboxStatus]:
        return [s for s in self.sandboxes.values() if s.pod_uid == uid]

    def pod_containers(self, uid: str) -> list[ContainerStatus]:
        ids = {s.id for s in self.pod_sandboxes(uid)}
        return [c for c in self.containers.values() if c.sandbox_id in ids]

    def pod_uids(self) -> set[str]:
        return {s.pod_uid for s in self.sandboxes.values()}


def changed_pods(old: RuntimeSnapshot, fresh: RuntimeSnapshot) -> set[str]:
    """The UIDs of the pods whose containers or sandboxes differ between two listings."""
    changed: set[str] = set()
    owner = {s.id: s.pod_uid for s in [*old.sandboxes.values(), *fresh.sandboxes.values()]}
    for cid in set(old.containers) | set(fresh.containers):
        before, after = old.containers.get(cid), fresh.containers.get(cid)
        if before is None or after is None or before.state != after.state:
            ref = after or before
            assert ref is not None
            uid = owner.get(ref.sandbox_id)
            if uid:
                changed.add(uid)
    for sid in set(old.sandboxes) | set(fresh.sandboxes):
        before_s, after_s = old.sandboxes.get(sid), fresh.sandboxes.get(sid)
        if before_s is None or after_s is None or before_s.ready != after_s.ready:
            changed.add((after_s or before_s).pod_uid)  # type: ignore[union-attr]
    return changed


class Relister:
    """Lists the runtime periodically and reports the pods whose containers changed."""

    def __init__(self, runtime: RuntimeService, on_changed: Callable[[str], None],
                 period: float = 1.0,
                 on_duration: Callable[[float], None] | None = None) -> None:
        self.runtime = runtime
        self.on_changed = on_changed
        self.period = period
        self.on_duration = on_duration
        self.snapshot = RuntimeSnapshot()
        self.healthy = True
        self._synced = asyncio.Event()
        self._shared: asyncio.Future[None] | None = None

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def relist_shared(self) -> None:
        """A relist, shared by the callers that ask while it runs (so that the in-use checks
        of one volume reconciler pass list the runtime once)."""
        if self._shared is None or self._shared.done():
            self._shared = asyncio.ensure_future(self.relist())
            self._shared.add_done_callback(lambda f: f.cancelled() or f.exception())
        await asyncio.shield(self._shared)

    async def relist(self) -> None:
        started = time.monotonic()
        sandboxes = await self.runtime.list_pod_sandboxes()
        containers = await self.runtime.list_containers()
        fresh = RuntimeSnapshot({s.id: s for s in sandboxes}, {c.id: c for c in containers})
        old = self.snapshot
        self.snapshot = fresh
        changed = changed_pods(old, fresh)
        self._synced.set()
        if self.on_duration is not None:
            self.on_duration(time.monotonic() - started)
        for uid in changed:
            self.on_changed(uid)

    async def run(self) -> None:
        while True:
            try:
                await self.relist()
                self.healthy = True
            except Exception as err:
                self.healthy = False
                log.warning("relisting the runtime failed: %s", err)
            await asyncio.sleep(self.period)

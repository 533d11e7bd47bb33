"""The loop shared by controllers that keep one object in every Active namespace (upstream's
service accounts controller and root CA certificate publisher): informers on Namespaces and on
the kept objects, a queue of namespace names fed when a namespace appears or changes, by the
subclass's object handlers, and every `resync_period`; each name is synced once both informers
have synced, and a sync that fails on the API is retried a second later. Namespaces that are
gone or being deleted are skipped; what "ensure" means is the subclass's `ensure()`.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, Informer, resource_path

__all__ = ["PerNamespaceController"]

RETRY_DELAY = 1.0


class PerNamespaceController(ABC):
    """Runs `ensure(namespace)` for every Active namespace; `run()` until cancelled."""

    def __init__(self, api: ApiClient, objects: Informer, *, resync_period: float,
                 task_prefix: str, log: logging.Logger) -> None:
        self.api = api
        self.resync_period = resync_period
        self.namespaces = Informer(api, resource_path("namespaces"), name="namespaces")
        self._objects = objects
        self._task_prefix = task_prefix
        self._log = log
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self.namespaces.add_handler(on_add=self._namespace_changed,
                                    on_update=lambda old, new: self._namespace_changed(new))

    def _namespace_changed(self, namespace: dict[str, Any]) -> None:
        self._queue.put_nowait(str((namespace.get("metadata") or {}).get("name") or ""))

    def _object_changed(self, obj: dict[str, Any]) -> None:
        """Queue the namespace of a kept object (for the subclass's object handlers)."""
        self._queue.put_nowait(str((obj.get("metadata") or {}).get("namespace") or ""))

    @abstractmethod
    async def ensure(self, namespace: str) -> None:
        """Make the kept object of the Active `namespace` right."""

    async def sync(self, namespace: str) -> None:
        ns = self.namespaces.get(namespace)
        if ns is None or (ns.get("status") or {}).get("phase") == "Terminating" or \
                (ns.get("metadata") or {}).get("deletionTimestamp"):
            return
        await self.ensure(namespace)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_period)
            for name in list(self.namespaces.keys()):
                self._queue.put_nowait(name)

    async def run(self) -> None:
        prefix = self._task_prefix
        tasks = [asyncio.create_task(self.namespaces.run(), name=f"{prefix}-namespaces"),
                 asyncio.create_task(self._objects.run(), name=f"{prefix}-objects"),
                 asyncio.create_task(self._resync(), name=f"{prefix}-resync")]
        try:
            await self.namespaces.wait_synced()
            await self._objects.wait_synced()
            while True:
                namespace = await self._queue.get()
                try:
                    await self.sync(namespace)
                except (StatusError, ApiUnavailable) as err:
                    self._log.warning("namespace %s: %s; retrying", namespace,
                                      getattr(err, "message", err))
                    await asyncio.sleep(RETRY_DELAY)
                    self._queue.put_nowait(namespace)
        finally:
            await cancel_and_wait(*tasks)

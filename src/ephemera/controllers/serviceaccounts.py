"""The service accounts controller, as upstream's (`pkg/controller/serviceaccount`): every
Active namespace has a `default` ServiceAccount, which pods that name none use (the
ServiceAccount admission plugin fills it in and refuses a pod whose account is missing).

Informers on Namespaces and ServiceAccounts; a namespace is checked when it appears or
changes, when its `default` ServiceAccount is deleted, and every `resync_period` seconds. A
missing one is created (an `AlreadyExists` answer means someone else did: fine; a namespace
being deleted is skipped, as upstream's controller does).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, Informer, resource_path

__all__ = ["DEFAULT_SERVICE_ACCOUNT", "ServiceAccountsController"]

log = logging.getLogger("ephemera.controllers.serviceaccounts")

DEFAULT_SERVICE_ACCOUNT = "default"
DEFAULT_RESYNC_PERIOD = 60.0


class ServiceAccountsController:
    """Keeps a `default` ServiceAccount in every Active namespace; `run()` until cancelled."""

    def __init__(self, api: ApiClient, *, resync_period: float = DEFAULT_RESYNC_PERIOD) -> None:
        self.api = api
        self.resync_period = resync_period
        self.namespaces = Informer(api, resource_path("namespaces"), name="namespaces")
        self.accounts = Informer(api, resource_path("serviceaccounts"),
                                 field_selector=f"metadata.name={DEFAULT_SERVICE_ACCOUNT}",
                                 name="default serviceaccounts")
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self.namespaces.add_handler(on_add=self._namespace_changed,
                                    on_update=lambda old, new: self._namespace_changed(new))
        self.accounts.add_handler(on_delete=self._account_deleted)

    def _namespace_changed(self, namespace: dict[str, Any]) -> None:
        self._queue.put_nowait(str((namespace.get("metadata") or {}).get("name") or ""))

    def _account_deleted(self, account: dict[str, Any]) -> None:
        self._queue.put_nowait(str((account.get("metadata") or {}).get("namespace") or ""))

    async def sync(self, namespace: str) -> None:
        ns = self.namespaces.get(namespace)
        if ns is None or (ns.get("status") or {}).get("phase") == "Terminating" or \
                (ns.get("metadata") or {}).get("deletionTimestamp"):
            return
        if self.accounts.get(f"{namespace}/{DEFAULT_SERVICE_ACCOUNT}") is not None:
            return
        try:
            await self.api.create(resource_path("serviceaccounts", namespace), {
                "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": namespace}})
            log.info("created the default ServiceAccount of namespace %s", namespace)
        except StatusError as err:
            if err.code not in (409, 403, 404):  # exists, or the namespace is going away
                raise

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_period)
            for name in list(self.namespaces.keys()):
                self._queue.put_nowait(name)

    async def run(self) -> None:
        tasks = [asyncio.create_task(self.namespaces.run(), name="namespaces-informer"),
                 asyncio.create_task(self.accounts.run(), name="serviceaccounts-informer"),
                 asyncio.create_task(self._resync(), name="serviceaccounts-resync")]
        try:
            await self.namespaces.wait_synced()
            await self.accounts.wait_synced()
            while True:
                namespace = await self._queue.get()
                try:
                    await self.sync(namespace)
                except (StatusError, ApiUnavailable) as err:
                    log.warning("namespace %s: %s; retrying", namespace,
                                getattr(err, "message", err))
                    await asyncio.sleep(1.0)
                    self._queue.put_nowait(namespace)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

"""The service accounts controller, as upstream's (`pkg/controller/serviceaccount`): every
Active namespace has a `default` ServiceAccount, which pods that name none use (the
ServiceAccount admission plugin fills it in and refuses a pod whose account is missing).

Informers on Namespaces and ServiceAccounts; a namespace is checked when it appears or
changes, when its `default` ServiceAccount is deleted, and every `resync_period` seconds. A
missing one is created (an `AlreadyExists` answer means someone else did: fine; a namespace
being deleted is skipped, as upstream's controller does).
"""

from __future__ import annotations

import logging

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, Informer, resource_path
from ephemera.controllers.pernamespace import PerNamespaceController

__all__ = ["DEFAULT_SERVICE_ACCOUNT", "ServiceAccountsController"]

log = logging.getLogger("ephemera.controllers.serviceaccounts")

DEFAULT_SERVICE_ACCOUNT = "default"
DEFAULT_RESYNC_PERIOD = 60.0


class ServiceAccountsController(PerNamespaceController):
    """Keeps a `default` ServiceAccount in every Active namespace; `run()` until cancelled."""

    def __init__(self, api: ApiClient, *, resync_period: float = DEFAULT_RESYNC_PERIOD) -> None:
        self.accounts = Informer(api, resource_path("serviceaccounts"),
                                 field_selector=f"metadata.name={DEFAULT_SERVICE_ACCOUNT}",
                                 name="default serviceaccounts")
        super().__init__(api, self.accounts, resync_period=resync_period,
                         task_prefix="serviceaccounts", log=log)
        self.accounts.add_handler(on_delete=self._object_changed)

    async def ensure(self, namespace: str) -> None:
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

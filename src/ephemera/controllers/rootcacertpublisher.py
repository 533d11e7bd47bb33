"""The root CA certificate publisher, as upstream's
`pkg/controller/certificates/rootcacertpublisher`: every Active namespace has a ConfigMap
`kube-root-ca.crt` whose `ca.crt` is the cluster CA (`--root-ca-file`), which the
`kube-api-access-*` projected volumes mount so that pods can verify the apiserver. A missing
one is created, a changed one put back; namespaces are checked when they appear, when their
ConfigMap changes or goes, and every `resync_period`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, Informer, resource_path

__all__ = ["ROOT_CA_CONFIGMAP", "RootCACertPublisher"]

log = logging.getLogger("ephemera.controllers.rootcacertpublisher")

ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
    "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
    "guaranteed across distributions of Kubernetes clusters.")
DEFAULT_RESYNC_PERIOD = 60.0


class RootCACertPublisher:
    def __init__(self, api: ApiClient, root_ca: str, *,
                 resync_period: float = DEFAULT_RESYNC_PERIOD) -> None:
        self.api = api
        self.root_ca = root_ca
        self.resync_period = resync_period
        self.namespaces = Informer(api, resource_path("namespaces"), name="namespaces")
        self.configmaps = Informer(api, resource_path("configmaps"),
                                   field_selector=f"metadata.name={ROOT_CA_CONFIGMAP}",
                                   name="root CA configmaps")
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self.namespaces.add_handler(on_add=self._namespace,
                                    on_update=lambda old, new: self._namespace(new))
        self.configmaps.add_handler(on_update=lambda old, new: self._configmap(new),
                                    on_delete=self._configmap)

    def _namespace(self, namespace: dict[str, Any]) -> None:
        self._queue.put_nowait(str((namespace.get("metadata") or {}).get("name") or ""))

    def _configmap(self, configmap: dict[str, Any]) -> None:
        self._queue.put_nowait(str((configmap.get("metadata") or {}).get("namespace") or ""))

    async def sync(self, namespace: str) -> None:
        ns = self.namespaces.get(namespace)
        if ns is None or (ns.get("status") or {}).get("phase") == "Terminating" or \
                (ns.get("metadata") or {}).get("deletionTimestamp"):
            return
        current = self.configmaps.get(f"{namespace}/{ROOT_CA_CONFIGMAP}")
        data = {"ca.crt": self.root_ca}
        if current is None:
            try:
                await self.api.create(resource_path("configmaps", namespace), {
                    "apiVersion": "v1", "kind": "ConfigMap", "data": data,
                    "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": namespace,
                                 "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION}}})
            except StatusError as err:
                if err.code not in (409, 403, 404):
                    raise
            return
        annotations = (current.get("metadata") or {}).get("annotations") or {}
        if current.get("data") == data and annotations.get(DESCRIPTION_ANNOTATION) == \
                DESCRIPTION:
            return
        updated = dict(current, data=data)
        updated["metadata"] = dict(current.get("metadata") or {})
        updated["metadata"]["annotations"] = {**annotations,
                                              DESCRIPTION_ANNOTATION: DESCRIPTION}
        await self.api.update(resource_path("configmaps", namespace, ROOT_CA_CONFIGMAP),
                              updated)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_period)
            for name in list(self.namespaces.keys()):
                self._queue.put_nowait(name)

    async def run(self) -> None:
        tasks = [asyncio.create_task(self.namespaces.run(), name="rootca-namespaces"),
                 asyncio.create_task(self.configmaps.run(), name="rootca-configmaps"),
                 asyncio.create_task(self._resync(), name="rootca-resync")]
        try:
            await self.namespaces.wait_synced()
            await self.configmaps.wait_synced()
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

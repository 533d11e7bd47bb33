"""The root CA certificate publisher, as upstream's
`pkg/controller/certificates/rootcacertpublisher`: every Active namespace has a ConfigMap
`kube-root-ca.crt` whose `ca.crt` is the cluster CA (`--root-ca-file`), which the
`kube-api-access-*` projected volumes mount so that pods can verify the apiserver. A missing
one is created, a changed one put back; namespaces are checked when they appear, when their
ConfigMap changes or goes, and every `resync_period`.
"""

from __future__ import annotations

import logging

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, Informer, resource_path
from ephemera.controllers.pernamespace import PerNamespaceController

__all__ = ["ROOT_CA_CONFIGMAP", "RootCACertPublisher"]

log = logging.getLogger("ephemera.controllers.rootcacertpublisher")

ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
    "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
    "guaranteed across distributions of Kubernetes clusters.")
DEFAULT_RESYNC_PERIOD = 60.0


class RootCACertPublisher(PerNamespaceController):
    """Keeps `kube-root-ca.crt` right in every Active namespace; `run()` until cancelled."""

    def __init__(self, api: ApiClient, root_ca: str, *,
                 resync_period: float = DEFAULT_RESYNC_PERIOD) -> None:
        self.root_ca = root_ca
        self.configmaps = Informer(api, resource_path("configmaps"),
                                   field_selector=f"metadata.name={ROOT_CA_CONFIGMAP}",
                                   name="root CA configmaps")
        super().__init__(api, self.configmaps, resync_period=resync_period,
                         task_prefix="rootca", log=log)
        self.configmaps.add_handler(on_update=lambda old, new: self._object_changed(new),
                                    on_delete=self._object_changed)

    async def ensure(self, namespace: str) -> None:
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

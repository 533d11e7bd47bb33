"""The admission plugins' context (`ephemera.apiserver.admission.AdmissionContext`) over this
apiserver's registry and watch-fed caches: what the plugins read and the one write they make,
so that no plugin reaches through the registry.

- `cached_get` / `cached_list`: the object cache (`ephemera.apiserver.informers.ObjectCache`:
  ServiceAccounts, LimitRanges, ResourceQuotas) with its read rules (its own writes seen
  first, a live read on a miss, live lists kept for a while); without a cache, or for a kind
  it does not hold, a live read.
- `get`: a live read from the store (pods, nodes, namespaces).
- `watched`: the watch cache's copy (upstream's informer lister: perhaps a little behind the
  store), or None when the cache has none; a plugin that refuses on it reads live first.
- `namespaces`: the namespace cache of the namespace lifecycle, or None.
- `update_quota`: the quota writer, the registry's compare-and-swap update of a ResourceQuota.

The app builds one (`create_app`) and hands it to the chain (`AdmissionChain.set_context`);
tests that build a registry by hand do the same with `RegistryAdmissionContext(registry)`.
"""

from __future__ import annotations

from typing import Any

from ephemera.apiserver.admission import NamespaceReader, QuotaUpdate
from ephemera.apiserver.admission.resourcequota import RESOURCE_QUOTAS
from ephemera.apiserver.informers import ObjectCache, live_list
from ephemera.apiserver.registry import Registry
from ephemera.apiserver.resources import Resource

__all__ = ["RegistryAdmissionContext"]


class RegistryAdmissionContext:
    """An `AdmissionContext` over `registry`, reading through `objects` and `namespaces` when
    given."""

    def __init__(self, registry: Registry, *, objects: ObjectCache | None = None,
                 namespaces: NamespaceReader | None = None) -> None:
        self._registry = registry
        self._objects = objects
        self._namespaces = namespaces

    @property
    def namespaces(self) -> NamespaceReader | None:
        return self._namespaces

    async def cached_get(self, resource: Resource, namespace: str, name: str
                         ) -> dict[str, Any]:
        if self._objects is not None:
            return await self._objects.get(resource, namespace, name)
        return await self._registry.get(resource, namespace, name)

    async def cached_list(self, resource: Resource, namespace: str) -> list[dict[str, Any]]:
        if self._objects is not None:
            return await self._objects.list(resource, namespace)
        return await live_list(self._registry, resource, namespace)

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        return await self._registry.get(resource, namespace, name)

    def watched(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        return self._registry.cached_object(resource, namespace, name)

    async def update_quota(self, namespace: str, name: str, update: QuotaUpdate) -> None:
        await self._registry.update(RESOURCE_QUOTAS, namespace, name, update)

"""Namespace lifecycle, as upstream's namespace and serviceaccounts controllers do it, inside
the apiserver (the admission checks, 404 in a missing namespace, 403 in a Terminating one, no
deletion of `default`, `kube-system`, `kube-public`, are the NamespaceLifecycle admission
plugin, `ephemera.apiserver.admission.namespacelifecycle`):

- the namespaces `default`, `kube-system`, `kube-public` and `kube-node-lease` exist from the
  start (created when missing);
- every namespace gets its `default` ServiceAccount when it is created (a create hook of the
  registry), and at startup when it lacks one; ephemera has no controllers yet;
- deleting a namespace marks it Terminating; a background task then deletes everything in
  it (pods gracefully, so a bound pod waits for its node), removes the `kubernetes`
  finalizer and deletes the namespace. Terminating namespaces found at startup are resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from typing import Any

from ephemera.api import errors, meta
from ephemera.api.errors import StatusError
from ephemera.apiserver.admission.serviceaccount import ensure_default_service_account
from ephemera.apiserver.registry import DeleteOptions, Registry
from ephemera.apiserver.resources import RESOURCES, Resource, lookup
from ephemera.apiserver.strategy import NAMESPACE_FINALIZER

log = logging.getLogger("ephemera.apiserver")

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


def _namespaces() -> Resource:
    resource = lookup("", "v1", "namespaces")
    assert resource is not None
    return resource


NAMESPACES = _namespaces()


class NamespaceLifecycle:
    def __init__(self, registry: Registry, *, retry_interval: float = 1.0) -> None:
        self.registry = registry
        self.retry_interval = retry_interval
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def ensure_defaults(self) -> None:
        for name in DEFAULT_NAMESPACES:
            obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": name}}
            try:
                await self.registry.create(NAMESPACES, obj)
            except StatusError as err:
                if err.code != 409:
                    raise

    async def object_created(self, resource: Resource, obj: dict[str, Any]) -> None:
        """The registry's create hook: a new namespace gets its `default` ServiceAccount."""
        if resource == NAMESPACES:
            await ensure_default_service_account(self.registry, meta.name_of(obj))

    async def resume(self) -> None:
        """Finish the deletion of namespaces left Terminating by a previous run; give the
        others their `default` ServiceAccount when they lack one."""
        page = await self.registry.list(NAMESPACES, "")
        codec = self.registry.codec(NAMESPACES)
        for kv in page.kvs:
            ns = codec.decode(kv)
            if (ns.get("metadata") or {}).get("deletionTimestamp"):
                self.finalize(ns["metadata"]["name"])
            else:
                await ensure_default_service_account(self.registry, ns["metadata"]["name"])

    def finalize(self, name: str) -> None:
        """Start (once) the task that empties and removes a Terminating namespace."""
        task = self._tasks.get(name)
        if task is not None and not task.done():
            return
        task = asyncio.get_running_loop().create_task(self._finalize(name),
                                                      name=f"finalize-namespace-{name}")
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._tasks.pop(name, None) if
                               self._tasks.get(name) is t else None)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def wait_idle(self) -> None:
        """Wait until every running namespace finalization has finished (tests)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _finalize(self, name: str) -> None:
        delay = self.retry_interval / 4
        while True:
            try:
                remaining = await self._delete_content(name)
                if remaining == 0:
                    await self._remove_finalizer(name)
                    return
                log.info("namespace %s: waiting for %d objects to go", name, remaining)
            except StatusError as err:
                if err.code == 404:
                    return
                log.warning("namespace %s: finalization failed: %s", name, err.message)
            except Exception:
                log.exception("namespace %s: finalization failed", name)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_interval * 5)

    async def _delete_content(self, namespace: str) -> int:
        """Delete everything in the namespace; return how many objects are still there."""
        remaining = 0
        for resource in RESOURCES:
            if not resource.namespaced:
                continue
            page = await self.registry.list(resource, namespace)
            for kv in page.kvs:
                obj_name = kv.key.rsplit("/", 1)[-1]
                try:
                    result = await self.registry.delete(resource, namespace, obj_name,
                                                        DeleteOptions())
                except StatusError as err:
                    if err.code == 404:
                        continue
                    raise
                if not result.deleted:
                    remaining += 1
        return remaining

    async def _remove_finalizer(self, name: str) -> None:
        strategy = self.registry.strategy(NAMESPACES)

        async def drop_finalizer(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is None:
                raise errors.not_found("namespaces", name)
            old = copy.deepcopy(current)
            spec = current.setdefault("spec", {})
            spec["finalizers"] = [f for f in spec.get("finalizers") or []
                                  if f != NAMESPACE_FINALIZER]
            strategy.before_update(current, old, "finalize")
            return current

        ns, _ = await self.registry.update(NAMESPACES, "", name, drop_finalizer)
        if strategy.has_finalizers(ns):
            log.info("namespace %s: waiting for finalizers %s", name,
                     (ns.get("spec") or {}).get("finalizers"))
            return
        await self.registry.delete(NAMESPACES, "", name, DeleteOptions())

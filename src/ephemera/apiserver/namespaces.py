"""Namespace lifecycle, as upstream's namespace and serviceaccounts controllers do it, inside
the apiserver (the admission checks, 404 in a missing namespace, 403 in a Terminating one, no
deletion of `default`, `kube-system`, `kube-public`, are the NamespaceLifecycle admission
plugin, `ephemera.apiserver.admission.namespacelifecycle`):

- the namespaces `default`, `kube-system`, `kube-public` and `kube-node-lease` exist from the
  start (created when missing);
- every namespace gets its `default` ServiceAccount when it is created (a create hook of the
  registry; `ensure_default_service_account`), and at startup when it lacks one, so that a pod
  created right after its namespace finds it (upstream leaves this to the serviceaccounts
  controller, which ephemera's controller-manager runs too);
- deleting a namespace marks it Terminating; a background task then deletes everything in
  it (pods gracefully, so a bound pod waits for its node; with `propagationPolicy:
  Background`, as upstream's namespace controller, so no object waits for the garbage
  collector's finalizers), removes the `kubernetes`
  finalizer and deletes the namespace. Terminating namespaces found at startup are resumed.
  While it waits, the namespace's `status.conditions` say why, as upstream's namespace
  deleter's (`namespace_deletion_conditions`): NamespaceDeletionDiscoveryFailure,
  NamespaceDeletionGroupVersionParsingFailure (never failing here: the resources are the
  apiserver's own), NamespaceDeletionContentFailure (deletes that failed),
  NamespaceContentRemaining (`Some resources are remaining: pods. has 2 resource
  instances`), NamespaceFinalizersRemaining (`Some content in the namespace has finalizers
  remaining: x.io/f in 1 resource instances`), written only when one changes;
- `NamespaceCache` (upstream's namespace informer for the admission plugin): the namespaces
  as a watch on the store shows them, so that the plugin need not read the store on every
  create and update. Started by `resume`, stopped by `close`, handed to the admission plugins
  as their context's `namespaces` (`ephemera.apiserver.admissioncontext`).

The cache only ever *admits*: a request whose namespace it holds (active, for a create) with
no live lookup forced passes without a store read; every refusal (404, 403 Terminating) and
every namespace it does not hold is decided by a live read, as upstream's plugin falls back
to a live GET. A namespace deleted through this apiserver is looked up live for
`FORCE_LIVE_LOOKUP_TTL` seconds (upstream's `forceLiveLookupTTL`), so a create that follows
its deletion sees it Terminating even before the watch event arrives. As upstream, a
namespace deleted through *another* apiserver may still admit creates here until the watch
delivers that deletion.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api import errors, meta
from ephemera.api.deletion import BACKGROUND
from ephemera.api.errors import StatusError
from ephemera.api.jsoncopy import json_copy
from ephemera.api.listoptions import ListRead
from ephemera.apiserver.admission.namespacelifecycle import (
    IMMORTAL_NAMESPACES,
    NAMESPACES,
    is_terminating,
)
from ephemera.apiserver.admission.serviceaccount import DEFAULT_SERVICE_ACCOUNT, SERVICE_ACCOUNTS
from ephemera.apiserver.informers import Reflector
from ephemera.apiserver.registry import LIST_PAGE, Codec, DeleteOptions, Registry
from ephemera.apiserver.resources import Resource, served_resources
from ephemera.apiserver.strategy import NAMESPACE_FINALIZER
from ephemera.apiserver.watchcache import WatchCache
from ephemera.store import Event, KeyValue, Store

log = logging.getLogger("ephemera.apiserver")

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# upstream's forceLiveLookupTTL: how long a namespace deleted here is read live.
FORCE_LIVE_LOOKUP_TTL = 30.0

__all__ = ["DEFAULT_NAMESPACES", "DELETION_CONDITIONS_OK", "FORCE_LIVE_LOOKUP_TTL",
           "IMMORTAL_NAMESPACES", "NAMESPACES", "ContentLeft", "NamespaceCache",
           "NamespaceLifecycle", "ensure_default_service_account", "is_terminating",
           "namespace_deletion_conditions"]


async def ensure_default_service_account(registry: Registry, namespace: str) -> None:
    """Create the `default` ServiceAccount of `namespace` unless it exists (what upstream's
    serviceaccounts controller does). Failures are logged, not raised."""
    if await registry.store.get(SERVICE_ACCOUNTS.key(namespace, DEFAULT_SERVICE_ACCOUNT)):
        return
    account: dict[str, Any] = {"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": {"name": DEFAULT_SERVICE_ACCOUNT,
                                            "namespace": namespace}}
    try:
        await registry.create(SERVICE_ACCOUNTS, account)  # the registry logs it
    except StatusError as err:
        if err.code not in (404, 403, 409):  # namespace gone or terminating; raced
            log.warning("namespace %s: creating the default service account failed: %s",
                        namespace, err.message)


class NamespaceCache:
    """The namespaces as a watch on the store shows them: name -> Terminating or not (see the
    module docstring for what it may decide). `start` lists and then watches in the
    background (an `ephemera.apiserver.informers.Reflector` with this cache as its sink),
    watching again from its revision after a dropped watch, re-listing after a compacted
    one; `close` stops it."""

    def __init__(self, store: Store, codec: Codec, *,
                 force_live_ttl: float = FORCE_LIVE_LOOKUP_TTL,
                 clock: Callable[[], float] = time.monotonic,
                 retry_interval: float = 1.0, watch_cache: WatchCache | None = None) -> None:
        self._codec = codec
        self._force_live_ttl = force_live_ttl
        self._clock = clock
        self._prefix = NAMESPACES.key_prefix()
        self._terminating: dict[str, bool] = {}
        self._force_live_until: dict[str, float] = {}
        self._reflector = Reflector(store, self._prefix, self, name="namespace cache",
                                    retry_interval=retry_interval, watch_cache=watch_cache)

    @property
    def ready(self) -> bool:
        """Listed and watching (False before `start`, after `close` and while re-listing)."""
        return self._reflector.ready

    def admits(self, name: str, operation: str) -> bool:
        """Whether the cache alone admits a `CREATE` (the namespace exists and is active) or
        an `UPDATE` (it exists) in namespace `name`; False means: read it live."""
        if not self.ready or name not in self._terminating:
            return False
        until = self._force_live_until.get(name)
        if until is not None:
            if self._clock() < until:
                return False
            del self._force_live_until[name]
        return operation != "CREATE" or not self._terminating[name]

    def force_live_lookup(self, name: str) -> None:
        """Read namespace `name` live for the next `force_live_ttl` seconds (it is being
        deleted through this apiserver; the watch may not show that yet)."""
        self._force_live_until[name] = self._clock() + self._force_live_ttl

    async def start(self) -> None:
        """List the namespaces, then keep them up to date from a watch in the background."""
        await self._reflector.start()

    async def close(self) -> None:
        await self._reflector.close()

    # -- the reflector's sink

    def replace(self, kvs: Sequence[KeyValue], revision: int) -> None:
        self._terminating = {kv.key[len(self._prefix):]: is_terminating(self._codec.decode(kv))
                             for kv in kvs}

    def apply(self, event: Event) -> None:
        name = event.kv.key[len(self._prefix):]
        if event.type == "DELETE":
            self._terminating.pop(name, None)
        else:
            self._terminating[name] = is_terminating(self._codec.decode(event.kv))


# Upstream's namespace deleter conditions, in its order, with the reason and message of each
# when nothing is wrong.
DELETION_CONDITIONS_OK = {
    "NamespaceDeletionDiscoveryFailure": ("ResourcesDiscovered",
                                          "All resources successfully discovered"),
    "NamespaceDeletionGroupVersionParsingFailure": ("ParsedGroupVersions",
                                                    "All legacy kube types successfully parsed"),
    "NamespaceDeletionContentFailure": (
        "ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
    "NamespaceContentRemaining": ("ContentRemoved", "All content successfully removed"),
    "NamespaceFinalizersRemaining": ("ContentHasNoFinalizers",
                                     "All content-preserving finalizers finished"),
}


@dataclasses.dataclass
class ContentLeft:
    """What a pass over a Terminating namespace left: objects by group-resource
    (`pods.`, `sandboxpools.ops.example.com`), their finalizers, the deletes that failed."""

    resources: dict[str, int] = dataclasses.field(default_factory=dict)
    finalizers: dict[str, int] = dataclasses.field(default_factory=dict)
    errors: list[str] = dataclasses.field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.resources.values())


def namespace_deletion_conditions(old: Sequence[Mapping[str, Any]], left: ContentLeft,
                                  now: str) -> list[dict[str, Any]]:
    """The namespace's conditions after a pass (upstream's `namespaceConditionUpdater`):
    the five deletion conditions, each replaced only when its status, reason or message
    changed (`lastTransitionTime` then `now`); other conditions kept."""
    failing: dict[str, tuple[str, str]] = {}
    if left.errors:
        failing["NamespaceDeletionContentFailure"] = (
            "ContentDeletionFailed", f"Failed to delete all resource types, "
            f"{len(left.errors)} remaining: {', '.join(left.errors)}")
    if left.resources:
        failing["NamespaceContentRemaining"] = (
            "SomeResourcesRemain", "Some resources are remaining: " + ", ".join(
                f"{gr} has {n} resource instances" for gr, n in sorted(left.resources.items())))
    if left.finalizers:
        failing["NamespaceFinalizersRemaining"] = (
            "SomeFinalizersRemain", "Some content in the namespace has finalizers remaining: "
            + ", ".join(f"{f} in {n} resource instances"
                        for f, n in sorted(left.finalizers.items())))
    result = [dict(c) for c in old]
    for kind, ok in DELETION_CONDITIONS_OK.items():
        status, (reason, message) = ("True", failing[kind]) if kind in failing else ("False", ok)
        new = {"type": kind, "status": status, "lastTransitionTime": now, "reason": reason,
               "message": message}
        current = next((c for c in result if c.get("type") == kind), None)
        if current is None:
            result.append(new)
        elif (current.get("status"), current.get("reason"), current.get("message")) != (
                status, reason, message):
            current.clear()
            current.update(new)
    return result


class NamespaceLifecycle:
    def __init__(self, registry: Registry, *, retry_interval: float = 1.0) -> None:
        self.registry = registry
        self.retry_interval = retry_interval
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.cache = NamespaceCache(registry.store, registry.codec(NAMESPACES),
                                    retry_interval=retry_interval,
                                    watch_cache=registry.watch_cache)

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
        """Start the namespace cache; finish the deletion of namespaces left Terminating by a
        previous run; give the others their `default` ServiceAccount when they lack one."""
        await self.cache.start()
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
        await self.cache.close()
        tasks = list(self._tasks.values())
        await cancel_and_wait(*tasks)
        self._tasks.clear()

    async def wait_idle(self) -> None:
        """Wait until every running namespace finalization has finished (tests)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _finalize(self, name: str) -> None:
        delay = self.retry_interval / 4
        while True:
            try:
                left = await self._delete_content(name)
                await self._set_conditions(name, left)
                if left.total == 0 and not left.errors:
                    await self._remove_finalizer(name)
                    return
                log.info("namespace %s: waiting for %d objects to go", name, left.total)
            except StatusError as err:
                if err.code == 404:
                    return
                log.warning("namespace %s: finalization failed: %s", name, err.message)
            except Exception:
                log.exception("namespace %s: finalization failed", name)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_interval * 5)

    async def _set_conditions(self, name: str, left: ContentLeft) -> None:
        """Write the namespace's deletion conditions (nothing when none changed)."""
        stamp = meta.now_rfc3339()

        async def with_conditions(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is None:
                raise errors.not_found("namespaces", name)
            status = current.setdefault("status", {})
            conditions = namespace_deletion_conditions(status.get("conditions") or [], left,
                                                       stamp)
            if conditions != (status.get("conditions") or []):
                status["conditions"] = conditions
            return current

        await self.registry.update(NAMESPACES, "", name, with_conditions)

    async def _delete_content(self, namespace: str) -> ContentLeft:
        """Delete everything in the namespace; what is still there."""
        left = ContentLeft()
        for resource in served_resources():
            if not resource.namespaced or "delete" not in resource.verbs:
                continue  # cluster-scoped, or never stored (localsubjectaccessreviews)
            if resource.custom and resource.version != resource.storage_version:
                continue  # the same objects as the storage version's
            try:
                await self._delete_resource(resource, namespace, left)
            except StatusError as err:
                left.errors.append(f"{resource.plural}.{resource.group}: {err.message}")
        return left

    async def _delete_resource(self, resource: Resource, namespace: str,
                               left: ContentLeft) -> None:
        """Delete the namespace's objects of one resource, counting in `left` those left."""
        gr = f"{resource.plural}.{resource.group}"
        prefix = resource.key_prefix(namespace)
        read = ListRead(limit=LIST_PAGE)
        while True:  # in pages: a namespace may hold more than fits one read
            page = await self.registry.list(resource, namespace, read=read)
            for kv in page.kvs:
                obj_name = kv.key.rsplit("/", 1)[-1]
                try:
                    result = await self.registry.delete(resource, namespace, obj_name,
                                                        DeleteOptions(propagation_policy=BACKGROUND))
                except StatusError as err:
                    if err.code == 404:
                        continue
                    raise
                if not result.deleted:
                    left.resources[gr] = left.resources.get(gr, 0) + 1
                    for finalizer in (result.obj.get("metadata") or {}).get("finalizers") or []:
                        left.finalizers[finalizer] = left.finalizers.get(finalizer, 0) + 1
            if not page.continue_token or not page.kvs:
                break
            read = ListRead(limit=LIST_PAGE, start_after=page.kvs[-1].key[len(prefix):],
                            continued=True)

    async def _remove_finalizer(self, name: str) -> None:
        strategy = self.registry.strategy(NAMESPACES)

        async def drop_finalizer(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is None:
                raise errors.not_found("namespaces", name)
            old = json_copy(current)
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

"""The garbage collector's I/O: discovery of the resources to watch (every served resource
that can be listed, watched and deleted, but Events, as upstream's defaults), one informer
each feeding the `Graph`, and the workers that carry out its decisions through the API, as
upstream's `GarbageCollector`:

- *attempt to delete* a node: a virtual owner is looked up (gone: a virtual delete event,
  which queues its dependents); a dependent whose owners are all gone (404, or another UID
  under the name) is deleted with the propagation its own finalizers ask for (Background by
  default), one that still has an owner loses only its references to the gone ones; an
  owner deleted in the foreground (`foregroundDeletion`) loses that finalizer once no
  dependent blocks it (`blockOwnerDeletion`), and until then its blocking dependents are
  deleted (in the foreground too when they have dependents of their own);
- *attempt to orphan* an owner deleted with `Orphan`: every dependent loses its reference
  to it, then the owner loses its `orphan` finalizer.

Writes carry the object's UID and resourceVersion as preconditions; a conflict is retried.
The workers start once every informer has synced, and discovery is read again every
`discovery_period` seconds, so that resources served later (CRDs) are collected too.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.deletion import FOREGROUND_FINALIZER, ORPHAN_FINALIZER
from ephemera.api.errors import StatusError
from ephemera.api.goformat import go_quote
from ephemera.client import ApiClient, ApiUnavailable, EventRecorder, Informer, resource_path
from ephemera.controllers.garbagecollector.graph import (
    Changes,
    EventType,
    Graph,
    Identity,
    Node,
    OwnerRef,
    owner_refs,
    plan,
)
from ephemera.controllers.workqueue import WorkQueue

__all__ = ["GarbageCollector", "ServedResource"]

log = logging.getLogger("ephemera.controllers.garbagecollector")

DEFAULT_DISCOVERY_PERIOD = 30.0
DELETE_WORKERS = 8
ORPHAN_WORKERS = 2
ABSENT_OWNER_CACHE_SIZE = 500
# upstream's DefaultIgnoredResources: never collected nor watched.
IGNORED = {("", "events"), ("events.k8s.io", "events")}
NEEDED_VERBS = {"delete", "list", "watch"}


@dataclass(frozen=True)
class ServedResource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "", name: str | None = None) -> str:
        return resource_path(self.plural, namespace if self.namespaced else None, name,
                             group=self.group, version=self.version)


class _RetryLater(Exception):
    """The item cannot be decided now (an owner of a kind not served, yet)."""


class _ClusterScopedWithNamespacedOwner(Exception):
    """A cluster-scoped object names a namespaced owner: not retried."""


class GarbageCollector:
    """`run()` until cancelled."""

    def __init__(self, api: ApiClient, recorder: EventRecorder | None = None, *,
                 discovery_period: float = DEFAULT_DISCOVERY_PERIOD,
                 workers: int = DELETE_WORKERS,
                 shared: Mapping[str, Informer] | None = None) -> None:
        """`shared`: informers of other controllers by path (`/api/v1/pods`), used as the
        monitors of those resources instead of informers of its own."""
        self.api = api
        self.shared: dict[str, Informer] = dict(shared or {})
        self.recorder = recorder or EventRecorder(api, "garbage-collector-controller")
        self.discovery_period = discovery_period
        self.workers = workers
        self.graph = Graph()
        self.attempt_to_delete: WorkQueue[str] = WorkQueue()
        self.attempt_to_orphan: WorkQueue[str] = WorkQueue()
        # (apiVersion, kind) of every served version -> resource.
        self._mapping: dict[tuple[str, str], ServedResource] = {}
        self._monitors: dict[ServedResource, tuple[Informer, asyncio.Task[None]]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._absent: OrderedDict[tuple[str, str, str, str, str], None] = OrderedDict()

    # -- discovery and monitors ---------------------------------------------------------

    async def discover(self) -> list[ServedResource]:
        """Every served resource of every version into the mapping; returns the preferred
        versions' deletable ones, the resources to watch."""
        mapping: dict[tuple[str, str], ServedResource] = {}
        watched: list[ServedResource] = []
        group_versions: list[tuple[str, str, bool]] = [("", "v1", True)]
        groups = await self.api.get("/apis")
        for group in groups.get("groups") or []:
            preferred = (group.get("preferredVersion") or {}).get("version")
            for version in group.get("versions") or []:
                group_versions.append((group["name"], version["version"],
                                       version["version"] == preferred))
        for group, version, preferred in group_versions:
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                listed = await self.api.get(path)
            except StatusError as err:
                log.warning("garbage collector: discovery of %s failed: %s", path, err.message)
                continue
            for item in listed.get("resources") or []:
                plural = str(item.get("name") or "")
                if "/" in plural:
                    continue
                res = ServedResource(group, version, plural, str(item.get("kind") or ""),
                                     bool(item.get("namespaced")))
                mapping[(res.api_version, res.kind)] = res
                if preferred and (group, plural) not in IGNORED and \
                        set(item.get("verbs") or []) >= NEEDED_VERBS:
                    watched.append(res)
        self._mapping = mapping
        return watched

    def _sync_monitors(self, wanted: list[ServedResource]) -> list[Informer]:
        started: list[Informer] = []
        for res in wanted:
            if res in self._monitors:
                continue
            informer = self.shared.get(res.path())  # (an empty Informer is falsy: len 0)
            if informer is None:
                informer = Informer(self.api, res.path(), name=f"gc {res.plural}.{res.group}")
            self._watch(informer, res)
            task = asyncio.create_task(informer.run(), name=f"gc-monitor-{res.plural}")
            self._monitors[res] = (informer, task)
            started.append(informer)
        # A resource no longer served (its CRD deleted) loses its monitor; the shared
        # informers are of built-in resources (pods), always served, so a handler is never
        # added twice to one of them.
        for res in [r for r in self._monitors if r not in wanted]:
            _, task = self._monitors.pop(res)
            task.cancel()
        return started

    def _watch(self, informer: Informer, res: ServedResource) -> None:
        def added(obj: dict[str, Any]) -> None:
            self._event("add", res, obj, None)

        def updated(old: dict[str, Any], new: dict[str, Any]) -> None:
            self._event("update", res, new, old)

        def deleted(obj: dict[str, Any]) -> None:
            self._event("delete", res, obj, None)

        informer.add_handler(on_add=added, on_update=updated, on_delete=deleted)

    def _event(self, kind: EventType, res: ServedResource, obj: Mapping[str, Any],
               old: Mapping[str, Any] | None) -> None:
        md = obj.get("metadata") or {}
        identity = Identity(res.api_version, res.kind, str(md.get("name") or ""),
                            str(md.get("uid") or ""), str(md.get("namespace") or ""))
        old_md = (old or {}).get("metadata") if old is not None else None
        changes = self.graph.observe(kind, identity, md, old_md)
        self._apply(changes)

    def _virtual_delete(self, identity: Identity) -> None:
        self._apply(self.graph.observe("delete", identity, {}, virtual=True))

    def _apply(self, changes: Changes) -> None:
        for node in changes.attempt_to_delete:
            self.attempt_to_delete.add(node.identity.uid)
        for node in changes.attempt_to_orphan:
            self.attempt_to_orphan.add(node.identity.uid)
        for dependent, owner in changes.invalid_namespace:
            self._report_invalid_namespace(dependent.identity, owner)

    def _report_invalid_namespace(self, dependent: Identity, owner: Identity) -> None:
        owner_in_ns = Identity(owner.api_version, owner.kind, owner.name, owner.uid,
                               dependent.namespace)
        message = (f"ownerRef {owner_in_ns} does not exist in namespace "
                   f"{go_quote(dependent.namespace)}")
        obj = {"apiVersion": dependent.api_version, "kind": dependent.kind,
               "metadata": {"name": dependent.name, "namespace": dependent.namespace,
                            "uid": dependent.uid}}
        task = asyncio.get_running_loop().create_task(
            self.recorder.record(obj, "Warning", "OwnerRefInvalidNamespace", message))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        tasks: list[asyncio.Task[None]] = []
        try:
            while True:
                try:
                    watched = await self.discover()
                    break
                except (StatusError, ApiUnavailable) as err:
                    log.warning("garbage collector: discovery failed: %s", err)
                    await asyncio.sleep(1.0)
            informers = self._sync_monitors(watched)
            await asyncio.gather(*(i.wait_synced() for i in informers))
            log.info("garbage collector: %d resources watched, %d objects in the graph",
                     len(self._monitors), len(self.graph))
            tasks = [asyncio.create_task(self._delete_worker(), name=f"gc-delete-{i}")
                     for i in range(self.workers)]
            tasks += [asyncio.create_task(self._orphan_worker(), name=f"gc-orphan-{i}")
                      for i in range(ORPHAN_WORKERS)]
            while True:
                await asyncio.sleep(self.discovery_period)
                try:
                    self._sync_monitors(await self.discover())
                except (StatusError, ApiUnavailable) as err:
                    log.warning("garbage collector: discovery failed: %s", err)
        finally:
            await cancel_and_wait(*tasks, *(t for _, t in self._monitors.values()))
            self._monitors.clear()
            self.attempt_to_delete.close()
            self.attempt_to_orphan.close()

    async def _delete_worker(self) -> None:
        await self._work(self.attempt_to_delete, self.attempt_to_delete_item)

    async def _orphan_worker(self) -> None:
        await self._work(self.attempt_to_orphan, self.attempt_to_orphan_item)

    async def _work(self, queue: WorkQueue[str], fn: Any) -> None:
        while True:
            uid = await queue.get()
            try:
                await fn(uid)
                queue.forget(uid)
            except asyncio.CancelledError:
                raise
            except _ClusterScopedWithNamespacedOwner:
                queue.forget(uid)
            except (StatusError, ApiUnavailable, _RetryLater) as err:
                node = self.graph.get(uid)
                log.info("garbage collector: retrying %s: %s",
                         node.identity if node else uid, getattr(err, "message", err))
                queue.add_rate_limited(uid)
            except Exception:
                log.exception("garbage collector: processing %s failed", uid)
                queue.add_rate_limited(uid)
            finally:
                queue.done(uid)

    # -- attempt to delete --------------------------------------------------------------

    def _resource(self, api_version: str, kind: str) -> ServedResource:
        res = self._mapping.get((api_version, kind))
        if res is None:
            raise _RetryLater(f"no served resource for {api_version}, Kind={kind}")
        return res

    async def _get(self, identity: Identity) -> dict[str, Any] | None:
        res = self._resource(identity.api_version, identity.kind)
        try:
            return await self.api.get(res.path(identity.namespace, identity.name))
        except StatusError as err:
            if err.code == 404:
                return None
            raise

    async def attempt_to_delete_item(self, uid: str) -> None:
        node = self.graph.get(uid)
        if node is None:
            return
        if node.being_deleted and not node.deleting_dependents:
            return  # on its way out: its dependents are looked at once it is gone
        latest = await self._get(node.identity)
        md = (latest or {}).get("metadata") or {}
        if latest is None or md.get("uid") != node.identity.uid:
            self._virtual_delete(node.identity)
            return
        if node.deleting_dependents:
            await self._process_deleting_dependents(node)
            return
        refs = owner_refs(md)
        if not refs:
            return
        solid: list[OwnerRef] = []
        dangling: list[OwnerRef] = []
        waiting: list[OwnerRef] = []
        for ref in refs:
            owner = await self._owner(ref, node.identity)
            if owner is None:
                dangling.append(ref)
            elif (owner.get("metadata") or {}).get("deletionTimestamp") and \
                    FOREGROUND_FINALIZER in ((owner.get("metadata") or {}).get("finalizers")
                                             or []):
                waiting.append(ref)
            else:
                solid.append(ref)
        decision = plan(solid=solid, dangling=dangling, waiting=waiting,
                        finalizers=md.get("finalizers") or [],
                        has_dependents=bool(node.dependents),
                        dependent_deleting_dependents=any(
                            d.deleting_dependents for d in node.dependents.values()))
        if decision.action == "remove_refs":
            drop = set(decision.remove_refs)
            log.info("garbage collector: removing references of %s to owners %s that are "
                     "gone or deleting their dependents", node.identity, sorted(drop))
            await self._patch_refs(node.identity, latest, lambda r: None if r["uid"] in drop
                                   else r)
        elif decision.action == "delete":
            if decision.unblock:
                latest = await self._patch_refs(
                    node.identity, latest, lambda r: {**r, "blockOwnerDeletion": False})
                if latest is None:
                    return
            await self._delete(node.identity, latest, decision.policy, dangling or waiting)

    async def _owner(self, ref: OwnerRef, dependent: Identity) -> dict[str, Any] | None:
        """The owner `ref` names, or None when it is gone (upstream's `isDangling`)."""
        coords = ref.coordinates()
        if (*coords, "") in self._absent or (*coords, dependent.namespace) in self._absent:
            return None
        res = self._resource(ref.api_version, ref.kind)
        if not dependent.namespace and res.namespaced:
            owner = Identity.of_owner(ref, "")
            log.info("garbage collector: %s is cluster-scoped but names the namespaced owner "
                     "%s", dependent, owner)
            self._report_invalid_namespace(dependent, owner)
            raise _ClusterScopedWithNamespacedOwner
        namespace = dependent.namespace if res.namespaced else ""
        try:
            owner_obj: dict[str, Any] | None = await self.api.get(res.path(namespace, ref.name))
        except StatusError as err:
            if err.code != 404:
                raise
            owner_obj = None
        if owner_obj is None or (owner_obj.get("metadata") or {}).get("uid") != ref.uid:
            self._absent[(*coords, namespace)] = None
            while len(self._absent) > ABSENT_OWNER_CACHE_SIZE:
                self._absent.popitem(last=False)
            return None
        return owner_obj

    async def _delete(self, identity: Identity, latest: dict[str, Any], policy: str,
                      gone: list[OwnerRef]) -> None:
        res = self._resource(identity.api_version, identity.kind)
        md = latest.get("metadata") or {}
        preconditions = {"uid": identity.uid, "resourceVersion": md.get("resourceVersion")}
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": policy,
                "preconditions": preconditions}
        path = res.path(identity.namespace, identity.name)
        try:
            await self.api.delete(path, body)
        except StatusError as err:
            if err.code == 404:
                return
            if err.code != 409:
                raise
            live = await self._get(identity)
            live_md = (live or {}).get("metadata") or {}
            if live is None or live_md.get("uid") != identity.uid:
                return
            if live_md.get("ownerReferences") != md.get("ownerReferences"):
                raise  # the owners changed: decide again
            del preconditions["resourceVersion"]
            try:
                await self.api.delete(path, body)
            except StatusError as again:
                if again.code != 404:
                    raise
                return
        owners = ", ".join(f"{r.kind} {r.name} ({r.uid})" for r in gone)
        log.info("garbage collector: deleted %s %s%s (owner %s), propagationPolicy %s",
                 res.plural, f"{identity.namespace}/" if identity.namespace else "",
                 identity.name, owners, policy)

    async def _patch_refs(self, identity: Identity, latest: dict[str, Any] | None,
                          change: Any) -> dict[str, Any] | None:
        """Rewrite the owner references of `identity` with `change` (a reference to the
        new one, or None to drop it), as a merge patch guarded by UID and resourceVersion;
        retried on conflicts. Returns the patched object (None: gone)."""
        res = self._resource(identity.api_version, identity.kind)
        path = res.path(identity.namespace, identity.name)
        for _ in range(5):
            if latest is None:
                return None
            md = latest.get("metadata") or {}
            if md.get("uid") != identity.uid:
                return None
            refs = [r for r in (change(dict(r)) for r in md.get("ownerReferences") or [])
                    if r is not None]
            patch = {"metadata": {"uid": identity.uid,
                                  "resourceVersion": md.get("resourceVersion"),
                                  "ownerReferences": refs or None}}
            try:
                return await self.api.patch(path, patch, patch_type="merge")
            except StatusError as err:
                if err.code == 404:
                    return None
                if err.code != 409:
                    raise
            latest = await self._get(identity)
        raise _RetryLater(f"{identity}: too many conflicts")

    async def _remove_finalizer(self, node: Node, finalizer: str) -> None:
        identity = node.identity
        res = self._resource(identity.api_version, identity.kind)
        path = res.path(identity.namespace, identity.name)
        for _ in range(5):
            latest = await self._get(identity)
            md = (latest or {}).get("metadata") or {}
            if latest is None or md.get("uid") != identity.uid:
                return
            finalizers = list(md.get("finalizers") or [])
            if finalizer not in finalizers:
                return
            kept = [f for f in finalizers if f != finalizer]
            patch = {"metadata": {"uid": identity.uid,
                                  "resourceVersion": md.get("resourceVersion"),
                                  "finalizers": kept or None}}
            try:
                await self.api.patch(path, patch, patch_type="merge")
            except StatusError as err:
                if err.code == 404:
                    return
                if err.code != 409:
                    raise
                continue
            log.info("garbage collector: removed the %s finalizer of %s", finalizer, identity)
            return
        raise _RetryLater(f"{identity}: too many conflicts")

    async def _process_deleting_dependents(self, node: Node) -> None:
        blocking = node.blocking_dependents()
        if not blocking:
            await self._remove_finalizer(node, FOREGROUND_FINALIZER)
            return
        for dep in blocking:
            if not dep.deleting_dependents:
                self.attempt_to_delete.add(dep.identity.uid)

    # -- attempt to orphan --------------------------------------------------------------

    async def attempt_to_orphan_item(self, uid: str) -> None:
        node = self.graph.get(uid)
        if node is None:
            return
        for dep in list(node.dependents.values()):
            latest = await self._get(dep.identity)
            await self._patch_refs(dep.identity, latest,
                                   lambda r: None if r.get("uid") == uid else r)
        await self._remove_finalizer(node, ORPHAN_FINALIZER)


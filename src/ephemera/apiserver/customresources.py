"""CustomResourceDefinitions served, as upstream's apiextensions-apiserver serves them.

- `CRDStrategy`: the registry rules of `customresourcedefinitions` (v1 defaults, validation
  of `ephemera.api.crd.definition`, generation, `status.storedVersions` keeping the storage
  version, and deletion through the `customresourcecleanup.apiextensions.k8s.io` finalizer).
- `CustomResourceStrategy`: the rules of one served version of a CRD: its schema's defaults,
  validation and CEL rules (`ephemera.api.crd.schema`), generation, the `status` subresource
  (a main-resource write keeps status, a `/status` write keeps the rest, metadata but
  managedFields included).
- `CustomResources`: the controllers of upstream's apiextensions-apiserver in one loop (the
  naming controller's `NamesAccepted`, the establishing controller's `Established`, the
  finalizer's deletion of a deleted CRD's objects), and the serving: every served version of
  every established CRD becomes a `Resource` (`/registry/GROUP/PLURAL/...`, one storage
  shared by the versions, the None conversion rewriting apiVersion), with its OpenAPI
  definitions, Table printer, selectable fields and strategy. A CRD is reconciled within its
  own create request (so its resources are served when the create returns) and on every
  change the CRD watch delivers.
The pure rules are `ephemera.api.crd` (naming: names and conditions); the `scale`
subresource is `ephemera.apiserver.customscale`.

One apiserver per process serves the custom resources of its store (the resource table is
the process's, `ephemera.apiserver.resources.set_custom_resources`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api import errors, field, meta, schema, selectors
from ephemera.api.crd import definition as crddef
from ephemera.api.crd import schema as crschema
from ephemera.api.crd.definition import dict_at as _d
from ephemera.api.crd.definition import list_at as _l
from ephemera.api.crd.naming import (
    deprecation_warnings,
    names_and_conditions,
    set_condition,
    version_priority,
)
from ephemera.api.field import FieldError
from ephemera.api.goformat import go_json, go_type_name
from ephemera.api.validation import finalizer_name_warnings, validate_object_meta_update
from ephemera.apiserver import tables
from ephemera.apiserver.informers import Informer
from ephemera.apiserver.registry import DeleteOptions, Registry
from ephemera.apiserver.resources import Resource, lookup, set_custom_resources
from ephemera.apiserver.strategy import DeleteOutcome, Strategy
from ephemera.store import Watcher

log = logging.getLogger("ephemera.apiserver")

def _crds() -> Resource:
    resource = lookup(crddef.GROUP, "v1", "customresourcedefinitions")
    if resource is None:
        raise KeyError("customresourcedefinitions are not served")
    return resource


CRDS = _crds()
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
RETRY_INTERVAL = 1.0
# How long after a resource stops being served its watches end: upstream's CRD handler lets
# in-flight requests finish for a second before it stops the resource's cacher.
TEARDOWN_DELAY = 1.0


# --- the CRD strategy --------------------------------------------------------------------------


class CRDStrategy(Strategy):
    """`customresourcedefinitions` (see the module docstring)."""

    allow_unconditional_update = False  # a PUT must name the resourceVersion it replaces

    def default(self, obj: dict[str, Any]) -> None:
        crddef.set_defaults(obj)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        meta.ensure_metadata(obj)["generation"] = 1
        obj["status"] = {"acceptedNames": {"kind": "", "plural": ""}, "storedVersions": []}
        self._store_version(obj)

    @staticmethod
    def _store_version(obj: dict[str, Any]) -> None:
        stored = obj.setdefault("status", {}).setdefault("storedVersions", [])
        version = crddef.storage_version(obj)
        if version and version not in stored:
            stored.append(version)

    def create_errors(self, obj: dict[str, Any]) -> list[FieldError]:
        return crddef.validate_create(obj)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        new["status"] = copy.deepcopy(old.get("status") or {})
        if new.get("spec") != old.get("spec"):
            md = meta.ensure_metadata(new)
            md["generation"] = int(meta.ensure_metadata(old).get("generation") or 0) + 1
        self._store_version(new)

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        if subresource == "status":
            return crddef.validate_status_update(new, old)
        return crddef.validate_update(new, old)

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        return [] if subresource else crddef.cel_cost_warnings(new, old)

    def before_delete(self, obj: dict[str, Any], requested: int | None) -> DeleteOutcome:
        """Deleting a CRD first deletes its objects: the cleanup finalizer holds it (set
        here, as upstream's CRD storage sets it) until `CustomResources` has."""
        md = meta.ensure_metadata(obj)
        if not md.get("deletionTimestamp"):
            finalizers = md.setdefault("finalizers", [])
            if CLEANUP_FINALIZER not in finalizers:
                finalizers.append(CLEANUP_FINALIZER)
            set_condition(obj, {"type": "Terminating", "status": "True",
                                 "reason": "InstanceDeletionPending",
                                 "message": "CustomResourceDefinition marked for deletion; "
                                            "CustomResource deletion will begin soon"})
        return super().before_delete(obj, requested)


# --- the strategy of a custom resource ---------------------------------------------------------


class CustomResourceStrategy(Strategy):
    """One served version of a CRD (see the module docstring)."""

    kube_finalizer_names = False  # apimachinery's finalizer check alone; warnings instead
    allow_unconditional_update = False  # a PUT must name the resourceVersion it replaces

    def __init__(self, resource: Resource, version: Mapping[str, Any],
                 terminating: bool = False) -> None:
        super().__init__(resource)
        self.schema: dict[str, Any] | None = _d(_d(version, "schema"),
                                                "openAPIV3Schema") or None
        subresources = _d(version, "subresources")
        self.has_status = isinstance(subresources.get("status"), dict)
        self.scale: dict[str, Any] | None = (subresources["scale"] if isinstance(
            subresources.get("scale"), dict) else None)
        self.terminating = terminating
        # cel-python can take seconds for a rule within upstream's cost limits
        self.validates_in_thread = self.schema is not None and crschema.has_rules(self.schema)

    def zero_nulls(self, obj: dict[str, Any]) -> None:
        """Nothing: a custom resource is unstructured, its nulls are its schema's to judge."""

    def default(self, obj: dict[str, Any]) -> None:
        if self.schema is not None:
            crschema.default(obj, self.schema)

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        """upstream's WarningsOnCreate / WarningsOnUpdate (none on a subresource): the
        finalizers the write adds that are not domain-qualified (`finalizer_name_warnings`);
        then the rules of the schema that could not be checked (they call a CEL function
        ephemera has not). Only a schema with such a rule is evaluated here: the rules are
        not run twice for every write."""
        out = [] if subresource else finalizer_name_warnings(
            meta.ensure_metadata(new).get("finalizers"),
            None if old is None else (old.get("metadata") or {}).get("finalizers"))
        if self.schema is None or not crschema.may_leave_rules_unchecked(self.schema):
            return out
        obj = copy.deepcopy(new)
        crschema.default(obj, self.schema)
        return out + crschema.validate_with_warnings(obj, self.schema, old)[1]

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        if self.terminating:
            raise errors.StatusError(
                405, "MethodNotAllowed",
                "create not allowed while custom resource definition is terminating")
        meta.ensure_metadata(obj)["generation"] = 1
        if self.has_status:
            obj.pop("status", None)

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return self._schema_errors(obj, None)

    def _schema_errors(self, obj: dict[str, Any], old: dict[str, Any] | None
                       ) -> list[FieldError]:
        errs: list[FieldError] = []
        if self.schema is not None:
            errs.extend(crschema.validate(obj, self.schema, old))
        errs.extend(self._scale_errors(obj))
        return errs

    def _scale_errors(self, obj: dict[str, Any]) -> list[FieldError]:
        """`ValidateScaleSpec` and `ValidateScaleStatus`: the replicas at the scale's paths
        are int64s (`unstructured.NestedInt64`, whose error prints the Go zero value 0 as the
        bad value) within 0 and 2147483647; the field is the path as the CRD spells it."""
        if self.scale is None:
            return []
        errs: list[FieldError] = []
        for key in ("specReplicasPath", "statusReplicasPath"):
            path = str(self.scale.get(key) or "")
            values = tables.jsonpath_values(obj, path)
            if not values:
                continue
            value = values[0]
            if go_type_name(value) != "int64":
                errs.append(field.invalid(path, 0, (
                    f".{path.removeprefix('.')} accessor error: {go_json(value)} is of the "
                    f"type {go_type_name(value)}, expected int64")))
            elif value < 0:
                errs.append(field.invalid(path, value, "should be a non-negative integer"))
            elif value > 2**31 - 1:
                errs.append(field.invalid(path, value,
                                          "should be less than or equal to 2147483647"))
        return errs

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = validate_object_meta_update(meta.ensure_metadata(new),
                                           meta.ensure_metadata(old), kube_finalizers=False)
        errs.extend(self._schema_errors(new, old))
        return errs

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        """upstream's statusStrategy.PrepareForUpdate: the stored object with the write's
        `status` (none if it has none) and its managedFields (which record the status
        write); the rest, metadata included, stays as stored."""
        has_status, status = "status" in new, new.get("status")
        managed = meta.ensure_metadata(new).get("managedFields")
        type_meta = {k: new[k] for k in ("apiVersion", "kind") if k in new}
        new.clear()
        new.update(copy.deepcopy(old), **type_meta)
        md = meta.ensure_metadata(new)
        if managed is None:
            md.pop("managedFields", None)
        else:
            md["managedFields"] = managed
        if has_status:
            new["status"] = status
        else:
            new.pop("status", None)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        super().prepare_for_update(new, old)
        skip = {"metadata", "status"} if self.has_status else {"metadata"}
        if any(new.get(k) != old.get(k) for k in (set(new) | set(old)) - skip):
            md = meta.ensure_metadata(new)
            md["generation"] = int(meta.ensure_metadata(old).get("generation") or 0) + 1


# --- serving -----------------------------------------------------------------------------------


def _served_versions(crd: Mapping[str, Any]) -> list[dict[str, Any]]:
    return sorted((v for v in crddef.versions(crd) if v.get("served")),
                  key=lambda v: version_priority(str(v.get("name", ""))))


def resources_of(crd: Mapping[str, Any]) -> list[tuple[Resource, dict[str, Any]]]:
    """The `Resource` of each served version of `crd`, with the version."""
    spec = _d(crd, "spec")
    group = str(spec.get("group") or "")
    names = _d(_d(crd, "status"), "acceptedNames") or _d(spec, "names")
    plural, kind = str(names.get("plural") or ""), str(names.get("kind") or "")
    storage = crddef.storage_version(crd)
    out: list[tuple[Resource, dict[str, Any]]] = []
    for version in _served_versions(crd):
        name = str(version.get("name"))
        subresources = tuple(s for s in ("status", "scale")
                             if isinstance(_d(version, "subresources").get(s), dict))
        out.append((Resource(
            group, name, plural, kind, spec.get("scope") == "Namespaced",
            crschema.definition_name(group, name, kind),
            short_names=tuple(str(s) for s in _l(names, "shortNames")),
            categories=tuple(str(c) for c in _l(names, "categories")),
            subresources=subresources, singular=str(names.get("singular") or ""),
            storage_prefix=f"{group}/{plural}", custom=True, storage_version=storage,
            list_kind_name=str(names.get("listKind") or ""),
            warnings=deprecation_warnings(spec, version)), version))
    return out


def _finalizing(crd: Mapping[str, Any]) -> bool:
    """A deleted CRD whose objects the cleanup finalizer has yet to delete."""
    md = _d(crd, "metadata")
    return bool(md.get("deletionTimestamp")) and CLEANUP_FINALIZER in _l(md, "finalizers")


class CustomResources:
    """The CRD controllers and the serving of custom resources (see the module docstring)."""

    def __init__(self, registry: Registry, *, retry_interval: float = RETRY_INTERVAL) -> None:
        self.registry = registry
        self.retry_interval = retry_interval
        registry.set_strategy(CRDS, CRDStrategy(CRDS, registry.gates))
        self.informer = Informer(registry.store, registry.codec(CRDS),
                                 retry_interval=retry_interval,
                                 watch_cache=registry.watch_cache)
        self.informer.mirror.listeners.append(lambda _namespace: self._changed.set())
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        # Every resource whose strategy is set here: the served ones, and the storage
        # version of a deleted CRD never established, set only while its finalizer deletes
        # its objects. `_serve` is the one place they are dropped.
        self._installed: set[Resource] = set()
        # Ending the watches of resources no longer served (`_end_watches`).
        self._teardowns: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.reconcile()
        await self.informer.start()
        self._task = asyncio.get_running_loop().create_task(self._loop(),
                                                            name="crd-controllers")

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
        await cancel_and_wait(*self._teardowns)
        await self.informer.close()

    async def object_created(self, resource: Resource, obj: dict[str, Any]) -> None:
        """The registry's create hook: a new CRD is named, established and served before
        its create returns."""
        if resource == CRDS:
            await self.reconcile()

    async def _loop(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                again = await self.reconcile()
            except Exception:
                log.exception("reconciling CustomResourceDefinitions failed")
                again = True
            if again:
                await asyncio.sleep(self.retry_interval)
                self._changed.set()

    async def _list(self) -> list[dict[str, Any]]:
        page = await self.registry.list(CRDS, "")
        codec = self.registry.codec(CRDS)
        return [codec.decode(kv) for kv in page.kvs]

    async def reconcile(self) -> bool:
        """Every CRD's names and conditions, the deletion of deleted ones' objects, then
        the served table; True when something is left to retry."""
        async with self._lock:
            retry = False
            crds = await self._list()
            for crd in crds:
                try:
                    if meta.ensure_metadata(crd).get("deletionTimestamp"):
                        retry = await self._finalize(crd) or retry
                    else:
                        await self._name(crd, crds)
                except errors.StatusError as err:
                    log.warning("CustomResourceDefinition %s: %s", meta.name_of(crd),
                                err.message)
                    retry = True
            self._serve(await self._list())
            return retry

    async def _name(self, crd: dict[str, Any], crds: list[dict[str, Any]]) -> None:
        names, accepted, established = names_and_conditions(crd, crds)
        wanted = copy.deepcopy(crd)
        wanted.setdefault("status", {})["acceptedNames"] = names
        set_condition(wanted, accepted)
        set_condition(wanted, established)
        if wanted.get("status") == crd.get("status"):
            return
        expected_rv = meta.ensure_metadata(crd).get("resourceVersion")

        async def update(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is None or meta.ensure_metadata(current).get(
                    "resourceVersion") != expected_rv:
                raise errors.conflict(CRDS.plural, meta.name_of(crd), group=CRDS.group)
            current["status"] = wanted["status"]
            return current

        await self.registry.update(CRDS, "", meta.name_of(crd), update)
        crd["status"] = wanted["status"]

    async def _finalize(self, crd: dict[str, Any]) -> bool:
        """Delete the objects of a deleted CRD, then let it go; True to try again."""
        md = meta.ensure_metadata(crd)
        if CLEANUP_FINALIZER not in (md.get("finalizers") or []):
            return False
        served = resources_of(crd)
        remaining = 0
        if served:
            resource, version = next(((r, v) for r, v in served
                                      if r.version == r.storage_version), served[0])
            if resource not in self._installed:  # never established: nothing routes to it
                self._install([(resource, version)], {})
            page = await self.registry.list(resource, "")
            prefix = resource.key_prefix()
            for kv in page.kvs:
                parts = kv.key[len(prefix):].split("/")
                namespace, name = (parts[0], parts[1]) if resource.namespaced else ("", parts[0])
                try:
                    result = await self.registry.delete(resource, namespace, name,
                                                        DeleteOptions())
                except errors.StatusError as err:
                    if err.code != 404:
                        remaining += 1
                    continue
                if not result.deleted:
                    remaining += 1
        if remaining:
            return True

        async def release(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is None:
                raise errors.not_found(CRDS.plural, meta.name_of(crd), CRDS.group)
            cmd = meta.ensure_metadata(current)
            cmd["finalizers"] = [f for f in cmd.get("finalizers") or []
                                 if f != CLEANUP_FINALIZER]
            if not cmd["finalizers"]:
                del cmd["finalizers"]
            return current

        await self.registry.update(CRDS, "", meta.name_of(crd), release)
        log.info("CustomResourceDefinition %s: its objects are deleted", meta.name_of(crd))
        return False

    def _end_watches(self, watchers: list[Watcher]) -> None:
        """End the watches of a resource no longer served (its CRD deleted, or its version
        no longer served), `TEARDOWN_DELAY` later, as upstream's CRD handler tears the
        resource's storage down (`crdHandler.tearDown`: the cacher stops and closes every
        watcher's result channel): each client's stream ends cleanly, without an ERROR
        event, after the events already sent to it (the DELETED of every object the
        finalizer deleted); a new watch of it is a 404 meanwhile."""
        if not watchers:
            return

        async def end() -> None:
            try:
                await asyncio.sleep(TEARDOWN_DELAY)
            finally:
                for watcher in watchers:
                    await watcher.close()

        task = asyncio.get_running_loop().create_task(end(), name="crd-watch-teardown")
        self._teardowns.add(task)
        task.add_done_callback(self._teardowns.discard)

    def _install(self, entries: list[tuple[Resource, dict[str, Any]]],
                 terminating: Mapping[str, bool]) -> None:
        for resource, version in entries:
            self.registry.set_strategy(resource, CustomResourceStrategy(
                resource, version, terminating.get(resource.group + "/" + resource.plural,
                                                   False)))
            self._installed.add(resource)

    def _serve(self, crds: list[dict[str, Any]]) -> None:
        """Serve every served version of every established CRD (and nothing else); drop the
        strategy of every other resource installed here, but the ones a deleted CRD's
        finalizer still deletes objects through."""
        entries: list[tuple[Resource, dict[str, Any]]] = []
        terminating: dict[str, bool] = {}
        group_versions: list[tuple[str, str]] = []
        for crd in sorted(crds, key=meta.name_of):
            if not crddef.condition_true(crd, crddef.ESTABLISHED):
                continue
            pairs = resources_of(crd)
            for resource, _ in pairs:
                key = resource.group + "/" + resource.plural
                terminating[key] = bool(meta.ensure_metadata(crd).get("deletionTimestamp"))
                if (resource.group, resource.version) not in group_versions:
                    group_versions.append((resource.group, resource.version))
            entries.extend(pairs)
        by_group: dict[str, list[str]] = {}
        for group, version_name in group_versions:
            by_group.setdefault(group, []).append(version_name)
        ordered = [(g, v) for g, vs in by_group.items()
                   for v in sorted(vs, key=version_priority)]
        defs: dict[str, dict[str, Any]] = {}
        printers: dict[Resource, tables.Printer] = {}
        for resource, version in entries:
            root = _d(_d(version, "schema"), "openAPIV3Schema") or None
            defs[resource.definition] = crschema.definition(
                root, resource.group, resource.version, resource.kind)
            defs[resource.definition + "List"] = crschema.list_definition(
                resource.definition, resource.group, resource.version, resource.list_kind)
            printers[resource] = tables.custom_printer(
                [c for c in _l(version, "additionalPrinterColumns") if isinstance(c, dict)])
            selectors.set_kind_fields(resource.selector_kind, {
                str(f.get("jsonPath", "")).lstrip("."):
                    str(f.get("jsonPath", "")).lstrip(".").split(".")
                for f in _l(version, "selectableFields") if isinstance(f, dict)})
        self._install(entries, terminating)
        keep = {resource for resource, _ in entries}
        keep.update(resource for crd in crds if _finalizing(crd)
                    for resource, _ in resources_of(crd))
        for resource in self._installed - keep:
            self._end_watches(self.registry.forget(resource))
            selectors.set_kind_fields(resource.selector_kind, None)
        self._installed &= keep
        schema.set_custom_definitions(defs)
        tables.set_custom_printers(printers)
        set_custom_resources(tuple(r for r, _ in entries), tuple(ordered))

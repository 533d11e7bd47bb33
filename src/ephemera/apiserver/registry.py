"""Storage glue between API objects and the Store, as upstream's generic registry
(`k8s.io/apiserver/pkg/registry/generic/registry.Store`) does it:

- objects <-> store bytes: compact JSON with `kind`, `apiVersion`, `metadata` first and
  without `metadata.resourceVersion`, which is the key's `mod_revision` and is spliced back
  into the bytes on the way out (no decode and re-encode for a plain get, list or watch);
- create (system fields `uid`, `creationTimestamp`, `generateName` with upstream's retries),
  get and list as `ephemera.api.listoptions` says (a revision not older than, or exactly
  one; selectors; `limit`/`continue` with an opaque token that pins the list revision; 410
  with upstream's messages on compaction), guaranteed update (the compare-and-swap retry
  loop; a no-op writes nothing and keeps the resourceVersion), and delete (preconditions,
  graceful deletion, finalizers) with `dryRun`;
- store errors turned into Status errors (`AlreadyExists`, `Conflict`, `NotFound`);
- the write pipeline around the store in upstream's order (`create`, `prepare_create`,
  `prepare_update`, `delete`): the kind's defaults, mutating admission, the strategy's
  BeforeCreate / BeforeUpdate with validation, validating admission, then the write (see
  `ephemera.apiserver.admission` for the seam and the exact sequence). The registry knows
  admission only through that seam (`Admission`: `admit`, `validate`); what the plugins read
  and write is their own context (`ephemera.apiserver.admissioncontext`), not the registry;
- hooks run after a create is stored (`add_create_hook`; the namespace lifecycle creates a
  new namespace's `default` ServiceAccount with one);
- a resource's write hooks (`set_write_hooks`), upstream's `BeginCreate` / `BeginUpdate` /
  `AfterDelete`: they run after validation, just before the store write, and are told
  whether the write happened (Services allocate and release cluster IPs and node ports).

Per-kind rules come from `ephemera.apiserver.strategy`, with the gates the registry was built
with.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

import orjson

from ephemera.api import errors, meta
from ephemera.api.deletion import gc_finalizers
from ephemera.api.errors import StatusError
from ephemera.api.featuregates import FeatureGates
from ephemera.api.jsoncopy import copy_decoded
from ephemera.api.listoptions import (
    BLOCK_TIMEOUT,
    CONTINUE_EXPIRED,
    INCONSISTENT_CONTINUE,
    LIST_EXPIRED,
    ExpiredContinue,
    ListRead,
    encode_continue,
    too_large_resource_version,
)
from ephemera.api.selectors import Selection
from ephemera.apiserver.admission import Admission, AdmissionChain, AdmissionRequest, Operation
from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.resources import Resource
from ephemera.apiserver.strategy import Strategy, strategy_for
from ephemera.apiserver.watchcache import ResourceCache, WatchCache
from ephemera.store import (
    Compacted,
    FutureRevision,
    KeyExists,
    KeyNotFound,
    KeyValue,
    RevisionMismatch,
    Store,
    Watcher,
)

log = logging.getLogger("ephemera.apiserver")

# How many times a guaranteed update re-reads and retries after losing a compare-and-swap.
MAX_UPDATE_ATTEMPTS = 32
# Name generation retries, as upstream's RetryGenerateName (7 extra attempts).
GENERATE_NAME_ATTEMPTS = 8
# Keys read per store page while filtering a list with selectors (also when the list has no
# limit: only the matching objects are kept, never the whole range at once).
LIST_PAGE = 500
# Seconds between looks at the store's revision while a read waits for a newer one.
FRESHNESS_POLL = 0.05
# upstream's `--event-ttl` default (1h): an Event is deleted this long after its last write.
DEFAULT_EVENT_TTL = 3600

# --- encoding ------------------------------------------------------------------------------


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON (orjson; the standard library for what orjson refuses, such as
    integers beyond 64 bits)."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def loads(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


@dataclass(frozen=True)
class Codec:
    """Encodes one resource's objects for the store and splices resourceVersion back in."""

    resource: Resource
    prefix: bytes = field(init=False)

    def __post_init__(self) -> None:
        head = dumps({"kind": self.resource.kind, "apiVersion": self.resource.api_version})
        object.__setattr__(self, "prefix", head[:-1] + b',"metadata":{')

    def encode(self, obj: dict[str, Any]) -> bytes:
        """Store bytes: kind, apiVersion (a custom resource's storage version) and metadata
        (without resourceVersion) first."""
        md = obj.get("metadata") or {}
        if "resourceVersion" in md:
            md = {k: v for k, v in md.items() if k != "resourceVersion"}
        out: dict[str, Any] = {"kind": self.resource.kind,
                               "apiVersion": self.resource.storage_api_version, "metadata": md}
        for key, value in obj.items():
            if key not in out:
                out[key] = value
        return dumps(out)

    def decode(self, kv: KeyValue, parsed: dict[str, Any] | None = None) -> dict[str, Any]:
        """The object of `kv` as served (`parsed`: its stored value, already parsed, which
        becomes the answer)."""
        obj: dict[str, Any] = loads(kv.value) if parsed is None else parsed
        meta.ensure_metadata(obj)["resourceVersion"] = str(kv.mod_revision)
        if self.resource.custom:
            # The None conversion of custom resources: only apiVersion changes.
            obj["apiVersion"] = self.resource.api_version
        return obj

    def raw(self, kv: KeyValue) -> bytes:
        """The object as response bytes, resourceVersion included, without a decode when the
        stored bytes have our layout."""
        value = kv.value
        n = len(self.prefix)
        if value.startswith(self.prefix):
            rv = b'"resourceVersion":"%d"' % kv.mod_revision
            if value[n:n + 1] != b"}":
                rv += b","
            return value[:n] + rv + value[n:]
        return dumps(self.decode(kv))


_P = ParamSpec("_P")
_T = TypeVar("_T")


async def run_validation(strategy: Strategy, check: Callable[_P, _T],
                         *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """`check` (a strategy's `validate_create`, `before_update` or `warnings`) on the event
    loop, or, for a strategy whose validation may take long (`validates_in_thread`: a custom
    resource with CEL rules), in a worker thread, so that other requests go on meanwhile.
    The object is this request's own until the check returns; the CEL cost meter is per
    evaluation."""
    if strategy.validates_in_thread:
        return await asyncio.to_thread(check, *args, **kwargs)
    return check(*args, **kwargs)


def watch_route(cache: ResourceCache, selection: Selection | None) -> str | None:
    """The value of the cache's index field that `selection` requires (an `=` term), by
    which its watcher is found; None: it is offered every event."""
    if cache.index is None or selection is None:
        return None
    return selection.fields.exact(cache.index.field)


# --- results -------------------------------------------------------------------------------


@dataclass
class ListPage:
    """A list: the matching keys (with the decoded objects where a selector needed them),
    the revision it was read at, and the continue token when more remain."""

    kvs: list[KeyValue]
    objects: list[dict[str, Any] | None]
    revision: int
    continue_token: str = ""
    # With a continue token and no selector: the items after this page (upstream's
    # `remainingItemCount`, which it leaves out when a selector filters).
    remaining_item_count: int | None = None


@dataclass
class DeleteOptions:
    grace_period_seconds: int | None = None
    propagation_policy: str | None = None
    orphan_dependents: bool | None = None  # the legacy option (before propagationPolicy)
    precondition_uid: str | None = None
    precondition_resource_version: str | None = None
    dry_run: bool = False


@dataclass
class DeleteResult:
    obj: dict[str, Any]
    deleted: bool  # False: still there (graceful deletion or finalizers)


UpdateFn = Callable[[dict[str, Any] | None], Awaitable[dict[str, Any]]]
# Told whether the write it prepared was stored (False: undo what was prepared).
FinishFn = Callable[[bool], Awaitable[None]]


class WriteHooks(Protocol):
    """A resource's work around its store writes (upstream's BeginCreate, BeginUpdate and
    AfterDelete): may change the object, raise a Status error, or return what to do once the
    write succeeded or failed."""

    async def begin_create(self, obj: dict[str, Any], dry_run: bool) -> FinishFn: ...

    async def begin_update(self, new: dict[str, Any], old: dict[str, Any],
                           dry_run: bool) -> FinishFn: ...

    async def after_delete(self, obj: dict[str, Any], dry_run: bool) -> None: ...

# Called with the resource and the stored object after a create (not on dryRun).
CreateHook = Callable[[Resource, dict[str, Any]], Awaitable[None]]


class Registry:
    """Objects of every served resource in one Store, written through `admission` (none by
    default) with the strategies of `gates` (ephemera's defaults by default)."""

    def __init__(self, store: Store, *, gates: FeatureGates | None = None,
                 admission: Admission | None = None, watch_cache: WatchCache | None = None,
                 event_ttl: int = DEFAULT_EVENT_TTL) -> None:
        self.store = store
        # `--event-ttl`: how long an Event is kept after its last write (seconds; 0: ever).
        self.event_ttl = event_ttl
        # Serves the lists and watches that need not be consistent (`watchcache`); None:
        # every read from the store (upstream's `--watch-cache=false`).
        self.watch_cache = watch_cache
        self.gates = gates if gates is not None else FeatureGates()
        self.admission: Admission = admission if admission is not None else AdmissionChain()
        self._codecs: dict[Resource, Codec] = {}
        self._strategies: dict[Resource, Strategy] = {}
        self._create_hooks: list[CreateHook] = []
        self._write_hooks: dict[Resource, WriteHooks] = {}
        # The revision of this registry's last write of each resource: what a watch-fed
        # cache must have seen to reflect this apiserver's own writes.
        self._write_revisions: dict[Resource, int] = {}
        # How long a read of a revision newer than the store's waits for it.
        self.block_timeout = BLOCK_TIMEOUT
        # The open watches of each custom resource, ended when it is no longer served.
        self._custom_watches: dict[Resource, weakref.WeakSet[Watcher]] = {}

    def _ttl(self, resource: Resource) -> int:
        """The TTL of `resource`'s objects in the store: Events expire (upstream's event
        storage writes each with `--event-ttl`, on create and on every update)."""
        core_event = resource.group == "" and resource.plural == "events" and not resource.custom
        return self.event_ttl if core_event else 0

    def write_revision(self, resource: Resource) -> int:
        """The store revision of this registry's last write of `resource` (0: none yet)."""
        return self._write_revisions.get(resource, 0)

    def _wrote(self, resource: Resource, revision: int) -> None:
        if revision > self._write_revisions.get(resource, 0):
            self._write_revisions[resource] = revision

    def codec(self, resource: Resource) -> Codec:
        codec = self._codecs.get(resource)
        if codec is None:
            codec = self._codecs[resource] = Codec(resource)
        return codec

    def strategy(self, resource: Resource) -> Strategy:
        strategy = self._strategies.get(resource)
        if strategy is None:
            strategy = self._strategies[resource] = strategy_for(resource, self.gates)
        return strategy

    def set_strategy(self, resource: Resource, strategy: Strategy) -> None:
        """Use `strategy` for `resource` (a custom resource's, built from its CRD)."""
        self._strategies[resource] = strategy

    def forget(self, resource: Resource) -> list[Watcher]:
        """Drop what was kept for a resource no longer served (a removed CRD version).
        Returns its open watches, for the caller to end."""
        self._strategies.pop(resource, None)
        self._codecs.pop(resource, None)
        return list(self._custom_watches.pop(resource, ()))

    def set_write_hooks(self, resource: Resource, hooks: WriteHooks) -> None:
        """Run `hooks` around every write of `resource`."""
        self._write_hooks[resource] = hooks

    async def _after_delete(self, resource: Resource, obj: dict[str, Any],
                            dry_run: bool) -> None:
        hooks = self._write_hooks.get(resource)
        if hooks is not None:
            await hooks.after_delete(obj, dry_run)

    def add_create_hook(self, hook: CreateHook) -> None:
        """Run `hook` after every stored create (in order; a hook's failure is logged)."""
        self._create_hooks.append(hook)

    async def _created(self, resource: Resource, obj: dict[str, Any]) -> None:
        for hook in self._create_hooks:
            try:
                await hook(resource, obj)
            except Exception:
                log.exception("after creating %s %s: hook failed", resource.plural,
                              _ref(meta.namespace_of(obj), meta.name_of(obj)))

    # -- admission --------------------------------------------------------------------------

    def admission_request(
        self,
        operation: Operation,
        resource: Resource,
        namespace: str,
        name: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None = None,
        *,
        subresource: str = "",
        user: UserInfo | None = None,
        dry_run: bool = False,
    ) -> AdmissionRequest:
        return AdmissionRequest(operation, resource, subresource, namespace, name, obj, old,
                                user, dry_run, self.gates)

    async def admit(self, req: AdmissionRequest) -> None:
        """Both admission phases for a request the registry does not store itself
        (`pods/binding`): mutating, then validating."""
        await self.admission.admit(req)
        await self.admission.validate(req)

    async def prepare_create(self, resource: Resource, obj: dict[str, Any], *,
                             user: UserInfo | None = None, dry_run: bool = False
                             ) -> dict[str, Any]:
        """Everything a create does before the store write, for an object with its name set
        (a create through PUT or server-side apply): defaults, mutating admission,
        BeforeCreate, validation, validating admission. Returns the object to store."""
        strategy = self.strategy(resource)
        strategy.zero_nulls(obj)
        strategy.default(obj)
        md = meta.ensure_metadata(obj)
        req = self.admission_request("CREATE", resource, md.get("namespace") or "",
                                     md.get("name") or "", obj, user=user, dry_run=dry_run)
        await self.admission.admit(req)
        obj = req.obj if req.obj is not None else obj
        strategy.before_create(obj)
        strategy.record_user(obj, user)
        await run_validation(strategy, strategy.validate_create, obj)
        req.obj = obj
        await self.admission.validate(req)
        return obj

    async def prepare_update(self, resource: Resource, new: dict[str, Any],
                             old: dict[str, Any], *, subresource: str = "",
                             user: UserInfo | None = None, dry_run: bool = False
                             ) -> dict[str, Any]:
        """Everything an update (or patch, or apply) of `old` into `new` does before the
        compare-and-swap: defaults, mutating admission, BeforeUpdate with validation,
        validating admission. Returns the object to store. `old` is read, never changed:
        admission gets it as it is (plugins read `req.old`), not a copy."""
        strategy = self.strategy(resource)
        strategy.zero_nulls(new)
        strategy.default(new)
        old_md = meta.ensure_metadata(old)
        req = self.admission_request("UPDATE", resource, old_md.get("namespace") or "",
                                     old_md.get("name") or "", new, old,
                                     subresource=subresource, user=user, dry_run=dry_run)
        await self.admission.admit(req)
        new = req.obj if req.obj is not None else new
        await run_validation(strategy, strategy.before_update, new, old, subresource)
        req.obj = new
        await self.admission.validate(req)
        return new

    # -- reads ------------------------------------------------------------------------------

    async def get_kv(self, resource: Resource, namespace: str, name: str,
                     min_revision: int = 0) -> KeyValue:
        """The stored object, read at a revision not older than `min_revision` (0: any)."""
        if min_revision:
            await self.ensure_fresh(min_revision)
        kv = await self.store.get(resource.key(namespace, name))
        if kv is None:
            raise errors.not_found(resource.plural, name, resource.group)
        return kv

    def cached_object(self, resource: Resource, namespace: str, name: str
                      ) -> dict[str, Any] | None:
        """The watch cache's copy of an object (any stored version of it, perhaps not the
        latest), decoded; None when the cache has none. Never an answer to a client: a
        starting point or a hint (what a body shares with some stored version)."""
        if self.watch_cache is None:
            return None
        kv = self.watch_cache.cached(resource.key_prefix(), resource.key(namespace, name))
        return self.codec(resource).decode(kv) if kv is not None else None

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        return self.codec(resource).decode(await self.get_kv(resource, namespace, name))

    async def ensure_fresh(self, revision: int) -> int:
        """Wait until the store has reached `revision` (as upstream's watch cache waits for
        itself), at most `block_timeout` seconds; the current revision, or 504 Too large
        resource version."""
        current = await self.store.current_revision()
        if revision <= current:
            return current
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.block_timeout
        while loop.time() < deadline:
            await asyncio.sleep(min(FRESHNESS_POLL, max(deadline - loop.time(), 0)))
            current = await self.store.current_revision()
            if revision <= current:
                return current
        raise too_large_resource_version(revision, current)

    async def list(
        self,
        resource: Resource,
        namespace: str,
        selection: Selection | None = None,
        read: ListRead | None = None,
    ) -> ListPage:
        """A list of `resource` (in `namespace`, or everywhere when empty) filtered by
        `selection`, read as `read` says (`ephemera.api.listoptions`; None: all, now)."""
        read = read or ListRead()
        prefix = self._narrow(resource, namespace, selection) or resource.key_prefix(namespace)
        source: Store | ResourceCache = self.store
        if read.cacheable and self.watch_cache is not None:
            cache = await self.watch_cache.ready(resource.key_prefix())
            if cache is not None and cache.revision >= read.min_revision:
                source = cache
        if source is self.store and (read.revision or read.min_revision):
            await self.ensure_fresh(read.revision or read.min_revision)
        start_after = prefix + read.start_after if read.continued else ""
        revision, limit = read.revision, read.limit
        codec = self.codec(resource)
        filtering = selection is not None and not selection.empty
        try:
            if isinstance(source, ResourceCache):
                return self._list_cached(source, prefix, selection, limit, codec)
            if not filtering:
                result = await self.store.list(prefix, limit=limit, start_after=start_after,
                                               revision=revision)
                if result.more and result.kvs:
                    token = encode_continue(result.kvs[-1].key[len(prefix):], result.revision)
                    return ListPage(result.kvs, [None] * len(result.kvs), result.revision,
                                    token, result.remaining)
                return ListPage(result.kvs, [None] * len(result.kvs), result.revision)
            kvs: list[KeyValue] = []
            objects: list[dict[str, Any] | None] = []
            page = max(limit, LIST_PAGE)
            while True:
                result = await self.store.list(prefix, limit=page, start_after=start_after,
                                               revision=revision)
                revision = result.revision
                for i, kv in enumerate(result.kvs):
                    obj = codec.decode(kv)
                    if selection is not None and not selection.matches(obj):
                        continue
                    kvs.append(kv)
                    objects.append(obj)
                    if limit and len(kvs) >= limit:
                        more = result.more or i + 1 < len(result.kvs)
                        token = ""
                        if more:
                            token = encode_continue(kv.key[len(prefix):], revision)
                        return ListPage(kvs, objects, revision, token)
                if not result.more or not result.kvs:
                    return ListPage(kvs, objects, revision)
                start_after = result.kvs[-1].key
        except Compacted:
            if read.continued:
                if not read.start_after:
                    raise errors.expired(CONTINUE_EXPIRED) from None
                fresh = encode_continue(read.start_after, -1)
                raise ExpiredContinue(INCONSISTENT_CONTINUE, fresh) from None
            raise errors.expired(LIST_EXPIRED) from None
        except FutureRevision as err:
            raise too_large_resource_version(err.requested, err.current) from None

    @staticmethod
    def _list_cached(cache: ResourceCache, prefix: str, selection: Selection | None,
                     limit: int, codec: Codec) -> ListPage:
        """A list from the watch cache: one snapshot at its revision, filtered in memory; a
        `limit` cuts it with a continue token whose next pages come from the store at that
        revision (as upstream's cacher pages)."""
        result = cache.list(prefix)
        kvs: list[KeyValue] = []
        objects: list[dict[str, Any] | None] = []
        filtering = selection is not None and not selection.empty
        for i, kv in enumerate(result.kvs):
            obj = codec.decode(kv) if filtering else None
            if selection is not None and obj is not None and not selection.matches(obj):
                continue
            kvs.append(kv)
            objects.append(obj)
            if limit and len(kvs) >= limit and i + 1 < len(result.kvs):
                token = encode_continue(kv.key[len(prefix):], result.revision)
                remaining = None if filtering else len(result.kvs) - i - 1
                return ListPage(kvs, objects, result.revision, token, remaining)
        return ListPage(kvs, objects, result.revision)

    def _narrow(self, resource: Resource, namespace: str, selection: Selection | None
                ) -> str | None:
        """A smaller key prefix implied by `metadata.name=` / `metadata.namespace=` terms."""
        if selection is None or selection.fields.empty:
            return None
        ns = namespace
        if resource.namespaced and not ns:
            ns = selection.fields.exact("metadata.namespace") or ""
        name = selection.fields.exact("metadata.name")
        if name and (ns or not resource.namespaced) and "/" not in name:
            return resource.key(ns, name)
        if ns and ns != namespace and "/" not in ns:
            return resource.key_prefix(ns)
        return None

    async def watch(self, resource: Resource, namespace: str, after_revision: int,
                    selection: Selection | None = None) -> Watcher:
        """A watch of `resource` from `after_revision`: from the watch cache when its history
        reaches that far back, else from the store. A custom resource's is kept until
        `forget` hands it over; one that started as its resource was forgotten is ended."""
        watcher = await self._watch(resource, namespace, after_revision, selection)
        if resource.custom:
            if resource in self._strategies:
                self._custom_watches.setdefault(resource, weakref.WeakSet()).add(watcher)
            else:
                await watcher.close()
        return watcher

    async def _watch(self, resource: Resource, namespace: str, after_revision: int,
                     selection: Selection | None) -> Watcher:
        prefix = self._narrow(resource, namespace, selection) or resource.key_prefix(namespace)
        if self.watch_cache is not None:
            cache = await self.watch_cache.ready(resource.key_prefix())
            watcher = None
            if cache is not None:
                watcher = cache.watch(prefix, after_revision,
                                      route=watch_route(cache, selection))
            if watcher is not None:
                return watcher
        return await self.store.watch(prefix, after_revision)

    # -- writes -----------------------------------------------------------------------------

    async def create(self, resource: Resource, obj: dict[str, Any], *, dry_run: bool = False,
                     prepared: bool = False, user: UserInfo | None = None) -> dict[str, Any]:
        """Create `obj` (its namespace already checked against the request's). Unless
        `prepared`: the kind's defaults, mutating admission, the system fields and the
        strategy's create rules, a name from generateName, validation, validating admission.
        Returns the stored object with its resourceVersion."""
        strategy = self.strategy(resource)
        req: AdmissionRequest | None = None
        if not prepared:
            strategy.zero_nulls(obj)
            strategy.default(obj)
            md = meta.ensure_metadata(obj)
            req = self.admission_request("CREATE", resource, md.get("namespace") or "",
                                         md.get("name") or "", obj, user=user,
                                         dry_run=dry_run)
            await self.admission.admit(req)
            if req.obj is not None:
                obj = req.obj
            strategy.before_create(obj)
            strategy.record_user(obj, user)
        md = meta.ensure_metadata(obj)
        generated = not md.get("name") and bool(md.get("generateName"))
        codec = self.codec(resource)
        namespace = md.get("namespace") or ""
        attempts = GENERATE_NAME_ATTEMPTS if generated else 1
        finish: FinishFn | None = None
        stored = False
        try:
            for attempt in range(attempts):
                if generated:
                    md["name"] = meta.generate_name(md["generateName"])
                if attempt == 0 and req is not None:
                    await run_validation(strategy, strategy.validate_create, obj)
                    req.obj = obj
                    await self.admission.validate(req)
                hooks = self._write_hooks.get(resource)
                if attempt == 0 and hooks is not None:
                    finish = await hooks.begin_create(obj, dry_run)
                result = await self._create_attempt(resource, obj, codec, namespace, generated,
                                                    attempt + 1 < attempts, dry_run)
                if result is None:
                    continue
                stored = not dry_run
                return result
        finally:
            if finish is not None:
                await finish(stored)
        raise AssertionError("unreachable")

    async def _create_attempt(self, resource: Resource, obj: dict[str, Any], codec: Codec,
                              namespace: str, generated: bool, retry: bool, dry_run: bool
                              ) -> dict[str, Any] | None:
        """One store create of `obj`; None: a generated name was taken, try another."""
        md = meta.ensure_metadata(obj)
        name = md["name"]
        key = resource.key(namespace, name)
        data = codec.encode(obj)
        if dry_run:
            if await self.store.get(key) is not None:
                if generated and retry:
                    return None
                raise self._exists(resource, name, generated)
            return obj
        try:
            kv = await self.store.create(key, data, ttl=self._ttl(resource))
        except KeyExists:
            if generated and retry:
                return None
            raise self._exists(resource, name, generated) from None
        self._wrote(resource, kv.mod_revision)
        md["resourceVersion"] = str(kv.mod_revision)
        _log_write("created", resource, namespace, name, kv.mod_revision)
        if self._create_hooks:
            await self._created(resource, obj)
        return obj

    @staticmethod
    def _exists(resource: Resource, name: str, generated: bool) -> StatusError:
        if generated:
            return errors.generate_name_conflict(resource.plural, name, resource.group)
        return errors.already_exists(resource.plural, name, resource.group)

    async def update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        update: UpdateFn,
        *,
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """The guaranteed update: read the current object, let `update` compute the new one
        (it gets None when the object does not exist and may then return an object to create,
        already prepared), compare-and-swap, retry on a lost race. A result equal to the
        current object writes nothing. Returns (object, created).

        As upstream's cacher, the first attempt starts from the watch cache's copy when it
        has one (no store read); the compare-and-swap catches a stale copy, and a stale
        start that fails the update or changes nothing is tried again from the store's
        object (upstream's `origStateIsCurrent`), so answers are those of a store read. A
        dry run, which writes nothing to catch a stale copy with, reads the store (as
        upstream's `DryRunnableStorage`), so its admission runs once."""
        key = resource.key(namespace, name)
        codec = self.codec(resource)
        cached = (self.watch_cache.cached(resource.key_prefix(), key)
                  if self.watch_cache is not None and not dry_run else None)
        for _ in range(MAX_UPDATE_ATTEMPTS):
            is_current = cached is None
            kv = cached if cached is not None else await self.store.get(key)
            cached = None
            current = codec.decode(kv) if kv is not None else None
            if current is not None:
                # As upstream's decode from storage, the stored object gets the kind's
                # defaults too: a default a gate turned on since the write (KEP-6386's
                # pod-level ephemeral-storage) lands on both sides of the update alike.
                self.strategy(resource).default(current)
            try:
                new = await update(copy_decoded(current) if current is not None else None)
            except Exception:
                if is_current:
                    raise
                continue  # perhaps refused for being stale: again from the store
            if kv is None or current is None:
                created = await self.create(resource, new, dry_run=dry_run, prepared=True)
                return created, True
            if not is_current and _same_object(new, current):
                continue  # nothing is written against a copy not known current: the store's
            if _same_object(new, current):
                return current, False
            hooks = self._write_hooks.get(resource)
            finish = (await hooks.begin_update(new, current, dry_run) if hooks is not None
                      else None)
            data = codec.encode(new)
            if dry_run:
                if finish is not None:
                    await finish(False)
                meta.ensure_metadata(new)["resourceVersion"] = str(kv.mod_revision)
                return new, False
            try:
                stored = await self.store.update(key, data, kv.mod_revision,
                                                 ttl=self._ttl(resource))
            except BaseException as err:
                if finish is not None:
                    await finish(False)
                if isinstance(err, RevisionMismatch | KeyNotFound):
                    continue
                raise
            if finish is not None:
                await finish(True)
            self._wrote(resource, stored.mod_revision)
            md = meta.ensure_metadata(new)
            md["resourceVersion"] = str(stored.mod_revision)
            if self._should_delete_during_update(new, current) and \
                    not self.strategy(resource).has_finalizers(new):
                await self._delete_now(resource, namespace, name, stored, new)
                return new, False
            _log_write("updated", resource, namespace, name, stored.mod_revision)
            return new, False
        raise errors.conflict(resource.plural, name, "too many concurrent updates, try again",
                              resource.group)

    @staticmethod
    def _should_delete_during_update(new: dict[str, Any], old: dict[str, Any]) -> bool:
        """upstream's `ShouldDeleteDuringUpdate`: the last finalizer of an object whose
        deletion was requested with grace 0 was just removed."""
        new_md = new.get("metadata") or {}
        old_md = old.get("metadata") or {}
        return (new_md.get("deletionGracePeriodSeconds") == 0
                and bool(new_md.get("deletionTimestamp"))
                and not new_md.get("finalizers") and bool(old_md.get("finalizers")))

    async def _delete_now(self, resource: Resource, namespace: str, name: str, kv: KeyValue,
                          obj: dict[str, Any]) -> dict[str, Any] | None:
        try:
            deleted = await self.store.delete(kv.key, kv.mod_revision)
        except (RevisionMismatch, KeyNotFound):
            return None
        self._wrote(resource, deleted.mod_revision)
        meta.ensure_metadata(obj)["resourceVersion"] = str(deleted.mod_revision)
        _log_write("deleted", resource, namespace, name, deleted.mod_revision)
        await self._after_delete(resource, obj, False)
        return obj

    async def delete(self, resource: Resource, namespace: str, name: str,
                     options: DeleteOptions, *, user: UserInfo | None = None) -> DeleteResult:
        """Delete as upstream's `Store.Delete`: mutating admission, preconditions (409),
        validating admission (with the stored object as `old`), graceful deletion (the
        object stays with deletionTimestamp and deletionGracePeriodSeconds until a delete
        with grace 0), finalizers (the object stays until they are removed)."""
        key = resource.key(namespace, name)
        codec = self.codec(resource)
        strategy = self.strategy(resource)
        req = self.admission_request("DELETE", resource, namespace, name, None, user=user,
                                     dry_run=options.dry_run)
        await self.admission.admit(req)
        for _ in range(MAX_UPDATE_ATTEMPTS):
            kv = await self.store.get(key)
            if kv is None:
                raise errors.not_found(resource.plural, name, resource.group)
            obj = codec.decode(kv)
            md = meta.ensure_metadata(obj)
            check_preconditions(resource, md, options)
            req.old = copy_decoded(obj)
            await self.admission.validate(req)
            original = copy_decoded(obj)
            outcome = strategy.before_delete(obj, options.grace_period_seconds)
            if outcome == "pending":
                return DeleteResult(obj, False)
            finalizers = gc_finalizers(md.get("finalizers") or [],
                                       orphan_dependents=options.orphan_dependents,
                                       policy=options.propagation_policy,
                                       default=strategy.gc_policy)
            if finalizers is not None:
                if finalizers:
                    md["finalizers"] = finalizers
                else:
                    md.pop("finalizers", None)
            held = strategy.has_finalizers(obj)
            if held and not md.get("deletionTimestamp"):
                md["deletionTimestamp"] = meta.now_rfc3339()
                md["deletionGracePeriodSeconds"] = 0
                if md.get("generation", 0) > 0:
                    md["generation"] += 1
            graceful = outcome == "graceful" and (md.get("deletionGracePeriodSeconds") or 0) > 0
            if held or graceful:
                if options.dry_run or _same_object(obj, original):
                    return DeleteResult(obj, False)
                try:
                    stored = await self.store.update(key, codec.encode(obj), kv.mod_revision,
                                                     ttl=self._ttl(resource))
                except (RevisionMismatch, KeyNotFound):
                    continue
                self._wrote(resource, stored.mod_revision)
                md["resourceVersion"] = str(stored.mod_revision)
                log.info("deleting %s %s: deletionTimestamp set rv=%d grace=%s",
                         resource.plural, _ref(namespace, name), stored.mod_revision,
                         md.get("deletionGracePeriodSeconds"))
                return DeleteResult(obj, False)
            if options.dry_run:
                await self._after_delete(resource, obj, True)
                return DeleteResult(obj, True)
            try:
                deleted = await self.store.delete(key, kv.mod_revision)
            except (RevisionMismatch, KeyNotFound):
                continue
            self._wrote(resource, deleted.mod_revision)
            md["resourceVersion"] = str(deleted.mod_revision)
            _log_write("deleted", resource, namespace, name, deleted.mod_revision)
            await self._after_delete(resource, obj, False)
            return DeleteResult(obj, True)
        raise errors.conflict(resource.plural, name, "too many concurrent updates, try again",
                              resource.group)


def check_preconditions(resource: Resource, md: dict[str, Any], options: DeleteOptions) -> None:
    """rest.BeforeDelete's early precondition check: a 409 Conflict on the Kind."""
    uid = options.precondition_uid
    if uid is not None and uid != md.get("uid", ""):
        raise errors.conflict(
            resource.kind, md.get("name", ""),
            f"the UID in the precondition ({uid}) does not match the UID in record "
            f"({md.get('uid', '')}). The object might have been deleted and then recreated",
            resource.group)
    rv = options.precondition_resource_version
    if rv is not None and rv != md.get("resourceVersion", ""):
        raise errors.conflict(
            resource.kind, md.get("name", ""),
            f"the ResourceVersion in the precondition ({rv}) does not match the "
            f"ResourceVersion in record ({md.get('resourceVersion', '')}). The object might "
            "have been modified",
            resource.group)


def _same_object(new: dict[str, Any], current: dict[str, Any]) -> bool:
    """Equal apart from resourceVersion (a no-op update writes nothing)."""
    new_md = new.get("metadata") or {}
    cur_md = current.get("metadata") or {}
    if new.keys() != current.keys():
        return False
    for key, value in new.items():
        if key == "metadata":
            continue
        if value != current[key]:
            return False
    strip = {"resourceVersion"}
    return ({k: v for k, v in new_md.items() if k not in strip}
            == {k: v for k, v in cur_md.items() if k not in strip})


def _ref(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


# Writes that are routine traffic, not events an operator follows: every node's Lease renewal
# (every 10 s each), Events (each one a record of its own) and updates (a pod's binding and
# each of its status reports, a node's status, a controller's status writes: what changed is
# in the audit log and the object's watch). Logged at DEBUG (`-v`); an object's creation and
# deletion at INFO, one line each.
_ROUTINE_WRITES = frozenset({("coordination.k8s.io", "leases"), ("", "events")})


def _log_write(verb: str, resource: Resource, namespace: str, name: str, revision: int) -> None:
    routine = verb == "updated" or (resource.group, resource.plural) in _ROUTINE_WRITES
    level = logging.DEBUG if routine else logging.INFO
    log.log(level, "%s %s %s rv=%d", verb, resource.plural, _ref(namespace, name), revision)

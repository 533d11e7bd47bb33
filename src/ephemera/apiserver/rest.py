"""The REST handlers of the served resources, one per verb, as upstream's
`k8s.io/apiserver/pkg/endpoints/handlers` do them: request options (query and body),
body decoding and field validation, patching and server-side apply, managed fields, then the
registry, which runs defaulting, admission and validation around the store write
(`ephemera.apiserver.admission`); responses as JSON, a Table or PartialObjectMetadata, with
`Warning` headers.

Routing (which handler a URL and method reach) is in `ephemera.apiserver.app`; watch
streams in `ephemera.apiserver.watch`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ephemera.api import errors, field, fieldvalidation, listoptions, managedfields, meta, patch
from ephemera.api.errors import StatusError
from ephemera.api.featuregates import parse_go_bool
from ephemera.api.goformat import GoText, go_json, go_quote, go_value
from ephemera.api.jsoncopy import copy_decoded, json_copy
from ephemera.api.selectors import Selection, SelectorError
from ephemera.apiserver import tables
from ephemera.apiserver.accept import parse_accept
from ephemera.apiserver.body import (
    DecodeError,
    check_object_content_type,
    decode_document,
    decode_object,
    read_body,
)
from ephemera.apiserver.namespaces import NamespaceLifecycle
from ephemera.apiserver.registry import (
    DeleteOptions,
    ListPage,
    Registry,
    check_preconditions,
    dumps,
    run_validation,
)
from ephemera.apiserver.resources import RESOURCES, Resource
from ephemera.pods import conditions

log = logging.getLogger("ephemera.apiserver")

JSON = "application/json"
PATCH_JSON = "application/json-patch+json"
PATCH_MERGE = "application/merge-patch+json"
PATCH_STRATEGIC = "application/strategic-merge-patch+json"
PATCH_APPLY = "application/apply-patch+yaml"
PATCH_TYPES = (PATCH_JSON, PATCH_MERGE, PATCH_STRATEGIC, PATCH_APPLY)
METHOD_NOT_ALLOWED = "the server does not allow this method on the requested resource"
BINDING_DEFINITION = "io.k8s.api.core.v1.Binding"

# Kinds this server knows, for upstream's wording of a body of the wrong kind.
_KNOWN_KINDS = {(r.api_version, r.kind) for r in RESOURCES} | {("v1", "Binding")}

# The authenticated user of a request (what the authenticator returned; absent without
# authentication).
USER: web.RequestKey[Any] = web.RequestKey("user", object)


def request_user(request: web.Request) -> Any:
    return request.get(USER)


@dataclass(frozen=True)
class Target:
    """What a resource URL names."""

    resource: Resource
    namespace: str = ""
    name: str = ""
    subresource: str = ""


def method_not_allowed() -> StatusError:
    return StatusError(405, "MethodNotAllowed", METHOD_NOT_ALLOWED)


def encoded_body(obj: dict[str, Any] | bytes) -> bytes:
    """An object (or its JSON) as upstream's serializer writes it: JSON, then a newline."""
    return (obj if isinstance(obj, bytes) else dumps(obj)) + b"\n"


def respond(body: bytes | dict[str, Any], status: int = 200,
            warnings: Iterable[str] = ()) -> web.Response:
    """A JSON answer. An object is encoded with the newline upstream's serializer ends every
    JSON body with (Go's `json.Encoder`; clients that print a Status body show it); bytes
    are sent as they are (`encoded_body` gives encoded objects that newline)."""
    response = web.Response(body=body if isinstance(body, bytes) else encoded_body(body),
                            status=status, content_type=JSON)
    response.headers["Cache-Control"] = "no-cache, private"
    for text in warnings:
        response.headers.add("Warning", fieldvalidation.warning_header(text))
    return response


# --- query options -------------------------------------------------------------------------


def query_bool(request: web.Request, name: str) -> bool | None:
    value = request.query.get(name)
    if value is None or value == "":
        return None
    try:
        return parse_go_bool(value)
    except ValueError as err:
        raise errors.bad_request(str(err)) from None


def query_int(request: web.Request, name: str) -> int | None:
    """An integer query parameter (None when absent or empty); 400 when it does not parse."""
    return listoptions.query_int(request.query, name)


def dry_run(values: Sequence[str], options_kind: str) -> bool:
    """`dryRun`: only `All` is supported, as upstream's ValidateDryRun says."""
    if any(v != "All" for v in values):
        shown = go_value(list(values))
        body = f'Unsupported value: {shown}: supported values: "All"'
        raise StatusError(
            422, "Invalid", f'{options_kind}.meta.k8s.io "" is invalid: dryRun: {body}',
            {"group": "meta.k8s.io", "kind": options_kind,
             "causes": [{"reason": "FieldValueNotSupported", "message": body,
                         "field": "dryRun"}]})
    return bool(values)


def field_manager(request: web.Request) -> str:
    """The `fieldManager` query parameter, or the user agent's product (upstream's
    `prefixFromUserAgent`: up to the first `/`, printable, at most 128 characters)."""
    manager = request.query.get("fieldManager")
    if manager:
        if len(manager) > 128:
            raise errors.invalid("CreateOptions", "", [field.FieldError(
                "TooLong", "fieldManager", "may not be more than 128 bytes")],
                group="meta.k8s.io")
        return manager
    agent = request.headers.get("User-Agent", "").split("/", 1)[0]
    if not agent.isprintable():
        agent = "".join(c for c in agent if c.isprintable())
    return agent[:128]


def selection(request: web.Request, resource: Resource) -> Selection:
    try:
        return Selection.parse(resource.selector_kind, request.query.get("labelSelector"),
                               request.query.get("fieldSelector"))
    except SelectorError as err:
        raise errors.bad_request(str(err)) from None


def check_patched(new: dict[str, Any], definition: str, content_type: str, directive: str,
                  body: bytes, *, known: Any = fieldvalidation.UNKNOWN,
                  typed: bool = True) -> list[str]:
    """Field validation of an object patched by a JSON, merge or strategic merge patch, as
    upstream decodes the patched object into its Go type (`definition`): a value of the
    wrong type 422 (anywhere when `typed`, else in its metadata, which even a custom
    resource decodes as ObjectMeta), unknown fields 422 (Strict), dropped with warnings (Warn) or
    silently (Ignore). Subtrees equal to `known`'s are not walked again. The error's value
    is, as upstream's, the patched object's JSON for a JSON or merge patch and Go's `%+v`
    of the patch itself for a strategic merge patch."""

    def shown() -> str:
        if content_type == PATCH_STRATEGIC:
            return go_json(json.loads(body))
        return json.dumps(new, separators=(",", ":"), ensure_ascii=False)

    unknown: list[bool] = []
    err = (fieldvalidation.type_errors(new, definition, known, unknown) if typed
           else fieldvalidation.metadata_type_error(new))
    if err is not None:
        message = f"Invalid value: {go_quote(shown())}: {err}"
        raise StatusError(422, "Invalid", f' "" is invalid: patch: {message}',
                          {"causes": [{"reason": "FieldValueInvalid", "message": message,
                                       "field": "patch"}]})
    if typed and not unknown:
        return []  # the type walk met no unknown field
    if directive == fieldvalidation.STRICT:
        paths = fieldvalidation.unknown_fields(new, definition, known)
        if paths:
            raise fieldvalidation.patch_strict_error(paths, shown())
        return []
    paths = fieldvalidation.drop_unknown_fields(new, definition, known)
    return fieldvalidation.warning_texts(paths) if directive == fieldvalidation.WARN else []


# --- bodies --------------------------------------------------------------------------------


# The Eviction versions `pods/NAME/eviction` takes (kubectl drain sends the newest it finds
# in discovery).
EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")


def unconditional_update_refused(res: Resource, name: str) -> errors.StatusError:
    """upstream's store refusing a PUT without a resourceVersion where the strategy does not
    AllowUnconditionalUpdate (custom resources, CRDs): 422 on the resource, the version as
    the uint64 0 Go prints, `sandboxpools.ops.example.com "p1" is invalid:
    metadata.resourceVersion: Invalid value: 0x0: must be specified for an update`."""
    return errors.invalid(res.plural, name, [field.invalid(
        "metadata.resourceVersion", GoText("0x0"), "must be specified for an update")],
        res.group)


DELETE_OPTIONS_DEFINITION = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"


def delete_options_type_error(data: dict[str, Any], at: Sequence[str] = ()) -> str | None:
    """The Go decoder's error for the first value of the wrong type in DeleteOptions `data`
    (`json: cannot unmarshal string into Go struct field DeleteOptions.dryRun of type
    []string`), or None; `at`: where the options sit in the body (an Eviction's
    `deleteOptions`)."""
    return fieldvalidation.type_errors(data, DELETE_OPTIONS_DEFINITION, at=at)


def delete_options_of(request: web.Request, data: Mapping[str, Any]) -> DeleteOptions:
    """DeleteOptions from the query and `data` (a DeleteOptions body, or an Eviction's
    `deleteOptions`, of the right types: `delete_options_type_error`; it wins where both
    say), validated as upstream validates them."""
    options = DeleteOptions(
        grace_period_seconds=query_int(request, "gracePeriodSeconds"),
        propagation_policy=request.query.get("propagationPolicy") or None)
    dry_values = list(request.query.getall("dryRun", []))
    orphan = query_bool(request, "orphanDependents")
    if data:
        kind = data.get("kind")
        if kind not in (None, "", "DeleteOptions"):
            raise errors.bad_request(f'{kind} in version "v1" cannot be handled as a '
                                     "DeleteOptions")
        if data.get("gracePeriodSeconds") is not None:
            options.grace_period_seconds = int(data["gracePeriodSeconds"])
        if data.get("propagationPolicy"):
            options.propagation_policy = data["propagationPolicy"]
        if data.get("dryRun"):
            dry_values = list(data["dryRun"])
        if data.get("orphanDependents") is not None:
            orphan = bool(data["orphanDependents"])
        pre = data.get("preconditions") or {}
        if isinstance(pre, dict):
            if pre.get("uid") is not None:
                options.precondition_uid = str(pre["uid"])
            if pre.get("resourceVersion") is not None:
                options.precondition_resource_version = str(pre["resourceVersion"])
    options.dry_run = dry_run(dry_values, "DeleteOptions")
    errs: list[field.FieldError] = []
    policy = options.propagation_policy
    if policy is not None and policy not in ("Foreground", "Background", "Orphan"):
        errs.append(field.not_supported("propagationPolicy", policy,
                                        ["Foreground", "Background", "Orphan"]))
    if policy is not None and orphan is not None:
        errs.append(field.invalid("propagationPolicy", policy,
                                  "orphanDependents and deletionPropagation cannot be "
                                  "both set"))
    if errs:
        raise errors.invalid("DeleteOptions", "", errs, group="meta.k8s.io")
    options.orphan_dependents = orphan
    return options


def check_kind(obj: dict[str, Any], api_version: str, kind: str, custom: bool = False
               ) -> None:
    """The body's kind and apiVersion must be the endpoint's (defaulted when absent);
    otherwise upstream's decode error (a custom resource's: its unstructured decoder's)."""
    got_kind = obj.get("kind") or kind
    got_version = obj.get("apiVersion") or api_version
    if not isinstance(got_kind, str) or not isinstance(got_version, str):
        raise errors.bad_request(f"the object provided is unrecognized (must be of type "
                                 f"{kind}): kind and apiVersion must be strings")
    if got_kind == kind and got_version == api_version:
        obj["kind"], obj["apiVersion"] = kind, api_version
        return
    if custom:
        if got_version != api_version:
            raise errors.bad_request(f"the API version in the data ({got_version}) does not "
                                     f"match the expected API version ({api_version})")
        group = api_version.rpartition("/")[0]
        raise errors.invalid(got_kind, meta.name_of(obj), [
            field.invalid("kind", got_kind, f"must be {kind}")], group)
    version = got_version.rpartition("/")[2]
    head = f'{got_kind} in version {go_quote(version)} cannot be handled as a {kind}: '
    if (got_version, got_kind) in _KNOWN_KINDS:
        group = api_version.rpartition("/")[0]
        internal = group.split(".")[0] if group else "core"
        raise errors.bad_request(head + f"converting ({version}.{got_kind}) to "
                                        f"({internal}.{kind}): unknown conversion")
    raise errors.bad_request(head + f'no kind {go_quote(got_kind)} is registered for version '
                                    f'{go_quote(got_version)} in scheme '
                                    '"pkg/api/legacyscheme/scheme.go:30"')


def ensure_namespace(obj: dict[str, Any], resource: Resource, namespace: str) -> None:
    """EnsureObjectNamespaceMatchesRequestNamespace."""
    md = meta.ensure_metadata(obj)
    if not resource.namespaced:
        md.pop("namespace", None)
        return
    have = md.get("namespace") or ""
    if not have:
        md["namespace"] = namespace
    elif have != namespace:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the "
            "request")


def check_name(obj: dict[str, Any], resource: Resource, namespace: str, name: str) -> None:
    """upstream's `checkName` for an update."""
    md = meta.ensure_metadata(obj)
    have = md.get("name") or ""
    if have != name:
        raise errors.bad_request(
            f"the name of the object ({have}) does not match the name on the URL ({name})")
    have_ns = md.get("namespace") or ""
    if resource.namespaced and namespace and have_ns and have_ns != namespace:
        raise errors.bad_request(
            f"the namespace of the object ({have_ns}) does not match the namespace on the "
            f"URL ({namespace})")


# --- managed fields and patches ----------------------------------------------------------


def record_update(old: dict[str, Any] | None, new: dict[str, Any], manager: str,
                  resource: Resource, subresource: str = "") -> dict[str, Any]:
    """Record `manager`'s write in `new.metadata.managedFields`; returns `new`."""
    meta.drop_empty_metadata(meta.ensure_metadata(new))
    managedfields.record_update(old, new, manager, resource.definition, resource.api_version,
                                subresource)
    return new


# --- the handlers --------------------------------------------------------------------------


class RestHandlers:
    def __init__(self, registry: Registry, lifecycle: NamespaceLifecycle, *,
                 max_body_bytes: int) -> None:
        self.registry = registry
        self.lifecycle = lifecycle
        self.max_body_bytes = max_body_bytes

    # -- reads ------------------------------------------------------------------------------

    async def get(self, request: web.Request, target: Target) -> web.Response:
        res = target.resource
        min_revision = listoptions.get_min_revision(request.query.get("resourceVersion", ""))
        kv = await self.registry.get_kv(res, target.namespace, target.name, min_revision)
        codec = self.registry.codec(res)
        form = response_form(request)
        if form is None:
            return respond(encoded_body(codec.raw(kv)))
        obj = codec.decode(kv)
        return respond(as_form(form, request, res, [obj], {"resourceVersion":
                                                             str(kv.mod_revision)}, single=True))

    async def list_(self, request: web.Request, target: Target) -> web.Response:
        res = target.resource
        sel = selection(request, res)
        options = listoptions.list_options(request.query, watch=False)
        page = await self.registry.list(res, target.namespace, sel,
                                        listoptions.list_read(options))
        list_meta: dict[str, Any] = {"resourceVersion": str(page.revision)}
        if page.continue_token:
            list_meta["continue"] = page.continue_token
        if page.remaining_item_count is not None:
            list_meta["remainingItemCount"] = page.remaining_item_count
        form = response_form(request)
        if form is None:
            return respond(encoded_body(list_bytes(self.registry, res, page, list_meta)))
        codec = self.registry.codec(res)
        objs = [o if o is not None else codec.decode(kv)
                for kv, o in zip(page.kvs, page.objects, strict=True)]
        return respond(as_form(form, request, res, objs, list_meta, single=False))

    async def _read_object(self, request: web.Request, res: Resource, options_kind: str,
                           target: Target | None = None
                           ) -> tuple[dict[str, Any], bool, str, list[str]]:
        """The body of a create or an update, as an object of the resource's kind, through
        field validation (`fieldValidation`): (object, dryRun, field manager, warnings);
        `options_kind` (`CreateOptions`, `UpdateOptions`) names the options in errors. For
        an update of a built-in object (`target`), the watch cache's copy of it, however
        old (every stored version passed these checks), spares walking the unchanged
        parts of the body; a custom resource's schema may have changed since."""
        check_object_content_type(request, custom=res.custom)
        body = await read_body(request, self.max_body_bytes)
        obj, duplicates = decode_object(body, res.kind)
        check_kind(obj, res.api_version, res.kind, res.custom)
        dry = dry_run(request.query.getall("dryRun", []), options_kind)
        manager = field_manager(request)
        known = (self.registry.cached_object(res, target.namespace, target.name)
                 if target is not None and not res.custom else None)
        warnings = fieldvalidation.check(obj, res.definition,
                                         request.query.get("fieldValidation"), res.kind,
                                         res.version, duplicates, options_kind,
                                         check_types=not res.custom,
                                         known=fieldvalidation.UNKNOWN if known is None
                                         else known)
        return obj, dry, manager, warnings

    # -- create -----------------------------------------------------------------------------

    async def create(self, request: web.Request, target: Target) -> web.Response:
        res = target.resource
        if res.namespaced and not target.namespace:
            raise method_not_allowed()
        if "create" not in res.verbs:
            raise method_not_allowed()
        obj, dry, manager, warnings = await self._read_object(request, res, "CreateOptions")
        md = meta.ensure_metadata(obj)
        ensure_namespace(obj, res, target.namespace)
        if md.get("resourceVersion"):
            raise errors.bad_request("resourceVersion can not be set for create requests")
        strategy = self.registry.strategy(res)
        warnings = [*warnings, *await run_validation(strategy, strategy.warnings, obj, None)]
        obj = record_update(None, obj, manager, res)
        created = await self.registry.create(res, obj, dry_run=dry, user=request_user(request))
        return respond(created, 201, warnings)

    # -- update -----------------------------------------------------------------------------

    async def update(self, request: web.Request, target: Target) -> web.Response:
        res, sub = target.resource, target.subresource
        obj, dry, manager, warnings = await self._read_object(request, res, "UpdateOptions",
                                                              target)
        check_name(obj, res, target.namespace, target.name)
        ensure_namespace(obj, res, target.namespace)
        strategy = self.registry.strategy(res)
        wanted_rv = meta.ensure_metadata(obj).get("resourceVersion") or ""
        user = request_user(request)
        decode_warnings = list(warnings)

        async def compute(current: dict[str, Any] | None) -> dict[str, Any]:
            new = copy_decoded(obj)
            warnings[:] = [*decode_warnings, *await run_validation(
                strategy, strategy.warnings, new, current, sub)]
            if current is None:
                if sub or not strategy.allow_create_on_update:
                    raise errors.not_found(res.plural, target.name, res.group)
                if wanted_rv:
                    raise errors.not_found(res.plural, target.name, res.group)
                new = record_update(None, new, manager, res)
                return await self.registry.prepare_create(res, new, user=user, dry_run=dry)
            if not wanted_rv and not strategy.allow_unconditional_update:
                raise unconditional_update_refused(res, target.name)
            current_rv = (current.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != current_rv:
                raise errors.conflict(res.plural, target.name, group=res.group)
            new = record_update(current, new, manager, res, sub)
            return await self.registry.prepare_update(res, new, current, subresource=sub,
                                                      user=user, dry_run=dry)

        result, created = await self.registry.update(res, target.namespace, target.name,
                                                     compute, dry_run=dry)
        self._after_write(res, result)
        return respond(result, 201 if created else 200, warnings)

    def _after_write(self, res: Resource, obj: dict[str, Any]) -> None:
        """A Terminating namespace whose finalizers changed may be ready to go."""
        if res.plural == "namespaces" and not res.group:
            md = obj.get("metadata") or {}
            if md.get("deletionTimestamp"):
                self.lifecycle.finalize(md.get("name", ""))

    # -- patch ------------------------------------------------------------------------------

    async def patch(self, request: web.Request, target: Target) -> web.Response:
        res, sub = target.resource, target.subresource
        content_type = request.content_type.split(";")[0].strip().lower()
        if content_type not in PATCH_TYPES:
            raise errors.unsupported_media_type()
        if res.custom and content_type == PATCH_STRATEGIC:
            raise errors.unsupported_media_type(custom=True)
        body = await read_body(request, self.max_body_bytes)
        dry = dry_run(request.query.getall("dryRun", []), "PatchOptions")
        force = query_bool(request, "force")
        manager = request.query.get("fieldManager", "")
        is_apply = content_type == PATCH_APPLY
        patch_errors: list[field.FieldError] = []
        if not is_apply and force is not None:
            patch_errors.append(field.forbidden("force", "may not be specified for non-apply "
                                                         "patch"))
        if is_apply and not manager:
            patch_errors.append(field.required("fieldManager", "is required for apply patch"))
        if patch_errors:
            raise errors.invalid("PatchOptions", "", patch_errors, group="meta.k8s.io")
        manager = manager or field_manager(request)
        directive = fieldvalidation.directive(request.query.get("fieldValidation"),
                                              "PatchOptions")
        user = request_user(request)
        applied: dict[str, Any] | None = None
        if is_apply:
            applied = self._applied_config(body, res, sub, target)
        warnings: list[str] = []
        strategy = self.registry.strategy(res)

        async def compute(current: dict[str, Any] | None) -> dict[str, Any]:
            warnings.clear()
            if current is None:
                if not is_apply or sub:
                    raise errors.not_found(res.plural, target.name, res.group)
                assert applied is not None
                new = managedfields.server_side_apply(
                    None, json_copy(applied), manager, bool(force), res.definition,
                    res.api_version, sub)
                if not res.custom:
                    fieldvalidation.write_as_go(new, res.definition)
                ensure_namespace(new, res, target.namespace)
                warnings.extend(await run_validation(strategy, strategy.warnings, new, None,
                                                     sub))
                return await self.registry.prepare_create(res, new, user=user, dry_run=dry)
            if is_apply:
                assert applied is not None
                new = managedfields.server_side_apply(
                    copy_decoded(current), json_copy(applied), manager, bool(force),
                    res.definition, res.api_version, sub)
                if not res.custom:
                    fieldvalidation.write_as_go(new, res.definition, current)
            else:
                # apply_patch patches a copy of its own: `current` stays as it was
                new = patch.apply_patch(content_type, current, body, res.definition)
                warnings.extend(self._check_patched(new, current, res, content_type,
                                                    directive, body))
            warnings.extend(await run_validation(strategy, strategy.warnings, new, current,
                                                 sub))
            md = meta.ensure_metadata(new)
            current_rv = (current.get("metadata") or {}).get("resourceVersion")
            wanted_rv = md.get("resourceVersion")
            if wanted_rv and wanted_rv != current_rv:
                raise errors.conflict(res.plural, target.name, group=res.group)
            md["resourceVersion"] = current_rv
            new["kind"], new["apiVersion"] = res.kind, res.api_version
            if not is_apply:
                new = record_update(current, new, manager, res, sub)
            return await self.registry.prepare_update(res, new, current, subresource=sub,
                                                      user=user, dry_run=dry)

        result, created = await self.registry.update(res, target.namespace, target.name,
                                                     compute, dry_run=dry)
        self._after_write(res, result)
        return respond(result, 201 if created else 200, warnings)

    def _applied_config(self, body: bytes, res: Resource, sub: str, target: Target
                        ) -> dict[str, Any]:
        """The apply configuration, limited to what the endpoint owns: no status on a main
        resource with a status subresource, only status on `/status`."""
        try:
            applied = decode_document(body)
        except DecodeError as err:
            raise errors.bad_request(f"error decoding YAML: {err}") from None
        if not isinstance(applied, dict):
            raise errors.bad_request("error decoding YAML: the apply configuration must be "
                                     "an object")
        md = meta.ensure_metadata(applied)
        if (md.get("name") or target.name) != target.name:
            raise errors.bad_request(f"the name of the object ({md.get('name')}) does not "
                                     f"match the name on the URL ({target.name})")
        md["name"] = target.name
        if res.namespaced:
            if md.get("namespace") and md["namespace"] != target.namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request")
            md["namespace"] = target.namespace
        has_status = self.registry.strategy(res).has_status
        if sub == "status":
            applied = {k: v for k, v in applied.items()
                       if k in ("apiVersion", "kind", "metadata", "status")}
        elif has_status and not sub:
            applied.pop("status", None)
        paths = fieldvalidation.apply_unknown_fields(applied, res.definition)
        if paths:
            raise fieldvalidation.apply_schema_error(target.namespace, target.name, res.group,
                                                     res.version, res.kind, paths)
        return applied

    @staticmethod
    def _check_patched(new: dict[str, Any], current: dict[str, Any], res: Resource,
                       content_type: str, directive: str, body: bytes) -> list[str]:
        """`check_patched` of a patched object of `res`. What the patch left as it was in a
        built-in object is not walked again (it passed when stored); a custom resource's
        schema may have changed since, so its object is walked whole, and only its metadata's
        types are checked here (the rest are its schema's validation)."""
        known = fieldvalidation.UNKNOWN if res.custom else current
        return check_patched(new, res.definition, content_type, directive, body,
                             known=known, typed=not res.custom)

    # -- delete -----------------------------------------------------------------------------

    async def delete_options(self, request: web.Request) -> DeleteOptions:
        """DeleteOptions from the query and the body (the body wins where both say)."""
        body = await read_body(request, self.max_body_bytes)
        data: dict[str, Any] = {}
        if body.strip():
            check_object_content_type(request)
            data, _ = decode_object(body, "DeleteOptions")
            err = delete_options_type_error(data)
            if err is not None:
                # the delete handler answers its decoder's error as it is: not a Status
                # error, so a 500 with no reason (`ErrorToAPIStatus`)
                raise errors.unknown(err)
        return delete_options_of(request, data)

    async def evict(self, request: web.Request, target: Target) -> web.Response:
        """POST `pods/NAME/eviction` (a `policy/v1` Eviction, or `v1beta1`): the pod is
        deleted with the Eviction's `deleteOptions`. PodDisruptionBudgets are not served, so
        no budget refuses an eviction (upstream's answer when none selects the pod): 201 and
        a Success Status, as upstream's create handler gives it."""
        check_object_content_type(request)
        body = await read_body(request, self.max_body_bytes)
        eviction, _ = decode_object(body, "Eviction")
        version = eviction.get("apiVersion")
        served = version if version in EVICTION_VERSIONS else "policy/v1"
        check_kind(eviction, served, "Eviction")
        data = eviction.get("deleteOptions") or {}
        err = (delete_options_type_error(data, ("deleteOptions",)) if isinstance(data, dict)
               else f"json: cannot unmarshal {fieldvalidation.json_kind(data)} into Go struct "
                    "field Eviction.deleteOptions of type v1.DeleteOptions")
        if err is not None:  # the create handler's decode error
            raise fieldvalidation.decode_error("Eviction", served.rpartition("/")[2], err)
        md = meta.ensure_metadata(eviction)
        if (md.get("name") or "") != target.name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        options = delete_options_of(request, data)
        if not options.dry_run:
            await self._mark_disruption_target(target, options)
        await self.registry.delete(target.resource, target.namespace, target.name, options,
                                   user=request_user(request))
        return respond({**errors.success_status(), "code": 201}, 201)

    async def _mark_disruption_target(self, target: Target, options: DeleteOptions) -> None:
        """The status update an eviction makes before it deletes the pod
        (`addConditionAndDeletePod`): the delete options' preconditions checked against the
        latest pod (409), then the `DisruptionTarget` condition (reason
        `EvictionByEvictionAPI`) added, through the status strategy and without admission, as
        upstream's pod status store does it. A resourceVersion precondition then names the
        pod as updated, so that the delete that follows holds to it."""
        res = target.resource
        strategy = self.registry.strategy(res)

        async def mark(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is None:
                raise errors.not_found(res.plural, target.name, res.group)
            check_preconditions(res, meta.ensure_metadata(current), options)
            new = copy_decoded(current)
            condition = conditions.disruption_target(conditions.EVICTION_API_REASON,
                                                     conditions.EVICTION_API_MESSAGE)
            conditions.update_pod_condition(new.setdefault("status", {}), condition,
                                            meta.now_rfc3339())
            await run_validation(strategy, strategy.before_update, new, current, "status")
            return new

        updated, _ = await self.registry.update(res, target.namespace, target.name, mark)
        if options.precondition_resource_version is not None:
            options.precondition_resource_version = (
                meta.ensure_metadata(updated).get("resourceVersion"))

    async def delete(self, request: web.Request, target: Target) -> web.Response:
        res = target.resource
        options = await self.delete_options(request)
        result = await self.registry.delete(res, target.namespace, target.name, options,
                                            user=request_user(request))
        warnings = self.registry.strategy(res).delete_warnings(
            options.propagation_policy is not None or options.orphan_dependents is not None)
        if res.plural == "namespaces" and not res.group and not result.deleted \
                and not options.dry_run:
            self.lifecycle.finalize(target.name)
        if result.deleted and not res.returns_deleted_object:
            md = result.obj.get("metadata") or {}
            details: dict[str, Any] = {"name": md.get("name", "")}
            if res.group:
                details["group"] = res.group
            details["kind"] = res.plural
            details["uid"] = md.get("uid", "")
            return respond(errors.success_status(details), warnings=warnings)
        return respond(result.obj, warnings=warnings)

    async def delete_collection(self, request: web.Request, target: Target) -> web.Response:
        res = target.resource
        if "deletecollection" not in res.verbs or res.plural == "namespaces" or (
                res.namespaced and not target.namespace):
            raise method_not_allowed()
        sel = selection(request, res)
        read = listoptions.list_read(listoptions.list_options(request.query, watch=False))
        options = await self.delete_options(request)
        page = await self.registry.list(res, target.namespace, sel, read)
        items: list[dict[str, Any]] = []
        for kv in page.kvs:
            name = kv.key.rsplit("/", 1)[-1]
            try:
                result = await self.registry.delete(res, target.namespace, name, options,
                                                    user=request_user(request))
            except StatusError as err:
                if err.code == 404:
                    continue
                raise
            items.append(result.obj)
        return respond({"kind": res.list_kind, "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(page.revision)}, "items": items})

    # -- pods/binding -----------------------------------------------------------------------

    async def bind(self, request: web.Request, target: Target) -> web.Response:
        res = target.resource
        check_object_content_type(request)
        body = await read_body(request, self.max_body_bytes)
        binding, duplicates = decode_object(body, "Binding")
        check_kind(binding, "v1", "Binding")
        dry = dry_run(request.query.getall("dryRun", []), "CreateOptions")
        fieldvalidation.check(binding, BINDING_DEFINITION,
                              request.query.get("fieldValidation"), "Binding", "v1",
                              duplicates, "CreateOptions")
        md = meta.ensure_metadata(binding)
        if (md.get("name") or "") != target.name:
            raise errors.bad_request("name in URL does not match name in Binding object")
        ensure_namespace(binding, res, target.namespace)
        node_target = binding.get("target") or {}
        errs: list[field.FieldError] = []
        if node_target.get("kind") and node_target["kind"] != "Node":
            errs.append(field.not_supported("target.kind", node_target["kind"],
                                            ["Node", "<empty>"]))
        if not node_target.get("name"):
            errs.append(field.required("target.name"))
        if errs:
            raise errors.invalid("Binding", target.name, errs)
        await self.registry.admit(self.registry.admission_request(
            "CREATE", res, target.namespace, target.name, binding, subresource="binding",
            user=request_user(request), dry_run=dry))
        node = node_target["name"]
        annotations = md.get("annotations") or {}

        async def assign(pod: dict[str, Any] | None) -> dict[str, Any]:
            if pod is None:
                raise errors.not_found(res.plural, target.name, res.group)
            pod_md = meta.ensure_metadata(pod)
            uid = md.get("uid")
            if uid and uid != pod_md.get("uid"):
                raise errors.conflict(
                    res.plural, target.name,
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{pod_md.get('uid', '')}")
            if pod_md.get("deletionTimestamp"):
                raise errors.conflict(res.plural, target.name,
                                      f"pod {target.name} is being deleted, cannot be "
                                      "assigned to a host")
            spec = pod.setdefault("spec", {})
            if spec.get("nodeName"):
                raise errors.conflict(res.plural, target.name,
                                      f"pod {target.name} is already assigned to node "
                                      f"\"{spec['nodeName']}\"")
            spec["nodeName"] = node
            if annotations:
                pod_md.setdefault("annotations", {}).update(annotations)
            status = pod.setdefault("status", {})
            conditions = status.setdefault("conditions", [])
            for condition in conditions:
                if condition.get("type") == "PodScheduled":
                    if condition.get("status") != "True":
                        condition["lastTransitionTime"] = meta.now_rfc3339()
                    condition["status"] = "True"
                    condition.pop("reason", None)
                    condition.pop("message", None)
                    break
            else:
                conditions.append({"type": "PodScheduled", "status": "True",
                                   "lastProbeTime": None,
                                   "lastTransitionTime": meta.now_rfc3339()})
            return pod

        await self.registry.update(res, target.namespace, target.name, assign, dry_run=dry)
        log.info("bound pods %s/%s to node %s", target.namespace, target.name, node)
        return respond({"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Success", "code": 201}, 201)


# --- lists and response forms --------------------------------------------------------------


def list_bytes(registry: Registry, res: Resource, page: ListPage,
               list_meta: dict[str, Any]) -> bytes:
    codec = registry.codec(res)
    head = dumps({"kind": res.list_kind, "apiVersion": res.api_version, "metadata": list_meta})
    return head[:-1] + b',"items":[' + b",".join(codec.raw(kv) for kv in page.kvs) + b"]}"


def response_form(request: web.Request) -> str | None:
    """None for the plain object, else `Table:<apiVersion>`, `PartialObjectMetadata` or
    `PartialObjectMetadataList`."""
    accept = request.headers.get("Accept")
    if not accept or "as=" not in accept:
        return None
    table_version = tables.table_api_version(accept)
    if table_version:
        return "Table:" + table_version
    for media in parse_accept(accept):
        if not media.matches_json():
            continue
        as_ = media.params.get("as")
        if as_ in ("PartialObjectMetadata", "PartialObjectMetadataList") \
                and media.params.get("g") == "meta.k8s.io":
            return as_
        if as_ is None:
            return None
    return None


def as_form(form: str, request: web.Request, res: Resource, objs: list[dict[str, Any]],
            list_meta: dict[str, Any], *, single: bool, subresource: str = "") -> dict[str, Any]:
    """`objs` (of `res`, or what its `subresource` answers) in the `response_form`."""
    if form.startswith("Table:"):
        include = tables.parse_include_object(request.query.get("includeObject"))
        return tables.to_table(res, objs, include_object=include, metadata=list_meta,
                               api_version=form.split(":", 1)[1], subresource=subresource)
    partial = [tables.partial_object_metadata(o) for o in objs]
    if single and form == "PartialObjectMetadata":
        return partial[0]
    return {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
            "metadata": list_meta, "items": partial}

"""The admission seam of the apiserver: what an admission plugin sees, what it may do, and the
chain that runs the configured plugins in order, as upstream's `k8s.io/apiserver/pkg/admission`
does (Attributes, MutationInterface, ValidationInterface, the plugin chain).

The shape
---------
`AdmissionRequest` (one per write; plugins read it, mutating plugins change `obj` in place):

- `operation`: `"CREATE"`, `"UPDATE"` or `"DELETE"`.
- `resource`: the `Resource` of `ephemera.apiserver.resources` (for `pods/binding`, pods).
- `subresource`: `""`, `"status"`, `"dynamic"`, `"binding"`, `"finalize"`, ...
- `namespace`, `name`: from the URL (`name` is `""` on a create by `generateName`).
- `obj`: the new object (the defaulted pod, the patched object, ...; for `pods/binding` the
  Binding; None on DELETE). Mutating plugins change it in place (assigning a new dict to
  `req.obj` in `admit` is honoured too).
- `old`: the stored object on UPDATE and (in the validating phase) DELETE; None on CREATE.
  Read only: on UPDATE it is the very object the strategy's BeforeUpdate compares the new
  one with (no plugin changes it, nor does BeforeUpdate).
- `user`: the authenticated `UserInfo`, or None when the apiserver runs without
  authentication.
- `dry_run`: the request has `dryRun=All`: admission runs, nothing is stored, so a plugin
  with side effects (ResourceQuota charging `status.used`) must not make them.
- `gates`: the apiserver's feature gates (a `Mapping[str, bool]`).
- `forbidden(message)`: upstream's `admission.NewForbidden`: a 403 `<resource> "<name>" is
  forbidden: <message>` StatusError, the name taken from the URL, else the object's name or
  generateName.

`AdmissionPlugin` (a Protocol; `AdmissionPluginBase` gives no-op phases):

- `name: str`, upstream's plugin name.
- `handles(req) -> bool`: whether the plugin takes part in this request at all.
- `async admit(req)`: the mutating phase; raise a `StatusError` to reject.
- `async validate(req)`: the validating phase; may not change `req.obj`; raise to reject.

A plugin class is built as `cls(settings)` with an `AdmissionSettings` (the feature gates).

What a plugin reads and writes besides the request: its `AdmissionContext`
--------------------------------------------------------------------------
Upstream's plugins get informers and a client from plugin initializers; here each plugin gets
one `AdmissionContext` (`AdmissionChain.set_context`, done by the app before serving;
`AdmissionPluginBase.context`):

- `cached_get(resource, namespace, name)`: the object from the apiserver's watch-fed cache,
  else a live read (404 as a `StatusError`); upstream's lister with a live GET on a miss.
- `cached_list(resource, namespace)`: the namespace's objects from the cache in name order,
  else a live list kept for a while (upstream's live-lookup cache).
- `get(resource, namespace, name)`: a live read from the store (404 as a `StatusError`).
- `namespaces`: the namespace cache (`NamespaceReader`: `admits`, `force_live_lookup`), or
  None when there is none.
- `update_quota(namespace, name, update)`: the quota writer, a compare-and-swap update of a
  ResourceQuota (the only write a plugin makes; `update` gets the current quota, None when
  it is gone, and returns the new one).

The concrete context is `ephemera.apiserver.admissioncontext` (over the registry and the
caches). This package imports none of those: the registry depends on this seam alone
(`Admission`: `admit` and `validate`), and an import-linter contract keeps it so.

Where the apiserver runs it (`ephemera.apiserver.registry`), in upstream's order
--------------------------------------------------------------------------------
- create: body decoded (field validation) → the kind's defaults (`Strategy.default`, upstream
  defaults on decode) → mutating admission → `BeforeCreate` (system fields, the kind's
  PrepareForCreate: for pods the status, QoS class and the dropping of disabled fields) and
  validation (422) → validating admission → store write.
- update, patch, apply, and their subresources (`status`, `dynamic`, `finalize`): the patched
  or sent object → defaults → mutating admission → `BeforeUpdate` (PrepareForUpdate and
  validation) → validating admission → compare-and-swap write. When the write loses a race
  the whole sequence runs again on the fresh object (as upstream's GuaranteedUpdate does).
- delete: mutating admission (`obj` and `old` None) → read → validating admission (`old` the
  stored object) → delete.
- `pods/binding`: the Binding validated, then both phases with `obj` the Binding, then the pod
  assigned.
So a rejection of validation (422) comes before any validating plugin runs, and a mutating
plugin's changes are validated like the client's own.

The configured plugins (`ApiserverConfig.admission_plugins`) run in the order given; the
default is `default_plugins()`: every known plugin that is installed, in upstream's order
(`PLUGIN_ORDER`: NamespaceLifecycle, LimitRanger, ServiceAccount, NodeRestriction, Priority,
DefaultTolerationSeconds, CertificateApproval, CertificateSigning,
CertificateSubjectRestriction, NodeDeclaredFeatureValidator, ResourceQuota). A plugin that
asks the authorizer (the certificate plugins) implements `WantsAuthorizer`; the app gives it
the apiserver's with `AdmissionChain.set_authorizer`. A plugin named there
is the class `_PLUGIN_CLASSES[name]` of its module; LimitRanger and ResourceQuota are found
when their modules exist (`ephemera.apiserver.admission.limitranger:LimitRanger`,
`ephemera.apiserver.admission.resourcequota:ResourceQuota`).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ephemera.api import errors
from ephemera.api.errors import StatusError
from ephemera.api.featuregates import FeatureGates
from ephemera.apiserver.resources import Resource

if TYPE_CHECKING:
    from ephemera.apiserver.authn import UserInfo
    from ephemera.apiserver.authz import Authorizer

__all__ = [
    "PLUGIN_ORDER",
    "Admission",
    "AdmissionChain",
    "AdmissionContext",
    "AdmissionPlugin",
    "AdmissionPluginBase",
    "AdmissionRequest",
    "AdmissionSettings",
    "NamespaceReader",
    "Operation",
    "QuotaUpdate",
    "WantsAuthorizer",
    "WantsContext",
    "build_chain",
    "default_plugins",
    "is_pod_request",
    "ordered",
]

Operation = Literal["CREATE", "UPDATE", "DELETE"]

# upstream's AllOrderedPlugins, restricted to the plugins ephemera has (or will have).
PLUGIN_ORDER: tuple[str, ...] = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "Priority",
    "DefaultTolerationSeconds",
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "NodeDeclaredFeatureValidator",
    "ResourceQuota",
)

_PLUGIN_CLASSES: dict[str, tuple[str, str]] = {
    "NamespaceLifecycle": ("ephemera.apiserver.admission.namespacelifecycle",
                           "NamespaceLifecycle"),
    "LimitRanger": ("ephemera.apiserver.admission.limitranger", "LimitRanger"),
    "ServiceAccount": ("ephemera.apiserver.admission.serviceaccount", "ServiceAccount"),
    "NodeRestriction": ("ephemera.apiserver.admission.noderestriction", "NodeRestriction"),
    "Priority": ("ephemera.apiserver.admission.priority", "Priority"),
    "DefaultTolerationSeconds": ("ephemera.apiserver.admission.defaulttolerationseconds",
                                 "DefaultTolerationSeconds"),
    "CertificateApproval": ("ephemera.apiserver.admission.certificates",
                            "CertificateApproval"),
    "CertificateSigning": ("ephemera.apiserver.admission.certificates", "CertificateSigning"),
    "CertificateSubjectRestriction": ("ephemera.apiserver.admission.certificates",
                                      "CertificateSubjectRestriction"),
    "NodeDeclaredFeatureValidator": ("ephemera.apiserver.admission.nodefeatures",
                                     "NodeDeclaredFeatureValidator"),
    "ResourceQuota": ("ephemera.apiserver.admission.resourcequota", "ResourceQuota"),
}


@dataclass(frozen=True)
class AdmissionSettings:
    """What a plugin is built with."""

    gates: FeatureGates = field(default_factory=FeatureGates)
    # ServiceAccount: mount the `kube-api-access-*` token volume into pods (upstream always
    # does, and so does `ephemera apiserver` unless told otherwise; see the plugin).
    mount_service_account_token: bool = False


@dataclass
class AdmissionRequest:
    """One write as the admission plugins see it (see the module docstring)."""

    operation: Operation
    resource: Resource
    subresource: str
    namespace: str
    name: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    user: UserInfo | None
    dry_run: bool
    gates: Mapping[str, bool] = field(default_factory=FeatureGates)

    def is_resource(self, group: str, plural: str) -> bool:
        return self.resource.group == group and self.resource.plural == plural

    def object_name(self) -> str:
        """upstream's `extractResourceName`: the URL's name, else the object's name or
        generateName, else `Unknown`."""
        if self.name:
            return self.name
        md = (self.obj or {}).get("metadata")
        if isinstance(md, dict):
            return str(md.get("name") or md.get("generateName") or "Unknown")
        return "Unknown"

    def forbidden(self, message: str) -> StatusError:
        """upstream's `admission.NewForbidden(a, err)`: 403 `<resource> "<name>" is
        forbidden: <message>`."""
        return errors.forbidden(self.resource.plural, self.object_name(), message,
                                self.resource.group)


def is_pod_request(req: AdmissionRequest, *subresources: str) -> bool:
    """A request on core pods, on the main resource or one of `subresources`."""
    return req.is_resource("", "pods") and req.subresource in (subresources or ("",))


Obj = dict[str, Any]
# The quota writer's update: the current quota (None: it is gone) to the quota to write.
QuotaUpdate = Callable[[Obj | None], Awaitable[Obj]]


class NamespaceReader(Protocol):
    """The namespaces as a watch shows them (`ephemera.apiserver.namespaces.NamespaceCache`)."""

    def admits(self, name: str, operation: str) -> bool:
        """Whether the cache alone admits a CREATE or UPDATE in namespace `name`; False
        means: read the namespace live."""
        ...

    def force_live_lookup(self, name: str) -> None:
        """Read namespace `name` live for a while (it is being deleted here)."""
        ...


class AdmissionContext(Protocol):
    """What admission plugins read and write besides the request (see the module
    docstring)."""

    @property
    def namespaces(self) -> NamespaceReader | None: ...

    async def cached_get(self, resource: Resource, namespace: str, name: str) -> Obj: ...

    async def cached_list(self, resource: Resource, namespace: str) -> list[Obj]: ...

    async def get(self, resource: Resource, namespace: str, name: str) -> Obj: ...

    def watched(self, resource: Resource, namespace: str, name: str) -> Obj | None: ...

    async def update_quota(self, namespace: str, name: str, update: QuotaUpdate) -> None: ...


class Admission(Protocol):
    """What the registry runs a write through: the mutating phase, then (after validation)
    the validating phase."""

    async def admit(self, req: AdmissionRequest) -> None: ...

    async def validate(self, req: AdmissionRequest) -> None: ...


@runtime_checkable
class AdmissionPlugin(Protocol):
    name: str

    def handles(self, req: AdmissionRequest) -> bool: ...

    async def admit(self, req: AdmissionRequest) -> None: ...

    async def validate(self, req: AdmissionRequest) -> None: ...


@runtime_checkable
class WantsAuthorizer(Protocol):
    """A plugin that asks the apiserver's authorizer (upstream's `WantsAuthorizer`); the app
    hands it over with `AdmissionChain.set_authorizer` before serving."""

    def set_authorizer(self, authorizer: Authorizer) -> None: ...


@runtime_checkable
class WantsContext(Protocol):
    """A plugin that reads or writes other objects; the app hands it the apiserver's
    `AdmissionContext` with `AdmissionChain.set_context` before serving."""

    def set_context(self, context: AdmissionContext) -> None: ...


class AdmissionPluginBase:
    """A plugin that handles nothing and does nothing; subclasses override what they need."""

    name = ""

    def __init__(self, settings: AdmissionSettings | None = None) -> None:
        self.settings = settings or AdmissionSettings()
        self._context: AdmissionContext | None = None

    @property
    def gates(self) -> FeatureGates:
        return self.settings.gates

    def set_context(self, context: AdmissionContext) -> None:
        self._context = context

    @property
    def context(self) -> AdmissionContext:
        """The context given with `AdmissionChain.set_context` (a plugin used without one is
        a wiring error)."""
        if self._context is None:
            raise RuntimeError(f"admission plugin {self.name} has no context: "
                               "AdmissionChain.set_context was not called")
        return self._context

    def handles(self, req: AdmissionRequest) -> bool:
        return False

    async def admit(self, req: AdmissionRequest) -> None:
        return None

    async def validate(self, req: AdmissionRequest) -> None:
        return None


class AdmissionChain:
    """The configured plugins, run in order: `admit` (every plugin's mutating phase) and,
    later, `validate` (every plugin's validating phase)."""

    def __init__(self, plugins: Iterable[AdmissionPlugin] = ()) -> None:
        self.plugins: list[AdmissionPlugin] = list(plugins)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.plugins]

    def set_authorizer(self, authorizer: Authorizer) -> None:
        """Give the plugins that ask the authorizer (`WantsAuthorizer`) the apiserver's."""
        for plugin in self.plugins:
            if isinstance(plugin, WantsAuthorizer):
                plugin.set_authorizer(authorizer)

    def set_context(self, context: AdmissionContext) -> None:
        """Give the plugins that read or write other objects (`WantsContext`) the
        apiserver's context."""
        for plugin in self.plugins:
            if isinstance(plugin, WantsContext):
                plugin.set_context(context)

    async def admit(self, req: AdmissionRequest) -> None:
        for plugin in self.plugins:
            if plugin.handles(req):
                await plugin.admit(req)

    async def validate(self, req: AdmissionRequest) -> None:
        for plugin in self.plugins:
            if plugin.handles(req):
                await plugin.validate(req)


def _installed(name: str) -> bool:
    module = _PLUGIN_CLASSES[name][0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def default_plugins() -> list[str]:
    """Every known plugin whose module is installed, in upstream's order."""
    return [name for name in PLUGIN_ORDER if _installed(name)]


def _load(name: str, settings: AdmissionSettings) -> AdmissionPlugin:
    if name not in _PLUGIN_CLASSES:
        known = ", ".join(PLUGIN_ORDER)
        raise ValueError(f"admission plugin {name!r} is unknown (known: {known})")
    module_name, class_name = _PLUGIN_CLASSES[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise
        raise ValueError(f"admission plugin {name!r} is not available") from None
    plugin: AdmissionPlugin = getattr(module, class_name)(settings)
    return plugin


def build_chain(plugins: Sequence[str | AdmissionPlugin] | None = None,
                settings: AdmissionSettings | None = None) -> AdmissionChain:
    """The chain of `plugins` (names of known plugins, or plugin objects), in the order given;
    None: `default_plugins()`. An unknown or missing plugin name is a ValueError."""
    settings = settings or AdmissionSettings()
    entries: Sequence[str | AdmissionPlugin] = (default_plugins() if plugins is None
                                                else plugins)
    return AdmissionChain(_load(p, settings) if isinstance(p, str) else p for p in entries)


def ordered(names: Iterable[str]) -> list[str]:
    """Plugin names sorted into upstream's order (as `--enable-admission-plugins` is);
    unknown names last, in the order given."""
    rank = {name: i for i, name in enumerate(PLUGIN_ORDER)}
    return sorted(names, key=lambda n: rank.get(n, len(rank)))

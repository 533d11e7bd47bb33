"""The apiserver's aiohttp application: `create_app(store, config)`.

It owns the routing of every URL (discovery, OpenAPI, health, `/metrics`, and the REST paths
`/api/v1/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]` and
`/apis/{group}/{version}/...`, with the legacy `/watch/` prefix and trailing slashes
tolerated), authentication (`ApiserverConfig.authenticator`), authorization
(`ApiserverConfig.authorization_modes`, `ephemera.apiserver.authz.modes`; the access reviews
of `ephemera.apiserver.authz.reviews`), and the error middleware that
answers every failure as a `kind: Status` (a `StatusError` as is, anything unexpected as a 500
with a log line naming the request), inside the one that counts and times every request
(`metrics`). The content comes from `rest`, `watch`, `discovery`, `openapi` and `tables`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from ephemera import trace
from ephemera.aiotasks import cancel_and_wait
from ephemera.api import errors, fieldvalidation
from ephemera.api.errors import StatusError
from ephemera.api.featuregates import DYNAMIC_CONTAINERS, FeatureGates
from ephemera.api.listoptions import query_flag
from ephemera.apiserver import (
    authnreviews,
    customresources,
    discovery,
    nodeproxy,
    openapi,
    openapiproto,
    podproxy,
    scale,
    serviceproxy,
    tokenrequest,
)
from ephemera.apiserver.accept import parse_accept
from ephemera.apiserver.admission import AdmissionPlugin, AdmissionSettings, build_chain
from ephemera.apiserver.admissioncontext import RegistryAdmissionContext
from ephemera.apiserver.audit import RECORD as AUDIT_RECORD
from ephemera.apiserver.audit import AuditFilter, annotate_authorization
from ephemera.apiserver.authn import ANONYMOUS, InvalidCredentials
from ephemera.apiserver.authz import Attributes, Decision, forbidden_message
from ephemera.apiserver.authz.modes import (
    DEFAULT_WITH_AUTHENTICATION,
    DEFAULT_WITHOUT_AUTHENTICATION,
    Authorization,
)
from ephemera.apiserver.authz.requestinfo import ATTRIBUTES, attributes_of
from ephemera.apiserver.authz.reviews import Reviews, is_review
from ephemera.apiserver.body import DEFAULT_MAX_BODY_BYTES
from ephemera.apiserver.healthz import TEXT_PLAIN, Answer, Health
from ephemera.apiserver.impersonation import impersonate
from ephemera.apiserver.informers import ObjectCache
from ephemera.apiserver.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ephemera.apiserver.metrics import METRICS, ApiserverMetrics, metrics_middleware
from ephemera.apiserver.namespaces import NamespaceLifecycle
from ephemera.apiserver.priority import PriorityConfig, priority_middleware
from ephemera.apiserver.registry import DEFAULT_EVENT_TTL, Registry
from ephemera.apiserver.resources import (
    RESOURCES,
    Resource,
    core_resource,
    lookup,
    served_group_versions,
)
from ephemera.apiserver.rest import (
    USER,
    RestHandlers,
    Target,
    method_not_allowed,
    respond,
)
from ephemera.apiserver.serviceaccounttoken import DEFAULT_ISSUER, TokenIssuer
from ephemera.apiserver.serviceallocator import (
    DEFAULT_NODE_PORT_RANGE,
    DEFAULT_SERVICE_CIDR,
    ServiceAllocations,
    repair_periodically,
)
from ephemera.apiserver.watch import WatchSettings, serve_watch
from ephemera.apiserver.watchcache import FieldIndex, WatchCache
from ephemera.store import Store, StoreError

log = logging.getLogger("ephemera.apiserver")

# What the admission plugins read from the watch-fed object cache (ServiceAccount,
# LimitRanger, ResourceQuota), as upstream's read their informers.
CACHED_FOR_ADMISSION = tuple(core_resource(plural) for plural in
                             ("serviceaccounts", "limitranges", "resourcequotas"))
# Subresources whose websocket GET also needs `create` (upstream's
# AuthorizePodWebsocketUpgradeCreatePermission).
WEBSOCKET_SUBRESOURCES = frozenset({"exec", "attach", "portforward"})
# As upstream's pod storage's trigger function: the watch cache finds each node's pod
# watchers (`spec.nodeName=NAME`: kubelets; `spec.nodeName=`: the scheduler) by node name.
WATCH_CACHE_INDEXES = {core_resource("pods").key_prefix(): FieldIndex("Pod", "spec.nodeName")}
# Resources never cached: Events (upstream's `DefaultWatchCacheSizes`, a size of 0).
WATCH_CACHE_DISABLED = (core_resource("events").key_prefix(),)
# The watch caches started with the apiserver: every built-in resource that can be watched
# (the WatchCache leaves out WATCH_CACHE_DISABLED). See `ephemera.apiserver.watchcache`.
WATCH_CACHE_STARTED = tuple(sorted({
    resource.key_prefix() for resource in RESOURCES if "watch" in resource.verbs}))


class Authenticator(Protocol):
    """Who sent a request: a user object (`ephemera.apiserver.authn.UserInfo`), None for a
    request without any credentials (anonymous, or 401 when anonymous requests are not
    allowed); raises `InvalidCredentials` for credentials that do not authenticate (401)."""

    async def authenticate(self, request: Any) -> Any | None: ...


@dataclass
class ApiserverConfig:
    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    # None: no authentication, every request acts as an administrator.
    authenticator: Authenticator | None = None
    # `--anonymous-auth`: a request without credentials is `system:anonymous` (authorization
    # decides; the default RBAC lets it read /version, /healthz, /livez and /readyz); off,
    # or with the AlwaysAllow authorizer (as upstream turns it off then), it gets 401.
    anonymous_auth: bool = True
    # Request bodies above this get 413.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Seconds between BOOKMARK events of watches that allow them.
    watch_bookmark_interval: float = 60.0
    # A watch without timeoutSeconds ends after a random time in [this, 2 * this] seconds.
    min_request_timeout: float = 1800.0
    # Create default, kube-system, kube-public and kube-node-lease at startup.
    create_default_namespaces: bool = True
    # Seconds between attempts to empty a Terminating namespace.
    namespace_retry_interval: float = 1.0
    # host:port advertised in `/api` (serverAddressByClientCIDRs); None to omit.
    server_address: str | None = None
    # Seconds between store compactions (each compacts to the revision seen at the one
    # before, so at least this much history stays watchable, as upstream's compactor does);
    # None or 0: never compact.
    compaction_interval: float | None = 300.0
    # The admission plugins, run in this order (names of `ephemera.apiserver.admission`'s
    # plugins, or plugin objects); None: every installed plugin in upstream's order.
    admission_plugins: Sequence[str | AdmissionPlugin] | None = None
    # TLS to kubelets (`pods/NAME/log`): the cluster CA and the apiserver's client
    # certificate; None: the system's trust store. `kubelet_scheme` "http" for tests.
    kubelet_client_ssl: Any = None
    kubelet_scheme: str = "https"
    # Authorization modes in order (upstream's `--authorization-mode`: `Node`, `RBAC`,
    # `AlwaysAllow`, `AlwaysDeny`); None: Node,RBAC with an authenticator, AlwaysAllow
    # without one.
    authorization_modes: Sequence[str] | None = None
    # Signs service account tokens (`serviceaccounts/NAME/token`); None: that endpoint 404s.
    token_issuer: TokenIssuer | None = None
    # `--api-audiences`: the audiences of tokens for this apiserver (TokenRequest default).
    api_audiences: Sequence[str] = (DEFAULT_ISSUER,)
    # The ServiceAccount admission plugin mounts `kube-api-access-*` into pods.
    mount_service_account_token: bool = False
    # The audit log (`--audit-log-path`, `--audit-policy-file`); None: no auditing.
    audit: AuditFilter | None = None
    # `--service-cluster-ip-range` and `--service-node-port-range` (upstream's defaults).
    service_cluster_ip_range: str = DEFAULT_SERVICE_CIDR
    service_node_port_range: str = DEFAULT_NODE_PORT_RANGE
    # `--watch-cache`: serve the reads that need not be consistent from memory (watchcache).
    watch_cache: bool = True
    # `--event-ttl`: seconds an Event is kept after its last write (0: for ever).
    event_ttl: int = DEFAULT_EVENT_TTL
    # `--max-requests-inflight`, `--max-mutating-requests-inflight`: seats (priority).
    priority: PriorityConfig = field(default_factory=PriorityConfig)


REGISTRY = web.AppKey("registry", Registry)
# The watch-fed objects the admission plugins read (through their context).
OBJECT_CACHE = web.AppKey("object_cache", ObjectCache)
AUTHORIZATION = web.AppKey("authorization", Authorization)
LIFECYCLE = web.AppKey("lifecycle", NamespaceLifecycle)
CONFIG = web.AppKey("config", ApiserverConfig)
STOP = web.AppKey("stop", asyncio.Event)
HEALTH = web.AppKey("health", Health)
# The authenticated user of a request (what the authenticator returned) is `request[USER]`,
# `USER` being defined in `ephemera.apiserver.rest`.


def create_app(store: Store, config: ApiserverConfig | None = None) -> web.Application:
    """The apiserver as an aiohttp application over `store` (which the caller opens and
    closes). On startup it creates the default namespaces and resumes the deletion of
    Terminating ones; on shutdown it ends the watch streams."""
    config = config or ApiserverConfig()
    admission = build_chain(config.admission_plugins, AdmissionSettings(
        gates=config.feature_gates,
        mount_service_account_token=config.mount_service_account_token))
    cache = (WatchCache(store, indexes=WATCH_CACHE_INDEXES, uncached=WATCH_CACHE_DISABLED)
             if config.watch_cache else None)
    registry = Registry(store, gates=config.feature_gates, admission=admission,
                        watch_cache=cache, event_ttl=config.event_ttl)
    allocations = ServiceAllocations(store, config.service_cluster_ip_range,
                                     config.service_node_port_range)
    registry.set_write_hooks(core_resource("services"), allocations)
    lifecycle = NamespaceLifecycle(registry, retry_interval=config.namespace_retry_interval)
    registry.add_create_hook(lifecycle.object_created)
    crds = customresources.CustomResources(registry,
                                           retry_interval=config.namespace_retry_interval)
    registry.add_create_hook(crds.object_created)
    objects = ObjectCache(registry, CACHED_FOR_ADMISSION,
                          retry_interval=config.namespace_retry_interval)
    modes = config.authorization_modes
    if modes is None:
        modes = (DEFAULT_WITH_AUTHENTICATION if config.authenticator is not None
                 else DEFAULT_WITHOUT_AUTHENTICATION)
    authorization = Authorization(registry, modes)
    admission.set_authorizer(authorization.authorizer)
    escalation_check = authorization.escalation_check()
    if escalation_check is not None:
        admission.plugins.append(escalation_check)
    admission.set_context(RegistryAdmissionContext(registry, objects=objects,
                                                   namespaces=lifecycle.cache))
    router = Router(registry, lifecycle, config, authorization)
    # upstream's order: authentication, audit, impersonation, priority, authorization
    middlewares = [metrics_middleware, status_middleware, clean_path_middleware,
                   router.authentication]
    if config.audit is not None:
        middlewares.append(config.audit.middleware)
    middlewares += [router.impersonation, priority_middleware(config.priority),
                    router.authorization]
    app = web.Application(middlewares=middlewares,
                          client_max_size=config.max_body_bytes)
    app[REGISTRY] = registry
    app[OBJECT_CACHE] = objects
    app[AUTHORIZATION] = authorization
    app[LIFECYCLE] = lifecycle
    app[CONFIG] = config
    app[STOP] = asyncio.Event()
    app[HEALTH] = Health(store, app[STOP])
    app[METRICS] = ApiserverMetrics()
    app.router.add_route("*", "/{path:.*}", router.dispatch)
    app.on_response_prepare.append(_resource_warnings)

    background: list[asyncio.Task[None]] = []

    async def startup(app: web.Application) -> None:
        if cache is not None:
            cache.start(WATCH_CACHE_STARTED)
        await crds.start()
        if config.create_default_namespaces:
            await lifecycle.ensure_defaults()
        await lifecycle.resume()
        await objects.start()
        await authorization.start()
        background.append(asyncio.get_running_loop().create_task(
            repair_periodically(registry, allocations), name="service-allocation-repair"))
        if config.compaction_interval:
            background.append(asyncio.get_running_loop().create_task(
                compact_periodically(store, config.compaction_interval), name="compactor"))

    async def shutdown(app: web.Application) -> None:
        app[STOP].set()

    async def cleanup(app: web.Application) -> None:
        await router.kubelets.close()
        await crds.close()
        await authorization.stop()
        await objects.close()
        await cancel_and_wait(*background)
        await lifecycle.close()
        if cache is not None:
            await cache.close()
        await app[HEALTH].close()

    app.on_startup.append(startup)
    app.on_shutdown.append(shutdown)
    app.on_cleanup.append(cleanup)
    return app


async def compact_periodically(store: Store, interval: float) -> None:
    """Every `interval` seconds, compact the store to the revision it had one interval ago."""
    previous: int | None = None
    while True:
        await asyncio.sleep(interval)
        try:
            current = await store.current_revision()
            if previous is not None and previous > await store.compacted_revision():
                await store.compact(previous)
                log.info("compacted the store at revision %d", previous)
            previous = current
        except StoreError as err:
            log.warning("compaction failed: %s", err)


def status_response(err: StatusError) -> web.Response:
    response = respond(err.status(), err.code)
    if err.retry_after is not None:
        response.headers["Retry-After"] = str(err.retry_after)
    return response


@web.middleware
async def status_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every failure as a `kind: Status` body. With `ephemera.trace` on, a write's begin
    and end are marked."""
    if trace.ENABLED and request.method != "GET":
        key = f"{request.method} {request.path}"
        trace.mark("apiserver.begin", key)
        try:
            return await _status(request, handler)
        finally:
            trace.mark("apiserver.end", key)
    return await _status(request, handler)


async def _status(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except StatusError as err:
        return status_response(err)
    except web.HTTPRequestEntityTooLarge:
        config = request.app[CONFIG]
        return status_response(errors.request_entity_too_large(config.max_body_bytes))
    except web.HTTPException as exc:
        reason = exc.reason.replace(" ", "")
        return status_response(StatusError(exc.status, reason, exc.text or exc.reason))
    except asyncio.CancelledError:
        raise
    except ConnectionError as exc:
        if request.transport is not None and not request.transport.is_closing():
            raise
        # The client went away mid-request (a body cut short when it gave up waiting under
        # load): one line, not aiohttp's traceback; the answer goes nowhere.
        log.info("client %s went away: %s %s: %s", request.remote, request.method,
                 request.path_qs, exc or type(exc).__name__)
        return web.Response(status=499)
    except StoreError as exc:
        # The store's own words, as upstream relays etcd's: an error that is not a Status
        # becomes a 500 with no reason (`ErrorToAPIStatus`), which kubectl prints as
        # `Error from server: <words>`.
        log.warning("store error serving %s %s: %s", request.method, request.path_qs, exc)
        return status_response(errors.unknown(str(exc)))
    except Exception:
        # A bug: its Python text stays in the log (upstream's panic recovery does the same).
        log.exception("internal error serving %s %s", request.method, request.path_qs)
        return status_response(errors.internal_error(errors.UNEXPECTED))


def not_found_path() -> StatusError:
    """upstream's 404 for a path nothing serves: `NewNotFound` of no resource, whose empty
    `details` kubectl reads (`kubectl debug` tells an unserved subresource by its empty
    name; without `details` it dereferences nil)."""
    return StatusError(404, "NotFound", "the server could not find the requested resource",
                       {})


def _wants_openapi_protobuf(accept: str | None) -> bool:
    """Whether the client's most preferred type `/openapi/v2` serves is the protobuf one
    (kubectl asks for it alone); JSON otherwise, as for a missing or `*/*` Accept."""
    for media in parse_accept(accept):
        if media.mime in openapiproto.CONTENT_TYPES:
            return True
        if media.matches_json():
            return False
    return False


_UNCLEAN_SEGMENTS = frozenset({"", ".", ".."})


@web.middleware
async def clean_path_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """A path with an empty, `.` or `..` segment inside it is not found, before anything
    reads it: authorization, audit and routing must all see the same segments
    (`pods/p//exec` would otherwise be authorized as one thing and served as another)."""
    inner = request.path.strip("/")
    if inner and not _UNCLEAN_SEGMENTS.isdisjoint(inner.split("/")):
        raise not_found_path()
    response: web.StreamResponse = await handler(request)
    return response


# The `Warning`s every request to a resource gets (`Resource.warnings`: a deprecated CRD
# version), set once its path is resolved and sent first, before the handler's own, on any
# answer (an error, a watch stream) as upstream's CRD handler adds them to the request.
RESOURCE_WARNINGS: web.RequestKey[tuple[str, ...]] = web.RequestKey(
    "resource_warnings", tuple)


async def _resource_warnings(request: web.Request, response: web.StreamResponse) -> None:
    texts = request.get(RESOURCE_WARNINGS)
    if not texts:
        return
    others = response.headers.getall("Warning", [])
    response.headers.popall("Warning", None)
    for value in [*(fieldvalidation.warning_header(t) for t in texts), *others]:
        response.headers.add("Warning", value)


class Router:
    def __init__(self, registry: Registry, lifecycle: NamespaceLifecycle,
                 config: ApiserverConfig, authz: Authorization) -> None:
        self.registry = registry
        self.config = config
        self.authz = authz
        self.reviews = Reviews(authz.authorizer, authz.rules_sources, config.max_body_bytes)
        self.rest = RestHandlers(registry, lifecycle, max_body_bytes=config.max_body_bytes)
        self.watch_settings = WatchSettings(bookmark_interval=config.watch_bookmark_interval,
                                            min_timeout=config.min_request_timeout)
        self.kubelets = nodeproxy.KubeletClient(config.kubelet_client_ssl,
                                                config.kubelet_scheme)
        self.anonymous = config.anonymous_auth and "AlwaysAllow" not in authz.modes
        if config.authenticator is not None and config.anonymous_auth and not self.anonymous:
            log.warning("AnonymousAuth is not allowed with the AlwaysAllow authorizer. "
                        "Resetting AnonymousAuth to false. You should use a different "
                        "authorizer")

    @web.middleware
    async def authentication(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Upstream's authentication filter on every path: credentials that fail are a 401
        (never anonymous); no credentials at all are `system:anonymous` when allowed."""
        authenticator = self.config.authenticator
        if authenticator is not None:
            try:
                user = await authenticator.authenticate(request)
            except InvalidCredentials:
                raise errors.unauthorized() from None
            if user is None:
                if not self.anonymous:
                    raise errors.unauthorized()
                user = ANONYMOUS
            request[USER] = user
        response: web.StreamResponse = await handler(request)
        return response

    @web.middleware
    async def impersonation(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Upstream's impersonation filter (`impersonation`): `Impersonate-*` headers serve
        the request as the user they name, each part authorized for the authenticated user
        first (verb `impersonate`)."""
        if any(name.lower().startswith("impersonate-") for name in request.headers):
            user = request.get(USER) or ANONYMOUS
            acting = await impersonate(request.headers, user,
                                       lambda attributes: self._authorize(request, attributes))
            if acting is not None:
                request[USER] = acting
                # what authorization and the handlers read (the audit filter computed and
                # kept the request's attributes with the authenticated user)
                request[ATTRIBUTES] = dataclasses.replace(attributes_of(request), user=acting)
                record = request.get(AUDIT_RECORD)
                if record is not None:
                    record.impersonated_user = acting
        response: web.StreamResponse = await handler(request)
        return response

    @web.middleware
    async def authorization(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Upstream's authorization filter: the request's attributes (from its path alone)
        to the configured authorizers; anything not allowed is a 403 with upstream's text.
        A request without a user (no authentication, or a public path) is
        `system:anonymous`."""
        if not self.authz.only_allows:
            attributes = attributes_of(request)
            await self._authorize(request, attributes)
            if attributes.subresource in WEBSOCKET_SUBRESOURCES and attributes.verb == "get":
                # upstream's AuthorizePodWebsocketUpgradeCreatePermission
                await self._authorize(request, dataclasses.replace(attributes, verb="create"))
        response: web.StreamResponse = await handler(request)
        return response

    async def _authorize(self, request: web.Request, attributes: Attributes) -> None:
        decision, reason = await self.authz.authorize(attributes)
        annotate_authorization(request, decision is Decision.ALLOW, reason)
        if decision is not Decision.ALLOW:
            raise errors.forbidden(attributes.resource, attributes.name,
                                   forbidden_message(attributes, reason), attributes.api_group)

    def _token_authenticator(self) -> Any:
        """The authenticator TokenReviews ask (one with `review_token`), or None."""
        authenticator = self.config.authenticator
        return authenticator if hasattr(authenticator, "review_token") else None

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        segments = [s for s in request.path.split("/") if s]
        if not segments:
            return self._get_only(request, {"paths": sorted([
                "/api", "/api/v1", "/apis", "/metrics", "/openapi/v2", "/openapi/v3",
                "/version", *request.app[HEALTH].paths()])})
        head = segments[0]
        if head == "version" and len(segments) == 1:
            return self._get_only(request, discovery.version_info())
        if head == "metrics" and len(segments) == 1:
            return self._get_only(request, request.app[METRICS].render(), METRICS_CONTENT_TYPE)
        if head in Health.ENDPOINTS:
            return await self._health(request, head)
        if head == "openapi":
            return self._openapi(request, segments)
        if head == "api":
            if len(segments) == 1:
                return self._discovery(request, core=True)
            if segments[1] != "v1":
                raise not_found_path()
            if len(segments) == 2:
                return self._get_only(request, discovery.api_resource_list("", "v1"))
            return await self._resource(request, "", "v1", segments[2:])
        if head == "apis":
            if len(segments) == 1:
                return self._discovery(request, core=False)
            if len(segments) == 2:
                group = discovery.api_group(segments[1])
                if group is None:
                    raise not_found_path()
                return self._get_only(request, group)
            group_name, version = segments[1], segments[2]
            if (group_name, version) not in served_group_versions():
                raise not_found_path()
            if len(segments) == 3:
                return self._get_only(request,
                                      discovery.api_resource_list(group_name, version))
            return await self._resource(request, group_name, version, segments[3:])
        raise not_found_path()

    @staticmethod
    async def _health(request: web.Request, head: str) -> web.Response:
        """`/healthz`, `/livez`, `/readyz` and `/readyz/NAME` (`ephemera.apiserver.healthz`):
        upstream's mux serves those exact paths, for any method."""
        endpoint = request.app[HEALTH].endpoints[head]
        rest = request.path[len(head) + 1:]
        answer: Answer | None
        if not rest:
            answer = await endpoint.root(request.query.getall("exclude", []),
                                         "verbose" in request.query)
        else:
            answer = await endpoint.single(rest[1:]) if rest.startswith("/") else None
        if answer is None:
            raise not_found_path()
        response = web.Response(status=answer.status, body=answer.body.encode(),
                                headers={"Content-Type": TEXT_PLAIN,
                                         "Cache-Control": "no-cache, private"})
        if answer.nosniff:
            response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    @staticmethod
    def _get_only(request: web.Request, body: dict[str, Any] | bytes | None,
                  content_type: str = "application/json") -> web.Response:
        if request.method not in ("GET", "HEAD"):
            raise method_not_allowed()
        if body is None:
            raise not_found_path()
        response = respond(body)
        response.headers["Content-Type"] = content_type
        return response

    def _discovery(self, request: web.Request, core: bool) -> web.Response:
        if discovery.wants_aggregated_discovery(request.headers.get("Accept")):
            return self._get_only(request, discovery.aggregated_discovery(core),
                                  discovery.AGGREGATED_DISCOVERY_CONTENT_TYPE)
        if core:
            return self._get_only(request, discovery.api_versions(self.config.server_address))
        return self._get_only(request, discovery.api_group_list())

    def _openapi(self, request: web.Request, segments: list[str]) -> web.Response:
        if len(segments) == 2 and segments[1] == "v2":
            if _wants_openapi_protobuf(request.headers.get("Accept")):
                return self._get_only(request, openapi.openapi_v2_protobuf_bytes(),
                                      openapiproto.CONTENT_TYPE)
            return self._get_only(request, openapi.openapi_v2_document_bytes())
        if len(segments) >= 2 and segments[1] == "v3":
            if len(segments) == 2:
                return self._get_only(request, openapi.openapi_v3_index_bytes())
            return self._get_only(request,
                                  openapi.openapi_v3_document_for_path("/".join(segments[2:])))
        raise not_found_path()

    def _target(self, group: str, version: str, rest: list[str]) -> tuple[Target, bool]:
        """The resource a path after the group-version names, and whether it had the legacy
        `watch/` prefix; 404 for anything else."""
        watch_prefix = False
        if rest and rest[0] == "watch":
            watch_prefix, rest = True, rest[1:]
        if not rest:
            raise not_found_path()
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = lookup(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        resource = lookup(group, version, rest[0])
        if resource is None:
            raise not_found_path()
        if resource.namespaced and not namespace and len(rest) > 1:
            raise not_found_path()
        if len(rest) > 3 and not (rest[2] == "proxy" and "proxy" in resource.subresources):
            raise not_found_path()  # only `nodes/NAME/proxy/<path>` goes deeper
        name = rest[1] if len(rest) > 1 else ""
        subresource = rest[2] if len(rest) > 2 else ""
        if subresource and not self._serves_subresource(resource, subresource):
            raise not_found_path()
        if watch_prefix and subresource:
            raise not_found_path()
        return Target(resource, namespace, name, subresource), watch_prefix

    def _serves_subresource(self, resource: Resource, subresource: str) -> bool:
        if subresource not in resource.subresources:
            return False
        return not (subresource in ("dynamic", "allocated")
                    and not self.config.feature_gates.enabled(DYNAMIC_CONTAINERS))

    async def _resource(self, request: web.Request, group: str, version: str,
                        rest: list[str]) -> web.StreamResponse:
        target, watch_prefix = self._target(group, version, rest)
        if target.resource.warnings:
            request[RESOURCE_WARNINGS] = target.resource.warnings
        if is_review(target.resource):
            return await self.reviews.handle(request, target, request.get(USER))
        method = request.method
        handlers = self.rest
        if target.subresource:
            sub = target.subresource
            if sub == "binding":
                if method == "POST":
                    return await handlers.bind(request, target)
            elif sub == "eviction":
                if method == "POST":
                    return await handlers.evict(request, target)
            elif sub == "scale":
                return await scale.handle_scale(request, target, self.registry,
                                                self.config.max_body_bytes)
            elif sub == "finalize":
                if method == "PUT":
                    return await handlers.update(request, target)
            elif sub == "allocated":
                if method == "GET":
                    return await nodeproxy.pod_allocated(request, self.registry,
                                                         target.resource, target.namespace,
                                                         target.name, self.kubelets)
            elif sub == "log":
                if method == "GET":
                    return await nodeproxy.pod_log(request, self.registry, target.resource,
                                                   target.namespace, target.name,
                                                   self.kubelets)
            elif sub == "proxy" and target.resource.plural == "pods":
                if method in podproxy.PROXY_METHODS:
                    return await podproxy.pod_proxy(request, self.registry, target.resource,
                                                    target.namespace, target.name,
                                                    self.kubelets)
            elif sub == "proxy" and target.resource.plural == "services":
                if method in podproxy.PROXY_METHODS:
                    return await serviceproxy.service_proxy(request, self.registry,
                                                            target.resource, target.namespace,
                                                            target.name, self.kubelets)
            elif sub == "proxy":
                if method == "GET":
                    return await nodeproxy.node_proxy(request, self.registry, target.name,
                                                      self.kubelets)
            elif sub == "token":
                if method == "POST":
                    return await tokenrequest.create_token(
                        request, self.registry, self.config.token_issuer,
                        list(self.config.api_audiences), target.namespace, target.name,
                        self.config.max_body_bytes)
            elif sub == "portforward":
                if method in ("GET", "POST"):
                    return await nodeproxy.pod_port_forward(request, self.registry,
                                                            target.resource, target.namespace,
                                                            target.name, self.kubelets)
            elif sub in ("exec", "attach"):
                if method in ("GET", "POST"):
                    return await nodeproxy.pod_stream(request, self.registry, target.resource,
                                                      target.namespace, target.name, sub,
                                                      self.kubelets)
            elif method == "GET":
                return await handlers.get(request, target)
            elif method == "PUT":
                return await handlers.update(request, target)
            elif method == "PATCH":
                return await handlers.patch(request, target)
            raise method_not_allowed()
        verbs = target.resource.verbs  # upstream installs no handler for any other verb
        if method == "GET":
            if watch_prefix or query_flag(request.query, "watch"):
                if "watch" not in verbs:
                    raise method_not_allowed()
                return await serve_watch(request, self.registry, target, self.watch_settings,
                                         request.app[STOP])
            if target.name:
                if "get" not in verbs:
                    raise method_not_allowed()
                return await handlers.get(request, target)
            if "list" not in verbs:
                raise method_not_allowed()
            return await handlers.list_(request, target)
        if watch_prefix:
            raise method_not_allowed()
        if target.name:
            verb = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
            if verb is None or verb not in verbs:
                raise method_not_allowed()
            if method == "PUT":
                return await handlers.update(request, target)
            if method == "PATCH":
                return await handlers.patch(request, target)
            return await handlers.delete(request, target)
        if method == "POST":
            if target.resource.group == authnreviews.GROUP:
                return await authnreviews.create_review(
                    request, target.resource, self._token_authenticator(),
                    self.config.api_audiences, self.config.max_body_bytes)
            return await handlers.create(request, target)
        if method == "DELETE":
            return await handlers.delete_collection(request, target)
        raise method_not_allowed()

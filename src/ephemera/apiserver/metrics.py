"""The apiserver's request metrics, served as `GET /metrics` in Prometheus' text format:
upstream's names, labels and buckets for what its scalability SLOs are measured with.

- `apiserver_request_total{verb, dry_run, group, version, resource, subresource, scope,
  component, code}`: every request answered.
- `apiserver_request_duration_seconds{verb, dry_run, group, version, resource, subresource,
  scope, component}` (histogram): from the request's arrival at the middleware until its
  handler returned (for a watch: until the stream ended).
- `apiserver_request_sli_duration_seconds{verb, group, version, resource, subresource,
  scope, component}` (histogram): the same less the time the request waited in its priority
  level's queue (`ephemera.apiserver.priority`); ephemera calls no webhooks, the other thing
  upstream leaves out. Not recorded for WATCH and CONNECT, which are as long as their
  clients keep them. This is the histogram upstream's SLO "mutating API calls p99 ≤ 1 s" is
  read from.
- `apiserver_flowcontrol_request_wait_duration_seconds{flow_schema, priority_level,
  execute}` (histogram): the wait for a seat of each request a priority level admitted
  (`execute="true"`) or refused with 429 (`"false"`). The levels are ephemera's two:
  `node-high` (its `flow_schema` upstream's `system-node-high`, the one that matches it) and
  `normal` (all of upstream's other levels in one; its `flow_schema` is `normal` too).

Labels as upstream's `metrics.MonitorRequest` sets them: `verb` is `GET`, `LIST`, `WATCH`,
`POST`, `PUT`, `PATCH`, `APPLY` (a server-side apply), `DELETE` (a collection's too) or
`CONNECT` (exec, attach, port-forward, proxy, logs streamed), the HTTP method for a path
that is no resource; `scope` is `resource` (a named object), `namespace` or `cluster` (a
collection), empty for a non-resource path; `component` is `apiserver`; `dry_run` is the
request's `dryRun` values joined with commas.

Each apiserver process keeps its own counts (upstream's are per apiserver too): with
`ephemera apiserver --workers N`, one scrape of the shared port answers for the worker that
took the connection; its `ephemera_apiserver_worker_info{worker="I"}` (only on workers) says
which one answered.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ephemera.apiserver.authz.requestinfo import attributes_of

__all__ = ["CONTENT_TYPE", "METRICS", "QUEUE_WAIT", "ApiserverMetrics", "metrics_middleware"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
COMPONENT = "apiserver"
REQUEST_BUCKETS = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6,
                   8, 10, 15, 20, 30, 45, 60)
SLI_BUCKETS = (0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20,
               30, 45, 60)
WAIT_BUCKETS = (0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30)
# API verbs (`Attributes.verb`) as upstream's metrics name them.
VERBS = {"get": "GET", "list": "LIST", "watch": "WATCH", "create": "POST", "update": "PUT",
         "patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETE"}
CONNECT_SUBRESOURCES = frozenset({"exec", "attach", "portforward", "proxy"})
APPLY_PATCH = "application/apply-patch+yaml"
# What the priority middleware leaves on a request it queued: (priority level, flow schema,
# seconds waited, whether it then executed).
QUEUE_WAIT: web.RequestKey[tuple[str, str, float, bool]] = web.RequestKey(
    "queue_wait", tuple)

REQUEST_LABELS = ("verb", "dry_run", "group", "version", "resource", "subresource", "scope",
                  "component")
SLI_LABELS = ("verb", "group", "version", "resource", "subresource", "scope", "component")


class ApiserverMetrics:
    """One apiserver's request metrics, in a registry of its own (several apiservers in one
    test process never mix)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "apiserver_request", "Counter of apiserver requests broken out for each verb, "
            "dry run value, group, version, resource, scope, component, and HTTP response "
            "code.", (*REQUEST_LABELS, "code"), registry=self.registry)
        self.durations = Histogram(
            "apiserver_request_duration_seconds", "Response latency distribution in seconds "
            "for each verb, dry run value, group, version, resource, subresource, scope and "
            "component.", REQUEST_LABELS, buckets=REQUEST_BUCKETS, registry=self.registry)
        self.sli_durations = Histogram(
            "apiserver_request_sli_duration_seconds", "Response latency distribution (not "
            "counting webhook duration and priority & fairness queue wait times) in seconds "
            "for each verb, group, version, resource, subresource, scope and component.",
            SLI_LABELS, buckets=SLI_BUCKETS, registry=self.registry)
        self.queue_waits = Histogram(
            "apiserver_flowcontrol_request_wait_duration_seconds", "Length of time a request "
            "spent waiting in its queue", ("flow_schema", "priority_level", "execute"),
            buckets=WAIT_BUCKETS, registry=self.registry)
        # The labelled children each label set (and code) counts in, looked up once: a
        # `labels()` call checks and converts every value and takes a lock.
        self._children: dict[tuple[str, str, str, str, str, str, str, int],
                             tuple[Any, Any, Any]] = {}
        self._wait_children: dict[tuple[str, str, bool], Any] = {}

    def set_worker(self, index: int) -> None:
        """This process is worker `index` of `ephemera apiserver --workers`: say so in every
        scrape, so that a client scraping the shared port can tell the workers apart."""
        Gauge("ephemera_apiserver_worker_info", "Always 1; its label is the index of the "
              "worker of `ephemera apiserver --workers` that answered this scrape.", ("worker",),
              registry=self.registry).labels(str(index)).set(1)

    def observe(self, request: web.Request, code: int, seconds: float) -> None:
        """Count one answered request that took `seconds` in all."""
        verb, group, version, resource, subresource, scope = request_labels(request)
        dry_run = ",".join(sorted(request.query.getall("dryRun", [])))
        key = (verb, dry_run, group, version, resource, subresource, scope, code)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = self._labelled(key)
        total, duration, sli = children
        total.inc()
        duration.observe(seconds)
        waited = request.get(QUEUE_WAIT)
        if waited is not None:
            level, flow_schema, wait, executed = waited
            wait_key = (flow_schema, level, executed)
            waits = self._wait_children.get(wait_key)
            if waits is None:
                waits = self._wait_children[wait_key] = self.queue_waits.labels(
                    flow_schema, level, "true" if executed else "false")
            waits.observe(wait)
            seconds -= wait
        if sli is not None:
            sli.observe(max(0.0, seconds))

    def _labelled(self, key: tuple[str, str, str, str, str, str, str, int]
                  ) -> tuple[Any, Any, Any]:
        """The children of `requests`, `durations` and `sli_durations` (None for a WATCH or
        a CONNECT, which it does not count) a request of these labels and code counts in."""
        verb, dry_run, group, version, resource, subresource, scope, code = key
        total = self.requests.labels(verb, dry_run, group, version, resource, subresource,
                                     scope, COMPONENT, str(code))
        duration = self.durations.labels(verb, dry_run, group, version, resource, subresource,
                                         scope, COMPONENT)
        sli = (None if verb in ("WATCH", "CONNECT") else
               self.sli_durations.labels(verb, group, version, resource, subresource, scope,
                                         COMPONENT))
        return total, duration, sli

    def render(self) -> bytes:
        return generate_latest(self.registry)


def request_labels(request: web.Request) -> tuple[str, str, str, str, str, str]:
    """verb, group, version, resource, subresource and scope of an authenticated request."""
    a = attributes_of(request)
    if not a.resource_request:
        return request.method.upper(), "", "", "", "", ""
    verb = VERBS.get(a.verb, a.verb.upper())
    if a.subresource in CONNECT_SUBRESOURCES or (
            a.subresource == "log" and request.query.get("follow") in ("true", "1")):
        verb = "CONNECT"
    elif verb == "PATCH" and request.content_type == APPLY_PATCH:
        verb = "APPLY"
    scope = "resource" if a.name else "namespace" if a.namespace else "cluster"
    return verb, a.api_group, a.api_version, a.resource, a.subresource, scope


METRICS: web.AppKey[ApiserverMetrics] = web.AppKey("metrics", ApiserverMetrics)


@web.middleware
async def metrics_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Time every request from its arrival until its handler returned (outermost, so that
    every error answer is counted with its code)."""
    started = time.monotonic()
    response: web.StreamResponse = await handler(request)
    request.app[METRICS].observe(request, response.status, time.monotonic() - started)
    return response

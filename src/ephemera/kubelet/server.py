"""The kubelet's HTTPS server (upstream's `pkg/kubelet/server`), on its own port:

- `GET /healthz`: `ok`.
- `GET /pods`: a `PodList` of the pods admitted to this node, with the statuses the kubelet
  computed.
- `GET /containerLogs/NS/POD/CONTAINER?follow=&tailLines=&previous=&timestamps=&sinceSeconds=
  &sinceTime=&limitBytes=`: the container's log as plain text (see `ephemera.kubelet.logs`),
  streamed while `follow` lasts. A container with no log to show is a 400 whose text is
  upstream's (`container "c" in pod "p" is waiting to start: ContainerCreating`, `previous
  terminated container "c" in pod "p" not found`, ...); an unknown pod a 404.
- `GET /metrics`: Prometheus text (`ephemera.kubelet.metrics.KubeletMetrics`).
- `GET|POST /exec/NS/POD/CONTAINER`, `GET|POST /attach/NS/POD/CONTAINER`: WebSocket with the
  Kubernetes channel protocols (see `ephemera.kubelet.streaming`).

TLS with the kubelet's serving certificate. With a client CA, every path but `/healthz`
needs a client certificate signed by it (the apiserver presents one), else 401, as upstream's
x509 authentication with anonymous access off.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ephemera.kubelet.logs import LogOptions, parse_time, stream_log
from ephemera.kubelet.metrics import KubeletMetrics
from ephemera.kubelet.streaming import StreamHost, serve_attach, serve_exec

__all__ = [
    "LogLookupError",
    "LogSource",
    "ServerHost",
    "create_kubelet_app",
    "kubelet_ssl_context",
]

log = logging.getLogger(__name__)


class LogLookupError(Exception):
    """No log to show: `code` 400 (the container's state says why) or 404 (no such pod)."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class LogSource:
    """Where a container instance's log is, and whether it may still grow."""

    path: Path
    still_running: Callable[[], Awaitable[bool]]


class ServerHost(StreamHost, Protocol):
    """What the server asks the kubelet."""

    def admitted_pods(self) -> list[dict[str, Any]]: ...

    async def log_source(self, namespace: str, pod: str, container: str,
                         previous: bool) -> LogSource: ...


def kubelet_ssl_context(cert_file: Path, key_file: Path,
                        client_ca_file: Path | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        ctx.load_verify_locations(cafile=str(client_ca_file))
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def _bool(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "t", "true")


def _int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f'invalid {name} "{raw}"') from None


def log_options(request: web.Request) -> LogOptions:
    since_ns = None
    since_seconds = _int(request, "sinceSeconds")
    if since_seconds is not None:
        since_ns = time.time_ns() - since_seconds * 1_000_000_000
    since_time = request.query.get("sinceTime")
    if since_time:
        since_ns = parse_time(since_time)
        if since_ns is None:
            raise web.HTTPBadRequest(text=f'invalid sinceTime "{since_time}"')
    tail = _int(request, "tailLines")
    limit = _int(request, "limitBytes")
    return LogOptions(follow=_bool(request, "follow"),
                      tail_lines=tail if tail is not None and tail >= 0 else None,
                      timestamps=_bool(request, "timestamps"), since_ns=since_ns,
                      limit_bytes=limit if limit is not None and limit > 0 else None)


def create_kubelet_app(host: ServerHost, metrics: KubeletMetrics, *,
                       require_client_cert: bool = False) -> web.Application:
    """The kubelet's aiohttp application."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
        if require_client_cert and request.path != "/healthz":
            transport = request.transport
            peer = transport.get_extra_info("peercert") if transport is not None else None
            if not peer:
                return web.Response(status=401, text="Unauthorized")
        response: web.StreamResponse = await handler(request)
        return response

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def pods(request: web.Request) -> web.Response:
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                "items": host.admitted_pods()}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def container_logs(request: web.Request) -> web.StreamResponse:
        ns = request.match_info["namespace"]
        pod = request.match_info["pod"]
        container = request.match_info["container"]
        options = log_options(request)
        try:
            source = await host.log_source(ns, pod, container, _bool(request, "previous"))
        except LogLookupError as err:
            return web.Response(status=err.code, text=err.message)
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)

        async def write(data: bytes) -> None:
            await response.write(data)

        try:
            await stream_log(source.path, options, write,
                             source.still_running if options.follow else None)
        except (ConnectionResetError, ConnectionError):
            return response
        await response.write_eof()
        return response

    async def allocated_pods(request: web.Request) -> web.Response:
        """KEP-5972 `/allocatedPods`: the pods as the node allocated them, status blank."""
        listing = getattr(host, "allocated_pods", None)
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                "items": listing() if listing is not None else []}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def allocated_pod(request: web.Request) -> web.Response:
        """KEP-5972 `/allocatedPods/UID`: one allocated pod (404 when not allocated)."""
        uid = request.match_info["uid"]
        lookup = getattr(host, "allocated_pod", None)
        pod = lookup(uid) if lookup is not None else None
        if pod is None:
            return web.Response(status=404, text=f'pod with UID "{uid}" is not allocated '
                                                 f'on this node')
        return web.Response(body=orjson.dumps(pod), content_type="application/json")

    async def stats_summary(request: web.Request) -> web.Response:
        """The Summary API (`ephemera.kubelet.stats.summary_json`)."""
        summary = getattr(host, "stats_summary", None)
        if summary is None:
            return web.Response(status=404, text="404 page not found\n")
        body = await summary()
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def metrics_handler(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(middlewares=[authenticate])
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/pods", pods)
    app.router.add_get("/pods/", pods)
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/stats/summary", stats_summary)
    app.router.add_get("/stats/summary/", stats_summary)
    app.router.add_get("/allocatedPods", allocated_pods)
    app.router.add_get("/allocatedPods/", allocated_pods)
    app.router.add_get("/allocatedPods/{uid}", allocated_pod)
    for path, stream_handler in (("/exec", serve_exec), ("/attach", serve_attach)):
        async def stream(request: web.Request, serve: Any = stream_handler
                         ) -> web.StreamResponse:
            response: web.StreamResponse = await serve(request, host)
            return response

        for method in ("GET", "POST"):
            app.router.add_route(method, path + "/{namespace}/{pod}/{container}", stream)
    return app

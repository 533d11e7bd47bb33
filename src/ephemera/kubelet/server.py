"""The kubelet's HTTPS server (upstream's `pkg/kubelet/server`), on its own port:

- `GET /healthz`: `ok`.
- `GET /pods`: a `PodList` of the pods admitted to this node, with the statuses the kubelet
  computed.
- `GET /containerLogs/NS/POD/CONTAINER?...`: the container's log as plain text, served by
  `ephemera.kubelet.logs` (which file, the options, upstream's texts when there is none).
- `GET /metrics`: Prometheus text (`ephemera.kubelet.metrics.KubeletMetrics`).
- `GET|POST /exec/NS/POD/CONTAINER`, `GET|POST /attach/NS/POD/CONTAINER`: WebSocket with the
  Kubernetes channel protocols (see `ephemera.kubelet.streaming`).
- `GET|POST /portForward/NS/POD`: WebSocket port-forward, SPDY/3.1 tunnelled or the channel
  protocol (see `ephemera.kubelet.portforward`).

TLS with the kubelet's serving certificate. With a client CA, every path but `/healthz`
needs a client certificate signed by it (the apiserver presents one), else 401, as upstream's
x509 authentication with anonymous access off.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ephemera.kubelet.logs import LogHost, serve_container_logs
from ephemera.kubelet.metrics import KubeletMetrics
from ephemera.kubelet.portforward import PortForwardHost, serve_port_forward
from ephemera.kubelet.streaming import StreamHost, serve_attach, serve_exec

__all__ = [
    "ServerHost",
    "create_kubelet_app",
    "kubelet_ssl_context",
]

log = logging.getLogger(__name__)


class ServerHost(StreamHost, LogHost, PortForwardHost, Protocol):
    """What the server asks the kubelet."""

    def admitted_pods(self) -> list[dict[str, Any]]: ...


def kubelet_ssl_context(cert_file: Path, key_file: Path | None,
                        client_ca_file: Path | None) -> ssl.SSLContext:
    """The server's TLS context (`key_file` None: the key is in `cert_file` too). Loading
    another pair into it later (`load_cert_chain`) serves that pair on new connections."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        ctx.load_verify_locations(cafile=str(client_ca_file))
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


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
        return await serve_container_logs(request, host)

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
    async def port_forward(request: web.Request) -> web.StreamResponse:
        return await serve_port_forward(request, host)

    for method in ("GET", "POST"):
        app.router.add_route(method, "/portForward/{namespace}/{pod}", port_forward)
    for path, stream_handler in (("/exec", serve_exec), ("/attach", serve_attach)):
        async def stream(request: web.Request, serve: Any = stream_handler
                         ) -> web.StreamResponse:
            response: web.StreamResponse = await serve(request, host)
            return response

        for method in ("GET", "POST"):
            app.router.add_route(method, path + "/{namespace}/{pod}/{container}", stream)
    return app

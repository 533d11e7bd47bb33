"""`pods/[SCHEME:]NAME[:PORT]/proxy[/PATH]`: an HTTP request relayed to a port of a pod
(upstream's pod `ProxyREST` + `ResourceLocation`), and the one relay to a pod's port that
`services/NAME/proxy` uses too (`relay_to_pod`; `ephemera.apiserver.serviceproxy` picks the
pod).

- The name is split as upstream's `SplitSchemeNamePort`: `web`, `web:8080`, `http:web:8080`;
  a port left out is the first declared `containerPort` of the pod's containers, else 80.
  `https` is refused with a 400 (ephemera does not speak TLS to pods; said, not ignored).
- Upstream dials the pod's IP from the apiserver. ephemera reaches the port the way
  port-forward does, through the pod's kubelet (`/portForward/NS/POD?port=P`, the
  `v4.channel.k8s.io` channel protocol), which connects to it inside the pod's network
  namespace: so a pod is reachable whether or not it has an IP the apiserver can route to,
  and from an apiserver on another machine. One connection per request (`Connection:
  close`); the answer is read whole, then its status, headers (hop-by-hop ones dropped) and
  body are relayed. Upstream's rewriting of links in proxied HTML is not done.
- The methods are upstream's proxy verbs: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS.
- A missing pod is 404; a pod not bound to a node 400 `pod NAME does not have a host
  assigned`; a port that refuses is upstream's 503 `error trying to reach service: ...`
  with the kubelet's text of the failed dial.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import struct
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
from aiohttp import web

from ephemera.api import errors
from ephemera.api.errors import StatusError
from ephemera.api.goformat import go_quote
from ephemera.apiserver.nodeproxy import KubeletClient, kubelet_url
from ephemera.apiserver.resources import Resource, core_resource
from ephemera.client.goerrors import dial_error

__all__ = ["PROXY_METHODS", "PortUnreachable", "pod_proxy", "proxy_path", "relay_to_pod",
           "split_scheme_name_port"]

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate",
                        "proxy-authorization", "te", "trailer", "transfer-encoding",
                        "upgrade", "content-length"})
# What is not passed on to the pod: the caller's credentials for the apiserver.
NOT_FORWARDED = HOP_BY_HOP | {"authorization", "host", "impersonate-user",
                              "impersonate-group"}
PROXY_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
PROXY_TIMEOUT = 60.0
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def split_scheme_name_port(id_: str) -> tuple[str, str, str] | None:
    """(scheme, name, port) of `name`, `name:port` or `scheme:name:port`; None if invalid."""
    parts = id_.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, name, port = "", parts[0], parts[1]
    elif len(parts) == 3:
        scheme, name, port = parts
        if scheme not in ("http", "https"):
            return None
    else:
        return None
    if not name:
        return None
    return scheme, name, port


def _default_port(pod: Mapping[str, Any]) -> int:
    for c in (pod.get("spec") or {}).get("containers") or []:
        ports = c.get("ports") or [] if isinstance(c, dict) else []
        if ports and isinstance(ports[0], dict) and ports[0].get("containerPort"):
            return int(ports[0]["containerPort"])
    return 80


def _named_port(pod: Mapping[str, Any], text: str) -> int | None:
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in (c.get("ports") or []) if isinstance(c, dict) else []:
            if isinstance(p, dict) and p.get("name") == text and p.get("containerPort"):
                return int(p["containerPort"])
    return None


def proxy_path(request: web.Request, plural: str, raw_name: str) -> str:
    raw = request.raw_path.split("?", 1)[0]
    marker = f"/{plural}/{raw_name}/proxy"
    at = raw.find(marker)
    rest = raw[at + len(marker):] if at >= 0 else ""
    return rest if rest.startswith("/") else "/" + rest


def _http_request(request: web.Request, path: str, host: str, body: bytes) -> bytes:
    target = path + ("?" + request.query_string if request.query_string else "")
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: {host}", "Connection: close"]
    for name, value in request.headers.items():
        if name.lower() not in NOT_FORWARDED:
            lines.append(f"{name}: {value}")
    if body or request.method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class PortUnreachable(Exception):
    """The pod's port could not be reached (the kubelet's text)."""


class _Raw:
    """What `http.client.HTTPResponse` reads an answer from."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self.data)


async def _exchange(kubelets: KubeletClient, url: str, port: int, payload: bytes) -> bytes:
    """Send `payload` to the pod's `port` through the kubelet and read to the end; raises
    PortUnreachable with the kubelet's text when the port cannot be reached."""
    received = bytearray()
    error = bytearray()
    async with kubelets.session().ws_connect(
            url, params=[("port", str(port))], protocols=("v4.channel.k8s.io",),
            ssl=kubelets.ssl_for(False), max_msg_size=MAX_ANSWER_BYTES,
            timeout=aiohttp.ClientWSTimeout(ws_receive=PROXY_TIMEOUT, ws_close=5.0)) as ws:
        prefixes = {0: False, 1: False}
        sent = False
        async for message in ws:
            if message.type != aiohttp.WSMsgType.BINARY or not message.data:
                continue
            channel, data = message.data[0], message.data[1:]
            if channel in prefixes and not prefixes[channel]:
                prefixes[channel] = True  # each channel starts with the port
                if len(data) >= 2 and struct.unpack("<H", data[:2])[0] == port:
                    data = data[2:]
                if all(prefixes.values()) and not sent:
                    await ws.send_bytes(b"\x00" + payload)
                    sent = True
            if channel == 0:
                received += data
                if len(received) > MAX_ANSWER_BYTES:
                    raise PortUnreachable("the pod's answer is too large")
            elif channel == 1 and data:
                error += data
                break
    if error:
        raise PortUnreachable(error.decode(errors="replace"))
    return bytes(received)


async def pod_proxy(request: web.Request, registry: Any, pods: Resource, namespace: str,
                    raw_name: str, kubelets: KubeletClient) -> web.StreamResponse:
    """Serve `pods/NAME[:PORT]/proxy[/PATH]`."""
    parts = split_scheme_name_port(raw_name)
    if parts is None:
        raise errors.bad_request(f"invalid pod request {go_quote(raw_name)}")
    scheme, name, port_text = parts
    pod = await registry.get(pods, namespace, name)
    if scheme == "https":
        raise errors.bad_request("ephemera proxies to pods over plain HTTP only: "
                                 "https is not supported")
    if not port_text:
        port = _default_port(pod)
    elif port_text.isdigit():
        port = int(port_text)
    else:
        named = _named_port(pod, port_text)
        if named is None:
            raise errors.bad_request(f"no port named {port_text} in pod {name}")
        port = named
    if not 0 < port <= 0xFFFF:
        raise errors.bad_request(f"invalid port {port_text} for pod {name}")
    return await relay_to_pod(request, registry, kubelets, pod, port,
                              proxy_path(request, "pods", raw_name))


async def relay_to_pod(request: web.Request, registry: Any, kubelets: KubeletClient,
                       pod: Mapping[str, Any], port: int, path: str) -> web.StreamResponse:
    """Relay `request` to `path` on `port` of `pod` through the pod's kubelet and answer what
    the pod answered (see the module's docstring)."""
    md = pod.get("metadata") or {}
    namespace, name = str(md.get("namespace") or ""), str(md.get("name") or "")
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node_name:
        raise errors.bad_request(f"pod {name} does not have a host assigned")
    node = await registry.get(core_resource("nodes"), "", node_name)
    base = kubelet_url(kubelets, node)
    if base is None:
        raise errors.internal_error(f"node {node_name} does not report its kubelet's address")
    url = f"{base}/portForward/{quote(namespace, safe='')}/{quote(name, safe='')}"
    body = await request.read()
    payload = _http_request(request, path, f"{name}:{port}", body)
    try:
        answer = await asyncio.wait_for(_exchange(kubelets, url, port, payload),
                                        PROXY_TIMEOUT)
    except PortUnreachable as err:
        raise StatusError(503, "ServiceUnavailable",
                          f"error trying to reach service: {err}") from None
    except TimeoutError:
        raise StatusError(503, "ServiceUnavailable",
                          "error trying to reach service: i/o timeout") from None
    except aiohttp.WSServerHandshakeError as err:
        raise errors.internal_error(f"the kubelet refused the connection: {err.status} "
                                    f"{err.message}") from None
    except (aiohttp.ClientError, OSError) as err:
        where = urlsplit(url)
        raise errors.unknown("error dialing backend: " + dial_error(
            err, where.hostname or "", where.port or 443)) from None
    parsed = http.client.HTTPResponse(_Raw(answer), method=request.method)  # type: ignore[arg-type]
    try:
        parsed.begin()
        content = parsed.read()
    except (http.client.HTTPException, ValueError) as err:
        raise StatusError(503, "ServiceUnavailable",
                          f"error trying to reach service: malformed answer: "
                          f"{type(err).__name__}") from None
    headers = [(k, v) for k, v in parsed.getheaders() if k.lower() not in HOP_BY_HOP]
    response = web.Response(status=parsed.status, body=content)
    for key, value in headers:
        response.headers.add(key, value)
    return response

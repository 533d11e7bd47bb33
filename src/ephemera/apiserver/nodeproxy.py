"""What the apiserver asks of kubelets: `GET pods/NAME/log`, `pods/NAME/exec`,
`pods/NAME/attach` and `pods/NAME/portforward`, `GET pods/NAME/allocated`, and `GET
nodes/NAME/proxy/<path>` (relayed to the kubelet's `<path>`, e.g. `/stats/summary`; other
verbs are not proxied).

`pods/NAME/log` (upstream's `LogREST` + `LogLocation`):
- the options `container`, `follow`, `previous`, `timestamps`, `tailLines`, `sinceSeconds`,
  `sinceTime`, `limitBytes` are checked as upstream's `ValidatePodLogOptions` (`tailLines:
  Invalid value: -1: must be greater than or equal to 0`, `at most one of sinceTime or
  sinceSeconds may be specified`, ...);
- the container is the named one (`container c9 is not valid for pod p`) or the pod's only
  one (`a container name must be specified for pod p, choose one of: [a b]`);
- a pod not bound to a node answers an empty log, as upstream;
- the kubelet is found from its Node: `status.daemonEndpoints.kubeletEndpoint.Port` and the
  first of `status.addresses` by type InternalIP, Hostname, InternalDNS, ExternalIP,
  ExternalDNS (ephemera prefers the InternalIP: its kubelets listen on loopback);
- the request goes to `https://ADDRESS:PORT/containerLogs/NS/POD/CONTAINER?...` over TLS
  checked against the cluster CA (skipped with `insecureSkipTLSVerifyBackend=true`), with the
  apiserver's client certificate; the body is streamed back as `text/plain` (so `follow`
  streams). A kubelet error is relayed: its 404 as NotFound, anything else as a BadRequest
  whose message is the kubelet's text (`container "c" in pod "p" is waiting to start:
  ContainerCreating`). A kubelet that cannot be reached is what upstream's `LocationStreamer`
  answers: a 500 with no reason whose message is Go's `*url.Error` (`Get
  "https://127.0.0.1:10250/containerLogs/ns/p/c": dial tcp 127.0.0.1:10250: connect:
  connection refused`; `ephemera.client.goerrors` words it), the query in Go's order.

`GET|POST pods/NAME/exec` and `pods/NAME/attach` (upstream's `ExecREST`/`AttachREST` +
`streamLocation`):
- the query is `PodExecOptions`/`PodAttachOptions`: `command` (repeated), `container`,
  `stdin`, `stdout`, `stderr`, `tty` (a flag is on unless absent, `0` or `false`);
- the container is the named one (`container c9 is not valid for pod p`) or the pod's only
  one (`a container name must be specified for pod p, choose one of: [a b] or one of the
  init containers: [i]`); an unbound pod is `pod p does not have a host assigned`;
- the kubelet is asked at `/exec|attach/NS/POD/CONTAINER?command=..&input=1&output=1&
  error=1&tty=1` (the kubelet's parameter names). A WebSocket request is relayed to a
  WebSocket to the kubelet, offered the client's subprotocols; the client's upgrade is
  accepted with the one the kubelet chose, and frames (binary and text) go both ways
  unchanged until either side closes (see `ephemera.kubelet.streaming` for the channel
  protocols). A kubelet that refuses the upgrade has its status and text relayed as they
  are, as upstream's upgrade-aware proxy does (kubectl shows `unable to upgrade connection:
  container not found ("c")`). Any other request (SPDY) is passed to the kubelet as a plain
  request and its answer relayed: ephemera does not serve the plain SPDY upgrade, and kubectl uses
  WebSockets unless the upgrade fails. A kubelet that cannot be reached is upstream's
  upgrade-aware proxy's 500 with no reason, `error dialing backend: dial tcp
  127.0.0.1:10250: connect: connection refused`.

`GET|POST pods/NAME/portforward` (upstream's `PortForwardREST` + `PortForwardLocation`): an
unbound pod is `pod p does not have a host assigned`; each `ports` value becomes the
kubelet's `port`; the WebSocket is relayed to `/portForward/NS/POD` as exec's is, so kubectl's
`SPDY/3.1+portforward.k8s.io` tunnel and the channel protocol pass through unchanged (the
kubelet speaks them: `ephemera.kubelet.portforward`). kubectl's plain `Upgrade: SPDY/3.1`
(its fallback, and older clients' only way) is carried to the kubelet in that same WebSocket
tunnel (`ephemera.apiserver.spdyupgrade`). Any other request is relayed plainly, and the
kubelet refuses it with a 400 that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
from aiohttp import web

from ephemera.aiotasks import cancel_and_wait
from ephemera.api import errors, field
from ephemera.api.errors import StatusError
from ephemera.api.goformat import go_quote
from ephemera.apiserver import spdyupgrade
from ephemera.apiserver.resources import Resource, core_resource
from ephemera.client.goerrors import dial_error, request_error

__all__ = ["KubeletClient", "kubelet_address", "node_proxy", "pod_log", "pod_port_forward",
           "pod_stream", "validate_container"]

ADDRESS_PREFERENCE = ("InternalIP", "Hostname", "InternalDNS", "ExternalIP", "ExternalDNS")
LOG_OPTIONS = ("follow", "previous", "timestamps", "tailLines", "sinceSeconds", "sinceTime",
               "limitBytes")
CONNECT_TIMEOUT = 10.0


class KubeletClient:
    """HTTP(S) to kubelets: one connection pool per apiserver."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None,
                 scheme: str = "https") -> None:
        self.ssl_context = ssl_context
        self.scheme = scheme
        self._session: aiohttp.ClientSession | None = None
        self._insecure: ssl.SSLContext | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No total time-out: exec and attach WebSockets last as long as their sessions.
            self._session = aiohttp.ClientSession(
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT))
        return self._session

    def ssl_for(self, insecure: bool) -> ssl.SSLContext | bool:
        if self.scheme != "https":
            return False
        if not insecure:
            return self.ssl_context if self.ssl_context is not None else True
        if self._insecure is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            self._insecure = ctx
        return self._insecure

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def kubelet_address(node: Mapping[str, Any]) -> tuple[str, int] | None:
    """(address, port) of the node's kubelet; None when the node does not say."""
    status = node.get("status") or {}
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    addresses = [a for a in status.get("addresses") or [] if isinstance(a, dict)]
    for kind in ADDRESS_PREFERENCE:
        for address in addresses:
            if address.get("type") == kind and address.get("address"):
                if not isinstance(port, int) or port <= 0:
                    return None
                return str(address["address"]), port
    return None


def kubelet_url(kubelets: KubeletClient, node: Mapping[str, Any]) -> str | None:
    """`scheme://host:port` of the node's kubelet (IPv6 hosts bracketed), or None when the
    Node reports no address or port."""
    location = kubelet_address(node)
    if location is None:
        return None
    host, port = location
    host_text = f"[{host}]" if ":" in host else host
    return f"{kubelets.scheme}://{host_text}:{port}"


def _container_names(pod: Mapping[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    return [str(c.get("name")) for key in ("initContainers", "containers",
                                           "ephemeralContainers")
            for c in spec.get(key) or [] if isinstance(c, dict)]


def validate_container(container: str, pod: Mapping[str, Any]) -> str:
    """Upstream's `validateContainer`: the container the log is of."""
    name = str((pod.get("metadata") or {}).get("name") or "")
    if not container:
        containers = (pod.get("spec") or {}).get("containers") or []
        if len(containers) == 1:
            return str(containers[0].get("name"))
        if not containers:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        names = " ".join(_container_names(pod))
        raise errors.bad_request(
            f"a container name must be specified for pod {name}, choose one of: [{names}]")
    if container not in _container_names(pod):
        raise errors.bad_request(f"container {container} is not valid for pod {name}")
    return container


def _int_option(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(
            f'strconv.ParseInt: parsing {go_quote(raw)}: invalid syntax') from None


def _validate_options(request: web.Request, pod_name: str) -> None:
    errs = []
    tail = _int_option(request, "tailLines")
    if tail is not None and tail < 0:
        errs.append(field.invalid("tailLines", tail, "must be greater than or equal to 0"))
    limit = _int_option(request, "limitBytes")
    if limit is not None and limit < 1:
        errs.append(field.invalid("limitBytes", limit, "must be greater than 0"))
    since = _int_option(request, "sinceSeconds")
    if since is not None and since < 1:
        errs.append(field.invalid("sinceSeconds", since, "must be greater than 0"))
    if since is not None and request.query.get("sinceTime"):
        errs.append(field.forbidden("", "at most one of sinceTime or sinceSeconds may be "
                                        "specified"))
    if errs:
        raise errors.invalid("PodLogOptions", pod_name, errs)


async def pod_log(request: web.Request, registry: Any, pods: Resource, namespace: str,
                  name: str, kubelets: KubeletClient) -> web.StreamResponse:
    """Serve `GET pods/NAME/log` by asking the pod's kubelet."""
    pod = await registry.get(pods, namespace, name)
    _validate_options(request, name)
    container = validate_container(request.query.get("container", ""), pod)
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node_name:
        return web.Response(body=b"", content_type="text/plain")
    node = await registry.get(core_resource("nodes"), "", node_name)
    base = kubelet_url(kubelets, node)
    if base is None:
        raise errors.internal_error(f"node {node_name} does not report its kubelet's address")
    path = "/".join(quote(part, safe="") for part in (namespace, name, container))
    url = f"{base}/containerLogs/{path}"
    # Go's `url.Values.Encode`: keys sorted, so the URL in an error reads as upstream's.
    query = urlencode(sorted((k, request.query[k]) for k in LOG_OPTIONS if k in request.query))
    if query:
        url += "?" + query
    insecure = request.query.get("insecureSkipTLSVerifyBackend", "").lower() == "true"
    timeout = aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT, sock_read=None)
    try:
        upstream = await kubelets.session().get(url, timeout=timeout,
                                                ssl=kubelets.ssl_for(insecure))
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        raise errors.unknown(request_error("GET", url, err)) from None
    try:
        if upstream.status != 200:
            text = (await upstream.text(errors="replace")).strip()
            if upstream.status == 404:
                raise StatusError(404, "NotFound", text)
            raise errors.bad_request(text or f"kubelet answered {upstream.status}")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError, aiohttp.ClientError):
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response
    finally:
        upstream.close()


# -- pods/NAME/allocated (KEP-5972) ----------------------------------------------------------------


async def pod_allocated(request: web.Request, registry: Any, pods: Resource, namespace: str,
                        name: str, kubelets: KubeletClient) -> web.Response:
    """Serve `GET pods/NAME/allocated` by asking the pod's kubelet for `/allocatedPods/UID`:
    404 for a missing pod, 400 `pod p does not have a host assigned` for an unbound one,
    404 `nodes "n1" not found` when its node does not exist, 503 ServiceUnavailable `the
    pod's node "n1" has no reachable kubelet` when the Node reports no kubelet address; a
    kubelet that cannot be reached answers as a pod's log does (500, no reason, `Get
    "https://.../allocatedPods/UID": dial tcp ...: connect: connection refused`); 404 when
    the kubelet has not allocated the pod."""
    pod = await registry.get(pods, namespace, name)
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node_name:
        raise errors.bad_request(f"pod {name} does not have a host assigned")
    node = await registry.get(core_resource("nodes"), "", node_name)
    unreachable = StatusError(503, "ServiceUnavailable",
                              f'the pod\'s node {go_quote(node_name)} has no reachable kubelet')
    base = kubelet_url(kubelets, node)
    if base is None:
        raise unreachable
    uid = quote(str((pod.get("metadata") or {}).get("uid") or ""), safe="")
    url = f"{base}/allocatedPods/{uid}"
    insecure = request.query.get("insecureSkipTLSVerifyBackend", "").lower() == "true"
    timeout = aiohttp.ClientTimeout(total=30, connect=CONNECT_TIMEOUT)
    try:
        async with kubelets.session().get(url, timeout=timeout,
                                          ssl=kubelets.ssl_for(insecure)) as upstream:
            body = await upstream.read()
            status = upstream.status
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        raise errors.unknown(request_error("GET", url, err)) from None
    if status == 404:
        raise StatusError(404, "NotFound", body.decode(errors="replace").strip() or
                          f'pod {go_quote(name)} is not allocated on node {go_quote(node_name)}')
    if status != 200:
        raise errors.internal_error(body.decode(errors="replace").strip() or
                                    f"kubelet answered {status}")
    return web.Response(body=body, content_type="application/json")


# -- nodes/NAME/proxy -----------------------------------------------------------------------------


def _proxy_path(request: web.Request, node_name: str) -> str:
    """The kubelet path after `nodes/NAME/proxy` in the request's raw path ("/" when none)."""
    raw = request.raw_path.split("?", 1)[0]
    marker = f"/nodes/{node_name}/proxy"
    at = raw.find(marker)
    rest = raw[at + len(marker):] if at >= 0 else ""
    return rest if rest.startswith("/") else "/" + rest


async def node_proxy(request: web.Request, registry: Any, node_name: str,
                     kubelets: KubeletClient) -> web.StreamResponse:
    """Serve `GET nodes/NAME/proxy/<path>` (upstream's `ProxyREST`) by relaying the GET to
    the node's kubelet at `<path>` with the query: 404 `nodes "n1" not found` for a missing
    node, 503 ServiceUnavailable when the Node reports no kubelet address, upstream's
    reverse-proxy error when the kubelet cannot be reached (500, no reason, the dial error
    itself: `dial tcp 127.0.0.1:10250: connect: connection refused`); the kubelet's status,
    content type and body otherwise (`kubectl get --raw .../proxy/stats/summary`)."""
    node = await registry.get(core_resource("nodes"), "", node_name)
    unreachable = StatusError(503, "ServiceUnavailable",
                              f'the node {go_quote(node_name)} has no reachable kubelet')
    base = kubelet_url(kubelets, node)
    if base is None:
        raise unreachable
    url = f"{base}{_proxy_path(request, node_name)}"
    query = request.query_string
    if query:
        url += "?" + query
    timeout = aiohttp.ClientTimeout(total=60, connect=CONNECT_TIMEOUT)
    try:
        async with kubelets.session().get(url, timeout=timeout,
                                          ssl=kubelets.ssl_for(False)) as upstream:
            body = await upstream.read()
            status = upstream.status
            content_type = upstream.headers.get("Content-Type", "application/octet-stream")
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        raise errors.unknown(_dial_error(url, err)) from None
    return web.Response(status=status, body=body, headers={"Content-Type": content_type})


# -- exec and attach ------------------------------------------------------------------------------

STREAM_FLAGS = (("stdin", "input"), ("stdout", "output"), ("stderr", "error"), ("tty", "tty"))
MAX_STREAM_MESSAGE_BYTES = 16 * 1024 * 1024


def _query_flag(request: web.Request, name: str) -> bool:
    """apimachinery's `Convert_Slice_string_To_bool`: on unless absent, `0` or `false`."""
    values = request.query.getall(name, [])
    return bool(values) and values[0] != "0" and values[0].lower() != "false"


def stream_container(container: str, pod: Mapping[str, Any]) -> str:
    """Upstream's `streamLocation` container choice for exec and attach."""
    name = str((pod.get("metadata") or {}).get("name") or "")
    spec = pod.get("spec") or {}
    if not container:
        containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
        if len(containers) == 1:
            return str(containers[0].get("name"))
        if not containers:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        message = (f"a container name must be specified for pod {name}, choose one of: "
                   f"[{' '.join(str(c.get('name')) for c in containers)}]")
        inits = [str(c.get("name")) for c in spec.get("initContainers") or []
                 if isinstance(c, dict)]
        if inits:
            message += f" or one of the init containers: [{' '.join(inits)}]"
        raise errors.bad_request(message)
    if container not in _container_names(pod):
        raise errors.bad_request(f"container {container} is not valid for pod {name}")
    return container


def _is_websocket(request: web.Request) -> bool:
    return (request.headers.get("Upgrade", "").lower() == "websocket"
            and "upgrade" in request.headers.get("Connection", "").lower())


async def pod_stream(request: web.Request, registry: Any, pods: Resource, namespace: str,
                     name: str, subresource: str, kubelets: KubeletClient
                     ) -> web.StreamResponse:
    """Serve `pods/NAME/exec` or `pods/NAME/attach` by relaying to the pod's kubelet."""
    pod = await registry.get(pods, namespace, name)
    container = stream_container(request.query.get("container", ""), pod)
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node_name:
        raise errors.bad_request(f"pod {name} does not have a host assigned")
    node = await registry.get(core_resource("nodes"), "", node_name)
    base = kubelet_url(kubelets, node)
    if base is None:
        raise errors.internal_error(f"node {node_name} does not report its kubelet's address")
    path = "/".join(quote(part, safe="") for part in (namespace, name, container))
    url = f"{base}/{subresource}/{path}"
    params: list[tuple[str, str]] = []
    if subresource == "exec":
        params.extend(("command", c) for c in request.query.getall("command", []))
    params.extend((kubelet_name, "1") for option, kubelet_name in STREAM_FLAGS
                  if _query_flag(request, option))
    return await _relay_upgrade(request, kubelets, url, params)


async def pod_port_forward(request: web.Request, registry: Any, pods: Resource,
                           namespace: str, name: str, kubelets: KubeletClient
                           ) -> web.StreamResponse:
    """Serve `pods/NAME/portforward` (upstream's `PortForwardREST` + `PortForwardLocation`) by
    relaying the WebSocket to the kubelet's `/portForward/NS/POD`, each `ports` value passed
    as the kubelet's `port`: kubectl's `SPDY/3.1+portforward.k8s.io` and the Python client's
    `v4.channel.k8s.io` pass through unchanged (`ephemera.kubelet.portforward` speaks them)."""
    pod = await registry.get(pods, namespace, name)
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node_name:
        raise errors.bad_request(f"pod {name} does not have a host assigned")
    node = await registry.get(core_resource("nodes"), "", node_name)
    base = kubelet_url(kubelets, node)
    if base is None:
        raise errors.internal_error(f"node {node_name} does not report its kubelet's address")
    path = "/".join(quote(part, safe="") for part in (namespace, name))
    url = f"{base}/portForward/{path}"
    params: list[tuple[str, str]] = []
    for value in request.query.getall("ports", []):
        for text in value.split(","):
            try:
                port = int(text)
            except ValueError:
                raise errors.bad_request(
                    f'strconv.ParseInt: parsing {go_quote(text)}: invalid syntax') from None
            params.append(("port", str(port)))
    if spdyupgrade.is_spdy_upgrade(request):
        return await _spdy_port_forward(request, kubelets, url, params)
    return await _relay_upgrade(request, kubelets, url, params)


async def _spdy_port_forward(request: web.Request, kubelets: KubeletClient, url: str,
                             params: list[tuple[str, str]]) -> web.StreamResponse:
    """kubectl's plain SPDY upgrade, carried to the kubelet in the WebSocket tunnel
    (`ephemera.apiserver.spdyupgrade`)."""
    protocol = spdyupgrade.negotiate(request)
    if protocol is None:
        return spdyupgrade.refusal(request)
    ssl_option = kubelets.ssl_for(False)
    try:
        upstream = await kubelets.session().ws_connect(
            url, params=params, protocols=(spdyupgrade.SPDY_WEBSOCKET,), ssl=ssl_option,
            autoping=True, max_msg_size=MAX_STREAM_MESSAGE_BYTES,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=10.0))
    except aiohttp.WSServerHandshakeError:
        return await _relay_plain(request, kubelets, url, params, ssl_option)
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        raise errors.unknown("error dialing backend: " + _dial_error(url, err)) from None
    return await spdyupgrade.tunnel_spdy(request, upstream, protocol)


async def _relay_upgrade(request: web.Request, kubelets: KubeletClient, url: str,
                         params: list[tuple[str, str]]) -> web.StreamResponse:
    """A WebSocket request relayed to a WebSocket to the kubelet (see `pod_stream`)."""
    ssl_option = kubelets.ssl_for(False)
    if not _is_websocket(request):
        return await _relay_plain(request, kubelets, url, params, ssl_option)
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
               if p.strip()]
    try:
        upstream = await kubelets.session().ws_connect(
            url, params=params, protocols=offered, ssl=ssl_option, autoping=True,
            max_msg_size=MAX_STREAM_MESSAGE_BYTES,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=10.0))
    except aiohttp.WSServerHandshakeError:
        # aiohttp keeps no body of a refused upgrade: ask again plainly for the kubelet's text.
        return await _relay_plain(request, kubelets, url, params, ssl_option)
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        raise errors.unknown("error dialing backend: " + _dial_error(url, err)) from None
    try:
        client = web.WebSocketResponse(
            protocols=(upstream.protocol,) if upstream.protocol else (), autoping=True,
            max_msg_size=MAX_STREAM_MESSAGE_BYTES)
        await client.prepare(request)
        await _relay_websockets(client, upstream)
        return client
    finally:
        await upstream.close()


async def _relay_plain(request: web.Request, kubelets: KubeletClient, url: str,
                       params: list[tuple[str, str]], ssl_option: ssl.SSLContext | bool
                       ) -> web.Response:
    timeout = aiohttp.ClientTimeout(total=CONNECT_TIMEOUT * 3, connect=CONNECT_TIMEOUT)
    try:
        async with kubelets.session().request(request.method, url, params=params,
                                              ssl=ssl_option, timeout=timeout) as answer:
            text = await answer.text(errors="replace")
            return web.Response(status=answer.status, text=text,
                                content_type="text/plain")
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        raise errors.unknown("error dialing backend: " + _dial_error(url, err)) from None


def _dial_error(url: str, err: BaseException) -> str:
    """Go's dial error for the kubelet at `url`'s host and port."""
    parts = urlsplit(url)
    return dial_error(err, parts.hostname or "", parts.port or 443)


async def _relay_websockets(client: web.WebSocketResponse,
                            upstream: aiohttp.ClientWebSocketResponse) -> None:
    """Frames both ways until one side closes; then the other is closed too."""

    async def copy(source: Any, sink: Any) -> None:
        async for message in source:
            try:
                if message.type == aiohttp.WSMsgType.BINARY:
                    await sink.send_bytes(message.data)
                elif message.type == aiohttp.WSMsgType.TEXT:
                    await sink.send_str(message.data)
            except (ConnectionError, RuntimeError):
                return

    down = asyncio.ensure_future(copy(upstream, client))
    up = asyncio.ensure_future(copy(client, upstream))
    try:
        await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
        with contextlib.suppress(ConnectionError, RuntimeError):
            if down.done():
                await client.close()
            else:
                await upstream.close()
        await asyncio.wait({down, up}, timeout=10)
    finally:
        await cancel_and_wait(down, up)

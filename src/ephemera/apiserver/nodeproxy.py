"""What the apiserver asks of kubelets: `GET pods/NAME/log` today (`nodes/NAME/proxy/...`,
exec and attach and `pods/NAME/allocated` from the kubelet come with later issues and go
here too).

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
  ContainerCreating`); a kubelet that cannot be reached is a 500.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from ephemera.api import errors, field
from ephemera.api.errors import StatusError
from ephemera.apiserver.resources import Resource, lookup

__all__ = ["KubeletClient", "kubelet_address", "pod_log", "validate_container"]

ADDRESS_PREFERENCE = ("InternalIP", "Hostname", "InternalDNS", "ExternalIP", "ExternalDNS")
LOG_OPTIONS = ("follow", "previous", "timestamps", "tailLines", "sinceSeconds", "sinceTime",
               "limitBytes")
CONNECT_TIMEOUT = 10.0


def _nodes() -> Resource:
    resource = lookup("", "v1", "nodes")
    assert resource is not None
    return resource


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
            self._session = aiohttp.ClientSession(auto_decompress=False)
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
            f'strconv.ParseInt: parsing "{raw}": invalid syntax') from None


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
    node = await registry.get(_nodes(), "", node_name)
    location = kubelet_address(node)
    if location is None:
        raise errors.internal_error(f"node {node_name} does not report its kubelet's address")
    host, port = location
    host_text = f"[{host}]" if ":" in host else host
    path = "/".join(quote(part, safe="") for part in (namespace, name, container))
    url = f"{kubelets.scheme}://{host_text}:{port}/containerLogs/{path}"
    params = {k: request.query[k] for k in LOG_OPTIONS if k in request.query}
    insecure = request.query.get("insecureSkipTLSVerifyBackend", "").lower() == "true"
    timeout = aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT, sock_read=None)
    try:
        upstream = await kubelets.session().get(url, params=params, timeout=timeout,
                                                ssl=kubelets.ssl_for(insecure))
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        raise errors.internal_error(f'Get "{url}": {err}') from None
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

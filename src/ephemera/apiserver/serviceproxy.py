"""`services/[SCHEME:]NAME[:PORT]/proxy[/PATH]`: an HTTP request relayed to one ready endpoint
of a Service (upstream's service `ProxyREST` + `ResourceLocation`).

- The name is split as for pods (`web`, `web:80`, `web:http`, `http:web:80`); anything else
  is upstream's 400 `invalid service request "a:b:c:d"`.
- A numbered port is the Service's port of that number, replaced by its name (unnamed for a
  single-port Service); none is upstream's 503 `no service port 81 found for service "web"`.
  A named port, or none, is taken as the port's name.
- The endpoint is picked from the Service's EndpointSlices (label
  `kubernetes.io/service-name`; upstream reads the legacy Endpoints, which the same
  controller writes from the same pods): among the slices' ports of that name, a random ready
  endpoint (`conditions.ready` true or unset) whose `targetRef` is a pod that still exists
  (upstream's `isValidAddress`), and the slice port's number (the resolved `targetPort`).
  None is upstream's 503 `no endpoints available for service "web"`.
- The request then goes to that pod's port as `pods/proxy` sends it
  (`ephemera.apiserver.podproxy.relay_to_pod`: through the pod's kubelet). So an endpoint
  without a pod `targetRef` (a Service without a selector whose endpoints a user wrote, or
  the `kubernetes` Service) is not proxied to: upstream dials its address from the apiserver.
- `https` is refused with a 400 as for pods (no TLS to pods).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from ephemera.api import errors
from ephemera.api.errors import StatusError
from ephemera.api.goformat import go_quote
from ephemera.api.selectors import Selection
from ephemera.apiserver.nodeproxy import KubeletClient
from ephemera.apiserver.podproxy import proxy_path, relay_to_pod, split_scheme_name_port
from ephemera.apiserver.resources import Resource, core_resource, lookup

__all__ = ["pick_endpoint", "service_proxy"]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def _unavailable(message: str) -> StatusError:
    return StatusError(503, "ServiceUnavailable", message)


def service_port_name(service: Mapping[str, Any], port_text: str) -> str:
    """The port's name the request means: a number becomes its Service port's name."""
    if not port_text.isdigit():
        return port_text
    number = int(port_text)
    for port in (service.get("spec") or {}).get("ports") or []:
        if isinstance(port, dict) and port.get("port") == number:
            return str(port.get("name") or "")
    name = str((service.get("metadata") or {}).get("name") or "")
    raise _unavailable(f"no service port {number} found for service {go_quote(name)}")


def pick_endpoint(slices: list[Mapping[str, Any]], port_name: str,
                  rng: random.Random | None = None) -> list[tuple[str, int]]:
    """The candidate (pod name, port) pairs for `port_name`, in the random order to try them:
    the ready endpoints with a pod `targetRef` of each slice that has a port of that name."""
    rng = rng or random.Random()
    order = list(slices)
    rng.shuffle(order)
    found: list[tuple[str, int]] = []
    for item in order:
        ports = [p for p in item.get("ports") or []
                 if isinstance(p, dict) and str(p.get("name") or "") == port_name
                 and isinstance(p.get("port"), int)]
        if not ports:
            continue
        endpoints = [e for e in item.get("endpoints") or [] if isinstance(e, dict)]
        rng.shuffle(endpoints)
        for endpoint in endpoints:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            ref = endpoint.get("targetRef") or {}
            if ref.get("kind") != "Pod" or not ref.get("name"):
                continue
            found.append((str(ref["name"]), int(ports[0]["port"])))
    return found


async def service_proxy(request: web.Request, registry: Any, services: Resource,
                        namespace: str, raw_name: str, kubelets: KubeletClient
                        ) -> web.StreamResponse:
    """Serve `services/NAME[:PORT]/proxy[/PATH]`."""
    parts = split_scheme_name_port(raw_name)
    if parts is None:
        raise errors.bad_request(f"invalid service request {go_quote(raw_name)}")
    scheme, name, port_text = parts
    service = await registry.get(services, namespace, name)
    port_name = service_port_name(service, port_text)
    if scheme == "https":
        raise errors.bad_request("ephemera proxies to pods over plain HTTP only: "
                                 "https is not supported")
    slices_resource = lookup("discovery.k8s.io", "v1", "endpointslices")
    assert slices_resource is not None
    page = await registry.list(slices_resource, namespace, Selection.parse(
        "EndpointSlice", f"{SERVICE_NAME_LABEL}={name}", None))
    slices = [obj for obj in page.objects if obj is not None]
    pods = core_resource("pods")
    for pod_name, port in pick_endpoint(slices, port_name):
        try:
            pod = await registry.get(pods, namespace, pod_name)
        except StatusError as err:
            if err.code == 404:
                continue  # gone since the slice was written: upstream's isValidAddress
            raise
        return await relay_to_pod(request, registry, kubelets, pod, port,
                                  proxy_path(request, "services", raw_name))
    raise _unavailable(f"no endpoints available for service {go_quote(name)}")

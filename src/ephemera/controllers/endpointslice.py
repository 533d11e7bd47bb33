"""The EndpointSlice controller and the legacy Endpoints controller, as upstream's
`pkg/controller/endpointslice` and `pkg/controller/endpoint`, in one loop.

For every Service with a selector, the pods of its namespace that the selector matches and
that have an IP (`status.podIP`; pods without one are skipped, as upstream) and are not
finished become endpoints:

- EndpointSlices (`discovery.k8s.io/v1`), named `<service>-<random>`, labelled
  `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by:
  endpointslice-controller.k8s.io` (plus the Service's labels), owned by the Service; one
  endpoint per pod with `ready` (the pod's Ready condition, and not terminating; always with
  `publishNotReadyAddresses`), `serving` (the Ready condition, terminating or not), `terminating`
  (`deletionTimestamp`), `hostname` (the pod's, when its `subdomain` is the Service's
  name), `nodeName` and `targetRef`; ports resolved per pod (a named
  `targetPort` is the container port of that name and protocol; a pod without it is left
  out of that port, as upstream's `FindPort`), pods with the same resolved ports share
  slices of at most 100 endpoints (upstream's `--max-endpoints-per-slice` default);
- Endpoints of the Service's name: ready addresses and `notReadyAddresses` (terminating
  pods left out unless `publishNotReadyAddresses`), one subset per resolved port set,
  addresses sorted by IP.

A Service's slices and Endpoints go when it does or loses its selector (upstream leaves the
slices to the garbage collector through their owner reference; ephemera has none, so the
controller deletes them). Services without a selector (the `kubernetes` Service, or one whose
endpoints a user writes) are left alone.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, Informer, resource_path
from ephemera.controllers.objects import metadata as _md

__all__ = ["MAX_ENDPOINTS_PER_SLICE", "EndpointSliceController"]

log = logging.getLogger("ephemera.controllers.endpointslice")

MAX_ENDPOINTS_PER_SLICE = 100
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"
HEADLESS_LABEL = "service.kubernetes.io/headless"
DISCOVERY = "discovery.k8s.io"
RETRY_DELAY = 1.0

Obj = Mapping[str, Any]
PortKey = tuple[tuple[str, int, str], ...]


def _rv(obj: Obj) -> int:
    try:
        return int(_md(obj).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def find_port(pod: Obj, port: Mapping[str, Any]) -> int | None:
    """upstream's `FindPort`: a number as it is, a name as the pod's container port of that
    name and the service port's protocol."""
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    protocol = port.get("protocol") or "TCP"
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for cport in container.get("ports") or []:
            if cport.get("name") == target and (cport.get("protocol") or "TCP") == protocol:
                value = cport.get("containerPort")
                return value if isinstance(value, int) else None
    return None


def _wanted_pods(service: Obj, pods: Sequence[Obj]) -> list[Obj]:
    selector = (service.get("spec") or {}).get("selector") or {}
    namespace = _md(service).get("namespace")
    out = []
    for pod in pods:
        md = _md(pod)
        if md.get("namespace") != namespace or not _selector_matches(selector,
                                                                     md.get("labels") or {}):
            continue
        status = pod.get("status") or {}
        if not status.get("podIP") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        out.append(pod)
    return sorted(out, key=lambda p: str(_md(p).get("name")))


def _ports_of(service: Obj, pod: Obj) -> PortKey:
    out = []
    for port in (service.get("spec") or {}).get("ports") or []:
        number = find_port(pod, port)
        if number is not None:
            out.append((str(port.get("name") or ""), number, str(port.get("protocol") or "TCP")))
    return tuple(out)


def _target_ref(pod: Obj) -> dict[str, Any]:
    md = _md(pod)
    return {"kind": "Pod", "namespace": md.get("namespace"), "name": md.get("name"),
            "uid": md.get("uid")}


def _hostname(service: Obj, pod: Obj) -> str:
    """The endpoint's hostname: the pod's `hostname` when its `subdomain` is the Service's
    name (in the same namespace), as upstream's `ShouldSetHostname`; the cluster DNS then
    answers `<hostname>.<service>.<namespace>.svc.<domain>`."""
    spec = pod.get("spec") or {}
    hostname = str(spec.get("hostname") or "")
    if hostname and spec.get("subdomain") == _md(service).get("name") and \
            _md(pod).get("namespace") == _md(service).get("namespace"):
        return hostname
    return ""


def desired_slices(service: Obj, pods: Sequence[Obj]) -> list[tuple[PortKey, list[dict[str, Any]]]]:
    """The endpoints of each slice the Service should have, by resolved ports."""
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    groups: dict[PortKey, list[dict[str, Any]]] = {}
    for pod in _wanted_pods(service, pods):
        ip = str((pod.get("status") or {}).get("podIP"))
        try:
            if ipaddress.ip_address(ip).version != 4:
                continue
        except ValueError:
            continue
        terminating = bool(_md(pod).get("deletionTimestamp"))
        serving = _ready(pod)
        endpoint: dict[str, Any] = {
            "addresses": [ip],
            "conditions": {"ready": publish or (serving and not terminating),
                           "serving": serving, "terminating": terminating}}
        if _hostname(service, pod):
            endpoint["hostname"] = _hostname(service, pod)
        endpoint["targetRef"] = _target_ref(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            endpoint["nodeName"] = node
        groups.setdefault(_ports_of(service, pod), []).append(endpoint)
    out = []
    for ports, endpoints in sorted(groups.items()):
        for i in range(0, len(endpoints), MAX_ENDPOINTS_PER_SLICE):
            out.append((ports, endpoints[i:i + MAX_ENDPOINTS_PER_SLICE]))
    if not out:
        out.append(((), []))  # upstream's placeholder: one slice without ports or endpoints
    return out


def desired_subsets(service: Obj, pods: Sequence[Obj]) -> list[dict[str, Any]]:
    """The legacy Endpoints' subsets."""
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    groups: dict[PortKey, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for pod in _wanted_pods(service, pods):
        terminating = bool(_md(pod).get("deletionTimestamp"))
        if terminating and not publish:
            continue
        address: dict[str, Any] = {"ip": (pod.get("status") or {}).get("podIP")}
        if _hostname(service, pod):
            address["hostname"] = _hostname(service, pod)
        address["targetRef"] = _target_ref(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            address["nodeName"] = node
        ports = _ports_of(service, pod)
        if not ports and (service.get("spec") or {}).get("ports"):
            continue
        ready, not_ready = groups.setdefault(ports, ([], []))
        (ready if _ready(pod) or publish else not_ready).append(address)
    subsets = []
    for ports, (ready, not_ready) in sorted(groups.items()):
        subset: dict[str, Any] = {}
        key = lambda a: ipaddress.ip_address(str(a["ip"]))  # noqa: E731
        if ready:
            subset["addresses"] = sorted(ready, key=key)
        if not_ready:
            subset["notReadyAddresses"] = sorted(not_ready, key=key)
        if ports:
            subset["ports"] = [{"name": n, "port": p, "protocol": proto} if n else
                               {"port": p, "protocol": proto} for n, p, proto in ports]
        subsets.append(subset)
    return subsets


def _slice_ports(ports: PortKey) -> list[dict[str, Any]]:
    return [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports]


class EndpointSliceController:
    """Keeps the EndpointSlices and Endpoints of every Service with a selector; `run()`
    until cancelled."""

    def __init__(self, api: ApiClient, pods: Informer | None = None) -> None:
        """`pods`: an informer of all pods shared with other controllers (else its own)."""
        self.api = api
        self.services = Informer(api, resource_path("services"), name="services")
        self.pods = pods if pods is not None else Informer(
            api, resource_path("pods"), name="endpoint pods")
        self.slices = Informer(api, resource_path("endpointslices", group=DISCOVERY),
                               label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}",
                               name="endpointslices")
        self.endpoints = Informer(api, resource_path("endpoints"), name="endpoints")
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        # What this controller wrote last, by slice key, until the informer catches up
        # (upstream's endpointSliceTracker): a slice just created is not created twice, and
        # one just updated is not updated from a stale copy.
        self._written: dict[str, Obj] = {}
        self._deleted: set[str] = set()
        self.services.add_handler(on_add=self._service_changed,
                                  on_update=lambda old, new: self._service_changed(new),
                                  on_delete=self._service_changed)
        self.pods.add_handler(on_add=self._pod_changed,
                              on_update=self._pod_updated,
                              on_delete=self._pod_changed)
        self.slices.add_handler(on_delete=self._slice_changed)
        self.endpoints.add_handler(on_delete=self._service_changed)  # put back if ours

    def _enqueue(self, key: str) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def _service_changed(self, service: Obj) -> None:
        md = _md(service)
        self._enqueue(f"{md.get('namespace')}/{md.get('name')}")

    def _slice_changed(self, eps: Obj) -> None:
        md = _md(eps)
        name = (md.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if name:
            self._enqueue(f"{md.get('namespace')}/{name}")

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self._pod_changed(old)
        self._pod_changed(new)

    def _pod_changed(self, pod: Obj) -> None:
        md = _md(pod)
        labels = md.get("labels") or {}
        for service in self.services.list(str(md.get("namespace") or "")):
            smd = _md(service)
            if _selector_matches((service.get("spec") or {}).get("selector") or {}, labels):
                self._enqueue(f"{smd.get('namespace')}/{smd.get('name')}")

    async def sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        service = self.services.get(key)
        owned = [s for s in self._current_slices()
                 if _md(s).get("namespace") == namespace
                 and (_md(s).get("labels") or {}).get(SERVICE_NAME_LABEL) == name]
        if service is None or not (service.get("spec") or {}).get("selector"):
            for eps in owned:
                await self._delete_slice(eps)
            if service is None and self.endpoints.get(key) is not None:
                await self._delete(resource_path("endpoints", namespace, name))
            return
        pods = self.pods.list(namespace)
        await self._sync_slices(service, owned, desired_slices(service, pods))
        await self._sync_endpoints(service, desired_subsets(service, pods))

    def _current_slices(self) -> list[Obj]:
        """The informer's slices, newer copies of this controller's own writes preferred."""
        out: dict[str, Obj] = {}
        seen: dict[str, Obj] = {f"{_md(s).get('namespace')}/{_md(s).get('name')}": s
                                for s in self.slices.list()}
        for key in list(self._deleted):
            if key not in seen:
                self._deleted.discard(key)
        for key, obj in seen.items():
            written = self._written.get(key)
            if written is not None and _rv(written) > _rv(obj):
                obj = written
            elif written is not None:
                del self._written[key]
            if key not in self._deleted:
                out[key] = obj
        for key, obj in self._written.items():
            if key not in out and key not in self._deleted:
                out[key] = obj
        return list(out.values())

    def _wrote(self, obj: Obj) -> None:
        self._written[f"{_md(obj).get('namespace')}/{_md(obj).get('name')}"] = obj

    async def _delete_slice(self, eps: Obj) -> None:
        md = _md(eps)
        key = f"{md.get('namespace')}/{md.get('name')}"
        await self._delete(resource_path("endpointslices", md.get("namespace"),
                                         md.get("name"), group=DISCOVERY))
        self._written.pop(key, None)
        self._deleted.add(key)

    async def _delete(self, path: str) -> None:
        try:
            await self.api.delete(path)
        except StatusError as err:
            if err.code != 404:
                raise

    def _slice_body(self, service: Obj, ports: PortKey, endpoints: list[dict[str, Any]],
                    current: Obj | None) -> dict[str, Any]:
        md = _md(service)
        labels = {k: v for k, v in (md.get("labels") or {}).items()
                  if k not in (SERVICE_NAME_LABEL, MANAGED_BY_LABEL)}
        labels.update({SERVICE_NAME_LABEL: md.get("name"), MANAGED_BY_LABEL: MANAGED_BY})
        if (service.get("spec") or {}).get("clusterIP") == "None":
            labels[HEADLESS_LABEL] = ""
        metadata: dict[str, Any] = dict(_md(current)) if current is not None else {
            "generateName": f"{md.get('name')}-", "namespace": md.get("namespace")}
        metadata["labels"] = labels
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Service",
                                        "name": md.get("name"), "uid": md.get("uid"),
                                        "controller": True, "blockOwnerDeletion": True}]
        return {"apiVersion": f"{DISCOVERY}/v1", "kind": "EndpointSlice",
                "metadata": metadata, "addressType": "IPv4", "endpoints": endpoints,
                "ports": _slice_ports(ports)}

    @staticmethod
    def _same_slice(current: Obj, wanted: Mapping[str, Any]) -> bool:
        return (current.get("endpoints") or []) == wanted["endpoints"] and \
            (current.get("ports") or []) == wanted["ports"] and \
            (_md(current).get("labels") or {}) == wanted["metadata"]["labels"] and \
            (_md(current).get("ownerReferences") or []) == wanted["metadata"]["ownerReferences"]

    async def _sync_slices(self, service: Obj, owned: list[Obj],
                           wanted: list[tuple[PortKey, list[dict[str, Any]]]]) -> None:
        namespace = _md(service).get("namespace")
        spare = sorted(owned, key=lambda s: str(_md(s).get("name")))
        # Reuse a slice with the same ports first, then any other.
        plans: list[tuple[Obj | None, PortKey, list[dict[str, Any]]]] = []
        for ports, endpoints in wanted:
            match = next((s for s in spare if s.get("ports") == _slice_ports(ports)), None)
            if match is not None:
                spare.remove(match)
            plans.append((match, ports, endpoints))
        plans = [(current if current is not None else (spare.pop(0) if spare else None),
                  ports, endpoints) for current, ports, endpoints in plans]
        for current, ports, endpoints in plans:
            body = self._slice_body(service, ports, endpoints, current)
            if current is None:
                self._wrote(await self.api.create(
                    resource_path("endpointslices", namespace, group=DISCOVERY), body))
            elif not self._same_slice(current, body):
                self._wrote(await self.api.update(
                    resource_path("endpointslices", namespace, _md(current).get("name"),
                                  group=DISCOVERY), body))
        for eps in spare:
            await self._delete_slice(eps)

    async def _sync_endpoints(self, service: Obj, subsets: list[dict[str, Any]]) -> None:
        md = _md(service)
        namespace, name = md.get("namespace"), md.get("name")
        current = self.endpoints.get(f"{namespace}/{name}")
        labels = dict(md.get("labels") or {})
        if (service.get("spec") or {}).get("clusterIP") == "None":
            labels[HEADLESS_LABEL] = ""
        if current is not None and (current.get("subsets") or []) == subsets and \
                (_md(current).get("labels") or {}) == labels:
            return
        metadata = dict(_md(current)) if current is not None else {"name": name,
                                                                     "namespace": namespace}
        metadata["labels"] = labels
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "Endpoints", "metadata": metadata}
        if subsets:
            body["subsets"] = subsets
        if current is None:
            try:
                await self.api.create(resource_path("endpoints", namespace), body)
                return
            except StatusError as err:
                if err.code != 409:
                    raise
            # The informer has not seen it yet: update the stored one.
            stored = await self.api.get(resource_path("endpoints", namespace, name))
            body["metadata"] = {**stored["metadata"], "labels": labels}
        await self.api.update(resource_path("endpoints", namespace, name), body)

    async def run(self) -> None:
        informers = (self.services, self.pods, self.slices, self.endpoints)
        tasks = [asyncio.create_task(i.run(), name=f"endpointslice-{i.name}")
                 for i in informers]
        try:
            for informer in informers:
                await informer.wait_synced()
            for key in list(self.services.keys()):
                self._enqueue(key)
            while True:
                key = await self._queue.get()
                self._queued.discard(key)
                try:
                    await self.sync(key)
                except (StatusError, ApiUnavailable) as err:
                    log.warning("service %s: %s; retrying", key, getattr(err, "message", err))
                    await asyncio.sleep(RETRY_DELAY)
                    self._enqueue(key)
        finally:
            await cancel_and_wait(*tasks)

"""The `kubernetes` Service in `default` and its endpoints, as upstream's apiserver keeps
them (`pkg/controlplane/controller/kubernetesservice` and the lease endpoint reconciler).

Every apiserver, every 10 s: creates the Service when it is missing (ClusterIP the first
address of `--service-cluster-ip-range`, port `https` 443/TCP to the apiserver's secure port,
no selector, labels `component=apiserver`, `provider=kubernetes`), and writes the Endpoints
and the EndpointSlice `default/kubernetes` listing the live apiservers. The live apiservers
are those whose identity Lease was renewed within the reconciler's TTL, 15 s
(`ephemera.apiserver.identity`, `ephemera.client.apiservers.live_url`); the lease's URL
annotation gives the address and port. A write happens only when the lists differ, so the
members of a control plane agree without churn. Members on different ports (several on one
machine) get one Endpoints subset per port and one slice per port (`kubernetes`, then
`kubernetes-<port>`); an address that is not an IP literal is left out, as Endpoints hold
IPs only, and so is a loopback or link-local one, which upstream's Endpoints validation
refuses (pods could not reach it): a one-machine cluster on 127.0.0.1 lists none until the
apiserver advertises an address pods reach (`--advertise-address`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.endpoints import special_ip_errors
from ephemera.api.errors import StatusError
from ephemera.api.wellknown import (
    APISERVER_IDENTITY_LABEL,
    APISERVER_IDENTITY_NAMESPACE,
    APISERVER_IDENTITY_RENEW_SECONDS,
    APISERVER_IDENTITY_VALUE,
)
from ephemera.apiserver.registry import Registry
from ephemera.apiserver.resources import core_resource, lookup
from ephemera.client.apiservers import live_url

log = logging.getLogger(__name__)

NAME = "kubernetes"
NAMESPACE = "default"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SKIP_MIRROR_LABEL = "endpointslice.kubernetes.io/skip-mirror"


def kubernetes_service(cluster_ip: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": NAMESPACE,
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                 "sessionAffinity": "None",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                            "targetPort": port}]},
    }


def live_endpoints(leases: list[dict[str, Any]], now: datetime) -> dict[int, list[str]]:
    """The live apiservers' IPs by port, sorted."""
    found: dict[int, set[str]] = {}
    for lease in leases:
        labels = (lease.get("metadata") or {}).get("labels") or {}
        if labels.get(APISERVER_IDENTITY_LABEL) != APISERVER_IDENTITY_VALUE:
            continue
        url = live_url(lease, now)
        if url is None:
            continue
        parts = urlsplit(url)
        try:
            ip = str(ipaddress.ip_address(parts.hostname or ""))
            port = parts.port or 443
        except ValueError:
            continue
        if special_ip_errors(ip):  # loopback and the like: Endpoints refuse them
            continue
        found.setdefault(port, set()).add(ip)
    return {port: sorted(ips, key=ipaddress.ip_address) for port, ips in sorted(found.items())}


def endpoints_object(by_port: dict[int, list[str]]) -> dict[str, Any]:
    subsets = [{"addresses": [{"ip": ip} for ip in ips],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}
               for port, ips in by_port.items()]
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Endpoints",
                            "metadata": {"name": NAME, "namespace": NAMESPACE,
                                         "labels": {SKIP_MIRROR_LABEL: "true"}}}
    if subsets:
        body["subsets"] = subsets
    return body


def slice_objects(by_port: dict[int, list[str]]) -> list[dict[str, Any]]:
    out = []
    for n, (port, ips) in enumerate(by_port.items() or {443: []}.items()):
        out.append({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": NAME if n == 0 else f"{NAME}-{port}", "namespace": NAMESPACE,
                         "labels": {SERVICE_NAME_LABEL: NAME}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        })
    return out


class KubernetesServiceReconciler:
    """Keeps `default/kubernetes` and its endpoints, from one apiserver."""

    def __init__(self, registry: Registry, cluster_ip: str, port: int = 443,
                 interval: float = APISERVER_IDENTITY_RENEW_SECONDS) -> None:
        self.registry = registry
        self.cluster_ip = cluster_ip
        self.port = port
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    async def ensure_service(self) -> None:
        services = core_resource("services")
        try:
            await self.registry.get(services, NAMESPACE, NAME)
        except StatusError as err:
            if err.code != 404:
                raise
            try:
                await self.registry.create(services, kubernetes_service(self.cluster_ip,
                                                                        self.port))
            except StatusError as again:
                if again.code != 409:  # another member created it meanwhile
                    raise

    async def _put(self, resource_plural: str, group: str, body: dict[str, Any]) -> None:
        resource = lookup(group, "v1", resource_plural)
        assert resource is not None
        name = body["metadata"]["name"]

        async def apply(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is None:
                return await self.registry.prepare_create(resource, dict(body))
            wanted = {**current, **{k: v for k, v in body.items() if k != "metadata"}}
            for key in ("subsets", "endpoints"):
                if key not in body:
                    wanted.pop(key, None)
            wanted["metadata"] = {**current["metadata"],
                                  "labels": {**(current["metadata"].get("labels") or {}),
                                             **body["metadata"]["labels"]}}
            return await self.registry.prepare_update(resource, wanted, current)

        await self.registry.update(resource, NAMESPACE, name, apply)

    async def reconcile(self, now: datetime | None = None) -> None:
        await self.ensure_service()
        leases = lookup("coordination.k8s.io", "v1", "leases")
        assert leases is not None
        page = await self.registry.list(leases, APISERVER_IDENTITY_NAMESPACE)
        codec = self.registry.codec(leases)
        objects = [obj if obj is not None else codec.decode(kv)
                   for kv, obj in zip(page.kvs, page.objects, strict=True)]
        by_port = live_endpoints(objects, now or datetime.now(UTC))
        await self._put("endpoints", "", endpoints_object(by_port))
        for body in slice_objects(by_port):
            await self._put("endpointslices", "discovery.k8s.io", body)

    async def run(self) -> None:
        while True:
            try:
                await self.reconcile()
            except Exception as err:  # the store may be away: next time
                log.warning("reconciling the kubernetes service failed: %s", err)
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self.run(), name="kubernetes-service")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

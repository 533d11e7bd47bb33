"""The `kube-dns` Service that fronts the cluster DNS server, as kubeadm's CoreDNS addon
creates it, and the EndpointSlice that points it at this server.

- Service `kube-system/kube-dns`: ClusterIP the 10th address of the service range
  (kubeadm's convention: 10.96.0.10 for 10.96.0.0/12), ports `dns` 53/UDP and `dns-tcp`
  53/TCP, labels `k8s-app=kube-dns`, `kubernetes.io/cluster-service=true`,
  `kubernetes.io/name=CoreDNS`, and no selector: ephemera runs its DNS server as a process
  of the node, not as a pod, so the EndpointSlice controller has nothing to select. Created
  when missing; an existing one is left as it is (an operator's edit stays).
- EndpointSlice `kube-system/kube-dns-ephemera`: labelled `kubernetes.io/service-name=kube-dns`
  and `endpointslice.kubernetes.io/managed-by=dns.ephemera.io` (not the controller's, which
  leaves it alone), one ready endpoint at the server's address and ports `dns`/UDP and
  `dns-tcp`/TCP at its port; rewritten when the address or port changes. An address the
  API refuses for an endpoint (loopback, link-local, unspecified) is not published (logged):
  pods could not reach it anyway.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from ephemera.api.endpoints import special_ip_errors
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, resource_path

__all__ = ["DNS_SERVICE_OFFSET", "ensure_kube_dns", "kube_dns_ip"]

log = logging.getLogger("ephemera.dns")

NAMESPACE = "kube-system"
SERVICE = "kube-dns"
SLICE = "kube-dns-ephemera"
MANAGED_BY = "dns.ephemera.io"
DNS_SERVICE_OFFSET = 10
DISCOVERY = "discovery.k8s.io"


def kube_dns_ip(service_cidr: str) -> str:
    """The 10th address of the service range (kubeadm's `GetDNSIP`)."""
    network = ipaddress.ip_network(service_cidr, strict=False)
    return str(network.network_address + DNS_SERVICE_OFFSET)


def service_object(cluster_ip: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE,
                     "labels": {"k8s-app": "kube-dns",
                                "kubernetes.io/cluster-service": "true",
                                "kubernetes.io/name": "CoreDNS"}},
        "spec": {"clusterIP": cluster_ip, "type": "ClusterIP",
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                           {"name": "dns-tcp", "port": 53, "protocol": "TCP",
                            "targetPort": 53}]}}


def slice_object(address: str, port: int) -> dict[str, Any]:
    family = "IPv6" if ipaddress.ip_address(address).version == 6 else "IPv4"
    return {
        "apiVersion": f"{DISCOVERY}/v1", "kind": "EndpointSlice",
        "metadata": {"name": SLICE, "namespace": NAMESPACE,
                     "labels": {"kubernetes.io/service-name": SERVICE,
                                "endpointslice.kubernetes.io/managed-by": MANAGED_BY}},
        "addressType": family,
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "dns", "port": port, "protocol": "UDP"},
                  {"name": "dns-tcp", "port": port, "protocol": "TCP"}]}


async def ensure_kube_dns(api: ApiClient, cluster_ip: str, address: str, port: int) -> None:
    """Create the Service when missing and make the slice point at `address:port`."""
    services = resource_path("services", NAMESPACE)
    try:
        await api.get(resource_path("services", NAMESPACE, SERVICE))
    except StatusError as err:
        if err.code != 404:
            raise
        await api.create(services, service_object(cluster_ip))
        log.info("created Service %s/%s with ClusterIP %s", NAMESPACE, SERVICE, cluster_ip)
    problems = special_ip_errors(address)
    if problems:
        log.warning("not publishing %s as the endpoint of %s/%s: %s", address, NAMESPACE,
                    SERVICE, "; ".join(problems))
        return
    want = slice_object(address, port)
    path = resource_path("endpointslices", NAMESPACE, SLICE, group=DISCOVERY)
    try:
        current = await api.get(path)
    except StatusError as err:
        if err.code != 404:
            raise
        await api.create(resource_path("endpointslices", NAMESPACE, group=DISCOVERY), want)
    else:
        if all(current.get(k) == want[k] for k in ("addressType", "endpoints", "ports")):
            return
        want["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get(
            "resourceVersion")
        await api.update(path, want)
    log.info("EndpointSlice %s/%s points %s at %s port %d", NAMESPACE, SLICE, SERVICE,
             address, port)

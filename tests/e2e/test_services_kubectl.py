"""Services through the real kubectl and the official Python client against `ephemera up`:
`kubectl create service`, `kubectl expose pod`, the `get svc,endpointslices` columns,
`kubectl describe svc`, the `kubernetes` Service and its endpoints, and the client's
Service calls."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from cluster import Cluster, Kubectl, kubectl, namespace_for, shared_cluster, wait  # noqa: F401
from kubernetes import client, config

pytestmark = pytest.mark.e2e

SERVICE_RANGE = ipaddress.ip_network("10.96.0.0/12")


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_create_service_clusterip_and_get_columns(kubectl: Kubectl) -> None:  # noqa: F811
    assert kubectl("create", "service", "clusterip", "web", "--tcp=80:8080").stdout == \
        "service/web created\n"
    out = kubectl("get", "svc", "web", "-o", "wide").stdout.splitlines()
    assert cells(out[0]) == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE",
                             "SELECTOR"]
    row = cells(out[1])
    assert (row[0], row[1], row[3], row[4], row[6]) == ("web", "ClusterIP", "<none>",
                                                        "80/TCP", "app=web")
    assert ipaddress.ip_address(row[2]) in SERVICE_RANGE
    taken = kubectl("create", "service", "clusterip", "again", "--tcp=80",
                    f"--clusterip={row[2]}", check=False)
    assert taken.returncode == 1
    assert taken.stderr.strip() == (
        'error: failed to create ClusterIP service: Service "again" is invalid: '
        'spec.clusterIPs: Invalid value: []string{"'
        f'{row[2]}"}}: failed to allocate IP {row[2]}: provided IP is already allocated')


def test_nodeport_and_headless(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("create", "service", "nodeport", "np", "--tcp=80:8080", "--node-port=30444")
    row = cells(kubectl("get", "svc", "np").stdout.splitlines()[1])
    assert (row[1], row[4]) == ("NodePort", "80:30444/TCP")
    taken = kubectl("create", "service", "nodeport", "np2", "--tcp=81:8080",
                    "--node-port=30444", check=False)
    assert taken.stderr.strip() == (
        'error: failed to create NodePort service: Service "np2" is invalid: '
        "spec.ports[0].nodePort: Invalid value: 30444: "
        "provided port is already allocated")
    kubectl("create", "service", "clusterip", "hl", "--clusterip=None")
    row = cells(kubectl("get", "svc", "hl").stdout.splitlines()[1])
    assert (row[1], row[2], row[4]) == ("ClusterIP", "None", "<none>")
    kubectl("delete", "svc", "np")
    kubectl("create", "service", "nodeport", "np2", "--tcp=81:8080", "--node-port=30444")


def test_expose_pod_endpointslices_and_describe(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("create", "-f", "-", input="""
apiVersion: v1
kind: Pod
metadata: {name: backend, labels: {app: backend}}
spec:
  nodeName: nowhere
  containers:
  - name: c
    image: busybox:1.36
    ports: [{name: http, containerPort: 8080}]
""")
    assert kubectl("expose", "pod", "backend", "--port=80", "--target-port=http").stdout == \
        "service/backend exposed\n"
    svc = kubectl.json("get", "svc", "backend")
    assert svc["spec"]["selector"] == {"app": "backend"}
    assert svc["spec"]["ports"][0]["targetPort"] == "http"

    def sliced() -> list[str]:
        lines = kubectl("get", "endpointslices").stdout.splitlines()
        return lines if len(lines) > 1 else []

    lines = wait(sliced, "the controller's EndpointSlice")
    assert cells(lines[0]) == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    row = cells(lines[1])
    assert row[0].startswith("backend-")
    # The pod has no IP: upstream's placeholder slice, without ports or endpoints.
    assert row[1:4] == ["IPv4", "<unset>", "<unset>"]
    out = kubectl("get", "svc,endpointslices").stdout
    assert "service/backend" in out and "endpointslice.discovery.k8s.io/backend-" in out
    described = kubectl("describe", "svc", "backend").stdout
    fields = dict(re.findall(r"^([A-Za-z -]+):[ \t]*(.*)$", described, re.M))
    assert fields["Name"] == "backend"
    assert fields["Selector"] == "app=backend"
    assert fields["Type"] == "ClusterIP"
    assert fields["IP Family Policy"] == "SingleStack"
    assert fields["IP Families"] == "IPv4"
    assert fields["TargetPort"] == "http/TCP"
    assert fields["Session Affinity"] == "None"
    assert fields["Endpoints"] == ""  # the pod has no IP yet


def test_the_kubernetes_service_points_at_the_apiserver(kubectl: Kubectl,  # noqa: F811
                                                        shared_cluster: Cluster) -> None:  # noqa: F811
    svc = kubectl.json("get", "svc", "kubernetes", "-n", "default")
    assert svc["spec"]["clusterIP"] == "10.96.0.1"
    port = int(shared_cluster.server.rsplit(":", 1)[1])
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP",
                                     "targetPort": port}]

    # The apiserver listens on and advertises the node address `up` made (198.18.0.0/15),
    # which pods reach: the Endpoints and the slice list it.
    address = urlsplit(shared_cluster.server).hostname or ""
    assert ipaddress.ip_address(address) in ipaddress.ip_network("198.18.0.0/15")

    def present() -> dict[str, Any] | None:
        got = kubectl("get", "endpoints", "kubernetes", "-n", "default", "-o", "json",
                      check=False)
        return json.loads(got.stdout) if got.returncode == 0 else None

    eps = wait(present, "the kubernetes endpoints")
    assert eps["subsets"] == [{"addresses": [{"ip": address}],
                               "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]
    slice_ = kubectl.json("get", "endpointslices", "kubernetes", "-n", "default")
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "kubernetes"
    assert [e["addresses"] for e in slice_["endpoints"]] == [[address]]
    assert slice_["ports"] == [{"name": "https", "port": port, "protocol": "TCP"}]
    nodes = wait(lambda: kubectl.json("get", "nodes")["items"], "the node")
    assert {"type": "InternalIP", "address": address} in nodes[0]["status"]["addresses"]


@pytest.fixture
def core(shared_cluster: Cluster) -> Iterator[client.CoreV1Api]:  # noqa: F811
    api = config.new_client_from_config(config_file=str(shared_cluster.kubeconfig))
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()


def test_python_client_service_calls(core: client.CoreV1Api,
                                     request: pytest.FixtureRequest) -> None:
    namespace = namespace_for(request.node.name)
    core.create_namespace({"metadata": {"name": namespace}})
    body = client.V1Service(metadata=client.V1ObjectMeta(name="py"),
                            spec=client.V1ServiceSpec(
                                selector={"app": "py"},
                                ports=[client.V1ServicePort(port=80, target_port=8080)]))
    created = core.create_namespaced_service(namespace, body)
    assert ipaddress.ip_address(created.spec.cluster_ip) in SERVICE_RANGE
    assert created.spec.ports[0].protocol == "TCP"
    listed = core.list_namespaced_service(namespace)
    assert [s.metadata.name for s in listed.items] == ["py"]
    patched = core.patch_namespaced_service("py", namespace,
                                            {"metadata": {"labels": {"tier": "web"}}})
    assert patched.spec.cluster_ip == created.spec.cluster_ip
    status = core.read_namespaced_service_status("py", namespace)
    assert status.status.load_balancer is not None
    core.delete_namespaced_service("py", namespace)
    assert core.list_namespaced_service(namespace).items == []

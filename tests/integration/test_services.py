"""Services, Endpoints and EndpointSlices over HTTP on both stores: defaulting, validation
with upstream's messages, ClusterIP and NodePort allocation and release, and no double
allocation between two apiservers on one store."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest
from apiserver_fixtures import TABLE_ACCEPT, Api, serve

from ephemera.apiserver.app import REGISTRY
from ephemera.apiserver.identity import ApiserverIdentity
from ephemera.apiserver.kubernetesservice import KubernetesServiceReconciler
from ephemera.apiserver.serviceallocator import ServiceAllocations

SVCS = "/api/v1/namespaces/default/services"
MERGE = "application/merge-patch+json"


@pytest.fixture(params=["sqlite", pytest.param("etcd", marks=pytest.mark.etcd)])
def any_api(request: pytest.FixtureRequest) -> Api:
    served: Api = request.getfixturevalue("api" if request.param == "sqlite" else "etcd_api")
    return served


def service(name: str, *, kind: str = "", cluster_ip: str = "",
            ports: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {"app": name},
                 "ports": ports if ports is not None else [{"port": 80}], **spec},
    }
    if kind:
        body["spec"]["type"] = kind
    if cluster_ip:
        body["spec"]["clusterIP"] = cluster_ip
    return body


async def test_create_defaults_and_allocates_a_cluster_ip(any_api: Api) -> None:
    status, svc = await any_api.post(SVCS, service("web", ports=[
        {"name": "http", "port": 80, "targetPort": "http"}, {"name": "m", "port": 9090}]))
    assert status == 201, svc
    spec = svc["spec"]
    assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network("10.96.0.0/12")
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    assert (spec["type"], spec["sessionAffinity"], spec["ipFamilies"], spec["ipFamilyPolicy"],
            spec["internalTrafficPolicy"]) == ("ClusterIP", "None", ["IPv4"], "SingleStack",
                                               "Cluster")
    assert spec["ports"] == [
        {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"},
        {"name": "m", "port": 9090, "protocol": "TCP", "targetPort": 9090}]
    assert "externalTrafficPolicy" not in spec
    assert svc["status"] == {"loadBalancer": {}}


async def test_a_taken_cluster_ip_is_refused_and_released_on_delete(any_api: Api) -> None:
    status, first = await any_api.post(SVCS, service("a", cluster_ip="10.96.0.10"))
    assert status == 201, first
    status, body = await any_api.post(SVCS, service("b", cluster_ip="10.96.0.10"))
    assert status == 422
    assert body["message"] == (
        'Service "b" is invalid: spec.clusterIPs: Invalid value: []string{"10.96.0.10"}: '
        "failed to allocate IP 10.96.0.10: provided IP is already allocated")
    assert body["details"]["causes"][0]["field"] == "spec.clusterIPs"
    status, body = await any_api.post(SVCS, service("c", cluster_ip="10.0.0.1"))
    assert status == 422
    assert body["message"].endswith(
        "failed to allocate IP 10.0.0.1: the provided IP (10.0.0.1) is not in the valid range. "
        "The range of valid IPs is 10.96.0.0/12")
    status, deleted = await any_api.delete(f"{SVCS}/a")
    # upstream's Service registry answers a DELETE with the deleted Service, not a Status
    assert status == 200 and deleted["kind"] == "Service"
    assert deleted["metadata"]["uid"] == first["metadata"]["uid"]
    status, again = await any_api.post(SVCS, service("b", cluster_ip="10.96.0.10"))
    assert status == 201, again


async def test_a_refused_create_releases_what_it_allocated(any_api: Api) -> None:
    """A create refused after allocation (the name is taken) gives the IP back."""
    assert (await any_api.post(SVCS, service("x", cluster_ip="10.96.0.20")))[0] == 201
    status, _ = await any_api.post(SVCS, service("x", cluster_ip="10.96.0.21"))
    assert status == 409
    assert (await any_api.post(SVCS, service("y", cluster_ip="10.96.0.21")))[0] == 201


async def test_node_ports_allocated_checked_and_released(any_api: Api) -> None:
    status, svc = await any_api.post(SVCS, service(
        "np", kind="NodePort", ports=[{"name": "a", "port": 80},
                                      {"name": "b", "port": 81, "nodePort": 30080}]))
    assert status == 201, svc
    ports = svc["spec"]["ports"]
    assert ports[1]["nodePort"] == 30080
    assert 30000 <= ports[0]["nodePort"] <= 32767
    assert svc["spec"]["externalTrafficPolicy"] == "Cluster"
    status, body = await any_api.post(SVCS, service(
        "np2", kind="NodePort", ports=[{"port": 80, "nodePort": 30080}]))
    assert status == 422
    assert body["message"] == ('Service "np2" is invalid: spec.ports[0].nodePort: Invalid '
                               "value: 30080: provided port is already allocated")
    status, body = await any_api.post(SVCS, service(
        "np3", kind="NodePort", ports=[{"port": 80, "nodePort": 80}]))
    assert status == 422
    assert body["message"].endswith(
        "spec.ports[0].nodePort: Invalid value: 80: provided port is not in the valid range. "
        "The range of valid ports is 30000-32767")
    # Back to ClusterIP: the node ports go, and another service may take them.
    # (upstream's dropTypeDependentFields clears the node ports and the external policy).
    status, updated = await any_api.patch(f"{SVCS}/np", {"spec": {"type": "ClusterIP"}}, MERGE)
    assert status == 200, updated
    assert all("nodePort" not in p for p in updated["spec"]["ports"])
    assert "externalTrafficPolicy" not in updated["spec"]
    assert updated["spec"]["clusterIP"] == svc["spec"]["clusterIP"]
    status, body = await any_api.post(SVCS, service(
        "np2", kind="NodePort", ports=[{"port": 80, "nodePort": 30080}]))
    assert status == 201, body


async def test_update_keeps_the_cluster_ip_and_refuses_a_change(any_api: Api) -> None:
    _, svc = await any_api.post(SVCS, service("keep"))
    ip = svc["spec"]["clusterIP"]
    svc["spec"].pop("clusterIP")
    svc["spec"].pop("clusterIPs")
    svc["metadata"]["labels"] = {"x": "y"}
    status, updated = await any_api.put(f"{SVCS}/keep", svc)
    assert status == 200, updated
    assert updated["spec"]["clusterIP"] == ip
    updated["spec"]["clusterIP"] = "10.96.0.99"
    updated["spec"]["clusterIPs"] = ["10.96.0.99"]
    status, body = await any_api.put(f"{SVCS}/keep", updated)
    assert status == 422
    assert body["message"] == ('Service "keep" is invalid: spec.clusterIPs[0]: Invalid value: '
                               '"10.96.0.99": may not change once set')


async def test_a_type_change_to_external_name_releases_the_cluster_ip(api: Api) -> None:
    assert (await api.post(SVCS, service("flip", cluster_ip="10.96.0.40")))[0] == 201
    status, flipped = await api.patch(f"{SVCS}/flip", {"spec": {
        "type": "ExternalName", "externalName": "example.com", "selector": None}}, MERGE)
    assert status == 200, flipped
    assert "clusterIP" not in flipped["spec"] and "ipFamilies" not in flipped["spec"]
    status, body = await api.post(SVCS, service("taker", cluster_ip="10.96.0.40"))
    assert status == 201, body
    status, back = await api.patch(f"{SVCS}/flip", {"spec": {"type": "ClusterIP"}}, MERGE)
    assert status == 200, back
    assert back["spec"]["clusterIP"] not in ("", "10.96.0.40")


async def test_headless_and_external_name_get_no_cluster_ip(any_api: Api) -> None:
    status, svc = await any_api.post(SVCS, service("hl", cluster_ip="None", ports=[]))
    assert status == 201, svc
    assert (svc["spec"]["clusterIP"], svc["spec"]["clusterIPs"]) == ("None", ["None"])
    status, svc = await any_api.post(SVCS, {"apiVersion": "v1", "kind": "Service",
                                            "metadata": {"name": "ext"},
                                            "spec": {"type": "ExternalName",
                                                     "externalName": "example.com"}})
    assert status == 201, svc
    assert "clusterIP" not in svc["spec"] and "ipFamilies" not in svc["spec"]


@pytest.mark.parametrize(("body", "message"), [
    (service("p", ports=[]),
     'Service "p" is invalid: spec.ports: Required value'),
    (service("p", ports=[{"port": 80}, {"port": 81}]),
     'Service "p" is invalid: [spec.ports[0].name: Required value, '
     "spec.ports[1].name: Required value]"),
    (service("p", ports=[{"port": 0, "protocol": "ICMP"}]),
     'Service "p" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and '
     '65535, inclusive, spec.ports[0].protocol: Unsupported value: "ICMP": supported values: '
     '"SCTP", "TCP", "UDP", spec.ports[0].targetPort: Invalid value: 0: must be between 1 '
     "and 65535, inclusive]"),
    (service("p", kind="Weird"),
     'Service "p" is invalid: spec.type: Unsupported value: "Weird": supported values: '
     '"ClusterIP", "ExternalName", "LoadBalancer", "NodePort"'),
    (service("p", ports=[{"port": 80, "nodePort": 30001}]),
     "Service \"p\" is invalid: spec.ports[0].nodePort: Forbidden: may not be used when "
     "`type` is 'ClusterIP'"),
    (service("1p"),
     'Service "1p" is invalid: metadata.name: Invalid value: "1p": a DNS-1035 label must '
     "consist of lower case alphanumeric characters or '-', start with an alphabetic "
     "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
     "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"),
    (service("p", ipFamilies=["IPv6"]),
     'Service "p" is invalid: spec.ipFamilies[0]: Invalid value: "IPv6": not configured on '
     "this cluster"),
    (service("p", sessionAffinity="Sticky"),
     'Service "p" is invalid: spec.sessionAffinity: Unsupported value: "Sticky": supported '
     'values: "ClientIP", "None"'),
])
async def test_validation_messages(api: Api, body: dict[str, Any], message: str) -> None:
    status, got = await api.post(SVCS, body)
    assert status == 422, got
    assert got["message"] == message


async def test_two_apiservers_on_one_store_never_share_an_ip_or_port(any_api: Api) -> None:
    async for other in serve(any_api.store):
        async def make(server: Api, i: int) -> dict[str, Any]:
            status, svc = await server.post(SVCS, service(f"s{i}", kind="NodePort"))
            assert status == 201, svc
            return svc

        made = await asyncio.gather(*(make(any_api if i % 2 else other, i) for i in range(16)))
        ips = {svc["spec"]["clusterIP"] for svc in made}
        ports = {svc["spec"]["ports"][0]["nodePort"] for svc in made}
        assert len(ips) == len(ports) == 16


async def test_service_table_columns(api: Api) -> None:
    await api.post(SVCS, service("tbl", kind="NodePort", cluster_ip="10.96.0.30",
                                 ports=[{"port": 80, "nodePort": 30123}]))
    status, table, _ = await api.request("GET", f"{SVCS}/tbl",
                                         headers={"Accept": TABLE_ACCEPT})
    assert status == 200
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"]
    cells = table["rows"][0]["cells"]
    assert cells[:5] == ["tbl", "NodePort", "10.96.0.30", "<none>", "80:30123/TCP"]
    assert cells[6] == "app=tbl"


async def test_endpoints_and_endpointslices_are_served(api: Api) -> None:
    eps = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "e"},
           "subsets": [{"addresses": [{"ip": "10.244.0.5"}, {"ip": "10.244.0.6"}],
                        "ports": [{"port": 8080}]}]}
    assert (await api.post("/api/v1/namespaces/default/endpoints", eps))[0] == 201
    status, table, _ = await api.request("GET", "/api/v1/namespaces/default/endpoints/e",
                                         headers={"Accept": TABLE_ACCEPT})
    assert table["rows"][0]["cells"][1] == "10.244.0.5:8080,10.244.0.6:8080"
    slices = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    status, created = await api.post(slices, {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "e-abc", "labels": {"kubernetes.io/service-name": "e"}},
        "addressType": "IPv4", "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": True}}]})
    assert status == 201, created
    status, table, _ = await api.request("GET", f"{slices}/e-abc",
                                         headers={"Accept": TABLE_ACCEPT})
    assert table["rows"][0]["cells"][1:4] == ["IPv4", "8080", "10.244.0.5"]


async def test_every_request_for_v1_endpoints_gets_the_deprecation_warning(api: Api) -> None:
    """Upstream 1.33+ deprecates v1 Endpoints: every verb answers the API deprecation
    warning (kubectl prints `Warning: v1 Endpoints is deprecated ...`); slices get none."""
    warning = ('299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 '
               'EndpointSlice"')
    eps = "/api/v1/namespaces/default/endpoints"
    body = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "w"}}
    for method, path, sent in (("POST", eps, body), ("GET", f"{eps}/w", None),
                               ("GET", "/api/v1/endpoints", None),
                               ("PUT", f"{eps}/w", body), ("DELETE", f"{eps}/w", None),
                               ("GET", f"{eps}/nope", None)):
        status, _, response = await api.request(method, path, sent)
        assert response.headers.getall("Warning", []) == [warning], (method, path, status)
    _, _, response = await api.request(
        "GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices")
    assert "Warning" not in response.headers


async def test_the_kubernetes_service_lists_the_live_apiservers(any_api: Api) -> None:
    registry = any_api.app[REGISTRY]
    one = ApiserverIdentity(registry, "https://10.0.0.1:6443", 6443, hostname="a")
    two = ApiserverIdentity(registry, "https://10.0.0.2:6443", 6443, hostname="b")
    await one.renew()
    await two.renew()
    reconciler = KubernetesServiceReconciler(registry, "10.96.0.1", 6443)
    await reconciler.reconcile()
    status, svc = await any_api.get(f"{SVCS}/kubernetes")
    assert status == 200
    assert svc["spec"]["clusterIP"] == "10.96.0.1"
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP",
                                     "targetPort": 6443}]
    _, eps = await any_api.get("/api/v1/namespaces/default/endpoints/kubernetes")
    assert eps["subsets"] == [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
                               "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]
    slices = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    _, eps_slice = await any_api.get(f"{slices}/kubernetes")
    assert [e["addresses"] for e in eps_slice["endpoints"]] == [["10.0.0.1"], ["10.0.0.2"]]
    assert eps_slice["metadata"]["labels"]["kubernetes.io/service-name"] == "kubernetes"
    # A stopped member drops out; an unchanged list writes nothing.
    await two.stop()
    await reconciler.reconcile()
    _, eps = await any_api.get("/api/v1/namespaces/default/endpoints/kubernetes")
    assert eps["subsets"][0]["addresses"] == [{"ip": "10.0.0.1"}]
    await reconciler.reconcile()
    _, again = await any_api.get("/api/v1/namespaces/default/endpoints/kubernetes")
    assert again["metadata"]["resourceVersion"] == eps["metadata"]["resourceVersion"]
    # A loopback member is not listed (Endpoints refuse loopback addresses).
    local = ApiserverIdentity(registry, "https://127.0.0.1:6443", 6443, hostname="c")
    await local.renew()
    await reconciler.reconcile()
    _, eps = await any_api.get("/api/v1/namespaces/default/endpoints/kubernetes")
    assert eps["subsets"][0]["addresses"] == [{"ip": "10.0.0.1"}]
    # The Service's cluster IP is allocated: no other service may take it.
    status, body = await any_api.post(SVCS, service("other", cluster_ip="10.96.0.1"))
    assert status == 422, body


async def test_repair_releases_a_leak_after_three_passes_and_restores_a_lost_one(
        api: Api) -> None:
    _, svc = await api.post(SVCS, service("held", kind="NodePort", cluster_ip="10.96.0.50",
                                          ports=[{"port": 80, "nodePort": 30050}]))
    allocations = ServiceAllocations(api.store)
    leaked_ip = allocations.ip_range.index("10.96.0.60")
    assert leaked_ip is not None
    await allocations.ips.allocate([leaked_ip])  # an apiserver died before its write
    held_ip = allocations.ip_range.index("10.96.0.50")
    await allocations.ips.release([held_ip or 0])  # a lost allocation
    stored = [svc]
    assert await allocations.repair(stored) == ([], [])
    assert held_ip in await allocations.ips.allocated()
    assert await allocations.repair(stored) == ([], [])
    assert await allocations.repair(stored) == (["10.96.0.60"], [])
    assert leaked_ip not in await allocations.ips.allocated()
    port = allocations.port_range.index(30050)
    assert port in await allocations.ports.allocated()


async def test_load_balancer_local_gets_a_health_check_node_port(api: Api) -> None:
    status, svc = await api.post(SVCS, service("lb", kind="LoadBalancer",
                                               externalTrafficPolicy="Local",
                                               healthCheckNodePort=30600))
    assert status == 201, svc
    assert svc["spec"]["healthCheckNodePort"] == 30600
    assert 30000 <= svc["spec"]["ports"][0]["nodePort"] <= 32767
    status, table, _ = await api.request("GET", f"{SVCS}/lb", headers={"Accept": TABLE_ACCEPT})
    assert table["rows"][0]["cells"][3] == "<pending>"
    status, body = await api.post(SVCS, service("np", kind="NodePort",
                                                ports=[{"port": 80, "nodePort": 30600}]))
    assert status == 422
    assert body["message"].endswith("provided port is already allocated")
    status, body = await api.post(SVCS, service("cl", healthCheckNodePort=30601))
    assert status == 422
    assert body["message"] == (
        'Service "cl" is invalid: spec.healthCheckNodePort: Forbidden: may only be set when '
        "`type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'")
    status, updated = await api.patch(f"{SVCS}/lb", {"spec": {"externalTrafficPolicy":
                                                               "Cluster"}}, MERGE)
    assert status == 200, updated
    assert "healthCheckNodePort" not in updated["spec"]
    status, body = await api.post(SVCS, service("np", kind="NodePort",
                                                ports=[{"port": 80, "nodePort": 30600}]))
    assert status == 201, body


async def test_strategic_merge_patch_merges_ports_by_port(api: Api) -> None:
    """The official Python client's e2e `test_service_apis`: a patch with another port adds
    it (ports merge on `port`)."""
    body = service("frontend", ports=[{"name": "port", "port": 80, "protocol": "TCP",
                                       "targetPort": 80}])
    body["metadata"]["resourceversion"] = "v1"  # an unknown field the client sends
    status, created = await api.post(SVCS, body)
    assert status == 201, created
    body["spec"]["ports"] = [{"name": "new", "port": 8080, "protocol": "TCP",
                              "targetPort": 8080}]
    status, patched = await api.patch(f"{SVCS}/frontend", body,
                                      "application/strategic-merge-patch+json")
    assert status == 200, patched
    assert sorted(p["port"] for p in patched["spec"]["ports"]) == [80, 8080]
    assert patched["status"] == {"loadBalancer": {}}


async def test_status_update_validates_the_load_balancer_ingress(api: Api) -> None:
    _, svc = await api.post(SVCS, service("lbs", kind="LoadBalancer"))
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}
    status, updated = await api.put(f"{SVCS}/lbs/status", svc)
    assert status == 200, updated
    assert updated["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.10",
                                                             "ipMode": "VIP"}]
    updated["status"]["loadBalancer"]["ingress"] = [{"hostname": "192.0.2.11"}]
    status, body = await api.put(f"{SVCS}/lbs/status", updated)
    assert status == 422
    assert body["message"] == (
        'Service "lbs" is invalid: status.loadBalancer.ingress[0].hostname: Invalid value: '
        '"192.0.2.11": must be a DNS name, not an IP address')
    _, plain = await api.post(SVCS, service("plain"))
    plain["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.12"}]}}
    status, body = await api.put(f"{SVCS}/plain/status", plain)
    assert status == 422
    assert body["message"].endswith(
        "status.loadBalancer.ingress: Forbidden: may only be used when `spec.type` is "
        "'LoadBalancer'")


async def test_session_affinity_goes_back_to_none(api: Api) -> None:
    """A merge patch back to `None` leaves the ClientIP config in the object; the defaults
    clear it (upstream's SetDefaults_Service) instead of validation refusing it."""
    status, _ = await api.post(SVCS, service("aff", sessionAffinity="ClientIP"))
    assert status == 201
    status, back = await api.patch(f"{SVCS}/aff", {"spec": {"sessionAffinity": "None"}}, MERGE)
    assert status == 200, back
    assert back["spec"]["sessionAffinity"] == "None"
    assert "sessionAffinityConfig" not in back["spec"]


async def test_what_the_proxy_does_not_do_is_warned_about(api: Api) -> None:
    status, _, response = await api.request("POST", SVCS, service(
        "sticky", sessionAffinity="ClientIP", externalIPs=["192.0.2.10"]))
    assert status == 201
    assert response.headers.getall("Warning") == [
        '299 - "spec.sessionAffinity: ClientIP affinity has no effect in ephemera (not '
        'implemented): connections are balanced as with None"',
        '299 - "spec.externalIPs: external IPs have no effect in ephemera (not implemented)"']
    status, _, response = await api.request("POST", SVCS, service("plain"))
    assert status == 201
    assert "Warning" not in response.headers

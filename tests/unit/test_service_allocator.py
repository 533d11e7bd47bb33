"""The bitmap allocators' arithmetic (upstream's `ipallocator`/`portallocator` layout) and
Services' defaulting and validation messages, without a store."""

from __future__ import annotations

import base64
import ipaddress
import random
from typing import Any

import pytest

from ephemera.api import endpoints, services
from ephemera.apiserver.serviceallocator import Bitmap, IPRange, PortRange


def test_ip_range_leaves_out_network_and_broadcast() -> None:
    r = IPRange(ipaddress.ip_network("10.96.0.0/12"))
    assert r.size == 2**20 - 2
    assert r.offset == 256  # min(max(16, 2^20/16), 256)
    assert r.first() == "10.96.0.1"
    assert r.index("10.96.0.1") == 0
    assert r.index("10.96.0.0") is None
    assert r.index("10.111.255.255") is None  # broadcast
    assert r.index("10.111.255.254") == r.size - 1
    assert r.index("10.0.0.1") is None
    small = IPRange(ipaddress.ip_network("192.168.0.0/28"))
    assert (small.size, small.offset) == (14, 0)


def test_port_range_and_offset() -> None:
    r = PortRange.parse("30000-32767")
    assert (r.size, r.offset, str(r)) == (2768, 86, "30000-32767")  # 2768 / 32
    assert r.index(30000) == 0 and r.index(32767) == 2767 and r.index(32768) is None
    with pytest.raises(ValueError):
        PortRange.parse("32767-30000")


def test_bitmap_snapshot_is_upstreams_big_endian_integer() -> None:
    b = Bitmap(20, 0)
    b.set(0)
    b.set(9)
    assert b.snapshot() == (1 | 1 << 9).to_bytes(2, "big")
    again = Bitmap(20, 0, b.snapshot())
    assert [i for i in range(20) if again.has(i)] == [0, 9]
    again.clear(9)
    assert base64.b64encode(again.snapshot()) == b"AQ=="


def test_dynamic_allocation_prefers_the_upper_band() -> None:
    b = Bitmap(40, 16)
    rng = random.Random(1)
    taken = []
    for _ in range(24):
        i = b.next_free(rng)
        assert i is not None
        b.set(i)
        taken.append(i)
    assert sorted(taken) == list(range(16, 40))
    nxt = b.next_free(rng)
    assert nxt is not None and nxt < 16
    for i in range(16):
        b.set(i)
    assert b.next_free(rng) is None


def svc(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "s"},
                            "spec": {"selector": {"a": "b"}, "ports": [{"port": 80}], **spec}}
    services.default_service(body)
    services.normalize_cluster_ips(body)
    services.init_ip_families(body)
    return body


def test_defaults() -> None:
    body = svc(type="NodePort")
    spec = body["spec"]
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    assert (spec["externalTrafficPolicy"], spec["internalTrafficPolicy"],
            spec["sessionAffinity"]) == ("Cluster", "Cluster", "None")
    lb = svc(type="LoadBalancer")["spec"]
    assert lb["allocateLoadBalancerNodePorts"] is True
    affinity = svc(sessionAffinity="ClientIP")["spec"]
    assert affinity["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}
    # None clears a config (upstream's SetDefaults_Service), so it is not refused as set
    none = svc(sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})["spec"]
    assert none["sessionAffinity"] == "None" and "sessionAffinityConfig" not in none


@pytest.mark.parametrize(("spec", "errors"), [
    ({"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.6"]},
     ['spec.clusterIPs: Invalid value: []string{"10.96.0.6"}: first value must match '
      "`clusterIP`"]),
    ({"clusterIP": "nope"},
     ['spec.clusterIPs[0]: Invalid value: "nope": must be a valid IP address, (e.g. 10.9.8.7 '
      "or 2001:db8::ffff)"]),
    ({"type": "ClusterIP", "externalTrafficPolicy": "Local"},
     ['spec.externalTrafficPolicy: Invalid value: "Local": may only be set for '
      "externally-accessible services"]),
    ({"ports": [{"port": 80}, {"port": 80, "name": "b"}]},
     ["spec.ports[0].name: Required value",
      'spec.ports[1]: Duplicate value: core.ServicePort{Name:"", Protocol:"TCP", '
      "AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, "
      'StrVal:""}, NodePort:0}']),
    ({"ports": [{"port": 80, "targetPort": "Not_A_Name"}]},
     ['spec.ports[0].targetPort: Invalid value: "Not_A_Name": must contain only '
      "alpha-numeric characters (a-z, 0-9), and hyphens (-)"]),
    ({"type": "ExternalName", "externalName": ""},
     ["spec.externalName: Required value"]),
    ({"loadBalancerSourceRanges": ["10.0.0.0/8", "nope"]},
     ["spec.LoadBalancerSourceRanges: Forbidden: may only be used when `type` is "
      "'LoadBalancer'",
      'spec.LoadBalancerSourceRanges[1]: Invalid value: "nope": must be a valid CIDR value, '
      "(e.g. 10.9.8.0/24 or 2001:db8::/64)"]),
])
def test_validation(spec: dict[str, Any], errors: list[str]) -> None:
    assert [str(e) for e in services.validate_service(svc(**spec))] == errors


def test_update_keeps_allocated_values_and_refuses_a_new_cluster_ip() -> None:
    old = svc(type="NodePort", clusterIP="10.96.0.9")
    old["spec"]["ports"][0]["nodePort"] = 30001
    new = svc(type="NodePort")
    services.normalize_cluster_ips(new, old)
    services.patch_allocated_values(new, old)
    assert new["spec"]["clusterIPs"] == ["10.96.0.9"]
    assert new["spec"]["ports"][0]["nodePort"] == 30001
    changed = svc(type="NodePort", clusterIP="10.96.0.10")
    assert [str(e) for e in services.validate_service_update(changed, old)] == [
        'spec.clusterIPs[0]: Invalid value: "10.96.0.10": may not change once set']


def test_single_stack_refusals() -> None:
    assert [str(e) for e in services.single_stack_errors(
        svc(ipFamilyPolicy="RequireDualStack"))] == [
        'spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not '
        "configured for dual-stack services"]


def test_service_names_are_dns1035_labels() -> None:
    assert services.service_name_errors("web-1", False) == []
    assert services.service_name_errors("web-", True) == []
    assert services.service_name_errors("1web", False) != []


@pytest.mark.parametrize(("body", "errors"), [
    ({"subsets": [{"ports": [{"port": 80, "protocol": "TCP"}]}]},
     ["subsets[0]: Required value: must specify `addresses` or `notReadyAddresses`"]),
    ({"subsets": [{"addresses": [{"ip": "127.0.0.1"}, {"ip": "x"}]}]},
     ['subsets[0].addresses[0].ip: Invalid value: "127.0.0.1": may not be in the loopback '
      "range (127.0.0.0/8, ::1/128)",
      'subsets[0].addresses[1].ip: Invalid value: "x": must be a valid IP address, (e.g. '
      "10.9.8.7 or 2001:db8::ffff)"]),
])
def test_endpoints_validation(body: dict[str, Any], errors: list[str]) -> None:
    endpoints.default_endpoints(body)
    assert [str(e) for e in endpoints.validate_endpoints(body)] == errors


@pytest.mark.parametrize(("body", "errors"), [
    ({}, ["addressType: Required value"]),
    ({"addressType": "IPv4", "endpoints": [{"addresses": []}, {"addresses": ["fe80::1"]}]},
     ["endpoints[0].addresses: Required value: must contain at least 1 address",
      'endpoints[1].addresses[0]: Invalid value: "fe80::1": must be a valid IPv4 address']),
    ({"addressType": "IPv4", "ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]},
     ['ports[1].name: Duplicate value: "a"']),
])
def test_endpoint_slice_validation(body: dict[str, Any], errors: list[str]) -> None:
    endpoints.default_endpoint_slice(body)
    assert [str(e) for e in endpoints.validate_endpoint_slice(body)] == errors


def test_endpoint_slice_address_type_is_immutable() -> None:
    old = {"addressType": "IPv4"}
    assert [str(e) for e in endpoints.validate_endpoint_slice_update(
        {"addressType": "IPv6"}, old)] == [
        'addressType: Invalid value: "IPv6": field is immutable']

"""A Node's pod CIDRs go from empty to set once (the node IPAM controller's merge patch) and
never change after, with upstream's Forbidden cause; the status subresource keeps them."""

from __future__ import annotations

from apiserver_fixtures import Api

MERGE = "application/merge-patch+json"
FORBIDDEN = 'spec.podCIDRs: Forbidden: node updates may not change podCIDR except from "" ' \
            'to valid'


async def test_pod_cidr_is_set_once(api: Api) -> None:
    status, _ = await api.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                 "metadata": {"name": "n1"}})
    assert status == 201
    status, node = await api.patch("/api/v1/nodes/n1", {"spec": {
        "podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}}, MERGE)
    assert status == 200 and node["spec"]["podCIDRs"] == ["10.244.1.0/24"]
    # the same value again is no change
    status, _ = await api.patch("/api/v1/nodes/n1", {"spec": {
        "podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}}, MERGE)
    assert status == 200
    for change in ({"podCIDR": "10.244.2.0/24", "podCIDRs": ["10.244.2.0/24"]},
                   {"podCIDR": None, "podCIDRs": None}):
        status, body = await api.patch("/api/v1/nodes/n1", {"spec": change}, MERGE)
        assert status == 422, body
        assert body["message"] == f'Node "n1" is invalid: {FORBIDDEN}'
        assert body["details"]["causes"] == [{
            "reason": "FieldValueForbidden", "field": "spec.podCIDRs",
            "message": 'Forbidden: node updates may not change podCIDR except from "" to '
                       'valid'}]
    status, node = await api.patch("/api/v1/nodes/n1/status", {"status": {"addresses": [
        {"type": "InternalIP", "address": "127.0.0.1"}]}}, MERGE)
    assert status == 200 and node["spec"]["podCIDRs"] == ["10.244.1.0/24"]

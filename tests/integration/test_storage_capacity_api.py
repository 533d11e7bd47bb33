"""storage.k8s.io/v1 CSIStorageCapacity through the in-process apiserver (kr8s' suite looks
the kind up and lists it): discovery, create/list, upstream's validation messages, the
immutable GetCapacity inputs and the Table columns."""

from __future__ import annotations

import copy
from typing import Any

from apiserver_fixtures import TABLE_ACCEPT, Api, causes

CAPACITIES = "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities"


def capacity(name: str = "fast-node1", **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
            "metadata": {"name": name}, "storageClassName": "fast",
            "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": "node1"}},
            "capacity": "10Gi", **fields}


async def test_discovered_stored_and_listed(api: Api) -> None:
    status, group = await api.get("/apis/storage.k8s.io/v1")
    assert status == 200
    by_name = {r["name"]: r for r in group["resources"]}
    assert by_name["csistoragecapacities"]["kind"] == "CSIStorageCapacity"
    assert by_name["csistoragecapacities"]["namespaced"] is True
    status, groups = await api.get("/apis")
    assert "storage.k8s.io" in [g["name"] for g in groups["groups"]]
    status, created = await api.post(CAPACITIES, capacity())
    assert status == 201, created
    assert created["capacity"] == "10Gi"
    status, listed = await api.get("/apis/storage.k8s.io/v1/csistoragecapacities")
    assert status == 200
    assert listed["kind"] == "CSIStorageCapacityList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["fast-node1"]


async def test_validation_messages(api: Api) -> None:
    body = capacity("bad", storageClassName="Fast_SSD", capacity="-1",
                    nodeTopology={"matchExpressions": [{"key": "zone", "operator": "In"}]})
    status, refused = await api.post(CAPACITIES, body)
    assert status == 422
    assert refused["message"].startswith('CSIStorageCapacity.storage.k8s.io "bad" is invalid')
    assert causes(refused) == [
        ("nodeTopology.matchExpressions[0].values",
         "Required value: must be specified when `operator` is 'In' or 'NotIn'"),
        ("storageClassName",
         "Invalid value: \"Fast_SSD\": a lowercase RFC 1123 subdomain must consist of lower "
         "case alphanumeric characters, '-' or '.', and must start and end with an "
         "alphanumeric character (e.g. 'example.com', regex used for validation is "
         "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
        ("capacity", "Invalid value: \"-1\": must be greater than or equal to 0"),
    ]
    missing = capacity("unnamed-class")
    del missing["storageClassName"]
    status, refused = await api.post(CAPACITIES, missing)
    assert status == 422
    assert [f for f, _ in causes(refused)] == ["storageClassName"]


async def test_getcapacity_inputs_are_immutable(api: Api) -> None:
    status, created = await api.post(CAPACITIES, capacity())
    assert status == 201
    changed = copy.deepcopy(created)
    changed["capacity"] = "5Gi"
    status, updated = await api.put(f"{CAPACITIES}/fast-node1", changed)
    assert status == 200, updated
    assert updated["capacity"] == "5Gi"
    updated["storageClassName"] = "slow"
    del updated["nodeTopology"]
    status, refused = await api.put(f"{CAPACITIES}/fast-node1", updated)
    assert status == 422
    assert causes(refused) == [
        ("nodeTopology", 'Invalid value: "null": field is immutable'),
        ("storageClassName", 'Invalid value: "slow": field is immutable'),
    ]


async def test_table_columns(api: Api) -> None:
    await api.post(CAPACITIES, capacity(capacity="1024Mi"))
    await api.post(CAPACITIES, capacity("unknown", capacity=None))
    status, table = await api.get(CAPACITIES, headers={"Accept": TABLE_ACCEPT})
    assert status == 200
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "StorageClassName", "Capacity"]
    assert [r["cells"] for r in table["rows"]] == [
        ["fast-node1", "fast", "1Gi"], ["unknown", "fast", "<unset>"]]

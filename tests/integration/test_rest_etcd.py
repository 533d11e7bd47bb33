"""The apiserver on a real etcd (the session's server, a unique key prefix per test): the
verbs that depend most on the store's semantics."""

from __future__ import annotations

import pytest
from apiserver_fixtures import Api, configmap, open_watch

pytestmark = pytest.mark.etcd

PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"


async def test_crud_and_conflict_on_etcd(etcd_api: Api) -> None:
    api = etcd_api
    created = await api.create_pod("p1")
    status, got = await api.get(f"{PODS}/p1")
    assert status == 200
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    status, body = await api.post(PODS, {"apiVersion": "v1", "kind": "Pod",
                                         "metadata": {"name": "p1"},
                                         "spec": {"containers": [{"name": "c",
                                                                  "image": "x"}]}})
    assert (status, body["reason"]) == (409, "AlreadyExists")
    got["metadata"]["labels"] = {"a": "b"}
    status, _ = await api.put(f"{PODS}/p1", got)
    assert status == 200
    status, body = await api.put(f"{PODS}/p1", got)
    assert status == 409
    assert body["message"].startswith('Operation cannot be fulfilled on pods "p1": the object '
                                      "has been modified")
    rv = (await api.get(f"{PODS}/p1"))[1]["metadata"]["resourceVersion"]
    status, body = await api.patch(f"{PODS}/p1", {"metadata": {"labels": {"a": "b"}}}, MERGE)
    assert body["metadata"]["resourceVersion"] == rv


async def test_list_pages_and_watch_on_etcd(etcd_api: Api) -> None:
    api = etcd_api
    for i in range(3):
        await api.post(CMS, configmap(f"c{i}"))
    _, first = await api.get(f"{CMS}?limit=2")
    assert [i["metadata"]["name"] for i in first["items"]] == ["c0", "c1"]
    _, rest = await api.get(f"{CMS}?limit=2&continue={first['metadata']['continue']}")
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c2"]
    watch = await open_watch(api, f"{CMS}?watch=true&resourceVersion="
                                  f"{first['metadata']['resourceVersion']}")
    await api.patch(f"{CMS}/c1", {"data": {"k": "2"}}, MERGE)
    await api.delete(f"{CMS}/c2")
    events = [await watch.next_non_bookmark() for _ in range(2)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "c1"), ("DELETED", "c2")]
    watch.close()


async def test_graceful_pod_deletion_on_etcd(etcd_api: Api) -> None:
    api = etcd_api
    await api.create_pod("p1", node="n1")
    status, body = await api.delete(f"{PODS}/p1")
    assert body["metadata"]["deletionGracePeriodSeconds"] == 30
    status, _ = await api.delete(f"{PODS}/p1?gracePeriodSeconds=0")
    assert status == 200
    status, _ = await api.get(f"{PODS}/p1")
    assert status == 404

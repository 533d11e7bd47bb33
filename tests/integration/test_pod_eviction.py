"""`pods/NAME/eviction` on the in-process apiserver: a policy/v1 Eviction deletes the pod with
its `deleteOptions` (no PodDisruptionBudgets are served, so none refuses it), answering 201
with a Success Status as upstream; the name must match, a missing pod is a 404, and dryRun
leaves the pod alone."""

from __future__ import annotations

from typing import Any

from apiserver_fixtures import Api

PODS = "/api/v1/namespaces/default/pods"


def eviction(name: str, **delete_options: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": name, "namespace": "default"}}
    if delete_options:
        body["deleteOptions"] = delete_options
    return body


async def test_an_eviction_deletes_the_pod_with_its_delete_options(api: Api) -> None:
    await api.create_pod("evictee", node="n1")
    status, body = await api.post(f"{PODS}/evictee/eviction",
                                  eviction("evictee", gracePeriodSeconds=7))
    assert (status, body) == (201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                    "status": "Success", "code": 201})
    status, pod = await api.get(f"{PODS}/evictee")
    assert status == 200  # bound to a node: deleted gracefully, as asked
    assert pod["metadata"]["deletionTimestamp"]
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 7


async def test_dry_run_and_the_errors(api: Api) -> None:
    await api.create_pod("stays", node="n1")
    status, _ = await api.post(f"{PODS}/stays/eviction",
                               eviction("stays", dryRun=["All"]))
    assert status == 201
    status, pod = await api.get(f"{PODS}/stays")
    assert "deletionTimestamp" not in pod["metadata"]

    status, body = await api.post(f"{PODS}/stays/eviction", eviction("other"))
    assert (status, body["reason"], body["message"]) == (
        400, "BadRequest", "name in URL does not match name in Eviction object")
    status, body = await api.post(f"{PODS}/gone/eviction", eviction("gone"))
    assert (status, body["reason"], body["message"]) == (404, "NotFound",
                                                         'pods "gone" not found')
    status, body = await api.post(f"{PODS}/stays/eviction",
                                  {"apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": "stays"}})
    assert status == 400 and "Eviction" in body["message"]

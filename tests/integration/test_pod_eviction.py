"""`pods/NAME/eviction` on the in-process apiserver: a policy/v1 Eviction deletes the pod with
its `deleteOptions` (no PodDisruptionBudgets are served, so none refuses it), answering 201
with a Success Status as upstream, after it marked the pod with the `DisruptionTarget`
condition; the name must match, a missing pod is a 404, and dryRun leaves the pod alone."""

from __future__ import annotations

from typing import Any

from apiserver_fixtures import Api, open_watch

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
    assert_disruption_target(pod)


def assert_disruption_target(pod: dict[str, Any]) -> None:
    """The condition upstream's eviction adds (PodDisruptionConditions, GA in 1.31)."""
    found = [c for c in pod["status"].get("conditions", []) if c["type"] == "DisruptionTarget"]
    assert len(found) == 1, pod["status"]
    condition = found[0]
    assert condition["lastTransitionTime"]
    assert {k: condition[k] for k in ("status", "reason", "message")} == {
        "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting"}


async def test_the_condition_is_written_before_the_pod_is_deleted(api: Api) -> None:
    """An unbound pod goes at once: a watch sees the status update, then the deletion, both
    with the condition; a resourceVersion precondition holds to the pod as updated."""
    created = await api.create_pod("quick")
    rv = created["metadata"]["resourceVersion"]
    watch = await open_watch(api, f"{PODS}?watch=true&resourceVersion={rv}")
    status, body = await api.post(f"{PODS}/quick/eviction",
                                  eviction("quick", preconditions={"resourceVersion": rv}))
    assert status == 201, body
    events = [await watch.next() for _ in range(2)]
    watch.close()
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
    for event in events:
        assert_disruption_target(event["object"])


async def test_a_failed_precondition_leaves_the_pod_unmarked(api: Api) -> None:
    created = await api.create_pod("kept", node="n1")
    status, body = await api.post(f"{PODS}/kept/eviction",
                                  eviction("kept", preconditions={"resourceVersion": "1"}))
    assert (status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on Pod "kept": the ResourceVersion in the precondition '
        f"(1) does not match the ResourceVersion in record "
        f"({created['metadata']['resourceVersion']}). The object might have been modified")
    status, pod = await api.get(f"{PODS}/kept")
    assert "deletionTimestamp" not in pod["metadata"]
    assert not pod["status"].get("conditions")


async def test_dry_run_and_the_errors(api: Api) -> None:
    await api.create_pod("stays", node="n1")
    status, _ = await api.post(f"{PODS}/stays/eviction",
                               eviction("stays", dryRun=["All"]))
    assert status == 201
    status, pod = await api.get(f"{PODS}/stays")
    assert "deletionTimestamp" not in pod["metadata"]
    assert not pod["status"].get("conditions")

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


async def test_delete_options_of_the_wrong_types(api: Api) -> None:
    """The Eviction is decoded typed by the create handler: a decode error (400) naming the
    field under `deleteOptions`, before the name is compared; the pod stays."""
    await api.create_pod("typed", node="n1")
    for options, message in (
            ({"dryRun": "All"}, "json: cannot unmarshal string into Go struct field "
                                "DeleteOptions.deleteOptions.dryRun of type []string"),
            ({"gracePeriodSeconds": "5"}, "json: cannot unmarshal string into Go struct field "
                                          "DeleteOptions.deleteOptions.gracePeriodSeconds of "
                                          "type int64"),
            ({"propagationPolicy": 5}, "json: cannot unmarshal number into Go struct field "
                                       "DeleteOptions.deleteOptions.propagationPolicy of type "
                                       "v1.DeletionPropagation")):
        status, body = await api.post(f"{PODS}/typed/eviction",
                                      {**eviction("other"), "deleteOptions": options})
        assert (status, body["reason"], body["message"]) == (
            400, "BadRequest",
            f'Eviction in version "v1" cannot be handled as a Eviction: {message}')
    status, pod = await api.get(f"{PODS}/typed")
    assert "deletionTimestamp" not in pod["metadata"]

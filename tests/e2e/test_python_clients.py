"""The Python clients users reach for, against a real `ephemera up` over HTTPS with the admin
kubeconfig: kr8s (sync and asyncio), the official client's `DynamicClient` (discovery,
subresources, server-side apply, watch, delete options) and its classic `CoreV1Api` with raw
JSON (reference/kubectl-and-clients.md section 7). Objects carry the KEP-6395 fields, which
must survive every round trip.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kr8s
import kr8s.asyncio
import pytest
from cluster import Cluster, namespace_for, shared_cluster  # noqa: F401  (fixture)
from kr8s.asyncio.objects import Pod as AsyncPod
from kr8s.objects import Pod
from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

pytestmark = [pytest.mark.e2e,
              # kr8s warns that it was not tested with the Kubernetes version ephemera reports.
              pytest.mark.filterwarnings("ignore:Kubernetes version .* is not supported")]

POLICY = {"restartPolicy": "RestartContainer"}
VOLUME_STATUSES = [{"name": "scratch", "hostPhase": "HostMounted"}]
MERGE_PATCH = "application/merge-patch+json"


def pod_manifest(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            # No scheduler places it: it stays Pending and unbound (deleted at once).
            "spec": {"schedulerName": "manual",
                     "containers": [{"name": "c", "image": "busybox:1.36",
                                     "dynamicVolumePolicy": dict(POLICY)}]}}


@pytest.fixture
def api_client(shared_cluster: Cluster) -> Iterator[client.ApiClient]:  # noqa: F811
    api = config.new_client_from_config(config_file=str(shared_cluster.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> str:
    name = namespace_for(request.node.name)
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": name}})
    return name


# --- kr8s ---------------------------------------------------------------------------------


def test_kr8s_sync_create_get_patch_delete(shared_cluster: Cluster,  # noqa: F811
                                           namespace: str) -> None:
    api = kr8s.api(kubeconfig=str(shared_cluster.kubeconfig))
    pod = Pod(pod_manifest("k1", namespace), api=api)  # a dict with fields kr8s doesn't know
    pod.create()
    assert pod.raw["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY
    assert pod.metadata.uid

    got = Pod.get("k1", namespace=namespace, api=api)  # a LIST with a field selector
    assert got.metadata.uid == pod.metadata.uid
    assert got.spec.containers[0]["dynamicVolumePolicy"] == POLICY

    created_version = int(got.metadata.resourceVersion)
    got.patch({"metadata": {"labels": {"via": "dynamic"}}}, subresource="dynamic")
    assert got.labels == {"app": "k1", "via": "dynamic"}
    assert int(got.metadata.resourceVersion) > created_version
    got.patch({"status": {"volumeStatuses": VOLUME_STATUSES}}, subresource="status")
    assert got.raw["status"]["volumeStatuses"] == VOLUME_STATUSES

    got.refresh()
    assert got.labels == {"app": "k1", "via": "dynamic"}
    assert got.raw["status"]["volumeStatuses"] == VOLUME_STATUSES
    assert got.spec.containers[0]["dynamicVolumePolicy"] == POLICY

    got.delete()  # not bound to a node: gone at once
    assert not got.exists()


async def test_kr8s_asyncio_raw_calls_and_watch(shared_cluster: Cluster,  # noqa: F811
                                                namespace: str) -> None:
    api = await kr8s.asyncio.api(kubeconfig=str(shared_cluster.kubeconfig))
    pod = await AsyncPod(pod_manifest("a1", namespace), api=api)
    await pod.create()

    events: list[tuple[str, dict[str, Any]]] = []
    started = asyncio.Event()

    async def watch_pods() -> None:
        async for event_type, obj in api.async_watch("pods", namespace=namespace):
            events.append((event_type, obj.raw))
            started.set()
            if event_type == "DELETED":
                return

    watcher = asyncio.create_task(watch_pods())
    try:
        await asyncio.wait_for(started.wait(), 30)  # the current state, as ADDED
        got = await AsyncPod.get("a1", namespace=namespace, api=api)
        assert got.spec.containers[0]["dynamicVolumePolicy"] == POLICY
        await got.patch({"metadata": {"labels": {"step": "patched"}}}, subresource="dynamic")

        async with api.call_api("GET", version="v1", namespace=namespace,
                                url="pods/a1/dynamic") as response:
            current = response.json()
        assert current["metadata"]["labels"] == {"app": "a1", "step": "patched"}
        assert current["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY

        current["metadata"]["labels"]["step"] = "put"
        async with api.call_api("PUT", version="v1", namespace=namespace,
                                url="pods/a1/dynamic", content=json.dumps(current),
                                headers={"Content-Type": "application/json"}) as response:
            replaced = response.json()
        assert replaced["metadata"]["labels"] == {"app": "a1", "step": "put"}
        assert int(replaced["metadata"]["resourceVersion"]) > \
            int(current["metadata"]["resourceVersion"])

        with pytest.raises(kr8s.ServerError) as stale:  # the old resourceVersion again
            async with api.call_api("PUT", version="v1", namespace=namespace,
                                    url="pods/a1/dynamic", content=json.dumps(current),
                                    headers={"Content-Type": "application/json"}):
                pass
        assert stale.value.response is not None
        assert stale.value.response.status_code == 409
        assert stale.value.response.json()["reason"] == "Conflict"

        await got.delete()
        await asyncio.wait_for(watcher, 30)
    finally:
        watcher.cancel()

    types = [event_type for event_type, _ in events]
    assert types[0] == "ADDED" and types[-1] == "DELETED"
    labels = [obj["metadata"].get("labels") for event_type, obj in events
              if event_type == "MODIFIED"]
    assert {"app": "a1", "step": "patched"} in labels
    assert {"app": "a1", "step": "put"} in labels
    assert all(obj["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY
               for _, obj in events)
    versions = [int(obj["metadata"]["resourceVersion"]) for _, obj in events]
    assert versions == sorted(versions)


# --- the official client ------------------------------------------------------------------


def test_dynamic_client_subresources_apply_watch_delete(api_client: client.ApiClient,
                                                        namespace: str,
                                                        tmp_path: Path) -> None:
    dyn = dynamic.DynamicClient(api_client, cache_file=str(tmp_path / "discovery.json"))
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    assert {"binding", "dynamic", "status"} <= set(pods.subresources)

    created = pods.create(body=pod_manifest("d1", namespace), namespace=namespace)
    assert created.spec.containers[0].dynamicVolumePolicy.to_dict() == POLICY

    got = pods.dynamic.get(name="d1", namespace=namespace)
    assert got.metadata.uid == created.metadata.uid
    assert got.spec.containers[0].dynamicVolumePolicy.restartPolicy == "RestartContainer"

    merged = pods.dynamic.patch(body={"metadata": {"labels": {"via": "merge"}}}, name="d1",
                                namespace=namespace, content_type=MERGE_PATCH)
    assert merged.metadata.labels.to_dict() == {"app": "d1", "via": "merge"}
    # The default content type is a strategic merge patch: containers merge by name.
    strategic = pods.dynamic.patch(
        body={"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}},
        name="d1", namespace=namespace)
    [container] = strategic.to_dict()["spec"]["containers"]
    assert (container["image"], container["dynamicVolumePolicy"]) == ("busybox:1.37", POLICY)

    body = strategic.to_dict()
    body["metadata"]["labels"]["via"] = "replace"
    replaced = pods.dynamic.replace(body=body, name="d1", namespace=namespace)
    assert replaced.metadata.labels.via == "replace"
    with pytest.raises(ConflictError) as stale:
        pods.dynamic.replace(body=body, name="d1", namespace=namespace)
    assert json.loads(stale.value.body)["message"] == (
        'Operation cannot be fulfilled on pods "d1": the object has been modified; please '
        "apply your changes to the latest version and try again")

    # Server-side apply creates, then conflicts with another manager, then forces.
    applied = pods.server_side_apply(body=pod_manifest("d2", namespace), namespace=namespace,
                                     field_manager="first")
    assert [(e.manager, e.operation) for e in applied.metadata.managedFields] == [
        ("first", "Apply")]
    assert applied.spec.containers[0].dynamicVolumePolicy.to_dict() == POLICY
    other = pod_manifest("d2", namespace)
    other["metadata"]["labels"]["app"] = "taken"
    with pytest.raises(ConflictError) as conflict:
        pods.server_side_apply(body=other, namespace=namespace, field_manager="second")
    assert json.loads(conflict.value.body)["message"] == \
        'Apply failed with 1 conflict: conflict with "first": .metadata.labels.app'
    forced = pods.server_side_apply(body=other, namespace=namespace, field_manager="second",
                                    force_conflicts=True)
    assert forced.metadata.labels.app == "taken"

    # A watch with timeoutSeconds: the current pods as ADDED, then the server ends it.
    seen = [(event["type"], event["object"].metadata.name)
            for event in pods.watch(namespace=namespace, timeout=1)]
    assert seen[:2] in ([("ADDED", "d1"), ("ADDED", "d2")], [("ADDED", "d2"), ("ADDED", "d1")])
    assert {event_type for event_type, _ in seen[2:]} <= {"MODIFIED"}  # controllers, if any

    # Foreground: the pod waits with the foregroundDeletion finalizer until the garbage
    # collector has seen it has no dependents, then goes.
    deleted = pods.delete(name="d1", namespace=namespace, propagation_policy="Foreground")
    assert deleted.metadata.name == "d1"
    deadline = time.monotonic() + 30
    while True:
        try:
            pods.get(name="d1", namespace=namespace)
        except NotFoundError as missing:
            assert json.loads(missing.body)["message"] == 'pods "d1" not found'
            break
        assert time.monotonic() < deadline, "the pod deleted in the foreground stayed"
        time.sleep(0.1)


def test_core_v1_api_raw_json(api_client: client.ApiClient, namespace: str) -> None:
    v1 = client.CoreV1Api(api_client)
    v1.create_namespaced_pod(namespace, pod_manifest("c1", namespace))  # a dict: sent as is
    v1.patch_namespaced_pod_status("c1", namespace,
                                   {"status": {"volumeStatuses": VOLUME_STATUSES}})

    raw = json.loads(v1.read_namespaced_pod("c1", namespace, _preload_content=False).data)
    assert raw["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY
    assert raw["status"]["volumeStatuses"] == VOLUME_STATUSES
    listed = json.loads(v1.list_namespaced_pod(namespace, _preload_content=False).data)
    assert listed["kind"] == "PodList"
    assert [item["status"]["volumeStatuses"] for item in listed["items"]] == [VOLUME_STATUSES]

    # The classic client's watch (it sends `watch=True`): raw_object keeps the new fields.
    events = list(watch.Watch().stream(v1.list_namespaced_pod, namespace, timeout_seconds=1))
    assert (events[0]["type"], events[0]["raw_object"]["metadata"]["name"]) == ("ADDED", "c1")
    assert {e["type"] for e in events[1:]} <= {"MODIFIED"}  # controllers, if any
    assert events[0]["raw_object"]["status"]["volumeStatuses"] == VOLUME_STATUSES

    with pytest.raises(ApiException) as missing:
        v1.read_namespaced_pod("nope", namespace)
    assert missing.value.status == 404
    assert json.loads(missing.value.body) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods "nope" not found', "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"}, "code": 404}

    bad = pod_manifest("Bad_Name", namespace)
    del bad["spec"]["containers"][0]["image"]
    with pytest.raises(ApiException) as invalid:
        v1.create_namespaced_pod(namespace, bad)
    assert invalid.value.status == 422
    status = json.loads(invalid.value.body)
    assert status["reason"] == "Invalid"
    assert status["details"]["name"] == "Bad_Name" and status["details"]["kind"] == "Pod"
    assert [(c["reason"], c["field"]) for c in status["details"]["causes"]] == [
        ("FieldValueInvalid", "metadata.name"),
        ("FieldValueRequired", "spec.containers[0].image")]

    v1.delete_namespaced_pod("c1", namespace, dry_run="All", propagation_policy="Background")
    assert v1.read_namespaced_pod("c1", namespace).metadata.deletion_timestamp is None
    v1.delete_namespaced_pod("c1", namespace, grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        v1.read_namespaced_pod("c1", namespace)
    assert gone.value.status == 404

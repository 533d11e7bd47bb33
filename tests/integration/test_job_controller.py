"""The Job controller (and the garbage collector and TTL controller beside it) against an
in-process apiserver; no kubelet: the test plays the pods' ends by writing their status.
Completions with parallelism never run more pods at once than allowed, the backoff limit
fails a Job with upstream's conditions, an Indexed Job gives each pod its index, pods are
released from the tracking finalizer, and a finished Job with a TTL is deleted."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from apiserver_fixtures import eventually

from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, resource_path
from ephemera.client.kubeconfig import ClientConfig
from ephemera.controllers.garbagecollector import GarbageCollector
from ephemera.controllers.job import ORPHAN_PREFIX, JobController
from ephemera.controllers.ttlafterfinished import TTLAfterFinishedController
from ephemera.store import open_store

JOBS = resource_path("jobs", "default", group="batch")
PODS = resource_path("pods", "default")
FINALIZER = "batch.kubernetes.io/job-tracking"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[ApiClient]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    server = TestServer(create_app(store, ApiserverConfig(watch_bookmark_interval=0.2)))
    await server.start_server()
    try:
        async with ApiClient(ClientConfig(server=str(server.make_url("")).rstrip("/")),
                             user_agent="job-test") as client:
            tasks = [asyncio.create_task(JobController(client, backoff_base=0.01).run()),
                     asyncio.create_task(GarbageCollector(client).run()),
                     asyncio.create_task(TTLAfterFinishedController(client).run())]
            try:
                yield client
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
    finally:
        await server.close()
        await store.close()


def job(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox:1.36"}]}}, **spec}}


async def pods_of(api: ApiClient, name: str) -> list[dict[str, Any]]:
    listed = await api.get(PODS, labelSelector=f"batch.kubernetes.io/job-name={name}")
    return list(listed["items"])


async def finish(api: ApiClient, pod: dict[str, Any], phase: str, code: int = 0) -> None:
    pod = dict(pod)
    pod["status"] = {"phase": phase, "containerStatuses": [{
        "name": "c", "image": "busybox:1.36", "imageID": "", "ready": False,
        "restartCount": 0, "state": {"terminated": {"exitCode": code}}}]}
    await api.update(f"{PODS}/{pod['metadata']['name']}/status", pod)


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if (p.get("status") or {}).get("phase") not in
            ("Succeeded", "Failed") and not p["metadata"].get("deletionTimestamp")]


def conditions(j: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
            for c in (j.get("status") or {}).get("conditions") or []]


async def test_five_completions_two_at_a_time(api: ApiClient) -> None:
    await api.create(JOBS, job("five", completions=5, parallelism=2))
    done = 0
    while done < 5:
        async def two_or_rest(left: int = 5 - done) -> bool:
            return len(running(await pods_of(api, "five"))) == min(2, left)
        await eventually(two_or_rest)
        active = running(await pods_of(api, "five"))
        assert len(active) <= 2
        pod = active[0]
        assert FINALIZER in pod["metadata"]["finalizers"]
        ref = pod["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["controller"], ref["blockOwnerDeletion"]) == ("Job", True, True)
        await finish(api, pod, "Succeeded")
        done += 1

    async def complete() -> bool:
        j = await api.get(f"{JOBS}/five")
        return any(c[0] == "Complete" for c in conditions(j))
    await eventually(complete)
    j = await api.get(f"{JOBS}/five")
    assert j["status"]["succeeded"] == 5
    assert j["status"].get("active", 0) == 0
    assert j["status"]["completionTime"]
    assert conditions(j) == [
        ("SuccessCriteriaMet", "True", "CompletionsReached",
         "Reached expected number of succeeded pods"),
        ("Complete", "True", "CompletionsReached", "Reached expected number of succeeded pods")]
    pods = await pods_of(api, "five")
    assert len(pods) == 5
    assert all(FINALIZER not in (p["metadata"].get("finalizers") or []) for p in pods)

    async def reasons() -> list[str]:
        events = await api.get(resource_path("events", "default"))
        return [e["reason"] for e in events["items"]
                if e["involvedObject"].get("name") == "five"]

    async def completed_event() -> bool:  # recorded right after the status is written
        return "Completed" in await reasons()
    await eventually(completed_event)
    assert (await reasons()).count("SuccessfulCreate") == 5


async def test_backoff_limit_exceeded(api: ApiClient) -> None:
    await api.create(JOBS, job("flaky", backoffLimit=1))
    for _ in range(2):
        async def one() -> bool:
            return len(running(await pods_of(api, "flaky"))) == 1
        await eventually(one)
        await finish(api, running(await pods_of(api, "flaky"))[0], "Failed", 3)

    async def failed() -> bool:
        j = await api.get(f"{JOBS}/flaky")
        return any(c[0] == "Failed" for c in conditions(j))
    await eventually(failed)
    j = await api.get(f"{JOBS}/flaky")
    message = "Job has reached the specified backoff limit"
    assert conditions(j) == [("FailureTarget", "True", "BackoffLimitExceeded", message),
                             ("Failed", "True", "BackoffLimitExceeded", message)]
    assert j["status"]["failed"] == 2
    assert "completionTime" not in j["status"]
    assert len(await pods_of(api, "flaky")) == 2  # no third try


async def test_a_drained_pod_is_ignored_by_a_disruption_target_rule(api: ApiClient) -> None:
    """kubectl drain evicts through the Eviction API, which marks the pod DisruptionTarget
    before deleting it: a podFailurePolicy rule that Ignores that condition keeps the pod
    from counting towards the backoff limit (0 here), and the Job replaces it."""
    rules = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    await api.create(JOBS, job("drained", backoffLimit=0,
                               podFailurePolicy={"rules": rules}))

    async def one() -> bool:
        return len(running(await pods_of(api, "drained"))) == 1
    await eventually(one)
    name = running(await pods_of(api, "drained"))[0]["metadata"]["name"]
    await api.create(f"{PODS}/{name}/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}})
    pod = await api.get(f"{PODS}/{name}")  # kept by the tracking finalizer, terminating
    pod["status"].update({"phase": "Failed", "containerStatuses": [{
        "name": "c", "image": "busybox:1.36", "imageID": "", "ready": False,
        "restartCount": 0, "state": {"terminated": {"exitCode": 137}}}]})
    await api.update(f"{PODS}/{name}/status", pod)  # as the kubelet ends it

    async def replaced() -> bool:
        return [p["metadata"]["name"] for p in running(await pods_of(api, "drained"))] \
            not in ([], [name])
    await eventually(replaced)
    j = await api.get(f"{JOBS}/drained")
    assert not any(c[0] in ("Failed", "FailureTarget") for c in conditions(j)), conditions(j)
    assert j["status"].get("failed", 0) == 0


async def test_indexed_job_and_ttl(api: ApiClient) -> None:
    await api.create(JOBS, job("idx", completions=3, parallelism=3, completionMode="Indexed",
                               ttlSecondsAfterFinished=0))

    async def three() -> bool:
        return len(running(await pods_of(api, "idx"))) == 3
    await eventually(three)
    pods = await pods_of(api, "idx")
    indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                     for p in pods)
    assert indexes == ["0", "1", "2"]
    for p in pods:
        index = p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
        assert p["spec"]["hostname"] == f"idx-{index}"
        assert p["metadata"]["generateName"] == f"idx-{index}-"
    for p in pods:
        await finish(api, p, "Succeeded")

    async def gone() -> bool:
        listed = await api.get(JOBS)
        return not listed["items"] and not await pods_of(api, "idx")
    await eventually(gone)  # completed, then deleted with its pods by the TTL controller


async def test_a_job_deleted_in_the_foreground_goes_after_its_pods(api: ApiClient) -> None:
    await api.create(JOBS, job("fg", completions=3, parallelism=3))

    async def three() -> bool:
        return len(running(await pods_of(api, "fg"))) == 3
    await eventually(three)
    await api.delete(f"{JOBS}/fg", {"propagationPolicy": "Foreground"})

    async def all_gone() -> bool:
        listed = await api.get(JOBS)
        return not listed["items"] and not await pods_of(api, "fg")
    await eventually(all_gone)  # no replacement pods were made meanwhile
    events = await api.get(resource_path("events", "default"))
    assert sum(1 for e in events["items"] if e["involvedObject"].get("name") == "fg"
               and e["reason"] == "SuccessfulCreate") == 3


async def test_an_orphan_the_selector_selects_is_adopted_with_the_tracking_finalizer(
        api: ApiClient) -> None:
    await api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "stray", "labels": {"app": "adopt"}}, "spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}})
    spec = job("adopter", completions=1, parallelism=1, manualSelector=True,
               selector={"matchLabels": {"app": "adopt"}})
    spec["spec"]["template"]["metadata"] = {"labels": {"app": "adopt"}}
    created = await api.create(JOBS, spec)

    async def adopted() -> bool:
        pod = await api.get(f"{PODS}/stray")
        refs = pod["metadata"].get("ownerReferences") or []
        return bool(refs and refs[0]["uid"] == created["metadata"]["uid"]
                    and FINALIZER in (pod["metadata"].get("finalizers") or []))
    await eventually(adopted)
    await finish(api, await api.get(f"{PODS}/stray"), "Succeeded")

    async def complete() -> bool:
        j = await api.get(f"{JOBS}/adopter")
        return any(c[0] == "Complete" for c in conditions(j))
    await eventually(complete)
    assert (await api.get(f"{JOBS}/adopter"))["status"]["succeeded"] == 1
    listed = await api.get(PODS, labelSelector="app=adopt")
    assert [p["metadata"]["name"] for p in listed["items"]] == ["stray"]  # none made
    stray = await api.get(f"{PODS}/stray")
    assert FINALIZER not in (stray["metadata"].get("finalizers") or [])  # counted, released


async def test_a_stale_orphan_key_leaves_the_finalizer_of_a_pod_adopted_since(
        api: ApiClient) -> None:
    """upstream's `handleOrphanPod`: the orphan's finalizer removal, queued before a Job
    adopted the pod, finds it owned by a running Job and keeps the finalizer (else the Job
    could lose count of the pod)."""
    spec = job("keeper", completions=1, parallelism=1, manualSelector=True,
               selector={"matchLabels": {"app": "keep"}})
    spec["spec"]["template"]["metadata"] = {"labels": {"app": "keep"}}
    await api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "held", "labels": {"app": "keep"}, "finalizers": [FINALIZER]}, "spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}})
    created = await api.create(JOBS, spec)

    async def adopted() -> bool:
        refs = (await api.get(f"{PODS}/held"))["metadata"].get("ownerReferences") or []
        return bool(refs and refs[0]["uid"] == created["metadata"]["uid"])
    await eventually(adopted)
    # A second controller whose queue still holds the key it queued for the orphan.
    late = JobController(api)
    informers = [asyncio.create_task(late.jobs.run()), asyncio.create_task(late.pods.run())]
    try:
        await late.jobs.wait_synced()
        await late.pods.wait_synced()
        await late.sync(ORPHAN_PREFIX + "default/held")
    finally:
        for task in informers:
            task.cancel()
        await asyncio.gather(*informers, return_exceptions=True)
    held = await api.get(f"{PODS}/held")
    assert FINALIZER in (held["metadata"].get("finalizers") or [])

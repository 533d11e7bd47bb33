"""The CronJob controller against an in-process apiserver, its clock driven by the test (a
real `*/1` schedule would take minutes): a CronJob runs once per start time due, twice after
two minutes; Forbid skips a run while one is active; the history limit deletes the oldest
finished Jobs; a suspended CronJob runs nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from apiserver_fixtures import eventually

from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, resource_path
from ephemera.client.kubeconfig import ClientConfig
from ephemera.controllers.cronjob import SCHEDULED_TIMESTAMP, CronJobController
from ephemera.store import open_store

CRONJOBS = resource_path("cronjobs", "default", group="batch")
JOBS = resource_path("jobs", "default", group="batch")


class Clock:
    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@pytest.fixture
async def cron(tmp_path: Path) -> AsyncIterator[tuple[ApiClient, CronJobController, Clock]]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    server = TestServer(create_app(store, ApiserverConfig(watch_bookmark_interval=0.2)))
    await server.start_server()
    clock = Clock()
    try:
        async with ApiClient(ClientConfig(server=str(server.make_url("")).rstrip("/")),
                             user_agent="cronjob-test") as client:
            controller = CronJobController(client, clock=clock)
            task = asyncio.create_task(controller.run())
            try:
                yield client, controller, clock
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await server.close()
        await store.close()


def cronjob(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
            "spec": {"schedule": "*/1 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}, **spec}}


async def jobs(api: ApiClient) -> list[dict[str, Any]]:
    return sorted((await api.get(JOBS))["items"], key=lambda j: j["metadata"]["name"])


async def tick(controller: CronJobController, clock: Clock, minutes: int = 1) -> None:
    clock.offset += timedelta(minutes=minutes)
    for obj in controller.cronjobs.list():
        controller.queue.add(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")


async def finish(api: ApiClient, job: dict[str, Any], condition: str) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    job["status"] = {"startTime": now, "conditions": [
        {"type": condition, "status": "True", "lastTransitionTime": now}]}
    if condition == "Complete":
        job["status"]["completionTime"] = now
    await api.update(f"{JOBS}/{job['metadata']['name']}/status", job)


async def test_runs_on_its_schedule_twice(
        cron: tuple[ApiClient, CronJobController, Clock]) -> None:
    api, controller, clock = cron
    created = await api.create(CRONJOBS, cronjob("every-minute"))
    await asyncio.sleep(0.3)
    assert await jobs(api) == []  # nothing due yet
    await tick(controller, clock)

    async def count(n: int) -> bool:
        return len(await jobs(api)) == n
    await eventually(lambda: count(1))
    await tick(controller, clock)
    await eventually(lambda: count(2))
    first, second = await jobs(api)
    for job in (first, second):
        ref = job["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["uid"], ref["controller"]) == (
            "CronJob", created["metadata"]["uid"], True)
        stamp = job["metadata"]["annotations"][SCHEDULED_TIMESTAMP]
        scheduled = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        assert scheduled.second == 0 and stamp.endswith("Z")
        assert job["metadata"]["name"] == f"every-minute-{int(scheduled.timestamp()) // 60}"
        assert job["spec"]["backoffLimit"] == 6  # a Job's own defaults
    async def both_active() -> bool:
        current = await api.get(f"{CRONJOBS}/every-minute")
        return sorted(a["name"] for a in current["status"].get("active") or []) == [
            first["metadata"]["name"], second["metadata"]["name"]]
    await eventually(both_active)
    current = await api.get(f"{CRONJOBS}/every-minute")
    assert current["status"]["lastScheduleTime"] == second["metadata"]["annotations"][
        SCHEDULED_TIMESTAMP]
    events = await api.get(resource_path("events", "default"))
    assert sorted(e["message"] for e in events["items"] if e["reason"] == "SuccessfulCreate") \
        == sorted(f"Created job {j['metadata']['name']}" for j in (first, second))


async def test_forbid_and_history_limit(
        cron: tuple[ApiClient, CronJobController, Clock]) -> None:
    api, controller, clock = cron
    await api.create(CRONJOBS, cronjob("forbid", concurrencyPolicy="Forbid",
                                       successfulJobsHistoryLimit=1))
    await tick(controller, clock)

    async def count(n: int) -> bool:
        return len(await jobs(api)) == n
    await eventually(lambda: count(1))
    await tick(controller, clock)  # the first still runs: skipped

    async def skipped() -> bool:
        events = await api.get(resource_path("events", "default"))
        return any(e["reason"] == "JobAlreadyActive" for e in events["items"])
    await eventually(skipped)
    assert len(await jobs(api)) == 1
    [first] = await jobs(api)
    await finish(api, first, "Complete")

    # the start time that was skipped runs as soon as the first Job is seen finished
    await eventually(lambda: count(2))

    async def seen_done() -> bool:
        cj = await api.get(f"{CRONJOBS}/forbid")
        return bool(cj["status"].get("lastSuccessfulTime"))
    await eventually(seen_done)
    [_, second] = await jobs(api)
    await finish(api, second, "Complete")
    # two complete Jobs, a limit of one: the older goes
    await eventually(lambda: count(1))
    assert [j["metadata"]["name"] for j in await jobs(api)] == [second["metadata"]["name"]]


async def test_suspended_runs_nothing(
        cron: tuple[ApiClient, CronJobController, Clock]) -> None:
    api, controller, clock = cron
    await api.create(CRONJOBS, cronjob("held", suspend=True))
    await tick(controller, clock, 3)
    await asyncio.sleep(0.5)
    assert await jobs(api) == []

"""Fewer API writes on a swap's way: the status manager merges what one pod worker sync
publishes into one PATCH (`StatusManager.hold` / `release`, bounded by `max_hold`), and the
kubelet's deferred events wait until no sync runs and no status waits to be written
(`KubeletEvents(quiet=...)`, bounded by `max_defer`). A recording API client stands in for
the apiserver: what is tested is which writes are sent, in which order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ephemera.kubelet import events
from ephemera.kubelet.events import KubeletEvents
from ephemera.kubelet.status import StatusManager


class RecordingApi:
    """Answers PATCHes and POSTs at once and records them in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    async def patch(self, path: str, body: Any, **_: Any) -> dict[str, Any]:
        self.sent.append(("PATCH", path, body))
        return {"metadata": {"uid": body.get("metadata", {}).get("uid")},
                "status": body.get("status")}

    async def create(self, path: str, body: Any, **_: Any) -> dict[str, Any]:
        self.sent.append(("POST", path, body))
        return {"metadata": {"name": body["metadata"]["name"]}}

    def status_patches(self) -> list[dict[str, Any]]:
        return [body["status"] for verb, path, body in self.sent
                if verb == "PATCH" and path.endswith("/status")]

    def event_reasons(self) -> list[str]:
        return [body["reason"] for verb, path, body in self.sent
                if verb == "POST" and "/events" in path]


POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "status": {}}


@contextlib.asynccontextmanager
async def running(manager: StatusManager) -> AsyncIterator[None]:
    task = asyncio.create_task(manager.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(predicate: Any, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


async def test_statuses_published_in_one_sync_are_one_write_of_the_latest() -> None:
    api = RecordingApi()
    manager = StatusManager(api, max_hold=30.0)  # type: ignore[arg-type]
    async with running(manager):
        manager.hold("u1")
        manager.set_pod_status(POD, {"phase": "Running", "volumeStatuses": [
            {"name": "new", "hostPhase": "HostMounted"},
            {"name": "old", "hostPhase": "Unmounting"}]})
        await asyncio.sleep(0.05)
        assert api.status_patches() == []  # held while the sync runs
        assert not manager.is_settled()
        manager.set_pod_status(POD, {"phase": "Running", "volumeStatuses": [
            {"name": "new", "hostPhase": "HostMounted"}]})
        manager.release("u1")
        await until(manager.is_settled)
    assert api.status_patches() == [{"phase": "Running", "volumeStatuses": [
        {"name": "new", "hostPhase": "HostMounted"}]}]


async def test_a_long_sync_gets_its_intermediate_status_written_after_max_hold() -> None:
    api = RecordingApi()
    manager = StatusManager(api, max_hold=0.05)  # type: ignore[arg-type]
    async with running(manager):
        manager.hold("u1")
        manager.set_pod_status(POD, {"volumeStatuses": [{"name": "old",
                                                         "hostPhase": "Unmounting"}]})
        await until(lambda: len(api.status_patches()) == 1)  # the stop outlasts the hold
        manager.set_pod_status(POD, {"volumeStatuses": []})
        manager.release("u1")
        await until(lambda: len(api.status_patches()) == 2)
    assert api.status_patches()[0] == {"volumeStatuses": [{"name": "old",
                                                           "hostPhase": "Unmounting"}]}


async def test_a_released_status_is_not_held_back_by_the_next_sync() -> None:
    """The worker ends a sync and begins the next before the writer runs (woken again
    meanwhile): what the ended sync released is written at once, and what the next sync
    publishes is written when that one ends, not the other way round."""
    api = RecordingApi()
    manager = StatusManager(api, max_hold=30.0)  # type: ignore[arg-type]
    async with running(manager):
        manager.hold("u1")
        manager.set_pod_status(POD, {"phase": "Running", "volumeStatuses": [
            {"name": "new", "hostPhase": "HostMounted"}]})
        manager.release("u1")
        manager.hold("u1")  # the next sync, before the writer got to run
        manager.set_pod_status(POD, {"phase": "Running", "volumeStatuses": [
            {"name": "new", "hostPhase": "HostMounted"},
            {"name": "old", "hostPhase": "Unmounting"}]})
        await until(lambda: len(api.status_patches()) == 1)
        await asyncio.sleep(0.05)
        assert len(api.status_patches()) == 1  # the next sync's status is held
        manager.set_pod_status(POD, {"phase": "Running", "volumeStatuses": []})
        manager.release("u1")
        await until(manager.is_settled)
    assert api.status_patches() == [
        {"phase": "Running", "volumeStatuses": [{"name": "new", "hostPhase": "HostMounted"}]},
        {"volumeStatuses": []}]


async def test_another_pods_status_is_not_held() -> None:
    api = RecordingApi()
    manager = StatusManager(api, max_hold=30.0)  # type: ignore[arg-type]
    other = {"metadata": {"name": "q", "namespace": "ns", "uid": "u2"}, "status": {}}
    async with running(manager):
        manager.hold("u1")
        manager.set_pod_status(other, {"phase": "Running"})
        await until(lambda: len(api.status_patches()) == 1)
        manager.release("u1")
    assert api.status_patches() == [{"phase": "Running"}]


async def test_deferred_events_wait_for_the_status_write_and_the_sync() -> None:
    api = RecordingApi()
    manager = StatusManager(api, max_hold=30.0)  # type: ignore[arg-type]
    sync_done = asyncio.Event()

    async def quiet() -> None:
        await sync_done.wait()
        await manager.settled()

    recorder = KubeletEvents(api, "node-1", quiet=quiet, max_defer=30.0)  # type: ignore[arg-type]
    async with running(manager):
        manager.hold("u1")
        started = asyncio.create_task(recorder.container(POD, "c", events.NORMAL, events.STARTED,
                                                         "Started container c", deferred=True))
        await recorder.pod(POD, events.WARNING, events.FAILED_MOUNT, "at once")
        manager.set_pod_status(POD, {"phase": "Running"})
        await asyncio.sleep(0.05)
        assert api.event_reasons() == [events.FAILED_MOUNT]  # not deferred: posted at once
        sync_done.set()
        manager.release("u1")
        await started
    writes = [(verb, (body.get("reason") or "status")) for verb, _, body in api.sent]
    assert writes == [("POST", events.FAILED_MOUNT), ("PATCH", "status"),
                      ("POST", events.STARTED)]


async def test_a_deferred_event_is_posted_after_max_defer_whatever_happens() -> None:
    api = RecordingApi()
    never = asyncio.Event()

    async def quiet() -> None:
        await never.wait()

    recorder = KubeletEvents(api, "node-1", quiet=quiet, max_defer=0.05)  # type: ignore[arg-type]
    await recorder.container(POD, "c", events.NORMAL, events.CREATED, "Created container: c",
                             deferred=True)
    assert api.event_reasons() == [events.CREATED]


@pytest.mark.parametrize("deferred", [False, True])
async def test_without_quiet_events_go_at_once(deferred: bool) -> None:
    api = RecordingApi()
    recorder = KubeletEvents(api, "node-1")  # type: ignore[arg-type]
    async with asyncio.timeout(1.0):
        await recorder.pod(POD, events.NORMAL, events.SUCCESSFUL_ALLOCATION, "m",
                           deferred=deferred)
    assert api.event_reasons() == [events.SUCCESSFUL_ALLOCATION]


async def test_a_hold_across_syncs_is_released_by_forget() -> None:
    api = RecordingApi()
    manager = StatusManager(api, max_hold=30.0)  # type: ignore[arg-type]
    async with running(manager):
        manager.hold("u1")
        manager.set_pod_status(POD, {"phase": "Pending"})
        manager.forget("u1")  # the pod is gone: nothing of it is held or written
        manager.set_pod_status(POD, {"phase": "Running"})
        await until(lambda: len(api.status_patches()) == 1)
    assert api.status_patches() == [{"phase": "Running"}]


async def test_queued_deferred_events_wait_again_when_a_sync_begins() -> None:
    """Two deferred events pass the quiet check together; while the first is posted a sync
    begins, so the second waits for the kubelet to be quiet again before it is posted."""
    api = RecordingApi()
    posting = asyncio.Event()
    release_post = asyncio.Event()
    create = api.create

    async def slow_create(path: str, body: Any, **kw: Any) -> dict[str, Any]:
        posting.set()
        await release_post.wait()
        return await create(path, body, **kw)

    api.create = slow_create  # type: ignore[method-assign]
    quiet_now = asyncio.Event()
    quiet_now.set()
    recorder = KubeletEvents(api, "node-1", quiet=quiet_now.wait,  # type: ignore[arg-type]
                             is_quiet=quiet_now.is_set, max_defer=30.0)
    first = asyncio.create_task(recorder.pod(POD, events.NORMAL, events.KILLING, "one",
                                             deferred=True))
    second = asyncio.create_task(recorder.pod(POD, events.NORMAL, events.PULLED, "two",
                                              deferred=True))
    await posting.wait()
    quiet_now.clear()  # a sync begins while the first is being posted
    release_post.set()
    await first
    await asyncio.sleep(0.05)
    assert api.event_reasons() == [events.KILLING]
    quiet_now.set()
    await second
    assert api.event_reasons() == [events.KILLING, events.PULLED]

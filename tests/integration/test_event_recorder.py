"""`EventRecorder` against the in-process apiserver: what client-go's correlator leaves of a
component's many events about one pod (repeats counted, similar ones combined, the rest past
25 dropped), as stored Events."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from apiserver_fixtures import Api

from ephemera.client import ApiClient, ClientConfig, EventRecorder, resource_path
from ephemera.client.eventcorrelator import AGGREGATED_PREFIX

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "worker", "namespace": "default", "uid": "u-worker"}}


@pytest.fixture
async def client(api: Api) -> AsyncIterator[ApiClient]:
    url = str(api.client.server.make_url("")).rstrip("/")
    async with ApiClient(ClientConfig(server=url), user_agent="events-test") as c:
        yield c


async def test_thirty_mount_events_about_one_pod(client: ApiClient) -> None:
    recorder = EventRecorder(client, "kubelet", host="n1")
    for i in range(30):
        await recorder.record(POD, "Normal", "SuccessfulMountVolume",
                              f'MountVolume.SetUp succeeded for volume "v{i}"')
    listed = await client.list(resource_path("events", "default"),
                               field_selector="involvedObject.name=worker")
    stored = sorted((e["message"], e["count"]) for e in listed["items"])
    # 1-9 as they are; the 10th combined; 11-25 count the combined one up (25 tokens
    # spent); 26-30 dropped
    assert stored == sorted(
        [(f'MountVolume.SetUp succeeded for volume "v{i}"', 1) for i in range(9)]
        + [(AGGREGATED_PREFIX + 'MountVolume.SetUp succeeded for volume "v24"', 16)])


async def test_a_repeat_whose_event_is_gone_is_created_again(client: ApiClient) -> None:
    recorder = EventRecorder(client, "kubelet", host="n1")
    await recorder.record(POD, "Warning", "BackOff", "Back-off restarting failed container")
    events = resource_path("events", "default")
    (first,) = (await client.list(events))["items"]
    await client.delete(resource_path("events", "default", first["metadata"]["name"]))
    await recorder.record(POD, "Warning", "BackOff", "Back-off restarting failed container")
    (again,) = (await client.list(events))["items"]
    assert (again["metadata"]["name"], again["count"]) == (first["metadata"]["name"], 2)

"""`kill -9` of the apiserver in the middle of a stream of writes loses no acknowledged write,
on both store backends (sqlite in the data dir, and a real etcd).

Writers create pods and patch them as fast as the server answers, over HTTPS with the admin
client certificate, and record every write answered 2xx with the resourceVersion it returned.
The test kills the apiserver (the child of `ephemera up`, whose pid is in
`DIR/run/apiserver.pid`) with SIGKILL while writes are in flight; `up` restarts it on the same
port; the writers carry on once it answers again. Then every acknowledged write must be there:
the pod exists, with at least the acknowledged resourceVersion and at least the acknowledged
label value (writes whose answer was lost may or may not have landed, and are not judged).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import Cluster, start_cluster

pytestmark = pytest.mark.e2e

WRITERS = 8
ACKS_BEFORE_KILL = 200
ACKS_AFTER_RESTART = 100
DEADLINE = 90.0


@dataclass
class Ack:
    resource_version: int
    seq: int


@dataclass
class WriteLog:
    acked: dict[str, Ack] = field(default_factory=dict)  # pod name -> its last acknowledged
    ack_count: int = 0
    failures: int = 0  # writes without a 2xx answer (outcome unknown)
    after_kill: int = 0  # acknowledgements after the kill
    killed: bool = False
    last_error: str = ""

    def ack(self, name: str, obj: dict[str, Any]) -> None:
        metadata = obj["metadata"]
        self.acked[name] = Ack(int(metadata["resourceVersion"]),
                               int(metadata["labels"]["seq"]))
        self.ack_count += 1
        if self.killed:
            self.after_kill += 1


def http_client(cluster: Cluster) -> httpx.AsyncClient:
    pki = cluster.data_dir / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return httpx.AsyncClient(base_url=cluster.server, verify=context,
                             timeout=httpx.Timeout(10.0),
                             limits=httpx.Limits(max_connections=WRITERS * 2))


def pod(name: str, seq: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"seq": str(seq)}},
            "spec": {"schedulerName": "manual",  # no scheduler acts on it
                     "containers": [{"name": "c", "image": "busybox:1.36",
                                     "dynamicVolumePolicy": {
                                         "restartPolicy": "RestartContainer"}}]}}


async def writer(number: int, http: httpx.AsyncClient, namespace: str, log: WriteLog,
                 stop: asyncio.Event) -> None:
    """Create a pod, then patch one of this writer's pods, and so on, until `stop`."""
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    mine: list[str] = []
    seq = 0
    rng = random.Random(number)
    while not stop.is_set():
        seq += 1
        if seq % 2 == 1 or not mine:
            name = f"w{number}-{seq}"
            request = http.post(pods_path, json=pod(name, seq))
            created = True
        else:
            name = rng.choice(mine)
            request = http.patch(f"{pods_path}/{name}",
                                 json={"metadata": {"labels": {"seq": str(seq)}}},
                                 headers={"Content-Type": "application/merge-patch+json"})
            created = False
        try:
            response = await request
        except httpx.TransportError as err:
            log.failures += 1
            log.last_error = repr(err)
            await asyncio.sleep(0.02)  # the apiserver is down; up restarts it
            continue
        if response.status_code // 100 != 2:
            log.failures += 1
            log.last_error = f"{response.status_code}: {response.text}"
            await asyncio.sleep(0.02)
            continue
        log.ack(name, response.json())
        if created:
            mine.append(name)


async def kill_apiserver_mid_stream(cluster: Cluster, log: WriteLog) -> int:
    while log.ack_count < ACKS_BEFORE_KILL:
        if log.failures > 100:
            pytest.fail(f"writes fail before the kill: {log.last_error}")
        await asyncio.sleep(0.005)
    pid = cluster.pid_of("apiserver")
    os.kill(pid, signal.SIGKILL)
    log.killed = True
    return pid


async def run_writes_with_a_kill(cluster: Cluster, namespace: str) -> tuple[WriteLog, int]:
    log = WriteLog()
    stop = asyncio.Event()
    async with http_client(cluster) as http:
        created = await http.post("/api/v1/namespaces",
                                  json={"metadata": {"name": namespace}})
        assert created.status_code == 201, created.text
        writers = [asyncio.create_task(writer(n, http, namespace, log, stop))
                   for n in range(WRITERS)]
        try:
            killed_pid = await kill_apiserver_mid_stream(cluster, log)
            while log.after_kill < ACKS_AFTER_RESTART:
                await asyncio.sleep(0.01)
        finally:
            stop.set()
            await asyncio.gather(*writers)
    return log, killed_pid


async def stored_pods(cluster: Cluster, namespace: str) -> tuple[dict[str, dict[str, Any]], int]:
    async with http_client(cluster) as http:
        response = await http.get(f"/api/v1/namespaces/{namespace}/pods")
    assert response.status_code == 200, response.text
    listed = response.json()
    by_name = {item["metadata"]["name"]: item for item in listed["items"]}
    return by_name, int(listed["metadata"]["resourceVersion"])


def check_every_acknowledged_write(log: WriteLog, stored: dict[str, dict[str, Any]],
                                   list_version: int) -> None:
    missing = sorted(set(log.acked) - set(stored))
    assert not missing, f"{len(missing)} acknowledged pods lost, e.g. {missing[:5]}"
    for name, ack in log.acked.items():
        metadata = stored[name]["metadata"]
        version, seq = int(metadata["resourceVersion"]), int(metadata["labels"]["seq"])
        assert version >= ack.resource_version, (name, version, ack)
        assert seq >= ack.seq, (name, seq, ack)
        if version == ack.resource_version:
            assert seq == ack.seq, (name, seq, ack)
        # The KEP field survived too.
        assert stored[name]["spec"]["containers"][0]["dynamicVolumePolicy"] == {
            "restartPolicy": "RestartContainer"}
    assert list_version >= max(ack.resource_version for ack in log.acked.values())


@pytest.mark.parametrize("store", ["sqlite", pytest.param("etcd", marks=pytest.mark.etcd)])
async def test_kill_9_loses_no_acknowledged_write(store: str, tmp_path: Path,
                                                  request: pytest.FixtureRequest) -> None:
    store_args: list[str] = ["--store", store]
    if store == "etcd":
        store_args += ["--etcd-endpoints", request.getfixturevalue("etcd_endpoint")]
    # The etcd server is shared by the tests of this worker: a namespace of our own.
    namespace = f"crash-{store}-{os.getpid()}-{tmp_path.name[-8:].strip('_').lower()}"
    with start_cluster(tmp_path / "data", tmp_path / "home", store_args) as cluster:
        log, killed_pid = await asyncio.wait_for(run_writes_with_a_kill(cluster, namespace),
                                                 DEADLINE)
        stored, list_version = await stored_pods(cluster, namespace)
        assert cluster.pid_of("apiserver") != killed_pid
        assert f"apiserver (pid {killed_pid}) exited: killed by SIGKILL" in cluster.output
        assert cluster.stop() == 0

    assert log.ack_count >= ACKS_BEFORE_KILL + ACKS_AFTER_RESTART
    assert log.failures > 0  # the kill did interrupt writes in flight
    check_every_acknowledged_write(log, stored, list_version)

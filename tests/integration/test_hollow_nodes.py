"""Hollow nodes (`ephemera.kubelet.hollow`) against the in-process apiserver with the real
scheduler: 20 nodes register Ready with Leases, 100 pods spread over them and run, a
`/dynamic` volume addition reaches HostMounted in the pod's volumeStatuses (the volume
manager's Pending comes first, but the status write may merge it away) and restarts the
container, a `restartPolicy: Never` pod whose container exits 0 ends Succeeded, a pod too big
for a node (pod-level ephemeral-storage) is rejected by the kubelet's admission, and a
graceful delete ends with the pod object gone. One apiserver and one hollow-nodes process
for the whole scenario, to stay quick."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ClientConfig, resource_path
from ephemera.kubelet.hollow import (
    STATE_FILE,
    HollowConfig,
    HollowNodes,
    parse_capacity,
    parse_labels,
    parse_taints,
)
from ephemera.kubelet.workerdeps import WorkerSettings
from ephemera.scheduler import Scheduler

Obj = dict[str, Any]
NODES = 20
PODS = 100


def _pod(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "10m"}}}], **spec}}


@contextlib.asynccontextmanager
async def _cluster(api: Api, tmp_path: Path, *, lease_thread: bool = False,
                   lease_renew_interval: float = 2.0, wait_for_pod_cidr: bool = False
                   ) -> AsyncIterator[tuple[ApiClient, HollowNodes]]:
    url = str(api.client.server.make_url("")).rstrip("/")

    def lease_api() -> ApiClient:
        return ApiClient(ClientConfig(server=url), user_agent="hollow-test-leases")

    async with ApiClient(ClientConfig(server=url), user_agent="hollow-test") as client:
        config = HollowConfig(
            count=NODES, root_dir=tmp_path / "hollow",
            capacity=parse_capacity("cpu=2,memory=4Gi,pods=30,ephemeral-storage=10Gi"),
            labels=parse_labels("ephemera.io/hollow=true"),
            lease_renew_interval=lease_renew_interval,
            node_status_interval=5.0, relist_period=0.5, reconcile_period=0.5,
            wait_for_pod_cidr=wait_for_pod_cidr, pod_cidr_poll=0.2,
            settings=WorkerSettings(resync_period=1.0, relist_period=0.2, retry_delay=0.2,
                                    minimum_grace_period=0.0, mount_wait_slice=0.2))
        nodes = HollowNodes(client, config, lease_api=lease_api if lease_thread else None)
        stop = asyncio.Event()
        ready = asyncio.Event()
        scheduler = Scheduler(client, None)
        tasks = [asyncio.create_task(nodes.run(stop, ready=ready.set)),
                 asyncio.create_task(scheduler.run())]
        try:
            await asyncio.wait_for(ready.wait(), 30)
            yield client, nodes
        finally:
            stop.set()
            tasks[1].cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _get(client: ApiClient, name: str) -> Obj | None:
    try:
        return await client.get(resource_path("pods", "default", name))
    except StatusError as err:
        if err.code == 404:
            return None
        raise


async def eventually(check: Any, timeout: float) -> None:
    """Wait until `check()` is truthy, polling every 0.25 s (a list of 100 pods is not
    free on a loaded machine)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.25)


def _volume_phase(pod: Obj, name: str) -> str | None:
    for entry in (pod.get("status") or {}).get("volumeStatuses") or []:
        if entry.get("name") == name:
            return str(entry.get("hostPhase"))
    return None


async def test_leases_renewed_on_their_own_thread(api: Api, tmp_path: Path) -> None:
    """With `lease_api`, every node's Lease is renewed (a PUT of the Lease it last wrote) on
    the lease thread, whose loop ends with the nodes."""
    leases_path = resource_path("leases", "kube-node-lease", group="coordination.k8s.io")
    async with _cluster(api, tmp_path, lease_thread=True, lease_renew_interval=0.5) as (
            client, nodes):
        first = {lease["metadata"]["name"]: lease["spec"]["renewTime"]
                 for lease in (await client.get(leases_path))["items"]}
        assert set(first) == set(nodes.nodes)

        async def all_renewed() -> bool:
            leases = (await client.get(leases_path))["items"]
            return all(lease["spec"]["renewTime"] != first[lease["metadata"]["name"]]
                       for lease in leases)

        await eventually(all_renewed, timeout=30)
        assert nodes.lease_renewals >= NODES
        assert nodes._lease_thread is not None and nodes._lease_thread._thread.is_alive()
        clients = {node.node_agent.lease_api for node in nodes.nodes.values()}
        assert len(clients) == 1 and None not in clients  # one client, the thread's
    assert not nodes._lease_thread._thread.is_alive()


async def test_hollow_nodes_run_pods_dynamic_changes_and_deletions(api: Api,
                                                                   tmp_path: Path) -> None:
    async with _cluster(api, tmp_path) as (client, nodes):
        listed = (await client.get(resource_path("nodes")))["items"]
        assert len(listed) == NODES
        for node in listed:
            assert node["metadata"]["labels"]["ephemera.io/hollow"] == "true"
            assert node["status"]["capacity"]["pods"] == "30"
            ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
            assert ready[0]["status"] == "True"
        leases = (await client.get(resource_path("leases", "kube-node-lease",
                                                 group="coordination.k8s.io")))["items"]
        assert {lease["metadata"]["name"] for lease in leases} == set(nodes.nodes)

        for i in range(PODS):
            await client.create(resource_path("pods", "default"), _pod(f"p{i}"))

        async def all_running() -> bool:
            pods = (await client.get(resource_path("pods", "default")))["items"]
            return sum(p["status"].get("phase") == "Running" for p in pods) == PODS

        await eventually(all_running, timeout=60)
        pods = (await client.get(resource_path("pods", "default")))["items"]
        per_node = Counter(p["spec"]["nodeName"] for p in pods)
        assert set(per_node) <= set(nodes.nodes) and len(per_node) > NODES // 2
        assert all(p["status"]["containerStatuses"][0]["ready"] for p in pods)
        assert [p["status"]["containerStatuses"][0]["restartCount"] for p in pods] == \
            [0] * PODS

        # A /dynamic volume change: HostMounted once set up, the container restarted.
        worker = _pod("worker", volumes=[{"name": "keep", "emptyDir": {}}])
        main = worker["spec"]["containers"][0]
        main["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}
        main["volumeMounts"] = [{"name": "keep", "mountPath": "/keep"}]
        await client.create(resource_path("pods", "default"), worker)
        await eventually(lambda: _phase_is(client, "worker", "keep", "HostMounted"), 30)
        dynamic = resource_path("pods", "default", "worker") + "/dynamic"
        current = await client.get(dynamic)
        current["spec"]["volumes"].append({"name": "extra", "emptyDir": {}})
        current["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "extra", "mountPath": "/extra"})
        await client.update(dynamic, current)
        await eventually(lambda: _phase_is(client, "worker", "extra", "HostMounted"), 30)
        after = await _get(client, "worker")
        assert after is not None
        status = after["status"]["containerStatuses"][0]
        assert status["restartCount"] == 1 and "running" in status["state"]

        # A container that ends: restartPolicy decides (Never: the pod Succeeded).
        done = _pod("done", restartPolicy="Never")
        done["spec"]["containers"][0]["command"] = ["exit", "0"]
        await client.create(resource_path("pods", "default"), done)

        async def succeeded() -> bool:
            got = await _get(client, "done")
            return got is not None and got["status"].get("phase") == "Succeeded"

        await eventually(succeeded, timeout=30)

        # The kubelet's admission: pod-level ephemeral-storage beyond the node's capacity.
        big = _pod("big", nodeName=next(iter(nodes.nodes)),
                   resources={"requests": {"cpu": "10m", "ephemeral-storage": "20Gi"}})
        await client.create(resource_path("pods", "default"), big)

        async def rejected() -> bool:
            got = await _get(client, "big")
            return got is not None and got["status"].get("reason") == "OutOfephemeral-storage"

        await eventually(rejected, timeout=30)
        got = await _get(client, "big")
        assert got is not None and got["status"]["phase"] == "Failed"

        # A graceful delete: the hollow kubelet stops the containers, then deletes the pod.
        await client.delete(resource_path("pods", "default", "p0"))
        await eventually(lambda: _gone(client, "p0"), timeout=30)
        assert nodes.summary()["registered"] == NODES


async def test_a_cleanly_stopped_process_is_followed_by_one_that_adopts_its_containers(
        api: Api, tmp_path: Path) -> None:
    """A hollow-nodes process stopped cleanly leaves its nodes' runtimes and allocated pods
    behind (`STATE_FILE`); the next one on the same root adopts them: no container is
    started again, and a `/dynamic` change after the restart is actuated as before it. A pod
    deleted while the process was down has its adopted sandbox and allocation removed."""
    worker = _pod("worker", volumes=[{"name": "keep", "emptyDir": {}}])
    main = worker["spec"]["containers"][0]
    main["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}
    main["volumeMounts"] = [{"name": "keep", "mountPath": "/keep"}]

    async def listed(client: ApiClient) -> dict[str, Obj]:
        pods = (await client.get(resource_path("pods", "default")))["items"]
        return {p["metadata"]["name"]: p for p in pods}

    def started(pods: dict[str, Obj]) -> dict[str, tuple[str, int]]:
        return {name: (p["status"]["containerStatuses"][0]["containerID"],
                       p["status"]["containerStatuses"][0]["restartCount"])
                for name, p in pods.items()}

    async with _cluster(api, tmp_path) as (client, _):
        for i in range(10):
            await client.create(resource_path("pods", "default"), _pod(f"p{i}"))
        await client.create(resource_path("pods", "default"), worker)

        async def all_running() -> bool:
            pods = await listed(client)
            return len(pods) == 11 and all(
                "running" in (p["status"].get("containerStatuses") or [{}])[0].get("state", {})
                for p in pods.values())

        await eventually(all_running, timeout=60)
        before = started(await listed(client))
        gone = await client.get(resource_path("pods", "default", "p0"))
    state = tmp_path / "hollow" / STATE_FILE
    assert state.is_file()
    url = str(api.client.server.make_url("")).rstrip("/")
    async with ApiClient(ClientConfig(server=url)) as client:
        await client.delete(resource_path("pods", "default", "p0"), gracePeriodSeconds=0)
    del before["p0"]
    gone_uid, gone_node = gone["metadata"]["uid"], gone["spec"]["nodeName"]

    async with _cluster(api, tmp_path) as (client, nodes):
        assert not state.exists()  # taken back: it holds only until the nodes run again
        node = nodes.nodes[gone_node]

        async def orphan_removed() -> bool:
            return (all(s.pod_uid != gone_uid for s in node.runtime.sandboxes.values())
                    and gone_uid not in node.allocation.allocated)

        await eventually(orphan_removed, timeout=30)
        assert sum(n.pod_count() for n in nodes.nodes.values()) == 10
        await asyncio.sleep(3.0)  # relists, resyncs and reconciles of every adopted pod
        assert started(await listed(client)) == before
        dynamic = resource_path("pods", "default", "worker") + "/dynamic"
        current = await client.get(dynamic)
        current["spec"]["volumes"].append({"name": "extra", "emptyDir": {}})
        current["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "extra", "mountPath": "/extra"})
        await client.update(dynamic, current)
        await eventually(lambda: _phase_is(client, "worker", "extra", "HostMounted"), 30)
        after = started(await listed(client))
        assert after["worker"][1] == before["worker"][1] + 1
        assert {k: v for k, v in after.items() if k != "worker"} == \
            {k: v for k, v in before.items() if k != "worker"}


async def test_with_wait_for_pod_cidr_pods_start_once_their_node_has_one(
        api: Api, tmp_path: Path) -> None:
    """`--wait-for-pod-cidr` (what `up` passes): the pods bound to a node without a podCIDR
    wait; once the node IPAM gives it one, they start, each with an IP from it."""
    async with _cluster(api, tmp_path, wait_for_pod_cidr=True) as (client, nodes):
        for i in range(6):
            await client.create(resource_path("pods", "default"), _pod(f"p{i}"))

        async def pods() -> list[Obj]:
            return list((await client.get(resource_path("pods", "default")))["items"])

        async def all_bound() -> bool:
            return all(p["spec"].get("nodeName") for p in await pods())

        await eventually(all_bound, timeout=30)
        await asyncio.sleep(1.0)
        assert not any(p["status"].get("containerStatuses") for p in await pods())
        cidrs = {name: f"10.99.{i}.0/24" for i, name in enumerate(nodes.nodes)}
        for name, cidr in cidrs.items():  # as the controller-manager's node IPAM does
            await client.patch(resource_path("nodes", name=name),
                               {"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}},
                               patch_type="merge")

        async def all_running() -> bool:
            return all(p["status"].get("phase") == "Running" for p in await pods())

        await eventually(all_running, timeout=30)
        for p in await pods():
            cidr = ipaddress.ip_network(cidrs[p["spec"]["nodeName"]])
            assert ipaddress.ip_address(p["status"]["podIP"]) in cidr, p["status"]


async def _phase_is(client: ApiClient, pod: str, volume: str, phase: str) -> bool:
    got = await _get(client, pod)
    return got is not None and _volume_phase(got, volume) == phase


async def _gone(client: ApiClient, name: str) -> bool:
    return await _get(client, name) is None


def test_flags_parse_as_the_kubelet_spells_them() -> None:
    assert parse_capacity("cpu=8,pods=50")["cpu"] == "8"
    assert parse_capacity("cpu=8,pods=50")["memory"] == "16Gi"
    assert parse_taints("a=b:NoSchedule,c:NoExecute") == [
        {"key": "a", "value": "b", "effect": "NoSchedule"}, {"key": "c", "effect": "NoExecute"}]
    with pytest.raises(ValueError, match="failed to parse quantity"):
        parse_capacity("cpu=lots")
    with pytest.raises(ValueError, match="invalid taint"):
        parse_taints("a=b:Sometimes")
    with pytest.raises(ValueError, match="expect key=value"):
        parse_labels("novalue")

"""The kubelet agent end to end on the fake runtime, against an in-process apiserver: node
registration and lease, pod sync (init containers, restart policies and CrashLoopBackOff,
image pull policies, env, volumes), status written back, deletion, admission, adoption after
a restart, and the kubelet's HTTP API (logs, /pods, /metrics) also through `pods/log`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubelet_harness import NODE, Harness, pod, running_kubelet, wait_until

from ephemera.api.errors import StatusError
from ephemera.client import resource_path


def phase(p: dict[str, Any]) -> str:
    return str((p.get("status") or {}).get("phase"))


def cstatus(p: dict[str, Any], name: str = "c", key: str = "containerStatuses"
            ) -> dict[str, Any]:
    for s in (p.get("status") or {}).get(key) or []:
        if s["name"] == name:
            return dict(s)
    return {}


def condition(p: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in (p.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def waiting_reason(p: dict[str, Any], name: str = "c") -> str:
    return str(((cstatus(p, name).get("state") or {}).get("waiting") or {}).get("reason"))


async def kubelet_get(h: Harness, path: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{h.kubelet.bound_port}{path}"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.text()


async def test_registers_the_node_and_renews_its_lease(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        node = await h.api.get(resource_path("nodes", name=NODE))
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == NODE
        assert labels["kubernetes.io/os"] == "linux"
        assert labels["kubernetes.io/arch"]
        status = node["status"]
        assert {"cpu", "memory", "ephemeral-storage", "pods"} <= set(status["capacity"])
        assert status["capacity"]["pods"] == "110"
        assert [c["type"] for c in status["conditions"]] == [
            "MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        ready = status["conditions"][-1]
        assert (ready["status"], ready["reason"], ready["message"]) == (
            "True", "KubeletReady", "kubelet is posting ready status")
        assert status["declaredFeatures"] == ["DynamicContainers",
                                              "DynamicNodeLocalEphemeralVolumes",
                                              "DynamicVolumeHotPlug",
                                              "PodLevelResourcesEphemeralStorage"]
        assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == h.kubelet.bound_port
        assert status["nodeInfo"]["containerRuntimeVersion"].startswith("fake://")
        lease_path = resource_path("leases", "kube-node-lease", NODE,
                                   group="coordination.k8s.io")
        lease = await h.api.get(lease_path)
        assert lease["spec"]["holderIdentity"] == NODE
        assert lease["spec"]["leaseDurationSeconds"] == 40
        assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        first = lease["spec"]["renewTime"]

        async def renewed() -> bool:
            return bool((await h.api.get(lease_path))["spec"]["renewTime"] != first)

        await wait_until(renewed)


async def test_a_pod_runs_and_its_status_is_written_back(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await h.create(pod("p1", restartPolicy="Always"))
        p = await h.wait_pod("p1", lambda p: phase(p) == "Running")
        s = cstatus(p)
        assert s["ready"] is True and s["started"] is True and s["restartCount"] == 0
        assert s["containerID"].startswith("fake://")
        assert s["imageID"].startswith("sha256:")
        assert "running" in s["state"]
        assert [c["type"] for c in p["status"]["conditions"]] == [
            "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
            "PodScheduled"]
        assert all(c["status"] == "True" for c in p["status"]["conditions"])
        assert p["status"]["hostIP"] == "127.0.0.1"
        assert p["status"]["hostIPs"] == [{"ip": "127.0.0.1"}]
        assert p["status"]["startTime"]
        # Events are posted in the background: wait for the last one, then read them all.
        started = await h.wait_event("p1", lambda e: e["reason"] == "Started")
        reasons = {(e["reason"], e["message"]) for e in await h.events("p1")}
        assert ("Created", "Created container: c") in reasons
        assert ("Started", "Started container c") in reasons
        assert started["involvedObject"]["fieldPath"] == "spec.containers{c}"
        assert started["source"] == {"component": "kubelet", "host": NODE}

        # nothing changes: nothing is written again
        writes = h.kubelet.status.writes
        await asyncio.sleep(1.0)
        assert h.kubelet.status.writes == writes

        code, body = await kubelet_get(h, "/pods")
        assert code == 200 and '"name":"p1"' in body
        code, body = await kubelet_get(h, "/metrics")
        assert code == 200
        assert "kubelet_running_pods 1.0" in body
        assert 'kubelet_started_containers_total{container_type="container"} 1.0' in body
        code, body = await kubelet_get(h, "/healthz")
        assert (code, body) == (200, "ok")


async def test_a_periodic_resync_rebuilds_the_status_only_if_the_runtime_drifted(
        tmp_path: Path) -> None:
    """A resync the timer began, that does nothing and lists what the last status was
    built from, publishes nothing; one that lists a change no event reported (the relister
    compares container states only) publishes the status with it."""
    async with running_kubelet(tmp_path) as h:  # resync every 0.5-0.75 s
        p = await h.create(pod("p1", restartPolicy="Always"))
        uid = p["metadata"]["uid"]
        await h.wait_pod("p1", lambda p: phase(p) == "Running")
        await asyncio.sleep(1.0)  # the Running status's own watch event taken in
        assert h.kubelet.workers is not None
        worker = h.kubelet.workers._workers[uid]
        published: list[dict[str, Any]] = []
        syncs: list[bool] = []
        set_pod_status, sync = h.kubelet.status.set_pod_status, worker.sync

        def counting_set(pod: Mapping[str, Any], status: dict[str, Any]) -> None:
            if pod["metadata"]["uid"] == uid:
                published.append(status)
            set_pod_status(pod, status)

        async def counting_sync() -> float:
            syncs.append(worker.periodic)
            return await sync()

        h.kubelet.status.set_pod_status = counting_set
        worker.sync = counting_sync
        await asyncio.sleep(2.0)
        assert len(syncs) >= 2 and all(syncs)  # periodic resyncs ran...
        assert published == []  # ...and built no status

        # the runtime now reports another image for the container, and no event says so
        container = next(c for c in h.runtime.containers.values() if c.name == "c")
        container.image_id = "sha256:" + "f" * 64
        h.runtime._save()
        await h.wait_pod("p1", lambda p: cstatus(p)["imageID"] == container.image_id)
        assert published and published[-1]["containerStatuses"][0]["imageID"] == \
            container.image_id


async def test_crash_loop_back_off_and_restart_count(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await h.create(pod("crash", argv=["exit", "3"]))
        p = await h.wait_pod("crash", lambda p: waiting_reason(p) == "CrashLoopBackOff")
        s = cstatus(p)
        assert s["restartCount"] >= 1
        uid = p["metadata"]["uid"]
        message = s["state"]["waiting"]["message"]
        assert message.startswith("back-off ")
        assert message.endswith(f" restarting failed container=c pod=crash_default({uid})")
        assert s["lastState"]["terminated"]["exitCode"] == 3
        assert s["lastState"]["terminated"]["reason"] == "Error"
        assert phase(p) == "Running"  # restarting, as upstream's getPhase says
        assert condition(p, "Ready")["message"] == "containers with unready status: [c]"
        await h.wait_event("crash", lambda e: e["reason"] == "BackOff" and e["message"] ==
                           f"Back-off restarting failed container c in pod crash_default({uid})")
        await h.wait_pod("crash", lambda p: cstatus(p).get("restartCount", 0) >= 3)


async def test_old_instances_are_removed_once_the_kubelet_is_quiet(tmp_path: Path) -> None:
    """Restarts keep the latest two instances; an older one is removed in the background
    only once no pod worker syncs and no status waits to be written (the new instance's
    status went first), not while the start's sync runs."""
    async with running_kubelet(tmp_path) as h:
        removals: list[tuple[str, bool]] = []
        remove = h.runtime.remove_container

        async def recording_remove(container_id: str) -> None:
            removals.append((container_id, h.kubelet._is_quiet()))
            await remove(container_id)

        h.runtime.remove_container = recording_remove  # type: ignore[method-assign]
        await h.create(pod("crash", argv=["exit", "3"]))
        await h.wait_pod("crash", lambda p: cstatus(p).get("restartCount", 0) >= 3)
        await wait_until(lambda: len(removals) >= 2)
        assert all(quiet for _, quiet in removals), removals
        listed = [c for c in await h.runtime.list_containers() if c.name == "c"]
        assert len(listed) <= 3  # the two kept, and perhaps one about to go


@pytest.mark.parametrize(("policy", "code", "expected"), [
    ("Never", "0", "Succeeded"), ("Never", "2", "Failed"), ("OnFailure", "0", "Succeeded")])
async def test_restart_policies_end_the_pod(tmp_path: Path, policy: str, code: str,
                                            expected: str) -> None:
    async with running_kubelet(tmp_path) as h:
        await h.create(pod("once", argv=["exit", code], restartPolicy=policy))
        p = await h.wait_pod("once", lambda p: phase(p) == expected)
        s = cstatus(p)
        assert s["restartCount"] == 0
        assert s["state"]["terminated"]["exitCode"] == int(code)
        assert condition(p, "Ready")["reason"] == ("PodCompleted" if expected == "Succeeded"
                                                   else "PodFailed")


async def test_on_failure_restarts_a_failed_container(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await h.create(pod("retry", argv=["exit", "1"], restartPolicy="OnFailure"))
        p = await h.wait_pod("retry", lambda p: cstatus(p).get("restartCount", 0) >= 2)
        assert phase(p) == "Running"


async def test_init_containers_run_in_order_before_the_main_ones(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        body = pod("init", initContainers=[
            {"name": "i1", "image": "busybox", "command": ["exit", "0"]},
            {"name": "i2", "image": "busybox", "command": ["exit", "0"]}])
        await h.create(body)
        p = await h.wait_pod("init", lambda p: phase(p) == "Running")
        i1 = cstatus(p, "i1", "initContainerStatuses")
        i2 = cstatus(p, "i2", "initContainerStatuses")
        assert i1["state"]["terminated"]["exitCode"] == 0
        assert i2["state"]["terminated"]["exitCode"] == 0
        order = [call[2] for call in h.runtime.calls if call[0] == "create_container"]
        assert order[:3] == ["i1", "i2", "c"]
        assert condition(p, "Initialized")["status"] == "True"


async def test_a_failed_init_container_fails_a_never_pod(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await h.create(pod("badinit", restartPolicy="Never", initContainers=[
            {"name": "i1", "image": "busybox", "command": ["exit", "1"]}]))
        p = await h.wait_pod("badinit", lambda p: phase(p) == "Failed")
        init = condition(p, "Initialized")
        assert (init["status"], init["reason"], init["message"]) == (
            "False", "ContainersNotInitialized", "containers with incomplete status: [i1]")
        assert waiting_reason(p) == "PodInitializing"
        assert not any(c[0] == "create_container" and c[2] == "c" for c in h.runtime.calls)


async def test_image_pull_policies_against_the_local_store(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        never = pod("never", image="nope:1")
        never["spec"]["containers"][0]["imagePullPolicy"] = "Never"
        await h.create(never)
        await h.create(pod("pull", image="nope:2"))
        p = await h.wait_pod("never", lambda p: waiting_reason(p) == "ErrImageNeverPull")
        assert cstatus(p)["state"]["waiting"]["message"] == (
            'Container image "nope:1" is not present with pull policy of Never')
        await h.wait_event("never", lambda e: e["reason"] == "ErrImageNeverPull")
        await h.wait_pod("pull", lambda p: waiting_reason(p) == "ErrImagePull")
        p = await h.wait_pod("pull", lambda p: waiting_reason(p) == "ImagePullBackOff")
        assert cstatus(p)["state"]["waiting"]["message"] == 'Back-off pulling image "nope:2"'
        await h.wait_event("pull", lambda e: e["message"].startswith(
            'Failed to pull image "nope:2": '))
        await h.wait_event("pull", lambda e: (e["reason"], e["message"]) == (
            "BackOff", 'Back-off pulling image "nope:2"'))
        assert phase(p) == "Pending"
        status, body = 0, ""
        url = "/api/v1/namespaces/default/pods/pull/log"
        try:
            await h.api.request("GET", url)
        except StatusError as err:
            status, body = err.code, err.message
        assert status == 400
        assert body == ('container "c" in pod "pull" is waiting to start: trying and failing '
                        'to pull image')


async def test_env_from_configmaps_secrets_and_the_downward_api(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        container = {"name": "c", "image": "busybox", "command": ["run", "$(GREETING)-x"],
                     "env": [
                         {"name": "GREETING", "valueFrom": {"configMapKeyRef": {
                             "name": "cm", "key": "greeting"}}},
                         {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {
                             "name": "s", "key": "password"}}},
                         {"name": "POD", "valueFrom": {"fieldRef": {
                             "fieldPath": "metadata.name"}}},
                         {"name": "NODE", "valueFrom": {"fieldRef": {
                             "fieldPath": "spec.nodeName"}}},
                         {"name": "BOTH", "value": "$(GREETING)/$(POD)"}],
                     "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}]}
        body = pod("env")
        body["spec"]["containers"] = [container]
        await h.create(body)
        p = await h.wait_pod("env", lambda p: waiting_reason(p) == "CreateContainerConfigError")
        assert cstatus(p)["state"]["waiting"]["message"] == 'configmap "cm" not found'
        await h.wait_event("env", lambda e: (e["reason"], e["message"]) == (
            "Failed", 'Error: configmap "cm" not found'))
        await h.api.create(resource_path("configmaps", "default"), {
            "metadata": {"name": "cm"}, "data": {"greeting": "hi"}})
        p = await h.wait_pod("env", lambda p: waiting_reason(p) == "CreateContainerConfigError"
                             and "Secret" not in cstatus(p)["state"]["waiting"]["message"]
                             and 'secret "s" not found' in
                             cstatus(p)["state"]["waiting"]["message"])
        await h.api.create(resource_path("secrets", "default"), {
            "metadata": {"name": "s"}, "stringData": {"password": "pw"}})
        await h.wait_pod("env", lambda p: phase(p) == "Running")
        created = [c for c in h.runtime.containers.values() if c.name == "c"][-1]
        env = dict(tuple(kv) for kv in created.env)
        assert env["GREETING"] == "hi" and env["PASSWORD"] == "pw"
        assert env["POD"] == "env" and env["NODE"] == NODE
        assert env["BOTH"] == "hi/env" and env["CM_greeting"] == "hi"
        assert env["PATH"].startswith("/")  # from the image
        assert created.argv == ["run", "hi-x"]


async def test_volumes_mounts_subpath_and_a_failed_mount(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        body = pod("vols", volumes=[{"name": "scratch", "emptyDir": {}},
                                    {"name": "cm", "configMap": {"name": "missing"}}])
        body["spec"]["containers"][0]["volumeMounts"] = [
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "scratch", "mountPath": "/deep", "subPath": "a/b"},
            {"name": "cm", "mountPath": "/cm"}]
        created = await h.create(body)
        uid = created["metadata"]["uid"]
        event = await h.wait_event("vols", lambda e: e["reason"] == "FailedMount")
        assert event["message"] == ('MountVolume.SetUp failed for volume "cm" : configmap '
                                    '"missing" not found')
        event = await h.wait_event("vols", lambda e: e["message"].startswith(
            "Unable to attach or mount volumes: "))
        assert event["message"] == ("Unable to attach or mount volumes: unmounted volumes=[cm], "
                                    "unattached volumes=[], failed to process volumes=[]: "
                                    "context deadline exceeded")
        p = await h.get("vols")
        assert p is not None and waiting_reason(p) == "ContainerCreating"
        assert phase(p) == "Pending"
        await h.api.create(resource_path("configmaps", "default"), {
            "metadata": {"name": "missing"}, "data": {"k": "v"}})
        p = await h.wait_pod("vols", lambda p: phase(p) == "Running")
        assert cstatus(p)["volumeMounts"] == [
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "scratch", "mountPath": "/deep"},
            {"name": "cm", "mountPath": "/cm"}]
        volume_dir = h.root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "scratch"
        assert (volume_dir / "a" / "b").is_dir()
        runtime_mounts = [c for c in h.runtime.containers.values() if c.name == "c"][-1].mounts
        assert {m["container_path"]: m["host_path"] for m in runtime_mounts}["/deep"] == \
            str(volume_dir / "a" / "b")
        assert {m["container_path"]: m["read_only"] for m in runtime_mounts}["/cm"] is True


async def test_deletion_kills_cleans_up_and_deletes_the_pod(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        body = pod("gone", volumes=[{"name": "scratch", "emptyDir": {}}],
                   terminationGracePeriodSeconds=7)
        body["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch",
                                                           "mountPath": "/s"}]
        created = await h.create(body)
        uid = created["metadata"]["uid"]
        await h.wait_pod("gone", lambda p: phase(p) == "Running")
        assert (h.root / "pods" / uid).is_dir()
        await h.api.delete(resource_path("pods", "default", "gone"))
        await h.wait_gone("gone")
        assert not (h.root / "pods" / uid).exists()
        assert not any(uid in str(p) for p in (h.root / "logs").rglob("*"))
        assert h.runtime.sandboxes == {} and h.runtime.containers == {}
        stops = [c for c in h.runtime.calls if c[0] == "stop_container"]
        assert stops and stops[0][2] == "7.0"  # the pod's grace period
        await h.wait_event("gone", lambda e: (e["reason"], e["message"]) == (
            "Killing", "Stopping container c"))


async def test_a_restarted_kubelet_adopts_running_containers(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await h.create(pod("keep"))
        p = await h.wait_pod("keep", lambda p: phase(p) == "Running")
        before = cstatus(p)["containerID"]
        await h.restart()
        await h.create(pod("after"))
        await h.wait_pod("after", lambda p: phase(p) == "Running")
        p = await h.wait_pod("keep", lambda p: phase(p) == "Running")
        assert cstatus(p)["containerID"] == before
        assert cstatus(p)["restartCount"] == 0
        # the new kubelet created only the new pod's container and stopped nothing
        assert [c[0] for c in h.runtime.calls].count("create_container") == 1
        assert not any(c[0] in ("stop_container", "remove_container", "stop_pod_sandbox")
                       for c in h.runtime.calls)


async def test_a_pod_that_does_not_fit_is_rejected(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        body = pod("huge")
        body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1000"}}
        await h.create(body)
        p = await h.wait_pod("huge", lambda p: phase(p) == "Failed")
        cpus = h.kubelet.node_allocatable["cpu"]
        assert p["status"]["reason"] == "OutOfcpu"
        assert p["status"]["message"] == (
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000000, "
            f"used: 0, capacity: {int(cpus) * 1000}")
        await h.wait_event("huge", lambda e: e["reason"] == "OutOfcpu")
        assert not h.runtime.sandboxes


async def test_logs_from_the_kubelet_and_through_the_apiserver(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await h.create(pod("talk", argv=["echo", "hello", "world"], restartPolicy="Never"))
        await h.wait_pod("talk", lambda p: phase(p) == "Succeeded")
        code, body = await kubelet_get(h, "/containerLogs/default/talk/c")
        assert (code, body) == (200, "hello world\n")
        code, body = await kubelet_get(h, "/containerLogs/default/talk/c?timestamps=true")
        assert code == 200 and body.endswith("Z hello world\n")
        code, body = await kubelet_get(h, "/containerLogs/default/talk/c?previous=true")
        assert (code, body) == (400, 'previous terminated container "c" in pod "talk" not '
                                     'found')
        code, body = await kubelet_get(h, "/containerLogs/default/nope/c")
        assert code == 404
        url = str(h.api.server) + "/api/v1/namespaces/default/pods/talk/log"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            assert resp.status == 200
            assert await resp.text() == "hello world\n"
        async with aiohttp.ClientSession() as session, session.get(
                url + "?container=zz") as resp:
            assert resp.status == 400
            assert (await resp.json())["message"] == "container zz is not valid for pod talk"
        async with aiohttp.ClientSession() as session, session.get(
                url + "?tailLines=-1") as resp:
            assert resp.status == 422
            assert (await resp.json())["message"] == (
                'PodLogOptions "talk" is invalid: tailLines: Invalid value: -1: must be '
                'greater than or equal to 0')


async def test_after_a_node_reboot_the_pod_turns_ready_again_at_the_new_start(
        tmp_path: Path) -> None:
    # Upstream's syncPod sets the status it finds before it acts: the containers are gone,
    # so Ready turns False, then True again once they run (a new lastTransitionTime), even
    # when the not-ready status is never written.
    from ephemera.kubelet.nodeshutdown import shut_down_node

    def ready(p: dict[str, Any]) -> dict[str, Any]:
        return next(c for c in p["status"].get("conditions") or [] if c["type"] == "Ready")

    async with running_kubelet(tmp_path) as h:
        await h.create(pod("rb"))
        p = await h.wait_pod("rb", lambda p: phase(p) == "Running" and
                             ready(p)["status"] == "True")
        before, old_id = ready(p)["lastTransitionTime"], cstatus(p)["containerID"]
        await h.shutdown()
        await shut_down_node(h.runtime, h.root, grace=0)
        await asyncio.sleep(1.1)  # the transition times count whole seconds
        await h.restart()
        p = await h.wait_pod("rb", lambda p: cstatus(p).get("containerID") != old_id and
                             "running" in cstatus(p)["state"] and
                             ready(p)["status"] == "True")
        assert ready(p)["lastTransitionTime"] > before

"""KEP-6395 lifecycle phase 3 and sample State 4 on the fake runtime: a `/dynamic` change that
fits the node is allocated (`SuccessfulAllocation`) though what it reads is not there yet.

- A volume whose ConfigMap does not exist goes `ErrorMounting` with upstream's FailedMount
  text in `errorMessage` and a `FailedMount` Warning event; the running container that is to
  mount it keeps running as it was (its `volumeMounts` without it), live (`NotRequired`) or
  not (`RestartContainer`); a later change to the same pod (a container and its volume
  removed) is actuated meanwhile; once the ConfigMap exists the volume's retried SetUp
  mounts it (`HostMounted`) and the change completes.
- A container added with an image the node does not have goes `ErrImagePull` /
  `ImagePullBackOff` while the others keep running, as upstream's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet_harness import Harness, container_status, pod, running_kubelet, running_worker

from ephemera.client import resource_path

Obj = dict[str, Any]
DYNAMIC = resource_path("pods", "default", "w") + "/dynamic"
FAILED = 'MountVolume.SetUp failed for volume "task" : configmap "task" not found'


def _volume(p: Obj, name: str) -> Obj | None:
    for entry in p["status"].get("volumeStatuses") or []:
        if entry["name"] == name:
            return dict(entry)
    return None


def _mount_names(p: Obj, name: str = "c") -> list[str]:
    return [m["name"] for m in container_status(p, name).get("volumeMounts") or []]


def _names(p: Obj) -> list[str]:
    return [s["name"] for s in p["status"].get("containerStatuses") or []]


async def _update(h: Harness, change: Any) -> None:
    """GET the pod's `/dynamic`, apply `change(pod)` to it, PUT it back."""
    current = await h.api.get(DYNAMIC)
    change(current)
    await h.api.update(DYNAMIC, current)


async def _create_configmap(h: Harness, name: str, data: dict[str, str]) -> None:
    await h.api.create(resource_path("configmaps", "default"),
                       {"metadata": {"name": name}, "data": data})


def _add_task(pod: Obj) -> None:
    """A volume of ConfigMap `task` mounted at /task into container `c`."""
    pod["spec"]["volumes"].append({"name": "task", "configMap": {"name": "task"}})
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "task", "mountPath": "/task"})


def _drop_previous(pod: Obj) -> None:
    """Container `prev` and its volume `prev` removed."""
    pod["spec"]["containers"] = [c for c in pod["spec"]["containers"] if c["name"] != "prev"]
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] != "prev"]


async def test_a_volume_of_a_missing_configmap_is_allocated_and_fails_to_mount(
        tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await running_worker(h, sidecar=True)
        # the previous task: a container with a volume of its own
        await _create_configmap(h, "prev", {"job": "41"})

        def add_previous(pod: Obj) -> None:
            pod["spec"]["volumes"].append({"name": "prev", "configMap": {"name": "prev"}})
            pod["spec"]["containers"].append({"name": "prev", "image": "busybox",
                                              "volumeMounts": [{"name": "prev",
                                                                "mountPath": "/prev"}]})

        await _update(h, add_previous)
        before = await h.wait_pod("w", lambda p: "prev" in _names(p) and
                                  "running" in container_status(p, "prev")["state"])
        main_id = container_status(before)["containerID"]
        side_id = container_status(before, "side")["containerID"]
        uid = before["metadata"]["uid"]

        # the next task's ConfigMap does not exist yet: allocated all the same
        await _update(h, _add_task)
        failing = await h.wait_pod("w", lambda p: (_volume(p, "task") or {}).get(
            "hostPhase") == "ErrorMounting")
        assert _volume(failing, "task") == {"name": "task", "hostPhase": "ErrorMounting",
                                            "errorMessage": FAILED}
        allocated = await h.api.get(resource_path("pods", "default", "w") + "/allocated")
        assert [v["name"] for v in allocated["spec"]["volumes"]] == ["keep", "prev", "task"]
        event = await h.wait_event("w", lambda e: e["reason"] == "FailedMount")
        assert (event["type"], event["message"]) == ("Warning", FAILED)
        assert not [e for e in await h.events("w") if e["reason"] == "FailedAllocation"]
        # State 4: the container keeps running as it was, without the new mount
        assert container_status(failing)["containerID"] == main_id
        assert "running" in container_status(failing)["state"]
        assert _mount_names(failing) == ["keep"]

        # a later change to the same pod is not held up behind it
        await _update(h, _drop_previous)
        dropped = await h.wait_pod("w", lambda p: "prev" not in _names(p) and
                                   _volume(p, "prev") is None)
        prev_dir = h.root / "pods" / uid / "volumes" / "kubernetes.io~configmap" / "prev"
        assert not prev_dir.exists()
        assert (_volume(dropped, "task") or {}).get("hostPhase") == "ErrorMounting"
        assert container_status(dropped)["containerID"] == main_id
        assert h.kubelet.volumes.volume_failures(uid, "task") >= 1  # retried, backing off

        # the ConfigMap appears: a retried SetUp mounts it and the container restarts into it
        await _create_configmap(h, "task", {"job": "42"})
        done = await h.wait_pod("w", lambda p: _mount_names(p) == ["keep", "task"] and
                                "running" in container_status(p)["state"], timeout=20)
        assert _volume(done, "task") == {"name": "task", "hostPhase": "HostMounted"}
        assert container_status(done)["containerID"] != main_id
        assert container_status(done, "side")["containerID"] == side_id  # untouched
        task = h.root / "pods" / uid / "volumes" / "kubernetes.io~configmap" / "task" / "job"
        assert task.read_text() == "42"


async def test_a_live_mount_of_a_failing_volume_waits_for_it(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        body = pod("w", volumes=[{"name": "keep", "emptyDir": {}}])
        main = body["spec"]["containers"][0]
        main["dynamicVolumePolicy"] = {"restartPolicy": "NotRequired"}
        main["volumeMounts"] = [{"name": "keep", "mountPath": "/keep"}]
        await h.create(body)
        before = await h.wait_pod("w", lambda p: "running" in (
            (p["status"].get("containerStatuses") or [{}])[0].get("state") or {}))
        main_id = container_status(before)["containerID"]
        await _update(h, _add_task)
        failing = await h.wait_pod("w", lambda p: (_volume(p, "task") or {}).get(
            "hostPhase") == "ErrorMounting")
        assert (_volume(failing, "task") or {}).get("errorMessage") == FAILED
        assert _mount_names(failing) == ["keep"]
        await _create_configmap(h, "task", {"job": "42"})
        done = await h.wait_pod("w", lambda p: _mount_names(p) == ["keep", "task"],
                                timeout=20)
        assert (_volume(done, "task") or {}).get("hostPhase") == "HostMounted"
        status = container_status(done)
        assert (status["containerID"], status["restartCount"]) == (main_id, 0)  # live


async def test_a_container_added_with_a_missing_image_backs_off_alone(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        before = await running_worker(h, sidecar=True)
        main_id = container_status(before)["containerID"]

        def add_container(pod: Obj) -> None:
            pod["spec"]["containers"].append({"name": "late", "image": "registry.example/no:1"})

        await _update(h, add_container)
        await h.wait_event("w", lambda e: e["reason"] == "SuccessfulAllocation")
        backing_off = await h.wait_pod("w", lambda p: "late" in _names(p) and (
            container_status(p, "late")["state"].get("waiting") or {}).get(
                "reason") == "ImagePullBackOff")
        assert container_status(backing_off)["containerID"] == main_id
        assert "running" in container_status(backing_off, "side")["state"]
        failed = await h.wait_event("w", lambda e: e["reason"] == "Failed")
        assert failed["message"].startswith('Failed to pull image "registry.example/no:1": ')
        assert not [e for e in await h.events("w") if e["reason"] == "FailedAllocation"]

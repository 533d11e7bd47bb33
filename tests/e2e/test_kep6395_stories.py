"""KEP-6395's four user stories, end to end on a real `ephemera up` with the real OCI runtime
and the real kubectl: a warm sandbox swapping its workspace (Story 1); a pre-warmed pod given
projected credentials, a scratch disk and a dynamic sidecar in one request, later taken away
together (Story 2); a
sidecar given a new ConfigMap and restarted while the main container keeps running (Story 3);
a task worker swapping its task ConfigMap and scratch volume twice, credentials coming and
going (Story 4).

Which containers restarted is read from `status.containerStatuses[*].containerID`; what a
container sees, with `kubectl exec`; that the pod was never recreated, from its UID and start time.
One cluster for the module (one xdist group), a namespace per test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster import (
    HOLD_GRACE,
    LOOP,
    RESTART_CONTAINER,
    Kubectl,
    allocated_spec,
    assert_kubelet_clean,
    container,
    create_running,
    exec_in,
    holds_on_after_term,
    kubelet_cluster_fixtures,
    mounted_names,
    mounts_under,
    patch_dynamic,
    running,
    volume_dir,
    volume_phases,
    wait,
    wait_pod,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("kep6395-stories")]


stories_cluster, k = kubelet_cluster_fixtures("stories_cluster", "kep6395-stories",
                                              "kep6395-stories-node",
                                              after_delete=assert_kubelet_clean)


def busybox(name: str, policy: bool = True, **fields: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox", "command": ["sh", "-c", LOOP],
                         **fields}
    if policy:
        c["dynamicVolumePolicy"] = RESTART_CONTAINER
    return c


def pod(name: str, *containers: dict[str, Any], volumes: list[dict[str, Any]] | None = None,
        grace: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": grace,
                            "containers": list(containers)}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def set_volumes(k: Kubectl, name: str, volumes: list[dict[str, Any]],
                mounts: list[dict[str, Any]], index: int = 0) -> None:
    """Set the pod's volumes and container `index`'s mounts in one /dynamic request (a JSON
    patch `add` of a member replaces it, and adds it when absent)."""
    patch_dynamic(k, name, [{"op": "add", "path": "/spec/volumes", "value": volumes},
                            {"op": "add", "path": f"/spec/containers/{index}/volumeMounts",
                             "value": mounts}])


def swapped(k: Kubectl, name: str, before: str, volumes: set[str],
            container_name: str = "c") -> dict[str, Any]:
    """Wait until `container_name` runs as a new container mounting exactly `volumes`, each
    HostMounted, nothing else left in `volumeStatuses`."""
    phases = dict.fromkeys(volumes, "HostMounted")
    return wait_pod(k, name, lambda p: container(p, container_name).get("containerID") !=
                    before and running(p, container_name) and volume_phases(p) == phases and
                    mounted_names(p, container_name) == volumes, f"swapped to {sorted(volumes)}")


def test_story_1_workspace_swap(k: Kubectl) -> None:
    workspace_1 = {"name": "workspace-1", "emptyDir": {"medium": "Memory"}}
    p = create_running(k, pod("sandbox", busybox("c", volumeMounts=[
        {"name": "workspace-1", "mountPath": "/workspace"}]), volumes=[workspace_1]))
    uid, started = p["metadata"]["uid"], p["status"]["startTime"]
    first = container(p)["containerID"]
    exec_in(k, "sandbox", "c", "echo job-1 > /workspace/output")
    old_dir = volume_dir(k.cluster, uid, "empty-dir", "workspace-1")
    assert mounts_under(old_dir) == [str(old_dir)]

    set_volumes(k, "sandbox", [{"name": "workspace-2", "emptyDir": {"medium": "Memory"}}],
                [{"name": "workspace-2", "mountPath": "/workspace"}])
    after = swapped(k, "sandbox", first, {"workspace-2"})
    assert (after["metadata"]["uid"], after["status"]["startTime"]) == (uid, started)
    assert exec_in(k, "sandbox", "c", "ls -A /workspace | wc -l; "
                                      "grep ' /workspace ' /proc/mounts | cut -d' ' -f3") == \
        "0\ntmpfs\n"
    wait(lambda: not old_dir.exists(), "the old workspace torn down", k.cluster)
    new_dir = volume_dir(k.cluster, uid, "empty-dir", "workspace-2")
    assert mounts_under(old_dir) == [] and mounts_under(new_dir) == [str(new_dir)]


def test_story_2_prewarmed_pod_gets_credentials_and_a_sidecar(k: Kubectl) -> None:
    objects = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tenant-creds"},
         "stringData": {"api-key": "k-123"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tool-config"},
         "data": {"tool.yaml": "mode: agent"}}]
    # the runner has no dynamicVolumePolicy: mounts may only come with a new container
    p = create_running(k, *objects, pod("sandbox", busybox("runner", policy=False),
                                        grace=HOLD_GRACE))
    runner = container(p, "runner")["containerID"]
    creds = {"name": "creds", "projected": {"sources": [
        {"secret": {"name": "tenant-creds"}},
        {"configMap": {"name": "tool-config"}},
        {"downwardAPI": {"items": [{"path": "pod", "fieldRef": {
            "fieldPath": "metadata.name"}}]}}]}}
    patch_dynamic(k, "sandbox", [
        {"op": "add", "path": "/spec/volumes", "value": [creds,
                                                         {"name": "scratch", "emptyDir": {}}]},
        {"op": "add", "path": "/spec/containers/-", "value": busybox(
            "tool", policy=False,
            command=["sh", "-c", holds_on_after_term("/scratch/release")],
            volumeMounts=[{"name": "creds", "mountPath": "/creds", "readOnly": True},
                          {"name": "scratch", "mountPath": "/scratch"}])}])
    after = wait_pod(k, "sandbox", lambda p: running(p, "tool") and volume_phases(p) == {
        "creds": "HostMounted", "scratch": "HostMounted"}, "the sidecar running")
    assert mounted_names(after, "tool") == {"creds", "scratch"}
    assert container(after, "runner")["containerID"] == runner
    assert container(after, "runner")["restartCount"] == 0
    assert mounted_names(after, "runner") == set()
    seen = exec_in(k, "sandbox", "tool", "ls /creds; cat /creds/api-key; echo; "
                                         "cat /creds/tool.yaml; echo; cat /creds/pod; echo; "
                                         "touch /creds/x 2>/dev/null || echo read-only; "
                                         "touch /scratch/x && echo writable")
    assert seen.splitlines() == ["api-key", "pod", "tool.yaml", "k-123", "mode: agent",
                                 "sandbox", "read-only", "writable"]
    assert [c["name"] for c in allocated_spec(k, "sandbox")["containers"]] == ["runner", "tool"]

    # the tool and its volumes leave together; the volumes show Unmounting while the tool
    # stops (it holds on after SIGTERM until /scratch/release exists), then are pruned
    uid = p["metadata"]["uid"]
    patch_dynamic(k, "sandbox", [{"op": "remove", "path": "/spec/containers/1"},
                                 {"op": "remove", "path": "/spec/volumes"}])
    wait_pod(k, "sandbox", lambda p: volume_phases(p) == {
        "creds": "Unmounting", "scratch": "Unmounting"} and running(p, "tool"),
        "the volumes Unmounting while the tool stops")
    (volume_dir(k.cluster, uid, "empty-dir", "scratch") / "release").touch()
    gone = wait_pod(k, "sandbox", lambda p: volume_phases(p) == {} and
                    container(p, "tool") == {}, "the tool stopped, its status gone")
    assert container(gone, "runner")["containerID"] == runner
    assert not volume_dir(k.cluster, uid, "projected", "creds").exists()
    assert mounts_under(k.cluster.data_dir / "kubelet" / "pods" / uid / "volumes") == []

    # the next agent session: the names are free again once the tool stopped (its status
    # left the pod with it)
    patch_dynamic(k, "sandbox", [
        {"op": "add", "path": "/spec/volumes", "value": [creds]},
        {"op": "add", "path": "/spec/containers/-", "value": busybox(
            "tool-2", policy=False,
            volumeMounts=[{"name": "creds", "mountPath": "/creds", "readOnly": True}])}])
    again = wait_pod(k, "sandbox", lambda p: running(p, "tool-2") and
                     volume_phases(p) == {"creds": "HostMounted"}, "the next sidecar running")
    assert exec_in(k, "sandbox", "tool-2", "cat /creds/api-key") == "k-123"
    assert container(again, "runner")["containerID"] == runner


def test_story_3_sidecar_gets_a_new_configmap_main_keeps_running(k: Kubectl) -> None:
    def config(name: str, level: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                "data": {"level": level}}

    v1 = {"name": "logger-v1", "configMap": {"name": "logger-v1"}}
    p = create_running(k, config("logger-v1", "info"), config("logger-v2", "debug"), pod(
        "app", busybox("main", policy=False),
        busybox("logger", volumeMounts=[{"name": "logger-v1", "mountPath": "/etc/logger"}]),
        volumes=[v1]))
    main, logger = container(p, "main")["containerID"], container(p, "logger")["containerID"]
    assert exec_in(k, "app", "logger", "cat /etc/logger/level") == "info"

    set_volumes(k, "app", [{"name": "logger-v2", "configMap": {"name": "logger-v2"}}],
                [{"name": "logger-v2", "mountPath": "/etc/logger"}], index=1)
    after = swapped(k, "app", logger, {"logger-v2"}, "logger")
    assert exec_in(k, "app", "logger", "cat /etc/logger/level") == "debug"
    assert container(after, "main")["containerID"] == main
    assert container(after, "main")["restartCount"] == 0
    assert running(after, "main")
    wait(lambda: not volume_dir(k.cluster, p["metadata"]["uid"], "configmap",
                                "logger-v1").exists(), "logger-v1 torn down", k.cluster)


def old_gone(path: Path) -> Callable[[], bool]:
    return lambda: not path.exists()


def test_story_4_task_worker_swaps_its_volumes_twice(k: Kubectl) -> None:
    tasks = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"task-{n}"},
         "data": {"task": f"task {n}"}} for n in (1, 2, 3)]
    creds = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "task-2-creds"},
             "stringData": {"token": "t2"}}
    p = create_running(k, *tasks, creds, pod("worker", busybox("c")))
    uid, started = p["metadata"]["uid"], p["status"]["startTime"]
    ids = [container(p)["containerID"]]

    def task_volumes(n: int, with_creds: bool) -> tuple[list[dict[str, Any]], list[Any]]:
        volumes: list[dict[str, Any]] = [
            {"name": f"task-{n}", "configMap": {"name": f"task-{n}"}},
            {"name": f"scratch-{n}", "emptyDir": {}}]
        mounts: list[dict[str, Any]] = [
            {"name": f"task-{n}", "mountPath": "/task", "readOnly": True},
            {"name": f"scratch-{n}", "mountPath": "/scratch"}]
        if with_creds:
            volumes.append({"name": f"creds-{n}", "secret": {"secretName": f"task-{n}-creds"}})
            mounts.append({"name": f"creds-{n}", "mountPath": "/creds", "readOnly": True})
        return volumes, mounts

    # task 1 gets its volumes; then two swaps (task 2 also gets credentials, task 3 not)
    for n, with_creds in ((1, False), (2, True), (3, False)):
        volumes, mounts = task_volumes(n, with_creds)
        set_volumes(k, "worker", volumes, mounts)
        after = swapped(k, "worker", ids[-1], {v["name"] for v in volumes})
        ids.append(container(after)["containerID"])
        seen = exec_in(k, "worker", "c",
                       "cat /task/task; echo; ls -A /scratch | wc -l; "
                       "(cat /creds/token 2>/dev/null || echo -n no-creds); echo; "
                       "echo left-over > /scratch/out")
        assert seen == f"task {n}\n0\n{'t2' if with_creds else 'no-creds'}\n"
        assert [v["name"] for v in allocated_spec(k, "worker")["volumes"]] == \
            [v["name"] for v in volumes]
        if n > 1:
            old = volume_dir(k.cluster, uid, "empty-dir", f"scratch-{n - 1}")
            wait(old_gone(old), f"scratch-{n - 1} torn down", k.cluster)
    assert len(set(ids)) == 4  # one new container per task, never the pod recreated
    assert (after["metadata"]["uid"], after["status"]["startTime"]) == (uid, started)
    assert not volume_dir(k.cluster, uid, "secret", "creds-2").exists()

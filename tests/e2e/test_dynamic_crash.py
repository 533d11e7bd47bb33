"""`kill -9` of the kubelet in the middle of a KEP-6395 volume swap, on a real `ephemera up`
with the real OCI runtime: a running container's Memory emptyDir and Secret volume (both
tmpfs mounts on the host) are swapped for new ones through a JSON patch of `pods/w/dynamic`
(sent on an open connection, so that the kill follows at once), and the kubelet is killed
with SIGKILL at one of four points: as soon as the API acknowledged the change; once the
allocation checkpoint holds it; once the new volume's host directory appears (set up in
progress or done); once the runtime creates the container's next instance (the old one
stopped, the old volumes about to be torn down).
`ephemera up` restarts the kubelet, which must end in the right state: the new volumes
HostMounted and the old ones pruned from `volumeStatuses`, the container recreated with exactly
the new mounts (seen from inside it with `kubectl exec`), `/allocated` showing the new spec,
the old host directories gone, and under the data dir no leaked mount and nothing mounted twice.
Each kill is checked to have landed before the swap finished: once the killed kubelet is dead,
an old volume's host directory is still there, or the API does not show the swap done yet.

One cluster for the module (one xdist group), a namespace per test; after the module every
pod is deleted and nothing may be left mounted.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster import (
    LOOP,
    Cluster,
    Kubectl,
    allocated_spec,
    assert_kubelet_clean,
    container,
    create_running,
    exec_in,
    kill_kubelet,
    kubelet_cluster_fixtures,
    mounted_names,
    mounts_under,
    running,
    volume_dir,
    volume_phases,
    wait,
    wait_pod,
)
from kep_e2e import RawApi, pod_path

from ephemera.kubelet.allocation.checkpoint import AllocationCheckpoint, CheckpointCorruptedError

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("dynamic-crash")]


crash_cluster, k = kubelet_cluster_fixtures("crash_cluster", "dynamic-crash", "dynamic-crash-node",
                                            after_delete=assert_kubelet_clean)


def task_volumes(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Task `n`'s volumes (a plain emptyDir kept across tasks, a Memory emptyDir and a
    Secret) and the container's mounts of them."""
    volumes: list[dict[str, Any]] = [{"name": "keep", "emptyDir": {}},
                                     {"name": f"scratch-{n}",
                                      "emptyDir": {"medium": "Memory"}},
                                     {"name": f"creds-{n}",
                                      "secret": {"secretName": f"creds-{n}"}}]
    mounts: list[dict[str, Any]] = [{"name": "keep", "mountPath": "/keep"},
                                    {"name": f"scratch-{n}", "mountPath": "/scratch"},
                                    {"name": f"creds-{n}", "mountPath": "/creds",
                                     "readOnly": True}]
    return volumes, mounts


def secret(n: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"creds-{n}"},
            "stringData": {"key": f"secret {n}"}}


def poll(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """A tight poll (the kubelet moves fast): fail the test if `check` never holds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def _checkpoint_has(cluster: Cluster, text: str) -> bool:
    """Whether the allocation checkpoint's last write (its newest slot) holds `text`."""
    try:  # read while the kubelet writes: a slot caught mid-write is the older's turn
        return text in AllocationCheckpoint(cluster.data_dir / "kubelet").newest().read_text()
    except (FileNotFoundError, CheckpointCorruptedError):
        return False


@pytest.mark.parametrize("kill_point", ["acknowledged", "allocated", "mounting", "restarting"])
def test_kubelet_killed_mid_swap_ends_in_the_right_state(k: Kubectl, crash_cluster: Cluster,
                                                         kill_point: str) -> None:
    cluster = crash_cluster
    volumes, mounts = task_volumes(1)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
            "spec": {"terminationGracePeriodSeconds": 1, "volumes": volumes,
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", LOOP],
                                     "dynamicVolumePolicy": {
                                         "restartPolicy": "RestartContainer"},
                                     "volumeMounts": mounts}]}}
    p = create_running(k, secret(1), secret(2), body)
    uid, first = p["metadata"]["uid"], container(p)["containerID"]
    exec_in(k, "w", "c", "echo task-1 > /scratch/out")
    old_dirs = [volume_dir(cluster, uid, "empty-dir", "scratch-1"),
                volume_dir(cluster, uid, "secret", "creds-1")]
    new_dirs = [volume_dir(cluster, uid, "empty-dir", "scratch-2"),
                volume_dir(cluster, uid, "secret", "creds-2")]

    want = {"keep", "scratch-2", "creds-2"}

    def swap_done(p: dict[str, Any]) -> bool:
        return (container(p).get("containerID") != first and running(p)
                and mounted_names(p) == want
                and volume_phases(p) == dict.fromkeys(want, "HostMounted"))

    # The change is sent and the kill follows on one open connection, no process spawned in
    # between: a swap takes tens of milliseconds, and each kill must land inside it.
    api = RawApi(cluster)
    try:
        api.request("GET", pod_path(str(k.namespace), "w"))  # connected before the change
        volumes, mounts = task_volumes(2)
        code, reply = api.request(
            "PATCH", pod_path(str(k.namespace), "w", "dynamic"),
            [{"op": "add", "path": "/spec/volumes", "value": volumes},
             {"op": "add", "path": "/spec/containers/0/volumeMounts", "value": mounts}],
            content_type="application/json-patch+json")
        assert code == 200, reply
        if kill_point == "allocated":
            poll(lambda: _checkpoint_has(cluster, "scratch-2"), "the change checkpointed")
        elif kill_point == "mounting":
            poll(lambda: new_dirs[0].exists(), "scratch-2's host directory")
        elif kill_point == "restarting":  # the runtime's directory of c's second instance
            poll(lambda: (cluster.data_dir / "kubelet" / "pods" / uid / "containers" / "c" /
                          "1").exists(), "c being recreated")

        def left_by_the_kill() -> tuple[list[Path], dict[str, Any]]:
            """Read once the killed kubelet is dead: only a kubelet tears the old volumes
            down and reports the swap, so what shows unfinished now was so at the kill."""
            old_left = [d for d in old_dirs if d.exists()]
            return old_left, api.request("GET", pod_path(str(k.namespace), "w"))[1]

        old_pid = cluster.pid_of("kubelet")
        old_left, reported = kill_kubelet(cluster, left_by_the_kill)
    finally:
        api.close()
    assert f"kubelet (pid {old_pid}) exited: killed by SIGKILL" in cluster.output
    assert old_left or not swap_done(reported), \
        f"the kill ({kill_point}) landed after the swap finished: {reported.get('status')}"

    after = wait_pod(k, "w", swap_done, "the swap finished by the new kubelet")
    assert [v["name"] for v in allocated_spec(k, "w")["volumes"]] == [
        "keep", "scratch-2", "creds-2"]
    seen = exec_in(k, "w", "c", "grep -E ' /(scratch|creds) ' /proc/mounts | "
                                "cut -d' ' -f2,3 | sort; grep -c ' /keep ' /proc/mounts; "
                                "ls -A /scratch | wc -l; cat /creds/key")
    assert seen.splitlines() == ["/creds tmpfs", "/scratch tmpfs", "1", "0", "secret 2"]
    wait(lambda: not any(d.exists() for d in old_dirs), "the old volumes torn down", cluster)
    assert sorted(mounts_under(cluster.data_dir / "kubelet" / "pods" / uid / "volumes")) == \
        sorted(str(d) for d in new_dirs)
    twice = [m for m, n in Counter(mounts_under(cluster.data_dir)).items() if n > 1]
    assert twice == []
    # the adopted pod is still the same pod, its container restarted once for the swap; a
    # kill between the creation of the swap's instance and its start leaves that instance
    # never started, and the new kubelet replaces it (as upstream's kubelet restarts a
    # container it finds in the Created state), which counts one restart more
    assert after["metadata"]["uid"] == uid
    swap_instance = cluster.data_dir / "kubelet" / "pods" / uid / "containers" / "c" / "1"
    never_started = not (swap_instance / "started").exists()
    assert container(after)["restartCount"] == (
        2 if kill_point == "restarting" and never_started else 1)

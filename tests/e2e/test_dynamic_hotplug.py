"""Live hot-plug (`dynamicVolumePolicy.restartPolicy: NotRequired`, feature gate
DynamicVolumeHotPlug) on a real `ephemera up` with the real OCI runtime, watched from inside the
container with the real `kubectl exec`: a Secret and an emptyDir added to a running container
whose PID 1 keeps its start time, files visible, a Secret update reaching the live mount,
both removed again and gone from the container's mount table and the host; a read-only live
mount refusing writes; a container that plants a symlink at the mount path (to /etc, to
/proc/1/root, to ../../..) gets a FailedMount event and nothing mounted anywhere (neither in
the container nor on the host); a read-only root (a live mount only where the directory
exists); a NotRequired and a RestartContainer container changed in one update; the gate off
(the apiserver refuses the value as upstream refuses an unknown enum value); and kill -9 of
the kubelet in the middle of a live swap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    LOOP,
    Cluster,
    Kubectl,
    assert_kubelet_clean,
    container,
    create_running,
    exec_in,
    kill_kubelet,
    kubelet_cluster_fixtures,
    mounts_under,
    namespace_for,
    patch_dynamic,
    pod_json,
    start_cluster,
    volume_dir,
    volume_phases,
    wait,
    wait_pod,
)

from ephemera.kubelet.runtime.livemount import mount_source, parse_mountinfo

pytestmark = pytest.mark.e2e

hotplug_cluster, k = kubelet_cluster_fixtures("hotplug_cluster", "hotplug-cluster",
                                              "hotplug-node", after_delete=assert_kubelet_clean)

NOT_REQUIRED = {"restartPolicy": "NotRequired"}
START_TIME = "cut -d' ' -f22 /proc/1/stat"  # PID 1's start time, from inside the container


def _pod(k: Kubectl, *containers: dict[str, Any], grace: int = 1) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
            "spec": {"terminationGracePeriodSeconds": grace,
                     "volumes": [{"name": "keep", "emptyDir": {}}],
                     "containers": list(containers)}}
    k("create", "-f", "-", input=yaml.safe_dump(body))
    return wait_pod(k, "w", lambda p: all(
        "running" in container(p, c["name"]).get("state", {}) for c in containers), "running")


def _live(name: str = "c", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "command": ["sh", "-c", LOOP],
            "dynamicVolumePolicy": NOT_REQUIRED,
            "volumeMounts": [{"name": "keep", "mountPath": "/keep"}], **extra}


def _mount_points(k: Kubectl, name: str = "c") -> set[str]:
    """The container's mount table as it reads it itself."""
    return {line.split()[1] for line in exec_in(k, "w", name, "cat /proc/mounts").splitlines()}


def _host_clones(path: Path) -> list[str]:
    """Mount points in the host's table that show the directory `path` (a clone of it)."""
    device, root = mount_source(str(path))
    with open("/proc/self/mountinfo") as table:
        return [m.mount_point for m in parse_mountinfo(table.read())
                if (m.device, m.root) == (device, root)]


def _reported(p: dict[str, Any], name: str = "c") -> set[tuple[str, str]]:
    return {(m["name"], m["mountPath"]) for m in container(p, name).get("volumeMounts") or []}


def test_secret_and_emptydir_come_and_go_live(k: Kubectl) -> None:
    k("create", "secret", "generic", "s1", "--from-literal=token=one")
    before = _pod(k, _live())
    uid = before["metadata"]["uid"]
    cid = container(before)["containerID"]
    started = exec_in(k, "w", "c", START_TIME)
    patch_dynamic(k, "w", [
        {"op": "add", "path": "/spec/volumes/-", "value": {"name": "extra", "emptyDir": {}}},
        {"op": "add", "path": "/spec/volumes/-",
         "value": {"name": "sec", "secret": {"secretName": "s1"}}},
        {"op": "add", "path": "/spec/containers/0/volumeMounts/-",
         "value": {"name": "extra", "mountPath": "/data/extra"}},
        {"op": "add", "path": "/spec/containers/0/volumeMounts/-",
         "value": {"name": "sec", "mountPath": "/etc/sec"}}])
    after = wait_pod(k, "w", lambda p: {("extra", "/data/extra"), ("sec", "/etc/sec")}
                     <= _reported(p), "mounted live")
    status = container(after)
    assert (status["containerID"], status["restartCount"]) == (cid, 0)
    assert volume_phases(after)["extra"] == volume_phases(after)["sec"] == "HostMounted"
    assert exec_in(k, "w", "c", START_TIME) == started  # the same process
    assert exec_in(k, "w", "c", "cat /etc/sec/token") == "one"
    exec_in(k, "w", "c", "echo from-container > /data/extra/f")
    host_extra = volume_dir(k.cluster, uid, "empty-dir", "extra")
    assert (host_extra / "f").read_text() == "from-container\n"
    assert {"/data/extra", "/etc/sec"} <= _mount_points(k)
    assert _host_clones(host_extra) == []  # the host's table never had it

    k("patch", "secret", "s1", "-p", json.dumps({"stringData": {"token": "two"}}))
    wait(lambda: exec_in(k, "w", "c", "cat /etc/sec/token") == "two",
         "the Secret update to reach the live mount", k.cluster)

    patch_dynamic(k, "w", [{"op": "remove", "path": "/spec/containers/0/volumeMounts/2"},
                           {"op": "remove", "path": "/spec/containers/0/volumeMounts/1"},
                           {"op": "remove", "path": "/spec/volumes/2"},
                           {"op": "remove", "path": "/spec/volumes/1"}])
    gone = wait_pod(k, "w", lambda p: _reported(p) == {("keep", "/keep")}
                    and "extra" not in volume_phases(p) and "sec" not in volume_phases(p),
                    "unmounted live and torn down")
    assert (container(gone)["containerID"], container(gone)["restartCount"]) == (cid, 0)
    assert exec_in(k, "w", "c", START_TIME) == started
    assert not {"/data/extra", "/etc/sec"} & _mount_points(k)
    wait(lambda: not host_extra.exists(), "the host directory to be removed", k.cluster)


def test_a_relative_mount_path_is_taken_from_the_root(k: Kubectl) -> None:
    """`mountPath: rel` (which validation allows) is `/rel`, live as at a start (upstream's
    kubelet makes it absolute for the runtime)."""
    _pod(k, _live(volumeMounts=[{"name": "keep", "mountPath": "keep"}]))
    patch_dynamic(k, "w", [
        {"op": "add", "path": "/spec/volumes/-", "value": {"name": "rel", "emptyDir": {}}},
        {"op": "add", "path": "/spec/containers/0/volumeMounts/-",
         "value": {"name": "rel", "mountPath": "rel/dir"}}])
    wait_pod(k, "w", lambda p: ("rel", "rel/dir") in _reported(p), "mounted live")
    assert {"/keep", "/rel/dir"} <= _mount_points(k)


def test_a_read_only_live_mount_refuses_writes(k: Kubectl) -> None:
    _pod(k, _live())
    patch_dynamic(k, "w", [
        {"op": "add", "path": "/spec/volumes/-", "value": {"name": "ro", "emptyDir": {}}},
        {"op": "add", "path": "/spec/containers/0/volumeMounts/-",
         "value": {"name": "ro", "mountPath": "/ro", "readOnly": True}}])
    wait_pod(k, "w", lambda p: ("ro", "/ro") in _reported(p), "mounted live")
    result = k("exec", "w", "-c", "c", "--", "sh", "-c", "echo x > /ro/f", check=False)
    assert result.returncode != 0 and "Read-only file system" in result.stderr


def _live_mount_fails(k: Kubectl, uid: str, cid: str, name: str, path: str,
                      cause: str) -> None:
    """Add emptyDir `name` mounted at `path` to pod w's running container c, whose live
    mount fails with `cause`: a FailedMount Warning, the volume set up on the host only, the
    container untouched, nothing mounted in it or left cloned on the host."""
    table = _mount_points(k)
    patch_dynamic(k, "w", [
        {"op": "add", "path": "/spec/volumes/-", "value": {"name": name, "emptyDir": {}}},
        {"op": "add", "path": "/spec/containers/0/volumeMounts/-",
         "value": {"name": name, "mountPath": path}}])
    events: list[dict[str, Any]] = wait(lambda: [
        e for e in k.json("get", "events", "--field-selector",
                          "involvedObject.name=w,reason=FailedMount")["items"]],
        "a FailedMount event", k.cluster)
    assert (events[0]["type"], events[0]["message"]) == ("Warning", (
        f'MountVolume.LiveMount failed for volume "{name}" : mounting "{path}" in running '
        f'container "c": {cause}'))
    p = wait_pod(k, "w", lambda p: volume_phases(p).get(name) == "HostMounted",
                 "the volume set up on the host")
    assert (container(p)["containerID"], container(p)["restartCount"]) == (cid, 0)
    assert "running" in container(p)["state"] and (name, path) not in _reported(p)
    assert _mount_points(k) == table
    assert _host_clones(volume_dir(k.cluster, uid, "empty-dir", name)) == []


@pytest.mark.parametrize("target", ["/etc", "/proc/1/root", "../../.."])
def test_a_planted_symlink_never_redirects_a_live_mount(k: Kubectl, target: str) -> None:
    before = _pod(k, _live())
    uid = before["metadata"]["uid"]
    cid = container(before)["containerID"]
    exec_in(k, "w", "c", f"ln -s {target} /plant")
    _live_mount_fails(k, uid, cid, "evil", "/plant", "too many levels of symbolic links")
    assert exec_in(k, "w", "c", "readlink /plant") == target + "\n"


def test_a_read_only_root_takes_live_mounts_only_at_existing_directories(k: Kubectl) -> None:
    """readOnlyRootFilesystem: writes to the root fail inside, the volume stays writable; a
    live mount where the directory is missing fails with EROFS (FailedMount, the container
    keeps running, nothing mounted); moved to /tmp (in the image) it mounts live, and goes."""
    before = _pod(k, _live(securityContext={"readOnlyRootFilesystem": True}))
    uid = before["metadata"]["uid"]
    cid = container(before)["containerID"]
    result = k("exec", "w", "-c", "c", "--", "sh", "-c", "touch /x", check=False)
    assert result.returncode != 0 and "Read-only file system" in result.stderr
    exec_in(k, "w", "c", "echo ok > /keep/f")  # /keep is not in the image: made before ro
    _live_mount_fails(k, uid, cid, "extra", "/extra", "read-only file system")

    patch_dynamic(k, "w", [{"op": "replace", "path": "/spec/containers/0/volumeMounts/1",
                            "value": {"name": "extra", "mountPath": "/tmp"}}])
    after = wait_pod(k, "w", lambda p: ("extra", "/tmp") in _reported(p), "mounted live")
    assert (container(after)["containerID"], container(after)["restartCount"]) == (cid, 0)
    exec_in(k, "w", "c", "echo live > /tmp/f")
    assert (volume_dir(k.cluster, uid, "empty-dir", "extra") / "f").read_text() == "live\n"
    patch_dynamic(k, "w", [{"op": "remove", "path": "/spec/containers/0/volumeMounts/1"}])
    wait_pod(k, "w", lambda p: _reported(p) == {("keep", "/keep")}, "unmounted live")
    assert "/tmp" not in _mount_points(k)


def test_not_required_and_restart_container_in_one_update(k: Kubectl) -> None:
    restart = {"name": "r", "image": "busybox", "command": ["sh", "-c", LOOP],
               "dynamicVolumePolicy": {"restartPolicy": "RestartContainer"}}
    before = _pod(k, _live(), restart)
    live_id, restart_id = container(before)["containerID"], container(before, "r")["containerID"]
    patch_dynamic(k, "w", [
        {"op": "add", "path": "/spec/volumes/-", "value": {"name": "both", "emptyDir": {}}},
        {"op": "add", "path": "/spec/containers/0/volumeMounts/-",
         "value": {"name": "both", "mountPath": "/both"}},
        {"op": "add", "path": "/spec/containers/1/volumeMounts",
         "value": [{"name": "both", "mountPath": "/both"}]}])
    after = wait_pod(k, "w", lambda p: ("both", "/both") in _reported(p)
                     and ("both", "/both") in _reported(p, "r")
                     and container(p, "r").get("containerID") != restart_id
                     and "running" in container(p, "r").get("state", {}), "both changed")
    assert container(after)["containerID"] == live_id  # mounted live
    exec_in(k, "w", "c", "echo shared > /both/f")
    assert exec_in(k, "w", "r", "cat /both/f") == "shared\n"


def test_a_live_change_is_reported_while_another_container_stops(k: Kubectl) -> None:
    """One update mounts live into `c` and restarts `r`, which ignores SIGTERM: `c`'s new
    mount is in the status while `r` still waits out its grace period, not after it."""
    restart = {"name": "r", "image": "busybox",
               "command": ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
               "dynamicVolumePolicy": {"restartPolicy": "RestartContainer"}}
    before = _pod(k, _live(), restart, grace=8)
    restart_id = container(before, "r")["containerID"]
    patch_dynamic(k, "w", [
        {"op": "add", "path": "/spec/volumes/-", "value": {"name": "both", "emptyDir": {}}},
        {"op": "add", "path": "/spec/containers/0/volumeMounts/-",
         "value": {"name": "both", "mountPath": "/both"}},
        {"op": "add", "path": "/spec/containers/1/volumeMounts",
         "value": [{"name": "both", "mountPath": "/both"}]}])
    during = wait_pod(k, "w", lambda p: ("both", "/both") in _reported(p), "mounted live")
    assert container(during, "r")["containerID"] == restart_id  # r is still stopping
    wait_pod(k, "w", lambda p: ("both", "/both") in _reported(p, "r")
             and "running" in container(p, "r").get("state", {}), "r restarted")


@pytest.fixture(scope="module")
def gate_off_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("hotplug-off")
    with start_cluster(base / "data", base / "home",
                       ["--no-kubelet", "--feature-gates", "DynamicVolumeHotPlug=false"]) as c:
        yield c


def test_gate_off_rejects_not_required(gate_off_cluster: Cluster, tmp_path: Path,
                                       request: pytest.FixtureRequest) -> None:
    kubectl = Kubectl(gate_off_cluster, tmp_path / "home", namespace_for(request.node.name))
    kubectl.home.mkdir()
    kubectl("create", "namespace", kubectl.namespace)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
            "spec": {"nodeName": "nowhere", "containers": [_live()],
                     "volumes": [{"name": "keep", "emptyDir": {}}]}}
    result = kubectl("create", "-f", "-", input=yaml.safe_dump(body), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'The Pod "w" is invalid: spec.containers[0].dynamicVolumePolicy.restartPolicy: '
        'Unsupported value: "NotRequired": supported values: "RestartContainer"')


def _task(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Task `n`'s volumes (a kept emptyDir, a Memory emptyDir and a Secret) and mounts."""
    return ([{"name": "keep", "emptyDir": {}},
             {"name": f"scratch-{n}", "emptyDir": {"medium": "Memory"}},
             {"name": f"creds-{n}", "secret": {"secretName": f"creds-{n}"}}],
            [{"name": "keep", "mountPath": "/keep"},
             {"name": f"scratch-{n}", "mountPath": "/scratch"},
             {"name": f"creds-{n}", "mountPath": "/creds"}])


def _poll(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.002)


@pytest.mark.parametrize("kill_point", ["acknowledged", "mounting", "detached"])
def test_kubelet_killed_mid_live_swap(k: Kubectl, hotplug_cluster: Cluster,
                                      kill_point: str) -> None:
    """kill -9 of the kubelet during a live swap (as soon as the API has it; once the new
    volume's host directory appears; once the runtime recorded the old mount detached):
    the restarted kubelet finishes it with the container untouched, nothing mounted twice
    in the container and nothing left on the host."""
    cluster = hotplug_cluster
    volumes, mounts = _task(1)
    secrets = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"creds-{n}"},
                "stringData": {"key": f"secret {n}"}} for n in (1, 2)]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
            "spec": {"terminationGracePeriodSeconds": 1, "volumes": volumes,
                     "containers": [_live(volumeMounts=mounts)]}}
    p = create_running(k, *secrets, body)
    uid, cid = p["metadata"]["uid"], container(p)["containerID"]
    started = exec_in(k, "w", "c", START_TIME)
    old_dirs = [volume_dir(cluster, uid, "empty-dir", "scratch-1"),
                volume_dir(cluster, uid, "secret", "creds-1")]
    new_dirs = [volume_dir(cluster, uid, "empty-dir", "scratch-2"),
                volume_dir(cluster, uid, "secret", "creds-2")]
    record = cluster.data_dir / "kubelet" / "pods" / uid / "containers" / "c" / "0" / \
        "container.json"
    volumes, mounts = _task(2)
    patch_dynamic(k, "w", [{"op": "add", "path": "/spec/volumes", "value": volumes},
                           {"op": "add", "path": "/spec/containers/0/volumeMounts",
                            "value": mounts}])
    if kill_point == "mounting":
        _poll(lambda: new_dirs[0].exists(), "scratch-2's host directory")
    elif kill_point == "detached":
        _poll(lambda: "scratch-1" not in record.read_text(), "scratch-1 detached")
    kill_kubelet(cluster)
    want = {("keep", "/keep"), ("scratch-2", "/scratch"), ("creds-2", "/creds")}
    after = wait_pod(k, "w", lambda p: _reported(p) == want and volume_phases(p) == dict.fromkeys(
        ("keep", "scratch-2", "creds-2"), "HostMounted"), "the live swap finished")
    assert (container(after)["containerID"], container(after)["restartCount"]) == (cid, 0)
    assert exec_in(k, "w", "c", START_TIME) == started
    seen = exec_in(k, "w", "c", "grep -E ' /(scratch|creds) ' /proc/mounts | "
                                "cut -d' ' -f2,3 | sort; cat /creds/key")
    assert seen.splitlines() == ["/creds tmpfs", "/scratch tmpfs", "secret 2"]
    wait(lambda: not any(d.exists() for d in old_dirs), "the old volumes torn down", cluster)
    assert sorted(mounts_under(cluster.data_dir / "kubelet" / "pods" / uid / "volumes")) == \
        sorted(str(d) for d in new_dirs)
    for directory in new_dirs:
        assert _host_clones(directory) == [str(directory)]  # the host mount itself only


def test_kubectl_explain_names_the_preview(k: Kubectl) -> None:
    explained = k("explain", "pod.spec.containers.dynamicVolumePolicy.restartPolicy").stdout
    text = " ".join(explained.split())  # kubectl wraps the description
    assert "NotRequired (ephemera's preview of the KEP's next milestone, feature gate " \
           "DynamicVolumeHotPlug)" in text
    assert "RestartContainer:" in text


def _cli(k: Kubectl, *args: str) -> subprocess.CompletedProcess[str]:
    """`ephemera dynamic` (the command `kubectl dynamic` runs) against the cluster."""
    return subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "dynamic", "-n", str(k.namespace),
         "--kubeconfig", str(k.cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=150, check=False,
        env={**os.environ, "HOME": str(k.home)})


def test_kubectl_dynamic_live_waits_for_the_live_mount(k: Kubectl) -> None:
    """`add-volume --live --wait` sets NotRequired on a RestartContainer container and returns
    once the same container has the mount; `remove-volume` then follows that policy."""
    restart = _live()
    restart["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}
    cid = container(_pod(k, restart))["containerID"]
    added = _cli(k, "add-volume", "w", "--emptydir", "extra", "--mount", "c:/extra", "--live",
                 "--wait")
    assert added.returncode == 0, added.stderr
    assert "pod/w: actuated in " in added.stdout
    p = pod_json(k, "w")
    assert p["spec"]["containers"][0]["dynamicVolumePolicy"] == NOT_REQUIRED
    assert ("extra", "/extra") in _reported(p) and container(p)["containerID"] == cid
    assert "/extra" in _mount_points(k)
    removed = _cli(k, "remove-volume", "w", "extra", "--wait")
    assert removed.returncode == 0, removed.stderr
    p = pod_json(k, "w")
    assert _reported(p) == {("keep", "/keep")} and container(p)["containerID"] == cid
    assert "/extra" not in _mount_points(k)

"""KEP-6395's four e2e cases on a real `ephemera up` with the real OCI runtime, through the
real kubectl (`patch --subresource=dynamic`, `exec`, `get --raw .../allocated`): an emptyDir
added, the container restarted in place and writing to it; a ConfigMap and a Secret added and
their keys seen as files; a volume removed and its host directory (a tmpfs) gone; a container
and a volume added together. Plus a change that cannot be allocated staying pending
(`Pending`, `Unallocated`, `FailedAllocation`) until another pod's deletion makes room; a
change reading a Secret that does not exist yet allocated all the same, its volume
`ErrorMounting` (a `FailedMount` event) and the container running as it was until the Secret
is created (found by the volume manager's retries); and a
removed volume's name refused while its teardown runs (`Unmounting`), accepted once pruned.

Container IDs (`status.containerStatuses[*].containerID`) tell which containers restarted.
One cluster for the module (one xdist group), a namespace per test.
"""

from __future__ import annotations

import json
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
    pod_json,
    running,
    volume_dir,
    volume_phases,
    wait,
    wait_pod,
)

from ephemera.api.quantity import quantity_from_json

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("kep6395-cases")]

NODE = "kep6395-cases-node"


cases_cluster, k = kubelet_cluster_fixtures("cases_cluster", "kep6395-cases", NODE,
                                            after_delete=assert_kubelet_clean)


def worker(name: str = "w", *volumes: dict[str, Any], script: str = LOOP,
           grace: int = 1) -> dict[str, Any]:
    """A pod whose container `c` (RestartContainer) mounts `keep` and `volumes` at
    `/<volume name>`."""
    all_volumes = [{"name": "keep", "emptyDir": {}}, *volumes]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": grace, "volumes": all_volumes,
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", script],
                                     "dynamicVolumePolicy": RESTART_CONTAINER,
                                     "volumeMounts": [{"name": v["name"],
                                                       "mountPath": f"/{v['name']}"}
                                                      for v in all_volumes]}]}}


def add_volume(volume: dict[str, Any], mount_path: str,
               read_only: bool = False) -> list[dict[str, Any]]:
    mount: dict[str, Any] = {"name": volume["name"], "mountPath": mount_path}
    if read_only:
        mount["readOnly"] = True
    return [{"op": "add", "path": "/spec/volumes/-", "value": volume},
            {"op": "add", "path": "/spec/containers/0/volumeMounts/-", "value": mount}]


def restarted(k: Kubectl, before: str, phases: dict[str, str],
              mounts: set[str]) -> dict[str, Any]:
    """Wait until `c` runs as a new container with `mounts`, the volumes in `phases`."""
    return wait_pod(k, "w", lambda p: container(p).get("containerID") != before and
                    running(p) and volume_phases(p) == phases and mounted_names(p) == mounts,
                    f"c restarted with {sorted(mounts)}, volumes {phases}")


def test_emptydir_added_then_the_restarted_container_writes_to_it(k: Kubectl) -> None:
    p = create_running(k, worker())
    first = container(p)["containerID"]
    patch_dynamic(k, "w", add_volume({"name": "scratch", "emptyDir": {}}, "/scratch"))
    after = restarted(k, first, {"keep": "HostMounted", "scratch": "HostMounted"},
                      {"keep", "scratch"})
    assert exec_in(k, "w", "c", "echo written > /scratch/out && cat /scratch/out") == \
        "written\n"
    host = volume_dir(k.cluster, after["metadata"]["uid"], "empty-dir", "scratch")
    assert (host / "out").read_text() == "written\n"
    assert [v["name"] for v in allocated_spec(k, "w")["volumes"]] == ["keep", "scratch"]


def test_configmap_and_secret_added_keys_are_files(k: Kubectl) -> None:
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
              "data": {"mode": "fast", "level": "3"}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token"},
              "stringData": {"password": "s3cret"}}
    p = create_running(k, config, secret, worker())
    first = container(p)["containerID"]
    patch_dynamic(k, "w", [
        *add_volume({"name": "settings", "configMap": {"name": "settings"}}, "/etc/settings",
                    read_only=True),
        *add_volume({"name": "token", "secret": {"secretName": "token"}}, "/etc/token",
                    read_only=True)])
    restarted(k, first, {"keep": "HostMounted", "settings": "HostMounted",
                         "token": "HostMounted"}, {"keep", "settings", "token"})
    seen = exec_in(k, "w", "c", "ls /etc/settings /etc/token; cat /etc/settings/mode; echo; "
                                "cat /etc/settings/level; echo; cat /etc/token/password; echo; "
                                "grep ' /etc/token ' /proc/mounts | cut -d' ' -f3,4 | "
                                "cut -d, -f1")
    assert seen.splitlines() == ["/etc/settings:", "level", "mode", "", "/etc/token:",
                                 "password", "fast", "3", "s3cret", "tmpfs ro"]


def test_volume_removed_and_its_host_directory_gone(k: Kubectl) -> None:
    p = create_running(k, worker("w", {"name": "mem", "emptyDir": {"medium": "Memory"}}))
    first, uid = container(p)["containerID"], p["metadata"]["uid"]
    exec_in(k, "w", "c", "echo data > /mem/file")
    host = volume_dir(k.cluster, uid, "empty-dir", "mem")
    assert mounts_under(host) == [str(host)]
    assert (host / "file").read_text() == "data\n"
    patch_dynamic(k, "w", [{"op": "remove", "path": "/spec/containers/0/volumeMounts/1"},
                           {"op": "remove", "path": "/spec/volumes/1"}])
    restarted(k, first, {"keep": "HostMounted"}, {"keep"})
    wait(lambda: not host.exists(), "the host directory to be removed", k.cluster)
    assert mounts_under(host) == []
    assert exec_in(k, "w", "c", "grep -c ' /mem ' /proc/mounts; ls /mem 2>&1 | wc -l") == \
        "0\n1\n"  # no mount; `ls` only complains
    assert [v["name"] for v in allocated_spec(k, "w")["volumes"]] == ["keep"]


def test_container_and_volume_added_together(k: Kubectl) -> None:
    p = create_running(k, worker())
    main = container(p)["containerID"]
    patch_dynamic(k, "w", [
        {"op": "add", "path": "/spec/volumes/-", "value": {"name": "tools", "emptyDir": {}}},
        {"op": "add", "path": "/spec/containers/-", "value": {
            "name": "tool", "image": "busybox", "command": ["sh", "-c", LOOP],
            "volumeMounts": [{"name": "tools", "mountPath": "/tools"},
                             {"name": "keep", "mountPath": "/keep"}]}}])
    after = wait_pod(k, "w", lambda p: running(p, "tool") and
                     volume_phases(p).get("tools") == "HostMounted", "tool running")
    assert mounted_names(after, "tool") == {"tools", "keep"}
    assert container(after)["containerID"] == main  # the main container was not touched
    assert container(after)["restartCount"] == 0
    assert exec_in(k, "w", "tool", "echo hi > /tools/x && cat /tools/x && "
                                   "echo shared > /keep/from-tool") == "hi\n"
    assert exec_in(k, "w", "c", "cat /keep/from-tool; test -e /tools || echo no-tools") == \
        "shared\nno-tools\n"
    assert [c["name"] for c in allocated_spec(k, "w")["containers"]] == ["c", "tool"]


def test_unallocatable_change_stays_pending_until_room_appears(k: Kubectl) -> None:
    node = json.loads(k.cluster.kubectl("get", "node", NODE, "-o", "json").stdout)
    allocatable = int(quantity_from_json(node["status"]["allocatable"]["memory"]).value())
    share = allocatable * 6 // 10  # two of these do not fit
    hog = worker("hog")
    hog["spec"]["containers"][0]["resources"] = {"requests": {"memory": str(share)}}
    create_running(k, hog)
    p = create_running(k, worker())
    main = container(p)["containerID"]
    patch_dynamic(k, "w", [
        {"op": "add", "path": "/spec/volumes/-",
         "value": {"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": str(share)}}},
        {"op": "add", "path": "/spec/containers/-", "value": {
            "name": "late", "image": "busybox", "command": ["sh", "-c", LOOP],
            "volumeMounts": [{"name": "ram", "mountPath": "/ram"}]}}])
    pending = wait_pod(k, "w", lambda p: volume_phases(p).get("ram") == "Pending" and
                       "waiting" in container(p, "late").get("state", {}), "the change pending")
    assert container(pending, "late")["state"]["waiting"] == {
        "reason": "Unallocated", "message": "Container addition pending node allocation"}
    events = wait(lambda: [e for e in k.json("get", "events", "--field-selector",
                                              "involvedObject.name=w")["items"]
                           if e["reason"] == "FailedAllocation"],
                  "a FailedAllocation event", k.cluster)
    assert [(e["type"], e["message"]) for e in events] == [
        ("Warning", f"Node didn't have enough resource: memory, requested: {share}, "
                    f"used: {share}, capacity: {allocatable}")]
    assert [c["name"] for c in allocated_spec(k, "w")["containers"]] == ["c"]
    assert not volume_dir(k.cluster, p["metadata"]["uid"], "empty-dir", "ram").exists()

    k("delete", "pod", "hog", "--grace-period=1", "--wait=true")
    after = wait_pod(k, "w", lambda p: running(p, "late") and
                     volume_phases(p).get("ram") == "HostMounted", "the change applied")
    assert container(after)["containerID"] == main
    assert mounted_names(after, "late") == {"ram"}
    assert [c["name"] for c in allocated_spec(k, "w")["containers"]] == ["c", "late"]
    assert exec_in(k, "w", "late", "grep ' /ram ' /proc/mounts | cut -d' ' -f3") == "tmpfs\n"


def test_change_needing_a_missing_secret_is_allocated_and_mounts_once_it_exists(
        k: Kubectl) -> None:
    p = create_running(k, worker())
    first = container(p)["containerID"]
    patch_dynamic(k, "w", add_volume({"name": "creds", "secret": {"secretName": "late"}},
                                     "/creds"))
    failing = wait_pod(k, "w", lambda p: volume_phases(p).get("creds") == "ErrorMounting",
                       "creds ErrorMounting")
    message = 'MountVolume.SetUp failed for volume "creds" : secret "late" not found'
    assert [v for v in failing["status"]["volumeStatuses"] if v["name"] == "creds"] == [
        {"name": "creds", "hostPhase": "ErrorMounting", "errorMessage": message}]
    assert [v["name"] for v in allocated_spec(k, "w")["volumes"]] == ["keep", "creds"]
    # KEP-6395 State 4: c keeps running as it was, without the mount
    assert container(failing)["containerID"] == first
    assert mounted_names(failing) == {"keep"}
    events = wait(lambda: [e for e in k.json("get", "events", "--field-selector",
                                              "involvedObject.name=w")["items"]
                           if e["reason"] == "FailedMount"],
                  "a FailedMount event", k.cluster)
    assert {(e["type"], e["message"]) for e in events} == {("Warning", message)}

    k("create", "secret", "generic", "late", "--from-literal=token=t0")
    restarted(k, first, {"keep": "HostMounted", "creds": "HostMounted"}, {"keep", "creds"})
    assert exec_in(k, "w", "c", "cat /creds/token") == "t0"


REUSE_REFUSED = ('The Pod "w" is invalid: spec.volumes[1].name: Duplicate value: "scratch": a '
                 "volume with this name is still reported in status.volumeStatuses; the name "
                 "can be reused once its teardown finished")


def test_volume_name_reused_only_after_teardown(k: Kubectl) -> None:
    # on SIGTERM `c` holds on until /keep/release exists: the old container, and so the
    # teardown of `scratch`, waits for the test
    p = create_running(k, worker("w", {"name": "scratch", "emptyDir": {}},
                                 script=holds_on_after_term("/keep/release"),
                                 grace=HOLD_GRACE))
    first = container(p)["containerID"]
    exec_in(k, "w", "c", "echo old > /scratch/old")
    scratch = {"name": "scratch", "emptyDir": {}}
    patch_dynamic(k, "w", [{"op": "remove", "path": "/spec/containers/0/volumeMounts/1"},
                           {"op": "remove", "path": "/spec/volumes/1"}])
    held = wait_pod(k, "w", lambda p: volume_phases(p).get("scratch") == "Unmounting",
                    "scratch Unmounting")
    refused = patch_dynamic(k, "w", add_volume(scratch, "/scratch"), check=False)
    assert (refused.returncode, refused.stdout, refused.stderr.strip()) == \
        (1, "", REUSE_REFUSED)
    assert volume_phases(pod_json(k, "w")).get("scratch") == "Unmounting"  # still held
    assert container(pod_json(k, "w"))["containerID"] == first
    (volume_dir(k.cluster, held["metadata"]["uid"], "empty-dir", "keep") / "release").touch()

    second = restarted(k, first, {"keep": "HostMounted"}, {"keep"})
    assert pod_json(k, "w")["spec"]["volumes"] == [{"name": "keep", "emptyDir": {}}]
    assert patch_dynamic(k, "w", add_volume(scratch, "/scratch")).stdout == \
        "pod/w patched\n"
    restarted(k, container(second)["containerID"],
              {"keep": "HostMounted", "scratch": "HostMounted"}, {"keep", "scratch"})
    assert exec_in(k, "w", "c", "ls -A /scratch | wc -l") == "0\n"  # a fresh volume

"""The volume manager end to end with real mounts: desired and actual state, the
reconciler, waiting for a pod's volumes (and upstream's FailedMount message on time-out),
per-volume errors and retries with back-off, periodic resync of ConfigMaps and Secrets,
adding and removing volumes of a running pod behind the in-use check, teardown leaving
nothing behind, and a restarted manager adopting what is on disk."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from volumes_testing import (
    FakeVolumeHost,
    cleanup_mounts,
    fs_type,
    make_pod,
    mounts_under,
    read_tree,
    statvfs_size,
)

from ephemera.kubelet.volumes import VolumeManager, VolumeMountTimeout
from ephemera.kubelet.volumes import manager as manager_module
from ephemera.kubelet.volumes.manager import backoff_delay

MiB = 1024 * 1024
UID = "11111111-2222-3333-4444-555555555555"


class Running:
    """A VolumeManager with its reconciler running as a task."""

    def __init__(self, root: Path, host: FakeVolumeHost, **kwargs: Any) -> None:
        kwargs.setdefault("sync_period", 0.3)
        kwargs.setdefault("reconcile_period", 0.02)
        kwargs.setdefault("backoff_initial", 0.05)
        kwargs.setdefault("backoff_max", 0.4)
        self.vm = VolumeManager(root, host, **kwargs)
        self.task: asyncio.Task[None] | None = None

    def start(self) -> VolumeManager:
        self.task = asyncio.create_task(self.vm.run())
        return self.vm

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "kubelet"


@pytest.fixture
def host() -> FakeVolumeHost:
    return FakeVolumeHost()


@pytest.fixture
async def manager(root: Path, host: FakeVolumeHost) -> AsyncIterator[Running]:
    running = Running(root, host)
    running.start()
    try:
        yield running
    finally:
        await running.stop()
        await running.vm.teardown_all()
        left = cleanup_mounts(root.parent)
        assert left == [], f"mounts left behind: {left}"


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until `check()` holds (a deadline against hanging, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


def all_volumes(host: FakeVolumeHost) -> list[dict[str, Any]]:
    host.put_configmap("cfg", {"greeting": "hello"})
    host.put_secret("sec", {"password": b"s3cret"})
    return [
        {"name": "scratch", "emptyDir": {}},
        {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "4Mi"}},
        {"name": "cfg", "configMap": {"name": "cfg"}},
        {"name": "sec", "secret": {"secretName": "sec"}},
        {
            "name": "meta",
            "downwardAPI": {
                "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
            },
        },
        {
            "name": "proj",
            "projected": {"sources": [{"configMap": {"name": "cfg"}}, {"secret": {"name": "sec"}}]},
        },
    ]


async def test_pod_with_every_volume_type_mounts(
    manager: Running, host: FakeVolumeHost, root: Path
) -> None:
    vm = manager.vm
    volumes = [*all_volumes(host), {"name": "unused", "emptyDir": {}}]
    pod = make_pod(volumes, labels={"app": "demo"}, mounted=[v["name"] for v in volumes[:-1]])
    notified: list[str] = []
    vm.subscribe(notified.append)
    vm.set_desired_pods([pod])
    await vm.wait_for_pod_volumes(pod, timeout=10)

    mounted = vm.mounted_volumes(UID)
    assert sorted(mounted) == ["cfg", "mem", "meta", "proj", "scratch", "sec"]
    base = root / "pods" / UID / "volumes"
    assert mounted["scratch"] == base / "kubernetes.io~empty-dir" / "scratch"
    assert mounted["cfg"] == base / "kubernetes.io~configmap" / "cfg"
    assert mounted["sec"] == base / "kubernetes.io~secret" / "sec"
    assert mounted["meta"] == base / "kubernetes.io~downward-api" / "meta"
    assert mounted["proj"] == base / "kubernetes.io~projected" / "proj"
    assert read_tree(mounted["cfg"]) == {"greeting": b"hello"}
    assert read_tree(mounted["sec"]) == {"password": b"s3cret"}
    assert read_tree(mounted["meta"]) == {"labels": b'app="demo"'}
    assert read_tree(mounted["proj"]) == {"greeting": b"hello", "password": b"s3cret"}
    assert statvfs_size(mounted["mem"]) == 4 * MiB
    assert {fs_type(mounted[n]) for n in ("mem", "sec", "meta", "proj")} == {"tmpfs"}
    assert not (base / "kubernetes.io~empty-dir" / "unused").exists()  # never set up
    assert vm.volume_errors(UID) == {}
    assert {s["name"]: s["hostPhase"] for s in vm.volume_statuses(UID)} == dict.fromkeys(
        mounted, "HostMounted"
    )
    assert UID in notified

    # the pod goes away: everything is torn down and its directories removed
    vm.set_desired_pods([])
    await eventually(lambda: not vm.has_volumes_on_disk(UID))
    assert mounts_under(root) == []
    assert not (root / "pods" / UID).exists()
    assert vm.mounted_volumes(UID) == {}


async def test_missing_configmap_fails_with_upstream_message_then_recovers(
    manager: Running, host: FakeVolumeHost
) -> None:
    vm = manager.vm
    host.put_configmap("present", {"k": "v"})
    pod = make_pod(
        [
            {"name": "ok", "configMap": {"name": "present"}},
            {"name": "broken", "configMap": {"name": "redis-conig"}},
            {"name": "scratch", "emptyDir": {}},
        ]
    )
    events: list[str] = []
    vm.subscribe(events.append)
    vm.set_desired_pods([pod])
    with pytest.raises(VolumeMountTimeout) as info:
        await vm.wait_for_pod_volumes(pod, timeout=0.5)
    assert str(info.value) == (
        "Unable to attach or mount volumes: unmounted volumes=[broken], "
        "unattached volumes=[], failed to process volumes=[]: context deadline exceeded"
    )
    assert info.value.reason == "FailedMount"
    assert vm.volume_errors(UID) == {
        "broken": 'MountVolume.SetUp failed for volume "broken" : configmap "redis-conig" not found'
    }
    statuses = {s["name"]: s for s in vm.volume_statuses(UID)}
    assert statuses["broken"]["hostPhase"] == "ErrorMounting"
    assert statuses["broken"]["errorMessage"].endswith('configmap "redis-conig" not found')
    assert statuses["ok"]["hostPhase"] == "HostMounted"
    assert sorted(vm.mounted_volumes(UID)) == ["ok", "scratch"]
    assert UID in events

    # retried with back-off while missing
    await eventually(lambda: vm.volume_failures(UID, "broken") >= 3)
    attempts = [c for c in host.calls if c[2] == "redis-conig"]
    assert len(attempts) >= 3

    host.put_configmap("redis-conig", {"redis.conf": "maxmemory 1mb"})
    await vm.wait_for_pod_volumes(pod, timeout=10)
    assert read_tree(vm.mounted_volumes(UID)["broken"]) == {"redis.conf": b"maxmemory 1mb"}
    assert vm.volume_errors(UID) == {}
    assert vm.volume_failures(UID, "broken") == 0


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_delay(n, 0.5, 122.0) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff_delay(20, 0.5, 122.0) == 122.0


async def test_unsupported_volume_fails_fast(manager: Running) -> None:
    vm = manager.vm
    pod = make_pod([{"name": "host", "hostPath": {"path": "/etc"}}, {"name": "e", "emptyDir": {}}])
    vm.set_desired_pods([pod])
    await eventually(lambda: vm.is_volume_mounted(UID, "e"))
    with pytest.raises(VolumeMountTimeout) as info:
        await vm.wait_for_pod_volumes(pod, timeout=30)
    assert str(info.value) == (
        "Unable to attach or mount volumes: unmounted volumes=[host], unattached volumes=[], "
        'failed to process volumes=[host]: failed to get Plugin from volumeSpec for volume "host" '
        "err=no volume plugin matched"
    )
    assert vm.volume_errors(UID)["host"].startswith(
        'failed to get Plugin from volumeSpec for volume "host"'
    )


async def test_configmap_and_secret_updates_reach_the_files(
    manager: Running, host: FakeVolumeHost
) -> None:
    vm = manager.vm
    host.put_configmap("cfg", {"k": "v1"})
    host.put_secret("sec", {"token": b"t1"})
    pod = make_pod(
        [
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "sec", "secret": {"secretName": "sec"}},
        ]
    )
    vm.set_desired_pods([pod])
    await vm.wait_for_pod_volumes(pod, timeout=10)
    dirs = vm.mounted_volumes(UID)
    cfg_ts = os.readlink(dirs["cfg"] / "..data")

    # resyncs with nothing changed do not rewrite
    calls = len(host.calls)
    await eventually(lambda: len(host.calls) >= calls + 4)
    assert os.readlink(dirs["cfg"] / "..data") == cfg_ts

    with open(dirs["sec"] / "token", "rb") as held:
        host.put_secret("sec", {"token": b"t2", "extra": b"e"})
        host.put_configmap("cfg", {"k": "v2"})
        await eventually(lambda: read_tree(dirs["sec"]) == {"token": b"t2", "extra": b"e"})
        await eventually(lambda: read_tree(dirs["cfg"]) == {"k": b"v2"})
        assert held.read() == b"t1"  # an open reader keeps the old payload
    assert os.readlink(dirs["cfg"] / "..data") != cfg_ts
    assert fs_type(dirs["sec"]) == "tmpfs"
    assert len(mounts_under(dirs["sec"])) == 1  # resync did not stack mounts

    # the object is deleted: the volume keeps its last contents and reports the error
    del host.configmaps[("default", "cfg")]
    await eventually(lambda: "cfg" in vm.volume_errors(UID))
    assert read_tree(dirs["cfg"]) == {"k": b"v2"}
    assert "cfg" in vm.mounted_volumes(UID)


async def test_downward_api_follows_label_changes(manager: Running) -> None:
    vm = manager.vm
    items = [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
    pod = make_pod([{"name": "meta", "downwardAPI": {"items": items}}], labels={"v": "1"})
    vm.set_desired_pods([pod])
    await vm.wait_for_pod_volumes(pod, timeout=10)
    d = vm.mounted_volumes(UID)["meta"]
    assert read_tree(d) == {"labels": b'v="1"'}
    updated = copy.deepcopy(pod)
    updated["metadata"]["labels"] = {"v": "2", "new": "yes"}
    vm.set_desired_pods([updated])
    await eventually(lambda: read_tree(d) == {"labels": b'new="yes"\nv="2"'})


async def test_add_and_remove_volumes_of_a_running_pod(
    manager: Running, host: FakeVolumeHost, root: Path
) -> None:
    vm = manager.vm
    in_use: set[tuple[str, str]] = set()
    checks: list[tuple[str, str]] = []

    async def checker(uid: str, name: str) -> bool:
        checks.append((uid, name))
        return (uid, name) in in_use

    vm.set_in_use_checker(checker)
    host.put_secret("sec", {"a": b"1"})
    pod = make_pod(
        [
            {"name": "keep", "emptyDir": {"medium": "Memory", "sizeLimit": "2Mi"}},
            {"name": "sec", "secret": {"secretName": "sec"}},
        ]
    )
    vm.set_desired_pods([pod])
    await vm.wait_for_pod_volumes(pod, timeout=10)
    keep = vm.mounted_volumes(UID)["keep"]
    (keep / "state").write_text("survives")
    keep_mount_id = [m for m in mounts_under(keep)]

    # add a volume: it is mounted, the others are untouched
    added = copy.deepcopy(pod)
    added["spec"]["volumes"].append({"name": "extra", "emptyDir": {"medium": "Memory"}})
    added["spec"]["containers"][0]["volumeMounts"].append({"name": "extra", "mountPath": "/x"})
    vm.set_desired_pods([added])
    await eventually(lambda: vm.is_volume_mounted(UID, "extra"))
    assert (keep / "state").read_text() == "survives"
    assert mounts_under(keep) == keep_mount_id
    assert fs_type(vm.mounted_volumes(UID)["extra"]) == "tmpfs"

    # remove the secret volume while a container still uses it: it waits, as Unmounting
    sec_dir = vm.mounted_volumes(UID)["sec"]
    in_use.add((UID, "sec"))
    removed = copy.deepcopy(added)
    removed["spec"]["volumes"] = [v for v in removed["spec"]["volumes"] if v["name"] != "sec"]
    removed["spec"]["containers"][0]["volumeMounts"] = [
        m for m in removed["spec"]["containers"][0]["volumeMounts"] if m["name"] != "sec"
    ]
    vm.set_desired_pods([removed])
    await eventually(lambda: checks.count((UID, "sec")) >= 3)
    assert fs_type(sec_dir) == "tmpfs" and read_tree(sec_dir) == {"a": b"1"}
    assert "sec" not in vm.mounted_volumes(UID)
    assert {s["name"]: s["hostPhase"] for s in vm.volume_statuses(UID)} == {
        "keep": "HostMounted",
        "extra": "HostMounted",
        "sec": "Unmounting",
    }

    # the container stopped using it: torn down, the other volumes stay mounted
    in_use.clear()
    # the directory goes first, then the actual state forgets the volume: wait for both
    await eventually(lambda: not sec_dir.exists()
                     and [s["name"] for s in vm.volume_statuses(UID)] == ["keep", "extra"])
    assert mounts_under(sec_dir) == []
    assert (keep / "state").read_text() == "survives"
    assert sorted(vm.mounted_volumes(UID)) == ["extra", "keep"]
    assert (root / "pods" / UID / "volumes" / "kubernetes.io~empty-dir").is_dir()


async def test_readding_a_name_with_another_source_replaces_the_volume(
    manager: Running, host: FakeVolumeHost
) -> None:
    vm = manager.vm
    host.put_configmap("one", {"which": "one"})
    host.put_configmap("two", {"which": "two"})
    pod = make_pod([{"name": "cfg", "configMap": {"name": "one"}}])
    vm.set_desired_pods([pod])
    await vm.wait_for_pod_volumes(pod, timeout=10)
    d = vm.mounted_volumes(UID)["cfg"]
    changed = copy.deepcopy(pod)
    changed["spec"]["volumes"][0]["configMap"]["name"] = "two"
    vm.set_desired_pods([changed])
    await vm.wait_for_pod_volumes(changed, timeout=10)
    assert read_tree(vm.mounted_volumes(UID)["cfg"]) == {"which": b"two"}
    assert vm.mounted_volumes(UID)["cfg"] == d


async def test_teardown_pod_leaves_nothing_and_is_final(
    manager: Running, host: FakeVolumeHost, root: Path
) -> None:
    vm = manager.vm
    pod = make_pod(all_volumes(host))
    vm.set_desired_pods([pod])
    await vm.wait_for_pod_volumes(pod, timeout=10)
    assert len(mounts_under(root)) == 4  # mem, sec, meta, proj
    await vm.teardown_pod(UID)
    assert mounts_under(root) == []
    assert not (root / "pods" / UID).exists()
    vm.set_desired_pods([pod])  # a deleted pod's UID never comes back
    await asyncio.sleep(0.1)
    assert not (root / "pods" / UID).exists()
    assert vm.mounted_volumes(UID) == {}


async def test_restarted_manager_adopts_volumes_and_cleans_orphans(
    root: Path, host: FakeVolumeHost
) -> None:
    first = Running(root, host)
    vm = first.start()
    keep = make_pod(
        [{"name": "mem", "emptyDir": {"medium": "Memory"}}, {"name": "disk", "emptyDir": {}}]
    )
    orphan_uid = "99999999-2222-3333-4444-555555555555"
    orphan = make_pod(
        [{"name": "mem", "emptyDir": {"medium": "Memory"}}], uid=orphan_uid, name="p2"
    )
    try:
        vm.set_desired_pods([keep, orphan])
        await vm.wait_for_pod_volumes(keep, timeout=10)
        await vm.wait_for_pod_volumes(orphan, timeout=10)
        mem = vm.mounted_volumes(UID)["mem"]
        (mem / "data").write_text("in memory")
        (vm.mounted_volumes(UID)["disk"] / "data").write_text("on disk")
        await first.stop()  # the kubelet dies; its mounts stay

        second = Running(root, host)
        vm2 = second.start()
        try:
            await asyncio.sleep(0.1)
            # before the sources are ready, nothing is torn down
            assert (root / "pods" / orphan_uid).exists()
            vm2.set_desired_pods([keep])
            await vm2.wait_for_pod_volumes(keep, timeout=10)
            assert (mem / "data").read_text() == "in memory"
            assert len(mounts_under(mem)) == 1  # adopted, not mounted again
            assert (vm2.mounted_volumes(UID)["disk"] / "data").read_text() == "on disk"
            await eventually(lambda: not (root / "pods" / orphan_uid).exists())
        finally:
            await second.stop()
            await vm2.teardown_all()
    finally:
        await first.stop()
        cleanup_mounts(root.parent)
    assert mounts_under(root) == []
    assert not (root / "pods" / UID).exists()


async def test_failed_volume_waits_for_its_back_off(root: Path, host: FakeVolumeHost) -> None:
    """A long back-off holds the retry; an async subscriber hears of the failure."""
    running = Running(root, host, backoff_initial=30.0, backoff_max=60.0)
    vm = running.start()
    heard: list[str] = []

    async def subscriber(uid: str) -> None:
        heard.append(uid)

    vm.subscribe(subscriber)
    try:
        pod = make_pod([{"name": "cfg", "configMap": {"name": "later"}}])
        vm.set_desired_pods([pod])
        await eventually(lambda: vm.volume_failures(UID, "cfg") == 1)
        await eventually(lambda: heard == [UID])
        host.put_configmap("later", {"k": "v"})
        with pytest.raises(VolumeMountTimeout):
            await vm.wait_for_pod_volumes(pod, timeout=0.3)
        assert [c for c in host.calls if c[2] == "later"] == [("configmap", "default", "later")]
        assert vm.volume_failures(UID, "cfg") == 1
    finally:
        await running.stop()
        await vm.teardown_all()
    assert mounts_under(root) == []


async def test_a_changes_volumes_are_set_up_early_and_dropped_when_not_allocated(
    manager: Running, host: FakeVolumeHost
) -> None:
    """While a change's checkpoint is written (`set_staged_source`, `staging_changed`) its
    new emptyDir, Secret and
    ConfigMap volumes are set up (not reported in `volumeStatuses`, the pod's worker not
    woken, not other kinds, not unreferenced ones); dropped, they are torn down; kept by
    the allocated pod, they stay mounted as they are."""
    vm = manager.vm
    host.put_secret("sec", {"token": b"t1"})
    pod = make_pod([{"name": "keep", "emptyDir": {}}])
    vm.set_desired_pods([pod])
    await vm.wait_for_pod_volumes(pod, timeout=10)
    change = copy.deepcopy(pod)
    change["spec"]["volumes"] += [
        {"name": "sec", "secret": {"secretName": "sec"}},
        {"name": "meta", "downwardAPI": {
            "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"name": "unused", "emptyDir": {}},
    ]
    change["spec"]["containers"][0]["volumeMounts"] += [
        {"name": "sec", "mountPath": "/sec"}, {"name": "meta", "mountPath": "/meta"}]

    staged: dict[str, dict[str, Any]] = {}
    vm.set_staged_source(staged.get)

    def stage(view: dict[str, Any] | None) -> None:
        if view is None:
            del staged[UID]
        else:
            staged[UID] = view
        vm.staging_changed(UID)

    notified: list[str] = []
    vm.subscribe(notified.append)
    stage(change)
    await eventually(lambda: vm.is_volume_mounted(UID, "sec"))
    assert notified == []  # the pod's worker cannot use it yet: not woken
    sec_dir = vm.mounted_volumes(UID)["sec"]
    assert read_tree(sec_dir) == {"token": b"t1"}
    assert sorted(vm.mounted_volumes(UID)) == ["keep", "sec"]  # not meta, not unused
    assert vm.volume_statuses(UID) == [{"name": "keep", "hostPhase": "HostMounted"}]
    # another pod's change recomputes the desired state: the early volume stays desired
    vm.set_desired_pods([pod])
    assert vm.volume_statuses(UID) == [{"name": "keep", "hostPhase": "HostMounted"}]

    # the write failed: dropped, torn down
    stage(None)
    await eventually(lambda: not sec_dir.exists()
                     and vm.volume_statuses(UID) == [{"name": "keep",
                                                      "hostPhase": "HostMounted"}])
    assert mounts_under(sec_dir) == []

    # set up early again, then allocated: the same mount stays (nothing set up twice)
    stage(change)
    await eventually(lambda: vm.is_volume_mounted(UID, "sec"))
    mount = mounts_under(vm.mounted_volumes(UID)["sec"])
    stage(None)
    vm.set_desired_pods([change])
    await vm.wait_for_pod_volumes(change, timeout=10)
    assert mounts_under(vm.mounted_volumes(UID)["sec"]) == mount
    assert {s["name"]: s["hostPhase"] for s in vm.volume_statuses(UID)} == {
        "keep": "HostMounted", "sec": "HostMounted", "meta": "HostMounted"}


def test_desired_pods_are_processed_again_only_when_they_change(
    root: Path, host: FakeVolumeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`set_desired_pods` runs at every pod change of the node with every pod: the pods
    given as the same objects keep their desired state (no fingerprinting again), a new
    object is processed again (only its new or changed volumes fingerprinted: an equal
    volume keeps its fingerprint), and so is every pod while a change of it is being written
    (its early volumes come and go with the staging, not with the object)."""
    fingerprinted: list[str] = []
    real = manager_module._fingerprint

    def counting(volume: Any) -> str:
        fingerprinted.append(str(volume.get("name")))
        return real(volume)

    monkeypatch.setattr(manager_module, "_fingerprint", counting)
    vm = VolumeManager(root, host)  # the reconciler is not needed: desired state only
    a = make_pod([{"name": "a1", "emptyDir": {}}], uid="uid-a", name="a")
    b = make_pod([{"name": "b1", "emptyDir": {}}], uid="uid-b", name="b")
    vm.set_desired_pods([a, b])
    assert sorted(fingerprinted) == ["a1", "b1"]
    fingerprinted.clear()
    b2 = make_pod([{"name": "b1", "emptyDir": {}}, {"name": "b2", "emptyDir": {}}],
                  uid="uid-b", name="b")
    vm.set_desired_pods([a, b2])
    assert sorted(fingerprinted) == ["b2"]  # not a's again, nor b's unchanged b1
    assert [s["name"] for s in vm.volume_statuses("uid-b")] == ["b1", "b2"]
    assert [s["name"] for s in vm.volume_statuses("uid-a")] == ["a1"]
    fingerprinted.clear()
    vm.set_desired_pods([a, b2])
    assert fingerprinted == []

    # a change of a is being written: its early volume is desired while it is, even though
    # the pod object given stays the same, and not once the writing ended
    change = copy.deepcopy(a)
    change["spec"]["volumes"].append({"name": "early", "emptyDir": {}})
    change["spec"]["containers"][0]["volumeMounts"].append(
        {"name": "early", "mountPath": "/early"})
    staged: dict[str, dict[str, Any]] = {"uid-a": change}
    vm.set_staged_source(staged.get)
    vm.set_desired_pods([a, b2])
    assert "early" in fingerprinted
    assert sorted(vm._dsw["uid-a"].volumes) == ["a1", "early"]
    staged.clear()
    fingerprinted.clear()
    vm.set_desired_pods([a, b2])
    # a processed again (it held an early volume: gone now, below), its unchanged a1
    # keeping its fingerprint; b2 not processed
    assert fingerprinted == []
    assert sorted(vm._dsw["uid-a"].volumes) == ["a1"]
    assert [s["name"] for s in vm.volume_statuses("uid-a")] == ["a1"]


async def _settle(vm: VolumeManager) -> None:
    """One reconciler pass and every operation it started (the reconciler is not running)."""
    await vm.reconcile_once()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await asyncio.gather(*others)


async def test_an_early_volume_is_not_set_up_again_when_its_change_is_allocated(
    root: Path, host: FakeVolumeHost
) -> None:
    """The allocation of a change bumps the pod's version, which sets its Secret and
    ConfigMap volumes up again; one set up early for that change (in sync at the version
    before) is not set up a second time, whether its setup ended before the allocation or
    was still running. A Secret changed in between still reaches it."""
    vm = VolumeManager(root, host, sync_period=3600.0, reconcile_period=3600.0)
    try:
        for secret in ("sec", "slow"):
            host.put_secret(secret, {"token": b"t1"})
        pod = make_pod([{"name": "keep", "emptyDir": {}}])
        vm.set_desired_pods([pod])
        await _settle(vm)
        change = copy.deepcopy(pod)
        change["spec"]["volumes"] += [{"name": n, "secret": {"secretName": n}}
                                      for n in ("sec", "slow")]
        change["spec"]["containers"][0]["volumeMounts"] += [
            {"name": n, "mountPath": f"/{n}"} for n in ("sec", "slow")]
        staged: dict[str, dict[str, Any]] = {}
        vm.set_staged_source(staged.get)

        def reads(name: str) -> int:
            return host.calls.count(("secret", "default", name))

        # "slow"'s early setup is still under way when the change is allocated
        release = asyncio.Event()
        get_secret = host.get_secret

        async def held_get_secret(namespace: str, name: str) -> dict[str, Any] | None:
            if name == "slow" and reads("slow") == 0:
                host.calls.append(("secret", namespace, name))
                await release.wait()
                return copy.deepcopy(host.secrets.get((namespace, name)))
            return await get_secret(namespace, name)

        host.get_secret = held_get_secret  # type: ignore[method-assign]
        staged[UID] = change
        vm.staging_changed(UID)
        await vm.reconcile_once()
        await eventually(lambda: vm.is_volume_mounted(UID, "sec") and reads("slow") == 1)
        # allocated (as `AllocationManager` does: staging ends, the allocated pod follows)
        del staged[UID]
        vm.staging_changed(UID)
        vm.set_desired_pods([change])
        release.set()
        await _settle(vm)
        await _settle(vm)
        assert vm.is_volume_mounted(UID, "slow")
        assert (reads("sec"), reads("slow")) == (1, 1)

        # a Secret change still reaches an early volume
        host.put_secret("sec", {"token": b"t2"})
        vm.resync_pod(UID)
        await _settle(vm)
        assert read_tree(vm.mounted_volumes(UID)["sec"]) == {"token": b"t2"}
        assert (reads("sec"), reads("slow")) == (2, 2)  # the pod's resyncing volumes
        # and a later change of the pod's spec sets them up again, as before
        later = copy.deepcopy(change)
        later["metadata"].setdefault("labels", {})["changed"] = "yes"
        vm.set_desired_pods([later])
        await _settle(vm)
        assert (reads("sec"), reads("slow")) == (3, 3)
    finally:
        await vm.teardown_all()
        assert cleanup_mounts(root.parent) == []


async def test_a_settled_reconciler_sleeps_until_a_resync_or_back_off_is_due(
    root: Path, host: FakeVolumeHost
) -> None:
    """With every volume mounted, a pass says when the next one is due: the earliest
    periodic resync (resyncs due within the slack run together); a failed setup's back-off
    expiry; and None (poll) while a teardown waits for its volume to go out of use."""
    vm = VolumeManager(root, host, sync_period=60.0, reconcile_period=3600.0)
    try:
        host.put_secret("sec", {"token": b"t1"})
        pod = make_pod([{"name": "sec", "secret": {"secretName": "sec"}},
                        {"name": "scratch", "emptyDir": {}}])
        vm.set_desired_pods([pod])
        await _settle(vm)
        assert vm.is_volume_mounted(UID, "sec") and vm.is_volume_mounted(UID, "scratch")
        synced = vm._asw[(UID, "sec")].last_sync
        due = await vm.reconcile_once()
        assert due == pytest.approx(synced + 60.0)  # the Secret's resync; emptyDir none
        reads = host.calls.count(("secret", "default", "sec"))
        vm._asw[(UID, "sec")].last_sync -= 55.0  # due in 5 s: within the 10 s slack
        await _settle(vm)
        assert host.calls.count(("secret", "default", "sec")) == reads + 1

        # a volume whose setup fails is retried when its back-off expires
        failing = make_pod([{"name": "sec", "secret": {"secretName": "sec"}},
                            {"name": "missing", "secret": {"secretName": "missing"}}])
        vm.set_desired_pods([failing])
        await _settle(vm)
        retry_at = vm._op_states[(UID, "missing")].retry_at
        assert await vm.reconcile_once() == pytest.approx(retry_at)

        # a volume no longer desired but still in use: the pass cannot say when it may go
        vm.set_desired_pods([pod])
        await _settle(vm)
        assert vm.is_volume_mounted(UID, "scratch")
        in_use = True

        async def checker(uid: str, name: str) -> bool:
            return in_use

        vm.set_in_use_checker(checker)
        vm.set_desired_pods([make_pod([{"name": "sec", "secret": {"secretName": "sec"}}])])
        assert await vm.reconcile_once() is None
        assert vm._asw[(UID, "scratch")] is not None
        in_use = False
        await _settle(vm)
        assert (UID, "scratch") not in vm._asw
    finally:
        await vm.teardown_all()
        cleanup_mounts(root.parent)

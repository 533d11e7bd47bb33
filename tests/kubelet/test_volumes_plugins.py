"""Each volume plugin on its own, with real mounts under tmp_path: files, modes, symlink
layout, optional vs missing, tmpfs sizes, read-only image views, and teardown leaving
nothing behind."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from volumes_testing import (
    NODE_MEMORY,
    FakeVolumeHost,
    cleanup_mounts,
    fs_type,
    make_pod,
    mounts_under,
    read_tree,
    statvfs_size,
)

from ephemera.kubelet.images import ImageStore
from ephemera.kubelet.volumes import VolumeSetupError
from ephemera.kubelet.volumes.base import VolumePlugin
from ephemera.kubelet.volumes.configmap import ConfigMapPlugin
from ephemera.kubelet.volumes.downwardapi import DownwardAPIPlugin, format_map
from ephemera.kubelet.volumes.emptydir import EmptyDirPlugin
from ephemera.kubelet.volumes.image import ImagePlugin
from ephemera.kubelet.volumes.projected import ProjectedPlugin
from ephemera.kubelet.volumes.secret import SecretPlugin

MiB = 1024 * 1024


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    left = cleanup_mounts(tmp_path)
    assert left == [], f"test left mounts: {left}"


@pytest.fixture
def host() -> FakeVolumeHost:
    return FakeVolumeHost()


async def setup_volume(
    plugin: VolumePlugin, pod: dict[str, Any], host: FakeVolumeHost, root: Path
) -> Path:
    volume = pod["spec"]["volumes"][0]
    host_dir = root / "pods" / "uid" / "volumes" / plugin.dir_name / volume["name"]
    await plugin.setup(pod, volume, host_dir, host)
    return host_dir


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# -- configMap ------------------------------------------------------------------------------


async def test_configmap_all_keys_default_mode_on_disk(root: Path, host: FakeVolumeHost) -> None:
    host.put_configmap("cfg", {"app.conf": "a=1\n", "other": "x"}, binary={"bin": b"\x00\xff"})
    pod = make_pod([{"name": "c", "configMap": {"name": "cfg"}}])
    d = await setup_volume(ConfigMapPlugin(), pod, host, root)
    assert read_tree(d) == {"app.conf": b"a=1\n", "other": b"x", "bin": b"\x00\xff"}
    assert os.readlink(d / "app.conf") == "..data/app.conf"
    assert {mode_of(d / k) for k in ("app.conf", "other", "bin")} == {0o644}
    assert d.relative_to(root).parts[3] == "kubernetes.io~configmap"
    assert fs_type(d) is None  # configMap lives on the node's disk, not a tmpfs
    assert mode_of(d) == 0o777


async def test_configmap_items_paths_and_modes(root: Path, host: FakeVolumeHost) -> None:
    host.put_configmap("cfg", {"k1": "one", "k2": "two", "k3": "three"})
    source = {
        "name": "cfg",
        "defaultMode": 0o640,
        "items": [
            {"key": "k1", "path": "sub/dir/one.txt", "mode": 0o400},
            {"key": "k2", "path": "two"},
        ],
    }
    d = await setup_volume(
        ConfigMapPlugin(), make_pod([{"name": "c", "configMap": source}]), host, root
    )
    assert read_tree(d) == {"sub/dir/one.txt": b"one", "two": b"two"}
    assert mode_of(d / "sub" / "dir" / "one.txt") == 0o400
    assert mode_of(d / "two") == 0o640
    assert os.readlink(d / "sub") == "..data/sub"


async def test_configmap_missing_key(root: Path, host: FakeVolumeHost) -> None:
    host.put_configmap("cfg", {"k1": "one"})
    items = [{"key": "k1", "path": "one"}, {"key": "nope", "path": "nope"}]
    pod = make_pod([{"name": "c", "configMap": {"name": "cfg", "items": items}}])
    with pytest.raises(VolumeSetupError) as info:
        await setup_volume(ConfigMapPlugin(), pod, host, root)
    assert str(info.value) == "configmap references non-existent config key: nope"

    pod["spec"]["volumes"][0]["configMap"]["optional"] = True
    d = await setup_volume(ConfigMapPlugin(), pod, host, root)
    assert read_tree(d) == {"one": b"one"}


async def test_configmap_missing_object_vs_optional(root: Path, host: FakeVolumeHost) -> None:
    pod = make_pod([{"name": "c", "configMap": {"name": "absent"}}])
    with pytest.raises(VolumeSetupError) as info:
        await setup_volume(ConfigMapPlugin(), pod, host, root)
    assert str(info.value) == 'configmap "absent" not found'

    pod["spec"]["volumes"][0]["configMap"]["optional"] = True
    d = await setup_volume(ConfigMapPlugin(), pod, host, root)
    assert read_tree(d) == {}
    assert os.path.islink(d / "..data")


# -- secret ---------------------------------------------------------------------------------


async def test_secret_on_tmpfs_decoded_with_modes(root: Path, host: FakeVolumeHost) -> None:
    host.put_secret("s", {"password": b"hunter2", "token": b"\x01\x02"})
    pod = make_pod([{"name": "s", "secret": {"secretName": "s", "defaultMode": 0o400}}])
    d = await setup_volume(SecretPlugin(), pod, host, root)
    assert fs_type(d) == "tmpfs"
    assert read_tree(d) == {"password": b"hunter2", "token": b"\x01\x02"}
    assert mode_of(d / "password") == 0o400
    assert os.readlink(d / "token") == "..data/token"
    assert statvfs_size(d) == NODE_MEMORY  # sized by node allocatable (no pod limit)

    # setup again: same tmpfs (not stacked), no rewrite
    ts = os.readlink(d / "..data")
    await SecretPlugin().setup(pod, pod["spec"]["volumes"][0], d, host)
    assert mounts_under(d) == [os.path.realpath(d)]
    assert os.readlink(d / "..data") == ts

    await SecretPlugin().teardown(d)
    assert not d.exists()
    assert mounts_under(root) == []


async def test_secret_setup_never_reads_the_mount_table(
        root: Path, host: FakeVolumeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new Secret volume's directory was just made (no mount there), and whether an
    existing one is a mount point the kernel tells (statx): neither reads /proc/self/mountinfo
    (milliseconds on a busy host). A directory left without its tmpfs (a crash between mkdir
    and mount) gets it mounted."""
    from ephemera.kubelet.volumes import mounts

    reads: list[str] = []
    table = mounts.mountinfo

    def counted(pid: int | str = "self") -> list[mounts.MountInfo]:
        reads.append(str(pid))
        return table(pid)

    monkeypatch.setattr(mounts, "mountinfo", counted)
    host.put_secret("s", {"token": b"t"})
    pod = make_pod([{"name": "s", "secret": {"secretName": "s"}}])
    d = await setup_volume(SecretPlugin(), pod, host, root)
    await SecretPlugin().setup(pod, pod["spec"]["volumes"][0], d, host)
    setup_reads = list(reads)
    assert (setup_reads, fs_type(d)) == ([], "tmpfs")
    assert mounts_under(d) == [os.path.realpath(d)]
    await SecretPlugin().teardown(d)

    d.mkdir(parents=True)  # left behind unmounted
    reads.clear()
    await SecretPlugin().setup(pod, pod["spec"]["volumes"][0], d, host)
    setup_reads = list(reads)
    assert (setup_reads, fs_type(d)) == ([], "tmpfs")
    assert mounts_under(d) == [os.path.realpath(d)]
    assert read_tree(d) == {"token": b"t"}
    await SecretPlugin().teardown(d)


async def test_secret_missing_and_missing_key(root: Path, host: FakeVolumeHost) -> None:
    pod = make_pod([{"name": "s", "secret": {"secretName": "nope"}}])
    with pytest.raises(VolumeSetupError) as info:
        await setup_volume(SecretPlugin(), pod, host, root)
    assert str(info.value) == 'secret "nope" not found'

    host.put_secret("s", {"a": b"1"})
    items = [{"key": "b", "path": "b"}]
    pod = make_pod([{"name": "s2", "secret": {"secretName": "s", "items": items}}])
    with pytest.raises(VolumeSetupError) as info:
        await setup_volume(SecretPlugin(), pod, host, root)
    assert str(info.value) == "references non-existent secret key: b"

    pod = make_pod([{"name": "s3", "secret": {"secretName": "nope", "optional": True}}])
    d = await setup_volume(SecretPlugin(), pod, host, root)
    assert read_tree(d) == {}
    await SecretPlugin().teardown(d)


# -- downwardAPI ----------------------------------------------------------------------------


async def test_downward_api_fields_and_resources(root: Path, host: FakeVolumeHost) -> None:
    items = [
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}},
        {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}, "mode": 0o600},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
        {"path": "tier", "fieldRef": {"fieldPath": "metadata.labels['tier']"}},
        {
            "path": "mem",
            "resourceFieldRef": {
                "containerName": "c1",
                "resource": "limits.memory",
                "divisor": "1Mi",
            },
        },
        {
            "path": "cpu-m",
            "resourceFieldRef": {"containerName": "c1", "resource": "limits.cpu", "divisor": "1m"},
        },
        {"path": "cpu", "resourceFieldRef": {"containerName": "c1", "resource": "requests.cpu"}},
        {
            "path": "node-mem",
            "resourceFieldRef": {"containerName": "c1", "resource": "requests.memory"},
        },
    ]
    pod = make_pod(
        [{"name": "d", "downwardAPI": {"items": items}}],
        labels={"tier": "web", "app": "shop"},
        annotations={"note": 'say "hi"\n\tbye', "a": "ü"},
        resources={"limits": {"memory": "100Mi", "cpu": "250m"}, "requests": {"cpu": "1500m"}},
    )
    d = await setup_volume(DownwardAPIPlugin(), pod, host, root)
    files = read_tree(d)
    assert files["name"] == b"p1"
    assert files["ns"] == b"default"
    assert files["uid"] == pod["metadata"]["uid"].encode()
    assert files["labels"] == b'app="shop"\ntier="web"'
    assert files["annotations"] == 'a="ü"\nnote="say \\"hi\\"\\n\\tbye"'.encode()
    assert files["tier"] == b"web"
    assert files["mem"] == b"100"
    assert files["cpu-m"] == b"250"
    assert files["cpu"] == b"2"  # ceil(1.5)
    assert files["node-mem"] == b"0"  # no request
    assert mode_of(d / "uid") == 0o600
    assert mode_of(d / "name") == 0o644
    assert fs_type(d) == "tmpfs"
    assert d.relative_to(root).parts[3] == "kubernetes.io~downward-api"
    await DownwardAPIPlugin().teardown(d)
    assert not d.exists()


async def test_downward_api_limit_defaults_to_node_allocatable(
    root: Path, host: FakeVolumeHost
) -> None:
    items = [
        {"path": "mem", "resourceFieldRef": {"containerName": "c1", "resource": "limits.memory"}},
        {
            "path": "cpu",
            "resourceFieldRef": {"containerName": "c1", "resource": "limits.cpu", "divisor": "1m"},
        },
    ]
    d = await setup_volume(
        DownwardAPIPlugin(), make_pod([{"name": "d", "downwardAPI": {"items": items}}]), host, root
    )
    assert read_tree(d) == {"mem": str(NODE_MEMORY).encode(), "cpu": b"4000"}
    await DownwardAPIPlugin().teardown(d)


async def test_downward_api_errors_aggregate(root: Path, host: FakeVolumeHost) -> None:
    items = [
        {"path": "x", "fieldRef": {"fieldPath": "spec.nodeName"}},
        {"path": "y", "resourceFieldRef": {"containerName": "ghost", "resource": "limits.cpu"}},
    ]
    pod = make_pod([{"name": "d", "downwardAPI": {"items": items}}])
    with pytest.raises(VolumeSetupError) as info:
        await setup_volume(DownwardAPIPlugin(), pod, host, root)
    assert str(info.value) == "[unsupported fieldPath: spec.nodeName, container ghost not found]"


def test_format_map_sorted_go_quoted() -> None:
    assert format_map({"b": "2", "a": "x\x01y"}) == 'a="x\\x01y"\nb="2"'
    assert format_map({}) == ""


# -- projected ------------------------------------------------------------------------------


async def test_projected_merges_sources(root: Path, host: FakeVolumeHost) -> None:
    host.put_configmap("cfg", {"c1": "from-cm", "c2": "unused"})
    host.put_secret("sec", {"s1": b"from-secret"})
    sources = [
        {"configMap": {"name": "cfg", "items": [{"key": "c1", "path": "conf/c1"}]}},
        {"secret": {"name": "sec", "items": [{"key": "s1", "path": "s1", "mode": 0o400}]}},
        {
            "downwardAPI": {
                "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
            }
        },
        {"configMap": {"name": "missing-but-optional", "optional": True}},
    ]
    pod = make_pod(
        [{"name": "p", "projected": {"sources": sources, "defaultMode": 0o440}}], labels={"a": "b"}
    )
    d = await setup_volume(ProjectedPlugin(), pod, host, root)
    assert read_tree(d) == {"conf/c1": b"from-cm", "s1": b"from-secret", "labels": b'a="b"'}
    assert mode_of(d / "conf" / "c1") == 0o440
    assert mode_of(d / "s1") == 0o400
    assert fs_type(d) == "tmpfs"
    await ProjectedPlugin().teardown(d)
    assert mounts_under(root) == []


async def test_projected_errors(root: Path, host: FakeVolumeHost) -> None:
    pod = make_pod(
        [{"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]
    )
    with pytest.raises(VolumeSetupError) as info:
        await setup_volume(ProjectedPlugin(), pod, host, root)
    assert str(info.value) == "serviceAccountToken projections are not supported yet"

    pod = make_pod(
        [
            {
                "name": "p",
                "projected": {
                    "sources": [{"secret": {"name": "gone"}}, {"configMap": {"name": "gone2"}}]
                },
            }
        ]
    )
    with pytest.raises(VolumeSetupError) as info:
        await setup_volume(ProjectedPlugin(), pod, host, root)
    assert str(info.value) == '[secret "gone" not found, configmap "gone2" not found]'


# -- emptyDir -------------------------------------------------------------------------------


async def test_empty_dir_on_disk_keeps_files_across_setups(
    root: Path, host: FakeVolumeHost
) -> None:
    pod = make_pod([{"name": "scratch", "emptyDir": {}}])
    old = os.umask(0o077)
    try:
        d = await setup_volume(EmptyDirPlugin(), pod, host, root)
    finally:
        os.umask(old)
    assert d.is_dir() and mode_of(d) == 0o777
    assert fs_type(d) is None
    assert d.relative_to(root).parts[3] == "kubernetes.io~empty-dir"
    (d / "data").write_text("kept")
    await setup_volume(EmptyDirPlugin(), pod, host, root)
    assert (d / "data").read_text() == "kept"
    await EmptyDirPlugin().teardown(d)
    assert not d.exists()


async def test_memory_empty_dir_sized_by_size_limit(root: Path, host: FakeVolumeHost) -> None:
    pod = make_pod([{"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}}])
    d = await setup_volume(EmptyDirPlugin(), pod, host, root)
    assert fs_type(d) == "tmpfs"
    assert statvfs_size(d) == 8 * MiB
    with pytest.raises(OSError) as info, open(d / "big", "wb") as fh:
        fh.write(b"\0" * (9 * MiB))
        fh.flush()
        os.fsync(fh.fileno())
    assert info.value.errno == errno.ENOSPC
    # again: not mounted twice
    await setup_volume(EmptyDirPlugin(), pod, host, root)
    assert mounts_under(d) == [os.path.realpath(d)]
    await EmptyDirPlugin().teardown(d)
    assert mounts_under(root) == [] and not d.exists()


async def test_memory_empty_dir_sizing_rules(root: Path, host: FakeVolumeHost) -> None:
    # pod memory limit below node allocatable wins over it; a sizeLimit above it is ignored
    pod = make_pod(
        [{"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
        resources={"limits": {"memory": "16Mi"}},
    )
    d = await setup_volume(EmptyDirPlugin(), pod, host, root)
    assert statvfs_size(d) == 16 * MiB
    await EmptyDirPlugin().teardown(d)

    # no limits anywhere: node allocatable memory
    pod = make_pod([{"name": "m2", "emptyDir": {"medium": "Memory"}}])
    d = await setup_volume(EmptyDirPlugin(), pod, host, root)
    assert statvfs_size(d) == NODE_MEMORY
    await EmptyDirPlugin().teardown(d)


async def test_empty_dir_unknown_medium(root: Path, host: FakeVolumeHost) -> None:
    pod = make_pod([{"name": "x", "emptyDir": {"medium": "Floppy"}}])
    with pytest.raises(VolumeSetupError) as info:
        await setup_volume(EmptyDirPlugin(), pod, host, root)
    assert str(info.value) == 'unknown storage medium "Floppy"'


# -- image ----------------------------------------------------------------------------------


def _tar_layer(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _write_two_layer_layout(path: Path, ref: str) -> None:
    """An OCI image layout with two layers: the top one overrides `shared.txt`."""
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return f"sha256:{digest}"

    bottom = _tar_layer({"bottom.txt": b"bottom", "shared.txt": b"from-bottom"})
    top = _tar_layer({"top.txt": b"top", "shared.txt": b"from-top"})
    layers = [
        (
            put(gzip.compress(t, mtime=0)),
            hashlib.sha256(t).hexdigest(),
            len(gzip.compress(t, mtime=0)),
        )
        for t in (bottom, top)
    ]
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for _, d, _ in layers]},
            "history": [{"created": "2026-01-01T00:00:00Z"}, {"created": "2026-01-01T00:00:00Z"}],
        }
    ).encode()
    config_digest = put(config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": dg,
                    "size": size,
                }
                for dg, _, size in layers
            ],
        }
    ).encode()
    manifest_digest = put(manifest)
    (path / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (path / "index.json").write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": manifest_digest,
                        "size": len(manifest),
                        "annotations": {
                            "io.containerd.image.name": ref,
                            "org.opencontainers.image.ref.name": ref,
                        },
                    }
                ],
            }
        )
    )


@pytest.fixture
def image_store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "images")


async def test_image_volume_multi_layer_is_a_read_only_overlay(
    root: Path, image_store: ImageStore
) -> None:
    layout = root / "layout"
    _write_two_layer_layout(layout, "docker.io/library/twolayer:v1")
    image_store.import_archive(layout)
    host = FakeVolumeHost(image_store=image_store)
    pod = make_pod([{"name": "img", "image": {"reference": "twolayer:v1", "pullPolicy": "Never"}}])
    d = await setup_volume(ImagePlugin(), pod, host, root)
    assert fs_type(d) == "overlay"
    assert (d / "shared.txt").read_bytes() == b"from-top"
    assert (d / "bottom.txt").read_bytes() == b"bottom"
    assert (d / "top.txt").read_bytes() == b"top"
    with pytest.raises(OSError) as info:
        (d / "new").write_text("x")
    assert info.value.errno == errno.EROFS
    assert d.relative_to(root).parts[3] == "kubernetes.io~image"
    await ImagePlugin().teardown(d)
    assert not d.exists() and mounts_under(root) == []


async def test_image_volume_single_layer_is_a_read_only_bind(
    root: Path, image_store: ImageStore
) -> None:
    image = image_store.ensure_base()
    assert len(image.layers) == 1
    host = FakeVolumeHost(image_store=image_store)
    pod = make_pod([{"name": "bb", "image": {"reference": "busybox:latest"}}])
    d = await setup_volume(ImagePlugin(), pod, host, root)
    assert (d / "bin" / "busybox").is_file()
    with pytest.raises(OSError) as info:
        (d / "new").write_text("x")
    assert info.value.errno == errno.EROFS
    assert not (image.layers[0] / "new").exists()
    await ImagePlugin().teardown(d)
    assert not d.exists() and mounts_under(root) == []
    assert (image.layers[0] / "bin" / "busybox").is_file()  # the store's layer is untouched


async def test_image_volume_missing_image(root: Path, image_store: ImageStore) -> None:
    host = FakeVolumeHost(image_store=image_store)
    pod = make_pod([{"name": "img", "image": {"reference": "nothere:v1", "pullPolicy": "Never"}}])
    with pytest.raises(VolumeSetupError) as info:
        await setup_volume(ImagePlugin(), pod, host, root)
    assert (
        str(info.value) == 'Container image "nothere:v1" is not present with pull policy of Never'
    )

    pod = make_pod(
        [{"name": "img", "image": {"reference": "nothere:v1", "pullPolicy": "IfNotPresent"}}]
    )
    with pytest.raises(VolumeSetupError) as info:
        await setup_volume(ImagePlugin(), pod, host, root)
    assert str(info.value).startswith('Failed to pull image "nothere:v1": ')

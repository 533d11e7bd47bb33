"""The node's image store (ephemera.kubelet.images) on a real filesystem, as root: the
reproducible busybox base image, reference resolution, imports of OCI layouts, OCI archives and
docker archives (made with skopeo), whiteouts checked through a real overlay mount, refusal
of layers that escape, unpack-once, removal with garbage collection, and the CLI."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from images_testing import directory, entry, put_blob, sha, tar_of, write_layout

from ephemera.kubelet.images import (
    BASE_IMAGE_REF,
    ImageError,
    ImageNotFound,
    ImageStore,
    InvalidReference,
    LayerError,
)
from ephemera.kubelet.images.base import host_architecture

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="unpacking layers needs root")


def skopeo(*args: str) -> None:
    subprocess.run(["skopeo", "--insecure-policy", *args], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=120)


def tree(root: Path) -> dict[str, tuple[int, int, int, int, str]]:
    """Every entry under root: (type+mode, uid, gid, size, symlink target)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
            size = st.st_size if stat.S_ISREG(st.st_mode) else 0
            found[str(path.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid, size,
                                                  target)
    return found


def assert_store_empty(store: ImageStore) -> None:
    assert store.list() == []
    assert list(store.blobs_dir.iterdir()) == []
    assert list(store.layers_dir.iterdir()) == []


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "node")


@pytest.fixture(scope="module")
def base_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with the base image built once for the read-only tests of this module."""
    root = tmp_path_factory.mktemp("base") / "node"
    ImageStore(root).ensure_base()
    return root


# --- the base image -------------------------------------------------------------------


def test_build_base_is_reproducible(tmp_path: Path) -> None:
    first = ImageStore(tmp_path / "a").build_base()
    second = ImageStore(tmp_path / "b").build_base()
    assert first.id == second.id
    assert first.manifest_digest == second.manifest_digest
    assert first.diff_ids == second.diff_ids
    assert first.repo_tags == ("docker.io/library/busybox:latest",)
    assert first.repo_digests == (f"docker.io/library/busybox@{first.manifest_digest}",)
    assert tree(first.layers[0]) == tree(second.layers[0])


def test_base_image_contents(base_root: Path) -> None:
    image = ImageStore(base_root).resolve("busybox")
    assert image is not None
    assert image.cmd == ("sh",)
    assert image.entrypoint == ()
    assert dict(image.env)["PATH"].endswith("/usr/bin:/sbin:/bin")
    (layer,) = image.layers
    busybox = layer / "bin" / "busybox"
    assert busybox.read_bytes() == Path("/bin/busybox").read_bytes()
    assert stat.S_IMODE(busybox.stat().st_mode) == 0o755
    assert os.readlink(layer / "bin" / "sh") == "busybox"
    applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert {a for a in applets if a != "busybox"} <= {p.name for p in (layer / "bin").iterdir()}
    assert (layer / "etc" / "passwd").read_text().startswith("root:x:0:0:root:/root:/bin/sh\n")
    assert "root:x:0:" in (layer / "etc" / "group").read_text()
    assert stat.S_IMODE((layer / "tmp").stat().st_mode) == 0o1777
    assert stat.S_IMODE((layer / "root").stat().st_mode) == 0o700
    assert (layer / "etc" / "passwd").stat().st_mtime == 0
    # the layer dir sits where the interface says, with no ':' (overlay's separator)
    assert layer.parent == base_root / "images" / "layers" / "sha256"
    assert ":" not in str(layer)
    # the store is itself an OCI layout that skopeo reads
    out = subprocess.run(["skopeo", "inspect", f"oci:{base_root}/images:{BASE_IMAGE_REF}"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["Digest"] == image.manifest_digest


def test_ensure_base_builds_only_when_missing(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "node")
    built = store.ensure_base()
    assert store.unpack_count == 1
    again = ImageStore(tmp_path / "node")
    assert again.ensure_base() == built
    assert again.unpack_count == 0


# --- resolving references -------------------------------------------------------------


def ref_forms(image_id: str, manifest: str) -> list[str]:
    return ["busybox", "busybox:latest", "docker.io/library/busybox:latest",
            "library/busybox", "index.docker.io/library/busybox:latest",
            image_id, image_id.removeprefix("sha256:"), image_id[:19],
            image_id.removeprefix("sha256:")[:12],
            f"busybox@{manifest}", f"docker.io/library/busybox@{manifest}",
            f"busybox:latest@{manifest}"]


def test_resolve_every_reference_form(base_root: Path) -> None:
    store = ImageStore(base_root)
    base = store.resolve(BASE_IMAGE_REF)
    assert base is not None
    for ref in ref_forms(base.id, base.manifest_digest):
        assert store.resolve(ref) == base, ref


def test_resolve_misses_and_invalid_references(base_root: Path) -> None:
    store = ImageStore(base_root)
    base = store.resolve("busybox")
    assert base is not None
    for ref in ["busybox:1.36", "quay.io/busybox", f"alpine@{base.manifest_digest}",
                "sha256:" + "0" * 64, "sha256:000000000000", f"busybox@{base.id}"]:
        assert store.resolve(ref) is None, ref
    for ref in ["Busybox", "busybox@sha256:zz", "busy box"]:
        with pytest.raises(InvalidReference):
            store.resolve(ref)


def test_image_config_fields(tmp_path: Path, store: ImageStore) -> None:
    layer = tar_of([directory("app/"), entry("app/run", data=b"#!/bin/sh\n", mode=0o755)])
    write_layout(tmp_path / "layout", [layer], ref="example.com/team/app:v2", config={
        "Entrypoint": ["/app/run"], "Cmd": ["--flag", "x"], "Env": ["A=1", "B=x=y", "C"],
        "WorkingDir": "/app", "User": "1000:1000", "Labels": {"k": "v"}})
    (imported,) = store.import_archive(tmp_path / "layout")
    image = store.resolve("example.com/team/app:v2")
    assert image == imported
    assert image.entrypoint == ("/app/run",)
    assert image.cmd == ("--flag", "x")
    assert image.env == (("A", "1"), ("B", "x=y"), ("C", ""))
    assert image.working_dir == "/app"
    assert image.user == "1000:1000"
    assert image.labels == {"k": "v"}
    assert image.repo_tags == ("example.com/team/app:v2",)


def test_layers_are_top_first(tmp_path: Path, store: ImageStore) -> None:
    bottom = tar_of([entry("f", data=b"bottom")])
    top = tar_of([entry("f", data=b"top")])
    write_layout(tmp_path / "layout", [bottom, top], ref="two:layers")
    (image,) = store.import_archive(tmp_path / "layout")
    assert [(p / "f").read_bytes() for p in image.layers] == [b"top", b"bottom"]
    assert image.diff_ids == (sha(bottom), sha(top))


# --- imports --------------------------------------------------------------------------


def test_oci_archive_round_trip_with_skopeo(tmp_path: Path, base_root: Path) -> None:
    base = ImageStore(base_root).resolve("busybox")
    assert base is not None
    archive = tmp_path / "busybox-oci.tar"
    skopeo("copy", f"oci:{base_root}/images:{BASE_IMAGE_REF}",
           f"oci-archive:{archive}:{BASE_IMAGE_REF}")
    other = ImageStore(tmp_path / "other")
    (imported,) = other.import_archive(archive)
    assert imported.id == base.id  # same config: same image id
    assert imported.diff_ids == base.diff_ids
    assert imported.repo_tags == (BASE_IMAGE_REF,)
    resolved = other.resolve("busybox")
    assert resolved == imported
    assert tree(resolved.layers[0]) == tree(base.layers[0])


def test_docker_archive_is_converted_with_skopeo(tmp_path: Path, base_root: Path) -> None:
    archive = tmp_path / "busybox-docker.tar"
    skopeo("copy", f"oci:{base_root}/images:{BASE_IMAGE_REF}",
           f"docker-archive:{archive}:myorg/busybox:1.35")
    store = ImageStore(tmp_path / "other")
    (imported,) = store.import_archive(archive)
    assert imported.repo_tags == ("docker.io/myorg/busybox:1.35",)
    base = ImageStore(base_root).resolve("busybox")
    assert base is not None
    assert imported.diff_ids == base.diff_ids
    assert store.resolve("myorg/busybox:1.35") == imported
    assert list(store.tmp_dir.iterdir()) == []


def test_import_with_name_and_gzip_layers(tmp_path: Path, store: ImageStore) -> None:
    layer = tar_of([entry("hello", data=b"world")])
    write_layout(tmp_path / "layout", [layer], ref="latest", gzip_layers=True)
    (image,) = store.import_archive(tmp_path / "layout", name="local/hello:1")
    assert image.repo_tags == ("docker.io/local/hello:1",)
    assert (image.layers[0] / "hello").read_bytes() == b"world"
    assert image.diff_ids == (sha(layer),)


def test_import_tar_of_layout_and_containerd_name(tmp_path: Path, store: ImageStore) -> None:
    layout = tmp_path / "layout"
    write_layout(layout, [tar_of([entry("x", data=b"1")])], ref="v1",
                 annotations={"io.containerd.image.name": "registry.local/x:v1"})
    archive = tmp_path / "layout.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(layout, arcname=".")
    (image,) = store.import_archive(archive)
    assert image.repo_tags == ("registry.local/x:v1",)


def test_image_index_picks_the_host_platform(tmp_path: Path, store: ImageStore) -> None:
    layout = tmp_path / "layout"
    mine = write_layout(layout, [tar_of([entry("arch", data=b"mine")])])
    index = json.loads((layout / "index.json").read_text())
    other = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             "digest": "sha256:" + "1" * 64, "size": 10,
             "platform": {"os": "linux", "architecture": "not-" + host_architecture()}}
    own = dict(index["manifests"][0], platform={"os": "linux",
                                                "architecture": host_architecture()})
    image_index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                   "manifests": [other, own]}
    desc = {"mediaType": "application/vnd.oci.image.index.v1+json",
            **put_blob(layout, json.dumps(image_index).encode()),
            "annotations": {"org.opencontainers.image.ref.name": "multi/arch:1"}}
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    (image,) = store.import_archive(layout)
    assert image.manifest_digest == mine
    assert image.repo_tags == ("docker.io/multi/arch:1",)


def test_import_refuses_a_corrupt_blob(tmp_path: Path, store: ImageStore) -> None:
    layout = tmp_path / "layout"
    write_layout(layout, [tar_of([entry("x", data=b"1")])], ref="bad:blob")
    manifest_hex = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"][7:]
    manifest = json.loads((layout / "blobs" / "sha256" / manifest_hex).read_text())
    layer_hex = manifest["layers"][0]["digest"][7:]
    (layout / "blobs" / "sha256" / layer_hex).write_bytes(b"tampered")
    with pytest.raises(ImageError, match="has digest"):
        store.import_archive(layout)
    assert_store_empty(store)


def test_import_refuses_a_wrong_diff_id(tmp_path: Path, store: ImageStore) -> None:
    write_layout(tmp_path / "layout", [tar_of([entry("x", data=b"1")])], ref="bad:diffid",
                 diff_ids=["sha256:" + "2" * 64])
    with pytest.raises(LayerError, match="does not match the diff_id"):
        store.import_archive(tmp_path / "layout")
    assert_store_empty(store)


def test_import_of_something_else_fails(tmp_path: Path, store: ImageStore) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(tar_of([entry("readme", data=b"hi")]))
    with pytest.raises(ImageError, match=r"neither index\.json"):
        store.import_archive(junk)
    with pytest.raises(ImageError, match="no such file"):
        store.import_archive(tmp_path / "missing.tar")


# --- whiteouts, ownership, refusals ---------------------------------------------------


@pytest.fixture
def overlay_mount(tmp_path: Path) -> Iterator[list[Path]]:
    mounts: list[Path] = []
    yield mounts
    for mnt in reversed(mounts):
        subprocess.run(["umount", str(mnt)], check=False)


def test_whiteouts_work_as_overlay_lower_dirs(tmp_path: Path, store: ImageStore,
                                              overlay_mount: list[Path]) -> None:
    lower = tar_of([directory("a/"), entry("a/gone", data=b"1"), entry("a/kept", data=b"2"),
                    directory("d/"), entry("d/old", data=b"3"), entry("z", data=b"lower")])
    upper = tar_of([entry("a/.wh.gone"), directory("d/"), entry("d/.wh..wh..opq"),
                    entry("d/new", data=b"4"),
                    entry(".wh.z"), entry("z", data=b"same layer wins"),
                    entry(".wh..wh.plnk")])
    write_layout(tmp_path / "layout", [lower, upper], ref="whiteouts:1")
    (image,) = store.import_archive(tmp_path / "layout")
    top = image.layers[0]
    gone = os.lstat(top / "a" / "gone")
    assert stat.S_ISCHR(gone.st_mode) and gone.st_rdev == os.makedev(0, 0)
    assert os.getxattr(top / "d", "trusted.overlay.opaque") == b"y"
    assert (top / "z").read_bytes() == b"same layer wins"
    assert not (top / ".wh..wh.plnk").exists()
    assert not any(p.name.startswith(".wh.") for p in top.rglob("*"))

    merged = tmp_path / "merged"
    merged.mkdir()
    lowerdir = ":".join(str(p) for p in image.layers)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={lowerdir}",
                    str(merged)], check=True)
    overlay_mount.append(merged)
    assert sorted(p.name for p in (merged / "a").iterdir()) == ["kept"]
    assert sorted(p.name for p in (merged / "d").iterdir()) == ["new"]
    assert (merged / "z").read_bytes() == b"same layer wins"


def test_permissions_ownership_and_xattrs_are_kept(tmp_path: Path, store: ImageStore) -> None:
    layer = tar_of([
        directory("secret/", mode=0o700, uid=123, gid=456, mtime=5000),
        entry("secret/su", data=b"x", mode=0o4755, uid=0, gid=0),
        entry("secret/ping", data=b"y", mode=0o755, uid=7, gid=8, mtime=4242,
              pax={"SCHILY.xattr.user.origin": "tar"}),
        entry("secret/link", tarfile.SYMTYPE, linkname="/etc/passwd", uid=9, gid=10),
        entry("secret/hard", tarfile.LNKTYPE, linkname="secret/ping"),
        entry("fifo", tarfile.FIFOTYPE, mode=0o620, uid=3, gid=4),
    ])
    write_layout(tmp_path / "layout", [layer], ref="perms:1")
    (image,) = store.import_archive(tmp_path / "layout")
    root = image.layers[0]
    st = os.lstat(root / "secret")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime) == (0o700, 123, 456,
                                                                              5000)
    assert stat.S_IMODE(os.lstat(root / "secret" / "su").st_mode) == 0o4755
    ping = os.lstat(root / "secret" / "ping")
    assert (ping.st_uid, ping.st_gid, ping.st_mtime) == (7, 8, 4242)
    assert os.getxattr(root / "secret" / "ping", "user.origin") == b"tar"
    link = os.lstat(root / "secret" / "link")
    assert stat.S_ISLNK(link.st_mode) and (link.st_uid, link.st_gid) == (9, 10)
    assert os.readlink(root / "secret" / "link") == "/etc/passwd"
    assert os.lstat(root / "secret" / "hard").st_ino == ping.st_ino
    fifo = os.lstat(root / "fifo")
    assert stat.S_ISFIFO(fifo.st_mode) and stat.S_IMODE(fifo.st_mode) == 0o620
    assert stat.S_IMODE(os.lstat(root).st_mode) == 0o755


ESCAPES = {
    "dotdot": [entry("../evil", data=b"x")],
    "nested-dotdot": [directory("a/"), entry("a/../../evil", data=b"x")],
    "absolute": [entry("/evil", data=b"x")],
    "symlink-parent-absolute": [entry("link", tarfile.SYMTYPE, linkname="{outside}"),
                                entry("link/evil", data=b"x")],
    "symlink-parent-relative": [entry("up", tarfile.SYMTYPE, linkname="../../../.."),
                                entry("up/evil", data=b"x")],
    "symlink-replaces-dir": [directory("d/"), entry("d", tarfile.SYMTYPE,
                                                    linkname="{outside}"),
                             entry("d/evil", data=b"x")],
    "hardlink-escape": [entry("h", tarfile.LNKTYPE, linkname="../../etc/passwd")],
    "hardlink-via-symlink": [entry("s", tarfile.SYMTYPE, linkname="/etc"),
                             entry("h", tarfile.LNKTYPE, linkname="s/passwd")],
    "char-device": [entry("null", tarfile.CHRTYPE, dev=(1, 3))],
    "block-device": [entry("sda", tarfile.BLKTYPE, dev=(8, 0))],
    "raw-overlay-whiteout": [entry("hidden", tarfile.CHRTYPE, dev=(0, 0))],
    "overlay-xattr": [directory("d/", pax={"SCHILY.xattr.trusted.overlay.opaque": "y"})],
    "whiteout-dotdot": [entry("a/.wh..."), entry("x", data=b"1")],
}


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_layers_that_escape_are_refused(tmp_path: Path, store: ImageStore, case: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    entries = []
    for info, data in ESCAPES[case]:
        info = info.replace(linkname=info.linkname.format(outside=outside))
        entries.append((info, data))
    write_layout(tmp_path / "layout", [tar_of(entries)], ref="evil:1")
    with pytest.raises(LayerError, match="refusing"):
        store.import_archive(tmp_path / "layout")
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "evil").exists()
    assert not (store.root / "images" / "evil").exists()
    assert_store_empty(store)
    assert list(store.tmp_dir.iterdir()) == []


# --- unpack once, crash leftovers, threads --------------------------------------------


def test_layers_are_unpacked_once(tmp_path: Path, base_root: Path) -> None:
    store = ImageStore(tmp_path / "node")
    image = store.ensure_base()
    inode = os.stat(image.layers[0]).st_ino
    assert store.unpack_count == 1
    for _ in range(3):
        assert store.resolve("busybox") == image
    assert store.unpack_count == 1
    assert os.stat(image.layers[0]).st_ino == inode
    fresh = ImageStore(tmp_path / "node")
    assert fresh.resolve("busybox") == image
    assert fresh.unpack_count == 0


def test_a_missing_layer_dir_is_unpacked_again_once(tmp_path: Path) -> None:
    root = tmp_path / "node"
    image = ImageStore(root).ensure_base()
    subprocess.run(["rm", "-rf", str(image.layers[0])], check=True)
    # a crashed unpack leaves only a temp dir, which never looks like a layer
    leftover = root / "images" / "tmp" / "layer.crashed"
    (leftover / "bin").mkdir(parents=True)
    store = ImageStore(root)
    results = []
    threads = [threading.Thread(target=lambda: results.append(store.resolve("busybox")))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [image] * 6
    assert store.unpack_count == 1
    assert (image.layers[0] / "bin" / "busybox").is_file()
    assert not leftover.exists()


# --- list and remove ------------------------------------------------------------------


def test_list_and_remove_with_garbage_collection(tmp_path: Path, store: ImageStore) -> None:
    base = store.ensure_base()
    shared = tar_of([entry("shared", data=b"s")])
    write_layout(tmp_path / "app", [shared, tar_of([entry("app", data=b"a")])],
                 ref="app:1")
    (app,) = store.import_archive(tmp_path / "app")
    store.import_archive(tmp_path / "app", name="app:alias")
    listed = {i.id: i for i in store.list()}
    assert set(listed) == {base.id, app.id}
    assert listed[app.id].repo_tags == ("docker.io/library/app:1", "docker.io/library/app:alias")
    assert listed[app.id].size > 0

    assert store.remove("app:alias") == ["docker.io/library/app:alias"]
    assert store.resolve("app:1") is not None
    assert all(p.is_dir() for p in app.layers)

    assert store.remove(app.id) == ["docker.io/library/app:1"]
    assert store.resolve("app:1") is None
    assert not any(p.exists() for p in app.layers)
    assert [i.id for i in store.list()] == [base.id]
    remaining = {p.name for p in store.blobs_dir.iterdir()}
    assert remaining == {base.id[7:], base.manifest_digest[7:], base.diff_ids[0][7:]}

    with pytest.raises(ImageNotFound):
        store.remove("app:1")
    assert store.remove("busybox") == [BASE_IMAGE_REF]
    assert_store_empty(store)


def test_retagging_keeps_the_old_image_until_removed_by_id(tmp_path: Path,
                                                          store: ImageStore) -> None:
    write_layout(tmp_path / "v1", [tar_of([entry("v", data=b"1")])], ref="app:latest")
    write_layout(tmp_path / "v2", [tar_of([entry("v", data=b"2")])], ref="app:latest")
    (old,) = store.import_archive(tmp_path / "v1")
    (new,) = store.import_archive(tmp_path / "v2")
    assert store.resolve("app") == new
    dangling = store.resolve(old.id)
    assert dangling is not None and dangling.repo_tags == ()
    assert (dangling.layers[0] / "v").read_bytes() == b"1"
    assert store.remove(old.id) == [old.id]
    assert store.resolve(old.id) is None
    assert store.resolve("app") == new


# --- the command line -----------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ephemera.cli", "images", *args],
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_cli(tmp_path: Path, base_root: Path) -> None:
    root = str(tmp_path / "node")
    built = cli("build-base", "--root-dir", root)
    assert built.returncode == 0, built.stderr
    base = ImageStore(base_root).resolve("busybox")
    assert base is not None
    assert built.stdout.split()[:2] == [BASE_IMAGE_REF, base.id]

    layout = tmp_path / "layout"
    write_layout(layout, [tar_of([entry("f", data=b"1")])], ref="tools/thing:2")
    imported = cli("import", str(layout), "--root-dir", root)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("docker.io/tools/thing:2 sha256:")

    table = cli("list", "--root-dir", root)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["IMAGE", "TAG", "IMAGE", "ID", "SIZE"]
    assert lines[1].split()[:3] == ["docker.io/library/busybox", "latest", base.id[7:20]]
    assert lines[2].split()[:2] == ["docker.io/tools/thing", "2"]

    as_json = json.loads(cli("list", "-o", "json", "--root-dir", root).stdout)
    assert [i["repoTags"] for i in as_json["images"]] == [[BASE_IMAGE_REF],
                                                         ["docker.io/tools/thing:2"]]

    removed = cli("remove", "tools/thing:2", "--root-dir", root)
    assert (removed.returncode, removed.stdout) == (0, "Deleted: docker.io/tools/thing:2\n")
    missing = cli("remove", "tools/thing:2", "--root-dir", root)
    assert missing.returncode == 1
    assert "no such image: tools/thing:2" in missing.stderr
    bad = cli("import", str(tmp_path / "nope.tar"), "--root-dir", root)
    assert bad.returncode == 1 and "no such file" in bad.stderr

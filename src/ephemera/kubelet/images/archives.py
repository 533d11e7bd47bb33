"""What `ImageStore.import_archive` reads from: an OCI image layout as a directory
(`DirLayout`) or as a tar, possibly gzipped (`TarLayout`, what `skopeo copy ...
oci-archive:` writes), and `docker save` archives, which skopeo converts into a temporary
OCI layout (`convert_docker_archive`: one `skopeo copy docker-archive:FILE:@N
oci:TMP:imageN` per image, names taken from the archive's `RepoTags`)."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import IO, Any

from ephemera.kubelet.images.errors import ImageError, digest_hex
from ephemera.kubelet.images.reference import InvalidReference, parse_reference

log = logging.getLogger(__name__)

SKOPEO = "skopeo"


class Layout:
    """An OCI image layout to import from: `index.json` plus blobs by digest."""

    label = ""

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    def open(self, name: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        raise NotImplementedError

    def has(self, name: str) -> bool:
        raise NotImplementedError

    def index(self) -> dict[str, Any]:
        try:
            value = json.loads(self.read("index.json"))
        except ImageError:
            raise ImageError(f"{self.label}: no index.json: not an OCI image layout") from None
        except ValueError as err:
            raise ImageError(f"{self.label}: index.json is not JSON: {err}") from None
        if not isinstance(value, dict) or not isinstance(value.get("manifests"), list):
            raise ImageError(f"{self.label}: index.json has no manifests list")
        return value

    @staticmethod
    def blob_name(digest: str) -> str:
        return f"blobs/sha256/{digest_hex(digest)}"


class DirLayout(Layout):
    def __init__(self, path: Path, label: str = "") -> None:
        self.path = path
        self.label = label or str(path)

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    def read(self, name: str) -> bytes:
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            raise ImageError(f"{self.label}: {name} is missing") from None

    def open(self, name: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        try:
            return (self.path / name).open("rb")
        except FileNotFoundError:
            raise ImageError(f"{self.label}: {name} is missing") from None


class TarLayout(Layout):
    """A tar read in place (random access; member names with or without `./`)."""

    def __init__(self, tar: tarfile.TarFile, label: str) -> None:
        self.tar = tar
        self.label = label
        self.members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}

    def has(self, name: str) -> bool:
        return name in self.members

    def read(self, name: str) -> bytes:
        with self.open(name) as f:
            return f.read()

    def open(self, name: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        member = self.members.get(name)
        if member is None:
            raise ImageError(f"{self.label}: {name} is missing")
        stream = self.tar.extractfile(member)
        assert stream is not None
        return stream


def docker_archive_tags(archive: TarLayout) -> list[list[str]]:
    """The normalised `RepoTags` of each image in a docker archive's `manifest.json`."""
    try:
        manifest = json.loads(archive.read("manifest.json"))
    except ValueError as err:
        raise ImageError(f"{archive.label}: manifest.json is not JSON: {err}") from None
    if not isinstance(manifest, list) or not manifest:
        raise ImageError(f"{archive.label}: manifest.json lists no image")
    result: list[list[str]] = []
    for entry in manifest:
        tags = entry.get("RepoTags") if isinstance(entry, dict) else None
        names: list[str] = []
        for tag in tags if isinstance(tags, list) else []:
            try:
                names.append(str(parse_reference(str(tag))))
            except InvalidReference:
                log.warning("%s: ignoring the tag %r", archive.label, tag)
        result.append(names)
    return result


def convert_docker_archive(path: Path, image_count: int, work: Path) -> Path:
    """Convert the docker archive `path` into an OCI layout `<work>/oci` whose index names
    image N `imageN`; returns the layout directory."""
    if shutil.which(SKOPEO) is None:
        raise ImageError(f"{path}: importing a docker archive needs skopeo")
    archive = work / "archive.tar"  # skopeo splits its argument at ':'
    archive.symlink_to(path.resolve())
    layout = work / "oci"
    for i in range(image_count):
        _skopeo(["copy", "--quiet", "--insecure-policy",
                 f"docker-archive:{archive}:@{i}", f"oci:{layout}:image{i}"],
                work / "skopeo.log", path)
    return layout


def _skopeo(args: list[str], log_path: Path, what: Path) -> None:
    """Run skopeo with its output in a file (never a pipe we wait on)."""
    with log_path.open("wb") as out:
        proc = subprocess.run([SKOPEO, *args], stdin=subprocess.DEVNULL, stdout=out,
                              stderr=subprocess.STDOUT, timeout=600, check=False)
    if proc.returncode != 0:
        message = log_path.read_text(errors="replace").strip()
        raise ImageError(f"{what}: skopeo {args[0]} failed: {message}")

"""ImageStore: the node's local OCI image store under `<root>/images/`.

On disk (`<root>/images/` is itself a valid OCI image layout that skopeo and umoci read):
- `oci-layout`, `index.json`: one manifest descriptor per reference, annotated with
  `org.opencontainers.image.ref.name` and `io.containerd.image.name` (both the full
  normalised reference, `docker.io/library/busybox:latest`); an image that lost its last
  reference to a newer image with the same name stays as an entry without annotations
  (docker's dangling image) until removed by id.
- `blobs/sha256/<hex>`: manifests, configs and layers, verified against their digests.
- `layers/sha256/<diff_id hex>/`: each layer unpacked once, keyed by its uncompressed digest,
  overlay-ready (see `layers.py`); usable directly as an overlay lower dir (no `:` in the
  path). A layer is unpacked into `tmp/` and renamed into place after a syncfs, so a layer
  directory that exists is complete.
- `tmp/`: temporary blobs and unpack dirs, emptied whenever the lock is taken.
- `lock`: an flock held (with an in-process RLock) by every operation that writes.

References resolve the way docker's do (`reference.py`): `busybox`, `busybox:latest` and
`docker.io/library/busybox:latest` are one reference; `name@sha256:<manifest digest>` matches
a manifest stored under that repository; `sha256:<config digest>` (or a bare hex id, or an
unambiguous prefix of 12+ hex digits) is the image id. `Image.id` is the config digest, as
containerd's imageID.

Imports read an OCI layout directory or a tar of one (`skopeo copy ... oci-archive:`, also
gzipped) directly, and convert a `docker save` archive (a tar with `manifest.json` and no
`index.json`) with `skopeo copy docker-archive:FILE:@N oci:TMP:N` first. Image indexes
(multi-platform) are narrowed to the host's linux platform. Names come from
`io.containerd.image.name`, else from `org.opencontainers.image.ref.name` parsed as a
reference (a bare `latest` would become `docker.io/library/latest:latest`: pass `name=`),
else the docker archive's `RepoTags`; `name=` overrides them for a one-image archive.

All methods block; callers on an event loop run them in a thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import io
import json
import logging
import os
import shutil
import tarfile
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ephemera.api.goformat import go_quote
from ephemera.kubelet.images.archives import (
    DirLayout,
    Layout,
    TarLayout,
    convert_docker_archive,
    docker_archive_tags,
)
from ephemera.kubelet.images.base import (
    BASE_IMAGE_REF,
    BUSYBOX,
    base_image_blobs,
    digest_of,
    host_architecture,
)
from ephemera.kubelet.images.errors import ImageError, ImageNotFound, LayerError, digest_hex
from ephemera.kubelet.images.layers import unpack_layer
from ephemera.kubelet.images.reference import (
    InvalidReference,
    image_id_prefix,
    parse_reference,
)

log = logging.getLogger(__name__)

ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
ANNOTATION_CONTAINERD_NAME = "io.containerd.image.name"
MEDIA_TYPE_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_TYPE_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_TYPE_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MEDIA_TYPE_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_MEDIA_TYPES = (MEDIA_TYPE_OCI_INDEX, MEDIA_TYPE_DOCKER_LIST)
OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Image:
    """One image in the store. `layers` are the unpacked layer dirs, top layer first (the
    order of an overlay `lowerdir=`); `env` keeps the config's order."""

    id: str  # sha256:<config digest>: the imageID
    manifest_digest: str
    repo_tags: tuple[str, ...]  # docker.io/library/busybox:latest
    repo_digests: tuple[str, ...]  # docker.io/library/busybox@sha256:<manifest digest>
    layers: tuple[Path, ...]
    diff_ids: tuple[str, ...]  # bottom layer first, as in the config
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    working_dir: str = ""
    user: str = ""
    size: int = 0  # bytes of the config and layer blobs
    labels: dict[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class _Parsed:
    """A manifest with its config, as read from blobs (immutable, so cached by digest)."""

    config_digest: str
    config: dict[str, Any]
    layer_digests: tuple[str, ...]
    diff_ids: tuple[str, ...]
    size: int


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _syncfs(path: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _str_tuple(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(v) for v in value)


def _env_pairs(value: Any) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in _str_tuple(value):
        key, _, val = item.partition("=")
        pairs.append((key, val))
    return tuple(pairs)


@dataclass
class _Candidate:
    """One image found in an import source, before it is named in the store."""

    manifest_digest: str
    manifest_size: int
    media_type: str
    names: list[str]


# --- the store ------------------------------------------------------------------------


class ImageStore:
    """The node's image store under `<root>/images/` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.dir = self.root / "images"
        self.blobs_dir = self.dir / "blobs" / "sha256"
        self.layers_dir = self.dir / "layers" / "sha256"
        self.tmp_dir = self.dir / "tmp"
        self.index_path = self.dir / "index.json"
        self._rlock = threading.RLock()
        self._depth = 0
        self._lock_fd = -1
        self._parsed: dict[str, _Parsed] = {}
        self._index_cache: tuple[tuple[int, int, int], list[dict[str, Any]]] | None = None
        self.unpack_count = 0  # layers this object has unpacked (tests check "once")

    # -- locking and files --

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._rlock:
            if self._depth == 0:
                self.dir.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self._lock_fd = fd
                try:
                    self._init_layout()
                except BaseException:
                    self._lock_fd = -1
                    os.close(fd)
                    raise
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    fd, self._lock_fd = self._lock_fd, -1
                    os.close(fd)  # closing releases the flock

    def _init_layout(self) -> None:
        """Create the layout if missing and clear what a crashed writer left in tmp/."""
        for path in (self.blobs_dir, self.layers_dir, self.tmp_dir):
            path.mkdir(parents=True, exist_ok=True)
        if not (self.dir / "oci-layout").exists():
            self._write_file(self.dir / "oci-layout", OCI_LAYOUT)
        if not self.index_path.exists():
            self._write_index([])
        for leftover in self.tmp_dir.iterdir():
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)

    def _write_file(self, path: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.tmp_dir, prefix=f"{path.name}.")
        try:
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)

    def _blob_path(self, digest: str) -> Path:
        return self.blobs_dir / digest_hex(digest)

    def _layer_path(self, diff_id: str) -> Path:
        return self.layers_dir / digest_hex(diff_id)

    def _put_blob(self, stream: IO[bytes], digest: str, size: int | None, what: str) -> None:
        """Copy a blob in, verifying its digest (and size when known)."""
        target = self._blob_path(digest)
        if target.exists():
            return
        sha = hashlib.sha256()
        written = 0
        fd, tmp = tempfile.mkstemp(dir=self.tmp_dir, prefix="blob.")
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := stream.read(_CHUNK):
                    sha.update(chunk)
                    out.write(chunk)
                    written += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            actual = "sha256:" + sha.hexdigest()
            if actual != digest:
                raise ImageError(f"{what}: blob {digest} has digest {actual}")
            if size is not None and written != size:
                raise ImageError(f"{what}: blob {digest} has {written} bytes, not {size}")
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _put_bytes(self, data: bytes, what: str) -> str:
        digest = digest_of(data)
        self._put_blob(io.BytesIO(data), digest, len(data), what)
        return digest

    def _read_json_blob(self, digest: str) -> dict[str, Any]:
        try:
            value = json.loads(self._blob_path(digest).read_bytes())
        except FileNotFoundError:
            raise ImageError(f"blob {digest} is missing from the store") from None
        except ValueError as err:
            raise ImageError(f"blob {digest} is not JSON: {err}") from None
        if not isinstance(value, dict):
            raise ImageError(f"blob {digest} is not a JSON object")
        return value

    # -- the index --

    def _entries(self) -> list[dict[str, Any]]:
        try:
            st = os.stat(self.index_path)
        except FileNotFoundError:
            return []
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._index_cache is not None and self._index_cache[0] == key:
            return self._index_cache[1]
        index = json.loads(self.index_path.read_bytes())
        entries = [e for e in index.get("manifests", []) if isinstance(e, dict)]
        self._index_cache = (key, entries)
        return entries

    def _write_index(self, entries: list[dict[str, Any]]) -> None:
        index = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_OCI_INDEX, "manifests": entries}
        self._write_file(self.index_path,
                         json.dumps(index, indent=2, sort_keys=True).encode() + b"\n")
        self._index_cache = None

    @staticmethod
    def _entry_ref(entry: dict[str, Any]) -> str:
        annotations = entry.get("annotations") or {}
        return str(annotations.get(ANNOTATION_REF_NAME) or "")

    @staticmethod
    def _make_entry(digest: str, size: int, media_type: str, ref: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": size}
        if ref:
            entry["annotations"] = {ANNOTATION_REF_NAME: ref, ANNOTATION_CONTAINERD_NAME: ref}
        return entry

    def _set_refs(self, new: list[tuple[dict[str, Any], list[str]]]) -> None:
        """Point each name at its manifest (moving a name that pointed elsewhere; an image
        that loses its last name stays as an unnamed entry) and record unnamed imports."""
        entries = list(self._entries())
        for template, names in new:
            digest = template["digest"]
            for ref in names:
                for i, entry in enumerate(entries):
                    if self._entry_ref(entry) != ref:
                        continue
                    old = entry["digest"]
                    del entries[i]
                    if old != digest and not any(e["digest"] == old for e in entries):
                        entries.append(self._make_entry(old, entry["size"],
                                                        entry["mediaType"], ""))
                    break
                entries.append(self._make_entry(digest, template["size"],
                                                template["mediaType"], ref))
            # an unnamed entry is only kept for an image that has no name
            named = any(e["digest"] == digest and self._entry_ref(e) for e in entries)
            entries = [e for e in entries
                       if not (e["digest"] == digest and not self._entry_ref(e) and named)]
            if not named and not any(e["digest"] == digest for e in entries):
                entries.append(self._make_entry(digest, template["size"],
                                                template["mediaType"], ""))
        self._write_index(entries)

    # -- reading images --

    def _parse(self, manifest_digest: str) -> _Parsed:
        cached = self._parsed.get(manifest_digest)
        if cached is not None:
            return cached
        manifest = self._read_json_blob(manifest_digest)
        config_desc = manifest.get("config") or {}
        config_digest = str(config_desc.get("digest", ""))
        config = self._read_json_blob(config_digest)
        layer_descs = [d for d in manifest.get("layers") or [] if isinstance(d, dict)]
        layer_digests = tuple(str(d.get("digest", "")) for d in layer_descs)
        diff_ids = _str_tuple((config.get("rootfs") or {}).get("diff_ids"))
        if len(diff_ids) != len(layer_digests):
            raise ImageError(f"image {manifest_digest}: {len(layer_digests)} layers but "
                             f"{len(diff_ids)} diff_ids in the config")
        size = int(config_desc.get("size", 0)) + sum(int(d.get("size", 0)) for d in layer_descs)
        parsed = _Parsed(config_digest, config, layer_digests, diff_ids, size)
        self._parsed[manifest_digest] = parsed
        return parsed

    def _image(self, manifest_digest: str, refs: list[str], unpack: bool) -> Image:
        parsed = self._parse(manifest_digest)
        if unpack:
            self._ensure_layers(parsed, manifest_digest)
        config = parsed.config.get("config") or {}
        repo_tags, repo_digests = [], []
        for ref in refs:
            try:
                parsed_ref = parse_reference(ref, default_tag=False)
            except InvalidReference:
                continue
            if parsed_ref.tag:
                repo_tags.append(parsed_ref.tagged)
            repo_digests.append(f"{parsed_ref.repository}@{manifest_digest}")
        labels = config.get("Labels") or {}
        return Image(
            id=parsed.config_digest,
            manifest_digest=manifest_digest,
            repo_tags=tuple(sorted(set(repo_tags))),
            repo_digests=tuple(sorted(set(repo_digests))),
            layers=tuple(self._layer_path(d) for d in reversed(parsed.diff_ids)),
            diff_ids=parsed.diff_ids,
            entrypoint=_str_tuple(config.get("Entrypoint")),
            cmd=_str_tuple(config.get("Cmd")),
            env=_env_pairs(config.get("Env")),
            working_dir=str(config.get("WorkingDir") or ""),
            user=str(config.get("User") or ""),
            size=parsed.size,
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict)
            else {},
        )

    def _ensure_layers(self, parsed: _Parsed, manifest_digest: str) -> None:
        missing = [(b, d) for b, d in zip(parsed.layer_digests, parsed.diff_ids, strict=True)
                   if not self._layer_path(d).is_dir()]
        if not missing:
            return
        with self._locked():
            for blob_digest, diff_id in missing:
                self._unpack(blob_digest, diff_id, manifest_digest)

    def _unpack(self, blob_digest: str, diff_id: str, label: str) -> None:
        target = self._layer_path(diff_id)
        if target.is_dir():
            return
        blob = self._blob_path(blob_digest)
        if not blob.exists():
            raise ImageError(f"image {label}: layer blob {blob_digest} is missing")
        work = Path(tempfile.mkdtemp(dir=self.tmp_dir, prefix="layer."))
        try:
            unpack_layer(blob, work, diff_id, label=blob_digest)
            _syncfs(work)
            os.rename(work, target)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        self.unpack_count += 1
        log.info("unpacked layer %s of %s", diff_id, label)

    def _refs_by_manifest(self) -> dict[str, list[str]]:
        refs: dict[str, list[str]] = {}
        for entry in self._entries():
            names = refs.setdefault(str(entry.get("digest")), [])
            ref = self._entry_ref(entry)
            if ref:
                names.append(ref)
        return refs

    def _find(self, ref_or_id: str) -> tuple[list[str], str]:
        """The manifest digests `ref_or_id` names, and the one ref it names ("" for an id
        or a digest reference). Raises InvalidReference for a malformed reference."""
        refs = self._refs_by_manifest()
        prefix = image_id_prefix(ref_or_id)
        if prefix is not None:
            by_id: dict[str, list[str]] = {}
            for digest in refs:
                config_digest = self._parse(digest).config_digest
                if config_digest.startswith(prefix):
                    by_id.setdefault(config_digest, []).append(digest)
            if len(by_id) == 1:
                return next(iter(by_id.values())), ""
            if len(by_id) > 1:
                raise InvalidReference(f"{go_quote(ref_or_id)} is ambiguous: it matches "
                                       f"{len(by_id)} image ids")
            if ref_or_id.startswith("sha256:"):
                return [], ""
        wanted = parse_reference(ref_or_id)
        if wanted.digest:
            return [d for d, names in refs.items() if d == wanted.digest and any(
                _repository(n) == wanted.repository for n in names)], ""
        return [d for d, names in refs.items() if wanted.tagged in names], wanted.tagged

    # -- the public API --

    def resolve(self, ref: str) -> Image | None:
        """The image `ref` names, its layers unpacked (once), or None when the store has no
        such image. Raises InvalidReference when `ref` is not a valid reference or id (the
        kubelet's InvalidImageName), ImageError when the stored image is broken."""
        digests, _ = self._find(ref)
        if not digests:
            return None
        refs = self._refs_by_manifest()
        return self._image(digests[0], refs.get(digests[0], []), unpack=True)

    def ensure_base(self, busybox: Path = BUSYBOX) -> Image:
        """The busybox base image (`docker.io/library/busybox:latest`), built first when the
        store has no such image (on a new node: the store is empty)."""
        with self._locked():
            image = self.resolve(BASE_IMAGE_REF)
            if image is not None:
                return image
            return self.build_base(busybox)

    def build_base(self, busybox: Path = BUSYBOX) -> Image:
        """Build the busybox base image (`base.py`) and name it
        `docker.io/library/busybox:latest`, replacing what that name pointed at."""
        blobs = base_image_blobs(busybox)
        with self._locked():
            layer_digest = self._put_bytes(blobs.layer, "busybox layer")
            self._put_bytes(blobs.config, "busybox config")
            manifest_digest = self._put_bytes(blobs.manifest, "busybox manifest")
            self._unpack(layer_digest, layer_digest, manifest_digest)
            template = self._make_entry(manifest_digest, len(blobs.manifest),
                                        MEDIA_TYPE_OCI_MANIFEST, "")
            self._set_refs([(template, [BASE_IMAGE_REF])])
            image = self.resolve(BASE_IMAGE_REF)
        assert image is not None
        log.info("built %s: %s", BASE_IMAGE_REF, image.id)
        return image

    def import_archive(self, path: Path, name: str | None = None) -> list[Image]:
        """Import every image of an OCI layout directory, an OCI archive (a tar of a layout,
        possibly gzipped) or a `docker save` archive (converted with skopeo). `name`
        overrides the names the archive gives (one-image archives only). Layers are unpacked
        now, so a bad layer fails the import and leaves nothing behind."""
        path = Path(path)
        override = str(parse_reference(name)) if name else ""
        with self._locked():
            if path.is_dir():
                if (path / "index.json").exists():
                    return self._import_layout(DirLayout(path), override, {})
                raise ImageError(f"{path}: a directory without index.json is not an OCI "
                                 "image layout")
            try:
                tar = tarfile.open(path, mode="r:*")  # noqa: SIM115 (closed below)
            except FileNotFoundError:
                raise ImageError(f"{path}: no such file") from None
            except tarfile.TarError as err:
                raise ImageError(f"{path}: not an OCI layout, OCI archive or docker "
                                 f"archive: {err}") from None
            with tar:
                source = TarLayout(tar, str(path))
                if source.has("index.json"):
                    return self._import_layout(source, override, {})
                if not source.has("manifest.json"):
                    raise ImageError(f"{path}: a tar with neither index.json (OCI archive) "
                                     "nor manifest.json (docker archive)")
                repo_tags = docker_archive_tags(source)
            work = Path(tempfile.mkdtemp(dir=self.tmp_dir, prefix="docker-archive."))
            try:
                layout = convert_docker_archive(path, len(repo_tags), work)
                return self._import_layout(
                    DirLayout(layout, label=f"{path} (converted by skopeo)"), override,
                    {f"image{i}": tags for i, tags in enumerate(repo_tags)})
            finally:
                shutil.rmtree(work, ignore_errors=True)

    def remove(self, ref_or_id: str) -> list[str]:
        """Remove a name (`busybox:latest`: that name only), or a whole image by id or digest
        reference (all its names); then delete the blobs and unpacked layers no remaining
        image uses. Whether a container still uses the image is the caller's check. Returns
        what was removed (names, or the image id for an unnamed image); raises ImageNotFound
        when nothing matches."""
        with self._locked():
            digests, ref = self._find(ref_or_id)
            if not digests:
                raise ImageNotFound(f"no such image: {ref_or_id}")
            removed: list[str] = []
            kept: list[dict[str, Any]] = []
            for entry in self._entries():
                entry_ref = self._entry_ref(entry)
                hit = entry["digest"] in digests and (not ref or entry_ref == ref)
                if hit:
                    removed.append(entry_ref or self._parse(entry["digest"]).config_digest)
                else:
                    kept.append(entry)
            self._write_index(kept)
            self._collect_garbage()
        return removed

    # -- import helpers --

    def _import_layout(self, source: Layout, override: str,
                       names_by_ref: dict[str, list[str]]) -> list[Image]:
        candidates = [self._candidate(source, desc, names_by_ref)
                      for desc in source.index()["manifests"] if isinstance(desc, dict)]
        if not candidates:
            raise ImageError(f"{source.label}: the layout holds no image")
        distinct = {c.manifest_digest for c in candidates}
        if override:
            if len(distinct) > 1:
                raise ImageError(f"{source.label}: holds {len(distinct)} images; a name can "
                                 "only be given to a one-image archive")
            for c in candidates:
                c.names = [override]
        new: list[tuple[dict[str, Any], list[str]]] = []
        seen: dict[str, list[str]] = {}
        try:
            for c in candidates:
                if c.manifest_digest not in seen:
                    self._copy_image(source, c)
                    seen[c.manifest_digest] = []
                seen[c.manifest_digest].extend(n for n in c.names
                                               if n not in seen[c.manifest_digest])
            for c in candidates:
                names = seen.pop(c.manifest_digest, None)
                if names is not None:
                    template = self._make_entry(c.manifest_digest, c.manifest_size,
                                                c.media_type, "")
                    new.append((template, names))
        except BaseException:
            self._collect_garbage()
            raise
        self._set_refs(new)
        refs = self._refs_by_manifest()
        log.info("imported %d image(s) from %s", len(new), source.label)
        return [self._image(t["digest"], refs.get(t["digest"], []), unpack=True)
                for t, _ in new]

    def _candidate(self, source: Layout, desc: dict[str, Any],
                   names_by_ref: dict[str, list[str]]) -> _Candidate:
        digest = str(desc.get("digest", ""))
        digest_hex(digest)
        annotations = desc.get("annotations") or {}
        ref_name = str(annotations.get(ANNOTATION_REF_NAME) or "")
        names: list[str] = []
        if ref_name in names_by_ref:
            names = names_by_ref[ref_name]
        else:
            for raw in (annotations.get(ANNOTATION_CONTAINERD_NAME), ref_name):
                if not raw:
                    continue
                try:
                    names = [str(parse_reference(str(raw)))]
                    break
                except InvalidReference:
                    log.warning("%s: ignoring the image name %r", source.label, raw)
        data = source.read(source.blob_name(digest))
        if digest_of(data) != digest:
            raise ImageError(f"{source.label}: manifest {digest} does not match its digest")
        try:
            manifest = json.loads(data)
        except ValueError as err:
            raise ImageError(f"{source.label}: manifest {digest} is not JSON: {err}") from None
        if not isinstance(manifest, dict):
            raise ImageError(f"{source.label}: manifest {digest} is not a JSON object")
        media_type = str(desc.get("mediaType") or manifest.get("mediaType") or
                         (MEDIA_TYPE_OCI_INDEX if "manifests" in manifest
                          else MEDIA_TYPE_OCI_MANIFEST))
        if media_type in INDEX_MEDIA_TYPES:
            chosen = self._candidate(source, self._pick_platform(source, digest, manifest), {})
            if names:
                chosen.names = _tags(names)
            return chosen
        for n in names:
            ref = parse_reference(n, default_tag=False)
            if ref.digest and ref.digest != digest:
                log.warning("%s: %s does not name manifest %s", source.label, n, digest)
        return _Candidate(digest, len(data), media_type, _tags(names))

    def _pick_platform(self, source: Layout, digest: str,
                       index: dict[str, Any]) -> dict[str, Any]:
        arch = host_architecture()
        for desc in index.get("manifests") or []:
            platform = desc.get("platform") or {}
            if platform.get("os") == "linux" and platform.get("architecture") == arch:
                return dict(desc)
        raise ImageError(f"{source.label}: index {digest} has no image for linux/{arch}")

    def _copy_image(self, source: Layout, c: _Candidate) -> None:
        what = f"{source.label}: image {c.manifest_digest}"
        with source.open(source.blob_name(c.manifest_digest)) as f:
            self._put_blob(f, c.manifest_digest, c.manifest_size, what)
        manifest = self._read_json_blob(c.manifest_digest)
        descs = [manifest.get("config") or {}, *(manifest.get("layers") or [])]
        for desc in descs:
            digest = str(desc.get("digest", ""))
            size = desc.get("size")
            with source.open(source.blob_name(digest)) as f:
                self._put_blob(f, digest, int(size) if size is not None else None, what)
        parsed = self._parse(c.manifest_digest)
        for blob_digest, diff_id in zip(parsed.layer_digests, parsed.diff_ids, strict=True):
            try:
                self._unpack(blob_digest, diff_id, c.manifest_digest)
            except LayerError as err:
                raise LayerError(f"{what}: {err}") from None

    # -- garbage collection --

    def _collect_garbage(self) -> None:
        """Delete blobs and unpacked layers no index entry reaches (under the lock)."""
        blobs: set[str] = set()
        diff_ids: set[str] = set()
        for entry in self._entries():
            digest = str(entry.get("digest"))
            blobs.add(digest_hex(digest))
            try:
                parsed = self._parse(digest)
            except ImageError as err:
                log.warning("keeping what image %s reaches is impossible: %s", digest, err)
                continue
            blobs.add(digest_hex(parsed.config_digest))
            blobs.update(digest_hex(d) for d in parsed.layer_digests)
            diff_ids.update(digest_hex(d) for d in parsed.diff_ids)
        for blob in self.blobs_dir.iterdir():
            if blob.name not in blobs:
                blob.unlink(missing_ok=True)
                self._parsed = {k: v for k, v in self._parsed.items() if digest_hex(k) != blob.name}
        for layer in self.layers_dir.iterdir():
            if layer.name not in diff_ids:
                trash = self.tmp_dir / f"trash.{uuid.uuid4().hex}"
                os.rename(layer, trash)  # gone from layers/ at once, then deleted
                shutil.rmtree(trash, ignore_errors=True)
                log.info("deleted unpacked layer sha256:%s", layer.name)

    # last in the class: the method named `list` would shadow the builtin in annotations
    def list(self) -> list[Image]:
        """Every image, named or not, without unpacking anything; sorted by first name."""
        images = [self._image(digest, names, unpack=False)
                  for digest, names in self._refs_by_manifest().items()]
        return sorted(images, key=lambda i: (i.repo_tags[:1] or ("~",), i.id))


def _tags(names: list[str]) -> list[str]:
    """The `repository:tag` forms of `names` (digest-only names add no tag)."""
    refs = [parse_reference(n, default_tag=False) for n in names]
    return [r.tagged for r in refs if r.tag]


def _repository(ref: str) -> str:
    try:
        return parse_reference(ref, default_tag=False).repository
    except InvalidReference:
        return ""

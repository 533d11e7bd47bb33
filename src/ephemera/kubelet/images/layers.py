"""Unpacking one image layer (a tar, plain, gzip or zstd) into a directory that overlayfs can
use directly as a lower dir.

OCI whiteouts become overlay whiteouts: `dir/.wh.NAME` becomes a character device 0/0 at
`dir/NAME`, and `dir/.wh..wh..opq` sets the `trusted.overlay.opaque=y` xattr on `dir`
(other `.wh..wh.*` entries, aufs bookkeeping, are skipped). A whiteout for a name that this
same layer also ships is ignored, as the image spec says; a later entry replaces an earlier one
with the same path, as tar does.

Refused (LayerError, nothing left behind): absolute paths, `..` components, entries whose
parent directory is a symlink in the layer (or a file), hard links whose target escapes or is
missing, character and block devices (also a 0/0 device, which would be an overlay whiteout
smuggled past the spec's `.wh.` form), `trusted.overlay.*` xattrs, and a stream whose
uncompressed digest differs from the config's diff_id. Kept: modes (setuid/setgid/sticky too),
numeric uid/gid (never mapped through the host's passwd), mtimes, FIFOs, symlinks with any
target (they are resolved inside the container, never followed here) and other PAX
`SCHILY.xattr.*` attributes such as `security.capability`.

The caller unpacks into a fresh temporary directory and renames it into place, so a layer
directory that exists is complete.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, cast

from ephemera.api.goformat import go_quote
from ephemera.kubelet.images.errors import LayerError

log = logging.getLogger(__name__)

WHITEOUT_PREFIX = ".wh."
WHITEOUT_META_PREFIX = ".wh..wh."
WHITEOUT_OPAQUE = ".wh..wh..opq"
OVERLAY_OPAQUE_XATTR = "trusted.overlay.opaque"
_XATTR_PAX_PREFIX = "SCHILY.xattr."
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 1 << 20


class _HashingReader:
    """A read-only stream that hashes everything read through it (the uncompressed layer)."""

    def __init__(self, source: IO[bytes]) -> None:
        self._source = source
        self.sha256 = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._source.read(size)
        self.sha256.update(data)
        return data

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


@contextmanager
def _uncompressed(blob: Path) -> Iterator[IO[bytes]]:
    """The blob's uncompressed bytes as a stream, whatever its compression (by magic)."""
    with blob.open("rb") as raw:
        magic = raw.read(4)
        raw.seek(0)
        if magic.startswith(_GZIP_MAGIC):
            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                yield cast(IO[bytes], stream)
        elif magic == _ZSTD_MAGIC:
            zstd = shutil.which("zstd")
            if zstd is None:
                raise LayerError(f"{blob.name}: a zstd layer needs the zstd program")
            proc = subprocess.Popen([zstd, "-dcq"], stdin=raw, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)
            assert proc.stdout is not None
            try:
                yield proc.stdout
            finally:
                proc.stdout.close()
                if proc.wait() not in (0, -13):  # -13: we stopped reading early (SIGPIPE)
                    raise LayerError(f"{blob.name}: zstd failed to decompress the layer")
        else:
            yield raw


def _parts(name: str) -> list[str] | None:
    """The path components of a tar member name relative to the layer root, or None when it
    escapes (absolute, `..`)."""
    if name.startswith("/"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    return parts


class _Unpacker:
    def __init__(self, dest: Path, label: str) -> None:
        self.dest = dest
        self.label = label
        self.is_root = os.geteuid() == 0
        self._safe_dirs: set[str] = {""}  # relative paths known to be real directories
        self._dir_meta: dict[str, tarfile.TarInfo] = {}

    def refuse(self, name: str, why: str) -> LayerError:
        return LayerError(f"layer {self.label}: refusing {go_quote(name)}: {why}")

    def parent_dir(self, name: str, parts: list[str]) -> Path:
        """The real directory that will hold `parts[-1]`, creating missing parents (0755),
        refusing a parent that is a symlink or not a directory."""
        for depth in range(1, len(parts)):
            rel = "/".join(parts[:depth])
            if rel in self._safe_dirs:
                continue
            path = self.dest / rel
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                os.mkdir(path, 0o755)
                self._safe_dirs.add(rel)
                continue
            if stat.S_ISLNK(st.st_mode):
                raise self.refuse(name, f"its parent {go_quote(rel)} is a symlink")
            if not stat.S_ISDIR(st.st_mode):
                raise self.refuse(name, f"its parent {go_quote(rel)} is not a directory")
            self._safe_dirs.add(rel)
        return self.dest.joinpath(*parts[:-1])

    def clear(self, rel: str, path: Path, keep_dir: bool) -> None:
        """Remove whatever is at `path` so a new entry can take its place."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            if keep_dir:
                return
            shutil.rmtree(path)
            self._safe_dirs = {d for d in self._safe_dirs
                               if d != rel and not d.startswith(rel + "/")}
            self._dir_meta = {d: m for d, m in self._dir_meta.items()
                              if d != rel and not d.startswith(rel + "/")}
        else:
            os.unlink(path)

    def own(self, path: Path, member: tarfile.TarInfo) -> None:
        try:
            os.lchown(path, member.uid, member.gid)
        except PermissionError:
            if self.is_root:
                raise

    def xattrs(self, path: Path, member: tarfile.TarInfo) -> None:
        for key, value in member.pax_headers.items():
            if not key.startswith(_XATTR_PAX_PREFIX):
                continue
            attr = key[len(_XATTR_PAX_PREFIX):]
            if attr.startswith("trusted.overlay."):
                raise self.refuse(member.name, f"it carries the overlay xattr {go_quote(attr)}")
            try:
                os.setxattr(path, attr, value.encode("utf-8", "surrogateescape"),
                            follow_symlinks=False)
            except OSError as err:
                log.warning("layer %s: %s: cannot set xattr %s: %s",
                            self.label, member.name, attr, err)

    def whiteout(self, member: tarfile.TarInfo, parts: list[str]) -> None:
        base = parts[-1]
        parent = self.parent_dir(member.name, parts)
        if base == WHITEOUT_OPAQUE:
            os.setxattr(parent, OVERLAY_OPAQUE_XATTR, b"y")
            return
        if base.startswith(WHITEOUT_META_PREFIX):
            log.debug("layer %s: skipping %s", self.label, member.name)
            return
        hidden = base[len(WHITEOUT_PREFIX):]
        if hidden in ("", ".", ".."):
            raise self.refuse(member.name, "a whiteout for no name")
        target = parent / hidden
        if os.path.lexists(target):
            return  # the same layer ships the name: the whiteout only hides lower layers
        os.mknod(target, stat.S_IFCHR | 0o000, os.makedev(0, 0))
        self.own(target, member)

    def entry(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        parts = _parts(member.name)
        if parts is None:
            raise self.refuse(member.name, "the path escapes the layer (absolute or '..')")
        if not parts:  # the layer root itself
            if not member.isdir():
                raise self.refuse(member.name, "the layer root must be a directory")
            self._dir_meta[""] = member
            return
        if parts[-1].startswith(WHITEOUT_PREFIX):
            self.whiteout(member, parts)
            return
        rel = "/".join(parts)
        path = self.parent_dir(member.name, parts) / parts[-1]
        if member.ischr() or member.isblk():
            raise self.refuse(member.name, "device files are not allowed in a layer")
        self.clear(rel, path, keep_dir=member.isdir())
        if member.isdir():
            if not path.is_dir():
                os.mkdir(path, 0o700)
            self._safe_dirs.add(rel)
            self.own(path, member)
            self._dir_meta[rel] = member
            self.xattrs(path, member)
            return
        if member.isfile():
            source = tar.extractfile(member)
            assert source is not None
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(source, out, _CHUNK)
                out.flush()
                if self.is_root:
                    os.fchown(fd, member.uid, member.gid)
                os.fchmod(fd, member.mode & 0o7777)
        elif member.issym():
            os.symlink(member.linkname, path)
            self.own(path, member)
        elif member.islnk():
            target_parts = _parts(member.linkname)
            if not target_parts:
                raise self.refuse(member.name,
                                  f"hard link target {go_quote(member.linkname)} escapes")
            target = self.parent_dir(member.name, target_parts) / target_parts[-1]
            try:
                target_st = os.lstat(target)
            except FileNotFoundError:
                missing = f"hard link target {go_quote(member.linkname)} is missing"
                raise self.refuse(member.name, missing) from None
            if stat.S_ISDIR(target_st.st_mode):
                raise self.refuse(member.name, "a hard link to a directory")
            os.link(target, path, follow_symlinks=False)
            return  # the link shares the target's inode and metadata
        elif member.isfifo():
            os.mkfifo(path, 0o600)
            self.own(path, member)
            os.chmod(path, member.mode & 0o7777)
        else:
            raise self.refuse(member.name, f"unsupported tar entry type {member.type!r}")
        self.xattrs(path, member)
        os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)

    def finish(self) -> None:
        """Directory modes and mtimes last (adding entries changes a directory's mtime),
        deepest first."""
        if "" not in self._dir_meta:
            os.chmod(self.dest, 0o755)
        for rel in sorted(self._dir_meta, key=lambda r: r.count("/") + bool(r), reverse=True):
            member = self._dir_meta[rel]
            path = self.dest / rel if rel else self.dest
            if not rel:
                self.own(path, member)
            os.chmod(path, member.mode & 0o7777)
            os.utime(path, (member.mtime, member.mtime))


def unpack_layer(blob: Path, dest: Path, diff_id: str, label: str = "") -> None:
    """Unpack the layer `blob` into the empty directory `dest` (see the module docstring).
    Raises LayerError when an entry is refused or the uncompressed digest is not `diff_id`;
    `dest` is then left in an unspecified state for the caller to remove."""
    label = label or diff_id
    unpacker = _Unpacker(dest, label)
    try:
        with _uncompressed(blob) as stream:
            reader = _HashingReader(stream)
            with tarfile.open(fileobj=reader, mode="r|") as tar:  # type: ignore[call-overload]
                for member in tar:
                    unpacker.entry(tar, member)
            reader.drain()
    except tarfile.TarError as err:
        raise LayerError(f"layer {label}: not a valid tar stream: {err}") from None
    except (EOFError, gzip.BadGzipFile) as err:
        raise LayerError(f"layer {label}: truncated or corrupt: {err}") from None
    actual = "sha256:" + reader.sha256.hexdigest()
    if actual != diff_id:
        raise LayerError(f"layer {label}: uncompressed digest {actual} does not match "
                         f"the diff_id {diff_id}")
    unpacker.finish()


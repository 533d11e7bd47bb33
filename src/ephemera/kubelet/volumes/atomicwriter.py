"""The atomic writer behind the configMap, secret, downwardAPI and projected volumes, as
upstream's `pkg/volume/util/atomic_writer.go` (reference/k8s-semantics.md section 5.3).

Layout of a target directory::

    <target>/..2026_11_29_14_42_07.123456789/   the current payload (a timestamped dir)
    <target>/..data -> ..2026_11_29_14_42_07.123456789
    <target>/<key>  -> ..data/<key>              one link per top-level payload path

A write builds the whole new payload in a fresh timestamped directory that nothing points to
yet, then swaps `..data` to it with one `rename(2)` of a `..data_tmp` symlink: a reader that
resolves a path through `..data` sees the old payload or the new one, never a mix or a
half-written file, and a file already open keeps its old content. Then stale user-visible
links and the old timestamped directory are removed. Nothing is written when the payload is
unchanged (same paths, same bytes, same modes). Paths starting with `..` are reserved.

Blocking (file I/O); call `write` from a thread.
"""

from __future__ import annotations

import errno
import os
import posixpath
import random
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ephemera.kubelet.volumes.base import ensure_dir, setup_tmpfs_dir

__all__ = [
    "DATA_DIR_NAME",
    "DATA_DIR_TMP_NAME",
    "AtomicWriter",
    "FileProjection",
    "PayloadError",
    "validate_path",
    "write_volume",
]

DATA_DIR_NAME = "..data"
DATA_DIR_TMP_NAME = "..data_tmp"
_MAX_FILE_NAME_LENGTH = 255
_MAX_PATH_LENGTH = 4096
_TS_FORMAT = "..%Y_%m_%d_%H_%M_%S."


class PayloadError(ValueError):
    """A payload path is invalid; the message is upstream's (`invalid path: ...`)."""


@dataclass(frozen=True)
class FileProjection:
    """One file of a payload: its bytes and its permission bits."""

    data: bytes
    mode: int


def validate_path(target_path: str) -> None:
    """Upstream's `validatePath`, same messages."""
    if target_path == "":
        raise PayloadError(f'invalid path: must not be empty: "{target_path}"')
    if target_path.startswith("/"):
        raise PayloadError(f"invalid path: must be relative path: {target_path}")
    if len(target_path) > _MAX_PATH_LENGTH:
        raise PayloadError(
            f"invalid path: must be less than or equal to {_MAX_PATH_LENGTH} characters"
        )
    items = target_path.split("/")
    for item in items:
        if item == "..":
            raise PayloadError(f"invalid path: must not contain '..': {target_path}")
        if len(item) > _MAX_FILE_NAME_LENGTH:
            raise PayloadError(
                "invalid path: filenames must be less than or equal to "
                f"{_MAX_FILE_NAME_LENGTH} characters"
            )
    if items[0].startswith("..") and len(items[0]) > 2:
        raise PayloadError(f"invalid path: must not start with '..': {target_path}")


def _clean_payload(payload: Mapping[str, FileProjection]) -> dict[str, FileProjection]:
    cleaned: dict[str, FileProjection] = {}
    for path, content in payload.items():
        validate_path(path)
        cleaned[posixpath.normpath(path)] = content
    return cleaned


class AtomicWriter:
    """Writes payloads into one target directory (which must exist)."""

    def __init__(self, target_dir: Path) -> None:
        self.target_dir = Path(target_dir)

    # -- reading the current state -------------------------------------------------------

    def current_data_dir(self) -> Path | None:
        """The timestamped directory `..data` points to, or None before the first write."""
        try:
            link = os.readlink(self.target_dir / DATA_DIR_NAME)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # `..data` exists but is not a link
                return None
            raise
        return self.target_dir / link

    # -- writing ---------------------------------------------------------------------------

    def write(self, payload: Mapping[str, FileProjection]) -> bool:
        """Make the target directory hold exactly `payload`. Returns True when something was
        written, False when the payload was already there."""
        cleaned = _clean_payload(payload)
        old_ts_dir = self.current_data_dir()
        if old_ts_dir is not None and not old_ts_dir.is_dir():
            old_ts_dir = None
        paths_to_remove: set[str] = set()
        if old_ts_dir is not None:
            paths_to_remove = self._paths_to_remove(cleaned, old_ts_dir)
            if not paths_to_remove and not self._payload_differs(cleaned, old_ts_dir):
                return False

        ts_dir = self._new_timestamp_dir()
        try:
            self._write_payload(cleaned, ts_dir)
            self._create_user_visible_links(cleaned)
            tmp_link = self.target_dir / DATA_DIR_TMP_NAME
            try:
                tmp_link.unlink()
            except FileNotFoundError:
                pass
            os.symlink(ts_dir.name, tmp_link)
            os.rename(tmp_link, self.target_dir / DATA_DIR_NAME)  # the atomic step
        except BaseException:
            shutil.rmtree(ts_dir, ignore_errors=True)
            raise
        self._remove_user_visible_paths(paths_to_remove)
        if old_ts_dir is not None and old_ts_dir != ts_dir:
            shutil.rmtree(old_ts_dir, ignore_errors=True)
        return True

    def _new_timestamp_dir(self) -> Path:
        prefix = time.strftime(_TS_FORMAT, time.gmtime())
        for _ in range(10000):
            candidate = self.target_dir / f"{prefix}{random.randrange(1 << 32)}"
            try:
                os.mkdir(candidate, 0o755)
            except FileExistsError:
                continue
            os.chmod(candidate, 0o755)
            return candidate
        raise FileExistsError(f"could not create a timestamped dir in {self.target_dir}")

    @staticmethod
    def _payload_differs(payload: Mapping[str, FileProjection], old_ts_dir: Path) -> bool:
        for path, projection in payload.items():
            file_path = old_ts_dir / path
            try:
                st = os.lstat(file_path)
                with open(file_path, "rb") as fh:
                    data = fh.read()
            except OSError:
                return True
            if data != projection.data or (st.st_mode & 0o7777) != (projection.mode & 0o7777):
                return True
        return False

    @staticmethod
    def _paths_to_remove(payload: Mapping[str, FileProjection], old_ts_dir: Path) -> set[str]:
        new_paths: set[str] = set()
        for path in payload:
            parts = path.split("/")
            for i in range(1, len(parts) + 1):
                new_paths.add("/".join(parts[:i]))
        old_paths: set[str] = set()
        for dirpath, dirnames, filenames in os.walk(old_ts_dir):
            rel_dir = os.path.relpath(dirpath, old_ts_dir)
            for name in [*dirnames, *filenames]:
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                old_paths.add(rel)
        return old_paths - new_paths

    @staticmethod
    def _write_payload(payload: Mapping[str, FileProjection], ts_dir: Path) -> None:
        for path, projection in payload.items():
            full = ts_dir / path
            full.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(projection.data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fchmod(fd, projection.mode & 0o7777)  # umask does not apply
            finally:
                os.close(fd)

    def _create_user_visible_links(self, payload: Mapping[str, FileProjection]) -> None:
        for path in payload:
            top = path.split("/", 1)[0]
            link = self.target_dir / top
            if os.path.lexists(link):
                continue
            os.symlink(f"{DATA_DIR_NAME}/{top}", link)

    def _remove_user_visible_paths(self, paths: set[str]) -> None:
        for path in paths:
            if "/" in path:
                continue
            try:
                os.remove(self.target_dir / path)
            except FileNotFoundError:
                pass


def write_volume(
    host_dir: Path, payload: Mapping[str, FileProjection], tmpfs_size: int | None
) -> bool:
    """Set up an atomic-writer volume at `host_dir` and write `payload` into it: the
    directory (a tmpfs of `tmpfs_size` bytes when that is not None; 0 means no `size=`)
    is created or mounted when missing, then the payload is written if it changed."""
    if tmpfs_size is None:
        ensure_dir(host_dir, 0o777)
    else:
        setup_tmpfs_dir(host_dir, tmpfs_size)
    return AtomicWriter(host_dir).write(payload)

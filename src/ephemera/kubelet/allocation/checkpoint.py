"""The allocated-pod checkpoint (upstream's `pkg/kubelet/allocation/state/checkpoint_v2.go`,
reference/k8s-semantics.md section 2.6): every admitted pod, full object with its status left
blank, in `<root>/checkpoints/allocated_pods_state`.

File format (JSON): `{"version": "v2", "data": "<json text>", "checksum": "<sha256 hex of
data>"}` where `data` is `{"podList": [pods sorted by UID]}`, so the bytes are deterministic.
A write goes to a temporary file in the same directory, is fsynced and renamed over the old
one (atomic: a crash leaves the old or the new file, never a torn one). As upstream's
`pkg/kubelet/util/store/filestore.go` the directory is not fsynced after the rename: a killed
kubelet finds the renamed file at once (the page cache outlives the process), and only a power
loss within the filesystem's commit interval could bring the old file back; that saves a
second journal commit on the way from a pod change to its actuation. `load()` returns the
pods by UID; a file whose checksum does not match, or that is not valid JSON, raises
`CheckpointCorruptedError`; a version other than "v2" raises it with upstream's message.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ephemera.api.goformat import go_quote

__all__ = ["CHECKPOINT_NAME", "CHECKPOINT_VERSION", "AllocationCheckpoint",
           "CheckpointCorruptedError"]

CHECKPOINT_NAME = "allocated_pods_state"
CHECKPOINT_VERSION = "v2"
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC


class CheckpointCorruptedError(Exception):
    """The checkpoint file cannot be trusted."""


def _checksum(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()


class AllocationCheckpoint:
    """Reads and writes the allocated pods of one kubelet."""

    def __init__(self, root_dir: Path) -> None:
        self.dir = Path(root_dir) / "checkpoints"
        self.path = self.dir / CHECKPOINT_NAME
        self._tmp = self.dir / f".{CHECKPOINT_NAME}.tmp"
        self._lock = threading.Lock()

    def store(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        """Write `pods` (UID -> allocated pod) atomically: the temporary file (one name: one
        writer at a time, and a leftover of a killed kubelet is truncated), fsynced, renamed
        over the checkpoint. Five system calls: each one lets go of the GIL, and getting it
        back can wait for the event loop (the swap this write holds up waits too)."""
        ordered = [pods[uid] for uid in sorted(pods)]
        data = json.dumps({"podList": ordered}, sort_keys=True, separators=(",", ":"))
        body = json.dumps({"version": CHECKPOINT_VERSION, "data": data,
                           "checksum": _checksum(data)}).encode()
        with self._lock:  # one writer at a time (writes run in worker threads)
            try:
                fd = os.open(self._tmp, _TMP_FLAGS, 0o600)
            except FileNotFoundError:
                self.dir.mkdir(parents=True, exist_ok=True)
                fd = os.open(self._tmp, _TMP_FLAGS, 0o600)
            try:
                try:
                    view = memoryview(body)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(self._tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(self._tmp)
                raise

    def load(self) -> dict[str, dict[str, Any]]:
        """The checkpointed pods by UID ({} when there is no checkpoint)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            outer = json.loads(text)
        except ValueError as err:
            raise CheckpointCorruptedError(f"checkpoint {self.path} is not valid JSON: "
                                           f"{err}") from None
        if not isinstance(outer, dict):
            raise CheckpointCorruptedError(f"checkpoint {self.path} is not an object")
        version = outer.get("version")
        if version != CHECKPOINT_VERSION:
            raise CheckpointCorruptedError(
                f"unsupported checkpoint version {go_quote(str(version))}: this kubelet reads "
                f"legacy (unversioned) and {go_quote(CHECKPOINT_VERSION)} checkpoints")
        data = outer.get("data")
        if not isinstance(data, str) or outer.get("checksum") != _checksum(data):
            raise CheckpointCorruptedError(
                f"checkpoint {self.path} is corrupted: checksum mismatch")
        try:
            pods = json.loads(data).get("podList") or []
        except (ValueError, AttributeError) as err:
            raise CheckpointCorruptedError(f"checkpoint {self.path}: bad data: {err}") \
                from None
        result: dict[str, dict[str, Any]] = {}
        for pod in pods:
            uid = str(((pod or {}).get("metadata") or {}).get("uid") or "")
            if uid:
                result[uid] = pod
        return result

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

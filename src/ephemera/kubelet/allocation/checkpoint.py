"""The allocated-pod checkpoint (upstream's `pkg/kubelet/allocation/state/checkpoint_v2.go`,
reference/k8s-semantics.md section 2.6): every admitted pod, full object with its status left
blank, in `<root>/checkpoints/`.

File format (JSON, upstream's): `{"version": "v2", "data": "<json text>", "checksum":
"<sha256 hex of data>"}` where `data` is `{"podList": [pods sorted by UID], "sequence": N}`
(`sequence`: ephemera's, below), so the bytes are deterministic; spaces after the object pad
a file to its size.

Two slots, written in turn: `allocated_pods_state` and `allocated_pods_state.alt`. A write
overwrites the older slot in place (`pwrite` from offset 0, padded to the slot's size, then
`fdatasync`) and never renames: an overwrite within a file's size changes no metadata, so its
flush is the data alone (0.1-0.2 ms on this machine's disk, against 2-4 ms for upstream's
temporary file fsynced and renamed over the old one, which commits the filesystem's journal;
the checkpoint's flush is on the way from every pod change to its actuation; the directory
is flushed too, once, when a slot file is first made). A crash or a kill can tear only the
slot being written, and the other slot still holds the previous write, which is what was
actuated then: `load()` takes the valid slot with the higher sequence. A slot's size only
grows (to a multiple of 4 KiB, with room to spare, so a pod added rarely extends it).
`load()` returns the pods by UID; when no slot is valid (checksum, JSON) it raises
`CheckpointCorruptedError`, with upstream's message for a version other than "v2". A single
file from before the slots (no `sequence`) reads as sequence 0.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ephemera.api.goformat import go_quote

__all__ = ["CHECKPOINT_NAME", "CHECKPOINT_VERSION", "AllocationCheckpoint",
           "CheckpointCorruptedError"]

log = logging.getLogger("ephemera.kubelet.allocation")

CHECKPOINT_NAME = "allocated_pods_state"
CHECKPOINT_VERSION = "v2"
ALTERNATE_SUFFIX = ".alt"
_SLOT_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
_BLOCK = 4096


class CheckpointCorruptedError(Exception):
    """The checkpoint file cannot be trusted."""


def _checksum(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()


def _slot_size(length: int) -> int:
    """The size a slot grows to for a body of `length` bytes: a quarter more, in blocks."""
    return -(-(length + length // 4) // _BLOCK) * _BLOCK


class AllocationCheckpoint:
    """Reads and writes the allocated pods of one kubelet (two slots, see the module)."""

    def __init__(self, root_dir: Path) -> None:
        self.dir = Path(root_dir) / "checkpoints"
        self.path = self.dir / CHECKPOINT_NAME
        self.slots = (self.path, self.dir / (CHECKPOINT_NAME + ALTERNATE_SUFFIX))
        self._lock = threading.Lock()
        self._sequence = -1  # of the last write (-1: the slots not read yet)
        self._newest: int | None = None  # the slot holding it (None: neither holds any)
        self._sizes = [0, 0]  # each slot's size on disk

    def newest(self) -> Path:
        """The slot holding the last write (the first slot when there is none yet)."""
        if self._sequence < 0:
            self._read()
        return self.slots[self._newest or 0]

    def store(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        """Write `pods` (UID -> allocated pod) to the older slot, in place, and flush it:
        open, pwrite, fdatasync, close (each system call lets the writing thread's GIL go,
        and getting it back can wait for the event loop the swap waits on)."""
        with self._lock:  # one writer at a time (writes run in worker threads)
            if self._sequence < 0:
                self._read()
            sequence = self._sequence + 1
            ordered = [pods[uid] for uid in sorted(pods)]
            data = json.dumps({"podList": ordered, "sequence": sequence}, sort_keys=True,
                              separators=(",", ":"))
            body = json.dumps({"version": CHECKPOINT_VERSION, "data": data,
                               "checksum": _checksum(data)}).encode()
            slot = 0 if self._newest is None else 1 - self._newest  # never the newest
            size = self._sizes[slot]
            if len(body) > size:
                size = _slot_size(len(body))
            body += b" " * (size - len(body))
            new = self._sizes[slot] == 0  # the slot's file is made by this write
            try:
                fd = os.open(self.slots[slot], _SLOT_FLAGS, 0o600)
            except FileNotFoundError:
                self.dir.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.slots[slot], _SLOT_FLAGS, 0o600)
            try:
                written = os.pwrite(fd, body, 0)
                while written < len(body):
                    written += os.pwrite(fd, body[written:], written)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            if new:  # its name too, before the write counts as done
                dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            self._sizes[slot] = size
            self._sequence, self._newest = sequence, slot

    def load(self) -> dict[str, dict[str, Any]]:
        """The checkpointed pods by UID ({} when there is no checkpoint)."""
        with self._lock:
            return self._read()

    def _read(self) -> dict[str, dict[str, Any]]:
        """Both slots read; the valid one with the higher sequence wins (and sets where the
        next write goes)."""
        best: tuple[int, int, dict[str, dict[str, Any]]] | None = None
        errors: list[CheckpointCorruptedError] = []
        for slot, path in enumerate(self.slots):
            try:
                text = path.read_bytes()
            except FileNotFoundError:
                self._sizes[slot] = 0
                continue
            self._sizes[slot] = len(text)
            try:
                sequence, pods = _parse(path, text)
            except CheckpointCorruptedError as err:
                errors.append(err)
                continue
            if best is None or sequence > best[0]:
                best = (sequence, slot, pods)
        if best is None:
            self._sequence, self._newest = 0, None
            if errors:
                raise errors[0]
            return {}
        for error in errors:  # the other slot torn by a crash mid-write: the older holds
            log.warning("allocation checkpoint: %s; using the other slot", error)
        self._sequence, self._newest = best[0], best[1]
        return best[2]

    def remove(self) -> None:
        with self._lock:
            for path in self.slots:
                path.unlink(missing_ok=True)
            self._sequence, self._newest = 0, None
            self._sizes = [0, 0]


def _parse(path: Path, text: bytes) -> tuple[int, dict[str, dict[str, Any]]]:
    """One slot's sequence and pods by UID; CheckpointCorruptedError when it is not valid."""
    try:
        outer = json.loads(text)
    except ValueError as err:
        raise CheckpointCorruptedError(f"checkpoint {path} is not valid JSON: {err}") \
            from None
    if not isinstance(outer, dict):
        raise CheckpointCorruptedError(f"checkpoint {path} is not an object")
    version = outer.get("version")
    if version != CHECKPOINT_VERSION:
        raise CheckpointCorruptedError(
            f"unsupported checkpoint version {go_quote(str(version))}: this kubelet reads "
            f"legacy (unversioned) and {go_quote(CHECKPOINT_VERSION)} checkpoints")
    data = outer.get("data")
    if not isinstance(data, str) or outer.get("checksum") != _checksum(data):
        raise CheckpointCorruptedError(f"checkpoint {path} is corrupted: checksum mismatch")
    try:
        inner = json.loads(data)
        pods = inner.get("podList") or []
        sequence = inner.get("sequence", 0)
    except (ValueError, AttributeError) as err:
        raise CheckpointCorruptedError(f"checkpoint {path}: bad data: {err}") from None
    if not isinstance(sequence, int) or not isinstance(pods, list):
        raise CheckpointCorruptedError(f"checkpoint {path}: bad data: sequence or podList")
    result: dict[str, dict[str, Any]] = {}
    for pod in pods:
        uid = str(((pod or {}).get("metadata") or {}).get("uid") or "")
        if uid:
            result[uid] = pod
    return sequence, result

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

The kubelet writes from its event loop (`store_async`) through a writer process of its own
(`writer_process=True`; `slotwriter`): the pods are encoded on the loop and the process
writes and flushes the slot, waiting on nothing but the disk, where a thread of the kubelet
would wait for the GIL after each system call while the loop sets up the change's volumes
beside it. When the process cannot be reached the write is made in a thread instead, and the
process is started again at the next write.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ephemera.api.goformat import go_quote
from ephemera.kubelet.allocation import slotwriter
from ephemera.kubelet.helperprocess import ServedHelper

__all__ = ["CHECKPOINT_NAME", "CHECKPOINT_VERSION", "AllocationCheckpoint",
           "CheckpointCorruptedError", "WriterUnavailable"]

log = logging.getLogger("ephemera.kubelet.allocation")

CHECKPOINT_NAME = "allocated_pods_state"
CHECKPOINT_VERSION = "v2"
ALTERNATE_SUFFIX = ".alt"
_BLOCK = 4096
SLOTWRITER = Path(slotwriter.__file__)


class CheckpointCorruptedError(Exception):
    """The checkpoint file cannot be trusted."""


class WriterUnavailable(Exception):
    """No writer process answered: it could not start, or it exited before answering (the
    write may or may not have been made)."""


@dataclass(frozen=True)
class _SlotWrite:
    sequence: int
    slot: int
    body: bytes  # padded to the slot's size
    new: bool  # the slot's file is made by this write


class SlotWriterProcess(ServedHelper):
    """The kubelet's end of the writer process (`slotwriter`), on its event loop: started
    on first use and again after it exited (at once the first time; after failures in a
    row, not before a back-off of 1 s doubling to 30 s); one request at a time
    (`store_async`)."""

    def __init__(self, slots: tuple[Path, Path]) -> None:
        super().__init__()
        self.slots = slots
        self._failures = 0  # in a row: starts that failed, requests not answered
        self._retry_at = 0.0  # time.monotonic() before which no writer is started

    def start(self) -> None:
        """Start the process unless it runs (blocking: a fork and an exec)."""
        if self.running:
            return
        self.stop()
        if time.monotonic() < self._retry_at:
            raise WriterUnavailable(f"the checkpoint writer failed {self._failures} times "
                                    "in a row; not started again yet")
        try:
            self.spawn(SLOTWRITER, options=[f"slot{i}={path}" for i, path in enumerate(self.slots)])
        except OSError as err:
            self._failed()
            raise WriterUnavailable(f"starting the checkpoint writer: {err}") from None
        assert self.sock is not None and self.process is not None
        self.sock.setblocking(False)
        log.info("allocation checkpoint writer started (pid %d)", self.process.pid)

    def _failed(self) -> None:
        self._failures += 1
        delay = 0.0 if self._failures == 1 else min(30.0, 2.0 ** (self._failures - 2))
        self._retry_at = time.monotonic() + delay

    async def write(self, slot: int, body: bytes, new: bool) -> None:
        """Write `body` to slot `slot` and flush it; OSError with the writer's errno when
        that failed, `WriterUnavailable` when no writer answered. Cancelled, it waits for
        the process to end (it finishes the write first)."""
        self.start()
        sock = self.sock
        assert sock is not None
        loop = asyncio.get_running_loop()
        flags = slot & slotwriter.SLOT_BIT | (slotwriter.NEW_BIT if new else 0)
        try:
            await loop.sock_sendall(sock, slotwriter.REQUEST.pack(flags, len(body)) + body)
            code, length = slotwriter.ANSWER.unpack(
                await _recv_exactly(loop, sock, slotwriter.ANSWER.size))
            text = (await _recv_exactly(loop, sock, length)).decode(errors="replace")
        except (OSError, EOFError) as err:
            self.stop()
            self._failed()
            raise WriterUnavailable(f"the checkpoint writer did not answer: {err}") from None
        except BaseException:  # cancelled mid-request: the socket's state is unknown
            self.stop()
            raise
        self._failures = 0
        if code:
            raise OSError(code, text, str(self.slots[slot]))


async def _recv_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                        size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await loop.sock_recv(sock, size - len(data))
        if not chunk:
            raise EOFError("the connection closed")
        data += chunk
    return data


def _checksum(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()


def _slot_size(length: int) -> int:
    """The size a slot grows to for a body of `length` bytes: a quarter more, in blocks."""
    return -(-(length + length // 4) // _BLOCK) * _BLOCK


class AllocationCheckpoint:
    """Reads and writes the allocated pods of one kubelet (two slots, see the module)."""

    _writer: SlotWriterProcess | None = None

    def __init__(self, root_dir: Path, *, writer_process: bool = False) -> None:
        self.dir = Path(root_dir) / "checkpoints"
        self.path = self.dir / CHECKPOINT_NAME
        self.slots = (self.path, self.dir / (CHECKPOINT_NAME + ALTERNATE_SUFFIX))
        self._writer = SlotWriterProcess(self.slots) if writer_process else None
        self._lock = threading.Lock()
        self._async_lock = asyncio.Lock()  # `store_async`: one write at a time
        self._in_thread: asyncio.Future[None] | None = None  # its write made in a thread
        self._sequence = -1  # of the last write (-1: the slots not read yet)
        self._newest: int | None = None  # the slot holding it (None: neither holds any)
        self._sizes = [0, 0]  # each slot's size on disk

    def newest(self) -> Path:
        """The slot holding the last write (the first slot when there is none yet)."""
        if self._sequence < 0:
            self._read()
        return self.slots[self._newest or 0]

    def store(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        """Write `pods` (UID -> allocated pod) to the older slot, in place, and flush it, in
        this thread (`store_async` writes from the event loop)."""
        with self._lock:  # one writer at a time
            write = self._encode(pods)
            slotwriter.write_slot(str(self.slots[write.slot]), write.body, write.new)
            self._written(write)

    async def store_async(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        """`store` for a caller on the event loop: with a writer process (`writer_process`),
        the pods are encoded here and the process writes the slot; else `store` runs in a
        thread. One write at a time, and a write whose caller was cancelled ends before the
        next begins (the process's, or the thread's that replaced it). Not mixed with
        `store` from other threads."""
        if self._writer is None:
            await asyncio.to_thread(self.store, pods)  # `store` holds the lock to its end
            return
        async with self._async_lock:
            if self._in_thread is not None:  # a cancelled caller's write, still running
                await asyncio.wait([self._in_thread])
                if not self._in_thread.cancelled() and self._in_thread.exception():
                    log.warning("allocation checkpoint: a write whose caller was cancelled "
                                "failed: %s", self._in_thread.exception())
                self._in_thread = None
            with self._lock:
                write = self._encode(pods)
            try:
                await self._writer.write(write.slot, write.body, write.new)
            except WriterUnavailable as err:  # safe to repeat: the same slot, the same bytes
                log.warning("allocation checkpoint: %s; writing it in a thread", err)
                self._in_thread = asyncio.ensure_future(asyncio.to_thread(
                    slotwriter.write_slot, str(self.slots[write.slot]), write.body, write.new))
                try:
                    await asyncio.shield(self._in_thread)
                finally:
                    if self._in_thread.done():
                        self._in_thread = None
            with self._lock:
                self._written(write)

    def start(self) -> None:
        """Start the writer process now rather than at the first write (blocking)."""
        if self._writer is not None:
            self._writer.start()

    def close(self) -> None:
        """Stop the writer process (blocking; it is started again when next needed)."""
        if self._writer is not None:
            self._writer.stop()

    @property
    def writer_pid(self) -> int | None:
        """The writer process's pid while it runs."""
        writer = self._writer
        return writer.process.pid if writer is not None and writer.process is not None \
            and writer.running else None

    def _encode(self, pods: Mapping[str, Mapping[str, Any]]) -> _SlotWrite:
        """The next write of `pods`: the older slot (never the newest) and its padded body."""
        if self._sequence < 0:
            self._read()
        sequence = self._sequence + 1
        ordered = [pods[uid] for uid in sorted(pods)]
        data = json.dumps({"podList": ordered, "sequence": sequence}, sort_keys=True,
                          separators=(",", ":"))
        body = json.dumps({"version": CHECKPOINT_VERSION, "data": data,
                           "checksum": _checksum(data)}).encode()
        slot = 0 if self._newest is None else 1 - self._newest
        size = self._sizes[slot]
        if len(body) > size:
            size = _slot_size(len(body))
        body += b" " * (size - len(body))
        # The slot's file is made by this write: its name is flushed too.
        return _SlotWrite(sequence, slot, body, new=self._sizes[slot] == 0)

    def _written(self, write: _SlotWrite) -> None:
        self._sizes[write.slot] = len(write.body)
        self._sequence, self._newest = write.sequence, write.slot

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

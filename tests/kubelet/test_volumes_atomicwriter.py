"""The atomic writer: upstream's on-disk layout, modes, the `..data` swap, no rewrite of an
unchanged payload, and readers never seeing a half-written payload."""

from __future__ import annotations

import os
import re
import stat
import threading
from pathlib import Path

import pytest

from ephemera.kubelet.volumes.atomicwriter import (
    DATA_DIR_NAME,
    AtomicWriter,
    FileProjection,
    PayloadError,
)

TS_DIR = re.compile(r"^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$")


def fp(text: str | bytes, mode: int = 0o644) -> FileProjection:
    return FileProjection(text.encode() if isinstance(text, str) else text, mode)


def test_first_write_builds_upstream_layout(tmp_path: Path) -> None:
    writer = AtomicWriter(tmp_path)
    assert writer.write({"a": fp("A", 0o600), "dir/b": fp("B", 0o755)}) is True

    data_link = os.readlink(tmp_path / DATA_DIR_NAME)
    assert TS_DIR.match(data_link), data_link
    assert stat.S_IMODE(os.stat(tmp_path / data_link).st_mode) == 0o755
    assert os.readlink(tmp_path / "a") == "..data/a"
    assert os.readlink(tmp_path / "dir") == "..data/dir"  # only the first element is a link
    assert (tmp_path / "a").read_text() == "A"
    assert (tmp_path / "dir" / "b").read_text() == "B"
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "dir" / "b").st_mode) == 0o755
    assert sorted(os.listdir(tmp_path)) == sorted([DATA_DIR_NAME, data_link, "a", "dir"])


def test_modes_ignore_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        AtomicWriter(tmp_path).write({"k": fp("v", 0o666)})
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o666


def test_unchanged_payload_is_not_rewritten(tmp_path: Path) -> None:
    writer = AtomicWriter(tmp_path)
    writer.write({"a": fp("A"), "b": fp("B")})
    before = os.readlink(tmp_path / DATA_DIR_NAME)
    assert writer.write({"a": fp("A"), "b": fp("B")}) is False
    assert os.readlink(tmp_path / DATA_DIR_NAME) == before
    # a mode change alone is a change
    assert writer.write({"a": fp("A", 0o400), "b": fp("B")}) is True
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o400


def test_update_swaps_data_and_removes_stale_paths(tmp_path: Path) -> None:
    writer = AtomicWriter(tmp_path)
    writer.write({"keep": fp("1"), "gone": fp("x"), "sub/old": fp("o")})
    old_ts = os.readlink(tmp_path / DATA_DIR_NAME)

    assert writer.write({"keep": fp("2"), "new": fp("n")}) is True
    new_ts = os.readlink(tmp_path / DATA_DIR_NAME)
    assert new_ts != old_ts
    assert not (tmp_path / old_ts).exists()
    assert not os.path.lexists(tmp_path / "gone")
    assert not os.path.lexists(tmp_path / "sub")
    assert (tmp_path / "keep").read_text() == "2"
    assert (tmp_path / "new").read_text() == "n"
    assert sorted(os.listdir(tmp_path)) == sorted([DATA_DIR_NAME, new_ts, "keep", "new"])


def test_empty_payload_gives_an_empty_volume(tmp_path: Path) -> None:
    AtomicWriter(tmp_path).write({})
    ts = os.readlink(tmp_path / DATA_DIR_NAME)
    assert sorted(os.listdir(tmp_path)) == sorted([DATA_DIR_NAME, ts])
    assert os.listdir(tmp_path / ts) == []


def test_open_file_keeps_old_content_after_update(tmp_path: Path) -> None:
    writer = AtomicWriter(tmp_path)
    writer.write({"cfg": fp("old-content")})
    with open(tmp_path / "cfg", "rb") as fh:
        writer.write({"cfg": fp("new-content")})
        assert fh.read() == b"old-content"
    assert (tmp_path / "cfg").read_text() == "new-content"


def test_readers_never_see_a_mixed_or_partial_payload(tmp_path: Path) -> None:
    """Two files written together are always read from the same generation, and a file is
    never seen half-written, while a writer swaps payloads as fast as it can."""
    size = 64 * 1024
    generations = 60

    def payload(gen: int) -> dict[str, FileProjection]:
        char = bytes([ord("a") + gen % 26])
        return {"first": fp(char * size), "second": fp(char * size)}

    writer = AtomicWriter(tmp_path)
    writer.write(payload(0))
    stop = threading.Event()
    problems: list[str] = []
    consistent_reads = 0

    def reader() -> None:
        nonlocal consistent_reads
        while not stop.is_set():
            try:
                dir_fd = os.open(tmp_path / DATA_DIR_NAME, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                continue
            try:
                first = _read_at(dir_fd, "first")
                second = _read_at(dir_fd, "second")
            except FileNotFoundError:
                continue  # the old generation was removed under us: retry, as consumers do
            finally:
                os.close(dir_fd)
            for content in (first, second):
                if len(content) != size or content.count(content[:1]) != size:
                    problems.append(f"partial file: {len(content)} bytes")
            if first[:1] != second[:1]:
                problems.append(f"mixed generations {first[:1]!r} {second[:1]!r}")
            consistent_reads += 1
            try:
                visible = (tmp_path / "first").read_bytes()
            except FileNotFoundError:
                continue
            if len(visible) != size or visible.count(visible[:1]) != size:
                problems.append("partial file through the user-visible link")

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for gen in range(1, generations):
            assert writer.write(payload(gen)) is True
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert problems == []
    assert consistent_reads > 0


def _read_at(dir_fd: int, name: str) -> bytes:
    fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", 'invalid path: must not be empty: ""'),
        ("/abs", "invalid path: must be relative path: /abs"),
        ("a/../b", "invalid path: must not contain '..': a/../b"),
        ("..hidden", "invalid path: must not start with '..': ..hidden"),
        ("x" * 256, "invalid path: filenames must be less than or equal to 255 characters"),
        ("a/" * 2049, "invalid path: must be less than or equal to 4096 characters"),
    ],
)
def test_invalid_paths_rejected_with_upstream_messages(
    tmp_path: Path, path: str, message: str
) -> None:
    with pytest.raises(PayloadError) as info:
        AtomicWriter(tmp_path).write({path: fp("x")})
    assert str(info.value) == message
    assert os.listdir(tmp_path) == []

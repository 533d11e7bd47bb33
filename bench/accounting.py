"""The accounting benchmark (`python -m bench.accounting`, part of `make bench`): what one
measurement of a pod's local ephemeral storage costs with each way of measuring it, on the
same files.

For each file count N (default 10,000 and 100,000): a pod's storage is set up as the
kubelet's loop-image backend sets it up (`LoopImageAccounting.prepare_pod`: a sparse ext4
image loop-mounted on the pod directory; its set-up and release are timed too), N small
files (`hello-<i>\\n`, one 4 KiB block each, 1,000 per directory) are written into an
emptyDir on it and synced, then, one run each, with the dentry and inode caches warm (the
writes just made them):

- **walk**: `disk_usage(pod_dir)`, the du-style walk of the walk backend (`du.py`), in
  process;
- **walk, kubelet passes**: the walk backend itself (`DuBackend`, at most 100,000 entries
  per pass, round-robin), passes until the pod's directory has a complete result;
- **du -s**: `du -s -x -B1 pod_dir` as a subprocess (fork + exec included);
- **loopimage**: `LoopImageAccounting.pod_usage(uid)` (one `statvfs`); its time is the mean
  of 1,000 calls (one call is below the clock's useful resolution).

Each row also shows the bytes each method reported (they agree: same files, same blocks),
and the ratios walk / du -s, walk / loopimage and du -s / loopimage.

Needs root, `/dev/loop-control` and `mkfs.ext4` (as the backend does). Results go to stdout
as Markdown, progress to stderr, and with `--json PATH` to a JSON file. The image is
released (unmounted, its loop device gone, the file deleted) and the work dir removed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    format_ms,
    format_number,
    log,
    machine_description,
    markdown_table,
    progress,
    ratio,
)
from ephemera.kubelet.stats import DuBackend, LoopImageAccounting, disk_usage
from ephemera.kubelet.volumes.mounts import mountpoints_under

FILES_PER_DIR = 1000
STATVFS_CALLS = 1000


@dataclass
class Row:
    files: int
    setup_s: float
    release_s: float
    walk_s: float
    walk_bytes: int
    passes_s: float
    passes: int
    du_s: float
    du_bytes: int
    loopimage_s: float
    loopimage_bytes: int


def _write_files(volume: Path, count: int) -> None:
    for start in range(0, count, FILES_PER_DIR):
        directory = volume / f"d{start // FILES_PER_DIR}"
        directory.mkdir(parents=True)
        for i in range(start, min(start + FILES_PER_DIR, count)):
            with open(directory / f"f{i}", "w") as fh:
                fh.write(f"hello-{i}\n")
    os.sync()


def _du(path: Path) -> tuple[float, int]:
    started = time.perf_counter()
    out = subprocess.run(["du", "-s", "-x", "-B1", str(path)], check=True,
                         capture_output=True, text=True).stdout
    return time.perf_counter() - started, int(out.split()[0])


def _lost_and_found(pod_dir: Path) -> int:
    """What du and the walk count that the pod did not write: the image's top directory and
    lost+found."""
    return os.lstat(pod_dir).st_blocks * 512 + disk_usage(pod_dir / "lost+found").bytes


def measure(work_dir: Path, count: int) -> Row:
    root = work_dir / f"kubelet-{count}"
    accounting = LoopImageAccounting(root)
    uid = str(uuid.uuid4())
    pod = {"metadata": {"name": f"files-{count}", "namespace": "bench", "uid": uid},
           "spec": {"containers": [{"name": "c"}]}}
    log_dir = root / "logs" / "pods" / f"bench_files-{count}_{uid}"
    backend = DuBackend()
    try:
        started = time.perf_counter()
        asyncio.run(accounting.prepare_pod(pod, log_dir))
        setup_s = time.perf_counter() - started
        pod_dir = root / "pods" / uid
        with progress(f"writing {count:,} files"):
            _write_files(pod_dir / "volumes" / "kubernetes.io~empty-dir" / "data", count)
        extra = _lost_and_found(pod_dir)
        with progress(f"measuring {count:,} files"):
            started = time.perf_counter()
            walked = disk_usage(pod_dir)
            walk_s = time.perf_counter() - started
            started = time.perf_counter()
            while backend.usage(pod_dir) is None:
                backend.measure_blocking([pod_dir])
            passes_s = time.perf_counter() - started
            du_s, du_bytes = _du(pod_dir)
            started = time.perf_counter()
            for _ in range(STATVFS_CALLS):
                usage = accounting.pod_usage(uid)
            loopimage_s = (time.perf_counter() - started) / STATVFS_CALLS
            assert usage is not None
        started = time.perf_counter()
        asyncio.run(accounting.release_pod(uid))
        release_s = time.perf_counter() - started
        return Row(count, setup_s, release_s, walk_s, walked.bytes - extra, passes_s,
                   backend.passes, du_s, du_bytes - extra, loopimage_s, usage.bytes)
    finally:
        backend.close()  # its open directories would keep the image busy
        asyncio.run(accounting.release_orphans(set()))
        accounting.close()
        left = [m.mount_point for m in mountpoints_under(root)]
        if left:  # release_orphans logs and keeps what it could not release
            log(f"bench.accounting: {root} keeps mounts {left}; not removed")
        else:
            shutil.rmtree(root, ignore_errors=True)


def report(rows: Sequence[Row], machine: dict[str, str]) -> str:
    lines = ["### bench.accounting: one pod's usage, walk vs `du -s` vs the loop image "
             "(warm caches, one run)", ""]
    lines.append(markdown_table(
        ["files", "walk", "walk, kubelet passes", "du -s", "loopimage", "walk / du -s",
         "walk / loopimage", "du -s / loopimage"],
        [[f"{r.files:,}", format_ms(r.walk_s), f"{format_ms(r.passes_s)} ({r.passes})",
          format_ms(r.du_s), format_ms(r.loopimage_s),
          format_number(ratio(r.walk_s, r.du_s)),
          f"{ratio(r.walk_s, r.loopimage_s):,.0f}", f"{ratio(r.du_s, r.loopimage_s):,.0f}"]
         for r in rows]))
    lines += ["", "(ms; passes in parentheses)", ""]
    lines.append(markdown_table(
        ["files", "walk bytes", "du -s bytes", "loopimage bytes", "image set-up",
         "image release"],
        [[f"{r.files:,}", f"{r.walk_bytes:,}", f"{r.du_bytes:,}", f"{r.loopimage_bytes:,}",
          format_ms(r.setup_s), format_ms(r.release_s)] for r in rows]))
    lines += ["", "(bytes the pod wrote, the image's top directory and lost+found left out; "
              "set-up and release in ms)", ""]
    lines += [f"- {key}: {value}" for key, value in machine.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.accounting",
                                     description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--files", default="10000,100000",
                        help="file counts, comma-separated (default 10000,100000)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the kubelet roots go (default a temporary dir)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.files.split(",") if x.strip()]
    if os.geteuid() != 0:
        log("bench.accounting needs root (loop devices)")
        return 2
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-accounting-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        machine = machine_description(work_dir)
        rows = [measure(work_dir, count) for count in counts]
    finally:
        if args.work_dir is None and not mountpoints_under(work_dir):
            shutil.rmtree(work_dir, ignore_errors=True)
    print(report(rows, machine))
    if args.json is not None:
        data: dict[str, Any] = {"rows": [asdict(r) for r in rows], "machine": machine}
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

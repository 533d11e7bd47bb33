"""The accounting benchmark (`python -m bench.accounting`) still runs end to end with tiny
counts: a row per file count with every method's time, the three methods reporting the same
bytes, and no mount, loop device or image left behind. It never checks a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]


def loop_devices_under(path: Path) -> list[str]:
    found = []
    for name in os.listdir("/sys/block"):
        try:
            backing = Path(f"/sys/block/{name}/loop/backing_file").read_text()
        except OSError:
            continue
        if backing.startswith(str(path)):
            found.append(name)
    return found


def test_tiny_run_reports_every_row(tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    json_path = tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.accounting", "--files", "50,1200",
         "--work-dir", str(work_dir), "--json", str(json_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")]
    assert sum(line.startswith("| 1,200 ") for line in rows) == 2, run.stdout
    saved = json.loads(json_path.read_text())
    assert [r["files"] for r in saved["rows"]] == [50, 1200]
    for r in saved["rows"]:
        assert r["walk_bytes"] == r["du_bytes"] == r["loopimage_bytes"] >= r["files"] * 4096
        assert min(r["walk_s"], r["du_s"], r["loopimage_s"], r["setup_s"]) > 0
    with open("/proc/self/mountinfo") as f:
        assert not [line for line in f if str(work_dir) in line]
    assert not loop_devices_under(work_dir)
    assert not list(work_dir.rglob("*.img"))

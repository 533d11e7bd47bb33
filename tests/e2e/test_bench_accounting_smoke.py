"""The accounting benchmark (`python -m bench.accounting`) still runs end to end with tiny
counts: a row per file count with every method's time, the three methods reporting the same
bytes, and no mount, loop device or image left behind. It never checks a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster import run_bench

pytestmark = pytest.mark.e2e


def test_tiny_run_reports_every_row(tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    json_path = tmp_path / "bench.json"
    run = run_bench("bench.accounting",
                    ["--files", "50,1200", "--work-dir", str(work_dir), "--json", str(json_path)],
                    work_dir, timeout=300)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")]
    assert sum(line.startswith("| 1,200 ") for line in rows) == 2, run.stdout
    saved = json.loads(json_path.read_text())
    assert [r["files"] for r in saved["rows"]] == [50, 1200]
    for r in saved["rows"]:
        assert r["walk_bytes"] == r["du_bytes"] == r["loopimage_bytes"] >= r["files"] * 4096
        assert min(r["walk_s"], r["du_s"], r["loopimage_s"], r["setup_s"]) > 0
    assert run.left_behind == []  # no mount, loop device, process
    assert not list(work_dir.rglob("*.img"))

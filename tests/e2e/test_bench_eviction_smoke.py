"""The eviction benchmark (`python -m bench.eviction`) still runs end to end with tiny
counts: the pass cost with 2 pods, one eviction at a short "default" interval and two at
the low one through a real `ephemera up`; every table row is there with numbers, so is the
ratio of the two intervals' p50s, the JSON has every latency, and nothing is left behind.
It never checks a time."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cluster import run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("bench-eviction")]


def test_tiny_run_reports_every_row(tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    json_path = tmp_path / "bench.json"
    run = run_bench("bench.eviction",
                    ["--default-interval", "2", "--low-interval", "1", "--repeats-default", "1",
                     "--repeats-low", "2", "--idle-pods", "1", "--cpu-window", "1",
                     "--pods", "2", "--files", "2", "--passes", "2",
                     "--work-dir", str(work_dir), "--json", str(json_path)],
                    work_dir, timeout=300)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.left_behind == []
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")]
    assert any(line.startswith("| 2 s ") for line in rows), run.stdout
    assert any(line.startswith("| 1 s ") for line in rows), run.stdout
    assert "Lowest sound interval: " in run.stdout
    ratio_line = next(line for line in run.stdout.splitlines()
                      if line.startswith("p50 at 2 s ÷ p50 at 1 s: "))
    assert float(ratio_line.rpartition(" ")[2]) > 0
    saved = json.loads(json_path.read_text())
    assert [(r["interval"], len(r["seconds"])) for r in saved["latency"]] == [(2, 1), (1, 2)]
    for r in saved["latency"]:
        assert all(math.isfinite(s) and s > 0 for s in r["seconds"])
    [cost] = saved["pass_cost"]
    assert cost["pods"] == 2 and len(cost["wall"]) == 2
    assert saved["lowest_sound_interval"] >= 1
    assert math.isfinite(saved["interval_p50_ratio"]) and saved["interval_p50_ratio"] > 0

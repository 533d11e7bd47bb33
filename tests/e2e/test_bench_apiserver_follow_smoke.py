"""The follow benchmark (`python -m bench.apiserver_follow`) still runs end to end: one short
round of this checkout's apiserver with two workers on a real etcd, pod creates over one
connection, reports what the serving and the following worker used a create, in its table
and its JSON. It never checks a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.etcd]

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_one_round_reports_the_serving_and_the_following_worker(tmp_path: Path) -> None:
    json_path = tmp_path / "follow.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.apiserver_follow", "--rounds", "1", "--seconds", "1",
         "--rate", "50", "--settle-seconds", "1", "--json", str(json_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    report = json.loads(json_path.read_text())
    assert report["benchmark"] == "apiserver_follow" and report["workers"] == 2
    [result] = report["results"]
    assert result["tree"] == "this" and result["creates"] == 50
    assert len(result["workers_ms_per_create"]) == 2
    # one worker serves every create; the other only follows them, for less
    assert result["serving_ms_per_create"] > result["following_ms_per_create"] > 0
    assert "| 1 " in run.stdout and "| this " in run.stdout and "1.00" in run.stdout


def test_one_worker_is_refused() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.apiserver_follow", "--workers", "1"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2
    assert "--workers must be at least 2" in run.stderr

"""The follow benchmark (`python -m bench.apiserver_follow`) still runs end to end: one short
round of this checkout's apiserver with two workers on a real etcd, pod creates over one
connection, reports what the serving and the following worker used a create, in its table
and its JSON. It never checks a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster import run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.etcd]


def test_one_round_reports_the_serving_and_the_following_worker(tmp_path: Path) -> None:
    json_path = tmp_path / "follow.json"
    run = run_bench("bench.apiserver_follow",
                    ["--rounds", "1", "--seconds", "1", "--rate", "50", "--settle-seconds", "1",
                     "--json", str(json_path)], tmp_path, timeout=180)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.left_behind == []
    report = json.loads(json_path.read_text())
    assert report["benchmark"] == "apiserver_follow" and report["workers"] == 2
    [result] = report["results"]
    assert result["tree"] == "this" and result["creates"] == 50
    assert len(result["workers_ms_per_create"]) == 2
    # one worker serves every create; the other only follows them, for less
    assert result["serving_ms_per_create"] > result["following_ms_per_create"] > 0
    assert "| 1 " in run.stdout and "| this " in run.stdout and "1.00" in run.stdout


def test_one_worker_is_refused(tmp_path: Path) -> None:
    run = run_bench("bench.apiserver_follow", ["--workers", "1"], tmp_path, timeout=60)
    assert run.returncode == 2
    assert "--workers must be at least 2" in run.stderr

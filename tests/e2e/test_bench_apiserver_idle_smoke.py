"""The idle-apiserver benchmark (`python -m bench.apiserver_idle`) still runs end to end: one
short round of this checkout's apiserver with two workers on a real etcd reports each
process's threads and the cores used, in its table and its JSON. It never checks a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster import run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.etcd]


def test_one_round_reports_threads_and_cores(tmp_path: Path) -> None:
    json_path = tmp_path / "idle.json"
    run = run_bench("bench.apiserver_idle",
                    ["--rounds", "1", "--seconds", "1", "--settle-seconds", "1", "--workers", "2",
                     "--json", str(json_path)], tmp_path, timeout=180)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.left_behind == []
    report = json.loads(json_path.read_text())
    assert report["benchmark"] == "apiserver_idle" and report["workers"] == 2
    [result] = report["results"]
    assert result["tree"] == "this" and result["round"] == 1
    # the group's parent and its two workers, each with its threads
    assert len(result["threads"]) == 3 and all(n >= 1 for n in result["threads"])
    assert result["apiserver_cores"] >= 0 and result["etcd_cores"] >= 0
    assert "| 1 " in run.stdout and "| this " in run.stdout
    # the ratio of the first tree to itself
    assert "1.00" in run.stdout


def test_a_tree_without_sources_is_refused(tmp_path: Path) -> None:
    run = run_bench("bench.apiserver_idle", ["--tree", f"x={tmp_path}"], tmp_path, timeout=60)
    assert run.returncode == 2
    assert "expected LABEL=DIR with DIR/src/ephemera" in run.stderr

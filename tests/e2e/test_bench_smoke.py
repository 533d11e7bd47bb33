"""The API benchmark (`python -m bench.api`) still runs end to end: a tiny run on both stores
and raw etcd prints every phase for every backend, and its ratios as numbers. It never
checks a time."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.etcd]

REPO_ROOT = Path(__file__).resolve().parents[2]
PODS = 20
PAGE_SIZE = 5
CLIENTS = 4
PHASES = [
    "create, sequential",
    f"create, {CLIENTS} clients",
    "get, sequential",
    f"list, all {PODS}",
    f"list, pages of {PAGE_SIZE}",
    "watch, response → event",
    "watch, write sent → event",
]
BACKENDS = ["sqlite", "etcd", "raw etcd"]
# The response → event delay can be below zero (the event overtakes the write's response; for
# raw etcd it usually does, on the shared gRPC channel), and a ratio of such delays is "-".
MAY_BE_NEGATIVE = "watch, response → event"
WALL_PER_OP_COLUMNS = {2, 5}


def table_rows(section: str) -> list[list[str]]:
    """The body rows of the first Markdown table in `section`, as stripped cells."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert len(lines) >= 2, f"no table in:\n{section}"
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_tiny_run_reports_every_phase_and_ratio(tmp_path: Path) -> None:
    json_path = tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.api", "--pods", str(PODS), "--page-size", str(PAGE_SIZE),
         "--clients", str(CLIENTS), "--list-repeats", "2", "--stores", "sqlite,etcd",
         "--work-dir", str(tmp_path / "work"), "--json", str(json_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"

    _, _, after_results = run.stdout.partition("## Results")
    results_section, _, after_ratios = after_results.partition("## Ratios")
    ratios_section, _, cpu_section = after_ratios.partition("## CPU per operation")
    assert ratios_section and cpu_section, run.stdout

    results = {(row[0], row[1]): row for row in table_rows(results_section)}
    for phase in PHASES:
        for backend in BACKENDS:
            row = results.get((phase, backend))
            assert row is not None, f"no row for {phase} on {backend}:\n{run.stdout}"
            expected_count = 2 if phase.startswith("list") else PODS
            assert int(row[2]) == expected_count
            float(row[3])  # median ms
            float(row[4])  # p99 ms
            assert float(row[5].replace(",", "")) > 0  # ops/s

    ratios = {row[0]: row[1:] for row in table_rows(ratios_section)}
    assert list(ratios) == PHASES
    for phase, cells in ratios.items():
        assert len(cells) == 6
        for column, cell in enumerate(cells):
            if cell == "-" and phase == MAY_BE_NEGATIVE and column not in WALL_PER_OP_COLUMNS:
                continue
            assert float(cell) > 0, f"{phase}: ratio column {column} is {cell!r}"

    cpu = {(row[0], row[1]): row[2:] for row in table_rows(cpu_section)}
    for backend, measured in (("sqlite", [0, 1, 3]), ("etcd", [0, 1, 2, 3]),
                              ("raw etcd", [0, 2, 3])):
        row = cpu[("create, sequential", backend)]
        for column in measured:  # wall, apiserver, (etcd), client
            assert float(row[column]) >= 0, f"{backend}: CPU column {column} is {row}"
    # etcd's own request counts: the floor's get is one Range; the apiserver's create on etcd
    # makes some; nothing is counted on sqlite
    assert cpu[("get, sequential", "raw etcd")][4] == "Range 1"
    assert cpu[("create, sequential", "etcd")][4] != "-"
    assert cpu[("create, sequential", "sqlite")][4] == "-"

    # progress: one line per phase and backend on stderr
    for phase in ("create, sequential", f"list, pages of {PAGE_SIZE}"):
        for backend in BACKENDS:
            assert f"[{backend}] {phase}" in run.stderr, run.stderr

    report = json.loads(json_path.read_text())
    assert report["config"]["pods"] == PODS
    assert {(r["phase"], r["backend"]) for r in report["results"]} == {
        (p, b) for p in PHASES for b in BACKENDS}
    for entry in report["ratios"]:
        for key, value in entry.items():
            if key != "phase" and value is not None:
                assert math.isfinite(value) and value > 0

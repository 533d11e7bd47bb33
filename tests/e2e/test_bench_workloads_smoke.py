"""The workloads benchmark (`python -m bench.workloads`) still runs end to end: one real
`ephemera up` with its kubelet on the real runtime and one hollow node, a Deployment and a
ReplicaSet of 3 replicas on the fake node and of 2 on both; the report has every phase for
every node and count, numeric ratios and the CPU per pod, and nothing is left behind. It
never checks a time, only that the times are there and in the order the phases imply."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from cluster import run_bench

pytestmark = pytest.mark.e2e
REPLICAS, REAL_REPLICAS = 3, 2
SETS = [("fake", REPLICAS), ("fake", REAL_REPLICAS), ("real", REAL_REPLICAS)]
PHASES = ["Deployment create → available", "Deployment delete → pods gone",
          "ReplicaSet scale 0 → N: pods exist", "ReplicaSet scale 0 → N: pods Running",
          "ReplicaSet scale N → 0: pods gone"]
CPU_PHASES = [p for p in PHASES if p != "ReplicaSet scale 0 → N: pods exist"]


def sections(report: str) -> dict[str, str]:
    """The report's `## ` sections by title."""
    found: dict[str, str] = {}
    for chunk in report.split("\n## ")[1:]:
        title, _, body = chunk.partition("\n")
        found[title.strip()] = body
    return found


def table(section: str) -> tuple[list[str], list[list[str]]]:
    """The header and body rows of the first Markdown table in `section`, stripped cells."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert len(lines) >= 2, f"no table in:\n{section}"
    header, *rows = ([cell.strip() for cell in line.strip("|").split("|")]
                     for line in [lines[0], *lines[2:]])
    return header, rows


@pytest.mark.skipif(os.geteuid() != 0, reason="runs containers: needs root")
def test_tiny_run_reports_every_phase_node_and_ratio(tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    json_path = tmp_path / "workloads.json"
    run = run_bench("bench.workloads",
                    ["--replicas", str(REPLICAS), "--real-replicas", str(REAL_REPLICAS),
                     "--timeout", "120", "--work-dir", str(work_dir), "--json", str(json_path)],
                    work_dir, timeout=300)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.left_behind == []
    report = sections(run.stdout)
    assert "fake = hollow node `bench-hollow-0` (fake://" in run.stdout, run.stdout

    _, rows = table(report["Results"])
    assert [(row[0], row[1], int(row[2])) for row in rows] == [
        (phase, node, replicas) for node, replicas in SETS for phase in PHASES]
    for row in rows:
        assert float(row[3]) > 0 and float(row[4]) > 0, row

    _, rows = table(report["Where a Deployment's time goes"])
    assert [(row[0], int(row[1])) for row in rows] == SETS
    for row in rows:
        exist, running, available = (float(cell) for cell in row[2:])
        assert 0 < exist <= running and available > 0, row

    header, rows = table(report["Ratios"])
    assert header[1:] == [f"fake ÷ real, {REAL_REPLICAS} replicas each",
                          f"fake at {REPLICAS} ÷ real at {REAL_REPLICAS}"]
    assert [row[0] for row in rows] == PHASES
    for row in rows:
        assert all(float(cell) > 0 for cell in row[1:]), row

    header, rows = table(report["CPU per pod"])
    assert header[:3] == ["phase", "node", "replicas"]
    assert {"apiserver", "scheduler", "controller-manager", "kubelet", "hollow-nodes",
            "client", "machine"} <= set(header[3:])
    assert [(row[0], row[1], int(row[2])) for row in rows] == [
        (phase, node, replicas) for node, replicas in SETS for phase in CPU_PHASES]
    for row in rows:
        for column in ("apiserver", "controller-manager", "machine"):
            assert float(row[header.index(column)]) > 0, (column, row)

    for line in ("waiting for both nodes Ready", "[fake] warm-up", "[real] warm-up",
                 *(f"[{node}, {replicas} replicas] Deployment, ReplicaSet"
                   for node, replicas in SETS), "stopping ephemera up"):
        assert line in run.stderr, run.stderr

    saved = json.loads(json_path.read_text())
    assert saved["benchmark"] == "workloads"
    assert saved["config"] == {"replicas": REPLICAS, "real_replicas": REAL_REPLICAS,
                               "runtime": "auto"}
    assert saved["nodes"]["real"]["runtime"].split("://")[0] in ("crun", "runc")
    assert len(saved["results"]) == len(SETS) * len(PHASES)
    by_key = {(r["phase"], r["node"], r["replicas"]): r for r in saved["results"]}
    for node, replicas in SETS:
        # Every pod exists before the last of them runs: the same start, a later end.
        exist = by_key[("ReplicaSet scale 0 → N: pods exist", node, replicas)]["seconds"]
        running = by_key[("ReplicaSet scale 0 → N: pods Running", node, replicas)]["seconds"]
        assert 0 < exist <= running
        deployment = by_key[("Deployment create → available", node, replicas)]["detail_s"]
        assert 0 < deployment["pods_exist"] <= deployment["pods_running"]
    for values in saved["ratios"].values():
        assert sorted(values) == ["fake_n_real_m", "same"]
        assert all(v is not None and math.isfinite(v) and v > 0 for v in values.values())

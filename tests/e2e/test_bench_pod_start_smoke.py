"""The pod start benchmark (`python -m bench.pod_start`) still runs end to end: with 2 pods
through a real `ephemera up` and the bare runtimes (runc, and crun where it works here) it
prints every phase for every backend, every step of where the time goes, numeric ratios and
the CPU per pod, and leaves nothing behind. It never checks a time."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from cluster import run_bench

from ephemera.kubelet.runtime import crun_works

pytestmark = pytest.mark.e2e
PODS = 2
PHASES = ["create → Running", "delete → gone"]
EPHEMERA_CREATE_STEPS = [
    "apiserver: create (POST → 201)",
    "scheduler: bind (→ nodeName on the client's watch)",
    "kubelet: watch, admission (→ its first dir for the pod)",
    "volume manager: emptyDir set up (→ volume dir)",
    "pod worker: volume wait returns (→ sandbox begins)",
    "runtime: sandbox namespaces (unshare)",
    "CNI ADD: loopback, bridge, host-local, portmap (→ pod IP)",
    "runtime: /dev/shm, /etc files (→ sandbox ready)",
    "image, container config, overlay, config.json",
    "Created event, fork server → shim (→ shim.log)",
    "shim: fork, the runtime's process set up (→ runtime.log)",
    "runtime: create (→ pid file)",
    "runtime: start; the shim records it",
    "status write, watch (→ Running on the client's watch)",
    "total: create → Running",
]
EPHEMERA_DELETE_STEPS = [
    "apiserver: delete (DELETE → 200)",
    "kubelet: SIGTERM → exit, final status (→ terminated on the watch)",
    "kubelet: teardown, pod deleted (→ DELETED on the watch)",
    "total: delete → gone",
]


def floor_steps(kind: str) -> list[str]:
    return ["bundle: overlay mount, config.json", f"`{kind} run -d`", "total: create → Running",
            f"`{kind} kill TERM` → exited", f"`{kind} delete`, umount, rm -r",
            "total: delete → gone"]


def sections(report: str) -> dict[str, str]:
    """The report's `## ` sections by title."""
    found: dict[str, str] = {}
    for chunk in report.split("\n## ")[1:]:
        title, _, body = chunk.partition("\n")
        found[title.strip()] = body
    return found


def table_rows(section: str) -> list[list[str]]:
    """The body rows of the first Markdown table in `section`, as stripped cells."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert len(lines) >= 2, f"no table in:\n{section}"
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


@pytest.mark.skipif(os.geteuid() != 0, reason="runs containers: needs root")
def test_two_pods_report_every_row_and_ratio(tmp_path: Path) -> None:
    floors = ["runc"] + (["crun"] if crun_works(tmp_path / "probe") else [])
    backends = ["ephemera", *floors]
    work_dir = tmp_path / "work"
    json_path = tmp_path / "bench.json"
    run = run_bench("bench.pod_start",
                    ["--pods", str(PODS), "--warmup", "1", "--work-dir", str(work_dir),
                     "--json", str(json_path)], work_dir, timeout=240)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.left_behind == []
    report = sections(run.stdout)
    assert "Left behind: nothing" in run.stdout, run.stdout
    assert f"Pod network: {PODS} of {PODS} pods attached by CNI ADD (median " in run.stdout

    results = {(row[0], row[1]): row for row in table_rows(report["Results"])}
    for phase in PHASES:
        for backend in backends:
            row = results.get((phase, backend))
            assert row is not None, f"no row for {phase} on {backend}:\n{run.stdout}"
            assert int(row[2]) == PODS
            float(row[3])  # median ms
            float(row[4])  # p99 ms

    ratios = {row[0]: row[1:] for row in table_rows(report["Ratios"])}
    assert list(ratios) == PHASES
    for phase, cells in ratios.items():
        assert len(cells) == 2 * len(floors)
        for column, cell in enumerate(cells):
            assert float(cell) > 0, f"{phase}: ratio column {column} is {cell!r}"

    for title, labels in (
            ("Where the time goes: ephemera, create → Running", EPHEMERA_CREATE_STEPS),
            ("Where the time goes: ephemera, delete → gone", EPHEMERA_DELETE_STEPS),
            *((f"Where the time goes: {kind}", floor_steps(kind)) for kind in floors)):
        rows = table_rows(report[title])
        assert [row[0] for row in rows] == labels, title
        for row in rows:
            assert int(row[1]) == PODS, f"{title}: {row}"
            float(row[2])  # a step's median can be below zero (module docstring)

    cpu = {row[0]: row[1:] for row in table_rows(report["CPU per pod"])}
    assert list(cpu) == backends
    for backend, cells in cpu.items():
        assert float(cells[0]) > 0  # wall ms per pod
        measured = [0, 1, 2, 3, 4, 6] if backend == "ephemera" else [4, 5, 6]
        for column in measured:  # the processes measured on each backend, and the machine
            assert float(cells[1 + column]) >= 0, f"{backend}: CPU column {column}: {cells}"

    for phase in ("[ephemera] warm-up", "[ephemera] create → Running, delete → gone",
                  *(f"[{kind}] run -d, kill + delete" for kind in floors),
                  "checking that nothing is left behind"):
        assert phase in run.stderr, run.stderr

    saved = json.loads(json_path.read_text())
    assert saved["config"]["pods"] == PODS
    assert saved["left_behind"] == []
    assert saved["api_writes_per_pod"]["pods"] > 0
    for values in saved["ratios"].values():
        assert sorted(values) == sorted(f"{k}_{s}" for k in floors for s in ("median", "p99"))
        for value in values.values():
            assert value is not None and math.isfinite(value) and value > 0
    assert {len(pods) for pods in saved["pods"].values()} == {PODS}

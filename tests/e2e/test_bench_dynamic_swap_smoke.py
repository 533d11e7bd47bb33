"""The dynamic volume swap benchmark (`python -m bench.dynamic_swap`) still runs end to end:
with 2 swaps and 2 live swaps through a real `ephemera up`, 2 recreations and the bare
runtimes' swaps and live mount sequences (runc, and crun where it works here) it prints
every backend, numeric ratios, the targets, every
step of where the time goes, and leaves nothing behind. It never checks a time."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from cluster import run_bench

from ephemera.kubelet.runtime import crun_works

pytestmark = pytest.mark.e2e
SWAPS = 2
SWAP_STEPS = [
    "apiserver: PUT /dynamic (→ 200)",
    "kubelet: watch, allocation check, checkpoint write (→ written)",
    "volume manager: emptyDir and Secret tmpfs set up (→ both ready)",
    "pod worker wakes, SIGTERM, the old container exits (→ shim's exit)",
    "exit seen, image, container config, overlay, config.json",
    "Created event, fork server → shim (→ shim.log)",
    "shim, runtime create (→ pid file)",
    "runtime: start; the shim records it",
    "status write, watch (→ running with the new mounts on the watch)",
    "total",
]
LIVE_STEPS = [
    "apiserver: PUT /dynamic (→ 200)",
    "kubelet: watch, allocation check, checkpoint write (→ written)",
    "volume manager: emptyDir and Secret tmpfs set up (→ both ready)",
    "pod worker: old mounts detached, new ones attached (→ the runtime's record)",
    "status write, watch (→ the new mounts on the watch)",
    "total",
]
RECREATE_STEPS = [
    "apiserver: DELETE (→ 200)",
    "kubelet: stop, final status, teardown (→ DELETED on the watch)",
    "apiserver: POST (→ 201)",
    "schedule, admit, volumes, sandbox, container (→ Running on the watch)",
    "total",
]


def floor_steps(kind: str) -> list[str]:
    if kind.endswith(" live"):
        return ["umount2(MNT_DETACH) of both, in the container",
                "open_tree, mount_setattr, setns, move_mount of both", "total"]
    return [f"`{kind} kill TERM` → exited (pidfd)", f"`{kind} delete`",
            "new dir, tmpfs + Secret files, config.json", f"`{kind} run -d`", "total"]


def sections(report: str) -> dict[str, str]:
    """The report's `## ` sections by title."""
    found: dict[str, str] = {}
    for chunk in report.split("\n## ")[1:]:
        title, _, body = chunk.partition("\n")
        found[title.strip()] = body
    return found


def table_rows(section: str) -> list[list[str]]:
    """The body rows of the first Markdown table in `section`, as stripped cells."""
    lines: list[str] = []
    for line in section.splitlines():
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break  # the first table ended
    assert len(lines) >= 2, f"no table in:\n{section}"
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


@pytest.mark.skipif(os.geteuid() != 0, reason="runs containers: needs root")
def test_two_swaps_report_every_row_ratio_and_target(tmp_path: Path) -> None:
    kinds = ["runc"] + (["crun"] if crun_works(tmp_path / "probe") else [])
    floors = [*kinds, *(f"{kind} live" for kind in kinds)]
    backends = ["ephemera", "live", "recreate", *floors]
    work_dir = tmp_path / "work"
    json_path = tmp_path / "bench.json"
    run = run_bench("bench.dynamic_swap",
                    ["--swaps", str(SWAPS), "--warmup", "1", "--work-dir", str(work_dir),
                     "--json", str(json_path)], work_dir, timeout=300)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.left_behind == []
    report = sections(run.stdout)
    assert "Left behind: nothing" in run.stdout, run.stdout

    results = {row[0]: row for row in table_rows(report["Results"])}
    assert list(results) == backends
    for backend, row in results.items():
        assert int(row[1]) == SWAPS, backend
        for cell in row[2:5]:  # p50, p95, p99
            assert float(cell) > 0, f"{backend}: {row}"

    ratios = {row[0]: row[1:] for row in table_rows(report["Ratios"])}
    assert list(ratios) == ["recreate ÷ swap", "recreate ÷ live", "swap ÷ live",
                            *(f"swap ÷ {kind}" for kind in kinds),
                            *(f"live ÷ {kind} live" for kind in kinds)]
    for label, cells in ratios.items():
        assert len(cells) == 3
        for cell in cells:
            assert float(cell) > 0, f"{label}: {cells}"

    targets = [line for line in report["Targets"].splitlines() if line.startswith("- ")]
    assert len(targets) == 3, report["Targets"]
    for line in targets:
        assert line.endswith((" — met", " — not met")), line

    for title, labels in (
            ("Where the time goes: ephemera, swap", SWAP_STEPS),
            ("Where the time goes: ephemera, live swap", LIVE_STEPS),
            ("Where the time goes: recreation", RECREATE_STEPS),
            *((f"Where the time goes: {kind}", floor_steps(kind)) for kind in floors)):
        rows = table_rows(report[title])
        assert [row[0] for row in rows] == labels, title
        for row in rows:
            assert int(row[1]) == SWAPS, f"{title}: {row}"
            float(row[2])  # a step's p50 (it can be below zero: clocks of a few ms)

    for phase in ("[ephemera] warm-up", f"[ephemera] {SWAPS} swaps, live swaps and recreations",
                  *(f"[{kind}] kill, delete, new mounts, run -d" for kind in kinds),
                  *(f"[{kind}] live: umount2, open_tree, setns, move_mount" for kind in kinds),
                  "checking that nothing is left behind"):
        assert phase in run.stderr, run.stderr

    saved = json.loads(json_path.read_text())
    assert saved["config"]["swaps"] == SWAPS
    assert saved["left_behind"] == []
    assert [r["backend"] for r in saved["results"]] == backends
    for values in saved["ratios"].values():
        for value in values.values():
            assert value is not None and math.isfinite(value) and value > 0
    assert {len(records) for records in saved["records"].values()} == {SWAPS}

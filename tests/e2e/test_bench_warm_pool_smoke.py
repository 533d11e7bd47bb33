"""The warm-pool benchmark (`python -m bench.warm_pool`) still runs end to end: with 2 claims on
a pool of 2 pods (the example's kopf operator as its ServiceAccount) and 2 cold starts through
a real `ephemera up`, it prints both backends, the ratio, the operator's bindMilliseconds and
every step of where the time goes, and leaves nothing behind. It never checks a time."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from cluster import run_bench
from test_bench_dynamic_swap_smoke import sections, table_rows

pytestmark = pytest.mark.e2e
CLAIMS = 2
CLAIM_STEPS = [
    "apiserver: POST Secret (→ 201)",
    "apiserver: POST Claim (→ 201)",
    "operator: watch, list, take a ready pod (→ its claim label on the watch)",
    "operator: GET and PUT pods/NAME/dynamic (→ the Secret volume in the pod's spec on the "
    "watch)",
    "kubelet: the Secret's tmpfs, mounted into the running container (→ the mount in the "
    "pod's status on the watch)",
    "operator: sees the mount, patches the status (→ Ready on the Claim's watch)",
    "total",
]
COLD_STEPS = [
    "apiserver: POST Secret (→ 201)",
    "apiserver: POST Pod (→ 201)",
    "scheduler: bind (→ nodeName on the watch)",
    "kubelet: admit, volumes, sandbox, container (→ Ready on the watch)",
    "total",
]


@pytest.mark.skipif(os.geteuid() != 0, reason="runs containers: needs root")
def test_two_claims_and_cold_starts_report_every_row_and_ratio(tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    json_path = tmp_path / "bench.json"
    run = run_bench("bench.warm_pool",
                    ["--claims", str(CLAIMS), "--pool", "2", "--warmup", "0",
                     "--work-dir", str(work_dir), "--json", str(json_path)], work_dir,
                    timeout=300)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.left_behind == []
    assert "Left behind: nothing" in run.stdout, run.stdout
    assert run.stdout.startswith(
        f"# bench.warm_pool: {CLAIMS} claims on a warm pool of 2 pods against {CLAIMS} cold "
        "starts, ephemera on "), run.stdout
    report = sections(run.stdout)

    results = {row[0]: row for row in table_rows(report["Results"])}
    assert list(results) == ["warm pool claim", "cold start"]
    for backend, row in results.items():
        assert int(row[1]) == CLAIMS, backend
        for cell in row[2:5]:  # p50, p95, p99
            assert float(cell) > 0, f"{backend}: {row}"

    ratios = {row[0]: row[1:] for row in table_rows(report["Ratios"])}
    assert list(ratios) == ["cold start ÷ claim"]
    for cell in ratios["cold start ÷ claim"]:
        assert float(cell) > 0, ratios

    [bind] = table_rows(report["The operator's own measure"])
    assert bind[0] == "bindMilliseconds" and int(bind[1]) == CLAIMS
    assert all(float(cell) >= 0 for cell in bind[2:]), bind

    for title, labels in (("Where the time goes: warm pool claim", CLAIM_STEPS),
                          ("Where the time goes: cold start", COLD_STEPS)):
        rows = table_rows(report[title])
        assert [row[0] for row in rows] == labels, title
        for row in rows:
            assert int(row[1]) == CLAIMS, f"{title}: {row}"
            float(row[2])  # a step's p50

    for phase in ("starting the operator and a pool of 2 pods",
                  f"{CLAIMS} claims and cold starts, interleaved",
                  "stopping the operator, deleting the pool's pods",
                  "checking that nothing is left behind"):
        assert phase in run.stderr, run.stderr

    saved = json.loads(json_path.read_text())
    assert saved["config"] == {"claims": CLAIMS, "pool": 2, "warmup": 0, "runtime": "auto"}
    assert saved["left_behind"] == []
    assert [r["backend"] for r in saved["results"]] == ["warm pool claim", "cold start"]
    for value in saved["ratios"]["cold start ÷ claim"].values():
        assert value is not None and math.isfinite(value) and value > 0
    assert len(saved["bind_milliseconds"]) == CLAIMS
    assert {len(records) for records in saved["records"].values()} == {CLAIMS}
    marks = saved["records"]["warm pool claim"][0]["marks"]
    assert list(marks) == ["sent", "secret_created", "claim_created", "labelled", "swapped",
                           "mounted", "ready"]

"""The hollow nodes' per-pod driver (`python -m bench.hollow_pods`) still runs: two nodes,
three pods each, every pod Running in its in-memory API, each pod costing the kubelet's
writes (one status PATCH, the Pulled, Created and Started Events), its call counts and its
one resync reported. It never checks a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_tiny_hollow_pods_run_reports_calls_per_pod(tmp_path: Path) -> None:
    out = tmp_path / "hollow.json"
    run = subprocess.run([sys.executable, "-m", "bench.hollow_pods", "--nodes", "2", "--pods",
                          "3", "--resync", "--json", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    result = json.loads(out.read_text())
    assert result["pods"] == 6
    assert result["apiCallsPerPod"] == {"create events": 3.0, "patch status": 1.0}
    assert result["pythonCallsPerPod"] > 0 and result["resyncPythonCallsPerPod"] > 0

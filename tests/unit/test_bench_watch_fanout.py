"""`python -m bench.watch_fanout` still runs and still counts what it claims: with the
shared events and the node index, each event is decoded and encoded a fixed number of
times however many node watchers there are; offered to every watcher, it is not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def rows(nodes: int) -> dict[str, list[int]]:
    out = subprocess.run([sys.executable, "-m", "bench.watch_fanout", "--pods", "30",
                          "--nodes", str(nodes), "--watches", "2"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    table: dict[str, list[int]] = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in ("per watcher", "shared"):
            table[cells[0]] = [int(c) for c in cells[1:4]]
    return table


def test_the_shared_fan_out_does_not_grow_with_node_watchers() -> None:
    few, many = rows(3), rows(12)
    # 90 events: per watcher, every watcher is offered each; shared, 2 + the node's own.
    assert few["per watcher"][0] == 90 * (3 + 1 + 2)
    assert many["per watcher"][0] == 90 * (12 + 1 + 2)
    assert few["shared"] == many["shared"]  # offers, decodes, encodes
    assert many["shared"][1] < many["per watcher"][1] / 10

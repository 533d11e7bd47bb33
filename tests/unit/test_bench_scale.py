"""`bench.scale`'s account of the node lifecycle controller's Unknown marks: read from the
controller-manager's log, each set beside what the benchmark's own Lease watch had seen of
the node by then (so a run tells a late renewal from a controller whose view lagged)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import datetime
from bench.scale import LeaseGaps, explain_marks, unknown_marks
from ephemera.controllers.nodelifecycle import NO_HEARTBEAT_LOG
# the controller's own message, in the components' log format (`ephemera.cli.main`)
log = (f"2026-12-02 19:15:01,250 INFO x: {NO_HEARTBEAT_LOG % ('n-1', 40)}\\n"
       "2026-12-02 19:15:01,300 INFO x: node n-2: other\\n"
       f"2026-12-02 19:15:02,000 INFO x: {NO_HEARTBEAT_LOG % ('n-2', 50)}\\n")
marks = unknown_marks(log)
at = datetime.datetime(2026, 12, 2, 19, 15, 1, 250000).timestamp()
assert marks == [(at, "n-1"), (at + 0.75, "n-2")], marks
leases = LeaseGaps()
def renewal(seconds_before):
    t = datetime.datetime.fromtimestamp(at - seconds_before, datetime.timezone.utc)
    return {"object": {"metadata": {"name": "n-1"},
                       "spec": {"renewTime": t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}}
leases.apply(renewal(30), received=at - 20)
leases.apply(renewal(5), received=at + 1)  # brought after the mark: not counted for it
assert leases.summary()["count"] == 1 and leases.summary()["over_50s"] == 0
# each renewal reached the watch 10 s and 6 s after its renewTime
assert (leases.summary()["delivery_max_s"], leases.summary()["delivered_over_10s"]) == (
    10.0, 0), leases.summary()
assert explain_marks(marks, leases, at - 100) == [
    {"node": "n-1", "at_s": 100.0, "last_renewal_age_s": 30.0,
     "last_renewal_seen_s_before": 20.0},
    {"node": "n-2", "at_s": 100.8, "last_renewal_age_s": None,
     "last_renewal_seen_s_before": None}], explain_marks(marks, leases, at - 100)
"""


def test_each_unknown_mark_is_set_beside_the_renewals_the_bench_saw() -> None:
    subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, check=True, timeout=60)

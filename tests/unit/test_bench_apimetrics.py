"""`bench.apimetrics`: the apiserver's latencies over a phase, from two scrapes of its real
`/metrics` text (`ephemera.apiserver.metrics`), estimated as Prometheus'
`histogram_quantile` estimates them; with several apiserver workers, every worker's
scrapes summed; and the requests a second between two scrapes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import math
from aiohttp.test_utils import make_mocked_request
from bench.apimetrics import histogram_quantile, latency_summary, request_rates
from ephemera.apiserver.metrics import QUEUE_WAIT, ApiserverMetrics

# Prometheus' estimate: linear within the bucket the rank falls in
assert abs(histogram_quantile(0.5, {0.1: 0, 0.2: 10, math.inf: 10}) - 0.15) < 1e-9
assert histogram_quantile(0.99, {0.1: 5, 0.2: 5, math.inf: 10}) == 0.2  # beyond: last bound
assert histogram_quantile(0.5, {0.1: 0, math.inf: 0}) is None

metrics = ApiserverMetrics()
def request(method, path, seconds, code=200, wait=None):
    made = make_mocked_request(method, path)
    if wait is not None:
        made[QUEUE_WAIT] = ("normal", "normal", wait, True)
    metrics.observe(made, code, seconds)

request("POST", "/api/v1/namespaces/d/pods", 0.3)  # before the phase: not counted
before = metrics.render().decode()
for _ in range(90):
    request("POST", "/api/v1/namespaces/d/pods", 0.03)
for _ in range(10):  # 1 s of work each, after 11 s in the queue
    request("PATCH", "/api/v1/namespaces/d/pods/p/status", 12.0, wait=11.0)
request("GET", "/api/v1/namespaces/d/pods/p", 0.07)
request("GET", "/api/v1/namespaces/d/pods?watch=true", 40.0)  # no SLI
after = metrics.render().decode()
got = latency_summary(before, after)
assert got["mutating"]["count"] == 100, got
assert got["mutating"]["p50_ms"] == 27.8, got  # 50 ms x 50/90, in the first bucket
assert got["mutating"]["p99_ms"] == 980.0, got  # 0.8 s + 0.2 s x 9/10: the PATCHes' work
assert got["mutating_with_wait"]["count"] == 100, got
assert got["mutating_with_wait"]["p99_ms"] > 10_000, got  # their waits counted
assert got["get"]["count"] == 1 and got["list"]["count"] == 0, got
assert {k: v["count"] for k, v in got["mutating_by_resource"].items()} == {
    "pods": 90, "pods/status": 10}, got
assert got["queue_wait"]["normal"]["count"] == 10, got

# Workers of `--workers 2`: each scrape names its worker; two lists of every worker's text
# (in any order) sum their counts, the creates of one and the status writes of the other.
second = ApiserverMetrics()
metrics.set_worker(0)
second.set_worker(1)
assert 'ephemera_apiserver_worker_info{worker="1"} 1.0' in second.render().decode()
before = [metrics.render().decode(), second.render().decode()]
request("POST", "/api/v1/namespaces/d/pods", 0.03)
made = make_mocked_request("PATCH", "/api/v1/namespaces/d/pods/p/status")
for _ in range(3):
    second.observe(made, 200, 0.03)
got = latency_summary(before, [second.render().decode(), metrics.render().decode()])
assert {k: v["count"] for k, v in got["mutating_by_resource"].items()} == {
    "pods": 1, "pods/status": 3}, got

# The load between the scrapes, over 2 s: by verb and resource, busiest first; the watch
# counted among them, a rate under 0.05 a second left out.
after = [second.render().decode(), metrics.render().decode()]
for _ in range(5):
    request("GET", "/api/v1/namespaces/d/pods?watch=true", 1.0)
request("GET", "/api/v1/namespaces/d/pods/p", 0.01)
rates = request_rates(after, [metrics.render().decode(), second.render().decode()], 2.0)
assert rates == {"WATCH pods": 2.5, "GET pods": 0.5}, rates
assert list(rates) == ["WATCH pods", "GET pods"], rates
assert request_rates(after, after, 30.0) == {}
"""


def test_latencies_of_a_phase_from_two_scrapes_of_one_process_or_of_every_worker() -> None:
    subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, check=True, timeout=60)

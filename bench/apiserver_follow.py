"""What each apiserver worker pays to follow a write it did not serve
(`python -m bench.apiserver_follow`).

An `ephemera apiserver --store etcd --workers N` on a fresh real etcd (Debian's etcd-server,
started for each measure) is sent pod creates at a steady `--rate` over one keep-alive
connection, so one worker serves them all; every other worker only follows them, through its
watch cache's etcd watch and its own informers. Over `--seconds` the benchmark takes each
process's CPU from `/proc` and reports it per create: the serving worker's (its request path
and its own following), the busiest following worker's, and etcd's. Several trees (frozen
copies of commits, each `LABEL=DIR` with `DIR/src` importable) are measured side by side in
one run, alternated round after round, and the table gives each one's following cost as a
ratio of the first tree's.

    python -m bench.apiserver_follow --tree base=/tmp/base --tree new=/tmp/new \\
        --rounds 3 --seconds 20 --json out.json

Without `--tree`, this checkout's own tree is measured (label `this`).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import (
    Apiserver,
    add_tree_arguments,
    child_pids,
    format_number,
    markdown_table,
    process_cpu_seconds,
    ratio,
    run_side_by_side,
    tree_apiserver_on_etcd,
)
from bench.scale import _pod

# Creates before the measure: the serving worker's connection is open, every cache warm.
WARMUP_CREATES = 200


async def create_pods(apiserver: Apiserver, prefix: str, count: int, rate: float) -> int:
    """`count` pod creates at `rate` a second (0: as fast as they are answered), one at a time
    over one keep-alive connection; the number created."""
    assert apiserver.ssl_context is not None, "the apiserver is not serving"
    connector = aiohttp.TCPConnector(ssl=apiserver.ssl_context, limit=1)
    created = 0
    async with aiohttp.ClientSession(apiserver.url, connector=connector) as http:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(count):
            if rate > 0:
                await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
            async with http.post("/api/v1/namespaces/default/pods",
                                 json=_pod(f"{prefix}-{i}")) as response:
                if response.status != 201:
                    raise RuntimeError(f"create {prefix}-{i}: HTTP {response.status}: "
                                       f"{(await response.text())[:300]}")
            created += 1
    return created


def measure(tree: Path, workers: int, seconds: float, rate: float, settle: float,
            work_dir: Path) -> dict[str, Any]:
    """One measure of the apiserver from `tree`."""
    with tree_apiserver_on_etcd(tree, workers, work_dir) as (apiserver, etcd):
        time.sleep(settle)
        asyncio.run(create_pods(apiserver, "warm", WARMUP_CREATES, rate))
        pids = child_pids(apiserver.pid) or [apiserver.pid]
        before = {pid: process_cpu_seconds(pid) for pid in pids}
        etcd_before = process_cpu_seconds(etcd.process.pid)
        started = time.monotonic()
        creates = asyncio.run(create_pods(apiserver, "pod", int(seconds * rate), rate))
        elapsed = time.monotonic() - started
        used = sorted(((process_cpu_seconds(pid) - before[pid]) for pid in pids), reverse=True)
        etcd_used = process_cpu_seconds(etcd.process.pid) - etcd_before
    per_create = [round(1000 * cpu / creates, 3) for cpu in used]
    return {"creates": creates, "creates_per_second": round(creates / elapsed, 1),
            "serving_ms_per_create": per_create[0],
            "following_ms_per_create": per_create[1] if len(per_create) > 1 else 0.0,
            "workers_ms_per_create": per_create,
            "etcd_ms_per_create": round(1000 * etcd_used / creates, 3)}


def table(results: list[dict[str, Any]]) -> str:
    first = results[0]["tree"]
    baseline = {r["round"]: r for r in results if r["tree"] == first}
    rows = [[str(r["round"]), r["tree"], format_number(r["creates_per_second"], 1),
             format_number(r["serving_ms_per_create"], 3),
             format_number(r["following_ms_per_create"], 3),
             format_number(r["etcd_ms_per_create"], 3),
             format_number(ratio(r["following_ms_per_create"],
                                 baseline[r["round"]]["following_ms_per_create"]))]
            for r in results]
    return markdown_table(["round", "tree", "creates/s", "serving worker ms a create",
                           "following worker ms a create", "etcd ms a create",
                           f"following / {first}"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tree_arguments(parser, workers=2, seconds=20.0, settle=10.0, rounds=2)
    parser.add_argument("--rate", type=float, default=200.0, help="creates a second")
    args = parser.parse_args()
    if args.workers < 2:
        parser.error("--workers must be at least 2: one serves, the others follow")
    if args.rate <= 0:
        parser.error("--rate must be positive")
    run_side_by_side("apiserver_follow", parser, args,
                     lambda tree, work_dir: measure(tree, args.workers, args.seconds, args.rate,
                                                    args.settle_seconds, work_dir),
                     table, rate=args.rate)

if __name__ == "__main__":
    main()

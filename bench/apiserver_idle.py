"""What an apiserver costs with nothing asked of it (`python -m bench.apiserver_idle`): an
`ephemera apiserver --store etcd --workers N` on a fresh real etcd (Debian's etcd-server,
started for each measure), left to settle, then its threads (per process) and the cores it
and etcd keep busy over `--seconds`: its caches' watches, their progress notifications and
keepalives, its own informers and timers. Several trees (frozen copies of commits, each
`LABEL=DIR` with `DIR/src` importable) are measured side by side in one run, alternated
round after round, and the table gives each one's cores as a ratio of the first's.

    python -m bench.apiserver_idle --tree base=/tmp/base --tree new=/tmp/new \\
        --rounds 2 --seconds 45 --json out.json

Without `--tree`, this checkout's own tree is measured (label `this`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Apiserver,
    child_pids,
    format_number,
    machine_description,
    markdown_table,
    measure_trees,
    parse_trees,
    process_cpu_seconds,
    ratio,
    start_etcd,
    tree_env,
    trees_report,
)


def measure(tree: Path, workers: int, seconds: float, settle: float, work_dir: Path
            ) -> dict[str, Any]:
    """One measure of the apiserver from `tree` (its `src` first on PYTHONPATH)."""
    etcd = start_etcd(work_dir / "etcd")
    try:
        apiserver = Apiserver(work_dir / "apiserver", "etcd", [etcd.endpoint], workers=workers)
        apiserver.env = tree_env(tree)
        apiserver.start()
        try:
            time.sleep(settle)
            pids = [apiserver.pid, *child_pids(apiserver.pid)]
            threads = [len(list(Path(f"/proc/{pid}/task").iterdir())) for pid in pids]
            before = {pid: process_cpu_seconds(pid) for pid in pids}
            etcd_before = process_cpu_seconds(etcd.process.pid)
            time.sleep(seconds)
            used = sum(process_cpu_seconds(pid) - before[pid] for pid in pids)
            etcd_used = process_cpu_seconds(etcd.process.pid) - etcd_before
        finally:
            apiserver.stop()
    finally:
        etcd.stop()
    return {"threads": threads, "apiserver_cores": round(used / seconds, 4),
            "etcd_cores": round(etcd_used / seconds, 4)}


def table(results: list[dict[str, Any]]) -> str:
    first = results[0]["tree"]
    baseline = {r["round"]: r for r in results if r["tree"] == first}
    rows = [[str(r["round"]), r["tree"], " ".join(map(str, r["threads"])),
             format_number(r["apiserver_cores"], 4), format_number(r["etcd_cores"], 4),
             format_number(ratio(r["apiserver_cores"], baseline[r["round"]]["apiserver_cores"]))]
            for r in results]
    return markdown_table(["round", "tree", "threads a process", "apiserver cores",
                           "etcd cores", f"apiserver / {first}"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                        help="a tree to measure (repeatable; default: this checkout)")
    parser.add_argument("--workers", type=int, default=2, help="apiserver --workers")
    parser.add_argument("--seconds", type=float, default=45.0, help="each measure's length")
    parser.add_argument("--settle-seconds", type=float, default=15.0,
                        help="wait after it serves (its caches listed, informers synced)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    trees = parse_trees(parser, args.tree)
    with tempfile.TemporaryDirectory(prefix="bench-apiserver-idle-") as scratch:
        results = measure_trees(
            trees, args.rounds, Path(scratch),
            lambda tree, work_dir: measure(tree, args.workers, args.seconds,
                                           args.settle_seconds, work_dir))
        machine = machine_description(Path(scratch))
    print(table(results))
    if args.json is not None:
        report = trees_report("apiserver_idle", sys.argv[1:], machine, trees, args.tree,
                              workers=args.workers, seconds=args.seconds, results=results)
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

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
import time
from pathlib import Path
from typing import Any

from bench.common import (
    add_tree_arguments,
    child_pids,
    format_number,
    markdown_table,
    process_cpu_seconds,
    ratio,
    run_side_by_side,
    tree_apiserver_on_etcd,
)


def measure(tree: Path, workers: int, seconds: float, settle: float, work_dir: Path
            ) -> dict[str, Any]:
    """One measure of the apiserver from `tree` (its `src` first on PYTHONPATH)."""
    with tree_apiserver_on_etcd(tree, workers, work_dir) as (apiserver, etcd):
        time.sleep(settle)
        pids = [apiserver.pid, *child_pids(apiserver.pid)]
        threads = [len(list(Path(f"/proc/{pid}/task").iterdir())) for pid in pids]
        before = {pid: process_cpu_seconds(pid) for pid in pids}
        etcd_before = process_cpu_seconds(etcd.process.pid)
        time.sleep(seconds)
        used = sum(process_cpu_seconds(pid) - before[pid] for pid in pids)
        etcd_used = process_cpu_seconds(etcd.process.pid) - etcd_before
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
    add_tree_arguments(parser, workers=2, seconds=45.0, settle=15.0, rounds=2)
    args = parser.parse_args()
    run_side_by_side("apiserver_idle", parser, args,
                     lambda tree, work_dir: measure(tree, args.workers, args.seconds,
                                                    args.settle_seconds, work_dir),
                     table)

if __name__ == "__main__":
    main()

"""One scheduling decision's CPU time (`python -m bench.schedule_one`): `schedule_pod` of a
small pod (10m cpu, 16Mi memory) over 1,000 hollow nodes (64 cpu, 256Gi, 110 pods each, 0 to
30 pods already counted on each), issue #17's scale run in miniature: 420 feasible nodes to
find, each filtered and scored.

Each `--tree LABEL=DIR` (a frozen copy of a commit, `DIR/src/ephemera` present; default: this
checkout) is measured in a process of its own, the trees alternated round after round (the
order reversed every other round). A measure: `--decisions` calls of `schedule_pod` for new
pods of that size, the start moving by 421 nodes each, each pod then counted on its node as
the scheduler's assume does (not timed); `time.process_time`, best of `--repeats`; the
table gives each tree's best and median over the rounds in µs per decision, and its ratio to
the first tree's.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

NODES = 1000
MAX_PODS_PER_NODE = 30
START_STEP = 421


def _node(name: str) -> dict[str, Any]:
    allocatable = {"cpu": "64", "memory": "256Gi", "ephemeral-storage": "100Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"allocatable": allocatable, "capacity": dict(allocatable),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {
                "requests": {"cpu": "10m", "memory": "16Mi"}}}]},
            "status": {"phase": "Pending"}}


def measure_here(decisions: int, repeats: int) -> float:
    """µs per decision of the `ephemera` on `sys.path` (best of `repeats`)."""
    from ephemera.scheduler.algorithm import schedule_pod
    from ephemera.scheduler.nodeinfo import NodeInfo

    filler = random.Random(17)
    nodes = []
    for i in range(NODES):
        node = NodeInfo(_node(f"hollow-node-{i}"))
        for j in range(filler.randint(0, MAX_PODS_PER_NODE)):
            pod = _pod(f"p-{i}-{j}")
            node.add_pod(pod["metadata"]["uid"], pod)
        nodes.append(node)
    by_name = {node.name: node for node in nodes}
    best = float("inf")
    for repeat in range(repeats):
        rng = random.Random(1)
        spent = 0.0
        for i in range(decisions):
            pod = _pod(f"incoming-{repeat}-{i}")
            started = time.process_time()
            result = schedule_pod(pod, nodes, start=(i * START_STEP) % NODES, rng=rng)
            spent += time.process_time() - started
            if result.node_name is not None:  # the scheduler's assume, not timed
                by_name[result.node_name].add_pod(pod["metadata"]["uid"], pod)
        best = min(best, spent)
    return best / decisions * 1e6


def measure_tree(tree: Path, decisions: int, repeats: int) -> float:
    """`measure_here` in a process that imports `ephemera` from `tree`."""
    env_path = f"{tree / 'src'}:{Path(__file__).resolve().parent.parent}"
    out = subprocess.run(
        [sys.executable, "-m", "bench.schedule_one", "--here",
         "--decisions", str(decisions), "--repeats", str(repeats)],
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, check=True,
        capture_output=True, text=True).stdout
    return float(json.loads(out)["us_per_decision"])


def main(argv: list[str] | None = None) -> None:
    from bench.common import log, parse_trees, ratio

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                        help="a tree to measure (repeatable; default: this checkout)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decisions", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--here", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.here:
        print(json.dumps({"us_per_decision": measure_here(args.decisions, args.repeats)}))
        return
    trees = parse_trees(parser, args.tree)
    times: dict[str, list[float]] = {label: [] for label, _ in trees}
    for round_ in range(1, args.rounds + 1):
        for label, tree in trees if round_ % 2 else list(reversed(trees)):
            times[label].append(measure_tree(tree, args.decisions, args.repeats))
            log(f"round {round_}, {label}: {times[label][-1]:.1f} µs")
    first = min(times[trees[0][0]])
    print("| tree | best µs/decision | median | first tree / this (best) |")
    print("|---|---:|---:|---:|")
    for label, _ in trees:
        print(f"| {label} | {min(times[label]):.1f} | {statistics.median(times[label]):.1f} "
              f"| {ratio(first, min(times[label])):.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])

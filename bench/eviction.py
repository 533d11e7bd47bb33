"""The eviction benchmark (`python -m bench.eviction`, part of `make bench`): how long the
kubelet's eviction manager takes to evict a pod once its usage crosses a limit, and how low
`--eviction-interval` can soundly go.

1. **Latency** through a real `ephemera up --eviction-interval I` (apiserver, scheduler,
   kubelet, the real OCI runtime), for the default interval (10 s) and a low one: a busybox
   pod with an emptyDir of `sizeLimit: 4Mi` runs; the benchmark writes 8 MiB into the
   volume's host directory (write + fsync: the write that crosses the limit), then waits on
   an open watch of the namespace until the pod is `Failed` (`reason: Evicted`). One pod at
   a time; each is deleted and waited for before the next. The time is write-done -> the
   watch shows `Failed` (one host, one clock). Expect about U(0, I) (where in the interval
   the write lands) plus one measuring pass, the kill and the status write.
2. **Cost of a pass** with N pods, in this process: N pods' directories as the kubelet lays
   them out (a writable layer, a log dir and an emptyDir of F small files each) under a
   kubelet root with the base image, then `StatsProvider.get` (the du backend's walk, as the
   kubelet does every pass, image store included) and `decide` (the local-storage checks and
   thresholds), timed over P passes: wall and CPU (this process, all threads). The CPU share
   of a core at interval I is cost / I.
3. **Idle CPU of the kubelet** at each interval with K running pods over a window, from
   `/proc` (all the kubelet's loops, not only the eviction manager's).

The lowest sound interval is reported as the largest of: 10 x the CPU of a pass with the
largest N (a pass then uses at most a tenth of a core), the wall p95 of such a pass (passes
never overlap), and 1 s (the relist period: a faster pass sees no newer container state).

Results go to stdout as Markdown, progress to stderr, and with `--json PATH` to a JSON file.
Every pod is deleted and `ephemera up` stopped; the synthetic trees are removed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    EphemeraUp,
    format_number,
    log,
    machine_description,
    markdown_table,
    percentile,
    process_cpu_seconds,
    progress,
    ratio,
)
from ephemera.client import ApiClient, resource_path
from ephemera.client.kubeconfig import load_kubeconfig
from ephemera.kubelet.eviction import decide, parse_eviction_hard
from ephemera.kubelet.images import ImageStore
from ephemera.kubelet.stats import DuBackend, PodPaths, StatsProvider, pod_paths

NAMESPACE = "default"
NODE = "bench-evict"
LIMIT = "4Mi"
WRITE_BYTES = 8 << 20
POD_TIMEOUT = 120.0
RELIST_PERIOD = 1.0  # the kubelet's relist period: the floor of a useful pass interval
SOUND_FACTOR = 10.0  # a pass may use at most 1/SOUND_FACTOR of the interval


class BenchError(RuntimeError):
    pass


@dataclass
class LatencyRun:
    interval: float
    seconds: list[float] = field(default_factory=list)
    kubelet_cpu_share: float = 0.0  # of one core, idle window with running pods


@dataclass
class PassCost:
    pods: int
    files: int
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


# --- 1. latency through a real cluster ------------------------------------------------------


def victim(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": LIMIT}}],
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", "trap 'exit 0' TERM; "
                                                 "while true; do sleep 0.2; done"],
                                     "volumeMounts": [{"name": "scratch",
                                                       "mountPath": "/scratch"}]}]}}


def idler(name: str) -> dict[str, Any]:
    body = victim(name)
    del body["spec"]["volumes"][0]["emptyDir"]["sizeLimit"]
    return body


def write_past_limit(directory: Path) -> float:
    """Write WRITE_BYTES into `directory` and fsync; the time (epoch seconds) once done."""
    with open(directory / "fill", "wb") as f:
        f.write(b"\0" * WRITE_BYTES)
        f.flush()
        os.fsync(f.fileno())
    return time.time()


async def wait_phase(api: ApiClient, name: str, phases: Sequence[str]) -> dict[str, Any]:
    """Watch until pod `name` has one of `phases`; the pod. Arrival time in `_arrived`."""
    path = resource_path("pods", NAMESPACE)
    listed = await api.list(path, field_selector=f"metadata.name={name}")
    for item in listed["items"]:
        if (item.get("status") or {}).get("phase") in phases:
            return {**item, "_arrived": time.time()}
    async with asyncio.timeout(POD_TIMEOUT):
        async for event in api.watch(path, resource_version=listed["metadata"]["resourceVersion"],
                                     field_selector=f"metadata.name={name}"):
            if (event.object.get("status") or {}).get("phase") in phases:
                return {**event.object, "_arrived": time.time()}
    raise BenchError(f"pod {name}: the watch ended before {phases}")


async def wait_gone(api: ApiClient, name: str) -> None:
    deadline = time.monotonic() + POD_TIMEOUT
    while time.monotonic() < deadline:
        found = await api.list(resource_path("pods", NAMESPACE),
                               field_selector=f"metadata.name={name}")
        if not found["items"]:
            return
        await asyncio.sleep(0.2)
    raise BenchError(f"pod {name} not deleted within {POD_TIMEOUT:.0f}s")


async def latency_runs(up: EphemeraUp, run: LatencyRun, repeats: int, idle_pods: int,
                       cpu_window: float) -> None:
    async with ApiClient(load_kubeconfig(up.kubeconfig), user_agent="bench-eviction") as api:
        for i in range(idle_pods):
            await api.create(resource_path("pods", NAMESPACE), idler(f"idle-{i}"))
        for i in range(idle_pods):
            await wait_phase(api, f"idle-{i}", ["Running"])
        kubelet = up.component_pids()["kubelet"]
        before = process_cpu_seconds(kubelet)
        await asyncio.sleep(cpu_window)
        run.kubelet_cpu_share = (process_cpu_seconds(kubelet) - before) / cpu_window
        for i in range(repeats):
            name = f"victim-{i}"
            created = await api.create(resource_path("pods", NAMESPACE), victim(name))
            await wait_phase(api, name, ["Running"])
            volume = (up.kubelet_dir / "pods" / created["metadata"]["uid"] / "volumes" /
                      "kubernetes.io~empty-dir" / "scratch")
            crossed = await asyncio.to_thread(write_past_limit, volume)
            failed = await wait_phase(api, name, ["Failed", "Succeeded"])
            if failed["status"].get("reason") != "Evicted":
                raise BenchError(f"pod {name} ended without an eviction: {failed['status']}")
            run.seconds.append(failed["_arrived"] - crossed)
            log(f"  interval {run.interval:g}s, pod {i + 1}/{repeats}: "
                f"{run.seconds[-1] * 1000:.0f} ms")
            await api.delete(resource_path("pods", NAMESPACE, name), gracePeriodSeconds=1)
            await wait_gone(api, name)
        for i in range(idle_pods):
            await api.delete(resource_path("pods", NAMESPACE, f"idle-{i}"),
                             gracePeriodSeconds=1)
        for i in range(idle_pods):
            await wait_gone(api, f"idle-{i}")


def bench_latency(work_dir: Path, interval: float, repeats: int, idle_pods: int,
                  cpu_window: float) -> LatencyRun:
    run = LatencyRun(interval)
    up = EphemeraUp(work_dir / f"up-{interval:g}",
                    ["--node-name", NODE, "--eviction-interval", f"{interval:g}"])
    with progress(f"[ephemera up --eviction-interval {interval:g}] {repeats} evictions"):
        up.start()
        try:
            asyncio.run(latency_runs(up, run, repeats, idle_pods, cpu_window))
        except BaseException:
            log(up.log_tail())
            raise
        finally:
            up.stop()
    return run


# --- 2. cost of one pass, in process --------------------------------------------------------


def synthetic_pods(root: Path, pods: int, files: int) -> list[PodPaths]:
    """`pods` pods' directories under kubelet root `root`, `files` 4 KiB files in each of a
    writable layer, a log dir and an emptyDir."""
    paths: list[PodPaths] = []
    chunk = b"x" * 4096
    for i in range(pods):
        uid = f"bench-{i:04d}"
        pod = {"metadata": {"uid": uid, "name": f"p{i}", "namespace": NAMESPACE},
               "spec": {"containers": [{"name": "c", "image": "busybox"}],
                        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}]}}
        layer = root / "pods" / uid / "containers" / "c" / "0" / "upper"
        logs = root / "logs" / "pods" / f"{NAMESPACE}_p{i}_{uid}"
        volume = root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "scratch"
        for directory in (layer, logs / "c", volume):
            directory.mkdir(parents=True, exist_ok=True)
            for f in range(files):
                (directory / f"f{f}").write_bytes(chunk)
        paths.append(pod_paths(root, pod, {"scratch": volume}, logs))
    return paths


def pods_for(paths: Sequence[PodPaths]) -> list[dict[str, Any]]:
    return [{"metadata": {"uid": p.uid, "name": p.name, "namespace": p.namespace},
             "spec": {"containers": [{"name": "c", "image": "busybox"}],
                      "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}]}}
            for p in paths]


async def time_passes(root: Path, paths: Sequence[PodPaths], cost: PassCost,
                      passes: int) -> None:
    backend = DuBackend()
    provider = StatsProvider(NODE, root, backend, image_dir=root / "images")
    thresholds = parse_eviction_hard(None)
    pods = pods_for(paths)
    try:
        await provider.get(paths)  # the first pass builds the walkers
        for _ in range(passes):
            wall, cpu = time.perf_counter(), time.process_time()
            summary = await provider.get(paths)
            decision = decide(pods, summary, thresholds)
            cost.wall.append(time.perf_counter() - wall)
            cost.cpu.append(time.process_time() - cpu)
            if decision.local_evictions:
                raise BenchError("a synthetic pod was over its limit")
    finally:
        backend.close()  # the walks' open directories


def bench_pass_cost(work_dir: Path, sizes: Sequence[int], files: int,
                    passes: int) -> list[PassCost]:
    costs = []
    for pods in sizes:
        root = Path(tempfile.mkdtemp(prefix=f"pass-{pods}-", dir=work_dir))
        try:
            with progress(f"[pass cost] {pods} pods x {3 * files} files, {passes} passes"):
                ImageStore(root).ensure_base()
                paths = synthetic_pods(root, pods, files)
                cost = PassCost(pods, files)
                asyncio.run(time_passes(root, paths, cost, passes))
                costs.append(cost)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return costs


# --- report ---------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}" if seconds == seconds else "-"


def lowest_sound_interval(costs: Sequence[PassCost]) -> float:
    """max(SOUND_FACTOR x the CPU of a pass, the wall p95 of a pass: passes never overlap,
    the relist period), for the largest pod count."""
    if not costs:
        return RELIST_PERIOD
    largest = max(costs, key=lambda c: c.pods)
    return max(SOUND_FACTOR * percentile(largest.cpu, 50), percentile(largest.wall, 95),
               RELIST_PERIOD)


def interval_ratio(runs: Sequence[LatencyRun]) -> float:
    """How many times longer an eviction takes at the first (default) interval than at the
    last (low) one: the ratio of their p50s (NaN without two runs with evictions)."""
    if len(runs) < 2:
        return float("nan")
    return ratio(percentile(runs[0].seconds, 50), percentile(runs[-1].seconds, 50))


def report(runs: Sequence[LatencyRun], costs: Sequence[PassCost], command: str,
           machine: dict[str, str]) -> str:
    lines = [f"### bench.eviction: `{command}`", "",
             f"Machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
             f"{machine.get('os', '?')}, load average at start "
             f"{machine.get('load average at start', '?')}.", "", "#### Latency", "",
             "Write crossing the emptyDir sizeLimit (done, fsynced) -> the watch shows the "
             "pod `Failed`/`Evicted`, ms.", ""]
    lines.append(markdown_table(
        ["--eviction-interval", "evictions", "p50", "p95", "max", "kubelet CPU (idle, % core)"],
        [[f"{r.interval:g} s", str(len(r.seconds)), ms(percentile(r.seconds, 50)),
          ms(percentile(r.seconds, 95)), ms(max(r.seconds, default=float("nan"))),
          f"{r.kubelet_cpu_share * 100:.1f}"] for r in runs]))
    if len(runs) >= 2:
        lines += ["", f"p50 at {runs[0].interval:g} s ÷ p50 at {runs[-1].interval:g} s: "
                      f"{format_number(interval_ratio(runs), 1)}"]
    lines += ["", "#### Cost of one pass", "",
              "`StatsProvider.get` (du walk of every pod's writable layer, logs and emptyDir, "
              "and the image store) + `decide`, in process; CPU share = CPU p50 / interval.",
              ""]
    rows = []
    for c in costs:
        cpu = percentile(c.cpu, 50)
        rows.append([str(c.pods), str(3 * c.files * c.pods), ms(percentile(c.wall, 50)),
                     ms(percentile(c.wall, 95)), ms(cpu),
                     f"{cpu / 10 * 100:.2f}", f"{cpu / 1 * 100:.2f}"])
    lines.append(markdown_table(
        ["pods", "files", "wall p50", "wall p95", "CPU p50", "% of 10 s", "% of 1 s"], rows))
    lines += ["", f"Lowest sound interval: {lowest_sound_interval(costs):.2f} s (the largest "
              f"of {SOUND_FACTOR:g} x the CPU of a pass with the most pods, its wall p95, and "
              f"the {RELIST_PERIOD:g} s relist period).", ""]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.eviction", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--default-interval", type=float, default=10.0)
    parser.add_argument("--low-interval", type=float, default=1.0)
    parser.add_argument("--repeats-default", type=int, default=3,
                        help="evictions at the default interval (kept small: up to 10 s each)")
    parser.add_argument("--repeats-low", type=int, default=10)
    parser.add_argument("--idle-pods", type=int, default=3,
                        help="running pods while the kubelet's idle CPU is measured")
    parser.add_argument("--cpu-window", type=float, default=15.0)
    parser.add_argument("--pods", default="10,50,110", help="pod counts for the pass cost")
    parser.add_argument("--files", type=int, default=20,
                        help="files in each pod's writable layer, log dir and emptyDir")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join(["python -m bench.eviction", *(argv if argv is not None
                                                      else sys.argv[1:])])
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-eviction-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_description(work_dir)
    costs = bench_pass_cost(work_dir, [int(n) for n in args.pods.split(",") if n],
                            args.files, args.passes)
    runs = [bench_latency(work_dir, interval, repeats, args.idle_pods, args.cpu_window)
            for interval, repeats in ((args.default_interval, args.repeats_default),
                                      (args.low_interval, args.repeats_low))]
    print(report(runs, costs, command, machine))
    if args.json is not None:
        args.json.write_text(json.dumps({
            "command": command, "machine": machine,
            "latency": [{"interval": r.interval, "seconds": r.seconds,
                         "kubelet_cpu_share": r.kubelet_cpu_share} for r in runs],
            "interval_p50_ratio": interval_ratio(runs),
            "pass_cost": [{"pods": c.pods, "files": c.files, "wall": c.wall, "cpu": c.cpu}
                          for c in costs],
            "lowest_sound_interval": lowest_sound_interval(costs)}, indent=2))
    if args.work_dir is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

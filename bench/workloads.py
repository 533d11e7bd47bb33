"""The workloads benchmark (`python -m bench.workloads`, part of `make bench`): how fast
Deployments and ReplicaSets get their pods, on a node with the fake runtime and on a node
with the real one, side by side in one run.

One `ephemera up` (apiserver, scheduler, controller-manager) with two nodes: its kubelet
`bench-node` on the real OCI runtime (`--runtime`, default auto: crun where it works, else
runc; busybox containers), and one hollow node `bench-hollow-0` (`--hollow-nodes 1`: the
kubelet's code on the fake runtime, no containers). The same control plane serves both, so
the two differ only in the node. Each workload's pod template pins it to one node
(`nodeSelector: kubernetes.io/hostname`); the container is busybox's
`sh -c "trap 'exit 0' TERM; sleep 3600 & wait"` (SIGTERM ends it at once, so a delete
measures the machinery, not a grace period).

For each node and replica count (the fake node at `--replicas` N and at `--real-replicas` M,
the real node at M; each node first runs the same steps once with 1 replica, not counted, so
the image is in place and the code paths are warm), one after another, the node empty at
each start:

1. **Deployment create → available**: POST a Deployment of N replicas, until a watch of the
   namespace's Deployments shows `status.availableReplicas == N` (and `updatedReplicas`,
   `observedGeneration` caught up); the report also gives when its last pod was ADDED and
   when the last was Running on the pod watch, where the time in between went.
2. **Deployment delete → pods gone**: DELETE it (`propagationPolicy: Background`), until the
   pod watch has shown every one of its pods DELETED (the garbage collector deletes the
   ReplicaSet, whose pods it then deletes, and the kubelet stops them).
3. **ReplicaSet scale 0 → N**: a ReplicaSet of 0 replicas is created and seen by the
   controller (its `observedGeneration`); then its `scale` subresource is patched to N, and
   timed until N of its pods exist (ADDED on the pod watch: the controller's slow-start
   batches, the creates) and until N are Running (scheduling, the node starting them).
4. **ReplicaSet scale N → 0**: the `scale` patched to 0, until every pod is DELETED.

Pods per second is the replica count over the phase's seconds. The ratios compare the fake
node's pods per second with the real node's, at the same count M, and the fake node at N
against the real one at M. CPU: each process of `up` (from its pid files), this client and
the whole machine (/proc/stat), over each phase, per pod.

Why the real node's default is smaller (30, against 100): on the real runtime each pod is a
sandbox (namespaces, CNI ADD), a shim, an overlay mount and a runtime process; 30 still takes
the ReplicaSet controller through five slow-start batches (1, 2, 4, 8, 15) and the node's
pod workers through dozens of concurrent starts, in well under a minute on a small machine,
while 100 would add minutes of container starts to every run without telling more about the
controllers (their rate is the fake node's row). `--real-replicas 100` runs the full size.

Results go to stdout as Markdown, progress to stderr (one line per phase), and with
`--json PATH` to a JSON file too. Nothing is left behind: every workload is deleted and its
pods waited for, and `ephemera up` is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    CLIENT,
    CpuMeter,
    EphemeraUp,
    format_number,
    log,
    machine_description,
    markdown_table,
    progress,
    ratio,
)
from bench.pod_start import BenchError, machine_busy_seconds, run_bench
from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, ApiUnavailable, resource_path
from ephemera.client.kubeconfig import load_kubeconfig

DEFAULT_REPLICAS = 100
DEFAULT_REAL_REPLICAS = 30
QUICK_REPLICAS = 20
QUICK_REAL_REPLICAS = 5
MAX_REAL_REPLICAS = 100  # the kubelet's 110 pods, with room for anything else on the node
RUNTIMES = ("auto", "runc", "crun")

NAMESPACE = "bench-workloads"
REAL_NODE = "bench-node"
HOLLOW_PREFIX = "bench-hollow-"
FAKE_NODE = f"{HOLLOW_PREFIX}0"
FAKE = "fake"
REAL = "real"
NODES = {FAKE: FAKE_NODE, REAL: REAL_NODE}

IMAGE = "busybox:latest"
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
SET_LABEL = "bench-workload"
APPS = "apps"

READY_TIMEOUT = 120.0  # both nodes Ready, the namespace's service account there
DEFAULT_TIMEOUT = 300.0  # one phase

DEPLOY_AVAILABLE = "Deployment create → available"
DEPLOY_GONE = "Deployment delete → pods gone"
RS_EXIST = "ReplicaSet scale 0 → N: pods exist"
RS_RUNNING = "ReplicaSet scale 0 → N: pods Running"
RS_GONE = "ReplicaSet scale N → 0: pods gone"
PHASES = (DEPLOY_AVAILABLE, DEPLOY_GONE, RS_EXIST, RS_RUNNING, RS_GONE)
# The phases whose CPU is measured (RS_EXIST shares its start with RS_RUNNING).
CPU_PHASES = (DEPLOY_AVAILABLE, DEPLOY_GONE, RS_RUNNING, RS_GONE)
CPU_PROCESSES = ("apiserver", "scheduler", "controller-manager", "kubelet", "hollow-nodes",
                 "proxy", "dns")
MACHINE = "machine"

now = time.perf_counter


@dataclass
class PhaseResult:
    """One phase on one node at one replica count."""

    phase: str
    node: str
    replicas: int
    seconds: float
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds by process
    detail: dict[str, float] = field(default_factory=dict)  # other times of the phase, s

    @property
    def pods_per_second(self) -> float:
        return self.replicas / self.seconds if self.seconds > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "node": self.node, "replicas": self.replicas,
                "seconds": self.seconds, "pods_per_s": self.pods_per_second,
                "cpu_s": dict(self.cpu), "detail_s": dict(self.detail)}


# --- the watches ---------------------------------------------------------------------------


@dataclass
class PodSeen:
    """When this client's watch first showed a pod, Running, and DELETED."""

    workload: str
    added: float
    running: float = math.nan
    deleted: float = math.nan


class Watches:
    """Open watches of the namespace's pods, Deployments and ReplicaSets, with the arrival
    time of every event: for each pod when it was first seen, Running and deleted (by uid),
    and for each workload every version seen, in order."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.pods: dict[str, PodSeen] = {}
        self.history: dict[tuple[str, str], list[tuple[float, dict[str, Any]]]] = {}
        self.changed = asyncio.Event()
        self.readers: list[asyncio.Task[None]] = []

    async def open(self) -> None:
        for plural, group in (("pods", ""), ("deployments", APPS), ("replicasets", APPS)):
            path = resource_path(plural, NAMESPACE, group=group)
            listed = await self.api.list(path)
            version = str(listed["metadata"]["resourceVersion"])
            self.readers.append(asyncio.create_task(self._read(plural, path, version)))

    async def close(self) -> None:
        for reader in self.readers:
            reader.cancel()
        for reader in self.readers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read(self, plural: str, path: str, version: str) -> None:
        try:
            async for event in self.api.watch(path, resource_version=version):
                arrived = now()
                if event.type != "BOOKMARK":
                    self._observe(plural, event.type, event.object, arrived)
                self.changed.set()
        finally:
            self.changed.set()

    def _observe(self, plural: str, kind: str, obj: dict[str, Any], arrived: float) -> None:
        metadata = obj.get("metadata") or {}
        if plural != "pods":
            self.history.setdefault((plural, str(metadata.get("name"))), []).append(
                (arrived, obj))
            return
        workload = (metadata.get("labels") or {}).get(SET_LABEL)
        if workload is None:
            return
        seen = self.pods.setdefault(str(metadata.get("uid")), PodSeen(workload, arrived))
        if (obj.get("status") or {}).get("phase") == "Running" and math.isnan(seen.running):
            seen.running = arrived
        if kind == "DELETED" and math.isnan(seen.deleted):
            seen.deleted = arrived

    def of(self, workload: str) -> list[PodSeen]:
        return [seen for seen in self.pods.values() if seen.workload == workload]

    def first(self, plural: str, name: str,
              condition: Callable[[dict[str, Any]], bool]) -> float:
        """When the watch first showed the workload meeting `condition`; NaN if not yet."""
        for arrived, obj in self.history.get((plural, name), []):
            if condition(obj):
                return arrived
        return math.nan

    async def wait(self, done: Callable[[], bool], what: str, timeout: float,
                   describe: Callable[[], str]) -> None:
        """Until `done()`; BenchError after `timeout` or if a watch ends."""
        deadline = time.monotonic() + timeout
        while not done():
            for reader in self.readers:
                if reader.done():
                    problem = None if reader.cancelled() else reader.exception()
                    raise BenchError(f"a watch ended while waiting for {what}: "
                                     f"{problem or 'closed by the server'}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"not {what} within {timeout:.0f}s ({describe()})")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)


# --- the workloads -------------------------------------------------------------------------


def pod_template(workload: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {SET_LABEL: workload}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                            "command": COMMAND}],
        },
    }


def workload_manifest(kind: str, name: str, node: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": name, "labels": {SET_LABEL: name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {SET_LABEL: name}},
                 "template": pod_template(name, node)},
    }


def available(replicas: int) -> Callable[[dict[str, Any]], bool]:
    def check(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return (status.get("availableReplicas", 0) == replicas
                and status.get("updatedReplicas", 0) == replicas
                and status.get("observedGeneration", 0)
                >= (obj.get("metadata") or {}).get("generation", 1))
    return check


def observed(obj: dict[str, Any]) -> bool:
    return bool((obj.get("status") or {}).get("observedGeneration", 0)
                >= (obj.get("metadata") or {}).get("generation", 1))


CpuSnapshot = tuple[CpuMeter, dict[str, float]]
Timed = tuple[str, float, dict[str, float], dict[str, float]]  # phase, seconds, CPU, detail


class Phases:
    """The four phases (module docstring) on one node at one replica count."""

    def __init__(self, api: ApiClient, watches: Watches, up: EphemeraUp, timeout: float
                 ) -> None:
        self.api = api
        self.watches = watches
        self.up = up
        self.timeout = timeout

    def _cpu_before(self) -> CpuSnapshot:
        # The processes `up` runs now (it starts the DNS server once the node is Ready).
        meter = CpuMeter(self.up.component_pids())
        before = meter.snapshot()
        before[MACHINE] = machine_busy_seconds()
        return meter, before

    @staticmethod
    def _cpu_since(snapshot: CpuSnapshot) -> dict[str, float]:
        meter, before = snapshot
        used = meter.since(before)
        used[MACHINE] = machine_busy_seconds() - before[MACHINE]
        return used

    def _pods(self, workload: str, stamp: str, count: int) -> Callable[[], bool]:
        return lambda: sum(not math.isnan(getattr(seen, stamp))
                           for seen in self.watches.of(workload)) >= count

    def _describe(self, workload: str) -> Callable[[], str]:
        def describe() -> str:
            pods = self.watches.of(workload)
            return (f"{len(pods)} pods seen, "
                    f"{sum(not math.isnan(p.running) for p in pods)} Running, "
                    f"{sum(not math.isnan(p.deleted) for p in pods)} deleted")
        return describe

    def _last(self, workload: str, stamp: str, started: float) -> float:
        """Seconds from `started` to the last pod of the workload reaching `stamp`."""
        return max(getattr(seen, stamp) for seen in self.watches.of(workload)) - started

    async def run(self, label: str, node: str, replicas: int) -> list[PhaseResult]:
        name = f"{label}-{replicas}"
        results = await self.deployment(f"deploy-{name}", node, replicas)
        results += await self.replicaset(f"rs-{name}", node, replicas)
        return [PhaseResult(phase, label, replicas, seconds, cpu, detail)
                for phase, seconds, cpu, detail in results]

    async def deployment(self, name: str, node: str, replicas: int) -> list[Timed]:
        path = resource_path("deployments", NAMESPACE, group=APPS)
        check = available(replicas)
        before = self._cpu_before()
        started = now()
        await self.api.create(path, workload_manifest("Deployment", name, node, replicas))
        await self.watches.wait(
            lambda: not math.isnan(self.watches.first("deployments", name, check)),
            f"Deployment {name} available", self.timeout, self._describe(name))
        available_after = self.watches.first("deployments", name, check) - started
        available_cpu = self._cpu_since(before)
        # The pods' watch is a stream of its own (the apiserver's watch cache follows each
        # resource on its own): it may deliver after the Deployment's.
        await self.watches.wait(self._pods(name, "running", replicas),
                                f"the pods of Deployment {name} Running on the pod watch",
                                self.timeout, self._describe(name))
        # Where the Deployment's time went: its pods created, then Running, then reported.
        pods_detail = {"pods_exist": self._last(name, "added", started),
                       "pods_running": self._last(name, "running", started)}

        before = self._cpu_before()
        started = now()
        await self.api.delete(resource_path("deployments", NAMESPACE, name, group=APPS),
                              {"propagationPolicy": "Background"})
        await self.watches.wait(self._pods(name, "deleted", replicas),
                                f"every pod of Deployment {name} deleted", self.timeout,
                                self._describe(name))
        gone_after = self._last(name, "deleted", started)
        return [(DEPLOY_AVAILABLE, available_after, available_cpu, pods_detail),
                (DEPLOY_GONE, gone_after, self._cpu_since(before), {})]

    async def replicaset(self, name: str, node: str, replicas: int) -> list[Timed]:
        path = resource_path("replicasets", NAMESPACE, group=APPS)
        scale = resource_path("replicasets", NAMESPACE, name, "scale", group=APPS)
        await self.api.create(path, workload_manifest("ReplicaSet", name, node, 0))
        await self.watches.wait(
            lambda: not math.isnan(self.watches.first("replicasets", name, observed)),
            f"ReplicaSet {name} seen by its controller", self.timeout, self._describe(name))

        before = self._cpu_before()
        started = now()
        await self.api.patch(scale, {"spec": {"replicas": replicas}}, patch_type="merge")
        await self.watches.wait(self._pods(name, "running", replicas),
                                f"{replicas} pods of ReplicaSet {name} Running", self.timeout,
                                self._describe(name))
        up_cpu = self._cpu_since(before)
        exist_after = self._last(name, "added", started)
        running_after = self._last(name, "running", started)

        before = self._cpu_before()
        started = now()
        await self.api.patch(scale, {"spec": {"replicas": 0}}, patch_type="merge")
        await self.watches.wait(self._pods(name, "deleted", replicas),
                                f"every pod of ReplicaSet {name} deleted", self.timeout,
                                self._describe(name))
        gone_after = self._last(name, "deleted", started)
        down_cpu = self._cpu_since(before)
        await self.api.delete(resource_path("replicasets", NAMESPACE, name, group=APPS))
        return [(RS_EXIST, exist_after, {}, {}), (RS_RUNNING, running_after, up_cpu, {}),
                (RS_GONE, gone_after, down_cpu, {})]


# --- the cluster ---------------------------------------------------------------------------


async def wait_until_ready(api: ApiClient) -> dict[str, str]:
    """Both nodes Ready and the namespace's default ServiceAccount there (pods name it);
    each node's container runtime version, by node kind."""
    deadline = time.monotonic() + READY_TIMEOUT
    versions: dict[str, str] = {}
    while len(versions) < len(NODES):
        for kind, node_name in NODES.items():
            with contextlib.suppress(Exception):
                node = await api.get(resource_path("nodes", name=node_name))
                conditions = (node.get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in conditions):
                    versions[kind] = node["status"]["nodeInfo"]["containerRuntimeVersion"]
        if len(versions) < len(NODES):
            if time.monotonic() > deadline:
                missing = ", ".join(n for k, n in NODES.items() if k not in versions)
                raise BenchError(f"node(s) {missing} not Ready within {READY_TIMEOUT:.0f}s")
            await asyncio.sleep(0.2)
    with contextlib.suppress(Exception):  # already there: a kept --work-dir
        await api.create(resource_path("namespaces"),
                         {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": NAMESPACE}})
    while True:
        with contextlib.suppress(Exception):
            await api.get(resource_path("serviceaccounts", NAMESPACE, "default"))
            return versions
        if time.monotonic() > deadline:
            raise BenchError(f"no default ServiceAccount in {NAMESPACE} within "
                             f"{READY_TIMEOUT:.0f}s")
        await asyncio.sleep(0.2)


@dataclass
class Config:
    replicas: int
    real_replicas: int
    runtime: str
    timeout: float
    work_dir: Path

    def sets(self) -> list[tuple[str, int]]:
        """(node kind, replicas) in the order they run."""
        fake = [(FAKE, self.replicas)]
        if self.real_replicas != self.replicas:
            fake.append((FAKE, self.real_replicas))
        return [*fake, (REAL, self.real_replicas)]


async def bench(cfg: Config, up: EphemeraUp) -> tuple[list[PhaseResult], dict[str, str]]:
    try:
        return await measure(cfg, up)
    except (StatusError, ApiUnavailable) as error:  # said as the API said it, no traceback
        raise BenchError(f"the API: {error}") from error


async def measure(cfg: Config, up: EphemeraUp) -> tuple[list[PhaseResult], dict[str, str]]:
    async with ApiClient(load_kubeconfig(up.kubeconfig), user_agent="bench-workloads") as api:
        with progress("waiting for both nodes Ready"):
            versions = await wait_until_ready(api)
        watches = Watches(api)
        await watches.open()
        try:
            phases = Phases(api, watches, up, cfg.timeout)
            for kind in NODES:
                with progress(f"[{kind}] warm-up: the four phases with 1 replica"):
                    await phases.run(f"warmup-{kind}", NODES[kind], 1)
            results: list[PhaseResult] = []
            for kind, replicas in cfg.sets():
                with progress(f"[{kind}, {replicas} replicas] Deployment, ReplicaSet"):
                    found = await phases.run(kind, NODES[kind], replicas)
                for result in found:
                    log(f"  {result.phase}: {result.seconds:.2f} s, "
                        f"{result.pods_per_second:.1f} pods/s")
                results += found
        finally:
            await watches.close()
    return results, versions


def run_all(cfg: Config) -> tuple[list[PhaseResult], dict[str, str]]:
    capacity = max(110, cfg.replicas + 10)
    up = EphemeraUp(cfg.work_dir / "data",
                    ["--runtime", cfg.runtime, "--node-name", REAL_NODE, "--hollow-nodes", "1",
                     "--node-name-prefix", HOLLOW_PREFIX, "--capacity", f"pods={capacity}"])
    try:
        with progress(f"starting ephemera up (--runtime {cfg.runtime}, --hollow-nodes 1)"):
            up.start()
        try:
            return asyncio.run(bench(cfg, up))
        except BaseException:
            log(f"ephemera up logs (tail):\n{up.log_tail()}")
            raise
    finally:
        with progress("stopping ephemera up"):
            up.stop()


# --- the report ----------------------------------------------------------------------------


def find(results: Sequence[PhaseResult], phase: str, node: str, replicas: int
         ) -> PhaseResult | None:
    for result in results:
        if (result.phase, result.node, result.replicas) == (phase, node, replicas):
            return result
    return None


def ratio_values(results: Sequence[PhaseResult], cfg: Config) -> dict[str, dict[str, float]]:
    """Per phase: the fake node's pods per second over the real node's, both at M
    (`same`), and the fake node at N over the real node at M (`fake_n_real_m`, when N is
    not M)."""
    values: dict[str, dict[str, float]] = {}
    for phase in PHASES:
        real = find(results, phase, REAL, cfg.real_replicas)
        if real is None:
            continue
        row: dict[str, float] = {}
        same = find(results, phase, FAKE, cfg.real_replicas)
        row["same"] = ratio(same.pods_per_second, real.pods_per_second) if same else math.nan
        if cfg.replicas != cfg.real_replicas:
            bigger = find(results, phase, FAKE, cfg.replicas)
            row["fake_n_real_m"] = (ratio(bigger.pods_per_second, real.pods_per_second)
                                    if bigger else math.nan)
        values[phase] = row
    return values


def cpu_columns(results: Sequence[PhaseResult]) -> list[str]:
    seen = {name for result in results for name in result.cpu}
    return [name for name in (*CPU_PROCESSES, CLIENT, MACHINE) if name in seen]


def report(results: Sequence[PhaseResult], cfg: Config, versions: dict[str, str],
           machine: dict[str, str], command: str, started: datetime.datetime) -> str:
    lines = [
        f"### bench.workloads: Deployments and ReplicaSets, {cfg.replicas} replicas on the "
        f"fake node, {cfg.real_replicas} on the real one",
        "",
        f"Command: `{command}`  ",
        f"Started: {started.isoformat(timespec='seconds')}  ",
        *(f"{key.capitalize()}: {value}  " for key, value in machine.items()),
        f"Nodes: {FAKE} = hollow node `{FAKE_NODE}` ({versions.get(FAKE, '?')}); "
        f"{REAL} = kubelet `{REAL_NODE}` ({versions.get(REAL, '?')}, {IMAGE})",
        "",
        "## Results",
        "",
        "Seconds from the request (the POST, DELETE or scale PATCH) until this client's watch"
        " showed the end (module docstring); pods per second is replicas ÷ seconds.",
        "",
        markdown_table(["phase", "node", "replicas", "seconds", "pods/s"],
                       [[r.phase, r.node, str(r.replicas), format_number(r.seconds),
                         format_number(r.pods_per_second, 1)] for r in results],
                       align="llrrr"),
        "",
        "## Where a Deployment's time goes",
        "",
        "Seconds from the Deployment's POST until its last pod was ADDED and Running on the"
        " pod watch, and until the Deployment showed it available.",
        "",
        markdown_table(["node", "replicas", "pods exist", "pods Running", "available"],
                       [[r.node, str(r.replicas),
                         format_number(r.detail.get("pods_exist", math.nan)),
                         format_number(r.detail.get("pods_running", math.nan)),
                         format_number(r.seconds)]
                        for r in results if r.phase == DEPLOY_AVAILABLE], align="lr"),
        "",
        "## Ratios",
        "",
        "Pods per second of the fake node ÷ those of the real node.",
        "",
    ]
    headers = ["phase", f"fake ÷ real, {cfg.real_replicas} replicas each"]
    if cfg.replicas != cfg.real_replicas:
        headers.append(f"fake at {cfg.replicas} ÷ real at {cfg.real_replicas}")
    lines.append(markdown_table(headers, [
        [phase, *(format_number(value) for value in row.values())]
        for phase, row in ratio_values(results, cfg).items()]))
    columns = cpu_columns(results)
    lines += [
        "",
        "## CPU per pod",
        "",
        "CPU milliseconds (user + system, all threads) over each phase, per pod: each process"
        " of `ephemera up`, this client, and the whole machine (/proc/stat: everything on it,"
        " the real node's shims, runtimes and containers too).",
        "",
        markdown_table(["phase", "node", "replicas", *columns], [
            [r.phase, r.node, str(r.replicas),
             *(format_number(r.cpu.get(name, math.nan) * 1e3 / r.replicas, 1)
               for name in columns)]
            for r in results if r.phase in CPU_PHASES], align="llr"),
    ]
    return "\n".join(lines) + "\n"


def as_json(results: Sequence[PhaseResult], cfg: Config, versions: dict[str, str],
            machine: dict[str, str], command: str, started: datetime.datetime
            ) -> dict[str, Any]:
    def finite(value: float) -> float | None:
        return None if math.isnan(value) else value

    return {
        "benchmark": "workloads",
        "command": command,
        "started": started.isoformat(timespec="seconds"),
        "config": {"replicas": cfg.replicas, "real_replicas": cfg.real_replicas,
                   "runtime": cfg.runtime},
        "machine": machine,
        "nodes": {kind: {"name": NODES[kind], "runtime": versions.get(kind, "")}
                  for kind in NODES},
        "results": [result.as_dict() for result in results],
        "ratios": {phase: {key: finite(value) for key, value in row.items()}
                   for phase, row in ratio_values(results, cfg).items()},
    }


# --- main ----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.workloads",
        description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help=f"a short run: {QUICK_REPLICAS} replicas on the fake node, "
                             f"{QUICK_REAL_REPLICAS} on the real one")
    parser.add_argument("--replicas", type=int, default=None, metavar="N",
                        help=f"replicas on the fake node (default {DEFAULT_REPLICAS})")
    parser.add_argument("--real-replicas", type=int, default=None, metavar="M",
                        help=f"replicas on the real node (default {DEFAULT_REAL_REPLICAS}, at "
                             f"most {MAX_REAL_REPLICAS}); the fake node runs M too, for the "
                             "ratios")
    parser.add_argument("--runtime", choices=RUNTIMES, default="auto",
                        help="the real node's runtime (`ephemera up --runtime`; default auto: "
                             "crun where it works, else runc)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"give up on a phase after this long (default "
                             f"{DEFAULT_TIMEOUT:.0f})")
    parser.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                        help="where the data dir goes (default: a temporary dir, removed)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the results as JSON there")
    args = parser.parse_args(argv)
    if args.replicas is None:
        args.replicas = QUICK_REPLICAS if args.quick else DEFAULT_REPLICAS
    if args.real_replicas is None:
        args.real_replicas = QUICK_REAL_REPLICAS if args.quick else DEFAULT_REAL_REPLICAS
    if args.replicas < 1 or args.real_replicas < 1:
        parser.error("--replicas and --real-replicas must be at least 1")
    if args.real_replicas > MAX_REAL_REPLICAS:
        parser.error(f"--real-replicas must be at most {MAX_REAL_REPLICAS} (one kubelet "
                     f"holds 110 pods)")
    if args.timeout <= 0:
        parser.error("--timeout must be above zero")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def run(work_dir: Path, command: str) -> tuple[str, dict[str, Any]]:
        cfg = Config(replicas=args.replicas, real_replicas=args.real_replicas,
                     runtime=args.runtime, timeout=args.timeout, work_dir=work_dir)
        started = datetime.datetime.now(datetime.UTC)
        machine = machine_description(work_dir)
        results, versions = run_all(cfg)
        return (report(results, cfg, versions, machine, command, started),
                as_json(results, cfg, versions, machine, command, started))

    return run_bench("bench.workloads", argv, args, "its real node runs containers",
                     "ephemera-bench-workloads-", run)


if __name__ == "__main__":
    sys.exit(main())

"""The scale benchmark (`python -m bench.scale`): a control plane without `up` (an `ephemera
apiserver` on SQLite or etcd, an `ephemera scheduler` and an `ephemera controller-manager`,
each its own process) and ONE `ephemera hollow-nodes` process with N simulated nodes; then,
per store:

1. the time until all N Nodes are Ready;
2. P pods created by C concurrent clients (keep-alive HTTPS connections, the admin
   kubeconfig's client certificate), while a sampler measures gets of single pods and
   paginated lists (`limit=500` with `continue`) and K watches stay open: on all the
   namespace's pods (`--watch-scope all`, every event to every watch), or each on one node's
   pods (`--watch-scope node`: `fieldSelector=spec.nodeName=NODE`, watch i on node i mod N,
   as K kubelets watch; the watch cache routes an event only to its node's watches);
3. the time from the first create until every pod is Running (followed through one more
   watch of the namespace's pods, `fieldSelector=status.phase=Running`: polling with lists
   of up to 30,000 pods would be most of the apiserver's work), and pods per second end to
   end;
4. one list of all pods (unpaginated);
5. the peak RSS of every process (apiserver, etcd, scheduler, controller-manager,
   hollow-nodes; each with its children), sampled every second, and the CPU time each
   used from the first create until every pod ran;
6. with `--restart-check`: every component killed with SIGKILL and started again, one after
   the other (the apiserver on the same port and data, so the others' kubeconfigs still
   hold; then the scheduler, the controller-manager, the hollow nodes); the time until
   every Node is Ready and every pod Running again in a consistent list (from the store),
   and until the watch cache's answers equal the store's: a list from the cache
   (`resourceVersion=0`) and a watch's initial events (`sendInitialEvents=true`) against a
   consistent list, compared by each object's name and resourceVersion, pods and Nodes.

`--apiserver-workers 1,2` runs each store once per count of apiserver worker processes
(`ephemera apiserver --workers N`, etcd only: a count above 1 is skipped on sqlite), one after
the other in one invocation, so that they compare on the same machine; each worker's CPU
time is reported on its own (`apiserver-w0`, ...; `apiserver` is the parent, its RSS the
whole group's).

The full run is `--nodes 1000 --pods 30000 --clients 8 --watches 1000 --stores sqlite,etcd`
(issue 17's targets: 30,000 pods Running in under 5 minutes, mutating calls p99 under 1 s);
`--quick` is a smoke-sized run. Results: Markdown on stdout, JSON with `--json PATH`;
progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.apimetrics import latency_summary, request_rates
from bench.common import (
    REPO_ROOT,
    Apiserver,
    CpuMeter,
    MachineCpu,
    child_pids,
    format_ms,
    kill_process,
    log,
    machine_description,
    markdown_table,
    percentile,
    start_etcd,
)

STORES = ("sqlite", "etcd")
FULL = {"nodes": 1000, "pods": 30000, "clients": 8, "watches": 1000}
QUICK = {"nodes": 5, "pods": 50, "clients": 2, "watches": 5}
PAGE_SIZE = 500
NAMESPACE = "default"
PROGRESS_INTERVAL = 15.0  # seconds between progress lines while the pods are created
HOLLOW_PREFIX = "hollow-node-"  # the hollow nodes' names: this and their index
STOP_TIMEOUT = 30.0
# Scrapes of /metrics on new connections, per apiserver worker, to reach every worker.
METRICS_SCRAPES_PER_WORKER = 32
WORKER_INFO = re.compile(r'^ephemera_apiserver_worker_info\{worker="(\d+)"\} ', re.M)


def _rss_bytes(pid: int) -> int:
    """Resident memory of `pid` and its descendants (0 when gone)."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            with open(f"/proc/{current}/task/{current}/children") as f:
                pending += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


@dataclass
class Component:
    """One control-plane or node process started from the `ephemera` command line."""

    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ephemera.cli", *self.argv], stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO_ROOT)

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        process, self.process = self.process, None
        kill_process(process)

    def check(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} exited {self.process.returncode}:\n{tail}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Latencies:
    values: list[float] = field(default_factory=list)
    errors: int = 0

    def summary(self) -> dict[str, Any]:
        return {"count": len(self.values), "errors": self.errors,
                "p50_ms": round(percentile(self.values, 50) * 1000, 2) if self.values else None,
                "p99_ms": round(percentile(self.values, 99) * 1000, 2) if self.values else None}


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name,
                                                            "labels": {"app": "scale"}},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "10m",
                                                                "memory": "16Mi"}}}]}}


class LeaseGaps:
    """The seconds between successive `renewTime`s of each Lease, as a watch tells; per
    Lease, each renewal's `renewTime` with the time the watch brought it (`seen`); and how
    long after its `renewTime` each renewal reached the watch (`delays`: the node's PUT, the
    apiserver's write and its watch cache's delivery; the clocks are one machine's)."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.gaps: list[float] = []
        self.seen: dict[str, list[tuple[float, float]]] = {}
        self.delays: list[float] = []

    def apply(self, event: Mapping[str, Any], received: float | None = None) -> None:
        obj = event.get("object") or {}
        name = (obj.get("metadata") or {}).get("name")
        renewed = (obj.get("spec") or {}).get("renewTime")
        if not name or not renewed:
            return
        at = datetime.datetime.fromisoformat(renewed.replace("Z", "+00:00")).timestamp()
        before = self.last.get(name)
        if before is not None and at > before:
            self.gaps.append(at - before)
        self.last[name] = at
        seen = time.time() if received is None else received
        self.seen.setdefault(name, []).append((at, seen))
        self.delays.append(seen - at)

    def summary(self) -> dict[str, Any]:
        if not self.gaps:
            return {"count": 0}
        return {"count": len(self.gaps), "p50_s": round(percentile(self.gaps, 50), 1),
                "p99_s": round(percentile(self.gaps, 99), 1),
                "max_s": round(max(self.gaps), 1),
                "over_40s": sum(1 for g in self.gaps if g > 40),
                "over_50s": sum(1 for g in self.gaps if g > 50),
                "delivery_p50_s": round(percentile(self.delays, 50), 2),
                "delivery_p99_s": round(percentile(self.delays, 99), 2),
                "delivery_max_s": round(max(self.delays), 2),
                "delivered_over_10s": sum(1 for d in self.delays if d > 10)}

    def before(self, name: str, at: float) -> tuple[float, float] | None:
        """The last renewal of Lease `name` the watch had brought by wall time `at`:
        (its renewTime, when it was seen); None when there was none."""
        found = None
        for renewed, seen in self.seen.get(name, []):
            if seen > at:
                break
            found = (renewed, seen)
        return found


# A node lifecycle controller's log line marking a node Unknown (`ephemera.cli.main`'s format).
_UNKNOWN_MARK = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) .*: node (\S+): no "
                           r"heartbeat for \d+s; marking it unknown$")


def unknown_marks(log_text: str) -> list[tuple[float, str]]:
    """The Unknown marks in a controller-manager log: (wall time, node), in order (the log's
    times are the machine's local time)."""
    marks = []
    for line in log_text.splitlines():
        m = _UNKNOWN_MARK.match(line)
        if m is not None:
            when = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
            marks.append((when.timestamp(), m.group(2)))
    return marks


def explain_marks(marks: Sequence[tuple[float, str]], leases: LeaseGaps, since: float,
                  limit: int = 50) -> list[dict[str, Any]]:
    """Each mark (at most `limit`) beside what the benchmark's own Lease watch had seen of
    the node by then: the mark's time after `since` (the first create), how old the node's
    last renewal was (by its renewTime) and how long before the mark the watch had brought
    it. A renewal younger than the grace period means the controller's view lagged behind
    the renewals; an old one, that the renewals were late."""
    explained = []
    for at, node in marks[:limit]:
        last = leases.before(node, at)
        explained.append({
            "node": node, "at_s": round(at - since, 1),
            "last_renewal_age_s": round(at - last[0], 1) if last else None,
            "last_renewal_seen_s_before": round(at - last[1], 1) if last else None})
    return explained


class RunningPods:
    """How many of the namespace's pods are Running, as a watch of them tells."""

    def __init__(self) -> None:
        self.phases: dict[str, str] = {}
        self.running = 0

    def apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        name = (obj.get("metadata") or {}).get("name")
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not name:
            return
        old = self.phases.get(name)
        new = None if kind == "DELETED" else (obj.get("status") or {}).get("phase") or ""
        if new is None:
            self.phases.pop(name, None)
        else:
            self.phases[name] = new
        self.running += (new == "Running") - (old == "Running")


class Run:
    """One store's run (see the module docstring)."""

    def __init__(self, args: argparse.Namespace, store: str, work_dir: Path,
                 workers: int = 1) -> None:
        self.args = args
        self.store = store
        self.work_dir = work_dir
        self.etcd: Any = None
        self.apiserver = Apiserver(work_dir / "apiserver", store, workers=workers)
        self.apiserver.extra_args = shlex.split(args.apiserver_flags)
        self.components: list[Component] = []
        self.rss_peak: dict[str, int] = {}
        self.result: dict[str, Any] = {"store": store, "apiserver_workers": workers}

    # -- processes --

    def start(self) -> None:
        if self.store == "etcd":
            self.etcd = start_etcd(self.work_dir / "etcd")
            self.apiserver.etcd_endpoints = [self.etcd.endpoint]
        self.apiserver.start()
        kubeconfig = str(self.apiserver.kubeconfig)
        logs = self.work_dir
        a = self.args
        self.components = [
            Component("scheduler", ["scheduler", "--kubeconfig", kubeconfig],
                      logs / "scheduler.log"),
            Component("controller-manager", ["controller-manager", "--kubeconfig", kubeconfig],
                      logs / "controller-manager.log"),
            Component("hollow-nodes", ["hollow-nodes", "--kubeconfig", kubeconfig,
                                       "--count", str(a.nodes),
                                       "--node-name-prefix", HOLLOW_PREFIX,
                                       "--capacity", f"pods={max(110, 2 * a.pods // a.nodes)}"
                                       ",cpu=64,memory=256Gi",
                                       "--root-dir", str(self.work_dir / "hollow")],
                      logs / "hollow-nodes.log"),
        ]
        for component in self.components:
            component.start()

    def pids(self) -> dict[str, int]:
        pids = {"apiserver": self.apiserver.pid}
        if self.apiserver.workers > 1:
            for i, pid in enumerate(child_pids(self.apiserver.pid)):
                pids[f"apiserver-w{i}"] = pid
        if self.etcd is not None:
            pids["etcd"] = self.etcd.process.pid
        for component in self.components:
            if component.process is not None:
                pids[component.name] = component.process.pid
        return pids

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()
        self.apiserver.stop()
        if self.etcd is not None:
            self.etcd.stop()

    async def _sample_rss(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for name, pid in self.pids().items():
                self.rss_peak[name] = max(self.rss_peak.get(name, 0), _rss_bytes(pid))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    # -- the measured part --

    async def measure(self) -> dict[str, Any]:
        a = self.args
        url = self.apiserver.url
        connector = aiohttp.TCPConnector(ssl=self.apiserver.ssl_context or False,
                                         limit=a.clients + a.watches + 8)
        stop_sampling = asyncio.Event()
        rss = asyncio.create_task(self._sample_rss(stop_sampling))
        async with aiohttp.ClientSession(url, connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=None)) as http:
            began = time.monotonic()
            await self._wait_nodes_ready(http)
            self.result["nodes_ready_seconds"] = round(time.monotonic() - began, 2)
            log(f"[{self.store}] {a.nodes} nodes Ready in {self.result['nodes_ready_seconds']}s")
            if a.idle_seconds > 0:
                (self.result["cpu_cores_nodes_only"],
                 self.result["requests_per_second_nodes_only"]) = await self._quiet_cpu()
            watch_stop = asyncio.Event()
            running = RunningPods()
            follower = asyncio.create_task(self._follow_running(http, running, watch_stop))
            leases = LeaseGaps()
            lease_follower = asyncio.create_task(self._follow_leases(http, leases, watch_stop))
            unknown_before = self._unknown_marks()
            watch_events, foreign_events = [0] * a.watches, [0] * a.watches
            watches = [asyncio.create_task(self._watch(http, i, watch_events, foreign_events,
                                                       watch_stop))
                       for i in range(a.watches)]
            creates, gets, lists = Latencies(), Latencies(), Latencies()
            created: list[str] = []
            sampler_stop = asyncio.Event()
            sampler = asyncio.create_task(self._sample_reads(http, created, gets, lists,
                                                             sampler_stop))
            metrics_before = await self._metrics()
            cpu = CpuMeter(self.pids())
            cpu_before, machine_before = cpu.snapshot(), MachineCpu.snapshot()
            started = time.monotonic()
            started_wall = time.time()
            names = [f"scale-{i}" for i in range(a.pods)]
            queue = iter(names)

            async def client() -> None:
                for name in queue:
                    t0 = time.perf_counter()
                    async with http.post(f"/api/v1/namespaces/{NAMESPACE}/pods",
                                         data=orjson.dumps(_pod(name)),
                                         headers={"Content-Type": "application/json"}) as r:
                        await r.read()
                        ok = r.status == 201
                    if ok:
                        creates.values.append(time.perf_counter() - t0)
                        created.append(name)
                    else:
                        creates.errors += 1

            async def progress() -> None:
                while True:
                    since = MachineCpu.snapshot()
                    await asyncio.sleep(PROGRESS_INTERVAL)
                    stolen = MachineCpu.since(since)["steal"]
                    log(f"[{self.store}] {len(created)}/{a.pods} created, {running.running} "
                        f"Running after {time.monotonic() - started:.1f}s"
                        f" (CPU stolen by the hypervisor: {100 * stolen:.0f}%)")

            reporter = asyncio.create_task(progress())
            try:
                await asyncio.gather(*(client() for _ in range(a.clients)))
            finally:
                reporter.cancel()
            created_in = time.monotonic() - started
            log(f"[{self.store}] {len(created)} pods created in {created_in:.1f}s")
            running_in = await self._wait_running(running, len(created), started)
            marks = self._unknown_marks()[len(unknown_before):]
            cpu_used, machine_cpu = cpu.since(cpu_before), MachineCpu.since(machine_before)
            apiserver_latencies = latency_summary(metrics_before, await self._metrics())
            sampler_stop.set()
            await sampler
            if a.idle_seconds > 0 and running_in is not None:
                (self.result["cpu_cores_pods_running"],
                 self.result["requests_per_second_pods_running"]) = await self._quiet_cpu()
            t0 = time.perf_counter()
            async with http.get(f"/api/v1/namespaces/{NAMESPACE}/pods") as r:
                body = await r.read()
                listed = len(orjson.loads(body).get("items") or []) if r.status == 200 else 0
            list_all = time.perf_counter() - t0
            watch_stop.set()
            await asyncio.gather(follower, lease_follower, *watches, return_exceptions=True)
        stop_sampling.set()
        await rss
        self.result.update({
            "nodes": a.nodes, "pods": a.pods, "clients": a.clients, "watches": a.watches,
            "watch_scope": a.watch_scope,
            "created": len(created), "create_seconds": round(created_in, 2),
            # how many ran when the wait ended (all of them, unless --timeout ran out)
            "running_at_end": running.running,
            "all_running_seconds": round(running_in, 2) if running_in is not None else None,
            "pods_per_second_end_to_end": round(len(created) / running_in, 2)
            if running_in else None,
            "creates": creates.summary(), "gets": gets.summary(), "paginated_lists":
            lists.summary(),
            "list_all": {"items": listed, "seconds": round(list_all, 3),
                         "bytes": len(body)},
            # Node heartbeats from the first create until all were Running: the time between
            # successive renewals of each node's Lease (10 s when on time; the node lifecycle
            # controller marks a node Unknown past its grace period, 50 s by default, 40 s
            # before 51ed3d2), and how often it did.
            "lease_renewal_gaps": leases.summary(),
            "nodes_marked_unknown": len(marks),
            # the first 50 marks, each beside what this benchmark's Lease watch had seen
            # of the node by then (`explain_marks`)
            "unknown_marks": explain_marks(marks, leases, started_wall),
            "watch_events_min": min(watch_events) if watch_events else 0,
            "watch_events_max": max(watch_events) if watch_events else 0,
            "watch_events_total": sum(watch_events),
            # with --watch-scope node: events a watch got of a pod on another node (0)
            "watch_events_foreign": sum(foreign_events),
            "rss_mib": {k: round(v / 2**20, 1) for k, v in sorted(self.rss_peak.items())},
            # CPU seconds each process used from the first create until all were Running
            # (`client` is this benchmark: the creates, the sampler and the watches).
            "cpu_seconds_until_running": {k: round(v, 1) for k, v in sorted(cpu_used.items())},
            # the machine's CPU time over the same span: busy, idle and stolen shares
            "machine_cpu_until_running": machine_cpu,
            # every client's requests over the same span, as the apiserver timed them
            # (bench/apimetrics.py): the SLO's p99 of mutating calls, and its queue waits
            "apiserver_latencies": apiserver_latencies,
        })
        return self.result

    async def _metrics(self) -> list[str]:
        """Every apiserver worker's `/metrics` text. With `--workers` above 1 the workers
        share the port, so each scrape goes on a new connection, which the kernel hands to
        one of them, until each has answered (its `ephemera_apiserver_worker_info` names
        it)."""
        workers = int(self.result["apiserver_workers"])
        texts: dict[str, str] = {}
        for _ in range(METRICS_SCRAPES_PER_WORKER * workers):
            connector = aiohttp.TCPConnector(ssl=self.apiserver.ssl_context or False,
                                             force_close=True)
            async with aiohttp.ClientSession(self.apiserver.url, connector=connector) as http, \
                    http.get("/metrics") as r:
                r.raise_for_status()
                text = await r.text()
            if workers == 1:
                return [text]
            found = WORKER_INFO.search(text)
            if found is None:
                raise RuntimeError("the apiserver's /metrics names no worker "
                                   "(ephemera_apiserver_worker_info)")
            texts[found.group(1)] = text
            if len(texts) == workers:
                return list(texts.values())
        raise RuntimeError(f"{METRICS_SCRAPES_PER_WORKER * workers} scrapes of /metrics "
                           f"reached only workers {sorted(texts)} of {workers}")

    async def _quiet_cpu(self) -> tuple[dict[str, float], dict[str, float]]:
        """Cores each process keeps busy over `--idle-seconds` with nothing asked of the
        cluster (leases, node statuses, relists, reconciles, resyncs: the cost that grows
        with the nodes and the run's length, not with the pods started), and the requests a
        second the apiserver answered meanwhile (`request_rates`)."""
        cpu = CpuMeter(self.pids())
        before, metrics_before = cpu.snapshot(), await self._metrics()
        await asyncio.sleep(self.args.idle_seconds)
        used, metrics_after = cpu.since(before), await self._metrics()
        cores = {k: round(v / self.args.idle_seconds, 3) for k, v in sorted(used.items())}
        rates = request_rates(metrics_before, metrics_after, self.args.idle_seconds)
        log(f"[{self.store}] cores busy over {self.args.idle_seconds:.0f}s quiet: {cores}; "
            f"requests a second: {rates}")
        return cores, rates

    # -- every component restarted (--restart-check) --

    def _session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(ssl=self.apiserver.ssl_context or False, limit=8)
        return aiohttp.ClientSession(self.apiserver.url, connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=None))

    async def check_restart(self) -> dict[str, Any]:
        """Step 6 of the module docstring; its results, also kept in `self.result`."""
        a = self.args
        began = time.monotonic()
        self.apiserver.port = int(self.apiserver.url.rsplit(":", 1)[1].rstrip("/"))
        for child in child_pids(self.apiserver.pid):  # its workers, if any
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        self.apiserver.kill()
        self.apiserver.start()
        log(f"[{self.store}] apiserver killed and serving again in "
            f"{time.monotonic() - began:.1f}s")
        for component in self.components:
            component.kill()
            component.start()
            log(f"[{self.store}] {component.name} killed and started again")
        restarted = time.monotonic()
        out: dict[str, Any] = {}
        async with self._session() as http:
            await self._wait_nodes_ready(http)
            out["nodes_ready_seconds"] = round(time.monotonic() - restarted, 2)
            deadline = restarted + a.timeout
            while True:
                pods = await self._listed(http, f"/api/v1/namespaces/{NAMESPACE}/pods")
                running = sum(p["phase"] == "Running" for p in pods.values())
                if running >= self.result["created"] or time.monotonic() > deadline:
                    break
                log(f"[{self.store}] after the restarts: {running}/{self.result['created']} "
                    "Running")
                await asyncio.sleep(2.0)
            out["running"] = running
            out["all_running_seconds"] = round(time.monotonic() - restarted, 2)
            log(f"[{self.store}] after the restarts: {running}/{self.result['created']} Running in "
                f"{out['all_running_seconds']}s")
            out["cache_vs_store"] = await self._compare_cache_with_store(http, deadline)
        self.result["restart_check"] = out
        return out

    async def _listed(self, http: aiohttp.ClientSession, path: str,
                      params: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
        """name -> {resourceVersion, phase} of a list (paginated from the store when no
        `params`; one answer otherwise), retried while the apiserver is not answering."""
        for _attempt in range(60):
            try:
                if params is None:
                    items = [item async for item in self._list(http, path)]
                else:
                    async with http.get(path, params=dict(params)) as r:
                        r.raise_for_status()
                        items = orjson.loads(await r.read()).get("items") or []
                return {i["metadata"]["name"]: {
                    "resourceVersion": i["metadata"]["resourceVersion"],
                    "phase": str((i.get("status") or {}).get("phase") or "")} for i in items}
            except (aiohttp.ClientError, KeyError):
                await asyncio.sleep(1.0)
        raise RuntimeError(f"{path}: no answer after the restarts")

    async def _watched(self, http: aiohttp.ClientSession, path: str) -> dict[str, str]:
        """name -> resourceVersion of a watch's initial events (until the bookmark that
        ends them)."""
        params = {"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
                  "resourceVersionMatch": "NotOlderThan", "resourceVersion": ""}
        seen: dict[str, str] = {}
        async with http.get(path, params=params,
                            timeout=aiohttp.ClientTimeout(total=self.args.timeout)) as r:
            r.raise_for_status()
            async for line in r.content:
                if not line.strip():
                    continue
                event = orjson.loads(line)
                md = (event.get("object") or {}).get("metadata") or {}
                if event.get("type") == "BOOKMARK":
                    if (md.get("annotations") or {}).get("k8s.io/initial-events-end"):
                        return seen
                elif event.get("type") == "ADDED":
                    seen[md["name"]] = md["resourceVersion"]
        raise RuntimeError(f"{path}: the watch ended before its initial events did")

    async def _compare_cache_with_store(self, http: aiohttp.ClientSession,
                                        deadline: float) -> dict[str, Any]:
        """Until the cache's list and a watch's initial events equal a consistent list (or
        the deadline): per resource, the counts, the differences left and the time taken."""
        out: dict[str, Any] = {}
        for resource, path in (("pods", f"/api/v1/namespaces/{NAMESPACE}/pods"),
                               ("nodes", "/api/v1/nodes")):
            began = time.monotonic()
            attempts = 0
            while True:
                attempts += 1
                store = {k: v["resourceVersion"] for k, v in (await self._listed(
                    http, path)).items()}
                cache = {k: v["resourceVersion"] for k, v in (await self._listed(
                    http, path, {"resourceVersion": "0"})).items()}
                watch = await self._watched(http, path)
                differ = {"cache_list": sum(cache.get(k) != v for k, v in store.items())
                          + len(cache.keys() - store.keys()),
                          "watch": sum(watch.get(k) != v for k, v in store.items())
                          + len(watch.keys() - store.keys())}
                if not any(differ.values()) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(1.0)  # changes still landing: compare again
            out[resource] = {"store": len(store), "cache_list": len(cache),
                             "watch": len(watch), "differ": differ, "attempts": attempts,
                             "seconds": round(time.monotonic() - began, 2)}
            log(f"[{self.store}] {resource}: cache list and watch against the store: "
                f"{out[resource]}")
        return out

    async def _wait_nodes_ready(self, http: aiohttp.ClientSession) -> None:
        deadline = time.monotonic() + self.args.timeout
        while True:
            for component in self.components:
                component.check()
            ready = 0
            with contextlib.suppress(aiohttp.ClientError):  # not answering yet: again
                async for node in self._list(http, "/api/v1/nodes"):
                    ready += any(c.get("type") == "Ready" and c.get("status") == "True"
                                 for c in (node.get("status") or {}).get("conditions") or [])
            if ready >= self.args.nodes:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {ready} of {self.args.nodes} nodes Ready")
            await asyncio.sleep(1.0)

    async def _list(self, http: aiohttp.ClientSession, path: str) -> Any:
        token = ""
        while True:
            params = {"limit": str(PAGE_SIZE)}
            if token:
                params["continue"] = token
            async with http.get(path, params=params) as r:
                r.raise_for_status()
                page = orjson.loads(await r.read())
            for item in page.get("items") or []:
                yield item
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    async def _wait_running(self, running: RunningPods, count: int,
                            started: float) -> float | None:
        deadline = started + self.args.timeout
        last = -1
        while True:
            for component in self.components:
                component.check()
            if running.running != last:
                log(f"[{self.store}] {running.running}/{count} Running after "
                    f"{time.monotonic() - started:.1f}s")
                last = running.running
            if running.running >= count:
                return time.monotonic() - started
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(2.0)

    def _unknown_marks(self) -> list[tuple[float, str]]:
        """The node lifecycle controller's Unknown marks so far (its log): (time, node)."""
        path = self.work_dir / "controller-manager.log"
        try:
            return unknown_marks(path.read_text(errors="replace"))
        except OSError:
            return []

    async def _follow_leases(self, http: aiohttp.ClientSession, gaps: LeaseGaps,
                             stop: asyncio.Event) -> None:
        """A watch of the node Leases (from the watch cache), feeding `gaps`, until stopped."""
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        while not stop.is_set():
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(path, params={"watch": "1", "resourceVersion": "0"}) as r:
                    async def read() -> None:
                        async for line in r.content:
                            if line.strip():
                                gaps.apply(orjson.loads(line))
                    reader = asyncio.create_task(read())
                    ender = asyncio.create_task(stop.wait())
                    await asyncio.wait({reader, ender}, return_when=asyncio.FIRST_COMPLETED)
                    for task in (reader, ender):
                        task.cancel()
                    await asyncio.gather(reader, ender, return_exceptions=True)

    async def _follow_running(self, http: aiohttp.ClientSession, running: RunningPods,
                              stop: asyncio.Event) -> None:
        """One more watch of the namespace's Running pods, from the watch cache
        (resourceVersion 0: the pods Running there as ADDED, then each pod that starts or
        stops running), feeding `running`; opened again if the server ends it, until
        stopped. The field selector leaves out a pod's create and binding, two of the three
        events each pod is otherwise sent to the benchmark for."""
        params = {"watch": "1", "resourceVersion": "0", "fieldSelector": "status.phase=Running"}
        while not stop.is_set():
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"/api/v1/namespaces/{NAMESPACE}/pods",
                                    params=params) as r:
                    reader = asyncio.create_task(self._apply_lines(r, running))
                    ender = asyncio.create_task(stop.wait())
                    await asyncio.wait({reader, ender}, return_when=asyncio.FIRST_COMPLETED)
                    for task in (reader, ender):
                        task.cancel()
                    await asyncio.gather(reader, ender, return_exceptions=True)

    @staticmethod
    async def _apply_lines(response: aiohttp.ClientResponse, running: RunningPods) -> None:
        async for line in response.content:
            if line.strip():
                running.apply(orjson.loads(line))

    async def _sample_reads(self, http: aiohttp.ClientSession, created: list[str],
                            gets: Latencies, lists: Latencies, stop: asyncio.Event) -> None:
        """Gets of single pods and paginated list walks, one at a time, until stopped."""
        while not stop.is_set():
            if created:
                name = random.choice(created)
                t0 = time.perf_counter()
                async with http.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}") as r:
                    await r.read()
                    ok = r.status == 200
                (gets.values.append(time.perf_counter() - t0) if ok
                 else setattr(gets, "errors", gets.errors + 1))
                t0 = time.perf_counter()
                async with http.get(f"/api/v1/namespaces/{NAMESPACE}/pods",
                                    params={"limit": str(PAGE_SIZE)}) as r:
                    await r.read()
                    ok = r.status == 200
                (lists.values.append(time.perf_counter() - t0) if ok
                 else setattr(lists, "errors", lists.errors + 1))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)

    async def _watch(self, http: aiohttp.ClientSession, index: int, counts: list[int],
                     foreign: list[int], stop: asyncio.Event) -> None:
        """A watch of the namespace's pods (or, with `--watch-scope node`, of node
        `index mod N`'s, counting in `foreign` the events of pods on other nodes), counting
        events, open until stopped."""
        params = {"watch": "1", "allowWatchBookmarks": "true", "resourceVersion": "0"}
        node: bytes | None = None
        if self.args.watch_scope == "node":
            params["fieldSelector"] = f"spec.nodeName={HOLLOW_PREFIX}{index % self.args.nodes}"
            node = f'"nodeName":"{HOLLOW_PREFIX}{index % self.args.nodes}"'.encode()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
            async with http.get(f"/api/v1/namespaces/{NAMESPACE}/pods", params=params) as r:
                reader = asyncio.create_task(self._count_lines(r, index, counts, foreign,
                                                               node))
                await stop.wait()
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)

    @staticmethod
    async def _count_lines(response: aiohttp.ClientResponse, index: int, counts: list[int],
                           foreign: list[int], node: bytes | None) -> None:
        async for line in response.content:
            if line.strip() and b'"BOOKMARK"' not in line[:40]:
                counts[index] += 1
                if node is not None and node not in line:
                    foreign[index] += 1


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke-sized defaults ({QUICK}) instead of the full run ({FULL})")
    for name in FULL:
        parser.add_argument(f"--{name}", type=int, default=None, metavar="N")
    parser.add_argument("--watch-scope", choices=("all", "node"), default="all",
                        help="what each of the --watches watches: all the benchmark's pods "
                             "(default), or one node's pods (spec.nodeName), as kubelets do")
    parser.add_argument("--restart-check", action="store_true",
                        help="after the run, kill and start again every component, then "
                             "compare the watch cache's lists and watches with the store's")
    parser.add_argument("--stores", default=",".join(STORES), metavar="LIST",
                        help="sqlite,etcd (default both)")
    parser.add_argument("--apiserver-workers", default="1", metavar="LIST",
                        help="apiserver worker counts to run each store with, e.g. 1,2 "
                             "(default 1; above 1 only on etcd)")
    parser.add_argument("--timeout", type=float, default=1800.0, metavar="SECONDS",
                        help="give up waiting for nodes or pods after this long")
    parser.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                        help="keep the data and logs there (default: a temporary directory)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    parser.add_argument("--apiserver-flags", default="", metavar="FLAGS",
                        help="more flags for the apiserver, as one shell-quoted string (e.g. "
                             "'--max-requests-inflight 0 --max-mutating-requests-inflight 0' "
                             "to serve without the priority filter's seats)")
    parser.add_argument("--idle-seconds", type=float, default=0.0, metavar="SECONDS",
                        help="also measure each process's CPU over this long with the nodes "
                             "Ready and no pod yet, and again once all pods run (default 0: "
                             "not measured)")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.stores = [s for s in args.stores.split(",") if s]
    unknown = [s for s in args.stores if s not in STORES]
    if unknown:
        parser.error(f"unknown store(s): {', '.join(unknown)}")
    try:
        args.apiserver_workers = [int(w) for w in args.apiserver_workers.split(",") if w]
    except ValueError:
        parser.error("--apiserver-workers: a comma-separated list of counts")
    if not args.apiserver_workers or min(args.apiserver_workers) < 1:
        parser.error("--apiserver-workers: counts of at least 1")
    return args


def _lease_cell(r: Mapping[str, Any]) -> str:
    gaps = r.get("lease_renewal_gaps") or {}
    if not gaps.get("count"):
        return "-"
    return (f"{gaps['p50_s']} / {gaps['p99_s']} / {gaps['max_s']}; {gaps['over_40s']}; "
            f"{r.get('nodes_marked_unknown', 0)}; {gaps['delivery_p99_s']} / "
            f"{gaps['delivery_max_s']}")


def _machine_cell(r: Mapping[str, Any]) -> str:
    shares = r.get("machine_cpu_until_running")
    if not shares:
        return ""
    return " / ".join(f"{100 * shares[k]:.0f}%" for k in ("busy", "idle", "steal"))


def _sli_cell(r: Mapping[str, Any]) -> str:
    latencies = r.get("apiserver_latencies")
    if not latencies:
        return ""
    return "; ".join(f"{latencies[k]['p50_ms']} / {latencies[k]['p99_ms']}"
                     for k in ("mutating", "get", "list"))


def report(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        cpu = r.get("cpu_seconds_until_running") or {}
        rows.append([r["store"], str(r.get("apiserver_workers", 1)), str(r["nodes"]),
                     str(r["pods"]), str(r["clients"]),
                     str(r["nodes_ready_seconds"]),
                     str(r["all_running_seconds"]) if r["all_running_seconds"] is not None
                     else f"timed out ({r.get('running_at_end')} Running)",
                     str(r["pods_per_second_end_to_end"]),
                     f"{r['creates']['p50_ms']} / {r['creates']['p99_ms']}",
                     f"{r['gets']['p50_ms']} / {r['gets']['p99_ms']}",
                     f"{r['paginated_lists']['p50_ms']} / {r['paginated_lists']['p99_ms']}",
                     format_ms(r["list_all"]["seconds"]),
                     _lease_cell(r),
                     ", ".join(f"{k} {v}" for k, v in r["rss_mib"].items()),
                     ", ".join(f"{k} {v}" for k, v in cpu.items()),
                     _machine_cell(r), _sli_cell(r)])
    table = markdown_table(
        ["store", "apiserver workers", "nodes", "pods", "clients", "nodes Ready s",
         "all Running s", "pods/s", "create p50/p99 ms", "get p50/p99 ms",
         "list page p50/p99 ms", "list all ms",
         "lease gap p50/p99/max s; gaps > 40 s; Unknown marks; delivered p99/max s", "peak RSS MiB",
         "CPU s until Running", "machine busy / idle / stolen",
         "apiserver SLI p50/p99 ms: mutating; get; list"], rows)
    restarts = [[r["store"], str(c["nodes_ready_seconds"]), f"{c['running']}/{r['pods']}",
                 str(c["all_running_seconds"]),
                 *(f"{v['store']} / {v['cache_list']} / {v['watch']}; differ "
                   f"{v['differ']['cache_list']} / {v['differ']['watch']} "
                   f"({v['attempts']} comparisons, {v['seconds']} s)"
                   for v in (c["cache_vs_store"]["pods"], c["cache_vs_store"]["nodes"]))]
                for r in results if (c := r.get("restart_check"))]
    if restarts:
        table += "\n\nEvery component killed and started again:\n\n" + markdown_table(
            ["store", "nodes Ready s", "Running", "all Running s",
             "pods: store / cache list / watch", "nodes: store / cache list / watch"],
            restarts)
    return table


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the processes started as Ctrl-C does


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="ephemera-scale-"))
    # read before the first run: the commit run and the load it started on
    machine, loadavg = machine_description(Path(tempfile.gettempdir())), os.getloadavg()
    results = []
    try:
        for store in args.stores:
            for workers in args.apiserver_workers:
                if workers > 1 and store != "etcd":
                    log(f"[{store}] --workers {workers} needs etcd: skipped")
                    continue
                run_dir = work / (store if workers == 1 else f"{store}-w{workers}")
                run = Run(args, store, run_dir, workers)
                run_dir.mkdir(parents=True, exist_ok=True)
                try:
                    run.start()
                    results.append(asyncio.run(run.measure()))
                    if args.restart_check:
                        asyncio.run(run.check_restart())
                finally:
                    run.stop()
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    document = {"benchmark": "scale", "date": datetime.datetime.now(datetime.UTC).isoformat(),
                "command": " ".join(["python", "-m", "bench.scale", *(argv or sys.argv[1:])]),
                "machine": machine, "loadavg": loadavg, "results": results}
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Service benchmark (`python -m bench.service`, part of `make bench`): what going through
a ClusterIP costs against dialing the pod IP, on one node of a real `ephemera up` (real
containers, the proxy's nftables table).

One backend pod (busybox `httpd`, a 13-byte page, port 8080) behind a ClusterIP Service (port
80), and a client pod. The client side runs in this process, in threads that joined the
client pod's network namespace (`setns`), so the packets take the path a pod's take: from the
pod's veth through the node's bridge, DNATed by the proxy's rules for the ClusterIP, straight
to the backend for the pod IP. Two measures, each on both paths, in R rounds that alternate
which path goes first (so that drift in the machine's load falls on both alike):

- **latency**: C HTTP/1.0 GETs one after another, each on a new connection (busybox
  `httpd` closes after one answer), timed from `connect()` to established (the handshake:
  the first packet of a connection is the one the rules rewrite) and to the end of the
  answer;
- **throughput**: Q such GETs from T threads at once; requests per second over the phase.

Bare connects (no request) are not measured: each leaves busybox `httpd` a child to fork,
and its small listen backlog then overflows, so the numbers would be the backend's.

Results go to stdout as Markdown (a table of both paths side by side, and the ClusterIP /
pod IP ratios), progress to stderr, and with `--json PATH` to a JSON file. `--quick` is a
short run (for a check that it works, and for the lead's rerun); by default the run is
longer. With `--kubeconfig` and `--kubelet-dir` it uses a running cluster (in its own
namespace, deleted afterwards) instead of starting `ephemera up` in `--work-dir`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    EphemeraUp,
    format_ms,
    format_number,
    format_rate,
    machine_description,
    markdown_table,
    percentile,
    progress,
    ratio,
)
from ephemera.api.errors import StatusError
from ephemera.cli.up import default_cluster_cidr
from ephemera.client import ApiClient, resource_path
from ephemera.client.kubeconfig import load_kubeconfig
from ephemera.kubelet.prober.netns import _setns
from ephemera.proxy import nft
from ephemera.proxy.rules import FAMILY

NODE = "bench-service"
NAMESPACE = "bench-service"
BACKEND_PORT = 8080
SERVICE_PORT = 80
READY_TIMEOUT = 180.0
IO_TIMEOUT = 5.0
PATHS = ("pod IP", "ClusterIP")
REQUEST = b"GET / HTTP/1.0\r\nHost: bench\r\n\r\n"


@dataclass
class Sizes:
    connections: int
    requests: int
    threads: int
    rounds: int


QUICK = Sizes(connections=200, requests=400, threads=4, rounds=2)
FULL = Sizes(connections=2000, requests=4000, threads=4, rounds=4)


@dataclass
class PathResult:
    """One path's measures, over all rounds."""

    connect: list[float] = field(default_factory=list)
    request: list[float] = field(default_factory=list)
    done: int = 0  # requests of the throughput phase
    throughput_elapsed: float = 0.0
    failures: int = 0

    @property
    def rps(self) -> float:
        return self.done / self.throughput_elapsed if self.throughput_elapsed else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {"connect_count": len(self.connect),
                "connect_median_ms": percentile(self.connect, 50) * 1e3,
                "connect_p99_ms": percentile(self.connect, 99) * 1e3,
                "throughput_requests": self.done,
                "request_median_ms": percentile(self.request, 50) * 1e3,
                "request_p99_ms": percentile(self.request, 99) * 1e3,
                "requests_per_s": self.rps, "failures": self.failures}


# --- the client side, in the client pod's network namespace ----------------------------------

def in_netns(netns: str, fns: list[Callable[[], None]]) -> None:
    """Run each of `fns` in a thread of its own that first joined `netns`; wait for all."""
    errors: list[BaseException] = []

    def body(fn: Callable[[], None]) -> None:
        try:
            _setns(netns)
            fn()
        except BaseException as err:  # reported by the caller
            errors.append(err)

    threads = [threading.Thread(target=body, args=(fn,), daemon=True) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def request_once(ip: str, port: int) -> tuple[float, float]:
    """One GET on a new connection: (connect time, whole request time)."""
    started = time.perf_counter()
    with socket.create_connection((ip, port), timeout=IO_TIMEOUT) as sock:
        connected = time.perf_counter()
        sock.sendall(REQUEST)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    if not answer.startswith(b"HTTP/1.") or b" 200 " not in answer.split(b"\r\n", 1)[0]:
        raise OSError(f"unexpected answer {answer[:40]!r}")
    return connected - started, time.perf_counter() - started


def measure_latency(netns: str, ip: str, port: int, count: int, out: PathResult) -> None:
    """`count` requests one after another: each one's connect and request time."""
    def run() -> None:
        for _ in range(count):
            try:
                connect, whole = request_once(ip, port)
            except OSError:
                out.failures += 1
                continue
            out.connect.append(connect)
            out.request.append(whole)
    in_netns(netns, [run])


def measure_throughput(netns: str, ip: str, port: int, count: int, threads: int,
                       out: PathResult) -> None:
    """`count` requests from `threads` threads at once, timed as a whole."""
    lock = threading.Lock()
    share = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]

    def worker(n: int) -> Callable[[], None]:
        def run() -> None:
            for _ in range(n):
                try:
                    request_once(ip, port)
                except OSError:
                    with lock:
                        out.failures += 1
                    continue
                with lock:
                    out.done += 1
        return run

    started = time.perf_counter()
    in_netns(netns, [worker(n) for n in share])
    out.throughput_elapsed += time.perf_counter() - started


# --- the cluster side --------------------------------------------------------------------------

def _pod(name: str, labels: dict[str, str], command: list[str],
         readiness: dict[str, Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox", "command": command}
    if readiness:
        container["readinessProbe"] = readiness
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}


OBJECTS: list[tuple[str, dict[str, Any]]] = [
    ("pods", _pod("backend", {"app": "bench-backend"},
                  ["sh", "-c", "mkdir -p /www && echo hello-bench > /www/index.html && "
                   f"exec httpd -f -p {BACKEND_PORT} -h /www"],
                  {"tcpSocket": {"port": BACKEND_PORT}, "periodSeconds": 1})),
    ("pods", _pod("client", {}, ["sleep", "36000"])),
    ("services", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "backend"},
                  "spec": {"selector": {"app": "bench-backend"},
                           "ports": [{"port": SERVICE_PORT, "targetPort": BACKEND_PORT}]}}),
]


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


async def _wait(what: str, check: Callable[[], Any], timeout: float = READY_TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.2)


def client_netns(kubelet_dir: Path, namespace: str) -> str:
    """The network namespace of the client pod's sandbox (the OCI runtime's sandbox.json)."""
    for meta_path in (kubelet_dir / "runtime" / "sandboxes").glob("*/sandbox.json"):
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads(meta_path.read_text())
            if meta.get("namespace") == namespace and meta.get("name") == "client" \
                    and meta.get("ready"):
                return str(meta_path.parent / "ns" / "net")
    raise RuntimeError(f"no ready sandbox of pod {namespace}/client under {kubelet_dir}")


async def set_up(api: ApiClient, namespace: str) -> tuple[str, str]:
    """Create the namespace, pods and Service; (backend pod IP, ClusterIP) once Ready."""
    with contextlib.suppress(StatusError):
        await api.create(resource_path("namespaces"),
                         {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": namespace}})
    for resource, body in OBJECTS:
        await api.create(resource_path(resource, namespace), body)

    async def pods_ready() -> dict[str, Any] | None:
        pods = {n: await api.get(resource_path("pods", namespace, n))
                for n in ("backend", "client")}
        ok = _ready(pods["backend"]) and (pods["client"].get("status") or {}).get(
            "phase") == "Running"
        return pods if ok else None

    pods = await _wait("the backend Ready and the client Running", pods_ready)
    svc = await api.get(resource_path("services", namespace, "backend"))
    return str(pods["backend"]["status"]["podIP"]), str(svc["spec"]["clusterIP"])


async def tear_down(api: ApiClient, namespace: str) -> None:
    for resource, body in reversed(OBJECTS):
        with contextlib.suppress(StatusError):
            await api.delete(resource_path(resource, namespace, body["metadata"]["name"]))

    async def pods_gone() -> bool:
        items = (await api.get(resource_path("pods", namespace))).get("items") or []
        return not items

    await _wait("the pods to be gone", pods_gone)
    with contextlib.suppress(StatusError):
        await api.delete(resource_path("namespaces", name=namespace))


def wait_through(netns: str, ip: str, port: int) -> None:
    """Until a request through `ip:port` succeeds (the proxy has programmed the Service)."""
    deadline = time.monotonic() + READY_TIMEOUT
    last: list[BaseException] = []

    def attempt() -> None:
        while time.monotonic() < deadline:
            try:
                request_once(ip, port)
                return
            except OSError as err:
                last[:] = [err]
                time.sleep(0.2)
        raise RuntimeError(f"{ip}:{port} did not answer within {READY_TIMEOUT:g}s: {last}")
    in_netns(netns, [attempt])


def run_measures(netns: str, targets: dict[str, tuple[str, int]], sizes: Sizes
                 ) -> dict[str, PathResult]:
    results = {path: PathResult() for path in PATHS}
    for ip, port in targets.values():  # warm-up, not counted
        wait_through(netns, ip, port)
        measure_throughput(netns, ip, port, 20, 1, PathResult())
    per_connect = max(1, sizes.connections // sizes.rounds)
    per_request = max(1, sizes.requests // sizes.rounds)
    for r in range(sizes.rounds):
        order = PATHS if r % 2 == 0 else tuple(reversed(PATHS))
        with progress(f"round {r + 1}/{sizes.rounds} ({' then '.join(order)})"):
            for path in order:
                ip, port = targets[path]
                measure_latency(netns, ip, port, per_connect, results[path])
                measure_throughput(netns, ip, port, per_request, sizes.threads,
                                   results[path])
    return results


# --- report -----------------------------------------------------------------------------------

def report(results: dict[str, PathResult], sizes: Sizes, machine: dict[str, str],
           left: list[str]) -> str:
    direct, service = results["pod IP"], results["ClusterIP"]
    rows = [[path,
             str(len(r.connect)), format_ms(percentile(r.connect, 50)),
             format_ms(percentile(r.connect, 99)), format_ms(percentile(r.request, 50)),
             format_ms(percentile(r.request, 99)), str(r.done), format_rate(r.rps),
             str(r.failures)]
            for path, r in results.items()]
    ratios = [
        ["connect median", format_number(ratio(percentile(service.connect, 50),
                                               percentile(direct.connect, 50)))],
        ["connect p99", format_number(ratio(percentile(service.connect, 99),
                                            percentile(direct.connect, 99)))],
        ["request median", format_number(ratio(percentile(service.request, 50),
                                               percentile(direct.request, 50)))],
        ["requests/s", format_number(ratio(service.rps, direct.rps))],
    ]
    lines = ["# Service benchmark: ClusterIP against the pod IP", "",
             f"{sizes.rounds} rounds; per path {sizes.connections} requests one after "
             f"another (connect and request latency), {sizes.requests} from "
             f"{sizes.threads} threads at once (requests/s); the client in a pod's network "
             "namespace on the backend's node.", "",
             "## Results", "",
             markdown_table(["path", "sequential requests", "connect median ms",
                             "connect p99 ms", "request median ms", "request p99 ms",
                             "parallel requests", "requests/s", "failures"], rows), "",
             "## Ratios", "", "ClusterIP / pod IP (above 1: the ClusterIP is slower, except "
             "requests/s).", "",
             markdown_table(["measure", "ClusterIP / pod IP"], ratios), "",
             "## Machine", "",
             markdown_table(["", ""], [[k, v] for k, v in machine.items()]), "",
             "Left behind: " + ("; ".join(left) if left else "nothing")]
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------------

async def bench_on(kubeconfig: Path, kubelet_dir: Path, namespace: str, sizes: Sizes
                   ) -> dict[str, PathResult]:
    async with ApiClient(load_kubeconfig(kubeconfig), user_agent="bench-service") as api:
        try:
            with progress("creating the backend, the client and the Service"):
                pod_ip, cluster_ip = await set_up(api, namespace)
            netns = client_netns(kubelet_dir, namespace)
            targets = {"pod IP": (pod_ip, BACKEND_PORT), "ClusterIP": (cluster_ip,
                                                                       SERVICE_PORT)}
            return await asyncio.to_thread(run_measures, netns, targets, sizes)
        finally:
            with progress("deleting them"):
                await tear_down(api, namespace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.service", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help=f"a short run ({QUICK.connections} sequential and "
                             f"{QUICK.requests} parallel requests per path)")
    parser.add_argument("--connections", type=int, default=None,
                        help="sequential requests per path (latency)")
    parser.add_argument("--requests", type=int, default=None,
                        help="parallel requests per path (requests/s)")
    parser.add_argument("--threads", type=int, default=None, help="parallel clients")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where `ephemera up` keeps its data (default: a temporary dir)")
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="use this running cluster (with --kubelet-dir) instead of "
                             "starting one")
    parser.add_argument("--kubelet-dir", type=Path, default=None,
                        help="the root dir of the kubelet of the cluster's node")
    parser.add_argument("--namespace", default=NAMESPACE)
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args(argv)
    base = QUICK if args.quick else FULL
    sizes = Sizes(args.connections or base.connections, args.requests or base.requests,
                  args.threads or base.threads, args.rounds or base.rounds)
    if (args.kubeconfig is None) != (args.kubelet_dir is None):
        parser.error("--kubeconfig and --kubelet-dir go together")
    left: list[str] = []
    with contextlib.ExitStack() as stack:
        if args.kubeconfig is not None:
            work_dir = Path(args.kubelet_dir)
            machine = machine_description(work_dir)
            results = asyncio.run(bench_on(args.kubeconfig, args.kubelet_dir, args.namespace,
                                           sizes))
        else:
            work_dir = args.work_dir or Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="bench-service-")))
            machine = machine_description(work_dir)
            up = EphemeraUp(work_dir / "data", ["--node-name", NODE])
            with progress("starting ephemera up"):
                up.start()
            try:
                results = asyncio.run(bench_on(up.kubeconfig, up.kubelet_dir, args.namespace,
                                               sizes))
            finally:
                with progress("stopping ephemera up"):
                    code = up.stop()
                if code != 0:
                    left.append(f"ephemera up exited {code}")
                table = nft.table_name(default_cluster_cidr(up.data_dir.resolve()), NODE)
                if table in nft.list_tables():  # `up`'s proxy deletes it on stop
                    left.append(f"nftables table {FAMILY} {table}")
    print(report(results, sizes, machine, left))
    if args.json is not None:
        args.json.write_text(json.dumps({
            "config": sizes.__dict__, "machine": machine, "left_behind": left,
            "results": {path: r.as_dict() for path, r in results.items()}}, indent=2))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())

"""What the benchmarks share: timing and statistics (`Measurement`, `percentile`), progress lines,
Markdown tables and ratios, a real etcd server (`start_etcd`, reusing `tests/etcdserver.py`),
a real `ephemera apiserver` process on a chosen store (`Apiserver`), a whole real
`ephemera up` cluster with its kubelet (`EphemeraUp`), the TLS client context
built from the kubeconfig it writes, the CPU time processes use during a phase (`CpuMeter`),
how the whole machine's CPU time went in it, stolen by the hypervisor included
(`MachineCpu`), and the requests etcd handles (`EtcdRequestCounter`),
sampling a process with py-spy (`py_spy_record`, `collapsed_stacks_summary`), and a
description of the machine for the record.

Times are seconds internally (`time.perf_counter`); tables show milliseconds.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib.util
import json
import math
import os
import platform
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
ETCD_SERVER_MODULE = REPO_ROOT / "tests" / "etcdserver.py"
APISERVER_START_TIMEOUT = 60.0
APISERVER_STOP_TIMEOUT = 30.0


# --- statistics ----------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks, as numpy's
    default; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    fraction = position - lower
    return ordered[lower] + (ordered[upper] - ordered[lower]) * fraction


@dataclass
class Measurement:
    """One phase on one backend: the latency of each operation and the phase's wall time."""

    phase: str
    backend: str
    latencies: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    note: str = ""
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds by process, whole phase
    etcd_requests: dict[str, float] = field(default_factory=dict)  # KV calls by method

    @property
    def count(self) -> int:
        return len(self.latencies)

    @property
    def median(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)

    @property
    def throughput(self) -> float:
        """Operations per second over the whole phase."""
        return self.count / self.elapsed if self.elapsed > 0 else math.nan

    def cpu_per_op(self, process: str) -> float:
        """CPU seconds `process` spent per operation of the phase; NaN when not measured."""
        if process not in self.cpu or not self.count:
            return math.nan
        return self.cpu[process] / self.count

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase, "backend": self.backend, "count": self.count,
            "elapsed_s": self.elapsed, "median_ms": self.median * 1e3,
            "p99_ms": self.p99 * 1e3, "ops_per_s": self.throughput, "note": self.note,
            "cpu_s": dict(self.cpu), "etcd_requests": dict(self.etcd_requests),
        }


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CLIENT = "client"


def process_cpu_seconds(pid: int) -> float:
    """CPU time of a process: the nanosecond run times of its live threads
    (/proc/PID/task/*/schedstat), or where that is missing the user plus system clock ticks
    of /proc/PID/stat (1/CLK_TCK resolution, usually 10 ms)."""
    try:
        total_ns = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                total_ns += int((task / "schedstat").read_text().split()[0])
        return total_ns / 1e9
    except (OSError, ValueError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat.rpartition(")")[2].split()  # the command name may hold spaces
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def child_pids(pid: int) -> list[int]:
    """The child processes of `pid` (an apiserver's workers), by pid."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return sorted(int(c) for c in f.read().split())
    except (OSError, ValueError):
        return []


class CpuMeter:
    """CPU time of named processes: this process as `client` (all its threads) and the given
    pids. `snapshot()` now, `since(snapshot)` the CPU seconds each used in between."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)

    def snapshot(self) -> dict[str, float]:
        taken = {CLIENT: time.process_time()}
        for name, pid in self.pids.items():
            try:
                taken[name] = process_cpu_seconds(pid)
            except (OSError, IndexError, ValueError):
                pass
        return taken

    def since(self, before: dict[str, float]) -> dict[str, float]:
        after = self.snapshot()
        return {name: after[name] - before[name] for name in after if name in before}


class MachineCpu:
    """How the whole machine's CPU time went during a phase, from `/proc/stat`'s first line:
    `snapshot()` now, `since(snapshot)` the shares of busy (user, nice, system, irq,
    softirq), idle (idle, iowait) and steal time (cycles the hypervisor gave to other
    guests: on a shared VM the one number that tells a slower run from a slower machine)."""

    @staticmethod
    def snapshot() -> list[int]:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal

    @classmethod
    def since(cls, before: list[int]) -> dict[str, float]:
        spent = [a - b for a, b in zip(cls.snapshot(), before, strict=True)]
        total = sum(spent) or 1
        user, nice, system, idle, iowait, irq, softirq, steal = spent
        return {"busy": round((user + nice + system + irq + softirq) / total, 3),
                "idle": round((idle + iowait) / total, 3),
                "steal": round(steal / total, 3)}


class EtcdRequestCounter:
    """The KV requests (Range, Txn, Put, DeleteRange, ...) an etcd server has handled, by
    method, from its Prometheus metrics (`grpc_server_handled_total` on the client URL).
    `snapshot()` now, `since(snapshot)` the requests handled in between."""

    def __init__(self, endpoint: str) -> None:
        self.url = endpoint.rstrip("/") + "/metrics"

    def snapshot(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url, timeout=10) as response:
            text = response.read().decode()
        counts: dict[str, float] = {}
        for line in text.splitlines():
            if not line.startswith("grpc_server_handled_total{"):
                continue
            labels, _, value = line.partition("} ")
            if 'grpc_service="etcdserverpb.KV"' not in labels:
                continue
            method = labels.split('grpc_method="', 1)[1].split('"', 1)[0]
            counts[method] = counts.get(method, 0.0) + float(value)
        return counts

    def since(self, before: dict[str, float]) -> dict[str, float]:
        after = self.snapshot()
        return {method: after[method] - before.get(method, 0.0) for method in after
                if after[method] > before.get(method, 0.0)}


def parse_trees(parser: argparse.ArgumentParser, specs: Sequence[str]) -> list[tuple[str, Path]]:
    """`--tree LABEL=DIR` arguments (frozen copies of commits, `DIR/src/ephemera` present) as
    (label, resolved dir); none given: this checkout, labelled `this`."""
    trees: list[tuple[str, Path]] = []
    for spec in specs or [f"this={REPO_ROOT}"]:
        label, sep, path = spec.partition("=")
        if not sep or not (Path(path) / "src" / "ephemera").is_dir():
            parser.error(f"--tree {spec!r}: expected LABEL=DIR with DIR/src/ephemera")
        trees.append((label, Path(path).resolve()))
    return trees


def measure_trees(trees: Sequence[tuple[str, Path]], rounds: int, scratch: Path,
                  measure: Callable[[Path, Path], dict[str, Any]]) -> list[dict[str, Any]]:
    """`measure(tree, work_dir)` for every tree, round after round, the order reversed every
    other round so that no tree always goes first; the results (with `round` and `tree`) in
    round order, the trees in their given order within a round."""
    results = []
    for round_ in range(1, rounds + 1):
        order = trees if round_ % 2 else list(reversed(trees))
        for label, tree in order:
            measured = measure(tree, scratch / f"{round_}-{label}")
            log(f"round {round_}, {label}: {measured}")
            results.append({"round": round_, "tree": label, **measured})
    labels = [label for label, _ in trees]
    results.sort(key=lambda r: (r["round"], labels.index(r["tree"])))
    return results


def trees_report(benchmark: str, argv: Sequence[str], machine: dict[str, str],
                 trees: Sequence[tuple[str, Path]], tree_args: Sequence[str],
                 **fields: Any) -> dict[str, Any]:
    """The JSON report of a side-by-side benchmark: its command, the machine (naming the
    trees measured when they are not this checkout), `fields`, the trees."""
    if tree_args:  # the checkout's commit is the benchmark's, not the trees'
        machine = {**machine, "ephemera": machine["ephemera"] + "; trees measured: "
                   + ", ".join(tree_args)}
    return {"benchmark": benchmark,
            "command": f"python -m bench.{benchmark} " + " ".join(argv),
            "machine": machine, **fields,
            "trees": {label: str(tree) for label, tree in trees}}


def add_tree_arguments(parser: argparse.ArgumentParser, *, workers: int, seconds: float,
                       settle: float, rounds: int) -> None:
    """The arguments every side-by-side apiserver benchmark takes (`--tree`, `--workers`,
    `--seconds`, `--settle-seconds`, `--rounds`, `--json`), with its defaults."""
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                        help="a tree to measure (repeatable; default: this checkout)")
    parser.add_argument("--workers", type=int, default=workers, help="apiserver --workers")
    parser.add_argument("--seconds", type=float, default=seconds, help="each measure's length")
    parser.add_argument("--settle-seconds", type=float, default=settle,
                        help="wait after it serves (its caches listed, informers synced)")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--json", type=Path, default=None)


def run_side_by_side(benchmark: str, parser: argparse.ArgumentParser, args: argparse.Namespace,
                     measure: Callable[[Path, Path], dict[str, Any]],
                     table: Callable[[list[dict[str, Any]]], str], **fields: Any) -> None:
    """Measure every `--tree` (`measure(tree, work_dir)`, `measure_trees`) in a scratch
    directory, print `table(results)`, and write the JSON report (`trees_report`, with
    `fields`) when `--json` asks."""
    trees = parse_trees(parser, args.tree)
    with tempfile.TemporaryDirectory(prefix=f"bench-{benchmark}-") as scratch:
        results = measure_trees(trees, args.rounds, Path(scratch), measure)
        machine = machine_description(Path(scratch))
    print(table(results))
    if args.json is not None:
        report = trees_report(benchmark, sys.argv[1:], machine, trees, args.tree,
                              workers=args.workers, seconds=args.seconds, **fields,
                              results=results)
        args.json.write_text(json.dumps(report, indent=1) + "\n")


@contextmanager
def tree_apiserver_on_etcd(tree: Path, workers: int, work_dir: Path) -> Iterator[Any]:
    """A fresh real etcd and an `ephemera apiserver --store etcd --workers N` from `tree`
    serving on it, both stopped on exit: yields (apiserver, etcd)."""
    etcd = start_etcd(work_dir / "etcd")
    try:
        apiserver = Apiserver(work_dir / "apiserver", "etcd", [etcd.endpoint], workers=workers)
        apiserver.env = tree_env(tree)
        apiserver.start()
        try:
            yield apiserver, etcd
        finally:
            apiserver.stop()
    finally:
        etcd.stop()


def tree_env(tree: Path) -> dict[str, str]:
    """The environment of a process run from `tree` (its `src` first on PYTHONPATH)."""
    return {**os.environ, "PYTHONPATH": f"{tree / 'src'}:{tree}"}


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator of two durations or rates; NaN unless both are above zero
    (a missing value, or a negative delay that a ratio would not describe)."""
    if not (numerator > 0 and denominator > 0):  # also false for NaN
        return math.nan
    return numerator / denominator


# --- output --------------------------------------------------------------------------------


def log(line: str) -> None:
    """A progress line on stderr (the results go to stdout)."""
    print(line, file=sys.stderr, flush=True)


@contextmanager
def progress(label: str) -> Iterator[None]:
    """One stderr line per phase: the label when it starts, its wall time when it ends."""
    print(f"{label} ...", end="", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        yield
    except BaseException:
        print(" failed", file=sys.stderr, flush=True)
        raise
    print(f" {time.perf_counter() - started:.2f} s", file=sys.stderr, flush=True)


def format_ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def format_number(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def format_rate(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                   align: str = "") -> str:
    """A GitHub-flavoured Markdown table, columns padded for reading in a terminal. `align`
    has an `l` or `r` per column; by default the first column is left-aligned, the others
    right-aligned."""
    align = (align or "l").ljust(len(headers), "r")
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = [c.ljust(w) if a == "l" else c.rjust(w)
                  for c, w, a in zip(cells, widths, align, strict=True)]
        return "| " + " | ".join(padded) + " |"

    separator = "|" + "|".join(
        "-" * (w + 2) if a == "l" else "-" * (w + 1) + ":"
        for w, a in zip(widths, align, strict=True)) + "|"
    return "\n".join([line(headers), separator, *(line(row) for row in rows)])


# --- etcd ----------------------------------------------------------------------------------


def _etcdserver_module() -> ModuleType:
    """`tests/etcdserver.py`, the one place that knows how to start etcd (the tests use it)."""
    spec = importlib.util.spec_from_file_location("ephemera_tests_etcdserver",
                                                  ETCD_SERVER_MODULE)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {ETCD_SERVER_MODULE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start_etcd(work_dir: Path, progress_notify_interval: str = "5s") -> Any:
    """A started real etcd (Debian's etcd-server) with its data in `work_dir`; an
    `EtcdServer` from tests/etcdserver.py: `.endpoint`, `.process`, `.stop()`."""
    server = _etcdserver_module().EtcdServer(
        work_dir, progress_notify_interval=progress_notify_interval)
    server.start()
    return server


def etcd_version() -> str:
    try:
        out = subprocess.run(["etcd", "--version"], capture_output=True, text=True,
                             timeout=10, check=False).stdout
    except OSError:
        return "unknown"
    first = out.splitlines()[0] if out else ""
    return first.split(":", 1)[1].strip() if ":" in first else "unknown"


# --- the apiserver -------------------------------------------------------------------------


def client_ssl_context(kubeconfig: Path, scratch_dir: Path) -> tuple[str, ssl.SSLContext]:
    """(server URL, TLS context) from a kubeconfig's current context: its CA, and its client
    certificate and key (inline `-data` or file paths; inline ones are written to
    `scratch_dir` because `ssl` loads a certificate chain only from files)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    contexts = {c["name"]: c["context"] for c in doc.get("contexts") or []}
    current = contexts.get(doc.get("current-context", ""), {})
    clusters = {c["name"]: c["cluster"] for c in doc["clusters"]}
    users = {u["name"]: u["user"] for u in doc["users"]}
    cluster = clusters.get(current.get("cluster", ""), doc["clusters"][0]["cluster"])
    user = users.get(current.get("user", ""), doc["users"][0]["user"])

    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if "certificate-authority-data" in cluster:
        context.load_verify_locations(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif "certificate-authority" in cluster:
        context.load_verify_locations(cafile=cluster["certificate-authority"])

    def material(name: str) -> str:
        if f"{name}-data" in user:
            scratch_dir.mkdir(parents=True, exist_ok=True)
            path = scratch_dir / f"{name}.pem"
            path.write_bytes(base64.b64decode(user[f"{name}-data"]))
            path.chmod(0o600)
            return str(path)
        return str(user[name])

    context.load_cert_chain(material("client-certificate"), material("client-key"))
    return str(cluster["server"]), context


def kill_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL `process` (if still running) and reap it: a crash, no clean stop."""
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()


class Apiserver:
    """A real `ephemera apiserver` on a data dir and a store, on a free loopback port.

    `start()` waits until it has written its admin kubeconfig (it does so once serving);
    `url` and `ssl_context` are then the server and the client TLS context built from that
    kubeconfig. Logs go to `data_dir/apiserver.log`."""

    def __init__(self, data_dir: Path, store: str, etcd_endpoints: Sequence[str] = (),
                 workers: int = 1) -> None:
        self.data_dir = data_dir
        self.store = store
        self.etcd_endpoints = list(etcd_endpoints)
        self.workers = workers  # `--workers` (etcd only)
        self.extra_args: list[str] = []  # more flags, last on the command line
        self.env: dict[str, str] | None = None  # its environment (None: this process's)
        self.port = 0  # `--port`: 0 a free one; set it to start again where it served
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.ssl_context: ssl.SSLContext | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "apiserver.log"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the apiserver is not running")
        return self.process.pid

    def command(self) -> list[str]:
        argv = [sys.executable, "-m", "ephemera.cli", "apiserver", "--data-dir", str(self.data_dir),
                 "--port", str(self.port), "--write-kubeconfig", str(self.kubeconfig),
                 "--store", self.store]
        if self.etcd_endpoints:
            argv += ["--etcd-endpoints", ",".join(self.etcd_endpoints)]
        if self.workers > 1:
            argv += ["--workers", str(self.workers)]
        return argv + self.extra_args

    def start(self, timeout: float = APISERVER_START_TIMEOUT) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.unlink(missing_ok=True)
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=REPO_ROOT,
                                            env=self.env)
        deadline = time.monotonic() + timeout
        while not self.kubeconfig.exists():
            if self.process.poll() is not None:
                raise RuntimeError(f"ephemera apiserver exited {self.process.returncode}:\n"
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ephemera apiserver not serving after {timeout}s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.05)
        time.sleep(0.05)  # written atomically, but be kind to a slow rename
        self.url, self.ssl_context = client_ssl_context(self.kubeconfig,
                                                        self.data_dir / "bench-client")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing of a clean stop runs."""
        process, self.process = self.process, None
        kill_process(process)

    def stop(self) -> int | None:
        """SIGTERM and wait (SIGKILL after a timeout); the exit code."""
        process, self.process = self.process, None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            return process.wait(APISERVER_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def __enter__(self) -> Apiserver:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()



class EphemeraUp(Apiserver):
    """A real `ephemera up` on a data dir (apiserver on a free loopback port, scheduler,
    controller-manager and a kubelet with the real runtime), `extra_args` passed on (e.g.
    `--runtime crun --node-name n`). Started and stopped as `Apiserver` (SIGTERM stops its
    pods too); `up` writes `data_dir/kubeconfig` once the API answers. Its own output goes
    to `data_dir/up.log`, the components' logs to `data_dir/logs/`; the kubelet's root dir
    is `kubelet_dir`."""

    def __init__(self, data_dir: Path, extra_args: Sequence[str] = (), store: str = "sqlite"
                 ) -> None:
        super().__init__(data_dir, store)
        self.extra_args = list(extra_args)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "up.log"

    @property
    def kubelet_dir(self) -> Path:
        return self.data_dir / "kubelet"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "ephemera.cli", "up", "--data-dir", str(self.data_dir),
                "--store", self.store, *self.extra_args]

    def component_pids(self) -> dict[str, int]:
        """The running components by name (`apiserver`, `scheduler`, `controller-manager`,
        `kubelet`), from the pid files `up` keeps in `data_dir/run/`."""
        pids = {}
        for pid_file in sorted((self.data_dir / "run").glob("*.pid")):
            with contextlib.suppress(OSError, ValueError):
                pids[pid_file.stem] = int(pid_file.read_text())
        return pids

    def log_tail(self, chars: int = 3000) -> str:
        parts = [super().log_tail(chars)]
        for log_file in sorted((self.data_dir / "logs").glob("*.log")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {log_file.name}\n"
                             f"{log_file.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

# --- profiling ---------------------------------------------------------------------------


@contextmanager
def py_spy_record(pid: int, output: Path, rate: int = 200) -> Iterator[None]:
    """Sample the Python process `pid` with py-spy (`pip install py-spy`; not a dependency of
    ephemera) while the block runs; collapsed stacks (`--format raw`) go to `output`."""
    binary = shutil.which("py-spy")
    if binary is None:
        raise RuntimeError("py-spy is not on PATH (pip install py-spy)")
    log_path = output.with_suffix(".log")
    with open(log_path, "wb") as log_file:
        recorder = subprocess.Popen(
            [binary, "record", "--pid", str(pid), "--format", "raw", "--output", str(output),
             "--rate", str(rate), "--nolineno"],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while b"Sampling" not in log_path.read_bytes() and time.monotonic() < deadline:
        if recorder.poll() is not None:
            raise RuntimeError(f"py-spy exited {recorder.returncode}: {log_path.read_text()}")
        time.sleep(0.02)
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        try:
            recorder.wait(30)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait()


def collapsed_stacks_summary(path: Path, top: int = 25, focus: str = "ephemera/") -> str:
    """The frames with the most samples of their own (self) and in total (inclusive, a frame
    counted once per stack; only frames whose text contains `focus`, so that the event loop
    and runner frames every stack shares stay out), from py-spy's collapsed stacks:
    `frame;frame;... count`."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count
    if total == 0:
        return "no samples\n"

    def table(counts: dict[str, int]) -> list[str]:
        ranked = sorted(counts.items(), key=lambda item: -item[1])[:top]
        return [f"{100 * n / total:6.1f}%  {frame}" for frame, n in ranked]

    focused = {frame: n for frame, n in inclusive.items() if focus in frame}
    return "\n".join([f"{total} samples", "", "self:", *table(own), "",
                      f"inclusive ({focus}):", *table(focused)]) + "\n"


# --- the machine ---------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _filesystem_of(path: Path) -> str:
    """The type of the filesystem holding `path` (from /proc/mounts, longest mount prefix)."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "unknown"
    resolved = str(path.resolve())
    best, kind = "", "unknown"
    for fields in mounts:
        if len(fields) >= 3:
            mount_point = fields[1]
            inside = resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) >= len(best):
                best, kind = mount_point, fields[2]
    return kind


def _source_revision() -> str:
    """The git commit of the tree being measured, `+changes` when it has uncommitted ones."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=10, check=True).stdout
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=10,
                                check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"commit {head.strip()}" + (" +changes" if status.strip() else "")


def machine_description(work_dir: Path) -> dict[str, str]:
    """What a reader needs to compare runs: CPU, cores, memory, Python, etcd, filesystem."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory = f"{pages / 2**30:.0f} GiB"
    except (OSError, ValueError):
        memory = "unknown"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "ephemera": _source_revision(),
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count() or "unknown"),
        "memory": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "etcd": etcd_version() if shutil.which("etcd") else "not installed",
        "filesystem": f"{_filesystem_of(work_dir)} ({work_dir})",
        "load average at start": load,
    }

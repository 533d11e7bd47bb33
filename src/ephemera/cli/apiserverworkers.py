"""`ephemera apiserver --workers N`: N apiserver processes serving one port, so that the API
is served on every core (issue 17, item 3).

The parent process serves nothing itself. It reserves the port (binding a socket with
`SO_REUSEPORT`, so `--port 0` picks one free port for all), then starts N workers, each the
same `ephemera apiserver` command with `--port P` and an internal `--worker-index I`. Every
worker is a full apiserver on the shared store (etcd) with its own watch cache, and binds
the same address with `SO_REUSEPORT`: the kernel spreads new connections over the workers'
listening sockets. The workers share what makes several apiservers one control plane (the
data dir's certificates, the service account keys, the flags); worker 0 alone keeps the
identity Lease and the `kubernetes` Service, because N workers on one address and port are
one member of the control plane, not N.

The parent writes `--port-file` and `--write-kubeconfig` and says `serving on` once every
worker serves (a worker that exits before that ends the whole command with exit code 1:
its error is on stderr); it restarts a worker that dies later (one line on stderr, with
back-off), and on SIGTERM or SIGINT stops them all (SIGTERM, SIGKILL after a grace period,
saying so) and exits. Workers die with the parent (`PR_SET_PDEATHSIG`) and run in sessions
of their own, as the supervisor's children do: a terminal's Ctrl-C reaches the parent
alone, which stops them (they do not exit first, to be taken for crashes and restarted).
On the sqlite store, which belongs to one process, more than one worker is refused
(`check_workers`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ephemera.cli.supervisor import (
    INITIAL_BACKOFF,
    MAX_BACKOFF,
    STABLE_AFTER,
    STOP_GRACE,
    describe_exit,
    die_with_parent,
)

# How often the parent looks for the workers' port files while they start.
READY_POLL = 0.05


def check_workers(parser: argparse.ArgumentParser, workers: int | None, store: str,
                  flag: str = "--workers") -> None:
    """The worker count (`flag`: `apiserver --workers`, `up --apiserver-workers`; None: not
    given) must be positive, and 1 on the sqlite store (one process owns its file)."""
    if workers is None:
        return
    if workers < 1:
        parser.error(f"{flag} must be at least 1")
    if workers > 1 and store != "etcd":
        parser.error(f"{flag} {workers} needs --store etcd: the sqlite store is one "
                     "process's, so its apiserver runs as one worker")


def default_workers(store: str, cpus: int | None = None) -> int:
    """`ephemera up`'s default: one worker on sqlite (the store is in the apiserver's
    process); on etcd, half the cores but two on a machine of two or three, at most 4: `up`
    runs etcd's clients, the scheduler, the controller-manager and the kubelet on the same
    machine, and each worker costs a watch cache of its own and its memory. On 2 cores two
    workers ran 1,000 hollow nodes' 30,000 pods 13% faster than one (31.4 against 27.7 a
    second), with half the create latency at p99, once a client's requests waited for their
    turn outside their deadline (docs/benchmarks.md, "The full run, fifteenth to
    seventeenth times")."""
    if store != "etcd":
        return 1
    cores = cpus if cpus is not None else os.cpu_count() or 1
    return max(min(cores, 2), min(cores // 2, 4))


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound, not listening, `SO_REUSEPORT` socket on host:port (0: a free port), held
    while the workers run so that the port stays theirs across restarts. A given port is
    first bound without `SO_REUSEPORT`, so that a port some other server (another worker
    group too) holds is refused instead of shared."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    address = (host or "0.0.0.0", port)
    if port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def worker_argv(command: Sequence[str], port: int, index: int, port_file: Path,
                count: int = 1) -> list[str]:
    """The worker's command: the parent's own arguments, then the worker's overrides (the
    last of a repeated option wins); `--worker-count` tells it how many share the seats
    (`ephemera.apiserver.priority`)."""
    return [sys.executable, "-m", "ephemera.cli", *command, "--workers", "1",
            "--port", str(port), "--port-file", str(port_file),
            "--worker-index", str(index), "--worker-count", str(count)]


class WorkerGroup:
    """Starts, restarts and stops the N workers."""

    def __init__(self, argv: Callable[[int, Path], list[str]], count: int,
                 run_dir: Path) -> None:
        self.argv = argv
        self.count = count
        self.run_dir = run_dir
        self.processes: list[asyncio.subprocess.Process | None] = [None] * count
        self.serving = False  # every worker has served once: from then on, deaths restart
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def port_file(self, index: int) -> Path:
        return self.run_dir / f"worker-{index}.port"

    async def _spawn(self, index: int) -> asyncio.subprocess.Process:
        self.port_file(index).unlink(missing_ok=True)
        return await asyncio.create_subprocess_exec(
            *self.argv(index, self.port_file(index)), stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True, preexec_fn=die_with_parent)

    async def _keep_running(self, index: int) -> None:
        loop = asyncio.get_running_loop()
        backoff = INITIAL_BACKOFF
        while not self._stopping.is_set():
            began = loop.time()
            process = self.processes[index] = await self._spawn(index)
            code = await process.wait()
            if self._stopping.is_set():
                return
            if not self.serving:  # a bad flag, key or policy: every restart would fail too
                print(f"ephemera apiserver: worker {index} (pid {process.pid}) exited before "
                      f"serving: {describe_exit(code)}", file=sys.stderr, flush=True)
                return
            if loop.time() - began >= STABLE_AFTER:
                backoff = INITIAL_BACKOFF
            print(f"ephemera apiserver: worker {index} (pid {process.pid}) exited: "
                  f"{describe_exit(code)}; restarting in {backoff:g}s", file=sys.stderr,
                  flush=True)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await self._stopping.wait()
            backoff = min(backoff * 2, MAX_BACKOFF)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._keep_running(i), name=f"apiserver-worker-{i}")
                       for i in range(self.count)]

    def ready(self) -> bool:
        """Every worker has written its port file (it serves)."""
        return all(self.port_file(i).exists() for i in range(self.count))

    def failed(self) -> bool:
        """A worker ended before the group served (or could not be started)."""
        return any(t.done() for t in self._tasks) and not self._stopping.is_set()

    async def stop(self, grace: float = STOP_GRACE) -> None:
        self._stopping.set()
        for process in self.processes:
            if process is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        for index, process in enumerate(self.processes):
            if process is None:
                continue
            try:
                async with asyncio.timeout(grace):
                    await process.wait()
            except TimeoutError:
                print(f"ephemera apiserver: worker {index} (pid {process.pid}) did not stop "
                      f"in {grace:g}s; killing it", file=sys.stderr, flush=True)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        for task in self._tasks:
            with contextlib.suppress(Exception):
                await task


def cannot_serve(address: str, port: int, err: OSError) -> str:
    """The line for a port that could not be served: the system's words for the error, as
    Go prints them (`address already in use`), not asyncio's text, which quotes the address
    as a Python tuple."""
    if err.errno and not isinstance(err, ssl.SSLError):
        cause = os.strerror(err.errno).lower()
    else:
        cause = str(err.strerror or err)
    return f"ephemera apiserver: cannot serve on {address}:{port}: {cause}"


async def run_workers(args: argparse.Namespace, on_ready: Callable[[int], None]) -> int:
    """Run `args.workers` workers of the apiserver command `args.command_argv` until SIGTERM
    or SIGINT; `on_ready(port)` once every worker serves."""
    try:
        reservation = reserve_port(args.bind_address, args.port)
    except OSError as err:
        print(cannot_serve(args.bind_address, args.port, err), file=sys.stderr, flush=True)
        return 1
    port = int(reservation.getsockname()[1])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with reservation, tempfile.TemporaryDirectory(prefix="ephemera-apiserver-") as tmp:
        command = getattr(args, "command_argv", None) or sys.argv[1:]
        group = WorkerGroup(lambda i, f: worker_argv(command, port, i, f, args.workers),
                            args.workers, Path(tmp))
        group.start()
        try:
            started = time.monotonic()
            while not group.ready():
                if stop.is_set():
                    return 0
                if group.failed():
                    return 1
                await asyncio.sleep(READY_POLL)
            group.serving = True
            print(f"ephemera apiserver: {args.workers} workers ready in "
                  f"{time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
            on_ready(port)
            await stop.wait()
        finally:
            await group.stop()
    return 0

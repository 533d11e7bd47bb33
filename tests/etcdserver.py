"""A real etcd for tests: `EtcdCluster` runs `size` members of the `etcd` binary (Debian's
etcd-server, 3.4) as one cluster on free loopback ports, each with a data dir and log under
`base`, waits until they answer `/health`, and stops them with SIGTERM on exit; the chaos test
kills and restarts members. `EtcdServer` is the one-member case most tests use (`.endpoint`,
`.process`), in a temporary dir unless given one.

It runs etcd with a short `--experimental-watch-progress-notify-interval` so that the etcd
store's progress notifications (watch bookmarks) advance quickly in tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

ETCD_BINARY = "etcd"
START_ATTEMPTS = 3  # a free port may be taken between probing it and etcd binding it


class EtcdNotFound(RuntimeError):
    """The `etcd` binary is not on PATH."""


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EtcdCluster:
    """`with EtcdCluster(base, size=3) as cluster:` → `size` etcd members on loopback ports
    (`--initial-cluster` of all of them), each with a data dir and log of its own under `base`
    (`member-I/`). `kill(i)` sends SIGKILL to member i and reaps it; `restart(i)` starts it
    again on its data dir and ports and waits until the cluster answers through it.
    `endpoints` lists the client URLs, comma-separated."""

    def __init__(self, base: Path, size: int = 3, *, progress_notify_interval: str = "200ms",
                 start_timeout: float = 30.0) -> None:
        self.base = base
        self.size = size
        self._interval = progress_notify_interval
        self._start_timeout = start_timeout
        self._pick_ports()
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * size

    def _pick_ports(self) -> None:
        self.client_ports = [free_loopback_port() for _ in range(self.size)]
        self.peer_ports = [free_loopback_port() for _ in range(self.size)]

    def client_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.client_ports[i]}"

    @property
    def endpoints(self) -> str:
        return ",".join(self.client_url(i) for i in range(self.size))

    def member_dir(self, i: int) -> Path:
        return self.base / f"member-{i}"

    def log_path(self, i: int) -> Path:
        return self.member_dir(i) / "etcd.log"

    def _spawn(self, i: int) -> None:
        binary = shutil.which(ETCD_BINARY)
        if binary is None:
            raise EtcdNotFound("the etcd binary is missing (Debian package etcd-server)")
        member = self.member_dir(i)
        member.mkdir(parents=True, exist_ok=True)
        peers = ",".join(f"m{j}=http://127.0.0.1:{self.peer_ports[j]}" for j in range(self.size))
        peer = f"http://127.0.0.1:{self.peer_ports[i]}"
        args = [
            binary, "--name", f"m{i}", "--data-dir", str(member / "data"),
            "--listen-client-urls", self.client_url(i),
            "--advertise-client-urls", self.client_url(i),
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", peers, "--initial-cluster-state", "new",
            "--initial-cluster-token", "ephemera-test-cluster",
            "--logger", "zap", "--log-outputs", "stderr",
            "--experimental-watch-progress-notify-interval", self._interval,
        ]  # fmt: skip
        with open(self.log_path(i), "ab") as log:
            self.processes[i] = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def healthy(self, i: int) -> bool:
        """Member i answers `/health` with true (it is in a cluster that has a quorum)."""
        with (
            contextlib.suppress(OSError, ValueError),
            urllib.request.urlopen(f"{self.client_url(i)}/health", timeout=1) as response,
        ):
            return bool(json.loads(response.read()).get("health") == "true")
        return False

    def _log_tail(self, i: int) -> str:
        path = self.log_path(i)
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def _wait_healthy(self, members: range | list[int]) -> None:
        deadline = time.monotonic() + self._start_timeout
        for i in members:
            while not self.healthy(i):
                process = self.processes[i]
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"etcd member {i} exited with {process.returncode}: "
                                       f"{self._log_tail(i)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member {i} not healthy after "
                                       f"{self._start_timeout}s: {self._log_tail(i)}")
                time.sleep(0.05)

    def start(self) -> None:
        last_error = "not started"
        for _attempt in range(START_ATTEMPTS):
            for i in range(self.size):
                self._spawn(i)
            try:
                self._wait_healthy(range(self.size))
                return
            except RuntimeError as error:
                last_error = str(error)
                self.stop()
                self._pick_ports()
        raise RuntimeError(f"etcd did not start: {last_error}")

    def kill(self, i: int) -> None:
        process = self.processes[i]
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self, i: int) -> None:
        self.kill(i)
        self._spawn(i)
        self._wait_healthy([i])

    def stop(self) -> None:
        for i in range(self.size):
            process, self.processes[i] = self.processes[i], None
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class EtcdServer(EtcdCluster):
    """`with EtcdServer() as etcd:` → `etcd.endpoint` is `http://127.0.0.1:<port>`; its data
    in `data_dir/data` and its log in `data_dir/etcd.log` (a temporary dir, removed on stop,
    when no `data_dir` is given)."""

    def __init__(self, data_dir: Path | None = None, *,
                 progress_notify_interval: str = "200ms", start_timeout: float = 20.0) -> None:
        self._tmp = None if data_dir is not None else tempfile.mkdtemp(prefix="ephemera-etcd-")
        super().__init__(data_dir if data_dir is not None else Path(str(self._tmp)), 1,
                         progress_notify_interval=progress_notify_interval,
                         start_timeout=start_timeout)

    def member_dir(self, i: int) -> Path:
        return self.base

    @property
    def endpoint(self) -> str:
        return self.client_url(0)

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.processes[0]

    def stop(self) -> None:
        super().stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


if __name__ == "__main__":  # manual use: python tests/etcdserver.py
    with EtcdServer() as server:
        print(server.endpoint, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    os._exit(0)

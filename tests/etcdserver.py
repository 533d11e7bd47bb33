"""A real etcd server for tests: `EtcdServer` starts the `etcd` binary (Debian's etcd-server,
3.4) on free loopback ports with a temporary data dir, waits until it answers `/health`, and
stops it with SIGTERM on exit. `EtcdCluster` runs several members as one cluster (the chaos
test kills and restarts them).

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
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

ETCD_BINARY = "etcd"


class EtcdNotFound(RuntimeError):
    """The `etcd` binary is not on PATH."""


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EtcdServer:
    """`with EtcdServer() as etcd:` → `etcd.endpoint` is `http://127.0.0.1:<port>`."""

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        progress_notify_interval: str = "200ms",
        start_timeout: float = 20.0,
    ) -> None:
        self._given_data_dir = data_dir
        self._progress_notify_interval = progress_notify_interval
        self._start_timeout = start_timeout
        self._tmp: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.client_port = 0
        self.peer_port = 0
        self.data_dir: Path | None = None
        self.log_path: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        binary = shutil.which(ETCD_BINARY)
        if binary is None:
            raise EtcdNotFound("the etcd binary is missing (Debian package etcd-server)")
        if self._given_data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="ephemera-etcd-")
            base = Path(self._tmp)
        else:
            base = self._given_data_dir
            base.mkdir(parents=True, exist_ok=True)
        self.data_dir = base / "data"
        self.log_path = base / "etcd.log"
        last_error = "not started"
        for _attempt in range(3):  # a free port may be taken between probe and bind
            self.client_port = free_loopback_port()
            self.peer_port = free_loopback_port()
            self._spawn(binary)
            try:
                self._wait_healthy()
                return
            except RuntimeError as error:
                last_error = str(error)
                self._terminate()
        raise RuntimeError(f"etcd did not start: {last_error}")

    def _spawn(self, binary: str) -> None:
        assert self.data_dir is not None and self.log_path is not None
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        name = "ephemera-test"
        args = [
            binary,
            "--name", name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{name}={peer}",
            "--logger", "zap",
            "--log-outputs", "stderr",
            "--experimental-watch-progress-notify-interval", self._progress_notify_interval,
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self._start_timeout
        url = f"{self.endpoint}/health"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"etcd exited with {self.process.returncode}: {self._log_tail()}"
                )
            with (
                contextlib.suppress(OSError, ValueError),
                urllib.request.urlopen(url, timeout=1) as response,
            ):
                if json.loads(response.read()).get("health") == "true":
                    return
            time.sleep(0.05)
        raise RuntimeError(f"etcd not healthy after {self._start_timeout}s: {self._log_tail()}")

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-2000:]

    def _terminate(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop(self) -> None:
        self._terminate()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> EtcdServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


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
        self.client_ports = [free_loopback_port() for _ in range(size)]
        self.peer_ports = [free_loopback_port() for _ in range(size)]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * size

    def client_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.client_ports[i]}"

    @property
    def endpoints(self) -> str:
        return ",".join(self.client_url(i) for i in range(self.size))

    def log_path(self, i: int) -> Path:
        return self.base / f"member-{i}" / "etcd.log"

    def _spawn(self, i: int) -> None:
        binary = shutil.which(ETCD_BINARY)
        if binary is None:
            raise EtcdNotFound("the etcd binary is missing (Debian package etcd-server)")
        member = self.base / f"member-{i}"
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

    def _wait_healthy(self, members: range | list[int]) -> None:
        deadline = time.monotonic() + self._start_timeout
        for i in members:
            while not self.healthy(i):
                process = self.processes[i]
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"etcd member {i} exited with {process.returncode}: "
                                       f"{self.log_path(i).read_text(errors='replace')[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member {i} not healthy after "
                                       f"{self._start_timeout}s")
                time.sleep(0.05)

    def start(self) -> None:
        for i in range(self.size):
            self._spawn(i)
        self._wait_healthy(range(self.size))

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

    def __enter__(self) -> EtcdCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


if __name__ == "__main__":  # manual use: python tests/etcdserver.py
    with EtcdServer() as server:
        print(server.endpoint, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    os._exit(0)

"""A real `ephemera up` for end-to-end tests, shared by the e2e suites.

`start_cluster(data_dir, home)` runs `python -m ephemera.cli up` on a data dir (the
apiserver picks a free port), waits for the kubeconfig to appear (written only once the API
answers) and returns a `Cluster`; `Cluster.stop()` sends SIGTERM and returns the exit code.
`Cluster.kubectl(...)` runs the real kubectl with a fresh HOME and cache dir of the test's
own (kubectl caches discovery and the dispatcher caches /version per host:port).

Use it as a context manager, or through the `cluster` fixture:

    from cluster import Cluster, start_cluster, cluster  # noqa: F401  (fixture)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

KUBECTL = os.environ.get("EPHEMERA_TEST_KUBECTL", "kubectl")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


@dataclass
class Cluster:
    data_dir: Path
    home: Path
    process: subprocess.Popen[bytes]
    output_path: Path
    extra_args: Sequence[str] = field(default_factory=tuple)

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    @property
    def server(self) -> str:
        doc = yaml.safe_load(self.kubeconfig.read_text())
        return str(doc["clusters"][0]["cluster"]["server"])

    @property
    def ca_path(self) -> Path:
        return self.data_dir / "pki" / "ca.crt"

    @property
    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def pid_of(self, component: str) -> int:
        return int((self.data_dir / "run" / f"{component}.pid").read_text())

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with `check`, fail the test on a non-zero exit."""
        env = {**os.environ, "HOME": str(self.home), "KUBECONFIG": str(self.kubeconfig)}
        argv = [KUBECTL, "--kubeconfig", str(self.kubeconfig),
                "--cache-dir", str(self.home / ".kube" / "cache"), *args]
        result = subprocess.run(argv, env=env, input=input, capture_output=True, text=True,
                                timeout=timeout, check=False)
        if check and result.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} exited {result.returncode}\n"
                        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        return result

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal `ephemera up` and wait for it; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"ephemera up did not stop within {STOP_TIMEOUT}s\n{self.output}")

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.stop()


def start_cluster(data_dir: Path, home: Path, extra_args: Sequence[str] = (),
                  timeout: float = START_TIMEOUT) -> Cluster:
    """Start `ephemera up` on `data_dir` and wait until its kubeconfig exists."""
    data_dir.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    kubeconfig = data_dir / "kubeconfig"
    kubeconfig.unlink(missing_ok=True)  # a previous run's; `up` writes it fresh when ready
    output_path = data_dir.parent / f"{data_dir.name}-up-{time.monotonic_ns()}.out"
    with open(output_path, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "ephemera.cli", "up", "--data-dir", str(data_dir),
             *extra_args],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    cluster = Cluster(data_dir, home, process, output_path, tuple(extra_args))
    deadline = time.monotonic() + timeout
    while not kubeconfig.exists():
        if process.poll() is not None:
            pytest.fail(f"ephemera up exited {process.returncode} before the API answered\n"
                        f"{cluster.output}\n{_logs(data_dir)}")
        if time.monotonic() > deadline:
            cluster.stop(signal.SIGKILL)
            pytest.fail(f"no kubeconfig within {timeout}s\n{cluster.output}\n{_logs(data_dir)}")
        time.sleep(0.05)
    return cluster


def _logs(data_dir: Path) -> str:
    parts = []
    for log in sorted((data_dir / "logs").glob("*.log")):
        parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}")
    return "\n".join(parts)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A running cluster on a fresh data dir; stopped (and checked to exit 0) afterwards."""
    running = start_cluster(tmp_path / "data", tmp_path / "home")
    try:
        yield running
    finally:
        code = running.stop()
        assert code == 0, f"ephemera up exited {code}\n{running.output}"

"""A real `ephemera up` for end-to-end tests, shared by the e2e suites.

`start_cluster(data_dir, home)` runs `python -m ephemera.cli up` on a data dir (the
apiserver picks a free port), waits for the kubeconfig to appear (written only once the API
answers) and returns a `Cluster`; `Cluster.stop()` sends SIGTERM and returns the exit code.
`Cluster.kubectl(...)` runs the real kubectl with a fresh HOME and cache dir of the test's
own (kubectl caches discovery and the dispatcher caches /version per host:port).

Use it as a context manager, or through the `cluster` fixture:

    from cluster import Cluster, start_cluster, cluster  # noqa: F401  (fixture)

Suites whose tests do not interfere share one cluster per module (`shared_cluster`, on
sqlite) and give each test a `Kubectl` of its own (the `kubectl` fixture): a fresh HOME and
cache dir, and a namespace named after the test, created for it. `Kubectl.stream(...)` runs a
long-lived kubectl (`get -w`, a waiting `delete`) whose output lines the test reads as they
come, and stops it.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from processes import until

from ephemera.apiserver.certs import CertKey, issue_client_cert, write_kubeconfig
from ephemera.cli.flags import read_ports
from ephemera.kubelet.runtime import nodeaddress
from ephemera.kubelet.stats import loopdev
from ephemera.kubelet.volumes import mounts

KUBECTL = os.environ.get("EPHEMERA_TEST_KUBECTL", "kubectl")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ClusterAccess:
    """What a client needs of a running cluster: its data dir (CA, pid files, logs), a
    kubeconfig and a HOME; kubectl runs with them. It cannot stop anything."""

    data_dir: Path
    home: Path

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

    def pid_of(self, component: str) -> int:
        return int((self.data_dir / "run" / f"{component}.pid").read_text())

    def kubectl_command(self, args: Sequence[str], home: Path | None = None,
                        env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of a kubectl run against this cluster as the user whose
        HOME (and kubectl cache) is `home` (default: the cluster's)."""
        home = home or self.home
        full_env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(self.kubeconfig),
                    **(env or {})}
        argv = [KUBECTL, "--kubeconfig", str(self.kubeconfig),
                "--cache-dir", str(home / ".kube" / "cache"), *args]
        return argv, full_env

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 60, home: Path | None = None,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with `check`, fail the test on a non-zero exit."""
        argv, full_env = self.kubectl_command(args, home, env)
        result = subprocess.run(argv, env=full_env, input=input, capture_output=True,
                                text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} exited {result.returncode}\n"
                        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        return result


@dataclass
class Cluster(ClusterAccess):
    """A running `ephemera up` (its process and output), which `stop()` ends."""

    process: subprocess.Popen[bytes]
    output_path: Path
    extra_args: Sequence[str] = field(default_factory=tuple)

    @property
    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

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
                  timeout: float = START_TIMEOUT, *, service_proxy: bool = False) -> Cluster:
    """Start `ephemera up` on `data_dir` and wait until its kubeconfig exists. Without
    `service_proxy` it runs no Service proxy and no cluster DNS server (`--no-proxy
    --no-dns`): only the modules that send traffic through Services or look names up ask for
    them, which keeps the suite's CPU down."""
    data_dir.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    kubeconfig = data_dir / "kubeconfig"
    kubeconfig.unlink(missing_ok=True)  # a previous run's; `up` writes it fresh when ready
    output_path = data_dir.parent / f"{data_dir.name}-up-{time.monotonic_ns()}.out"
    if not any(a.startswith("--mount-service-account-token") for a in extra_args):
        # `up` mounts kube-api-access-* into every pod, as upstream; the suite's manifests
        # and their exact volume lists predate that, so clusters here leave it off unless a
        # module asks (tests/e2e/test_in_cluster_api.py, test_authn_kubectl.py).
        extra_args = [*extra_args, "--mount-service-account-token=false"]
    if not service_proxy and "--no-proxy" not in extra_args:
        extra_args = [*extra_args, "--no-proxy", "--no-dns"]
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


# --- one cluster per module, one kubectl user and namespace per test ------------------------


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One running cluster (sqlite) for a whole test module; tests keep to namespaces of
    their own. Stopped, and checked to exit 0, after the module."""
    base = tmp_path_factory.mktemp("shared-cluster")
    running = start_cluster(base / "data", base / "home")
    try:
        yield running
    finally:
        code = running.stop()
        assert code == 0, f"ephemera up exited {code}\n{running.output}"


def namespace_for(test_name: str) -> str:
    """A DNS-label namespace name unique to a test (its name, shortened, and a counter)."""
    stem = re.sub(r"[^a-z0-9]+", "-", test_name.lower().removeprefix("test_")).strip("-")
    return f"{stem[:48].rstrip('-')}-{next(_NAMESPACE_NUMBERS)}-{os.getpid()}"


_NAMESPACE_NUMBERS = iter(range(1, 1 << 30))


@dataclass
class KubectlStream:
    """A kubectl that keeps running (`get -w`, a waiting `delete`): its output lines are read
    in the background; `wait_for_line` waits for one that matches; `stop` ends it."""

    process: subprocess.Popen[str]
    stdout_lines: list[str] = field(default_factory=list)
    stderr_lines: list[str] = field(default_factory=list)
    _arrived: queue.Queue[tuple[str, str]] = field(default_factory=queue.Queue)
    _readers: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name, pipe, lines in (("stdout", self.process.stdout, self.stdout_lines),
                                  ("stderr", self.process.stderr, self.stderr_lines)):
            reader = threading.Thread(target=self._read, args=(name, pipe, lines),
                                      daemon=True, name=f"kubectl-{name}")
            reader.start()
            self._readers.append(reader)

    def _read(self, name: str, pipe: Any, lines: list[str]) -> None:
        for line in pipe:
            lines.append(line.rstrip("\n"))
            self._arrived.put((name, line.rstrip("\n")))
        self._arrived.put((name, ""))  # wakes a waiter at end of stream

    def wait_for_line(self, matches: Callable[[str], bool], stream: str = "stdout",
                      timeout: float = 30) -> str:
        """The first line of `stream` (from the start) that `matches`; fails the test if none
        comes within `timeout` seconds."""
        seen = 0
        deadline = time.monotonic() + timeout
        while True:
            lines = self.stdout_lines if stream == "stdout" else self.stderr_lines
            for line in lines[seen:]:
                if matches(line):
                    return line
            seen = len(lines)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                pytest.fail(f"no matching {stream} line from kubectl within {timeout}s\n"
                            f"stdout:\n" + "\n".join(self.stdout_lines) +
                            "\nstderr:\n" + "\n".join(self.stderr_lines))
            try:
                self._arrived.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                pass

    def wait(self, timeout: float = 30) -> int:
        """Wait for kubectl to exit by itself; its exit code (with all of its output read)."""
        try:
            code = self.process.wait(timeout)
            for reader in self._readers:
                reader.join(timeout)
            return code
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"kubectl did not exit within {timeout}s\nstdout:\n"
                        + "\n".join(self.stdout_lines))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> KubectlStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Kubectl:
    """kubectl as one test's user: its own HOME and cache dir, and `-n namespace` on every
    command (None: no namespace flag)."""

    cluster: ClusterAccess
    home: Path
    namespace: str | None

    def _args(self, args: Sequence[str]) -> list[str]:
        return (["-n", self.namespace] if self.namespace else []) + list(args)

    def __call__(self, *args: str, check: bool = True, input: str | None = None,
                 timeout: float = 60,
                 env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*self._args(args), check=check, input=input,
                                    timeout=timeout, home=self.home, env=env)

    def json(self, *args: str) -> Any:
        """The parsed `-o json` output of a command."""
        return json.loads(self(*args, "-o", "json").stdout)

    def stream(self, *args: str, env: Mapping[str, str] | None = None) -> KubectlStream:
        argv, full_env = self.cluster.kubectl_command(self._args(args), self.home, env)
        process = subprocess.Popen(argv, env=full_env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        return KubectlStream(process)


@dataclass
class IdentityView(ClusterAccess):
    """A cluster as seen through another identity's kubeconfig: kubectl and the cluster's
    files, but no process to stop."""

    identity_kubeconfig: Path

    @property
    def kubeconfig(self) -> Path:
        return self.identity_kubeconfig


def as_identity(k: Kubectl, user: str, tmp_path: Path, groups: Sequence[str] = ()
                ) -> Kubectl:
    """kubectl in `k`'s namespace as `user` in `groups`, with a client certificate issued
    from the cluster's CA."""
    pki = k.cluster.data_dir / "pki"
    ca = CertKey((pki / "ca.crt").read_bytes(), (pki / "ca.key").read_bytes())
    cert = issue_client_cert(ca, user, tuple(groups))
    home = tmp_path / f"home-{user.replace(':', '-')}"
    home.mkdir()
    kubeconfig = write_kubeconfig(home / "kubeconfig", k.cluster.server, ca.cert_pem,
                                  cert.cert_pem, cert.key_pem, user=user)
    return Kubectl(IdentityView(k.cluster.data_dir, home, kubeconfig), home, k.namespace)


@pytest.fixture
def kubectl(shared_cluster: Cluster, tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[Kubectl]:
    """kubectl for this test on the module's cluster, in a fresh namespace of its own."""
    namespace = namespace_for(request.node.name)
    runner = Kubectl(shared_cluster, tmp_path / "home", namespace)
    runner.home.mkdir()
    runner("create", "namespace", namespace)
    yield runner


# --- A cluster with a real kubelet (the kubelet, dynamic-volume and eviction suites) ---

KUBELET_WAIT = 60.0


def wait(check: Callable[[], Any], what: str, cluster: ClusterAccess | None = None,
         timeout: float = KUBELET_WAIT) -> Any:
    """Poll `check` until it returns something truthy (returned); on timeout fail the test
    with the tail of the cluster's kubelet log."""
    def kubelet_log() -> str:
        log = cluster.data_dir / "logs" / "kubelet.log" if cluster is not None else None
        tail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
        return f"kubelet log:\n{tail}"
    return until(check, what, timeout, logs=kubelet_log, interval=0.2)


def node_ready(cluster: ClusterAccess, node: str) -> bool:
    """Whether the Node `node` has condition Ready=True."""
    result = cluster.kubectl("get", "node", node, "-o", "json", check=False)
    if result.returncode != 0:
        return False
    conditions = json.loads(result.stdout)["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def mounts_under(path: Path) -> list[str]:
    """Mount points (from /proc/self/mountinfo, in mount order, a point stacked twice listed
    twice) at or under `path`."""
    real = os.path.realpath(path)
    return [m.mount_point for m in mounts.mountinfo()
            if m.mount_point == real or m.mount_point.startswith(real.rstrip("/") + "/")]


def loop_devices_under(path: Path) -> list[str]:
    """Loop devices (`/dev/loopN`) bound to a file at or under `path`."""
    real = os.path.realpath(path)
    found = []
    for name in sorted(os.listdir("/sys/block")):
        backing = loopdev.backing_file(name) if name.startswith("loop") else None
        if backing is not None and (backing == real
                                    or backing.startswith(real.rstrip("/") + "/")):
            found.append(f"/dev/{name}")
    return found


def entries(path: Path) -> list[str]:
    """The sorted names in directory `path` ([] when it does not exist)."""
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def assert_kubelet_clean(cluster: ClusterAccess, *, logs_and_runtime: bool = False) -> None:
    """Wait until the kubelet has left no mounts and no pod directories behind (and, with
    `logs_and_runtime`, no pod logs nor runtime state)."""
    kubelet_dir = cluster.data_dir / "kubelet"
    wait(lambda: not mounts_under(kubelet_dir), "no mounts left", cluster)
    wait(lambda: not entries(kubelet_dir / "pods"), "no pod directories left", cluster)
    if not logs_and_runtime:
        return
    wait(lambda: not entries(kubelet_dir / "logs" / "pods"), "no pod logs left", cluster)
    for state in (kubelet_dir / "runtime").glob("*"):
        if state.name == "cni":  # the node's network config stays; no pod's IP lease may
            leases = [p.name for p in state.glob("networks/*/*")
                      if p.name != "lock" and not p.name.startswith("last_reserved_ip")]
            assert not leases, f"IP leases left in {state}: {leases}"
        elif state.is_dir():
            assert not entries(state), f"runtime state left in {state}: {entries(state)}"


# --- what a run left behind under a directory ----------------------------------------------

RUNTIMES = ("runc", "crun")


def _under(target: str, real: str) -> bool:
    return target == real or target.startswith(real.rstrip("/") + "/")


def _runtime_state_dirs(real: str) -> list[Path]:
    """The OCI runtimes' state dirs (`runc-state`, `crun-probe-state`, ...) under `real`, not
    looking inside mount points (container root filesystems, pod images)."""
    mounted = set(mounts_under(Path(real)))
    found = []
    for top, dirs, _ in os.walk(real):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in mounted]
        found += [Path(top, d) for d in dirs
                  if d.endswith("-state") and d.split("-", 1)[0] in RUNTIMES]
    return found


def _processes_using(real: str) -> list[tuple[int, str]]:
    """(pid, command name) of the processes, other than this one, whose command line names
    `real`, or whose working directory or an open file is under it."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        proc = Path("/proc", entry)
        try:
            cmdline = os.fsdecode(proc.joinpath("cmdline").read_bytes())
            targets = [os.readlink(proc / "cwd")] + [
                os.readlink(proc / "fd" / fd) for fd in os.listdir(proc / "fd")]
            name = proc.joinpath("comm").read_text().strip()
        except OSError:
            continue  # gone meanwhile, or a kernel thread
        if real in cmdline or any(_under(t, real) for t in targets):
            found.append((int(entry), name))
    return found


def release_leftovers(path: Path) -> list[str]:
    """Stop, unmount and detach what is left under `path`: the containers of runtime state
    dirs there (`runc --root DIR delete --force`), the processes using it (SIGKILL), its mounts,
    the node address interfaces of kubelet roots there and the loop devices bound to files
    there. What was found, one line each ([] when nothing
    was)."""
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        return []
    found: list[str] = []
    for state in _runtime_state_dirs(real):
        kind = state.name.split("-", 1)[0]
        for container_id in entries(state):
            found.append(f"{kind} container {container_id} ({state})")
            subprocess.run([kind, "--root", str(state), "delete", "--force", container_id],
                           capture_output=True, timeout=60, check=False)
    for pid, name in _processes_using(real):
        found.append(f"process {pid} ({name})")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    found += [f"mount {point}" for point in mounts_under(path)]
    try:
        mounts.unmount_all_under(path)
    except OSError as err:
        found.append(f"could not unmount: {err}")
    for name in os.listdir("/sys/class/net"):  # node address interfaces of roots under it
        alias = Path(f"/sys/class/net/{name}/ifalias")
        if name.startswith(nodeaddress.PREFIX) and alias.exists() and \
                alias.read_text().strip().startswith(real + os.sep):
            found.append(f"interface {name}")
            subprocess.run(["ip", "link", "delete", name], capture_output=True, timeout=30,
                           check=False)
    for device in loop_devices_under(path):  # autoclear ones went with their mounts
        found.append(f"loop device {device} ({loopdev.backing_file(device)})")
        try:
            loopdev.detach(device)
        except OSError as err:
            found.append(f"could not detach {device}: {err}")
    return found


def run_kubelet_cluster(tmp_path_factory: pytest.TempPathFactory, basename: str, node: str,
                        extra_args: Sequence[str] = (),
                        after_delete: Callable[[Cluster], None] | None = None,
                        *, service_proxy: bool = False) -> Iterator[Cluster]:
    """Body of a module fixture: `ephemera up --node-name NODE EXTRA_ARGS`, yielded once the
    node is Ready; afterwards every pod is deleted, `after_delete(cluster)` runs (leftover
    checks) and the cluster must exit 0. Whatever is still left under its directory then
    (containers, mounts such as the pods' loop-mounted images, loop devices: a failed test's,
    or a leak) is released and reported as a warning (in pytest's warnings summary)."""
    base = tmp_path_factory.mktemp(basename)
    running = start_cluster(base / "data", base / "home", ["--node-name", node, *extra_args],
                            service_proxy=service_proxy)
    try:
        wait(lambda: node_ready(running, node), "the node to be Ready", running)
        yield running
        running.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=1",
                        "--wait=true", timeout=120)
        if after_delete is not None:
            after_delete(running)
    finally:
        code = running.stop()
        left = release_leftovers(base)
        if left:
            warnings.warn(f"{basename}: left behind after ephemera up stopped (released "
                          f"now): {'; '.join(left)}", stacklevel=1)
        assert code == 0, f"ephemera up exited {code}\n{running.output}"


def namespaced_kubectl(cluster: Cluster, tmp_path: Path,
                       request: pytest.FixtureRequest) -> Iterator[Kubectl]:
    """Body of a test fixture: kubectl in a fresh namespace of the test's own on `cluster`;
    the test's pods are deleted afterwards."""
    namespace = namespace_for(request.node.name)
    runner = Kubectl(cluster, tmp_path / "home", namespace)
    runner.home.mkdir()
    runner("create", "namespace", namespace)
    yield runner
    runner("delete", "pods", "--all", "--grace-period=1", "--wait=true", timeout=120)


def kubelet_cluster_fixtures(name: str, basename: str, node: str,
                             extra_args: Sequence[str] = (),
                             after_delete: Callable[[Cluster], None] | None = None,
                             *, service_proxy: bool = False) -> tuple[Any, Any]:
    """The two fixtures of an e2e module on one cluster: `name` (module scope,
    `run_kubelet_cluster(basename, node, ...)`) and `k` (kubectl in a namespace of the test's
    own on it, `namespaced_kubectl`). Bind both at module level:
    `my_cluster, k = kubelet_cluster_fixtures("my_cluster", ...)`."""

    @pytest.fixture(scope="module", name=name)
    def cluster_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
        yield from run_kubelet_cluster(tmp_path_factory, basename, node, extra_args,
                                       after_delete, service_proxy=service_proxy)

    @pytest.fixture(name="k")
    def kubectl_fixture(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Kubectl]:
        yield from namespaced_kubectl(request.getfixturevalue(name), tmp_path, request)

    return cluster_fixture, kubectl_fixture


def pod_json(k: Kubectl, name: str) -> dict[str, Any]:
    """The Pod `name` in `k`'s namespace."""
    return dict(k.json("get", "pod", name))


def wait_pod(k: Kubectl, name: str, check: Callable[[dict[str, Any]], bool],
             what: str) -> dict[str, Any]:
    """Wait until `check(pod)` holds for the Pod `name`; the pod then."""
    result: dict[str, Any] = wait(lambda: (lambda p: p if check(p) else None)(
        pod_json(k, name)), f"pod {name}: {what}", k.cluster)
    return result


def cni_leases(cluster: ClusterAccess) -> list[str]:
    """The pod addresses the node's host-local IPAM holds (one file per lease)."""
    directory = cluster.data_dir / "kubelet" / "runtime" / "cni" / "networks" / "ephemera"
    if not directory.exists():
        return []
    return sorted(p.name for p in directory.iterdir()
                  if p.name != "lock" and not p.name.startswith("last_reserved_ip"))


def veths_on(bridge: str) -> list[str]:
    """The interfaces (the pods' veths) attached to `bridge`."""
    out = subprocess.run(["ip", "-o", "link", "show", "master", bridge],
                         capture_output=True, text=True).stdout
    return [line.split(":")[1].strip() for line in out.splitlines() if line.strip()]


def container(p: dict[str, Any], name: str = "c") -> dict[str, Any]:
    """The status of container `name` in Pod `p` ({} when not reported)."""
    for s in p.get("status", {}).get("containerStatuses") or []:
        if s["name"] == name:
            return dict(s)
    return {}


# --- KEP-6395 dynamic volumes on a real kubelet ---------------------------------------------


def volume_phases(p: dict[str, Any]) -> dict[str, str]:
    """`status.volumeStatuses` of Pod `p` as volume name -> hostPhase."""
    return {e["name"]: e["hostPhase"] for e in p.get("status", {}).get("volumeStatuses") or []}


def running(p: dict[str, Any], name: str = "c") -> bool:
    """Container `name` of Pod `p` is running."""
    return "running" in container(p, name).get("state", {})


def mounted_names(p: dict[str, Any], name: str = "c") -> set[str]:
    """The volumes container `name` reports mounted (`containerStatuses[*].volumeMounts`)."""
    return {m["name"] for m in container(p, name).get("volumeMounts") or []}


def patch_dynamic(k: Kubectl, pod: str, ops: list[dict[str, Any]],
                  check: bool = True) -> subprocess.CompletedProcess[str]:
    """`kubectl patch pod POD --subresource=dynamic --type=json -p OPS`."""
    return k("patch", "pod", pod, "--subresource=dynamic", "--type=json",
             "-p", json.dumps(ops), check=check)


def allocated_spec(k: Kubectl, pod: str) -> dict[str, Any]:
    """The spec the node has allocated for Pod `pod` (`pods/POD/allocated`)."""
    raw = k("get", "--raw", f"/api/v1/namespaces/{k.namespace}/pods/{pod}/allocated").stdout
    return dict(json.loads(raw)["spec"])


def exec_in(k: Kubectl, pod: str, container_name: str, script: str) -> str:
    """Run `sh -c SCRIPT` in a container with the real `kubectl exec`; its stdout."""
    return k("exec", pod, "-c", container_name, "--", "sh", "-c", script).stdout


LOOP = "trap 'exit 0' TERM; while true; do sleep 0.2; done"  # runs until SIGTERM, exits 0
RESTART_CONTAINER = {"restartPolicy": "RestartContainer"}  # a container's dynamicVolumePolicy
HOLD_GRACE = 600  # terminationGracePeriodSeconds of a pod whose container holds on


def holds_on_after_term(sentinel: str) -> str:
    """A container script that runs until SIGTERM, then holds on (within the pod's grace
    period: HOLD_GRACE) until the file `sentinel` exists, and exits 0. The test creates the
    file once it has seen what happens while the container stops."""
    return (f"trap 'until [ -e {sentinel} ]; do sleep 0.2; done; exit 0' TERM; "
            "while true; do sleep 0.2; done")


def volume_dir(cluster: ClusterAccess, uid: str, plugin: str, name: str) -> Path:
    """The host directory of volume `name` of pod `uid` (`plugin` as in `empty-dir`)."""
    return (cluster.data_dir / "kubelet" / "pods" / uid / "volumes" / f"kubernetes.io~{plugin}"
            / name)


def _dead(pid: int) -> bool:
    """Process `pid` is gone, or a zombie: it does nothing any more."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def kill_kubelet(cluster: ClusterAccess, while_down: Callable[[], Any] | None = None) -> Any:
    """SIGKILL the kubelet child of `ephemera up`; once it is dead, run `while_down` (a look
    at what the killed kubelet left: `up` starts the next one after a back-off of at least
    0.5 s); then wait until `up` has started another. What `while_down` returned."""
    old = cluster.pid_of("kubelet")
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + STOP_TIMEOUT
    while not _dead(old):
        if time.monotonic() > deadline:
            pytest.fail(f"the kubelet (pid {old}) outlived SIGKILL for {STOP_TIMEOUT}s")
        time.sleep(0.001)
    seen = while_down() if while_down is not None else None

    def replaced() -> bool:
        try:
            return cluster.pid_of("kubelet") != old
        except (OSError, ValueError):
            return False

    wait(replaced, "a new kubelet", cluster)

    def serving() -> bool:  # `up` gives the new kubelet the old one's port
        port = read_ports(cluster.data_dir).get("kubelet")
        if not port:
            return False
        try:  # on the node address `up` made (the Node's InternalIP)
            address = nodeaddress.current_address(cluster.data_dir / "kubelet") or "127.0.0.1"
            socket.create_connection((address, port), timeout=1).close()
        except OSError:
            return False
        return True

    wait(serving, "the new kubelet serving", cluster)
    return seen


def create_running(k: Kubectl, *objects: dict[str, Any]) -> dict[str, Any]:
    """Create `objects` (the last one a Pod) and wait until every container of the pod
    runs; the pod then."""
    k("create", "-f", "-", input=yaml.safe_dump_all(objects))
    pod = objects[-1]
    names = [c["name"] for c in pod["spec"]["containers"]]
    return wait_pod(k, pod["metadata"]["name"], lambda p: all(running(p, n) for n in names),
                    "all containers running")


# --- benchmarks, run as a user runs them ---------------------------------------------------

BENCH_STOP_TIMEOUT = 30.0


@dataclass
class BenchRun:
    """A finished benchmark run: its exit code and output, and what it left under its work
    dir (released since; [] when nothing)."""

    returncode: int
    stdout: str
    stderr: str
    left_behind: list[str]


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to process group `pgid`; False when the group has no process left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _end_process_group(pgid: int) -> None:
    """SIGTERM what is left of process group `pgid`, give it BENCH_STOP_TIMEOUT seconds to
    go, then SIGKILL it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + BENCH_STOP_TIMEOUT
        if not _signal_group(pgid, sig):
            return
        while time.monotonic() < deadline:
            if not _signal_group(pgid, 0):
                return
            time.sleep(0.1)


def run_bench(module: str, args: Sequence[str], work_dir: Path, timeout: float) -> BenchRun:
    """Run `python -m MODULE ARGS` from the repository root in a session of its own. On
    `timeout` its process group (the benchmark, its `ephemera up`, etcd, ...) gets SIGTERM,
    then SIGKILL, and the test fails. Whatever the end, what remains of the group is ended and
    what is left under `work_dir` (containers, processes, mounts, loop devices) is released
    and listed in `left_behind`."""
    process = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO_ROOT,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    timed_out = False
    try:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal_group(process.pid, signal.SIGTERM)
            try:
                stdout, stderr = process.communicate(timeout=BENCH_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                stdout, stderr = process.communicate()
    finally:
        if process.poll() is None:  # interrupted: no output to keep
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
        _end_process_group(process.pid)
        left = release_leftovers(work_dir)
    if timed_out:
        pytest.fail(f"{module} did not finish within {timeout}s; left behind (released): "
                    f"{left}\nstdout:\n{stdout}\nstderr:\n{stderr}")
    return BenchRun(process.returncode, stdout, stderr, left)

"""The CRI-shaped runtime interface the kubelet drives: pod sandboxes, containers, exec.

Plain data in, plain data out (dataclasses below), so the kubelet never knows whether runc,
crun or the fake backend is behind it. The kubelet resolves everything image- and
pod-specific before calling: the final argv (image entrypoint/cmd merged with the pod's
command/args), the environment, the working directory, the image's unpacked layer
directories (overlay lower dirs, top layer first) and the host paths of mounts. The runtime
owns the per-instance writable layer (overlay upper/work dirs under
`<root>/pods/<uid>/containers/<name>/<attempt>/`), the log file it is told to write (CRI
log format), and its own state under its root, keyed so that two kubelets never see each
other's containers.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class RuntimeError_(Exception):
    """A runtime operation failed; the message names the sandbox or container and the cause."""


class NotFoundError(RuntimeError_):
    """No sandbox or container with that id (in this runtime's root)."""


class ExecTimeoutError(RuntimeError_):
    """exec_sync ran longer than its timeout; the process was killed."""


class LiveMountError(RuntimeError_):
    """A live mount or unmount failed; `errno` is the cause (0 when it is not a syscall's).
    The container keeps running and nothing was mounted."""

    def __init__(self, message: str, err: int = 0) -> None:
        super().__init__(message)
        self.errno = err


class ContainerState(StrEnum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    EXITED = "EXITED"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = False
    sub_path: str = ""  # already resolved into host_path by the kubelet; kept for status
    volume_name: str = ""  # the pod volume this mount comes from (for status and in-use checks)
    propagation: str = ""  # "" (private), "rslave" (HostToContainer), "rshared" (Bidirectional)


def mounts_after_live_changes(mounts: Sequence[Mount], unmount: Sequence[str],
                              mount: Sequence[Mount],
                              errors: Sequence[LiveMountError | None]) -> tuple[Mount, ...]:
    """A container's mounts after `change_live(id, unmount, mount)` answered `errors` (the
    runtime's record of them): each change done replaces what was mounted at its path (a
    removal leaves nothing there; an addition comes last); a failed one changes nothing."""
    result = list(mounts)
    changes = [(path, None) for path in unmount] + [(m.container_path, m) for m in mount]
    for (path, added), error in zip(changes, errors, strict=True):
        if error is not None:
            continue
        target = path.rstrip("/") or "/"
        result = [m for m in result if (m.container_path.rstrip("/") or "/") != target]
        if added is not None:
            result.append(added)
    return tuple(result)


@dataclass(frozen=True)
class DnsConfig:
    """The sandbox's resolver configuration (the CRI's `DNSConfig`), written as its
    /etc/resolv.conf."""

    servers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def resolv_conf(self) -> str:
        """The file, as containerd writes it (`parseDNSOptions`): search, nameservers,
        options."""
        text = f"search {' '.join(self.searches)}\n" if self.searches else ""
        text += "".join(f"nameserver {s}\n" for s in self.servers)
        return text + (f"options {' '.join(self.options)}\n" if self.options else "")


@dataclass(frozen=True)
class SandboxConfig:
    pod_uid: str
    namespace: str
    name: str
    hostname: str
    host_network: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    dns: DnsConfig | None = None  # None: the host's /etc/resolv.conf as it is
    # `<subdomain>.<namespace>.svc.<cluster domain>` with a subdomain: the pod's /etc/hosts
    # names it `<hostname>.<that>` (upstream's GeneratePodHostNameAndDomain).
    hostname_domain: str = ""


@dataclass(frozen=True)
class SandboxStatus:
    id: str
    pod_uid: str
    namespace: str
    name: str
    ready: bool  # False once stopped
    ip: str  # the pod IP (from CNI, or the host IP with hostNetwork; "" if none)
    created_at: float  # unix seconds


@dataclass(frozen=True)
class ContainerConfig:
    name: str
    attempt: int  # restart count of this container in the pod
    image: str  # the image reference as the pod spec names it
    image_id: str  # resolved digest, e.g. sha256:...
    rootfs_layers: tuple[Path, ...]  # unpacked layer dirs, top layer first (overlay lowerdir)
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    working_dir: str = "/"
    mounts: tuple[Mount, ...] = ()
    log_path: Path | None = None  # CRI-format log file the container's stdout/stderr go to
    tty: bool = False
    stdin: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    stdin_once: bool = False  # close the container's stdin when the first attach ends
    memory_limit_bytes: int = 0  # 0: no limit (the node cgroup's)
    uid: int = 0  # the process user, resolved by the kubelet (securityContext / image user)
    gid: int = 0
    supplemental_groups: tuple[int, ...] = ()
    # securityContext.readOnlyRootFilesystem: the root is read-only (OCI `root.readonly`); the
    # mounts (volumes, /dev, /proc, /sys, /etc/hosts...) keep their own flags.
    read_only_root: bool = False


@dataclass(frozen=True)
class ContainerStatus:
    id: str
    sandbox_id: str
    name: str
    attempt: int
    image: str
    image_id: str
    state: ContainerState
    created_at: float
    started_at: float = 0.0
    finished_at: float = 0.0
    exit_code: int = 0
    reason: str = ""  # "Completed", "Error", "OOMKilled", ...
    message: str = ""
    mounts: tuple[Mount, ...] = ()
    log_path: Path | None = None
    pid: int = 0
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryUsage:
    """A cgroup's memory (cAdvisor's reading): `working_set_bytes` is the usage minus the
    inactive file pages, what the eviction manager compares."""

    usage_bytes: int
    working_set_bytes: int
    rss_bytes: int = 0


@dataclass(frozen=True)
class PodMemory:
    pod: MemoryUsage | None  # the pod's cgroup (all its containers)
    containers: dict[str, MemoryUsage] = field(default_factory=dict)  # by name: the latest
    # running instance


@dataclass(frozen=True)
class MemorySnapshot:
    """The machine's and this runtime's pods' memory, read at `time` (unix seconds)."""

    time: float
    node: MemoryUsage | None  # the machine: its root memory cgroup
    pods: MemoryUsage | None  # the node's pods cgroup: every pod of this runtime
    by_pod: dict[str, PodMemory] = field(default_factory=dict)  # by pod UID


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


async def _no_op() -> None:
    return None


@dataclass
class ExecSession:
    """A running exec (or attach): write stdin, read stdout/stderr, wait for the exit code,
    resize the tty. Backends fill the callables.

    - `stdout` yields output chunks until the stream ends (with a tty, stdout carries the
      terminal's output and `stderr` is None).
    - `write_stdin(data)` sends input; `write_stdin(b"")` closes stdin (EOF). Without stdin
      it does nothing.
    - `resize(cols, rows)` sets the terminal size (no-op without a tty).
    - `wait()` returns the exit code of the exec'd process (for attach: of the container).
    - `close()` ends the session: kills an exec'd process that is still running, detaches
      from an attached container (which keeps running). Idempotent.
    """

    stdout: AsyncIterator[bytes]
    stderr: AsyncIterator[bytes] | None
    write_stdin: Callable[[bytes], Awaitable[None]]
    resize: Callable[[int, int], Awaitable[None]]
    wait: Callable[[], Awaitable[int]]
    close: Callable[[], Awaitable[None]] = _no_op


class RuntimeService(abc.ABC):
    """One runtime per kubelet, rooted at its own state directory."""

    name: str  # "runc", "crun" or "fake"

    @abc.abstractmethod
    async def run_pod_sandbox(self, config: SandboxConfig) -> str:
        """Create the pod's shared namespaces (network with loopback, or the host's; IPC;
        UTS) and return the sandbox id. Idempotent per pod UID."""

    @abc.abstractmethod
    async def stop_pod_sandbox(self, sandbox_id: str) -> None: ...

    @abc.abstractmethod
    async def remove_pod_sandbox(self, sandbox_id: str) -> None: ...

    @abc.abstractmethod
    async def list_pod_sandboxes(self) -> list[SandboxStatus]: ...

    async def pod_sandbox_status(self, sandbox_id: str) -> SandboxStatus | None:
        """One sandbox's status (CRI's `PodSandboxStatus`), None when it is gone; a runtime
        may answer it without looking at the other sandboxes."""
        for sandbox in await self.list_pod_sandboxes():
            if sandbox.id == sandbox_id:
                return sandbox
        return None

    async def pod_sandbox_and_containers(
            self, sandbox_id: str) -> tuple[SandboxStatus | None, list[ContainerStatus]]:
        """`pod_sandbox_status` and `list_containers` of one sandbox, read together (what a
        pod worker reads before and after a sync's actions); a runtime may read both in one
        go."""
        return await self.pod_sandbox_status(sandbox_id), await self.list_containers(sandbox_id)

    async def update_runtime_config(self, pod_cidr: str) -> None:
        """The CRI's UpdateRuntimeConfig: the node's `spec.podCIDR`, from which pod
        sandboxes take their addresses (sandboxes made before it get loopback only, no
        IP). A runtime without a pod network ignores it."""
        return None

    async def remove_pod_network(self) -> None:
        """The node is shutting down and its sandboxes are gone: remove what the pod
        network keeps on the host (the bridge). A runtime without one ignores it."""
        return None

    @abc.abstractmethod
    async def create_container(
        self, sandbox_id: str, config: ContainerConfig, sandbox: SandboxConfig
    ) -> str:
        """Prepare the bundle (overlay rootfs, mounts, namespaces joined with the sandbox)
        and return the container id. Does not start it."""

    @abc.abstractmethod
    async def start_container(self, container_id: str) -> None: ...

    @abc.abstractmethod
    async def stop_container(self, container_id: str, timeout: float) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds; returns when it has exited."""

    @abc.abstractmethod
    async def remove_container(self, container_id: str) -> None:
        """Delete runtime state, the bundle and the writable layer (keeps the log file)."""

    @abc.abstractmethod
    async def container_status(self, container_id: str) -> ContainerStatus: ...

    @abc.abstractmethod
    async def list_containers(self, sandbox_id: str = "") -> list[ContainerStatus]: ...

    @abc.abstractmethod
    async def exec_sync(
        self, container_id: str, argv: list[str], timeout: float = 0
    ) -> ExecResult:
        """Run argv in the container (its env, cwd and user) and collect the output;
        `timeout` 0 means none, otherwise ExecTimeoutError after it."""

    @abc.abstractmethod
    async def exec(
        self, container_id: str, argv: list[str], *, tty: bool, stdin: bool
    ) -> ExecSession: ...

    async def pod_network_namespace(self, sandbox_id: str) -> str:
        """The path of the sandbox's network namespace, for probes that reach the pod's
        ports ("": the host's, as for a hostNetwork pod or a runtime without namespaces)."""
        return ""

    async def attach(self, container_id: str) -> ExecSession:
        """Stream a running container's stdout/stderr (and write its stdin if it was created
        with `stdin`); `wait()` returns the container's exit code."""
        raise RuntimeError_(f"{self.name}: attach is not supported")

    async def memory_stats(self) -> MemorySnapshot | None:
        """The memory of the pods and their running containers (CRI's container and pod
        sandbox stats, plus the node's pods cgroup); None when the runtime measures none."""
        return None

    async def process_counts(self) -> dict[str, int] | None:
        """The tasks (processes and threads) in each pod, by pod UID (CRI's pod sandbox
        process stats); None when the runtime counts none."""
        return None

    async def mount_live(self, container_id: str, mount: Mount) -> None:
        """Attach `mount` to the running container without restarting it (KEP-6395's live
        hot-plug; `livemount.py` has the sequence). Idempotent: a mount of the same host path
        already at that path is only recorded. Afterwards `container_status().mounts` lists
        it. Raises LiveMountError naming the container, path and cause; the
        container keeps running and nothing is mounted."""
        raise RuntimeError_(f"{self.name}: live mounts are not supported")

    async def unmount_live(self, container_id: str, container_path: str) -> None:
        """Detach whatever is mounted at `container_path` in the running container (lazily)
        and drop it from `container_status().mounts`; idempotent."""
        raise RuntimeError_(f"{self.name}: live mounts are not supported")

    async def change_live(self, container_id: str, unmount: Sequence[str],
                          mount: Sequence[Mount]) -> list[LiveMountError | None]:
        """`unmount_live` of each path, then `mount_live` of each mount, in one go where the
        backend can; each one's error (None: done), in that order. A mount at a path whose
        unmount failed is not made (it would stack on the old one)."""
        errors: list[LiveMountError | None] = []
        stuck: dict[str, LiveMountError] = {}
        for path in unmount:
            try:
                await self.unmount_live(container_id, path)
                errors.append(None)
            except LiveMountError as err:
                errors.append(err)
                stuck[path.rstrip("/") or "/"] = err
        for m in mount:
            try:
                if (m.container_path.rstrip("/") or "/") in stuck:
                    raise stuck[m.container_path.rstrip("/") or "/"]
                await self.mount_live(container_id, m)
                errors.append(None)
            except LiveMountError as err:
                errors.append(err)
        return errors

    async def version(self) -> str:
        """The runtime's name and version for Node.status.nodeInfo.containerRuntimeVersion,
        e.g. "runc://1.1.5"."""
        return f"{self.name}://0.0.0"

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (not the containers: they outlive the kubelet)."""

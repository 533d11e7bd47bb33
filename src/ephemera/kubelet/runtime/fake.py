"""The fake runtime: the RuntimeService interface with no processes, namespaces or mounts,
for fast kubelet tests and for simulating many nodes.

Containers "run" from start until stopped. The argv chooses other behaviour:
- `["exit", "N"]`: exits with code N right after start (`Completed` for 0, else `Error`).
- `["sleep", "S"]`: runs S seconds (wall clock, evaluated lazily), then exits 0.
- `["oom"]`: exits 137 right after start with reason `OOMKilled`.
- `["fail-start", "message..."]`: start fails (RuntimeError_; state EXITED, exit code 128,
  reason `StartError`), as a missing executable does with a real runtime.
- `["ignore-term", ...]`: stopping takes the whole grace period (then "SIGKILL": 137).
- `["use-memory", "QUANTITY"]` (e.g. `300Mi`): runs until stopped with that working set
  (`memory_stats`; every other running container uses none, nor does the machine besides
  the pods). Each running container is one task (`process_counts`).
- anything else: runs until stopped; stop gives 143 (SIGTERM) or 137 with timeout 0.
`behaviour` (a callable `argv -> tuple | None`) given to the constructor overrides this.

exec_sync / exec: `["echo", ...]` prints its arguments, `["exit", "N"]` returns N, `["cat"]`
(exec with stdin) echoes its input, `["env"]` prints the container's environment,
`["fail", "message..."]` prints the message and returns 1, `["hang"]` never ends (exec_sync
with a timeout raises ExecTimeoutError); anything else exits 0 silently. `exec_handler`
(`(container name, argv) -> (exit code, output) | None`), when set, answers first, so tests
can change what a probe command returns while the container runs. Every call is appended to
`calls` for tests to inspect.

Live mounts (`mount_live`, `unmount_live`): the container must be running;
`live_mount_errors` makes a path fail with an errno. A read-only root
(`ContainerConfig.read_only_root`) is modelled as the real runtimes have it: a live mount
succeeds at a directory that exists (one of `IMAGE_DIRS`, the directories every fake image
has, or a mount target and its parents, which the runtime made before the root went
read-only) or below a writable mount; anywhere else the directory cannot be made (EROFS).

State is kept in memory and, unless `persist=False`, in `<root>/runtime/fake-state.json`,
so a new FakeRuntime on the same root "adopts" the containers of the previous one. Logs are
written in the CRI format for `echo`-style containers: argv `["echo", ...]` writes one
stdout line to the log file on start, then exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import heapq
import ipaddress
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from ephemera.api.goformat import go_quote
from ephemera.kubelet.runtime.base import (
    ContainerConfig,
    ContainerState,
    ContainerStatus,
    ExecResult,
    ExecSession,
    ExecTimeoutError,
    LiveMountError,
    MemorySnapshot,
    MemoryUsage,
    Mount,
    NotFoundError,
    PodMemory,
    RuntimeError_,
    RuntimeService,
    SandboxConfig,
    SandboxStatus,
)
from ephemera.kubelet.runtime.livemount import go_strerror

# The directories every fake image has, those of the busybox base image (images/base.py; a
# test keeps the two in step): a read-only root has these.
IMAGE_DIRS = frozenset({"/bin", "/dev", "/etc", "/home", "/proc", "/root", "/sys", "/tmp",
                        "/usr", "/var"})

# behaviour(argv) -> None (run until stopped) or ("exit", code, reason) or ("fail", message)
Behaviour = Callable[[tuple[str, ...]], tuple[Any, ...] | None]


def _rfc3339nano(ns: int) -> str:
    secs, frac = divmod(ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    return f"{base}.{f'{frac:09d}'.rstrip('0')}Z" if frac else base + "Z"


@dataclasses.dataclass
class _Container:
    id: str
    sandbox_id: str
    name: str
    attempt: int
    image: str
    image_id: str
    argv: list[str]
    env: list[list[str]]
    log_path: str
    mounts: list[dict[str, Any]]
    labels: dict[str, str]
    created_at: float
    state: str = ContainerState.CREATED.value
    started_at: float = 0.0
    finished_at: float = 0.0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    run_until: float = 0.0  # "sleep": when it exits by itself
    read_only_root: bool = False
    # Directories made in the root besides IMAGE_DIRS (mount targets and their parents).
    dirs: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Sandbox:
    id: str
    pod_uid: str
    namespace: str
    name: str
    host_network: bool
    created_at: float
    ready: bool = True
    ip: str = ""  # from the pod CIDR (no CNI), "" without one


class FakeRuntime(RuntimeService):
    name = "fake"

    def __init__(self, root: Path | None = None, node_name: str = "fake-node", *,
                 persist: bool = True, behaviour: Behaviour | None = None) -> None:
        self.node_name = node_name
        self.behaviour = behaviour
        self.calls: list[tuple[str, ...]] = []
        self.exec_handler: Callable[[str, list[str]], tuple[int, bytes] | None] | None = None
        self.live_mount_errors: dict[str, int] = {}  # mount path -> errno (see _live_change)
        self.sandboxes: dict[str, _Sandbox] = {}
        self.containers: dict[str, _Container] = {}
        # Each container's log path as a Path, made once (a relist or a pod's listing
        # reports it every time).
        self._log_paths: dict[str, Path] = {}
        # Every change goes through `_save`, which counts it: a container's status and the
        # sandbox listing built at one count stand until the next (a relist of a settled
        # node builds nothing).
        self._generation = 0
        self._statuses: dict[str, tuple[int, ContainerStatus]] = {}
        # The `sleep` containers' exit times, soonest first, as (run_until, id); an entry
        # whose container exited or went is dropped when it comes up (`exit_due`).
        self._exits: list[tuple[float, str]] = []
        self._sandbox_listing: tuple[int, list[SandboxStatus]] | None = None
        self.pod_cidr = ""
        self.state_file = (Path(root) / "runtime" / "fake-state.json"
                           if root is not None and persist else None)
        if self.state_file is not None and self.state_file.exists():
            self.restore(json.loads(self.state_file.read_text()))

    def state(self) -> dict[str, Any]:
        """The sandboxes and containers, as JSON-ready data (`restore` takes it back)."""
        return {"sandboxes": {k: dataclasses.asdict(v) for k, v in self.sandboxes.items()},
                "containers": {k: dataclasses.asdict(v) for k, v in self.containers.items()}}

    def restore(self, data: Mapping[str, Any]) -> None:
        """Take the sandboxes and containers of `state()` (of a runtime before this one)."""
        self.sandboxes = {k: _Sandbox(**v) for k, v in data["sandboxes"].items()}
        self.containers = {k: _Container(**v) for k, v in data["containers"].items()}
        self._exits = [(c.run_until, c.id) for c in self.containers.values() if c.run_until]
        heapq.heapify(self._exits)
        self._generation += 1

    @property
    def generation(self) -> int:
        """How many changes the runtime has made: a listing taken at one count stands until
        the count moves or an exit falls due (`exit_due`)."""
        return self._generation

    def exit_due(self, now: float) -> bool:
        """Whether a running `sleep` container's time is up at `now` (wall clock): it exits
        when next read, a change that has not moved `generation` yet."""
        while self._exits:
            until, container_id = self._exits[0]
            container = self.containers.get(container_id)
            if (container is not None and container.run_until == until
                    and container.state == ContainerState.RUNNING.value):
                return until <= now
            heapq.heappop(self._exits)
        return False

    def _save(self) -> None:
        """Record a change: persisted when the runtime persists, and counted."""
        self._generation += 1
        if self.state_file is None:
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(json.dumps(self.state()))
        tmp.replace(self.state_file)

    def _container(self, container_id: str) -> _Container:
        try:
            container = self.containers[container_id]
        except KeyError:
            raise NotFoundError(f"container {go_quote(container_id)} not found") from None
        if (container.state == ContainerState.RUNNING.value and container.run_until
                and time.time() >= container.run_until):
            self._exit(container, 0, finished_at=container.run_until)
        return container

    def _exit(self, container: _Container, code: int, reason: str = "",
              finished_at: float = 0.0) -> None:
        container.state = ContainerState.EXITED.value
        container.exit_code = code
        container.reason = reason or ("Completed" if code == 0 else "Error")
        container.finished_at = finished_at or time.time()
        self._save()

    def _log(self, container: _Container, stream: str, text: str) -> None:
        if not container.log_path:
            return
        path = Path(container.log_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            for line in text.splitlines():
                f.write(f"{_rfc3339nano(time.time_ns())} {stream} F {line}\n")

    # -- sandboxes ---------------------------------------------------------------------------

    async def run_pod_sandbox(self, config: SandboxConfig) -> str:
        self.calls.append(("run_pod_sandbox", config.pod_uid))
        for sandbox in self.sandboxes.values():
            if sandbox.pod_uid == config.pod_uid and sandbox.ready:
                return sandbox.id
        sandbox_id = secrets.token_hex(32)
        self.sandboxes[sandbox_id] = _Sandbox(
            id=sandbox_id, pod_uid=config.pod_uid, namespace=config.namespace,
            name=config.name, host_network=config.host_network, created_at=time.time(),
            ip="" if config.host_network else self._free_ip())
        self._save()
        return sandbox_id

    async def update_runtime_config(self, pod_cidr: str) -> None:
        self.pod_cidr = pod_cidr

    def _free_ip(self) -> str:
        """The lowest address of the pod CIDR after its gateway (the first) that no sandbox
        holds, as host-local IPAM hands them out; "" without a pod CIDR or when it is full."""
        if not self.pod_cidr:
            return ""
        used = {s.ip for s in self.sandboxes.values() if s.ip}
        hosts = ipaddress.ip_network(self.pod_cidr).hosts()
        next(hosts, None)
        return next((str(ip) for ip in hosts if str(ip) not in used), "")

    async def stop_pod_sandbox(self, sandbox_id: str) -> None:
        self.calls.append(("stop_pod_sandbox", sandbox_id))
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is None:
            return
        for container in list(self.containers.values()):
            if container.sandbox_id == sandbox_id:
                await self.stop_container(container.id, 0)
        sandbox.ready = False
        sandbox.ip = ""  # released, as CNI DEL releases the lease
        self._save()

    async def remove_pod_sandbox(self, sandbox_id: str) -> None:
        self.calls.append(("remove_pod_sandbox", sandbox_id))
        if sandbox_id not in self.sandboxes:
            return
        await self.stop_pod_sandbox(sandbox_id)
        for container in list(self.containers.values()):
            if container.sandbox_id == sandbox_id:
                del self.containers[container.id]
                self._log_paths.pop(container.id, None)
                self._statuses.pop(container.id, None)
        del self.sandboxes[sandbox_id]
        self._save()

    @staticmethod
    def _sandbox_status(s: _Sandbox) -> SandboxStatus:
        return SandboxStatus(id=s.id, pod_uid=s.pod_uid, namespace=s.namespace, name=s.name,
                             ready=s.ready, ip=s.ip, created_at=s.created_at)

    async def list_pod_sandboxes(self) -> list[SandboxStatus]:
        listing = self._sandbox_listing
        if listing is None or listing[0] != self._generation:
            listing = self._sandbox_listing = (self._generation, [
                self._sandbox_status(s)
                for s in sorted(self.sandboxes.values(), key=lambda s: s.created_at)])
        return list(listing[1])

    async def pod_sandbox_status(self, sandbox_id: str) -> SandboxStatus | None:
        """By id, without listing (and sorting) every sandbox of the node."""
        found = self.sandboxes.get(sandbox_id)
        return self._sandbox_status(found) if found is not None else None

    # -- containers --------------------------------------------------------------------------

    async def create_container(
        self, sandbox_id: str, config: ContainerConfig, sandbox: SandboxConfig
    ) -> str:
        self.calls.append(("create_container", sandbox_id, config.name))
        found = self.sandboxes.get(sandbox_id)
        if found is None:
            raise NotFoundError(f"pod sandbox {go_quote(sandbox_id)} not found")
        if not found.ready:
            raise RuntimeError_(f"pod sandbox {go_quote(sandbox_id)} is not ready")
        for other in self.containers.values():
            if (other.sandbox_id == sandbox_id and other.name == config.name
                    and other.attempt == config.attempt):
                raise RuntimeError_(f"container {go_quote(config.name)} attempt {config.attempt} "
                                    f"already exists as {other.id}")
        container_id = secrets.token_hex(32)
        self.containers[container_id] = _Container(
            id=container_id, sandbox_id=sandbox_id, name=config.name, attempt=config.attempt,
            image=config.image, image_id=config.image_id, argv=list(config.argv),
            env=[list(kv) for kv in config.env],
            log_path=str(config.log_path) if config.log_path else "",
            mounts=[dataclasses.asdict(m) for m in config.mounts], labels=dict(config.labels),
            created_at=time.time(), read_only_root=config.read_only_root,
            dirs=sorted({d for m in config.mounts for d in _with_parents(m.container_path)}))
        self._save()
        return container_id

    def _decide(self, argv: tuple[str, ...]) -> tuple[Any, ...] | None:
        if self.behaviour is not None:
            return self.behaviour(argv)
        if not argv:
            return None
        if argv[0] == "exit":
            return ("exit", int(argv[1]) if len(argv) > 1 else 0, "")
        if argv[0] == "oom":
            return ("exit", 137, "OOMKilled")
        if argv[0] == "fail-start":
            return ("fail", " ".join(argv[1:]) or "fake start failure")
        if argv[0] == "sleep":
            return ("sleep", float(argv[1]) if len(argv) > 1 else 0.0)
        if argv[0] == "echo":
            return ("echo", " ".join(argv[1:]))
        return None

    async def start_container(self, container_id: str) -> None:
        self.calls.append(("start_container", container_id))
        container = self._container(container_id)
        if container.state != ContainerState.CREATED.value:
            raise RuntimeError_(f"container {container_id} was already started")
        decision = self._decide(tuple(container.argv))
        now = time.time()
        if decision and decision[0] == "fail":
            container.message = str(decision[1])
            self._exit(container, 128, "StartError", now)
            raise RuntimeError_(f"starting container {go_quote(container.name)}: {decision[1]}")
        container.state = ContainerState.RUNNING.value
        container.started_at = now
        if decision and decision[0] == "exit":
            self._exit(container, int(decision[1]), str(decision[2]), now)
        elif decision and decision[0] == "echo":
            self._log(container, "stdout", str(decision[1]))
            self._exit(container, 0, "", now)
        elif decision and decision[0] == "sleep":
            container.run_until = now + float(decision[1])
            heapq.heappush(self._exits, (container.run_until, container.id))
        self._save()

    async def stop_container(self, container_id: str, timeout: float) -> None:
        self.calls.append(("stop_container", container_id, str(timeout)))
        container = self._container(container_id)
        if container.state != ContainerState.RUNNING.value:
            return
        if container.argv[:1] == ["ignore-term"] and timeout > 0:
            await asyncio.sleep(timeout)
            self._exit(container, 137)
        else:
            self._exit(container, 143 if timeout > 0 else 137)

    async def remove_container(self, container_id: str) -> None:
        self.calls.append(("remove_container", container_id))
        if container_id in self.containers:
            await self.stop_container(container_id, 0)
            del self.containers[container_id]
            self._log_paths.pop(container_id, None)
            self._statuses.pop(container_id, None)
            self._save()

    async def mount_live(self, container_id: str, mount: Mount) -> None:
        self.calls.append(("mount_live", container_id, mount.container_path))
        self._live_change(self._container(container_id), "mounting", mount.container_path,
                          mount)

    async def unmount_live(self, container_id: str, container_path: str) -> None:
        self.calls.append(("unmount_live", container_id, container_path))
        self._live_change(self._container(container_id), "unmounting", container_path, None)

    def _live_change(self, container: _Container, verb: str, path: str,
                     mount: Mount | None) -> None:
        """The live mount model: the container must be running; `live_mount_errors` (mount
        path -> errno) makes a change fail as the real one would, and nothing changes."""
        target = path.rstrip("/") or "/"
        err = 0 if container.state == ContainerState.RUNNING.value else errno.ESRCH
        err = err or self.live_mount_errors.get(target, 0)
        where = None if err or mount is None else _cannot_make(container, target)
        if where is not None:
            err = errno.EROFS
        if err:
            cause = ("the container is not running" if err == errno.ESRCH
                     else go_strerror(err))
            if where is not None and where != target:
                cause = f"{where}: {cause}"
            raise LiveMountError(f"{verb} {go_quote(target)} in running container "
                                 f"{go_quote(container.name)}: {cause}", err)
        container.mounts = [m for m in container.mounts
                            if (m["container_path"].rstrip("/") or "/") != target]
        if mount is not None:
            container.mounts.append(dataclasses.asdict(mount))
            container.dirs = sorted({*container.dirs, *_with_parents(target)})
        self._save()

    def _status(self, container: _Container) -> ContainerStatus:
        cached = self._statuses.get(container.id)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        status = ContainerStatus(
            id=container.id, sandbox_id=container.sandbox_id, name=container.name,
            attempt=container.attempt, image=container.image, image_id=container.image_id,
            state=ContainerState(container.state), created_at=container.created_at,
            started_at=container.started_at, finished_at=container.finished_at,
            exit_code=container.exit_code, reason=container.reason, message=container.message,
            mounts=tuple(Mount(**m) for m in container.mounts),
            log_path=self._log_path(container), pid=0, labels=dict(container.labels))
        self._statuses[container.id] = (self._generation, status)
        return status

    def _log_path(self, container: _Container) -> Path | None:
        if not container.log_path:
            return None
        path = self._log_paths.get(container.id)
        if path is None or str(path) != container.log_path:
            path = self._log_paths[container.id] = Path(container.log_path)
        return path

    async def container_status(self, container_id: str) -> ContainerStatus:
        return self._status(self._container(container_id))

    async def list_containers(self, sandbox_id: str = "") -> list[ContainerStatus]:
        result = [self._status(self._container(c.id)) for c in list(self.containers.values())
                  if not sandbox_id or c.sandbox_id == sandbox_id]
        return sorted(result, key=lambda s: s.created_at)

    def _working_set(self, container: _Container) -> int:
        from ephemera.api.quantity import parse_quantity

        if container.argv[:1] != ["use-memory"] or len(container.argv) < 2:
            return 0
        try:
            return max(0, parse_quantity(container.argv[1]).value())
        except ValueError:
            return 0

    async def memory_stats(self) -> MemorySnapshot | None:
        """The modelled memory: each running container's `use-memory` working set, summed
        per pod and over the node; the machine uses nothing else (its working set is the
        pods')."""
        latest: dict[tuple[str, str], _Container] = {}
        for container in list(self.containers.values()):
            container = self._container(container.id)
            sandbox = self.sandboxes.get(container.sandbox_id)
            if sandbox is None or container.state != ContainerState.RUNNING.value:
                continue
            key = (sandbox.pod_uid, container.name)
            if key not in latest or latest[key].attempt < container.attempt:
                latest[key] = container
        by_pod: dict[str, PodMemory] = {}
        for uid in {s.pod_uid for s in self.sandboxes.values()}:
            containers = {name: MemoryUsage(ws, ws, ws) for (pod, name), c in latest.items()
                          if pod == uid for ws in (self._working_set(c),)}
            total = sum(u.working_set_bytes for u in containers.values())
            by_pod[uid] = PodMemory(MemoryUsage(total, total, total), containers)
        node = sum(p.pod.working_set_bytes for p in by_pod.values() if p.pod is not None)
        usage = MemoryUsage(node, node, node)
        return MemorySnapshot(time.time(), usage, usage, by_pod)

    async def process_counts(self) -> dict[str, int] | None:
        """The modelled tasks: one per running container."""
        counts = {s.pod_uid: 0 for s in self.sandboxes.values()}
        for container in list(self.containers.values()):
            container = self._container(container.id)
            sandbox = self.sandboxes.get(container.sandbox_id)
            if sandbox is not None and container.state == ContainerState.RUNNING.value:
                counts[sandbox.pod_uid] += 1
        return counts

    # -- exec --------------------------------------------------------------------------------

    def _exec_output(self, container: _Container, argv: list[str]) -> tuple[int, bytes]:
        if container.state != ContainerState.RUNNING.value:
            raise RuntimeError_(f"container {container.id} is not running")
        if self.exec_handler is not None:
            answer = self.exec_handler(container.name, argv)
            if answer is not None:
                return answer
        if argv[:1] == ["fail"]:
            return 1, (" ".join(argv[1:]) + "\n").encode()
        if argv[:1] == ["echo"]:
            return 0, (" ".join(argv[1:]) + "\n").encode()
        if argv[:1] == ["exit"]:
            return int(argv[1]) if len(argv) > 1 else 0, b""
        if argv[:1] == ["env"]:
            return 0, "".join(f"{k}={v}\n" for k, v in container.env).encode()
        return 0, b""

    async def exec_sync(
        self, container_id: str, argv: list[str], timeout: float = 0
    ) -> ExecResult:
        self.calls.append(("exec_sync", container_id, *argv))
        container = self._container(container_id)
        if argv[:1] == ["hang"] and container.state == ContainerState.RUNNING.value:
            if timeout:
                await asyncio.sleep(timeout)
                raise ExecTimeoutError(f"command {go_quote(' '.join(argv))} in container "
                                       f"{container_id} timed out after {timeout}s")
            await asyncio.Event().wait()
        code, out = self._exec_output(container, argv)
        return ExecResult(exit_code=code, stdout=out, stderr=b"")

    async def exec(
        self, container_id: str, argv: list[str], *, tty: bool, stdin: bool
    ) -> ExecSession:
        self.calls.append(("exec", container_id, *argv))
        code, out = self._exec_output(self._container(container_id), argv)
        return _fake_session(out, code, echo_stdin=argv[:1] == ["cat"] and stdin, tty=tty)

    async def attach(self, container_id: str) -> ExecSession:
        self.calls.append(("attach", container_id))
        container = self._container(container_id)
        if container.state != ContainerState.RUNNING.value:
            raise RuntimeError_(f"container {container_id} is not running")
        return _fake_session(b"", 0, echo_stdin=True, tty=False)


def _with_parents(path: str) -> list[str]:
    """`path` (normalized, absolute) and each of its parents but "/"."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:n]) for n in range(1, len(parts) + 1)]


def _cannot_make(container: _Container, target: str) -> str | None:
    """Where a live mount at `target` fails to make its directory (the first missing
    component, as the real runtime's mkdir fails there), or None: never with a writable
    root; with a read-only one, nowhere it exists or below a writable mount (the topmost
    covering mount decides)."""
    if not container.read_only_root:
        return None
    covering = [m for m in container.mounts
                if target.startswith((m["container_path"].rstrip("/") or "") + "/")]
    if covering:
        deepest = max(len(m["container_path"].rstrip("/")) for m in covering)
        top = [m for m in covering if len(m["container_path"].rstrip("/")) == deepest][-1]
        if not top["read_only"]:
            return None
    return next((d for d in _with_parents(target)
                 if d not in IMAGE_DIRS and d not in container.dirs), None)


def _fake_session(output: bytes, code: int, *, echo_stdin: bool, tty: bool) -> ExecSession:
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    if output:
        queue.put_nowait(output)
    if not echo_stdin:
        queue.put_nowait(b"")
    done: asyncio.Event = asyncio.Event()
    if not echo_stdin:
        done.set()

    async def stdout() -> AsyncIterator[bytes]:
        while True:
            data = await queue.get()
            if not data:
                return
            yield data

    async def no_stream() -> AsyncIterator[bytes]:
        return
        yield b""  # pragma: no cover - makes this an async generator

    async def write_stdin(data: bytes) -> None:
        if not echo_stdin or done.is_set():
            return
        queue.put_nowait(data)
        if not data:
            done.set()

    async def resize(cols: int, rows: int) -> None:
        return None

    async def wait() -> int:
        await done.wait()
        return code

    async def close() -> None:
        if not done.is_set():
            done.set()
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(b"")

    return ExecSession(stdout=stdout(), stderr=None if tty else no_stream(),
                       write_stdin=write_stdin, resize=resize, wait=wait, close=close)

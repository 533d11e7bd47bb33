"""The real runtime backend: runc or crun driven directly on OCI bundles.

Layout under the kubelet root `<root>` (everything keyed by this root, so two kubelets with
different roots never see each other's containers; cgroups are also named by node name and
a hash of the root, see `cgroups.py`):

- `<root>/runtime/<runc|crun>-state/`: the OCI runtime's `--root` (never /run/runc).
- `<root>/runtime/sandboxes/<id>/`: `sandbox.json`; `ns/{net,ipc,uts}`: the pod's namespaces,
  kept alive as bind-mounted nsfs files (made by util-linux `unshare --net=FILE ...`, which
  also sets the hostname and brings loopback up; no pause process); `shm/`: the pod's
  /dev/shm (tmpfs); `hostname`, `hosts`, `resolv.conf` bound into every container unless
  the kubelet mounts its own (`resolv.conf` from the sandbox config's DNS settings, else a
  copy of the host's; `hosts` upstream's managed file, `managed_hosts`, or with hostNetwork
  a copy of the host's). With hostNetwork only IPC is private: network and UTS are
  the host's.
- `<root>/runtime/containers/<id>`: a symlink to the container's instance directory
  `<root>/pods/<uid>/containers/<name>/<attempt>/`, which is the bundle: `config.json`,
  `container.json` (our metadata), `upper/ work/ merged/` (the overlayfs rootfs: lowerdir =
  the image layers given in ContainerConfig), and the shim's files (`started`, `exit`, ...).
  `readOnlyRootFilesystem` (`ContainerConfig.read_only_root`) is OCI `root.readonly`, as
  containerd and CRI-O set it: the runtime creates the mount targets missing from the image
  in the overlay's upper directory, mounts, then makes the root read-only; the mounts
  (volumes, /dev, /proc, /sys, /dev/shm, /etc/hosts, hostname, resolv.conf) keep their own
  flags. A live mount into such a root works only at an existing directory (EROFS else).

A container is created (overlay mounted, config.json written) by `create_container` and
started by `start_container`, which has the per-container shim (`shim.py`; read its
docstring) forked by a small per-runtime fork server (`ShimServer`; a direct launcher is
the fallback): the shim runs `<runtime> run -d` with pipes it owns as the container's
stdio, writes the CRI log, waits for the container (it is its subreaper) and records the
exit. So status needs no kubelet-side process: it comes from the files plus /proc (the
recorded init pid and its start time; `runc state` is not consulted, a dead shim is
detected), and a new OciRuntime on the same root adopts running containers as they are.
Signals go through a pidfd of the verified init pid (race-free, no runtime exec).

exec: the container's own process spec (env, cwd, user, capabilities) with argv replaced,
via `--process`; crun runs it directly (joining the container's cgroups through a tiny `sh`
wrapper), runc through the shim's exec mode (detached + subreaper: a foreground `runc exec`
would wait for background children holding its stdout). exec_sync output goes to
anonymous files. attach talks to the shim's `attach.sock`.

crun on this hybrid cgroup host: the shim hides the cgroup2 mount from crun (a private
mount namespace for the crun process only) and crun runs with `--cgroup-manager=disabled`
in cgroups prepared by `cgroups.py`. Never a negative oomScoreAdj (root lacks
CAP_SYS_RESOURCE here).

Live mounts (`mount_live`, `unmount_live`, `change_live`; KEP-6395 hot-plug): through
`livemount` into the running container's mount namespace; `container.json`'s `mounts` is the
container's current mount list, each change written down as pending first and settled against
the container's `/proc/PID/mountinfo` by the next reader after a crash.

Exit reasons: `Completed` (0), `Error` (non-zero), `OOMKilled` (an OOM kill counted in the
container's memory cgroup), `StartError` (exit code 128, the runtime's message) as
containerd reports them.

Not done: seccomp profiles, user namespaces, CPU limits, rootless, pure cgroup v2 hosts are
untested; overlay lowerdir strings are limited to one page (about 30 long layer paths).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.goformat import go_quote
from ephemera.kubelet.helperprocess import ServedHelper, isolated_command
from ephemera.kubelet.runtime import cgroups, livemount
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
    mounts_after_live_changes,
)
from ephemera.kubelet.runtime.cni import CniError, CniNetwork, PodRef, result_ips

T = TypeVar("T")

SHIM = Path(__file__).with_name("shim.py")


def shim_command(mode: str, *options: str) -> list[str]:
    """argv running shim.py in a fresh, isolated interpreter (stdlib only)."""
    return isolated_command(SHIM, mode, *options)


DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHM_SIZE = 64 * 1024 * 1024

# Docker's and containerd's default capability set.
DEFAULT_CAPABILITIES = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
]
MASKED_PATHS = [
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
    "/sys/firmware", "/sys/devices/virtual/powercap",
]
READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]

_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str | Path, fstype: str, flags: int, data: str) -> None:
    rc = _libc.mount(source.encode(), str(target).encode(), fstype.encode(), flags,
                     data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype} on {target}: {os.strerror(err)}")


def _umount(target: str | Path) -> None:
    """Unmount if mounted (lazily when busy); missing targets are fine."""
    path = str(target).encode()
    if _libc.umount2(path, 0) == 0:
        return
    err = ctypes.get_errno()
    if err == 16:  # EBUSY
        _libc.umount2(path, _MNT_DETACH)
    elif err not in (22, 2):  # EINVAL: not a mount point; ENOENT
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below `prefix` in this process's mount table (deepest first)."""
    base = str(prefix)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == base or point.startswith(base + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def read_small(path: Path | str) -> str:
    """A small file's text in three system calls and one more at its end (`Path.read_text`
    makes nine: fstat, ioctl, lseek...). The runtime's records are read in worker threads
    on the swap's path, and each system call there lets go of the GIL, whose return can
    wait for the event loop."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def read_kv(path: Path) -> dict[str, str]:
    try:
        text = read_small(path)
    except FileNotFoundError:
        return {}
    result = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        result[key] = value
    return result


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` as JSON through a temporary file and a rename (not fsynced). Compact: an
    indented dump goes through the standard library's pure-Python encoder, about five times
    slower than its C one, and a live mount change writes its container's record twice.
    Four system calls (open, write, close, rename; `Path.write_text` makes seven), for the
    reason `read_small` gives."""
    tmp = path.with_name(path.name + ".tmp")
    body = json.dumps(data, separators=(",", ":")).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _target(mount: Mount) -> str:
    return mount.container_path.rstrip("/") or "/"


def _running_init(directory: Path) -> tuple[int | None, int]:
    """A pidfd of the running init of the container instance in `directory` (its start time
    verified) and its pid; (None, 0) when it is not running, and also when pidfds are
    unavailable (ENOSYS, EMFILE, ...)."""
    pidfd: int | None = None
    try:
        started = read_kv(directory / "started")
        if not started or (directory / "exit").exists():
            return None, 0
        pid = int(started["pid"])
        pidfd = os.pidfd_open(pid)
        if _proc_start_time(pid) == started["start_time"]:
            found, pidfd = pidfd, None
            return found, pid
        return None, 0
    except (OSError, KeyError, ValueError):
        return None, 0
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _proc_start_time(pid: int) -> str:
    """The start time of a live process ("" when it is gone or a zombie)."""
    try:
        stat = read_small(f"/proc/{pid}/stat")
    except (FileNotFoundError, ProcessLookupError):
        return ""
    fields = stat[stat.rindex(")") + 2 :].split()
    return "" if fields[0] in ("Z", "X") else fields[19]


def _is_shim(pid: int) -> bool:
    try:
        return b"import shim;" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _sort_mounts(mounts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parents before children, as containerd orders them."""
    return sorted(mounts, key=lambda m: len(Path(m["destination"]).parts))


def managed_hosts(hostname: str, domain: str, ips: list[str]) -> str:
    """The pod's /etc/hosts as upstream's kubelet writes it (`managedHostsFileContent`):
    localhost and the IPv6 names, then each pod IP with `<hostname>.<domain>` (the pod's
    `<subdomain>.<namespace>.svc.<cluster domain>`) and the hostname; without a pod IP
    (no pod network yet) the hostname on 127.0.1.1, so that it still resolves."""
    text = ("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"
            "::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
            "fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
    names = f"{hostname}.{domain}\t{hostname}" if domain else hostname
    return text + "".join(f"{ip}\t{names}\n" for ip in ips or ["127.0.1.1"])

class ShimServer(ServedHelper):
    """The kubelet side of shim.py's fork server: started on first use, one request at a
    time, restarted once if it died. `start()` returns None when the server is unusable
    (the caller then runs a launcher directly)."""

    def __init__(self, log_path: Path) -> None:
        super().__init__()
        self.log_path = log_path

    def _spawn(self) -> None:
        with open(self.log_path, "ab") as log:
            self.spawn(SHIM, output=log)

    def _stop(self) -> None:
        self.stop()

    def start(self, options: list[str]) -> bool | None:
        if any("\n" in option or "\0" in option for option in options):
            return None
        request = "\0".join(options).encode() + b"\n"
        with self.lock:
            for _ in range(2):
                if not self.running:
                    self._stop()
                    self._spawn()
                assert self.sock is not None
                try:
                    self.sock.sendall(request)
                    answer = b""
                    while not answer.endswith(b"\n"):
                        data = self.sock.recv(64)
                        if not data:
                            raise ConnectionError("the shim server closed the connection")
                        answer += data
                    return answer == b"ok\n"
                except OSError:
                    self._stop()
        return None

    def close(self) -> None:
        with self.lock:
            self._stop()


class OciRuntime(RuntimeService):
    """runc or crun on bundles under `root`; see the module docstring."""

    def __init__(self, kind: str, root: Path, node_name: str, binary: str = "") -> None:
        if kind not in ("runc", "crun"):
            raise ValueError(f"unknown OCI runtime {go_quote(kind)}")
        self.name = kind
        self.binary = binary or shutil.which(kind) or ""
        if not self.binary:
            raise RuntimeError_(f"{kind} is not installed")
        self.root = Path(root).resolve()
        self.node_name = node_name
        self.state_dir = self.root / "runtime"
        self.runtime_root = self.state_dir / f"{kind}-state"
        self.sandboxes_dir = self.state_dir / "sandboxes"
        self.containers_dir = self.state_dir / "containers"
        for directory in (self.runtime_root, self.sandboxes_dir, self.containers_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.node_parent = cgroups.node_parent_name(node_name, self.root)
        self.own_cgroups = kind == "crun"  # see cgroups.py
        self.hide_cgroup2 = kind == "crun" and cgroups.is_hybrid()
        self.unshare = shutil.which("unshare") or "/usr/bin/unshare"
        self._executor: ThreadPoolExecutor | None = None  # blocking work, off the event loop
        self._sandbox_lock = threading.Lock()  # run_pod_sandbox is idempotent per pod UID
        self._meta_lock = threading.Lock()  # container.json rewrites (live mounts)
        # container id -> its sandbox's (fixed at create): a sandbox's listing skips the
        # other pods' containers without reading their state
        self._sandbox_of: dict[str, str] = {}
        self.network = CniNetwork(self.root)
        self._shim_server = ShimServer(self.state_dir / "shim-server.log")

    # -- plumbing ------------------------------------------------------------------------------

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=16,
                                                thread_name_prefix=f"oci-{self.name}")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _runtime_argv(self, *args: str) -> list[str]:
        return [self.binary, "--root", str(self.runtime_root), *args]

    def _run_runtime(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # stdout/stderr are captured from short-lived, non-detaching commands only
        # (state/delete/list/kill); `run -d` goes through the shim with no pipes of ours.
        result = subprocess.run(self._runtime_argv(*args), stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            raise RuntimeError_(f"{self.name} {' '.join(args)}: "
                                f"{(result.stderr or result.stdout).strip()}")
        return result

    async def version(self) -> str:
        out = await self._blocking(lambda: subprocess.run(
            [self.binary, "--version"], capture_output=True, text=True, timeout=10).stdout)
        words = out.split()
        number = words[2] if len(words) > 2 else "0.0.0"
        return f"{self.name}://{number.split('+')[0]}"

    async def close(self) -> None:
        await self._blocking(self._shim_server.close)
        await self._blocking(livemount.close_helper)  # started again when next needed
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    # -- sandboxes -----------------------------------------------------------------------------

    def _sandbox_dir(self, sandbox_id: str) -> Path:
        return self.sandboxes_dir / sandbox_id

    def _sandbox_meta(self, sandbox_id: str) -> dict[str, Any]:
        try:
            meta: dict[str, Any] = json.loads(
                read_small(self._sandbox_dir(sandbox_id) / "sandbox.json"))
        except (FileNotFoundError, NotADirectoryError):
            raise NotFoundError(f"pod sandbox {go_quote(sandbox_id)} not found") from None
        return meta

    def _sandbox_metas(self) -> list[dict[str, Any]]:
        metas = []
        for entry in self.sandboxes_dir.iterdir():
            with contextlib.suppress(NotFoundError, json.JSONDecodeError):
                metas.append(self._sandbox_meta(entry.name))
        return metas

    async def run_pod_sandbox(self, config: SandboxConfig) -> str:
        return await self._blocking(self._run_pod_sandbox, config)

    def _run_pod_sandbox(self, config: SandboxConfig) -> str:
        with self._sandbox_lock:
            for existing in self._sandbox_metas():
                if existing["pod_uid"] == config.pod_uid and existing["ready"]:
                    return str(existing["id"])
            return self._create_sandbox(config)

    def _create_sandbox(self, config: SandboxConfig) -> str:
        sandbox_id = secrets.token_hex(32)
        directory = self._sandbox_dir(sandbox_id)
        ns_dir = directory / "ns"
        ns_dir.mkdir(parents=True)
        hostname = config.hostname or config.name
        namespaces = ["ipc"] if config.host_network else ["net", "ipc", "uts"]
        meta: dict[str, Any] = {
            "id": sandbox_id, "pod_uid": config.pod_uid, "namespace": config.namespace,
            "name": config.name, "hostname": hostname, "host_network": config.host_network,
            "labels": config.labels, "created_at": time.time(), "ready": False,
            "node_name": self.node_name, "namespaces": namespaces,
            "cgroup_dirs": cgroups.pod_dirs(self.node_parent, config.pod_uid),
        }
        write_json(directory / "sandbox.json", meta)
        try:
            for ns in namespaces:
                (ns_dir / ns).touch()
            args = [self.unshare, *(f"--{ns}={ns_dir / ns}" for ns in namespaces), "--"]
            if config.host_network:
                args += ["true"]
            else:
                args += ["/bin/sh", "-c", 'hostname "$1"', "sh", hostname]
            result = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True,
                                    text=True, timeout=30)
            if result.returncode != 0:
                raise RuntimeError_(f"creating the namespaces of pod sandbox for "
                                    f"{config.namespace}/{config.name}: {result.stderr.strip()}")
            if not config.host_network:
                self._setup_network(meta, directory)
            (directory / "shm").mkdir()
            _mount("shm", directory / "shm", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                   f"mode=1777,size={SHM_SIZE}")
            self._write_etc_files(directory, hostname, config, meta)
        except BaseException:
            with contextlib.suppress(CniError):
                self._teardown_network(meta, directory)
            self._teardown_sandbox_mounts(directory)
            shutil.rmtree(directory, ignore_errors=True)
            raise
        meta["ready"] = True
        write_json(directory / "sandbox.json", meta)
        return sandbox_id

    @staticmethod
    def _write_etc_files(directory: Path, hostname: str, config: SandboxConfig,
                         meta: dict[str, Any]) -> None:
        if config.host_network:
            (directory / "hostname").write_text(socket.gethostname() + "\n")
            with contextlib.suppress(OSError):
                shutil.copyfile("/etc/hosts", directory / "hosts")
        else:
            (directory / "hostname").write_text(hostname + "\n")
        if not (directory / "hosts").exists():
            ips = list((meta.get("network") or {}).get("ips") or [])
            (directory / "hosts").write_text(managed_hosts(hostname, config.hostname_domain,
                                                           ips))
        if config.dns is not None:
            (directory / "resolv.conf").write_text(config.dns.resolv_conf())
            return
        try:
            shutil.copyfile("/etc/resolv.conf", directory / "resolv.conf")
        except OSError:
            (directory / "resolv.conf").write_text("")

    @staticmethod
    def _pod_ref(meta: dict[str, Any]) -> PodRef:
        return PodRef(namespace=meta["namespace"], name=meta["name"], uid=meta["pod_uid"],
                      sandbox_id=meta["id"])

    def _setup_network(self, meta: dict[str, Any], directory: Path) -> None:
        """CNI ADD for a new sandbox (containerd's `setupPodNetwork`); the result is written
        into sandbox.json before anything else, so that a crash after it still gets its DEL."""
        netns = str(directory / "ns" / "net")
        if not self.network.pod_cidr():
            # No pod CIDR yet (a kubelet without a Node podCIDR or --pod-cidr): loopback
            # only, no pod IP, as before pods had a network.
            try:
                self.network.loopback("ADD", self._pod_ref(meta), netns)
            except CniError as err:
                raise RuntimeError_(f"failed to setup network for sandbox "
                                    f"{go_quote(meta['id'])}: {err}") from None
            return
        began = time.time()  # ADD's times stay in sandbox.json (bench/pod_start reads them)
        meta["network"] = {"pending": True, "began": began}
        write_json(directory / "sandbox.json", meta)
        try:
            result = self.network.add(self._pod_ref(meta), netns)
        except CniError as err:
            raise RuntimeError_(f"failed to setup network for sandbox "
                                f"{go_quote(meta['id'])}: {err}") from None
        meta["network"] = {"result": result, "ips": result_ips(result), "began": began,
                           "done": time.time()}
        write_json(directory / "sandbox.json", meta)

    def _teardown_network(self, meta: dict[str, Any], directory: Path) -> None:
        """CNI DEL (containerd's `teardownPodNetwork`), once; the namespace may be gone
        already (a reboot), then the plugins release the lease without it."""
        network = meta.get("network")
        if not network:
            return
        netns = directory / "ns" / "net"
        path = str(netns) if os.path.ismount(netns) else ""
        try:
            self.network.delete(self._pod_ref(meta), path, network.get("result") or {})
        except CniError as err:
            raise RuntimeError_(f"failed to destroy network for sandbox "
                                f"{go_quote(meta['id'])}: {err}") from None
        meta.pop("network", None)
        if (directory / "sandbox.json").exists():
            write_json(directory / "sandbox.json", meta)

    async def remove_pod_network(self) -> None:
        def remove() -> None:
            if any(meta.get("network") for meta in self._sandbox_metas()):
                return  # a sandbox still holds an address on the bridge
            try:
                self.network.remove_bridge()
            except CniError as err:
                raise RuntimeError_(str(err)) from None

        await self._blocking(remove)

    async def update_runtime_config(self, pod_cidr: str) -> None:
        await self._blocking(self.network.configure, pod_cidr)

    @staticmethod
    def _teardown_sandbox_mounts(directory: Path) -> None:
        for point in mounts_under(directory):
            _umount(point)

    async def stop_pod_sandbox(self, sandbox_id: str) -> None:
        try:
            meta = await self._blocking(self._sandbox_meta, sandbox_id)
        except NotFoundError:
            return
        for status in await self.list_containers(sandbox_id):
            if status.state == ContainerState.RUNNING:
                await self.stop_container(status.id, 0)
        await self._blocking(self._teardown_network, meta, self._sandbox_dir(sandbox_id))
        await self._blocking(self._teardown_sandbox_mounts, self._sandbox_dir(sandbox_id))
        if meta["ready"]:
            meta["ready"] = False
            await self._blocking(write_json, self._sandbox_dir(sandbox_id) / "sandbox.json", meta)

    async def remove_pod_sandbox(self, sandbox_id: str) -> None:
        try:
            meta = await self._blocking(self._sandbox_meta, sandbox_id)
        except NotFoundError:
            return
        await self.stop_pod_sandbox(sandbox_id)
        for status in await self.list_containers(sandbox_id):
            await self.remove_container(status.id)
        directory = self._sandbox_dir(sandbox_id)

        def remove() -> None:
            self._teardown_sandbox_mounts(directory)
            shutil.rmtree(directory, ignore_errors=True)
            others = [m for m in self._sandbox_metas() if m["pod_uid"] == meta["pod_uid"]]
            if not others:
                cgroups.remove_pod(meta.get("cgroup_dirs", []))

        await self._blocking(remove)

    async def pod_network_namespace(self, sandbox_id: str) -> str:
        try:
            meta = await self._blocking(self._sandbox_meta, sandbox_id)
        except NotFoundError:
            return ""
        if "net" not in meta["namespaces"]:
            return ""
        return str(self._sandbox_dir(sandbox_id) / "ns" / "net")

    def _checked_sandbox_metas(self, sandbox_id: str = "") -> list[dict[str, Any]]:
        """The sandboxes' records (only `sandbox_id`'s when given), `ready` false where their
        namespaces are gone (e.g. after a reboot); in a thread: the checks stat files."""
        if sandbox_id:
            try:
                metas = [self._sandbox_meta(sandbox_id)]
            except (NotFoundError, json.JSONDecodeError):
                metas = []
        else:
            metas = self._sandbox_metas()
        for meta in metas:
            if meta["ready"] and not all(
                    os.path.ismount(self._sandbox_dir(meta["id"]) / "ns" / ns)
                    for ns in meta["namespaces"]):
                meta["ready"] = False
        return metas

    @staticmethod
    def _sandbox_status(meta: dict[str, Any]) -> SandboxStatus:
        ip = ""
        # A host-network sandbox has no address of its own (the kubelet reports the node's,
        # as upstream's does for containerd's empty one).
        if not meta["host_network"] and meta["ready"] and (meta.get("network") or {}).get("ips"):
            ip = meta["network"]["ips"][0]
        return SandboxStatus(
            id=meta["id"], pod_uid=meta["pod_uid"], namespace=meta["namespace"],
            name=meta["name"], ready=meta["ready"], ip=ip, created_at=meta["created_at"])

    async def _sandbox_statuses(self, sandbox_id: str = "") -> list[SandboxStatus]:
        metas = await self._blocking(self._checked_sandbox_metas, sandbox_id)
        return sorted(map(self._sandbox_status, metas), key=lambda s: s.created_at)

    async def list_pod_sandboxes(self) -> list[SandboxStatus]:
        return await self._sandbox_statuses()

    async def pod_sandbox_status(self, sandbox_id: str) -> SandboxStatus | None:
        found = await self._sandbox_statuses(sandbox_id)
        return found[0] if found else None

    # -- containers: create --------------------------------------------------------------------

    def _instance_dir(self, container_id: str) -> Path:
        link = self.containers_dir / container_id
        try:
            return Path(os.readlink(link))
        except (FileNotFoundError, OSError):
            raise NotFoundError(f"container {go_quote(container_id)} not found") from None

    def _container_meta(self, container_id: str) -> tuple[Path, dict[str, Any]]:
        directory = self._instance_dir(container_id)
        try:
            meta: dict[str, Any] = json.loads(read_small(directory / "container.json"))
        except FileNotFoundError:
            raise NotFoundError(f"container {go_quote(container_id)} not found") from None
        return directory, meta

    async def create_container(
        self, sandbox_id: str, config: ContainerConfig, sandbox: SandboxConfig
    ) -> str:
        return await self._blocking(self._create_container, sandbox_id, config)

    def _create_container(self, sandbox_id: str, config: ContainerConfig) -> str:
        sandbox_meta = self._sandbox_meta(sandbox_id)
        if not sandbox_meta["ready"]:
            raise RuntimeError_(f"pod sandbox {go_quote(sandbox_id)} is not ready")
        if not config.rootfs_layers:
            raise RuntimeError_(f"container {go_quote(config.name)}: no image layers")
        if not config.argv:
            raise RuntimeError_(f"container {go_quote(config.name)}: no command")
        pod_uid = sandbox_meta["pod_uid"]
        directory = self.root / "pods" / pod_uid / "containers" / config.name / str(config.attempt)
        for entry in self.containers_dir.iterdir():
            with contextlib.suppress(OSError):
                if Path(os.readlink(entry)) == directory:
                    raise RuntimeError_(
                        f"container {go_quote(config.name)} attempt {config.attempt} of pod "
                        f"{pod_uid} already exists as {entry.name}")
        if directory.exists():  # debris of an interrupted create
            for point in mounts_under(directory):
                _umount(point)
            shutil.rmtree(directory)
        container_id = secrets.token_hex(32)
        for sub in ("upper", "work", "merged"):
            (directory / sub).mkdir(parents=True)
        try:
            lower = ":".join(str(layer) for layer in config.rootfs_layers)
            _mount("overlay", directory / "merged", "overlay", 0,
                   f"lowerdir={lower},upperdir={directory / 'upper'},workdir={directory / 'work'}")
            for mount_point in ("proc", "dev", "sys"):  # crun wants them in the rootfs
                with contextlib.suppress(FileExistsError):
                    (directory / "merged" / mount_point).mkdir()
            procs: list[str] = []
            if self.own_cgroups:
                procs = cgroups.prepare_container(self.node_parent, pod_uid, container_id,
                                                  config.memory_limit_bytes)
            spec = self._oci_spec(container_id, directory, config, sandbox_meta)
            write_json(directory / "config.json", spec)
            log_path = config.log_path or directory / "container.log"
            meta = {
                "id": container_id, "sandbox_id": sandbox_id, "pod_uid": pod_uid,
                "pod_namespace": sandbox_meta["namespace"], "pod_name": sandbox_meta["name"],
                "node_name": self.node_name, "name": config.name, "attempt": config.attempt,
                "image": config.image, "image_id": config.image_id, "created_at": time.time(),
                "log_path": str(log_path), "labels": config.labels, "tty": config.tty,
                "stdin": config.stdin, "stdin_once": config.stdin_once,
                "mounts": [vars(m) for m in config.mounts], "cgroup_procs": procs,
                "memory_cgroup": cgroups.container_memory_dir(self.node_parent, pod_uid,
                                                              container_id),
            }
            write_json(directory / "container.json", meta)
            os.symlink(directory, self.containers_dir / container_id)
        except BaseException:
            _umount(directory / "merged")
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return container_id

    def _oci_spec(self, container_id: str, directory: Path, config: ContainerConfig,
                  sandbox: dict[str, Any]) -> dict[str, Any]:
        sandbox_dir = self._sandbox_dir(sandbox["id"])
        env = dict(config.env)
        env.setdefault("PATH", DEFAULT_PATH)
        env.setdefault("HOSTNAME", (sandbox_dir / "hostname").read_text().strip())
        if config.tty:
            env.setdefault("TERM", "xterm")
        mounts: list[dict[str, Any]] = [
            {"destination": "/proc", "type": "proc", "source": "proc",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620",
                         "gid=5"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/dev/shm", "type": "bind", "source": str(sandbox_dir / "shm"),
             "options": ["rbind", "nosuid", "nodev", "noexec"]},
        ]
        wanted = {m.container_path.rstrip("/") or "/" for m in config.mounts}
        for name in ("hostname", "hosts", "resolv.conf"):
            if f"/etc/{name}" not in wanted:
                mounts.append({"destination": f"/etc/{name}", "type": "bind",
                               "source": str(sandbox_dir / name), "options": ["rbind", "rw"]})
        # Volumes are nosuid,nodev, as live mounts are (docs/design.md, "Volume mounts").
        mounts.extend(
            {"destination": m.container_path, "type": "bind", "source": m.host_path,
             "options": ["rbind", m.propagation or "rprivate", "ro" if m.read_only else "rw",
                         "nosuid", "nodev"]}
            for m in config.mounts)
        namespaces: list[dict[str, str]] = [{"type": "pid"}, {"type": "mount"}]
        for ns, oci_name in (("net", "network"), ("ipc", "ipc"), ("uts", "uts")):
            if ns in sandbox["namespaces"]:
                namespaces.append({"type": oci_name, "path": str(sandbox_dir / "ns" / ns)})
        linux: dict[str, Any] = {
            "namespaces": namespaces,
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
            "rootfsPropagation": "rslave",
        }
        if not self.own_cgroups:
            linux["cgroupsPath"] = (f"{cgroups.pod_relative(self.node_parent, sandbox['pod_uid'])}"
                                    f"/{container_id}")
            resources: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}]}
            if config.memory_limit_bytes > 0:
                resources["memory"] = {"limit": config.memory_limit_bytes,
                                       "swap": config.memory_limit_bytes}
            linux["resources"] = resources
        caps = DEFAULT_CAPABILITIES
        return {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": config.tty,
                "user": {"uid": config.uid, "gid": config.gid,
                         **({"additionalGids": list(config.supplemental_groups)}
                            if config.supplemental_groups else {})},
                "args": list(config.argv),
                "env": [f"{k}={v}" for k, v in env.items()],
                "cwd": config.working_dir or "/",
                "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
                "noNewPrivileges": False,
            },
            "root": {"path": str(directory / "merged"), "readonly": config.read_only_root},
            "mounts": _sort_mounts(mounts),
            "annotations": {
                "io.ephemera.node-name": self.node_name,
                "io.ephemera.pod-uid": sandbox["pod_uid"],
                "io.ephemera.pod-namespace": sandbox["namespace"],
                "io.ephemera.pod-name": sandbox["name"],
                "io.ephemera.sandbox-id": sandbox["id"],
                "io.ephemera.container-name": config.name,
                "io.ephemera.attempt": str(config.attempt),
            },
            "linux": linux,
        }

    # -- containers: start, stop, status ------------------------------------------------------

    async def start_container(self, container_id: str) -> None:
        await self._blocking(self._start_container, container_id)

    def _start_container(self, container_id: str) -> None:
        directory, meta = self._container_meta(container_id)
        if (directory / "started").exists() or (directory / "start-error").exists():
            raise RuntimeError_(f"container {container_id} was already started")
        options = [
            f"dir={directory}", f"runtime={self.binary}", f"state={self.runtime_root}",
            f"id={container_id}", f"log={meta['log_path']}",
            f"tty={int(meta['tty'])}", f"stdin={int(meta['stdin'])}",
            f"stdin-once={int(meta['stdin_once'])}", f"memory-cgroup={meta['memory_cgroup']}",
        ]
        if self.own_cgroups:
            options.append("global=--cgroup-manager=disabled")
            options += [f"cgroup={procs}" for procs in meta["cgroup_procs"]]
        if self.hide_cgroup2:
            options.append("hide-cgroup2=1")
        started = self._shim_server.start(options)
        if started is None:
            # No timeout here: with one, subprocess polls waitpid with growing sleeps (about
            # 60 ms lost per start). The launcher returns as soon as the daemon reports.
            with open(directory / "shim.log", "ab") as shim_log:
                result = subprocess.run(
                    shim_command("start", *options),
                    stdin=subprocess.DEVNULL, stdout=shim_log, stderr=shim_log,
                    start_new_session=True)
            started = result.returncode == 0
        if not started:
            message = read_kv(directory / "start-error").get("message", "")
            message = message or self._runtime_error(directory) or "the shim failed"
            write_json_kv = {"exit_code": 128, "signal": 0, "finished_at": time.time(),
                             "oom_killed": 0, "reason": "StartError"}
            (directory / "exit").write_text(
                "".join(f"{k}={v}\n" for k, v in write_json_kv.items()))
            raise RuntimeError_(f"starting container {go_quote(meta['name'])} ({container_id}): "
                                f"{message}")

    @staticmethod
    def _runtime_error(directory: Path) -> str:
        """The last error the runtime logged (its --log is JSON lines)."""
        try:
            lines = (directory / "runtime.log").read_text().splitlines()
        except FileNotFoundError:
            return ""
        for line in reversed(lines):
            with contextlib.suppress(json.JSONDecodeError):
                entry = json.loads(line)
                if entry.get("level") in ("error", "fatal"):
                    return str(entry.get("msg", ""))
        return ""

    # -- live mounts (livemount.py) -------------------------------------------------------------
    #
    # container.json's "mounts" is the container's current mount list: its config's, changed by
    # every live mount and unmount. Before the syscall the change is written down as "pending";
    # whoever reads the container next (status, another live mount) settles a pending change
    # against the container's mount table, so a kill -9 between the syscall and the record
    # leaves neither a mount nobody knows of nor a record of a mount that is not there.

    async def mount_live(self, container_id: str, mount: Mount) -> None:
        (error,) = await self.change_live(container_id, (), (mount,))
        if error is not None:
            raise error

    async def unmount_live(self, container_id: str, container_path: str) -> None:
        (error,) = await self.change_live(container_id, (container_path,), ())
        if error is not None:
            raise error

    async def change_live(self, container_id: str, unmount: Sequence[str],
                          mount: Sequence[Mount]) -> list[LiveMountError | None]:
        ops = [("unmount", Mount(container_path=path, host_path="")) for path in unmount]
        ops += [("mount", m) for m in mount]
        return await self._blocking(self._live_changes, container_id, ops)

    def _live_changes(self, container_id: str, ops: list[tuple[str, Mount]]
                      ) -> list[LiveMountError | None]:
        """The changes in order, under one pending record; each one's error or None."""
        with self._meta_lock:
            directory, meta = self._container_meta(container_id)
            pidfd, pid = _running_init(directory)  # the record and `started` read once
            if pidfd is None:
                return [LiveMountError(
                    f"{'mounting' if op == 'mount' else 'unmounting'} "
                    f"{go_quote(_target(mount))} in running container "
                    f"{go_quote(meta['name'])}: the container is not running", errno.ESRCH)
                    for op, mount in ops]
            errors: list[LiveMountError | None] = []
            try:
                meta = self._settle_pending(directory, meta, pid)
                meta["pending"] = [{"op": op, "mount": vars(mount)} for op, mount in ops]
                write_json(directory / "container.json", meta)
                # The container's mount table, read only if an addition is at a path not
                # being freed (whether it is there already, after a crash).
                table: list[livemount.MountInfo] = []
                # One request to the mount helper for the whole batch: the removals, then the
                # additions not there yet (one at a path being freed waits for that removal).
                removing: dict[str, int] = {}
                changes: list[livemount.Change] = []
                # The change of each op; None: already done; an error: failed before.
                planned: list[int | LiveMountError | None] = []
                for op, mount in ops:
                    target = _target(mount)
                    try:
                        if op == "unmount":
                            removing[target] = len(changes)
                            changes.append(livemount.Change(target))
                        elif target in removing or not livemount.is_live_mounted(
                                pid, mount.host_path, target,
                                table := table or livemount.container_mounts(pid)):
                            changes.append(livemount.Change(
                                target, mount.host_path, mount.read_only,
                                removing.get(target)))
                        else:
                            planned.append(None)
                            continue
                    except LiveMountError as err:
                        planned.append(err)
                        continue
                    planned.append(len(changes) - 1)
                results = livemount.change_in(pidfd, meta["name"], changes) if changes else []
                errors = [results[change] if isinstance(change, int) else change
                          for change in planned]
                meta["mounts"] = [vars(m) for m in mounts_after_live_changes(
                    [Mount(**m) for m in meta["mounts"]],
                    [m.container_path for op, m in ops if op == "unmount"],
                    [m for op, m in ops if op == "mount"], errors)]
            finally:
                os.close(pidfd)
                if meta.pop("pending", None) is not None:
                    write_json(directory / "container.json", meta)
            return errors

    @staticmethod
    def _settle_pending(directory: Path, meta: dict[str, Any], pid: int) -> dict[str, Any]:
        """Apply or drop live changes interrupted by a crash, as the mount table says."""
        pending = meta.pop("pending", None)
        if pending is None:
            return meta
        try:
            table = livemount.container_mounts(pid) if pid else None
            for change in pending if isinstance(pending, list) else [pending]:
                if table is None:
                    break  # the container is gone: its mounts went with it
                mount = Mount(**change["mount"])
                target = _target(mount)
                kept = [m for m in meta["mounts"] if _target(Mount(**m)) != target]
                if change["op"] == "mount":
                    if livemount.is_live_mounted(pid, mount.host_path, target, table):
                        meta["mounts"] = [*kept, vars(mount)]
                elif not any(m.mount_point == target for m in table):
                    meta["mounts"] = kept
        except (OSError, LiveMountError):
            pass  # the container is gone: its mounts went with it
        write_json(directory / "container.json", meta)
        return meta

    def _status(self, container_id: str) -> ContainerStatus:
        directory, meta = self._container_meta(container_id)
        if "pending" in meta and self._meta_lock.acquire(blocking=False):
            try:  # not while a live change holds the lock: it settles the record itself
                directory, meta = self._container_meta(container_id)
                if "pending" in meta:
                    pid = int(read_kv(directory / "started").get("pid", "0") or 0)
                    if pid and not _proc_start_time(pid):
                        pid = 0
                    meta = self._settle_pending(directory, meta, pid)
            finally:
                self._meta_lock.release()
        started = read_kv(directory / "started")
        exited = read_kv(directory / "exit")
        start_error = read_kv(directory / "start-error")
        state = ContainerState.CREATED
        exit_code, reason, message, finished_at, pid = 0, "", "", 0.0, 0
        if exited:
            state = ContainerState.EXITED
            exit_code = int(exited["exit_code"])
            finished_at = float(exited["finished_at"])
            if exited.get("reason"):
                reason = exited["reason"]
                message = start_error.get("message", "") or self._runtime_error(directory)
            elif exited.get("oom_killed") == "1":
                reason = "OOMKilled"
            else:
                reason = "Completed" if exit_code == 0 else "Error"
        elif start_error:
            state, exit_code, reason = ContainerState.EXITED, 128, "StartError"
            message = start_error.get("message", "")
        elif started:
            pid = int(started["pid"])
            if _proc_start_time(pid) == started["start_time"] or _is_shim(
                    int(started["shim_pid"])):
                state = ContainerState.RUNNING
            else:  # the shim was killed and the container is gone: the exit code is lost
                state, exit_code, reason = ContainerState.EXITED, 255, "Error"
                message = "the container exited while its shim was not running"
                finished_at = time.time()
        return ContainerStatus(
            id=container_id, sandbox_id=meta["sandbox_id"], name=meta["name"],
            attempt=meta["attempt"], image=meta["image"], image_id=meta["image_id"],
            state=state, created_at=meta["created_at"],
            started_at=float(started.get("started_at", 0.0)), finished_at=finished_at,
            exit_code=exit_code, reason=reason, message=message,
            mounts=tuple(Mount(**m) for m in meta["mounts"]), log_path=Path(meta["log_path"]),
            pid=pid if state == ContainerState.RUNNING else 0, labels=meta["labels"])

    async def container_status(self, container_id: str) -> ContainerStatus:
        return await self._blocking(self._status, container_id)

    def _containers(self, sandbox_id: str = "") -> list[ContainerStatus]:
        result = []
        for entry in self.containers_dir.iterdir():
            known = self._sandbox_of.get(entry.name)
            if sandbox_id and known is not None and known != sandbox_id:
                continue  # another pod's: its state is not read
            with contextlib.suppress(NotFoundError):
                status = self._status(entry.name)
                self._sandbox_of[entry.name] = status.sandbox_id
                if not sandbox_id or status.sandbox_id == sandbox_id:
                    result.append(status)
        return sorted(result, key=lambda s: s.created_at)

    async def list_containers(self, sandbox_id: str = "") -> list[ContainerStatus]:
        return await self._blocking(self._containers, sandbox_id)

    async def pod_sandbox_and_containers(
            self, sandbox_id: str) -> tuple[SandboxStatus | None, list[ContainerStatus]]:
        """Both in one worker thread (one hand-over to it and back, not two)."""
        def read() -> tuple[list[dict[str, Any]], list[ContainerStatus]]:
            return self._checked_sandbox_metas(sandbox_id), self._containers(sandbox_id)

        metas, containers = await self._blocking(read)
        return (self._sandbox_status(metas[0]) if metas else None), containers

    async def memory_stats(self) -> MemorySnapshot | None:
        """Read from the cgroups: the root (the machine), the node parent (every pod), each
        pod's and each running container's (the latest attempt per name)."""
        return await self._blocking(self._memory_stats)

    def _memory_stats(self) -> MemorySnapshot | None:
        node_dir = cgroups.memory_dir(self.node_parent)
        if node_dir is None:
            return None
        now = time.time()
        latest: dict[tuple[str, str], tuple[int, str]] = {}  # (pod, name) -> (attempt, dir)
        for entry in self.containers_dir.iterdir():
            with contextlib.suppress(NotFoundError, OSError, KeyError, ValueError):
                status = self._status(entry.name)
                if status.state != ContainerState.RUNNING:
                    continue
                _, meta = self._container_meta(entry.name)
                key = (str(meta["pod_uid"]), status.name)
                if key not in latest or latest[key][0] < status.attempt:
                    latest[key] = (status.attempt, str(meta["memory_cgroup"]))
        by_pod: dict[str, PodMemory] = {}
        for uid in {m["pod_uid"] for m in self._sandbox_metas()} | {k[0] for k in latest}:
            pod_dir = cgroups.memory_dir(cgroups.pod_relative(self.node_parent, uid))
            containers: dict[str, MemoryUsage] = {}
            for (pod_uid, name), (_, directory) in latest.items():
                usage = cgroups.memory_usage(directory) if pod_uid == uid and directory \
                    else None
                if usage is not None:
                    containers[name] = usage
            by_pod[uid] = PodMemory(
                None if pod_dir is None else cgroups.memory_usage(pod_dir), containers)
        return MemorySnapshot(now, cgroups.root_memory_usage(), cgroups.memory_usage(node_dir),
                              by_pod)

    async def process_counts(self) -> dict[str, int] | None:
        """Each pod's tasks: its pids cgroup's `pids.current`."""
        def count() -> dict[str, int]:
            counts: dict[str, int] = {}
            for uid in {m["pod_uid"] for m in self._sandbox_metas()}:
                tasks = cgroups.pids_current(cgroups.pod_relative(self.node_parent, uid))
                if tasks is not None:
                    counts[uid] = tasks
            return counts

        return await self._blocking(count)

    def _signal(self, container_id: str, signum: int) -> bool:
        """Signal the container's init through a pidfd of the verified pid; False if it is
        not running."""
        directory, _ = self._container_meta(container_id)
        started = read_kv(directory / "started")
        if not started or (directory / "exit").exists():
            return False
        pid = int(started["pid"])
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        try:
            if _proc_start_time(pid) != started["start_time"]:
                return False
            signal.pidfd_send_signal(pidfd, signum)
            return True
        except ProcessLookupError:
            return False
        finally:
            os.close(pidfd)

    def _init_pidfd(self, container_id: str) -> int | None:
        """A pidfd of the container's running init (its start time verified), else None:
        also when pidfds are unavailable (ENOSYS, EMFILE, ...; the caller then polls)."""
        try:
            directory, _ = self._container_meta(container_id)
        except (NotFoundError, OSError, ValueError):
            return None
        return _running_init(directory)[0]

    async def _init_exited(self, container_id: str, timeout: float) -> None:
        """Until the container's init has exited (its pidfd becomes readable: no polling),
        at most `timeout` seconds. The pidfd is opened on the event loop (a readlink and a
        few small reads of the instance dir and /proc), so a cancelled wait never leaves one
        open in an executor thread."""
        pidfd = self._init_pidfd(container_id)
        if pidfd is None:
            return
        loop = asyncio.get_running_loop()
        gone: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not gone.done():
                gone.set_result(None)

        loop.add_reader(pidfd, readable)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await gone
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)

    async def _wait_exited(self, container_id: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        # Woken by the init's exit; then only the shim's `exit` record is polled for (it
        # follows within milliseconds, once the container's streams are drained).
        await self._init_exited(container_id, timeout)
        delay = 0.001
        while True:
            status = await self._blocking(self._status, container_id)
            if status.state != ContainerState.RUNNING:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.05)

    async def stop_container(self, container_id: str, timeout: float) -> None:
        status = await self._blocking(self._status, container_id)
        if status.state != ContainerState.RUNNING:
            return
        if (timeout > 0 and await self._blocking(self._signal, container_id, signal.SIGTERM)
                and await self._wait_exited(container_id, timeout)):
            return
        await self._blocking(self._signal, container_id, signal.SIGKILL)
        if not await self._wait_exited(container_id, 30):
            raise RuntimeError_(f"container {container_id} did not exit after SIGKILL")

    async def remove_container(self, container_id: str) -> None:
        try:
            directory, meta = await self._blocking(self._container_meta, container_id)
        except NotFoundError:
            return
        await self.stop_container(container_id, 0)

        def remove() -> None:
            self._run_runtime("delete", "--force", container_id, check=False)
            if meta["cgroup_procs"]:
                cgroups.remove_dirs([str(Path(p).parent) for p in meta["cgroup_procs"]])
            for point in mounts_under(directory):
                _umount(point)
            shutil.rmtree(directory, ignore_errors=True)
            (self.containers_dir / container_id).unlink(missing_ok=True)
            self._sandbox_of.pop(container_id, None)
            for parent in (directory.parent, directory.parent.parent):
                with contextlib.suppress(OSError):
                    parent.rmdir()

        await self._blocking(remove)

    # -- exec and attach -----------------------------------------------------------------------

    def _exec_command(self, container_id: str, argv: list[str], tty: bool,
                      console_socket: str = "") -> tuple[list[str], Path]:
        """The command that runs argv in the container, and the file that will hold the
        exec'd process's pid (to kill it on timeout or close: killing the runtime process
        alone would leave it running)."""
        directory, meta = self._container_meta(container_id)
        if self._status(container_id).state != ContainerState.RUNNING:
            raise RuntimeError_(f"container {container_id} is not running")
        pid_file = directory / f"exec-{secrets.token_hex(8)}.pid"
        # The container's process (env, cwd, user, capabilities) with argv and tty replaced:
        # crun, unlike runc, does not default cwd and user to the container's.
        process = json.loads((directory / "config.json").read_text())["process"]
        process.update(args=list(argv), terminal=tty)
        process.pop("consoleSize", None)
        process_file = pid_file.with_suffix(".json")
        process_file.write_text(json.dumps(process))
        command = self._runtime_argv("exec", "--pid-file", str(pid_file), "--process",
                                     str(process_file))
        if tty:
            command += ["--tty", "--console-socket", console_socket]
        if self.name == "runc":
            # A foreground runc exec waits until nothing holds the process's stdout any more
            # (a background child can hold it forever), and takes a console socket only when
            # detached; the shim's exec mode runs it detached and waits for the process
            # itself (see shim.py). crun does neither, so it runs directly.
            command = shim_command("exec", f"pid-file={pid_file}", *(
                f"argv={a}" for a in [*command, "--detach", container_id]))
            return command, pid_file
        command.append(container_id)
        if meta["cgroup_procs"]:  # crun without a cgroup manager: join the container's cgroups
            # "0" to each v1 cgroup's `tasks` (the shell itself, one thread), not its pid to
            # `cgroup.procs`: no RCU grace period per exec (shim.join_cgroup says why).
            command = ["/bin/sh", "-c",
                       'while [ "$1" != -- ]; do echo 0 > "${1%/*}/tasks"; shift; done; shift; '
                       'exec "$@"',
                       "sh", *meta["cgroup_procs"], "--", *command]
        return command, pid_file

    async def exec_sync(
        self, container_id: str, argv: list[str], timeout: float = 0
    ) -> ExecResult:
        command, pid_file = await self._blocking(self._exec_command, container_id, argv, False)
        # Output goes to anonymous files, not pipes: a background process left behind by the
        # command must not keep us waiting.
        try:
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                process = await asyncio.create_subprocess_exec(
                    *command, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
                try:
                    async with asyncio.timeout(timeout or None):
                        code = await process.wait()
                except TimeoutError:
                    await _kill_exec(process, pid_file)
                    raise ExecTimeoutError(
                        f"command {go_quote(' '.join(argv))} in container {container_id} "
                        f"timed out after {timeout}s") from None
                out.seek(0)
                err.seek(0)
                return ExecResult(exit_code=code, stdout=out.read(), stderr=err.read())
        finally:
            _remove_exec_files(pid_file)

    async def exec(
        self, container_id: str, argv: list[str], *, tty: bool, stdin: bool
    ) -> ExecSession:
        if tty:
            return await self._exec_tty(container_id, argv, stdin)
        command, pid_file = await self._blocking(self._exec_command, container_id, argv, False)
        process = await asyncio.create_subprocess_exec(
            *command, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout is not None and process.stderr is not None
        return ExecSession(
            stdout=_read_until_exit(process.stdout, process),
            stderr=_read_until_exit(process.stderr, process),
            write_stdin=_stdin_writer(process.stdin),
            resize=_no_resize,
            wait=_waiter(process, pid_file),
            close=_closer(process, pid_file),
        )

    async def _exec_tty(self, container_id: str, argv: list[str], stdin: bool) -> ExecSession:
        sock_dir = tempfile.mkdtemp(prefix="eph-exec-")
        sock_path = os.path.join(sock_dir, "c.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(sock_path)
            listener.listen(1)
            listener.setblocking(False)
            command, pid_file = await self._blocking(self._exec_command, container_id, argv,
                                                     True, sock_path)
            # With a tty the process's I/O is the pty; the runtime's own stderr only carries
            # its error messages, read once it has exited.
            process = await asyncio.create_subprocess_exec(
                *command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE)
            loop = asyncio.get_running_loop()
            accept = asyncio.ensure_future(loop.sock_accept(listener))
            exited = asyncio.ensure_future(process.wait())
            await asyncio.wait([accept, exited], timeout=30,
                               return_when=asyncio.FIRST_COMPLETED)
            if not accept.done():
                accept.cancel()
                assert process.stderr is not None
                await _kill_exec(process, pid_file)
                error = (await process.stderr.read()).decode(errors="replace").strip()
                _remove_exec_files(pid_file)
                raise RuntimeError_(f"exec in container {container_id}: {error or 'no tty'}")
            conn, _ = accept.result()
            with conn:
                conn.setblocking(True)
                _, fds, _, _ = await self._blocking(socket.recv_fds, conn, 1024, 1)
        finally:
            listener.close()
            shutil.rmtree(sock_dir, ignore_errors=True)
        if not fds:
            await _kill_exec(process, pid_file)
            raise RuntimeError_(f"exec in container {container_id}: the runtime sent no tty")
        return _pty_session(fds[0], process, pid_file, stdin)

    async def attach(self, container_id: str) -> ExecSession:
        directory, meta = await self._blocking(self._container_meta, container_id)
        status = await self._blocking(self._status, container_id)
        if status.state != ContainerState.RUNNING:
            raise RuntimeError_(f"container {container_id} is not running")
        # The shim binds the socket just after start, then listens: until it listens, the
        # socket is missing or refuses connections.
        deadline = time.monotonic() + 5
        while True:
            dir_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
            try:
                reader, writer = await asyncio.open_unix_connection(
                    f"/proc/self/fd/{dir_fd}/attach.sock")
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise RuntimeError_(
                        f"container {container_id}: its shim is not serving attach") from None
            finally:
                os.close(dir_fd)
            await asyncio.sleep(0.01)
        return _attach_session(reader, writer, tty=bool(meta["tty"]))


# -- session helpers ------------------------------------------------------------------------------


async def _no_resize(cols: int, rows: int) -> None:
    return None


async def _read_until_exit(stream: asyncio.StreamReader,
                           process: asyncio.subprocess.Process) -> AsyncIterator[bytes]:
    """Chunks until EOF, or until the process has exited and the stream stays quiet (a
    background process may hold the pipe open forever)."""
    while True:
        try:
            timeout = 0.2 if process.returncode is not None else 1.0
            async with asyncio.timeout(timeout):
                data = await stream.read(65536)
        except TimeoutError:
            if process.returncode is not None:
                return
            continue
        if not data:
            return
        yield data


def _stdin_writer(stdin: asyncio.StreamWriter | None) -> Callable[[bytes], Awaitable[None]]:
    async def write(data: bytes) -> None:
        if stdin is None or stdin.is_closing():
            return
        try:
            if data:
                stdin.write(data)
                await stdin.drain()
            else:
                stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass

    return write


def _remove_exec_files(pid_file: Path) -> None:
    pid_file.unlink(missing_ok=True)
    pid_file.with_suffix(".json").unlink(missing_ok=True)


async def _kill_exec(process: asyncio.subprocess.Process, pid_file: Path) -> None:
    """Kill an exec'd process (by its pid file), then let the command that runs it (crun, or
    the shim's exec mode for runc) reap it and exit. Killing that command first would leave
    the process a zombie of the host's init, and a zombie in the container's PID namespace
    holds up the container's own exit until it is reaped."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text().strip())
        pidfd = os.pidfd_open(pid)
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            os.close(pidfd)
    try:
        async with asyncio.timeout(5):
            await process.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
    _remove_exec_files(pid_file)


def _waiter(process: asyncio.subprocess.Process, pid_file: Path) -> Callable[[], Awaitable[int]]:
    async def wait() -> int:
        code = await process.wait()
        _remove_exec_files(pid_file)
        return code

    return wait


def _closer(process: asyncio.subprocess.Process, pid_file: Path) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        if process.returncode is None:
            await _kill_exec(process, pid_file)
        _remove_exec_files(pid_file)

    return close


def _pty_session(master: int, process: asyncio.subprocess.Process, pid_file: Path,
                 stdin: bool) -> ExecSession:
    import fcntl
    import struct
    import termios

    os.set_blocking(master, False)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    closed = False

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: the other side is gone
            data = b""
        if not data:
            loop.remove_reader(master)
        queue.put_nowait(data)

    loop.add_reader(master, readable)

    async def output() -> AsyncIterator[bytes]:
        while True:
            try:
                async with asyncio.timeout(0.2 if process.returncode is not None else 1.0):
                    data = await queue.get()
            except TimeoutError:
                if process.returncode is not None:
                    break
                continue
            if not data:
                break
            yield data
        release()

    def release() -> None:
        nonlocal closed
        if not closed:
            closed = True
            loop.remove_reader(master)
            os.close(master)

    async def write_stdin(data: bytes) -> None:
        if not stdin or closed:
            return
        if not data:
            data = b"\x04"  # EOF on a terminal is ^D
        view = memoryview(data)
        while view:
            try:
                written = os.write(master, view)
                view = view[written:]
            except BlockingIOError:
                await asyncio.sleep(0.005)
            except OSError:
                return

    async def resize(cols: int, rows: int) -> None:
        if not closed:
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    async def wait() -> int:
        code = await process.wait()
        _remove_exec_files(pid_file)
        return code

    async def close() -> None:
        if process.returncode is None:
            await _kill_exec(process, pid_file)
        _remove_exec_files(pid_file)
        release()

    return ExecSession(stdout=output(), stderr=None, write_stdin=write_stdin, resize=resize,
                       wait=wait, close=close)


def _attach_session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    tty: bool) -> ExecSession:
    """Client side of the shim's attach protocol (see shim.py)."""
    queues: dict[int, asyncio.Queue[bytes]] = {1: asyncio.Queue(), 2: asyncio.Queue()}
    exit_code: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def pump() -> None:
        try:
            while True:
                header = await reader.readexactly(5)
                payload = await reader.readexactly(int.from_bytes(header[1:], "big"))
                if header[0] == 3:
                    if not exit_code.done():
                        exit_code.set_result(int(payload))
                elif header[0] in queues:
                    queues[header[0]].put_nowait(payload)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for queue in queues.values():
                queue.put_nowait(b"")
            if not exit_code.done():
                exit_code.set_exception(RuntimeError_("attach: the shim closed the stream "
                                                      "without an exit code"))
                exit_code.exception()  # retrieved: only wait() callers should see it

    task = asyncio.ensure_future(pump())

    async def stream(kind: int) -> AsyncIterator[bytes]:
        while True:
            data = await queues[kind].get()
            if not data:
                return
            yield data

    async def send(kind: int, payload: bytes) -> None:
        if writer.is_closing():
            return
        writer.write(bytes([kind]) + len(payload).to_bytes(4, "big") + payload)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def write_stdin(data: bytes) -> None:
        await send(0 if data else 5, data)

    async def resize(cols: int, rows: int) -> None:
        await send(4, f"{cols} {rows}".encode())

    async def wait() -> int:
        return await exit_code

    async def close() -> None:
        if not writer.is_closing():
            writer.close()
        await cancel_and_wait(task)

    return ExecSession(stdout=stream(1), stderr=None if tty else stream(2),
                       write_stdin=write_stdin, resize=resize, wait=wait, close=close)

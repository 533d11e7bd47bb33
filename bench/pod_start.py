"""The pod start benchmark (`python -m bench.pod_start`, part of `make bench`): how long a pod
takes from create to Running through a real `ephemera up` (apiserver, scheduler, kubelet, the
real OCI runtime), and from delete to gone, against the floor in the same run: a bare
`runc run -d` and `crun run -d` of the same bundle, then its kill and delete.

The pod: one busybox container, `sh -c "trap 'exit 0' TERM; sleep 3600 & wait"` (SIGTERM ends
it at once, so a delete measures the machinery, not a grace period), with an emptyDir volume.
After W warm-up pods that are not counted, N pods one after another, each: POST, then wait on
an open watch of the namespace until the pod is Running with its container started; read
where the time went; DELETE, then wait for the watch's DELETED event. One pod at a time, so
the node holds the same state for each.

Where the time goes: wall-clock timestamps (one host, one clock) from the client's watch (the
create's response, the bind, Running) and from the kubelet's own files, read while the pod
runs: the birth time (statx) of the first dir the kubelet makes for the pod (its pod dir or
log dir), of the emptyDir's dir (the volume manager set it up), of the shim's `shim.log` (the
fork server forked the shim) and of the runtime's `runtime.log` (the runtime began); the
sandbox's `created_at` and the last write of its `sandbox.json` (ready), the container's
`created_at` (overlay mounted, config.json written), the runtime's pid file (its create done)
and the shim's `started_at`. Birth times come from the kernel's coarse clock (a few ms);
the others are exact. A step is the difference of consecutive milestones, per pod; the tables
give each step's median and p99 (so the steps' medians need not add up to the total's
median); a step below zero means the kubelet acted before the client's watch showed the
bind. A delete: the DELETE's response, the container's terminated state on the watch (the
kubelet's final status), DELETED.

The floor: the config.json ephemera wrote for the first pod's container and the same image
layers, as a bundle of its own: its own overlay rootfs (mounted here with mount(2)), the binds
that pointed into the kubelet's dirs pointed at copies, the namespaces made by the runtime
itself (no sandbox), for runc the cgroup path under a parent of the benchmark's, for crun on
a hybrid cgroup host the cgroup2 mount hidden in a private mount namespace and
`--cgroup-manager=disabled` (what ephemera's shim does; linux-runtime-facts.md 3.2). Timed:
mount + config.json + `<runtime> run -d` (which returns once the container has started);
then `<runtime> kill ID TERM`, the container's exit (a pidfd), `<runtime> delete`, umount,
rm -r. The floor runs after `ephemera up` has stopped, so it has the machine to itself.

CPU: the CPU time of each ephemera process (from its pid file), of this client, of the
runtime processes the floor ran (waited-for children), and of the whole machine
(/proc/stat), over the measured pods, per pod.

Results go to stdout as Markdown, progress to stderr (one line per phase), and with
`--json PATH` to a JSON file too. Nothing is left behind: every pod is deleted and waited
for, the floor removes its containers and mounts, and a last check (which cleans up
whatever it finds, and says so in the report) looks for mounts, runtime state and cgroups of
the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import ctypes
import datetime
import errno
import itertools
import json
import math
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.common import (
    CLIENT,
    CLOCK_TICKS,
    CpuMeter,
    EphemeraUp,
    MachineCpu,
    Measurement,
    format_ms,
    format_number,
    log,
    machine_description,
    markdown_table,
    percentile,
    progress,
    ratio,
)
from ephemera.kubelet.images import ImageStore
from ephemera.kubelet.runtime import cgroups, crun_probe

DEFAULT_PODS = 25
QUICK_PODS = 5
DEFAULT_WARMUP = 2
RUNTIMES = ("auto", "runc", "crun")
FLOOR_KINDS = ("runc", "crun")
EPHEMERA = "ephemera"

NAMESPACE = "bench-pod-start"
NODE_NAME = "bench-node"
CONTAINER = "app"
VOLUME = "scratch"
IMAGE = "busybox:latest"
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]

READY_TIMEOUT = 90.0  # the node Ready, the namespace's service account there
POD_TIMEOUT = 60.0  # one pod Running, or gone
EXIT_TIMEOUT = 30.0  # a floor container's exit after SIGTERM

CREATE = "create → Running"
DELETE = "delete → gone"
CYCLE = "create + delete"

now = time.time  # the one clock: the kubelet's files carry wall-clock times

# Milestones in order, each with the step that ends at it (see the module docstring).
EPHEMERA_CREATE_STEPS = [
    ("create_sent", ""),
    ("create_answered", "apiserver: create (POST → 201)"),
    ("bound", "scheduler: bind (→ nodeName on the client's watch)"),
    ("kubelet_seen", "kubelet: watch, admission (→ its first dir for the pod)"),
    ("volume_dir", "volume manager: emptyDir set up (→ volume dir)"),
    ("sandbox_begun", "pod worker: volume wait returns (→ sandbox begins)"),
    ("network_began", "runtime: sandbox namespaces (unshare)"),
    ("network_ready", "CNI ADD: loopback, bridge, host-local, portmap (→ pod IP)"),
    ("sandbox_ready", "runtime: /dev/shm, /etc files (→ sandbox ready)"),
    ("container_created", "image, container config, overlay, config.json"),
    ("shim_began", "Created event, fork server → shim (→ shim.log)"),
    ("runtime_began", "shim: fork, the runtime's process set up (→ runtime.log)"),
    ("runtime_created", "runtime: create (→ pid file)"),
    ("started", "runtime: start; the shim records it"),
    ("running", "status write, watch (→ Running on the client's watch)"),
]
EPHEMERA_DELETE_STEPS = [
    ("delete_sent", ""),
    ("delete_answered", "apiserver: delete (DELETE → 200)"),
    ("terminated", "kubelet: SIGTERM → exit, final status (→ terminated on the watch)"),
    ("deleted", "kubelet: teardown, pod deleted (→ DELETED on the watch)"),
]


def floor_create_steps(kind: str) -> list[tuple[str, str]]:
    return [("create_sent", ""), ("bundle_ready", "bundle: overlay mount, config.json"),
            ("running", f"`{kind} run -d`")]


def floor_delete_steps(kind: str) -> list[tuple[str, str]]:
    return [("delete_sent", ""), ("exited", f"`{kind} kill TERM` → exited"),
            ("deleted", f"`{kind} delete`, umount, rm -r")]



def wait_until_trapping(pid: int) -> None:
    """Until the container's shell has started its `sleep` (so its SIGTERM trap is set: a
    pid-namespace init without a handler ignores SIGTERM), at most `EXIT_TIMEOUT`; untimed."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    deadline = time.monotonic() + EXIT_TIMEOUT
    while time.monotonic() < deadline:
        try:
            if children.read_text().strip():
                return
        except OSError:
            return  # gone: nothing to wait for
        time.sleep(0.001)
    raise BenchError(f"the container's shell (pid {pid}) started no child")

class BenchError(RuntimeError):
    """Something did not happen as it should: the benchmark stops rather than time it."""


@dataclass
class Config:
    pods: int
    warmup: int
    runtime: str
    work_dir: Path


@dataclass
class PodRecord:
    """One pod (or floor container): its milestones, wall-clock seconds by name."""

    name: str
    uid: str = ""
    marks: dict[str, float] = field(default_factory=dict)
    last_seen: str = ""  # the last status the watch showed, for error messages

    def between(self, start: str, end: str) -> float:
        if start in self.marks and end in self.marks:
            return self.marks[end] - self.marks[start]
        return math.nan


@dataclass
class BackendRun:
    """The measured pods of one backend (`ephemera`, `runc`, `crun`)."""

    backend: str
    records: list[PodRecord] = field(default_factory=list)
    elapsed: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds over the phase
    detail: str = ""
    writes: dict[str, int] = field(default_factory=dict)  # API writes by resource (ephemera)

    def measurement(self, phase: str) -> Measurement:
        start, end = {CREATE: ("create_sent", "running"), DELETE: ("delete_sent", "deleted"),
                      CYCLE: ("create_sent", "deleted")}[phase]
        values = [r.between(start, end) for r in self.records]
        m = Measurement(phase, self.backend, [v for v in values if not math.isnan(v)],
                        elapsed=self.elapsed)
        if phase == CYCLE:
            m.cpu = dict(self.cpu)
        return m


@dataclass
class Template:
    """What the floor copies from ephemera: the container's OCI spec with its bind sources
    moved to copies of the benchmark's, and the image layers (overlay lower dirs)."""

    spec: dict[str, Any]
    layers: list[str]


# --- the machine ---------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_SLAVE = 0x80000
_MNT_DETACH = 2
_AT_FDCWD = -100
_STATX_BTIME = 0x800
STATX_SIZE = 256  # struct statx
STATX_BTIME_OFFSET = 80  # its stx_btime: tv_sec (s64), tv_nsec (u32)
CGROUP2_HYBRID_MOUNT = b"/sys/fs/cgroup/unified"


def machine_busy_seconds() -> float:
    """CPU seconds every CPU of the machine spent not idle (/proc/stat, steal included),
    since boot."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = MachineCpu.snapshot()
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def children_cpu_seconds() -> float:
    """CPU seconds of this process's waited-for children (the runtime commands it ran)."""
    times = os.times()
    return times.children_user + times.children_system


def birth_time(path: Path) -> float:
    """When `path` was created: its statx(2) birth time; NaN when the filesystem does not
    record one or the path is gone."""
    buffer = ctypes.create_string_buffer(STATX_SIZE)
    if _libc.statx(_AT_FDCWD, str(path).encode(), 0, _STATX_BTIME, buffer) != 0:
        return math.nan
    (mask,) = struct.unpack_from("<I", buffer, 0)
    seconds, nanoseconds = struct.unpack_from("<qI", buffer, STATX_BTIME_OFFSET)
    return seconds + nanoseconds / 1e9 if mask & _STATX_BTIME and seconds > 0 else math.nan


def read_kv(path: Path) -> dict[str, str]:
    """A shim file of `key=value` lines."""
    values = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        values[key] = value
    return values


def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below `prefix` in this process's mount table, deepest first."""
    base = str(prefix.resolve())
    found = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            point = line.split()[4].replace("\\040", " ")
            if point == base or point.startswith(base + "/"):
                found.append(point)
    return sorted(found, key=lambda p: p.count("/"), reverse=True)




def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount_overlay(layers: Sequence[str], bundle: Path) -> None:
    data = (f"lowerdir={':'.join(layers)},upperdir={bundle / 'upper'},"
            f"workdir={bundle / 'work'}")
    _check(_libc.mount(b"overlay", str(bundle / "merged").encode(), b"overlay", 0,
                       data.encode()), f"mount overlay on {bundle / 'merged'}")


def unmount(target: str | Path) -> None:
    """umount, lazily when busy; a target that is not mounted (or gone) is fine."""
    path = str(target).encode()
    if _libc.umount2(path, 0) == 0:
        return
    err = ctypes.get_errno()
    if err == errno.EBUSY:
        _check(_libc.umount2(path, _MNT_DETACH), f"umount -l {target}")
    elif err not in (errno.EINVAL, errno.ENOENT):
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def hide_cgroup2() -> None:
    """In the forked child, before exec'ing crun on a hybrid cgroup host: a private mount
    namespace without the cgroup2 mount (linux-runtime-facts.md 3.2, fix B)."""
    _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(None, b"/", None, _MS_REC | _MS_SLAVE, None), "make / rslave")
    if os.path.ismount(CGROUP2_HYBRID_MOUNT):
        _check(_libc.umount2(CGROUP2_HYBRID_MOUNT, _MNT_DETACH), "umount cgroup2")


# --- ephemera ------------------------------------------------------------------------------


def pod_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench-pod-start"}},
        "spec": {
            "containers": [{
                "name": CONTAINER,
                "image": IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": COMMAND,
                "volumeMounts": [{"name": VOLUME, "mountPath": f"/{VOLUME}"}],
            }],
            "volumes": [{"name": VOLUME, "emptyDir": {}}],
        },
    }


class Api:
    """aiohttp sessions to the cluster's apiserver, as its admin: one for requests, one for
    the watch."""

    def __init__(self, up: EphemeraUp) -> None:
        if up.ssl_context is None:
            raise BenchError("ephemera up is not started")
        self.base = up.url
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=up.ssl_context, limit=4))
        self.watch_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=up.ssl_context),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None))

    async def close(self) -> None:
        await self.session.close()
        await self.watch_session.close()

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None,
                   expect: Sequence[int] = (200,)) -> dict[str, Any]:
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else None
        async with self.session.request(method, self.base + path, data=data,
                                        headers=headers) as response:
            raw = await response.read()
            if response.status not in expect:
                raise BenchError(f"{method} {path}: {response.status} {raw[:500]!r}")
            decoded: dict[str, Any] = orjson.loads(raw) if raw else {}
            return decoded


def pods_path(name: str = "") -> str:
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    return f"{path}/{name}" if name else path


def container_status(status: dict[str, Any]) -> dict[str, Any]:
    for entry in status.get("containerStatuses") or []:
        if entry.get("name") == CONTAINER:
            return dict(entry)
    return {}


def describe_status(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    state = container_status(status).get("state") or {}
    details = [f"{kind} {value.get('reason', '')}".strip() for kind, value in state.items()]
    return f"phase {status.get('phase', '-')}, container {', '.join(details) or '-'}"


class PodWatch:
    """An open watch of the benchmark's namespace: for each tracked pod, when the client saw
    it bound, Running with its container started, its container terminated, and deleted."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.records: dict[str, PodRecord] = {}
        self.changed = asyncio.Condition()
        self.response: aiohttp.ClientResponse | None = None
        self.reader: asyncio.Task[None] | None = None

    async def open(self) -> None:
        listed = await self.api.call("GET", pods_path())
        version = listed["metadata"]["resourceVersion"]
        self.response = await self.api.watch_session.get(
            self.api.base + pods_path(),
            params={"watch": "true", "resourceVersion": version, "timeoutSeconds": "3600"})
        if self.response.status != 200:
            raise BenchError(f"watch: {self.response.status} {await self.response.text()}")
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.reader
        if self.response is not None:
            self.response.close()

    def track(self, name: str) -> PodRecord:
        record = self.records[name] = PodRecord(name)
        return record

    async def _read(self) -> None:
        assert self.response is not None
        content = self.response.content
        try:
            while line := await content.readline():
                arrived = now()
                event = orjson.loads(line)
                if event.get("type") == "ERROR":
                    raise BenchError(f"the watch failed: {event.get('object')}")
                self._observe(str(event.get("type")), event.get("object") or {}, arrived)
                async with self.changed:
                    self.changed.notify_all()
        finally:
            async with self.changed:
                self.changed.notify_all()

    def _observe(self, kind: str, obj: dict[str, Any], arrived: float) -> None:
        record = self.records.get(str((obj.get("metadata") or {}).get("name")))
        if record is None:
            return
        marks = record.marks
        status = obj.get("status") or {}
        state = container_status(status).get("state") or {}
        record.last_seen = describe_status(obj)
        if (obj.get("spec") or {}).get("nodeName"):
            marks.setdefault("bound", arrived)
        if status.get("phase") == "Running" and "running" in state and \
                container_status(status).get("started"):
            marks.setdefault("running", arrived)
        if "terminated" in state:
            marks.setdefault("terminated", arrived)
        if kind == "DELETED":
            marks.setdefault("deleted", arrived)

    async def wait(self, record: PodRecord, mark: str, what: str) -> None:
        """Until the watch has shown `mark` for the pod; BenchError after POD_TIMEOUT."""
        assert self.reader is not None
        reader = self.reader

        def seen() -> bool:
            return mark in record.marks or reader.done()

        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(seen), POD_TIMEOUT)
            except TimeoutError:
                raise BenchError(f"pod {record.name} not {what} within {POD_TIMEOUT:.0f}s "
                                 f"(last seen: {record.last_seen or 'nothing'})") from None
        if mark not in record.marks:
            problem = reader.exception() if not reader.cancelled() else None
            raise BenchError(f"the watch ended while waiting for pod {record.name} to be "
                             f"{what}: {problem or 'closed by the server'}")


def kubelet_milestones(kubelet_dir: Path, record: PodRecord) -> dict[str, float]:
    """The kubelet's side of a running pod's start, from its files (module docstring); a
    milestone whose file is missing is left out."""
    pod_dir = kubelet_dir / "pods" / record.uid
    log_dir = kubelet_dir / "logs" / "pods" / f"{NAMESPACE}_{record.name}_{record.uid}"
    instance = pod_dir / "containers" / CONTAINER / "0"
    found = {
        # The pod worker makes the log dir, the volume manager the volume dirs: either may
        # make the pod dir.
        "kubelet_seen": min((t for t in (birth_time(pod_dir), birth_time(log_dir))
                             if not math.isnan(t)), default=math.nan),
        "volume_dir": birth_time(pod_dir / "volumes" / "kubernetes.io~empty-dir" / VOLUME),
        "shim_began": birth_time(instance / "shim.log"),
        "runtime_began": birth_time(instance / "runtime.log"),
    }
    for meta_path in (kubelet_dir / "runtime" / "sandboxes").glob("*/sandbox.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            meta = json.loads(meta_path.read_text())
            if meta.get("pod_uid") == record.uid and meta.get("ready"):
                found["sandbox_begun"] = float(meta["created_at"])
                found["sandbox_ready"] = meta_path.stat().st_mtime
                network = meta.get("network") or {}
                if "began" in network and "done" in network:  # the CNI ADD's own times
                    found["network_began"] = float(network["began"])
                    found["network_ready"] = float(network["done"])
    with contextlib.suppress(OSError, ValueError, KeyError):
        found["container_created"] = float(
            json.loads((instance / "container.json").read_text())["created_at"])
    with contextlib.suppress(OSError):
        found["runtime_created"] = (instance / "pid").stat().st_mtime
    with contextlib.suppress(OSError, ValueError, KeyError):
        found["started"] = float(read_kv(instance / "started")["started_at"])
    return {name: value for name, value in found.items() if not math.isnan(value)}


def capture_template(kubelet_dir: Path, uid: str, binds_dir: Path) -> Template:
    """The running pod's container spec and image layers, its bind sources inside the
    kubelet's dirs copied to `binds_dir` (files copied, directories made empty)."""
    spec: dict[str, Any] = json.loads(
        (kubelet_dir / "pods" / uid / "containers" / CONTAINER / "0" / "config.json")
        .read_text())
    binds_dir.mkdir(parents=True, exist_ok=True)
    inside = str(kubelet_dir.resolve()) + "/"
    for index, mount in enumerate(spec.get("mounts") or []):
        source = str(mount.get("source", ""))
        if mount.get("type") != "bind" or not source.startswith(inside):
            continue
        copy_path = binds_dir / f"{index}-{Path(source).name}"
        if Path(source).is_dir():
            copy_path.mkdir(exist_ok=True)
        else:
            shutil.copyfile(source, copy_path)
        mount["source"] = str(copy_path)
    image = ImageStore(kubelet_dir).resolve(IMAGE)
    if image is None:
        raise BenchError(f"the kubelet's image store has no {IMAGE}")
    return Template(spec=spec, layers=[str(layer) for layer in image.layers])


async def wait_until_ready(api: Api) -> str:
    """Wait for the node to be Ready and the namespace's default ServiceAccount to exist
    (pods name it); the node's container runtime version."""
    deadline = time.monotonic() + READY_TIMEOUT
    runtime_version = ""
    while not runtime_version:
        with contextlib.suppress(BenchError):
            node = await api.call("GET", f"/api/v1/nodes/{NODE_NAME}")
            conditions = (node.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                runtime_version = node["status"]["nodeInfo"]["containerRuntimeVersion"]
                break
        if time.monotonic() > deadline:
            raise BenchError(f"node {NODE_NAME} not Ready within {READY_TIMEOUT:.0f}s")
        await asyncio.sleep(0.1)
    await api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": NAMESPACE}},
                   expect=(201, 409))
    while True:
        with contextlib.suppress(BenchError):
            await api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")
            return runtime_version
        if time.monotonic() > deadline:
            raise BenchError(f"no default ServiceAccount in {NAMESPACE} within "
                             f"{READY_TIMEOUT:.0f}s")
        await asyncio.sleep(0.1)


async def pod_cycle(api: Api, watch: PodWatch, kubelet_dir: Path, name: str,
                    on_running: Callable[[PodRecord], None] | None = None) -> PodRecord:
    """Create a pod, wait until it runs, read the kubelet's milestones, delete it and wait
    until it is gone. `on_running(record)` runs (untimed) while the pod runs."""
    record = watch.track(name)
    marks = record.marks
    body = pod_manifest(name)
    marks["create_sent"] = now()
    created = await api.call("POST", pods_path(), body, expect=(201,))
    marks["create_answered"] = now()
    record.uid = str(created["metadata"]["uid"])
    await watch.wait(record, "running", "Running")
    marks.update(await asyncio.to_thread(kubelet_milestones, kubelet_dir, record))
    if on_running is not None:
        await asyncio.to_thread(on_running, record)
    marks["delete_sent"] = now()
    await api.call("DELETE", pods_path(name), expect=(200, 202))
    marks["delete_answered"] = now()
    await watch.wait(record, "deleted", "gone")
    return record


async def bench_ephemera(cfg: Config, up: EphemeraUp) -> tuple[BackendRun, Template]:
    """Warm-up and measured pods on a started cluster; the run and the floor's template
    (from the first pod)."""
    api = Api(up)
    templates: list[Template] = []

    def capture(record: PodRecord) -> None:
        if not templates:
            templates.append(capture_template(up.kubelet_dir, record.uid,
                                              cfg.work_dir / "floor" / "binds"))

    try:
        with progress(f"waiting for node {NODE_NAME} to be Ready"):
            runtime_version = await wait_until_ready(api)
        run = BackendRun(EPHEMERA, detail=runtime_version)
        watch = PodWatch(api)
        await watch.open()
        try:
            with progress(f"[{EPHEMERA}] warm-up ({cfg.warmup} pods)"):
                for index in range(cfg.warmup):
                    await pod_cycle(api, watch, up.kubelet_dir, f"warmup-{index}", capture)
            meter = CpuMeter(up.component_pids())
            with progress(f"[{EPHEMERA}] {CREATE}, {DELETE} ({cfg.pods} pods, "
                          f"{runtime_version})"):
                before, busy = meter.snapshot(), machine_busy_seconds()
                started = now()
                for index in range(cfg.pods):
                    run.records.append(await pod_cycle(api, watch, up.kubelet_dir,
                                                       f"pod-{index:03d}", capture))
                run.elapsed = now() - started
                run.cpu = {**meter.since(before), "machine": machine_busy_seconds() - busy}
        finally:
            await watch.close()
    finally:
        await api.close()
    return run, templates[0]


def api_writes(apiserver_log: Path, pod_names: Sequence[str]) -> dict[str, int]:
    """The writes the apiserver logged (`created|updated|deleting|deleted <resource> ns/name
    rv=N`) for the given pods and their events, by resource; empty when the log says
    nothing of them."""
    wanted = set(pod_names)
    counts: dict[str, int] = {}
    try:
        lines = apiserver_log.read_text(errors="replace").splitlines()
    except OSError:
        return counts
    for line in lines:
        match = API_WRITE_LINE.search(line)
        if match is None:
            continue
        resource, name = match.group(1), match.group(2)
        if (name if resource == "pods" else name.split(".", 1)[0]) in wanted:
            counts[resource] = counts.get(resource, 0) + 1
    return counts


API_WRITE_LINE = re.compile(
    rf"ephemera\.apiserver: (?:created|updated|deleting|deleted) (\w+) {NAMESPACE}/(\S+?):?"
    rf" .*\brv=\d+")


# --- the floor -----------------------------------------------------------------------------


class Floor:
    """A bare runc or crun on bundles of its own under `root` (module docstring)."""

    def __init__(self, kind: str, root: Path, template: Template) -> None:
        binary = shutil.which(kind)
        if binary is None:
            raise BenchError(f"{kind} is not installed")
        self.kind = kind
        self.binary = binary
        self.root = root
        self.state = root / f"{kind}-state"
        self.template = template
        self.hybrid = kind == "crun" and cgroups.is_hybrid()
        self.cgroup_parent = f"ephemera_bench_{kind}_{os.getpid()}"
        self.global_args = ["--root", str(self.state)]
        if self.hybrid:
            self.global_args.append("--cgroup-manager=disabled")
        self.state.mkdir(parents=True, exist_ok=True)

    def _spec(self, container_id: str, bundle: Path) -> dict[str, Any]:
        spec = copy.deepcopy(self.template.spec)
        spec["root"] = {"path": str(bundle / "merged"), "readonly": False}
        spec["annotations"] = {}
        linux = spec.setdefault("linux", {})
        linux["namespaces"] = [{"type": ns["type"]} for ns in linux.get("namespaces") or []]
        linux.pop("cgroupsPath", None)
        linux.pop("resources", None)
        if not self.hybrid:  # as ephemera's runc spec: a cgroup of its own, devices denied
            linux["cgroupsPath"] = f"{self.cgroup_parent}/{container_id}"
            linux["resources"] = {"devices": [{"allow": False, "access": "rwm"}]}
        return spec

    def _run(self, *args: str, log_path: Path) -> None:
        """A runtime command that does not detach, its output to `log_path`."""
        with open(log_path, "ab") as out:
            result = subprocess.run([self.binary, *self.global_args, *args],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    timeout=60, check=False)
        if result.returncode != 0:
            raise BenchError(f"{self.kind} {' '.join(args)} exited {result.returncode}: "
                             f"{log_path.read_text(errors='replace')[-500:]}")

    def cycle(self, index: int) -> PodRecord:
        """Start a container from the template's bundle, then kill and remove it."""
        container_id = f"bench-{self.kind}-{os.getpid()}-{index}"
        bundle = self.root / "bundles" / container_id
        record = PodRecord(container_id)
        marks = record.marks
        log_path = self.root / f"{container_id}.log"
        marks["create_sent"] = now()
        for sub in ("upper", "work", "merged"):
            (bundle / sub).mkdir(parents=True)
        try:
            mount_overlay(self.template.layers, bundle)
            for point in ("proc", "dev", "sys"):  # crun wants them in the rootfs
                with contextlib.suppress(FileExistsError):
                    (bundle / "merged" / point).mkdir()
            (bundle / "config.json").write_text(json.dumps(self._spec(container_id, bundle)))
            marks["bundle_ready"] = now()
            # Never a pipe to a detaching runtime: the container inherits its stdio.
            with open(bundle / "container.log", "ab") as out:
                result = subprocess.run(
                    [self.binary, *self.global_args, "--log", str(bundle / "runtime.log"),
                     "run", "-d", "--pid-file", str(bundle / "pid"), "--bundle", str(bundle),
                     container_id],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, check=False,
                    preexec_fn=hide_cgroup2 if self.hybrid else None)
            marks["running"] = now()
            if result.returncode != 0:
                raise BenchError(f"{self.kind} run -d exited {result.returncode}: "
                                 f"{(bundle / 'runtime.log').read_text(errors='replace')[-500:]}")
            pid = int((bundle / "pid").read_text())
            wait_until_trapping(pid)
            pidfd = os.pidfd_open(pid)
            try:
                marks["delete_sent"] = now()
                self._run("kill", container_id, "TERM", log_path=log_path)
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                if not poller.poll(EXIT_TIMEOUT * 1000):
                    self._run("kill", container_id, "KILL", log_path=log_path)
                    raise BenchError(f"{container_id} did not exit on SIGTERM")
                marks["exited"] = now()
            finally:
                os.close(pidfd)
            self._run("delete", container_id, log_path=log_path)
            unmount(bundle / "merged")
            shutil.rmtree(bundle)
            marks["deleted"] = now()
        finally:
            if bundle.exists():
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    subprocess.run([self.binary, *self.global_args, "delete", "--force",
                                    container_id], capture_output=True, timeout=60, check=False)
                with contextlib.suppress(OSError):
                    unmount(bundle / "merged")
                shutil.rmtree(bundle, ignore_errors=True)
            log_path.unlink(missing_ok=True)
        return record

    def close(self) -> None:
        """The cgroup parent runc made under the benchmark's cgroups, if it is empty."""
        cgroups.remove_dirs([str(h.path(self.cgroup_parent)) for h in cgroups.hierarchies()])


def bench_floor(kind: str, cfg: Config, template: Template) -> BackendRun:
    floor = Floor(kind, cfg.work_dir / "floor", template)
    run = BackendRun(kind)
    try:
        with progress(f"[{kind}] warm-up ({cfg.warmup} containers)"):
            for index in range(cfg.warmup):
                floor.cycle(index)
        client = CpuMeter({})
        with progress(f"[{kind}] run -d, kill + delete ({cfg.pods} containers)"):
            before = client.snapshot()
            children, busy = children_cpu_seconds(), machine_busy_seconds()
            started = now()
            for index in range(cfg.pods):
                run.records.append(floor.cycle(cfg.warmup + index))
            run.elapsed = now() - started
            run.cpu = {**client.since(before), "runtime": children_cpu_seconds() - children,
                       "machine": machine_busy_seconds() - busy}
    finally:
        floor.close()
    return run


def floor_kinds(work_dir: Path) -> tuple[list[str], list[str]]:
    """(the floors that run here, notes on those that do not)."""
    kinds, notes = [], []
    for kind in FLOOR_KINDS:
        if shutil.which(kind) is None:
            notes.append(f"{kind}: not installed")
        elif kind == "crun" and (error := crun_probe(work_dir / "crun-probe")) is not None:
            notes.append(f"crun: its probe container fails on this host: {error}")
        else:
            kinds.append(kind)
    return kinds, notes


# --- nothing left behind -------------------------------------------------------------------


def clean_leftovers(work_dir: Path, up: EphemeraUp) -> list[str]:
    """Mounts, runtime state and cgroups the run left (removed now): empty when all is well."""
    found: list[str] = []
    state_dirs = [*(up.kubelet_dir / "runtime").glob("*-state"),
                  *(work_dir / "floor").glob("*-state")]
    for state in state_dirs:
        kind = state.name.split("-", 1)[0]
        binary = shutil.which(kind)
        for entry in sorted(state.iterdir()) if state.is_dir() else []:
            found.append(f"{kind} container {entry.name}")
            if binary is not None:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    subprocess.run([binary, "--root", str(state), "delete", "--force",
                                    entry.name], capture_output=True, timeout=60, check=False)
    for point in mounts_under(work_dir):
        found.append(f"mount {point}")
        with contextlib.suppress(OSError):
            unmount(point)
    parents = [cgroups.node_parent_name(NODE_NAME, up.kubelet_dir),
               *(f"ephemera_bench_{kind}_{os.getpid()}" for kind in FLOOR_KINDS)]
    for hierarchy in cgroups.hierarchies():
        for parent in parents:
            path = hierarchy.path(parent)
            if path.is_dir():
                found.append(f"cgroup {path}")
                dirs = [str(d) for d in path.rglob("*") if d.is_dir()] + [str(path)]
                cgroups.remove_dirs(dirs)
    return found


# --- report --------------------------------------------------------------------------------


def step_rows(runs: Sequence[BackendRun], steps: Sequence[tuple[str, str]],
              total: Measurement) -> list[list[str]]:
    """A row per step (median, p99, the median's share of the total's median) and a last
    row with the total."""
    rows = []
    for (start, _), (end, label) in itertools.pairwise(steps):
        values = [r.between(start, end) for run in runs for r in run.records]
        values = [v for v in values if not math.isnan(v)]
        median = percentile(values, 50)
        share = ratio(median, total.median) * 100
        rows.append([label, str(len(values)), format_ms(median),
                     format_ms(percentile(values, 99)),
                     "-" if math.isnan(share) else f"{share:.0f}%"])
    rows.append([f"total: {total.phase}", str(total.count), format_ms(total.median),
                 format_ms(total.p99), "100%"])
    return rows


STEP_HEADERS = ["step", "n", "median ms", "p99 ms", "of the total's median"]


def results_table(runs: Sequence[BackendRun]) -> str:
    what = {
        (CREATE, EPHEMERA): "POST → Running, container started, on the watch",
        (DELETE, EPHEMERA): "DELETE → DELETED on the watch",
    }
    rows = []
    for phase in (CREATE, DELETE):
        for run in runs:
            m = run.measurement(phase)
            note = what.get((phase, run.backend)) or (
                f"overlay mount, config.json, `{run.backend} run -d`" if phase == CREATE
                else f"`{run.backend} kill TERM`, exit, `{run.backend} delete`, umount")
            rows.append([phase, run.backend, str(m.count), format_ms(m.median),
                         format_ms(m.p99), note])
    return markdown_table(["phase", "backend", "n", "median ms", "p99 ms", "what"], rows,
                          align="llrrrl")


def ratio_values(runs: Sequence[BackendRun]) -> dict[str, dict[str, float]]:
    """{phase: {"<floor>_median": x, "<floor>_p99": y}} of ephemera over each floor."""
    by_backend = {run.backend: run for run in runs}
    values: dict[str, dict[str, float]] = {}
    for phase in (CREATE, DELETE):
        ours = by_backend[EPHEMERA].measurement(phase)
        values[phase] = {}
        for kind in FLOOR_KINDS:
            if kind in by_backend:
                floor = by_backend[kind].measurement(phase)
                values[phase][f"{kind}_median"] = ratio(ours.median, floor.median)
                values[phase][f"{kind}_p99"] = ratio(ours.p99, floor.p99)
    return values


def ratios_table(runs: Sequence[BackendRun]) -> str:
    kinds = [run.backend for run in runs if run.backend != EPHEMERA]
    headers = ["phase"]
    for kind in kinds:
        headers += [f"ephemera ÷ {kind}: median", "p99"]
    rows = []
    for phase, values in ratio_values(runs).items():
        row = [phase]
        for kind in kinds:
            row += [format_number(values[f"{kind}_median"]), format_number(values[f"{kind}_p99"])]
        rows.append(row)
    return markdown_table(headers, rows)


CPU_COLUMNS = ("apiserver", "scheduler", "controller-manager", "kubelet", CLIENT, "runtime",
               "machine")


def cpu_table(runs: Sequence[BackendRun]) -> str:
    rows = []
    for run in runs:
        m = run.measurement(CYCLE)
        wall = run.elapsed / m.count if m.count else math.nan
        rows.append([run.backend, format_ms(wall), *(format_ms(m.cpu_per_op(c))
                                                      for c in CPU_COLUMNS)])
    return markdown_table(["backend", "wall ms/pod", *(f"{c} CPU ms" for c in CPU_COLUMNS)],
                          rows)


def report(runs: Sequence[BackendRun], cfg: Config, machine: dict[str, str], command: str,
           started: datetime.datetime, floor_notes: Sequence[str], left: Sequence[str]) -> str:
    ours = runs[0]
    floors = [run for run in runs if run.backend != EPHEMERA]
    lines = [
        f"# bench.pod_start: {cfg.pods} pods one after another, ephemera on "
        f"{ours.detail or cfg.runtime} (--runtime {cfg.runtime}), floors "
        f"{', '.join(run.backend for run in floors) or 'none'}",
        "",
        f"Command: `{command}`  ",
        f"Started: {started.isoformat(timespec='seconds')}  ",
        *(f"{name.capitalize()}: {value}  " for name, value in machine.items()),
        f"Warm-up: {cfg.warmup} pods and {cfg.warmup} containers per floor, not counted  ",
        f"Pod network: {network_summary(ours)}  ",
        *(f"Floor left out: {note}  " for note in floor_notes),
        "Left behind: " + ("nothing (no mount, runtime state or cgroup of the run)"
                           if not left else f"{'; '.join(left)} (cleaned up afterwards)"),
        "",
        "## Results",
        "",
        results_table(runs),
        "",
        "## Ratios",
        "",
        "ephemera's latency over the floor's (above 1: ephemera is slower), of the median and"
        " the p99.",
        "",
        ratios_table(runs),
        "",
        "## Where the time goes: ephemera, create → Running",
        "",
        "Each step ends at a milestone: on the client's watch, or in the kubelet's files"
        " (wall clock, one host). Per pod, the time from the previous milestone; the medians"
        " need not add up to the total's.",
        "",
        markdown_table(STEP_HEADERS, step_rows([ours], EPHEMERA_CREATE_STEPS,
                                               ours.measurement(CREATE))),
        "",
        "## Where the time goes: ephemera, delete → gone",
        "",
        markdown_table(STEP_HEADERS, step_rows([ours], EPHEMERA_DELETE_STEPS,
                                               ours.measurement(DELETE))),
    ]
    for floor in floors:
        kind = floor.backend
        lines += [
            "",
            f"## Where the time goes: {kind}",
            "",
            markdown_table(STEP_HEADERS, [
                *step_rows([floor], floor_create_steps(kind), floor.measurement(CREATE)),
                *step_rows([floor], floor_delete_steps(kind), floor.measurement(DELETE))]),
        ]
    lines += [
        "",
        "## CPU per pod",
        "",
        "CPU time (user + system, all threads) over the measured pods, per pod (create and"
        " delete): each ephemera process, this client, the runtime commands the floor ran"
        " (ephemera's runtime and shim processes are not counted apart, only in `machine`),"
        " and the whole machine (/proc/stat, everything running on it).",
        "",
        cpu_table(runs),
        "",
        f"Writes to the API per pod (the apiserver's log): {writes_summary(ours)}.",
    ]
    return "\n".join(lines) + "\n"


def network_summary(run: BackendRun) -> str:
    """How many measured pods had their sandbox attached by a CNI ADD, and its median."""
    added = [t for t in (r.between("network_began", "network_ready") for r in run.records)
             if not math.isnan(t)]
    if not added:
        return "no CNI ADD seen (no pod CIDR on the node: loopback only)"
    return (f"{len(added)} of {len(run.records)} pods attached by CNI ADD "
            f"(median {format_ms(percentile(added, 50))} ms)")


def writes_summary(run: BackendRun) -> str:
    if not run.writes or not run.records:
        return "-"
    total = sum(run.writes.values()) / len(run.records)
    parts = ", ".join(f"{resource} {count / len(run.records):.3g}"
                      for resource, count in sorted(run.writes.items()))
    return f"{total:.3g} ({parts})"


def as_json(runs: Sequence[BackendRun], cfg: Config, machine: dict[str, str], command: str,
            started: datetime.datetime, left: Sequence[str]) -> dict[str, Any]:
    def finite(value: float) -> float | None:
        return None if math.isnan(value) else value

    return {
        "command": command,
        "started": started.isoformat(timespec="seconds"),
        "config": {"pods": cfg.pods, "warmup": cfg.warmup, "runtime": cfg.runtime},
        "machine": machine,
        "runtime": runs[0].detail,
        "left_behind": list(left),
        "api_writes_per_pod": {k: v / max(1, len(runs[0].records))
                               for k, v in runs[0].writes.items()},
        "results": [run.measurement(phase).as_dict() for run in runs
                    for phase in (CREATE, DELETE, CYCLE)],
        "ratios": {phase: {k: finite(v) for k, v in values.items()}
                   for phase, values in ratio_values(runs).items()},
        "pods": {run.backend: [{"name": r.name, "uid": r.uid, "marks": r.marks}
                               for r in run.records] for run in runs},
    }


# --- main ----------------------------------------------------------------------------------


def run_all(cfg: Config) -> tuple[list[BackendRun], list[str], list[str]]:
    """Every backend in one run: (runs, floor notes, what was left behind)."""
    up = EphemeraUp(cfg.work_dir / "data", ["--runtime", cfg.runtime, "--node-name", NODE_NAME])
    runs: list[BackendRun] = []
    notes: list[str] = []
    try:
        with progress(f"starting ephemera up (--runtime {cfg.runtime})"):
            up.start()
        try:
            ours, template = asyncio.run(bench_ephemera(cfg, up))
        except BaseException:
            log(f"ephemera up logs (tail):\n{up.log_tail()}")
            raise
        finally:
            with progress("stopping ephemera up"):
                up.stop()
        ours.writes = api_writes(up.data_dir / "logs" / "apiserver.log",
                                 [r.name for r in ours.records])
        runs.append(ours)
        kinds, notes = floor_kinds(cfg.work_dir)
        for kind in kinds:
            runs.append(bench_floor(kind, cfg, template))
    finally:
        up.stop()
        with progress("checking that nothing is left behind"):
            left = clean_leftovers(cfg.work_dir, up)
        for item in left:
            log(f"left behind (now removed): {item}")
    return runs, notes, left


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pod_start",
        description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=None, metavar="N",
                        help=f"measured pods (default {DEFAULT_PODS}; {QUICK_PODS} with --quick)")
    parser.add_argument("--quick", action="store_true", help=f"a short run: {QUICK_PODS} pods")
    parser.add_argument("--runtime", choices=RUNTIMES, default="auto",
                        help="ephemera's runtime (`ephemera up --runtime`; default auto: crun "
                             "where it works, else runc); the floors are always runc and crun")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, metavar="W",
                        help=f"pods (and floor containers) before the measured ones "
                             f"(default {DEFAULT_WARMUP})")
    parser.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                        help="where the data dirs go (default: a temporary dir, removed)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the results (every pod's milestones) as JSON there")
    args = parser.parse_args(argv)
    if args.pods is None:
        args.pods = QUICK_PODS if args.quick else DEFAULT_PODS
    if args.pods < 1:
        parser.error("--pods must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    return args


def run_bench(module: str, argv: Sequence[str] | None, args: argparse.Namespace,
              needs_root_because: str, temp_prefix: str,
              run: Callable[[Path, str], tuple[str, dict[str, Any]]]) -> int:
    """A benchmark's `main`: check root, make (or use) the work dir, `run(work_dir,
    command)` for (the markdown report, the JSON results), print the report, write the JSON
    to `--json` if given, remove a temporary work dir; the exit status."""
    command = f"python -m {module} " + " ".join(sys.argv[1:] if argv is None else argv)
    if os.geteuid() != 0:
        log(f"{module}: needs root ({needs_root_because})")
        return 1
    temporary = args.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix=temp_prefix)) if temporary else args.work_dir
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        text, results = run(work_dir.resolve(), command.strip())
    except RuntimeError as error:  # a BenchError, or `ephemera up` that did not start
        log(f"{module}: {error}")
        return 1
    finally:
        if temporary and not mounts_under(work_dir):
            shutil.rmtree(work_dir, ignore_errors=True)
    print(text, end="")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def run(work_dir: Path, command: str) -> tuple[str, dict[str, Any]]:
        cfg = Config(pods=args.pods, warmup=args.warmup, runtime=args.runtime,
                     work_dir=work_dir)
        started = datetime.datetime.now(datetime.UTC)
        machine = machine_description(cfg.work_dir)
        runs, notes, left = run_all(cfg)
        return (report(runs, cfg, machine, command, started, notes, left),
                as_json(runs, cfg, machine, command, started, left))

    return run_bench("bench.pod_start", argv, args,
                     "it runs containers and mounts overlays", "ephemera-bench-pods-", run)


if __name__ == "__main__":
    sys.exit(main())

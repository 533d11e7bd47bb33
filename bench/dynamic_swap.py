"""The dynamic volume swap benchmark (`python -m bench.dynamic_swap`, part of `make bench`): how
long KEP-6395's swap takes through a real `ephemera up` (PUT `pods/NAME/dynamic` replacing one
emptyDir and one Secret volume of a running container whose `dynamicVolumePolicy` is
`RestartContainer`, until the pod's status shows the restarted container running with the new
mounts), and the live swap (the same with `NotRequired`: the mounts change in the running
container), side by side in one run with (a) deleting and recreating an equivalent pod through
ephemera and (b) the floors: the bare runtime (runc, crun) restarting a container of the same
bundle with changed mounts, and the bare live mount sequence on that container.

The pod: one busybox container, `sh -c "trap 'exit 0' TERM; sleep 3600 & wait"` (SIGTERM ends
it at once, so a stop measures the machinery, not a grace period), mounting an emptyDir at
`/scratch` and a Secret (two keys) at `/creds`. Each swap i replaces them with the emptyDir
`scratch-i` and the Secret volume `creds-i` (of the Secret `bench-creds-<i mod 2>`), at the
same paths. After W warm-up rounds that are not counted, N rounds, each:

- **swap**: with the pod settled (its old volumes torn down and pruned from
  `volumeStatuses`), PUT `/dynamic` with the pod's latest object from the watch and the new
  volumes; timed until an open watch of the namespace shows the container running with a new
  containerID and `volumeMounts` naming the new volumes. Then (untimed) where the time went,
  and the wait until the old volumes are gone.
- **live swap**: the same on a second pod whose container's `dynamicVolumePolicy.restartPolicy`
  is `NotRequired` (feature gate DynamicVolumeHotPlug): timed until the watch shows the *same*
  container (same containerID) with `volumeMounts` naming the new volumes. Then, untimed, a
  file of the new Secret is read inside the container (through its init's root, i.e. its
  mount namespace) and must hold the Secret's value, and the old volumes are waited out.
- **recreate** (a): DELETE an equivalent pod (same spec, without the policy), wait for its
  DELETED event, POST it again under the same name with the new volumes; timed from the
  DELETE until the new pod is Running with its container started.

The floor (b), after `ephemera up` has stopped (so it has the machine to itself): the
config.json ephemera wrote for the swap pod's container and the same image layers, as a bundle
of its own (see `bench.pod_start`: its own overlay rootfs, the binds into the kubelet's dirs
pointed at copies, the runtime's own namespaces, runc's own cgroup, crun without cgroups on a
hybrid host). A container runs from it; each swap, timed: `<runtime> kill ID TERM`, the exit (a
pidfd), `<runtime> delete ID`, a new directory for `/scratch`, a new tmpfs with the Secret's
files written for `/creds`, config.json rewritten with the two new bind sources, and
`<runtime> run -d` (which returns once the container has started). The old tmpfs is unmounted
afterwards, untimed (as ephemera tears old volumes down after the swap). Then the live floor
on the same container: the bare mount sequence the kubelet's runtime runs
(`ephemera.kubelet.runtime.livemount`: `umount2(MNT_DETACH)` of `/scratch` and `/creds` in the
container, then `open_tree`, `mount_setattr`, `setns`, `move_mount` of the two new volumes),
timed; the new volumes are made before it and the old ones dropped after, untimed.

Where a swap's time goes: wall-clock milestones (one host, one clock) from the client (the
PUT's response, Running on the watch) and the kubelet's files: the allocation checkpoint's
write (the later ctime of its two slots: allocation done, flushed right after), the new
emptyDir's dir (its birth time) and the
new Secret volume's `..data` link (its ctime: the tmpfs mounted and the files written), the
old container's exit (the shim's `finished_at`), the new instance's `created_at` (overlay
mounted, config.json written), its `shim.log` (birth: the shim forked), the runtime's pid file
(create done) and the shim's `started_at`. File times from the kernel's coarse clock are good
to a few ms; the others are exact.

Results go to stdout as Markdown (p50, p95, p99, the ratios, whether the issue's targets are
met), progress to stderr, and with `--json PATH` to a JSON file too. Nothing is left behind:
the pods are deleted and waited for, the floor removes its containers and mounts, and a last
check (`bench.pod_start.clean_leftovers`, which cleans up what it finds and says so) looks for
mounts, runtime state and cgroups of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import ctypes
import datetime
import itertools
import json
import math
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.common import (
    EphemeraUp,
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
from bench.pod_start import (
    NODE_NAME,
    Api,
    BenchError,
    Floor,
    Template,
    birth_time,
    capture_template,
    clean_leftovers,
    floor_kinds,
    hide_cgroup2,
    mount_overlay,
    mounts_under,
    read_kv,
    run_bench,
    unmount,
    wait_until_trapping,
)
from ephemera import trace
from ephemera.kubelet.allocation.checkpoint import ALTERNATE_SUFFIX, CHECKPOINT_NAME
from ephemera.kubelet.runtime import livemount

DEFAULT_SWAPS = 50
QUICK_SWAPS = 10
DEFAULT_WARMUP = 3
RUNTIMES = ("auto", "runc", "crun")
EPHEMERA = "ephemera"
LIVE = "live"  # ephemera's live swap (restartPolicy NotRequired, DynamicVolumeHotPlug)
RECREATE = "recreate"
LIVE_FLOOR = " live"  # suffix of the live floors' backends: "runc live", "crun live"

NAMESPACE = "bench-dynamic-swap"
SWAP_POD = "swapper"
LIVE_POD = "live-swapper"
RECREATE_POD = "recreated"
CONTAINER = "app"
IMAGE = "busybox:latest"
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
SCRATCH_PATH = "/scratch"
CREDS_PATH = "/creds"
SECRETS = ("bench-creds-0", "bench-creds-1")
SECRET_FILES = {"token": "t0k3n-{}", "ca.crt": "-----BEGIN CERTIFICATE-----\n{}\n"}

READY_TIMEOUT = 90.0
POD_TIMEOUT = 60.0
EXIT_TIMEOUT = 30.0

SWAP = "swap → running with the new mounts"
# The targets (issue 12): the live swap's p50 at most 25 ms and at least 10x faster than
# recreation; the restart swap's p50 within 2.5x of the floor.
TARGET_LIVE_MS = 25.0
TARGET_RECREATE_RATIO = 10.0
TARGET_FLOOR_RATIO = 2.5

now = time.time  # the one clock: the kubelet's files carry wall-clock times

# Milestones in order, each with the step that ends at it (module docstring).
SWAP_STEPS = [
    ("sent", ""),
    ("answered", "apiserver: PUT /dynamic (→ 200)"),
    ("allocated", "kubelet: watch, allocation check, checkpoint write (→ written)"),
    ("volumes_ready", "volume manager: emptyDir and Secret tmpfs set up (→ both ready)"),
    ("old_exited", "pod worker wakes, SIGTERM, the old container exits (→ shim's exit)"),
    ("container_created", "exit seen, image, container config, overlay, config.json"),
    ("shim_began", "Created event, fork server → shim (→ shim.log)"),
    ("runtime_created", "shim, runtime create (→ pid file)"),
    ("started", "runtime: start; the shim records it"),
    ("running", "status write, watch (→ running with the new mounts on the watch)"),
]
LIVE_STEPS = [
    ("sent", ""),
    ("answered", "apiserver: PUT /dynamic (→ 200)"),
    ("allocated", "kubelet: watch, allocation check, checkpoint write (→ written)"),
    ("volumes_ready", "volume manager: emptyDir and Secret tmpfs set up (→ both ready)"),
    ("attached", "pod worker: old mounts detached, new ones attached (→ the runtime's record)"),
    ("running", "status write, watch (→ the new mounts on the watch)"),
]
# With --trace, the components' marks (`ephemera.trace`) of each live swap: (mark, event,
# the key's end, the mark it comes after), each the first such line after that mark.
LIVE_TRACE_MARKS = [
    ("put_begin", "apiserver.begin", f"/{LIVE_POD}/dynamic", "sent"),
    ("put_committed", "store.committed", f"/{LIVE_POD}", "put_begin"),
    ("put_end", "apiserver.end", f"/{LIVE_POD}/dynamic", "put_begin"),
    ("pod_event", "kubelet.pod_event", LIVE_POD, "put_committed"),
    ("allocation_check", "kubelet.allocation_check", LIVE_POD, "pod_event"),
    ("allocation_staged", "kubelet.allocation_staged", LIVE_POD, "allocation_check"),
    ("allocation_written", "kubelet.allocation_written", LIVE_POD, "allocation_staged"),
    ("volume_setup", "kubelet.volume_setup", LIVE_POD, "allocation_staged"),
    ("volume_setup_2", "kubelet.volume_setup", LIVE_POD, "volume_setup"),
    ("volume_set_up_1", "kubelet.volume_set_up", LIVE_POD, "volume_setup"),
    ("volume_set_up_2", "kubelet.volume_set_up", LIVE_POD, "volume_set_up_1"),
    ("sync", "kubelet.sync", LIVE_POD, "allocation_written"),
    ("live_change", "kubelet.live_change", LIVE_POD, "put_begin"),
    ("live_changed", "kubelet.live_changed", LIVE_POD, "live_change"),
    ("status_build", "kubelet.status_build", LIVE_POD, "live_changed"),
    ("status_published", "kubelet.status_published", LIVE_POD, "status_build"),
    ("status_released", "kubelet.status_released", LIVE_POD, "status_published"),
    ("patch_sent", "kubelet.status_patch", f"/{LIVE_POD}/status", "live_changed"),
    ("patch_begin", "apiserver.begin", f"/{LIVE_POD}/status", "patch_sent"),
    ("patch_store", "store.begin", f"/{LIVE_POD}", "patch_begin"),
    ("patch_committed", "store.committed", f"/{LIVE_POD}", "patch_store"),
    ("patch_published", "store.published", f"/{LIVE_POD}", "patch_committed"),
    ("patch_event_sent", "apiserver.watch_sent", f"/{LIVE_POD}", "patch_published"),
    ("patch_end", "apiserver.end", f"/{LIVE_POD}/status", "patch_begin"),
    ("patch_answered", "kubelet.status_patched", f"/{LIVE_POD}/status", "patch_sent"),
]
# The rows of the traced table: (from, label, to).
LIVE_TRACE_STEPS = [
    ("sent", "PUT sent → the apiserver's handler", "put_begin"),
    ("put_begin", "→ committed (decode, admission, validation, the store's fsync)",
     "put_committed"),
    ("put_committed", "→ the handler ends", "put_end"),
    ("put_end", "→ answered on the client", "answered"),
    ("put_committed", "committed → the kubelet's live change begins", "live_change"),
    ("put_committed", "committed → the kubelet has the pod's event", "pod_event"),
    ("pod_event", "→ the allocation check begins", "allocation_check"),
    ("allocation_check", "→ checked (the new Secret read), staged", "allocation_staged"),
    ("allocation_staged", "→ the checkpoint written", "allocation_written"),
    ("allocation_staged", "staged → a volume's setup begins", "volume_setup"),
    ("volume_setup", "→ the other's setup begins", "volume_setup_2"),
    ("volume_setup", "→ one volume set up", "volume_set_up_1"),
    ("volume_set_up_1", "→ the other", "volume_set_up_2"),
    ("allocation_written", "written → the pod worker's sync begins", "sync"),
    ("sync", "→ the live change begins", "live_change"),
    ("live_change", "the live change (runtime's records, mount helper) → back on the loop",
     "live_changed"),
    ("live_changed", "→ the status built", "status_build"),
    ("status_build", "→ published to the status manager (generate the status)",
     "status_published"),
    ("status_published", "→ released (the sync ends)", "status_released"),
    ("status_released", "→ the status PATCH sent (the writer's turn, the patch)",
     "patch_sent"),
    ("patch_sent", "→ the apiserver's handler", "patch_begin"),
    ("patch_begin", "→ the store's write begins (decode, merge, validation)", "patch_store"),
    ("patch_store", "→ committed (fsync)", "patch_committed"),
    ("patch_committed", "→ published on the loop", "patch_published"),
    ("patch_published", "→ the first watch event written", "patch_event_sent"),
    ("patch_event_sent", "→ the status on the bench's watch", "running"),
    ("patch_published", "published → the PATCH's handler ends", "patch_end"),
    ("patch_end", "→ the PATCH answered on the kubelet", "patch_answered"),
]
TRACE_NOTE = ("`EPHEMERA_TRACE`: one line per mark, appended by the apiserver, its store and "
              "the kubelet; each step from the mark named first after the one before")
VOLUME_STEPS = [
    ("allocated", "emptyDir dir made, from the checkpoint", "emptydir_ready"),
    ("allocated", "Secret tmpfs mounted, files written, from the checkpoint", "secret_ready"),
]
RECREATE_STEPS = [
    ("sent", ""),
    ("delete_answered", "apiserver: DELETE (→ 200)"),
    ("deleted", "kubelet: stop, final status, teardown (→ DELETED on the watch)"),
    ("create_answered", "apiserver: POST (→ 201)"),
    ("running", "schedule, admit, volumes, sandbox, container (→ Running on the watch)"),
]


def floor_steps(kind: str) -> list[tuple[str, str]]:
    if kind.endswith(LIVE_FLOOR):
        return [("sent", ""), ("detached", "umount2(MNT_DETACH) of both, in the container"),
                ("running", "open_tree, mount_setattr, setns, move_mount of both")]
    return [("sent", ""), ("exited", f"`{kind} kill TERM` → exited (pidfd)"),
            ("deleted", f"`{kind} delete`"),
            ("mounts_ready", "new dir, tmpfs + Secret files, config.json"),
            ("running", f"`{kind} run -d`")]


@dataclass
class Config:
    swaps: int
    warmup: int
    runtime: str
    work_dir: Path
    trace: Path | None = None  # --trace: the components' marks (`ephemera.trace`) go here


@dataclass
class Record:
    """One timed operation: its milestones, wall-clock seconds by name."""

    name: str
    marks: dict[str, float] = field(default_factory=dict)

    def between(self, start: str, end: str) -> float:
        if start in self.marks and end in self.marks:
            return self.marks[end] - self.marks[start]
        return math.nan

    @property
    def total(self) -> float:
        return self.between("sent", "running")


@dataclass
class BackendRun:
    """The measured operations of one backend: `ephemera` (swaps), `recreate`, a floor."""

    backend: str
    records: list[Record] = field(default_factory=list)
    detail: str = ""

    def measurement(self) -> Measurement:
        values = [r.total for r in self.records]
        return Measurement(SWAP if self.backend != RECREATE else "delete + recreate → Running",
                           self.backend, [v for v in values if not math.isnan(v)])

    @property
    def is_floor(self) -> bool:
        return self.backend not in (EPHEMERA, LIVE, RECREATE)


# --- the pods ------------------------------------------------------------------------------


def volume_names(index: int) -> tuple[str, str]:
    return f"scratch-{index}", f"creds-{index}"


def volumes_of(index: int) -> list[dict[str, Any]]:
    scratch, creds = volume_names(index)
    return [{"name": scratch, "emptyDir": {}},
            {"name": creds, "secret": {"secretName": SECRETS[index % len(SECRETS)]}}]


def mounts_of(index: int) -> list[dict[str, Any]]:
    scratch, creds = volume_names(index)
    return [{"name": scratch, "mountPath": SCRATCH_PATH},
            {"name": creds, "mountPath": CREDS_PATH, "readOnly": True}]


def pod_manifest(name: str, index: int, policy: str = "") -> dict[str, Any]:
    """The pod; `policy`: its container's dynamicVolumePolicy.restartPolicy ("": none)."""
    container: dict[str, Any] = {
        "name": CONTAINER, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
        "command": COMMAND, "volumeMounts": mounts_of(index)}
    if policy:
        container["dynamicVolumePolicy"] = {"restartPolicy": policy}
    # No kube-api-access volume: the pod's volumes are the two that are swapped, as in the
    # runs recorded before ServiceAccount admission mounted it by default.
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "bench-dynamic-swap"}},
            "spec": {"terminationGracePeriodSeconds": 2, "containers": [container],
                     "automountServiceAccountToken": False,
                     "volumes": volumes_of(index)}}


def swapped(pod: dict[str, Any], index: int) -> dict[str, Any]:
    """The pod with its volumes and the container's mounts replaced by swap `index`'s."""
    body = copy.deepcopy(pod)
    body.pop("status", None)
    old = {m["name"] for m in body["spec"]["containers"][0].get("volumeMounts") or []}
    body["spec"]["volumes"] = [v for v in body["spec"].get("volumes") or []
                               if v["name"] not in old] + volumes_of(index)
    body["spec"]["containers"][0]["volumeMounts"] = mounts_of(index)
    return body


def pods_path(name: str = "", sub: str = "") -> str:
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def app_status(obj: dict[str, Any]) -> dict[str, Any]:
    for entry in (obj.get("status") or {}).get("containerStatuses") or []:
        if entry.get("name") == CONTAINER:
            return dict(entry)
    return {}


def running_with(obj: dict[str, Any], names: set[str], not_id: str = "",
                 same_id: str = "") -> bool:
    """The app container runs (started), mounts exactly `names`, and is not `not_id` (is
    `same_id` when given)."""
    status = app_status(obj)
    return ("running" in (status.get("state") or {}) and bool(status.get("started"))
            and status.get("containerID", "") != not_id
            and (not same_id or status.get("containerID", "") == same_id)
            and {m.get("name") for m in status.get("volumeMounts") or []} == names)


def settled(obj: dict[str, Any], names: set[str]) -> bool:
    """Running with `names` mounted, and `volumeStatuses` lists exactly those, mounted (the
    old volumes torn down and pruned)."""
    entries = (obj.get("status") or {}).get("volumeStatuses") or []
    return running_with(obj, names) and \
        {e.get("name") for e in entries} == names and \
        all(e.get("hostPhase") == "HostMounted" for e in entries)


def describe(obj: dict[str, Any] | None) -> str:
    if obj is None:
        return "nothing"
    status = app_status(obj)
    return (f"phase {(obj.get('status') or {}).get('phase', '-')}, container "
            f"{','.join(status.get('state') or {}) or '-'} "
            f"{status.get('containerID', '')[-12:]}, mounts "
            f"{[m.get('name') for m in status.get('volumeMounts') or []]}, volumeStatuses "
            f"{(obj.get('status') or {}).get('volumeStatuses')}")


Predicate = Callable[[str, dict[str, Any]], bool]


class Watch:
    """An open watch of the namespace: the latest object of each pod, and waits for the first
    event that satisfies a predicate (its arrival time, as the client saw it)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.latest: dict[str, tuple[str, dict[str, Any], float]] = {}
        self.waiters: list[tuple[str, Predicate, asyncio.Future[tuple[dict[str, Any], float]]]] \
            = []
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

    async def _read(self) -> None:
        assert self.response is not None
        try:
            while line := await self.response.content.readline():
                arrived = now()
                event = orjson.loads(line)
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    raise BenchError(f"the watch failed: {obj}")
                name = str((obj.get("metadata") or {}).get("name"))
                self.latest[name] = (kind, obj, arrived)
                for waiter in list(self.waiters):
                    wanted, predicate, future = waiter
                    if wanted == name and not future.done() and predicate(kind, obj):
                        future.set_result((obj, arrived))
            raise BenchError("the watch was closed by the server")
        except BaseException as error:
            for _, _, future in self.waiters:
                if not future.done():
                    future.set_exception(error if isinstance(error, Exception)
                                         else BenchError("the watch stopped"))
            raise

    def current(self, name: str) -> dict[str, Any]:
        kind, obj, _ = self.latest.get(name, ("", {}, 0.0))
        if kind in ("", "DELETED"):
            raise BenchError(f"pod {name} is not on the watch")
        return obj

    async def wait(self, name: str, predicate: Predicate, what: str
                   ) -> tuple[dict[str, Any], float]:
        """The first object of pod `name` satisfying `predicate` (the latest one already seen
        counts) and when it arrived."""
        if name in self.latest:
            kind, obj, arrived = self.latest[name]
            if predicate(kind, obj):
                return obj, arrived
        future: asyncio.Future[tuple[dict[str, Any], float]] = \
            asyncio.get_running_loop().create_future()
        waiter = (name, predicate, future)
        self.waiters.append(waiter)
        try:
            return await asyncio.wait_for(future, POD_TIMEOUT)
        except TimeoutError:
            seen = self.latest.get(name)
            raise BenchError(f"pod {name}: not {what} within {POD_TIMEOUT:.0f}s (last seen: "
                             f"{describe(seen[1] if seen else None)})") from None
        finally:
            self.waiters.remove(waiter)


async def wait_until_ready(api: Api) -> str:
    """The node Ready, the namespace and its default ServiceAccount and the Secrets there;
    the node's container runtime version."""
    deadline = time.monotonic() + READY_TIMEOUT
    version = ""
    while not version:
        with contextlib.suppress(BenchError):
            node = await api.call("GET", f"/api/v1/nodes/{NODE_NAME}")
            status = node.get("status") or {}
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in status.get("conditions") or []):
                version = status["nodeInfo"]["containerRuntimeVersion"]
                break
        if time.monotonic() > deadline:
            raise BenchError(f"node {NODE_NAME} not Ready within {READY_TIMEOUT:.0f}s")
        await asyncio.sleep(0.1)
    await api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": NAMESPACE}},
                   expect=(201, 409))
    for index, name in enumerate(SECRETS):
        data = {key: value.format(index) for key, value in SECRET_FILES.items()}
        await api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets",
                       {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                        "stringData": data}, expect=(201, 409))
    while True:
        with contextlib.suppress(BenchError):
            await api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")
            return version
        if time.monotonic() > deadline:
            raise BenchError(f"no default ServiceAccount in {NAMESPACE} in time")
        await asyncio.sleep(0.1)


def instance_trapping(kubelet_dir: Path, uid: str, attempt: int) -> None:
    """`wait_until_trapping` for instance `attempt` of a pod's app container."""
    started = kubelet_dir / "pods" / uid / "containers" / CONTAINER / str(attempt) / "started"
    wait_until_trapping(int(read_kv(started)["pid"]))


def ctime(path: Path) -> float:
    """The inode change time of `path` itself (not following a link); NaN when missing."""
    try:
        return os.lstat(path).st_ctime
    except OSError:
        return math.nan


def checkpoint_written(kubelet_dir: Path) -> float:
    """When the allocation checkpoint was last written: the later change time of its two
    slots (a write overwrites one in place); NaN when there is none."""
    times = [ctime(kubelet_dir / "checkpoints" / name)
             for name in (CHECKPOINT_NAME, CHECKPOINT_NAME + ALTERNATE_SUFFIX)]
    known = [t for t in times if not math.isnan(t)]
    return max(known) if known else math.nan


def kubelet_milestones(kubelet_dir: Path, uid: str, index: int, old_attempt: int,
                       new_attempt: int) -> dict[str, float]:
    """The kubelet's side of swap `index` (module docstring); missing files are left out."""
    scratch, creds = volume_names(index)
    volumes = kubelet_dir / "pods" / uid / "volumes"
    containers = kubelet_dir / "pods" / uid / "containers" / CONTAINER
    old, new = containers / str(old_attempt), containers / str(new_attempt)
    found = {
        "allocated": checkpoint_written(kubelet_dir),
        "emptydir_ready": birth_time(volumes / "kubernetes.io~empty-dir" / scratch),
        "secret_ready": ctime(volumes / "kubernetes.io~secret" / creds / "..data"),
        "shim_began": birth_time(new / "shim.log"),
    }
    with contextlib.suppress(OSError, ValueError, KeyError):
        found["old_exited"] = float(read_kv(old / "exit")["finished_at"])
    with contextlib.suppress(OSError, ValueError, KeyError):
        found["container_created"] = float(
            json.loads((new / "container.json").read_text())["created_at"])
    with contextlib.suppress(OSError):
        found["runtime_created"] = (new / "pid").stat().st_mtime
    with contextlib.suppress(OSError, ValueError, KeyError):
        found["started"] = float(read_kv(new / "started")["started_at"])
    ready = [found["emptydir_ready"], found["secret_ready"]]
    if not any(math.isnan(t) for t in ready):
        found["volumes_ready"] = max(ready)
    return {name: value for name, value in found.items() if not math.isnan(value)}


def live_milestones(kubelet_dir: Path, uid: str, index: int) -> dict[str, float]:
    """The kubelet's side of live swap `index`: the checkpoint, the new volumes, and the
    runtime's record of the container's mounts (rewritten after each live change: its
    mtime is the last one's end)."""
    scratch, creds = volume_names(index)
    volumes = kubelet_dir / "pods" / uid / "volumes"
    found = {
        "allocated": checkpoint_written(kubelet_dir),
        "emptydir_ready": birth_time(volumes / "kubernetes.io~empty-dir" / scratch),
        "secret_ready": ctime(volumes / "kubernetes.io~secret" / creds / "..data"),
    }
    with contextlib.suppress(OSError):
        found["attached"] = (kubelet_dir / "pods" / uid / "containers" / CONTAINER / "0" /
                             "container.json").stat().st_mtime
    ready = [found["emptydir_ready"], found["secret_ready"]]
    if not any(math.isnan(t) for t in ready):
        found["volumes_ready"] = max(ready)
    return {name: value for name, value in found.items() if not math.isnan(value)}


class TraceReader:
    """The lines `ephemera.trace` appends to the trace file, read as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[tuple[float, str, str]]:
        """The lines since the last read, as (time, event, key)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        lines = []
        for raw in data[:end].decode(errors="replace").splitlines():
            parts = raw.split(" ", 3)
            if len(parts) == 4:
                lines.append((float(parts[0]), parts[2], parts[3]))
        return lines


def trace_marks(lines: Sequence[tuple[float, str, str]], marks: Mapping[str, float],
                spec: Sequence[tuple[str, str, str, str]]) -> dict[str, float]:
    """The marks of `spec` found in `lines` (each the first line of its event whose key ends
    with or contains the given text, at or after the mark it follows: after its line, when
    that mark is a line too, so that one event can be followed by its next line)."""
    found: dict[str, float] = {}
    line_of: dict[str, int] = {}
    for name, event, key, after in spec:
        since = found.get(after, marks.get(after))
        if since is None:
            continue
        for i in range(line_of.get(after, -1) + 1, len(lines)):
            at, ev, k = lines[i]
            if ev == event and at >= since and (key in k or not key):
                found[name] = at
                line_of[name] = i
                break
    return found


def check_live_secret(kubelet_dir: Path, uid: str, index: int) -> None:
    """A file of swap `index`'s Secret, read inside the live container (through its init's
    root, so through its mount namespace), has the Secret's content."""
    started = kubelet_dir / "pods" / uid / "containers" / CONTAINER / "0" / "started"
    pid = int(read_kv(started)["pid"])
    token = Path(f"/proc/{pid}/root{CREDS_PATH}/token")
    want = SECRET_FILES["token"].format(index % len(SECRETS))
    got = token.read_text() if token.exists() else None
    if got != want:
        raise BenchError(f"live swap {index}: {CREDS_PATH}/token in the container reads "
                         f"{got!r}, not {want!r}")


class Rounds:
    """The swap pod and the recreated pod on one cluster, one round at a time."""

    def __init__(self, api: Api, watch: Watch, kubelet_dir: Path,
                 trace: TraceReader | None = None) -> None:
        self.api = api
        self.trace = trace
        self.watch = watch
        self.kubelet_dir = kubelet_dir
        self.index = 0  # the volumes the swap pod and the recreated pod have now
        self.live_index = 0  # the volumes the live swap pod has now
        self.uid = ""
        self.live_uid = ""

    async def start(self) -> None:
        for name, policy in ((SWAP_POD, "RestartContainer"), (LIVE_POD, "NotRequired"),
                             (RECREATE_POD, "")):
            created = await self.api.call("POST", pods_path(), pod_manifest(name, 0, policy),
                                          expect=(201,))
            if name == SWAP_POD:
                self.uid = str(created["metadata"]["uid"])
            elif name == LIVE_POD:
                self.live_uid = str(created["metadata"]["uid"])
        names = set(volume_names(0))
        for name in (SWAP_POD, LIVE_POD, RECREATE_POD):
            await self.watch.wait(name, lambda _, o: settled(o, names), "running")
        await asyncio.to_thread(instance_trapping, self.kubelet_dir, self.uid, 0)

    async def swap(self) -> Record:
        index = self.index + 1
        names = set(volume_names(index))
        old_names = set(volume_names(self.index))
        pod, _ = await self.watch.wait(SWAP_POD, lambda _, o: settled(o, old_names),
                                       "settled before the swap")
        old_status = app_status(pod)
        old_id = str(old_status.get("containerID", ""))
        old_attempt = int(old_status.get("restartCount") or 0)
        body = swapped(pod, index)
        record = Record(f"swap-{index}")
        record.marks["sent"] = now()
        await self.api.call("PUT", pods_path(SWAP_POD, "dynamic"), body)
        record.marks["answered"] = now()
        after, record.marks["running"] = await self.watch.wait(
            SWAP_POD, lambda _, o: running_with(o, names, not_id=old_id),
            "running with the new mounts")
        new_attempt = int(app_status(after).get("restartCount") or 0)
        record.marks.update(await asyncio.to_thread(
            kubelet_milestones, self.kubelet_dir, self.uid, index, old_attempt, new_attempt))
        await asyncio.to_thread(instance_trapping, self.kubelet_dir, self.uid, new_attempt)
        await self.watch.wait(SWAP_POD, lambda _, o: settled(o, names),
                              "settled after the swap")
        self.index = index
        return record

    async def live_swap(self) -> Record:
        """Swap the live pod's volumes (restartPolicy NotRequired): timed until the watch
        shows the same container with the new mounts; then, untimed, a file of the new
        Secret is read through the container's root and the old volumes are waited out."""
        index = self.live_index + 1
        names = set(volume_names(index))
        old_names = set(volume_names(self.live_index))
        pod, _ = await self.watch.wait(LIVE_POD, lambda _, o: settled(o, old_names),
                                       "settled before the live swap")
        container_id = str(app_status(pod).get("containerID", ""))
        body = swapped(pod, index)
        record = Record(f"live-{index}")
        record.marks["sent"] = now()
        await self.api.call("PUT", pods_path(LIVE_POD, "dynamic"), body)
        record.marks["answered"] = now()
        _, record.marks["running"] = await self.watch.wait(
            LIVE_POD, lambda _, o: running_with(o, names, same_id=container_id),
            "the same container with the new mounts")
        record.marks.update(await asyncio.to_thread(
            live_milestones, self.kubelet_dir, self.live_uid, index))
        if self.trace is not None:
            lines = await asyncio.to_thread(self.trace.read)
            lines = [(at, ev, key.replace(self.live_uid, LIVE_POD)) for at, ev, key in lines]
            record.marks.update(trace_marks(lines, record.marks, LIVE_TRACE_MARKS))
        await asyncio.to_thread(check_live_secret, self.kubelet_dir, self.live_uid, index)
        await self.watch.wait(LIVE_POD, lambda _, o: settled(o, names),
                              "settled after the live swap")
        self.live_index = index
        return record

    async def recreate(self) -> Record:
        """Delete the equivalent pod and create it again with the volumes of `self.index`."""
        names = set(volume_names(self.index))
        record = Record(f"recreate-{self.index}")
        pod, _ = await self.watch.wait(RECREATE_POD, lambda kind, o: kind != "DELETED" and bool(
            app_status(o).get("started")), "running before the recreation")
        await asyncio.to_thread(instance_trapping, self.kubelet_dir,
                                str(pod["metadata"]["uid"]), 0)
        marks = record.marks
        marks["sent"] = now()
        await self.api.call("DELETE", pods_path(RECREATE_POD), expect=(200, 202))
        marks["delete_answered"] = now()
        _, marks["deleted"] = await self.watch.wait(
            RECREATE_POD, lambda kind, _: kind == "DELETED", "gone")
        await self.api.call("POST", pods_path(),
                            pod_manifest(RECREATE_POD, self.index), expect=(201,))
        marks["create_answered"] = now()
        _, marks["running"] = await self.watch.wait(
            RECREATE_POD, lambda kind, o: kind != "DELETED" and running_with(o, names),
            "Running again")
        return record

    async def stop(self) -> None:
        for name in (SWAP_POD, LIVE_POD, RECREATE_POD):
            with contextlib.suppress(BenchError):
                await self.api.call("DELETE", pods_path(name), expect=(200, 202))
        for name in (SWAP_POD, LIVE_POD, RECREATE_POD):
            await self.watch.wait(name, lambda kind, _: kind == "DELETED", "gone")


async def bench_ephemera(cfg: Config, up: EphemeraUp
                         ) -> tuple[BackendRun, BackendRun, BackendRun, Template]:
    """Warm-up and measured rounds on a started cluster: the swaps, the live swaps, the
    recreations, and the floor's template (the swap pod's first container)."""
    api = Api(up)
    try:
        with progress(f"waiting for node {NODE_NAME} to be Ready"):
            version = await wait_until_ready(api)
        swaps, recreations = BackendRun(EPHEMERA, detail=version), BackendRun(RECREATE)
        lives = BackendRun(LIVE, detail=version)
        watch = Watch(api)
        await watch.open()
        try:
            rounds = Rounds(api, watch, up.kubelet_dir,
                            TraceReader(cfg.trace) if cfg.trace is not None else None)
            with progress("starting the swap pod and the pod to recreate"):
                await rounds.start()
                template = await asyncio.to_thread(
                    capture_template, up.kubelet_dir, rounds.uid,
                    cfg.work_dir / "floor" / "binds")
            with progress(f"[{EPHEMERA}] warm-up ({cfg.warmup} swaps, live swaps and "
                          "recreations)"):
                for _ in range(cfg.warmup):
                    await rounds.swap()
                    await rounds.live_swap()
                    await rounds.recreate()
            with progress(f"[{EPHEMERA}] {cfg.swaps} swaps, live swaps and recreations, "
                          f"interleaved ({version})"):
                for _ in range(cfg.swaps):
                    swaps.records.append(await rounds.swap())
                    lives.records.append(await rounds.live_swap())
                    recreations.records.append(await rounds.recreate())
            with progress("deleting the pods"):
                await rounds.stop()
        finally:
            await watch.close()
    finally:
        await api.close()
    return swaps, lives, recreations, template


# --- the floor -----------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def mount_tmpfs(target: Path) -> None:
    if _libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", 0, b"mode=0755") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {target}: {os.strerror(err)}")


class SwapFloor(Floor):
    """A bare runc or crun restarting one container of the template's bundle with new
    mounts (module docstring)."""

    def __init__(self, kind: str, root: Path, template: Template) -> None:
        super().__init__(kind, root, template)
        self.container_id = f"bench-swap-{kind}-{os.getpid()}"
        self.bundle = root / "bundles" / self.container_id
        self.volumes = root / "volumes" / kind
        self.log_path = root / f"{self.container_id}.log"
        self.index = 0
        self.running = False

    def _write_config(self, index: int) -> None:
        spec = self._spec(self.container_id, self.bundle)
        sources = {SCRATCH_PATH: self.volumes / f"scratch-{index}",
                   CREDS_PATH: self.volumes / f"creds-{index}"}
        for mount in spec.get("mounts") or []:
            if mount.get("destination") in sources:
                mount["source"] = str(sources[mount["destination"]])
        (self.bundle / "config.json").write_text(json.dumps(spec))

    def _make_volumes(self, index: int) -> None:
        (self.volumes / f"scratch-{index}").mkdir(parents=True)
        creds = self.volumes / f"creds-{index}"
        creds.mkdir()
        mount_tmpfs(creds)
        for key, value in SECRET_FILES.items():
            (creds / key).write_text(value.format(index % len(SECRETS)))

    def _drop_volumes(self, index: int) -> None:
        unmount(self.volumes / f"creds-{index}")
        shutil.rmtree(self.volumes / f"creds-{index}", ignore_errors=True)
        shutil.rmtree(self.volumes / f"scratch-{index}", ignore_errors=True)

    def _run_detached(self) -> None:
        # Never a pipe to a detaching runtime: the container inherits its stdio.
        with open(self.bundle / "container.log", "ab") as out:
            result = subprocess.run(
                [self.binary, *self.global_args, "--log", str(self.bundle / "runtime.log"),
                 "run", "-d", "--pid-file", str(self.bundle / "pid"), "--bundle",
                 str(self.bundle), self.container_id],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, check=False,
                preexec_fn=hide_cgroup2 if self.hybrid else None)
        if result.returncode != 0:
            raise BenchError(f"{self.kind} run -d exited {result.returncode}: "
                             f"{(self.bundle / 'runtime.log').read_text(errors='replace')[-500:]}")
        self.running = True

    def begin(self) -> None:
        """The bundle and the first container (untimed)."""
        for sub in ("upper", "work", "merged"):
            (self.bundle / sub).mkdir(parents=True)
        mount_overlay(self.template.layers, self.bundle)
        for point in ("proc", "dev", "sys"):  # crun wants them in the rootfs
            with contextlib.suppress(FileExistsError):
                (self.bundle / "merged" / point).mkdir()
        self._make_volumes(0)
        self._write_config(0)
        self._run_detached()
        wait_until_trapping(int((self.bundle / "pid").read_text()))

    def swap(self) -> Record:
        index = self.index + 1
        record = Record(f"{self.kind}-swap-{index}")
        marks = record.marks
        pidfd = os.pidfd_open(int((self.bundle / "pid").read_text()))
        try:
            marks["sent"] = now()
            self._run("kill", self.container_id, "TERM", log_path=self.log_path)
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            if not poller.poll(EXIT_TIMEOUT * 1000):
                raise BenchError(f"{self.container_id} did not exit on SIGTERM")
            marks["exited"] = now()
        finally:
            os.close(pidfd)
        self._run("delete", self.container_id, log_path=self.log_path)
        self.running = False
        marks["deleted"] = now()
        self._make_volumes(index)
        self._write_config(index)
        marks["mounts_ready"] = now()
        self._run_detached()
        marks["running"] = now()
        self._drop_volumes(self.index)  # untimed, as ephemera's teardown after a swap
        wait_until_trapping(int((self.bundle / "pid").read_text()))
        self.index = index
        return record

    def live_swap(self) -> Record:
        """The live floor: the bare mount sequence replacing the two mounts of the running
        container (`ephemera.kubelet.runtime.livemount`, the calls the kubelet's runtime
        makes). The new volumes are made before, untimed; the old ones dropped after."""
        index = self.index + 1
        self._make_volumes(index)
        record = Record(f"{self.kind}-live-{index}")
        marks = record.marks
        pidfd = os.pidfd_open(int((self.bundle / "pid").read_text()))
        try:
            marks["sent"] = now()
            for path in (SCRATCH_PATH, CREDS_PATH):
                livemount.unmount_from(pidfd, CONTAINER, path)
            marks["detached"] = now()
            livemount.mount_into(pidfd, CONTAINER, str(self.volumes / f"scratch-{index}"),
                                 SCRATCH_PATH, False)
            livemount.mount_into(pidfd, CONTAINER, str(self.volumes / f"creds-{index}"),
                                 CREDS_PATH, True)
            marks["running"] = now()
        finally:
            os.close(pidfd)
        self._drop_volumes(self.index)
        self.index = index
        return record

    def end(self) -> None:
        if self.running:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                subprocess.run([self.binary, *self.global_args, "delete", "--force",
                                self.container_id], capture_output=True, timeout=60,
                               check=False)
            self.running = False
        for point in mounts_under(self.volumes) + mounts_under(self.bundle):
            with contextlib.suppress(OSError):
                unmount(point)
        shutil.rmtree(self.bundle, ignore_errors=True)
        shutil.rmtree(self.volumes, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)
        self.close()


def bench_floor(kind: str, cfg: Config, template: Template) -> tuple[BackendRun, BackendRun]:
    """The restart floor and the live floor of one runtime, on one container."""
    floor = SwapFloor(kind, cfg.work_dir / "floor", template)
    run, live = BackendRun(kind), BackendRun(kind + LIVE_FLOOR)
    try:
        with progress(f"[{kind}] warm-up ({cfg.warmup} swaps)"):
            floor.begin()
            for _ in range(cfg.warmup):
                floor.swap()
        with progress(f"[{kind}] kill, delete, new mounts, run -d ({cfg.swaps} swaps)"):
            for _ in range(cfg.swaps):
                run.records.append(floor.swap())
        with progress(f"[{kind}] live: umount2, open_tree, setns, move_mount ({cfg.swaps} "
                      "swaps)"):
            for _ in range(cfg.warmup):
                floor.live_swap()
            for _ in range(cfg.swaps):
                live.records.append(floor.live_swap())
    finally:
        floor.end()
    return run, live


# --- report --------------------------------------------------------------------------------

STEP_HEADERS = ["step", "n", "p50 ms", "p95 ms", "p99 ms", "of the total's p50"]


def step_rows(run: BackendRun, steps: Sequence[tuple[str, str]]) -> list[list[str]]:
    """A row per step (p50, p95, p99, the p50's share of the total's) and the total."""
    total = run.measurement()
    rows = []
    for (start, _), (end, label) in itertools.pairwise(steps):
        values = [v for r in run.records if not math.isnan(v := r.between(start, end))]
        rows.append(step_row(label, values, total.median))
    rows.append(step_row("total", total.latencies, total.median))
    return rows


def step_row(label: str, values: Sequence[float], total_median: float) -> list[str]:
    median = percentile(values, 50)
    share = ratio(median, total_median) * 100
    return [label, str(len(values)), format_ms(median), format_ms(percentile(values, 95)),
            format_ms(percentile(values, 99)), "-" if math.isnan(share) else f"{share:.0f}%"]


def results_table(runs: Sequence[BackendRun]) -> str:
    what = {EPHEMERA: "PUT /dynamic → restarted container running with the new mounts",
            LIVE: "PUT /dynamic → the same container with the new mounts (NotRequired)",
            RECREATE: "DELETE → DELETED, POST → Running (same pod, new volumes)"}
    rows = []
    for run in runs:
        m = run.measurement()
        if run.backend.endswith(LIVE_FLOOR):
            note = "umount2 of both in the container, open_tree + setns + move_mount of both"
        else:
            note = what.get(run.backend) or (
                f"`{run.backend} kill`, exit, `delete`, new dir + tmpfs, config.json, "
                f"`{run.backend} run -d`")
        rows.append([run.backend, str(m.count), format_ms(m.median),
                     format_ms(percentile(m.latencies, 95)), format_ms(m.p99), note])
    return markdown_table(["backend", "n", "p50 ms", "p95 ms", "p99 ms", "what"], rows,
                          align="lrrrrl")


def ratio_values(runs: Sequence[BackendRun]) -> dict[str, dict[str, float]]:
    """{"<a> ÷ <b>": {"p50": x, "p95": y, "p99": z}}: recreation's latency over the swap's
    and the live swap's ("recreate ÷ swap", "recreate ÷ live"), the swap's over the live
    swap's, the swap's over each restart floor's ("swap ÷ runc") and the live swap's over
    each live floor's ("live ÷ crun live")."""
    by_backend = {run.backend: run.measurement().latencies for run in runs}
    pairs: list[tuple[str, str, str]] = [(f"{RECREATE} ÷ swap", RECREATE, EPHEMERA)]
    if LIVE in by_backend:
        pairs += [(f"{RECREATE} ÷ {LIVE}", RECREATE, LIVE), (f"swap ÷ {LIVE}", EPHEMERA, LIVE)]
    for run in runs:
        if run.is_floor:
            mine = LIVE if run.backend.endswith(LIVE_FLOOR) else EPHEMERA
            if mine in by_backend:
                pairs.append((f"{'swap' if mine == EPHEMERA else LIVE} ÷ {run.backend}", mine,
                              run.backend))
    return {label: {f"p{q}": ratio(percentile(by_backend[a], q), percentile(by_backend[b], q))
                    for q in (50, 95, 99)}
            for label, a, b in pairs}


def ratios_table(runs: Sequence[BackendRun]) -> str:
    rows = [[label, *(format_number(v[q]) for q in ("p50", "p95", "p99"))]
            for label, v in ratio_values(runs).items()]
    return markdown_table(["ratio", "p50", "p95", "p99"], rows)


def targets(runs: Sequence[BackendRun], ephemera_runtime: str) -> list[str]:
    """The issue's targets, met or not: the live swap's p50 at most 25 ms and at least 10x
    faster than recreation; the restart swap's p50 within 2.5x of the floor (the runtime
    ephemera ran on)."""
    values = ratio_values(runs)
    lines = []
    live = next((run for run in runs if run.backend == LIVE), None)
    if live is not None:
        got = live.measurement().median * 1e3
        lines.append(f"- live swap p50 at most {TARGET_LIVE_MS:g} ms: {format_ms(got / 1e3)} "
                     f"ms — {'met' if got <= TARGET_LIVE_MS else 'not met'}")
        got = values[f"{RECREATE} ÷ {LIVE}"]["p50"]
        lines.append(f"- live swap p50 at least {TARGET_RECREATE_RATIO:g}x faster than "
                     f"recreation: {format_number(got)}x — "
                     f"{'met' if got >= TARGET_RECREATE_RATIO else 'not met'}")
    floor = f"swap ÷ {ephemera_runtime}"
    if floor in values:
        got = values[floor]["p50"]
        lines.append(f"- restart swap p50 within {TARGET_FLOOR_RATIO:g}x of the floor "
                     f"({ephemera_runtime}, the runtime ephemera ran on): "
                     f"{format_number(got)}x — "
                     f"{'met' if got <= TARGET_FLOOR_RATIO else 'not met'}")
    return lines


def report(runs: Sequence[BackendRun], cfg: Config, machine: dict[str, str], command: str,
           started: datetime.datetime, notes: Sequence[str], left: Sequence[str]) -> str:
    ours = next(run for run in runs if run.backend == EPHEMERA)
    lives = next(run for run in runs if run.backend == LIVE)
    recreations = next(run for run in runs if run.backend == RECREATE)
    floors = [run for run in runs if run.is_floor]
    ephemera_runtime = ours.detail.split(":", 1)[0]
    lines = [
        f"# bench.dynamic_swap: {cfg.swaps} swaps of an emptyDir and a Secret volume, ephemera "
        f"on {ours.detail or cfg.runtime} (--runtime {cfg.runtime}), restarting and live, "
        f"against recreation and the floors "
        f"{', '.join(run.backend for run in floors) or 'none'}",
        "",
        f"Command: `{command}`  ",
        f"Started: {started.isoformat(timespec='seconds')}  ",
        *(f"{name.capitalize()}: {value}  " for name, value in machine.items()),
        f"Warm-up: {cfg.warmup} swaps, recreations and floor swaps, not counted  ",
        *(f"Floor left out: {note}  " for note in notes),
        "Left behind: " + ("nothing (no mount, runtime state or cgroup of the run)"
                           if not left else f"{'; '.join(left)} (cleaned up afterwards)"),
        "",
        "## Results",
        "",
        results_table(runs),
        "",
        "## Ratios",
        "",
        "`swap ÷ floor`: the swap's latency over the bare runtime's (above 1: the swap is "
        "slower); `live ÷ <runtime> live`: the live swap's over the bare mount sequence's; "
        "`recreate ÷ swap`, `recreate ÷ live`: how many times faster the swap is than "
        "recreating the pod.",
        "",
        ratios_table(runs),
        "",
        "## Targets",
        "",
        *targets(runs, ephemera_runtime),
        "",
        "## Where the time goes: ephemera, swap",
        "",
        "Each step ends at a milestone: on the client, or in the kubelet's files (wall clock, "
        "one host). Per swap, the time from the previous milestone; the p50s need not add up "
        "to the total's.",
        "",
        markdown_table(STEP_HEADERS, step_rows(ours, SWAP_STEPS)),
        "",
        "The two volumes, set up side by side:",
        "",
        markdown_table(STEP_HEADERS, [
            step_row(label, [v for r in ours.records
                             if not math.isnan(v := r.between(start, end))],
                     ours.measurement().median)
            for start, label, end in VOLUME_STEPS]),
        "",
        "## Where the time goes: ephemera, live swap",
        "",
        markdown_table(STEP_HEADERS, step_rows(lives, LIVE_STEPS)),
        "",
        *([f"With `--trace`: the components' marks ({TRACE_NOTE}).", "",
           markdown_table(STEP_HEADERS, [
               step_row(label, [v for r in lives.records
                                if not math.isnan(v := r.between(start, end))],
                        lives.measurement().median)
               for start, label, end in LIVE_TRACE_STEPS]), ""]
          if any("put_begin" in r.marks for r in lives.records) else []),
        "## Where the time goes: recreation",
        "",
        markdown_table(STEP_HEADERS, step_rows(recreations, RECREATE_STEPS)),
    ]
    for floor in floors:
        lines += ["", f"## Where the time goes: {floor.backend}", "",
                  markdown_table(STEP_HEADERS, step_rows(floor, floor_steps(floor.backend)))]
    return "\n".join(lines) + "\n"


def as_json(runs: Sequence[BackendRun], cfg: Config, machine: dict[str, str], command: str,
            started: datetime.datetime, left: Sequence[str]) -> dict[str, Any]:
    def finite(value: float) -> float | None:
        return None if math.isnan(value) else value

    return {
        "command": command,
        "started": started.isoformat(timespec="seconds"),
        "config": {"swaps": cfg.swaps, "warmup": cfg.warmup, "runtime": cfg.runtime},
        "machine": machine,
        "runtime": runs[0].detail,
        "left_behind": list(left),
        "results": [{**run.measurement().as_dict(),
                     "p95_ms": percentile(run.measurement().latencies, 95) * 1e3}
                    for run in runs],
        "ratios": {label: {q: finite(v) for q, v in values.items()}
                   for label, values in ratio_values(runs).items()},
        "records": {run.backend: [{"name": r.name, "marks": r.marks} for r in run.records]
                    for run in runs},
    }


# --- main ----------------------------------------------------------------------------------


def run_all(cfg: Config) -> tuple[list[BackendRun], list[str], list[str]]:
    """Every backend in one run: (runs, floor notes, what was left behind)."""
    up = EphemeraUp(cfg.work_dir / "data", ["--runtime", cfg.runtime, "--node-name", NODE_NAME])
    runs: list[BackendRun] = []
    notes: list[str] = []
    try:
        with progress(f"starting ephemera up (--runtime {cfg.runtime})"):
            if cfg.trace is not None:  # its processes inherit the environment
                os.environ[trace.ENV] = str(cfg.trace)
            try:
                up.start()
            finally:
                os.environ.pop(trace.ENV, None)
        try:
            swaps, lives, recreations, template = asyncio.run(bench_ephemera(cfg, up))
        except BaseException:
            log(f"ephemera up logs (tail):\n{up.log_tail()}")
            raise
        finally:
            with progress("stopping ephemera up"):
                up.stop()
        runs += [swaps, lives, recreations]
        kinds, notes = floor_kinds(cfg.work_dir)
        live_floors = []
        for kind in kinds:
            restart_floor, live_floor = bench_floor(kind, cfg, template)
            runs.append(restart_floor)
            live_floors.append(live_floor)
        runs += live_floors
    finally:
        up.stop()
        with progress("checking that nothing is left behind"):
            left = clean_leftovers(cfg.work_dir, up)
        for item in left:
            log(f"left behind (now removed): {item}")
    return runs, notes, left


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.dynamic_swap",
        description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--swaps", type=int, default=None, metavar="N",
                        help=f"measured swaps (and recreations, and floor swaps; default "
                             f"{DEFAULT_SWAPS}; {QUICK_SWAPS} with --quick)")
    parser.add_argument("--quick", action="store_true", help=f"a short run: {QUICK_SWAPS}")
    parser.add_argument("--runtime", choices=RUNTIMES, default="auto",
                        help="ephemera's runtime (`ephemera up --runtime`; default auto); the "
                             "floors are always runc and crun")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, metavar="W",
                        help=f"rounds before the measured ones (default {DEFAULT_WARMUP})")
    parser.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                        help="where the data dirs go (default: a temporary dir, removed)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the results (every operation's milestones) as JSON")
    parser.add_argument("--trace", action="store_true",
                        help="the apiserver, its store and the kubelet mark each step of the "
                             "live swap (`EPHEMERA_TRACE`, off by default; a write per mark), "
                             "and the report shows them")
    args = parser.parse_args(argv)
    if args.swaps is None:
        args.swaps = QUICK_SWAPS if args.quick else DEFAULT_SWAPS
    if args.swaps < 1:
        parser.error("--swaps must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def run(work_dir: Path, command: str) -> tuple[str, dict[str, Any]]:
        cfg = Config(swaps=args.swaps, warmup=args.warmup, runtime=args.runtime,
                     work_dir=work_dir, trace=work_dir / "trace.log" if args.trace else None)
        started = datetime.datetime.now(datetime.UTC)
        machine = machine_description(cfg.work_dir)
        runs, notes, left = run_all(cfg)
        return (report(runs, cfg, machine, command, started, notes, left),
                as_json(runs, cfg, machine, command, started, left))

    return run_bench("bench.dynamic_swap", argv, args,
                     "it runs containers and mounts", "ephemera-bench-swap-", run)


if __name__ == "__main__":
    sys.exit(main())

"""Where one API write's time goes on the live swap's path (`python -m bench.write_path`): a
real `ephemera apiserver` process (SQLite, TLS, Node and RBAC authorization, every admission
plugin, the watch cache) and, over loopback, the two writes of a live dynamic-volume swap on one
pod, in a loop:

1. the user's PUT `pods/NAME/dynamic` replacing one emptyDir and one Secret volume of a
   `NotRequired` container (as an administrator), until its MODIFIED event reaches a watch of
   the namespace;
2. the kubelet's merge PATCH of `pods/NAME/status` (as `system:node:NODE`, with the new
   `volumeMounts` and `volumeStatuses`), until its event reaches the same watch.

Three watches are open during the run, as in a cluster: the namespace's pods (the
benchmark's, which is timed), the node's pods (`spec.nodeName=NODE`, the kubelet's) and the
node itself (`metadata.name=NODE`, the kubelet's too: it keeps the apiserver's watch cache of
nodes serving, which admission reads as upstream's node lister). No kubelet runs: the status
is what the kubelet would write, so the apiserver's side of both writes is measured alone.

`--py-spy FILE` samples the apiserver with py-spy during the timed loop (collapsed stacks to
FILE, a summary of the hottest frames printed). Times are medians over `--iterations` after
`--warmup`; the apiserver's CPU time per iteration is printed too.

`--count` counts work instead, which a loaded machine does not blur: the same requests
against the app in this process (plain HTTP on loopback, bearer tokens for the same two
users), under cProfile: Python function calls and store reads per iteration.
`--top-functions N` prints ephemera's N hottest functions (by own and by cumulative time),
`--profile FILE` dumps the cProfile stats for `python -m pstats FILE` or snakeviz.
`--count --plain` runs the same loop without the profiler (the loop thread's CPU per
iteration). Instructions per iteration, which load does not blur: run
`PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no python -m bench.write_path
--count --plain --callgrind` at two `--iterations` (instrumentation is on during the timed
loop only, every thread of the process counted); the difference of the `Collected` counts
over the difference of the iterations.

`--path create` loops the scale path's writes instead (issue #17), one new pod per
iteration: the pod's create (POST, as an administrator; a ReplicaSet's pod: labels, an
owner reference, requests), its binding (POST `pods/NAME/binding` with the pod's UID, as
the scheduler's), the kubelet's status PATCH from Pending to Running (as
`system:node:NODE`: conditions, container status, IPs) and an Event about it (POST, as the
kubelet), each until its event reaches the namespace's watch (the Event, which no watch
follows, until its answer); the same three watches are open, so the binding and the status
reach the node's watch too. Every mode and measure above applies to it.

`--path lease` loops the kubelet's heartbeat instead (issue #17): as `system:node:NODE`, a
PUT of the `kube-node-lease/NODE` Lease the previous PUT returned, `renewTime` changed (what
upstream's node lease controller and ephemera's kubelet and hollow nodes send), until its
event reaches a watch of the Leases (the node lifecycle controller's informer; the three
watches above are open too). `--path lease-patch` sends the merge PATCH of `spec` the
kubelet sent before it kept the Lease. Every mode and measure above applies to both.
`--path event` loops the kubelet's POST of a new Event about the pod (four a pod on the
scale path), answered with no watch to wait for.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.common import (
    Apiserver,
    client_ssl_context,
    collapsed_stacks_summary,
    process_cpu_seconds,
    py_spy_record,
)
from ephemera.apiserver.certs import ensure_pki, write_client_kubeconfig

NAMESPACE = "bench-write-path"
NODE = "n1"
POD = "live-swapper"
CONTAINER = "app"
SECRETS = ("creds-0", "creds-1")
FEATURES = ["DynamicContainers", "DynamicNodeLocalEphemeralVolumes", "DynamicVolumeHotPlug"]


def volumes_of(index: int) -> list[dict[str, Any]]:
    return [{"name": f"scratch-{index}", "emptyDir": {}},
            {"name": f"creds-{index}", "secret": {"secretName": SECRETS[index % 2]}}]


def mounts_of(index: int) -> list[dict[str, Any]]:
    return [{"name": f"scratch-{index}", "mountPath": "/scratch"},
            {"name": f"creds-{index}", "mountPath": "/creds", "readOnly": True}]


def pod_manifest() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": POD, "labels": {"app": "bench"}},
            "spec": {"nodeName": NODE, "automountServiceAccountToken": False,
                     "containers": [{"name": CONTAINER, "image": "busybox:latest",
                                     "command": ["sleep", "3600"],
                                     "dynamicVolumePolicy": {"restartPolicy": "NotRequired"},
                                     "volumeMounts": mounts_of(0)}],
                     "volumes": volumes_of(0)}}


def running_status(index: int, previous: int | None) -> dict[str, Any]:
    """What the kubelet writes once swap `index` is mounted (`previous`'s volumes
    unmounting)."""
    volumes = [{"name": v["name"], "hostPhase": "HostMounted"} for v in volumes_of(index)]
    if previous is not None:
        volumes += [{"name": v["name"], "hostPhase": "Unmounting"}
                    for v in volumes_of(previous)]
    return {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{
                "name": CONTAINER, "ready": True, "restartCount": 0, "started": True,
                "image": "busybox:latest", "imageID": "", "containerID": "crun://abc",
                "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}},
                "volumeMounts": mounts_of(index)}],
            "volumeStatuses": volumes}


class Client:
    def __init__(self, url: str, context: ssl.SSLContext | None, token: str = "") -> None:
        self.url = url
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context if context is not None else False),
            headers={"Authorization": f"Bearer {token}"} if token else None)

    async def call(self, method: str, path: str, body: Any = None,
                   content_type: str = "application/json") -> dict[str, Any]:
        data = orjson.dumps(body) if body is not None else None
        async with self.session.request(method, self.url + path, data=data,
                                        headers={"Content-Type": content_type}) as response:
            payload = await response.read()
            if response.status >= 300:
                raise RuntimeError(f"{method} {path}: {response.status} {payload[:500]!r}")
            return dict(orjson.loads(payload))


class Watch:
    """A watch; `wait(rv)` returns when the event of resourceVersion `rv` has arrived."""

    def __init__(self, client: Client, path: str) -> None:
        self.client = client
        self.path = path
        self.seen: dict[str, float] = {}
        self.bound: dict[str, float] = {}  # pod name -> when its event with a node came
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def open(self, version: str) -> None:
        response = await self.client.session.get(
            self.client.url + self.path,
            params={"watch": "true", "resourceVersion": version, "timeoutSeconds": "3600"})
        assert response.status == 200, await response.text()
        self.task = asyncio.get_running_loop().create_task(self._read(response))

    async def _read(self, response: aiohttp.ClientResponse) -> None:
        while line := await response.content.readline():
            event = orjson.loads(line)
            now = time.perf_counter()
            obj = event["object"]
            self.seen[obj["metadata"]["resourceVersion"]] = now
            if (obj.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(obj["metadata"]["name"], now)
            self.changed.set()

    async def wait(self, version: str) -> float:
        while version not in self.seen:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 30)
        return self.seen[version]

    async def wait_bound(self, name: str) -> float:
        while name not in self.bound:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 30)
        return self.bound[name]

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


async def setup(admin: Client, node: Client) -> dict[str, Any]:
    await admin.call("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
        "status": {"declaredFeatures": FEATURES}})
    await node.call("PATCH", f"/api/v1/nodes/{NODE}/status",
                    {"status": {"declaredFeatures": FEATURES}}, "application/merge-patch+json")
    await admin.call("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for name in SECRETS:
        await admin.call("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "stringData": {"token": name}})
    created = await admin.call("POST", PODS, pod_manifest())
    uid = created["metadata"]["uid"]
    return await node.call("PATCH", f"{PODS}/{POD}/status",
                           {"metadata": {"uid": uid}, "status": running_status(0, None)},
                           "application/merge-patch+json")


def scale_pod(index: int) -> dict[str, Any]:
    """A ReplicaSet's pod, as the scale benchmark creates them (unscheduled)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"scale-{index}",
                         "labels": {"app": "scale", "pod-template-hash": "5d8f9c7b6"},
                         "ownerReferences": [{
                             "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "scale",
                             "uid": "6d1f0c4e-1111-4a52-9a57-3f1d2a0b9c01",
                             "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "10m",
                                                                "memory": "16Mi"}}}]}}


def scale_running_status(created: dict[str, Any], index: int) -> dict[str, Any]:
    """What the (hollow) kubelet writes when the pod starts: Pending to Running."""
    now = "2026-12-01T00:00:01Z"
    ip = f"10.244.{index // 250 % 250}.{index % 250 + 2}"
    conditions = [{"type": kind, "status": "True", "lastProbeTime": None,
                   "lastTransitionTime": now}
                  for kind in ("PodReadyToStartContainers", "Initialized", "Ready",
                               "ContainersReady")]
    return {"phase": "Running", "conditions": conditions,
            "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now,
            "containerStatuses": [{
                "name": "c", "ready": True, "restartCount": 0, "started": True,
                "image": "docker.io/library/busybox:latest", "imageID": "",
                "containerID": "hollow://" + created["metadata"]["uid"],
                "state": {"running": {"startedAt": now}}}]}


def scale_event(created: dict[str, Any], index: int) -> dict[str, Any]:
    """The kubelet's `Started` Event about the pod (as `EventRecorder` writes it)."""
    md = created["metadata"]
    now = "2026-12-01T00:00:01Z"
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{md['name']}.{index:x}", "namespace": NAMESPACE},
            "involvedObject": {"kind": "Pod", "namespace": NAMESPACE, "name": md["name"],
                               "uid": md["uid"], "apiVersion": "v1",
                               "resourceVersion": md["resourceVersion"],
                               "fieldPath": "spec.containers{c}"},
            "reason": "Started", "message": "Started container c", "type": "Normal",
            "source": {"component": "kubelet", "host": NODE},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": "kubelet", "reportingInstance": NODE}


async def loop_create(admin: Client, node: Client, watch: Watch, pod: dict[str, Any],
                      start: int, count: int
                      ) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """`--path create`: per iteration a new pod created, bound, Running, and an Event."""
    rows = []
    for index in range(start, start + count):
        t0 = time.perf_counter()
        created = await admin.call("POST", PODS, scale_pod(index))
        t1 = time.perf_counter()
        t2 = await watch.wait(created["metadata"]["resourceVersion"])
        name = created["metadata"]["name"]
        t3 = time.perf_counter()
        await admin.call("POST", f"{PODS}/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "uid": created["metadata"]["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}})
        t4 = time.perf_counter()
        t5 = await watch.wait_bound(name)
        t6 = time.perf_counter()
        pod = await node.call("PATCH", f"{PODS}/{name}/status",
                              {"metadata": {"uid": created["metadata"]["uid"]},
                               "status": scale_running_status(created, index)},
                              "application/merge-patch+json")
        t7 = time.perf_counter()
        t8 = await watch.wait(pod["metadata"]["resourceVersion"])
        t9 = time.perf_counter()
        await node.call("POST", f"/api/v1/namespaces/{NAMESPACE}/events",
                        scale_event(created, index))
        t10 = time.perf_counter()
        rows.append({"create": t1 - t0, "create_event": t2 - t0, "bind": t4 - t3,
                     "bind_event": t5 - t3, "status": t7 - t6, "status_event": t8 - t6,
                     "event": t10 - t9})
    return rows, pod


async def loop(admin: Client, node: Client, watch: Watch, pod: dict[str, Any], start: int,
               count: int) -> tuple[list[dict[str, float]], dict[str, Any]]:
    rows = []
    uid = pod["metadata"]["uid"]
    for index in range(start, start + count):
        body = orjson.loads(orjson.dumps(pod))  # a copy, cheap: the client is profiled too
        body.pop("status", None)
        body["spec"]["volumes"] = volumes_of(index)
        body["spec"]["containers"][0]["volumeMounts"] = mounts_of(index)
        t0 = time.perf_counter()
        put = await admin.call("PUT", f"{PODS}/{POD}/dynamic", body)
        t1 = time.perf_counter()
        t2 = await watch.wait(put["metadata"]["resourceVersion"])
        t3 = time.perf_counter()
        pod = await node.call("PATCH", f"{PODS}/{POD}/status",
                              {"metadata": {"uid": uid},
                               "status": running_status(index, index - 1)},
                              "application/merge-patch+json")
        t4 = time.perf_counter()
        t5 = await watch.wait(pod["metadata"]["resourceVersion"])
        rows.append({"put": t1 - t0, "put_event": t2 - t0, "patch": t4 - t3,
                     "patch_event": t5 - t3})
    return rows, pod


LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def renew_time(index: int) -> str:
    """A distinct MicroTime per iteration, as the kubelet's clock gives."""
    return f"2026-12-01T{index // 3600 % 24:02d}:{index // 60 % 60:02d}:{index % 60:02d}." \
           f"{index % 1000000:06d}Z"


async def setup_lease(admin: Client, node: Client) -> dict[str, Any]:
    """The node, its namespace and its Lease, created as the kubelet creates it (owned by
    the Node); the Lease as stored."""
    await setup(admin, node)
    with contextlib.suppress(RuntimeError):  # the apiserver may have made it already
        await admin.call("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-node-lease"}})
    created = await node.call("GET", f"/api/v1/nodes/{NODE}")
    return await node.call("POST", LEASES, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NODE, "namespace": "kube-node-lease",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE,
                                          "uid": created["metadata"]["uid"]}]},
        "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40,
                 "renewTime": renew_time(0)}})


async def loop_lease(admin: Client, node: Client, watch: Watch, lease: dict[str, Any],
                     start: int, count: int
                     ) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """`--path lease`: per iteration the kubelet's PUT of the Lease it last got back."""
    rows = []
    for index in range(start, start + count):
        body = orjson.loads(orjson.dumps(lease))  # the kubelet's DeepCopy
        body["spec"]["renewTime"] = renew_time(index)
        t0 = time.perf_counter()
        lease = await node.call("PUT", f"{LEASES}/{NODE}", body)
        t1 = time.perf_counter()
        t2 = await watch.wait(lease["metadata"]["resourceVersion"])
        rows.append({"renew": t1 - t0, "renew_event": t2 - t0})
    return rows, lease


async def loop_lease_patch(admin: Client, node: Client, watch: Watch, lease: dict[str, Any],
                           start: int, count: int
                           ) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """`--path lease-patch`: per iteration a merge PATCH of the Lease's whole `spec`."""
    rows = []
    for index in range(start, start + count):
        spec = {"holderIdentity": NODE, "leaseDurationSeconds": 40,
                "renewTime": renew_time(index)}
        t0 = time.perf_counter()
        lease = await node.call("PATCH", f"{LEASES}/{NODE}", {"spec": spec},
                                "application/merge-patch+json")
        t1 = time.perf_counter()
        t2 = await watch.wait(lease["metadata"]["resourceVersion"])
        rows.append({"renew": t1 - t0, "renew_event": t2 - t0})
    return rows, lease


async def loop_event(admin: Client, node: Client, watch: Watch, pod: dict[str, Any],
                     start: int, count: int
                     ) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """`--path event`: per iteration the kubelet's POST of a new Event about the pod (each
    pod of the scale path gets four: Scheduled, Pulled, Created, Started)."""
    rows = []
    for index in range(start, start + count):
        t0 = time.perf_counter()
        await node.call("POST", f"/api/v1/namespaces/{NAMESPACE}/events",
                        scale_event(pod, index))
        rows.append({"event": time.perf_counter() - t0})
    return rows, pod


Loop = Callable[[Client, Client, Watch, dict[str, Any], int, int],
                Awaitable[tuple[list[dict[str, float]], dict[str, Any]]]]
PATHS: dict[str, Loop] = {"live": loop, "create": loop_create, "lease": loop_lease,
                          "lease-patch": loop_lease_patch, "event": loop_event}
KEYS = {"live": ("put", "put_event", "patch", "patch_event"),
        "create": ("create", "create_event", "bind", "bind_event", "status", "status_event",
                   "event"),
        "lease": ("renew", "renew_event"), "lease-patch": ("renew", "renew_event"),
        "event": ("event",)}
WRITES = {"live": 2, "create": 4, "lease": 1, "lease-patch": 1, "event": 1}


async def start(admin: Client, node: Client, warmup: int, path: str = "live"
                ) -> tuple[Watch, list[Watch], dict[str, Any]]:
    """Set up the pod, open the watches from its version (every pod's, as the admin; the
    node's pods and the node, as its kubelet), run `warmup` iterations of `path`'s loop; the
    timed watch, the kubelet's watches and the last pod written (the Lease on the lease
    paths, whose timed watch is of the Leases)."""
    leases = path.startswith("lease")
    pod = await (setup_lease if leases else setup)(admin, node)
    version = pod["metadata"]["resourceVersion"]
    watch = Watch(admin, LEASES if leases else PODS)
    kubelet_watches = [Watch(node, "/api/v1/pods?fieldSelector=spec.nodeName%3D" + NODE),
                       Watch(node, "/api/v1/nodes?fieldSelector=metadata.name%3D" + NODE)]
    await watch.open(version)
    for kubelet_watch in kubelet_watches:
        await kubelet_watch.open(version)
    _, pod = await PATHS[path](admin, node, watch, pod, 1, warmup)
    return watch, kubelet_watches, pod


@contextlib.contextmanager
def maybe_py_spy(pid: int, output: Path | None) -> Iterator[None]:
    if output is None:
        yield
        return
    with py_spy_record(pid, output, rate=250):
        yield


async def run(args: argparse.Namespace, work: Path) -> None:
    server = Apiserver(work / "apiserver", "sqlite")
    server.start()
    try:
        pki = ensure_pki(server.data_dir)
        node_kubeconfig = write_client_kubeconfig(work / "node.kubeconfig", server.url, pki,
                                                  f"system:node:{NODE}", ["system:nodes"])
        _, node_context = client_ssl_context(node_kubeconfig, work / "node-client")
        assert server.ssl_context is not None
        admin = Client(server.url, server.ssl_context)
        node = Client(server.url, node_context)
        watch, kubelet_watches, pod = await start(admin, node, args.warmup, args.path)
        cpu_before = process_cpu_seconds(server.pid)
        with maybe_py_spy(server.pid, args.py_spy):
            rows, pod = await PATHS[args.path](admin, node, watch, pod, 1 + args.warmup,
                                               args.iterations)
        cpu = process_cpu_seconds(server.pid) - cpu_before
        for each in (watch, *kubelet_watches):
            await each.close()
        await admin.session.close()
        await node.session.close()
    finally:
        server.stop()
    print(f"{args.iterations} iterations (medians, ms):")
    for key in KEYS[args.path]:
        values = [row[key] * 1000 for row in rows]
        print(f"  {key:12s} p50 {statistics.median(values):6.2f}  "
              f"min {min(values):6.2f}")
    writes = WRITES[args.path]
    print(f"  apiserver CPU per iteration ({writes} writes): "
          f"{cpu / args.iterations * 1000:.2f} ms")
    if args.py_spy is not None:
        print(collapsed_stacks_summary(args.py_spy, top=args.top))


async def count(args: argparse.Namespace, work: Path) -> None:
    """`--count`: the loop against the app in this process, under cProfile."""
    from aiohttp import web

    from ephemera.apiserver.app import ApiserverConfig, create_app
    from ephemera.apiserver.authn import Authenticator, UserInfo
    from ephemera.store import KeyValue, open_store

    store = open_store("sqlite", data_dir=work / "data")
    reads = 0
    store_get = store.get

    async def counted_get(key: str) -> KeyValue | None:
        nonlocal reads
        reads += 1
        return await store_get(key)

    store.get = counted_get  # type: ignore[method-assign]
    users = {"admin": UserInfo("admin", ("system:masters", "system:authenticated")),
             "node": UserInfo(f"system:node:{NODE}", ("system:nodes", "system:authenticated"))}
    app = create_app(store, ApiserverConfig(authenticator=Authenticator(users)))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    admin, node = Client(url, None, "admin"), Client(url, None, "node")
    try:
        watch, kubelet_watches, pod = await start(admin, node, args.warmup, args.path)
        reads = 0
        profile = cProfile.Profile()
        if args.callgrind:
            await asyncio.to_thread(callgrind_instrumentation, True)
        cpu = time.thread_time()
        if not args.plain:
            profile.enable()
        await PATHS[args.path](admin, node, watch, pod, 1 + args.warmup, args.iterations)
        profile.disable()
        cpu = time.thread_time() - cpu
        if args.callgrind:
            await asyncio.to_thread(callgrind_instrumentation, False)
        for each in (watch, *kubelet_watches):
            await each.close()
    finally:
        await admin.session.close()
        await node.session.close()
        await runner.cleanup()
        await store.close()
    if args.plain:
        print(f"per iteration (this process's event loop thread: server, watches and client): "
              f"{cpu / args.iterations * 1000:.2f} ms of CPU, {reads / args.iterations:.2f} "
              f"store reads")
        return
    calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    print(f"per iteration (this process: server, watches and client): "
          f"{calls / args.iterations:.0f} Python calls, {reads / args.iterations:.2f} "
          f"store reads")
    if args.profile is not None:
        profile.dump_stats(str(args.profile))
    if args.top_functions:
        print_top_functions(profile, args.top_functions)


def callgrind_instrumentation(on: bool) -> None:
    """Switch valgrind's callgrind instrumentation of this process on or off
    (`callgrind_control -i`)."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
                   check=True, capture_output=True)


def print_top_functions(profile: cProfile.Profile, top: int) -> None:
    """The `top` hottest functions of ephemera's code (the server's; not aiohttp's, the
    client's or the standard library's), by own time and by cumulative time."""
    for order in ("tottime", "cumulative"):
        stats = pstats.Stats(profile, stream=sys.stdout)
        stats.sort_stats(order)
        print(f"--- ephemera's functions by {order} ---")
        stats.print_stats("ephemera/", top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=sorted(PATHS), default="live",
                        help="live: the live swap's PUT /dynamic and status PATCH; create: "
                             "the scale path's pod create, binding, status PATCH and Event; "
                             "lease: the kubelet's Lease PUT; lease-patch: a merge PATCH of "
                             "the Lease's spec")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--py-spy", type=Path, default=None)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--count", action="store_true",
                        help="count Python calls and store reads in this process instead")
    parser.add_argument("--top-functions", type=int, default=0, metavar="N",
                        help="with --count: print ephemera's N hottest functions (cProfile, "
                             "by own and by cumulative time)")
    parser.add_argument("--profile", type=Path, default=None, metavar="FILE",
                        help="with --count: dump the cProfile stats to FILE (pstats format)")
    parser.add_argument("--plain", action="store_true",
                        help="with --count: no profiler, the loop thread's CPU per iteration")
    parser.add_argument("--callgrind", action="store_true",
                        help="with --count: callgrind's instrumentation on during the timed "
                             "loop only (run under valgrind --tool=callgrind "
                             "--instr-atstart=no)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="write-path-") as work:
        asyncio.run((count if args.count else run)(args, Path(work)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

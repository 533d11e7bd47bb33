"""The hollow nodes' per-pod path in process, without an apiserver (`python -m
bench.hollow_pods`): a deterministic measure of what one pod costs the `ephemera
hollow-nodes` process, so that a change to the kubelet code it runs compares before/after
without the noise of a full `bench.scale` run on a shared machine.

N real `HollowNode`s (the `HollowNodes` of the process, its informer bypassed) on an
in-memory API (`MemoryApi`: pod status PATCHes merged into the stored pod, Events created,
every answer a JSON round trip as a real client decodes it); P pods per node, each one as
`bench.scale` creates it (one container, cpu/memory requests) as the apiserver would hand
it over bound to the node. Each pod's watch event is JSON-decoded and dispatched to its
node as the shared informer does (`HollowNodes._on_pod`), every status the node writes
comes back to it the same way (its own writes seen on the watch), and the process's
relister runs throughout (it sees each new container once). The run ends when every pod
is Running in the API, every worker idle, every status written and every Event posted.

Reported (stdout, JSON with `--json PATH`): Python function calls per pod (cProfile's count:
deterministic up to timer races, the number to compare), the process CPU seconds per pod
(noisy), the API calls per pod by verb, and with `--top K` the K functions of most
cumulative time; with `--idle S`, the CPU the process then spends per second with every pod
Running (each node's status, volume and allocation loops and the relister, which grow with
time and pods per node, not with pods started), and with `--idle-top K` that window's K
hottest functions (under cProfile); with `--resync`, the calls and CPU of waking every
pod's worker once with nothing changed (a full sync that publishes its status: what a wake
from the informer or the relister costs; the timer's periodic resync costs less, as it
publishes nothing when the runtime has not drifted).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import json
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from ephemera.apiserver.admission.serviceaccount import mount_service_account_token
from ephemera.kubelet.hollow import HollowConfig, HollowNodes

Obj = dict[str, Any]


def bound_pod(name: str, node: str, rv: int) -> Obj:
    """`bench.scale`'s pod as the apiserver hands it to the node's watch: defaulted, with
    its `kube-api-access-*` volume (the ServiceAccount admission's), scheduled and bound."""
    pod: Obj = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
                     "resourceVersion": str(rv), "generation": 1,
                     "creationTimestamp": "2026-12-02T00:00:00Z",
                     "labels": {"app": "scale"}},
        "spec": {"containers": [{
            "name": "c", "image": "busybox", "imagePullPolicy": "Always",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
            "serviceAccountName": "default", "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
            "securityContext": {}, "nodeName": node,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300}]},
        "status": {"phase": "Pending", "qosClass": "Burstable", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": "2026-12-02T00:00:00Z"}]},
    }
    mount_service_account_token(pod["spec"])
    return pod


class MemoryApi:
    """What the hollow nodes write, kept in memory: pod status merge patches and Events.
    Every pod a status write changes is handed to `echo` (the watch)."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], Obj] = {}
        self.calls: collections.Counter[str] = collections.Counter()
        self.rv = 1
        self.echo: Any = None

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    async def patch(self, path: str, body: Any, *, patch_type: str = "strategic",
                    **params: Any) -> Obj:
        self.calls[f"patch {path.split('/')[-1] if path.endswith('/status') else 'other'}"] += 1
        body = json.loads(json.dumps(body))
        parts = path.strip("/").split("/")
        if parts[-1] == "status" and "pods" in parts:
            ns, name = parts[parts.index("namespaces") + 1], parts[parts.index("pods") + 1]
            pod = self.pods[(ns, name)]
            status = pod.setdefault("status", {})
            for key, value in body.get("status", {}).items():
                if value is None:
                    status.pop(key, None)
                else:
                    status[key] = value
            pod["metadata"]["resourceVersion"] = self._next_rv()
            wire = json.dumps(pod)
            if self.echo is not None:
                asyncio.get_running_loop().call_soon(self.echo, wire)
            return dict(json.loads(wire))
        return dict(body)

    async def create(self, path: str, body: Any, **params: Any) -> Obj:
        self.calls[f"create {path.rstrip('/').split('/')[-1]}"] += 1
        obj = json.loads(json.dumps(body))
        md = obj.setdefault("metadata", {})
        md.setdefault("name", md.get("generateName", "obj") + self._next_rv())
        md["resourceVersion"] = self._next_rv()
        return dict(json.loads(json.dumps(obj)))

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Obj:
            self.calls[name] += 1
            raise RuntimeError(f"MemoryApi.{name} is not simulated")
        return call


def _running(api: MemoryApi) -> int:
    return sum(1 for p in api.pods.values() if (p.get("status") or {}).get("phase") ==
               "Running")


async def run(nodes: int, pods: int, profile: cProfile.Profile | None,
              idle: float = 0.0, resync_profile: cProfile.Profile | None = None,
              idle_profile: cProfile.Profile | None = None) -> dict[str, Any]:
    api = MemoryApi()
    with tempfile.TemporaryDirectory(prefix="hollow-pods-") as root:
        config = HollowConfig(count=nodes, root_dir=Path(root))
        hollow = HollowNodes(api, config)  # type: ignore[arg-type]
        hollow._dispatching = True

        def echo(wire: str) -> None:
            hollow._on_pod(json.loads(wire))

        api.echo = echo
        for node in hollow.nodes.values():
            node.start()
        stop = asyncio.Event()  # the relister runs throughout, as in the process
        relists = asyncio.create_task(hollow._relists(stop))
        await asyncio.sleep(0)
        total = nodes * pods
        wires = []
        for i in range(pods):
            for n, name in enumerate(hollow.nodes):
                pod = bound_pod(f"p-{n}-{i}", name, api.rv)
                api.rv += 1
                api.pods[("default", pod["metadata"]["name"])] = pod
                wires.append(json.dumps({"type": "ADDED", "object": pod}))
        cpu0, wall0 = time.process_time(), time.monotonic()
        if profile is not None:
            profile.enable()
        for wire in wires:
            hollow._on_pod(json.loads(wire)["object"])
            await asyncio.sleep(0)
        while True:
            if _running(api) == total and all(n._is_quiet() for n in hollow.nodes.values()):
                # Deferred Events are posted within max_defer; each new container is seen
                # by a relist within relist_period (its worker syncs once more).
                await asyncio.sleep(max(1.2, config.relist_period + 0.2))
                if all(n._is_quiet() for n in hollow.nodes.values()):
                    break
            await asyncio.sleep(0.05)
        if profile is not None:
            profile.disable()
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        idle_cpu = None
        if idle > 0:  # every pod Running: the nodes' own loops and the relister only
            idle0 = time.process_time()
            if idle_profile is not None:
                idle_profile.enable()
            await asyncio.sleep(idle)
            if idle_profile is not None:
                idle_profile.disable()
            idle_cpu = time.process_time() - idle0
        resync: dict[str, float] = {}
        if resync_profile is not None:  # every pod's worker woken once, nothing changed
            cpu1 = time.process_time()
            resync_profile.enable()
            for node in hollow.nodes.values():
                for uid in node.workers.uids():
                    node.workers.wake(uid)
            await asyncio.sleep(0)
            while not all(n._is_quiet() for n in hollow.nodes.values()):
                await asyncio.sleep(0.01)
            resync_profile.disable()
            resync["resyncCpuMsPerPod"] = round(1000 * (time.process_time() - cpu1) / total, 3)
        stop.set()
        relists.cancel()
        await asyncio.gather(relists, return_exceptions=True)
        for node in hollow.nodes.values():
            await node.close()
    return {"nodes": nodes, "podsPerNode": pods, "pods": total, "cpuSeconds": round(cpu, 3),
            "cpuMsPerPod": round(1000 * cpu / total, 3), "wallSeconds": round(wall, 2),
            "apiCallsPerPod": {k: round(v / total, 2) for k, v in sorted(api.calls.items())},
            **({"idleCpuPerSecond": round(idle_cpu / idle, 4)} if idle_cpu is not None
               else {}), **resync}


def calls_per_pod(profile: cProfile.Profile, pods: int, top: int, sort: str) -> float:
    """The Python calls `profile` counted, per pod; its `top` hottest functions printed."""
    stats = pstats.Stats(profile)
    calls = sum(v[1] for v in stats.stats.values())  # type: ignore[attr-defined]
    if top:
        stats.sort_stats(sort).print_stats(top)
    return round(calls / pods, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hollow_pods",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--pods", type=int, default=30, help="pods per node")
    parser.add_argument("--top", type=int, default=0,
                        help="print the K functions of most cumulative time")
    parser.add_argument("--sort", default="cumulative", help="pstats sort key for --top")
    parser.add_argument("--no-profile", action="store_true",
                        help="CPU only (no call counts: cProfile's own cost left out)")
    parser.add_argument("--idle", type=float, default=0.0, metavar="SECONDS",
                        help="then measure the process CPU over this long with every pod "
                             "Running (the nodes' loops and the relister; no profile)")
    parser.add_argument("--idle-top", type=int, default=0, metavar="K",
                        help="profile the --idle window (its CPU then includes cProfile's "
                             "cost) and print its K hottest functions")
    parser.add_argument("--resync", action="store_true",
                        help="then wake every pod's worker once, nothing changed (a full "
                             "sync that publishes): Python calls and CPU per pod of that")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.idle_top and not args.idle:
        parser.error("--idle-top profiles the --idle window: give --idle SECONDS too")
    profile = None if args.no_profile else cProfile.Profile()
    resync_profile = cProfile.Profile() if args.resync else None
    idle_profile = cProfile.Profile() if args.idle_top else None
    result = asyncio.run(run(args.nodes, args.pods, profile, args.idle, resync_profile,
                             idle_profile))
    if idle_profile is not None:
        print(f"--- the idle window ({args.idle} s), by {args.sort}:")
        pstats.Stats(idle_profile).sort_stats(args.sort).print_stats(args.idle_top)
    for key, each in (("resyncPythonCallsPerPod", resync_profile),
                      ("pythonCallsPerPod", profile)):
        if each is not None:
            result[key] = calls_per_pod(each, result["pods"], args.top, args.sort)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

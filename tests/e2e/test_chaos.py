"""Chaos end to end on one machine (issue 13, item 7): a three-member etcd cluster, two control
plane members (`ephemera up`, and `ephemera up --join-control-plane` of it: two apiservers,
the scheduler and the controller-manager twice each, under leader election) and two nodes
with real containers (the first member's kubelet, and a kubelet joined with `ephemera join`).

While a client streams pod creates and `/dynamic` volume swaps (failing over between the two
apiservers, recording every write acknowledged with 201/200), the test `kill -9`s one process
at a time, chosen at random with a printed seed (`EPHEMERA_CHAOS_SEED` replays a run): an
etcd member (the test restarts it), an apiserver, the scheduler or controller-manager leader,
a kubelet (`up` restarts its children; the test restarts the joined kubelet). Each kill waits
for the killed part to be back before the next.

Then: every acknowledged write is present; every pod runs, on the node it is bound to only
(its pod directory exists under that kubelet's root and not under the other's); the
apiservers' audit logs hold at most one successful binding per pod; each swap pod mounts the
volume of its last acknowledged swap (or of a later unacknowledged one), settled; `kubectl
logs` and `exec` work on a pod of each node; after the pods are deleted no mount is left
under either kubelet's root.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import signal
import ssl
import subprocess
import sys
import time
import urllib.parse
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    Cluster,
    ClusterAccess,
    mounts_under,
    node_ready,
    release_leftovers,
    start_cluster,
)
from processes import until

from ephemera.apiserver.certs import ensure_pki
from etcdserver import EtcdCluster

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("chaos")]

NODE_A = "chaos-a"  # the first member's kubelet
NODE_B = "chaos-b"  # the joined kubelet
NAMESPACE = "default"
KILL_EVERY = 4.0  # seconds between one part's recovery and the next kill
# The traffic goes on until every kind was killed once and KILL_EVERY more seconds have
# passed (the last part's recovery under traffic), within this bound.
TRAFFIC_SECONDS = 60.0
RECOVER = 60.0  # bound on waiting for a killed part to be back
SETTLE = 120.0  # bound on waiting for the pods to run after the traffic
SWAP_PODS = ("swap-0", "swap-1")
KINDS = ("etcd", "apiserver", "scheduler-leader", "controller-manager-leader", "kubelet")
REQUEST_TIMEOUT = 10.0


class Unavailable(Exception):
    """No apiserver answered a request within its deadline."""


@dataclass
class Client:
    """A client of both apiservers with the admin's certificate: it sends each request to the
    next apiserver in turn (so that both carry traffic) and moves on to the other when a
    request fails without an answer (or with a 5xx). `ambiguous` counts writes whose outcome
    is unknown (the connection broke)."""

    servers: list[str]
    context: ssl.SSLContext
    current: int = 0
    ambiguous: int = 0
    failovers: int = 0

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json", deadline: float = 30.0
                ) -> tuple[int, Any]:
        """(status, parsed body) of the first answer that is not a 5xx; Unavailable when
        none came within `deadline` seconds."""
        end = time.monotonic() + deadline
        self.current = (self.current + 1) % len(self.servers)
        data = None if body is None else json.dumps(body).encode()
        while time.monotonic() < end:
            url = urllib.parse.urlsplit(self.servers[self.current])
            conn = http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port,
                                               context=self.context, timeout=REQUEST_TIMEOUT)
            try:
                conn.request(method, path, body=data, headers={
                    "Content-Type": content_type, "Accept": "application/json"})
                response = conn.getresponse()
                status, raw = response.status, response.read()
            except ConnectionRefusedError:  # nothing was sent
                self._next()
                continue
            except (OSError, http.client.HTTPException):
                if method != "GET":
                    self.ambiguous += 1
                self._next()
                continue
            finally:
                conn.close()
            if status >= 500:
                self._next()
                continue
            return status, json.loads(raw) if raw else None
        raise Unavailable(f"{method} {path}: no apiserver answered within {deadline}s")

    def _next(self) -> None:
        self.current = (self.current + 1) % len(self.servers)
        self.failovers += 1
        time.sleep(0.2)


def pods_path(name: str = "", sub: str = "") -> str:
    return (f"/api/v1/namespaces/{NAMESPACE}/pods" + (f"/{name}" if name else "")
            + (f"/{sub}" if sub else ""))


LOOP = "trap 'exit 0' TERM; while true; do sleep 1; done"


def pod(name: str, swap: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", f"echo started {name}; {LOOP}"]}
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 1, "containers": [container]}
    if swap:
        container["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}
        container["volumeMounts"] = [{"name": "scratch-0", "mountPath": "/scratch"}]
        spec["volumes"] = [{"name": "scratch-0", "emptyDir": {}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "chaos"}}, "spec": spec}


def swap_patch(index: int) -> list[dict[str, Any]]:
    """Replace the swap pod's one volume (and its mount) with `scratch-INDEX`."""
    name = f"scratch-{index}"
    return [{"op": "replace", "path": "/spec/volumes/0", "value": {"name": name,
                                                                    "emptyDir": {}}},
            {"op": "replace", "path": "/spec/containers/0/volumeMounts/0",
             "value": {"name": name, "mountPath": "/scratch"}}]


@dataclass
class Traffic:
    """What the client did: the pods it created (acknowledged or not) and, per swap pod, the
    volumes it swapped to in order, with the index of the last acknowledged swap."""

    acked_pods: set[str] = field(default_factory=set)
    tried_pods: list[str] = field(default_factory=list)
    swaps_tried: dict[str, list[int]] = field(default_factory=dict)
    swaps_acked: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)

    def create(self, client: Client, name: str, swap: bool = False) -> None:
        self.tried_pods.append(name)
        try:
            status, body = client.request("POST", pods_path(), pod(name, swap))
        except Unavailable as err:
            self.refused.append(str(err))
            return
        if status == 201:
            self.acked_pods.add(name)
        elif not (status == 409 and body.get("reason") == "AlreadyExists"):
            # 409 AlreadyExists: a retry of a create whose answer was lost; present, but
            # not acknowledged.
            self.refused.append(f"create {name}: {status} {body}")

    def swap(self, client: Client, name: str, index: int) -> None:
        self.swaps_tried.setdefault(name, []).append(index)
        try:
            status, body = client.request("PATCH", pods_path(name, "dynamic"),
                                          swap_patch(index), "application/json-patch+json")
        except Unavailable as err:
            self.refused.append(str(err))
            return
        if status == 200:
            self.swaps_acked[name] = index
        else:
            self.refused.append(f"swap {name} to {index}: {status} {body}")


@dataclass
class JoinedNode:
    """The joined kubelet: `ephemera join ...`, restarted by the test when killed."""

    argv: list[str]
    root: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@dataclass
class Chaos:
    """The whole setup, and the kills."""

    etcd: EtcdCluster
    first: Cluster
    second: Cluster
    joined: JoinedNode
    rng: random.Random
    kills: list[str] = field(default_factory=list)
    _round: list[str] = field(default_factory=list)

    @property
    def members(self) -> tuple[Cluster, Cluster]:
        return self.first, self.second

    def logs(self) -> str:
        parts = [f"kills: {self.kills}"]
        for member in self.members:
            for log in sorted((member.data_dir / "logs").glob("*.log")):
                parts.append(f"--- {member.data_dir.name}/{log.name}\n"
                             f"{log.read_text(errors='replace')[-2500:]}")
        parts.append(f"--- joined\n{self.joined.log.read_text(errors='replace')[-2500:]}")
        return "\n".join(parts)

    def _pid(self, member: Cluster, component: str) -> int:
        try:
            return member.pid_of(component)
        except (OSError, ValueError):
            return 0

    def _kill_child(self, member: Cluster, component: str) -> None:
        """SIGKILL `component` of `member`, then wait until `up` has started another."""
        old = self._pid(member, component)
        assert old, f"no {component} pid in {member.data_dir}"
        with contextlib.suppress(ProcessLookupError):
            os.kill(old, signal.SIGKILL)
        until(lambda: self._pid(member, component) not in (0, old),
              f"{member.data_dir.name}'s {component} restarted", RECOVER, self.logs)

    def leader_member(self, component: str) -> Cluster:
        """The member whose `component` holds its Lease now (the first when no one does)."""
        lease = f"kube-{component}"
        got = self.first.kubectl("get", "lease", "-n", "kube-system", lease, "-o",
                                 "jsonpath={.spec.holderIdentity}", check=False)
        holder = got.stdout.strip()
        for member in self.members:
            log = member.data_dir / "logs" / f"{component}.log"
            lines = [line for line in log.read_text(errors="replace").splitlines()
                     if "candidate " in line and f" for lease kube-system/{lease}" in line]
            if holder and lines and f"candidate {holder} " in lines[-1]:
                return member
        return self.first

    def kill_one(self) -> None:
        if not self._round:  # every kind once per round, in a random order
            self._round = list(KINDS)
            self.rng.shuffle(self._round)
        target = self._round.pop()
        if target == "etcd":
            i = self.rng.randrange(self.etcd.size)
            self.kills.append(f"etcd m{i}")
            self.etcd.kill(i)
            time.sleep(0.5)  # the rest run without it for a moment
            self.etcd.restart(i)
        elif target == "apiserver":
            member = self.rng.choice(self.members)
            self.kills.append(f"apiserver of {member.data_dir.name}")
            self._kill_child(member, "apiserver")
        elif target.endswith("-leader"):
            component = target.removesuffix("-leader")
            member = self.leader_member(component)
            self.kills.append(f"{component} of {member.data_dir.name}")
            self._kill_child(member, component)
        elif self.rng.random() < 0.5:
            self.kills.append(f"kubelet {NODE_A}")
            self._kill_child(self.first, "kubelet")
        else:
            self.kills.append(f"kubelet {NODE_B}")
            assert self.joined.process is not None
            self.joined.process.kill()
            self.joined.process.wait()
            self.joined.start()


def admin_context(data_dir: Path, tmp: Path) -> ssl.SSLContext:
    pki = ensure_pki(data_dir)
    (tmp / "admin.crt").write_bytes(pki.admin.cert_pem)
    (tmp / "admin.key").write_bytes(pki.admin.key_pem)
    (tmp / "admin.key").chmod(0o600)
    context = ssl.create_default_context(cafile=str(pki.ca_cert_path))
    context.load_cert_chain(tmp / "admin.crt", tmp / "admin.key")
    return context


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[Chaos]:
    seed = int(os.environ.get("EPHEMERA_CHAOS_SEED") or random.randrange(1 << 32))
    print(f"chaos seed {seed} (EPHEMERA_CHAOS_SEED={seed} replays the choices)", flush=True)
    base = tmp_path
    cleanups: list[Callable[[], object]] = []
    try:
        etcd = EtcdCluster(base / "etcd", 3)
        cleanups.append(etcd.stop)
        etcd.start()
        store = ["--store", "etcd", "--etcd-endpoints", etcd.endpoints]
        first = start_cluster(base / "first", base / "home", [*store, "--node-name", NODE_A])
        cleanups.append(first.stop)
        second = start_cluster(base / "second", base / "home2", [
            *store, "--join-control-plane", str(base / "first")])
        cleanups.append(second.stop)
        join = subprocess.run(
            [sys.executable, "-m", "ephemera.cli", "token", "create", "--data-dir",
             str(first.data_dir), "--print-join-command"],
            capture_output=True, text=True, timeout=60, check=True).stdout.split()
        root = base / "joined"
        joined = JoinedNode(
            [sys.executable, "-m", "ephemera.cli", *join[1:], "--root-dir", str(root),
             "--node-name", NODE_B, "--port", "0", "--port-file", str(root / "port"),
             "--stop-pods-on-exit", "--apiserver-endpoints", second.server],
            root, base / "joined.log")
        joined.start()
        cleanups.append(lambda: None if joined.stop() == 0 else warnings.warn(
            f"the joined kubelet did not exit 0:\n{joined.log.read_text()[-3000:]}",
            stacklevel=1))
        setup = Chaos(etcd, first, second, joined, random.Random(seed))
        for node in (NODE_A, NODE_B):
            until(partial(node_ready, first, node), f"node {node} Ready", 90, setup.logs)
        until(lambda: first.kubectl("get", "serviceaccount", "default", check=False)
              .returncode == 0, "the default service account", 60, setup.logs)
        yield setup
    finally:
        for cleanup in reversed(cleanups):
            cleanup()
        left = release_leftovers(base)
        if left:
            warnings.warn(f"chaos: left behind (released now): {'; '.join(left)}",
                          stacklevel=1)


def bindings(member: ClusterAccess) -> list[tuple[str, int, str]]:
    """Every `pods/binding` create in a member's audit log: (pod, response code, node)."""
    path = member.data_dir / "audit" / "audit.log"
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the last line of a killed apiserver may be cut short
        ref = event.get("objectRef") or {}
        if event.get("stage") == "ResponseComplete" and event.get("verb") == "create" \
                and ref.get("resource") == "pods" and ref.get("subresource") == "binding":
            target = (event.get("requestObject") or {}).get("target") or {}
            found.append((str(ref.get("name")), int(event["responseStatus"]["code"]),
                          str(target.get("name"))))
    return found


def swap_settled(p: dict[str, Any]) -> bool:
    """The container runs and mounts exactly the spec's volume, mounted on the host."""
    volume = p["spec"]["volumes"][0]["name"]
    statuses = p.get("status", {}).get("containerStatuses") or []
    entries = p.get("status", {}).get("volumeStatuses") or []
    return bool(statuses) and "running" in statuses[0].get("state", {}) \
        and [m["name"] for m in statuses[0].get("volumeMounts") or []] == [volume] \
        and [(e["name"], e["hostPhase"]) for e in entries] == [(volume, "HostMounted")]


def test_chaos_kills_lose_no_acknowledged_write(chaos: Chaos) -> None:
    first, second = chaos.members
    client = Client([first.server, second.server], admin_context(first.data_dir,
                                                                   first.data_dir.parent))
    traffic = Traffic()
    for name in SWAP_PODS:
        traffic.create(client, name, swap=True)
    assert traffic.acked_pods == set(SWAP_PODS), traffic.refused
    def settled_now(name: str) -> bool:
        return swap_settled(client.request("GET", pods_path(name))[1])

    for name in SWAP_PODS:
        until(partial(settled_now, name), f"{name} running", 90, chaos.logs)

    # The traffic, with a kill every KILL_EVERY seconds (each once the last one's part is
    # back), one at a time, until a whole round of kills is over.
    start = time.monotonic()
    next_kill = start + KILL_EVERY
    count = 0
    while time.monotonic() - start < TRAFFIC_SECONDS:
        if time.monotonic() >= next_kill:
            if len(chaos.kills) >= len(KINDS):
                break
            chaos.kill_one()
            next_kill = time.monotonic() + KILL_EVERY
        traffic.create(client, f"p-{count}")
        name = SWAP_PODS[count % len(SWAP_PODS)]
        traffic.swap(client, name, len(traffic.swaps_tried.get(name, [])) + 1)
        count += 1
        time.sleep(0.3)
    print(f"kills: {chaos.kills}; {count} creates, {client.failovers} failovers, "
          f"{client.ambiguous} unanswered writes", flush=True)
    assert len(chaos.kills) >= len(KINDS), chaos.kills  # every kind at least once
    # Refusals other than lost answers: none (each request reaches a live apiserver).
    assert not traffic.refused, traffic.refused
    assert len(traffic.acked_pods) >= count // 2

    # Every acknowledged pod is there, and every pod runs, on the node it is bound to only.
    roots = {NODE_A: first.data_dir / "kubelet", NODE_B: chaos.joined.root}

    def listed() -> dict[str, dict[str, Any]]:
        items = client.request("GET", pods_path() + "?labelSelector=app%3Dchaos")[1]["items"]
        return {p["metadata"]["name"]: p for p in items}

    def all_running() -> dict[str, dict[str, Any]] | None:
        pods = listed()
        ok = all(p["status"].get("phase") == "Running" for p in pods.values()) and all(
            swap_settled(pods[n]) for n in SWAP_PODS)
        return pods if ok else None

    pods = until(all_running, "every pod Running and every swap actuated", SETTLE,
                 lambda: chaos.logs() + "\n" + yaml.safe_dump(
                     {n: p.get("status") for n, p in listed().items()
                      if p["status"].get("phase") != "Running" or n in SWAP_PODS}))
    missing = traffic.acked_pods - set(pods)
    assert not missing, f"acknowledged creates lost: {sorted(missing)}"
    assert set(pods) <= set(traffic.tried_pods)
    for name, p in pods.items():
        node = p["spec"].get("nodeName")
        assert node in roots, (name, node)
        uid = p["metadata"]["uid"]
        other = NODE_B if node == NODE_A else NODE_A
        assert (roots[node] / "pods" / uid).is_dir(), f"{name} not on {node}"
        assert not (roots[other] / "pods" / uid).exists(), f"{name} also on {other}"
    assert {p["spec"]["nodeName"] for p in pods.values()} == {NODE_A, NODE_B}

    # No pod was bound twice (the audit logs of both apiservers, killed ones included).
    audited = [b for member in chaos.members for b in bindings(member)]
    successes = Counter(name for name, code, _ in audited if code == 201)
    assert successes, "no binding audited"
    twice = {name: n for name, n in successes.items() if n > 1}
    assert not twice, f"bound more than once: {twice}"
    # ... and each to the node the pod runs on (a killed apiserver may have bound one
    # without writing its audit event: at most one, not exactly one)
    wrong = [(name, node) for name, code, node in audited
             if code == 201 and name in pods and pods[name]["spec"]["nodeName"] != node]
    assert not wrong, f"bound to another node than the one it runs on: {wrong}"
    print(f"{len(pods)} pods, {len(traffic.acked_pods)} creates acknowledged, "
          f"{sum(successes.values())} bindings audited, "
          f"{sum(1 for _, code, _ in audited if code != 201)} refused", flush=True)

    # The swaps actuated: each swap pod mounts its last acknowledged swap's volume, or a
    # later one whose answer was lost.
    for name in SWAP_PODS:
        volume = pods[name]["spec"]["volumes"][0]["name"]
        acked = traffic.swaps_acked.get(name, 0)
        later = [i for i in traffic.swaps_tried.get(name, []) if i > acked]
        assert volume in {f"scratch-{i}" for i in [acked, *later]}, (name, volume, acked)
        assert acked >= 1, f"no swap of {name} acknowledged"

    # kubectl logs and exec on a pod of each node.
    def logged(name: str) -> bool:
        return first.kubectl("logs", name, check=False).stdout == f"started {name}\n"

    for node in (NODE_A, NODE_B):
        name = sorted(n for n, p in pods.items() if p["spec"]["nodeName"] == node)[0]
        until(partial(logged, name), f"the log of {name} on {node}", 60, chaos.logs)
        assert second.kubectl("logs", name, "--server", second.server).stdout == \
            f"started {name}\n"
        assert first.kubectl("exec", name, "--", "sh", "-c", "echo $((6*7))").stdout == "42\n"

    # No mount leaked: once the pods are gone, nothing is mounted under either kubelet root.
    first.kubectl("delete", "pods", "-l", "app=chaos", "--grace-period=1", "--wait=true",
                  timeout=180)
    def no_mounts(root: Path) -> bool:
        return not mounts_under(root)

    def no_pod_dirs(root: Path) -> bool:
        return not list((root / "pods").iterdir())

    for node, root in roots.items():
        until(partial(no_mounts, root), f"no mounts left on {node}", 60,
              partial(_mounts_text, root))
        until(partial(no_pod_dirs, root), f"no pod directories left on {node}", 60,
              chaos.logs)


def _mounts_text(root: Path) -> str:
    return "\n".join(mounts_under(root))

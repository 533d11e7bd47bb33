"""The warm-pool benchmark (`python -m bench.warm_pool`, part of `make bench`): how long a
sandbox with a per-claim Secret takes to be ready when it comes from a warm pool
(`examples/warm-pool/`: a Claim bound to a pre-started pod, its Secret swapped in live through
`pods/NAME/dynamic`), against a cold start (a new pod with the Secret mounted), on one real
`ephemera up` (apiserver on sqlite, scheduler, controller-manager, a kubelet with the real
runtime, node `bench-node`).

Set-up (untimed): the example's CRDs and RBAC applied through the API, the operator run with
`kopf run --standalone --namespace bench-warm-pool examples/warm-pool/operator.py` as its
ServiceAccount (a TokenRequest token in a kubeconfig of its own, so it has exactly the
example's RBAC), and a WarmPool of P pods (default 5; `releasePolicy: Recycle`) of one
busybox container, `sh -c "trap 'exit 0' TERM; sleep 3600 & wait"`, which the operator gives
`dynamicVolumePolicy.restartPolicy: NotRequired`. The benchmark waits until P pods of the pool
are free and Running.

Then, after W warm-up rounds that are not counted, N rounds (default 50), each:

- **claim**: POST a Secret with a token of its own, then a Claim naming the pool and that
  Secret; timed from the Secret's POST until the client's open watch of the namespace's
  Claims shows the Claim `Ready=True`. Then, untimed: the pod named in the Claim's status must
  still run its first container (`restartCount` 0: the Secret came in live) and the Secret's
  `token`, read inside the container (through its init's root, i.e. its mount namespace),
  must hold this claim's value. Then the Claim is deleted (untimed) and the benchmark waits
  for its DELETED event (the operator's finalizer releases the pod first), for the pod to be
  free again on the pods' watch, and checks that the token is gone from the container.
- **cold start**: POST a Secret, then a pod of the pool's template (without the pool's
  label and policy) mounting it read-only at the path the operator uses; timed from the
  Secret's POST until the pods' watch shows the pod Running with its container started and
  its `Ready` condition True.
  Then, untimed, the token is read inside the container the same way, and the pod is
  deleted and waited out.

Claims and cold starts are interleaved, one of each per round, so both see the same load.
Where the time goes, from the client's watches (one clock): a claim's Secret and Claim
responses, the pod taking the claim's label (the operator picked it), the claim's Secret
volume in the pod's spec (the operator's PUT of `pods/NAME/dynamic`), the pod's status
reporting the claim's mount in its container (the kubelet mounted it live), the Claim
`Ready` (the operator saw the mount and patched the status); a cold start's Secret and Pod
responses, the bind (`spec.nodeName`), Ready. The operator's own measure,
`status.bindMilliseconds` (from its first attempt to the mounts live), is reported too.

Results go to stdout as Markdown (p50, p95, p99, the ratios), progress to stderr, and with
`--json PATH` to a JSON file too. Nothing is left behind: the operator is stopped, the pool
and its pods deleted and waited for, `ephemera up` stopped, and a last check
(`bench.pod_start.clean_leftovers`) looks for mounts, runtime state and cgroups of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import datetime
import itertools
import math
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.common import (
    REPO_ROOT,
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
from bench.dynamic_swap import STEP_HEADERS, Record, step_row
from bench.pod_start import (
    NODE_NAME,
    Api,
    BenchError,
    clean_leftovers,
    read_kv,
    run_bench,
    wait_until_trapping,
)
from ephemera.api import conditions

DEFAULT_CLAIMS = 50
QUICK_CLAIMS = 5
DEFAULT_POOL = 5
DEFAULT_WARMUP = 2
RUNTIMES = ("auto", "runc", "crun")

EXAMPLE = REPO_ROOT / "examples" / "warm-pool"
GROUP, VERSION = "warmpool.ephemera.dev", "v1alpha1"
POOL_LABEL = f"{GROUP}/pool"
CLAIM_LABEL = f"{GROUP}/claim"
NAMESPACE = "bench-warm-pool"
OPERATOR_NAMESPACE = "warm-pool"  # the example's RBAC puts its ServiceAccount there
OPERATOR_ACCOUNT = "warm-pool-operator"
POOL = "pool"
CONTAINER = "app"
IMAGE = "busybox:latest"
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
SECRET_DIR = "/var/run/claim/secret"  # the operator's default mountPath + /secret
SECRET_VOLUME = "claim-secret"

READY_TIMEOUT = 120.0  # the node Ready, the CRDs Established, the pool filled
WAIT_TIMEOUT = 60.0  # one claim Ready, one pod Ready or gone
STOP_TIMEOUT = 20.0

CLAIM = "warm pool claim"
COLD = "cold start"
END = "ready"  # the last milestone of both: the claim Ready, the cold pod Ready

CLAIM_STEPS = [("sent", ""), ("secret_created", "apiserver: POST Secret (→ 201)"),
               ("claim_created", "apiserver: POST Claim (→ 201)"),
               ("labelled", "operator: watch, list, take a ready pod (→ its claim label on "
                            "the watch)"),
               ("swapped", "operator: GET and PUT pods/NAME/dynamic (→ the Secret volume "
                           "in the pod's spec on the watch)"),
               ("mounted", "kubelet: the Secret's tmpfs, mounted into the running container "
                           "(→ the mount in the pod's status on the watch)"),
               (END, "operator: sees the mount, patches the status (→ Ready on the "
                     "Claim's watch)")]
COLD_STEPS = [("sent", ""), ("secret_created", "apiserver: POST Secret (→ 201)"),
              ("pod_created", "apiserver: POST Pod (→ 201)"),
              ("scheduled", "scheduler: bind (→ nodeName on the watch)"),
              (END, "kubelet: admit, volumes, sandbox, container (→ Ready on the watch)")]

now = time.time  # one clock for every milestone


@dataclass
class Config:
    claims: int
    pool: int
    warmup: int
    runtime: str
    work_dir: Path


@dataclass
class Run:
    """The measured rounds of one backend (`CLAIM`, `COLD`)."""

    backend: str
    records: list[Record] = field(default_factory=list)
    bind_ms: list[float] = field(default_factory=list)  # the operator's bindMilliseconds

    def measurement(self) -> Measurement:
        values = [r.between("sent", END) for r in self.records]
        return Measurement(self.backend, self.backend, [v for v in values if not math.isnan(v)])


# --- the API -------------------------------------------------------------------------------


def core_path(resource: str, name: str = "", namespace: str = NAMESPACE) -> str:
    path = f"/api/v1/namespaces/{namespace}/{resource}"
    return f"{path}/{name}" if name else path


def custom_path(resource: str, name: str = "") -> str:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{resource}"
    return f"{path}/{name}" if name else path


def collection_path(obj: dict[str, Any]) -> str:
    """Where a manifest of the example's (CRD, ServiceAccount, ClusterRole, ...) is POSTed."""
    kind, namespace = obj["kind"], (obj.get("metadata") or {}).get("namespace")
    api_version = obj["apiVersion"]
    plural = {"CustomResourceDefinition": "customresourcedefinitions",
              "ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
              "ClusterRoleBinding": "clusterrolebindings", "Namespace": "namespaces"}[kind]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def manifests(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def running(pod: dict[str, Any]) -> bool:
    """Running, not deleted, its container running and started."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    containers = status.get("containerStatuses") or []
    return bool(containers) and all("running" in (c.get("state") or {}) and c.get("started")
                                    for c in containers)


def pod_ready(pod: dict[str, Any]) -> bool:
    """Running (as above) and its `Ready` condition True: what a claim's pod is."""
    return running(pod) and conditions.is_true(pod.get("status"), "Ready")


def claim_label(pod: dict[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(CLAIM_LABEL) or "")


def free(pod: dict[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(POOL_LABEL) == POOL and not labels.get(CLAIM_LABEL) and running(pod)


def has_secret_volume(pod: dict[str, Any]) -> bool:
    """The claim's Secret volume is in the pod's spec (the operator's PUT of /dynamic)."""
    return any(v.get("name") == SECRET_VOLUME
               for v in (pod.get("spec") or {}).get("volumes") or [])


def mounts_secret(pod: dict[str, Any]) -> bool:
    """Every container reports the claim's Secret mounted (status volumeMounts)."""
    containers = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(containers) and all(
        any(m.get("mountPath") == SECRET_DIR for m in c.get("volumeMounts") or [])
        for c in containers)


def claim_ready(claim: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (claim.get("status") or {}).get("conditions") or [])


def pod_template() -> dict[str, Any]:
    return {"terminationGracePeriodSeconds": 2, "containers": [
        {"name": CONTAINER, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
         "command": COMMAND}]}


def warm_pool(replicas: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WarmPool",
            "metadata": {"name": POOL},
            "spec": {"replicas": replicas, "releasePolicy": "Recycle",
                     "template": {"metadata": {"labels": {"app": "bench-warm-pool"}},
                                  "spec": pod_template()}}}


def cold_pod(name: str, secret: str) -> dict[str, Any]:
    """The pool's pod as a pod of its own, with the Secret mounted where a claim gets it."""
    spec = copy.deepcopy(pod_template())
    spec["volumes"] = [{"name": SECRET_VOLUME, "secret": {"secretName": secret}}]
    for container in spec["containers"]:
        container["volumeMounts"] = [{"name": SECRET_VOLUME, "mountPath": SECRET_DIR,
                                      "readOnly": True}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "bench-warm-pool-cold"}},
            "spec": spec}


def secret(name: str, token: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "stringData": {"token": token}}


def claim(name: str, secret_name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Claim", "metadata": {"name": name},
            "spec": {"poolName": POOL, "secretName": secret_name}}


Check = Callable[[dict[str, dict[str, Any]]], str | None]


class Watch:
    """An open watch of a collection: the latest object of each name, and waits for the first
    event after which a check over them holds (the check names the object that made it hold;
    the result is that object and when the client saw it)."""

    def __init__(self, api: Api, path: str, what: str) -> None:
        self.api, self.path, self.what = api, path, what
        self.latest: dict[str, dict[str, Any]] = {}
        self.arrived: dict[str, float] = {}
        self.waiters: list[tuple[Check, asyncio.Future[tuple[dict[str, Any], float]]]] = []
        self.response: aiohttp.ClientResponse | None = None
        self.reader: asyncio.Task[None] | None = None

    async def open(self) -> None:
        listed = await self.api.call("GET", self.path)
        for item in listed.get("items") or []:
            self.latest[item["metadata"]["name"]] = item
            self.arrived[item["metadata"]["name"]] = now()
        self.response = await self.api.watch_session.get(
            self.api.base + self.path,
            params={"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"],
                    "timeoutSeconds": "3600"})
        if self.response.status != 200:
            raise BenchError(f"watch {self.path}: {self.response.status} "
                             f"{await self.response.text()}")
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
                    raise BenchError(f"the watch of {self.what} failed: {obj}")
                name = str((obj.get("metadata") or {}).get("name"))
                if kind == "DELETED":
                    self.latest.pop(name, None)
                else:
                    self.latest[name] = obj
                self.arrived[name] = arrived
                self._settle(name, obj, arrived)
            raise BenchError(f"the watch of {self.what} was closed by the server")
        except BaseException as error:
            for _, future in self.waiters:
                if not future.done():
                    future.set_exception(error if isinstance(error, Exception)
                                         else BenchError("the watch stopped"))
            raise

    def _settle(self, name: str, obj: dict[str, Any], arrived: float) -> None:
        for check, future in list(self.waiters):
            if not future.done() and check(self.latest) is not None:
                future.set_result((obj, arrived))

    async def wait(self, check: Check, what: str, timeout: float = WAIT_TIMEOUT
                   ) -> tuple[dict[str, Any], float]:
        """The first state (the latest one already seen counts: then the time the named
        object last changed) in which `check` holds."""
        named = check(self.latest)
        if named is not None:
            return self.latest.get(named, {}), self.arrived.get(named, now())
        future: asyncio.Future[tuple[dict[str, Any], float]] = \
            asyncio.get_running_loop().create_future()
        waiter = (check, future)
        self.waiters.append(waiter)
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise BenchError(f"{what}: not within {timeout:.0f}s") from None
        finally:
            self.waiters.remove(waiter)


def named(name: str, predicate: Callable[[dict[str, Any]], bool]) -> Check:
    """A check that object `name` exists and satisfies `predicate`."""
    return lambda latest: name if name in latest and predicate(latest[name]) else None


def gone(name: str) -> Check:
    return lambda latest: name if name not in latest else None


def any_pod(predicate: Callable[[dict[str, Any]], bool]) -> Check:
    return lambda latest: next((n for n, p in latest.items() if predicate(p)), None)


def pool_filled(size: int) -> Check:
    def check(latest: dict[str, dict[str, Any]]) -> str | None:
        ready = [n for n, p in latest.items() if free(p)]
        return ready[-1] if len(ready) >= size else None
    return check


def read_secret(kubelet_dir: Path, pod: dict[str, Any]) -> str | None:
    """The claim Secret's `token` as the container sees it (through its init's root, so
    through its mount namespace); None when there is none."""
    status = next(c for c in pod["status"]["containerStatuses"] if c["name"] == CONTAINER)
    started = (kubelet_dir / "pods" / pod["metadata"]["uid"] / "containers" / CONTAINER /
               str(status.get("restartCount") or 0) / "started")
    pid = int(read_kv(started)["pid"])
    token = Path(f"/proc/{pid}/root{SECRET_DIR}/token")
    return token.read_text() if token.exists() else None


def container_pid(kubelet_dir: Path, pod: dict[str, Any]) -> int:
    started = (kubelet_dir / "pods" / pod["metadata"]["uid"] / "containers" / CONTAINER /
               "0" / "started")
    return int(read_kv(started)["pid"])


# --- the operator --------------------------------------------------------------------------


class Operator:
    """The example's operator, `kopf run --standalone`, as its ServiceAccount; output to
    `work_dir/operator.log`."""

    def __init__(self, work_dir: Path) -> None:
        self.kubeconfig = work_dir / "operator.kubeconfig"
        self.log_path = work_dir / "operator.log"
        self.process: subprocess.Popen[bytes] | None = None

    def write_kubeconfig(self, admin: Path, token: str) -> None:
        cluster = yaml.safe_load(admin.read_text())["clusters"][0]
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
            "users": [{"name": OPERATOR_ACCOUNT, "user": {"token": token}}],
            "contexts": [{"name": OPERATOR_ACCOUNT, "context": {
                "cluster": cluster["name"], "user": OPERATOR_ACCOUNT}}],
            "current-context": OPERATOR_ACCOUNT}))
        self.kubeconfig.chmod(0o600)

    def start(self) -> None:
        argv = [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", NAMESPACE,
                str(EXAMPLE / "operator.py")]
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                argv, env={**os.environ, "KUBECONFIG": str(self.kubeconfig)}, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO_ROOT)

    def check(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise BenchError(f"the operator exited {self.process.returncode}:\n"
                             f"{self.log_tail()}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


# --- the rounds ----------------------------------------------------------------------------


async def wait_until_ready(api: Api) -> str:
    """The node Ready, the namespaces, the CRDs Established, the RBAC; the node's runtime."""
    deadline = time.monotonic() + READY_TIMEOUT
    version = ""
    while not version:
        with contextlib.suppress(BenchError):
            node = await api.call("GET", f"/api/v1/nodes/{NODE_NAME}")
            status = node.get("status") or {}
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in status.get("conditions") or []):
                version = str(status["nodeInfo"]["containerRuntimeVersion"])
        if not version and time.monotonic() > deadline:
            raise BenchError(f"node {NODE_NAME} not Ready within {READY_TIMEOUT:.0f}s")
        await asyncio.sleep(0.1)
    for namespace in (NAMESPACE, OPERATOR_NAMESPACE):
        await api.call("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            expect=(201, 409))
    for obj in manifests(EXAMPLE / "crds.yaml") + manifests(EXAMPLE / "rbac.yaml"):
        await api.call("POST", collection_path(obj), obj, expect=(201, 409))
    crds = [obj["metadata"]["name"] for obj in manifests(EXAMPLE / "crds.yaml")]
    for name in crds:
        while True:
            crd = await api.call(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            if any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (crd.get("status") or {}).get("conditions") or []):
                break
            if time.monotonic() > deadline:
                raise BenchError(f"CRD {name} not Established within {READY_TIMEOUT:.0f}s")
            await asyncio.sleep(0.1)
    while True:
        with contextlib.suppress(BenchError):
            await api.call("GET", core_path("serviceaccounts", "default"))
            return version
        if time.monotonic() > deadline:
            raise BenchError(f"no default ServiceAccount in {NAMESPACE} in time")
        await asyncio.sleep(0.1)


async def operator_token(api: Api) -> str:
    """A TokenRequest token of the operator's ServiceAccount."""
    answer = await api.call(
        "POST", core_path("serviceaccounts", f"{OPERATOR_ACCOUNT}/token",
                          namespace=OPERATOR_NAMESPACE),
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 24 * 3600}}, expect=(201,))
    return str(answer["status"]["token"])


class Rounds:
    """Claims on the pool and cold starts, one of each at a time."""

    def __init__(self, api: Api, pods: Watch, claims: Watch, kubelet_dir: Path,
                 operator: Operator, pool_size: int) -> None:
        self.api, self.pods, self.claims = api, pods, claims
        self.kubelet_dir, self.operator, self.pool_size = kubelet_dir, operator, pool_size
        self.index = 0

    async def claim(self) -> tuple[Record, float]:
        """One claim, timed until Ready; checked, released and waited back into the pool
        (untimed). The record and the operator's bindMilliseconds."""
        self.index += 1
        name, token = f"claim-{self.index}", f"claim-{self.index}-{secrets.token_hex(8)}"
        self.operator.check()
        await self.pods.wait(pool_filled(self.pool_size), f"{self.pool_size} free pods")
        record = Record(name)
        marks = record.marks
        marks["sent"] = now()
        await self.api.call("POST", core_path("secrets"), secret(name, token), expect=(201,))
        marks["secret_created"] = now()
        created = await self.api.call("POST", custom_path("claims"), claim(name, name),
                                      expect=(201,))
        marks["claim_created"] = now()
        uid = str(created["metadata"]["uid"])
        (pod, marks["labelled"]), (_, marks["swapped"]), (mounted, marks["mounted"]), \
            (bound, marks[END]) = await asyncio.gather(
                self.pods.wait(any_pod(lambda p: claim_label(p) == uid),
                               f"{name}: a pod labelled for it"),
                self.pods.wait(any_pod(lambda p: claim_label(p) == uid and
                                       has_secret_volume(p)),
                               f"{name}: its pod with the Secret volume"),
                self.pods.wait(any_pod(lambda p: claim_label(p) == uid and mounts_secret(p)),
                               f"{name}: its pod reporting the Secret mounted"),
                self.claims.wait(named(name, claim_ready), f"{name}: Ready"))
        pod_name = str(bound["status"]["podName"])
        if pod_name != mounted["metadata"]["name"] or pod_name != pod["metadata"]["name"]:
            raise BenchError(f"{name}: Ready on pod {pod_name}, but pod "
                             f"{pod['metadata']['name']} took its label")
        restarts = [c.get("restartCount") for c in mounted["status"]["containerStatuses"]]
        if any(restarts):
            raise BenchError(f"{name}: pod {pod_name}'s container restarted ({restarts}): "
                             "the Secret did not come in live")
        got = await asyncio.to_thread(read_secret, self.kubelet_dir, mounted)
        if got != token:
            raise BenchError(f"{name}: {SECRET_DIR}/token in pod {pod_name} reads {got!r}, "
                             f"not {token!r}")
        await self.api.call("DELETE", custom_path("claims", name), expect=(200, 202))
        await self.claims.wait(gone(name), f"{name}: released and deleted")
        released, _ = await self.pods.wait(named(pod_name, free),
                                           f"pod {pod_name} back in the pool")
        left = await asyncio.to_thread(read_secret, self.kubelet_dir, released)
        if left is not None:
            raise BenchError(f"{name}: released pod {pod_name} still has the token ({left!r})")
        await self.api.call("DELETE", core_path("secrets", name), expect=(200,))
        return record, float(bound["status"].get("bindMilliseconds", math.nan))

    async def cold(self) -> Record:
        """One cold start, timed until the pod is Ready; checked and deleted (untimed)."""
        self.index += 1
        name, token = f"cold-{self.index}", f"cold-{self.index}-{secrets.token_hex(8)}"
        record = Record(name)
        marks = record.marks
        marks["sent"] = now()
        await self.api.call("POST", core_path("secrets"), secret(name, token), expect=(201,))
        marks["secret_created"] = now()
        await self.api.call("POST", core_path("pods"), cold_pod(name, name), expect=(201,))
        marks["pod_created"] = now()
        (_, marks["scheduled"]), (pod, marks[END]) = await asyncio.gather(
            self.pods.wait(named(name, lambda p: bool((p.get("spec") or {}).get("nodeName"))),
                           f"pod {name} scheduled"),
            self.pods.wait(named(name, pod_ready), f"pod {name} Ready"))
        got = await asyncio.to_thread(read_secret, self.kubelet_dir, pod)
        if got != token:
            raise BenchError(f"{name}: {SECRET_DIR}/token reads {got!r}, not {token!r}")
        await asyncio.to_thread(wait_until_trapping, container_pid(self.kubelet_dir, pod))
        await self.api.call("DELETE", core_path("pods", name), expect=(200, 202))
        await self.pods.wait(gone(name), f"pod {name} gone")
        await self.api.call("DELETE", core_path("secrets", name), expect=(200,))
        return record

    async def tear_down(self) -> None:
        """The operator stopped first (or it would refill the pool), then the pool and its
        pods deleted and waited out."""
        await asyncio.to_thread(self.operator.stop)
        for pod in list(self.pods.latest.values()):  # running long since: a formality
            with contextlib.suppress(OSError, KeyError, ValueError):
                await asyncio.to_thread(wait_until_trapping,
                                        container_pid(self.kubelet_dir, pod))
        await self.api.call("DELETE", custom_path("warmpools", POOL), expect=(200, 202, 404))
        await self.api.call("DELETE", core_path("pods"), expect=(200,))
        await self.pods.wait(lambda latest: "" if not latest else None, "every pod gone")


async def bench_cluster(cfg: Config, up: EphemeraUp, operator: Operator
                        ) -> tuple[Run, Run, str]:
    """Set-up, warm-up and the measured rounds on a started cluster: (claims, cold starts,
    the node's runtime)."""
    api = Api(up)
    try:
        with progress(f"waiting for node {NODE_NAME}, the CRDs and the RBAC"):
            version = await wait_until_ready(api)
            operator.write_kubeconfig(up.kubeconfig, await operator_token(api))
        pods = Watch(api, core_path("pods"), "pods")
        claims = Watch(api, custom_path("claims"), "claims")
        await pods.open()
        await claims.open()
        try:
            rounds = Rounds(api, pods, claims, up.kubelet_dir, operator, cfg.pool)
            with progress(f"starting the operator and a pool of {cfg.pool} pods"):
                operator.start()
                await api.call("POST", custom_path("warmpools"), warm_pool(cfg.pool),
                               expect=(201,))
                await pods.wait(pool_filled(cfg.pool), f"{cfg.pool} free pods in the pool",
                                timeout=READY_TIMEOUT)
            with progress(f"warm-up ({cfg.warmup} claims and cold starts)"):
                for _ in range(cfg.warmup):
                    await rounds.claim()
                    await rounds.cold()
            claimed, cold = Run(CLAIM), Run(COLD)
            with progress(f"{cfg.claims} claims and cold starts, interleaved ({version})"):
                for _ in range(cfg.claims):
                    record, bind_ms = await rounds.claim()
                    claimed.records.append(record)
                    claimed.bind_ms.append(bind_ms)
                    cold.records.append(await rounds.cold())
            with progress("stopping the operator, deleting the pool's pods"):
                await rounds.tear_down()
        finally:
            await pods.close()
            await claims.close()
    finally:
        await api.close()
    return claimed, cold, version


# --- report --------------------------------------------------------------------------------


def step_rows(run: Run, steps: Sequence[tuple[str, str]]) -> list[list[str]]:
    total = run.measurement()
    rows = []
    for (start, _), (end, label) in itertools.pairwise(steps):
        values = [v for r in run.records if not math.isnan(v := r.between(start, end))]
        rows.append(step_row(label, values, total.median))
    rows.append(step_row("total", total.latencies, total.median))
    return rows


def results_table(runs: Sequence[Run]) -> str:
    what = {CLAIM: "POST Secret, POST Claim → Ready on the Claim's watch (Secret readable "
                   "in the pod)",
            COLD: "POST Secret, POST Pod mounting it → Ready on the watch (Secret "
                  "readable in the pod)"}
    rows = []
    for run in runs:
        m = run.measurement()
        rows.append([run.backend, str(m.count), format_ms(m.median),
                     format_ms(percentile(m.latencies, 95)), format_ms(m.p99), what[run.backend]])
    return markdown_table(["backend", "n", "p50 ms", "p95 ms", "p99 ms", "what"], rows,
                          align="lrrrrl")


def ratio_values(claimed: Run, cold: Run) -> dict[str, dict[str, float]]:
    """How many times faster a claim is than a cold start, at p50, p95 and p99."""
    a, b = cold.measurement().latencies, claimed.measurement().latencies
    return {f"{COLD} ÷ claim": {f"p{q}": ratio(percentile(a, q), percentile(b, q))
                                for q in (50, 95, 99)}}


def report(claimed: Run, cold: Run, cfg: Config, version: str, machine: dict[str, str],
           command: str, started: datetime.datetime, left: Sequence[str]) -> str:
    bind = [v for v in claimed.bind_ms if not math.isnan(v)]
    ratios = [[label, *(format_number(v[q]) for q in ("p50", "p95", "p99"))]
              for label, v in ratio_values(claimed, cold).items()]
    lines = [
        f"# bench.warm_pool: {cfg.claims} claims on a warm pool of {cfg.pool} pods against "
        f"{cfg.claims} cold starts, ephemera on {version} (--runtime {cfg.runtime})",
        "",
        f"Command: `{command}`  ",
        f"Started: {started.isoformat(timespec='seconds')}  ",
        *(f"{name.capitalize()}: {value}  " for name, value in machine.items()),
        f"Warm-up: {cfg.warmup} claims and cold starts, not counted  ",
        "Operator: examples/warm-pool/operator.py (`kopf run --standalone`), as its "
        "ServiceAccount with the example's RBAC  ",
        "Left behind: " + ("nothing (no mount, runtime state or cgroup of the run)"
                           if not left else f"{'; '.join(left)} (cleaned up afterwards)"),
        "",
        "## Results",
        "",
        results_table([claimed, cold]),
        "",
        "## Ratios",
        "",
        "`cold start ÷ claim`: how many times faster a claim on the warm pool is ready than "
        "a cold start.",
        "",
        markdown_table(["ratio", "p50", "p95", "p99"], ratios),
        "",
        "## The operator's own measure",
        "",
        "`status.bindMilliseconds`: from the operator's first attempt at the claim to the "
        "mount live in the container.",
        "",
        markdown_table(["measure", "n", "p50 ms", "p95 ms", "p99 ms"], [[
            "bindMilliseconds", str(len(bind)),
            *(format_ms(percentile(bind, q) / 1e3) for q in (50, 95, 99))]]),
        "",
        "## Where the time goes: warm pool claim",
        "",
        "Per claim, the time from the previous milestone, as the client's watches saw them; "
        "the p50s need not add up to the total's.",
        "",
        markdown_table(STEP_HEADERS, step_rows(claimed, CLAIM_STEPS)),
        "",
        "## Where the time goes: cold start",
        "",
        markdown_table(STEP_HEADERS, step_rows(cold, COLD_STEPS)),
    ]
    return "\n".join(lines) + "\n"


def as_json(claimed: Run, cold: Run, cfg: Config, version: str, machine: dict[str, str],
            command: str, started: datetime.datetime, left: Sequence[str]) -> dict[str, Any]:
    def finite(value: float) -> float | None:
        return None if math.isnan(value) else value

    return {
        "command": command,
        "started": started.isoformat(timespec="seconds"),
        "config": {"claims": cfg.claims, "pool": cfg.pool, "warmup": cfg.warmup,
                   "runtime": cfg.runtime},
        "machine": machine,
        "runtime": version,
        "left_behind": list(left),
        "results": [{**run.measurement().as_dict(),
                     "p95_ms": percentile(run.measurement().latencies, 95) * 1e3}
                    for run in (claimed, cold)],
        "ratios": {label: {q: finite(v) for q, v in values.items()}
                   for label, values in ratio_values(claimed, cold).items()},
        "bind_milliseconds": [finite(v) for v in claimed.bind_ms],
        "records": {run.backend: [{"name": r.name, "marks": r.marks} for r in run.records]
                    for run in (claimed, cold)},
    }


# --- main ----------------------------------------------------------------------------------


def run_all(cfg: Config) -> tuple[Run, Run, str, list[str]]:
    up = EphemeraUp(cfg.work_dir / "data", ["--runtime", cfg.runtime, "--node-name", NODE_NAME])
    operator = Operator(cfg.work_dir)
    try:
        with progress(f"starting ephemera up (--runtime {cfg.runtime})"):
            up.start()
        try:
            claimed, cold, version = asyncio.run(bench_cluster(cfg, up, operator))
        except BaseException:
            log(f"operator log (tail):\n{operator.log_tail()}")
            log(f"ephemera up logs (tail):\n{up.log_tail()}")
            raise
        finally:
            operator.stop()
            with progress("stopping ephemera up"):
                up.stop()
    finally:
        operator.stop()
        up.stop()
        with progress("checking that nothing is left behind"):
            left = clean_leftovers(cfg.work_dir, up)
        for item in left:
            log(f"left behind (now removed): {item}")
    return claimed, cold, version, left


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.warm_pool",
        description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--claims", type=int, default=None, metavar="N",
                        help=f"measured claims (and cold starts; default {DEFAULT_CLAIMS}; "
                             f"{QUICK_CLAIMS} with --quick)")
    parser.add_argument("--quick", action="store_true", help=f"a short run: {QUICK_CLAIMS}")
    parser.add_argument("--pool", type=int, default=DEFAULT_POOL, metavar="P",
                        help=f"the WarmPool's replicas (default {DEFAULT_POOL})")
    parser.add_argument("--runtime", choices=RUNTIMES, default="auto",
                        help="ephemera's runtime (`ephemera up --runtime`; default auto)")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, metavar="W",
                        help=f"rounds before the measured ones (default {DEFAULT_WARMUP})")
    parser.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                        help="where the data dir and the operator's log go (default: a "
                             "temporary dir, removed)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the results (every operation's milestones) as JSON")
    args = parser.parse_args(argv)
    if args.claims is None:
        args.claims = QUICK_CLAIMS if args.quick else DEFAULT_CLAIMS
    if args.claims < 1:
        parser.error("--claims must be at least 1")
    if args.pool < 1:
        parser.error("--pool must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def run(work_dir: Path, command: str) -> tuple[str, dict[str, Any]]:
        cfg = Config(claims=args.claims, pool=args.pool, warmup=args.warmup,
                     runtime=args.runtime, work_dir=work_dir)
        started = datetime.datetime.now(datetime.UTC)
        machine = machine_description(cfg.work_dir)
        claimed, cold, version, left = run_all(cfg)
        return (report(claimed, cold, cfg, version, machine, command, started, left),
                as_json(claimed, cold, cfg, version, machine, command, started, left))

    return run_bench("bench.warm_pool", argv, args, "it runs containers",
                     "ephemera-bench-warm-pool-", run)


if __name__ == "__main__":
    sys.exit(main())

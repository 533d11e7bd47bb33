"""CustomResourceDefinitions through their life with the real kubectl on a real
`ephemera up` (one cluster for the module): apply of a CRD and `kubectl wait` for
Established, `explain`, `apply`, `get` with the printer columns, by short name and by
category, `edit`, validation and CEL errors as kubectl prints them, the status and scale
subresources, another served version, and deletion of the CRD with its objects; then a kopf
operator (`kopf_operator/`, run with `kopf run`) reacting to creates, updates and deletes;
and the warm-pool example operator with real containers (see its section below)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    LOOP,
    Cluster,
    ClusterAccess,
    Kubectl,
    as_identity,
    exec_in,
    kill_kubelet,
    kubelet_cluster_fixtures,
    volume_dir,
    wait,
)

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, load_kubeconfig, resource_path

pytestmark = pytest.mark.e2e

# One cluster (with a node: the warm pool runs real containers) for the whole module.
crd_cluster, k = kubelet_cluster_fixtures("crd_cluster", "crd-cluster", "crd-node")

MANIFESTS = Path(__file__).parent / "manifests"
CRD = str(MANIFESTS / "crontab-crd.yaml")
CRONTAB = str(MANIFESTS / "crontab.yaml")
CRD_NAME = "crontabs.stable.example.com"


@pytest.fixture
def crontabs(k: Kubectl) -> Kubectl:
    """The module's CRD applied (idempotent) and Established."""
    k("apply", "-f", CRD)
    k("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=30s")
    return k


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\nset -e\n" + body)
    path.chmod(0o755)
    return str(path)


def test_crd_apply_explain_get_with_columns_short_names_and_categories(
        crontabs: Kubectl) -> None:
    k = crontabs
    crd = k.json("get", "crd", CRD_NAME)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert "crontabs.stable.example.com" in k("get", "crds").stdout

    explained = k("explain", "crontab.spec").stdout
    assert "KIND:       CronTab" in explained
    assert "cronSpec\t<string> -required-" in explained
    assert "The schedule, in cron format." in explained

    assert k("apply", "-f", CRONTAB).stdout == "crontab.stable.example.com/nightly created\n"
    assert k("apply", "-f", CRONTAB).stdout == \
        "crontab.stable.example.com/nightly unchanged\n"
    table = k("get", "crontabs").stdout.splitlines()
    assert table[0].split() == ["NAME", "SPEC", "REPLICAS", "AGE"]
    assert table[1].split()[:7] == ["nightly", "*", "*", "*", "*", "*/5", "1"]
    assert k("get", "ct", "nightly", "-o", "name").stdout == \
        "crontab.stable.example.com/nightly\n"
    assert "crontab.stable.example.com/nightly" in k("get", "all", "-o", "name").stdout
    got = k.json("get", "crontab", "nightly")
    assert got["spec"]["replicas"] == 1 and got["spec"]["maxReplicas"] == 10
    # the other served version, with apiVersion rewritten
    beta = k.json("get", "crontabs.v1beta1.stable.example.com", "nightly")
    assert beta["apiVersion"] == "stable.example.com/v1beta1"
    assert beta["spec"]["cronSpec"] == "* * * * */5"


def test_crd_edit_server_side_apply_and_field_selector(crontabs: Kubectl,
                                                       tmp_path: Path) -> None:
    k = crontabs
    k("apply", "-f", CRONTAB)
    editor = script(tmp_path / "editor.sh",
                    "sed -i 's/busybox:1.36/busybox:1.37/' \"$1\"\n")
    result = k("edit", "crontab", "nightly", env={"EDITOR": editor, "KUBE_EDITOR": editor})
    assert result.stdout == "crontab.stable.example.com/nightly edited\n"
    assert k.json("get", "ct", "nightly")["spec"]["image"] == "busybox:1.37"
    applied = tmp_path / "ssa.yaml"
    applied.write_text(Path(CRONTAB).read_text().replace(
        '  - name: A\n    value: "1"\n', '  - name: B\n    value: "2"\n'))
    out = k("apply", "--server-side", "--field-manager=tester", "--force-conflicts", "-f",
            str(applied))
    assert out.stdout == "crontab.stable.example.com/nightly serverside-applied\n"
    env = k.json("get", "ct", "nightly")["spec"]["env"]
    # a list-type map: the new manager's entry is merged with the one the other owns
    assert {e["name"]: e["value"] for e in env} == {"A": "1", "B": "2"}
    names = k("get", "crontabs", "--field-selector", "metadata.name=nightly",
              "-o", "name").stdout
    assert names == "crontab.stable.example.com/nightly\n"


def test_crd_validation_and_cel_errors_as_kubectl_prints_them(crontabs: Kubectl,
                                                              tmp_path: Path) -> None:
    k = crontabs
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(CRONTAB).read_text().replace("nightly", "bad").replace(
        'cronSpec: "* * * * */5"', "cronSpec: 7\n  replicas: -1"))
    result = k("apply", "-f", str(bad), check=False)
    assert result.returncode == 1
    assert 'The CronTab "bad" is invalid: ' in result.stderr
    assert ('spec.cronSpec: Invalid value: "integer": spec.cronSpec in body must be of type '
            'string: "integer"') in result.stderr
    assert ("spec.replicas: Invalid value: -1: spec.replicas in body should be greater than "
            "or equal to 0") in result.stderr
    cel = tmp_path / "cel.yaml"
    cel.write_text(Path(CRONTAB).read_text().replace("nightly", "cel").replace(
        "image: busybox:1.36", "image: busybox:1.36\n  replicas: 20\n  maxReplicas: 3"))
    result = k("apply", "-f", str(cel), check=False)
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        'The CronTab "cel" is invalid: spec: Invalid value: "object": replicas must not '
        "exceed maxReplicas")


def test_crd_status_and_scale_subresources(crontabs: Kubectl) -> None:
    k = crontabs
    k("apply", "-f", CRONTAB)
    status = json.dumps({"status": {"replicas": 1, "phase": "Running",
                                    "selector": "app=nightly"}})
    k("patch", "crontab", "nightly", "--subresource=status", "--type=merge", "-p", status)
    got = k.json("get", "crontab", "nightly")
    assert got["status"]["phase"] == "Running"
    assert k("scale", "crontab", "nightly", "--replicas=3").stdout == \
        "crontab.stable.example.com/nightly scaled\n"
    got = k.json("get", "crontab", "nightly")
    assert got["spec"]["replicas"] == 3
    scale = json.loads(k("get", "--raw", f"/apis/stable.example.com/v1/namespaces/"
                                         f"{k.namespace}/crontabs/nightly/scale").stdout)
    assert scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": 1, "selector": "app=nightly"}
    # a spec write keeps the status the status subresource wrote
    k("patch", "crontab", "nightly", "--type=merge", "-p",
      '{"spec":{"image":"busybox:1.38"},"status":{"phase":"Lost"}}')
    assert k.json("get", "crontab", "nightly")["status"]["phase"] == "Running"


def test_deleting_a_crd_deletes_its_objects(k: Kubectl, tmp_path: Path) -> None:
    other = tmp_path / "widgets.yaml"
    other.write_text(Path(CRD).read_text()
                     .replace("crontabs", "widgets").replace("crontab", "widget")
                     .replace("CronTab", "Widget").replace("shortNames: [ct]",
                                                           "shortNames: [wd]"))
    k("apply", "-f", str(other))
    k("wait", "--for=condition=Established", "crd/widgets.stable.example.com",
      "--timeout=30s")
    widget = tmp_path / "widget.yaml"
    widget.write_text(Path(CRONTAB).read_text().replace("CronTab", "Widget"))
    k("apply", "-f", str(widget))
    assert k("get", "widgets", "-o", "name").stdout == "widget.stable.example.com/nightly\n"
    # a watch of them ends cleanly once the CRD is gone (not at its timeout), after the
    # object's deletion
    watch = k.stream("get", "widgets", "-w", "-o", "name")
    watch.wait_for_line(lambda line: "nightly" in line)
    assert k("delete", "crd", "widgets.stable.example.com", "--timeout=30s").stdout == \
        'customresourcedefinition.apiextensions.k8s.io "widgets.stable.example.com" deleted\n'
    assert watch.wait(timeout=30) == 0, watch.stderr_lines
    assert watch.stdout_lines == ["widget.stable.example.com/nightly"] * 2  # listed, deleted
    assert watch.stderr_lines == []
    result = k("get", "widgets", check=False)
    assert result.returncode == 1
    # kubectl's discovery cache may still name the resource: then the list is a 404
    assert ('the server doesn\'t have a resource type "widgets"' in result.stderr
            or 'Unable to list "stable.example.com/v1, Resource=widgets": the server could '
               "not find the requested resource" in result.stderr), result.stderr
    assert "widgets" not in k("api-resources", "--api-group=stable.example.com").stdout


def test_rbac_applies_to_custom_resources(crontabs: Kubectl, tmp_path: Path) -> None:
    k = crontabs
    k("apply", "-f", CRONTAB)
    alice = as_identity(k, "alice", tmp_path)
    denied = alice("get", "crontabs", check=False)
    assert denied.returncode == 1
    assert denied.stderr.strip() == (
        'Error from server (Forbidden): crontabs.stable.example.com is forbidden: User "alice" '
        'cannot list resource "crontabs" in API group "stable.example.com" in the namespace '
        f'"{k.namespace}"')
    k("create", "role", "crontab-reader", "--verb=get,list", "--resource=crontabs")
    k("create", "rolebinding", "alice-reads", "--role=crontab-reader", "--user=alice")
    assert alice("get", "crontabs", "-o", "name").stdout == \
        "crontab.stable.example.com/nightly\n"
    denied = alice("delete", "crontab", "nightly", check=False)
    assert 'cannot delete resource "crontabs" in API group "stable.example.com"' \
        in denied.stderr


# --- a kopf operator --------------------------------------------------------------------------

OPERATOR = Path(__file__).parent / "kopf_operator" / "crontab_operator.py"


def _events(k: Kubectl, name: str) -> dict[str, str]:
    listed = k.json("get", "events", "--field-selector", f"involvedObject.name={name}")
    return {e["reason"]: e["message"] for e in listed["items"]}


def test_kopf_operator_reacts_to_create_update_and_delete(crontabs: Kubectl,
                                                          tmp_path: Path) -> None:
    k = crontabs
    deleted_log = tmp_path / "deleted.log"
    deleted_log.touch()
    argv = [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace",
            str(k.namespace), str(OPERATOR)]
    env = {**os.environ, "KUBECONFIG": str(k.cluster.kubeconfig), "HOME": str(k.home),
           "CRONTAB_DELETED_LOG": str(deleted_log)}
    output = tmp_path / "kopf.out"
    with open(output, "wb") as out:
        operator = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
    try:
        k("apply", "-f", CRONTAB)
        got = wait(lambda: (lambda o: o if o.get("status", {}).get("phase") == "Scheduled"
                            else None)(k.json("get", "ct", "nightly")),
                   "kopf handled the create", timeout=30)
        assert got["status"]["created"] == {"image": "busybox:1.36"}
        assert "kopf.zalando.org/KopfFinalizerMarker" in got["metadata"]["finalizers"]
        assert wait(lambda: _events(k, "nightly").get("Scheduled"), "the create event",
                    timeout=30) == "nightly runs busybox:1.36"

        k("patch", "crontab", "nightly", "--type=merge", "-p",
          '{"spec":{"image":"busybox:1.37"}}')
        got = wait(lambda: (lambda o: o if o.get("status", {}).get("phase") == "Updated"
                            else None)(k.json("get", "ct", "nightly")),
                   "kopf handled the update", timeout=30)
        assert got["status"]["image"] == "busybox:1.37"
        assert wait(lambda: _events(k, "nightly").get("ImageChanged"), "the update event",
                    timeout=30) == "busybox:1.36 -> busybox:1.37"

        k("delete", "crontab", "nightly", "--timeout=30s")
        assert deleted_log.read_text() == f"{k.namespace}/nightly\n"
        assert k("get", "ct", "nightly", check=False).returncode == 1
    finally:
        operator.terminate()
        try:
            operator.wait(15)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
    log = output.read_text(errors="replace")
    assert "Traceback" not in log, log


# --- the warm-pool example (examples/warm-pool/) ----------------------------------------------
# Its operator runs with `kopf run` as its ServiceAccount (the example's RBAC, through a token
# kubeconfig), keeps a pool of ready pods, binds claims with their Secrets swapped in live
# (`pods/NAME/dynamic`, no restart), queues a claim while the pool is empty, returns a
# released pod to the pool without the claim's Secret; under a stream of claims each Secret is
# only in its own pod; SIGKILLed in the middle of a bind or a release (its test hook pauses it
# at a named step), it finishes both once started again.

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "warm-pool"
TOKEN_PATH = "/var/run/claim/secret/token"


def _sa_kubeconfig(k: Kubectl, path: Path) -> Path:
    """A kubeconfig for the operator's ServiceAccount (a TokenRequest token)."""
    token = k.cluster.kubectl("create", "token", "warm-pool-operator", "-n", "warm-pool",
                              "--duration=1h").stdout.strip()
    admin = yaml.safe_load(k.cluster.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": cluster["name"],
                                                      "user": "operator"}}],
        "current-context": "operator"}))
    return path


class Operator:
    def __init__(self, k: Kubectl, kubeconfig: Path, log: Path) -> None:
        self.k, self.kubeconfig, self.log = k, kubeconfig, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, pause_at: str = "") -> None:
        """`kopf run` the example's operator; with `pause_at`, its test hook pauses it at that
        step (WARM_POOL_PAUSE_AT, see the example's README)."""
        argv = [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace",
                str(self.k.namespace), str(EXAMPLE / "operator.py")]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
               "WARM_POOL_PAUSE_AT": pause_at}
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(argv, env=env, stdout=out,
                                            stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _install_example(k: Kubectl) -> None:
    """The example's CRDs (Established) and RBAC, idempotent."""
    k.cluster.kubectl("apply", "-f", str(EXAMPLE / "crds.yaml"))
    k.cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                      "crd/warmpools.warmpool.ephemera.dev", "crd/claims.warmpool.ephemera.dev")
    k.cluster.kubectl("create", "namespace", "warm-pool", check=False)
    k.cluster.kubectl("apply", "-f", str(EXAMPLE / "rbac.yaml"))


def _running_operator(k: Kubectl, work: Path) -> Iterator[Operator]:
    """Body of an operator fixture: the example installed, its operator running in `k`'s
    namespace; stopped afterwards, and its log must hold no traceback."""
    _install_example(k)
    running = Operator(k, _sa_kubeconfig(k, work / "operator.kubeconfig"),
                       work / "operator.log")
    running.start()
    try:
        yield running
    finally:
        running.stop()
        log = running.log.read_text(errors="replace")
        # What a handler in flight logs while the operator stops (its request cut short)
        # is kopf's shutdown, not a failure of the operator.
        before_stop = log.split("Signal SIGTERM is received", 1)[0]
        assert "Traceback" not in before_stop or "CancelledError" in before_stop, log[-6000:]


def _claim(name: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": "warmpool.ephemera.dev/v1alpha1", "kind": "Claim",
            "metadata": {"name": name}, "spec": {"poolName": "pool", "secretName": secret}}


def _bound(k: Kubectl, name: str) -> dict[str, Any] | None:
    claim: dict[str, Any] = k.json("get", "claim", name)
    conditions = {c["type"]: c["status"] for c in (claim.get("status") or {}).get(
        "conditions") or []}
    return claim if conditions.get("Ready") == "True" else None


def _bound_pods(k: Kubectl) -> dict[str, str]:
    """pod -> claim uid, for the pool's pods that carry a claim."""
    pods = k.json("get", "pods", "-l", "warmpool.ephemera.dev/pool=pool")["items"]
    return {p["metadata"]["name"]: p["metadata"]["labels"]["warmpool.ephemera.dev/claim"]
            for p in pods if "warmpool.ephemera.dev/claim" in p["metadata"]["labels"]}


def _free_pods(k: Kubectl) -> list[str]:
    pods = k.json("get", "pods", "-l", "warmpool.ephemera.dev/pool=pool")["items"]
    return [p["metadata"]["name"] for p in pods
            if "warmpool.ephemera.dev/claim" not in p["metadata"]["labels"]
            and not p["metadata"].get("deletionTimestamp")]


# One pool of 5 busybox pods and one operator (in a namespace of their own) for the warm-pool
# tests. The first reads tokens as a user would (`kubectl exec`); the stream and the kill tests
# read each claim's token inside every pod of the pool through the container's init
# (/proc/PID/root: its mount namespace), which costs no kubectl exec per look.

POOL_SIZE = 5
CLAIM_LABEL = "warmpool.ephemera.dev/claim"


@dataclass
class Pool:
    k: Kubectl
    operator: Operator


@pytest.fixture(scope="module")
def pool_of_five(crd_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Pool]:
    work = tmp_path_factory.mktemp("warm-pool-claims")
    k = Kubectl(crd_cluster, work / "home", "warm-pool-claims")
    k.home.mkdir()
    k("create", "namespace", "warm-pool-claims")
    for running in _running_operator(k, work):
        pool = {"apiVersion": "warmpool.ephemera.dev/v1alpha1", "kind": "WarmPool",
                "metadata": {"name": "pool"},
                "spec": {"replicas": POOL_SIZE, "template": {
                    "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                        {"name": "c", "image": "busybox", "command": ["sh", "-c", LOOP]}]}}}}
        k("create", "-f", "-", input=json.dumps(pool))
        wait(lambda: (k.json("get", "warmpool", "pool").get("status") or {}).get(
            "available") == POOL_SIZE, "five ready pods in the pool", k.cluster, timeout=120)
        yield Pool(k, running)
        running.stop()  # before the pods go, or it would make new ones
        k("delete", "claims", "--all", "--wait=false", check=False)


def _token_inside(cluster: ClusterAccess, pod: dict[str, Any]) -> str | None:
    """The claim Secret's token as container `c` of `pod` sees it; None when it has none (or
    the container is gone)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if not statuses or "running" not in (statuses[0].get("state") or {}):
        return None
    started = (cluster.data_dir / "kubelet" / "pods" / pod["metadata"]["uid"] / "containers"
               / "c" / str(statuses[0].get("restartCount") or 0) / "started")
    try:
        pid = next(line.split("=", 1)[1] for line in started.read_text().splitlines()
                   if line.startswith("pid="))
        return Path(f"/proc/{pid}/root{TOKEN_PATH}").read_text()
    except (OSError, StopIteration):
        return None


class Claims:
    """Claims in the pool's namespace through one API client (the admin's)."""

    def __init__(self, api: ApiClient, pool: Pool) -> None:
        self.api, self.pool, self.ns = api, pool, str(pool.k.namespace)

    def _claim(self, name: str = "") -> str:
        return resource_path("claims", self.ns, name or None, group="warmpool.ephemera.dev",
                             version="v1alpha1")

    async def create(self, name: str) -> str:
        """A Secret with a token of its own and a Claim of it; the claim's uid."""
        await self.api.create(resource_path("secrets", self.ns), {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "stringData": {"token": f"token-of-{name}"}})
        created = await self.api.create(self._claim(), _claim(name, name))
        return str(created["metadata"]["uid"])

    async def ready(self, name: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            claim = await self.api.get(self._claim(name))
            conditions = (claim.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return claim
            assert time.monotonic() < deadline, f"claim {name} not Ready: {claim}"
            await asyncio.sleep(0.05)

    async def release(self, name: str, timeout: float = 60) -> None:
        """Delete the claim and its Secret; wait until the claim is gone (the operator's
        finalizer released its pod first)."""
        await self.api.delete(self._claim(name))
        await self.api.delete(resource_path("secrets", self.ns, name))
        deadline = time.monotonic() + timeout
        while True:
            try:
                await self.api.get(self._claim(name))
            except StatusError as err:
                assert err.code == 404, err
                return
            assert time.monotonic() < deadline, f"claim {name} not released"
            await asyncio.sleep(0.05)

    async def pods(self) -> list[dict[str, Any]]:
        listed = await self.api.list(resource_path("pods", self.ns),
                                     label_selector="warmpool.ephemera.dev/pool=pool")
        return list(listed["items"])

    async def check_only_in_its_pod(self, bound: dict[str, str],
                                    releasing: dict[str, str] | None = None) -> None:
        """`bound`: claim name -> uid. Each claim's pod (the one its status names, the only
        one labelled with its uid) reads its token; no other pod of the pool reads it, except
        that a pod being released (`releasing`: pod name -> claim name) may still read its
        own claim's token."""
        cluster = self.pool.k.cluster
        by_uid = {uid: name for name, uid in bound.items()}
        holders: dict[str, list[str]] = {name: [] for name in bound}
        for pod in await self.pods():
            owner = by_uid.get((pod["metadata"].get("labels") or {}).get(CLAIM_LABEL, ""))
            token = _token_inside(cluster, pod)
            previous = (releasing or {}).get(pod["metadata"]["name"])
            if owner is None and previous is not None:
                assert token in (None, f"token-of-{previous}"), (pod["metadata"], token)
            elif owner is None:
                assert token is None, f"free pod {pod['metadata']['name']} reads {token}"
            else:
                assert token == f"token-of-{owner}", (pod["metadata"]["name"], owner, token)
                holders[owner].append(pod["metadata"]["name"])
        for name in bound:
            claim = await self.api.get(self._claim(name))
            assert holders[name] == [claim["status"]["podName"]], (name, holders[name])

    async def check_released(self, pod_name: str, uid: str, name: str) -> None:
        """The released pod no longer carries the claim's label, does not read its token, is
        free only once its status no longer lists the claim Secret's volume (so the next bind
        can add it again), and its node has removed that volume's directory (unless, in a
        stream, the pod has meanwhile been bound to the next claim, which has a directory of
        the same name)."""
        cluster = self.pool.k.cluster
        path = resource_path("pods", self.ns, pod_name)
        deadline = time.monotonic() + 10
        while True:
            try:
                pod = await self.api.get(path)
            except StatusError as err:  # the pool trimmed it: no container reads anything
                assert err.code == 404, err
                return
            label = (pod["metadata"].get("labels") or {}).get(CLAIM_LABEL)
            assert label != uid, pod["metadata"]
            if label is None:  # free again only once the Secret's teardown finished
                assert "claim-secret" not in {v["name"] for v in (pod.get("status") or {}).get(
                    "volumeStatuses") or []}, pod["status"]
            assert _token_inside(cluster, pod) != f"token-of-{name}"
            host_dir = volume_dir(cluster, pod["metadata"]["uid"], "secret", "claim-secret")
            if label is not None or not host_dir.exists():
                return
            assert time.monotonic() < deadline, f"{host_dir} left after {name}'s release"
            await asyncio.sleep(0.05)


def _in_pool(pool: Pool, body: Callable[[Claims], Awaitable[None]]) -> None:
    async def run() -> None:
        async with ApiClient(load_kubeconfig(pool.k.cluster.kubeconfig)) as api:
            await body(Claims(api, pool))
    asyncio.run(run())


def test_warm_pool_claims_bind_live_queue_and_recycle(pool_of_five: Pool) -> None:
    """What a user sees with kubectl: two claims bound at once, each Secret read with
    `kubectl exec` in its own pod without a restart; a claim queued while the pool is scaled to
    nothing and bound once it refills; a released pod back in the pool, same process, without
    the Secret."""
    k = pool_of_five.k
    for n in range(1, 4):
        k("create", "secret", "generic", f"s{n}", f"--from-literal=token=secret-{n}")

    # two claims bind at once
    k("create", "-f", "-", input=yaml.safe_dump_all([_claim("c1", "s1"), _claim("c2", "s2")]))
    c1 = wait(lambda: _bound(k, "c1"), "c1 bound", k.cluster)
    c2 = wait(lambda: _bound(k, "c2"), "c2 bound", k.cluster)
    pod1, pod2 = c1["status"]["podName"], c2["status"]["podName"]
    assert pod1 != pod2
    assert c1["status"]["bindMilliseconds"] >= 0
    assert exec_in(k, pod1, "c", f"cat {TOKEN_PATH}") == "secret-1"
    assert exec_in(k, pod2, "c", f"cat {TOKEN_PATH}") == "secret-2"
    assert exec_in(k, pod1, "c", "ls /var/run/claim/secret") == "token\n"  # only its own
    started = exec_in(k, pod1, "c", "cut -d' ' -f22 /proc/1/stat")
    pod = k.json("get", "pod", pod1)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0  # swapped in live
    table = k("get", "claims").stdout.splitlines()
    assert table[0].split()[:4] == ["NAME", "POOL", "POD", "READY"]

    # an empty pool (scaled to 0 through the scale subresource): a claim waits
    assert k("scale", "warmpool", "pool", "--replicas=0").stdout == \
        "warmpool.warmpool.ephemera.dev/pool scaled\n"
    wait(lambda: len(_free_pods(k)) == 0, "no free pod left", k.cluster)
    k("create", "-f", "-", input=json.dumps(_claim("c3", "s3")))
    wait(lambda: (k.json("get", "claim", "c3").get("status") or {}).get("phase") == "Pending",
         "c3 queued", k.cluster)
    pending = k.json("get", "claim", "c3")["status"]
    assert pending["conditions"][0]["reason"] == "NoPodAvailable"
    k("scale", "warmpool", "pool", "--replicas=1")  # one new pod, not five
    c3 = wait(lambda: _bound(k, "c3"), "c3 bound once the pool refilled", k.cluster,
              timeout=120)
    pod3 = c3["status"]["podName"]
    assert pod3 not in (pod1, pod2)
    assert exec_in(k, pod3, "c", f"cat {TOKEN_PATH}") == "secret-3"

    # releasing c1 swaps its secret out; the pod goes back to the pool, same process
    k("delete", "claim", "c1", "--timeout=60s")
    assert pod1 not in _bound_pods(k)
    assert exec_in(k, pod1, "c", f"test -e {TOKEN_PATH} && echo present || echo gone") \
        == "gone\n"
    assert exec_in(k, pod1, "c", "cut -d' ' -f22 /proc/1/stat") == started
    assert sorted(_bound_pods(k)) == sorted([pod2, pod3])
    events = k.json("get", "events", "--field-selector", "involvedObject.name=c2")["items"]
    assert any(e["reason"] == "Bound" for e in events)
    k("delete", "claims", "c2", "c3", "--timeout=60s")
    assert _bound_pods(k) == {}
    k("scale", "warmpool", "pool", f"--replicas={POOL_SIZE}")
    wait(lambda: (k.json("get", "warmpool", "pool").get("status") or {}).get(
        "available") == POOL_SIZE, "the pool refilled", k.cluster, timeout=120)


def test_warm_pool_five_at_once_then_twenty_in_a_row_each_secret_only_in_its_pod(
        pool_of_five: Pool) -> None:
    async def body(claims: Claims) -> None:
        names = [f"burst-{n}" for n in range(POOL_SIZE)]
        uids = dict(zip(names, await asyncio.gather(*map(claims.create, names)),
                        strict=True))
        bound = await asyncio.gather(*map(claims.ready, names))
        assert len({c["status"]["podName"] for c in bound}) == POOL_SIZE
        await claims.check_only_in_its_pod(uids)
        await asyncio.gather(*map(claims.release, names))
        for claim in bound:
            await claims.check_released(claim["status"]["podName"],
                                        claim["metadata"]["uid"], claim["metadata"]["name"])
        await claims.check_only_in_its_pod({})

        # one after another, each claim released while the next one binds
        async def release(name: str, pod: str, uid: str) -> None:
            await claims.release(name)
            await claims.check_released(pod, uid, name)

        releasing: asyncio.Task[None] | None = None
        previous: dict[str, str] = {}
        for n in range(20):
            name = f"row-{n}"
            uid = await claims.create(name)
            claim = await claims.ready(name)
            pod = claim["status"]["podName"]
            await claims.check_only_in_its_pod({name: uid}, previous)
            if releasing is not None:
                await releasing
            releasing = asyncio.create_task(release(name, pod, uid))
            previous = {pod: name}
        assert releasing is not None
        await releasing
        await claims.check_only_in_its_pod({})

    _in_pool(pool_of_five, body)


def _paused(operator: Operator, step: str, claim: str) -> bool:
    return f"paused at {step} for claim {claim}" in operator.log.read_text(errors="replace")


def test_warm_pool_operator_and_kubelet_killed_mid_bind_and_mid_release(
        pool_of_five: Pool) -> None:
    """The operator SIGKILLed once it has taken a pod for a claim, and again (started with
    the next pause) once it has swapped the claim's Secret in but before the claim's status
    says so (and the kubelet, frozen meanwhile, SIGKILLed before it mounted the Secret);
    started again, it finishes that bind on the pod it took first. Then SIGKILLed once a
    release has swapped the Secret out but before the pod is free again; started again, it
    finishes the release: no pod bound twice, no Secret left in any pod. A claim created while
    the operator is down is bound when it is back."""
    pool, operator = pool_of_five, pool_of_five.operator
    operator.stop(signal.SIGKILL)
    operator.start(pause_at="labelled")
    name = "killed"

    async def taken_by(claims: Claims, uid: str) -> list[str]:
        return [p["metadata"]["name"] for p in await claims.pods()
                if (p["metadata"].get("labels") or {}).get(CLAIM_LABEL) == uid]

    async def paused(step: str) -> None:
        deadline = time.monotonic() + 60
        while not _paused(operator, step, name):
            assert time.monotonic() < deadline, operator.log.read_text()[-3000:]
            await asyncio.sleep(0.05)

    async def scenario(claims: Claims) -> None:
        uid = await claims.create(name)
        await paused("labelled")  # a pod taken, nothing mounted in it yet
        taken = await taken_by(claims, uid)
        assert len(taken) == 1
        operator.stop(signal.SIGKILL)
        # the kubelet frozen, so that it is killed before it has mounted the Secret
        kubelet = pool.k.cluster.pid_of("kubelet")
        os.kill(kubelet, signal.SIGSTOP)
        try:
            operator.start(pause_at="swapped")  # it goes on with the pod it had taken
            await paused("swapped")  # the Secret swapped in, the claim's status not written
            assert await taken_by(claims, uid) == taken
            claim = await claims.api.get(claims._claim(name))
            assert "podName" not in (claim.get("status") or {})
            pod = await claims.api.get(resource_path("pods", claims.ns, taken[0]))
            assert any(v["name"] == "claim-secret" for v in pod["spec"]["volumes"])
            assert _token_inside(pool.k.cluster, pod) is None  # not mounted yet
        except BaseException:
            os.kill(kubelet, signal.SIGCONT)  # the rest of the module needs its node
            raise
        await asyncio.to_thread(kill_kubelet, pool.k.cluster)
        operator.stop(signal.SIGKILL)
        later = await claims.create("while-down")  # bound once the operator is back
        operator.start(pause_at="unswapped")  # binds go through; releases pause
        claim = await claims.ready(name, timeout=90)
        assert [claim["status"]["podName"]] == taken
        await claims.ready("while-down")
        await claims.check_only_in_its_pod({name: uid, "while-down": later})

        await claims.api.delete(claims._claim(name))
        await paused("unswapped")
        operator.stop(signal.SIGKILL)
        pod = await claims.api.get(resource_path("pods", claims.ns, taken[0]))
        assert pod["metadata"]["labels"][CLAIM_LABEL] == uid
        assert _token_inside(pool.k.cluster, pod) is None  # swapped out, not yet free
        operator.start()
        await claims.release(name)
        await claims.check_released(taken[0], uid, name)
        await claims.release("while-down")
        await claims.check_only_in_its_pod({})

    _in_pool(pool, scenario)

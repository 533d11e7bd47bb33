"""The ReplicaSet, ReplicationController, Deployment, DaemonSet and StatefulSet controllers
against an in-process apiserver, with a stand-in kubelet that marks pods Running and Ready:
exact pod counts through bursts, adoption and release, upstream's events and status, rolling
updates and rollback through ReplicaSets' templates, a DaemonSet following nodes and taints,
a StatefulSet in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from apiserver_fixtures import eventually

from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, Informer, resource_path
from ephemera.client.kubeconfig import ClientConfig
from ephemera.controllers.daemonset import DaemonSetController
from ephemera.controllers.deployment import DeploymentController
from ephemera.controllers.replicaset import (
    REPLICASET,
    REPLICATIONCONTROLLER,
    ReplicaSetController,
)
from ephemera.controllers.statefulset import StatefulSetController
from ephemera.store import open_store

RSS = resource_path("replicasets", "default", group="apps")
DEPLOYS = resource_path("deployments", "default", group="apps")
PODS = resource_path("pods", "default")


@dataclass
class Cluster:
    api: ApiClient
    pods: Informer
    ready: set[str]  # pod names the stand-in kubelet marks ready ("*": all)

    def active_pods(self, prefix: str = "") -> list[dict[str, Any]]:
        return [p for p in self.pods.list()
                if p["metadata"]["name"].startswith(prefix)
                and not p["metadata"].get("deletionTimestamp")]


async def _kubelet(api: ApiClient, pods: Informer, ready: set[str]) -> None:
    """Marks every pod Running, and Ready when `ready` says so."""
    done: dict[str, bool] = {}
    while True:
        for pod in pods.list():
            name = pod["metadata"]["name"]
            want = "*" in ready or name in ready
            if done.get(pod["metadata"]["uid"]) == want:
                continue
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            pod = dict(pod)
            pod["status"] = {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True" if want else "False",
                 "lastTransitionTime": now}]}
            with contextlib.suppress(Exception):
                await api.update(resource_path("pods", "default", name, "status"), pod)
                done[pod["metadata"]["uid"]] = want
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    server = TestServer(create_app(store, ApiserverConfig(watch_bookmark_interval=0.2)))
    await server.start_server()
    try:
        async with ApiClient(ClientConfig(server=str(server.make_url("")).rstrip("/")),
                             user_agent="workloads-test") as api:
            pods = Informer(api, resource_path("pods"))
            sets = Informer(api, resource_path("replicasets", group="apps"))
            rcs = Informer(api, resource_path("replicationcontrollers"))
            deployments = Informer(api, resource_path("deployments", group="apps"))
            daemonsets = Informer(api, resource_path("daemonsets", group="apps"))
            nodes = Informer(api, resource_path("nodes"))
            revisions = Informer(api, resource_path("controllerrevisions", group="apps"))
            statefulsets = Informer(api, resource_path("statefulsets", group="apps"))
            mine = Informer(api, resource_path("pods"))
            ready: set[str] = {"*"}
            coros = [pods.run(), sets.run(), rcs.run(), deployments.run(), mine.run(),
                     ReplicaSetController(api, pods, sets, kind=REPLICASET).run(),
                     ReplicaSetController(api, pods, rcs, kind=REPLICATIONCONTROLLER).run(),
                     DeploymentController(api, deployments, sets, pods).run(),
                     daemonsets.run(), nodes.run(), revisions.run(),
                     DaemonSetController(api, daemonsets, pods, nodes, revisions).run(),
                     statefulsets.run(),
                     StatefulSetController(api, statefulsets, pods, revisions).run(),
                     _kubelet(api, mine, ready)]
            tasks = [asyncio.create_task(c) for c in coros]
            await mine.wait_synced()
            try:
                yield Cluster(api, mine, ready)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await server.close()
        await store.close()


def template(app: str, image: str = "busybox:1.36") -> dict[str, Any]:
    return {"metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": image}]}}


def replicaset(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": template(name)}}


async def _events(api: ApiClient, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in await _event_objects(api, name)]


async def _event_objects(api: ApiClient, name: str) -> list[dict[str, Any]]:
    listed = await api.get(PODS.replace("pods", "events"))
    return [e for e in listed["items"] if e["involvedObject"]["name"] == name]


async def test_replicaset_makes_exactly_its_replicas_and_reports_status(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.api.create(RSS, replicaset("web", 20))

        async def settled() -> bool:
            rs = await c.api.get(f"{RSS}/web")
            return len(c.active_pods("web-")) == 20 and \
                (rs.get("status") or {}).get("availableReplicas") == 20
        await eventually(settled, timeout=30)
        await asyncio.sleep(0.5)  # a burst of pod events makes no extra pod
        pods = c.active_pods("web-")
        assert len(pods) == 20
        rs = await c.api.get(f"{RSS}/web")
        assert rs["status"] == {"replicas": 20, "fullyLabeledReplicas": 20, "readyReplicas": 20,
                                "availableReplicas": 20, "observedGeneration": 1}
        ref = pods[0]["metadata"]["ownerReferences"]
        assert ref == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                        "uid": rs["metadata"]["uid"], "controller": True,
                        "blockOwnerDeletion": True}]
        assert pods[0]["metadata"]["generateName"] == "web-"
        # as client-go's recorder does, the tenth distinct message on one object and reason
        # starts an aggregate: nine events, then one "combined" event counting the other 11
        async def created_counted() -> bool:
            events = await _event_objects(c.api, "web")
            return sum(e["count"] for e in events if e["reason"] == "SuccessfulCreate") == 20
        await eventually(created_counted)
        events = await _event_objects(c.api, "web")
        combined = "(combined from similar events): Created pod: web-"
        assert sorted(e["count"] for e in events) == [1] * 9 + [11]
        assert [e["message"].startswith(combined) for e in events].count(True) == 1
        assert all(e["message"].startswith(("Created pod: web-", combined)) for e in events)

        # scale down: the not-ready pods go first
        c.ready.clear()
        c.ready.update(p["metadata"]["name"] for p in pods[2:])

        async def two_unready() -> bool:
            return sum(1 for p in c.active_pods("web-")
                       if p["status"]["conditions"][0]["status"] == "False") == 2
        await eventually(two_unready)
        unready = {p["metadata"]["name"] for p in pods[:2]}
        await c.api.patch(f"{RSS}/web/scale", {"spec": {"replicas": 17}}, patch_type="merge")
        await eventually(lambda: len(c.active_pods("web-")) == 17)
        left = {p["metadata"]["name"] for p in c.active_pods("web-")}
        assert not unready & left
        await asyncio.sleep(0.3)
        assert len(c.active_pods("web-")) == 17


async def test_adoption_and_release(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        orphan = {"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "stray", "labels": {"app": "web"}},
                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        await c.api.create(PODS, orphan)
        rs = await c.api.create(RSS, replicaset("web", 2))

        async def adopted() -> bool:
            pod = await c.api.get(f"{PODS}/stray")
            refs = pod["metadata"].get("ownerReferences") or []
            return [r["uid"] for r in refs] == [rs["metadata"]["uid"]]
        await eventually(adopted)
        await eventually(lambda: len(c.active_pods()) == 2)
        await asyncio.sleep(0.3)
        assert len(c.active_pods()) == 2  # the orphan counted as one of the two

        # a pod whose labels no longer match is released, and replaced
        await c.api.patch(f"{PODS}/stray", {"metadata": {"labels": {"app": "other"}}},
                          patch_type="merge")

        async def released() -> bool:
            pod = await c.api.get(f"{PODS}/stray")
            return not pod["metadata"].get("ownerReferences")
        await eventually(released)
        await eventually(lambda: len(c.active_pods("web-")) == 2)


async def test_replication_controller_keeps_its_pods(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
              "spec": {"replicas": 3, "template": template("rc")}}
        await c.api.create(resource_path("replicationcontrollers", "default"), rc)
        await eventually(lambda: len(c.active_pods("rc-")) == 3)
        victim = c.active_pods("rc-")[0]["metadata"]["name"]
        await c.api.delete(f"{PODS}/{victim}")
        await eventually(lambda: len(c.active_pods("rc-")) == 3
                         and victim not in {p["metadata"]["name"] for p in c.active_pods()})
        got = await c.api.get(resource_path("replicationcontrollers", "default", "rc"))

        async def status_ready() -> bool:
            got = await c.api.get(resource_path("replicationcontrollers", "default", "rc"))
            return (got.get("status") or {}).get("readyReplicas") == 3
        await eventually(status_ready)
        assert got["spec"]["selector"] == {"app": "rc"}


def deployment(name: str, replicas: int, image: str = "busybox:1.36", **spec: Any
               ) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": template(name, image), **spec}}


async def _sets(api: ApiClient) -> dict[str, dict[str, Any]]:
    listed = await api.get(RSS)
    return {rs["metadata"]["name"]: rs for rs in listed["items"]}


async def _complete(api: ApiClient, name: str, replicas: int) -> bool:
    d = await api.get(f"{DEPLOYS}/{name}")
    status = d.get("status") or {}
    progressing = next((x for x in status.get("conditions") or []
                        if x["type"] == "Progressing"), {})
    return (status.get("observedGeneration") == d["metadata"]["generation"]
            and status.get("updatedReplicas") == replicas
            and status.get("availableReplicas") == replicas
            and status.get("replicas") == replicas
            and progressing.get("reason") == "NewReplicaSetAvailable")


@pytest.mark.parametrize("strategy", ["RollingUpdate", "Recreate"])
async def test_deployment_rollout_and_rollback(tmp_path: Path, strategy: str) -> None:
    async with cluster(tmp_path) as c:
        spec = {"strategy": {"type": strategy}}
        await c.api.create(DEPLOYS, deployment("web", 3, **spec))
        await eventually(lambda: _complete(c.api, "web", 3), timeout=30)
        sets = await _sets(c.api)
        assert len(sets) == 1
        (first_name, first), = sets.items()
        pod_hash = first["metadata"]["labels"]["pod-template-hash"]
        assert first_name == f"web-{pod_hash}"
        assert first["spec"]["selector"]["matchLabels"] == {"app": "web",
                                                            "pod-template-hash": pod_hash}
        annotations = first["metadata"]["annotations"]
        assert annotations["deployment.kubernetes.io/revision"] == "1"
        assert annotations["deployment.kubernetes.io/desired-replicas"] == "3"
        d = await c.api.get(f"{DEPLOYS}/web")
        assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
        available = next(x for x in d["status"]["conditions"] if x["type"] == "Available")
        assert (available["status"], available["reason"]) == ("True",
                                                              "MinimumReplicasAvailable")

        # a new template: a second ReplicaSet takes over, the first is scaled to 0
        await c.api.patch(f"{DEPLOYS}/web", {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "busybox:1.37"}]}}}}, patch_type="strategic")
        await eventually(lambda: _complete(c.api, "web", 3), timeout=30)
        sets = await _sets(c.api)
        assert len(sets) == 2
        assert sets[first_name]["spec"]["replicas"] == 0
        (second_name, second), = ((n, s) for n, s in sets.items() if n != first_name)
        assert second["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
        images = {p["spec"]["containers"][0]["image"] for p in c.active_pods("web-")}
        assert images == {"busybox:1.37"}

        # rollback as `kubectl rollout undo` does: the old template written back
        old_template = sets[first_name]["spec"]["template"]
        del old_template["metadata"]["labels"]["pod-template-hash"]
        d = await c.api.get(f"{DEPLOYS}/web")
        d["spec"]["template"] = old_template
        await c.api.update(f"{DEPLOYS}/web", d)
        await eventually(lambda: _complete(c.api, "web", 3), timeout=30)
        sets = await _sets(c.api)
        assert len(sets) == 2
        assert sets[first_name]["spec"]["replicas"] == 3
        assert sets[first_name]["metadata"]["annotations"][
            "deployment.kubernetes.io/revision"] == "3"
        assert sets[second_name]["spec"]["replicas"] == 0
        events = await _events(c.api, "web")
        assert ("ScalingReplicaSet", f"Scaled up replica set {first_name} from 0 to 3") in \
            events or ("ScalingReplicaSet", f"Scaled up replica set {first_name} from 0 to 1"
                       ) in events


async def test_deployment_scales_and_pauses(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.api.create(DEPLOYS, deployment("web", 2))
        await eventually(lambda: _complete(c.api, "web", 2), timeout=30)
        await c.api.patch(f"{DEPLOYS}/web/scale", {"spec": {"replicas": 5}}, patch_type="merge")
        await eventually(lambda: _complete(c.api, "web", 5), timeout=30)
        await c.api.patch(f"{DEPLOYS}/web", {"spec": {"paused": True}}, patch_type="merge")

        async def paused() -> bool:
            d = await c.api.get(f"{DEPLOYS}/web")
            cond = next((x for x in (d.get("status") or {}).get("conditions") or []
                         if x["type"] == "Progressing"), {})
            return cond.get("reason") == "DeploymentPaused"
        await eventually(paused)
        await c.api.patch(f"{DEPLOYS}/web", {"spec": {"template": {"metadata": {
            "annotations": {"x": "1"}}}}}, patch_type="strategic")
        await asyncio.sleep(0.5)
        assert len(await _sets(c.api)) == 1  # paused: no rollout
        await c.api.patch(f"{DEPLOYS}/web", {"spec": {"paused": False}}, patch_type="merge")
        await eventually(lambda: _complete(c.api, "web", 5), timeout=30)
        assert len(await _sets(c.api)) == 2


async def _node(api: ApiClient, name: str) -> None:
    await api.create(resource_path("nodes"), {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
                                                        "labels": {"kind": "worker"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})


async def test_daemonset_follows_nodes_and_taints(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        for name in ("n1", "n2"):
            await _node(c.api, name)
        ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
              "spec": {"selector": {"matchLabels": {"app": "agent"}},
                       "template": {**template("agent"),
                                    "spec": {**template("agent")["spec"],
                                             "nodeSelector": {"kind": "worker"}}}}}
        path = resource_path("daemonsets", "default", group="apps")
        await c.api.create(path, ds)

        def nodes_of() -> list[str]:
            out = []
            for p in c.active_pods("agent-"):
                terms = p["spec"]["affinity"]["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                out.append(terms[0]["matchFields"][0]["values"][0])
            return sorted(out)
        await eventually(lambda: nodes_of() == ["n1", "n2"])
        pod = c.active_pods("agent-")[0]
        assert {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                "effect": "NoExecute"} in pod["spec"]["tolerations"]
        await _node(c.api, "n3")  # a node joins
        await eventually(lambda: nodes_of() == ["n1", "n2", "n3"])

        async def status_is(**want: int) -> bool:
            got = (await c.api.get(f"{path}/agent")).get("status") or {}
            return all(got.get(k, 0) == v for k, v in want.items())
        await eventually(lambda: status_is(desiredNumberScheduled=3, numberReady=3,
                                           numberAvailable=3))

        # NoExecute evicts; NoSchedule keeps the pod but it is no longer desired
        await c.api.patch(resource_path("nodes", name="n3"), {"spec": {"taints": [
            {"key": "dedicated", "value": "x", "effect": "NoExecute"}]}}, patch_type="merge")
        await eventually(lambda: nodes_of() == ["n1", "n2"])
        await c.api.patch(resource_path("nodes", name="n2"), {"spec": {"taints": [
            {"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}}, patch_type="merge")
        await eventually(lambda: status_is(desiredNumberScheduled=1, numberMisscheduled=1))
        assert nodes_of() == ["n1", "n2"]
        events = await _events(c.api, "agent")
        assert sum(1 for r, _ in events if r == "SuccessfulCreate") == 3
        assert sum(1 for r, _ in events if r == "SuccessfulDelete") == 1

        # a new template rolls node by node; each template is a ControllerRevision
        await c.api.patch(f"{path}/agent", {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "busybox:1.37"}]}}}}, patch_type="strategic")

        def images() -> set[str]:
            return {p["spec"]["containers"][0]["image"] for p in c.active_pods("agent-")}
        await eventually(lambda: images() == {"busybox:1.37"}, timeout=20)
        revisions = await c.api.get(resource_path("controllerrevisions", "default",
                                                  group="apps"))
        assert sorted(r["revision"] for r in revisions["items"]) == [1, 2]
        first = min(revisions["items"], key=lambda r: r["revision"])["metadata"]["name"]

        # back to the first template (a rollback): its revision becomes the newest, 3
        await c.api.patch(f"{path}/agent", {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "busybox:1.36"}]}}}}, patch_type="strategic")
        await eventually(lambda: images() == {"busybox:1.36"}, timeout=20)

        async def first_is_newest() -> bool:
            got = await c.api.get(resource_path("controllerrevisions", "default", first,
                                                group="apps"))
            return bool(got["revision"] == 3)
        await eventually(first_is_newest)
        pod = c.active_pods("agent-")[0]
        assert pod["metadata"]["labels"]["pod-template-generation"] == "3"

        # revisionHistoryLimit 0: the old revision no pod has is deleted
        await c.api.patch(f"{path}/agent", {"spec": {"revisionHistoryLimit": 0}},
                          patch_type="merge")

        async def revision_names() -> list[str]:
            got = await c.api.get(resource_path("controllerrevisions", "default",
                                                group="apps"))
            return sorted(r["metadata"]["name"] for r in got["items"])
        await eventually(lambda: _equal(revision_names(), [first]))


async def _equal(value: Awaitable[Any], want: Any) -> bool:
    return bool(await value == want)


async def test_statefulset_goes_in_order(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        added: list[str] = []
        deleted: list[str] = []
        c.pods.add_handler(on_add=lambda p: added.append(p["metadata"]["name"]),
                           on_delete=lambda p: deleted.append(p["metadata"]["name"]))
        c.ready.clear()
        c.ready.update({"db-0"})  # db-1 stays unready: db-2 must wait for it
        sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
               "spec": {"replicas": 3, "serviceName": "db", "revisionHistoryLimit": 0,
                        "selector": {"matchLabels": {"app": "db"}}, "template": template("db")}}
        path = resource_path("statefulsets", "default", group="apps")
        await c.api.create(path, sts)
        await eventually(lambda: added == ["db-0", "db-1"])
        await asyncio.sleep(0.5)
        assert added == ["db-0", "db-1"]
        c.ready.add("*")
        await eventually(lambda: added == ["db-0", "db-1", "db-2"])
        pod = await c.api.get(f"{PODS}/db-1")
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("db-1", "db")
        assert pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "1"

        async def status_is(**want: Any) -> bool:
            got = (await c.api.get(f"{path}/db")).get("status") or {}
            return all(got.get(k) == v for k, v in want.items())
        await eventually(lambda: status_is(replicas=3, readyReplicas=3, updatedReplicas=3))

        # a new template replaces the pods from the highest ordinal down
        await c.api.patch(f"{path}/db", {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "busybox:1.37"}]}}}}, patch_type="strategic")
        await eventually(lambda: deleted == ["db-2", "db-1", "db-0"], timeout=20)
        await eventually(lambda: status_is(updatedReplicas=3, currentReplicas=3))
        got = await c.api.get(f"{path}/db")
        assert got["status"]["currentRevision"] == got["status"]["updateRevision"]
        assert got["status"]["updateRevision"].startswith("db-")
        pod = await c.api.get(f"{PODS}/db-0")
        assert pod["metadata"]["labels"]["controller-revision-hash"] == \
            got["status"]["updateRevision"]

        async def revision_names() -> list[str]:
            listed = await c.api.get(resource_path("controllerrevisions", "default",
                                                   group="apps"))
            return sorted(r["metadata"]["name"] for r in listed["items"])
        # revisionHistoryLimit 0: the first revision, no pod's now, is deleted
        await eventually(lambda: _equal(revision_names(), [got["status"]["updateRevision"]]))

        # scale-down: highest ordinal first
        deleted.clear()
        await c.api.patch(f"{path}/db/scale", {"spec": {"replicas": 1}}, patch_type="merge")
        await eventually(lambda: deleted == ["db-2", "db-1"])
        events = await _events(c.api, "db")
        assert ("SuccessfulCreate", "create Pod db-0 in StatefulSet db successful") in events
        assert ("SuccessfulDelete", "delete Pod db-2 in StatefulSet db successful") in events


async def test_progress_deadline_exceeded(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        c.ready.clear()  # no pod ever becomes ready
        await c.api.create(DEPLOYS, deployment("stuck", 2, progressDeadlineSeconds=2))

        async def timed_out() -> bool:
            d = await c.api.get(f"{DEPLOYS}/stuck")
            cond = next((x for x in (d.get("status") or {}).get("conditions") or []
                         if x["type"] == "Progressing"), {})
            return (cond.get("status"), cond.get("reason")) == ("False",
                                                                 "ProgressDeadlineExceeded")
        await eventually(timed_out, timeout=15)
        d = await c.api.get(f"{DEPLOYS}/stuck")
        cond = next(x for x in d["status"]["conditions"] if x["type"] == "Progressing")
        (rs_name,) = (await _sets(c.api))
        assert cond["message"] == f'ReplicaSet "{rs_name}" has timed out progressing.'
        available = next(x for x in d["status"]["conditions"] if x["type"] == "Available")
        assert (available["status"], available["reason"]) == ("False",
                                                              "MinimumReplicasUnavailable")

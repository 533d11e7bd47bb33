"""A control plane on an etcd holding more than 16 MiB of pods (issue 13, item 1): every
component of `ephemera up` (apiserver, scheduler, controller-manager, a fake-runtime kubelet)
restarts on it and serves.

Before the etcd store read in pages, an unpaginated read of ~5.8 MB failed with gRPC's
"Received message larger than max"; the apiserver then crashed at startup and the scheduler
relisted in a loop. Here the store is filled directly through the store API (concurrent
creates, not one HTTP create each, to keep the test short) with copies of a pod the API
created, bound to a node that does not exist so that nothing schedules or runs them; then
the cluster restarts and must list them all (unpaginated and in chunks), bind and run a new
pod, and let the controller-manager create a new namespace's service account.

The test has an etcd server of its own: the worker's shared one would make every other test's
unpaginated list carry 16 MiB.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from cluster import node_ready, start_cluster, wait

from ephemera.apiserver.registry import Codec
from ephemera.apiserver.resources import core_resource
from ephemera.store import KeyValue, open_store
from etcdserver import EtcdServer

PODS = core_resource("pods")

pytestmark = [pytest.mark.e2e, pytest.mark.etcd]

NODE = "size-node"
NAMESPACE = "bulk"
ELSEWHERE = "a-node-that-is-not-there"
PADDING = 8 * 1024  # bytes of annotation per pod
TARGET_BYTES = 17 * 1024 * 1024  # more than 16 MiB of pods in etcd
BATCH = 200  # concurrent creates at a time
WAIT = 90.0

TEMPLATE = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "template", "namespace": NAMESPACE,
                 "annotations": {"padding": "p" * PADDING}},
    "spec": {"nodeName": ELSEWHERE,
             "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]},
}


async def fill(endpoint: str, template: KeyValue) -> tuple[int, int]:
    """Copies of the stored `template` pod until the pods take more than TARGET_BYTES; how
    many pods there are then (the template included) and their stored bytes."""
    codec = Codec(PODS)
    stored: dict[str, Any] = json.loads(template.value)
    store = open_store("etcd", endpoints=[endpoint])
    try:
        total, count = len(template.value), 1
        while total <= TARGET_BYTES:
            batch = []
            for _ in range(BATCH):
                pod = copy.deepcopy(stored)
                name = f"bulk-{count:05}"
                pod["metadata"].update(name=name, uid=str(uuid.uuid4()))
                value = codec.encode(pod)
                batch.append(store.create(PODS.key(NAMESPACE, name), value))
                total += len(value)
                count += 1
            await asyncio.gather(*batch)
        return count, total
    finally:
        await store.close()


async def read_template(endpoint: str) -> KeyValue:
    store = open_store("etcd", endpoints=[endpoint])
    try:
        kv = await store.get(PODS.key(NAMESPACE, "template"))
        assert kv is not None
        return kv
    finally:
        await store.close()


def test_every_component_restarts_on_more_than_16_mib_of_pods(tmp_path: Path) -> None:
    with EtcdServer(tmp_path / "etcd") as etcd:
        args = ["--store", "etcd", "--etcd-endpoints", etcd.endpoint, "--runtime", "fake",
                "--node-name", NODE]
        data, home = tmp_path / "data", tmp_path / "home"
        with start_cluster(data, home, args) as first:
            first.kubectl("create", "namespace", NAMESPACE)
            first.kubectl("create", "-f", "-", input=json.dumps(TEMPLATE))
            assert first.stop() == 0

        template = asyncio.run(read_template(etcd.endpoint))
        pods, stored_bytes = asyncio.run(fill(etcd.endpoint, template))
        assert stored_bytes > 16 * 1024 * 1024

        with start_cluster(data, home, args, timeout=WAIT) as cluster:
            # An unpaginated list (no limit: the apiserver reads etcd in pages and sends
            # the whole list in one response), and kubectl's chunked list (limit=500).
            raw = cluster.kubectl("get", "--raw", "/api/v1/pods",
                                  timeout=120)
            assert len(raw.stdout) > 16 * 1024 * 1024
            listed = json.loads(raw.stdout)
            assert len(listed["items"]) == pods
            assert "continue" not in listed["metadata"]
            names = cluster.kubectl("get", "pods", "-A", "-o", "name", timeout=120)
            assert len(names.stdout.split()) == pods

            # The kubelet serves: its node is Ready and it runs a pod the scheduler binds.
            wait(lambda: node_ready(cluster, NODE), "the node to be Ready", cluster, WAIT)
            cluster.kubectl("create", "namespace", "fresh")
            # The controller-manager serves: the new namespace gets its service account.
            wait(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", "fresh",
                                         check=False).returncode == 0,
                 "the controller-manager to create the default service account", cluster,
                 WAIT)
            cluster.kubectl("run", "new", "-n", "fresh", "--image", "busybox",
                            "--command", "--", "sleep", "3600")

            def running() -> bool:
                pod = json.loads(cluster.kubectl("get", "pod", "new", "-n", "fresh",
                                                 "-o", "json").stdout)
                return (pod["spec"].get("nodeName") == NODE
                        and pod.get("status", {}).get("phase") == "Running")

            wait(running, "the scheduler to bind the new pod and the kubelet to run it",
                 cluster, WAIT)
            assert ") exited:" not in cluster.output, cluster.output  # no component crashed
            logs = "".join(log.read_text(errors="replace")
                           for log in (data / "logs").glob("*.log"))
            assert "RESOURCE_EXHAUSTED" not in logs
            assert cluster.stop() == 0

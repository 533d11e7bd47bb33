"""The controller-manager's controllers take one shared informer of all pods (upstream's
shared informers): the quota, job, endpointslice, node lifecycle and taint eviction
controllers and the garbage collector's pod monitor use the informer given, even while it is
still empty; the node lifecycle and taint eviction controllers share one of all nodes."""

from __future__ import annotations

import asyncio
from typing import cast

from informer_fakes import CountingApi

from ephemera.client.api import ApiClient
from ephemera.client.informer import Informer
from ephemera.controllers.endpointslice import EndpointSliceController
from ephemera.controllers.garbagecollector.collector import GarbageCollector, ServedResource
from ephemera.controllers.job import JobController
from ephemera.controllers.nodelifecycle import NodeLifecycleController
from ephemera.controllers.resourcequota import ResourceQuotaController
from ephemera.controllers.tainteviction import TaintEvictionController


async def test_every_controller_uses_the_shared_pod_informer() -> None:
    fake = CountingApi()
    api = cast(ApiClient, fake)
    pods = Informer(api, "/api/v1/pods", name="pods")
    assert len(pods) == 0  # empty, as when the controllers are built
    assert ResourceQuotaController(api, pods=pods).pods is pods
    assert JobController(api, pods=pods).pods is pods
    assert EndpointSliceController(api, pods).pods is pods
    nodes = Informer(api, "/api/v1/nodes", name="nodes")
    lifecycle = NodeLifecycleController(api, pods=pods, nodes=nodes)
    assert (lifecycle.pods, lifecycle.nodes) == (pods, nodes)
    eviction = TaintEvictionController(api, pods, nodes)
    assert (eviction.pods, eviction.nodes) == (pods, nodes)
    assert eviction.pods_by_node is lifecycle.pods_by_node  # one index by node per informer
    collector = GarbageCollector(api, shared={pods.path: pods})
    started = collector._sync_monitors([ServedResource("", "v1", "pods", "Pod", True)])
    assert started == [pods]
    runner = asyncio.create_task(pods.run())
    await asyncio.wait_for(fake.watching.wait(), 5)
    assert (fake.lists, fake.watches) == (1, 1)  # the monitor and the runner: one watch
    for task in (runner, *(t for _, t in collector._monitors.values())):
        task.cancel()
    await asyncio.gather(runner, *(t for _, t in collector._monitors.values()),
                         return_exceptions=True)

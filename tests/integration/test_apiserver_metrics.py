"""The apiserver's `/metrics` (`ephemera.apiserver.metrics`): upstream's request counter and
latency histograms with upstream's labels, the SLI histogram without the priority queue's
wait, and that wait itself, read back through Prometheus' own text parser."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from apiserver_fixtures import Api, pod
from prometheus_client.parser import text_string_to_metric_families

from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.metrics import QUEUE_WAIT, ApiserverMetrics
from ephemera.apiserver.priority import PriorityAndFairness, PriorityConfig
from ephemera.apiserver.rest import USER

PODS = "/api/v1/namespaces/default/pods"


async def samples(api: Api) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, _, response = await api.request("GET", "/metrics")
    assert status == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return samples_of(await response.text())


def samples_of(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def labels(**values: str) -> frozenset[tuple[str, str]]:
    return frozenset(values.items())


def request_labels(verb: str, resource: str, scope: str, **extra: str) -> dict[str, str]:
    return {"verb": verb, "group": "", "version": "v1", "resource": resource,
            "subresource": "", "scope": scope, "component": "apiserver", **extra}


async def test_requests_are_counted_and_timed_with_upstream_labels(api: Api) -> None:
    await api.create_pod("p1")
    assert (await api.get(f"{PODS}/p1"))[0] == 200
    assert (await api.get(f"{PODS}/nope"))[0] == 404
    assert (await api.get(PODS))[0] == 200
    status, _ = await api.patch(f"{PODS}/p1", {"metadata": {"labels": {"a": "b"}}},
                                "application/merge-patch+json")
    assert status == 200
    assert (await api.post(f"{PODS}?dryRun=All", pod("p2")))[0] == 201
    assert (await api.get("/version"))[0] == 200
    got = await samples(api)

    def count(name: str, **values: str) -> float:
        return got.get((name, labels(**values)), 0.0)

    total = "apiserver_request_total"
    for verb, scope, dry_run, code in [("POST", "namespace", "", "201"),
                                       ("POST", "namespace", "All", "201"),
                                       ("GET", "resource", "", "200"),
                                       ("GET", "resource", "", "404"),
                                       ("LIST", "namespace", "", "200"),
                                       ("PATCH", "resource", "", "200")]:
        assert count(total, **request_labels(verb, "pods", scope, dry_run=dry_run,
                                             code=code)) == 1, (verb, dry_run, code)
    # every request in the duration histogram, and in the SLI one (none is long-running)
    assert count("apiserver_request_duration_seconds_count",
                 **request_labels("GET", "pods", "resource", dry_run="")) == 2
    sli = request_labels("POST", "pods", "namespace")
    assert count("apiserver_request_sli_duration_seconds_count", **sli) == 2
    assert count("apiserver_request_sli_duration_seconds_bucket", **sli, le="60.0") == 2
    # a path that is no resource: the method as the verb, empty resource labels
    assert count(total, verb="GET", dry_run="", group="", version="", resource="",
                 subresource="", scope="", component="apiserver", code="200") == 1


async def test_a_watch_is_timed_but_left_out_of_the_sli(api: Api) -> None:
    status, _, response = await api.request("GET", f"{PODS}?watch=true&timeoutSeconds=1")
    assert status == 200
    await response.read()  # the server ends it after a second
    got = await samples(api)
    watch = request_labels("WATCH", "pods", "namespace")
    assert got[("apiserver_request_duration_seconds_count", labels(**watch, dry_run=""))] == 1
    assert ("apiserver_request_sli_duration_seconds_count", labels(**watch)) not in got


async def test_the_sli_leaves_out_the_wait_for_a_seat() -> None:
    """One seat: the second request waits for the first's handler, which the test holds.
    Its full duration includes that wait; its SLI duration and the wait histogram split
    it."""
    metrics = ApiserverMetrics()
    priority = PriorityAndFairness(PriorityConfig(max_requests_inflight=1,
                                                  max_mutating_requests_inflight=0))
    release = asyncio.Event()
    admin = UserInfo("alice", ("system:authenticated",))

    async def handler(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(status=200)

    def request() -> Any:
        made = make_mocked_request("GET", f"{PODS}/p1")
        made[USER] = admin
        return made

    first, second = request(), request()
    first_task = asyncio.create_task(priority.middleware(first, handler))
    await asyncio.sleep(0)
    second_task = asyncio.create_task(priority.middleware(second, handler))
    await asyncio.sleep(0.3)
    release.set()
    await first_task
    await second_task
    assert first[QUEUE_WAIT][:2] == ("normal", "normal") and first[QUEUE_WAIT][2] < 0.2
    level, flow_schema, waited, executed = second[QUEUE_WAIT]
    assert (level, flow_schema, executed) == ("normal", "normal", True)
    assert waited >= 0.25
    metrics.observe(second, 200, waited + 0.01)
    got = samples_of(metrics.render().decode())
    wait = labels(flow_schema="normal", priority_level="normal", execute="true")
    assert got[("apiserver_flowcontrol_request_wait_duration_seconds_count", wait)] == 1
    assert got[("apiserver_flowcontrol_request_wait_duration_seconds_bucket",
                labels(**dict(wait), le="0.2"))] == 0
    sli = labels(**request_labels("GET", "pods", "resource"))
    assert got[("apiserver_request_sli_duration_seconds_bucket",
                labels(**dict(sli), le="0.05"))] == 1  # 0.01 s once the wait is left out
    duration = labels(**request_labels("GET", "pods", "resource", dry_run=""))
    assert got[("apiserver_request_duration_seconds_bucket",
                labels(**dict(duration), le="0.2"))] == 0

"""LimitRanger and ResourceQuota through the HTTP app: LimitRange and ResourceQuota object
validation (422), defaults and min/max checks on pod creates and `/dynamic` updates (403 with
upstream's messages), quota charging by compare-and-swap (concurrent creates against a nearly
full quota, on sqlite and on etcd), dryRun, and the quota controller releasing usage."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, eventually, serve

from ephemera.api.featuregates import POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE, FeatureGates
from ephemera.client import ApiClient, ClientConfig
from ephemera.controllers.resourcequota import ResourceQuotaController
from ephemera.store import open_store

NS = "/api/v1/namespaces/default"
PODS = f"{NS}/pods"
QUOTAS = f"{NS}/resourcequotas"
LIMITS = f"{NS}/limitranges"


def ctr(name: str, requests: dict[str, str] | None = None,
        limits: dict[str, str] | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return {"name": name, "image": "busybox:1.36", "resources": res}


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": list(containers) or [ctr("c")], **spec}}


def limit_range(name: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name},
            "spec": {"limits": list(items)}}


def resource_quota(name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
            "spec": {"hard": hard, **spec}}


async def create(api: Api, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, out = await api.post(path, body)
    assert status == 201, out
    return dict(out)


async def create_quota(api: Api, name: str, hard: dict[str, str],
                       used: dict[str, str] | None = None) -> dict[str, Any]:
    """A quota with the status the controller would write (hard from spec, used as given or
    zero)."""
    quota = await create(api, QUOTAS, resource_quota(name, hard))
    quota["status"] = {"hard": hard, "used": used or {k: "0" for k in hard}}
    status, out = await api.put(f"{QUOTAS}/{name}/status", quota)
    assert status == 200, out
    return dict(out)


async def used(api: Api, name: str) -> dict[str, str]:
    status, out = await api.get(f"{QUOTAS}/{name}")
    assert status == 200, out
    return dict(out.get("status", {}).get("used", {}))


def forbidden(body: dict[str, Any]) -> str:
    assert body["kind"] == "Status" and body["reason"] == "Forbidden" and body["code"] == 403
    return str(body["message"])


@pytest.fixture
async def api_es_off(tmp_path: Path) -> AsyncIterator[Api]:
    store = open_store("sqlite", data_dir=tmp_path / "data-es-off")
    try:
        async for served in serve(
                store, feature_gates=FeatureGates({POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE: False})):
            yield served
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def quota_controller(api: Api, resync: float = 3600) -> AsyncIterator[
        ResourceQuotaController]:
    url = str(api.client.server.make_url("")).rstrip("/")
    async with ApiClient(ClientConfig(server=url), user_agent="quota-test") as client:
        controller = ResourceQuotaController(client, resync_period=resync)
        task = asyncio.create_task(controller.run())
        try:
            yield controller
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# --- LimitRange objects -----------------------------------------------------------------


async def test_limit_range_is_defaulted_and_validated(api: Api) -> None:
    created = await create(api, LIMITS, limit_range(
        "lr", {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}}))
    item = created["spec"]["limits"][0]
    assert item["default"] == {"cpu": "2"}
    assert item["defaultRequest"] == {"cpu": "2", "memory": "64Mi"}

    status, body = await api.post(LIMITS, limit_range(
        "bad", {"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"},
                "default": {"cpu": "1"}, "defaultRequest": {"cpu": "2"}}))
    assert status == 422
    assert body["message"] == (
        'LimitRange "bad" is invalid: [spec.limits[0].min[cpu]: Invalid value: "2": min value '
        '2 is greater than max value 1, spec.limits[0].defaultRequest[cpu]: Invalid value: '
        '"2": default request value 2 is greater than max value 1, '
        'spec.limits[0].defaultRequest[cpu]: Invalid value: "2": default request value 2 is '
        'greater than default limit value 1, spec.limits[0].default[cpu]: Invalid value: "2": '
        "min value 2 is greater than default value 1]")


async def test_type_pod_defaults_need_the_kep_6386_gate(api: Api, api_es_off: Api) -> None:
    body = limit_range("lr", {"type": "Pod", "default": {"ephemeral-storage": "2Gi"},
                              "defaultRequest": {"ephemeral-storage": "1Gi"}})
    status, out = await api_es_off.post(LIMITS, body)
    assert status == 422
    assert out["message"] == (
        'LimitRange "lr" is invalid: [spec.limits[0].default: Forbidden: may not be specified '
        "when `type` is 'Pod', spec.limits[0].defaultRequest: Forbidden: may not be specified "
        "when `type` is 'Pod']")
    assert [c["field"] for c in out["details"]["causes"]] == [
        "spec.limits[0].default", "spec.limits[0].defaultRequest"]
    await create(api, LIMITS, body)


# --- LimitRanger on pods -------------------------------------------------------------------


async def test_container_defaults_and_annotation(api: Api) -> None:
    await create(api, LIMITS, limit_range(
        "lr", {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
               "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}))
    created = await create(api, PODS, pod("p1", ctr("app")))
    resources = created["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "500m", "memory": "256Mi"},
                         "requests": {"cpu": "100m", "memory": "128Mi"}}
    assert created["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for "
        "container app")
    assert created["status"]["qosClass"] == "Burstable"


async def test_container_max_is_forbidden_with_upstream_message(api: Api) -> None:
    await create(api, LIMITS, limit_range(
        "lr", {"type": "Container", "max": {"memory": "1Gi", "cpu": "1"}}))
    status, out = await api.post(PODS, pod("p1", ctr("app", limits={"memory": "2Gi",
                                                                    "cpu": "2"})))
    assert status == 403
    assert forbidden(out) == (
        'pods "p1" is forbidden: [maximum cpu usage per Container is 1, but limit is 2, '
        "maximum memory usage per Container is 1Gi, but limit is 2Gi]")
    assert out["details"] == {"name": "p1", "kind": "pods"}


async def test_generated_name_is_named_in_the_message(api: Api) -> None:
    # Validating admission runs after the name was generated, as upstream's does.
    await create(api, LIMITS, limit_range("lr", {"type": "Container",
                                                 "min": {"memory": "64Mi"}}))
    body = pod("", ctr("app", requests={"memory": "1Mi"}))
    body["metadata"] = {"generateName": "web-"}
    status, out = await api.post(PODS, body)
    assert status == 403
    assert re.fullmatch(r'pods "web-[a-z0-9]{5}" is forbidden: minimum memory usage per '
                        r"Container is 64Mi, but request is 1Mi", forbidden(out))


async def test_pod_level_ephemeral_storage_default_and_max(api: Api) -> None:
    await create(api, LIMITS, limit_range(
        "lr", {"type": "Pod", "max": {"ephemeral-storage": "4Gi"},
               "default": {"ephemeral-storage": "2Gi"},
               "defaultRequest": {"ephemeral-storage": "1Gi"}}))
    created = await create(api, PODS, pod("p1"))
    assert created["spec"]["resources"] == {"limits": {"ephemeral-storage": "2Gi"},
                                            "requests": {"ephemeral-storage": "1Gi"}}
    assert created["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: ephemeral-storage request for pod; ephemeral-storage limit "
        "for pod")
    status, out = await api.post(PODS, pod("p2", resources={
        "limits": {"ephemeral-storage": "8Gi"}, "requests": {"ephemeral-storage": "1Gi"}}))
    assert status == 403
    assert forbidden(out) == ('pods "p2" is forbidden: maximum ephemeral-storage usage per Pod '
                              "is 4Gi, but limit is 8Gi")


async def test_pod_defaults_that_make_the_pod_invalid_are_a_422(api: Api) -> None:
    # A default pod limit below what a container asks for: pod validation refuses it.
    await create(api, LIMITS, limit_range("lr", {"type": "Pod",
                                                 "default": {"ephemeral-storage": "1Gi"}}))
    status, out = await api.post(PODS, pod("p1", ctr("app", limits={"ephemeral-storage":
                                                                    "2Gi"})))
    assert status == 422
    assert out["details"]["causes"][0]["field"] in (
        "spec.resources.requests", "spec.resources.containers[0][ephemeral-storage].limits")


# --- ResourceQuota objects -----------------------------------------------------------------


async def test_resource_quota_validation(api: Api) -> None:
    status, out = await api.post(QUOTAS, resource_quota("q", {"pods": "1500m",
                                                              "requests.cpu": "-1"}))
    assert status == 422
    assert out["message"] == (
        'ResourceQuota "q" is invalid: [spec.hard[pods]: Invalid value: "1500m": must be an '
        'integer, spec.hard[requests.cpu]: Invalid value: "-1": must be greater than or equal '
        "to 0]")
    created = await create(api, QUOTAS, resource_quota("q", {"pods": "2"}))
    assert created["status"] == {}  # reset on create, as upstream; the controller fills it


# --- quota admission -----------------------------------------------------------------------


async def test_quota_exceeded_message_and_charge(api: Api) -> None:
    await create_quota(api, "q1", {"requests.ephemeral-storage": "10Gi", "pods": "5"},
                       {"requests.ephemeral-storage": "9Gi", "pods": "1"})
    status, out = await api.post(PODS, pod("p1", resources={
        "requests": {"ephemeral-storage": "2Gi"}, "limits": {"ephemeral-storage": "2Gi"}}))
    assert status == 403
    assert forbidden(out) == (
        'pods "p1" is forbidden: exceeded quota: q1, requested: '
        "requests.ephemeral-storage=2Gi, used: requests.ephemeral-storage=9Gi, limited: "
        "requests.ephemeral-storage=10Gi")
    assert await used(api, "q1") == {"pods": "1", "requests.ephemeral-storage": "9Gi"}
    await create(api, PODS, pod("p2", resources={"requests": {"ephemeral-storage": "1Gi"}}))
    assert await used(api, "q1") == {"pods": "2", "requests.ephemeral-storage": "10Gi"}


async def test_quota_requires_container_values(api: Api) -> None:
    await create_quota(api, "compute", {"limits.cpu": "4", "requests.memory": "1Gi"})
    status, out = await api.post(PODS, pod("p1", ctr("c1"), ctr("c2", limits={"cpu": "1"})))
    assert status == 403
    assert forbidden(out) == ('pods "p1" is forbidden: failed quota: compute: must specify '
                              "limits.cpu for: c1; requests.memory for: c1,c2")


async def test_quota_without_status_is_unknown_once_hard_is_known(api: Api) -> None:
    quota = await create(api, QUOTAS, resource_quota("q", {"pods": "5", "requests.cpu": "1"}))
    # No status yet: the quota matches nothing (upstream lets the pod through).
    await create(api, PODS, pod("early"))
    quota["status"] = {"hard": {"pods": "5", "requests.cpu": "1"}, "used": {"pods": "1"}}
    status, out = await api.put(f"{QUOTAS}/q/status", quota)
    assert status == 200, out
    status, out = await api.post(PODS, pod("p1", ctr("c", requests={"cpu": "100m"})))
    assert status == 403
    assert forbidden(out) == ('pods "p1" is forbidden: status unknown for quota: q, resources: '
                              "pods,requests.cpu")


async def test_dry_run_checks_but_does_not_charge(api: Api) -> None:
    await create_quota(api, "q", {"pods": "1"})
    status, _ = await api.post(f"{PODS}?dryRun=All", pod("p1"))
    assert status == 201
    assert await used(api, "q") == {"pods": "0"}
    await create(api, PODS, pod("p1"))
    status, out = await api.post(f"{PODS}?dryRun=All", pod("p2"))
    assert status == 403
    assert forbidden(out) == ('pods "p2" is forbidden: exceeded quota: q, requested: pods=1, '
                              "used: pods=1, limited: pods=1")


async def test_a_refused_second_quota_takes_back_the_first_charge(api: Api) -> None:
    await create_quota(api, "a", {"pods": "10"})
    await create_quota(api, "b", {"requests.cpu": "1"}, {"requests.cpu": "900m"})
    status, out = await api.post(PODS, pod("p1", ctr("c", requests={"cpu": "500m"})))
    assert status == 403
    assert "exceeded quota: b," in forbidden(out)
    assert await used(api, "a") == {"pods": "0"}


async def _concurrent_creates(api: Api, allowed: int, attempts: int) -> None:
    await create_quota(api, "q", {"pods": str(allowed + 100),
                                  "requests.ephemeral-storage": f"{allowed}Gi"})

    async def one(i: int) -> tuple[int, Any]:
        return await api.post(PODS, pod(f"p{i}", resources={
            "requests": {"ephemeral-storage": "1Gi"}}))

    results = await asyncio.gather(*(one(i) for i in range(attempts)))
    codes = sorted(code for code, _ in results)
    assert codes == [201] * allowed + [403] * (attempts - allowed), results
    messages = {forbidden(body).split(": ", 1)[1] for code, body in results if code == 403}
    assert messages == {
        f"exceeded quota: q, requested: requests.ephemeral-storage=1Gi, used: "
        f"requests.ephemeral-storage={allowed}Gi, limited: "
        f"requests.ephemeral-storage={allowed}Gi"}
    assert await used(api, "q") == {"pods": str(allowed),
                                    "requests.ephemeral-storage": f"{allowed}Gi"}
    status, listed = await api.get(PODS)
    assert status == 200
    assert len(listed["items"]) == allowed


async def test_concurrent_creates_cannot_overrun_a_nearly_full_quota(api: Api) -> None:
    await _concurrent_creates(api, allowed=3, attempts=12)


async def test_concurrent_creates_on_etcd(etcd_api: Api) -> None:
    await _concurrent_creates(etcd_api, allowed=2, attempts=8)


# --- /dynamic ------------------------------------------------------------------------------


async def _running(api: Api, name: str) -> dict[str, Any]:
    status, current = await api.get(f"{PODS}/{name}")
    assert status == 200
    current["status"] = {**current["status"], "phase": "Running",
                         "conditions": [{"type": "Initialized", "status": "True"}]}
    status, out = await api.put(f"{PODS}/{name}/status", current)
    assert status == 200, out
    return dict(out)


async def test_dynamic_container_addition_is_defaulted_checked_and_charged(api: Api) -> None:
    await create(api, LIMITS, limit_range(
        "lr", {"type": "Container", "default": {"cpu": "400m", "ephemeral-storage": "1Gi"},
               "defaultRequest": {"cpu": "200m", "ephemeral-storage": "1Gi"},
               "max": {"cpu": "1"}}))
    await create_quota(api, "q", {"requests.cpu": "1"})
    await create(api, PODS, pod("p1", ctr("app", requests={"cpu": "300m"},
                                          limits={"cpu": "600m"})))
    assert await used(api, "q") == {"requests.cpu": "300m"}
    running = await _running(api, "p1")

    added = dict(running)
    added["spec"] = {**running["spec"],
                     "containers": [*running["spec"]["containers"], ctr("helper")]}
    status, out = await api.put(f"{PODS}/p1/dynamic", added)
    assert status == 200, out
    helper = out["spec"]["containers"][1]
    # Only cpu and memory are defaulted for an added container.
    assert helper["resources"] == {"limits": {"cpu": "400m"}, "requests": {"cpu": "200m"}}
    assert await used(api, "q") == {"requests.cpu": "500m"}

    too_big = dict(out)
    too_big["spec"] = {**out["spec"], "containers": [
        *out["spec"]["containers"], ctr("big", requests={"cpu": "2"}, limits={"cpu": "2"})]}
    status, body = await api.put(f"{PODS}/p1/dynamic", too_big)
    assert status == 403
    assert forbidden(body) == ('pods "p1" is forbidden: maximum cpu usage per Container is 1, '
                               "but limit is 2")

    over = dict(out)
    over["spec"] = {**out["spec"], "containers": [
        *out["spec"]["containers"], ctr("more", requests={"cpu": "600m"},
                                        limits={"cpu": "600m"})]}
    status, body = await api.put(f"{PODS}/p1/dynamic", over)
    assert status == 403
    assert forbidden(body) == (
        'pods "p1" is forbidden: exceeded quota: q, requested: requests.cpu=600m, used: '
        "requests.cpu=500m, limited: requests.cpu=1")


# --- the controller ------------------------------------------------------------------------


async def test_controller_fills_status_and_releases_usage(api: Api) -> None:
    await create(api, QUOTAS, resource_quota("q", {"pods": "2", "count/pods": "5",
                                                   "requests.cpu": "1"}))
    async with quota_controller(api) as controller:
        async def status_is(expected: dict[str, str]) -> bool:
            _, got = await api.get(f"{QUOTAS}/q")
            return bool(got.get("status", {}).get("used") == expected)

        await eventually(lambda: status_is({"count/pods": "0", "pods": "0",
                                            "requests.cpu": "0"}))
        _, got = await api.get(f"{QUOTAS}/q")
        assert got["status"]["hard"] == {"count/pods": "5", "pods": "2", "requests.cpu": "1"}

        await create(api, PODS, pod("a", ctr("c", requests={"cpu": "300m"})))
        await create(api, PODS, pod("b", ctr("c", requests={"cpu": "300m"})))
        status, out = await api.post(PODS, pod("c", ctr("c", requests={"cpu": "100m"})))
        assert status == 403 and "exceeded quota: q, requested: pods=1" in forbidden(out)

        # A finished pod frees pods and cpu but is still counted in count/pods.
        _, a = await api.get(f"{PODS}/a")
        a["status"]["phase"] = "Succeeded"
        status, _ = await api.put(f"{PODS}/a/status", a)
        assert status == 200
        await eventually(lambda: status_is({"count/pods": "2", "pods": "1",
                                            "requests.cpu": "300m"}))
        status, _ = await api.delete(f"{PODS}/b")
        assert status == 200
        await eventually(lambda: status_is({"count/pods": "1", "pods": "0",
                                            "requests.cpu": "0"}))
        await create(api, PODS, pod("c", ctr("c", requests={"cpu": "100m"})))
        assert controller.writes >= 3


async def test_controller_corrects_a_wrong_used(api: Api) -> None:
    name = f"q-{uuid.uuid4().hex[:6]}"
    await create_quota(api, name, {"pods": "3"}, {"pods": "3"})  # over-charged
    async with quota_controller(api):
        async def freed() -> bool:
            return await used(api, name) == {"pods": "0"}

        await eventually(freed)
    await create(api, PODS, pod("p1"))

"""The EndpointSlice and Endpoints controller against an in-process apiserver: slices and
Endpoints follow the selected pods' IPs and readiness, named target ports resolve per pod,
pods without an IP are left out, and a deleted Service's slices and Endpoints go."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestServer
from apiserver_fixtures import eventually

from ephemera.api.errors import StatusError
from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, resource_path
from ephemera.client.kubeconfig import ClientConfig
from ephemera.controllers.endpointslice import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    EndpointSliceController,
)
from ephemera.store import open_store

SLICES = resource_path("endpointslices", "default", group="discovery.k8s.io")


@contextlib.asynccontextmanager
async def controller_and_api(tmp_path: Path) -> AsyncIterator[ApiClient]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    server = TestServer(create_app(store, ApiserverConfig(watch_bookmark_interval=0.2)))
    await server.start_server()
    try:
        async with ApiClient(ClientConfig(server=str(server.make_url("")).rstrip("/")),
                             user_agent="endpointslice-test") as api:
            task = asyncio.create_task(EndpointSliceController(api).run())
            try:
                yield api
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await server.close()
        await store.close()


async def make_pod(api: ApiClient, name: str, ip: str | None, ready: bool,
                   port_name: str = "http", port: int = 8080) -> None:
    await api.create(resource_path("pods", "default"), {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": "n1", "containers": [{
            "name": "c", "image": "busybox",
            "ports": [{"name": port_name, "containerPort": port}]}]}})
    await set_status(api, name, ip, ready)


async def set_status(api: ApiClient, name: str, ip: str | None, ready: bool) -> None:
    path = resource_path("pods", "default", name)
    current = await api.get(path)
    status: dict[str, Any] = {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    current["status"] = status
    await api.update(path + "/status", current)


async def slices_of(api: ApiClient, service: str) -> list[dict[str, Any]]:
    listed = await api.get(SLICES, labelSelector=f"{SERVICE_NAME_LABEL}={service}")
    return list(listed["items"])


def endpoints_view(slices: list[dict[str, Any]]) -> dict[str, tuple[bool, bool, bool]]:
    return {e["addresses"][0]: (e["conditions"]["ready"], e["conditions"]["serving"],
                                e["conditions"]["terminating"])
            for s in slices for e in s.get("endpoints") or []}


async def test_slices_and_endpoints_follow_pods(tmp_path: Path) -> None:
    async with controller_and_api(tmp_path) as api:
        await make_pod(api, "a", "10.244.0.5", True)
        await make_pod(api, "b", "10.244.0.6", False, port=9090)
        await make_pod(api, "c", None, True)
        await api.create(resource_path("services", "default"), {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}})

        async def two_slices() -> bool:
            found = await slices_of(api, "web")
            if len(found) != 2 or len(endpoints_view(found)) != 2:
                return False
            try:  # the Endpoints are written after the slices
                await api.get(resource_path("endpoints", "default", "web"))
            except StatusError:
                return False
            return True

        await eventually(two_slices)
        found = await slices_of(api, "web")
        assert endpoints_view(found) == {"10.244.0.5": (True, True, False),
                                         "10.244.0.6": (False, False, False)}
        by_ip = {s["endpoints"][0]["addresses"][0]: s for s in found}
        assert by_ip["10.244.0.5"]["ports"] == [{"name": "http", "port": 8080,
                                                 "protocol": "TCP"}]
        assert by_ip["10.244.0.6"]["ports"] == [{"name": "http", "port": 9090,
                                                 "protocol": "TCP"}]
        one = by_ip["10.244.0.5"]
        assert one["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY
        assert one["metadata"]["name"].startswith("web-")
        assert one["metadata"]["ownerReferences"][0]["kind"] == "Service"
        assert one["endpoints"][0]["targetRef"]["name"] == "a"
        assert one["endpoints"][0]["nodeName"] == "n1"
        # The legacy Endpoints are written after the slices (a controller of their own).
        async def endpoints_written() -> bool:
            try:
                eps = await api.get(resource_path("endpoints", "default", "web"))
            except StatusError as err:
                assert err.code == 404
                return False
            return len(eps.get("subsets") or []) == 2

        await eventually(endpoints_written)
        eps = await api.get(resource_path("endpoints", "default", "web"))
        assert [[a["ip"] for a in s.get("addresses", [])] for s in eps["subsets"]] == [
            ["10.244.0.5"], []]
        assert eps["subsets"][1]["notReadyAddresses"][0]["ip"] == "10.244.0.6"

        # Readiness flips: b becomes ready, a not.
        await set_status(api, "b", "10.244.0.6", True)
        await set_status(api, "a", "10.244.0.5", False)

        async def flipped() -> bool:
            return endpoints_view(await slices_of(api, "web")) == {
                "10.244.0.5": (False, False, False), "10.244.0.6": (True, True, False)}

        await eventually(flipped)

        # The Service goes: its slices and Endpoints go.
        await api.delete(resource_path("services", "default", "web"))

        async def gone() -> bool:
            if await slices_of(api, "web"):
                return False
            try:
                await api.get(resource_path("endpoints", "default", "web"))
            except StatusError as err:
                return err.code == 404
            return False

        await eventually(gone)

"""A kubelet the apiserver cannot reach: logs, `/allocated`, exec, attach and the node proxy
answer as upstream's apiserver does (a 500 with no reason and Go's error text), never with a
Python repr."""

from __future__ import annotations

import socket

from apiserver_fixtures import Api

PODS = "/api/v1/namespaces/default/pods"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def _node_at(api: Api, port: int) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    status, created = await api.post("/api/v1/nodes", node)
    assert status == 201, created
    created["status"] = {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                         "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}
    status, body = await api.put("/api/v1/nodes/n1/status", created)
    assert status == 200, body


def _failure(status: int, body: dict[str, object]) -> tuple[int, object, object]:
    assert body["kind"] == "Status" and body["code"] == status
    return status, body.get("reason"), body["message"]


async def test_unreachable_kubelet_answers_go_s_errors(api: Api) -> None:
    port = _closed_port()
    await _node_at(api, port)
    created = await api.create_pod("p1", node="n1")
    uid = created["metadata"]["uid"]
    refused = f"dial tcp 127.0.0.1:{port}: connect: connection refused"

    assert _failure(*await api.get(f"{PODS}/p1/log")) == (
        500, None, f'Get "https://127.0.0.1:{port}/containerLogs/default/p1/c": {refused}')
    # The query as Go's url.Values.Encode writes it: keys sorted.
    assert _failure(*await api.get(f"{PODS}/p1/log?tailLines=5&follow=true")) == (
        500, None,
        f'Get "https://127.0.0.1:{port}/containerLogs/default/p1/c?follow=true&tailLines=5": '
        f"{refused}")
    assert _failure(*await api.get(f"{PODS}/p1/allocated")) == (
        500, None, f'Get "https://127.0.0.1:{port}/allocatedPods/{uid}": {refused}')
    assert _failure(*await api.get("/api/v1/nodes/n1/proxy/stats/summary")) == (
        500, None, refused)
    assert _failure(*await api.post(f"{PODS}/p1/exec?command=ls&stdout=true", None)) == (
        500, None, f"error dialing backend: {refused}")
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    status, body, _ = await api.request("GET", f"{PODS}/p1/attach?stdout=true",
                                        headers=upgrade)
    assert _failure(status, body) == (500, None, f"error dialing backend: {refused}")

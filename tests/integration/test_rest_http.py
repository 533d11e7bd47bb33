"""HTTP-level behaviour of the apiserver app: routing (404/405 as Status), discovery and
OpenAPI routes with trailing slashes, content negotiation (Table, PartialObjectMetadata,
protobuf-first Accept), request bodies (chunked, YAML, size cap), authentication, internal
errors and log lines."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from apiserver_fixtures import TABLE_ACCEPT, Api, pod

from ephemera.apiserver import openapiproto
from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.apiserver.authn import Authenticator, UserInfo
from ephemera.apiserver.server import serve
from ephemera.store import open_store

PODS = "/api/v1/namespaces/default/pods"


@pytest.mark.parametrize("path", ["/nope", "/api/v2", "/api/v1/foos",
                                  "/apis/example.com/v1", "/api/v1/namespaces/default/nodes/n1",
                                  "/api/v1/namespaces/default/pods/p1/bogus",
                                  "/api/v1/pods/p1", "/openapi/v3/apis/x/v1",
                                  # an empty segment inside: authorization would read it
                                  # differently from the router, so it is never served
                                  "/api/v1/namespaces/default/pods/p1//exec",
                                  "/api/v1//namespaces", "/api/v1/namespaces//default/pods",
                                  "/apis/rbac.authorization.k8s.io/v1//clusterroles"])
async def test_unknown_paths_are_404_status(api: Api, path: str) -> None:
    status, body = await api.get(path)
    assert status == 404
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "the server could not find the requested resource",
                    "reason": "NotFound", "details": {}, "code": 404}


@pytest.mark.parametrize(("method", "path"), [
    ("POST", f"{PODS}/p1"), ("PUT", PODS), ("PATCH", PODS), ("POST", "/api/v1/pods"),
    ("DELETE", "/api/v1/pods"), ("DELETE", f"{PODS}/p1/status"), ("POST", "/api/v1"),
    ("PUT", "/version")])
async def test_wrong_methods_are_405_status(api: Api, method: str, path: str) -> None:
    status, body, _ = await api.request(method, path, {})
    assert status == 405
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "MethodNotAllowed", 405)


@pytest.mark.parametrize("path", ["/version", "/version/", "/api", "/api/", "/apis", "/apis/",
                                  "/api/v1", "/api/v1/", "/apis/coordination.k8s.io/v1/",
                                  "/apis/coordination.k8s.io"])
async def test_discovery_routes_tolerate_trailing_slashes(api: Api, path: str) -> None:
    status, body = await api.get(path)
    assert status == 200
    assert isinstance(body, dict) and body


async def test_discovery_content(api: Api) -> None:
    _, version = await api.get("/version")
    assert (version["major"], version["gitVersion"][:3]) == ("1", "v1.")
    _, resources = await api.get("/api/v1")
    names = {r["name"] for r in resources["resources"]}
    assert {"pods", "pods/status", "pods/dynamic", "pods/binding", "namespaces"} <= names
    status, body, response = await api.request(
        "GET", "/api", headers={"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;"
                                          "as=APIGroupDiscoveryList,application/json"})
    assert status == 200
    assert response.headers["Content-Type"] == (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    assert body["kind"] == "APIGroupDiscoveryList"


async def test_openapi_routes(api: Api) -> None:
    status, index = await api.get("/openapi/v3")
    assert status == 200
    url = index["paths"]["api/v1"]["serverRelativeURL"]
    status, doc = await api.get(url)
    assert status == 200 and doc["openapi"].startswith("3.")
    status, _ = await api.get("/openapi/v3/apis/coordination.k8s.io/v1")
    assert status == 200
    status, v2 = await api.get("/openapi/v2", headers={"Accept": "application/json"})
    assert status == 200 and v2["swagger"] == "2.0"
    # kubectl asks for protobuf alone: gnostic's Document, the same definitions.
    response = await api.client.get("/openapi/v2", headers={
        "Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
    assert response.status == 200
    assert response.headers["Content-Type"] == \
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    document = openapiproto.decode(await response.read())
    assert document.swagger == "2.0"
    definitions = {named.name: named.value for named in document.definitions.additional_properties}
    assert set(definitions) == set(v2["definitions"])
    pod = definitions["io.k8s.api.core.v1.Pod"]
    assert [(e.name, json.loads(e.value.yaml)) for e in pod.vendor_extension] == [
        ("x-kubernetes-group-version-kind", [{"group": "", "kind": "Pod", "version": "v1"}])]
    assert pod.properties.additional_properties[0].name == "apiVersion"
    assert {named.name for named in document.paths.path} == set(v2["paths"])


async def test_health_endpoints(api: Api) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        response = await api.client.get(path)
        assert response.status == 200 and await response.text() == "ok"


async def test_protobuf_first_accept_still_gets_json(api: Api) -> None:
    await api.create_pod("p1")
    status, body, response = await api.request(
        "GET", f"{PODS}/p1",
        headers={"Accept": "application/vnd.kubernetes.protobuf,application/json"})
    assert status == 200
    assert response.headers["Content-Type"] == "application/json"
    assert body["metadata"]["name"] == "p1"


async def test_table_output(api: Api) -> None:
    await api.create_pod("p1", node="n1")
    status, table = await api.get(f"{PODS}?limit=500", headers={"Accept": TABLE_ACCEPT})
    assert status == 200
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name", "Ready", "Status", "Restarts", "Age"]
    row = table["rows"][0]
    assert row["cells"][:4] == ["p1", "0/1", "Pending", "0"]
    assert row["object"]["metadata"]["namespace"] == "default"
    assert table["metadata"]["resourceVersion"]
    status, one = await api.get(f"{PODS}/p1", headers={"Accept": TABLE_ACCEPT})
    assert one["kind"] == "Table" and len(one["rows"]) == 1
    status, empty = await api.get("/api/v1/namespaces/kube-system/pods",
                                  headers={"Accept": TABLE_ACCEPT})
    assert empty["rows"] == []
    status, none = await api.get(f"{PODS}?includeObject=None",
                                 headers={"Accept": TABLE_ACCEPT})
    assert "object" not in none["rows"][0]


async def test_partial_object_metadata(api: Api) -> None:
    await api.create_pod("p1")
    accept = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
    status, body = await api.get(PODS, headers={"Accept": accept})
    assert status == 200
    assert body["kind"] == "PartialObjectMetadataList"
    assert body["items"][0]["metadata"]["name"] == "p1"
    assert "spec" not in body["items"][0]


async def test_chunked_yaml_body_without_content_type(api: Api) -> None:
    text = yaml.safe_dump(pod("p1")).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(text), 7):
            yield text[i:i + 7]

    # As kubectl's `create --raw` sends it: no Content-Type (aiohttp's own default,
    # application/octet-stream, is a format the apiserver does not read: 415 below).
    response = await api.client.post(PODS, data=chunks(), skip_auto_headers=["Content-Type"])
    assert response.status == 201, await response.text()
    assert (await response.json())["metadata"]["name"] == "p1"
    _, current = await api.get(f"{PODS}/p1")
    current["metadata"]["labels"] = {"via": "raw"}

    async def put_chunks() -> AsyncIterator[bytes]:
        yield yaml.safe_dump(current).encode()

    response = await api.client.put(f"{PODS}/p1", data=put_chunks(),
                                    skip_auto_headers=["Content-Type"])
    assert response.status == 200
    assert (await response.json())["metadata"]["labels"] == {"via": "raw"}


async def test_a_body_in_a_format_not_read_is_415(api: Api) -> None:
    """An object body whose Content-Type names a format the apiserver does not read is
    refused, as upstream's input negotiation refuses it, even when the bytes are JSON."""
    body = json.dumps(pod("p1")).encode()
    core = ("the body of the request was in an unknown format - accepted media types "
            "include: application/json, application/yaml, application/vnd.kubernetes.protobuf")
    for content_type in ("text/plain", "application/xml", "application/x-www-form-urlencoded",
                         "application/octet-stream"):
        response = await api.client.post(PODS, data=body,
                                         headers={"Content-Type": content_type})
        assert response.status == 415, content_type
        assert await response.json() == {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": core, "reason": "UnsupportedMediaType", "code": 415}
    status, _ = await api.get(f"{PODS}/p1")
    assert status == 404
    response = await api.client.post(PODS, data=body,
                                     headers={"Content-Type": "application/json; charset=utf-8"})
    assert response.status == 201


async def test_body_too_large_is_413(api: Api) -> None:
    big = pod("p1")
    big["metadata"]["annotations"] = {"x": "y" * (3 * 1024 * 1024)}
    status, body = await api.post(PODS, big)
    assert status == 413
    assert (body["kind"], body["reason"]) == ("Status", "RequestEntityTooLarge")


async def test_bad_json_is_400(api: Api) -> None:
    status, body = await api.post(PODS, b'{"kind": ')
    assert status == 400
    assert body["message"].startswith("the object provided is unrecognized (must be of type "
                                      "Pod): couldn't get version/kind; ")


async def test_a_client_gone_mid_body_is_one_log_line(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A client that gives up while its body is being read (as under load, after its own
    timeout): one line in the log, no traceback, nothing created. Served as the command
    serves (aiohttp's test server cancels the handler instead)."""
    caplog.set_level(logging.INFO)
    store = open_store("sqlite", data_dir=tmp_path / "data")
    app = create_app(store, ApiserverConfig())
    stop, started = asyncio.Event(), asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(serve(app, host="127.0.0.1", port=0, ssl_context=None,
                                        stop=stop, on_started=started.set_result))
    try:
        port = await asyncio.wait_for(started, 10)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"POST {PODS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     "\r\nContent-Length: 1000\r\n\r\n{\"kind\": ".encode())
        await writer.drain()
        await asyncio.sleep(0.2)  # the handler is reading the body
        writer.transport.abort()

        def gone() -> list[str]:
            return [r.getMessage() for r in caplog.records if "went away" in r.getMessage()]
        for _ in range(250):
            if gone():
                break
            await asyncio.sleep(0.02)
        assert len(gone()) == 1
        assert gone()[0].startswith("client 127.0.0.1 went away: POST "
                                    "/api/v1/namespaces/default/pods: ")
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert (await store.list("/registry/pods/")).kvs == []
    finally:
        stop.set()
        await serving
        await store.close()


async def test_write_log_lines(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ephemera.apiserver")
    created = await api.create_pod("p1")
    rv = created["metadata"]["resourceVersion"]
    assert f"created pods default/p1 rv={rv}" in caplog.messages


async def test_internal_error_is_a_500_status_with_a_log_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    app = create_app(store, ApiserverConfig())
    async with TestClient(TestServer(app)) as client:
        await store.close()  # every store call now fails
        response = await client.get(f"{PODS}/p1")
        body = json.loads(await response.text())
    assert response.status == 500
    # upstream's ErrorToAPIStatus of an error that is not a Status (etcd's): no reason, the
    # error's own words
    assert (body["kind"], body["status"], body["code"]) == ("Status", "Failure", 500)
    assert "reason" not in body or body["reason"] == ""
    assert body["message"] == "store is closed"
    assert any("GET /api/v1/namespaces/default/pods/p1" in m for m in caplog.messages)


async def test_authentication(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    authenticator = Authenticator({"s3cret": UserInfo(name="admin",
                                                      groups=("system:masters",))})
    app = create_app(store, ApiserverConfig(authenticator=authenticator))
    try:
        async with TestClient(TestServer(app)) as client:
            response = await client.get(PODS)  # anonymous: RBAC refuses
            assert response.status == 403
            response = await client.get(PODS, headers={"Authorization": "Bearer wrong"})
            assert response.status == 401
            assert json.loads(await response.text()) == {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
            response = await client.get(PODS, headers={"Authorization": "Bearer s3cret"})
            assert response.status == 200
            response = await client.get("/version")
            assert response.status == 200
    finally:
        await store.close()


async def test_protobuf_body_from_kubectl_create_namespace(api: Api) -> None:
    body = bytes.fromhex("6b3873000a0f0a02763112094e616d657370616365121a0a120a027a7a12001a002200"
                         "2a0032003800420012001a020a001a002200")
    status, created = await api.post(
        "/api/v1/namespaces?fieldManager=kubectl-create&fieldValidation=Strict", body,
        content_type="application/vnd.kubernetes.protobuf",
        headers={"Accept": "application/vnd.kubernetes.protobuf,application/json"})
    assert status == 201, created
    assert created["metadata"]["name"] == "zz"
    assert created["status"] == {"phase": "Active"}

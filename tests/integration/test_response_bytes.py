"""The bytes of JSON answers: upstream's serializer (Go's `json.Encoder`) ends every JSON body
with a newline, and the Python client's `FailToCreateError` prints the Status body as it
came (its e2e `test_create_from_multi_resource_yaml_with_conflict` compares that text)."""

from __future__ import annotations

from apiserver_fixtures import Api, configmap

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


async def test_json_bodies_end_with_a_newline(api: Api) -> None:
    status, _, created = await api.request("POST", CONFIGMAPS, configmap("one"))
    assert status == 201
    assert (await created.read()).endswith(b"}\n")
    status, _, conflict = await api.request("POST", CONFIGMAPS, configmap("one"))
    assert status == 409
    assert await conflict.read() == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"configmaps \\"one\\" already exists","reason":"AlreadyExists",'
        b'"details":{"name":"one","kind":"configmaps"},"code":409}\n')
    for path in (f"{CONFIGMAPS}/one", CONFIGMAPS, "/api/v1", "/apis"):
        status, _, answer = await api.request("GET", path)
        assert status == 200, path
        body = await answer.read()
        assert body.endswith(b"}\n") and not body.endswith(b"\n\n"), path
    status, _, table = await api.request(
        "GET", CONFIGMAPS, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert status == 200
    assert (await table.read()).endswith(b"}\n")

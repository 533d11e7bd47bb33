"""The write path's shortcuts never change an answer.

- Updates start from the watch cache's copy (`Registry.update`, as upstream's cacher hands
  GuaranteedUpdate its cached object): the cache is made stale on purpose (its lookup returns
  an old version), so every case is deterministic.
- A patched built-in object's field validation skips what the patch left as stored: values
  equal in Python but not in JSON (1 and true) are still walked and refused."""

from __future__ import annotations

import json
from typing import Any

from apiserver_fixtures import Api, configmap

from ephemera.apiserver.app import REGISTRY
from ephemera.store import KeyValue

CMS = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"
KEY = "/registry/configmaps/default/cm"


async def stale_cache(api: Api) -> tuple[list[str], str]:
    """Create `cm` (data a=1), update it (a=2); from then on the cache's lookup returns the
    first version. Returns the keys looked up and the second version's resourceVersion."""
    status, created = await api.post(CMS, configmap("cm", {"a": "1"}))
    assert status == 201, created
    registry = api.app[REGISTRY]
    assert registry.watch_cache is not None
    key = KEY
    old = await api.store.get(key)
    assert old is not None
    status, updated = await api.put(f"{CMS}/cm", {**created, "data": {"a": "2"}})
    assert status == 200, updated
    looked_up: list[str] = []

    def cached(prefix: str, wanted: str) -> KeyValue | None:
        looked_up.append(wanted)
        return old if wanted == key else None

    registry.watch_cache.cached = cached  # type: ignore[method-assign]
    return looked_up, str(updated["metadata"]["resourceVersion"])


async def stored_data(api: Api) -> tuple[dict[str, Any], str]:
    kv = await api.store.get(KEY)
    assert kv is not None
    return json.loads(kv.value)["data"], str(kv.mod_revision)


async def test_a_stale_start_never_changes_the_answer(api: Api) -> None:
    looked_up, latest = await stale_cache(api)

    # The client's resourceVersion is the store's: accepted, though the cached copy is older.
    status, body = await api.put(f"{CMS}/cm", configmap("cm", {"a": "3"},
                                                         resourceVersion=latest))
    assert status == 200, body
    assert looked_up, "the update did not start from the cache"
    data, latest = await stored_data(api)
    assert data == {"a": "3"}
    assert body["metadata"]["resourceVersion"] == latest

    # An old resourceVersion still conflicts, with upstream's message.
    status, body = await api.put(f"{CMS}/cm", configmap("cm", {"a": "4"},
                                                         resourceVersion="2"))
    assert status == 409, body
    assert body["message"] == ('Operation cannot be fulfilled on configmaps "cm": the object '
                               "has been modified; please apply your changes to the latest "
                               "version and try again")

    # Equal to the store's object (not to the stale copy): nothing is written.
    status, body = await api.patch(f"{CMS}/cm", {"data": {"a": "3"}}, MERGE)
    assert status == 200, body
    assert body["metadata"]["resourceVersion"] == latest
    assert (await stored_data(api)) == ({"a": "3"}, latest)

    # A patch the stale copy (a=1) fails, its `test` holding for the store's object: applied.
    status, body = await api.patch(f"{CMS}/cm", [
        {"op": "test", "path": "/data/a", "value": "3"},
        {"op": "replace", "path": "/data/a", "value": "4"}], "application/json-patch+json")
    assert status == 200, body
    data, latest = await stored_data(api)
    assert data == {"a": "4"}
    assert body["metadata"]["resourceVersion"] == latest

    # Equal to the stale copy but not to the store's object: written.
    status, body = await api.patch(f"{CMS}/cm", {"data": {"a": "1"}}, MERGE)
    assert status == 200, body
    data, newest = await stored_data(api)
    assert data == {"a": "1"}
    assert int(newest) > int(latest)
    assert body["metadata"]["resourceVersion"] == newest

    # A dry run answers from the store's object, not the stale copy.
    status, body = await api.patch(f"{CMS}/cm?dryRun=All", {"data": {"b": "x"}}, MERGE)
    assert status == 200, body
    assert body["data"] == {"a": "1", "b": "x"}
    assert body["metadata"]["resourceVersion"] == newest


async def test_a_patch_is_type_checked_where_it_differs_only_in_json(api: Api) -> None:
    status, _ = await api.post("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"hostNetwork": True, "containers": [{"name": "c", "image": "busybox"}]}})
    assert status == 201
    status, body = await api.patch("/api/v1/namespaces/default/pods/p",
                                   {"spec": {"hostNetwork": 1}}, MERGE)
    assert status == 422, body
    assert body["details"]["causes"][0]["message"].endswith(
        "json: cannot unmarshal number into Go struct field PodSpec.spec.hostNetwork of "
        "type bool")
    # unknown fields beside unchanged ones are still found (Strict) and dropped (Warn)
    patch = {"metadata": {"labels": {"a": "b"}}, "spec": {"bogus": 1}}
    status, body = await api.patch("/api/v1/namespaces/default/pods/p?fieldValidation=Strict",
                                   patch, MERGE)
    assert status == 422, body
    assert 'unknown field "spec.bogus"' in body["message"]
    status, body, response = await api.request(
        "PATCH", "/api/v1/namespaces/default/pods/p?fieldValidation=Warn", patch,
        content_type=MERGE)
    assert status == 200, body
    assert "bogus" not in body["spec"]
    assert response.headers.get("Warning") == '299 - "unknown field \\"spec.bogus\\""'


async def test_an_update_body_is_checked_where_it_differs_from_a_stored_version(
        api: Api) -> None:
    status, created = await api.post("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"hostNetwork": True, "containers": [{"name": "c", "image": "busybox"}]}})
    assert status == 201, created
    registry = api.app[REGISTRY]
    hints: list[str] = []
    cached_object = registry.cached_object

    def recording(resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
        hints.append(name)
        found = cached_object(resource, namespace, name)
        return found if found is not None else created  # a stored version either way

    registry.cached_object = recording  # type: ignore[method-assign]
    body = json.loads(json.dumps(created))
    body["spec"]["hostNetwork"] = 1
    status, answer = await api.put("/api/v1/namespaces/default/pods/p", body)
    assert status == 400, answer
    assert answer["message"].endswith(
        "json: cannot unmarshal number into Go struct field PodSpec.spec.hostNetwork of "
        "type bool")
    assert hints == ["p"]
    body = json.loads(json.dumps(created))
    body["spec"]["bogus"] = 1
    status, answer = await api.put("/api/v1/namespaces/default/pods/p?fieldValidation=Strict",
                                   body)
    assert status == 400, answer
    assert 'unknown field "spec.bogus"' in answer["message"]

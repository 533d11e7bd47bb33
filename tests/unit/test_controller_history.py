"""The ControllerRevision kept for a DaemonSet's or StatefulSet's current template
(`history.ensure_revision`): a template seen before takes the next revision number, a new one
gets a revision of its own with it, one created meanwhile (409) is no error."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.api.errors import StatusError, already_exists
from ephemera.controllers.history import HASH_LABEL, ensure_revision

OWNER = {"metadata": {"name": "web", "namespace": "ns", "uid": "u1"}}
TEMPLATE = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}


def revision(name: str, hash_: str, number: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {HASH_LABEL: hash_}},
            "revision": number}


class _Api:
    def __init__(self, conflict: bool = False) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.conflict = conflict

    async def patch(self, path: str, body: dict[str, Any], patch_type: str) -> dict[str, Any]:
        self.calls.append(("patch", path, body))
        return body

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", path, body))
        if self.conflict:
            raise already_exists("controllerrevisions", body["metadata"]["name"], "apps")
        return body


async def test_a_template_seen_before_becomes_the_newest_revision() -> None:
    api = _Api()
    owned = [revision("web-a", "a", 1), revision("web-b", "b", 2)]
    await ensure_revision(api, OWNER, "DaemonSet", owned, "web-a", "a",  # type: ignore[arg-type]
                          TEMPLATE)
    assert api.calls == [("patch", "/apis/apps/v1/namespaces/ns/controllerrevisions/web-a",
                          {"revision": 3})]
    api.calls.clear()  # the newest already: nothing to write
    await ensure_revision(api, OWNER, "DaemonSet", owned, "web-b", "b",  # type: ignore[arg-type]
                          TEMPLATE)
    assert api.calls == []


@pytest.mark.parametrize("conflict", [False, True])
async def test_a_new_template_gets_a_revision_with_the_next_number(conflict: bool) -> None:
    api = _Api(conflict)
    await ensure_revision(api, OWNER, "StatefulSet",  # type: ignore[arg-type]
                          [revision("web-a", "web-a", 4)], "web-c", "web-c", TEMPLATE)
    [(verb, path, body)] = api.calls
    assert (verb, path) == ("create", "/apis/apps/v1/namespaces/ns/controllerrevisions")
    assert body["metadata"]["name"] == "web-c"
    assert body["metadata"]["labels"] == {"app": "web", HASH_LABEL: "web-c"}
    assert body["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    assert body["revision"] == 5


async def test_another_error_goes_up() -> None:
    class Broken(_Api):
        async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            raise StatusError(500, "InternalError", "etcd is down")

    with pytest.raises(StatusError, match="etcd is down"):
        await ensure_revision(Broken(), OWNER, "DaemonSet", [], "web-a",  # type: ignore[arg-type]
                              "a", TEMPLATE)

"""The informer caches objects without their `metadata.managedFields` (as upstream's
scheduler and controller-manager informers trim them), through lists and watch events,
and its handlers see the trimmed objects; `keep_managed_fields=True` keeps them."""

from __future__ import annotations

from typing import Any, cast

from ephemera.client.api import ApiClient, WatchEvent
from ephemera.client.informer import Informer

MANAGED = [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
            "subresource": "status", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:phase": {}}}}]


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name, "resourceVersion": rv,
                         "managedFields": [dict(m) for m in MANAGED]},
            "status": {"phase": "Running"}}


def test_lists_and_watch_events_are_cached_without_managed_fields() -> None:
    informer = Informer(cast(ApiClient, None), "/api/v1/pods")
    seen: list[dict[str, Any]] = []
    informer.add_handler(on_add=seen.append, on_update=lambda old, new: seen.append(new))
    informer.replace([pod("p1", "5")], "5")
    informer.apply(WatchEvent("ADDED", pod("p2", "6")))
    informer.apply(WatchEvent("MODIFIED", pod("p1", "7")))
    cached = [informer.get("default/p1"), informer.get("default/p2")]
    for obj in [*cached, *seen]:
        assert obj is not None
        assert "managedFields" not in obj["metadata"]
        assert obj["status"] == {"phase": "Running"}  # the rest of the object as it came
    assert [o["metadata"]["resourceVersion"] for o in seen] == ["5", "6", "7"]


def test_an_informer_may_keep_them() -> None:
    informer = Informer(cast(ApiClient, None), "/api/v1/pods", keep_managed_fields=True)
    informer.replace([pod("p1", "5")], "5")
    informer.apply(WatchEvent("MODIFIED", pod("p1", "6")))
    cached = informer.get("default/p1")
    assert cached is not None and cached["metadata"]["managedFields"] == MANAGED

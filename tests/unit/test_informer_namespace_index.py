"""The informer's namespace index (upstream's NamespaceIndex): `list(namespace)` answers
from the index kept with the cache through lists and watch events, never a stale entry."""

from __future__ import annotations

from typing import Any, cast

from informer_fakes import pod

from ephemera.client.api import ApiClient, WatchEvent
from ephemera.client.informer import Informer


def names(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def test_list_by_namespace_follows_lists_and_watch_events() -> None:
    informer = Informer(cast(ApiClient, None), "/api/v1/pods")
    informer.replace([pod("a", "p1"), pod("a", "p2"), pod("b", "q1")], "5")
    assert names(informer.list("a")) == ["p1", "p2"]
    assert names(informer.list("b")) == ["q1"]
    assert informer.list("c") == []

    informer.apply(WatchEvent("ADDED", pod("c", "r1", "6")))
    informer.apply(WatchEvent("MODIFIED", pod("a", "p1", "7")))
    informer.apply(WatchEvent("DELETED", pod("b", "q1", "8")))
    assert names(informer.list("a")) == ["p1", "p2"]
    assert [o["metadata"]["resourceVersion"] for o in informer.list("a")
            if o["metadata"]["name"] == "p1"] == ["7"]
    assert informer.list("b") == []
    assert names(informer.list("c")) == ["r1"]

    # a relist drops what the new list lacks from the index too
    informer.replace([pod("c", "r1", "9")], "9")
    assert informer.list("a") == []
    assert names(informer.list("c")) == ["r1"]
    assert names(informer.list()) == ["r1"]


def test_cluster_scoped_objects_are_under_the_empty_namespace() -> None:
    informer = Informer(cast(ApiClient, None), "/api/v1/nodes")
    informer.replace([{"metadata": {"name": "n1", "resourceVersion": "1"}}], "1")
    assert names(informer.list("")) == ["n1"]

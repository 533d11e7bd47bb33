"""The garbage collector's pure parts: the finalizers a DELETE leaves
(`ephemera.api.deletion`), the graph's reactions to events and the decision for a
dependent once its owners are classified (`ephemera.controllers.garbagecollector.graph`)."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.api.deletion import gc_finalizers
from ephemera.controllers.garbagecollector.graph import Graph, Identity, OwnerRef, Plan, plan


@pytest.mark.parametrize(("finalizers", "orphan", "policy", "default", "expected"), [
    ([], None, None, "DeleteDependents", None),
    ([], None, "Background", "DeleteDependents", None),
    ([], None, "Foreground", "DeleteDependents", ["foregroundDeletion"]),
    ([], None, "Orphan", "DeleteDependents", ["orphan"]),
    ([], True, None, "DeleteDependents", ["orphan"]),
    ([], False, None, "OrphanDependents", None),
    ([], None, None, "OrphanDependents", ["orphan"]),
    (["a.io/x"], None, "Foreground", "DeleteDependents", ["a.io/x", "foregroundDeletion"]),
    # a second DELETE switches from one policy to the other
    (["orphan"], None, "Foreground", "DeleteDependents", ["foregroundDeletion"]),
    (["foregroundDeletion"], None, "Background", "DeleteDependents", []),
    # the finalizer already there overrides the kind's default
    (["foregroundDeletion"], None, None, "OrphanDependents", None),
    (["orphan"], None, None, "DeleteDependents", None),
    # Events take no part
    ([], None, "Orphan", "Unsupported", None),
    (["orphan"], None, "Foreground", "Unsupported", []),
])
def test_gc_finalizers(finalizers: list[str], orphan: bool | None, policy: str | None,
                       default: Any, expected: list[str] | None) -> None:
    assert gc_finalizers(finalizers, orphan_dependents=orphan, policy=policy,
                         default=default) == expected


def ident(name: str, uid: str, namespace: str = "ns", kind: str = "ConfigMap") -> Identity:
    return Identity("v1", kind, name, uid, namespace)


def md(uid: str, *owners: tuple[str, str, bool], deleting: list[str] | None = None
       ) -> dict[str, Any]:
    out: dict[str, Any] = {"uid": uid, "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner_uid,
         "blockOwnerDeletion": block} for name, owner_uid, block in owners]}
    if deleting is not None:
        out["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        out["finalizers"] = deleting
    return out


def uids(nodes: list[Any]) -> list[str]:
    return [n.identity.uid for n in nodes]


def test_an_owner_not_seen_yet_is_a_virtual_node_to_verify() -> None:
    g = Graph()
    changes = g.observe("add", ident("dep", "d1"), md("d1", ("owner", "o1", False)))
    assert uids(changes.attempt_to_delete) == ["o1"]
    owner = g.get("o1")
    assert owner is not None and owner.virtual
    assert owner.identity == ident("owner", "o1")
    # seen later: it is observed, nothing to verify
    changes = g.observe("add", ident("owner", "o1"), md("o1"))
    assert not changes.attempt_to_delete and not owner.virtual


def test_a_deleted_owner_queues_its_dependents() -> None:
    g = Graph()
    g.observe("add", ident("owner", "o1"), md("o1"))
    g.observe("add", ident("dep", "d1"), md("d1", ("owner", "o1", False)))
    g.observe("add", ident("free", "f1"), md("f1"))
    changes = g.observe("delete", ident("owner", "o1"), md("o1"))
    assert uids(changes.attempt_to_delete) == ["d1"]
    assert g.get("o1") is None


def test_foreground_deletion_queues_every_dependent_and_the_owner() -> None:
    g = Graph()
    g.observe("add", ident("owner", "o1"), md("o1"))
    g.observe("add", ident("a", "a1"), md("a1", ("owner", "o1", True)))
    g.observe("add", ident("b", "b1"), md("b1", ("owner", "o1", False)))
    changes = g.observe("update", ident("owner", "o1"),
                        md("o1", deleting=["foregroundDeletion"]), md("o1"))
    assert sorted(uids(changes.attempt_to_delete)) == ["a1", "b1", "o1"]
    owner = g.get("o1")
    assert owner is not None and owner.deleting_dependents
    assert uids(owner.blocking_dependents()) == ["a1"]
    # the blocking dependent goes: the owner is looked at again
    changes = g.observe("delete", ident("a", "a1"), md("a1", ("owner", "o1", True)))
    assert uids(changes.attempt_to_delete) == ["o1"]
    # a dependent that stops blocking wakes the owner up too
    g.observe("add", ident("c", "c1"), md("c1", ("owner", "o1", True)))
    changes = g.observe("update", ident("c", "c1"), md("c1", ("owner", "o1", False)),
                        md("c1", ("owner", "o1", True)))
    assert uids(changes.attempt_to_delete) == ["o1"]


def test_orphan_deletion_queues_the_owner_for_orphaning_once() -> None:
    g = Graph()
    g.observe("add", ident("owner", "o1"), md("o1"))
    changes = g.observe("update", ident("owner", "o1"), md("o1", deleting=["orphan"]),
                        md("o1"))
    assert uids(changes.attempt_to_orphan) == ["o1"]
    again = g.observe("update", ident("owner", "o1"), md("o1", deleting=["orphan"]),
                      md("o1", deleting=["orphan"]))
    assert not again.attempt_to_orphan


def test_an_owner_in_another_namespace_is_reported_and_the_dependent_verified() -> None:
    g = Graph()
    g.observe("add", ident("owner", "o1", namespace="a"), md("o1"))
    changes = g.observe("add", ident("dep", "d1", namespace="b"),
                        md("d1", ("owner", "o1", False)))
    assert uids(changes.attempt_to_delete) == ["d1"]
    [(dep, owner)] = changes.invalid_namespace
    assert dep.identity.uid == "d1" and owner.namespace == "a"


def test_a_virtual_delete_with_other_coordinates_keeps_an_observed_node() -> None:
    g = Graph()
    g.observe("add", ident("owner", "o1"), md("o1"))
    changes = g.observe("delete", ident("other-name", "o1"), {}, virtual=True)
    assert g.get("o1") is not None and not changes.attempt_to_delete


REF = OwnerRef("v1", "ConfigMap", "o", "u1")
REF2 = OwnerRef("v1", "ConfigMap", "p", "u2")


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"solid": [REF]}, Plan("none")),
    ({"solid": [REF], "dangling": [REF2]}, Plan("remove_refs", ("u2",))),
    ({"solid": [REF], "waiting": [REF2]}, Plan("remove_refs", ("u2",))),
    ({"dangling": [REF]}, Plan("delete", policy="Background")),
    ({"dangling": [REF], "finalizers": ["orphan"]}, Plan("delete", policy="Orphan")),
    ({"dangling": [REF], "finalizers": ["foregroundDeletion"]},
     Plan("delete", policy="Foreground")),
    # owner waiting in the foreground and dependents of its own: foreground too
    ({"waiting": [REF], "has_dependents": True}, Plan("delete", policy="Foreground")),
    ({"waiting": [REF], "has_dependents": True, "dependent_deleting_dependents": True},
     Plan("delete", policy="Foreground", unblock=True)),
    ({"waiting": [REF]}, Plan("delete", policy="Background")),
])
def test_plan(kwargs: dict[str, Any], expected: Plan) -> None:
    args: dict[str, Any] = {"solid": [], "dangling": [], "waiting": [], "finalizers": [],
                            "has_dependents": False, "dependent_deleting_dependents": False}
    args.update(kwargs)
    assert plan(**args) == expected


def test_a_dependent_seen_after_its_owner_began_foreground_deletion_is_queued() -> None:
    g = Graph()
    g.observe("add", ident("owner", "o1"), md("o1", deleting=["foregroundDeletion"]))
    changes = g.observe("add", ident("late", "l1"), md("l1", ("owner", "o1", False)))
    assert uids(changes.attempt_to_delete) == ["l1"]

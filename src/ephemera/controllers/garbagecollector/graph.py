"""The garbage collector's graph of owners and dependents, as upstream's `GraphBuilder`
keeps it, and its pure decisions (`classify`, `plan`); no I/O.

Every object seen through an informer is a node keyed by its UID, with the owner
references it carries; an owner referenced before (or without) being seen is a *virtual*
node, which the collector checks against the apiserver (`attempt_to_delete`). `Graph.observe`
takes one informer event (or a virtual delete, when the apiserver said an owner is gone) and
returns what the collector must look at next: nodes to attempt to delete (dependents of a
deleted owner, owners waiting for their dependents, virtual owners to verify) and owners to
orphan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ephemera.api.deletion import (
    BACKGROUND,
    FOREGROUND,
    FOREGROUND_FINALIZER,
    ORPHAN,
    ORPHAN_FINALIZER,
)

__all__ = ["Changes", "EventType", "Graph", "Identity", "Node", "OwnerRef", "Plan",
           "owner_refs", "plan"]


@dataclass(frozen=True)
class OwnerRef:
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False
    block_owner_deletion: bool = False

    def coordinates(self) -> tuple[str, str, str, str]:
        return (self.api_version, self.kind, self.name, self.uid)


@dataclass(frozen=True)
class Identity:
    """An object's coordinates (upstream's `objectReference`); `namespace` is "" for a
    cluster-scoped object."""

    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str = ""

    def __str__(self) -> str:
        return (f"[{self.api_version}/{self.kind}, namespace: {self.namespace}, "
                f"name: {self.name}, uid: {self.uid}]")

    def coordinates(self) -> tuple[str, str, str, str]:
        return (self.api_version, self.kind, self.name, self.uid)

    @staticmethod
    def of_owner(ref: OwnerRef, namespace: str) -> Identity:
        return Identity(ref.api_version, ref.kind, ref.name, ref.uid, namespace)


def owner_refs(metadata: Mapping[str, Any]) -> list[OwnerRef]:
    refs: list[OwnerRef] = []
    for ref in metadata.get("ownerReferences") or []:
        if not isinstance(ref, dict) or not ref.get("uid"):
            continue
        refs.append(OwnerRef(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""),
                             str(ref.get("name") or ""), str(ref["uid"]),
                             bool(ref.get("controller")), bool(ref.get("blockOwnerDeletion"))))
    return refs


def _deleting_with(metadata: Mapping[str, Any] | None, finalizer: str) -> bool:
    return bool(metadata and metadata.get("deletionTimestamp")
                and finalizer in (metadata.get("finalizers") or []))


@dataclass(eq=False)
class Node:
    identity: Identity
    owners: list[OwnerRef] = field(default_factory=list)
    dependents: dict[str, Node] = field(default_factory=dict)
    virtual: bool = False
    being_deleted: bool = False
    deleting_dependents: bool = False

    def blocking_dependents(self) -> list[Node]:
        """The dependents whose reference to this node has blockOwnerDeletion."""
        return [dep for dep in self.dependents.values()
                if any(ref.uid == self.identity.uid and ref.block_owner_deletion
                       for ref in dep.owners)]


@dataclass
class Changes:
    """What the collector must do after an event."""

    attempt_to_delete: list[Node] = field(default_factory=list)
    attempt_to_orphan: list[Node] = field(default_factory=list)
    # (dependent, owner identity): a namespaced dependent that names an owner of another
    # namespace; upstream reports it as an `OwnerRefInvalidNamespace` warning event.
    invalid_namespace: list[tuple[Node, Identity]] = field(default_factory=list)


EventType = Literal["add", "update", "delete"]


class Graph:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def get(self, uid: str) -> Node | None:
        return self.nodes.get(uid)

    def observe(self, event: EventType, identity: Identity, metadata: Mapping[str, Any],
                old: Mapping[str, Any] | None = None, *, virtual: bool = False) -> Changes:
        """Take one event of the object `identity` whose metadata is `metadata` (`old`: its
        metadata before an update)."""
        changes = Changes()
        existing = self.nodes.get(identity.uid)
        if event == "delete":
            if existing is not None:
                self._remove(existing, identity, virtual, changes)
            return changes
        if existing is not None and existing.virtual:
            self._observed(existing, identity, changes)
        refs = owner_refs(metadata)
        if existing is None:
            node = Node(identity, refs, being_deleted=bool(metadata.get("deletionTimestamp")))
            self.nodes[identity.uid] = node
            self._add_to_owners(node, refs, changes)
            self._transitions(None, metadata, node, changes)
            return changes
        added, removed, changed = _ref_diffs(existing.owners, refs)
        if added or removed or changed:
            for ref in [*removed, *changed]:
                owner = self.nodes.get(ref.uid)
                if owner is not None and owner.deleting_dependents and ref.block_owner_deletion:
                    changes.attempt_to_delete.append(owner)
            existing.owners = refs
            self._add_to_owners(existing, added, changes)
            for ref in removed:
                owner = self.nodes.get(ref.uid)
                if owner is not None:
                    owner.dependents.pop(existing.identity.uid, None)
        if metadata.get("deletionTimestamp"):
            existing.being_deleted = True
        self._transitions(old, metadata, existing, changes)
        return changes

    def _observed(self, node: Node, identity: Identity, changes: Changes) -> None:
        """A virtual node seen through an informer: from now on its identity is known."""
        node.virtual = False
        if node.identity == identity:
            return
        for dep in node.dependents.values():
            ref = next((r for r in dep.owners if r.uid == identity.uid), None)
            matches = ref is not None and ref.coordinates() == identity.coordinates()
            if identity.namespace and dep.identity.namespace != identity.namespace:
                changes.invalid_namespace.append((dep, identity))
                matches = False
            if not matches:
                changes.attempt_to_delete.append(dep)
        node.identity = identity

    def _add_to_owners(self, node: Node, refs: Sequence[OwnerRef], changes: Changes) -> None:
        suspicious = False
        for ref in refs:
            owner = self.nodes.get(ref.uid)
            if owner is None:
                owner = Node(Identity.of_owner(ref, node.identity.namespace), virtual=True)
                self.nodes[ref.uid] = owner
                owner.dependents[node.identity.uid] = node
                changes.attempt_to_delete.append(owner)  # does it exist?
                continue
            owner.dependents[node.identity.uid] = node
            if owner.deleting_dependents:
                # seen only after its owner began deleting in the foreground (upstream
                # would wait for the owner to go): delete it now, as the owner asked
                changes.attempt_to_delete.append(node)
            owner_namespace = owner.identity.namespace
            if owner_namespace and owner_namespace != node.identity.namespace:
                if not owner.virtual:
                    changes.invalid_namespace.append((node, owner.identity))
                suspicious = True
            elif ref.coordinates() != owner.identity.coordinates() or (
                    not owner_namespace and owner.virtual
                    and owner.identity.namespace != node.identity.namespace):
                suspicious = True
        if suspicious:
            changes.attempt_to_delete.append(node)

    def _transitions(self, old: Mapping[str, Any] | None, new: Mapping[str, Any], node: Node,
                     changes: Changes) -> None:
        if _deleting_with(new, ORPHAN_FINALIZER) and not _deleting_with(old, ORPHAN_FINALIZER):
            changes.attempt_to_orphan.append(node)
            return
        if _deleting_with(new, FOREGROUND_FINALIZER) and \
                not _deleting_with(old, FOREGROUND_FINALIZER):
            node.deleting_dependents = True
            node.being_deleted = True
            changes.attempt_to_delete.extend(node.dependents.values())
            changes.attempt_to_delete.append(node)
        elif not _deleting_with(new, FOREGROUND_FINALIZER):
            node.deleting_dependents = False

    def _remove(self, node: Node, identity: Identity, virtual: bool, changes: Changes) -> None:
        if virtual and not node.virtual and node.identity != identity:
            return  # the apiserver lacks other coordinates than the ones observed
        del self.nodes[node.identity.uid]
        for ref in node.owners:
            owner = self.nodes.get(ref.uid)
            if owner is None:
                continue
            owner.dependents.pop(node.identity.uid, None)
            if owner.deleting_dependents:
                changes.attempt_to_delete.append(owner)
        changes.attempt_to_delete.extend(node.dependents.values())


def _ref_diffs(old: Sequence[OwnerRef], new: Sequence[OwnerRef]
               ) -> tuple[list[OwnerRef], list[OwnerRef], list[OwnerRef]]:
    """(added, removed, changed: the old references whose new one differs)."""
    old_by_uid = {r.uid: r for r in old}
    new_by_uid = {r.uid: r for r in new}
    added = [r for uid, r in new_by_uid.items() if uid not in old_by_uid]
    removed = [r for uid, r in old_by_uid.items() if uid not in new_by_uid]
    changed = [r for uid, r in old_by_uid.items()
               if uid in new_by_uid and new_by_uid[uid] != r]
    return added, removed, changed


@dataclass(frozen=True)
class Plan:
    """What `attempt_to_delete` does to a dependent: nothing, drop some owner references
    (`remove_refs`), or delete it with `policy` (after making its own references
    non-blocking when `unblock`)."""

    action: Literal["none", "remove_refs", "delete"]
    remove_refs: tuple[str, ...] = ()
    policy: str = ""
    unblock: bool = False


def plan(*, solid: Sequence[OwnerRef], dangling: Sequence[OwnerRef],
         waiting: Sequence[OwnerRef], finalizers: Sequence[str], has_dependents: bool,
         dependent_deleting_dependents: bool) -> Plan:
    """upstream's `attemptToDeleteItem` once the owners are classified: `solid` (there, not
    deleting their dependents), `dangling` (gone, or another object now has the name),
    `waiting` (being deleted in the foreground)."""
    if solid:
        if not dangling and not waiting:
            return Plan("none")
        # Drop the dangling references, and the ones to owners waiting for their
        # dependents, which would wait forever otherwise.
        return Plan("remove_refs", tuple(r.uid for r in [*dangling, *waiting]))
    if waiting and has_dependents:
        # Delete in the foreground so the waiting owners go after this one's dependents;
        # a dependent that itself waits could make a cycle, so stop blocking first.
        return Plan("delete", policy=FOREGROUND, unblock=dependent_deleting_dependents)
    if ORPHAN_FINALIZER in finalizers:
        policy = ORPHAN
    elif FOREGROUND_FINALIZER in finalizers:
        policy = FOREGROUND
    else:
        policy = BACKGROUND
    return Plan("delete", policy=policy)

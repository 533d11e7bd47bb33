"""ControllerRevisions as the DaemonSet and StatefulSet controllers keep their templates'
history (upstream's `controller_history`): a revision is made for a template not seen
before, a template seen before (a rollback) becomes the newest revision again, and the old
revisions no pod uses are deleted beyond `spec.revisionHistoryLimit`, oldest first, by
upstream's two rules (`truncateHistory` for StatefulSets, `cleanupHistory` for
DaemonSets)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, resource_path
from ephemera.controllers.controllerref import controller_of, new_controller_ref
from ephemera.controllers.objects import int_or_zero
from ephemera.controllers.objects import metadata as _md

__all__ = ["HASH_LABEL", "bump_revision", "daemonset_history_to_delete", "delete_revisions",
           "ensure_revision", "owned_revisions", "revision_body", "revision_number",
           "statefulset_history_to_delete"]

HASH_LABEL = "controller-revision-hash"

Obj = dict[str, Any]


def revision_number(revision: Mapping[str, Any]) -> int:
    return int_or_zero(revision.get("revision"))


def _path(revision: Mapping[str, Any]) -> str:
    return resource_path("controllerrevisions", str(_md(revision).get("namespace")),
                         str(_md(revision).get("name")), group="apps")


def owned_revisions(revisions: Iterable[Obj], owner: Mapping[str, Any]) -> list[Obj]:
    """The revisions in the owner's namespace whose controller is the owner."""
    md = _md(owner)
    return [r for r in revisions if _md(r).get("namespace") == md.get("namespace")
            and (controller_of(r) or {}).get("uid") == md.get("uid")]


def revision_body(owner: Mapping[str, Any], kind: str, name: str, hash_: str,
                  template: Mapping[str, Any], revision: int) -> Obj:
    """The ControllerRevision `name` of `owner`'s `template` (labelled with its hash)."""
    labels = (template.get("metadata") or {}).get("labels") or {}
    return {"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": name, "namespace": _md(owner).get("namespace"),
                         "labels": {**labels, HASH_LABEL: hash_},
                         "ownerReferences": [new_controller_ref(owner, "apps/v1", kind)]},
            "data": {"spec": {"template": {**template, "$patch": "replace"}}},
            "revision": revision}


async def bump_revision(api: ApiClient, history: Mapping[str, Any], next_revision: int
                        ) -> None:
    """A template seen before (a rollback) becomes the newest revision again, as upstream's
    history does: its ControllerRevision takes the next number."""
    if revision_number(history) == next_revision - 1:
        return
    try:
        await api.patch(_path(history), {"revision": next_revision}, patch_type="merge")
    except StatusError as err:
        if err.code != 404:
            raise


async def ensure_revision(api: ApiClient, owner: Mapping[str, Any], kind: str,
                          owned: list[Obj], name: str, hash_: str,
                          template: Mapping[str, Any]) -> None:
    """The revision of `owner`'s current `template` (hash label `hash_`) kept as the newest:
    one of `owned` with that hash takes the next number (`bump_revision`), else
    ControllerRevision `name` is created with it (one made meanwhile is no error)."""
    next_revision = max((revision_number(r) for r in owned), default=0) + 1
    existing = [r for r in owned if _hash(r) == hash_]
    for revision in existing:
        await bump_revision(api, revision, next_revision)
    if existing:
        return
    body = revision_body(owner, kind, name, hash_, template, next_revision)
    try:
        await api.create(resource_path("controllerrevisions",
                                       str(_md(owner).get("namespace")), group="apps"), body)
    except StatusError as err:
        if err.code != 409:
            raise


def _oldest_first(revisions: Iterable[Obj]) -> list[Obj]:
    return sorted(revisions, key=lambda r: (revision_number(r), str(_md(r).get("name"))))


def statefulset_history_to_delete(revisions: Iterable[Obj], live: set[str], limit: int
                                  ) -> list[Obj]:
    """`truncateHistory`: of the revisions not `live` (by name: the current and update
    revisions and every pod's), all but the newest `limit`."""
    history = _oldest_first(r for r in revisions if str(_md(r).get("name")) not in live)
    return history[:max(0, len(history) - limit)]


def daemonset_history_to_delete(revisions: Iterable[Obj], current: str, live: set[str],
                                limit: int) -> list[Obj]:
    """`cleanupHistory`: the old revisions (all but the `current` hash's) beyond `limit`,
    oldest first, skipping those whose hash a pod still has."""
    old = _oldest_first(r for r in revisions if _hash(r) != current)
    to_kill = len(old) - limit
    doomed: list[Obj] = []
    for r in old:
        if to_kill <= 0:
            break
        if _hash(r) in live:
            continue
        doomed.append(r)
        to_kill -= 1
    return doomed


def _hash(revision: Mapping[str, Any]) -> str:
    return str((_md(revision).get("labels") or {}).get(HASH_LABEL) or "")


async def delete_revisions(api: ApiClient, revisions: Iterable[Mapping[str, Any]]) -> None:
    """Delete each revision (one already gone is no error)."""
    for revision in revisions:
        try:
            await api.delete(_path(revision))
        except StatusError as err:
            if err.code != 404:
                raise

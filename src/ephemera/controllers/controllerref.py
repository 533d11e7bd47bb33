"""Controller references and upstream's controller ref manager
(`pkg/controller/controller_ref_manager.go`), for any controller that owns objects it
selects by labels (the ReplicaSet controller's pods, the Deployment controller's
ReplicaSets; a Job controller's pods alike).

`ControllerRefManager.claim(objects)` returns the objects the owner should manage:
those whose controller reference names it and that still match (one that no longer matches
is released: its reference removed), and orphans that match, adopted (a controller
reference added), unless the owner is being deleted, the orphan is, or a fresh read of the
owner shows it gone or deleted (`RecheckDeletionTimestamp`). Adoption and release are
strategic merge patches of `metadata.ownerReferences` (merge key `uid`) carrying the
object's uid, so they fail on an object recreated meanwhile; a 404 is skipped. A manager
with `finalizers` (the Job controller's tracking finalizer, upstream's
`NewPodControllerRefManagerWithFinalizers`) adds them on adoption and removes them on
release in the same patch."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient
from ephemera.controllers.objects import metadata as _md

Obj = dict[str, Any]


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The owner reference with `controller: true`, if any (`GetControllerOf`)."""
    for ref in _md(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def controller_uid(obj: Mapping[str, Any], kind: str, group: str) -> str | None:
    """The uid of the object's controller when that is a `kind` of API group `group` (its
    reference's apiVersion `group/...`), else None."""
    ref = controller_of(obj)
    if ref is None or ref.get("kind") != kind or \
            not str(ref.get("apiVersion", "")).startswith(f"{group}/"):
        return None
    return str(ref.get("uid"))


def new_controller_ref(owner: Mapping[str, Any], api_version: str, kind: str
                       ) -> dict[str, Any]:
    """`metav1.NewControllerRef`: controller and blockOwnerDeletion true."""
    md = _md(owner)
    return {"apiVersion": api_version, "kind": kind, "name": md.get("name"),
            "uid": md.get("uid"), "controller": True, "blockOwnerDeletion": True}


def adopt_patch(owner_ref: Mapping[str, Any], uid: str, finalizers: Sequence[str] = ()
                ) -> dict[str, Any]:
    md: dict[str, Any] = {"ownerReferences": [dict(owner_ref)], "uid": uid}
    if finalizers:
        md["finalizers"] = list(finalizers)
    return {"metadata": md}


def release_patch(owner_uid: str, uid: str, finalizers: Sequence[str] = ()) -> dict[str, Any]:
    md: dict[str, Any] = {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
                          "uid": uid}
    if finalizers:
        md["$deleteFromPrimitiveList/finalizers"] = list(finalizers)
    return {"metadata": md}


class AdoptionRefused(Exception):
    """The owner may not adopt: it is gone, replaced or being deleted."""


class ControllerRefManager:
    """Claims the objects at `path_of(obj)` for `owner` (of `api_version`/`kind`);
    `matches(obj)` says whether the owner's selector selects an object."""

    def __init__(self, api: ApiClient, owner: Mapping[str, Any], api_version: str, kind: str,
                 matches: Callable[[Mapping[str, Any]], bool],
                 path_of: Callable[[Mapping[str, Any]], str],
                 fresh_owner: Callable[[], Awaitable[Mapping[str, Any]]],
                 finalizers: Sequence[str] = ()) -> None:
        self.api = api
        self.owner = owner
        self.ref = new_controller_ref(owner, api_version, kind)
        self.matches = matches
        self.path_of = path_of
        self._fresh_owner = fresh_owner
        self.finalizers = tuple(finalizers)
        self._adoption_checked: AdoptionRefused | bool = False

    @property
    def _owner_uid(self) -> str:
        return str(_md(self.owner).get("uid") or "")

    async def _can_adopt(self) -> None:
        """`RecheckDeletionTimestamp`, asked once per manager."""
        if isinstance(self._adoption_checked, AdoptionRefused):
            raise self._adoption_checked
        if self._adoption_checked:
            return
        md = _md(self.owner)
        try:
            fresh = await self._fresh_owner()
        except StatusError as err:
            refused = AdoptionRefused(f"can't recheck DeletionTimestamp: {err.message}")
            self._adoption_checked = refused
            raise refused from None
        fresh_md = _md(fresh)
        if fresh_md.get("uid") != md.get("uid"):
            refused = AdoptionRefused(f"original {md.get('namespace')}/{md.get('name')} is "
                                      f"gone: got uid {fresh_md.get('uid')}, wanted "
                                      f"{md.get('uid')}")
        elif fresh_md.get("deletionTimestamp"):
            refused = AdoptionRefused(f"{md.get('namespace')}/{md.get('name')} has just been "
                                      f"deleted at {fresh_md.get('deletionTimestamp')}")
        else:
            self._adoption_checked = True
            return
        self._adoption_checked = refused
        raise refused

    async def claim(self, objects: Iterable[Obj]) -> list[Obj]:
        """The objects `owner` manages, adopting and releasing as upstream's ClaimObject;
        the first error (other than a 404 or a refused adoption) is raised after the
        others were tried."""
        claimed: list[Obj] = []
        first_error: Exception | None = None
        owner_deleting = bool(_md(self.owner).get("deletionTimestamp"))
        for obj in objects:
            ref = controller_of(obj)
            md = _md(obj)
            try:
                if ref is not None:
                    if ref.get("uid") != self._owner_uid:
                        continue
                    if self.matches(obj):
                        claimed.append(obj)
                    elif not owner_deleting:
                        await self._patch(obj, release_patch(
                            self._owner_uid, str(md.get("uid") or ""), self.finalizers))
                    continue
                if owner_deleting or not self.matches(obj) or md.get("deletionTimestamp"):
                    continue
                if md.get("namespace") != _md(self.owner).get("namespace"):
                    continue
                await self._can_adopt()
                adopted = await self._patch(obj, adopt_patch(self.ref, str(md.get("uid") or ""),
                                                             self.finalizers))
                if adopted is not None:
                    claimed.append(adopted)
            except AdoptionRefused:
                continue
            except StatusError as err:
                if first_error is None:
                    first_error = err
        if first_error is not None:
            raise first_error
        return claimed

    async def _patch(self, obj: Mapping[str, Any], body: dict[str, Any]) -> Obj | None:
        try:
            return await self.api.patch(self.path_of(obj), body, patch_type="strategic")
        except StatusError as err:
            if err.code == 404:
                return None
            raise

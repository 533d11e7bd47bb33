"""ControllerRevisions as the DaemonSet and StatefulSet controllers keep their templates'
history (upstream's `controller_history`): a template seen before becomes the newest
revision again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient, resource_path

__all__ = ["bump_revision"]


def _md(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


async def bump_revision(api: ApiClient, history: Mapping[str, Any], next_revision: int
                         ) -> None:
    """A template seen before (a rollback) becomes the newest revision again, as upstream's
    history does: its ControllerRevision takes the next number."""
    if int(history.get("revision") or 0) == next_revision - 1:
        return
    path = resource_path("controllerrevisions", str(_md(history).get("namespace")),
                         str(_md(history).get("name")), group="apps")
    try:
        await api.patch(path, {"revision": next_revision}, patch_type="merge")
    except StatusError as err:
        if err.code != 404:
            raise

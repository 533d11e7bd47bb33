"""Reading the `status.conditions` list every kind shares (`meta.FindStatusCondition`,
`IsStatusConditionTrue`): one lookup by type for Jobs, Deployments, CRDs and the rest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["find", "is_true"]


def find(status: Any, type_: str) -> dict[str, Any] | None:
    """The condition of `type_` in a status mapping's `conditions`; None when there is none
    (or the status is not a mapping)."""
    if not isinstance(status, Mapping):
        return None
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == type_:
            return condition
    return None


def is_true(status: Any, type_: str) -> bool:
    """Whether the status has condition `type_` with status `True`."""
    condition = find(status, type_)
    return condition is not None and condition.get("status") == "True"

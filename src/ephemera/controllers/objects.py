"""The parts of an API object every controller reads, read one way: its metadata, its
work-queue key `namespace/name`, its labels as strings, and an integer field (0 when unset
or not an integer, as a Go int field's zero value)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["int_or_zero", "labels", "metadata", "queue_key"]


def metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def queue_key(obj: Mapping[str, Any]) -> str:
    """`namespace/name` (a cluster-scoped object's namespace is empty)."""
    md = metadata(obj)
    return f"{md.get('namespace') or ''}/{md.get('name') or ''}"


def labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (metadata(obj).get("labels") or {}).items()}


def int_or_zero(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0

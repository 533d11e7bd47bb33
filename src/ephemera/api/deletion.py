"""What a DELETE asks of the garbage collector: the `orphan` and `foregroundDeletion`
finalizers an object gets from its DeleteOptions (`propagationPolicy`, the legacy
`orphanDependents`), its existing finalizers and its kind's default policy, as upstream's
generic registry computes them (`deletionFinalizersForGarbageCollection`,
`shouldOrphanDependents`, `shouldDeleteDependents`). Pure; the registry applies the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

__all__ = [
    "BACKGROUND",
    "FOREGROUND",
    "FOREGROUND_FINALIZER",
    "ORPHAN",
    "ORPHAN_FINALIZER",
    "POLICIES",
    "GCPolicy",
    "gc_finalizers",
]

ORPHAN_FINALIZER = "orphan"  # metav1.FinalizerOrphanDependents
FOREGROUND_FINALIZER = "foregroundDeletion"  # metav1.FinalizerDeleteDependents

FOREGROUND, BACKGROUND, ORPHAN = "Foreground", "Background", "Orphan"
POLICIES = (FOREGROUND, BACKGROUND, ORPHAN)

# A kind's default (upstream's rest.GarbageCollectionPolicy): dependents are deleted in the
# background, orphaned (batch/v1 Jobs), or the kind takes no part (Events).
GCPolicy = Literal["DeleteDependents", "OrphanDependents", "Unsupported"]


def _should_orphan(finalizers: Sequence[str], orphan_dependents: bool | None,
                   policy: str | None, default: GCPolicy) -> bool:
    if default == "Unsupported":
        return False
    if orphan_dependents is not None:
        return orphan_dependents
    if policy == ORPHAN:
        return True
    if policy in (BACKGROUND, FOREGROUND):
        return False
    for name in finalizers:  # a finalizer already there overrides the kind's default
        if name == ORPHAN_FINALIZER:
            return True
        if name == FOREGROUND_FINALIZER:
            return False
    return default == "OrphanDependents"


def _should_delete_dependents(finalizers: Sequence[str], orphan_dependents: bool | None,
                              policy: str | None, default: GCPolicy) -> bool:
    if default == "Unsupported" or orphan_dependents is not None:
        return False
    if policy is not None:
        return policy == FOREGROUND
    return FOREGROUND_FINALIZER in finalizers


def gc_finalizers(finalizers: Sequence[str], *, orphan_dependents: bool | None,
                  policy: str | None, default: GCPolicy) -> list[str] | None:
    """The finalizers a DELETE leaves on the object, or None when they stay as they are.

    Both garbage-collector finalizers are taken off and put back as the options (then the
    finalizers already there, then the kind's default) say: `orphan` to orphan the
    dependents, `foregroundDeletion` to delete them before the owner."""
    kept = [f for f in finalizers if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)]
    if _should_orphan(finalizers, orphan_dependents, policy, default):
        kept.append(ORPHAN_FINALIZER)
    if _should_delete_dependents(finalizers, orphan_dependents, policy, default):
        kept.append(FOREGROUND_FINALIZER)
    if set(kept) == set(finalizers):
        return None
    return kept

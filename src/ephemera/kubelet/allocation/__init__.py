"""The kubelet's allocation stage (KEP-5972 / KEP-6395 "Two-Stage Kubelet Lifecycle"): which
version of each pod's spec the node has admitted (`manager.py`) and its on-disk checkpoint
(`checkpoint.py`)."""

from ephemera.kubelet.allocation.checkpoint import (
    AllocationCheckpoint,
    CheckpointCorruptedError,
)
from ephemera.kubelet.allocation.manager import (
    FAILED_ALLOCATION,
    UNALLOCATED_MESSAGE,
    UNALLOCATED_REASON,
    AllocationManager,
    AllocationResult,
    allocated_view,
)

__all__ = [
    "FAILED_ALLOCATION",
    "UNALLOCATED_MESSAGE",
    "UNALLOCATED_REASON",
    "AllocationCheckpoint",
    "AllocationManager",
    "AllocationResult",
    "CheckpointCorruptedError",
    "allocated_view",
]

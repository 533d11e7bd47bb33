"""The kubelet's allocation stage (KEP-5972 / KEP-6395 "Two-Stage Kubelet Lifecycle"): which
version of each pod's spec the node has admitted (`manager.py`), its on-disk checkpoint
(`checkpoint.py`, written by the process of `slotwriter.py`) and what a pod needs of the node
to be admitted (`fit.py`)."""

from ephemera.kubelet.allocation.checkpoint import (
    AllocationCheckpoint,
    CheckpointCorruptedError,
)
from ephemera.kubelet.allocation.fit import Shortage, insufficient, node_need
from ephemera.kubelet.allocation.manager import (
    ADMITTED,
    DEFERRED,
    ERROR,
    FAILED_ALLOCATION,
    UNALLOCATED_MESSAGE,
    UNALLOCATED_REASON,
    AllocationManager,
    AllocationResult,
    allocated_view,
    describe_change,
)

__all__ = [
    "ADMITTED",
    "DEFERRED",
    "ERROR",
    "FAILED_ALLOCATION",
    "UNALLOCATED_MESSAGE",
    "UNALLOCATED_REASON",
    "AllocationCheckpoint",
    "AllocationManager",
    "AllocationResult",
    "CheckpointCorruptedError",
    "Shortage",
    "allocated_view",
    "describe_change",
    "insufficient",
    "node_need",
]

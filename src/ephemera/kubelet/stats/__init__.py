"""Local ephemeral storage accounting for the kubelet: the stats provider (`provider.py`),
the accounting backends (`accounting.py`: the directory walk of `du.py`, the per-pod loop
images of `loopimage.py`) and the Summary API document (`summary.py`)."""

from ephemera.kubelet.stats.accounting import (
    ACCOUNTING_MODES,
    LoopImageAccounting,
    StorageAccounting,
    WalkAccounting,
    make_accounting,
)
from ephemera.kubelet.stats.du import DirectoryWalk, DiskUsage, DuBackend, disk_usage
from ephemera.kubelet.stats.provider import (
    ContainerPaths,
    ContainerStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodPaths,
    PodStats,
    StatsProvider,
    Summary,
    UsageBackend,
    VolumePaths,
    VolumeStats,
    pod_paths,
)
from ephemera.kubelet.stats.summary import summary_json

__all__ = [
    "ACCOUNTING_MODES",
    "ContainerPaths",
    "ContainerStats",
    "DirectoryWalk",
    "DiskUsage",
    "DuBackend",
    "FsStats",
    "LoopImageAccounting",
    "MemoryStats",
    "NodeStats",
    "PodPaths",
    "PodStats",
    "StatsProvider",
    "StorageAccounting",
    "Summary",
    "UsageBackend",
    "VolumePaths",
    "VolumeStats",
    "WalkAccounting",
    "disk_usage",
    "make_accounting",
    "pod_paths",
    "summary_json",
]

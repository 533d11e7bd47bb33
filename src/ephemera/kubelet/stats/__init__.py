"""Local ephemeral storage accounting for the kubelet: the stats provider (`provider.py`),
the directory-walk backend (`du.py`) and the Summary API document (`summary.py`)."""

from ephemera.kubelet.stats.du import DirectoryWalk, DiskUsage, DuBackend, disk_usage
from ephemera.kubelet.stats.provider import (
    ContainerPaths,
    ContainerStats,
    FsStats,
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
    "ContainerPaths",
    "ContainerStats",
    "DirectoryWalk",
    "DiskUsage",
    "DuBackend",
    "FsStats",
    "NodeStats",
    "PodPaths",
    "PodStats",
    "StatsProvider",
    "Summary",
    "UsageBackend",
    "VolumePaths",
    "VolumeStats",
    "disk_usage",
    "pod_paths",
    "summary_json",
]

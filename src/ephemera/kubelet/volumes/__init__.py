"""The kubelet's volume manager and its node-local volume plugins.

- `manager`: `VolumeManager` (desired state from the admitted pods, actual state, the
  reconciler; per-volume state so volumes come and go on running pods), `VolumeMountTimeout`
  (upstream's FailedMount message), `VolumeUnmountError`, `VolumeHostPhase` (KEP-6395).
- `base`: the plugin interface (`VolumePlugin`) and `VolumeHost`, what the kubelet gives the
  plugins (ConfigMaps, Secrets, the image store, node allocatable memory).
- One module per plugin: `emptydir`, `configmap`, `secret`, `downwardapi`, `projected`,
  `image`.
- `atomicwriter`: upstream's AtomicWriter (timestamped dir, `..data` swapped by rename).
- `mounts`: mount/umount system calls (ctypes) and `/proc/self/mountinfo`.

Host directories: `<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`.
"""

from ephemera.kubelet.volumes.atomicwriter import AtomicWriter, FileProjection, PayloadError
from ephemera.kubelet.volumes.base import VolumeHost, VolumePlugin, VolumeSetupError
from ephemera.kubelet.volumes.manager import (
    POD_ATTACH_AND_MOUNT_TIMEOUT,
    VolumeHostPhase,
    VolumeManager,
    VolumeMountTimeout,
    VolumeUnmountError,
    default_plugins,
    referenced_volume_names,
)

__all__ = [
    "POD_ATTACH_AND_MOUNT_TIMEOUT",
    "AtomicWriter",
    "FileProjection",
    "PayloadError",
    "VolumeHost",
    "VolumeHostPhase",
    "VolumeManager",
    "VolumeMountTimeout",
    "VolumePlugin",
    "VolumeSetupError",
    "VolumeUnmountError",
    "default_plugins",
    "referenced_volume_names",
]

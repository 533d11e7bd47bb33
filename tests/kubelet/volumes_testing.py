"""Test support for the volume manager tests: a `VolumeHost` test double standing in for the
API client (ConfigMaps and Secrets from dicts), pod builders, and mount checks."""

from __future__ import annotations

import base64
import copy
import os
from pathlib import Path
from typing import Any

from ephemera.kubelet.volumes import mounts

NODE_MEMORY = 2 * 1024**3


class FakeVolumeHost:
    """The kubelet side of `VolumeHost`: objects come from dicts keyed by (namespace, name);
    every get is recorded in `calls`."""

    def __init__(self, image_store: Any = None, node_allocatable_memory: int = NODE_MEMORY):
        self.node_name = "node-a"
        self.node_allocatable_memory = node_allocatable_memory
        self.node_allocatable_cpu_millis = 4000
        self.image_store = image_store
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str, str]] = []

    def put_configmap(
        self,
        name: str,
        data: dict[str, str],
        binary: dict[str, bytes] | None = None,
        namespace: str = "default",
    ) -> None:
        obj: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}, "data": data}
        if binary:
            obj["binaryData"] = {k: base64.b64encode(v).decode() for k, v in binary.items()}
        self.configmaps[(namespace, name)] = obj

    def put_secret(self, name: str, data: dict[str, bytes], namespace: str = "default") -> None:
        self.secrets[(namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }

    async def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("configmap", namespace, name))
        return copy.deepcopy(self.configmaps.get((namespace, name)))

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("secret", namespace, name))
        return copy.deepcopy(self.secrets.get((namespace, name)))


def make_pod(
    volumes: list[dict[str, Any]],
    *,
    uid: str = "11111111-2222-3333-4444-555555555555",
    name: str = "p1",
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    mounted: list[str] | None = None,
    resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod whose one container mounts `mounted` (default: every volume)."""
    names = [v["name"] for v in volumes] if mounted is None else mounted
    container: dict[str, Any] = {
        "name": "c1",
        "image": "busybox",
        "volumeMounts": [{"name": n, "mountPath": f"/mnt/{n}"} for n in names],
    }
    if resources is not None:
        container["resources"] = resources
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"containers": [container], "volumes": volumes}}


def mounts_under(path: Path) -> list[str]:
    return [m.mount_point for m in mounts.mountpoints_under(path)]


def fs_type(path: Path) -> str | None:
    real = os.path.realpath(path)
    found = [m for m in mounts.mountinfo() if m.mount_point == real]
    return found[-1].fs_type if found else None


def statvfs_size(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def read_tree(path: Path) -> dict[str, bytes]:
    """User-visible files of an atomic-writer volume (following the links), by relative
    path."""
    result: dict[str, bytes] = {}
    for dirpath, _dirs, files in os.walk(path, followlinks=True):
        rel_dir = os.path.relpath(dirpath, path)
        if rel_dir.split("/")[0].startswith(".."):
            continue
        for name in files:
            if name.startswith(".."):
                continue
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            result[rel] = Path(dirpath, name).read_bytes()
    return result


def cleanup_mounts(path: Path) -> list[str]:
    """Unmount whatever a test left under `path`; returns what was left."""
    left = mounts_under(path)
    mounts.unmount_all_under(path)
    return left

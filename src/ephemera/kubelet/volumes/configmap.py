"""The `configMap` volume plugin (`kubernetes.io/configmap`), reference section 5.4.

The ConfigMap is read through the `VolumeHost`; its payload (`make_configmap_payload`, as
upstream's `MakePayload`) goes through the atomic writer into a plain directory (upstream
wraps configMap in a disk emptyDir, so it counts as local ephemeral storage).

- No `items`: one file per key of `data` (UTF-8) and `binaryData` (base64 in JSON), mode
  `defaultMode` (0644 unless set).
- `items`: only those keys, at `item.path`, mode `item.mode` or `defaultMode`; a missing key
  fails with `configmap references non-existent config key: K` unless `optional`.
- A missing ConfigMap fails with `configmap "x" not found` unless `optional`, which gives an
  empty volume.

Resynced periodically by the manager (`needs_resync`); the files change only when the
payload does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from ephemera.kubelet.volumes.atomicwriter import FileProjection, write_volume
from ephemera.kubelet.volumes.base import (
    VolumeHost,
    VolumePlugin,
    VolumeSetupError,
    pod_namespace,
)

__all__ = [
    "DEFAULT_MODE",
    "ConfigMapPlugin",
    "fetch_configmap",
    "fetch_object_payload",
    "fetch_optional_object",
    "make_configmap_payload",
    "setup_object_volume",
    "setup_payload_volume",
]

DEFAULT_MODE = 0o644


def _mode(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def make_configmap_payload(
    items: Any, configmap: Mapping[str, Any], default_mode: int, optional: bool
) -> dict[str, FileProjection]:
    """Upstream's configmap `MakePayload`."""
    data = configmap.get("data") or {}
    binary = configmap.get("binaryData") or {}

    def value_of(key: str) -> bytes | None:
        if key in data:
            return str(data[key]).encode()
        if key in binary:
            try:
                return base64.b64decode(binary[key], validate=True)
            except (binascii.Error, ValueError, TypeError) as exc:
                raise VolumeSetupError(f"invalid binaryData for key {key}: {exc}") from exc
        return None

    payload: dict[str, FileProjection] = {}
    if not items:
        for key in [*data, *binary]:
            content = value_of(key)
            if content is not None:
                payload[key] = FileProjection(content, default_mode)
        return payload
    for item in items:
        key = str(item.get("key") or "")
        content = value_of(key)
        if content is None:
            if optional:
                continue
            raise VolumeSetupError(f"configmap references non-existent config key: {key}")
        path = str(item.get("path") or key)
        payload[path] = FileProjection(content, _mode(item.get("mode"), default_mode))
    return payload


async def fetch_optional_object(
    get: Callable[[str, str], Awaitable[dict[str, Any] | None]],
    kind: str,
    namespace: str,
    name: str,
    optional: bool,
) -> dict[str, Any]:
    """The object `get(namespace, name)` returns; an empty one when missing and `optional`,
    else `<kind> "x" not found`. Shared by the configMap and secret plugins."""
    try:
        obj = await get(namespace, name)
    except Exception as exc:
        raise VolumeSetupError(str(exc)) from exc
    if obj is None:
        if not optional:
            raise VolumeSetupError(f'{kind} "{name}" not found')
        return {"metadata": {"name": name, "namespace": namespace}}
    return obj


async def fetch_configmap(
    host: VolumeHost, namespace: str, name: str, optional: bool
) -> dict[str, Any]:
    """The ConfigMap, an empty one when missing and `optional`, else `configmap "x" not
    found`."""
    return await fetch_optional_object(host.get_configmap, "configmap", namespace, name, optional)


async def setup_payload_volume(
    source: Mapping[str, Any],
    obj: Mapping[str, Any],
    make_payload: Callable[[Any, Mapping[str, Any], int, bool], dict[str, FileProjection]],
    host_dir: Path,
    size: int | None,
) -> None:
    """Build the payload of `obj` for the volume `source` (its `items`, `defaultMode`,
    `optional`) and write it atomically into `host_dir`: a tmpfs of `size` when given,
    written on the loop; else a directory on disk (a ConfigMap's, up to 1 MiB of files that
    writeback may throttle), written on a thread (`VolumePlugin.setup`)."""
    payload = make_payload(
        source.get("items"),
        obj,
        _mode(source.get("defaultMode"), DEFAULT_MODE),
        bool(source.get("optional")),
    )
    if size is None:
        await asyncio.to_thread(write_volume, host_dir, payload, size)
    else:
        write_volume(host_dir, payload, size)


ObjectFetcher = Callable[[VolumeHost, str, str, bool], Awaitable[dict[str, Any]]]
PayloadMaker = Callable[[Any, Mapping[str, Any], int, bool], dict[str, FileProjection]]


async def fetch_object_payload(
    host: VolumeHost,
    namespace: str,
    name: str,
    ref: Mapping[str, Any],
    fetch: ObjectFetcher,
    make_payload: PayloadMaker,
    default_mode: int,
) -> dict[str, FileProjection]:
    """Fetch the ConfigMap/Secret `name` that `ref` (its `items`, `optional`) projects and
    build its payload with `default_mode` (a projected volume's configMap/secret source)."""
    optional = bool(ref.get("optional"))
    obj = await fetch(host, namespace, name, optional)
    return make_payload(ref.get("items"), obj, default_mode, optional)


async def setup_object_volume(
    pod: Mapping[str, Any],
    source: Mapping[str, Any],
    name: str,
    fetch: ObjectFetcher,
    make_payload: PayloadMaker,
    host: VolumeHost,
    host_dir: Path,
    size: int | None,
) -> None:
    """Fetch the ConfigMap/Secret `name` of the volume `source` in the pod's namespace and
    write its payload into `host_dir` (a configMap or secret volume)."""
    optional = bool(source.get("optional"))
    obj = await fetch(host, pod_namespace(pod), name, optional)
    await setup_payload_volume(source, obj, make_payload, host_dir, size)


class ConfigMapPlugin(VolumePlugin):
    name = "kubernetes.io/configmap"
    source_key = "configMap"
    needs_resync = True

    async def setup(
        self,
        pod: Mapping[str, Any],
        volume: Mapping[str, Any],
        host_dir: Path,
        host: VolumeHost,
    ) -> None:
        source = self.source_of(volume)
        name = str(source.get("name") or "")
        await setup_object_volume(
            pod, source, name, fetch_configmap, make_configmap_payload, host, host_dir, None
        )

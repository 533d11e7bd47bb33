"""The `secret` volume plugin (`kubernetes.io/secret`), reference section 5.4.

Like configMap, but the Secret's `data` values are base64 in JSON, a missing item key fails
with `references non-existent secret key: K`, a missing Secret with `secret "x" not found`
(unless `optional`: then an empty volume), and the files live on a tmpfs (upstream wraps
secret in a memory emptyDir), sized like a memory emptyDir without `sizeLimit`, so tearing
the volume down drops the secret's bytes from memory.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ephemera.kubelet.volumes.atomicwriter import FileProjection
from ephemera.kubelet.volumes.base import (
    VolumeHost,
    VolumePlugin,
    VolumeSetupError,
)
from ephemera.kubelet.volumes.configmap import fetch_optional_object, setup_object_volume
from ephemera.kubelet.volumes.emptydir import memory_backed_size

__all__ = ["DEFAULT_MODE", "SecretPlugin", "fetch_secret", "make_secret_payload"]

DEFAULT_MODE = 0o644


def _mode(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def _decode(key: str, value: Any) -> bytes:
    try:
        return base64.b64decode(value or "", validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise VolumeSetupError(f"invalid data for secret key {key}: {exc}") from exc


def make_secret_payload(
    items: Any, secret: Mapping[str, Any], default_mode: int, optional: bool
) -> dict[str, FileProjection]:
    """Upstream's secret `MakePayload`."""
    data = secret.get("data") or {}
    payload: dict[str, FileProjection] = {}
    if not items:
        for key, value in data.items():
            payload[key] = FileProjection(_decode(key, value), default_mode)
        return payload
    for item in items:
        key = str(item.get("key") or "")
        if key not in data:
            if optional:
                continue
            raise VolumeSetupError(f"references non-existent secret key: {key}")
        path = str(item.get("path") or key)
        payload[path] = FileProjection(
            _decode(key, data[key]), _mode(item.get("mode"), default_mode)
        )
    return payload


async def fetch_secret(
    host: VolumeHost, namespace: str, name: str, optional: bool
) -> dict[str, Any]:
    """The Secret, an empty one when missing and `optional`, else `secret "x" not found`."""
    return await fetch_optional_object(host.get_secret, "secret", namespace, name, optional)


class SecretPlugin(VolumePlugin):
    name = "kubernetes.io/secret"
    source_key = "secret"
    needs_resync = True

    async def setup(
        self,
        pod: Mapping[str, Any],
        volume: Mapping[str, Any],
        host_dir: Path,
        host: VolumeHost,
    ) -> None:
        source = self.source_of(volume)
        name = str(source.get("secretName") or "")
        size = memory_backed_size(pod, host.node_allocatable_memory)
        await setup_object_volume(
            pod, source, name, fetch_secret, make_secret_payload, host, host_dir, size
        )

"""The `projected` volume plugin (`kubernetes.io/projected`): configMap, secret and
downwardAPI sources merged into one atomic-writer directory on a tmpfs.

Sources are collected in order, a later source's path replacing an earlier one's (API
validation rejects duplicate paths). Every source uses the projected volume's `defaultMode`
(0644) unless an item sets `mode`. A missing ConfigMap or Secret fails the source with
`configmap "x" not found` / `secret "x" not found` unless the source is `optional`; errors of
several sources are aggregated as upstream's `utilerrors.NewAggregate`, and nothing is
written then.

A `serviceAccountToken` source (`path`, `audience`, `expirationSeconds`) asks the host's
`get_service_account_token` (the kubelet's token manager, `ephemera.kubelet.tokens`) for a
token of the pod's ServiceAccount bound to the pod, as upstream's plugin builds the
TokenRequest; the resync of projected volumes rewrites the file when the manager has rotated
the token. A host without that method fails the source with `serviceAccountToken projections
are not supported yet`. `clusterTrustBundle` and `podCertificate` sources are not supported.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ephemera.kubelet.volumes.atomicwriter import FileProjection
from ephemera.kubelet.volumes.base import (
    VolumeHost,
    VolumePlugin,
    VolumeSetupError,
    aggregate_errors,
    pod_namespace,
)
from ephemera.kubelet.volumes.configmap import (
    fetch_configmap,
    fetch_object_payload,
    make_configmap_payload,
)
from ephemera.kubelet.volumes.downwardapi import collect_downward_api
from ephemera.kubelet.volumes.emptydir import write_memory_backed_volume
from ephemera.kubelet.volumes.secret import fetch_secret, make_secret_payload

__all__ = ["DEFAULT_MODE", "SERVICE_ACCOUNT_TOKEN_UNSUPPORTED", "ProjectedPlugin"]

DEFAULT_MODE = 0o644
SERVICE_ACCOUNT_TOKEN_UNSUPPORTED = "serviceAccountToken projections are not supported yet"


def _mode(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


async def _service_account_token(pod: Mapping[str, Any], projection: Mapping[str, Any],
                                 host: VolumeHost) -> str:
    get_token = getattr(host, "get_service_account_token", None)
    if get_token is None:
        raise VolumeSetupError(SERVICE_ACCOUNT_TOKEN_UNSUPPORTED)
    md = pod.get("metadata") or {}
    audience = projection.get("audience")
    request = {"spec": {
        "audiences": [audience] if audience else [],
        "expirationSeconds": projection.get("expirationSeconds") or 3600,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": md.get("name", ""),
                           "uid": md.get("uid", "")}}}
    account = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
    try:
        result = await get_token(pod_namespace(pod), account, request)
    except Exception as exc:  # the message becomes the volume's error
        raise VolumeSetupError(getattr(exc, "message", None) or str(exc)) from exc
    return str((result.get("status") or {}).get("token") or "")


class ProjectedPlugin(VolumePlugin):
    name = "kubernetes.io/projected"
    source_key = "projected"
    needs_resync = True

    async def collect(
        self, pod: Mapping[str, Any], volume: Mapping[str, Any], host: VolumeHost
    ) -> dict[str, FileProjection]:
        projected = self.source_of(volume)
        default_mode = _mode(projected.get("defaultMode"), DEFAULT_MODE)
        namespace = pod_namespace(pod)
        payload: dict[str, FileProjection] = {}
        errors: list[str] = []
        for source in projected.get("sources") or []:
            try:
                if source.get("configMap") is not None:
                    ref = source["configMap"]
                    payload.update(await fetch_object_payload(
                        host, namespace, str(ref.get("name") or ""), ref,
                        fetch_configmap, make_configmap_payload, default_mode))
                elif source.get("secret") is not None:
                    ref = source["secret"]
                    payload.update(await fetch_object_payload(
                        host, namespace, str(ref.get("name") or ""), ref,
                        fetch_secret, make_secret_payload, default_mode))
                elif source.get("downwardAPI") is not None:
                    items, item_errors = collect_downward_api(
                        pod, source["downwardAPI"].get("items"), default_mode, host
                    )
                    errors.extend(item_errors)
                    payload.update(items)
                elif source.get("serviceAccountToken") is not None:
                    projection = source["serviceAccountToken"]
                    token = await _service_account_token(pod, projection, host)
                    payload[str(projection.get("path") or "")] = FileProjection(
                        token.encode(), default_mode)
                elif source.get("clusterTrustBundle") is not None:
                    errors.append("clusterTrustBundle projections are not supported")
                elif source.get("podCertificate") is not None:
                    errors.append("podCertificate projections are not supported")
            except VolumeSetupError as exc:
                errors.append(str(exc))
        if errors:
            raise VolumeSetupError(aggregate_errors(errors))
        return payload

    async def setup(
        self,
        pod: Mapping[str, Any],
        volume: Mapping[str, Any],
        host_dir: Path,
        host: VolumeHost,
    ) -> None:
        payload = await self.collect(pod, volume, host)
        await write_memory_backed_volume(pod, host, host_dir, payload)

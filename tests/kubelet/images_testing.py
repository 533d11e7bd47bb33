"""Hand-made image layers and OCI layouts for the image store tests: `entry`/`directory`
(a tar member), `tar_of` (a layer), `write_layout` (an OCI layout with one image)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

from ephemera.kubelet.images.base import host_architecture


def entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", mode: int = 0o644,
          uid: int = 0, gid: int = 0, linkname: str = "", mtime: int = 1_000_000,
          dev: tuple[int, int] = (0, 0),
          pax: dict[str, str] | None = None) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.uid, info.gid = uid, gid
    info.linkname = linkname
    info.mtime = mtime
    info.devmajor, info.devminor = dev
    if pax:
        info.pax_headers = dict(pax)
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def directory(name: str, mode: int = 0o755, **kw: Any) -> tuple[tarfile.TarInfo, bytes]:
    return entry(name, tarfile.DIRTYPE, mode=mode, **kw)


def tar_of(entries: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def put_blob(layout: Path, data: bytes) -> dict[str, Any]:
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    digest = sha(data)
    (blobs / digest.removeprefix("sha256:")).write_bytes(data)
    return {"digest": digest, "size": len(data)}


def write_layout(layout: Path, layers: list[bytes], *, ref: str | None = None,
                 config: dict[str, Any] | None = None, gzip_layers: bool = False,
                 diff_ids: list[str] | None = None,
                 annotations: dict[str, str] | None = None) -> str:
    """An OCI layout with one image; returns its manifest digest."""
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    layer_descs = []
    for raw in layers:
        blob = gzip.compress(raw, mtime=0) if gzip_layers else raw
        media = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gzip_layers else "")
        layer_descs.append({"mediaType": media, **put_blob(layout, blob)})
    config_doc = {"architecture": host_architecture(), "os": "linux",
                  "config": config or {},
                  "rootfs": {"type": "layers",
                             "diff_ids": diff_ids or [sha(raw) for raw in layers]}}
    config_desc = {"mediaType": "application/vnd.oci.image.config.v1+json",
                   **put_blob(layout, json.dumps(config_doc).encode())}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_desc, "layers": layer_descs}
    manifest_desc = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                     **put_blob(layout, json.dumps(manifest).encode())}
    ann = dict(annotations or {})
    if ref:
        ann["org.opencontainers.image.ref.name"] = ref
    if ann:
        manifest_desc["annotations"] = ann
    index = {"schemaVersion": 2, "manifests": [manifest_desc]}
    (layout / "index.json").write_text(json.dumps(index))
    return str(manifest_desc["digest"])

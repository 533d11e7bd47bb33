"""The base image: busybox built from Debian's `busybox-static` (`/bin/busybox`) into one
uncompressed layer, an OCI config and an OCI manifest, byte for byte reproducible.

The layer holds `bin/busybox`, a symlink `bin/<applet> -> busybox` for every applet that
`busybox --list` prints, `etc/passwd`, `etc/group`, and the directories a container expects
(`dev proc sys` as mount points, `tmp` 1777, `root` 0700, `home usr var`). Every entry has
mtime 0, uid/gid 0 and a fixed order; the tar is uncompressed (so no gzip timestamp or zlib
version can change it; its digest is also its diff_id) and the config and manifest are
canonical JSON with fixed dates. The same busybox binary therefore always gives the same
image id and manifest digest. The config is docker's busybox image's: `Cmd ["sh"]` and the
usual `PATH`.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUSYBOX = Path("/bin/busybox")
BASE_IMAGE_REF = "docker.io/library/busybox:latest"
EPOCH = "1970-01-01T00:00:00Z"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MEDIA_TYPE_LAYER = "application/vnd.oci.image.layer.v1.tar"
MEDIA_TYPE_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_TYPE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"

PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "daemon:x:1:1:daemon:/usr/sbin:/bin/false\n"
    "nobody:x:65534:65534:nobody:/home:/bin/false\n"
)
GROUP = "root:x:0:\ndaemon:x:1:\nnogroup:x:65534:\n"

# (path, mode) of the directories, in tar order.
DIRECTORIES = (
    ("bin", 0o755), ("dev", 0o755), ("etc", 0o755), ("home", 0o755), ("proc", 0o555),
    ("root", 0o700), ("sys", 0o555), ("tmp", 0o1777), ("usr", 0o755), ("var", 0o755),
)

GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
          "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64",
          "i686": "386", "i386": "386"}


def host_architecture() -> str:
    """The host's architecture in OCI/Go spelling (amd64, arm64, ...)."""
    machine = platform.machine()
    return GOARCH.get(machine, machine)


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class BaseImageBlobs:
    layer: bytes
    config: bytes
    manifest: bytes

    @property
    def image_id(self) -> str:
        return digest_of(self.config)

    @property
    def manifest_digest(self) -> str:
        return digest_of(self.manifest)


def busybox_applets(busybox: Path = BUSYBOX) -> list[str]:
    """The applet names `busybox --list` prints, sorted."""
    out = subprocess.run([str(busybox), "--list"], check=True, capture_output=True,
                         stdin=subprocess.DEVNULL, timeout=30).stdout.decode()
    return sorted({line.strip() for line in out.splitlines() if line.strip()} - {"busybox"})


def _info(name: str, kind: bytes, mode: int, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    info.linkname = linkname
    return info


def busybox_layer(busybox: Path = BUSYBOX) -> bytes:
    """The uncompressed layer tar (see the module docstring)."""
    binary = busybox.read_bytes()
    files: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for name, mode in DIRECTORIES:
        files.append((_info(name + "/", tarfile.DIRTYPE, mode), None))
    files.append((_info("bin/busybox", tarfile.REGTYPE, 0o755), binary))
    for applet in busybox_applets(busybox):
        if "/" in applet:
            continue
        files.append((_info(f"bin/{applet}", tarfile.SYMTYPE, 0o777, "busybox"), None))
    files.append((_info("etc/group", tarfile.REGTYPE, 0o644), GROUP.encode()))
    files.append((_info("etc/passwd", tarfile.REGTYPE, 0o644), PASSWD.encode()))
    files.sort(key=lambda item: item[0].name.rstrip("/"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in files:
            if data is None:
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def base_image_blobs(busybox: Path = BUSYBOX) -> BaseImageBlobs:
    """The layer, config and manifest of the busybox base image."""
    layer = busybox_layer(busybox)
    layer_digest = digest_of(layer)
    config = canonical_json({
        "architecture": host_architecture(),
        "os": "linux",
        "created": EPOCH,
        "author": "ephemera images build-base",
        "config": {"Env": [DEFAULT_PATH], "Cmd": ["sh"]},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{
            "created": EPOCH,
            "created_by": f"ephemera images build-base: {busybox} and its applets",
        }],
    })
    manifest = canonical_json({
        "schemaVersion": 2,
        "mediaType": MEDIA_TYPE_MANIFEST,
        "config": {"mediaType": MEDIA_TYPE_CONFIG, "digest": digest_of(config),
                   "size": len(config)},
        "layers": [{"mediaType": MEDIA_TYPE_LAYER, "digest": layer_digest,
                    "size": len(layer)}],
    })
    return BaseImageBlobs(layer=layer, config=config, manifest=manifest)

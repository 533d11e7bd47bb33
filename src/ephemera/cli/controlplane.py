"""Joining a control plane on the same machine: `ephemera up --join-control-plane FIRST_DIR`.

A second member of a control plane needs the first one's identity: the cluster CA (so that
its serving certificate, its kubeconfigs and every client certificate are the cluster's) and
the service account keys (so that tokens either one signs verify on both), as kubeadm's
`join --control-plane` copies `ca.crt`, `ca.key`, `sa.key` and `sa.pub`. `share_identity`
copies them from the first member's data dir into the new one's `pki/` (refusing a data dir
that already has another CA); every other certificate of the new member is then issued from
that CA as usual. Both members must use one store: `--store etcd` with the same etcd.
`first_member_url` is the URL in the first member's kubeconfig, which the new member's
components get as a second apiserver (`--apiserver-endpoints`).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ephemera.cli import flags

__all__ = ["SHARED_FILES", "ControlPlaneError", "first_member_url", "share_identity"]

# kubeadm's shared control-plane certificates that ephemera has (no front proxy, etcd's CA
# is the etcd operator's), by their file names in `pki/`.
SHARED_FILES = ("ca.crt", "ca.key", "sa.key", "sa.pub")


class ControlPlaneError(Exception):
    """The first member's data dir cannot be joined; the message says why."""


def share_identity(first_data_dir: Path, data_dir: Path) -> None:
    """Copy the shared CA and service account keys of `first_data_dir` into `data_dir`."""
    source = first_data_dir / "pki"
    target = data_dir / "pki"
    if first_data_dir.resolve() == data_dir.resolve():
        raise ControlPlaneError("--join-control-plane: give the new member a --data-dir of "
                                "its own")
    missing = [name for name in SHARED_FILES if not (source / name).is_file()]
    if missing:
        raise ControlPlaneError(f"--join-control-plane: {first_data_dir} is not a control "
                                f"plane's data dir (no pki/{', pki/'.join(missing)})")
    mine, theirs = target / "ca.crt", source / "ca.crt"
    if mine.is_file() and mine.read_bytes() != theirs.read_bytes():
        raise ControlPlaneError(f"--join-control-plane: {data_dir} already has another "
                                "cluster's CA (pki/ca.crt); use a fresh data dir")
    for name in SHARED_FILES:
        data = (source / name).read_text()
        private = name.endswith(".key")
        flags.write_atomic(target / name, data, 0o600 if private else 0o644)
    # Leaf certificates of another CA already there are re-issued by `ensure_pki`, as any
    # certificate not signed by the CA on disk is.


def first_member_url(first_data_dir: Path) -> str | None:
    """The apiserver URL of the first member's kubeconfig (None before it has one)."""
    try:
        doc = yaml.safe_load((first_data_dir / "kubeconfig").read_text())
        return str(doc["clusters"][0]["cluster"]["server"]).rstrip("/") or None
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError):
        return None

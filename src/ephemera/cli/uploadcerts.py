"""The shared control-plane certificates in the cluster, encrypted, for a control-plane member
joining from another machine, as kubeadm's `upload-certs` phase and `join --control-plane
--certificate-key` move them.

`upload_certs(api, pki_dir, key)` writes the Secret `kube-system/kubeadm-certs`: one entry per
shared file (`ca.crt`, `ca.key`, `sa.key`, `sa.pub`; `ephemera.cli.controlplane`), each
AES-256-GCM-encrypted under the certificate key (32 random bytes, given as 64 hex digits; the
12-byte nonce precedes the ciphertext, as kubeadm's `EncryptBytes`), and kubeadm's Role and
RoleBinding `kubeadm:kubeadm-certs` (get that Secret; group
`system:bootstrappers:kubeadm:default-node-token`), so that a bootstrap token can read it.
Without the key the Secret tells nothing; kubeadm deletes it with its 2-hour token, ephemera
runs no garbage collector, so delete it when done (`kubectl -n kube-system delete secret
kubeadm-certs`) or upload again (it is replaced).

`download_certs(api, key, pki_dir)` reads and decrypts it into a new member's `pki/`.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ephemera.api.errors import StatusError
from ephemera.apiserver.authz.rbac import RBAC_GROUP
from ephemera.apiserver.bootstraptoken import DEFAULT_EXTRA_GROUP
from ephemera.cli import flags
from ephemera.cli.controlplane import SHARED_FILES, ControlPlaneError
from ephemera.client import ApiClient, resource_path

__all__ = ["CERTS_SECRET", "decrypt", "download_certs", "encrypt", "new_certificate_key",
           "parse_certificate_key", "upload_certs"]

CERTS_SECRET = "kubeadm-certs"
CERTS_ROLE = "kubeadm:kubeadm-certs"
NAMESPACE = "kube-system"
NONCE_BYTES = 12


def new_certificate_key() -> str:
    """A random certificate key: 32 bytes as 64 hex digits (kubeadm's)."""
    return secrets.token_hex(32)


def parse_certificate_key(text: str) -> bytes:
    """The key's 32 bytes; ValueError for anything but 64 hex digits."""
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ValueError("a certificate key is 64 hex digits (32 bytes), as "
                         "`ephemera token create --upload-certs` prints it")
    return key


def encrypt(data: bytes, key: bytes) -> bytes:
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, data, None)


def decrypt(blob: bytes, key: bytes) -> bytes:
    """The plain bytes; ControlPlaneError when the key does not open them."""
    if len(blob) <= NONCE_BYTES:
        raise ControlPlaneError("the kubeadm-certs Secret holds a truncated entry")
    try:
        return AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], None)
    except InvalidTag:
        raise ControlPlaneError("the certificate key does not decrypt the kubeadm-certs "
                                "Secret (a wrong or outdated key: upload the certificates "
                                "again)") from None


def _rbac() -> list[tuple[str, dict[str, Any]]]:
    meta = {"name": CERTS_ROLE, "namespace": NAMESPACE}
    role = {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "Role", "metadata": dict(meta),
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                       "resourceNames": [CERTS_SECRET]}]}
    binding = {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "RoleBinding", "metadata": dict(meta),
               "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": CERTS_ROLE},
               "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group",
                             "name": DEFAULT_EXTRA_GROUP}]}
    return [("roles", role), ("rolebindings", binding)]


async def upload_certs(api: ApiClient, pki_dir: Path, key: bytes) -> None:
    """Write (or replace) the encrypted Secret and the RBAC objects that let bootstrap
    tokens read it."""
    data = {name: base64.b64encode(encrypt((pki_dir / name).read_bytes(), key)).decode()
            for name in SHARED_FILES}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": CERTS_SECRET, "namespace": NAMESPACE}, "data": data}
    path = resource_path("secrets", NAMESPACE)
    try:
        await api.create(path, secret)
    except StatusError as err:
        if err.code != 409:
            raise
        await api.update(resource_path("secrets", NAMESPACE, CERTS_SECRET), secret)
    for plural, obj in _rbac():
        try:
            await api.create(resource_path(plural, NAMESPACE, group=RBAC_GROUP), obj)
        except StatusError as err:
            if err.code != 409:
                raise


async def download_certs(api: ApiClient, key: bytes, pki_dir: Path) -> None:
    """Decrypt the shared files into `pki_dir` (refusing a directory that has another CA)."""
    try:
        secret = await api.get(resource_path("secrets", NAMESPACE, CERTS_SECRET))
    except StatusError as err:
        if err.code == 404:
            raise ControlPlaneError("no kubeadm-certs Secret in kube-system: run `ephemera "
                                    "token create --upload-certs` on the first member") from None
        raise
    files: dict[str, bytes] = {}
    for name in SHARED_FILES:
        entry = (secret.get("data") or {}).get(name)
        if not entry:
            raise ControlPlaneError(f"the kubeadm-certs Secret has no {name}")
        try:
            blob = base64.b64decode(entry, validate=True)
        except (binascii.Error, ValueError):
            raise ControlPlaneError(f"the kubeadm-certs Secret's {name} is not base64") \
                from None
        files[name] = decrypt(blob, key)
    mine = pki_dir / "ca.crt"
    if mine.is_file() and mine.read_bytes() != files["ca.crt"]:
        raise ControlPlaneError(f"{pki_dir} already has another cluster's CA (ca.crt); use a "
                                "fresh data dir")
    for name, content in files.items():
        flags.write_atomic(pki_dir / name, content.decode(),
                           0o600 if name.endswith(".key") else 0o644)

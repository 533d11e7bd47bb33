"""TLS bootstrapping of a kubelet, as upstream's `pkg/kubelet/certificate/bootstrap`: with a
bootstrap kubeconfig (a bootstrap token) the kubelet asks for its client certificate.

`needs_bootstrap(kubeconfig)`: the kubeconfig is missing, unreadable, or its client
certificate is missing or expired. `bootstrap_client_certificate` loads the private key a
previous attempt left (`kubelet-client.key.tmp` next to the kubeconfig) or makes an ECDSA
P-256 key and writes it there (mode 0600, fsynced) before anything is posted, as upstream
does, so a kubelet restarted while its request waits for approval posts the same request
again (same key, same name: the existing CSR is reused). It posts a CertificateSigningRequest
(`certificates.k8s.io/v1`, signer `kubernetes.io/kube-apiserver-client-kubelet`, subject
`O=system:nodes, CN=system:node:NAME`, usages `digital signature` and `client auth`, named
`node-csr-<digest of key, subject and usages>` as upstream's `digestedName`), waits until the
controller-manager has approved and signed it (a Denied or Failed CSR is an error), and
writes the kubeconfig (mode 0600; a temporary file fsynced, renamed over it, the directory
fsynced) with the bootstrap kubeconfig's server and CA and the new certificate and key
embedded; the key file is then deleted.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ephemera.api.errors import StatusError
from ephemera.api.wellknown import (
    KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
    NODES_GROUP,
    node_username,
)
from ephemera.client import (
    ApiClient,
    ApiUnavailable,
    ClientConfig,
    KubeconfigError,
    load_kubeconfig,
    resource_path,
)

log = logging.getLogger("ephemera.kubelet.bootstrap")

SIGNER = KUBE_APISERVER_CLIENT_KUBELET_SIGNER
USAGES = ("digital signature", "client auth")
POLL_INTERVAL = 0.5
PENDING_KEY_NAME = "kubelet-client.key.tmp"  # upstream's name for the key awaiting its cert


class BootstrapError(RuntimeError):
    pass


def needs_bootstrap(kubeconfig: Path) -> bool:
    try:
        config = load_kubeconfig(kubeconfig)
    except (KubeconfigError, OSError):
        return True
    if config.client_cert_pem is None or config.client_key_pem is None:
        return True
    try:
        cert = x509.load_pem_x509_certificate(config.client_cert_pem)
    except ValueError:
        return True
    return cert.not_valid_after_utc <= dt.datetime.now(dt.UTC)


def csr_name(key: ec.EllipticCurvePrivateKey, node_name: str) -> str:
    """Upstream's `digestedName`: SHA-512/256 over the base64url (unpadded) public key,
    common name, organization and usages, each followed by `|`; the name is `node-csr-`
    and the digest in unpadded base64url. The same key, subject and usages give the same
    name."""
    digest = hashlib.new("sha512_256")
    der = key.public_key().public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    for part in (der, node_username(node_name).encode(), NODES_GROUP.encode(),
                 *(u.encode() for u in USAGES)):
        digest.update(_raw_url_b64(part) + b"|")
    return "node-csr-" + _raw_url_b64(digest.digest()).decode()


def _raw_url_b64(data: bytes) -> bytes:
    """Go's `base64.RawURLEncoding`."""
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def certificate_request(key: ec.EllipticCurvePrivateKey, node_name: str,
                        names: Sequence[x509.GeneralName] = ()) -> bytes:
    """A PEM request for `O=system:nodes, CN=system:node:NAME` with the subject alternative
    `names` (none for a client certificate)."""
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
                         x509.NameAttribute(NameOID.COMMON_NAME, node_username(node_name))])
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(names)),
                                        critical=False)
    request = builder.sign(key, hashes.SHA256())
    return request.public_bytes(serialization.Encoding.PEM)


def _csr_path(name: str | None = None) -> str:
    return resource_path("certificatesigningrequests", None, name,
                         group="certificates.k8s.io")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_kubeconfig(path: Path, server: str, ca_pem: bytes | None, cert_pem: bytes,
                     key_pem: bytes, user: str) -> None:
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = _b64(ca_pem)
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "users": [{"name": user, "user": {"client-certificate-data": _b64(cert_pem),
                                          "client-key-data": _b64(key_pem)}}],
        "contexts": [{"name": "default-context",
                      "context": {"cluster": "default-cluster", "user": user}}],
        "current-context": "default-context",
    }
    write_private(path, yaml.safe_dump(doc, sort_keys=False).encode())


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` (mode 0600) atomically and durably: a temporary file in the
    same directory, fsynced, renamed over `path`, then the directory fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_or_create_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """The ECDSA P-256 key at `path` (PEM, PKCS#8), or a new one written there first."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError:
        key = None
    except (ValueError, TypeError) as err:
        log.warning("ignoring the unreadable private key %s: %s", path, err)
        key = None
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    key = ec.generate_private_key(ec.SECP256R1())
    write_private(path, key_pem(key))
    return key


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


async def request_certificate(api: ApiClient, body: dict[str, Any], *,
                              timeout: float = 300.0) -> bytes:
    """Post the CertificateSigningRequest `body` (named, or with `metadata.generateName`)
    and wait until it is signed: the certificate (PEM). A named CSR that exists already
    (posted before with the same key) is waited for. BootstrapError when it is denied,
    fails, cannot be posted, or is not signed within `timeout`."""
    deadline = time.monotonic() + timeout
    name = str(body["metadata"].get("name") or "")
    while True:
        try:
            created = await api.create(_csr_path(), body)
            name = str((created.get("metadata") or {}).get("name") or name)
            break
        except StatusError as err:
            if err.code == 409 and name:
                break  # posted before (same key, same name)
            raise BootstrapError(f"creating certificatesigningrequest {name}: "
                                 f"{err.message}") from None
        except ApiUnavailable as err:
            if time.monotonic() > deadline:
                raise BootstrapError(f"the apiserver is unreachable: {err}") from None
            await asyncio.sleep(1.0)
    log.info("posted certificatesigningrequest %s (%s); waiting for approval", name,
             body["spec"]["signerName"])
    while True:
        try:
            csr = await api.get(_csr_path(name))
        except (StatusError, ApiUnavailable) as err:
            log.warning("reading certificatesigningrequest %s: %s", name, err)
            csr = {}
        status = csr.get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") in ("Denied", "Failed") and \
                    condition.get("status", "True") == "True":
                raise BootstrapError(
                    f"certificatesigningrequest {name} is {condition['type'].lower()}: "
                    f"{condition.get('reason', '')} {condition.get('message', '')}".strip())
        if status.get("certificate"):
            return base64.b64decode(status["certificate"])
        if time.monotonic() > deadline:
            raise BootstrapError(f"certificatesigningrequest {name} was not signed "
                                 f"within {timeout:g}s")
        await asyncio.sleep(POLL_INTERVAL)


async def bootstrap_client_certificate(bootstrap: ClientConfig, node_name: str,
                                       kubeconfig: Path, *, timeout: float = 300.0,
                                       user_agent: str = "ephemera-kubelet",
                                       key_path: Path | None = None) -> None:
    """Get a client certificate for `node_name` with the `bootstrap` credentials and write
    `kubeconfig` with it; BootstrapError when it is denied, fails or takes over `timeout`.
    `key_path` (default `kubelet-client.key.tmp` next to `kubeconfig`): where the key waits
    for its certificate across restarts."""
    key_path = key_path if key_path is not None else kubeconfig.with_name(PENDING_KEY_NAME)
    key = load_or_create_key(key_path)
    private_pem = key_pem(key)
    name = csr_name(key, node_name)
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": _b64(certificate_request(key, node_name)),
                     "signerName": SIGNER, "usages": list(USAGES)}}
    async with ApiClient(bootstrap, user_agent=user_agent) as api:
        cert_pem = await request_certificate(api, body, timeout=timeout)
    write_kubeconfig(kubeconfig, bootstrap.server, bootstrap.ca_pem, cert_pem, private_pem,
                     node_username(node_name))
    key_path.unlink(missing_ok=True)  # the key lives in the kubeconfig now
    log.info("wrote %s with the client certificate of system:node:%s", kubeconfig, node_name)

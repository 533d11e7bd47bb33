"""The cluster's certificates: a CA, the apiserver's serving certificate and client
certificates (CN = user, O = groups, as upstream's x509 authenticator reads them), generated
into `<data-dir>/pki/` once and reused on restart; and admin kubeconfig files with the
certificate data embedded.

Layout (kubeadm's names): `pki/ca.crt`, `pki/ca.key`, `pki/apiserver.crt`,
`pki/apiserver.key`, `pki/admin.crt`, `pki/admin.key`. Keys are ECDSA P-256, written 0600.
A leaf certificate is re-issued when it is missing, close to expiry, not signed by the CA on
disk, or (serving) lacks a requested subject alternative name.
"""

from __future__ import annotations

import base64
import datetime as dt
import fcntl
import ipaddress
import os
import socket
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ephemera.api.wellknown import MASTERS_GROUP

ADMIN_USER = "kubernetes-admin"
ADMIN_GROUPS = (MASTERS_GROUP,)
# The control plane components' own identities, bound to their roles by the default RBAC
# policy (`ephemera.apiserver.authz.bootstrappolicy`).
SCHEDULER_USER = "system:kube-scheduler"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
PROXY_USER = "system:kube-proxy"  # `ephemera proxy` (kubeadm's kube-proxy binding)
CLUSTER_NAME = "ephemera"

CA_VALIDITY = dt.timedelta(days=3650)
LEAF_VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("only ECDSA keys are used by ephemera")
        return key


@dataclass(frozen=True)
class Pki:
    """The certificates of one data dir and where they are on disk."""

    directory: Path
    ca: CertKey
    serving: CertKey
    admin: CertKey

    @property
    def ca_cert_path(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def serving_cert_path(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def serving_key_path(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def admin_cert_path(self) -> Path:
        return self.directory / "admin.crt"

    @property
    def admin_key_path(self) -> Path:
        return self.directory / "admin.key"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def create_ca(common_name: str = "ephemera-ca") -> CertKey:
    """A self-signed CA certificate and key."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _issue(
    ca: CertKey,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: Sequence[x509.GeneralName] = (),
) -> CertKey:
    key = _new_key()
    ca_cert, ca_key = ca.certificate, ca.private_key
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + LEAF_VALIDITY, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=True,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def default_serving_names() -> tuple[list[str], list[IPAddress]]:
    """The names every serving certificate carries: localhost, the host name and the
    in-cluster service names; 127.0.0.1 and ::1."""
    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
           "kubernetes.default.svc.cluster.local"]
    host = socket.gethostname()
    if host and host not in dns:
        dns.append(host)
    ips: list[IPAddress] = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    return dns, ips


def _split_names(names: Iterable[str]) -> tuple[list[str], list[IPAddress]]:
    dns: list[str] = []
    ips: list[IPAddress] = []
    for name in names:
        if not name:
            continue
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            dns.append(name)
        else:
            if not ip.is_unspecified:
                ips.append(ip)
    return dns, ips


def issue_serving_cert(ca: CertKey, extra_names: Iterable[str] = ()) -> CertKey:
    """A serving certificate (CN kube-apiserver) for the default names plus `extra_names`
    (host names or IP addresses; unspecified addresses such as 0.0.0.0 are skipped)."""
    dns, ips = default_serving_names()
    more_dns, more_ips = _split_names(extra_names)
    dns += [d for d in more_dns if d not in dns]
    ips += [i for i in more_ips if i not in ips]
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(i) for i in ips]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    return _issue(ca, subject, ExtendedKeyUsageOID.SERVER_AUTH, sans)


def issue_client_cert(ca: CertKey, user: str, groups: Sequence[str] = ()) -> CertKey:
    """A client certificate for `user` (CN) in `groups` (one O each)."""
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
    return _issue(ca, x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH)


def user_from_certificate(cert: x509.Certificate) -> tuple[str, list[str]]:
    """The user (CN) and groups (O) of a client certificate, as upstream's x509 authn reads
    them."""
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    name = str(cns[0].value) if cns else ""
    return name, [str(o.value) for o in orgs]


def has_client_auth_usage(cert: x509.Certificate) -> bool:
    """False when the certificate restricts its extended key usage to something other than
    client authentication (a serving certificate is not a client credential)."""
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    usages = set(eku)
    return bool(usages & {ExtendedKeyUsageOID.CLIENT_AUTH,
                          ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE})


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _write_private(path: Path, data: bytes, mode: int) -> None:
    """Write atomically (temp file + rename) with the given permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _load(directory: Path, stem: str) -> CertKey | None:
    crt, key = directory / f"{stem}.crt", directory / f"{stem}.key"
    if not crt.exists() or not key.exists():
        return None
    try:
        pair = CertKey(crt.read_bytes(), key.read_bytes())
        pair.certificate  # noqa: B018 - parse check
        pair.private_key  # noqa: B018 - parse check
    except ValueError:
        return None
    return pair


def _store(directory: Path, stem: str, pair: CertKey) -> None:
    _write_private(directory / f"{stem}.key", pair.key_pem, 0o600)
    _write_private(directory / f"{stem}.crt", pair.cert_pem, 0o644)


def _usable(pair: CertKey | None, ca: CertKey) -> bool:
    if pair is None:
        return False
    cert = pair.certificate
    return cert.not_valid_after_utc - RENEW_BEFORE > _now() and signed_by(cert, ca.certificate)


def _covers(pair: CertKey, names: Iterable[str]) -> bool:
    try:
        san = pair.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return False
    have_dns = set(san.value.get_values_for_type(x509.DNSName))
    have_ips = set(san.value.get_values_for_type(x509.IPAddress))
    dns, ips = default_serving_names()
    more_dns, more_ips = _split_names(names)
    return set(dns + more_dns) <= have_dns and set(ips + more_ips) <= have_ips


def ensure_pki(data_dir: str | os.PathLike[str], serving_names: Iterable[str] = ()) -> Pki:
    """Load the certificates of `data_dir`, creating (or renewing) what is missing. The CA is
    created once and never replaced while its files are readable."""
    directory = Path(data_dir) / "pki"
    directory.mkdir(parents=True, exist_ok=True)
    names = list(serving_names)
    # Several processes (ephemera up and its components) may call this at once.
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_locked(directory, names)


def _ensure_locked(directory: Path, names: list[str]) -> Pki:
    ca = _load(directory, "ca")
    if ca is None:
        ca = create_ca()
        _store(directory, "ca", ca)
    serving = _load(directory, "apiserver")
    if serving is None or not _usable(serving, ca) or not _covers(serving, names):
        serving = issue_serving_cert(ca, names)
        _store(directory, "apiserver", serving)
    admin = _load(directory, "admin")
    if admin is None or not _usable(admin, ca):
        admin = issue_client_cert(ca, ADMIN_USER, ADMIN_GROUPS)
        _store(directory, "admin", admin)
    return Pki(directory, ca, serving, admin)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(
    server_url: str,
    ca_cert_pem: bytes,
    *,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    token: str | None = None,
    user: str = ADMIN_USER,
    cluster: str = CLUSTER_NAME,
) -> dict[str, Any]:
    """A kubeconfig document (as a dict) for one cluster, one user and one context."""
    credentials: dict[str, str] = {}
    if client_cert_pem is not None and client_key_pem is not None:
        credentials["client-certificate-data"] = _b64(client_cert_pem)
        credentials["client-key-data"] = _b64(client_key_pem)
    if token is not None:
        credentials["token"] = token
    context = f"{user}@{cluster}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {
            "server": server_url, "certificate-authority-data": _b64(ca_cert_pem)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "preferences": {},
    }


def write_kubeconfig(
    path: str | os.PathLike[str],
    server_url: str,
    ca_cert_pem: bytes,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    *,
    token: str | None = None,
    user: str = ADMIN_USER,
    cluster: str = CLUSTER_NAME,
) -> Path:
    """Write a kubeconfig atomically (mode 0600) with the certificate data embedded."""
    doc = kubeconfig(server_url, ca_cert_pem, client_cert_pem=client_cert_pem,
                     client_key_pem=client_key_pem, token=token, user=user, cluster=cluster)
    target = Path(path)
    _write_private(target, yaml.safe_dump(doc, sort_keys=False).encode(), 0o600)
    return target


def write_admin_kubeconfig(path: str | os.PathLike[str], server_url: str, pki: Pki) -> Path:
    """The admin kubeconfig (`kubernetes-admin`, O=`system:masters`) of a data dir."""
    return write_kubeconfig(path, server_url, pki.ca.cert_pem, pki.admin.cert_pem,
                            pki.admin.key_pem)


def write_client_kubeconfig(path: str | os.PathLike[str], server_url: str, pki: Pki,
                            user: str, groups: Sequence[str] = ()) -> Path:
    """A kubeconfig for `user` in `groups` with a fresh client certificate from the cluster
    CA: a component's identity (`SCHEDULER_USER`, `CONTROLLER_MANAGER_USER`) or a user's."""
    client = issue_client_cert(pki.ca, user, groups)
    return write_kubeconfig(path, server_url, pki.ca.cert_pem, client.cert_pem,
                            client.key_pem, user=user)

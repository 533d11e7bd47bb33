"""Certificate rotation of a kubelet, as upstream's `pkg/kubelet/certificate` on client-go's
`util/certificate` manager.

- The rotation deadline of a certificate (`rotation_deadline`) is its notBefore plus 70 to 90%
  (uniformly jittered) of its lifetime, as client-go's `nextRotationDeadline`; a
  `CertificateRotator` sleeps until then, makes a new ECDSA P-256 key, posts a
  CertificateSigningRequest (`metadata.generateName: csr-`, as upstream's manager) with the
  kubelet's current credentials, waits until it is signed (`ephemera.kubelet.bootstrap.
  request_certificate`) and installs the new pair; a failure is retried with exponential
  back-off (2 s doubling to 128 s), never later than the certificate's expiry allows.
- The serving certificate (`--rotate-server-certificates`, upstream's `serverTLSBootstrap`):
  signer `kubernetes.io/kubelet-serving`, subject `O=system:nodes, CN=system:node:NAME`,
  usages digital signature and server auth (an ECDSA key: no key encipherment), subject
  alternative names the Node's addresses (`serving_names`: DNS names from Hostname,
  InternalDNS and ExternalDNS, IPs from InternalIP and ExternalIP, as upstream's
  `addressesToHostnamesAndIPs`), asked for once the Node reports addresses. It is kept in the
  cert dir as upstream's file store does (`kubelet-server-<timestamp>.pem`, certificate and
  key, mode 0600, with the symlink `kubelet-server-current.pem` moved atomically) and loaded
  into the running TLS server's context, so new connections get it without a restart. When
  the Node's addresses change (looked at every 10 s) it is renewed at once, as upstream's
  manager does when its template changes.
- The client certificate (`--rotate-certificates`): signer
  `kubernetes.io/kube-apiserver-client-kubelet`, usages digital signature and client auth, no
  alternative names; the new pair is written into the kubeconfig (the current user's
  `client-certificate-data`/`client-key-data`, atomically) and handed to the ApiClient
  (`ApiClient.set_client_certificate`: new connections, the old ones closed).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import ipaddress
import logging
import os
import random
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from ephemera.api.errors import StatusError
from ephemera.api.wellknown import KUBE_APISERVER_CLIENT_KUBELET_SIGNER, KUBELET_SERVING_SIGNER
from ephemera.client import ApiClient, ApiUnavailable, resource_path
from ephemera.kubelet.bootstrap import (
    BootstrapError,
    certificate_request,
    key_pem,
    request_certificate,
    write_private,
)

__all__ = ["CertificateRotator", "PemStore", "client_rotator", "rotation_deadline",
           "serving_names", "serving_rotator"]

log = logging.getLogger("ephemera.kubelet.certificate")

SERVING_USAGES = ("digital signature", "server auth")
CLIENT_USAGES = ("digital signature", "client auth")
DNS_ADDRESS_TYPES = ("Hostname", "InternalDNS", "ExternalDNS")
IP_ADDRESS_TYPES = ("InternalIP", "ExternalIP")
RETRY_INITIAL, RETRY_MAX = 2.0, 128.0
NODE_POLL_INTERVAL = 1.0
SIGNING_TIMEOUT = 900.0  # upstream's certificate manager waits 15 minutes for a CSR

Install = Callable[[bytes, bytes], None]
Template = Callable[[], Awaitable[list[x509.GeneralName] | None]]
Changed = Callable[[x509.Certificate], Awaitable[bool]]
TEMPLATE_CHECK_INTERVAL = 10.0  # seconds between looks at the Node's addresses


def rotation_deadline(cert: x509.Certificate, jitter: float | None = None) -> dt.datetime:
    """When to renew `cert`: notBefore + (0.7 + 0.2 * jitter) of its lifetime, `jitter`
    uniform in [0, 1) unless given (client-go's `jitteryDuration`)."""
    fraction = 0.7 + 0.2 * (random.random() if jitter is None else jitter)
    start = cert.not_valid_before_utc
    return start + (cert.not_valid_after_utc - start) * fraction


def serving_names(addresses: Iterable[Mapping[str, Any]]) -> list[x509.GeneralName]:
    """The subject alternative names of a serving certificate for a Node with these
    `status.addresses`: DNS names first, then IPs, each once, in the Node's order."""
    dns: list[x509.GeneralName] = []
    ips: list[x509.GeneralName] = []
    for address in addresses:
        value = str(address.get("address") or "")
        if not value:
            continue
        if address.get("type") in DNS_ADDRESS_TYPES:
            name: x509.GeneralName = x509.DNSName(value)
            if name not in dns:
                dns.append(name)
        elif address.get("type") in IP_ADDRESS_TYPES:
            with contextlib.suppress(ValueError):
                ip = x509.IPAddress(ipaddress.ip_address(value))
                if ip not in ips:
                    ips.append(ip)
    return dns + ips


class PemStore:
    """upstream's certificate `FileStore`: `<dir>/<pair>-<timestamp>.pem` holds a certificate
    and its key (mode 0600); `<dir>/<pair>-current.pem` is a symlink to the newest."""

    def __init__(self, directory: Path, pair: str) -> None:
        self.directory = directory
        self.pair = pair

    @property
    def current_path(self) -> Path:
        return self.directory / f"{self.pair}-current.pem"

    def load(self) -> tuple[bytes, bytes] | None:
        """(certificate PEM, key PEM) of the current pair; None when there is none usable."""
        try:
            data = self.current_path.read_bytes()
        except OSError:
            return None
        marker = data.find(b"-----BEGIN", data.find(b"-----END CERTIFICATE-----"))
        if marker < 0:
            return None
        cert_pem, private_pem = data[:marker], data[marker:]
        try:
            x509.load_pem_x509_certificate(cert_pem)
        except ValueError:
            return None
        return cert_pem, private_pem

    def update(self, cert_pem: bytes, private_pem: bytes) -> Path:
        """Write a new pair and point the current link at it (atomically)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d-%H-%M-%S-%f")
        path = self.directory / f"{self.pair}-{stamp}.pem"
        write_private(path, cert_pem.rstrip(b"\n") + b"\n" + private_pem)
        link = self.directory / f".{self.pair}-current.pem.tmp"
        link.unlink(missing_ok=True)
        link.symlink_to(path.name)
        os.replace(link, self.current_path)
        return self.current_path


class CertificateRotator:
    """Keeps one certificate renewed before it expires (see the module docstring)."""

    def __init__(self, api: ApiClient, *, node_name: str, what: str, signer: str,
                 usages: Sequence[str], template: Template, install: Install,
                 current: bytes | None, changed: Changed | None = None,
                 check_interval: float = TEMPLATE_CHECK_INTERVAL) -> None:
        self.api = api
        self.node_name = node_name
        self.what = what
        self.signer = signer
        self.usages = tuple(usages)
        self.template = template
        self.install = install
        self.current = x509.load_pem_x509_certificate(current) if current else None
        self.rotations = 0
        self.changed = changed
        self.check_interval = check_interval

    def deadline(self) -> dt.datetime | None:
        return rotation_deadline(self.current) if self.current is not None else None

    async def run(self) -> None:
        delay = RETRY_INITIAL
        while True:
            deadline = self.deadline()
            if deadline is not None:
                wait = (deadline - dt.datetime.now(dt.UTC)).total_seconds()
                log.info("%s certificate of %s expires %s; renewing in %.0fs", self.what,
                         self.node_name, self.current.not_valid_after_utc.isoformat()
                         if self.current is not None else "?", max(wait, 0.0))
                if wait > 0:
                    await self._wait_until(deadline)
            try:
                await self.rotate()
                delay = RETRY_INITIAL
            except (BootstrapError, StatusError, ApiUnavailable, OSError, ValueError) as err:
                log.warning("renewing the %s certificate of %s: %s; retrying in %.0fs",
                            self.what, self.node_name, getattr(err, "message", err), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

    async def _wait_until(self, deadline: dt.datetime) -> None:
        """Sleep until `deadline`, or until `changed` says the certificate no longer fits
        (looked at every `check_interval`), as upstream's manager renews at once when its
        template changes."""
        while (wait := (deadline - dt.datetime.now(dt.UTC)).total_seconds()) > 0:
            if self.changed is None:
                await asyncio.sleep(wait)
                return
            await asyncio.sleep(min(wait, self.check_interval))
            if self.current is None:
                return
            try:
                if await self.changed(self.current):
                    log.info("the %s certificate of %s no longer fits the node; renewing now",
                             self.what, self.node_name)
                    return
            except (StatusError, ApiUnavailable) as err:
                log.debug("checking the %s certificate of %s: %s", self.what,
                          self.node_name, err)

    async def rotate(self) -> None:
        names = await self.template()
        if names is None:
            raise BootstrapError(f"node {self.node_name} reports no addresses yet")
        key = ec.generate_private_key(ec.SECP256R1())
        body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": {"generateName": "csr-"},
                "spec": {"request": base64.b64encode(
                    certificate_request(key, self.node_name, names)).decode(),
                         "signerName": self.signer, "usages": list(self.usages)}}
        cert_pem = await request_certificate(self.api, body, timeout=SIGNING_TIMEOUT)
        cert = x509.load_pem_x509_certificate(cert_pem)
        self.install(cert_pem, key_pem(key))
        self.current = cert
        self.rotations += 1
        log.info("installed a new %s certificate for %s (valid until %s)", self.what,
                 self.node_name, cert.not_valid_after_utc.isoformat())


def serving_rotator(api: ApiClient, node_name: str, store: PemStore,
                    context: ssl.SSLContext, *, poll_interval: float = NODE_POLL_INTERVAL,
                    check_interval: float = TEMPLATE_CHECK_INTERVAL) -> CertificateRotator:
    """The serving certificate's rotator: a pair from `store` that is still valid is the
    current one (else a certificate is asked for at once); a new pair is stored and loaded
    into the server's TLS `context`; one whose names are no longer the Node's addresses is
    renewed at once."""
    current = store.load()
    cert_pem = None
    if current is not None:
        cert = x509.load_pem_x509_certificate(current[0])
        if cert.not_valid_after_utc > dt.datetime.now(dt.UTC):
            cert_pem = current[0]

    async def template() -> list[x509.GeneralName] | None:
        while True:  # upstream's manager waits for the node's addresses too
            try:
                node = await api.get(resource_path("nodes", None, node_name))
                names = serving_names((node.get("status") or {}).get("addresses") or [])
                if names:
                    return names
            except StatusError as err:
                if err.code != 404:
                    raise
            await asyncio.sleep(poll_interval)

    async def changed(cert: x509.Certificate) -> bool:
        node = await api.get(resource_path("nodes", None, node_name))
        names = serving_names((node.get("status") or {}).get("addresses") or [])
        try:
            have = list(cert.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value)
        except x509.ExtensionNotFound:
            have = []
        return bool(names) and set(names) != set(have)

    def install(new_cert: bytes, new_key: bytes) -> None:
        context.load_cert_chain(store.update(new_cert, new_key))

    return CertificateRotator(api, node_name=node_name, what="serving",
                              signer=KUBELET_SERVING_SIGNER, usages=SERVING_USAGES,
                              template=template, install=install, current=cert_pem,
                              changed=changed, check_interval=check_interval)


def client_rotator(api: ApiClient, node_name: str, kubeconfig: Path) -> CertificateRotator:
    """The client certificate's rotator: the current one is the ApiClient's; a new pair is
    written into `kubeconfig` and handed to the ApiClient."""

    async def template() -> list[x509.GeneralName] | None:
        return []

    def install(new_cert: bytes, new_key: bytes) -> None:
        write_client_credentials(kubeconfig, new_cert, new_key)
        api.set_client_certificate(new_cert, new_key)

    return CertificateRotator(api, node_name=node_name, what="client",
                              signer=KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
                              usages=CLIENT_USAGES, template=template, install=install,
                              current=api.config.client_cert_pem)


def write_client_credentials(kubeconfig: Path, cert_pem: bytes, private_pem: bytes) -> None:
    """Put the pair into the current context's user of `kubeconfig` as
    `client-certificate-data`/`client-key-data` (file references dropped), keeping the rest
    of the file; written atomically, mode 0600."""
    doc = yaml.safe_load(kubeconfig.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{kubeconfig}: not a kubeconfig")
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or []
                if isinstance(c, dict)}
    user_name = contexts.get(doc.get("current-context"), {}).get("user")
    for entry in doc.get("users") or []:
        if isinstance(entry, dict) and entry.get("name") == user_name:
            user = entry.setdefault("user", {})
            for key in ("client-certificate", "client-key"):
                user.pop(key, None)
            user["client-certificate-data"] = base64.b64encode(cert_pem).decode()
            user["client-key-data"] = base64.b64encode(private_pem).decode()
            break
    else:
        raise ValueError(f"{kubeconfig}: the current context names no user")
    write_private(kubeconfig, yaml.safe_dump(doc, sort_keys=False).encode())

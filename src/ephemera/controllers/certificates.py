"""The certificate controllers, as upstream's `pkg/controller/certificates`:

- the approver (`csrapproving`): a CertificateSigningRequest for a kubelet client
  certificate (signer `kubernetes.io/kube-apiserver-client-kubelet`, subject
  `O=system:nodes, CN=system:node:NAME`, usages digital signature [+ key encipherment] +
  client auth, no subject alternative names) is approved with reason `AutoApproved` when
  a SubjectAccessReview says its requestor may `create` `certificatesigningrequests/
  selfnodeclient` (the node itself, renewing) or `certificatesigningrequests/nodeclient`
  (a joining node's bootstrap token), as upstream asks it (`ephemera up` binds those roles as
  kubeadm does). An apiserver that serves no SubjectAccessReviews is taken to allow both.
  Beyond upstream (which approves no serving certificate): a kubelet serving request
  (`kubernetes.io/kubelet-serving`, upstream's `ValidateKubeletServingCSR`) made by the node
  it names (`system:node:NAME` in `system:nodes`) is approved when every DNS and IP name in
  it is one of that Node's `status.addresses` (`serving_names_problem`); a Node not there yet
  (or without addresses) is looked at again (after 1 s, doubling up to a minute); any other
  serving request stays pending for an administrator.
- the signer (`csrsigning`): an approved CSR of `kubernetes.io/kube-apiserver-client-kubelet`,
  `kubernetes.io/kubelet-serving` or `kubernetes.io/kube-apiserver-client` without a
  certificate is signed with the cluster CA (`--cluster-signing-cert-file`/
  `--cluster-signing-key-file`) for `--cluster-signing-duration` (default a year; a shorter
  `spec.expirationSeconds`, at least 10 minutes, as upstream's `duration`), backdated and
  never beyond the CA (`validity`); the certificate goes to `status.certificate` through
  `/status`. It carries the request's subject and subject alternative names and the
  requested key usages and extended usages (server auth, client auth). Each signer checks
  its requests as upstream's does (`SIGNER_CHECKS`): a kubelet client request must be
  `O=system:nodes, CN=system:node:...` without subject alternative names, for digital
  signature and client auth (and key encipherment); a kubelet serving one the same subject
  with at least one DNS or IP name (no email or URI), for digital signature and server auth
  (and key encipherment); a kube-apiserver-client request for client auth and at most
  digital signature and key encipherment besides. A request that breaks its signer's rules
  gets a `Failed` condition (`SignerValidationFailure`, with upstream's message).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import ipaddress
import logging
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.api.meta import now_rfc3339
from ephemera.api.wellknown import (
    KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
    KUBE_APISERVER_CLIENT_SIGNER,
    KUBELET_SERVING_SIGNER,
    NODE_USER_PREFIX,
    NODES_GROUP,
)
from ephemera.client import ApiClient, ApiUnavailable, Informer, resource_path

__all__ = ["DEFAULT_SIGNING_DURATION", "CertificateApprover", "CertificateSigner"]

log = logging.getLogger("ephemera.controllers.certificates")

GROUP = "certificates.k8s.io"
DEFAULT_SIGNING_DURATION = dt.timedelta(days=365)
BACKDATE = dt.timedelta(minutes=5)
# upstream's `Short`: a certificate shorter than this keeps its whole lifetime after signing.
SHORT = dt.timedelta(hours=8)
# upstream's lower bound of a requested `spec.expirationSeconds` (twice the backdate).
MIN_REQUESTED_DURATION = dt.timedelta(minutes=10)
# The extended key usages a signed certificate may carry (the signer checks allow no others).
EXTENDED_USAGES = (("server auth", ExtendedKeyUsageOID.SERVER_AUTH),
                   ("client auth", ExtendedKeyUsageOID.CLIENT_AUTH))
# upstream's kubeletClientRequiredUsages and kubeletClientRequiredUsagesNoRSA.
KUBELET_CLIENT_USAGES = (frozenset({"digital signature", "key encipherment", "client auth"}),
                         frozenset({"digital signature", "client auth"}))
# upstream's kubeletServingRequiredUsages and kubeletServingRequiredUsagesNoRSA.
KUBELET_SERVING_USAGES = (frozenset({"digital signature", "key encipherment", "server auth"}),
                          frozenset({"digital signature", "server auth"}))
# What a client certificate may be for besides `client auth` (upstream's
# validAPIServerClientUsages).
OPTIONAL_CLIENT_USAGES = frozenset({"digital signature", "key encipherment"})

Obj = dict[str, Any]
# A serving CSR whose Node is not there (or has no addresses) is looked at again after 1 s,
# doubling up to a minute.
NODE_RECHECK_DELAY, NODE_RECHECK_MAX = 1.0, 60.0


def validity(now: dt.datetime, lifetime: dt.timedelta, ca_not_after: dt.datetime
             ) -> tuple[dt.datetime, dt.datetime]:
    """(notBefore, notAfter) of a certificate signed at `now` for `lifetime`, as upstream's
    `PermissiveSigningPolicy`: backdated by five minutes against clock skew; a long-lived
    certificate (8 hours or more) ends `lifetime` after its notBefore, a short-lived one
    `lifetime` after `now`; never after the CA. One choice of ephemera's: the backdate is
    at most a tenth of `lifetime` (upstream's is always five minutes, which makes a
    certificate of a few minutes due for renewal at once), so that a short
    `--cluster-signing-duration` gives certificates renewed at 70-90% of it."""
    backdate = min(BACKDATE, lifetime / 10)
    not_before = now - backdate
    not_after = now + lifetime if lifetime < SHORT else now + lifetime - backdate
    return not_before, min(not_after, ca_not_after)


def csr_path(name: str | None = None, subresource: str | None = None) -> str:
    return resource_path("certificatesigningrequests", None, name, subresource, group=GROUP)


def _conditions(csr: Obj) -> dict[str, Obj]:
    return {str(c.get("type")): c for c in (csr.get("status") or {}).get("conditions") or []
            if isinstance(c, dict) and c.get("status", "True") == "True"}


def _usages(csr: Obj) -> list[str]:
    return [str(u) for u in (csr.get("spec") or {}).get("usages") or []]


def parsed_request(csr: Obj) -> x509.CertificateSigningRequest | None:
    try:
        data = base64.b64decode((csr.get("spec") or {}).get("request") or "")
        return x509.load_pem_x509_csr(data)
    except ValueError:
        return None


def _go_list(values: set[str] | frozenset[str]) -> str:
    """Go's `%v` of a sorted []string: `[a b c]`."""
    return "[" + " ".join(sorted(values)) + "]"


def kubelet_client_problem(request: x509.CertificateSigningRequest, usages: list[str]) -> str:
    """Why a request is not a kubelet client certificate request ("" when it is), as
    upstream's `ValidateKubeletClientCSR` words it: the subject is exactly
    `O=system:nodes` with a common name `system:node:...`, no subject alternative names, and
    the usages digital signature and client auth, with or without key encipherment."""
    orgs = [str(a.value) for a in
            request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if orgs != [NODES_GROUP]:
        return "subject organization is not system:nodes"
    names = _alt_names(request)
    for kind, label in ((x509.DNSName, "DNS"), (x509.RFC822Name, "Email"),
                        (x509.IPAddress, "IP"), (x509.UniformResourceIdentifier, "URI")):
        if names.get_values_for_type(kind):
            return f"{label} subjectAltNames are not allowed"
    if not _common_name(request).startswith(NODE_USER_PREFIX):
        return f"subject common name does not begin with {NODE_USER_PREFIX}"
    if frozenset(usages) not in KUBELET_CLIENT_USAGES:
        return f"usages did not match {_go_list(KUBELET_CLIENT_USAGES[0])}"
    return ""


def kubelet_serving_problem(request: x509.CertificateSigningRequest, usages: list[str]
                            ) -> str:
    """Why a request is not a kubelet serving certificate request ("" when it is), as
    upstream's `ValidateKubeletServingCSR` words it: the organization exactly
    `system:nodes`, at least one DNS or IP subject alternative name and no email or URI
    ones, the usages digital signature and server auth (with or without key encipherment),
    a common name `system:node:...`."""
    orgs = [str(a.value) for a in
            request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if orgs != [NODES_GROUP]:
        return "subject organization is not system:nodes"
    names = _alt_names(request)
    if not names.get_values_for_type(x509.DNSName) and \
            not names.get_values_for_type(x509.IPAddress):
        return "DNS or IP subjectAltName is required"
    if names.get_values_for_type(x509.RFC822Name):
        return "Email subjectAltNames are not allowed"
    if names.get_values_for_type(x509.UniformResourceIdentifier):
        return "URI subjectAltNames are not allowed"
    if frozenset(usages) not in KUBELET_SERVING_USAGES:
        return f"usages did not match {_go_list(KUBELET_SERVING_USAGES[0])}"
    if not _common_name(request).startswith(NODE_USER_PREFIX):
        return f"subject common name does not begin with {NODE_USER_PREFIX}"
    return ""


def _alt_names(request: x509.CertificateSigningRequest) -> x509.SubjectAlternativeName:
    try:
        return request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return x509.SubjectAlternativeName([])


def _common_name(request: x509.CertificateSigningRequest) -> str:
    cns = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(cns[-1].value) if cns else ""  # Go keeps the last CN


# The Node address types that name a node by DNS name, and by IP (upstream's kubelet asks
# for exactly these in its serving certificate: `addressesToHostnamesAndIPs`).
DNS_ADDRESS_TYPES = frozenset({"Hostname", "InternalDNS", "ExternalDNS"})
IP_ADDRESS_TYPES = frozenset({"InternalIP", "ExternalIP"})


def serving_names_problem(request: x509.CertificateSigningRequest, node: Obj) -> str:
    """Why the subject alternative names of a kubelet serving request are not all the
    node's own ("" when they are): every DNS name must be one of the Node's
    `status.addresses` of type Hostname, InternalDNS or ExternalDNS, every IP one of type
    InternalIP or ExternalIP (ephemera's approval rule; upstream approves no serving CSR)."""
    dns: set[str] = set()
    ips: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for address in (node.get("status") or {}).get("addresses") or []:
        if not isinstance(address, dict) or not address.get("address"):
            continue
        value = str(address["address"])
        if address.get("type") in DNS_ADDRESS_TYPES:
            dns.add(value.lower())
        elif address.get("type") in IP_ADDRESS_TYPES:
            with contextlib.suppress(ValueError):
                ips.add(ipaddress.ip_address(value))
    names = _alt_names(request)
    for name in names.get_values_for_type(x509.DNSName):
        if name.lower() not in dns:
            return f"DNS name {name} is not an address of node {_node_of(node)}"
    for ip in names.get_values_for_type(x509.IPAddress):
        if ip not in ips:
            return f"IP address {ip} is not an address of node {_node_of(node)}"
    return ""


def _node_of(node: Obj) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def apiserver_client_problem(request: x509.CertificateSigningRequest, usages: list[str]
                             ) -> str:
    """upstream's `validAPIServerClientUsages`: client auth, and besides it only digital
    signature and key encipherment."""
    for usage in usages:
        if usage not in OPTIONAL_CLIENT_USAGES and usage != "client auth":
            return f"invalid usage for client certificate: {usage}"
    if "client auth" not in usages:
        return "missing required usage for client certificate: client auth"
    return ""


# The signers this controller signs for, with upstream's check of each one's requests.
SIGNER_CHECKS = {KUBE_APISERVER_CLIENT_KUBELET_SIGNER: kubelet_client_problem,
                 KUBELET_SERVING_SIGNER: kubelet_serving_problem,
                 KUBE_APISERVER_CLIENT_SIGNER: apiserver_client_problem}


class _CsrController:
    name = "csr"

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.informer = Informer(api, csr_path(), name="certificatesigningrequests")
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self.informer.add_handler(on_add=self._enqueue,
                                  on_update=lambda old, new: self._enqueue(new))

    def _enqueue(self, csr: Obj) -> None:
        self._queue.put_nowait(str((csr.get("metadata") or {}).get("name") or ""))

    def _later(self, name: str, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self._queue.put_nowait, name)

    async def sync(self, name: str) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        task = asyncio.create_task(self.informer.run(), name=f"{self.name}-informer")
        try:
            await self.informer.wait_synced()
            while True:
                name = await self._queue.get()
                try:
                    await self.sync(name)
                except (StatusError, ApiUnavailable) as err:
                    if isinstance(err, StatusError) and err.code in (404, 409):
                        continue  # gone, or changed: the informer brings the new version
                    log.warning("%s %s: %s; retrying", self.name, name,
                                getattr(err, "message", err))
                    await asyncio.sleep(1.0)
                    self._queue.put_nowait(name)
        finally:
            await cancel_and_wait(task)


class CertificateApprover(_CsrController):
    name = "csrapproving"

    def __init__(self, api: ApiClient) -> None:
        super().__init__(api)
        self._waiting: dict[str, float] = {}  # serving CSR -> its last recheck delay

    async def sync(self, name: str) -> None:
        csr = self.informer.get(name)
        if csr is None:
            return
        conditions = _conditions(csr)
        if "Approved" in conditions or "Denied" in conditions:
            return
        signer = (csr.get("spec") or {}).get("signerName")
        if signer == KUBE_APISERVER_CLIENT_KUBELET_SIGNER:
            await self.sync_client(name, csr)
        elif signer == KUBELET_SERVING_SIGNER:
            await self.sync_serving(name, csr)

    async def sync_client(self, name: str, csr: Obj) -> None:
        spec = csr.get("spec") or {}
        request = parsed_request(csr)
        if request is None or kubelet_client_problem(request, _usages(csr)):
            return
        cn = _common_name(request)
        self_node = spec.get("username") == cn
        if not (self_node and await self.authorized(spec, "selfnodeclient")):
            self_node = False
            if not await self.authorized(spec, "nodeclient"):
                return
        await self.approve(name, csr, "Auto approving kubelet client certificate after "
                                      "SubjectAccessReview.")
        log.info("approved certificatesigningrequest %s (%s for %s)", name,
                 "selfnodeclient" if self_node else "nodeclient", cn)

    async def sync_serving(self, name: str, csr: Obj) -> None:
        """ephemera's rule (upstream leaves kubelet serving CSRs to an administrator or an
        external approver): approve a valid kubelet serving request that the node itself
        made (requestor `system:node:NAME` in `system:nodes`, the request's common name)
        when its DNS and IP names are all addresses of that Node. A request for another
        node's or a foreign name stays pending (`kubectl certificate approve|deny`)."""
        spec = csr.get("spec") or {}
        request = parsed_request(csr)
        if request is None or kubelet_serving_problem(request, _usages(csr)):
            return
        cn = _common_name(request)
        if spec.get("username") != cn or NODES_GROUP not in (spec.get("groups") or []):
            log.info("certificatesigningrequest %s: a kubelet serving request not made by "
                     "%s itself; leaving it to an administrator", name, cn)
            return
        node_name = cn[len(NODE_USER_PREFIX):]
        try:
            node = await self.api.get(resource_path("nodes", None, node_name))
        except StatusError as err:
            if err.code != 404:
                raise
            node = None
        if node is None or not (node.get("status") or {}).get("addresses"):
            # The kubelet asks once its Node reports addresses; look again shortly.
            delay = self._waiting.get(name, NODE_RECHECK_DELAY / 2) * 2
            self._waiting[name] = min(delay, NODE_RECHECK_MAX)
            self._later(name, self._waiting[name])
            return
        self._waiting.pop(name, None)
        problem = serving_names_problem(request, node)
        if problem:
            log.warning("certificatesigningrequest %s: %s; leaving it to an administrator",
                        name, problem)
            return
        await self.approve(name, csr, "Auto approving kubelet serving certificate after "
                                      "checking its names against the Node's addresses.")
        log.info("approved certificatesigningrequest %s (kubelet serving for %s)", name,
                 node_name)

    async def approve(self, name: str, csr: Obj, message: str) -> None:
        now = now_rfc3339()
        csr = dict(csr)
        status = dict(csr.get("status") or {})
        status["conditions"] = [*(status.get("conditions") or []), {
            "type": "Approved", "status": "True", "reason": "AutoApproved",
            "message": message, "lastUpdateTime": now, "lastTransitionTime": now}]
        csr["status"] = status
        await self.api.update(csr_path(name, "approval"), csr)

    async def authorized(self, spec: Obj, subresource: str) -> bool:
        """upstream's `authorize`: a SubjectAccessReview for the requestor."""
        review = {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": spec.get("username", ""), "uid": spec.get("uid", ""),
                     "groups": spec.get("groups") or [], "extra": spec.get("extra") or {},
                     "resourceAttributes": {"group": GROUP, "verb": "create",
                                            "resource": "certificatesigningrequests",
                                            "subresource": subresource}}}
        try:
            answer = await self.api.create(resource_path(
                "subjectaccessreviews", group="authorization.k8s.io"), review)
        except StatusError as err:
            if err.code == 404:
                return True  # no authorization: everything is allowed
            raise
        return bool((answer.get("status") or {}).get("allowed"))


class CertificateSigner(_CsrController):
    name = "csrsigning"

    def __init__(self, api: ApiClient, ca_cert_file: Path, ca_key_file: Path, *,
                 duration: dt.timedelta = DEFAULT_SIGNING_DURATION) -> None:
        super().__init__(api)
        self.ca_cert = x509.load_pem_x509_certificate(ca_cert_file.read_bytes())
        key = serialization.load_pem_private_key(ca_key_file.read_bytes(), password=None)
        if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
            raise ValueError(f"{ca_key_file}: not an ECDSA or RSA private key")
        self.ca_key = key
        self.duration = duration

    def lifetime(self, csr: Obj) -> dt.timedelta:
        """upstream's `duration`: `spec.expirationSeconds` when shorter than
        `--cluster-signing-duration`, but at least ten minutes; else that duration."""
        seconds = (csr.get("spec") or {}).get("expirationSeconds")
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            return self.duration
        return max(min(dt.timedelta(seconds=seconds), self.duration), MIN_REQUESTED_DURATION)

    def sign(self, csr: Obj, request: x509.CertificateSigningRequest) -> bytes:
        """A certificate for a request its signer's check passed: the request's subject and
        subject alternative names, key usages as requested (digital signature, key
        encipherment), extended usages client auth and/or server auth as requested (the
        checks allow no others); validity as `validity` says."""
        usages = set(_usages(csr))
        not_before, not_after = validity(dt.datetime.now(dt.UTC), self.lifetime(csr),
                                         self.ca_cert.not_valid_after_utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(request.subject)
            .issuer_name(self.ca_cert.subject)
            .public_key(request.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature="digital signature" in usages, content_commitment=False,
                key_encipherment="key encipherment" in usages, data_encipherment=False,
                key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.ca_key.public_key()), critical=False)
        )
        extended = [oid for usage, oid in EXTENDED_USAGES if usage in usages]
        if extended:
            builder = builder.add_extension(x509.ExtendedKeyUsage(extended), critical=False)
        names = _alt_names(request)
        if len(names):
            builder = builder.add_extension(names, critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM)

    async def sync(self, name: str) -> None:
        csr = self.informer.get(name)
        if csr is None:
            return
        conditions = _conditions(csr)
        if "Approved" not in conditions or "Denied" in conditions or "Failed" in conditions:
            return
        if (csr.get("status") or {}).get("certificate"):
            return
        check = SIGNER_CHECKS.get(str((csr.get("spec") or {}).get("signerName") or ""))
        if check is None:
            return
        request = parsed_request(csr)
        problem = ("the request is not a valid PEM certificate request" if request is None
                   else check(request, _usages(csr)))
        status = dict(csr.get("status") or {})
        if problem or request is None:
            now = now_rfc3339()
            status["conditions"] = [*(status.get("conditions") or []), {
                "type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                "message": problem, "lastUpdateTime": now, "lastTransitionTime": now}]
            log.info("certificatesigningrequest %s failed validation: %s", name, problem)
        else:
            status["certificate"] = base64.b64encode(self.sign(csr, request)).decode()
            log.info("signed certificatesigningrequest %s (%s)", name,
                     csr["spec"]["signerName"])
        await self.api.update(csr_path(name, "status"), {**csr, "status": status})

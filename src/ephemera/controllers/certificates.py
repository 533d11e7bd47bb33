"""The certificate controllers, as upstream's `pkg/controller/certificates`:

- the approver (`csrapproving`): a CertificateSigningRequest for a kubelet client
  certificate (signer `kubernetes.io/kube-apiserver-client-kubelet`, subject
  `O=system:nodes, CN=system:node:NAME`, usages digital signature [+ key encipherment] +
  client auth, no subject alternative names) is approved with reason `AutoApproved` when
  a SubjectAccessReview says its requestor may `create` `certificatesigningrequests/
  selfnodeclient` (the node itself, renewing) or `certificatesigningrequests/nodeclient`
  (a joining node's bootstrap token), as upstream asks it (`ephemera up` binds those roles as
  kubeadm does). An apiserver that serves no SubjectAccessReviews is taken to allow both.
- the signer (`csrsigning`): an approved CSR of `kubernetes.io/kube-apiserver-client-kubelet`
  or `kubernetes.io/kube-apiserver-client` without a certificate is signed with the cluster
  CA (`--cluster-signing-cert-file`/`--cluster-signing-key-file`), valid from five minutes
  ago for `spec.expirationSeconds` (default `--cluster-signing-duration`, one year) and never
  beyond the CA; the certificate goes to `status.certificate` through `/status`. Each signer
  checks its requests as upstream's does (`SIGNER_CHECKS`): a kubelet client request must be
  `O=system:nodes, CN=system:node:...` without subject alternative names, for digital
  signature and client auth (and key encipherment); a kube-apiserver-client request for
  client auth and at most digital signature and key encipherment besides. A request that
  breaks its signer's rules gets a `Failed` condition (`SignerValidationFailure`, with
  upstream's message); a certificate from here is only ever for client auth.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ephemera.api.errors import StatusError
from ephemera.api.meta import now_rfc3339
from ephemera.api.wellknown import (
    KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
    KUBE_APISERVER_CLIENT_SIGNER,
    NODE_USER_PREFIX,
    NODES_GROUP,
)
from ephemera.client import ApiClient, ApiUnavailable, Informer, resource_path

__all__ = ["DEFAULT_SIGNING_DURATION", "CertificateApprover", "CertificateSigner"]

log = logging.getLogger("ephemera.controllers.certificates")

GROUP = "certificates.k8s.io"
DEFAULT_SIGNING_DURATION = dt.timedelta(days=365)
BACKDATE = dt.timedelta(minutes=5)
# upstream's kubeletClientRequiredUsages and kubeletClientRequiredUsagesNoRSA.
KUBELET_CLIENT_USAGES = (frozenset({"digital signature", "key encipherment", "client auth"}),
                         frozenset({"digital signature", "client auth"}))
# What a client certificate may be for besides `client auth` (upstream's
# validAPIServerClientUsages).
OPTIONAL_CLIENT_USAGES = frozenset({"digital signature", "key encipherment"})

Obj = dict[str, Any]


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
    try:
        names = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        names = x509.SubjectAlternativeName([])
    for kind, label in ((x509.DNSName, "DNS"), (x509.RFC822Name, "Email"),
                        (x509.IPAddress, "IP"), (x509.UniformResourceIdentifier, "URI")):
        if names.get_values_for_type(kind):
            return f"{label} subjectAltNames are not allowed"
    cns = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    common_name = str(cns[-1].value) if cns else ""  # Go keeps the last CN
    if not common_name.startswith(NODE_USER_PREFIX):
        return f"subject common name does not begin with {NODE_USER_PREFIX}"
    if frozenset(usages) not in KUBELET_CLIENT_USAGES:
        return f"usages did not match {_go_list(KUBELET_CLIENT_USAGES[0])}"
    return ""


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
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class CertificateApprover(_CsrController):
    name = "csrapproving"

    async def sync(self, name: str) -> None:
        csr = self.informer.get(name)
        if csr is None:
            return
        conditions = _conditions(csr)
        if "Approved" in conditions or "Denied" in conditions:
            return
        spec = csr.get("spec") or {}
        if spec.get("signerName") != KUBE_APISERVER_CLIENT_KUBELET_SIGNER:
            return
        request = parsed_request(csr)
        if request is None or kubelet_client_problem(request, _usages(csr)):
            return
        cn = str(request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
        self_node = spec.get("username") == cn
        if not (self_node and await self.authorized(spec, "selfnodeclient")):
            self_node = False
            if not await self.authorized(spec, "nodeclient"):
                return
        now = now_rfc3339()
        csr = dict(csr)
        status = dict(csr.get("status") or {})
        status["conditions"] = [*(status.get("conditions") or []), {
            "type": "Approved", "status": "True", "reason": "AutoApproved",
            "message": "Auto approving kubelet client certificate after SubjectAccessReview.",
            "lastUpdateTime": now, "lastTransitionTime": now}]
        csr["status"] = status
        await self.api.update(csr_path(name, "approval"), csr)
        log.info("approved certificatesigningrequest %s (%s for %s)", name,
                 "selfnodeclient" if self_node else "nodeclient", cn)


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

    def sign(self, csr: Obj, request: x509.CertificateSigningRequest) -> bytes:
        """A client certificate for a request its signer's check passed: key usages as
        requested (digital signature, key encipherment), extended usage client auth only,
        whatever else the request might name."""
        spec = csr.get("spec") or {}
        usages = set(_usages(csr))
        now = dt.datetime.now(dt.UTC)
        seconds = spec.get("expirationSeconds")
        lifetime = dt.timedelta(seconds=int(seconds)) if seconds else self.duration
        not_after = min(now + lifetime, self.ca_cert.not_valid_after_utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(request.subject)
            .issuer_name(self.ca_cert.subject)
            .public_key(request.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
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
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
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

"""The certificate admission plugins (upstream's `plugin/pkg/admission/certificates`), all
validating, all on `certificatesigningrequests` (certificates.k8s.io):

- `CertificateApproval`: an update of `/approval` needs the verb `approve` on the `signers`
  resource named by the stored object's `spec.signerName`, or by its domain with `/*`
  (`kubernetes.io/*`; upstream's `IsAuthorizedForSignerName`); otherwise 403
  `user not permitted to approve requests with signerName "<signer>"`.
- `CertificateSigning`: an update of `/status` that changes `status.certificate` or
  `status.conditions` needs `sign` on the signer the same way; otherwise 403
  `user not permitted to sign requests with signerName "<signer>"`.
- `CertificateSubjectRestriction`: a create for `kubernetes.io/kube-apiserver-client` whose
  request has the organization `system:masters` is 403 `use of
  kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed`.

The first two ask the apiserver's authorizer (handed over by the app through
`AdmissionChain.set_authorizer`, upstream's `WantsAuthorizer`) about the request's user
(`system:anonymous` without one, as authorization sees such a request).
"""

from __future__ import annotations

from typing import Any

from cryptography.x509.oid import NameOID

from ephemera.api.wellknown import KUBE_APISERVER_CLIENT_SIGNER, MASTERS_GROUP
from ephemera.apiserver import csr
from ephemera.apiserver.admission import AdmissionPluginBase, AdmissionRequest
from ephemera.apiserver.authz import Attributes, Authorizer, Decision, requester

GROUP = "certificates.k8s.io"
CSRS = "certificatesigningrequests"


def _signer_name(obj: dict[str, Any] | None) -> str:
    return str(((obj or {}).get("spec") or {}).get("signerName") or "")


def _is_csr(req: AdmissionRequest, subresource: str) -> bool:
    return req.is_resource(GROUP, CSRS) and req.subresource == subresource


class _SignerAuthorization(AdmissionPluginBase):
    """A plugin that asks the authorizer whether the user may `verb` a signer."""

    verb = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.authorizer: Authorizer | None = None

    def set_authorizer(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    async def authorized_for_signer(self, req: AdmissionRequest, signer: str) -> bool:
        """upstream's `IsAuthorizedForSignerName`: the signer's name, then `<domain>/*`."""
        if self.authorizer is None:
            raise RuntimeError(f"{self.name} requires an authorizer")
        user = requester(req.user)
        for name in (signer, signer.split("/", 1)[0] + "/*"):
            attributes = Attributes(user=user, verb=self.verb, api_group=GROUP,
                                    api_version="*", resource="signers", name=name)
            decision, _ = await self.authorizer.authorize(attributes)
            if decision is Decision.ALLOW:
                return True
        return False

    async def check(self, req: AdmissionRequest) -> None:
        signer = _signer_name(req.old)  # the stored one: the request may not change it
        if not await self.authorized_for_signer(req, signer):
            raise req.forbidden(f"user not permitted to {self.verb} requests with signerName "
                                f'"{signer}"')


class CertificateApproval(_SignerAuthorization):
    name = "CertificateApproval"
    verb = "approve"

    def handles(self, req: AdmissionRequest) -> bool:
        return req.operation == "UPDATE" and _is_csr(req, "approval")

    async def validate(self, req: AdmissionRequest) -> None:
        await self.check(req)


class CertificateSigning(_SignerAuthorization):
    name = "CertificateSigning"
    verb = "sign"

    def handles(self, req: AdmissionRequest) -> bool:
        return req.operation == "UPDATE" and _is_csr(req, "status")

    async def validate(self, req: AdmissionRequest) -> None:
        new = (req.obj or {}).get("status") or {}
        old = (req.old or {}).get("status") or {}
        if (new.get("certificate") == old.get("certificate")
                and (new.get("conditions") or []) == (old.get("conditions") or [])):
            return
        await self.check(req)


class CertificateSubjectRestriction(AdmissionPluginBase):
    name = "CertificateSubjectRestriction"

    def handles(self, req: AdmissionRequest) -> bool:
        return req.operation == "CREATE" and _is_csr(req, "")

    async def validate(self, req: AdmissionRequest) -> None:
        if _signer_name(req.obj) != KUBE_APISERVER_CLIENT_SIGNER:
            return
        try:
            request = csr.parse_request(csr.request_bytes(req.obj or {}))
        except ValueError as err:
            raise req.forbidden(f"failed to parse CSR: {err}") from None
        organizations = request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        if any(str(o.value) == MASTERS_GROUP for o in organizations):
            raise req.forbidden(f"use of {KUBE_APISERVER_CLIENT_SIGNER} signer with "
                                f"{MASTERS_GROUP} group is not allowed")

"""The rules behind certificate signing: each signer's check of a request (upstream's
`ValidateKubeletClientCSR` and `validAPIServerClientUsages`, with their messages), and what
the CertificateApproval and CertificateSigning plugins ask the authorizer
(`IsAuthorizedForSignerName`)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ephemera.api.errors import StatusError
from ephemera.apiserver.admission import AdmissionRequest
from ephemera.apiserver.admission.certificates import CertificateApproval, CertificateSigning
from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz import Attributes, Decision
from ephemera.apiserver.resources import lookup
from ephemera.controllers.certificates import apiserver_client_problem, kubelet_client_problem

KUBELET_USAGES = ["digital signature", "client auth"]


def request(organizations: Sequence[str] = ("system:nodes",),
            common_name: str = "system:node:n1",
            san: Sequence[x509.GeneralName] = ()) -> x509.CertificateSigningRequest:
    subject = x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o)
                           for o in organizations),
                         x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(san)), critical=False)
    return builder.sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256())


@pytest.mark.parametrize(("csr", "usages", "problem"), [
    (request(), KUBELET_USAGES, ""),
    (request(), ["key encipherment", "digital signature", "client auth"], ""),
    (request(), ["client auth"], "usages did not match "
     "[client auth digital signature key encipherment]"),
    (request(), [*KUBELET_USAGES, "server auth"], "usages did not match "
     "[client auth digital signature key encipherment]"),
    (request(()), KUBELET_USAGES, "subject organization is not system:nodes"),
    (request(("system:nodes", "system:masters")), KUBELET_USAGES,
     "subject organization is not system:nodes"),
    (request(common_name="node-1"), KUBELET_USAGES,
     "subject common name does not begin with system:node:"),
    (request(san=[x509.DNSName("n1")]), KUBELET_USAGES, "DNS subjectAltNames are not allowed"),
    (request(san=[x509.RFC822Name("n@example.com")]), KUBELET_USAGES,
     "Email subjectAltNames are not allowed"),
    (request(san=[x509.IPAddress(ipaddress.ip_address("10.0.0.1"))]), KUBELET_USAGES,
     "IP subjectAltNames are not allowed"),
    (request(san=[x509.UniformResourceIdentifier("spiffe://x")]), KUBELET_USAGES,
     "URI subjectAltNames are not allowed"),
])
def test_kubelet_client_requests(csr: x509.CertificateSigningRequest, usages: list[str],
                                 problem: str) -> None:
    assert kubelet_client_problem(csr, usages) == problem


@pytest.mark.parametrize(("usages", "problem"), [
    (["client auth"], ""),
    (["digital signature", "key encipherment", "client auth"], ""),
    (["client auth", "server auth"], "invalid usage for client certificate: server auth"),
    (["code signing", "client auth"], "invalid usage for client certificate: code signing"),
    (["digital signature"], "missing required usage for client certificate: client auth"),
])
def test_kube_apiserver_client_requests(usages: list[str], problem: str) -> None:
    assert apiserver_client_problem(request(("team",), "jane"), usages) == problem


class Recorder:
    """An authorizer that allows `allowed` names and remembers what it was asked."""

    def __init__(self, *allowed: str) -> None:
        self.allowed = allowed
        self.asked: list[Attributes] = []

    async def authorize(self, attributes: Attributes) -> tuple[Decision, str]:
        self.asked.append(attributes)
        if attributes.name in self.allowed:
            return Decision.ALLOW, ""
        return Decision.NO_OPINION, ""


def update(subresource: str, old_status: dict[str, object], new_status: dict[str, object],
           user: UserInfo | None) -> AdmissionRequest:
    resource = lookup("certificates.k8s.io", "v1", "certificatesigningrequests")
    assert resource is not None
    spec = {"signerName": "example.com/team-signer"}
    return AdmissionRequest("UPDATE", resource, subresource, "", "c",
                            {"metadata": {"name": "c"}, "spec": spec, "status": new_status},
                            {"metadata": {"name": "c"}, "spec": spec, "status": old_status},
                            user, False)


async def test_the_signer_then_its_domain_is_asked() -> None:
    plugin = CertificateApproval()
    authorizer = Recorder("example.com/*")
    plugin.set_authorizer(authorizer)
    jane = UserInfo("jane", ("system:authenticated",))
    req = update("approval", {}, {"conditions": [{"type": "Approved"}]}, jane)
    assert plugin.handles(req)
    await plugin.validate(req)
    assert authorizer.asked == [
        Attributes(user=jane, verb="approve", api_group="certificates.k8s.io",
                   api_version="*", resource="signers", name=name)
        for name in ("example.com/team-signer", "example.com/*")]


async def test_signing_is_asked_only_when_the_certificate_or_conditions_change() -> None:
    plugin = CertificateSigning()
    authorizer = Recorder()
    plugin.set_authorizer(authorizer)
    same = {"conditions": [{"type": "Approved"}]}
    await plugin.validate(update("status", same, dict(same), None))
    assert authorizer.asked == []
    with pytest.raises(StatusError) as raised:
        await plugin.validate(update("status", same, {**same, "certificate": "Y2VydA=="},
                                     None))
    assert raised.value.code == 403
    assert [a.user.name for a in authorizer.asked] == ["system:anonymous"] * 2

"""The rules behind certificate signing: each signer's check of a request (upstream's
`ValidateKubeletClientCSR`, `ValidateKubeletServingCSR` and `validAPIServerClientUsages`,
with their messages), ephemera's check of a serving request's names against its Node's
addresses, the validity of a signed certificate (upstream's backdate and short-lived rule,
`duration`), and what
the CertificateApproval and CertificateSigning plugins ask the authorizer
(`IsAuthorizedForSignerName`)."""

from __future__ import annotations

import datetime as dt
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
from ephemera.controllers.certificates import (
    DEFAULT_SIGNING_DURATION,
    CertificateSigner,
    apiserver_client_problem,
    kubelet_client_problem,
    kubelet_serving_problem,
    serving_names_problem,
    validity,
)

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


SERVING_USAGES = ["digital signature", "server auth"]
LOOPBACK = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
SERVING_MISMATCH = "usages did not match [digital signature key encipherment server auth]"


@pytest.mark.parametrize(("csr", "usages", "problem"), [
    (request(san=[x509.DNSName("n1"), LOOPBACK]), SERVING_USAGES, ""),
    (request(san=[LOOPBACK]), ["key encipherment", *SERVING_USAGES], ""),
    (request(san=[x509.DNSName("n1")]), ["server auth"], SERVING_MISMATCH),
    (request(san=[x509.DNSName("n1")]), [*SERVING_USAGES, "client auth"], SERVING_MISMATCH),
    (request(), SERVING_USAGES, "DNS or IP subjectAltName is required"),
    (request(san=[x509.DNSName("n1"), x509.RFC822Name("n@example.com")]), SERVING_USAGES,
     "Email subjectAltNames are not allowed"),
    (request(san=[LOOPBACK, x509.UniformResourceIdentifier("spiffe://x")]), SERVING_USAGES,
     "URI subjectAltNames are not allowed"),
    (request(("system:nodes", "team"), san=[LOOPBACK]), SERVING_USAGES,
     "subject organization is not system:nodes"),
    (request(common_name="n1", san=[LOOPBACK]), SERVING_USAGES,
     "subject common name does not begin with system:node:"),
])
def test_kubelet_serving_requests(csr: x509.CertificateSigningRequest, usages: list[str],
                                  problem: str) -> None:
    assert kubelet_serving_problem(csr, usages) == problem


NODE = {"metadata": {"name": "n1"}, "status": {"addresses": [
    {"type": "InternalIP", "address": "127.0.0.1"},
    {"type": "ExternalIP", "address": "fd00::1"},
    {"type": "Hostname", "address": "n1"},
    {"type": "InternalDNS", "address": "n1.example.internal"}]}}


@pytest.mark.parametrize(("san", "problem"), [
    ([x509.DNSName("n1"), LOOPBACK], ""),
    ([x509.DNSName("N1.example.internal"),
      x509.IPAddress(ipaddress.ip_address("fd00:0::1"))], ""),
    ([x509.DNSName("n2")], "DNS name n2 is not an address of node n1"),
    ([x509.DNSName("127.0.0.1")], "DNS name 127.0.0.1 is not an address of node n1"),
    ([LOOPBACK, x509.IPAddress(ipaddress.ip_address("10.0.0.9"))],
     "IP address 10.0.0.9 is not an address of node n1"),
    # a Hostname address does not make an IP SAN of the same text
    ([x509.IPAddress(ipaddress.ip_address("10.0.0.1"))],
     "IP address 10.0.0.1 is not an address of node n1"),
])
def test_serving_names_must_be_the_nodes_addresses(san: list[x509.GeneralName],
                                                   problem: str) -> None:
    node = {**NODE, "status": {"addresses": [*NODE["status"]["addresses"],  # type: ignore
                                             {"type": "Hostname", "address": "10.0.0.1"}]}}
    assert serving_names_problem(request(san=san), node) == problem


def test_a_node_without_addresses_has_no_serving_names() -> None:
    assert serving_names_problem(request(san=[LOOPBACK]), {"metadata": {"name": "n1"}}) == \
        "IP address 127.0.0.1 is not an address of node n1"


NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
FAR = NOW + dt.timedelta(days=3650)


@pytest.mark.parametrize(("lifetime", "not_before", "not_after"), [
    # long-lived: backdated five minutes at both ends (upstream)
    (dt.timedelta(days=365), NOW - dt.timedelta(minutes=5),
     NOW + dt.timedelta(days=365, minutes=-5)),
    (dt.timedelta(hours=8), NOW - dt.timedelta(minutes=5),
     NOW + dt.timedelta(hours=8, minutes=-5)),
    # short-lived: the whole lifetime after signing (upstream)
    (dt.timedelta(hours=1), NOW - dt.timedelta(minutes=5), NOW + dt.timedelta(hours=1)),
    # very short: ephemera backdates by at most a tenth of the lifetime
    (dt.timedelta(seconds=30), NOW - dt.timedelta(seconds=3), NOW + dt.timedelta(seconds=30)),
])
def test_validity_of_a_signed_certificate(lifetime: dt.timedelta, not_before: dt.datetime,
                                          not_after: dt.datetime) -> None:
    assert validity(NOW, lifetime, FAR) == (not_before, not_after)


def test_validity_never_outlasts_the_ca() -> None:
    ca_end = NOW + dt.timedelta(days=30)
    assert validity(NOW, dt.timedelta(days=365), ca_end)[1] == ca_end


@pytest.mark.parametrize(("seconds", "expected"), [
    (None, DEFAULT_SIGNING_DURATION),
    (3600, dt.timedelta(hours=1)),
    (600, dt.timedelta(minutes=10)),
    (60, dt.timedelta(minutes=10)),  # upstream's lower bound
    (10 * 365 * 86400, DEFAULT_SIGNING_DURATION),  # never beyond the flag
])
def test_requested_lifetime(seconds: int | None, expected: dt.timedelta) -> None:
    signer = CertificateSigner.__new__(CertificateSigner)
    signer.duration = DEFAULT_SIGNING_DURATION
    spec = {} if seconds is None else {"expirationSeconds": seconds}
    assert signer.lifetime({"spec": spec}) == expected


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

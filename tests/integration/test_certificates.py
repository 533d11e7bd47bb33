"""CertificateSigningRequests behind RBAC (the in-process apiserver on sqlite, bearer-token
users): the CertificateApproval, CertificateSigning and CertificateSubjectRestriction admission
plugins with upstream's messages, and the signer controller (`csrsigning`, over HTTP as
`system:kube-controller-manager`) checking each signer's requests as upstream does."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Users, eventually, serve_users
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.certs import CONTROLLER_MANAGER_USER, create_ca
from ephemera.client import ApiClient, ClientConfig
from ephemera.controllers.certificates import CertificateSigner
from ephemera.store import open_store

AUTHENTICATED = "system:authenticated"
TOKENS = {
    "admin": UserInfo("kubernetes-admin", ("system:masters", AUTHENTICATED)),
    "jane": UserInfo("jane", (AUTHENTICATED,)),
    "kcm": UserInfo(CONTROLLER_MANAGER_USER, (AUTHENTICATED,)),
}
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
CLIENT = "kubernetes.io/kube-apiserver-client"
KUBELET_CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"


@pytest.fixture
async def users(tmp_path: Path) -> AsyncIterator[Users]:
    async for served in serve_users(open_store("sqlite", data_dir=tmp_path / "data"), TOKENS):
        yield served


def pem_request(organizations: Sequence[str], common_name: str,
                san: Sequence[x509.GeneralName] = ()) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o)
                           for o in organizations),
                         x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(san)), critical=False)
    request = builder.sign(key, hashes.SHA256())
    return base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode()


def csr(name: str, signer: str, usages: Sequence[str], organizations: Sequence[str] = (),
        common_name: str = "someone", san: Sequence[x509.GeneralName] = ()
        ) -> dict[str, Any]:
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": pem_request(organizations, common_name, san),
                     "signerName": signer, "usages": list(usages)}}


def approved(obj: dict[str, Any]) -> dict[str, Any]:
    obj["status"] = {"conditions": [{"type": "Approved", "status": "True",
                                     "reason": "Test", "message": "approved by the test"}]}
    return obj


async def grant(users: Users, name: str, rules: list[dict[str, Any]]) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules}
    status, body = await users.call("admin", "POST", f"{RBAC}/clusterroles", role)
    assert status == 201, body
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": name},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": "jane"}]}
    status, body = await users.call("admin", "POST", f"{RBAC}/clusterrolebindings", binding)
    assert status == 201, body


def csr_rule(verbs: list[str], resources: list[str]) -> dict[str, Any]:
    return {"apiGroups": ["certificates.k8s.io"], "resources": resources, "verbs": verbs}


def signer_rule(verb: str, names: list[str]) -> dict[str, Any]:
    return {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": [verb],
            "resourceNames": names}


async def test_approving_needs_approve_on_the_signer_or_its_domain(users: Users) -> None:
    status, created = await users.call("admin", "POST", CSRS, csr("c1", CLIENT,
                                                                  ["client auth"]))
    assert status == 201, created
    await grant(users, "csr-approver", [csr_rule(["get", "update"],
                                                 ["certificatesigningrequests/approval"])])
    status, body = await users.call("jane", "PUT", f"{CSRS}/c1/approval", approved(created))
    assert (status, body["message"]) == (403, (
        'certificatesigningrequests.certificates.k8s.io "c1" is forbidden: user not permitted '
        'to approve requests with signerName "kubernetes.io/kube-apiserver-client"'))
    # `approve` on another signer is no help; on the signer's domain (`kubernetes.io/*`) it is
    await grant(users, "approve-other", [signer_rule("approve", ["example.com/*", CLIENT + "x"])])
    status, _ = await users.call("jane", "PUT", f"{CSRS}/c1/approval", approved(created))
    assert status == 403
    await grant(users, "approve-domain", [signer_rule("approve", ["kubernetes.io/*"])])
    status, body = await users.call("jane", "PUT", f"{CSRS}/c1/approval", approved(created))
    assert status == 200, body
    assert body["status"]["conditions"][0]["type"] == "Approved"


async def test_signing_needs_sign_on_the_signer(users: Users) -> None:
    status, created = await users.call("admin", "POST", CSRS, csr("c2", CLIENT,
                                                                  ["client auth"]))
    assert status == 201, created
    status, created = await users.call("admin", "PUT", f"{CSRS}/c2/approval", approved(created))
    assert status == 200, created
    await grant(users, "csr-status", [csr_rule(["get", "update"],
                                               ["certificatesigningrequests/status"])])
    # an update that changes neither the certificate nor the conditions needs no `sign`
    status, same = await users.call("jane", "PUT", f"{CSRS}/c2/status", created)
    assert status == 200, same
    ca = create_ca()
    signed = {**same, "status": {**same["status"],
                                 "certificate": base64.b64encode(ca.cert_pem).decode()}}
    status, body = await users.call("jane", "PUT", f"{CSRS}/c2/status", signed)
    assert (status, body["message"]) == (403, (
        'certificatesigningrequests.certificates.k8s.io "c2" is forbidden: user not permitted '
        'to sign requests with signerName "kubernetes.io/kube-apiserver-client"'))
    await grant(users, "sign-client", [signer_rule("sign", [CLIENT])])
    status, body = await users.call("jane", "PUT", f"{CSRS}/c2/status", signed)
    assert status == 200, body
    assert body["status"]["certificate"] == signed["status"]["certificate"]


async def test_no_kube_apiserver_client_certificate_for_system_masters(users: Users) -> None:
    status, body = await users.call("admin", "POST", CSRS, csr(
        "masters", CLIENT, ["client auth"], ["system:masters"], "root"))
    assert (status, body["message"]) == (403, (
        'certificatesigningrequests.certificates.k8s.io "masters" is forbidden: use of '
        "kubernetes.io/kube-apiserver-client signer with system:masters group is not "
        "allowed"))
    status, body = await users.call("admin", "POST", CSRS, csr(
        "masters-other", "example.com/signer", ["client auth"], ["system:masters"], "root"))
    assert status == 201, body


@contextlib.asynccontextmanager
async def running_signer(users: Users, tmp_path: Path) -> AsyncIterator[x509.Certificate]:
    ca = create_ca()
    cert_file, key_file = tmp_path / "ca.crt", tmp_path / "ca.key"
    cert_file.write_bytes(ca.cert_pem)
    key_file.write_bytes(ca.key_pem)
    url = str(users.api.client.server.make_url("")).rstrip("/")
    async with ApiClient(ClientConfig(server=url, token="kcm"), user_agent="csrsigning") as api:
        signer = CertificateSigner(api, cert_file, key_file)
        task = asyncio.create_task(signer.run())
        try:
            yield ca.certificate
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def settled(users: Users, name: str) -> dict[str, Any]:
    """The CSR once the signer has answered it (a certificate or a Failed condition)."""
    answer: dict[str, Any] = {}

    async def done() -> bool:
        status, body = await users.call("admin", "GET", f"{CSRS}/{name}")
        assert status == 200, body
        answer.update(body)
        conditions = [c["type"] for c in body["status"].get("conditions") or []]
        return bool(body["status"].get("certificate")) or "Failed" in conditions

    await eventually(done)
    return answer


def failure(obj: dict[str, Any]) -> tuple[str, str]:
    failed = [c for c in obj["status"]["conditions"] if c["type"] == "Failed"]
    assert len(failed) == 1 and "certificate" not in obj["status"], obj["status"]
    return failed[0]["reason"], failed[0]["message"]


def extended_usages(obj: dict[str, Any]) -> list[x509.ObjectIdentifier]:
    cert = x509.load_pem_x509_certificate(base64.b64decode(obj["status"]["certificate"]))
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


async def test_the_signer_checks_each_signers_requests(users: Users, tmp_path: Path) -> None:
    requests = [
        csr("client-ok", CLIENT, ["digital signature", "key encipherment", "client auth"],
            ["team"], "jane"),
        csr("client-server", CLIENT, ["client auth", "server auth"], ["team"], "jane"),
        csr("client-none", CLIENT, ["digital signature"], ["team"], "jane"),
        csr("kubelet-ok", KUBELET_CLIENT, ["digital signature", "client auth"],
            ["system:nodes"], "system:node:n1"),
        csr("kubelet-server", KUBELET_CLIENT,
            ["digital signature", "key encipherment", "client auth", "server auth"],
            ["system:nodes"], "system:node:n1"),
        csr("kubelet-cn", KUBELET_CLIENT, ["digital signature", "client auth"],
            ["system:nodes"], "jane"),
        csr("kubelet-org", KUBELET_CLIENT, ["digital signature", "client auth"],
            ["system:nodes", "team"], "system:node:n1"),
        csr("kubelet-ip", KUBELET_CLIENT, ["digital signature", "client auth"],
            ["system:nodes"], "system:node:n1",
            [x509.IPAddress(ipaddress.ip_address("10.0.0.1"))]),
    ]
    for request in requests:
        status, created = await users.call("admin", "POST", CSRS, request)
        assert status == 201, created
        status, body = await users.call("admin", "PUT",
                                        f"{CSRS}/{created['metadata']['name']}/approval",
                                        approved(created))
        assert status == 200, body
    async with running_signer(users, tmp_path):
        for name in ("client-ok", "kubelet-ok"):
            assert extended_usages(await settled(users, name)) == [
                ExtendedKeyUsageOID.CLIENT_AUTH]
        expected = {
            "client-server": "invalid usage for client certificate: server auth",
            "client-none": "missing required usage for client certificate: client auth",
            "kubelet-server": ("usages did not match [client auth digital signature key "
                               "encipherment]"),
            "kubelet-cn": "subject common name does not begin with system:node:",
            "kubelet-org": "subject organization is not system:nodes",
            "kubelet-ip": "IP subjectAltNames are not allowed",
        }
        for name, message in expected.items():
            assert failure(await settled(users, name)) == ("SignerValidationFailure", message)


async def test_csr_names_are_any_path_segment(users: Users) -> None:
    # Upstream's ValidateCertificateRequestName accepts every name; only the common
    # path-segment check applies.
    usages = ["client auth", "digital signature"]
    for name in ("Node_CSR:worker.1", "csr-ÄÖ", "UPPER"):
        status, created = await users.call("admin", "POST", CSRS, csr(name, CLIENT, usages))
        assert status == 201, created
        assert created["metadata"]["name"] == name
    status, body = await users.call("admin", "POST", CSRS, csr("a%b", CLIENT, usages))
    assert (status, body["message"]) == (
        422, 'CertificateSigningRequest.certificates.k8s.io "a%b" is invalid: metadata.name: '
             "Invalid value: \"a%b\": may not contain '%'")
    status, body = await users.call("admin", "POST", CSRS, csr("..", CLIENT, usages))
    assert (status, body["message"]) == (
        422, 'CertificateSigningRequest.certificates.k8s.io ".." is invalid: metadata.name: '
             "Invalid value: \"..\": may not be '..'")


SERVING = "kubernetes.io/kubelet-serving"
SERVING_USAGES = ["digital signature", "server auth"]
NODE_TOKENS = {
    **TOKENS,
    "n1": UserInfo("system:node:n1", ("system:nodes", AUTHENTICATED)),
    "n2": UserInfo("system:node:n2", ("system:nodes", AUTHENTICATED)),
}


def ip(text: str) -> x509.GeneralName:
    return x509.IPAddress(ipaddress.ip_address(text))


async def test_serving_requests_are_approved_when_their_names_are_the_nodes(
        tmp_path: Path) -> None:
    """ephemera's approver: a kubelet serving CSR made by the node itself for names that
    are all its Node's addresses is approved (and signed for server auth with those
    names); one for another node, a foreign name, or from a non-node stays pending."""
    from ephemera.controllers.certificates import CertificateApprover

    async for users in serve_users(open_store("sqlite", data_dir=tmp_path / "data"),
                                   NODE_TOKENS):
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
        status, body = await users.call("admin", "POST", "/api/v1/nodes", node)
        assert status == 201, body
        body["status"] = {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                        {"type": "Hostname", "address": "n1"}]}
        status, body = await users.call("admin", "PUT", "/api/v1/nodes/n1/status", body)
        assert status == 200, body
        requests = {
            "ok": ("n1", csr("ok", SERVING, SERVING_USAGES, ["system:nodes"],
                             "system:node:n1", [x509.DNSName("n1"), ip("10.0.0.1")])),
            "foreign-ip": ("n1", csr("foreign-ip", SERVING, SERVING_USAGES, ["system:nodes"],
                                     "system:node:n1", [ip("10.0.0.1"), ip("10.9.9.9")])),
            "other-node": ("n2", csr("other-node", SERVING, SERVING_USAGES, ["system:nodes"],
                                     "system:node:n1", [ip("10.0.0.1")])),
            "not-a-node": ("admin", csr("not-a-node", SERVING, SERVING_USAGES,
                                       ["system:nodes"], "system:node:n1", [ip("10.0.0.1")])),
            "no-node-yet": ("n2", csr("no-node-yet", SERVING, SERVING_USAGES,
                                      ["system:nodes"], "system:node:n2", [ip("10.0.0.2")])),
        }
        for user, request in requests.values():
            status, body = await users.call(user, "POST", CSRS, request)
            assert status == 201, body
        url = str(users.api.client.server.make_url("")).rstrip("/")
        async with ApiClient(ClientConfig(server=url, token="kcm")) as api, \
                running_signer(users, tmp_path) as ca:
            approver = asyncio.create_task(CertificateApprover(api).run())
            try:
                signed = await settled(users, "ok")
                [condition] = signed["status"]["conditions"]
                assert (condition["type"], condition["reason"]) == ("Approved", "AutoApproved")
                cert = x509.load_pem_x509_certificate(
                    base64.b64decode(signed["status"]["certificate"]))
                cert.verify_directly_issued_by(ca)
                assert extended_usages(signed) == [ExtendedKeyUsageOID.SERVER_AUTH]
                assert cert.extensions.get_extension_for_class(
                    x509.SubjectAlternativeName).value == x509.SubjectAlternativeName(
                    [x509.DNSName("n1"), ip("10.0.0.1")])
                # the node n2 registers later: its request is looked at again
                node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}}
                status, body = await users.call("admin", "POST", "/api/v1/nodes", node)
                assert status == 201, body
                body["status"] = {"addresses": [{"type": "InternalIP",
                                                 "address": "10.0.0.2"}]}
                status, body = await users.call("admin", "PUT", "/api/v1/nodes/n2/status",
                                                body)
                assert status == 200, body
                assert "certificate" in (await settled(users, "no-node-yet"))["status"]
                for name in ("foreign-ip", "other-node", "not-a-node"):
                    status, body = await users.call("admin", "GET", f"{CSRS}/{name}")
                    assert status == 200 and body["status"] == {}, (name, body)
            finally:
                approver.cancel()
                await asyncio.gather(approver, return_exceptions=True)

"""CertificateSigningRequest rules: the requestor comes from the authenticated user, never the
body; `/approval` changes only conditions, `/status` not the approval; validation."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ephemera.api.errors import StatusError
from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.csr import parse_request
from ephemera.apiserver.resources import lookup
from ephemera.apiserver.strategy import strategy_for

RESOURCE = lookup("certificates.k8s.io", "v1", "certificatesigningrequests")


def pem_request() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n1")])
    req = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(
        key, hashes.SHA256())
    return base64.b64encode(req.public_bytes(serialization.Encoding.PEM)).decode()


def csr(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": "node-csr-1"},
            "spec": {"request": pem_request(),
                     "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                     "usages": ["digital signature", "client auth"], **spec},
            "status": {"conditions": [{"type": "Approved", "status": "True"}]}}


def test_create_takes_the_requestor_from_the_user() -> None:
    assert RESOURCE is not None
    strategy = strategy_for(RESOURCE)
    obj = csr(username="system:admin", groups=["system:masters"])
    strategy.before_create(obj)
    strategy.record_user(obj, UserInfo("system:bootstrap:abcdef",
                                       ("system:bootstrappers", "system:authenticated")))
    strategy.validate_create(obj)
    assert obj["spec"]["username"] == "system:bootstrap:abcdef"
    assert obj["spec"]["groups"] == ["system:bootstrappers", "system:authenticated"]
    assert obj["status"] == {}  # no pre-approved requests


def test_validation_messages() -> None:
    assert RESOURCE is not None
    strategy = strategy_for(RESOURCE)
    bad = csr(request=base64.b64encode(b"junk").decode(), usages=["flying"],
              expirationSeconds=60)
    bad["spec"].pop("signerName")
    strategy.before_create(bad)
    with pytest.raises(StatusError) as err:
        strategy.validate_create(bad)
    message = err.value.message
    assert "spec.request: Invalid value: \"<request>\": PEM block type must be CERTIFICATE " \
           "REQUEST" in message
    assert "spec.signerName: Required value" in message
    assert 'spec.usages[0]: Unsupported value: "flying"' in message
    assert "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than " \
           "600 seconds (10 minutes)" in message


def test_approval_and_status_subresources() -> None:
    assert RESOURCE is not None
    strategy = strategy_for(RESOURCE)
    old = csr()
    strategy.before_create(old)
    old["metadata"]["resourceVersion"] = "1"
    new = copy.deepcopy(old)
    new["spec"]["username"] = "someone-else"
    new["status"] = {"certificate": "Zm9v", "conditions": [
        {"type": "Approved", "status": "True", "reason": "AutoApproved"}]}
    strategy.before_update(new, old, "approval")
    assert new["spec"] == old["spec"] and "certificate" not in new["status"]
    assert new["status"]["conditions"][0]["reason"] == "AutoApproved"
    assert new["status"]["conditions"][0]["lastUpdateTime"]
    approved = new
    issued = copy.deepcopy(approved)
    issued["status"] = {"certificate": "Zm9v", "conditions": []}  # tries to drop Approved
    strategy.before_update(issued, approved, "status")
    assert issued["status"]["certificate"] == "Zm9v"
    assert [c["type"] for c in issued["status"]["conditions"]] == ["Approved"]
    both = copy.deepcopy(approved)
    both["status"]["conditions"].append({"type": "Denied", "status": "True"})
    with pytest.raises(StatusError) as err:
        strategy.before_update(both, approved, "approval")
    assert "Approved and Denied conditions are mutually exclusive" in err.value.message


def test_a_malformed_request_is_worded_as_go_s_parser_words_it() -> None:
    block = b"-----BEGIN CERTIFICATE REQUEST-----\n%s\n-----END CERTIFICATE REQUEST-----\n"
    for body, message in ((block % b"MIIB", "asn1: syntax error: data truncated"),
                          (block % b"AAAA", "asn1: structure error: tags don't match"),
                          (block % b"!!!", "PEM block type must be CERTIFICATE REQUEST"),
                          (b"junk", "PEM block type must be CERTIFICATE REQUEST")):
        with pytest.raises(ValueError) as err:
            parse_request(body)
        assert str(err.value) == message

"""The data dir's certificates and the admin kubeconfig."""

from __future__ import annotations

import base64
import socket
import stat
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from ephemera.apiserver.certs import (
    ensure_pki,
    has_client_auth_usage,
    issue_client_cert,
    signed_by,
    user_from_certificate,
    write_admin_kubeconfig,
    write_kubeconfig,
)


def _sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return (set(san.get_values_for_type(x509.DNSName)),
            {str(i) for i in san.get_values_for_type(x509.IPAddress)})


def test_pki_is_created_once_and_reused(tmp_path: Path) -> None:
    first = ensure_pki(tmp_path)
    for name in ("ca", "apiserver", "admin"):
        assert (tmp_path / "pki" / f"{name}.crt").exists()
        key_mode = stat.S_IMODE((tmp_path / "pki" / f"{name}.key").stat().st_mode)
        assert key_mode == 0o600
    second = ensure_pki(tmp_path)
    assert second == first


def test_certificates_chain_to_the_ca(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    ca = pki.ca.certificate
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    serving = pki.serving.certificate
    assert signed_by(serving, ca) and signed_by(pki.admin.certificate, ca)
    dns, ips = _sans(serving)
    assert {"localhost", socket.gethostname()} <= dns
    assert {"127.0.0.1", "::1"} <= ips
    eku = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert not has_client_auth_usage(serving)
    assert user_from_certificate(pki.admin.certificate) == ("kubernetes-admin",
                                                            ["system:masters"])
    other = ensure_pki(tmp_path / "other")
    assert not signed_by(other.serving.certificate, ca)


def test_serving_cert_is_reissued_for_a_new_name_but_the_ca_stays(tmp_path: Path) -> None:
    before = ensure_pki(tmp_path)
    after = ensure_pki(tmp_path, ["10.9.8.7", "example.test", "0.0.0.0"])
    assert after.ca == before.ca and after.admin == before.admin
    assert after.serving != before.serving
    dns, ips = _sans(after.serving.certificate)
    assert "example.test" in dns and "10.9.8.7" in ips
    assert "0.0.0.0" not in ips
    assert ensure_pki(tmp_path, ["10.9.8.7"]).serving == after.serving


def test_client_cert_carries_user_and_groups(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    pair = issue_client_cert(pki.ca, "alice", ["dev", "ops"])
    assert user_from_certificate(pair.certificate) == ("alice", ["dev", "ops"])
    assert has_client_auth_usage(pair.certificate)


def test_admin_kubeconfig_embeds_the_credentials(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    path = write_admin_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:6443", pki)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = yaml.safe_load(path.read_text())
    assert doc["kind"] == "Config" and doc["apiVersion"] == "v1"
    [cluster] = doc["clusters"]
    assert cluster["cluster"]["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == pki.ca.cert_pem
    [user] = doc["users"]
    assert user["name"] == "kubernetes-admin"
    assert base64.b64decode(user["user"]["client-certificate-data"]) == pki.admin.cert_pem
    assert base64.b64decode(user["user"]["client-key-data"]) == pki.admin.key_pem
    [context] = doc["contexts"]
    assert doc["current-context"] == context["name"]
    assert context["context"] == {"cluster": cluster["name"], "user": "kubernetes-admin"}


def test_token_kubeconfig(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    path = write_kubeconfig(tmp_path / "kc", "https://[::1]:1", pki.ca.cert_pem,
                            token="s3cret", user="bob")
    doc = yaml.safe_load(path.read_text())
    assert doc["users"] == [{"name": "bob", "user": {"token": "s3cret"}}]
    assert doc["clusters"][0]["cluster"]["server"] == "https://[::1]:1"

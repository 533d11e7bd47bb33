"""Kubeconfig loading for `ephemera.client`: embedded data, files relative to the kubeconfig,
tokens, contexts, `$KUBECONFIG`, the TLS context, and clear errors."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import yaml

from ephemera.apiserver.certs import create_ca, issue_client_cert, write_kubeconfig
from ephemera.client import ClientConfig, KubeconfigError, load_kubeconfig
from ephemera.client.kubeconfig import default_kubeconfig_path


def test_embedded_certificates_as_ephemera_up_writes_them(tmp_path: Path) -> None:
    ca = create_ca()
    admin = issue_client_cert(ca, "kubernetes-admin", ["system:masters"])
    path = write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:6443", ca.cert_pem,
                            admin.cert_pem, admin.key_pem)
    config = load_kubeconfig(path)
    assert config.server == "https://127.0.0.1:6443"
    assert (config.ca_pem, config.client_cert_pem, config.client_key_pem) == (
        ca.cert_pem, admin.cert_pem, admin.key_pem)
    assert config.token is None
    ctx = config.ssl_context()
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_files_relative_to_the_kubeconfig_and_a_token_file(tmp_path: Path) -> None:
    ca = create_ca()
    client = issue_client_cert(ca, "someone")
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "ca.crt").write_bytes(ca.cert_pem)
    (certs / "me.crt").write_bytes(client.cert_pem)
    (certs / "me.key").write_bytes(client.key_pem)
    (certs / "token").write_text("s3cret\n")
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "mine",
        "clusters": [{"name": "c", "cluster": {"server": "https://[::1]:7443/",
                                               "certificate-authority": "certs/ca.crt"}}],
        "users": [{"name": "cert", "user": {"client-certificate": "certs/me.crt",
                                            "client-key": "certs/me.key"}},
                  {"name": "tok", "user": {"tokenFile": "certs/token"}}],
        "contexts": [{"name": "mine", "context": {"cluster": "c", "user": "cert"}},
                     {"name": "theirs", "context": {"cluster": "c", "user": "tok"}}],
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    mine = load_kubeconfig(path)
    assert mine.server == "https://[::1]:7443"
    assert mine.ca_pem == ca.cert_pem and mine.client_cert_pem == client.cert_pem
    assert mine.ssl_context() is not None
    theirs = load_kubeconfig(path, context="theirs")
    assert (theirs.token, theirs.client_cert_pem) == ("s3cret", None)


def test_kubeconfig_env_and_plain_http(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump({
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:8080",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "abc"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    monkeypatch.setenv("KUBECONFIG", f"{path}:/nonexistent")
    assert default_kubeconfig_path() == path
    config = load_kubeconfig()
    assert config == ClientConfig(server="http://127.0.0.1:8080", insecure_skip_tls_verify=True,
                                  token="abc")
    assert config.ssl_context() is None
    insecure = ClientConfig(server="https://h:1", insecure_skip_tls_verify=True).ssl_context()
    assert insecure is not None and insecure.verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize(("doc", "message"), [
    ({"clusters": []}, "no current-context and no context given"),
    ({"current-context": "x"}, "no context named 'x'"),
    ({"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}]},
     "no cluster named 'c'"),
    ({"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}],
      "clusters": [{"name": "c", "cluster": {}}]}, "cluster 'c' has no server"),
    ({"current-context": "x",
      "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
      "clusters": [{"name": "c", "cluster": {"server": "https://h"}}],
      "users": [{"name": "u", "user": {"client-certificate-data": "aGVsbG8="}}]},
     "has a client certificate without a key"),
    ({"current-context": "x",
      "contexts": [{"name": "x", "context": {"cluster": "c"}}],
      "clusters": [{"name": "c", "cluster": {"server": "https://h",
                                             "certificate-authority": "missing.crt"}}]},
     "cannot read certificate-authority"),
    ({"current-context": "x",
      "contexts": [{"name": "x", "context": {"cluster": "c"}}],
      "clusters": [{"name": "c", "cluster": {"server": "https://h",
                                             "certificate-authority-data": "%%%"}}]},
     "certificate-authority-data is not valid base64"),
])
def test_errors_say_what_is_wrong(tmp_path: Path, doc: dict[str, object], message: str) -> None:
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(KubeconfigError) as err:
        load_kubeconfig(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match=r"cannot read kubeconfig .*nope: No such file"):
        load_kubeconfig(tmp_path / "nope")

"""Kubeconfig files: where the apiserver is and how to authenticate to it.

`load_kubeconfig(path, context=None)` reads a kubeconfig (the format kubectl reads: clusters,
users, contexts, `current-context`) and returns a `ClientConfig` for one context: the server
URL, the CA to trust (`certificate-authority` or `-data`, or `insecure-skip-tls-verify`), and
the credentials (a client certificate and key, from files or `-data`, and/or a bearer `token`
or `tokenFile`). Relative file paths are resolved against the kubeconfig's directory, as
client-go does. `ClientConfig.ssl_context()` builds the TLS context for an `https://` server.
Problems are `KubeconfigError`s with a message naming the file and the missing piece.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ClientConfig", "KubeconfigError", "default_kubeconfig_path", "load_kubeconfig"]


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used; the message says why."""


@dataclass(frozen=True)
class ClientConfig:
    """Everything a client needs to reach one apiserver as one user."""

    server: str
    ca_pem: bytes | None = None
    insecure_skip_tls_verify: bool = False
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    token: str | None = None
    tls_server_name: str | None = None

    def ssl_context(self) -> ssl.SSLContext | None:
        """TLS for the server (None for a plain `http://` server): trusts `ca_pem` (else the
        system store), presents the client certificate when there is one."""
        if not self.server.startswith("https://"):
            return None
        if self.insecure_skip_tls_verify:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_pem is not None:
            ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        else:
            ctx = ssl.create_default_context()
        if self.client_cert_pem is not None and self.client_key_pem is not None:
            _load_cert_chain(ctx, self.client_cert_pem, self.client_key_pem)
        return ctx


def _load_cert_chain(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """`load_cert_chain` reads only files: write the PEMs to a private temporary directory."""
    with tempfile.TemporaryDirectory(prefix="ephemera-client-") as tmp:
        cert_path, key_path = Path(tmp, "client.crt"), Path(tmp, "client.key")
        for path, data in ((cert_path, cert_pem), (key_path, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(str(cert_path), str(key_path))


def default_kubeconfig_path() -> Path:
    """`$KUBECONFIG` (its first entry) or `~/.kube/config`."""
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), "")
    return Path(first) if first else Path.home() / ".kube" / "config"


def _named(doc: Mapping[str, Any], section: str, name: str, source: Path) -> Mapping[str, Any]:
    key = section[:-1]  # clusters -> cluster
    for entry in doc.get(section) or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            value = entry.get(key)
            return value if isinstance(value, Mapping) else {}
    raise KubeconfigError(f"{source}: no {key} named {name!r}")


def _bytes(entry: Mapping[str, Any], name: str, base: Path, source: Path) -> bytes | None:
    """`<name>-data` (base64) or `<name>` (a file path)."""
    data = entry.get(f"{name}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise KubeconfigError(f"{source}: {name}-data is not valid base64") from None
    path = entry.get(name)
    if path:
        full = Path(os.path.expanduser(str(path)))
        if not full.is_absolute():
            full = base / full
        try:
            return full.read_bytes()
        except OSError as err:
            raise KubeconfigError(f"{source}: cannot read {name} {full}: "
                                  f"{err.strerror or err}") from None
    return None


def load_kubeconfig(path: str | os.PathLike[str] | None = None,
                    context: str | None = None) -> ClientConfig:
    """The `ClientConfig` of `context` (default: `current-context`) in the kubeconfig at
    `path` (default: `default_kubeconfig_path()`)."""
    source = Path(path) if path is not None else default_kubeconfig_path()
    try:
        doc = yaml.safe_load(source.read_text())
    except OSError as err:
        raise KubeconfigError(f"cannot read kubeconfig {source}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise KubeconfigError(f"{source}: not valid YAML: {err}") from None
    if not isinstance(doc, Mapping):
        raise KubeconfigError(f"{source}: not a kubeconfig (expected a mapping)")
    base = source.parent
    context_name = context or doc.get("current-context")
    if not context_name:
        raise KubeconfigError(f"{source}: no current-context and no context given")
    ctx = _named(doc, "contexts", str(context_name), source)
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if not cluster_name:
        raise KubeconfigError(f"{source}: context {context_name!r} names no cluster")
    cluster = _named(doc, "clusters", str(cluster_name), source)
    user = _named(doc, "users", str(user_name), source) if user_name else {}
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise KubeconfigError(f"{source}: cluster {cluster_name!r} has no server")
    token = user.get("token")
    token_file = user.get("tokenFile")
    if not token and token_file:
        token_path = Path(os.path.expanduser(str(token_file)))
        try:
            token = (token_path if token_path.is_absolute() else base / token_path
                     ).read_text().strip()
        except OSError as err:
            raise KubeconfigError(f"{source}: cannot read tokenFile {token_file}: "
                                  f"{err.strerror or err}") from None
    cert = _bytes(user, "client-certificate", base, source)
    key = _bytes(user, "client-key", base, source)
    if (cert is None) != (key is None):
        raise KubeconfigError(f"{source}: user {user_name!r} has a client certificate "
                              "without a key, or a key without a certificate")
    return ClientConfig(
        server=server,
        ca_pem=_bytes(cluster, "certificate-authority", base, source),
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify")),
        client_cert_pem=cert,
        client_key_pem=key,
        token=str(token) if token else None,
        tls_server_name=cluster.get("tls-server-name") or None,
    )

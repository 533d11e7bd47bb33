"""How Go's `net`, `crypto/tls` and `net/http` word a request that could not be made, so
that a failure to reach a kubelet or the apiserver reads as upstream's does and no Python
internals (exception reprs, `ssl.SSLContext object at 0x...`) reach a user.

- `dial_error(err, host, port)`: what Go's dialer returns, e.g. `dial tcp 127.0.0.1:10250:
  connect: connection refused`, `dial tcp 10.0.0.1:10250: i/o timeout`, `tls: failed to
  verify certificate: x509: certificate signed by unknown authority`, `remote error: tls:
  bad certificate`, `EOF`.
- `request_error(method, url, err)`: what `http.Client.Do` returns (a `*url.Error`):
  `Get "https://127.0.0.1:10250/containerLogs/ns/p/c": dial tcp 127.0.0.1:10250: connect:
  connection refused`.

The x509 texts Go builds from the certificate (`certificate is valid for a, b, not c`) are
shortened to what Python's TLS error says (`certificate is not valid for c`): Python does not
hand the peer's certificate to a failed handshake's error.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
from urllib.parse import urlsplit

import aiohttp

from ephemera.api.goformat import go_quote

__all__ = ["dial_error", "host_port", "request_error"]

# OpenSSL verify codes -> Go's x509 error text.
_UNKNOWN_AUTHORITY = {18, 19, 20, 21, 2}
_EXPIRED = {9, 10}
_NAME_MISMATCH = {62, 64}
# OpenSSL alert reasons whose Go alert text is not the reason's own words.
_ALERT_TEXT = {"unknown ca": "unknown certificate authority"}
_ALERT_PREFIXES = ("TLSV13_ALERT_", "TLSV1_ALERT_", "SSLV3_ALERT_")


def host_port(host: str, port: int) -> str:
    """Go's `net.JoinHostPort`: IPv6 hosts bracketed."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _errno_text(code: int) -> str:
    """Go's `syscall.Errno.Error()` on Linux: the C library's text, lowercase."""
    return os.strerror(code).lower()


def _x509_text(err: ssl.SSLCertVerificationError) -> str:
    code = err.verify_code
    if code in _UNKNOWN_AUTHORITY:
        return "x509: certificate signed by unknown authority"
    if code in _EXPIRED:
        return "x509: certificate has expired or is not yet valid"
    message = str(err.verify_message or "certificate verify failed")
    if code in _NAME_MISMATCH:
        subject = message.rsplit("not valid for", 1)[-1].strip(" '.")
        return f"x509: certificate is not valid for {subject}"
    return f"x509: {message}"


def _tls_text(err: ssl.SSLError) -> str:
    if isinstance(err, ssl.SSLCertVerificationError):
        return "tls: failed to verify certificate: " + _x509_text(err)
    reason = str(getattr(err, "reason", "") or "")
    if reason == "WRONG_VERSION_NUMBER":
        return "tls: first record does not look like a TLS handshake"
    for prefix in _ALERT_PREFIXES:
        if reason.startswith(prefix):
            words = reason[len(prefix):].replace("_", " ").lower()
            return "remote error: tls: " + _ALERT_TEXT.get(words, words)
    if isinstance(err, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return "EOF"
    return "tls: handshake failure"


def _os_text(err: OSError, address: str) -> str:
    if isinstance(err, socket.gaierror):
        host = address.rsplit(":", 1)[0].strip("[]")
        return f"dial tcp: lookup {host}: no such host"
    code = err.errno
    if isinstance(err, TimeoutError) or code == errno.ETIMEDOUT:
        return f"dial tcp {address}: i/o timeout"
    if code in (errno.ECONNRESET, errno.EPIPE):
        return f"read tcp {address}: read: {_errno_text(code)}"
    if isinstance(code, int) and code > 0:
        return f"dial tcp {address}: connect: {_errno_text(code)}"
    return f"dial tcp {address}: connect: connection refused"


def dial_error(err: BaseException, host: str, port: int) -> str:
    """Go's error text for a connection to host:port that failed with `err`."""
    address = host_port(host, port)
    certificate_error = getattr(err, "certificate_error", None)
    if isinstance(certificate_error, ssl.SSLError):
        return _tls_text(certificate_error)
    inner = getattr(err, "os_error", None) if isinstance(err, aiohttp.ClientConnectorError) \
        else None
    if isinstance(inner, ssl.SSLError):
        return _tls_text(inner)
    if isinstance(err, ssl.SSLError):
        return _tls_text(err)
    if isinstance(err, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "EOF" if isinstance(err, aiohttp.ServerDisconnectedError) else "unexpected EOF"
    if isinstance(err, aiohttp.ConnectionTimeoutError):
        return f"dial tcp {address}: i/o timeout"
    if isinstance(err, TimeoutError):  # a read or total time-out: the request's deadline
        return "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    if isinstance(inner, OSError):
        return _os_text(inner, address)
    if isinstance(err, OSError):
        return _os_text(err, address)
    if isinstance(err, aiohttp.WSServerHandshakeError):
        return "websocket: bad handshake"
    return "unexpected EOF"


def request_error(method: str, url: str, err: BaseException) -> str:
    """Go's `*url.Error` text: `Get "URL": <dial error>` (host and port from the URL)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    op = method[:1].upper() + method[1:].lower()
    return f"{op} {go_quote(url)}: {dial_error(err, parts.hostname or '', port)}"

"""Go's wording of a request that could not be made (`ephemera.client.goerrors`): what a
user reads when a kubelet or the apiserver cannot be reached, never a Python repr."""

from __future__ import annotations

import errno
import socket
import ssl

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from ephemera.client.goerrors import dial_error, host_port, request_error


def _key(host: str = "127.0.0.1", port: int = 10250) -> ConnectionKey:
    return ConnectionKey(host, port, True, ssl.create_default_context(), None, None, None)


def _connector_error(os_error: OSError) -> aiohttp.ClientConnectorError:
    return aiohttp.ClientConnectorError(_key(), os_error)


def _verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    err = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {message}")
    err.verify_code = code
    err.verify_message = message
    return err


def _alert(reason: str) -> ssl.SSLError:
    err = ssl.SSLError(1, f"[SSL: {reason}] alert")
    err.reason = reason
    return err


@pytest.mark.parametrize(("err", "text"), [
    (_connector_error(ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed")),
     "dial tcp 127.0.0.1:10250: connect: connection refused"),
    (_connector_error(OSError(errno.EHOSTUNREACH, "No route to host")),
     "dial tcp 127.0.0.1:10250: connect: no route to host"),
    (_connector_error(OSError(errno.ENETUNREACH, "Network is unreachable")),
     "dial tcp 127.0.0.1:10250: connect: network is unreachable"),
    (aiohttp.ConnectionTimeoutError("Connection timeout to host https://127.0.0.1:10250"),
     "dial tcp 127.0.0.1:10250: i/o timeout"),
    (_connector_error(TimeoutError(errno.ETIMEDOUT, "timed out")),
     "dial tcp 127.0.0.1:10250: i/o timeout"),
    (TimeoutError(), "context deadline exceeded (Client.Timeout exceeded while awaiting "
                     "headers)"),
    (aiohttp.ClientConnectorDNSError(_key(), socket.gaierror(-2, "Name or service not known")),
     "dial tcp: lookup 127.0.0.1: no such host"),
    (aiohttp.ServerDisconnectedError(), "EOF"),
    (aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer"),
     "read tcp 127.0.0.1:10250: read: connection reset by peer"),
    (aiohttp.ClientConnectorCertificateError(
        _key(), _verify_error(20, "unable to get local issuer certificate")),
     "tls: failed to verify certificate: x509: certificate signed by unknown authority"),
    (aiohttp.ClientConnectorCertificateError(
        _key(), _verify_error(19, "self-signed certificate in certificate chain")),
     "tls: failed to verify certificate: x509: certificate signed by unknown authority"),
    (aiohttp.ClientConnectorCertificateError(_key(), _verify_error(10, "certificate has expired")),
     "tls: failed to verify certificate: x509: certificate has expired or is not yet valid"),
    (aiohttp.ClientConnectorCertificateError(_key(), _verify_error(
        64, "IP address mismatch, certificate is not valid for '10.0.0.1'.")),
     "tls: failed to verify certificate: x509: certificate is not valid for 10.0.0.1"),
    (aiohttp.ClientConnectorSSLError(_key(), _alert("TLSV13_ALERT_CERTIFICATE_REQUIRED")),
     "remote error: tls: certificate required"),
    (aiohttp.ClientConnectorSSLError(_key(), _alert("SSLV3_ALERT_BAD_CERTIFICATE")),
     "remote error: tls: bad certificate"),
    (aiohttp.ClientConnectorSSLError(_key(), _alert("TLSV1_ALERT_UNKNOWN_CA")),
     "remote error: tls: unknown certificate authority"),
    (aiohttp.ClientConnectorSSLError(_key(), _alert("WRONG_VERSION_NUMBER")),
     "tls: first record does not look like a TLS handshake"),
])
def test_dial_errors_read_as_go_s(err: BaseException, text: str) -> None:
    assert dial_error(err, "127.0.0.1", 10250) == text


def test_no_python_internals_in_any_text() -> None:
    # The aiohttp error's own str carries the SSLContext repr; Go's text does not.
    err = _connector_error(ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"))
    assert "SSLContext object at" in str(err)
    assert "object at" not in dial_error(err, "127.0.0.1", 10250)
    assert dial_error(ValueError("boom"), "h", 1) == "unexpected EOF"


def test_request_error_is_go_s_url_error() -> None:
    err = _connector_error(ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"))
    url = "https://127.0.0.1:48505/containerLogs/default/p/c?follow=true"
    assert request_error("GET", url, err) == (
        'Get "https://127.0.0.1:48505/containerLogs/default/p/c?follow=true": '
        "dial tcp 127.0.0.1:48505: connect: connection refused")
    assert request_error("POST", "https://[::1]:6443/api", err) == (
        'Post "https://[::1]:6443/api": dial tcp [::1]:6443: connect: connection refused')


def test_host_port_is_go_s_join_host_port() -> None:
    assert host_port("10.0.0.1", 10250) == "10.0.0.1:10250"
    assert host_port("fe80::1", 10250) == "[fe80::1]:10250"

"""Serving the apiserver's aiohttp application over HTTPS: the TLS context (serving
certificate, optional client certificates verified against the cluster CA) and a serve loop
that stops gracefully when asked (SIGTERM/SIGINT in the command line).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from ephemera.apiserver.certs import Pki

log = logging.getLogger(__name__)

# How long in-flight requests (long watches included) get to finish on shutdown.
DEFAULT_SHUTDOWN_TIMEOUT = 3.0


def server_ssl_context(pki: Pki, *, cert_file: Path | None = None,
                       key_file: Path | None = None,
                       client_ca_file: Path | None = None) -> ssl.SSLContext:
    """TLS for the apiserver: the serving certificate (`cert_file` and `key_file`, upstream's
    `--tls-cert-file` and `--tls-private-key-file`, else the data dir's), and client
    certificates requested (`CERT_OPTIONAL`) and verified against the cluster CA (or
    `client_ca_file`, upstream's `--client-ca-file`), so that a request may authenticate
    with a certificate or a token, or send nothing (anonymous). A certificate that does not
    verify fails the handshake (upstream's TLS layer takes it and its authenticator answers
    401: Python's `ssl` cannot request a certificate without verifying it)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file or pki.serving_cert_path, key_file or pki.serving_key_path)
    ctx.load_verify_locations(cafile=str(client_ca_file or pki.ca_cert_path))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def client_ssl_context(pki: Pki, *, with_admin_cert: bool = True) -> ssl.SSLContext:
    """TLS for a client of this cluster (probes, tests): trusts the cluster CA and presents
    the admin certificate unless told not to."""
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert_path))
    if with_admin_cert:
        ctx.load_cert_chain(pki.admin_cert_path, pki.admin_key_path)
    return ctx


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    raise RuntimeError("the server is not bound to a TCP port")


async def serve(
    app: web.Application,
    *,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None,
    stop: asyncio.Event,
    on_started: Callable[[int], None] | None = None,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    reuse_port: bool = False,
) -> None:
    """Serve `app` on host:port (port 0 picks a free one) until `stop` is set, then shut
    down gracefully: stop accepting, give in-flight requests `shutdown_timeout` seconds, run
    the app's shutdown and cleanup hooks. `on_started` gets the bound port. With `reuse_port`
the socket is bound with `SO_REUSEPORT`, so that several processes serve one port (the
kernel spreads the connections)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        sock_host = host or "0.0.0.0"
        site = web.TCPSite(runner, sock_host, port, ssl_context=ssl_context,
                           reuse_address=True, reuse_port=reuse_port or None,
                           backlog=1024)
        await site.start()
        bound = _bound_port(runner)
        scheme = "https" if ssl_context else "http"
        log.info("serving on %s://%s", scheme, _join_host_port(sock_host, bound))
        if on_started is not None:
            on_started(bound)
        await stop.wait()
        log.info("shutting down")
    finally:
        await runner.cleanup()


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (the kernel's pick)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True

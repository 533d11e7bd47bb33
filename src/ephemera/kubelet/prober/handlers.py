"""The probe handlers (upstream's `pkg/probe/{exec,http,tcp,grpc}`): each runs one attempt of
a probe and answers an `Outcome` with the output upstream's prober reports, or raises
`ProbeError` when the probe could not be run at all (upstream's `err != nil`: the result is
thrown away and an `... probe errored and resulted in unknown state: ...` event posted).

- **exec**: the command through the runtime's `exec_sync` with `timeoutSeconds`; exit 0 is
  success, any other code failure, with the command's output (stdout then stderr, at most
  10 KiB) as the message; a timeout is a failure `command "<argv joined>" timed out`.
- **httpGet**: a GET (`User-Agent: kube-probe/<major>.<minor>`, `Accept: */*`, the probe's
  `httpHeaders`) with `timeoutSeconds` as the deadline; a status in [200, 400) is success,
  redirects to the same host name are followed (at most 10), a redirect elsewhere is a warning
  (success) `Probe terminated redirects, Response body: ...`, another status a failure
  `HTTP probe failed with statuscode: N`; a connection error is a failure with Go's
  `Get "<url>": dial tcp <addr>: connect: connection refused` wording. HTTPS is not verified,
  as upstream's prober does not verify.
- **tcpSocket**: a TCP connect within `timeoutSeconds`: success, or a failure
  `dial tcp <addr>: connect: connection refused` / `dial tcp <addr>: i/o timeout`.
- **grpc**: the gRPC health protocol (`grpc.health.v1.Health/Check`) in a helper process
  (`ephemera.kubelet.prober.grpcprobe`) that joins the pod's network namespace before grpcio
  starts its threads; SERVING is success, with upstream's failure messages otherwise.

The network probes go to the pod's IP, as upstream's, from inside the pod's network
namespace (`netns`; the pod's own address answers there whatever the host's routes), or, for
a pod with no IP (a sandbox made before its node had a pod CIDR), to 127.0.0.1 in there;
`host` in httpGet/tcpSocket wins and is dialled from the host.
"""

from __future__ import annotations

import asyncio
import errno
import http.client
import json
import os
import re
import socket
import ssl
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ephemera.api.goformat import go_quote
from ephemera.kubelet.node import KUBELET_VERSION
from ephemera.kubelet.prober.netns import NetnsError, run_in_netns
from ephemera.kubelet.runtime.base import ExecTimeoutError, RuntimeError_, RuntimeService

__all__ = [
    "MAX_OUTPUT",
    "USER_AGENT",
    "Outcome",
    "ProbeError",
    "ProbeTarget",
    "exec_probe",
    "grpc_probe",
    "http_probe",
    "resolve_port",
    "tcp_probe",
]

MAX_OUTPUT = 10 * 1024  # upstream's maxReadLength / maxRespBodyLength
MAX_REDIRECTS = 10
_major, _minor = KUBELET_VERSION.lstrip("v").split(".")[:2]
USER_AGENT = f"kube-probe/{_major}.{_minor}"
LOOPBACK = "127.0.0.1"


class Outcome(StrEnum):
    """One attempt's result (upstream's `probe.Result`)."""

    SUCCESS = "success"
    WARNING = "warning"
    FAILURE = "failure"
    UNKNOWN = "unknown"


class ProbeError(Exception):
    """The probe could not be run (a bad port name, the container gone, ...)."""


@dataclass(frozen=True)
class ProbeTarget:
    """Where a network probe goes: the pod's IP ("" while pods have only loopback) and the
    path of its network namespace ("": the host's, e.g. a hostNetwork pod)."""

    pod_ip: str = ""
    netns: str = ""

    def host(self, explicit: str = "") -> str:
        return explicit or self.pod_ip or LOOPBACK


def resolve_port(port: Any, container: Mapping[str, Any]) -> int:
    """Upstream's `probe.ResolveContainerPort`: a number, or a named port of the container
    (a name that is not declared is parsed as a number, with Go's error)."""
    if isinstance(port, bool) or port is None:
        raise ProbeError(f"intOrString had no kind: {json.dumps(port)}")
    if isinstance(port, int):
        number = port
    else:
        text = str(port)
        for p in container.get("ports") or []:
            if isinstance(p, dict) and p.get("name") == text:
                number = int(p.get("containerPort") or 0)
                break
        else:
            if not re.fullmatch(r"[+-]?[0-9]+", text):
                raise ProbeError(f"strconv.Atoi: parsing {go_quote(text)}: invalid syntax")
            number = int(text)
    if 0 < number < 65536:
        return number
    raise ProbeError(f"invalid port number: {number}")


def _go_errno(err: OSError) -> str:
    """A socket error as Go's syscall.Errno prints it ("connection refused")."""
    if err.errno is not None and err.errno in errno.errorcode:
        text = os.strerror(err.errno)
        return text[0].lower() + text[1:]
    return str(err) or "connection failed"


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --- exec ----------------------------------------------------------------------------------


async def exec_probe(runtime: RuntimeService, container_id: str, command: Sequence[str],
                     timeout: float) -> tuple[Outcome, str]:
    argv = [str(a) for a in command]
    try:
        result = await runtime.exec_sync(container_id, argv, timeout=timeout)
    except ExecTimeoutError:
        return Outcome.FAILURE, f"command {go_quote(' '.join(argv))} timed out"
    except RuntimeError_ as err:
        raise ProbeError(str(err)) from None
    output = (result.stdout + result.stderr)[:MAX_OUTPUT].decode(errors="replace")
    return (Outcome.SUCCESS if result.exit_code == 0 else Outcome.FAILURE), output


# --- tcpSocket -----------------------------------------------------------------------------


def _dial(host: str, port: int, timeout: float) -> socket.socket:
    """Connect like Go's `net.Dialer` and raise OSError with Go's wording."""
    address = _join(host, port)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise OSError(f"dial tcp: lookup {host}: no such host") from None
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.settimeout(timeout)
    try:
        sock.connect(sockaddr)
    except TimeoutError:
        sock.close()
        raise OSError(f"dial tcp {address}: i/o timeout") from None
    except OSError as err:
        sock.close()
        raise OSError(f"dial tcp {address}: connect: {_go_errno(err)}") from None
    return sock


async def tcp_probe(target: ProbeTarget, host: str, port: int,
                    timeout: float) -> tuple[Outcome, str]:
    address_host = target.host(host)

    def attempt() -> tuple[Outcome, str]:
        try:
            sock = _dial(address_host, port, timeout)
        except OSError as err:
            return Outcome.FAILURE, str(err)
        sock.close()
        return Outcome.SUCCESS, ""

    try:
        return await run_in_netns(target.netns if not host else "", attempt)
    except NetnsError as err:
        raise ProbeError(str(err)) from None


# --- httpGet -------------------------------------------------------------------------------


def probe_url(action: Mapping[str, Any], container: Mapping[str, Any],
              target: ProbeTarget) -> str:
    """The URL of an httpGet probe (upstream's `NewRequestForHTTPGetAction`/`formatURL`)."""
    scheme = str(action.get("scheme") or "HTTP").lower()
    host = target.host(str(action.get("host") or ""))
    port = resolve_port(action.get("port"), container)
    path = str(action.get("path") or "")
    parsed = urllib.parse.urlsplit(path)
    return urllib.parse.urlunsplit((scheme, _join(host, port), parsed.path,
                                    parsed.query, parsed.fragment))


def _headers(action: Mapping[str, Any]) -> list[tuple[str, str]]:
    given = [(str(h.get("name") or ""), str(h.get("value") or ""))
             for h in action.get("httpHeaders") or [] if isinstance(h, dict)]
    names = {name.lower() for name, _ in given}
    headers = list(given)
    if "user-agent" not in names:
        headers.append(("User-Agent", USER_AGENT))
    if "accept" not in names:
        headers.append(("Accept", "*/*"))
    return headers


def _http_get(url: str, headers: list[tuple[str, str]], timeout: float) -> tuple[Outcome, str]:
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(current)
        host = parts.hostname or LOOPBACK
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            sock = _dial(host, port, timeout)
        except OSError as err:
            suffix = " (Client.Timeout exceeded while awaiting headers)" \
                if str(err).endswith(": i/o timeout") else ""
            return Outcome.FAILURE, f"Get {go_quote(current)}: {err}{suffix}"
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            try:
                sock = context.wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as err:
                sock.close()
                return Outcome.FAILURE, f"Get {go_quote(current)}: {err}"
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.sock = sock
        try:
            conn.putrequest("GET", urllib.parse.urlunsplit(("", "", parts.path or "/",
                                                            parts.query, "")),
                            skip_host=any(n.lower() == "host" for n, _ in headers),
                            skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            conn.endheaders()
            response = conn.getresponse()
            body = response.read(MAX_OUTPUT).decode(errors="replace")
        except TimeoutError:
            return Outcome.FAILURE, (f"Get {go_quote(current)}: context deadline exceeded "
                                     "(Client.Timeout exceeded while awaiting headers)")
        except (http.client.RemoteDisconnected, http.client.IncompleteRead):
            return Outcome.FAILURE, f"Get {go_quote(current)}: EOF"
        except (OSError, http.client.HTTPException) as err:
            detail = _go_errno(err) if isinstance(err, OSError) else str(err)
            return Outcome.FAILURE, f"Get {go_quote(current)}: {detail}"
        finally:
            conn.close()
        status = response.status
        if 300 <= status < 400 and response.getheader("Location"):
            following = urllib.parse.urljoin(current, response.getheader("Location") or "")
            if urllib.parse.urlsplit(following).hostname == urllib.parse.urlsplit(url).hostname:
                current = following
                continue
            return Outcome.WARNING, f"Probe terminated redirects, Response body: {body}"
        if 200 <= status < 400:
            return Outcome.SUCCESS, body
        return Outcome.FAILURE, f"HTTP probe failed with statuscode: {status}"
    return Outcome.FAILURE, f"Get {go_quote(current)}: stopped after 10 redirects"


async def http_probe(target: ProbeTarget, action: Mapping[str, Any],
                     container: Mapping[str, Any], timeout: float) -> tuple[Outcome, str]:
    url = probe_url(action, container, target)
    headers = _headers(action)
    netns = "" if action.get("host") else target.netns
    try:
        return await run_in_netns(netns, lambda: _http_get(url, headers, timeout))
    except NetnsError as err:
        raise ProbeError(str(err)) from None


# --- grpc ----------------------------------------------------------------------------------


async def grpc_probe(target: ProbeTarget, port: int, service: str,
                     timeout: float) -> tuple[Outcome, str]:
    """The health check in a helper process inside the pod's network namespace (grpcio's own
    threads would not be in it otherwise)."""
    request = json.dumps({"netns": target.netns, "host": target.host(), "port": port,
                          "service": service, "timeout": timeout, "user_agent": USER_AGENT})
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ephemera.kubelet.prober.grpcprobe", request,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(timeout + 30):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ProbeError("the gRPC probe helper did not answer") from None
    try:
        answer = json.loads(out.decode())
        return Outcome(answer["outcome"]), str(answer["output"])
    except (ValueError, KeyError):
        detail = err.decode(errors="replace").strip().splitlines()
        raise ProbeError(f"the gRPC probe helper failed: {detail[-1] if detail else ''}") \
            from None

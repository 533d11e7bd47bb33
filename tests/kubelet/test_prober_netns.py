"""Network probes inside a real network namespace (as a pod sandbox has: only `lo`): a
server listening on 127.0.0.1 in the namespace is reached by the tcpSocket, httpGet and grpc
handlers given the namespace's path, and is not reachable from the host's namespace."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ephemera.kubelet.prober import handlers
from ephemera.kubelet.prober.handlers import Outcome, ProbeTarget

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")

SERVER = textwrap.dedent('''
    import sys, threading
    from concurrent import futures
    from http.server import BaseHTTPRequestHandler, HTTPServer
    import grpc

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/healthz" else 503)
            self.end_headers()
            self.wfile.write(b"in the pod")
        def log_message(self, *args):
            pass

    http = HTTPServer(("127.0.0.1", 8080), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(
            lambda request, context: b"\\x08\\x01",
            request_deserializer=lambda b: b, response_serializer=lambda b: b)}),))
    server.add_insecure_port("127.0.0.1:9090")
    server.start()
    print("ready", flush=True)
    sys.stdin.read()
''')


@pytest.fixture
def pod_netns(tmp_path: Path) -> Iterator[str]:
    """A network namespace bound to a file (with `lo` up) and servers listening in it."""
    path = tmp_path / "net"
    path.touch()
    subprocess.run(["unshare", f"--net={path}", "--", "ip", "link", "set", "lo", "up"],
                   check=True)
    server = subprocess.Popen(["nsenter", f"--net={path}", sys.executable, "-c", SERVER],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        assert server.stdout.readline() == b"ready\n"
        yield str(path)
    finally:
        server.kill()
        server.wait()
        for _ in range(50):
            if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)


async def test_probes_reach_the_namespace(pod_netns: str) -> None:
    host_netns = os.readlink("/proc/thread-self/ns/net")
    inside = ProbeTarget(netns=pod_netns)
    assert await handlers.tcp_probe(inside, "", 8080, 1) == (Outcome.SUCCESS, "")
    assert await handlers.http_probe(inside, {"path": "/healthz", "port": 8080}, {}, 1) == (
        Outcome.SUCCESS, "in the pod")
    assert await handlers.http_probe(inside, {"path": "/other", "port": 8080}, {}, 1) == (
        Outcome.FAILURE, "HTTP probe failed with statuscode: 503")
    assert await handlers.grpc_probe(inside, 9090, "", 2) == (Outcome.SUCCESS,
                                                              "service healthy")
    # The same port in the host's namespace is another socket (nothing listens there).
    outcome, _ = await handlers.tcp_probe(ProbeTarget(), "", 9090, 1)
    assert outcome == Outcome.FAILURE
    # The kubelet's threads stay in the host's namespace.
    assert os.readlink("/proc/thread-self/ns/net") == host_netns


async def test_a_missing_namespace_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(handlers.ProbeError) as err:
        await handlers.tcp_probe(ProbeTarget(netns=str(tmp_path / "gone")), "", 80, 1)
    assert str(err.value).startswith(f"opening network namespace {tmp_path / 'gone'}: ")

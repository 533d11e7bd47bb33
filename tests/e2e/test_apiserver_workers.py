"""`ephemera apiserver --workers 2` on a real etcd (issue 17, item 3): two worker processes
serve one port, the kernel spreading the connections (SO_REUSEPORT).

- A ConfigMap created through a connection served by one worker is seen by a watch served
  by the other (each worker has its own watch cache, fed by etcd); which worker serves a
  connection is read from /proc (the owner of the server side of the socket).
- Services created through both workers get distinct ClusterIPs and node ports.
- Each worker's `/metrics` names it (`ephemera_apiserver_worker_info`).
- A worker killed with SIGKILL: the other serves every new connection at once, the parent
  says so in one line and starts it again; the group is one member of the control plane
  (one identity Lease) and every request went into the one shared audit log.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from processes import Proc, tails, until

from ephemera.api.wellknown import APISERVER_IDENTITY_LABEL
from ephemera.apiserver.certs import Pki, ensure_pki
from etcdserver import EtcdServer

pytestmark = pytest.mark.e2e

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


@dataclass
class Workers:
    proc: Proc
    port: int
    pki: Pki
    audit_log: Path

    def pids(self) -> list[int]:
        """The worker processes (children of the parent)."""
        parent = self.proc.process.pid
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry))
        return sorted(found)

    def connect(self) -> http.client.HTTPSConnection:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert_path))
        ctx.load_cert_chain(self.pki.admin_cert_path, self.pki.admin_key_path)
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=30)
        conn.connect()
        return conn

    def serving_pid(self, conn: http.client.HTTPSConnection) -> int:
        """The worker that holds the server side of `conn`."""
        client_port = conn.sock.getsockname()[1]
        inode = _server_socket_inode(self.port, client_port)
        for pid in self.pids():
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                        return pid
                except OSError:
                    continue
        raise AssertionError(f"no worker holds the connection from port {client_port}")

    def request(self, conn: http.client.HTTPSConnection, method: str, path: str,
                body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())


def _server_socket_inode(server_port: int, client_port: int) -> int:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if (int(local.rsplit(":", 1)[1], 16) == server_port
                    and int(remote.rsplit(":", 1)[1], 16) == client_port):
                return int(fields[9])
    raise AssertionError(f"no socket from port {client_port} to {server_port}")


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    base = tmp_path_factory.mktemp("apiserver-workers")
    with EtcdServer(base / "etcd") as etcd:
        port_file = base / "apiserver.port"
        proc = Proc("apiserver", [
            "apiserver", "--data-dir", str(base / "d"), "--port", "0", "--port-file",
            str(port_file), "--store", "etcd", "--etcd-endpoints", etcd.endpoint,
            "--workers", "2", "--audit-log-path", str(base / "audit.log")],
            base / "apiserver.log").start()
        try:
            port = until(lambda: port_file.exists() and int(port_file.read_text()),
                         "two workers to serve", logs=tails([proc]))
            group = Workers(proc, port, ensure_pki(base / "d"), base / "audit.log")
            assert len(group.pids()) == 2
            yield group
        finally:
            pids = group.pids() if "group" in locals() else []
            assert proc.stop() == 0
            assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]


def _configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"k": "v"}}


def test_a_create_through_one_worker_is_seen_by_a_watch_on_the_other(
        workers: Workers) -> None:
    watch_conn = workers.connect()
    status, listed = workers.request(watch_conn, "GET", CONFIGMAPS)
    assert status == 200
    watcher = workers.serving_pid(watch_conn)
    watch_conn.request("GET", f"{CONFIGMAPS}?watch=true&resourceVersion="
                              f"{listed['metadata']['resourceVersion']}")
    stream = watch_conn.getresponse()
    assert stream.status == 200
    for _attempt in range(60):  # a new connection until the kernel hands one to the other
        conn = workers.connect()
        if workers.serving_pid(conn) != watcher:
            break
        conn.close()
    else:
        pytest.fail("60 connections all went to one worker")
    status, created = workers.request(conn, "POST", CONFIGMAPS, _configmap("across"))
    assert status == 201, created
    event = json.loads(stream.readline())
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["name"] == "across"
    assert event["object"]["metadata"]["resourceVersion"] == \
        created["metadata"]["resourceVersion"]
    conn.close()
    watch_conn.close()


def test_workers_allocate_cluster_ips_through_the_store(workers: Workers) -> None:
    """Services created through both workers get distinct ClusterIPs (the allocator is a
    compare-and-swap of the range in etcd, not a worker's memory)."""
    by_worker: dict[int, list[str]] = {}
    for i in range(40):
        conn = workers.connect()
        pid = workers.serving_pid(conn)
        if len(by_worker.get(pid, [])) < 3:
            status, body = workers.request(conn, "POST", "/api/v1/namespaces/default/services", {
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": f"s{i}"},
                "spec": {"ports": [{"port": 80}], "type": "NodePort"}})
            assert status == 201, body
            by_worker.setdefault(pid, []).append(
                f"{body['spec']['clusterIP']}/{body['spec']['ports'][0]['nodePort']}")
        conn.close()
        if len(by_worker) == 2 and all(len(v) == 3 for v in by_worker.values()):
            break
    else:
        pytest.fail(f"40 connections did not reach both workers 3 times: {by_worker}")
    allocated = [ip for ips in by_worker.values() for ip in ips]
    ips = {a.split("/")[0] for a in allocated}
    ports = {a.split("/")[1] for a in allocated}
    assert len(ips) == len(ports) == 6


def test_each_workers_metrics_name_it(workers: Workers) -> None:
    """A scrape of the shared port answers for one worker, and says which: its
    `ephemera_apiserver_worker_info` (what `bench.scale` sums the workers' latencies by)."""
    named: dict[int, set[str]] = {}
    for _attempt in range(60):
        conn = workers.connect()
        pid = workers.serving_pid(conn)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        named.setdefault(pid, set()).update(
            re.findall(r'^ephemera_apiserver_worker_info\{worker="(\d+)"\} 1\.0$', text,
                       re.M))
        if len(named) == 2:
            break
    else:
        pytest.fail("60 connections all went to one worker")
    assert sorted(names for found in named.values() for names in found) == ["0", "1"]
    assert all(len(found) == 1 for found in named.values()), named


def test_a_killed_worker_is_restarted_and_the_cluster_goes_on(workers: Workers) -> None:
    before = workers.pids()
    os.kill(before[0], signal.SIGKILL)
    # Reaped by the parent: its sockets are closed.
    until(lambda: not os.path.exists(f"/proc/{before[0]}"), "the worker to die")
    # Right away, every new connection goes to the live worker.
    for i in range(4):
        conn = workers.connect()
        status, body = workers.request(conn, "POST", f"{CONFIGMAPS}?fieldManager=after-{i}",
                                       _configmap(f"after-{i}"))
        assert status == 201, body
        conn.close()
    after = until(lambda: (lambda pids: pids if len(pids) == 2 and before[0] not in pids
                           else None)(workers.pids()), "the worker to be restarted",
                  logs=tails([workers.proc]))
    assert before[1] in after
    assert f"(pid {before[0]}) exited: killed by SIGKILL; restarting" in workers.proc.text()
    until(lambda: len(re.findall(r"worker \d serving on https", workers.proc.text())) >= 3,
          "the new worker to serve", logs=tails([workers.proc]))
    conn = workers.connect()
    status, leases = workers.request(
        conn, "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
                     f"?labelSelector={APISERVER_IDENTITY_LABEL}%3Dkube-apiserver")
    assert status == 200
    assert len(leases["items"]) == 1  # two workers, one member of the control plane
    conn.close()
    events = [json.loads(line) for line in workers.audit_log.read_bytes().splitlines()]
    managers = [e["requestURI"].rsplit("=", 1)[1] for e in events
                if e["verb"] == "create" and e["stage"] == "ResponseComplete"
                and "fieldManager=after-" in e["requestURI"]]
    assert sorted(managers) == [f"after-{i}" for i in range(4)]


def test_workers_that_cannot_start_end_the_command(tmp_path: Path) -> None:
    """A worker that exits before the group serves (here: a missing audit policy) is not
    restarted in a loop: the command exits 1 with the worker's error."""
    result = subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "apiserver", "--data-dir", str(tmp_path / "d"),
         "--port", "0", "--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:9",
         "--workers", "2", "--audit-log-path", str(tmp_path / "audit.log"),
         "--audit-policy-file", str(tmp_path / "nope.yaml")],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 1, result.stderr
    assert "ephemera apiserver: audit:" in result.stderr
    assert "exited before serving: exit code 1" in result.stderr
    assert "restarting" not in result.stderr


def test_an_unreachable_etcd_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """No etcd at `--etcd-endpoints`: the cause in one line, no Python traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "apiserver", "--data-dir", str(tmp_path / "d"),
         "--port", "0", "--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:9"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 1, result.stderr
    assert "ephemera apiserver: the store (etcd): etcd UNAVAILABLE" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr

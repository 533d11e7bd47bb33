"""Usage errors of the control-plane flags (exit 2 with argparse's message, nothing started):
`ephemera apiserver --tls-cert-file/--tls-private-key-file/--client-ca-file`,
`--apiserver-endpoints`, `ephemera up --join-control-plane`, `ephemera join --control-plane`;
and `share_identity`'s checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from ephemera.cli.apiserverworkers import cannot_serve
from ephemera.cli.controlplane import ControlPlaneError, share_identity
from ephemera.cli.main import build_parser


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        args = build_parser().parse_args(argv)
        args.func(args)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_apiserver_tls_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cert = tmp_path / "c.crt"
    cert.write_text("x")
    data = ["apiserver", "--data-dir", str(tmp_path / "d")]
    assert "--tls-cert-file and --tls-private-key-file go together" in usage_error(
        [*data, "--tls-cert-file", str(cert)], capsys)
    assert f"--client-ca-file: no such file: {tmp_path / 'nope'}" in usage_error(
        [*data, "--client-ca-file", str(tmp_path / "nope")], capsys)
    assert "'lb.example' is not an IP address" in usage_error(
        [*data, "--advertise-address", "lb.example"], capsys)
    assert "'0.0.0.0': an address others can reach" in usage_error(
        [*data, "--advertise-address", "0.0.0.0"], capsys)
    args = build_parser().parse_args([*data, "--tls-san", "lb.example,10.0.0.9",
                                      "--tls-san", "other"])
    assert args.tls_san == [["lb.example", "10.0.0.9"], ["other"]]


def test_apiserver_endpoints_are_urls(capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(["scheduler", "--apiserver-endpoints", "127.0.0.1:6443"], capsys)
    assert "comma-separated apiserver URLs such as https://10.0.0.1:6443" in err
    args = build_parser().parse_args(
        ["scheduler", "--apiserver-endpoints", "https://a:1, https://b:2/"])
    assert args.apiserver_endpoints == ["https://a:1", "https://b:2/"]


def test_up_join_control_plane_needs_etcd_and_a_control_plane(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    up = ["up", "--data-dir", str(tmp_path / "b"), "--join-control-plane", str(tmp_path / "a")]
    assert "--join-control-plane needs --store etcd" in usage_error(up, capsys)
    err = usage_error([*up, "--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:1"],
                      capsys)
    assert f"{tmp_path / 'a'} is not a control plane's data dir" in err


def test_join_control_plane_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    join = ["join", "--server", "https://127.0.0.1:1", "--token", "abcdef.0123456789abcdef",
            "--ca-cert", str(ca)]
    assert "--certificate-key goes with --control-plane" in usage_error(
        [*join, "--root-dir", str(tmp_path), "--certificate-key", "ab" * 32], capsys)
    assert "required: --root-dir" in usage_error(join, capsys)
    assert "--control-plane needs --certificate-key and --data-dir" in usage_error(
        [*join, "--control-plane"], capsys)
    assert "--control-plane needs --store etcd" in usage_error(
        [*join, "--control-plane", "--certificate-key", "ab" * 32, "--data-dir",
         str(tmp_path / "b")], capsys)
    assert "--certificate-key: a certificate key is 64 hex digits" in usage_error(
        [*join, "--control-plane", "--certificate-key", "abc", "--data-dir",
         str(tmp_path / "b"), "--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:1"],
        capsys)


def test_share_identity_copies_the_shared_files_and_refuses_another_ca(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    (first / "pki").mkdir(parents=True)
    for name in ("ca.crt", "ca.key", "sa.key", "sa.pub"):
        (first / "pki" / name).write_text(f"{name} data")
    share_identity(first, second)
    assert (second / "pki" / "ca.key").read_text() == "ca.key data"
    assert (second / "pki" / "ca.key").stat().st_mode & 0o777 == 0o600
    assert (second / "pki" / "ca.crt").stat().st_mode & 0o777 == 0o644
    share_identity(first, second)  # again: the same CA is fine
    (second / "pki" / "ca.crt").write_text("another CA")
    with pytest.raises(ControlPlaneError, match="already has another cluster's CA"):
        share_identity(first, second)
    with pytest.raises(ControlPlaneError, match="a --data-dir of its own"):
        share_identity(first, first)


def test_node_address_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ephemera.cli.up import Cluster

    data = ["up", "--data-dir", str(tmp_path / "d")]
    assert "'node.example' is not an IP address" in usage_error(
        [*data, "--node-ip", "node.example"], capsys)
    assert "'0.0.0.0': the node's own address" in usage_error(
        [*data, "--node-ip", "0.0.0.0"], capsys)
    assert "'lb' is not an IP address" in usage_error([*data, "--bind-address", "lb"], capsys)
    assert "'x' is not an IP address" in usage_error(
        ["kubelet", "--kubeconfig", "k", "--root-dir", "r", "--address", "x"], capsys)
    # Both given: no interface is made; listening everywhere advertises the node address.
    cluster = Cluster(build_parser().parse_args(
        [*data, "--bind-address", "0.0.0.0", "--node-ip", "198.18.0.9"]))
    cluster.choose_addresses()
    assert not cluster.own_interface
    api = cluster.apiserver_argv()
    assert api[api.index("--bind-address") + 1] == "0.0.0.0"
    assert api[api.index("--advertise-address") + 1] == "198.18.0.9"
    kubelet = cluster.kubelet_argv()
    assert kubelet[kubelet.index("--node-ip") + 1] == "198.18.0.9"
    assert "--mount-service-account-token=false" not in api  # upstream's default: mounted
    off = Cluster(build_parser().parse_args(
        [*data, "--bind-address", "198.18.0.9", "--node-ip", "198.18.0.9",
         "--mount-service-account-token=false"]))
    off.choose_addresses()
    argv = off.apiserver_argv()
    assert "--mount-service-account-token=false" in argv and "--advertise-address" not in argv


def test_apiserver_workers_need_etcd(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ephemera.cli.up import Cluster

    data = ["apiserver", "--data-dir", str(tmp_path / "d")]
    assert ("--workers 2 needs --store etcd: the sqlite store is one process's"
            in usage_error([*data, "--workers", "2"], capsys))
    assert "--workers must be at least 1" in usage_error([*data, "--workers", "0"], capsys)
    assert "--apiserver-workers must be at least 1" in usage_error(
        ["up", "--data-dir", str(tmp_path / "u"), "--apiserver-workers", "0"], capsys)
    up = ["up", "--data-dir", str(tmp_path / "u")]
    assert "--apiserver-workers 3 needs --store etcd" in usage_error(
        [*up, "--apiserver-workers", "3"], capsys)
    etcd = [*up, "--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:1"]
    cluster = Cluster(build_parser().parse_args([*etcd, "--apiserver-workers", "2"]))
    cluster.choose_addresses()
    api = cluster.apiserver_argv()
    assert api[api.index("--workers") + 1] == "2"
    one = Cluster(build_parser().parse_args(up))  # sqlite: one worker, no flag
    one.choose_addresses()
    assert "--workers" not in one.apiserver_argv()


def test_worker_argv_overrides_come_last(tmp_path: Path) -> None:
    from ephemera.cli.apiserverworkers import worker_argv

    command = ["-v", "apiserver", "--data-dir", "d", "--port", "0", "--workers", "2",
               "--port-file", "p"]
    argv = worker_argv(command, 7443, 1, tmp_path / "w1.port")
    args = build_parser().parse_args(argv[3:])  # after `python -m ephemera.cli`
    assert (args.port, args.workers, args.worker_index) == (7443, 1, 1)
    assert args.port_file == tmp_path / "w1.port" and args.verbose


def test_a_worker_group_does_not_share_a_port_another_server_holds() -> None:
    import socket

    from ephemera.cli.apiserverworkers import reserve_port

    first = reserve_port("127.0.0.1", 0)  # a group's reservation
    try:
        port = first.getsockname()[1]
        listening = socket.socket()
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listening.bind(("127.0.0.1", port))  # its worker
        listening.listen()
        try:
            with pytest.raises(OSError):
                reserve_port("127.0.0.1", port)
        finally:
            listening.close()
    finally:
        first.close()


def test_default_workers() -> None:
    from ephemera.cli.apiserverworkers import default_workers

    assert [default_workers("sqlite", n) for n in (1, 2, 16)] == [1, 1, 1]
    assert [default_workers("etcd", n) for n in (1, 2, 3, 4, 6, 16)] == [1, 2, 2, 2, 3, 4]


async def test_worker_group_sessions_and_a_worker_that_will_not_stop(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Workers run in sessions of their own (a terminal's Ctrl-C reaches only the parent,
    which stops them); one that ignores SIGTERM is killed after the grace, and it is said."""
    import asyncio
    import os
    import sys

    from ephemera.cli.apiserverworkers import WorkerGroup

    script = ("import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "pathlib.Path(sys.argv[1]).write_text('1'); time.sleep(60)")
    group = WorkerGroup(lambda i, port_file: [sys.executable, "-c", script, str(port_file)],
                        1, tmp_path)
    group.start()
    async with asyncio.timeout(30):
        while not group.ready():
            await asyncio.sleep(0.05)
    process = group.processes[0]
    assert process is not None
    assert os.getsid(process.pid) == process.pid != os.getsid(0)
    await group.stop(grace=0.2)
    assert process.returncode == -9
    assert (f"ephemera apiserver: worker 0 (pid {process.pid}) did not stop in 0.2s; "
            "killing it") in capsys.readouterr().err


def test_a_port_that_cannot_be_served_is_said_in_the_systems_words() -> None:
    # asyncio's own text quotes the address as a Python tuple
    busy = OSError(98, "error while attempting to bind on address ('127.0.0.1', 6443): "
                       "address already in use")
    assert cannot_serve("127.0.0.1", 6443, busy) == (
        "ephemera apiserver: cannot serve on 127.0.0.1:6443: address already in use")
    assert cannot_serve("0.0.0.0", 443, PermissionError(13, "denied")).endswith(
        "cannot serve on 0.0.0.0:443: permission denied")

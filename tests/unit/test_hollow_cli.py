"""`ephemera hollow-nodes` and `up --hollow-nodes` flags: what `up` hands its hollow-nodes
child parses back to the same settings, and a hollow-node flag without `--hollow-nodes` is
refused, not ignored; the Nodes and Leases on a client of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from ephemera.cli import hollow
from ephemera.cli.main import build_parser
from ephemera.cli.up import run as up_run
from ephemera.client import ApiClient, ClientConfig
from ephemera.kubelet.hollow import HollowConfig, HollowNodes


def _parse(*argv: str) -> object:
    return build_parser().parse_args(list(argv))


def test_up_hands_the_hollow_flags_on_unchanged() -> None:
    args = _parse("up", "--data-dir", "/tmp/d", "--hollow-nodes", "3", "--capacity",
                  "cpu=8,pods=20", "--labels", "a=b,c=d", "--register-with-taints",
                  "x=y:NoSchedule,z:NoExecute", "--pod-lifetime", "30",
                  "--node-name-prefix", "sim-")
    child = _parse("hollow-nodes", "--count", "3", *hollow.hollow_flags(args))
    for name in hollow.HOLLOW_FLAGS:
        assert getattr(child, name) == getattr(args, name), name
    assert child.capacity["cpu"] == "8" and child.capacity["memory"] == "16Gi"


def test_a_hollow_flag_without_hollow_nodes_is_refused(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    parser = build_parser()
    args = parser.parse_args(["up", "--data-dir", "/tmp/d", "--pod-lifetime", "5"])
    with pytest.raises(SystemExit) as exited:
        up_run(parser._subparsers._group_actions[0].choices["up"], args)  # type: ignore[union-attr]
    assert exited.value.code == 2
    assert "--pod-lifetime: only with --hollow-nodes" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--count", "0"], "must be at least 1"),
    (["--count", "2", "--capacity", "cpu=many"], "failed to parse quantity"),
    (["--count", "2", "--register-with-taints", "k=v"], "invalid taint"),
    (["--count", "2", "--pod-lifetime", "-1"], "must be positive"),
])
def test_bad_flags_are_refused(argv: list[str], message: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse("hollow-nodes", *argv)
    assert message in capsys.readouterr().err


def test_nodes_and_leases_go_through_their_own_client(tmp_path: Path) -> None:
    """With a heartbeat client the Nodes and Leases are written through it (its own
    connection pool: a renewal never waits for a connection behind the pods' status writes
    and events, whose wait aiohttp counts against the connect timeout), everything about
    the pods through the main client."""
    main = ApiClient(ClientConfig(server="http://127.0.0.1:1"))
    heartbeat = ApiClient(ClientConfig(server="http://127.0.0.1:1"))
    nodes = HollowNodes(main, HollowConfig(count=2, root_dir=tmp_path), heartbeat)
    for node in nodes.nodes.values():
        assert node.node_agent.api is heartbeat
        assert node.status.api is main and node.workers.deps.api is main
    alone = HollowNodes(main, HollowConfig(count=1, root_dir=tmp_path))
    assert alone.nodes["hollow-node-0"].node_agent.api is main

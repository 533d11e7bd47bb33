"""The shared flags' parsers: Go durations as `time.ParseDuration` reads them (the
`--leader-elect-*` timings), and the leader election configuration built from the flags."""

from __future__ import annotations

import argparse

import pytest

from ephemera.cli import flags


@pytest.mark.parametrize(("text", "seconds"), [
    ("15s", 15.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5h", 5400.0), ("0", 0.0),
    ("-2s", -2.0), ("+3s", 3.0), ("2us", 2e-6), ("10ns", 1e-8), (".5s", 0.5),
    ("1h1m1s", 3661.0),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert flags.parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "message"), [
    ("15", 'time: missing unit in duration "15"'),
    ("1s5", 'time: missing unit in duration "1s5"'),
    ("", 'time: invalid duration ""'),
    ("s", 'time: invalid duration "s"'),
    (".s", 'time: invalid duration ".s"'),
    ("1x", 'time: unknown unit "x" in duration "1x"'),
    ("1 s", 'time: unknown unit " s" in duration "1 s"'),
])
def test_bad_go_durations(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        flags.parse_go_duration(text)
    assert str(err.value) == message


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="test")
    flags.add_leader_election(p, "kube-scheduler")
    return p


def test_leader_election_defaults_are_upstreams() -> None:
    p = parser()
    config = flags.leader_election_config(p, p.parse_args([]), release_on_cancel=True)
    assert config is not None
    assert (config.namespace, config.name, config.lease_duration, config.renew_deadline,
            config.retry_period, config.release_on_cancel) == (
        "kube-system", "kube-scheduler", 15.0, 10.0, 2.0, True)
    host, _, uid = config.identity.rpartition("_")
    assert host and len(uid) == 36


def test_leader_elect_false_turns_it_off_and_names_move_the_lease() -> None:
    p = parser()
    assert flags.leader_election_config(p, p.parse_args(["--leader-elect=false"]),
                                        release_on_cancel=False) is None
    args = p.parse_args(["--leader-elect", "--leader-elect-resource-name", "mine",
                         "--leader-elect-resource-namespace", "elsewhere"])
    config = flags.leader_election_config(p, args, release_on_cancel=False)
    assert config is not None and (config.namespace, config.name) == ("elsewhere", "mine")


def test_the_feature_gates_help_names_every_gate() -> None:
    from ephemera.api.featuregates import DEFAULTS, DYNAMIC_VOLUME_HOT_PLUG
    from ephemera.cli.flags import add_feature_gates

    parser = argparse.ArgumentParser()
    add_feature_gates(parser)
    text = " ".join(parser.format_help().split())
    assert DYNAMIC_VOLUME_HOT_PLUG in text
    assert all(name in text for name in DEFAULTS)
    assert "all default true" in text

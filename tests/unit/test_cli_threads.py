"""Every component process runs with the short GIL switch interval `ephemera.cli.main` sets."""

from __future__ import annotations

import sys

import pytest

from ephemera.cli import main as cli_main


def test_main_sets_the_switch_interval_before_any_command_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli_main, "tune_gc", lambda: None)  # not this test process's GC
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)  # Python's default
        with pytest.raises(SystemExit):
            cli_main.main(["--help"])
        assert sys.getswitchinterval() == pytest.approx(cli_main.SWITCH_INTERVAL)
    finally:
        sys.setswitchinterval(before)
    assert "usage" in capsys.readouterr().out
    assert cli_main.SWITCH_INTERVAL < 0.005

"""Every component process runs with the short GIL switch interval `ephemera.cli.main` sets."""

from __future__ import annotations

import subprocess
import sys

from ephemera.cli.main import SWITCH_INTERVAL


def test_main_sets_the_switch_interval_before_any_command_runs() -> None:
    code = ("import contextlib, sys; from ephemera.cli import main as m\n"
            "with contextlib.redirect_stdout(sys.stderr), contextlib.suppress(SystemExit):\n"
            "    m.main(['--help'])\n"
            "print(sys.getswitchinterval())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert SWITCH_INTERVAL < 0.005  # shorter than Python's default
    assert out == [str(SWITCH_INTERVAL)]

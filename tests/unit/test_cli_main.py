"""`ephemera`'s command line: a command line that names its command imports only that
command's module (each component of `ephemera up` is a process of its own and would
otherwise import every other component at start); without one, every command is offered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ephemera.cli.main import COMMANDS, GC_YOUNG_THRESHOLD, SWITCH_INTERVAL, build_parser


def _modules_after(argv: list[str]) -> set[str]:
    """The `ephemera.cli` command modules imported by building the parser for `argv`, in a
    fresh interpreter."""
    code = ("import sys; from ephemera.cli.main import COMMANDS, GC_YOUNG_THRESHOLD, build_parser; "
            f"build_parser({argv!r}); "
            "print(' '.join(m for m in COMMANDS.values() if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return set(out.split())


def test_a_named_command_imports_only_its_own_module() -> None:
    assert _modules_after(["-v", "scheduler", "--kubeconfig", "k"]) == {"ephemera.cli.scheduler"}
    # controller-manager's module uses the token command's rules; none of the components'
    assert _modules_after(["controller-manager"]) & {
        "ephemera.cli.up", "ephemera.cli.apiserver", "ephemera.cli.kubelet",
        "ephemera.cli.hollow"} == set()


def test_without_a_known_command_every_command_is_offered(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _modules_after(["--help"]) == set(COMMANDS.values())
    with pytest.raises(SystemExit) as exit_info:
        build_parser(["bogus"]).parse_args(["bogus"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus' (choose from " + ", ".join(
        f"'{name}'" for name in COMMANDS) + ")" in err


def test_the_parser_for_one_command_parses_as_the_full_one() -> None:
    argv = ["proxy", "--cluster-cidr", "10.1.0.0/16"]
    assert vars(build_parser(argv).parse_args(argv)).keys() == \
        vars(build_parser().parse_args(argv)).keys()


def test_every_command_runs_with_the_components_gc_and_thread_settings(tmp_path: Path) -> None:
    """`main` freezes what the imports made, collects young objects far less often (the
    components hold large informer caches) and shortens the GIL switch interval (threads back
    from a system call wait less; docs/benchmarks.md has both measurements): seen after a
    command ran through `main` in a fresh interpreter."""
    code = ("import gc, sys; from ephemera.cli.main import main; "
            f"rc = main(['images', 'list', '--root-dir', {str(tmp_path)!r}, '-o', 'json']); "
            "print('gc', rc, gc.get_threshold()[0], gc.get_freeze_count() > 1000, "
            "sys.getswitchinterval())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[-1].split() == ["gc", "0", str(GC_YOUNG_THRESHOLD), "True",
                               str(SWITCH_INTERVAL)]
    assert float(out[-1].split()[-1]) != 0.005  # not Python's default

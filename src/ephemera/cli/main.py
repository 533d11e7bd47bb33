"""The `ephemera` console script: argparse with one subcommand per module listed in
`COMMANDS`. A command module provides `add_parser(subparsers)` (which registers its parser
and sets `func`) and is run as `func(args) -> exit code`. Later components (scheduler,
controllers, kubelet) add themselves by adding their module to `COMMANDS`."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib import import_module

# Subcommand modules, in help order.
COMMANDS = (
    "ephemera.cli.up",
    "ephemera.cli.apiserver",
    "ephemera.cli.scheduler",
    "ephemera.cli.controllers",
    "ephemera.cli.images",
    "ephemera.cli.kubelet",
    "ephemera.cli.proxy",
    "ephemera.cli.dns",
    "ephemera.cli.hollow",
    "ephemera.cli.join",
    "ephemera.cli.tokens",
    "ephemera.cli.dynamic",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ephemera",
        description="A small Kubernetes: dynamic node-local volumes and pod-level "
                    "ephemeral storage, served to kubectl and the Kubernetes clients.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        import_module(name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # The command line as given (`ephemera apiserver --workers` starts its workers with it).
    args.command_argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())

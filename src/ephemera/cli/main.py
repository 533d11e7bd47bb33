"""The `ephemera` console script: argparse with one subcommand per module listed in
`COMMANDS`. A command module provides `add_parser(subparsers)` (which registers its parser
and sets `func`) and is run as `func(args) -> exit code`. Later components (scheduler,
controllers, kubelet) add themselves by adding their module to `COMMANDS`.

A command line that names its command imports only that command's module: every component
`ephemera up` starts is a process of its own, and importing all the others' modules (the
apiserver's, the hollow nodes', ...) cost each of them about a second of CPU at start. Without
a known command (`ephemera --help`, a typo) every module is imported, so the help and
argparse's "invalid choice" list name them all. Every command runs with the components'
garbage-collector settings (`tune_gc`), GIL switch interval (`tune_threads`) and event loop
(`use_uvloop`)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from collections.abc import Sequence
from importlib import import_module

import uvloop

# Subcommand names and their modules, in help order.
COMMANDS: dict[str, str] = {
    "up": "ephemera.cli.up",
    "apiserver": "ephemera.cli.apiserver",
    "scheduler": "ephemera.cli.scheduler",
    "controller-manager": "ephemera.cli.controllers",
    "images": "ephemera.cli.images",
    "kubelet": "ephemera.cli.kubelet",
    "proxy": "ephemera.cli.proxy",
    "dns": "ephemera.cli.dns",
    "hollow-nodes": "ephemera.cli.hollow",
    "join": "ephemera.cli.join",
    "token": "ephemera.cli.tokens",
    "dynamic": "ephemera.cli.dynamic",
}


def _named_command(argv: Sequence[str]) -> str | None:
    """The command a command line names: its first argument that is not an option (the
    top-level options take no values), if it is one of `COMMANDS`."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: with only the named command's subparser when `argv` names one,
    else with all of them."""
    parser = argparse.ArgumentParser(
        prog="ephemera",
        description="A small Kubernetes: dynamic node-local volumes and pod-level "
                    "ephemeral storage, served to kubectl and the Kubernetes clients.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    named = None if argv is None else _named_command(argv)
    for name, module in COMMANDS.items():
        if named is None or name == named:
            import_module(module).add_parser(subparsers)
    return parser


# The cyclic garbage collector's first threshold (allocations between young collections;
# Python's default is 700). The components hold every object their informers list: with the
# default, objects that would die young were promoted and the full collections walking the
# whole heap took 35% of the hollow nodes' CPU and 88% of the controller-manager's at 3,000
# pods (measured with `gc.callbacks`; docs/benchmarks.md). 200,000 rather than 50,000: at
# 1,000 nodes and 15,000 pods on etcd, three runs a side, 6.4-6.9 ms of the hollow nodes' CPU
# a pod against 7.0-7.9, and 47.9-51.1 pods a second against 43.0-50.1.
GC_YOUNG_THRESHOLD = 200_000


def tune_gc() -> None:
    """What the imports made lives as long as the process: out of the collector's walks
    (`gc.freeze`); and young collections far less often, so fewer objects are promoted."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


# How long a thread waiting for the GIL waits before it asks the running one to hand it over
# (`sys.setswitchinterval`; Python's default is 5 ms). The components' event loops hand their
# blocking work to threads (the store's writer and its fsync, the kubelet's checkpoint and
# runtime calls), and such a thread takes the GIL back after each system call: while the
# loop computes, each of those waits could last the whole interval. With 1 ms, bench.write_path
# (the apiserver's two writes of a live swap) answered its PUT at 9.9-11.0 ms p50 against
# 15.1-26.0 ms with the default, alternated on a loaded machine, with less CPU per write.
SWITCH_INTERVAL = 0.001


def tune_threads() -> None:
    """A thread back from a system call gets the GIL within `SWITCH_INTERVAL`."""
    sys.setswitchinterval(SWITCH_INTERVAL)


def use_uvloop() -> None:
    """Every `asyncio.run` of the command runs on uvloop (libuv's loop and its own TCP, TLS
    and pipe transports) instead of asyncio's pure-Python selector loop: the same asyncio API,
    with less CPU per callback, per socket read and per TLS write: 5.9% fewer instructions
    per `bench.write_path` iteration, and 13-22% less apiserver CPU for the same pods in
    `bench.scale` (docs/benchmarks.md, "uvloop")."""
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


class ClosedTlsWriteFilter(logging.Filter):
    """uvloop's TLS transport, asked to write after its peer closed the connection, has the
    loop log `Fatal error on SSL protocol` at ERROR with a traceback ending in `RuntimeError:
    unable to perform operation on <TCPTransport closed=True ...>; the handler is closed`
    (a race in uvloop's shutdown of the connection, nothing lost that the closed connection's
    own error does not report). This filter keeps that out of the components' logs, and with
    `-v` turns it into one DEBUG line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not (str(record.msg).startswith("Fatal error on SSL protocol") and
                isinstance(exc, RuntimeError) and "handler is closed" in str(exc)):
            return True
        if not logging.getLogger().isEnabledFor(logging.DEBUG):
            return False
        record.msg, record.args = "a TLS write after the connection closed (uvloop); dropped", ()
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(given)
    tune_gc()
    tune_threads()
    use_uvloop()
    args = parser.parse_args(given)
    # The command line as given (`ephemera apiserver --workers` starts its workers with it).
    args.command_argv = given
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("asyncio").addFilter(ClosedTlsWriteFilter())
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())

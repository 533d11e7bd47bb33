"""`ephemera scheduler`: the scheduler as its own process, talking to the apiserver named in a
kubeconfig (`--kubeconfig`, else `$KUBECONFIG` or `~/.kube/config`). It stops on SIGTERM or
SIGINT; `ephemera up` runs it as a supervised child with a kubeconfig of its own
(`system:kube-scheduler`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from ephemera.cli import flags
from ephemera.client import ApiClient, KubeconfigError, load_kubeconfig
from ephemera.client.apiservers import discovering
from ephemera.scheduler import DEFAULT_SCHEDULER_NAME, run_scheduler

log = logging.getLogger("ephemera.scheduler")


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "scheduler", help="run the scheduler",
        description="Assign pending pods to nodes through the API server.")
    parser.add_argument("--kubeconfig", type=Path, default=None, metavar="FILE",
                        help="how to reach the API server (default: $KUBECONFIG, then "
                             "~/.kube/config)")
    flags.add_feature_gates(parser)
    flags.add_apiserver_endpoints(parser)
    parser.set_defaults(func=lambda args: run(parser, args))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        config = load_kubeconfig(args.kubeconfig)
    except KubeconfigError as err:
        parser.error(str(err))
    try:
        return asyncio.run(_serve(config, args))
    except KeyboardInterrupt:
        return 0


async def _serve(config: Any, args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"ephemera scheduler ({DEFAULT_SCHEDULER_NAME}) using {config.server}",
          file=sys.stderr, flush=True)
    async with ApiClient(config, user_agent="ephemera-scheduler",
                         endpoints=args.apiserver_endpoints) as api, discovering(api):
        await run_scheduler(api, args.feature_gates, stop)
    log.info("stopped")
    return 0

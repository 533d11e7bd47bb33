"""`ephemera scheduler`: the scheduler as its own process, talking to the apiserver named in a
kubeconfig (`--kubeconfig`, else `$KUBECONFIG` or `~/.kube/config`). It stops on SIGTERM or
SIGINT; `ephemera up` runs it as a supervised child with a kubeconfig of its own
(`system:kube-scheduler`).

With `--leader-elect` (the default, as upstream) it schedules only while it holds the Lease
`kube-system/kube-scheduler` (`ephemera.client.leaderelection`), so several schedulers never
both bind; one that loses the Lease exits 1 (`Leaderelection lost`), as kube-scheduler does,
and one stopped by a signal releases the Lease first so another takes over at once."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.cli import flags
from ephemera.client import ApiClient, EventRecorder, KubeconfigError, load_kubeconfig
from ephemera.client.apiservers import discovering
from ephemera.client.leaderelection import LeaderElectionConfig, LeaderElector, LeaseLock
from ephemera.scheduler import DEFAULT_SCHEDULER_NAME, Scheduler, run_scheduler

log = logging.getLogger("ephemera.scheduler")


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "scheduler", help="run the scheduler",
        description="Assign pending pods to nodes through the API server.")
    parser.add_argument("--kubeconfig", type=Path, default=None, metavar="FILE",
                        help="how to reach the API server (default: $KUBECONFIG, then "
                             "~/.kube/config)")
    flags.add_feature_gates(parser)
    flags.add_leader_election(parser, "kube-scheduler")
    flags.add_apiserver_endpoints(parser)
    parser.set_defaults(func=lambda args: run(parser, args))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    # kube-scheduler releases its Lease when asked to stop (`ReleaseOnCancel: true`).
    election = flags.leader_election_config(parser, args, release_on_cancel=True)
    try:
        config = load_kubeconfig(args.kubeconfig)
    except KubeconfigError as err:
        parser.error(str(err))
    try:
        return asyncio.run(_serve(config, args, election))
    except KeyboardInterrupt:
        return 0


async def _serve(config: Any, args: argparse.Namespace,
                 election: LeaderElectionConfig | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with ApiClient(config, user_agent="ephemera-scheduler",
                         endpoints=args.apiserver_endpoints) as api, discovering(api):
        print(f"ephemera scheduler ({DEFAULT_SCHEDULER_NAME}) using {api.server}",
              file=sys.stderr, flush=True)
        if election is None:
            await run_scheduler(api, args.feature_gates, stop)
        else:
            # upstream records leader election events as the first profile's scheduler.
            lock = LeaseLock(api, election.namespace, election.name, election.identity,
                             EventRecorder(api, DEFAULT_SCHEDULER_NAME))
            elector = LeaderElector(election, lock)
            # The informers run from the start; scheduling only once leading.
            leading = asyncio.Event()
            scheduler = asyncio.create_task(
                Scheduler(api, args.feature_gates).run(leading), name="scheduler")

            async def lead() -> None:
                leading.set()
                await scheduler

            try:
                stopped = await elector.run(lead, stop)
            finally:
                await cancel_and_wait(scheduler)
            if not stopped:
                log.error("Leaderelection lost")
                return 1
            log.info("Requested to terminate, exiting")
    log.info("stopped")
    return 0

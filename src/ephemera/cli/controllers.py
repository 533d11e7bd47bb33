"""`ephemera controller-manager`: the controllers (`ephemera.controllers`) in one process, as
upstream's kube-controller-manager, talking to the apiserver named by `--kubeconfig`.

It runs the node lifecycle controller (nodes whose kubelet stopped renewing its Lease are
marked unknown and tainted), the service accounts controller (a `default` ServiceAccount in
every namespace) and the ResourceQuota controller (`status.hard` and `status.used` of every quota,
recomputed on pod and quota changes and every `--resync-period` seconds); with
`--root-ca-file` the root CA publisher (`kube-root-ca.crt` in every namespace); always the
CSR approver (kubelet client certificates of bootstrapping and renewing nodes), and with
`--cluster-signing-cert-file`/`--cluster-signing-key-file` the CSR signer. It stops cleanly on
SIGTERM or SIGINT; when the apiserver is unreachable the informers retry with back-off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from pathlib import Path
from typing import Any

from ephemera.cli import flags
from ephemera.client import ApiClient, KubeconfigError, load_kubeconfig
from ephemera.client.apiservers import discovering
from ephemera.controllers.certificates import CertificateApprover, CertificateSigner
from ephemera.controllers.nodelifecycle import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_MONITOR_PERIOD,
    NodeLifecycleController,
)
from ephemera.controllers.resourcequota import DEFAULT_RESYNC_PERIOD, ResourceQuotaController
from ephemera.controllers.rootcacertpublisher import RootCACertPublisher
from ephemera.controllers.serviceaccounts import ServiceAccountsController

log = logging.getLogger("ephemera.controllers")

USER_AGENT = "ephemera-controller-manager"


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "controller-manager", help="run the controllers (resource quota status)",
        description="Run the controllers against an apiserver until SIGINT or SIGTERM.")
    parser.add_argument("--kubeconfig", required=True, type=Path, metavar="FILE",
                        help="how to reach the apiserver (server, CA, credentials)")
    flags.add_feature_gates(parser)
    flags.add_apiserver_endpoints(parser)
    parser.add_argument("--resync-period", type=float, default=DEFAULT_RESYNC_PERIOD,
                        metavar="SECONDS",
                        help="recompute every quota at least this often "
                             f"(default {DEFAULT_RESYNC_PERIOD:g})")
    parser.add_argument("--node-monitor-grace-period", type=float,
                        default=DEFAULT_GRACE_PERIOD, metavar="SECONDS",
                        help="a node whose heartbeat is older than this is marked unknown "
                             f"(default {DEFAULT_GRACE_PERIOD:g})")
    parser.add_argument("--root-ca-file", type=Path, default=None, metavar="FILE",
                        help="publish this CA as ConfigMap kube-root-ca.crt in every namespace")
    parser.add_argument("--cluster-signing-cert-file", type=Path, default=None, metavar="FILE",
                        help="the CA certificate that signs approved client CSRs")
    parser.add_argument("--cluster-signing-key-file", type=Path, default=None, metavar="FILE",
                        help="its private key")
    parser.add_argument("--node-monitor-period", type=float, default=DEFAULT_MONITOR_PERIOD,
                        metavar="SECONDS", help=argparse.SUPPRESS)
    parser.set_defaults(func=lambda args: run(parser, args))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.resync_period <= 0:
        parser.error("--resync-period must be positive")
    if (args.cluster_signing_cert_file is None) != (args.cluster_signing_key_file is None):
        parser.error("--cluster-signing-cert-file and --cluster-signing-key-file go together")
    try:
        config = load_kubeconfig(args.kubeconfig)
    except (KubeconfigError, OSError) as err:
        parser.error(f"--kubeconfig: {err}")
    try:
        return asyncio.run(_serve(config, args))
    except KeyboardInterrupt:
        return 0


async def _serve(config: Any, args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with ApiClient(config, user_agent=USER_AGENT,
                         endpoints=args.apiserver_endpoints) as api, discovering(api):
        controller = ResourceQuotaController(api, gates=args.feature_gates,
                                             resync_period=args.resync_period)
        task = asyncio.create_task(controller.run(), name="resourcequota-controller")
        node_lifecycle = NodeLifecycleController(
            api, grace_period=args.node_monitor_grace_period,
            monitor_period=args.node_monitor_period)
        node_task = asyncio.create_task(node_lifecycle.run(), name="nodelifecycle-controller")
        accounts_task = asyncio.create_task(ServiceAccountsController(api).run(),
                                            name="serviceaccounts-controller")
        more = [asyncio.create_task(CertificateApprover(api).run(), name="csrapproving")]
        if args.root_ca_file is not None:
            publisher = RootCACertPublisher(api, args.root_ca_file.read_text())
            more.append(asyncio.create_task(publisher.run(), name="root-ca-cert-publisher"))
        if args.cluster_signing_cert_file is not None:
            signer = CertificateSigner(api, args.cluster_signing_cert_file,
                                       args.cluster_signing_key_file)
            more.append(asyncio.create_task(signer.run(), name="csrsigning"))
        stopper = asyncio.create_task(stop.wait())
        log.info("controller-manager: running against %s", config.server)
        await asyncio.wait({task, node_task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if node_task.done() and not node_task.cancelled() and node_task.exception() is not None:
            log.error("controller-manager: the node lifecycle controller failed: %s",
                      node_task.exception())
        for t in (task, node_task, accounts_task, *more, stopper):
            if not t.done():
                t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error("controller-manager: the resourcequota controller failed: %s",
                      task.exception())
            return 1
    log.info("controller-manager: stopped")
    return 0

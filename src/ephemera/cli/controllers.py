"""`ephemera controller-manager`: the controllers (`ephemera.controllers`) in one process, as
upstream's kube-controller-manager, talking to the apiserver named by `--kubeconfig`.

With `--allocate-node-cidrs` it runs the node IPAM controller (a `spec.podCIDR` of
`--node-cidr-mask-size` bits from `--cluster-cidr` for every Node). It runs the node
lifecycle controller (nodes whose kubelet stopped renewing its Lease are marked unknown and
tainted, their pods not ready), the taint eviction controller (pods deleted from nodes with
NoExecute taints they do not tolerate, or once their `tolerationSeconds` have passed), the
garbage collector (dependents of deleted owners, through `metadata.ownerReferences`), the
Job, CronJob and TTL-after-finished controllers, the service accounts controller (a
`default` ServiceAccount in every namespace) and the ResourceQuota controller (`status.hard`
and `status.used` of every quota, recomputed on pod and quota changes and every
`--resync-period` seconds); with
the root CA publisher (`kube-root-ca.crt` in every namespace: `--root-ca-file`, else the
kubeconfig's CA, as upstream; none when both are missing); always the
CSR approver (kubelet client certificates of bootstrapping and renewing nodes; kubelet
serving certificates whose names are the Node's addresses), and with
`--cluster-signing-cert-file`/`--cluster-signing-key-file` the CSR signer (certificates
last `--cluster-signing-duration`, default a year). It runs the workload controllers
(ReplicaSets, ReplicationControllers, Deployments, DaemonSets, StatefulSets) on shared pod,
ReplicaSet, node and ControllerRevision informers. It stops cleanly on
SIGTERM or SIGINT; when the apiserver is unreachable the informers retry with back-off.

With `--leader-elect` (the default, as upstream) the controllers run only while this process
holds the Lease `kube-system/kube-controller-manager` (`ephemera.client.leaderelection`); one
that loses it exits 1 (`leaderelection lost`), as kube-controller-manager does (which does
not release its Lease on a stop either: the next leader waits out the lease duration).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import signal
from pathlib import Path
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.cli import flags
from ephemera.cli.tokens import duration
from ephemera.client import (
    ApiClient,
    EventRecorder,
    Informer,
    KubeconfigError,
    load_kubeconfig,
    resource_path,
)
from ephemera.client.apiservers import discovering
from ephemera.client.leaderelection import LeaderElectionConfig, LeaderElector, LeaseLock
from ephemera.controllers.certificates import (
    DEFAULT_SIGNING_DURATION,
    CertificateApprover,
    CertificateSigner,
)
from ephemera.controllers.cronjob import CronJobController
from ephemera.controllers.daemonset import DaemonSetController
from ephemera.controllers.deployment import DeploymentController
from ephemera.controllers.endpointslice import EndpointSliceController
from ephemera.controllers.garbagecollector import GarbageCollector
from ephemera.controllers.job import JobController
from ephemera.controllers.nodeipam import DEFAULT_NODE_CIDR_MASK_SIZE, NodeIpamController
from ephemera.controllers.nodelifecycle import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_MONITOR_PERIOD,
    NodeLifecycleController,
)
from ephemera.controllers.replicaset import (
    REPLICASET,
    REPLICATIONCONTROLLER,
    ReplicaSetController,
)
from ephemera.controllers.resourcequota import DEFAULT_RESYNC_PERIOD, ResourceQuotaController
from ephemera.controllers.rootcacertpublisher import RootCACertPublisher
from ephemera.controllers.serviceaccounts import ServiceAccountsController
from ephemera.controllers.statefulset import StatefulSetController
from ephemera.controllers.tainteviction import TaintEvictionController
from ephemera.controllers.ttlafterfinished import TTLAfterFinishedController

log = logging.getLogger("ephemera.controllers")

USER_AGENT = "ephemera-controller-manager"
# The component its events name (upstream's `KubeControllerManagerUserAgent`).
COMPONENT = "kube-controller-manager"


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "controller-manager", help="run the controllers (resource quota status)",
        description="Run the controllers against an apiserver until SIGINT or SIGTERM.")
    parser.add_argument("--kubeconfig", required=True, type=Path, metavar="FILE",
                        help="how to reach the apiserver (server, CA, credentials)")
    flags.add_feature_gates(parser)
    flags.add_leader_election(parser, COMPONENT)
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
                        help="publish this CA as ConfigMap kube-root-ca.crt in every namespace "
                             "(default: the --kubeconfig's CA)")
    parser.add_argument("--cluster-signing-cert-file", type=Path, default=None, metavar="FILE",
                        help="the CA certificate that signs approved client CSRs")
    parser.add_argument("--cluster-signing-key-file", type=Path, default=None, metavar="FILE",
                        help="its private key")
    parser.add_argument("--cluster-signing-duration", type=signing_duration,
                        default=DEFAULT_SIGNING_DURATION, metavar="DURATION",
                        help="the longest a signed certificate lasts, a Go duration (default "
                             "8760h, one year); a CSR's spec.expirationSeconds may ask for "
                             "less")
    parser.add_argument("--allocate-node-cidrs", action="store_true",
                        help="give every Node a spec.podCIDR from --cluster-cidr (the node "
                             "IPAM controller's range allocator)")
    parser.add_argument("--cluster-cidr", default="", metavar="CIDR",
                        help="the IPv4 range of pod addresses in the cluster")
    parser.add_argument("--node-cidr-mask-size", type=int,
                        default=DEFAULT_NODE_CIDR_MASK_SIZE, metavar="BITS",
                        help="the prefix length of each node's pod CIDR "
                             f"(default {DEFAULT_NODE_CIDR_MASK_SIZE})")
    parser.add_argument("--node-monitor-period", type=float, default=DEFAULT_MONITOR_PERIOD,
                        metavar="SECONDS", help=argparse.SUPPRESS)
    parser.set_defaults(func=lambda args: run(parser, args))


def signing_duration(text: str) -> dt.timedelta:
    value = duration(text)
    if value <= dt.timedelta(0):
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.resync_period <= 0:
        parser.error("--resync-period must be positive")
    if (args.cluster_signing_cert_file is None) != (args.cluster_signing_key_file is None):
        parser.error("--cluster-signing-cert-file and --cluster-signing-key-file go together")
    if args.allocate_node_cidrs:
        if not args.cluster_cidr:
            parser.error("--allocate-node-cidrs needs --cluster-cidr")
        try:
            NodeIpamController.check(args.cluster_cidr, args.node_cidr_mask_size)
        except ValueError as err:
            parser.error(f"--cluster-cidr: {err}")
    election = flags.leader_election_config(parser, args, release_on_cancel=False)
    try:
        config = load_kubeconfig(args.kubeconfig)
    except (KubeconfigError, OSError) as err:
        parser.error(f"--kubeconfig: {err}")
    # What the root CA publisher publishes: --root-ca-file, else the kubeconfig's CA, as
    # upstream's controller-manager falls back to its client's CAData.
    try:
        args.root_ca = (args.root_ca_file.read_text() if args.root_ca_file is not None
                        else (config.ca_pem or b"").decode())
    except OSError as err:
        parser.error(f"--root-ca-file: {err}")
    try:
        return asyncio.run(_serve(config, args, election))
    except KeyboardInterrupt:
        return 0


async def _serve(config: Any, args: argparse.Namespace,
                 election: LeaderElectionConfig | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with ApiClient(config, user_agent=USER_AGENT,
                         endpoints=args.apiserver_endpoints) as api, discovering(api):
        if election is None:
            return await _run_controllers(api, args, config.server, stop)
        lock = LeaseLock(api, election.namespace, election.name, election.identity,
                         EventRecorder(api, COMPONENT))
        elector = LeaderElector(election, lock)
        code = 0
        ended = False  # the controllers ended by themselves (and said so)

        async def lead() -> None:
            nonlocal code, ended
            code = await _run_controllers(api, args, config.server, asyncio.Event())
            ended = True
            stop.set()  # the controllers ended by themselves: exit with their code

        if not await elector.run(lead, stop):
            log.error("leaderelection lost")
            return 1
        if not ended:  # stopped by a signal while leading, or before
            log.info("controller-manager: stopped")
        return code


async def _run_controllers(api: ApiClient, args: argparse.Namespace, server: str,
                           stop: asyncio.Event) -> int:
    """Run every controller until `stop` is set or the quota or node lifecycle controller
    ends (or until cancelled, as when the leadership is lost); 1 when the resourcequota
    controller failed."""
    # One informer of all pods for every controller that watches them (upstream's shared
    # informer factory): one copy of each pod in memory and one watch stream, not five.
    pods = Informer(api, resource_path("pods"), name="pods")
    nodes = Informer(api, resource_path("nodes"), name="nodes")
    controller = ResourceQuotaController(api, gates=args.feature_gates,
                                         resync_period=args.resync_period, pods=pods)
    task = asyncio.create_task(controller.run(), name="resourcequota-controller")
    node_lifecycle = NodeLifecycleController(
        api, grace_period=args.node_monitor_grace_period,
        monitor_period=args.node_monitor_period, pods=pods, nodes=nodes)
    node_task = asyncio.create_task(node_lifecycle.run(), name="nodelifecycle-controller")
    accounts_task = asyncio.create_task(ServiceAccountsController(api).run(),
                                        name="serviceaccounts-controller")
    more = [asyncio.create_task(CertificateApprover(api).run(), name="csrapproving"),
            asyncio.create_task(EndpointSliceController(api, pods).run(),
                                name="endpointslice-controller"),
            asyncio.create_task(TaintEvictionController(api, pods, nodes).run(),
                                name="taint-eviction-controller"),
            asyncio.create_task(GarbageCollector(api, shared={pods.path: pods}).run(),
                                name="garbage-collector"),
            asyncio.create_task(JobController(api, pods=pods).run(), name="job-controller"),
            asyncio.create_task(CronJobController(api).run(), name="cronjob-controller"),
            asyncio.create_task(TTLAfterFinishedController(api).run(),
                                name="ttl-after-finished-controller")]
    more.extend(_workload_controllers(api, pods, nodes))
    if args.allocate_node_cidrs:
        ipam = NodeIpamController(api, args.cluster_cidr, args.node_cidr_mask_size)
        more.append(asyncio.create_task(ipam.run(), name="nodeipam"))
    if args.root_ca:
        publisher = RootCACertPublisher(api, args.root_ca)
        more.append(asyncio.create_task(publisher.run(), name="root-ca-cert-publisher"))
    if args.cluster_signing_cert_file is not None:
        signer = CertificateSigner(api, args.cluster_signing_cert_file,
                                   args.cluster_signing_key_file,
                                   duration=args.cluster_signing_duration)
        more.append(asyncio.create_task(signer.run(), name="csrsigning"))
    stopper = asyncio.create_task(stop.wait())
    log.info("controller-manager: running against %s", server)
    controllers = {task, node_task, accounts_task, *more}
    try:
        # The controllers run until stopped: one that ends has failed, and the process
        # exits 1 for its supervisor to start it again (as upstream's does on a panic).
        done, _ = await asyncio.wait({*controllers, stopper},
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait(*controllers, stopper)
    failed = sorted((t for t in done if t in controllers), key=lambda t: t.get_name())
    for t in failed:
        error = t.exception() if not t.cancelled() else None
        log.error("controller-manager: the %s controller stopped: %s", t.get_name(),
                  error if error is not None else "it returned")
    log.info("controller-manager: stopped")
    return 1 if failed else 0


def _workload_controllers(api: ApiClient, pods: Informer,
                          nodes: Informer) -> list[asyncio.Task[None]]:
    """The ReplicaSet, ReplicationController, Deployment, DaemonSet and StatefulSet
    controllers on shared informers (`pods`, `nodes`: the process's informers of all pods
    and nodes)."""
    sets = Informer(api, resource_path("replicasets", group="apps"), name="replicasets")
    rcs = Informer(api, resource_path("replicationcontrollers"), name="replicationcontrollers")
    deployments = Informer(api, resource_path("deployments", group="apps"), name="deployments")
    daemonsets = Informer(api, resource_path("daemonsets", group="apps"), name="daemonsets")
    revisions = Informer(api, resource_path("controllerrevisions", group="apps"),
                         name="controllerrevisions")
    statefulsets = Informer(api, resource_path("statefulsets", group="apps"),
                            name="statefulsets")
    runners = {
        "pods-informer": pods.run(), "replicasets-informer": sets.run(),
        "replicationcontrollers-informer": rcs.run(),
        "deployments-informer": deployments.run(), "daemonsets-informer": daemonsets.run(),
        "nodes-informer": nodes.run(), "controllerrevisions-informer": revisions.run(),
        "statefulsets-informer": statefulsets.run(),
        "replicaset-controller": ReplicaSetController(api, pods, sets,
                                                      kind=REPLICASET).run(),
        "replicationcontroller-controller": ReplicaSetController(
            api, pods, rcs, kind=REPLICATIONCONTROLLER).run(),
        "deployment-controller": DeploymentController(api, deployments, sets, pods).run(),
        "daemonset-controller": DaemonSetController(api, daemonsets, pods, nodes,
                                                    revisions).run(),
        "statefulset-controller": StatefulSetController(api, statefulsets, pods,
                                                        revisions).run(),
    }
    return [asyncio.create_task(coro, name=name) for name, coro in runners.items()]

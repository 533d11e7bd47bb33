"""`ephemera hollow-nodes`: N simulated nodes in one process against the apiserver named by
`--kubeconfig`, as kwok does (`ephemera.kubelet.hollow`).

    ephemera hollow-nodes --kubeconfig FILE --count N [--node-name-prefix hollow-node-]
        [--capacity cpu=4,memory=16Gi,pods=110,ephemeral-storage=100Gi]
        [--labels K=V,...] [--register-with-taints K=V:Effect,...] [--pod-lifetime SECONDS]

The nodes register, renew their Leases and report status; the pods bound to them are
admitted and run by the kubelet's own rules on the fake runtime. Pods and logs directories
go under `--root-dir` (default: a temporary directory removed on exit). It prints
`hollow nodes ready: N` on stderr once every Node is registered, and stops on SIGTERM or
SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from ephemera import looplag
from ephemera.cli import flags
from ephemera.client import ApiClient, KubeconfigError, load_kubeconfig
from ephemera.kubelet.hollow import (
    DEFAULT_CAPACITY,
    HollowConfig,
    HollowNodes,
    parse_capacity,
    parse_labels,
    parse_taints,
)

log = logging.getLogger("ephemera.hollow")

USER_AGENT = "ephemera-hollow-nodes"


def _checked(parse: Any) -> Any:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return convert


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The hollow nodes' own flags (shared with `up --hollow-nodes`)."""
    parser.add_argument("--node-name-prefix", default="hollow-node-", metavar="PREFIX",
                        help="node names are PREFIX0, PREFIX1, ... (default hollow-node-)")
    default = ",".join(f"{k}={v}" for k, v in DEFAULT_CAPACITY.items())
    parser.add_argument("--capacity", type=_checked(parse_capacity),
                        default=dict(DEFAULT_CAPACITY), metavar="R=Q,...",
                        help=f"each node's capacity (default {default}); allocatable is "
                             "the same")
    parser.add_argument("--labels", type=_checked(parse_labels), default={},
                        metavar="K=V,...", help="labels every node registers with")
    parser.add_argument("--register-with-taints", type=_checked(parse_taints), default=[],
                        metavar="K=V:EFFECT,...", help="taints every node registers with")
    parser.add_argument("--pod-lifetime", type=_positive, default=None, metavar="SECONDS",
                        help="containers without a command of the fake runtime's exit after "
                             "SECONDS (restartPolicy decides what follows); default: they "
                             "run until stopped")
    parser.add_argument("--node-status-interval", type=_positive, default=60.0,
                        metavar="SECONDS", help="how often each Node's status is checked "
                                                "(written on change or every 5 min)")
    parser.add_argument("--heartbeat-qps", type=_positive, default=200.0, metavar="QPS",
                        help="lease renewals and node status requests of the whole process, "
                             "per second at most (default 200)")


HOLLOW_FLAGS = ("node_name_prefix", "capacity", "labels", "register_with_taints",
                "pod_lifetime", "node_status_interval", "heartbeat_qps")


def hollow_flags(args: argparse.Namespace) -> list[str]:
    """The flags of `add_arguments` as parsed, spelled back for an `ephemera hollow-nodes`
    child (`up --hollow-nodes`)."""
    argv = ["--node-name-prefix", args.node_name_prefix,
            "--capacity", ",".join(f"{k}={v}" for k, v in args.capacity.items()),
            "--node-status-interval", str(args.node_status_interval),
            "--heartbeat-qps", str(args.heartbeat_qps)]
    if args.labels:
        argv += ["--labels", ",".join(f"{k}={v}" for k, v in args.labels.items())]
    if args.register_with_taints:
        argv += ["--register-with-taints", ",".join(
            f"{t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}"
            for t in args.register_with_taints)]
    if args.pod_lifetime is not None:
        argv += ["--pod-lifetime", str(args.pod_lifetime)]
    return argv


def hollow_flags_given(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The hollow-node flags set to something other than their defaults."""
    return [f"--{name.replace('_', '-')}" for name in HOLLOW_FLAGS
            if getattr(args, name) != parser.get_default(name)]


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "hollow-nodes", help="run many simulated nodes in one process",
        description="Register N simulated nodes and run the pods bound to them on the fake "
                    "runtime, with the kubelet's admission, allocation and status rules.")
    parser.add_argument("--kubeconfig", type=Path, default=None, metavar="FILE",
                        help="how to reach the API server (default: $KUBECONFIG, then "
                             "~/.kube/config)")
    parser.add_argument("--count", type=flags.int_arg(1), required=True, metavar="N",
                        help="how many nodes")
    parser.add_argument("--root-dir", type=Path, default=None, metavar="DIR",
                        help="pod and log directories (default: a temporary directory)")
    parser.add_argument("--wait-for-pod-cidr", action="store_true",
                        help="as the kubelet's: start no pod on a node before its Node has a "
                             "spec.podCIDR (the controller-manager's node IPAM; `up` passes "
                             "it), so that every pod gets an IP from it")
    add_arguments(parser)
    flags.add_feature_gates(parser)
    flags.add_apiserver_endpoints(parser)
    parser.set_defaults(func=lambda args: run(parser, args))


def config_from_args(args: argparse.Namespace, root_dir: Path) -> HollowConfig:
    return HollowConfig(count=args.count, root_dir=root_dir,
                        name_prefix=args.node_name_prefix, capacity=args.capacity,
                        labels=args.labels, taints=args.register_with_taints,
                        gates=args.feature_gates, pod_lifetime=args.pod_lifetime,
                        node_status_interval=args.node_status_interval,
                        heartbeat_qps=args.heartbeat_qps,
                        wait_for_pod_cidr=args.wait_for_pod_cidr)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        kubeconfig = load_kubeconfig(args.kubeconfig)
    except KubeconfigError as err:
        parser.error(str(err))
    temporary = args.root_dir is None
    root = Path(tempfile.mkdtemp(prefix="ephemera-hollow-")) if temporary else args.root_dir
    try:
        return asyncio.run(_serve(kubeconfig, args, config_from_args(args, root)))
    except KeyboardInterrupt:
        return 0
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


async def _serve(kubeconfig: Any, args: argparse.Namespace, config: HollowConfig) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Three clients, three connection pools: the pods' traffic (status writes, events, the
    # informer) on one, the Nodes' on another, the Leases' renewals on a third made on a
    # thread of their own (docs/design.md, "Hollow nodes").
    def lease_api() -> ApiClient:
        return ApiClient(kubeconfig, user_agent=USER_AGENT, endpoints=args.apiserver_endpoints)

    async with ApiClient(kubeconfig, user_agent=USER_AGENT,
                         endpoints=args.apiserver_endpoints) as api, \
            ApiClient(kubeconfig, user_agent=USER_AGENT,
                      endpoints=args.apiserver_endpoints) as heartbeat_api:
        print(f"ephemera hollow-nodes: {config.count} nodes using {api.server}",
              file=sys.stderr, flush=True)
        nodes = HollowNodes(api, config, heartbeat_api, lease_api)
        async with looplag.watching("hollow-nodes"):
            await nodes.run(stop, ready=lambda: print(f"hollow nodes ready: {config.count}",
                                                      file=sys.stderr, flush=True))
    log.info("stopped")
    return 0

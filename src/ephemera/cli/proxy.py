"""`ephemera proxy`: the Service proxy of one node as its own process, as upstream's kube-proxy
in nftables mode (`ephemera.proxy`): it watches Services, EndpointSlices and its Node
through the apiserver named in `--kubeconfig` and keeps the table
`ip ephemera-<hash of cluster CIDR and node>` equal to them. `--hostname-override` names the
node (default: the host name, lower case), `--cluster-cidr` the cluster's pod range (ClusterIP
traffic is taken only from it). It needs root (`nft`). SIGTERM or SIGINT deletes the table
and exits 0; a table left by a `kill -9` is replaced by the next start's first sync.
`ephemera up` runs one for its node with a kubeconfig of its own (`system:kube-proxy`,
bound to upstream's `system:node-proxier` role)."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from ephemera.cli import flags
from ephemera.client import ApiClient, KubeconfigError, load_kubeconfig
from ephemera.client.apiservers import discovering
from ephemera.proxy import nft
from ephemera.proxy.proxier import DEFAULT_MIN_SYNC_PERIOD, DEFAULT_SYNC_PERIOD, Proxier

log = logging.getLogger("ephemera.proxy")


def cidr_arg(value: str) -> str:
    try:
        return str(ipaddress.IPv4Network(value, strict=True))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{value!r}: an IPv4 CIDR such as 10.244.0.0/16 "
                                         f"({err})") from None


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "proxy", help="run a node's Service proxy (nftables)",
        description="Program this node's nftables for ClusterIP and NodePort Services, as "
                    "kube-proxy's nftables mode.")
    parser.add_argument("--kubeconfig", type=Path, default=None, metavar="FILE",
                        help="how to reach the API server (default: $KUBECONFIG, then "
                             "~/.kube/config)")
    parser.add_argument("--hostname-override", default=None, metavar="NODE",
                        help="this node's name (default: the host name)")
    parser.add_argument("--cluster-cidr", type=cidr_arg, required=True, metavar="CIDR",
                        help="the cluster's pod range: ClusterIP traffic is proxied only from "
                             "it, and it names the table with the node")
    parser.add_argument("--masquerade-all", action="store_true",
                        help="masquerade all traffic sent to ClusterIPs (also done when "
                             "br_netfilter is not available)")
    parser.add_argument("--sync-period", type=flags.duration_arg,
                        default=DEFAULT_SYNC_PERIOD, metavar="DURATION",
                        help="how often the table is rewritten whole (a Go duration; "
                             "default 30s)")
    parser.add_argument("--min-sync-period", type=flags.duration_arg,
                        default=DEFAULT_MIN_SYNC_PERIOD, metavar="DURATION",
                        help="the least time between two syncs (default 1s)")
    flags.add_apiserver_endpoints(parser)
    parser.set_defaults(func=lambda args: run(parser, args))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        config = load_kubeconfig(args.kubeconfig)
    except KubeconfigError as err:
        parser.error(str(err))
    if os.geteuid() != 0:
        print("ephemera proxy: needs root (it programs nftables)", file=sys.stderr)
        return 1
    try:
        nft.nft_binary()
    except nft.NftError as err:
        print(f"ephemera proxy: {err}", file=sys.stderr)
        return 1
    try:
        return asyncio.run(_serve(config, args))
    except KeyboardInterrupt:
        return 0


async def _serve(config: Any, args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    node = str(args.hostname_override or socket.gethostname()).lower()
    masquerade_all = bool(args.masquerade_all)
    if not await asyncio.to_thread(nft.ensure_bridge_netfilter):
        log.warning("br_netfilter is not available: pod traffic to ClusterIPs is masqueraded "
                    "(replies from a backend on the client's own bridge would bypass "
                    "conntrack otherwise)")
        masquerade_all = True
    async with ApiClient(config, user_agent="ephemera-proxy",
                         endpoints=args.apiserver_endpoints) as api, discovering(api):
        proxier = Proxier(api, node_name=node, cluster_cidr=args.cluster_cidr,
                          masquerade_all=masquerade_all, sync_period=args.sync_period,
                          min_sync_period=args.min_sync_period)
        print(f"ephemera proxy (node {node}, table ip {proxier.table}) using "
              f"{api.server}", file=sys.stderr, flush=True)
        await proxier.run(stop)
    log.info("stopped")
    return 0

"""`ephemera up`: a whole cluster in the foreground on one data dir.

It supervises one child process per component (the apiserver; once the API answers, the
scheduler, the controller-manager and a kubelet: node `--node-name` (default the host
name), runtime `--runtime`, root dir `<data-dir>/kubelet`, with a client certificate
`system:node:NAME` (group `system:nodes`) and a serving certificate issued from the data
dir's CA, and a port kept in `ports.json`; stopping `up` shuts the node down as a reboot
does and the next `up` brings its pods back (`ephemera.kubelet.nodeshutdown`), a kubelet
that dies is restarted and adopts them; `--no-kubelet` leaves it out; with it, when this
runs as root with `nft`, the node's Service proxy `ephemera proxy` as `system:kube-proxy`,
whose nftables table `up` also deletes once the proxy has stopped; `--no-proxy` leaves it
out), picks a
free port unless `--port` is given (reusing the data dir's last port when it is free, and
keeping it across child restarts), writes the ports to `<data-dir>/ports.json`, and writes
`<data-dir>/kubeconfig` only once the API answers (removed and written fresh at every start).
The scheduler and the controller-manager get kubeconfigs of their own
(`scheduler.kubeconfig`, `controller-manager.kubeconfig`: `system:kube-scheduler`,
`system:kube-controller-manager`, which the default RBAC policy binds to their roles), and
run with leader election on and upstream's timings (their `--leader-elect` defaults), so a
second scheduler or controller-manager started against the same apiserver waits as a
candidate. Once the API answers it also creates kubeadm's node bootstrap RBAC objects
(`ephemera.cli.nodebootstrap`), so that `ephemera join` works against it; the apiserver
accepts bootstrap tokens and the controller-manager publishes `kube-root-ca.crt` and
approves and signs kubelet client CSRs with the data dir's CA.
Before starting anything it makes the node address of its kubelet's root dir (an address of
198.18.0.0/15 on an interface of its own, `ephemera.kubelet.runtime.nodeaddress`) unless
`--bind-address` and `--node-ip` are both given: the apiserver listens on and advertises it
(so pods reach it through the `kubernetes` Service's endpoints) and the kubelet reports it as
the Node's InternalIP; the interface is deleted when `up` stops.
Once the node is Ready it runs the cluster DNS server (`ephemera dns`, `--cluster-domain`,
`--dns-upstream`) on the Node's InternalIP at a port kept in `ports.json`, which keeps the
`kube-system/kube-dns` Service (the 10th address of the service range) pointing at it; the
kubelet gets that address as `--cluster-dns`.
`--hollow-nodes N` adds one `ephemera hollow-nodes` child running N simulated nodes
(`ephemera.kubelet.hollow`; the hollow-node flags `--node-name-prefix`, `--capacity`,
`--labels`, `--register-with-taints`, `--pod-lifetime`... go to it, and are refused without
it) with the admin kubeconfig (one identity for many Nodes: the Node authorizer would
confine a `system:node:NAME` to one) and `<data-dir>/hollow` as its root dir.
SIGINT or SIGTERM stops the children and exits 0. The store lives in the data dir, so a
restart on the same data dir carries on with every object. One `up` per data dir: it holds
`<data-dir>/up.lock` while it runs, and a second one exits 1 before starting anything,
naming the holder's PID (`ephemera.cli.dirlock`).

`--join-control-plane FIRST_DATA_DIR` (with `--store etcd` on the first member's etcd, and
a `--data-dir` of its own) starts a second member of the first one's control plane on the
same machine: it copies the shared CA and service account keys (`ephemera.cli.controlplane`),
runs its own apiserver, scheduler and controller-manager, and a kubelet only with a
`--node-name` (the host's node is the first member's). Its components get both apiservers
(`--apiserver-endpoints`: this member's, those given, the first member's) and learn the
others from the apiserver identity leases; `--apiserver-endpoints` on a first member is
passed on the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import hashlib
import ipaddress
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.api.wellknown import NODES_GROUP, node_username
from ephemera.apiserver.certs import (
    CONTROLLER_MANAGER_USER,
    PROXY_USER,
    SCHEDULER_USER,
    Pki,
    ensure_pki,
    issue_client_cert,
    issue_serving_cert,
    write_admin_kubeconfig,
    write_client_kubeconfig,
    write_kubeconfig,
)
from ephemera.apiserver.server import client_ssl_context, free_port, port_is_free
from ephemera.apiserver.serviceallocator import DEFAULT_SERVICE_CIDR
from ephemera.cli import flags, hollow
from ephemera.cli.apiserver import server_url, serving_names
from ephemera.cli.apiserverworkers import check_workers, default_workers
from ephemera.cli.controllers import signing_duration
from ephemera.cli.controlplane import ControlPlaneError, first_member_url, share_identity
from ephemera.cli.demo import plugin_path_hint, run_demo
from ephemera.cli.dirlock import UP_LOCK, DirLockedError, lock_dir
from ephemera.cli.dns import dns_domain, dns_upstreams
from ephemera.cli.kubelet import (
    check_eviction_flags,
    listen_address,
    node_ip_arg,
    positive_seconds,
)
from ephemera.cli.nodebootstrap import ensure_node_bootstrap_rbac
from ephemera.cli.supervisor import Component, Supervisor
from ephemera.client import (
    ApiClient,
    ApiUnavailable,
    KubeconfigError,
    load_kubeconfig,
    resource_path,
)
from ephemera.clusterdns.publish import kube_dns_ip
from ephemera.kubelet.runtime import nodeaddress
from ephemera.proxy.nft import NftError, delete_table_command, nft_binary, table_name
from ephemera.proxy.nft import run as run_nft

KUBECONFIG = "kubeconfig"
SCHEDULER_KUBECONFIG = "scheduler.kubeconfig"
CONTROLLER_MANAGER_KUBECONFIG = "controller-manager.kubeconfig"
PROXY_KUBECONFIG = "proxy.kubeconfig"
KUBELET_DIR = "kubelet"  # the kubelet's root dir (pods, volumes, logs, images, runtime)
HOLLOW_DIR = "hollow"  # the hollow nodes' root dir (`--hollow-nodes`)
LOG_DIR = "logs"
AUDIT_LOG = "audit/audit.log"  # every pods/dynamic request, by the default policy
RUN_DIR = "run"
# What "the API answers" means: an authenticated read of a namespace that always exists.
READY_PATH = "/api/v1/namespaces/default"


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "up", help="run a whole cluster in the foreground",
        description="Run a one-node cluster on a data dir until SIGINT or SIGTERM.")
    flags.add_data_dir(parser)
    parser.add_argument("--port", type=int, default=None,
                        help="the apiserver's port (default: the data dir's last port if "
                             "free, else a free one; 0: a free one)")
    parser.add_argument("--bind-address", default=None, type=listen_address, metavar="IP",
                        help="the apiserver's listen and advertise address (default: the "
                             "node address, on an interface up makes, which pods reach)")
    parser.add_argument("--node-ip", default=None, type=node_ip_arg, metavar="IP",
                        help="the kubelet's InternalIP (default: the node address, as for "
                             "--bind-address)")
    flags.add_store_flags(parser)
    flags.add_feature_gates(parser)
    parser.add_argument("--token-auth-file", type=Path, default=None, metavar="FILE",
                        help="passed to the apiserver")
    parser.add_argument("--mount-service-account-token", type=flags.go_bool_arg, nargs="?",
                        const=True, default=True, metavar="BOOL",
                        help="passed to the apiserver: pods get a kube-api-access-* volume "
                             "(default true, as upstream)")
    parser.add_argument("--service-cluster-ip-range", default=None, metavar="CIDR",
                        help="passed to the apiserver (default 10.96.0.0/12)")
    parser.add_argument("--service-node-port-range", default=None, metavar="FIRST-LAST",
                        help="passed to the apiserver (default 30000-32767)")
    parser.add_argument("--audit-policy-file", type=Path, default=None, metavar="FILE",
                        help="passed to the apiserver (the audit log is "
                             f"<data-dir>/{AUDIT_LOG}; default policy: ephemera's)")
    parser.add_argument("--apiserver-workers", type=int, default=None, metavar="N",
                        help="apiserver processes sharing its port (`apiserver --workers`; "
                             "default: 1 on sqlite; on etcd half the cores, 2 to 4, "
                             "1 on one core)")
    parser.add_argument("--startup-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="give up when the API does not answer in this time (default 60)")
    parser.add_argument("--demo", action="store_true",
                        help="once up, run a few kubectl commands to show the cluster working")
    parser.add_argument("--node-name", default=None, metavar="NAME",
                        help="the kubelet's node name (default: the host name)")
    parser.add_argument("--runtime", choices=("auto", "runc", "crun", "fake"), default="auto",
                        help="the kubelet's container runtime (default auto: crun if it works "
                             "here, else runc)")
    parser.add_argument("--eviction-interval", type=positive_seconds, default=None,
                        metavar="SECONDS",
                        help="the kubelet's eviction manager interval (default 10)")
    parser.add_argument("--eviction-hard", default=None, metavar="SIGNAL<VALUE,...",
                        help="the kubelet's hard eviction thresholds (default upstream's)")
    parser.add_argument("--eviction-pressure-transition-period", type=positive_seconds,
                        default=None, metavar="SECONDS",
                        help="how long the kubelet keeps a pressure condition after its "
                             "threshold was last met (default 300)")
    parser.add_argument("--system-reserved", default=None, metavar="RESOURCE=QUANTITY,...",
                        help="the kubelet's --system-reserved (cpu, memory, "
                             "ephemeral-storage held back from the pods)")
    parser.add_argument("--storage-accounting", choices=("auto", "walk", "loopimage"),
                        default=None,
                        help="the kubelet's local storage accounting (default auto: a loop "
                             "image per pod when that works here, else a directory walk)")
    parser.add_argument("--storage-limit-enforcement", action="store_true",
                        help="the kubelet sizes loop images to pods' ephemeral-storage limits "
                             "(writes past them fail with ENOSPC)")
    parser.add_argument("--cluster-cidr", default=None, metavar="CIDR",
                        help="the controller-manager's: the IPv4 range of pod addresses, a "
                             "--node-cidr-mask-size block per node (default: a /20 in "
                             "10.128.0.0/9 derived from the data dir, so that clusters on one "
                             "machine do not overlap; larger with more than 16 nodes, e.g. a "
                             "/14 for --hollow-nodes 1000)")
    parser.add_argument("--node-cidr-mask-size", type=int, default=24, metavar="BITS",
                        help="the controller-manager's: each node's pod CIDR size (default 24)")
    parser.add_argument("--no-kubelet", action="store_true",
                        help="run no kubelet: a control plane without a node")
    parser.add_argument("--no-dns", action="store_true",
                        help="run no cluster DNS server (the kubelet still names the "
                             "kube-system/kube-dns ClusterIP in pods' resolv.conf: for a DNS "
                             "server of your own behind that Service)")
    parser.add_argument("--no-proxy", action="store_true",
                        help="run no Service proxy for the node (by default `ephemera proxy` "
                             "runs with the kubelet when this runs as root with nft)")
    parser.add_argument("--hollow-nodes", type=int, default=0, metavar="N",
                        help="also run N simulated nodes in one `ephemera hollow-nodes` child "
                             "(fake runtime, admin credentials, root <data-dir>/hollow); the "
                             "hollow-node flags below apply to them")
    hollow.add_arguments(parser)
    parser.add_argument("--cluster-signing-duration", type=signing_duration, default=None,
                        metavar="DURATION",
                        help="the controller-manager's: how long certificates it signs for "
                             "CSRs last (a Go duration; default 8760h)")
    parser.add_argument("--join-control-plane", type=Path, default=None, metavar="FIRST_DIR",
                        help="be another member of the control plane whose data dir this is "
                             "(same machine; needs --store etcd on its etcd): share its CA "
                             "and service account keys; a kubelet only with --node-name")
    parser.add_argument("--cluster-domain", type=dns_domain, default="cluster.local",
                        metavar="DOMAIN",
                        help="the cluster DNS domain: answered by the DNS server (`ephemera "
                             "dns`) and searched by pods (default cluster.local)")
    parser.add_argument("--dns-upstream", type=dns_upstreams, action="append", default=[],
                        metavar="IP[:PORT],...",
                        help="the DNS server's resolvers for names outside the cluster domain "
                             "(default: none, such names are refused)")
    flags.add_apiserver_endpoints(parser)
    parser.add_argument("--tls-san", type=flags.endpoints_arg, action="append", default=[],
                        metavar="NAME,...",
                        help="passed to the apiserver: more names for its serving certificate")
    parser.set_defaults(func=lambda args: run(parser, args))


# Where `up` picks a pod range when none is given, and its size for a cluster of up to 16
# nodes (a /24 each).
DEFAULT_POD_RANGES = ipaddress.IPv4Network("10.128.0.0/9")
DEFAULT_CLUSTER_PREFIX = 20


def cluster_prefix_for(nodes: int, mask_size: int) -> int:
    """The prefix of the default pod range for `nodes` Nodes of one `/mask_size` block each:
    a /20, or a larger range when that holds too few blocks (`--hollow-nodes`)."""
    return min(DEFAULT_CLUSTER_PREFIX, mask_size - max(0, nodes - 1).bit_length())


def default_cluster_cidr(data_dir: Path, nodes: int = 1, mask_size: int = 24) -> str:
    """A range of 10.128.0.0/9 chosen by the data dir's path, so that test clusters side by
    side on one machine get different pod ranges and routes: one of its 2048 /20s, or of its
    fewer larger ranges when the cluster has more than 16 Nodes (`cluster_prefix_for`).
    ValueError when even the whole /9 is too small."""
    prefix = cluster_prefix_for(nodes, mask_size)
    if prefix < DEFAULT_POD_RANGES.prefixlen:
        raise ValueError(f"{nodes} nodes need more /{mask_size} blocks than "
                         f"{DEFAULT_POD_RANGES} has; give --cluster-cidr")
    digest = int(hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest(), 16)
    index = digest % (1 << (prefix - DEFAULT_POD_RANGES.prefixlen))
    network = int(DEFAULT_POD_RANGES.network_address) + (index << (32 - prefix))
    return f"{ipaddress.IPv4Address(network)}/{prefix}"


def node_blocks(cluster_cidr: str, mask_size: int) -> int:
    """How many Nodes a pod range gives a `/mask_size` block (0: the mask does not fit)."""
    prefix = ipaddress.IPv4Network(cluster_cidr, strict=False).prefixlen
    return 1 << (mask_size - prefix) if mask_size >= prefix else 0


def say(line: str) -> None:
    print(line, flush=True)


def node_reported_ready(node: dict[str, Any], since: dt.datetime, port: int) -> bool:
    """The Node's Ready condition is True with a heartbeat at or after `since`, and it
    advertises the kubelet on `port`: the kubelet started at `since` registered it."""
    status = node.get("status") or {}
    endpoint = (status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}
    if endpoint.get("Port") != port:
        return False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            try:
                beat = dt.datetime.fromisoformat(str(condition.get("lastHeartbeatTime")))
            except ValueError:
                return False
            return beat >= since
    return False


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    flags.check_store_flags(parser, args)
    check_eviction_flags(parser, args)
    # None: default_workers(store)
    check_workers(parser, args.apiserver_workers, args.store, "--apiserver-workers")
    if args.token_auth_file is not None and not args.token_auth_file.is_file():
        parser.error(f"--token-auth-file: no such file: {args.token_auth_file}")
    if args.hollow_nodes < 0:
        parser.error("--hollow-nodes must not be negative")
    unused = hollow.hollow_flags_given(parser, args)
    if unused and not args.hollow_nodes:
        parser.error(f"{', '.join(unused)}: only with --hollow-nodes")
    check_pod_range(parser, args)
    if args.join_control_plane is not None and args.store != "etcd":
        parser.error("--join-control-plane needs --store etcd (the first member's etcd)")
    try:  # before anything starts: one `up` per data dir
        lock = lock_dir(args.data_dir.resolve(), UP_LOCK)
    except (DirLockedError, OSError) as err:
        print(f"ephemera up: data dir {err}", file=sys.stderr, flush=True)
        return 1
    if args.join_control_plane is not None:
        try:
            share_identity(args.join_control_plane.resolve(), args.data_dir.resolve())
        except (ControlPlaneError, OSError) as err:
            parser.error(str(err))
        if args.node_name is None:
            args.no_kubelet = True
    try:
        return asyncio.run(Cluster(args).run())
    except KeyboardInterrupt:
        return 0
    finally:
        lock.release()


def node_count(args: argparse.Namespace) -> int:
    """The Nodes this `up` runs: its kubelet's and the hollow ones."""
    return (0 if args.no_kubelet else 1) + args.hollow_nodes


def check_pod_range(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The default pod range fits the Nodes (else a usage error); a `--cluster-cidr` too
    small for them is warned about (as upstream, the Nodes past its blocks get no pod CIDR
    and a `CIDRNotAvailable` event)."""
    nodes = node_count(args)
    if not args.cluster_cidr:
        try:
            default_cluster_cidr(args.data_dir, nodes, args.node_cidr_mask_size)
        except ValueError as err:
            parser.error(str(err))
        return
    try:
        blocks = node_blocks(str(args.cluster_cidr), args.node_cidr_mask_size)
    except ValueError:
        return  # the controller-manager refuses it, with the reason
    if blocks < nodes:
        print(f"ephemera up: warning: --cluster-cidr {args.cluster_cidr} holds {blocks} "
              f"/{args.node_cidr_mask_size} node blocks for {nodes} nodes; the others get "
              "no pod CIDR", file=sys.stderr, flush=True)


class Cluster:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data_dir: Path = args.data_dir.resolve()
        self.kubeconfig = self.data_dir / KUBECONFIG
        self.run_dir = self.data_dir / RUN_DIR
        self.apiserver_port_file = self.run_dir / "apiserver.port"
        self.stop = asyncio.Event()
        self.supervisor = Supervisor(self.data_dir / LOG_DIR, say, pid_dir=self.run_dir)
        self.apiserver_port: int | None = None
        self.url = ""  # this member's apiserver, once it answers
        self.kubelet_port = 0
        self.proxy_table = ""  # the table of the proxy `up` runs, once it runs one
        self.bind_address = str(args.bind_address or "")  # set by choose_addresses
        self.node_ip = str(args.node_ip or "")
        self.own_interface = False
        # Read now: the apiserver's readiness rewrites ports.json.
        self._last_kubelet_port = flags.read_ports(self.data_dir).get("kubelet")
        self._last_dns_port = flags.read_ports(self.data_dir).get("dns")
        self.dns_listen = ""  # IP:PORT of the DNS server, once the node's address is known

    # --- the node address ----------------------------------------------------------------

    def choose_addresses(self) -> None:
        """The apiserver's bind address and the kubelet's node IP: those given, else the
        node address of the kubelet's root dir, on an interface made now
        (`ephemera.kubelet.runtime.nodeaddress`; loopback, with a warning, where it cannot
        be made)."""
        if self.bind_address and self.node_ip:
            return
        self.kubelet_dir.mkdir(parents=True, exist_ok=True)
        try:
            address = nodeaddress.ensure(self.kubelet_dir)
            self.own_interface = True
        except nodeaddress.NodeAddressError as err:
            say(f"ephemera: no node address of its own ({err}); using 127.0.0.1, which pods "
                "cannot reach (pass --bind-address and --node-ip)")
            address = "127.0.0.1"
        self.bind_address = self.bind_address or address
        self.node_ip = self.node_ip or address

    def release_addresses(self) -> None:
        if self.own_interface:
            try:
                nodeaddress.remove(self.kubelet_dir)
            except nodeaddress.NodeAddressError as err:
                say(f"ephemera: {err}")

    # --- component command lines -------------------------------------------------------

    def _common_flags(self) -> list[str]:
        gates = self.args.feature_gates.to_flag()
        return ["--feature-gates", gates] if gates else []

    def _endpoint_flags(self) -> list[str]:
        """`--apiserver-endpoints` of the components: this member's apiserver first, then
        those given, then the first member's (with --join-control-plane); none when there
        are no others (their kubeconfig names this member's)."""
        others = list(self.args.apiserver_endpoints)
        if self.args.join_control_plane is not None:
            first = first_member_url(self.args.join_control_plane.resolve())
            others += [first] if first else []
        urls = list(dict.fromkeys([self.url, *others] if self.url else others))
        return ["--apiserver-endpoints", ",".join(urls)] if others else []

    def apiserver_argv(self) -> list[str]:
        a = self.args
        argv = [sys.executable, "-m", "ephemera.cli", "apiserver",
                "--data-dir", str(self.data_dir), "--bind-address", self.bind_address,
                "--store", a.store, "--port-file", str(self.apiserver_port_file)]
        if self.bind_address in ("0.0.0.0", "::") and self.node_ip != "127.0.0.1":
            # Listening everywhere: pods are told the node address (upstream advertises the
            # host's first non-loopback address).
            argv += ["--advertise-address", self.node_ip]
        # Once the port is known, every restart binds the same one (the kubeconfig has it).
        argv += ["--port", str(self.apiserver_port if self.apiserver_port is not None else 0)]
        if a.etcd_endpoints:
            argv += ["--etcd-endpoints", ",".join(a.etcd_endpoints)]
        if a.token_auth_file is not None:
            argv += ["--token-auth-file", str(a.token_auth_file.resolve())]
        argv += ["--enable-bootstrap-token-auth"]
        if not a.mount_service_account_token:
            argv += ["--mount-service-account-token=false"]
        if a.service_cluster_ip_range is not None:
            argv += ["--service-cluster-ip-range", a.service_cluster_ip_range]
        if a.service_node_port_range is not None:
            argv += ["--service-node-port-range", a.service_node_port_range]
        argv += ["--audit-log-path", str(self.data_dir / AUDIT_LOG)]
        if a.audit_policy_file is not None:
            argv += ["--audit-policy-file", str(a.audit_policy_file.resolve())]
        for names in a.tls_san:
            argv += ["--tls-san", ",".join(names)]
        workers = a.apiserver_workers
        if workers is None:
            workers = default_workers(a.store)
        if workers > 1:
            argv += ["--workers", str(workers)]
        return argv + self._common_flags()

    def scheduler_argv(self) -> list[str]:
        return [sys.executable, "-m", "ephemera.cli", "scheduler",
                "--kubeconfig", str(self.data_dir / SCHEDULER_KUBECONFIG),
                *self._endpoint_flags(), *self._common_flags()]

    def controller_manager_argv(self) -> list[str]:
        pki = self.data_dir / "pki"
        return [sys.executable, "-m", "ephemera.cli", "controller-manager",
                "--kubeconfig", str(self.data_dir / CONTROLLER_MANAGER_KUBECONFIG),
                "--root-ca-file", str(pki / "ca.crt"),
                "--cluster-signing-cert-file", str(pki / "ca.crt"),
                "--cluster-signing-key-file", str(pki / "ca.key"), *self._signing_duration(),
                "--allocate-node-cidrs", "--cluster-cidr", self.cluster_cidr,
                "--node-cidr-mask-size", str(self.args.node_cidr_mask_size),
                *self._endpoint_flags(),
                *self._common_flags()]

    @property
    def cluster_cidr(self) -> str:
        """`--cluster-cidr`, else the one of the first member's data dir (with
        --join-control-plane) or of this one."""
        if self.args.cluster_cidr:
            return str(self.args.cluster_cidr)
        first = self.args.join_control_plane
        return default_cluster_cidr(first.resolve() if first is not None else self.data_dir,
                                    node_count(self.args), self.args.node_cidr_mask_size)

    def _signing_duration(self) -> list[str]:
        value = self.args.cluster_signing_duration
        return [] if value is None else ["--cluster-signing-duration",
                                         f"{value.total_seconds():g}s"]

    @property
    def node_name(self) -> str:
        return str(self.args.node_name or socket.gethostname()).lower()

    @property
    def kubelet_dir(self) -> Path:
        return self.data_dir / KUBELET_DIR

    def kubelet_argv(self) -> list[str]:
        pki = self.kubelet_dir / "pki"
        return [sys.executable, "-m", "ephemera.cli", "kubelet",
                "--kubeconfig", str(self.kubelet_dir / KUBECONFIG),
                "--node-name", self.node_name, "--root-dir", str(self.kubelet_dir),
                "--runtime", self.args.runtime, "--port", str(self.kubelet_port),
                "--node-ip", self.node_ip,
                "--tls-cert-file", str(pki / "kubelet.crt"),
                "--tls-private-key-file", str(pki / "kubelet.key"),
                "--client-ca-file", str(self.data_dir / "pki" / "ca.crt"),
                "--stop-pods-on-exit", "--wait-for-pod-cidr", *self._eviction_flags(),
                "--cluster-dns", self.cluster_dns_ip,
                "--cluster-domain", self.args.cluster_domain,
                *self._endpoint_flags(),
                *self._common_flags()]

    def proxy_argv(self) -> list[str]:
        return [sys.executable, "-m", "ephemera.cli", "proxy",
                "--kubeconfig", str(self.data_dir / PROXY_KUBECONFIG),
                "--hostname-override", self.node_name, "--cluster-cidr", self.cluster_cidr,
                *self._endpoint_flags()]

    def _proxy_unavailable(self) -> str:
        """Why no proxy can run here ("" when one can)."""
        if os.geteuid() != 0:
            return "it needs root"
        try:
            nft_binary()
        except NftError as err:
            return str(err)
        return ""

    async def _start_proxy(self, url: str, pki: Pki) -> None:
        if self.args.no_kubelet or self.args.no_proxy:
            return
        why = self._proxy_unavailable()
        if why:
            say(f"ephemera: no Service proxy: {why}; Services get no traffic")
            return
        write_client_kubeconfig(self.data_dir / PROXY_KUBECONFIG, url, pki, PROXY_USER)
        self.proxy_table = table_name(self.cluster_cidr, self.node_name)
        await self.supervisor.start(Component("proxy", self.proxy_argv))

    def _remove_proxy_table(self) -> None:
        """After the proxy stopped: its table goes even if it was stopped before it could
        delete it itself (a SIGTERM while it was still starting)."""
        if self.proxy_table:
            try:
                run_nft(delete_table_command(self.proxy_table))
            except NftError as err:
                say(f"ephemera: deleting nftables table {self.proxy_table} failed: {err}")

    @property
    def cluster_dns_ip(self) -> str:
        """The kube-dns Service's ClusterIP: the 10th address of the service range."""
        return kube_dns_ip(self.args.service_cluster_ip_range or DEFAULT_SERVICE_CIDR)

    def dns_argv(self) -> list[str]:
        argv = [sys.executable, "-m", "ephemera.cli", "dns",
                "--kubeconfig", str(self.kubeconfig), "--listen", self.dns_listen,
                "--cluster-domain", self.args.cluster_domain,
                "--kube-dns-service-ip", self.cluster_dns_ip, *self._endpoint_flags()]
        upstreams = [str(u) for group in self.args.dns_upstream for u in group]
        return argv + (["--upstream", ",".join(upstreams)] if upstreams else [])

    async def start_dns(self) -> None:
        """Run the cluster DNS server on the node's InternalIP (where pods reach the node;
        the bind address when the Node cannot be read) at a port kept in ports.json; it
        keeps the kube-dns Service and its EndpointSlice pointing at itself."""
        address = await self._node_ip() or self.args.bind_address
        last = self._last_dns_port
        port = last if last and port_is_free(last, address) else free_port(address)
        ports = flags.read_ports(self.data_dir)
        ports["dns"] = port
        flags.write_ports(self.data_dir, ports)
        host = f"[{address}]" if ":" in address else address
        self.dns_listen = f"{host}:{port}"
        await self.supervisor.start(Component("dns", self.dns_argv))
        say(f"ephemera: cluster DNS for {self.args.cluster_domain} at {self.dns_listen} "
            f"(Service kube-system/kube-dns, {self.cluster_dns_ip})")

    async def _node_ip(self) -> str | None:
        try:
            async with ApiClient(load_kubeconfig(self.kubeconfig),
                                 user_agent="ephemera-up") as api:
                node = await api.get(resource_path("nodes", name=self.node_name))
        except (StatusError, ApiUnavailable, KubeconfigError, OSError):
            return None
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP" and address.get("address"):
                return str(address["address"])
        return None

    def hollow_nodes_argv(self) -> list[str]:
        return [sys.executable, "-m", "ephemera.cli", "hollow-nodes",
                "--kubeconfig", str(self.kubeconfig), "--count", str(self.args.hollow_nodes),
                "--root-dir", str(self.data_dir / HOLLOW_DIR), "--wait-for-pod-cidr",
                *hollow.hollow_flags(self.args),
                *self._endpoint_flags(), *self._common_flags()]

    def _eviction_flags(self) -> list[str]:
        extra: list[str] = []
        if self.args.eviction_interval is not None:
            extra += ["--eviction-interval", str(self.args.eviction_interval)]
        if self.args.eviction_hard is not None:
            extra += ["--eviction-hard", self.args.eviction_hard]
        if self.args.eviction_pressure_transition_period is not None:
            extra += ["--eviction-pressure-transition-period",
                      str(self.args.eviction_pressure_transition_period)]
        if self.args.system_reserved is not None:
            extra += ["--system-reserved", self.args.system_reserved]
        if self.args.storage_accounting is not None:
            extra += ["--storage-accounting", self.args.storage_accounting]
        if self.args.storage_limit_enforcement:
            extra += ["--storage-limit-enforcement"]
        return extra

    def prepare_kubelet(self, url: str, pki: Pki) -> None:
        """The kubelet's credentials, from the cluster CA: a client certificate
        `system:node:NAME` in `system:nodes` (in its kubeconfig) and a serving certificate
        for its API (the node name, localhost, 127.0.0.1); and its port (the data dir's last
        one when free, so the Node's advertised port stays right across restarts)."""
        name = self.node_name
        client = issue_client_cert(pki.ca, node_username(name), (NODES_GROUP,))
        write_kubeconfig(self.kubelet_dir / KUBECONFIG, url, pki.ca.cert_pem, client.cert_pem,
                         client.key_pem, user=node_username(name))
        serving = issue_serving_cert(pki.ca, [name, self.node_ip, "127.0.0.1", "localhost"])
        kubelet_pki = self.kubelet_dir / "pki"
        kubelet_pki.mkdir(parents=True, exist_ok=True)
        key_path = kubelet_pki / "kubelet.key"
        flags.write_atomic(key_path, serving.key_pem.decode(), 0o600)
        flags.write_atomic(kubelet_pki / "kubelet.crt", serving.cert_pem.decode())
        last = self._last_kubelet_port
        self.kubelet_port = (last if last and port_is_free(last, self.node_ip)
                             else free_port(self.node_ip))
        ports = flags.read_ports(self.data_dir)
        ports["kubelet"] = self.kubelet_port
        flags.write_ports(self.data_dir, ports)

    def _initial_port(self) -> int | None:
        if self.args.port:  # 0: a free one, as below
            return int(self.args.port)
        last = flags.read_ports(self.data_dir).get("apiserver")
        if last and port_is_free(last, self.bind_address or "0.0.0.0"):
            return last
        return None  # the apiserver picks one and reports it in its port file

    # --- lifecycle ---------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.unlink(missing_ok=True)
        self.apiserver_port_file.unlink(missing_ok=True)
        self.choose_addresses()
        pki = ensure_pki(self.data_dir, serving_names(
            self.bind_address, self.node_ip, [n for names in self.args.tls_san for n in names],
            self.args.service_cluster_ip_range or DEFAULT_SERVICE_CIDR))
        self.apiserver_port = self._initial_port()
        say(f"ephemera: starting a cluster on {self.data_dir} (logs in "
            f"{self.supervisor.log_dir})")
        await self.supervisor.start(Component("apiserver", self.apiserver_argv))
        try:
            url = await self._wait_for_api(pki)
            if url is None:
                return 0 if self.stop.is_set() else 1
            self.url = url
            write_admin_kubeconfig(self.kubeconfig, url, pki)
            # The scheduler and the controller-manager act as themselves (their RBAC roles).
            write_client_kubeconfig(self.data_dir / SCHEDULER_KUBECONFIG, url, pki,
                                    SCHEDULER_USER)
            write_client_kubeconfig(self.data_dir / CONTROLLER_MANAGER_KUBECONFIG, url, pki,
                                    CONTROLLER_MANAGER_USER)
            await self._node_bootstrap_rbac()
            await self.supervisor.start(Component("scheduler", self.scheduler_argv))
            await self.supervisor.start(Component("controller-manager",
                                                  self.controller_manager_argv))
            kubelet_started = dt.datetime.now(dt.UTC).replace(microsecond=0)
            if not self.args.no_kubelet:
                self.prepare_kubelet(url, pki)
                await self.supervisor.start(Component("kubelet", self.kubelet_argv))
            await self._start_proxy(url, pki)
            if self.args.hollow_nodes:
                await self.supervisor.start(Component("hollow-nodes", self.hollow_nodes_argv))
            say(f"ephemera: the API answers at {url}")
            say(f"kubeconfig: {self.kubeconfig}")
            if not self.args.no_kubelet:
                await self._wait_for_node(kubelet_started)
                if self.args.join_control_plane is None and not self.stop.is_set() \
                        and not self.args.no_dns:
                    await self.start_dns()
            if self.args.demo and not self.stop.is_set():
                await self._until_stopped(run_demo(
                    self.data_dir, self.kubeconfig, say,
                    None if self.args.no_kubelet else kubelet_started))
            say("")
            say("Use the cluster with:")
            say(f"  export KUBECONFIG={self.kubeconfig}")
            hint = plugin_path_hint()
            if hint is not None:
                say(f"  {hint}    # for kubectl dynamic (the plugin kubectl-dynamic)")
            say("Press Ctrl-C to stop it.")
            await self.stop.wait()
            say("ephemera: stopping")
            return 0
        finally:
            await self.supervisor.stop()
            self._remove_proxy_table()
            self.release_addresses()
            say("ephemera: stopped")

    async def _node_bootstrap_rbac(self) -> None:
        """What `ephemera join` needs (`ephemera.cli.nodebootstrap`); a failure is reported,
        not fatal."""
        try:
            async with ApiClient(load_kubeconfig(self.kubeconfig),
                                 user_agent="ephemera-up") as api:
                await ensure_node_bootstrap_rbac(api)
        except (StatusError, ApiUnavailable, KubeconfigError, OSError) as err:
            say(f"ephemera: creating the node bootstrap RBAC objects failed: {err}")

    async def _wait_for_node(self, since: dt.datetime) -> None:
        """Wait until this start's kubelet has reported its Node Ready (a heartbeat since
        `since`, its port advertised): after a restart the Node and the pods still show the
        last run's status, and a `kubectl logs` sent to the kubelet before it serves fails.
        On timeout or stop, say so and carry on."""
        deadline = time.monotonic() + self.args.startup_timeout
        path = resource_path("nodes", name=self.node_name)
        try:
            async with ApiClient(load_kubeconfig(self.kubeconfig),
                                 user_agent="ephemera-up") as api:
                while not self.stop.is_set() and time.monotonic() < deadline:
                    with contextlib.suppress(StatusError, ApiUnavailable):
                        if node_reported_ready(await api.get(path), since, self.kubelet_port):
                            say(f"ephemera: node {self.node_name} is Ready")
                            return
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.2):
                            await self.stop.wait()
        except (KubeconfigError, OSError) as err:
            say(f"ephemera: could not watch node {self.node_name}: {err}")
            return
        if not self.stop.is_set():
            say(f"ephemera: node {self.node_name} did not report Ready within "
                f"{self.args.startup_timeout:g}s (log: {self.supervisor.log_path('kubelet')})")

    async def _until_stopped(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        stopper = asyncio.create_task(self.stop.wait())
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for t in (task, stopper):
            if not t.done():
                await cancel_and_wait(t)
        if task.done() and not task.cancelled() and task.exception() is not None:
            say(f"demo failed: {task.exception()}")

    def _read_port_file(self) -> int | None:
        try:
            return int(self.apiserver_port_file.read_text().strip())
        except (OSError, ValueError):
            return None

    async def _wait_for_api(self, pki: Pki) -> str | None:
        """The API URL once an authenticated read succeeds; None on stop or timeout."""
        deadline = time.monotonic() + self.args.startup_timeout
        ssl_ctx = client_ssl_context(pki)
        timeout = aiohttp.ClientTimeout(total=3)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self.stop.is_set():
                if self.apiserver_port is None:
                    self.apiserver_port = self._read_port_file()
                if self.apiserver_port is not None:
                    url = server_url(self.bind_address, self.apiserver_port)
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                        async with session.get(url + READY_PATH, ssl=ssl_ctx) as resp:
                            if resp.status == 200:
                                flags.write_ports(self.data_dir,
                                                  {"apiserver": self.apiserver_port})
                                return url
                if time.monotonic() > deadline:
                    self._report_startup_failure()
                    return None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await self.stop.wait()
        return None

    def _report_startup_failure(self) -> None:
        log = self.supervisor.log_path("apiserver")
        say(f"ephemera: the API did not answer within {self.args.startup_timeout:g}s; "
            f"last lines of {log}:")
        with contextlib.suppress(OSError):
            for line in log.read_text(errors="replace").splitlines()[-20:]:
                say(f"  {line}")

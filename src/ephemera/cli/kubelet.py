"""`ephemera kubelet`: one node's agent against the apiserver named by `--kubeconfig`.

    ephemera kubelet --kubeconfig FILE --root-dir DIR [--node-name NAME]
        [--runtime auto|runc|crun|fake] [--feature-gates K=V,...] [--port P]

It registers the Node, runs the pods bound to it (`ephemera.kubelet.agent.Kubelet`) and
serves its HTTPS API on `--address:--port` (0 picks a free port, written to `--port-file`).
The Node's InternalIP is `--node-ip`, else an address of its own on an interface it makes
(`ephemera.kubelet.runtime.nodeaddress`), deleted at exit with `--stop-pods-on-exit`;
`--address` defaults to it.
Its serving certificate is `--tls-cert-file`/`--tls-private-key-file` (`ephemera up` issues
one from the cluster CA); without them a self-signed one is made in `--cert-dir`
(`<root-dir>/pki/`), as upstream's kubelet does (the apiserver, which checks kubelet
certificates against the cluster CA, then cannot read logs through it). With
`--rotate-server-certificates` it comes from the cluster instead: a
`kubernetes.io/kubelet-serving` CSR for the Node's addresses, kept in `--cert-dir` and
renewed at 70-90% of its lifetime into the running server; `--rotate-certificates` renews
the kubeconfig's client certificate likewise (`ephemera.kubelet.certificate`). With
`--client-ca-file`, clients of that API must present a certificate signed by that CA.
SIGTERM or SIGINT stops it; the containers keep running and are adopted by the next kubelet
on the same root dir, unless `--stop-pods-on-exit` (which `ephemera up` passes): then it
shuts the node down as a reboot does (`ephemera.kubelet.nodeshutdown`: containers stopped,
memory-backed volumes unmounted; pod directories, disk volumes, logs and the allocation
checkpoint kept), and the next kubelet starts the pods again. A kubelet that crashes leaves
its containers running, to be adopted. One kubelet per root dir: it holds
`<root-dir>/kubelet.lock` while it runs, and a second one exits at once naming the holder's
PID (`ephemera.cli.dirlock`).

With `--bootstrap-kubeconfig` (a bootstrap token), a missing `--kubeconfig` (or one whose
certificate expired) is first made by TLS bootstrapping (`ephemera.kubelet.bootstrap`): a
CertificateSigningRequest for `system:node:NAME` in `system:nodes`, approved and signed by
the controller-manager.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import ipaddress
import logging
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.cli import flags
from ephemera.cli.dirlock import KUBELET_LOCK, DirLockedError, lock_dir
from ephemera.client import ApiClient, KubeconfigError, load_kubeconfig
from ephemera.client.apiservers import discovering

log = logging.getLogger("ephemera.kubelet")

DEFAULT_PORT = 10250
USER_AGENT = "ephemera-kubelet"


def _cidr(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text, strict=True))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _ip_list(text: str) -> list[str]:
    out = []
    for part in flags.endpoints_arg(text):
        try:
            out.append(str(ipaddress.ip_address(part)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: not an IP address") from None
    return out


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "kubelet", help="run a node's agent (the kubelet)",
        description="Register a node and run the pods bound to it until SIGINT or SIGTERM.")
    parser.add_argument("--kubeconfig", required=True, type=Path, metavar="FILE",
                        help="how to reach the apiserver (server, CA, credentials)")
    parser.add_argument("--bootstrap-kubeconfig", type=Path, default=None, metavar="FILE",
                        help="when --kubeconfig is missing or its certificate expired: get a "
                             "client certificate with these (bootstrap token) credentials "
                             "through a CertificateSigningRequest and write --kubeconfig")
    add_node_arguments(parser)
    parser.set_defaults(func=lambda args: run(parser, args))


def add_node_arguments(parser: argparse.ArgumentParser, *,
                       root_dir_required: bool = True) -> None:
    """The flags of a node's kubelet other than its kubeconfigs (`ephemera join` has them
    too)."""
    parser.add_argument("--node-name", default=None, metavar="NAME",
                        help="the node's name (default: the host name)")
    parser.add_argument("--root-dir", required=root_dir_required, type=Path, metavar="DIR",
                        help="where pods, volumes, logs, images and runtime state live")
    parser.add_argument("--runtime", choices=("auto", "runc", "crun", "fake"), default="auto",
                        help="the container runtime (default auto: crun if it works on this "
                             "host, else runc; fake runs no processes)")
    flags.add_feature_gates(parser)
    flags.add_apiserver_endpoints(parser)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"the kubelet API's port (default {DEFAULT_PORT}; 0 picks a free "
                             "one)")
    parser.add_argument("--address", default=None, type=listen_address, metavar="IP",
                        help="the kubelet API's listen address (default: the node's IP)")
    parser.add_argument("--node-ip", default=None, type=node_ip_arg, metavar="IP",
                        help="the node's InternalIP, also its pods' hostIP (default: an "
                             "address of 198.18.0.0/15 on an interface of its own, "
                             "ephn<hash of the root dir>, which its pods reach)")
    parser.add_argument("--cluster-dns", type=_ip_list, action="append", default=[],
                        metavar="IP,...",
                        help="the cluster DNS servers' addresses: the nameservers of pods with "
                             "dnsPolicy ClusterFirst (without it they get the host's, as "
                             "with Default)")
    parser.add_argument("--cluster-domain", default="", metavar="DOMAIN",
                        help="the cluster's DNS domain, searched by ClusterFirst pods after "
                             "<namespace>.svc.DOMAIN and svc.DOMAIN")
    parser.add_argument("--resolv-conf", default="/etc/resolv.conf", metavar="FILE",
                        help="the resolver configuration pods' DNS settings start from "
                             "(default /etc/resolv.conf; \"\": none)")
    parser.add_argument("--pod-cidr", default=None, type=_cidr, metavar="CIDR",
                        help="the pod network's range on this node until its Node has a "
                             "spec.podCIDR from the controller-manager (standalone kubelets)")
    parser.add_argument("--wait-for-pod-cidr", action="store_true",
                        help="start no pod before the Node has a spec.podCIDR (as `up` runs "
                             "it, with the controller-manager's node IPAM)")
    parser.add_argument("--port-file", type=Path, default=None, metavar="PATH",
                        help="write the bound port there once serving")
    parser.add_argument("--tls-cert-file", type=Path, default=None, metavar="FILE")
    parser.add_argument("--tls-private-key-file", type=Path, default=None, metavar="FILE")
    parser.add_argument("--client-ca-file", type=Path, default=None, metavar="FILE",
                        help="require client certificates signed by this CA")
    parser.add_argument("--cert-dir", type=Path, default=None, metavar="DIR",
                        help="where the serving certificate is kept, self-signed or from "
                             "the cluster (default <root-dir>/pki); not with --tls-cert-file")
    parser.add_argument("--rotate-certificates", type=flags.go_bool_arg, nargs="?",
                        const=True, default=None, metavar="BOOL",
                        help="renew the client certificate of --kubeconfig through a "
                             "CertificateSigningRequest at 70-90%% of its lifetime (default "
                             "false; true for ephemera join)")
    parser.add_argument("--rotate-server-certificates", type=flags.go_bool_arg, nargs="?",
                        const=True, default=None, metavar="BOOL",
                        help="get the serving certificate from the cluster through a "
                             "kubernetes.io/kubelet-serving CertificateSigningRequest for the "
                             "Node's addresses and renew it likewise (default false; true for "
                             "ephemera join); not with --tls-cert-file")
    parser.add_argument("--max-pods", type=int, default=110)
    parser.add_argument("--stop-pods-on-exit", action="store_true",
                        help="on SIGTERM/SIGINT, shut the node down as a reboot does: stop "
                             "every container and unmount memory-backed volumes, keeping pod "
                             "directories, disk volumes, logs and the allocation checkpoint, so "
                             "the next kubelet starts the pods again; without it the containers "
                             "keep running for the next kubelet to adopt")
    parser.add_argument("--node-status-update-frequency", type=float, default=10.0,
                        metavar="SECONDS")
    parser.add_argument("--sync-frequency", type=float, default=10.0, metavar="SECONDS",
                        help="resync every pod at least this often (default 10)")
    parser.add_argument("--crash-loop-backoff-initial", type=float, default=10.0,
                        metavar="SECONDS", help=argparse.SUPPRESS)
    parser.add_argument("--crash-loop-backoff-max", type=float, default=300.0,
                        metavar="SECONDS", help=argparse.SUPPRESS)
    parser.add_argument("--volume-mount-timeout", type=float, default=123.0,
                        metavar="SECONDS", help=argparse.SUPPRESS)
    parser.add_argument("--eviction-interval", type=positive_seconds, default=10.0,
                        metavar="SECONDS",
                        help="how often the eviction manager measures local ephemeral storage "
                             "and evicts (default 10, as upstream's housekeeping)")
    parser.add_argument("--eviction-hard", default=None, metavar="SIGNAL<VALUE,...",
                        help="hard eviction thresholds, e.g. 'memory.available<100Mi,"
                             "nodefs.available<10%%' (default upstream's); memory.available "
                             "also sets allocatableMemory.available (the pods' share)")
    parser.add_argument("--eviction-pressure-transition-period", type=positive_seconds,
                        default=300.0, metavar="SECONDS",
                        help="how long a pressure condition (MemoryPressure, DiskPressure) "
                             "stays on the Node after its threshold was last met (default "
                             "300, as upstream's 5m)")
    parser.add_argument("--system-reserved", default="", metavar="RESOURCE=QUANTITY,...",
                        help="cpu, memory and ephemeral-storage held back from the pods, "
                             "e.g. 'memory=1Gi': subtracted from the node's allocatable; the "
                             "pods' memory (allocatableMemory.available) is measured against "
                             "capacity minus the reservations")
    parser.add_argument("--kube-reserved", default="", metavar="RESOURCE=QUANTITY,...",
                        help="like --system-reserved, for the Kubernetes components")
    parser.add_argument("--storage-accounting", choices=("auto", "walk", "loopimage"),
                        default="auto",
                        help="how pods' local ephemeral storage is measured: walk (a bounded "
                             "du-style walk), loopimage (a loop-mounted ext4 image per pod, "
                             "read in O(1) with statvfs; needs root, loop devices and "
                             "mkfs.ext4) or auto (loopimage when it works here, else walk)")
    parser.add_argument("--storage-limit-enforcement", action="store_true",
                        help="with loop images, size a pod's image to its ephemeral-storage "
                             "limit: a write past it fails with ENOSPC (beyond upstream; "
                             "eviction still applies)")


def node_ip_arg(text: str) -> str:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address") from None
    if address.is_unspecified:
        raise argparse.ArgumentTypeError(f"{text!r}: the node's own address, not unspecified")
    return str(address)


def listen_address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address") from None


def node_address(root_dir: Path, node_ip: str | None) -> tuple[str, bool]:
    """The node's InternalIP: `--node-ip`, else the address of the root dir's own
    interface (`ephemera.kubelet.runtime.nodeaddress`), made now; loopback, with a warning,
    where it cannot be made (no CAP_NET_ADMIN). True when the interface is the kubelet's."""
    from ephemera.kubelet.runtime import nodeaddress

    if node_ip:
        return node_ip, False
    try:
        return nodeaddress.ensure(root_dir), True
    except nodeaddress.NodeAddressError as err:
        log.warning("kubelet: no node address of its own (%s); using 127.0.0.1, which pods "
                    "cannot reach (pass --node-ip)", err)
        return "127.0.0.1", False


def check_eviction_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with a usage error for a bad `--eviction-hard`, `--system-reserved` or
    `--kube-reserved` (those `args` has and set), before anything starts."""
    from ephemera.kubelet.eviction import ThresholdError, parse_eviction_hard
    from ephemera.kubelet.node import parse_reserved

    if getattr(args, "eviction_hard", None) is not None:
        try:
            parse_eviction_hard(args.eviction_hard)
        except ThresholdError as err:
            parser.error(f"--eviction-hard: {err}")
    for flag in ("system_reserved", "kube_reserved"):
        value = getattr(args, flag, None)
        if value is None:
            continue
        try:
            parse_reserved(value)
        except ValueError as err:
            parser.error(f"--{flag.replace('_', '-')}: {err}")


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def ensure_self_signed(pki: Path, node_name: str, node_ip: str = "") -> tuple[Path, Path]:
    """A self-signed serving certificate for the kubelet in the directory `pki` (kept): the
    node name, localhost, 127.0.0.1 and the node's IP, as upstream's."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    cert_path, key_path = pki / "kubelet.crt", pki / "kubelet.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    pki.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                         f"{node_name}@{int(dt.datetime.now().timestamp())}")])
    import ipaddress

    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(node_name), x509.DNSName("localhost"),
                 *[x509.IPAddress(ipaddress.ip_address(ip))
                   for ip in dict.fromkeys(["127.0.0.1", node_ip]) if ip]]),
                critical=False)
            .sign(key, hashes.SHA256()))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def bootstrap(args: argparse.Namespace) -> int:
    """TLS bootstrapping (`ephemera.kubelet.bootstrap`) when --kubeconfig needs it."""
    from ephemera.kubelet.bootstrap import (
        BootstrapError,
        bootstrap_client_certificate,
        needs_bootstrap,
    )

    if not needs_bootstrap(args.kubeconfig):
        return 0
    try:
        config = load_kubeconfig(args.bootstrap_kubeconfig)
        node_name = (args.node_name or socket.gethostname()).lower()
        asyncio.run(bootstrap_client_certificate(config, node_name, args.kubeconfig,
                                                 user_agent=USER_AGENT))
    except (KubeconfigError, OSError, BootstrapError) as err:
        log.error("kubelet: bootstrapping the client certificate failed: %s", err)
        return 1
    return 0


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    check_eviction_flags(parser, args)
    try:  # before anything starts: one kubelet per root dir
        lock = lock_dir(args.root_dir.resolve(), KUBELET_LOCK)
    except (DirLockedError, OSError) as err:
        print(f"ephemera kubelet: root dir {err}", file=sys.stderr, flush=True)
        return 1
    try:
        return _run(parser, args)
    finally:
        lock.release()


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.bootstrap_kubeconfig is not None:
        code = bootstrap(args)
        if code:
            return code
    try:
        config = load_kubeconfig(args.kubeconfig)
    except (KubeconfigError, OSError) as err:
        parser.error(f"--kubeconfig: {err}")
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        parser.error("--tls-cert-file and --tls-private-key-file go together")
    if args.cert_dir is not None and args.tls_cert_file is not None:
        parser.error("--cert-dir: the serving certificate is --tls-cert-file")
    if args.rotate_server_certificates and args.tls_cert_file is not None:
        parser.error("--rotate-server-certificates: the serving certificate comes from the "
                     "cluster, not from --tls-cert-file")
    if args.rotate_certificates and (config.client_cert_pem is None
                                     or config.client_key_pem is None):
        parser.error("--rotate-certificates: --kubeconfig has no client certificate")
    from ephemera.kubelet.node import parse_reserved

    args.system_reserved = parse_reserved(args.system_reserved)
    args.kube_reserved = parse_reserved(args.kube_reserved)
    try:
        return asyncio.run(_serve(config, args))
    except KeyboardInterrupt:
        return 0


async def _serve(client_config: Any, args: argparse.Namespace) -> int:
    from ephemera.kubelet.agent import Kubelet, KubeletConfig
    from ephemera.kubelet.backoff import BackOffPolicy
    from ephemera.kubelet.certificate import PemStore, client_rotator, serving_rotator
    from ephemera.kubelet.images import ImageStore
    from ephemera.kubelet.runtime import make_runtime
    from ephemera.kubelet.server import kubelet_ssl_context
    from ephemera.kubelet.workerdeps import WorkerSettings

    node_name = (args.node_name or socket.gethostname()).lower()
    root_dir: Path = args.root_dir.resolve()
    root_dir.mkdir(parents=True, exist_ok=True)
    node_ip, own_interface = node_address(root_dir, args.node_ip)
    cert, key = args.tls_cert_file, args.tls_private_key_file
    cert_dir: Path = (args.cert_dir or root_dir / "pki").resolve()
    serving_store = PemStore(cert_dir, "kubelet-server")
    if args.rotate_server_certificates and serving_store.load() is not None:
        cert, key = serving_store.current_path, None  # the pair's file holds both
    elif cert is None:
        # Until the cluster signs one (--rotate-server-certificates), or for good.
        cert, key = ensure_self_signed(cert_dir, node_name, node_ip)
    ssl_context = kubelet_ssl_context(cert, key, args.client_ca_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    backoff = BackOffPolicy(args.crash_loop_backoff_initial, args.crash_loop_backoff_max)
    settings = WorkerSettings(backoff=backoff, image_backoff=backoff,
                              mount_timeout=args.volume_mount_timeout,
                              resync_period=args.sync_frequency)
    kubelet_config = KubeletConfig(
        node_name=node_name, root_dir=root_dir, gates=args.feature_gates,
        address=args.address or node_ip, port=args.port, node_ip=node_ip,
        pod_cidr=args.pod_cidr or "",
        wait_for_pod_cidr=args.wait_for_pod_cidr,
        client_ca_file=args.client_ca_file, ssl_context=ssl_context, port_file=args.port_file,
        max_pods=args.max_pods, settings=settings, stop_pods_on_exit=args.stop_pods_on_exit,
        node_status_interval=args.node_status_update_frequency,
        eviction_interval=args.eviction_interval, eviction_hard=args.eviction_hard,
        eviction_pressure_transition_period=args.eviction_pressure_transition_period,
        system_reserved=args.system_reserved, kube_reserved=args.kube_reserved,
        storage_accounting=args.storage_accounting,
        storage_limit_enforcement=args.storage_limit_enforcement,
        cluster_dns=[ip for group in args.cluster_dns for ip in group],
        cluster_domain=args.cluster_domain.strip("."), resolv_conf=args.resolv_conf)
    runtime = make_runtime(args.runtime, root_dir, node_name)
    images = ImageStore(root_dir)
    async with ApiClient(client_config, user_agent=USER_AGENT,
                         endpoints=args.apiserver_endpoints) as api, discovering(api):
        kubelet = Kubelet(kubelet_config, api, runtime, images)
        log.info("kubelet %s starting (runtime %s, root %s)", node_name, runtime.name, root_dir)
        rotators = []
        if args.rotate_server_certificates:
            rotators.append(serving_rotator(api, node_name, serving_store, ssl_context))
        if args.rotate_certificates:
            rotators.append(client_rotator(api, node_name, args.kubeconfig))
        tasks = [asyncio.create_task(r.run(), name=f"{r.what}-certificate")
                 for r in rotators]
        try:
            await kubelet.run(stop)
        except OSError as err:
            log.error("kubelet: %s", err)
            return 1
        finally:
            await cancel_and_wait(*tasks)
    if own_interface and args.stop_pods_on_exit:
        # The node shut down as at a reboot: its address goes too (kept otherwise, for the
        # pods that keep running; the next start finds it).
        from ephemera.kubelet.runtime import nodeaddress

        try:
            nodeaddress.remove(root_dir)
        except nodeaddress.NodeAddressError as err:
            log.warning("kubelet: %s", err)
    log.info("kubelet %s stopped", node_name)
    return 0

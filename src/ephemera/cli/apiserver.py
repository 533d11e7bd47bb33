"""`ephemera apiserver`: the Kubernetes API over HTTPS, on a data dir (store, certificates).

It generates the data dir's CA and certificates if missing, opens the store, serves the app
on `--bind-address:--port` (port 0 picks a free one) with client certificates, service
account tokens (signed with `<data-dir>/pki/sa.key` unless `--service-account-signing-key-file`
says otherwise), with `--token-auth-file` static bearer tokens and with
`--enable-bootstrap-token-auth` bootstrap tokens; it stops gracefully on SIGTERM or SIGINT.

Several apiservers form one control plane on one store (etcd) when they share an identity:
the CA (`--client-ca-file`, and the data dir's `pki/ca.*` the serving certificate is issued
from), the service account keys (`--service-account-signing-key-file`,
`--service-account-key-file`, `--service-account-issuer`), or simply one data dir's `pki/`
copied (`ephemera up --join-control-plane`). `--tls-cert-file` and `--tls-private-key-file`
serve a certificate of the operator's instead of the data dir's; otherwise the data dir's
serving certificate covers the bind and advertise addresses and every `--tls-san` (k3s' flag:
a load balancer's names and addresses). Each apiserver keeps an identity Lease carrying
`https://<advertise-address>:<port>` (`ephemera.apiserver.identity`), from which components
learn every member.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import ipaddress
import logging
import signal
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ephemera import looplag
from ephemera.api.featuregates import FeatureGates
from ephemera.apiserver.audit import AuditFilter, AuditLog, PolicyError, load_policy
from ephemera.apiserver.authn import Authenticator, StoreObjectReader, TokenFileError
from ephemera.apiserver.authz.modes import DEFAULT_WITH_AUTHENTICATION, MODES
from ephemera.apiserver.bootstraptoken import BootstrapTokenAuthenticator
from ephemera.apiserver.certs import ensure_pki, write_admin_kubeconfig
from ephemera.apiserver.metrics import METRICS
from ephemera.apiserver.registry import DEFAULT_EVENT_TTL
from ephemera.apiserver.server import client_ssl_context, serve, server_ssl_context
from ephemera.apiserver.serviceaccounttoken import (
    DEFAULT_ISSUER,
    ServiceAccountTokenAuthenticator,
    TokenIssuer,
    ensure_signing_key,
    load_public_keys,
)
from ephemera.apiserver.serviceallocator import DEFAULT_NODE_PORT_RANGE, DEFAULT_SERVICE_CIDR
from ephemera.cli import flags
from ephemera.cli.apiserverworkers import cannot_serve, check_workers, run_workers
from ephemera.store import open_store
from ephemera.store.base import StoreError

log = logging.getLogger("ephemera.apiserver")

DEFAULT_PORT = 6443


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "apiserver", help="run the API server",
        description="Serve the Kubernetes API over HTTPS from a data dir.")
    flags.add_data_dir(parser)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"secure port (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--bind-address", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1)")
    flags.add_store_flags(parser)
    flags.add_feature_gates(parser)
    parser.add_argument("--token-auth-file", type=Path, default=None, metavar="FILE",
                        help="static bearer tokens: CSV lines token,user,uid,\"group1,group2\"")
    parser.add_argument("--enable-bootstrap-token-auth", action="store_true",
                        help="accept bootstrap tokens (Secrets bootstrap-token-ID in "
                             "kube-system) as bearer tokens")
    parser.add_argument("--service-account-issuer", default=DEFAULT_ISSUER, metavar="URL",
                        help=f"the iss of service account tokens (default {DEFAULT_ISSUER})")
    parser.add_argument("--service-account-signing-key-file", type=Path, default=None,
                        metavar="FILE",
                        help="the private key that signs service account tokens (default "
                             "<data-dir>/pki/sa.key, created if missing)")
    parser.add_argument("--service-account-key-file", type=Path, action="append",
                        default=None, metavar="FILE",
                        help="public keys that verify service account tokens (repeatable; "
                             "default the signing key's)")
    parser.add_argument("--service-cluster-ip-range", type=_service_cidr,
                        default=DEFAULT_SERVICE_CIDR, metavar="CIDR",
                        help=f"the range of Services' cluster IPs (default "
                             f"{DEFAULT_SERVICE_CIDR}); its first address is the kubernetes "
                             "Service's")
    parser.add_argument("--service-node-port-range", type=_port_range,
                        default=DEFAULT_NODE_PORT_RANGE, metavar="FIRST-LAST",
                        help=f"the range of Services' node ports (default "
                             f"{DEFAULT_NODE_PORT_RANGE})")
    parser.add_argument("--api-audiences", type=lambda s: [a for a in s.split(",") if a],
                        default=None, metavar="AUD,...",
                        help="the audiences of this apiserver (default the issuer)")
    parser.add_argument("--mount-service-account-token", type=flags.go_bool_arg, nargs="?",
                        const=True, default=True, metavar="BOOL",
                        help="mount a kube-api-access-* volume (token, ca.crt, namespace) "
                             "into pods unless automountServiceAccountToken is false, as "
                             "upstream always does (default true; false is ephemera's, for "
                             "a control plane without the controller-manager that publishes "
                             "kube-root-ca.crt)")
    parser.add_argument("--authorization-mode", type=_authorization_modes, default=None,
                        metavar="MODE,...",
                        help=f"authorizers in order, of {', '.join(MODES)} (default "
                             f"{','.join(DEFAULT_WITH_AUTHENTICATION)})")
    parser.add_argument("--anonymous-auth", type=flags.go_bool_arg, nargs="?", const=True,
                        default=True, metavar="BOOL",
                        help="requests without credentials are system:anonymous, for "
                             "authorization to decide (default true; off with AlwaysAllow); "
                             "false: they get 401")
    parser.add_argument("--watch-cache", type=flags.go_bool_arg, nargs="?", const=True,
                        default=True, metavar="BOOL",
                        help="serve lists with resourceVersion=0 or not older than N, and "
                             "watches, from an in-memory cache per resource fed by one store "
                             "watch (default true); false: every read from the store")
    parser.add_argument("--event-ttl", type=_event_ttl, default=DEFAULT_EVENT_TTL,
                        metavar="DURATION",
                        help="how long an Event is kept after its last write, a Go duration "
                             "(default 1h0m0s, upstream's; 0: for ever)")
    parser.add_argument("--max-requests-inflight", type=flags.int_arg(0), default=400,
                        metavar="N",
                        help="with --max-mutating-requests-inflight, the server's seats "
                             "(upstream's APF meaning): node heartbeats get node-high's share "
                             "(40/245), every other request global-default's (20/245), "
                             "divided among --workers; 0 and 0: no limit (default 400)")
    parser.add_argument("--max-mutating-requests-inflight", type=flags.int_arg(0), default=200,
                        metavar="N", help="see --max-requests-inflight (default 200)")
    parser.add_argument("--audit-log-path", type=Path, default=None, metavar="FILE",
                        help="write audit.k8s.io/v1 events there, one JSON line each "
                             "(default: no audit log)")
    parser.add_argument("--audit-policy-file", type=Path, default=None, metavar="FILE",
                        help="the audit Policy (default: ephemera's, which records every "
                             "pods/dynamic request in full and Secrets at Metadata)")
    parser.add_argument("--audit-log-maxsize", type=int, default=100, metavar="MB",
                        help="rotate the audit log past this size (default 100)")
    parser.add_argument("--audit-log-maxbackup", type=int, default=10, metavar="N",
                        help="rotated audit logs to keep, 0 for all (default 10)")
    parser.add_argument("--advertise-address", type=_ip_address, default=None, metavar="IP",
                        help="the address other members and clients reach this apiserver at "
                             "(default: --bind-address, loopback when that is 0.0.0.0 or ::)")
    parser.add_argument("--tls-san", type=flags.endpoints_arg, action="append", default=[],
                        metavar="NAME,...",
                        help="more host names or IP addresses for the serving certificate "
                             "(a load balancer's; repeatable, comma-separated)")
    parser.add_argument("--tls-cert-file", type=Path, default=None, metavar="FILE",
                        help="the serving certificate (default <data-dir>/pki/apiserver.crt, "
                             "issued from the data dir's CA)")
    parser.add_argument("--tls-private-key-file", type=Path, default=None, metavar="FILE",
                        help="its private key (with --tls-cert-file)")
    parser.add_argument("--client-ca-file", type=Path, default=None, metavar="FILE",
                        help="the CA that client certificates must chain to (default "
                             "<data-dir>/pki/ca.crt)")
    parser.add_argument("--write-kubeconfig", type=Path, default=None, metavar="PATH",
                        help="write an admin kubeconfig there once serving")
    parser.add_argument("--port-file", type=Path, default=None, metavar="PATH",
                        help="write the bound port there once serving (for --port 0)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="serve with N processes sharing the port (SO_REUSEPORT), each "
                             "a full apiserver on the store with its own watch cache; only "
                             "with --store etcd (default 1)")
    # Internal: set by `--workers` on the worker processes it starts.
    parser.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-count", type=int, default=1, help=argparse.SUPPRESS)
    parser.set_defaults(func=lambda args: run(parser, args))


def _priority(args: argparse.Namespace) -> Any:
    """The seats of `--max-requests-inflight` and `--max-mutating-requests-inflight`, shared
    by the `--workers` (`ephemera.apiserver.priority`)."""
    from ephemera.apiserver.priority import PriorityConfig

    return PriorityConfig(max_requests_inflight=args.max_requests_inflight,
                          max_mutating_requests_inflight=args.max_mutating_requests_inflight,
                          workers=max(args.workers, args.worker_count))


def _ip_address(text: str) -> str:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address") from None
    if address.is_unspecified:
        raise argparse.ArgumentTypeError(f"{text!r}: an address others can reach")
    return str(address)


def _event_ttl(text: str) -> int:
    """`--event-ttl`: a Go duration, kept in whole seconds as upstream's event storage does
    (`uint64(ttl.Seconds())`)."""
    seconds = flags.duration_arg(text)
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration of 0 or more")
    return int(seconds)


def _authorization_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a comma-separated list of {', '.join(MODES)}")
    return modes


def serving_names(bind_address: str, advertise_address: str | None, tls_san: Sequence[str],
                  service_cluster_ip_range: str) -> list[str]:
    """What the data dir's serving certificate covers beyond the default names (localhost,
    `kubernetes`, `kubernetes.default`, `kubernetes.default.svc`,
    `kubernetes.default.svc.cluster.local`, loopback): the bind and advertise addresses, the
    `kubernetes` Service's ClusterIP (the range's first address) and every `--tls-san`."""
    from ephemera.apiserver.serviceallocator import IPRange

    cluster_ip = IPRange(ipaddress.ip_network(service_cluster_ip_range)).first()
    return [bind_address, advertise_address or "", str(cluster_ip), *tls_san]


def server_url(host: str, port: int) -> str:
    """The URL clients use: loopback when listening on every address."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def advertised_url(args: argparse.Namespace, port: int) -> str:
    """The URL this apiserver tells others about."""
    return server_url(args.advertise_address or args.bind_address, port)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    flags.check_store_flags(parser, args)
    check_workers(parser, args.workers, args.store)
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        parser.error("--tls-cert-file and --tls-private-key-file go together")
    for name in ("tls_cert_file", "tls_private_key_file", "client_ca_file"):
        path = getattr(args, name)
        if path is not None and not path.is_file():
            parser.error(f"--{name.replace('_', '-')}: no such file: {path}")
    args.tls_san = [n for names in args.tls_san for n in names]
    try:
        authenticator = Authenticator.from_token_file(args.token_auth_file)
    except (OSError, TokenFileError) as err:
        parser.error(f"--token-auth-file: {err}")
    try:
        if args.workers > 1:
            return asyncio.run(_serve_workers(args))
        return asyncio.run(_serve(args, authenticator))
    except KeyboardInterrupt:
        return 0
    except StoreError as err:  # e.g. no etcd at --etcd-endpoints: one line, not a traceback
        print(f"ephemera apiserver: the store ({args.store}): {err}", file=sys.stderr,
              flush=True)
        return 1


async def _serve_workers(args: argparse.Namespace) -> int:
    """`--workers N`: the data dir's certificates and keys are made here, once, then N
    workers serve the port (`ephemera.cli.apiserverworkers`)."""
    data_dir: Path = args.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    pki = ensure_pki(data_dir, serving_names(args.bind_address, args.advertise_address,
                                             args.tls_san, args.service_cluster_ip_range))
    if args.service_account_signing_key_file is None:
        ensure_signing_key(data_dir)

    def ready(port: int) -> None:
        url = server_url(args.bind_address, port)
        if args.port_file is not None:
            flags.write_atomic(args.port_file, f"{port}\n")
        if args.write_kubeconfig is not None:
            write_admin_kubeconfig(args.write_kubeconfig, url, pki)
        print(f"ephemera apiserver serving on {url} ({args.workers} workers)",
              file=sys.stderr, flush=True)

    return await run_workers(args, ready)


def _audit(args: argparse.Namespace) -> AuditFilter | None:
    """The audit filter the flags ask for; PolicyError or OSError for a bad policy file.
    Workers (`--workers`) share one log file (`AuditLog(shared=True)`)."""
    if args.audit_log_path is None:
        return None
    policy = load_policy(args.audit_policy_file)
    log_file = AuditLog(args.audit_log_path.resolve(),
                        max_size_bytes=args.audit_log_maxsize * 1024 * 1024,
                        max_backups=args.audit_log_maxbackup,
                        shared=args.worker_index is not None)
    return AuditFilter(policy, log_file)


def _service_cidr(text: str) -> str:
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if network.version != 4 or network.num_addresses < 8:
        raise argparse.ArgumentTypeError(f"{text}: an IPv4 range of at least 8 addresses")
    return str(network)


def _port_range(text: str) -> str:
    from ephemera.apiserver.serviceallocator import PortRange

    try:
        return str(PortRange.parse(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: not a port range FIRST-LAST") from None


def _create_app(store: Any, authenticator: Authenticator, gates: FeatureGates,
                kubelet_client_ssl: Any = None, token_issuer: TokenIssuer | None = None,
                api_audiences: Sequence[str] = (DEFAULT_ISSUER,),
                mount_service_account_token: bool = False,
                audit: AuditFilter | None = None,
                authorization_modes: Sequence[str] | None = None,
                anonymous_auth: bool = True,
                service_cluster_ip_range: str = DEFAULT_SERVICE_CIDR,
                service_node_port_range: str = DEFAULT_NODE_PORT_RANGE,
                watch_cache: bool = True, event_ttl: int = DEFAULT_EVENT_TTL,
                priority: Any = None) -> Any:
    from ephemera.apiserver.app import ApiserverConfig, create_app
    from ephemera.apiserver.priority import PriorityConfig

    return create_app(store, ApiserverConfig(audit=audit, authenticator=authenticator,
                                             authorization_modes=authorization_modes,
                                             anonymous_auth=anonymous_auth,
                                             feature_gates=gates,
                                             kubelet_client_ssl=kubelet_client_ssl,
                                             token_issuer=token_issuer,
                                             api_audiences=tuple(api_audiences),
                                             mount_service_account_token=(
                                                 mount_service_account_token),
                                             service_cluster_ip_range=service_cluster_ip_range,
                                             service_node_port_range=service_node_port_range,
                                             watch_cache=watch_cache, event_ttl=event_ttl,
                                             priority=priority or PriorityConfig()))


def _token_authentication(args: argparse.Namespace, data_dir: Path, store: Any,
                          authenticator: Authenticator) -> tuple[TokenIssuer, list[str]]:
    """Add the bootstrap-token and service-account authenticators; the token issuer and
    the API audiences."""
    signing_key = args.service_account_signing_key_file or ensure_signing_key(data_dir)
    issuer = TokenIssuer.from_file(signing_key, args.service_account_issuer)
    public_keys = ([k for path in args.service_account_key_file for k in load_public_keys(path)]
                   if args.service_account_key_file else [issuer.private_key.public_key()])
    audiences = args.api_audiences or [args.service_account_issuer]
    objects = StoreObjectReader(store)
    if args.enable_bootstrap_token_auth:
        authenticator.token_authenticators.append(BootstrapTokenAuthenticator(objects))
    authenticator.token_authenticators.append(ServiceAccountTokenAuthenticator(
        public_keys, objects, issuers=[args.service_account_issuer], audiences=audiences))
    return issuer, audiences


async def _serve(args: argparse.Namespace, authenticator: Authenticator) -> int:
    from ephemera.apiserver.app import REGISTRY
    from ephemera.apiserver.identity import ApiserverIdentity
    from ephemera.apiserver.kubernetesservice import KubernetesServiceReconciler
    from ephemera.apiserver.serviceallocator import IPRange

    data_dir: Path = args.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    pki = ensure_pki(data_dir, serving_names(args.bind_address, args.advertise_address,
                                             args.tls_san, args.service_cluster_ip_range))
    store = open_store(args.store, data_dir=data_dir, endpoints=args.etcd_endpoints)
    audit: AuditFilter | None = None
    try:
        try:
            issuer, audiences = _token_authentication(args, data_dir, store, authenticator)
        except (OSError, ValueError) as err:
            print(f"ephemera apiserver: service account keys: {err}", file=sys.stderr,
                  flush=True)
            return 1
        try:
            audit = _audit(args)
        except (OSError, PolicyError) as err:
            print(f"ephemera apiserver: audit: {err}", file=sys.stderr, flush=True)
            return 1
        # To kubelets: trust the cluster CA, present a cluster-admin client certificate.
        app = _create_app(store, authenticator, args.feature_gates, client_ssl_context(pki),
                          issuer, audiences, args.mount_service_account_token, audit,
                          args.authorization_mode, args.anonymous_auth,
                          args.service_cluster_ip_range, args.service_node_port_range,
                          watch_cache=args.watch_cache, event_ttl=args.event_ttl,
                          priority=_priority(args))
        if args.worker_index is not None:
            app[METRICS].set_worker(args.worker_index)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        identities: list[Any] = []

        async def leave(_app: Any) -> None:  # before the app's caches close
            for identity in identities:
                await identity.stop()

        app.on_shutdown.append(leave)

        worker = args.worker_index

        def started(port: int) -> None:
            # N workers on one port are one member of the control plane: worker 0 keeps
            # its identity lease and the kubernetes Service.
            if not worker:
                identity = ApiserverIdentity(app[REGISTRY], advertised_url(args, port), port)
                identities.append(identity)
                identity.start()
                service = KubernetesServiceReconciler(
                    app[REGISTRY], IPRange(ipaddress.ip_network(
                        args.service_cluster_ip_range)).first(), port)
                identities.append(service)
                service.start()
            # What startup built (modules, schemas, the OpenAPI document, the app) lives as
            # long as the process: moved out of the collector's generations, so that a full
            # collection, which stops every request, no longer walks it (51k objects, 53 ms
            # on a loaded 2-core machine). Each worker of `--workers` too.
            gc.freeze()
            url = server_url(args.bind_address, port)
            if args.port_file is not None:
                flags.write_atomic(args.port_file, f"{port}\n")
            if worker is not None:  # the parent writes the kubeconfig and says it serves
                log.info("worker %d serving on %s", worker, url)
                return
            if args.write_kubeconfig is not None:
                write_admin_kubeconfig(args.write_kubeconfig, url, pki)
            print(f"ephemera apiserver serving on {url}", file=sys.stderr, flush=True)

        try:
            async with looplag.watching("apiserver" if worker is None
                                        else f"apiserver worker {worker}"):
                await serve(app, host=args.bind_address, port=args.port,
                            ssl_context=server_ssl_context(
                                pki, cert_file=args.tls_cert_file,
                                key_file=args.tls_private_key_file,
                                client_ca_file=args.client_ca_file),
                            stop=stop, on_started=started, reuse_port=worker is not None)
        except (OSError, ssl.SSLError) as err:
            print(cannot_serve(args.bind_address, args.port, err), file=sys.stderr,
                  flush=True)
            return 1
    finally:
        await store.close()
        if audit is not None:
            audit.log.close()
    log.info("stopped")
    return 0

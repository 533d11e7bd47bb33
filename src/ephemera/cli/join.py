"""`ephemera join`: run a kubelet that joins a running cluster with a bootstrap token, as
`kubeadm join` does.

    ephemera join --server URL --token ID.SECRET --ca-cert FILE --root-dir DIR
        [--node-name NAME] [the other kubelet flags]

It writes `<root-dir>/bootstrap-kubeconfig` (the server, the CA, the token) and runs
`ephemera kubelet --bootstrap-kubeconfig <that> --kubeconfig <root-dir>/kubeconfig
--client-ca-file <ca-cert>`: the kubelet asks for its client certificate (`system:node:NAME`)
with a CertificateSigningRequest, which the controller-manager approves and signs, writes its
kubeconfig and registers its Node. A restart on the same root dir reuses that kubeconfig.
Unless `--rotate-certificates=false`, it renews that client certificate at 70-90% of its
lifetime; unless `--rotate-server-certificates=false` (or with `--tls-cert-file`), its
serving certificate comes from a `kubernetes.io/kubelet-serving` CSR for the Node's
addresses, which the controller-manager approves after checking them, and is renewed
likewise (`ephemera.kubelet.certificate`), so the apiserver reaches it for logs and exec.

    ephemera join --control-plane --server URL --token ID.SECRET --ca-cert FILE
        --certificate-key HEX --data-dir DIR --store etcd --etcd-endpoints URLS
        [--apiserver-bind-port PORT] [--apiserver-advertise-address IP] [--node-name NAME]

joins as another control-plane member, as `kubeadm join --control-plane` does: with the
bootstrap token it reads the Secret `kube-system/kubeadm-certs` (`ephemera token create
--upload-certs`), decrypts the shared CA and service account keys with the certificate key
into `DIR/pki/` (`ephemera.cli.uploadcerts`; the CA must be `--ca-cert`), then runs
`ephemera up` on DIR with the cluster's etcd: its own apiserver, scheduler and
controller-manager, whose `--apiserver-endpoints` include `--server`, and a kubelet when
`--node-name` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
from pathlib import Path
from typing import Any

import yaml

from ephemera.api.errors import StatusError
from ephemera.apiserver.bootstraptoken import parse_token
from ephemera.cli import flags, kubelet
from ephemera.cli.controlplane import ControlPlaneError
from ephemera.cli.uploadcerts import download_certs, parse_certificate_key
from ephemera.client import ApiClient, ApiUnavailable, ClientConfig


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "join", help="join a running cluster as a node (bootstrap token)",
        description="Run a kubelet that joins a cluster with a bootstrap token.")
    parser.add_argument("--server", required=True, metavar="URL",
                        help="the apiserver, e.g. https://10.0.0.1:6443")
    parser.add_argument("--token", required=True, metavar="ID.SECRET",
                        help="a bootstrap token (ephemera token create)")
    parser.add_argument("--ca-cert", required=True, type=Path, metavar="FILE",
                        help="the cluster CA certificate (<data-dir>/pki/ca.crt)")
    kubelet.add_node_arguments(parser, root_dir_required=False)
    control = parser.add_argument_group("control-plane members (--control-plane)")
    control.add_argument("--control-plane", action="store_true",
                         help="join as another member of the control plane (apiserver, "
                              "scheduler, controller-manager) rather than as a node")
    control.add_argument("--certificate-key", default=None, metavar="HEX",
                         help="decrypts the shared certificates (ephemera token create "
                              "--upload-certs prints it)")
    control.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                         help="the new member's data dir")
    flags.add_store_flags(parser)
    control.add_argument("--apiserver-bind-port", type=int, default=None, metavar="PORT",
                         help="the new apiserver's port (default: a free one)")
    control.add_argument("--apiserver-advertise-address", default=None, metavar="IP",
                         help="the address the new apiserver listens and is reached at "
                              "(default: the new member's own node address, as `up`)")
    parser.set_defaults(func=lambda args: run(parser, args))


def bootstrap_kubeconfig(server: str, ca_pem: bytes, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": "tls-bootstrap-token-user", "user": {"token": token}}],
        "contexts": [{"name": "tls-bootstrap-token-user@kubernetes", "context": {
            "cluster": "default-cluster", "user": "tls-bootstrap-token-user"}}],
        "current-context": "tls-bootstrap-token-user@kubernetes",
    }


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if parse_token(args.token) is None:
        parser.error("--token: a bootstrap token looks like abcdef.0123456789abcdef")
    try:
        ca_pem = args.ca_cert.read_bytes()
    except OSError as err:
        parser.error(f"--ca-cert: {err}")
    if args.control_plane:
        return join_control_plane(parser, args, ca_pem)
    for name in ("certificate_key", "data_dir", "apiserver_bind_port",
                 "apiserver_advertise_address"):
        if getattr(args, name) is not None:
            parser.error(f"--{name.replace('_', '-')} goes with --control-plane")
    if args.root_dir is None:
        parser.error("the following arguments are required: --root-dir")
    root_dir: Path = args.root_dir.resolve()
    root_dir.mkdir(parents=True, exist_ok=True)
    path = root_dir / "bootstrap-kubeconfig"
    doc = bootstrap_kubeconfig(args.server, ca_pem, args.token)
    flags.write_atomic(path, yaml.safe_dump(doc, sort_keys=False), 0o600)
    args.bootstrap_kubeconfig = path
    args.kubeconfig = root_dir / "kubeconfig"
    if args.client_ca_file is None:
        args.client_ca_file = args.ca_cert.resolve()
    # A joined kubelet renews its client certificate and gets its serving certificate from
    # the cluster unless told otherwise (kubeadm's rotateCertificates and ephemera's
    # choice of serverTLSBootstrap: the apiserver accepts only cluster-signed kubelets).
    if args.rotate_certificates is None:
        args.rotate_certificates = True
    if args.rotate_server_certificates is None:
        args.rotate_server_certificates = args.tls_cert_file is None
    # `up`'s controller-manager gives every Node a pod CIDR: start pods only with it.
    if not args.pod_cidr:
        args.wait_for_pod_cidr = True
    return kubelet.run(parser, args)


def join_control_plane(parser: argparse.ArgumentParser, args: argparse.Namespace,
                       ca_pem: bytes) -> int:
    """Fetch the shared certificates, then run `ephemera up` as the new member."""
    if args.certificate_key is None or args.data_dir is None:
        parser.error("--control-plane needs --certificate-key and --data-dir")
    if args.store != "etcd" or not args.etcd_endpoints:
        parser.error("--control-plane needs --store etcd --etcd-endpoints (the cluster's etcd)")
    try:
        key = parse_certificate_key(args.certificate_key)
    except ValueError as err:
        parser.error(f"--certificate-key: {err}")
    data_dir: Path = args.data_dir.resolve()
    config = ClientConfig(server=args.server, ca_pem=ca_pem, token=args.token)

    async def fetch() -> None:
        async with ApiClient(config, user_agent="ephemera-join") as api:
            await download_certs(api, key, data_dir / "pki")

    try:
        asyncio.run(fetch())
    except (ControlPlaneError, OSError) as err:
        print(f"ephemera join: {err}", file=sys.stderr, flush=True)
        return 1
    except StatusError as err:
        print(f"ephemera join: reading the shared certificates: {err.message}",
              file=sys.stderr, flush=True)
        return 1
    except ApiUnavailable as err:
        print(f"ephemera join: {args.server} does not answer: {err}", file=sys.stderr,
              flush=True)
        return 1
    if (data_dir / "pki" / "ca.crt").read_bytes() != ca_pem:
        print("ephemera join: the cluster's CA is not --ca-cert", file=sys.stderr, flush=True)
        return 1
    argv = ["up", "--data-dir", str(data_dir), "--store", "etcd",
            "--etcd-endpoints", ",".join(args.etcd_endpoints),
            "--apiserver-endpoints", ",".join([args.server, *args.apiserver_endpoints])]
    if args.apiserver_bind_port is not None:
        argv += ["--port", str(args.apiserver_bind_port)]
    if args.apiserver_advertise_address is not None:
        argv += ["--bind-address", args.apiserver_advertise_address]
    if args.node_name is not None:
        argv += ["--node-name", args.node_name, "--runtime", args.runtime]
    else:
        argv += ["--no-kubelet"]
    gates = args.feature_gates.to_flag()
    if gates:
        argv += ["--feature-gates", gates]
    from ephemera.cli.main import build_parser

    up_args = build_parser(argv).parse_args(argv)
    code: int = up_args.func(up_args)
    return code

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
"""

from __future__ import annotations

import argparse
import base64
from pathlib import Path
from typing import Any

import yaml

from ephemera.apiserver.bootstraptoken import parse_token
from ephemera.cli import flags, kubelet


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
    kubelet.add_node_arguments(parser)
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
    return kubelet.run(parser, args)

"""`ephemera token create`: make a bootstrap token for `ephemera join`, as
`kubeadm token create` does.

    ephemera token create (--data-dir DIR | --kubeconfig FILE) [--ttl 24h]
        [--description TEXT] [--print-join-command]

It creates the Secret `bootstrap-token-<ID>` in `kube-system`
(`ephemera.apiserver.bootstraptoken`; authentication and signing usages, extra group
`system:bootstrappers:kubeadm:default-node-token`, expiring after `--ttl`, `0` for never) and
prints the token `ID.SECRET`, or with `--print-join-command` the whole `ephemera join`
command line (the server of the kubeconfig, the data dir's CA file).

`--upload-certs` (with `--data-dir`) also stores the data dir's shared CA and service account
keys encrypted under a certificate key (`--certificate-key`, else a new one), as kubeadm's
`upload-certs` phase (`ephemera.cli.uploadcerts`), prints the key, and the join command
becomes `ephemera join --control-plane ... --certificate-key KEY`: a control-plane member
from another machine.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import re
import sys
from pathlib import Path
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.apiserver.bootstraptoken import NAMESPACE, new_token, token_secret
from ephemera.cli.uploadcerts import new_certificate_key, parse_certificate_key, upload_certs
from ephemera.client import (
    ApiClient,
    ApiUnavailable,
    KubeconfigError,
    load_kubeconfig,
    resource_path,
)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")


def duration(text: str) -> dt.timedelta:
    """A Go-style duration (`24h`, `1h30m`, `90s`; `0` for none)."""
    if text.strip() == "0":
        return dt.timedelta(0)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}")
    unit = {"h": 3600, "m": 60, "s": 1}
    return dt.timedelta(seconds=sum(float(n) * unit[u] for n, u in parts))


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "token", help="manage bootstrap tokens (for ephemera join)",
        description="Create bootstrap tokens with which new nodes join the cluster.")
    actions = parser.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a bootstrap token and print it")
    where = create.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", type=Path, metavar="DIR",
                       help="the cluster's data dir (its kubeconfig and CA)")
    where.add_argument("--kubeconfig", type=Path, metavar="FILE",
                       help="an administrator's kubeconfig")
    create.add_argument("--ttl", type=duration, default=dt.timedelta(hours=24),
                        metavar="DURATION",
                        help="how long the token lasts (default 24h; 0: never expires)")
    create.add_argument("--description", default="", help="a note stored with the token")
    create.add_argument("--print-join-command", action="store_true",
                        help="print the `ephemera join` command line instead of the token")
    create.add_argument("--upload-certs", action="store_true",
                        help="also store the shared CA and service account keys, encrypted, "
                             "for `ephemera join --control-plane` (needs --data-dir)")
    create.add_argument("--certificate-key", default=None, metavar="HEX",
                        help="the key to encrypt them with (default: a new one, printed)")
    create.set_defaults(func=lambda args: run(create, args))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    kubeconfig = args.kubeconfig or args.data_dir / "kubeconfig"
    try:
        config = load_kubeconfig(kubeconfig)
    except (KubeconfigError, OSError) as err:
        parser.error(f"{kubeconfig}: {err}")
    key_text = ""
    if args.upload_certs:
        if args.data_dir is None:
            parser.error("--upload-certs needs --data-dir (the certificates to upload)")
        key_text = args.certificate_key or new_certificate_key()
        try:
            key = parse_certificate_key(key_text)
        except ValueError as err:
            parser.error(f"--certificate-key: {err}")
    elif args.certificate_key is not None:
        parser.error("--certificate-key goes with --upload-certs")
    token = new_token()
    ttl = args.ttl if args.ttl > dt.timedelta(0) else None
    secret = token_secret(token, ttl=ttl, description=args.description)

    async def create() -> None:
        async with ApiClient(config, user_agent="ephemera-token") as api:
            await api.create(resource_path("secrets", NAMESPACE), secret)
            if key_text:
                await upload_certs(api, args.data_dir / "pki", key)

    try:
        asyncio.run(create())
    except (StatusError, ApiUnavailable, OSError) as err:
        print(f"ephemera token create: {getattr(err, 'message', err)}", file=sys.stderr)
        return 1
    if key_text and not args.print_join_command:
        print(f"certificate key: {key_text}")
    if not args.print_join_command:
        print(token)
        return 0
    ca = (args.data_dir / "pki" / "ca.crt") if args.data_dir else Path("CA-FILE")
    command = (f"ephemera join --server {config.server} --token {token} "
               f"--ca-cert {ca.resolve() if args.data_dir else ca}")
    if key_text:
        command += f" --control-plane --certificate-key {key_text}"
    print(command)
    return 0

"""Flags shared by several commands (`--data-dir`, `--feature-gates`, the store flags), parsed
the way the upstream components parse them, and the data dir's small state files."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ephemera.api.featuregates import FeatureGateError, FeatureGates, parse_feature_gates

PORTS_FILE = "ports.json"


def feature_gates_arg(value: str) -> FeatureGates:
    try:
        return parse_feature_gates(value)
    except FeatureGateError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def endpoints_arg(value: str) -> list[str]:
    return [e.strip() for e in value.split(",") if e.strip()]


def apiserver_urls_arg(value: str) -> list[str]:
    urls = endpoints_arg(value)
    bad = [u for u in urls if not u.startswith(("https://", "http://"))]
    if not urls or bad:
        raise argparse.ArgumentTypeError(
            f"{value!r}: comma-separated apiserver URLs such as https://10.0.0.1:6443")
    return urls


def add_apiserver_endpoints(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--apiserver-endpoints", type=apiserver_urls_arg, default=[], metavar="URL,...",
        help="apiservers of the same control plane to use (same CA and credentials as the "
             "kubeconfig's server), in order of preference; the component sticks to one and "
             "moves to the next when it stops answering, and learns the others from their "
             "identity leases")


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", required=True, type=Path, metavar="DIR",
                        help="where the store, certificates, kubeconfig and logs live")


def add_feature_gates(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--feature-gates", type=feature_gates_arg, default=FeatureGates(), metavar="K=V,...",
        help="feature gates (DynamicContainers, DynamicNodeLocalEphemeralVolumes, "
             "PodLevelResources, PodLevelResourcesEphemeralStorage, ImageVolume, "
             "NodeDeclaredFeatures; all default true)")


def add_store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", choices=("sqlite", "etcd"), default="sqlite",
                        help="sqlite: one file in the data dir (default); etcd: an etcd server")
    parser.add_argument("--etcd-endpoints", type=endpoints_arg, default=[], metavar="URLS",
                        help="comma-separated etcd client URLs (with --store etcd)")


def check_store_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.store == "etcd" and not args.etcd_endpoints:
        parser.error("--store etcd needs --etcd-endpoints")


def read_ports(data_dir: Path) -> dict[str, int]:
    try:
        raw: Any = json.loads((data_dir / PORTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): int(v) for k, v in raw.items() if isinstance(v, int)}


def write_ports(data_dir: Path, ports: dict[str, int]) -> None:
    write_atomic(data_dir / PORTS_FILE, json.dumps(ports, indent=2, sort_keys=True) + "\n")


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

"""Flags shared by several commands (`--data-dir`, `--feature-gates`, the store flags, the
`--leader-elect*` flags of the scheduler and the controller-manager), parsed the way the
upstream components parse them, and the data dir's small state files."""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ephemera.api.featuregates import (
    DEFAULTS,
    FeatureGateError,
    FeatureGates,
    parse_feature_gates,
    parse_go_bool,
)
from ephemera.client.leaderelection import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RESOURCE_NAMESPACE,
    DEFAULT_RETRY_PERIOD,
    LeaderElectionConfig,
    LeaderElectionError,
    new_identity,
)

PORTS_FILE = "ports.json"


def feature_gates_arg(value: str) -> FeatureGates:
    try:
        return parse_feature_gates(value)
    except FeatureGateError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def go_bool_arg(value: str) -> bool:
    """A boolean flag's value as Go's `strconv.ParseBool` reads it."""
    try:
        return parse_go_bool(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3,
                   "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_NUMBER = re.compile(r"(\d*)(?:\.(\d*))?")


def parse_go_duration(value: str) -> float:
    """Seconds from a Go duration, read as `time.ParseDuration` reads it (`15s`, `1m30s`,
    `500ms`, `0`), with its error messages."""
    invalid = ValueError(f'time: invalid duration "{value}"')
    text = value
    sign = 1.0
    if text[:1] in ("+", "-"):
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise invalid
    total = 0.0
    while text:
        number = _DURATION_NUMBER.match(text)
        assert number is not None  # both parts may be empty
        whole, fraction = number.group(1), number.group(2)
        if not whole and not fraction:
            raise invalid
        text = text[number.end():]
        unit_end = next((i for i, c in enumerate(text) if c == "." or c.isdigit()),
                        len(text))
        unit = text[:unit_end]
        if not unit:
            raise ValueError(f'time: missing unit in duration "{value}"')
        if unit not in _DURATION_UNITS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{value}"')
        total += float(f"{whole or 0}.{fraction or 0}") * _DURATION_UNITS[unit]
        text = text[unit_end:]
    return sign * total


def duration_arg(value: str) -> float:
    try:
        return parse_go_duration(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def int_arg(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `minimum`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}: {text}")
        return value
    return parse


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
        help=feature_gates_help())


def feature_gates_help() -> str:
    """The gates `--feature-gates` knows, from the one table of them (`DEFAULTS`)."""
    on = [name for name, default in DEFAULTS.items() if default]
    off = [name for name, default in DEFAULTS.items() if not default]
    parts = [", ".join(on) + ("; all default true" if not off else ": default true")]
    if off:
        parts.append(", ".join(off) + ": default false")
    return f"feature gates ({'; '.join(parts)})"


def add_store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", choices=("sqlite", "etcd"), default="sqlite",
                        help="sqlite: one file in the data dir (default); etcd: an etcd server")
    parser.add_argument("--etcd-endpoints", type=endpoints_arg, default=[], metavar="URLS",
                        help="comma-separated etcd client URLs (with --store etcd)")


def add_leader_election(parser: argparse.ArgumentParser, resource_name: str) -> None:
    """Upstream's `--leader-elect*` flags (component-base's `BindLeaderElectionFlags`), with
    upstream's defaults; the Lease is `kube-system/<resource_name>`."""
    parser.add_argument(
        "--leader-elect", type=go_bool_arg, nargs="?", const=True, default=True,
        metavar="BOOL",
        help="start a leader election client and gain leadership before executing the main "
             "loop; enable this when running replicated components for high availability "
             "(default true)")
    parser.add_argument(
        "--leader-elect-lease-duration", type=duration_arg,
        default=DEFAULT_LEASE_DURATION, metavar="DURATION",
        help="how long non-leader candidates wait after observing a leadership renewal "
             "before trying to take over a led but unrenewed slot (default 15s)")
    parser.add_argument(
        "--leader-elect-renew-deadline", type=duration_arg,
        default=DEFAULT_RENEW_DEADLINE, metavar="DURATION",
        help="how long the acting leader retries renewing its slot before it stops leading; "
             "less than the lease duration (default 10s)")
    parser.add_argument(
        "--leader-elect-retry-period", type=duration_arg, default=DEFAULT_RETRY_PERIOD,
        metavar="DURATION",
        help="how long clients wait between attempts to acquire and renew a leadership "
             "(default 2s)")
    parser.add_argument(
        "--leader-elect-resource-lock", choices=("leases",), default="leases",
        help="the type of object used for locking during leader election (only 'leases')")
    parser.add_argument(
        "--leader-elect-resource-name", default=resource_name, metavar="NAME",
        help=f"the name of the Lease used for locking (default {resource_name})")
    parser.add_argument(
        "--leader-elect-resource-namespace", default=DEFAULT_RESOURCE_NAMESPACE,
        metavar="NAMESPACE",
        help=f"the namespace of that Lease (default {DEFAULT_RESOURCE_NAMESPACE})")


def leader_election_config(parser: argparse.ArgumentParser, args: argparse.Namespace, *,
                           release_on_cancel: bool) -> LeaderElectionConfig | None:
    """The leader election of a component from its flags (None with `--leader-elect=false`);
    a configuration client-go would refuse is a usage error."""
    if not args.leader_elect:
        return None
    config = LeaderElectionConfig(
        namespace=args.leader_elect_resource_namespace,
        name=args.leader_elect_resource_name, identity=new_identity(),
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period, release_on_cancel=release_on_cancel)
    try:
        config.validate()
    except LeaderElectionError as err:
        parser.error(f"leader election: {err}")
    return config


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

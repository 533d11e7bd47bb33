"""`ephemera dns`: the cluster DNS server as its own process (`ephemera.clusterdns`), watching
the API named by a kubeconfig (`--kubeconfig`, else `$KUBECONFIG` or `~/.kube/config`), as
CoreDNS with its `kubernetes` plugin runs in a kubeadm cluster. It answers the cluster domain
on `--listen` (UDP and TCP), forwards other names to `--upstream` resolvers when given and
refuses them otherwise. With `--kube-dns-service-ip` it also keeps the `kube-system/kube-dns`
Service and an EndpointSlice pointing at itself (`ephemera.clusterdns.publish`); `ephemera
up` runs it so. It stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.cli import flags
from ephemera.client import ApiClient, ApiUnavailable, KubeconfigError, load_kubeconfig
from ephemera.client.apiservers import discovering
from ephemera.clusterdns.publish import ensure_kube_dns
from ephemera.clusterdns.records import DEFAULT_TTL, ClusterRecords
from ephemera.clusterdns.server import MAX_CONCURRENT, DnsService, Upstream, parse_hostport

log = logging.getLogger("ephemera.dns")

PUBLISH_RETRY = 5.0


def _listen(text: str) -> tuple[str, int]:
    try:
        host, port = parse_hostport(text, 53)
        if host:
            ipaddress.ip_address(host)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: want IP:PORT ({err})") from None
    return host or "0.0.0.0", port


def dns_upstreams(text: str) -> list[Upstream]:
    out = []
    for part in flags.endpoints_arg(text):
        try:
            host, port = parse_hostport(part, 53)
            ipaddress.ip_address(host)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{part!r}: want a resolver's IP[:PORT]") from None
        out.append(Upstream(host, port))
    return out


def dns_domain(text: str) -> str:
    domain = text.strip().strip(".").lower()
    labels = domain.split(".")
    if not domain or any(not label or len(label) > 63 for label in labels):
        raise argparse.ArgumentTypeError(f"{text!r}: not a DNS domain")
    return domain


def _ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not an IP address") from None


def _ttl(text: str) -> int:
    if not text.isdigit() or int(text) > 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: a TTL in seconds, 0 to 3600")
    return int(text)


def _max_concurrent(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of queries, at least 1")
    return int(text)


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "dns", help="run the cluster DNS server",
        description="Answer <service>.<namespace>.svc.<cluster-domain> and the other names of "
                    "the cluster domain from the API's Services and EndpointSlices, as "
                    "CoreDNS's kubernetes plugin does.")
    parser.add_argument("--kubeconfig", type=Path, default=None, metavar="FILE",
                        help="how to reach the API server (default: $KUBECONFIG, then "
                             "~/.kube/config)")
    parser.add_argument("--listen", type=_listen, default=("0.0.0.0", 53), metavar="IP:PORT",
                        help="where to answer, UDP and TCP (default 0.0.0.0:53; port 0: a "
                             "free one, printed at start)")
    parser.add_argument("--cluster-domain", type=dns_domain, default="cluster.local",
                        metavar="DOMAIN", help="the zone answered (default cluster.local)")
    parser.add_argument("--upstream", type=dns_upstreams, action="append", default=[],
                        metavar="IP[:PORT],...",
                        help="resolvers for names outside the cluster domain, tried in order "
                             "(default: none, such names are REFUSED)")
    parser.add_argument("--max-concurrent", type=_max_concurrent, default=MAX_CONCURRENT,
                        metavar="N",
                        help="forwarded queries in flight at most; one more is answered "
                             f"REFUSED, as CoreDNS's forward max_concurrent (default "
                             f"{MAX_CONCURRENT}, kubeadm's Corefile)")
    parser.add_argument("--ttl", type=_ttl, default=DEFAULT_TTL, metavar="SECONDS",
                        help=f"TTL of the answers (default {DEFAULT_TTL}, as CoreDNS)")
    parser.add_argument("--pods", choices=("insecure", "disabled"), default="insecure",
                        help="a-b-c-d.<namespace>.pod.<domain> names: insecure answers any "
                             "address (kubeadm's CoreDNS default), disabled none")
    parser.add_argument("--kube-dns-service-ip", type=_ip, default=None, metavar="IP",
                        help="keep the Service kube-system/kube-dns (created with this "
                             "ClusterIP when missing) and an EndpointSlice pointing it at "
                             "--listen (which then needs a specific address)")
    flags.add_apiserver_endpoints(parser)
    parser.set_defaults(func=lambda args: run(parser, args))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    host, _port = args.listen
    if args.kube_dns_service_ip and ipaddress.ip_address(host).is_unspecified:
        parser.error("--kube-dns-service-ip needs --listen with a specific address (the "
                     "one the Service's endpoint points at)")
    try:
        config = load_kubeconfig(args.kubeconfig)
    except KubeconfigError as err:
        parser.error(str(err))
    try:
        return asyncio.run(_serve(config, args))
    except KeyboardInterrupt:
        return 0


async def _serve(config: Any, args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host, port = args.listen
    upstreams = [u for group in args.upstream for u in group]
    records = ClusterRecords(args.cluster_domain, ttl=args.ttl, pods=args.pods,
                             own_addresses=[host])
    async with ApiClient(config, user_agent="ephemera-dns",
                         endpoints=args.apiserver_endpoints) as api, discovering(api):
        print(f"ephemera dns ({args.cluster_domain}) using {api.server}", file=sys.stderr,
              flush=True)
        service = DnsService(api, records, upstreams, max_concurrent=args.max_concurrent)
        starting = asyncio.create_task(service.start(host, port))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            await service.close()
            return 0
        stopping.cancel()
        try:
            bound = starting.result()
        except OSError as err:
            log.error("cannot listen on %s:%d: %s", host, port, err.strerror or err)
            await service.close()
            return 1
        print(f"ephemera dns: listening on {bound[0]}:{bound[1]}", file=sys.stderr, flush=True)
        try:
            if args.kube_dns_service_ip:
                await _publish(api, args.kube_dns_service_ip, bound, stop)
            await stop.wait()
        finally:
            await service.close()
    log.info("stopped")
    return 0


async def _publish(api: ApiClient, cluster_ip: str, bound: tuple[str, int],
                   stop: asyncio.Event) -> None:
    """Keep trying until the Service and the slice are written (the API may be restarting)."""
    while not stop.is_set():
        try:
            await ensure_kube_dns(api, cluster_ip, bound[0], bound[1])
            return
        except (StatusError, ApiUnavailable) as err:
            log.warning("could not write the kube-dns Service or its EndpointSlice: %s", err)
        try:
            await asyncio.wait_for(stop.wait(), PUBLISH_RETRY)
        except TimeoutError:
            pass

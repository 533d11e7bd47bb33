"""A pod's DNS resolver configuration, as upstream's kubelet forms it
(`pkg/kubelet/network/dns/dns.go`, `Configurer.GetPodDNS`): the nameservers, search paths and
options the runtime writes into the sandbox's `/etc/resolv.conf`.

- The base is the host's resolver file (`--resolv-conf`, default `/etc/resolv.conf`), read as
  `parseResolvConf` does: `nameserver` lines accumulate, the last `search` line wins (trailing
  dots dropped, `.` left out), `options` accumulate, a later option replacing an earlier one
  of the same name. With `--resolv-conf=""` the host part is `nameserver 127.0.0.1` (`::1`
  for an IPv6 node) and `search .`, as upstream ("no DNS").
- `dnsPolicy`: `ClusterFirst` (the default) and `ClusterFirstWithHostNet`: the cluster DNS
  (`--cluster-dns`) as the only nameservers, the search paths `<ns>.svc.<domain>
  svc.<domain> <domain>` and then the host's, `options ndots:5`; a `hostNetwork` pod with
  `ClusterFirst` gets `Default`. Without `--cluster-dns` the cluster policies fall back to
  `Default` with the `MissingClusterDNS` warning event. `Default`: the host's configuration.
  `None`: nothing but `dnsConfig`.
- `dnsConfig` is merged in: its nameservers and searches appended (duplicates dropped), its
  options replacing those of the same name. Upstream rebuilds the options from a Go map, in
  no fixed order; ephemera keeps the first appearance's order.
- The limits: at most 3 nameservers and 32 search paths of at most 2048 characters in all,
  none longer than 253; what is cut is named in a `DNSConfigForming` warning event with
  upstream's message.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ephemera.api.goformat import go_quote
from ephemera.kubelet.podutil import format_pod
from ephemera.kubelet.runtime.base import DnsConfig
from ephemera.kubelet.runtime.livemount import go_strerror

__all__ = ["DnsConfigError", "DnsConfigurer", "DnsEvent", "parse_resolv_conf"]

DEFAULT_OPTIONS = ("ndots:5",)
MAX_NAMESERVERS = 3
MAX_SEARCH_PATHS = 32
MAX_SEARCH_LIST_CHARS = 2048
MAX_SEARCH_PATH_LENGTH = 253  # DNS1123SubdomainMaxLength
MAX_RESOLV_CONF_BYTES = 10 << 20


class DnsConfigError(Exception):
    """The host's resolver file could not be read; the message is Go's (`open PATH: ...`)."""


@dataclass(frozen=True)
class DnsEvent:
    """A warning event to record: on the pod, or on the node (`node=True`)."""

    reason: str
    message: str
    node: bool = False


def _append_options(options: list[str], more: Sequence[str]) -> list[str]:
    """`appendOptions`: a later option replaces the earlier one of the same name."""
    for option in more:
        name = option.split(":", 1)[0]
        options = [o for o in options if o.split(":", 1)[0] != name]
        options.append(option)
    return options


def parse_resolv_conf(text: str) -> tuple[list[str], list[str], list[str]]:
    """(nameservers, searches, options) of a resolv.conf, as `parseResolvConf`."""
    nameservers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for line in text.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        fields = trimmed.split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) >= 2:
            nameservers.append(fields[1])
        elif fields[0] == "search":
            searches = [s.removesuffix(".") for s in fields[1:] if s != "."]
        elif fields[0] == "options":
            options = _append_options(options, fields[1:])
    return nameservers, searches, options


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


@dataclass
class DnsConfigurer:
    """The kubelet's `--cluster-dns`, `--cluster-domain`, `--resolv-conf` and node IPs."""

    cluster_dns: list[str] = field(default_factory=list)
    cluster_domain: str = ""
    resolver_config: str = "/etc/resolv.conf"
    node_ips: list[str] = field(default_factory=list)

    def host_config(self) -> DnsConfig:
        if not self.resolver_config:
            return DnsConfig()
        try:
            with open(self.resolver_config, "rb") as f:
                text = f.read(MAX_RESOLV_CONF_BYTES).decode(errors="replace")
        except OSError as err:
            cause = go_strerror(err.errno) if err.errno else str(err)
            raise DnsConfigError(f"open {self.resolver_config}: {cause}") from None
        servers, searches, options = parse_resolv_conf(text)
        return DnsConfig(tuple(servers), tuple(searches), tuple(options))

    def pod_dns(self, pod: Mapping[str, Any]) -> tuple[DnsConfig, list[DnsEvent]]:
        """The pod's resolver configuration and the events to record. Raises DnsConfigError
        when the host's resolver file cannot be read (no sandbox then, as upstream)."""
        spec = pod.get("spec") or {}
        md = pod.get("metadata") or {}
        events: list[DnsEvent] = []
        policy = str(spec.get("dnsPolicy") or "ClusterFirst")
        host = self.host_config()
        servers, searches, options = list(host.servers), list(host.searches), list(
            host.options)
        kind = "cluster"
        if policy == "None":
            kind = "none"
        elif policy == "Default" or (policy == "ClusterFirst" and spec.get("hostNetwork")):
            kind = "host"
        if kind == "none":
            servers, searches, options = [], [], []
        elif kind == "cluster" and self.cluster_dns:
            servers = list(self.cluster_dns)
            if self.cluster_domain:
                d = self.cluster_domain
                searches = _unique([f"{md.get('namespace') or ''}.svc.{d}", f"svc.{d}", d,
                                    *searches])
            options = list(DEFAULT_OPTIONS)
        else:
            if kind == "cluster":
                message = ('kubelet does not have ClusterDNS IP configured and cannot create '
                           'Pod using "ClusterFirst" policy. Falling back to "Default" policy.')
                events.append(DnsEvent("MissingClusterDNS", message, node=True))
                events.append(DnsEvent("MissingClusterDNS",
                                       f"pod: {go_quote(format_pod(pod))}. {message}"))
            if not self.resolver_config:
                servers += ["::1" if ipaddress.ip_address(ip).version == 6 else "127.0.0.1"
                            for ip in self.node_ips] or ["127.0.0.1"]
                searches = ["."]
        config = spec.get("dnsConfig")
        if isinstance(config, Mapping):
            servers = _unique([*servers, *(str(s) for s in config.get("nameservers") or [])])
            searches = _unique([*searches, *(str(s) for s in config.get("searches") or [])])
            options = self._merge_options(options, config.get("options") or [])
        servers = self._fit_nameservers(servers, events)
        searches = self._fit_searches(searches, events)
        return DnsConfig(tuple(servers), tuple(searches), tuple(options)), events

    @staticmethod
    def _merge_options(existing: Sequence[str], more: Sequence[Mapping[str, Any]]
                       ) -> list[str]:
        merged: dict[str, str] = {}
        for text in existing:
            name, _, value = text.partition(":")
            merged[name] = value
        for option in more:
            merged[str(option.get("name") or "")] = str(option.get("value") or "")
        return [f"{name}:{value}" if value else name for name, value in merged.items()]

    @staticmethod
    def _fit_nameservers(servers: list[str], events: list[DnsEvent]) -> list[str]:
        if len(servers) <= MAX_NAMESERVERS:
            return servers
        servers = servers[:MAX_NAMESERVERS]
        events.append(DnsEvent("DNSConfigForming", "Nameserver limits were exceeded, some "
                               "nameservers have been omitted, the applied nameserver line "
                               f"is: {' '.join(servers)}"))
        return servers

    @staticmethod
    def _fit_searches(searches: list[str], events: list[DnsEvent]) -> list[str]:
        exceeded = False
        if len(searches) > MAX_SEARCH_PATHS:
            searches, exceeded = searches[:MAX_SEARCH_PATHS], True
        kept = [s for s in searches if len(s) <= MAX_SEARCH_PATH_LENGTH]
        exceeded = exceeded or len(kept) != len(searches)
        searches = kept
        length = len(" ".join(searches))
        if length > MAX_SEARCH_LIST_CHARS:
            cut = 0
            for search in reversed(searches):
                length -= len(search) + 1
                cut += 1
                if length <= MAX_SEARCH_LIST_CHARS:
                    break
            searches, exceeded = searches[:len(searches) - cut], True
        if exceeded:
            events.append(DnsEvent("DNSConfigForming", "Search Line limits were exceeded, "
                                   "some search paths have been omitted, the applied search "
                                   f"line is: {' '.join(searches)}"))
        return searches

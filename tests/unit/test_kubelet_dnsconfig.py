"""A pod's resolv.conf by its dnsPolicy (`ephemera.kubelet.dnsconfig`), as upstream's
kubelet forms it (`pkg/kubelet/network/dns`), the file the runtime writes from it, and the
pod's managed /etc/hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ephemera.kubelet.dnsconfig import (
    DnsConfigError,
    DnsConfigurer,
    DnsEvent,
    parse_resolv_conf,
)
from ephemera.kubelet.runtime.base import DnsConfig
from ephemera.kubelet.runtime.oci import managed_hosts

HOST = """# the host's
nameserver 192.0.2.53
nameserver 192.0.2.54
search corp.example. lab.example
options attempts:2 ndots:2
options timeout:1 ndots:3
"""


def pod(policy: str | None = None, host_network: bool = False,
        dns_config: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if policy:
        spec["dnsPolicy"] = policy
    if host_network:
        spec["hostNetwork"] = True
    if dns_config is not None:
        spec["dnsConfig"] = dns_config
    return {"metadata": {"name": "p", "namespace": "team", "uid": "u1"}, "spec": spec}


@pytest.fixture
def configurer(tmp_path: Path) -> DnsConfigurer:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(HOST)
    return DnsConfigurer(["10.96.0.10"], "cluster.local", str(resolv), ["10.0.0.5"])


def test_parse_resolv_conf() -> None:
    assert parse_resolv_conf(HOST) == (
        ["192.0.2.53", "192.0.2.54"], ["corp.example", "lab.example"],
        ["attempts:2", "timeout:1", "ndots:3"])
    assert parse_resolv_conf("search a.\nsearch b .\n") == ([], ["b"], [])


def test_cluster_first(configurer: DnsConfigurer) -> None:
    config, events = configurer.pod_dns(pod())
    assert config == DnsConfig(
        ("10.96.0.10",),
        ("team.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example",
         "lab.example"),
        ("ndots:5",))
    assert events == []
    assert config.resolv_conf() == (
        "search team.svc.cluster.local svc.cluster.local cluster.local corp.example "
        "lab.example\nnameserver 10.96.0.10\noptions ndots:5\n")


def test_host_network_cluster_first_falls_back_to_default(configurer: DnsConfigurer) -> None:
    config, _ = configurer.pod_dns(pod("ClusterFirst", host_network=True))
    assert config == DnsConfig(("192.0.2.53", "192.0.2.54"), ("corp.example", "lab.example"),
                               ("attempts:2", "timeout:1", "ndots:3"))
    config, _ = configurer.pod_dns(pod("ClusterFirstWithHostNet", host_network=True))
    assert config.servers == ("10.96.0.10",)


def test_default_and_none(configurer: DnsConfigurer) -> None:
    assert configurer.pod_dns(pod("Default"))[0].servers == ("192.0.2.53", "192.0.2.54")
    config, _ = configurer.pod_dns(pod("None", dns_config={
        "nameservers": ["1.1.1.1"], "searches": ["x.example"],
        "options": [{"name": "ndots", "value": "1"}, {"name": "edns0"}]}))
    assert config == DnsConfig(("1.1.1.1",), ("x.example",), ("ndots:1", "edns0"))
    assert config.resolv_conf() == ("search x.example\nnameserver 1.1.1.1\n"
                                    "options ndots:1 edns0\n")


def test_dns_config_merged(configurer: DnsConfigurer) -> None:
    config, _ = configurer.pod_dns(pod(dns_config={
        "nameservers": ["10.96.0.10", "1.1.1.1"], "searches": ["cluster.local", "y.example"],
        "options": [{"name": "ndots", "value": "2"}, {"name": "single-request"}]}))
    assert config.servers == ("10.96.0.10", "1.1.1.1")
    assert config.searches[-2:] == ("lab.example", "y.example")
    assert config.searches.count("cluster.local") == 1
    assert config.options == ("ndots:2", "single-request")


def test_without_cluster_dns_falls_back_with_events(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(HOST)
    configurer = DnsConfigurer([], "cluster.local", str(resolv), ["10.0.0.5"])
    config, events = configurer.pod_dns(pod())
    assert config.servers == ("192.0.2.53", "192.0.2.54")
    message = ('kubelet does not have ClusterDNS IP configured and cannot create Pod using '
               '"ClusterFirst" policy. Falling back to "Default" policy.')
    assert events == [DnsEvent("MissingClusterDNS", message, node=True),
                      DnsEvent("MissingClusterDNS", f'pod: "p_team(u1)". {message}')]


def test_no_resolv_conf(tmp_path: Path) -> None:
    configurer = DnsConfigurer([], "", "", ["fd00::5"])
    config, _ = configurer.pod_dns(pod("Default"))
    assert config == DnsConfig(("::1",), (".",), ())
    missing = DnsConfigurer([], "", str(tmp_path / "nope"))
    with pytest.raises(DnsConfigError, match=r"^open .*/nope: no such file or directory$"):
        missing.pod_dns(pod("Default"))


def test_limits(configurer: DnsConfigurer) -> None:
    config, events = configurer.pod_dns(pod("None", dns_config={
        "nameservers": ["1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"],
        "searches": [f"s{i}.example" for i in range(40)]}))
    assert config.servers == ("1.1.1.1", "1.1.1.2", "1.1.1.3")
    assert len(config.searches) == 32
    assert [e.message for e in events] == [
        "Nameserver limits were exceeded, some nameservers have been omitted, the applied "
        "nameserver line is: 1.1.1.1 1.1.1.2 1.1.1.3",
        "Search Line limits were exceeded, some search paths have been omitted, the applied "
        f"search line is: {' '.join(config.searches)}"]
    long = ["a" * 60 + f".{i}.example" for i in range(32)]
    config, events = configurer.pod_dns(pod("None", dns_config={
        "nameservers": ["1.1.1.1"], "searches": long}))
    assert len(" ".join(config.searches)) <= 2048 and config.searches == tuple(
        long[:len(config.searches)])
    assert len(events) == 1


def test_managed_hosts() -> None:
    header = ("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"
              "::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
              "fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
    assert managed_hosts("web-0", "db.team.svc.cluster.local", ["10.1.0.5"]) == (
        header + "10.1.0.5\tweb-0.db.team.svc.cluster.local\tweb-0\n")
    assert managed_hosts("p", "", ["10.1.0.6"]) == header + "10.1.0.6\tp\n"
    assert managed_hosts("p", "", []) == header + "127.0.1.1\tp\n"

"""The cluster DNS flags: `ephemera dns`'s usage errors and values, and what `ephemera up`
hands the kubelet (`--cluster-dns` the 10th address of the service range,
`--cluster-domain`) and the DNS server."""

from __future__ import annotations

from pathlib import Path

import pytest

from ephemera.cli.main import build_parser
from ephemera.cli.up import Cluster
from ephemera.clusterdns.server import Upstream


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        args = build_parser().parse_args(argv)
        args.func(args)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_dns_flags(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["dns", "--listen", "10.0.0.5:5353", "--upstream",
                                      "192.0.2.1,[2001:db8::1]:5300", "--upstream", "192.0.2.2",
                                      "--cluster-domain", "Corp.Example."])
    assert args.listen == ("10.0.0.5", 5353)
    assert [u for group in args.upstream for u in group] == [
        Upstream("192.0.2.1", 53), Upstream("2001:db8::1", 5300), Upstream("192.0.2.2", 53)]
    assert args.cluster_domain == "corp.example"
    assert build_parser().parse_args(["dns"]).listen == ("0.0.0.0", 53)
    assert "want a resolver's IP[:PORT]" in usage_error(["dns", "--upstream", "dns.google"],
                                                        capsys)
    assert "needs --listen with a specific address" in usage_error(
        ["dns", "--kube-dns-service-ip", "10.96.0.10"], capsys)
    assert "a TTL in seconds, 0 to 3600" in usage_error(["dns", "--ttl", "7200"], capsys)
    assert build_parser().parse_args(["dns"]).max_concurrent == 1000
    assert build_parser().parse_args(["dns", "--max-concurrent", "5"]).max_concurrent == 5
    assert "a number of queries, at least 1" in usage_error(
        ["dns", "--max-concurrent", "0"], capsys)
    assert "not an IP address" in usage_error(["kubelet", "--cluster-dns", "x"], capsys)


def test_up_gives_the_kubelet_and_the_server_the_cluster_dns(tmp_path: Path) -> None:
    args = build_parser().parse_args(["up", "--data-dir", str(tmp_path),
                                      "--service-cluster-ip-range", "172.20.0.0/16",
                                      "--cluster-domain", "k8s.test",
                                      "--dns-upstream", "192.0.2.1:5300"])
    cluster = Cluster(args)
    kubelet = cluster.kubelet_argv()
    assert kubelet[kubelet.index("--cluster-dns") + 1] == "172.20.0.10"
    assert kubelet[kubelet.index("--cluster-domain") + 1] == "k8s.test"
    cluster.dns_listen = "10.0.0.5:40053"
    dns = cluster.dns_argv()
    assert dns[dns.index("--listen") + 1] == "10.0.0.5:40053"
    assert dns[dns.index("--kube-dns-service-ip") + 1] == "172.20.0.10"
    assert dns[dns.index("--upstream") + 1] == "192.0.2.1:5300"
    # The parsed command line is one `ephemera dns` accepts.
    parsed = build_parser().parse_args(dns[dns.index("dns"):])
    assert parsed.cluster_domain == "k8s.test"
    default = Cluster(build_parser().parse_args(["up", "--data-dir", str(tmp_path)]))
    assert default.cluster_dns_ip == "10.96.0.10"

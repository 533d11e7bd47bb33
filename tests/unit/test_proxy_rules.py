"""The proxy's nftables table for sets of Services and EndpointSlices (`ephemera.proxy.rules`),
the transactions that apply it (`ephemera.proxy.nft`), and the proxier's choice of full and
partial syncs; the JSON is also checked by the real `nft -c` (parse and check, nothing
applied) where it runs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from ephemera.cli.main import build_parser
from ephemera.cli.up import Cluster as UpCluster
from ephemera.client import ApiClient
from ephemera.proxy import nft, rules
from ephemera.proxy.proxier import Proxier, node_addresses

CIDR = "10.200.0.0/20"
CONFIG = rules.ProxyConfig(node_name="n1", cluster_cidr=CIDR, node_ips=("10.200.0.1",))


def service(name: str, ip: str | None = "10.96.0.20", *, type_: str = "ClusterIP",
            ports: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"type": type_, "ports": ports if ports is not None else [
        {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "web"}], **spec}
    if ip is not None:
        body["clusterIP"] = ip
    return {"metadata": {"namespace": "ns", "name": name}, "spec": body}


def endpoint(ip: str, node: str = "n1", **conditions: bool) -> dict[str, Any]:
    return {"addresses": [ip], "nodeName": node,
            "conditions": conditions or {"ready": True, "serving": True,
                                         "terminating": False}}


def eps(svc: str, *endpoints: dict[str, Any], port: int = 8080, name: str = "http",
        address_type: str = "IPv4", slice_name: str = "") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": slice_name or f"{svc}-x",
                         "labels": {rules.SERVICE_NAME_LABEL: svc}},
            "addressType": address_type,
            "ports": [{"name": name, "protocol": "TCP", "port": port}],
            "endpoints": list(endpoints)}


def _targets(rule: rules.Rule) -> list[str]:
    """The chains a `numgen ... vmap` rule balances over, in order."""
    vmap = rule[0]["vmap"]
    assert vmap["key"]["numgen"]["mode"] == "random"
    assert vmap["key"]["numgen"]["mod"] == len(vmap["data"]["set"])
    return [verdict["goto"]["target"] for _, verdict in vmap["data"]["set"]]


def _elements(rs: rules.Ruleset, name: str) -> dict[tuple[Any, ...], Any]:
    return {tuple(key["concat"]): verdict for key, verdict in rs.maps[name]}


def test_a_clusterip_balances_over_its_ready_endpoints_with_numgen() -> None:
    rs = rules.build([service("web")],
                     [eps("web", endpoint("10.200.0.5"), endpoint("10.200.0.6", "n2"),
                          endpoint("10.200.0.7", ready=False, serving=False))], CONFIG)
    sp = rules.service_ports(service("web"))[0]
    assert sp.cluster_chain.startswith("service-")
    assert sp.cluster_chain.endswith("-ns/web/tcp/http")
    assert _elements(rs, rules.SERVICE_IPS) == {
        ("10.96.0.20", "tcp", 80): {"goto": {"target": sp.cluster_chain}}}
    assert _elements(rs, rules.NO_ENDPOINT_SERVICES) == {}
    chains = _targets(rs.chains[sp.cluster_chain][-1])
    assert [c.rsplit("__", 1)[1] for c in chains] == ["10.200.0.5/8080", "10.200.0.6/8080"]
    assert rs.chains[chains[0]] == [
        [rules.match(rules.payload("ip", "saddr"), "10.200.0.5"), rules.jump(rules.MARK_MASQ)],
        [rules.match(rules.meta("l4proto"), "tcp"),
         {"dnat": {"family": "ip", "addr": "10.200.0.5", "port": 8080}}],
    ]
    assert not any("10.200.0.7" in name for name in rs.chains)
    assert (rs.stats.service_ports, rs.stats.endpoints, rs.stats.no_endpoints) == (1, 2, 0)


def test_without_ready_endpoints_serving_terminating_ones_are_used_then_reject() -> None:
    terminating = endpoint("10.200.0.8", ready=False, serving=True, terminating=True)
    rs = rules.build([service("web")], [eps("web", terminating)], CONFIG)
    sp = rules.service_ports(service("web"))[0]
    assert [c.rsplit("__", 1)[1] for c in _targets(rs.chains[sp.cluster_chain][-1])] == [
        "10.200.0.8/8080"]
    not_serving = endpoint("10.200.0.8", ready=False, serving=False, terminating=True)
    rs = rules.build([service("web")], [eps("web", not_serving)], CONFIG)
    assert _elements(rs, rules.SERVICE_IPS) == {}
    assert _elements(rs, rules.NO_ENDPOINT_SERVICES) == {
        ("10.96.0.20", "tcp", 80): {"goto": {"target": rules.REJECT_CHAIN}}}
    assert sp.cluster_chain not in rs.chains
    assert rs.chains[rules.REJECT_CHAIN] == [[{"reject": None}]]
    assert rs.stats.no_endpoints == 1


def test_headless_externalname_and_ipv6_slices_are_skipped() -> None:
    rs = rules.build(
        [service("headless", "None"), service("ext", None, type_="ExternalName"),
         service("six", "fd00::5")],
        [eps("headless", endpoint("10.200.0.5")),
         eps("web", endpoint("fd00::9"), address_type="IPv6")], CONFIG)
    assert rs.stats.service_ports == 0
    assert all(not elems for elems in rs.maps.values())
    assert set(rs.chains) == set(rules._static_chains(CONFIG))


def test_endpoints_pair_with_the_service_port_of_their_name_and_protocol() -> None:
    svc = service("multi", ports=[
        {"name": "http", "protocol": "TCP", "port": 80},
        {"name": "dns", "protocol": "UDP", "port": 53}])
    dns = eps("multi", endpoint("10.200.0.9"), port=5353, name="dns", slice_name="m-dns")
    dns["ports"][0]["protocol"] = "UDP"
    rs = rules.build([svc], [eps("multi", endpoint("10.200.0.5"), slice_name="m-http"), dns],
                     CONFIG)
    http, udp = rules.service_ports(svc)
    assert [c.rsplit("__", 1)[1] for c in _targets(rs.chains[http.cluster_chain][-1])] == [
        "10.200.0.5/8080"]
    (chain,) = _targets(rs.chains[udp.cluster_chain][-1])
    assert rs.chains[chain][-1] == [rules.match(rules.meta("l4proto"), "udp"),
                                    {"dnat": {"family": "ip", "addr": "10.200.0.9",
                                              "port": 5353}}]
    assert set(_elements(rs, rules.SERVICE_IPS)) == {("10.96.0.20", "tcp", 80),
                                                     ("10.96.0.20", "udp", 53)}


def test_a_nodeport_masquerades_then_balances_on_the_node_addresses() -> None:
    svc = service("np", type_="NodePort", ports=[
        {"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}])
    rs = rules.build([svc], [eps("np", endpoint("10.200.0.5"))], CONFIG)
    sp = rules.service_ports(svc)[0]
    assert _elements(rs, rules.SERVICE_NODEPORTS) == {
        ("tcp", 30080): {"goto": {"target": sp.external_chain}}}
    assert rs.chains[sp.external_chain] == [[rules.jump(rules.MARK_MASQ)],
                                            [rules.goto(sp.cluster_chain)]]
    assert rs.sets[rules.NODEPORT_IPS] == ["10.200.0.1"]
    assert rs.stats.node_ports == 1
    # without endpoints the node port is rejected
    rs = rules.build([svc], [], CONFIG)
    assert _elements(rs, rules.SERVICE_NODEPORTS) == {}
    assert _elements(rs, rules.NO_ENDPOINT_NODEPORTS) == {
        ("tcp", 30080): {"goto": {"target": rules.REJECT_CHAIN}}}


def test_local_external_policy_without_a_local_endpoint_drops_node_port_traffic() -> None:
    svc = service("loc", type_="NodePort", externalTrafficPolicy="Local", ports=[
        {"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30081}])
    rs = rules.build([svc], [eps("loc", endpoint("10.200.0.5", "n2"))], CONFIG)
    sp = rules.service_ports(svc)[0]
    assert _elements(rs, rules.NO_ENDPOINT_NODEPORTS) == {("tcp", 30081): {"drop": None}}
    # pods and the host itself still reach it through the cluster-wide endpoints
    assert rs.chains[sp.external_chain][0] == [
        rules.match(rules.payload("ip", "saddr"), rules.prefix(CIDR)),
        rules.goto(sp.cluster_chain)]
    assert _elements(rs, rules.SERVICE_IPS) == {
        ("10.96.0.20", "tcp", 80): {"goto": {"target": sp.cluster_chain}}}


def test_clusterip_traffic_is_taken_only_from_the_cluster_pod_range() -> None:
    chains = rules.build([], [], CONFIG).chains
    from_pods = rules.match(rules.payload("ip", "saddr"), {"prefix": {"addr": "10.200.0.0",
                                                                      "len": 20}})
    assert chains[rules.NAT_PREROUTING] == [[from_pods, rules.jump(rules.SERVICES)],
                                            [rules.jump(rules.NODEPORTS)]]
    assert chains[rules.NAT_OUTPUT] == [[rules.jump(rules.NODEPORTS)]]
    assert from_pods in chains[rules.FILTER_FORWARD][0]


def test_masquerade_all_marks_clusterip_traffic() -> None:
    config = rules.ProxyConfig("n1", CIDR, masquerade_all=True)
    rs = rules.build([service("web")], [eps("web", endpoint("10.200.0.5"))], config)
    sp = rules.service_ports(service("web"))[0]
    assert rs.chains[sp.cluster_chain][0][-1] == rules.jump(rules.MARK_MASQ)


def test_client_ip_affinity_and_external_ips_come_back_as_warnings() -> None:
    rs = rules.build([service("sticky", sessionAffinity="ClientIP",
                              externalIPs=["192.0.2.10"])], [], CONFIG)
    assert [key for key, _ in rs.warnings] == ["ns/sticky", "ns/sticky"]
    assert rs.warnings[0][1].startswith("spec.sessionAffinity: ClientIP affinity has no effect")
    assert rs.stats.service_ports == 1


def test_node_addresses_skip_loopback_and_add_the_bridge_gateway() -> None:
    node = {"spec": {"podCIDR": "10.200.3.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                     {"type": "InternalIP", "address": "192.0.2.7"},
                                     {"type": "Hostname", "address": "n1"}]}}
    assert node_addresses(node) == ("192.0.2.7", "10.200.3.1")
    assert node_addresses(None) == ()


def test_table_names_differ_per_cluster_and_node() -> None:
    names = {nft.table_name(c, n) for c in ("10.1.0.0/20", "10.2.0.0/20") for n in "ab"}
    assert len(names) == 4
    assert all(name.startswith("ephemera-") for name in names)


def test_partial_transaction_touches_only_what_changed_and_deletes_stale_chains_later(
        ) -> None:
    one = rules.build([service("web")], [eps("web", endpoint("10.200.0.5"))], CONFIG)
    two = rules.build([service("web")], [eps("web", endpoint("10.200.0.6"))], CONFIG)
    cmds, stale = nft.partial_transaction("t", one, two)
    old_ep = next(c for c in one.chains if c.startswith("endpoint-"))
    new_ep = next(c for c in two.chains if c.startswith("endpoint-"))
    assert stale == [old_ep]
    assert {"add": {"chain": {"family": "ip", "table": "t", "name": new_ep}}} in cmds
    flushed = [c["flush"]["chain"]["name"] for c in cmds if "chain" in c.get("flush", {})]
    sp = rules.service_ports(service("web"))[0]
    assert sorted(flushed) == sorted([sp.cluster_chain, old_ep])
    touched = {c["add"]["rule"]["chain"] for c in cmds if "rule" in c.get("add", {})}
    assert touched == {sp.cluster_chain, new_ep}
    assert not any("delete" in c for c in cmds)
    again, stale2 = nft.partial_transaction("t", two, two, stale)
    assert again[0] == {"delete": {"chain": {"family": "ip", "table": "t", "name": old_ep}}}
    assert stale2 == []


def test_full_transaction_replaces_the_table_whole() -> None:
    rs = rules.build([service("web")], [eps("web", endpoint("10.200.0.5"))], CONFIG)
    cmds = nft.full_transaction("t", rs)
    table = {"table": {"family": "ip", "name": "t"}}
    assert cmds[:3] == [{"add": table}, {"delete": table}, {"add": table}]
    hooked = [c["add"]["chain"] for c in cmds if "hook" in c.get("add", {}).get("chain", {})]
    assert {(c["name"], c["hook"]) for c in hooked} == {
        (name, base.hook) for name, base in rules.BASE_CHAINS.items()}


@pytest.mark.skipif(shutil.which("nft") is None or os.geteuid() != 0,
                    reason="needs nft and root")
def test_nft_applies_the_full_and_partial_transactions() -> None:
    svc = service("np", type_="NodePort", externalTrafficPolicy="Local", ports=[
        {"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}])
    one = rules.build([svc, service("web", "10.96.0.21")],
                      [eps("np", endpoint("10.200.0.5")), eps("web", endpoint("10.200.0.6"))],
                      CONFIG)
    two = rules.build([svc], [eps("np", endpoint("10.200.0.7", "n2"))], CONFIG)
    table = f"ephemera-unit-{os.getpid()}"
    try:
        nft.run(nft.full_transaction(table, one))
        commands, stale = nft.partial_transaction(table, one, two)
        nft.run(commands)
        nft.run(nft.partial_transaction(table, two, two, stale)[0])
        names = {item["chain"]["name"] for item in nft.list_table(table) if "chain" in item}
        assert names == set(two.chains)
    finally:
        nft.run(nft.delete_table_command(table))
    assert table not in nft.list_tables()


def test_the_proxier_syncs_full_first_then_partially_and_full_again_after_a_failure(
        ) -> None:
    applied: list[list[nft.Command]] = []
    failing = False

    def apply(commands: list[nft.Command]) -> None:
        if failing:
            raise nft.NftError("boom")
        applied.append(commands)

    proxier = Proxier(cast(ApiClient, object()), node_name="n1", cluster_cidr=CIDR,
                      apply=apply)
    table = {"table": {"family": "ip", "name": proxier.table}}
    proxier.sync([service("web")], [], CONFIG)
    assert applied[-1][:2] == [{"add": table}, {"delete": table}]
    assert proxier.sync([service("web")], [eps("web", endpoint("10.200.0.5"))], CONFIG)
    assert {"delete": table} not in applied[-1]
    # nothing changed: nothing applied, no sync counted
    assert not proxier.sync([service("web")], [eps("web", endpoint("10.200.0.5"))], CONFIG)
    assert len(applied) == 2
    failing = True
    with pytest.raises(nft.NftError):
        proxier.sync([], [], CONFIG)
    failing = False
    proxier.sync([], [], CONFIG)
    assert applied[-1][:2] == [{"add": table}, {"delete": table}]
    assert proxier.syncs == 3


def test_proxy_flags_and_the_command_up_runs(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["proxy", "--cluster-cidr", "10.1.0.1/16"])
    assert exit_info.value.code == 2
    assert "'10.1.0.1/16': an IPv4 CIDR" in capsys.readouterr().err
    args = build_parser().parse_args(["up", "--data-dir", str(tmp_path), "--node-name", "N1"])
    cluster = UpCluster(args)
    argv = cluster.proxy_argv()
    assert argv[argv.index("--hostname-override") + 1] == "n1"
    assert argv[argv.index("--cluster-cidr") + 1] == cluster.cluster_cidr
    assert argv[argv.index("--kubeconfig") + 1] == str(tmp_path.resolve() / "proxy.kubeconfig")

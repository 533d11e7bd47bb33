"""Pure rules of the pod network: the node IPAM range allocator's choice of block, the CNI
config list a pod CIDR gives, the bridge names kubelets on one machine get, and `up`'s
per-data-dir cluster CIDR."""

from __future__ import annotations

import hashlib
import ipaddress
import random
import re
from pathlib import Path

import pytest

from ephemera.cli.up import default_cluster_cidr, node_blocks
from ephemera.controllers.nodeipam import FreeBlocks, NodeIpamController, next_free_cidr
from ephemera.kubelet.runtime.cni import bridge_name, network_config, result_ips


def test_the_lowest_free_block_is_taken_and_held_blocks_are_skipped() -> None:
    assert next_free_cidr("10.244.0.0/16", 24, []) == "10.244.0.0/24"
    assert next_free_cidr("10.244.0.0/16", 24, ["10.244.0.0/24", "10.244.2.0/24"]) \
        == "10.244.1.0/24"
    # a podCIDR of another size (set by hand) blocks every block it overlaps
    assert next_free_cidr("10.244.0.0/16", 24, ["10.244.0.0/23"]) == "10.244.2.0/24"
    # garbage in a Node's spec does not stop allocation
    assert next_free_cidr("10.244.0.0/16", 24, ["not-a-cidr"]) == "10.244.0.0/24"


def naive_next_free(cluster_cidr: str, mask_size: int, used: list[str]) -> str:
    """The rule as first written: every block against every used CIDR."""
    taken = []
    for cidr in used:
        try:
            taken.append(ipaddress.IPv4Network(cidr, strict=False))
        except ValueError:
            continue
    for block in ipaddress.IPv4Network(cluster_cidr).subnets(new_prefix=mask_size):
        if not any(block.overlaps(other) for other in taken):
            return str(block)
    return ""


def test_free_blocks_follow_the_naive_rule_block_after_block() -> None:
    rng = random.Random(11)
    for _ in range(100):
        cluster = ipaddress.IPv4Network(f"10.{rng.randrange(256)}.0.0/20")
        mask = rng.choice([22, 24, 26])
        used = []
        for _ in range(rng.randrange(12)):  # Nodes' CIDRs of any size, in and out of range
            prefix = rng.randrange(18, 29)
            base = int(cluster.network_address) + rng.randrange(-4096, 8192)
            used.append(str(ipaddress.IPv4Network(f"{ipaddress.IPv4Address(base)}/{prefix}",
                                                  strict=False)))
        used.append("garbage")
        free = FreeBlocks(str(cluster), mask, used)
        while True:
            want = naive_next_free(str(cluster), mask, used)
            got = free.take()
            assert got == want, (cluster, mask, used)
            if not got:
                break
            used.append(got)


def test_a_thousand_nodes_get_blocks_in_one_pass() -> None:
    free = FreeBlocks("10.128.0.0/14", 24, ["10.128.0.0/24", "10.128.5.0/24"])
    blocks = [free.take() for _ in range(1022)]
    assert blocks[:5] == ["10.128.1.0/24", "10.128.2.0/24", "10.128.3.0/24",
                          "10.128.4.0/24", "10.128.6.0/24"]
    assert blocks[-1] == "10.131.255.0/24" and len(set(blocks)) == 1022
    assert free.take() == ""


def test_a_full_cluster_cidr_has_no_block_left() -> None:
    used = [f"10.9.0.{i * 64}/26" for i in range(4)]
    assert next_free_cidr("10.9.0.0/24", 26, used) == ""


@pytest.mark.parametrize(("cidr", "mask", "message"), [
    ("10.0.0.0/16", 8, "must be between the cluster CIDR's prefix length 16 and 30"),
    ("10.0.0.1/16", 24, "invalid IPv4 CIDR"),
    ("fd00::/64", 80, "invalid IPv4 CIDR"),
])
def test_unusable_cluster_cidrs_are_refused(cidr: str, mask: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NodeIpamController.check(cidr, mask)


def test_the_config_list_uses_the_bridge_host_local_and_portmap_without_masquerade(
        tmp_path: Path) -> None:
    conf = network_config("10.244.3.0/24", "ephabc", tmp_path / "ipam")
    assert conf["cniVersion"] == "1.0.0"
    bridge, portmap = conf["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == "ephabc"
    assert bridge["isGateway"] is True and bridge["ipMasq"] is False
    assert bridge["ipam"] == {"type": "host-local", "dataDir": str(tmp_path / "ipam"),
                              "ranges": [[{"subnet": "10.244.3.0/24",
                                           "gateway": "10.244.3.1"}]],
                              "routes": [{"dst": "0.0.0.0/0"}]}
    assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}}


def test_bridge_names_differ_per_root_and_fit_linux_limit() -> None:
    a, b = bridge_name(Path("/data/a/kubelet")), bridge_name(Path("/data/b/kubelet"))
    assert a != b
    assert len(a) <= 15 and a.startswith("eph")
    assert bridge_name(Path("/data/a/kubelet")) == a


def test_result_ips_drop_the_prefix_length() -> None:
    assert result_ips({"ips": [{"address": "10.1.2.3/24", "gateway": "10.1.2.1"}]}) \
        == ["10.1.2.3"]
    assert result_ips({}) == []


def test_up_derives_a_private_cluster_cidr_per_data_dir(tmp_path: Path) -> None:
    one = ipaddress.ip_network(default_cluster_cidr(tmp_path / "one"))
    two = ipaddress.ip_network(default_cluster_cidr(tmp_path / "two"))
    assert one.prefixlen == 20 and one.subnet_of(ipaddress.ip_network("10.128.0.0/9"))
    assert one != two
    assert default_cluster_cidr(tmp_path / "one") == str(one)


def test_up_sizes_the_default_cluster_cidr_to_its_nodes(tmp_path: Path) -> None:
    nine = ipaddress.ip_network("10.128.0.0/9")
    for nodes in (0, 1, 16):  # up to 16 nodes: the /20 it always was
        digest = int(hashlib.sha256(str((tmp_path / "a").resolve()).encode()).hexdigest(), 16)
        assert default_cluster_cidr(tmp_path / "a", nodes) == \
            str(list(nine.subnets(new_prefix=20))[digest % 2048])
    for nodes, prefix in ((17, 19), (1000, 14), (1001, 14), (1025, 13)):
        cidr = default_cluster_cidr(tmp_path / "a", nodes)
        network = ipaddress.ip_network(cidr)
        assert network.prefixlen == prefix and network.subnet_of(nine)
        assert node_blocks(cidr, 24) >= nodes
    assert ipaddress.ip_network(default_cluster_cidr(tmp_path / "a", 1000, 26)).prefixlen == 16
    with pytest.raises(ValueError, match=re.escape(
            "40000 nodes need more /24 blocks than 10.128.0.0/9 has; give --cluster-cidr")):
        default_cluster_cidr(tmp_path / "a", 40000)
    assert node_blocks("10.170.192.0/20", 24) == 16
    assert node_blocks("10.0.0.0/24", 20) == 0

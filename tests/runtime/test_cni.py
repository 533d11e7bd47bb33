"""The CNI exec protocol against Debian's real plugins: ADD gives a network namespace an
address from the pod CIDR (and brings up `lo`), CHECK passes until the interface is
tampered with, DEL releases the host-local lease, also once the namespace is gone, and a
second ADD for the same CIDR takes the next address. Everything lives under tmp_path, on a
bridge named after it, removed at the end."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ephemera.kubelet.runtime.cni import CniError, CniNetwork, PodRef, find_bin_dir, result_ips

pytestmark = pytest.mark.skipif(not find_bin_dir(), reason="containernetworking-plugins")

CIDR = "10.127.251.0/24"  # outside up's 10.128.0.0/9; only this test uses it


@pytest.fixture
def network(tmp_path: Path) -> Iterator[CniNetwork]:
    net = CniNetwork(tmp_path)
    net.configure(CIDR)
    yield net
    net.remove_bridge()


def _netns(path: Path) -> str:
    path.touch()
    subprocess.run(["unshare", f"--net={path}", "true"], check=True)
    return str(path)


def _in(netns: str, *argv: str) -> str:
    return subprocess.run(["nsenter", f"--net={netns}", *argv], capture_output=True,
                          text=True, check=True).stdout


def _leases(net: CniNetwork) -> list[str]:
    directory = net.ipam_dir / "ephemera"
    return sorted(p.name for p in directory.iterdir() if p.name[0].isdigit()
                  and not p.name.startswith("last")) if directory.exists() else []


def test_add_check_del(network: CniNetwork, tmp_path: Path) -> None:
    one, two = _netns(tmp_path / "one"), _netns(tmp_path / "two")
    pod1, pod2 = PodRef("ns", "a", "u1", "s1"), PodRef("ns", "b", "u2", "s2")
    try:
        first = network.add(pod1, one)
        second = network.add(pod2, two)
        assert result_ips(first) == ["10.127.251.2"]
        assert result_ips(second) == ["10.127.251.3"]
        assert "inet 127.0.0.1/8" in _in(one, "ip", "-4", "addr", "show", "lo")
        assert "default via 10.127.251.1" in _in(one, "ip", "-4", "route")
        assert _leases(network) == ["10.127.251.2", "10.127.251.3"]
        network.check(pod1, one, first)
        _in(one, "ip", "addr", "del", "10.127.251.2/24", "dev", "eth0")
        with pytest.raises(CniError, match='plugin type="bridge" failed \\(CHECK\\)'):
            network.check(pod1, one, first)
        network.delete(pod1, one, first)
        assert _leases(network) == ["10.127.251.3"]
        # the namespace gone (a reboot): DEL still releases the lease
        subprocess.run(["umount", two], check=True)
        network.delete(pod2, "", second)
        assert _leases(network) == []
        network.delete(pod2, "", second)  # idempotent
    finally:
        for path in (one, two):
            subprocess.run(["umount", path], capture_output=True)


def test_no_config_before_a_pod_cidr(tmp_path: Path) -> None:
    with pytest.raises(CniError, match="cni config uninitialized"):
        CniNetwork(tmp_path).add(PodRef("ns", "a", "u", "s"), "")
    assert CniNetwork(tmp_path).pod_cidr() == ""

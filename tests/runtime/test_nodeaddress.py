"""The node address's dummy interface (ephemera.kubelet.runtime.nodeaddress), on the real
machine: made once per root dir, kept across starts, distinct per root, swept once its root
dir is gone."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ephemera.kubelet.runtime import nodeaddress

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="needs root and iproute2")


@pytest.fixture
def roots(tmp_path: Path) -> Iterator[list[Path]]:
    made = [tmp_path / "a", tmp_path / "b"]
    for root in made:
        root.mkdir()
    yield made
    for root in made:
        nodeaddress.remove(root)


def _links() -> set[str]:
    return set(os.listdir("/sys/class/net"))


def test_each_root_gets_its_own_address_kept_across_starts(roots: list[Path]) -> None:
    a, b = roots
    first = nodeaddress.ensure(a)
    assert ipaddress.ip_address(first) in nodeaddress.NODE_RANGE
    assert nodeaddress.interface_name(a) in _links()
    assert len(nodeaddress.interface_name(a)) <= 15
    assert nodeaddress.ensure(a) == first  # a second start (after a kill -9) keeps it
    assert nodeaddress.current_address(a) == first
    second = nodeaddress.ensure(b)
    assert second != first
    assert nodeaddress.machine_addresses()[first] == nodeaddress.interface_name(a)
    nodeaddress.remove(a)
    assert nodeaddress.interface_name(a) not in _links()
    assert nodeaddress.current_address(a) == ""
    nodeaddress.remove(a)  # nothing there: no error


def test_a_taken_address_is_skipped(roots: list[Path]) -> None:
    a, b = roots
    taken = nodeaddress.ensure(a)
    # b's first choice made to be a's address: it takes the next free one.
    original = nodeaddress.candidates

    def clashing(root: Path, count: int = 64) -> list[str]:
        return [taken, *original(root, count)]

    nodeaddress.candidates = clashing  # type: ignore[assignment]
    try:
        assert nodeaddress.ensure(b) not in ("", taken)
    finally:
        nodeaddress.candidates = original  # type: ignore[assignment]


def test_the_interface_of_a_deleted_root_is_swept(tmp_path: Path) -> None:
    root = tmp_path / "gone"
    root.mkdir()
    nodeaddress.ensure(root)
    name = nodeaddress.interface_name(root)
    root.rmdir()
    # A parallel worker's `ensure` may sweep it first: what counts is that it is gone.
    nodeaddress.sweep()
    assert name not in _links()


def _failing_at(monkeypatch: pytest.MonkeyPatch, *step: str) -> None:
    """`ip STEP...` fails as `ip` would (the steps before it run for real)."""
    real = nodeaddress._checked

    def checked(*argv: str) -> None:
        if argv[:len(step)] == step:
            raise nodeaddress.NodeAddressError(f"ip {' '.join(argv)}: injected failure")
        real(*argv)

    monkeypatch.setattr(nodeaddress, "_checked", checked)


@pytest.mark.parametrize("step", [("link", "set", "{name}", "alias"),
                                  ("link", "set", "{name}", "up")])
def test_a_failure_half_way_removes_the_interface_it_made(
        roots: list[Path], monkeypatch: pytest.MonkeyPatch, step: tuple[str, ...]) -> None:
    root = roots[0]
    name = nodeaddress.interface_name(root)
    _failing_at(monkeypatch, *(s.format(name=name) for s in step))
    with pytest.raises(nodeaddress.NodeAddressError, match="injected failure"):
        nodeaddress.ensure(root)
    assert name not in _links()
    assert not any(holder == name for holder in nodeaddress.machine_addresses().values())


def test_a_failure_half_way_takes_back_the_address_from_a_kept_interface(
        roots: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root = roots[0]
    name = nodeaddress.interface_name(root)
    # The interface is there from an earlier start, without its address.
    nodeaddress.ensure(root)
    address = nodeaddress.current_address(root)
    subprocess.run(["ip", "addr", "delete", f"{address}/32", "dev", name], check=True)
    _failing_at(monkeypatch, "link", "set", name, "up")
    with pytest.raises(nodeaddress.NodeAddressError, match="injected failure"):
        nodeaddress.ensure(root)
    assert name in _links()  # not ours to delete: it was there before this call
    assert nodeaddress.current_address(root) == ""
    monkeypatch.undo()
    assert nodeaddress.ensure(root) == address

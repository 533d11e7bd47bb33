"""The node status events the kubelet records (`node_status_events`), as upstream's status
setters: a pressure condition new or changed, a Ready condition changed (not new)."""

from __future__ import annotations

from typing import Any

from ephemera.kubelet.node import node_status_events, node_status_message


def status(**conditions: str) -> dict[str, Any]:
    return {"conditions": [{"type": kind, "status": value}
                           for kind, value in conditions.items()]}


FINE = status(MemoryPressure="False", DiskPressure="False", PIDPressure="False", Ready="True")


def test_a_new_node_records_its_pressure_conditions_not_ready() -> None:
    assert node_status_events(None, FINE) == [
        "NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"]


def test_an_unchanged_status_records_nothing() -> None:
    assert node_status_events(FINE, FINE) == []


def test_transitions() -> None:
    pressed = status(MemoryPressure="True", DiskPressure="True", PIDPressure="True",
                     Ready="False")
    assert node_status_events(FINE, pressed) == [
        "NodeHasInsufficientMemory", "NodeHasDiskPressure", "NodeHasInsufficientPID",
        "NodeNotReady"]
    assert node_status_events(pressed, FINE) == [
        "NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID",
        "NodeReady"]


def test_back_from_unknown_as_after_an_outage() -> None:
    unknown = status(MemoryPressure="Unknown", DiskPressure="Unknown", PIDPressure="Unknown",
                     Ready="Unknown")
    assert node_status_events(unknown, FINE) == [
        "NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID",
        "NodeReady"]


def test_message() -> None:
    assert node_status_message("vm", "NodeReady") == "Node vm status is now: NodeReady"

"""`ephemera.pods.conditions`: upstream's `UpdatePodCondition` and the DisruptionTarget
condition."""

from __future__ import annotations

from typing import Any

from ephemera.pods.conditions import disruption_target, update_pod_condition

EVICTING = disruption_target("EvictionByEvictionAPI", "Eviction API: evicting")


def test_a_new_condition_is_appended_with_the_time() -> None:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert update_pod_condition(status, EVICTING, "T1")
    assert status["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
         "message": "Eviction API: evicting", "lastTransitionTime": "T1"}]


def test_the_same_status_keeps_its_transition_time() -> None:
    status: dict[str, Any] = {}
    update_pod_condition(status, EVICTING, "T1")
    assert not update_pod_condition(status, EVICTING, "T2")
    other = disruption_target("DeletionByTaintManager", "Taint manager: deleting")
    assert update_pod_condition(status, other, "T3")
    assert [(c["reason"], c["lastTransitionTime"]) for c in status["conditions"]] == [
        ("DeletionByTaintManager", "T1")]


def test_a_changed_status_takes_the_new_time_and_replaces_the_condition_whole() -> None:
    status: dict[str, Any] = {"conditions": [
        {"type": "DisruptionTarget", "status": "False", "lastProbeTime": "T0",
         "lastTransitionTime": "T0"}]}
    assert update_pod_condition(status, EVICTING, "T4")
    assert status["conditions"] == [{**EVICTING, "lastTransitionTime": "T4"}]

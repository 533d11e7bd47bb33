"""The taint eviction controller's rules: which tolerations a pod tolerates NoExecute taints
with, when it is due for deletion given `tolerationSeconds` and the taints' `timeAdded`, and
its scheduling and cancelling (with upstream's events) as nodes and pods change."""

from __future__ import annotations

from typing import Any

from ephemera.api.meta import parse_time
from ephemera.client import ApiClient, ClientConfig, Informer
from ephemera.controllers.tainteviction import (
    TaintEvictionController,
    eviction_time,
    matching_tolerations,
    no_execute_taints,
)
from ephemera.scheduler.plugins import Taint

T0 = "2026-01-01T00:00:00Z"
EPOCH = parse_time(T0).timestamp()  # type: ignore[union-attr]
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
               "timeAdded": T0}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": T0}


def toleration(key: str = "node.kubernetes.io/unreachable", seconds: int | None = None,
               **extra: Any) -> dict[str, Any]:
    tol: dict[str, Any] = {"key": key, "operator": "Exists", "effect": "NoExecute", **extra}
    if seconds is not None:
        tol["tolerationSeconds"] = seconds
    return tol


def test_only_no_execute_taints_count() -> None:
    node = {"spec": {"taints": [UNREACHABLE, {"key": "x", "effect": "NoSchedule"}]}}
    assert no_execute_taints(node) == [UNREACHABLE]
    assert no_execute_taints(None) == []


def test_an_untolerated_taint_is_due_now() -> None:
    assert matching_tolerations([UNREACHABLE], []) is None
    assert eviction_time([UNREACHABLE], [], EPOCH + 5) == EPOCH + 5
    # tolerating one taint of two is not enough
    assert eviction_time([UNREACHABLE, NOT_READY], [toleration(seconds=300)],
                         EPOCH + 5) == EPOCH + 5
    # a NoSchedule toleration does not tolerate NoExecute
    assert eviction_time([UNREACHABLE], [toleration(effect="NoSchedule")], EPOCH) == EPOCH


def test_tolerated_forever_without_seconds() -> None:
    assert eviction_time([UNREACHABLE], [toleration()], EPOCH + 1000) is None
    # the DaemonSet controller's tolerations, and an empty key with Exists (all taints)
    assert eviction_time([UNREACHABLE, NOT_READY], [{"operator": "Exists"}], EPOCH) is None


def test_seconds_count_from_time_added() -> None:
    pod = [toleration(seconds=300), toleration("node.kubernetes.io/not-ready", seconds=300)]
    assert eviction_time([UNREACHABLE], pod, EPOCH + 10) == EPOCH + 300
    assert eviction_time([UNREACHABLE], pod, EPOCH + 400) == EPOCH + 300  # overdue: now
    later = {**NOT_READY, "timeAdded": "2026-01-01T00:01:00Z"}
    assert eviction_time([UNREACHABLE, later], [toleration(seconds=300),
                                                toleration("node.kubernetes.io/not-ready",
                                                           seconds=30)],
                         EPOCH + 70) == EPOCH + 90  # the earliest of the taints'


def test_the_first_matching_toleration_is_the_one_used() -> None:
    # as upstream's GetMatchingTolerations: the forever one comes first
    assert eviction_time([UNREACHABLE], [toleration(), toleration(seconds=5)], EPOCH) is None
    assert eviction_time([UNREACHABLE], [toleration(seconds=5), toleration()],
                         EPOCH) == EPOCH + 5


def test_zero_or_negative_seconds_are_at_once_and_a_missing_time_added_is_first_seen() -> None:
    assert eviction_time([UNREACHABLE], [toleration(seconds=0)], EPOCH + 7) == EPOCH
    assert eviction_time([UNREACHABLE], [toleration(seconds=-3)], EPOCH + 7) == EPOCH
    bare = {"key": "k", "effect": "NoExecute"}
    tol = [toleration("k", seconds=10)]
    assert eviction_time([bare], tol, EPOCH) == EPOCH + 10
    assert eviction_time([bare], tol, EPOCH + 50,
                         {Taint("k", "", "NoExecute"): EPOCH + 20}) == EPOCH + 30
    # a timeAdded in the future (another clock) counts from now
    future = {**UNREACHABLE, "timeAdded": "2026-01-01T01:00:00Z"}
    assert eviction_time([future], [toleration(seconds=10)], EPOCH) == EPOCH + 10


def _pod(name: str, tolerations: list[dict[str, Any]], node: str = "n1",
         rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}",
                         "resourceVersion": rv},
            "spec": {"nodeName": node, "tolerations": tolerations}}


def _node(taints: list[dict[str, Any]], rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": "n1", "resourceVersion": rv}, "spec": {"taints": taints}}


async def test_scheduling_and_cancelling() -> None:
    api = ApiClient(ClientConfig(server="http://127.0.0.1:1"))
    pods = Informer(api, "/api/v1/pods")
    nodes = Informer(api, "/api/v1/nodes")
    now = [EPOCH + 10]
    controller = TaintEvictionController(api, pods, nodes, clock=lambda: now[0])
    posted: list[tuple[str, str]] = []
    controller.events.post = (  # type: ignore[method-assign]
        lambda obj, type_, reason, message: posted.append((reason, message)))
    pods.replace([_pod("short", [toleration(seconds=60)]), _pod("forever", [toleration()]),
                  _pod("none", [])], "1")
    nodes.replace([_node([])], "1")
    assert controller.due == {}
    nodes.replace([_node([UNREACHABLE], rv="2")], "2")
    assert controller.due == {"default/short": EPOCH + 60, "default/none": EPOCH + 10}
    # a toleration that now lasts forever cancels, with upstream's event
    pods.replace([_pod("short", [toleration()], rv="2"), _pod("forever", [toleration()]),
                  _pod("none", [])], "3")
    assert controller.due == {"default/none": EPOCH + 10}
    assert posted == [("TaintManagerEviction", "Cancelling deletion of Pod default/short")]
    # the taint removed in time cancels the rest
    nodes.replace([_node([], rv="3")], "4")
    assert controller.due == {}
    assert posted[-1] == ("TaintManagerEviction", "Cancelling deletion of Pod default/none")
    # an update that changes neither tolerations nor node is not looked at
    nodes.replace([_node([UNREACHABLE], rv="4")], "5")
    before = dict(controller.due)
    pods.replace([_pod("short", [toleration()], rv="5"), _pod("forever", [toleration()]),
                  _pod("none", [], rv="9")], "6")
    assert controller.due == before
    # a pod deleted: its scheduled deletion is cancelled
    pods.replace([_pod("short", [toleration()], rv="5"), _pod("forever", [toleration()])], "7")
    assert "default/none" not in controller.due
    assert posted[-1] == ("TaintManagerEviction", "Cancelling deletion of Pod default/none")
    controller.queue.close()

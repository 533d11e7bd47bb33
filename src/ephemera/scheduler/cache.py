"""The scheduler's cache: every node with the pods counted on it, including pods *assumed*
on a node while their binding is under way.

A pod is assumed the moment the scheduler picks its node, before the binding request is sent,
so the next pod (scheduled one at a time) already sees that slot taken. The assumption ends
when the pods watch shows the pod bound (`add_pod` with a `nodeName`: counted as a real pod),
when the pod is deleted (`remove_pod`), or when the binding fails (`forget`). Pods bound to a
node the cache does not know yet are kept and counted once the node appears. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ephemera.scheduler.nodeinfo import Gates, NodeInfo

__all__ = ["SchedulerCache", "pod_uid"]


def pod_uid(pod: Mapping[str, Any]) -> str:
    md = pod.get("metadata") or {}
    return str(md.get("uid") or f"{md.get('namespace') or ''}/{md.get('name') or ''}")


def _node_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


class SchedulerCache:
    def __init__(self, gates: Gates = None) -> None:
        self.gates = gates
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, tuple[Mapping[str, Any], str]] = {}  # uid -> (pod, node name)
        self._assumed: set[str] = set()
        self._by_name: list[NodeInfo] | None = None  # node_infos(), until nodes change

    # -- nodes ------------------------------------------------------------------------------

    def set_node(self, node: Mapping[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        info = self._nodes.get(name)
        if info is not None:
            info.set_node(node)
            return
        info = NodeInfo(node, self.gates)
        for uid, (pod, on) in self._pods.items():
            if on == name:
                info.add_pod(uid, pod)
        self._nodes[name] = info
        self._by_name = None

    def remove_node(self, name: str) -> None:
        if self._nodes.pop(name, None) is not None:
            self._by_name = None

    def node_infos(self) -> list[NodeInfo]:
        """Every node, by name (the list kept until a node is added or removed; a copy)."""
        if self._by_name is None:
            self._by_name = [self._nodes[name] for name in sorted(self._nodes)]
        return list(self._by_name)

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    # -- pods -------------------------------------------------------------------------------

    def _count(self, uid: str, pod: Mapping[str, Any], node_name: str) -> None:
        previous = self._pods.get(uid)
        if previous is not None and previous[1] != node_name:
            self._uncount(uid)
        # On the same node, `NodeInfo.add_pod` replaces the pod and recounts its requests
        # only if what they are computed from changed (a status update does not).
        self._pods[uid] = (pod, node_name)
        info = self._nodes.get(node_name)
        if info is not None:
            info.add_pod(uid, pod)

    def _uncount(self, uid: str) -> None:
        previous = self._pods.pop(uid, None)
        if previous is not None:
            info = self._nodes.get(previous[1])
            if info is not None:
                info.remove_pod(uid)

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        """A pod bound to a node (added or updated): count it there; ends an assumption."""
        uid = pod_uid(pod)
        self._assumed.discard(uid)
        self._count(uid, pod, _node_name(pod))

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        """A pod gone (deleted, or finished): stop counting it, assumed or not."""
        uid = pod_uid(pod)
        self._assumed.discard(uid)
        self._uncount(uid)

    def assume(self, pod: Mapping[str, Any], node_name: str) -> None:
        """Count `pod` on `node_name` before its binding is seen."""
        uid = pod_uid(pod)
        bound = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node_name}}
        self._count(uid, bound, node_name)
        self._assumed.add(uid)

    def forget(self, pod: Mapping[str, Any]) -> None:
        """The binding of an assumed pod failed: stop counting it."""
        uid = pod_uid(pod)
        if uid in self._assumed:
            self._assumed.discard(uid)
            self._uncount(uid)

    def is_assumed(self, pod: Mapping[str, Any]) -> bool:
        return pod_uid(pod) in self._assumed

    @property
    def assumed_count(self) -> int:
        return len(self._assumed)

    def pod_count(self) -> int:
        return len(self._pods)

"""Pods of an informer by `spec.nodeName`, as upstream's `spec.nodeName` pod indexer
(`getPodsAssignedToNode`): kept by the informer's event handlers, so that a controller that
looks at one node's pods (node lifecycle, taint eviction) never scans all pods. One index per
informer (`pods_by_node`), however many controllers read it."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from ephemera.client import Informer
from ephemera.controllers.objects import queue_key

__all__ = ["PodsByNode", "node_name_of", "pods_by_node"]

Obj = Mapping[str, Any]


def node_name_of(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


class PodsByNode:
    """The keys of `pods`' objects by node name. Register it on the informer before the
    handlers that read it: handlers run in order, so theirs see the index current."""

    def __init__(self, pods: Informer) -> None:
        self.pods = pods
        self._keys: dict[str, set[str]] = {}
        self._node: dict[str, str] = {}
        pods.add_handler(on_add=self._set, on_update=lambda _old, new: self._set(new),
                         on_delete=self._drop)

    def _set(self, pod: Obj) -> None:
        key = queue_key(pod)
        node = node_name_of(pod)
        before = self._node.get(key)
        if before == node:
            return
        if before is not None:
            self._discard(key, before)
        self._node[key] = node
        if node:
            self._keys.setdefault(node, set()).add(key)

    def _drop(self, pod: Obj) -> None:
        key = queue_key(pod)
        before = self._node.pop(key, None)
        if before is not None:
            self._discard(key, before)

    def _discard(self, key: str, node: str) -> None:
        keys = self._keys.get(node)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._keys[node]

    def get(self, node: str) -> list[Obj]:
        """The cached pods assigned to `node` (do not modify them)."""
        found = (self.pods.get(key) for key in sorted(self._keys.get(node, ())))
        return [pod for pod in found if pod is not None]


_INDEXES: weakref.WeakKeyDictionary[Informer, PodsByNode] = weakref.WeakKeyDictionary()


def pods_by_node(pods: Informer) -> PodsByNode:
    """The index of `pods`, made on first use: controllers sharing an informer share it, so
    each pod event updates one index."""
    index = _INDEXES.get(pods)
    if index is None:
        index = _INDEXES[pods] = PodsByNode(pods)
    return index

"""The Node authorizer's graph (upstream's `plugin/pkg/auth/authorizer/node/graph.go`): which
Secrets, ConfigMaps, ServiceAccounts and PersistentVolumeClaims each node may reach through
the pods bound to it.

What a pod references is `ephemera.pods.references`; this module keeps, per bound pod, its
node and references, and per referenced object the nodes whose pods reference it.

KEP-6395 dynamic volumes (`pods/dynamic`): a volume added to a bound pod's spec is an edge at
once. A volume removed from the spec keeps its edge while the kubelet still holds it, i.e. while
its name is still listed in `status.volumeStatuses` (or a container status still reports a
mount of it): the KEP's teardown order ends with "after which the Node Authorizer graph removes
authorization edges". The spec no longer says what the removed volume referenced, so the graph
remembers each volume's references per pod (same uid) and carries them over for as long as the
status lists the name; a pod seen for the first time (after a restart of the apiserver) has no
such memory, and its removed volumes lose their edge at once (fail closed).

Pods without `spec.nodeName` are not in the graph; a pod leaves it when it is deleted from the
store.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ephemera.pods.references import (
    Ref,
    pod_level_references,
    pod_volume_references,
)

PodKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class PodVertex:
    """A bound pod as the graph holds it."""

    uid: str
    node: str
    pod_level: frozenset[Ref]
    volumes: Mapping[str, frozenset[Ref]]

    @property
    def refs(self) -> frozenset[Ref]:
        return self.pod_level.union(*self.volumes.values())


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def pod_vertex(pod: Mapping[str, Any], previous: PodVertex | None = None) -> PodVertex | None:
    """The vertex of `pod` (None when it is not bound), remembering the removed-but-held
    volumes of `previous` when it is the same pod (same uid)."""
    md = _dict(pod.get("metadata"))
    node = _dict(pod.get("spec")).get("nodeName")
    if not isinstance(node, str) or not node:
        return None
    uid = str(md.get("uid") or "")
    remembered = previous.volumes if previous is not None and previous.uid == uid else None
    return PodVertex(uid, node, pod_level_references(pod),
                     pod_volume_references(pod, remembered))


def may_be_bound(stored: bytes) -> bool:
    """False when the stored JSON of a pod cannot hold a `spec.nodeName` (an unbound pod,
    which the graph ignores), without parsing it: a JSON text with a key "nodeName" holds
    `"nodeName"` as is, or spelled with a `\\u` escape."""
    return b'"nodeName"' in stored or b"\\u" in stored


def pod_key(pod: Mapping[str, Any]) -> PodKey:
    md = _dict(pod.get("metadata"))
    return str(md.get("namespace") or ""), str(md.get("name") or "")


class NodeGraph:
    """Bound pods and, for every object they reference, which pods on which nodes do."""

    def __init__(self) -> None:
        self._pods: dict[PodKey, PodVertex] = {}
        # object -> node -> pods on that node referencing it
        self._edges: dict[Ref, dict[str, set[PodKey]]] = collections.defaultdict(dict)

    def __len__(self) -> int:
        return len(self._pods)

    def pod(self, namespace: str, name: str) -> PodVertex | None:
        return self._pods.get((namespace, name))

    def apply_pod(self, pod: Mapping[str, Any]) -> None:
        """A pod was added or updated (upstream's `AddPod`). An unbound pod is ignored."""
        key = pod_key(pod)
        previous = self._pods.get(key)
        vertex = pod_vertex(pod, previous)
        if vertex is None:
            return
        if previous is not None:
            self._unlink(key, previous)
        self._pods[key] = vertex
        for ref in vertex.refs:
            self._edges[ref].setdefault(vertex.node, set()).add(key)

    def delete_pod(self, namespace: str, name: str) -> None:
        """The pod left the store (upstream's `DeletePod`)."""
        key = (namespace, name)
        previous = self._pods.pop(key, None)
        if previous is not None:
            self._unlink(key, previous)

    def replace(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list of every pod: apply each (keeping what is remembered of pods that
        are still there) and forget the pods that are gone."""
        seen: set[PodKey] = set()
        for pod in pods:
            seen.add(pod_key(pod))
            self.apply_pod(pod)
        for key in [k for k in self._pods if k not in seen]:
            self.delete_pod(*key)

    def pods_linking(self, node: str, ref: Ref) -> Iterator[tuple[PodKey, PodVertex]]:
        """The pods on `node` that reference `ref`."""
        for key in sorted(self._edges.get(ref, {}).get(node, ())):
            yield key, self._pods[key]

    def has_path(self, node: str, ref: Ref) -> bool:
        return bool(self._edges.get(ref, {}).get(node))

    def _unlink(self, key: PodKey, vertex: PodVertex) -> None:
        for ref in vertex.refs:
            nodes = self._edges.get(ref)
            if nodes is None:
                continue
            pods = nodes.get(vertex.node)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del nodes[vertex.node]
            if not nodes:
                del self._edges[ref]

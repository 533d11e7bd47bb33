"""NodeDeclaredFeatureValidator reads the Node from the watch cache (upstream's node lister)
and never refuses on it: a cached Node lacking a feature, or none cached, is read live."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.api import errors
from ephemera.api.errors import StatusError
from ephemera.apiserver.admission import AdmissionRequest
from ephemera.apiserver.admission.nodefeatures import _require_features
from ephemera.apiserver.resources import Resource, core_resource

NEEDED = ["DynamicNodeLocalEphemeralVolumes"]


def node(*features: str) -> dict[str, Any]:
    return {"metadata": {"name": "n1"}, "status": {"declaredFeatures": list(features)}}


class Context:
    """The two reads the plugin makes: the cache's copy and the store's."""

    def __init__(self, cached: dict[str, Any] | None, stored: dict[str, Any] | None) -> None:
        self.cached, self.stored = cached, stored
        self.live_reads = 0

    def watched(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        return self.cached

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        self.live_reads += 1
        if self.stored is None:
            raise errors.not_found(resource.plural, name)
        return self.stored


def request() -> AdmissionRequest:
    return AdmissionRequest("UPDATE", core_resource("pods"), "dynamic", "default", "p",
                            {}, {}, None, False)


async def check(context: Context) -> None:
    await _require_features(context, request(), "n1", NEEDED, "pod update")  # type: ignore[arg-type]


async def test_a_cached_node_declaring_the_features_is_enough() -> None:
    context = Context(node(*NEEDED), None)
    await check(context)
    assert context.live_reads == 0


@pytest.mark.parametrize("cached", [None, node()])
async def test_the_store_decides_what_the_cache_does_not_allow(
        cached: dict[str, Any] | None) -> None:
    declared_since = Context(cached, node(*NEEDED))  # declared a moment ago
    await check(declared_since)
    assert declared_since.live_reads == 1
    with pytest.raises(StatusError) as refused:
        await check(Context(cached, node("DynamicContainers")))
    assert refused.value.code == 403
    assert refused.value.message == (
        'pods "p" is forbidden: pod update requires features DynamicNodeLocalEphemeralVolumes '
        'which are not available on node "n1"')
    with pytest.raises(StatusError) as missing:
        await check(Context(cached, None))
    assert missing.value.message == 'pods "p" is forbidden: node "n1" not found'


# --- a binding's pod -----------------------------------------------------------------------

EPHEMERAL_POD = {"metadata": {"name": "p", "uid": "u1"},
                 "spec": {"resources": {"requests": {"ephemeral-storage": "1Gi"}}}}
PLAIN_POD = {"metadata": {"name": "p", "uid": "u1"}, "spec": {}}


class BindingContext:
    """The cache's and the store's copies of the pod and of the node, counted."""

    def __init__(self, cached_pod: dict[str, Any] | None, stored_pod: dict[str, Any],
                 stored_node: dict[str, Any]) -> None:
        self.cached_pod, self.stored_pod, self.stored_node = cached_pod, stored_pod, stored_node
        self.live_reads: list[str] = []

    def watched(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        return self.cached_pod if resource.plural == "pods" else None

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        self.live_reads.append(resource.plural)
        return self.stored_pod if resource.plural == "pods" else self.stored_node


async def bind(context: BindingContext, uid: str | None) -> None:
    from ephemera.api.featuregates import NODE_DECLARED_FEATURES, FeatureGates
    from ephemera.apiserver.admission import AdmissionSettings
    from ephemera.apiserver.admission.nodefeatures import NodeDeclaredFeatureValidator

    gates = FeatureGates({NODE_DECLARED_FEATURES: True})
    plugin = NodeDeclaredFeatureValidator(AdmissionSettings(gates=gates))
    plugin.set_context(context)  # type: ignore[arg-type]
    metadata: dict[str, Any] = {"name": "p"}
    if uid is not None:
        metadata["uid"] = uid
    req = AdmissionRequest("CREATE", core_resource("pods"), "binding", "default", "p",
                           {"metadata": metadata, "target": {"name": "n1"}}, None, None,
                           False, gates)
    assert plugin.handles(req)
    await plugin.validate(req)


async def test_a_binding_naming_the_cached_pods_uid_reads_no_pod() -> None:
    context = BindingContext(PLAIN_POD, EPHEMERAL_POD, node())
    await bind(context, "u1")
    assert context.live_reads == []


@pytest.mark.parametrize("uid", [None, "u2"])
async def test_a_binding_without_the_cached_pods_uid_reads_the_pod(uid: str | None) -> None:
    context = BindingContext(PLAIN_POD, EPHEMERAL_POD, node())  # recreated since the cache
    with pytest.raises(StatusError) as refused:
        await bind(context, uid)
    assert refused.value.code == 403
    assert refused.value.message == (
        'pods "p" is forbidden: pod requires features PodLevelResourcesEphemeralStorage '
        'which are not available on node "n1"')
    assert context.live_reads == ["pods", "nodes"]


async def test_a_cached_pod_needing_features_is_still_refused_on_the_stores_node() -> None:
    context = BindingContext(EPHEMERAL_POD, EPHEMERAL_POD, node())
    with pytest.raises(StatusError) as refused:
        await bind(context, "u1")
    assert refused.value.code == 403
    assert context.live_reads == ["nodes"]

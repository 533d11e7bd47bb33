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

"""What an emptyDir adds to a pod's need (`ephemera.kubelet.allocation.fit.node_need`, one
rule for admission and `/dynamic` changes): medium "" (or absent) is local ephemeral storage
(reference section 4.3), `Memory` is memory, HugePages media are neither."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.kubelet.allocation import insufficient, node_need

MiB = 1 << 20


def _pod(**empty_dir: Any) -> dict[str, Any]:
    return {"metadata": {"uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "64Mi",
                                                            **empty_dir}}]}}


@pytest.mark.parametrize(("empty_dir", "storage", "memory"), [
    ({}, 64 * MiB, 0),
    ({"medium": ""}, 64 * MiB, 0),
    ({"medium": "Memory"}, 0, 64 * MiB),
    ({"medium": "HugePages"}, 0, 0),
    ({"medium": "HugePages-2Mi"}, 0, 0),
    ({"medium": "HugePages-1Gi"}, 0, 0),
])
def test_each_medium_counts_where_it_lives(empty_dir: dict[str, Any], storage: int,
                                           memory: int) -> None:
    pod = _pod(**empty_dir)
    assert node_need(pod, "ephemeral-storage", {}) == storage
    assert node_need(pod, "memory", {}) == memory


def test_a_hugepages_empty_dir_does_not_fill_the_node_s_ephemeral_storage() -> None:
    allocatable = {"cpu": "1", "memory": "32Mi", "ephemeral-storage": "32Mi"}
    assert insufficient(_pod(medium="HugePages-2Mi"), [], allocatable, {}) is None
    shortage = insufficient(_pod(), [], allocatable, {})
    assert shortage is not None and shortage.message == (
        "Node didn't have enough resource: ephemeral-storage, requested: 67108864, used: 0, "
        "capacity: 33554432")

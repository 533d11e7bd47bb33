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


def test_each_other_pod_s_requests_are_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Admission sums the others' needs of cpu, memory and ephemeral-storage from one
    `pod_requests` each (a node of n pods costs n, not n per checked resource), with the
    same message as per resource."""
    from ephemera.pods import resources as podresources

    calls: list[str] = []
    real = podresources.pod_requests

    def counting(pod: Any, **kwargs: Any) -> Any:
        calls.append(str(pod["metadata"]["uid"]))
        return real(pod, **kwargs)

    monkeypatch.setattr(podresources, "pod_requests", counting)
    needs = {"cpu": "100m", "memory": "16Mi", "ephemeral-storage": "1Mi"}
    pod = _pod()
    pod["spec"]["containers"][0]["resources"] = {"requests": needs}
    others = [{**pod, "metadata": {"uid": f"o{i}"}} for i in range(10)]
    allocatable = {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"}
    shortage = insufficient(pod, others, allocatable, {})
    assert shortage is not None and shortage.message == (
        "Node didn't have enough resource: cpu, requested: 100, used: 1000, capacity: 1000")
    assert sorted(calls) == sorted(["u", *(f"o{i}" for i in range(10))])
    calls.clear()
    assert insufficient(pod, others[:5], allocatable, {}) is None
    assert len(calls) == 6  # the pod and each of the 5 others once, for three resources

"""`AllocationManager.differs` (is the API's spec not the allocated one?) answers as comparing
canonical JSON does: key order and containers of equal JSON are no change, any value is."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ephemera.kubelet.allocation import AllocationCheckpoint, AllocationManager
from ephemera.kubelet.allocation.manager import allocated_view


def test_differs_is_a_change_of_the_spec_as_json(tmp_path: Path) -> None:
    manager = AllocationManager(AllocationCheckpoint(tmp_path), node_allocatable=dict)
    pod: dict[str, Any] = {
        "metadata": {"uid": "u1", "name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
                                 "resources": {"requests": {"cpu": "10m"}}}],
                 "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}]}}
    manager.allocated["u1"] = allocated_view(pod)
    assert not manager.differs(pod)
    reordered = {"metadata": pod["metadata"],
                 "spec": dict(reversed(list(copy.deepcopy(pod["spec"]).items())))}
    assert not manager.differs(reordered)
    as_tuple = copy.deepcopy(pod)
    as_tuple["spec"]["containers"] = tuple(as_tuple["spec"]["containers"])  # same JSON
    assert not manager.differs(as_tuple)
    changed = copy.deepcopy(pod)
    changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "20m"
    assert manager.differs(changed)
    grown = copy.deepcopy(pod)
    grown["spec"]["volumes"].append({"name": "w", "emptyDir": {}})
    assert manager.differs(grown)
    assert not manager.differs({"metadata": {"uid": "unknown"}, "spec": {}})

"""The kubelet's eviction decisions for local ephemeral storage, memory and pids, pure (no I/O):
local-storage limit eviction (`localstorage.py`), node-pressure thresholds and signals
(`thresholds.py`: memory, nodefs, imagefs, pid), memory-, disk- and PID-pressure ranking and
message (`ranking.py`), admission (`admission.py`), the shared
`Eviction` record and strings (`api.py`). The stateful loop (interval, node conditions kept
for the transition period, node-level reclaim, killing pods, events, metrics) is
`manager.py` (`EvictionManager`, imported from there: this package's top level stays pure);
see `decide` for one pass."""

from ephemera.kubelet.eviction.admission import AdmitDecision, admit_under_pressure
from ephemera.kubelet.eviction.api import REASON, Eviction, is_critical_pod
from ephemera.kubelet.eviction.decision import PassDecision, PressureConditions, decide
from ephemera.kubelet.eviction.localstorage import local_storage_eviction
from ephemera.kubelet.eviction.ranking import node_pressure_eviction, rank_for_disk_pressure
from ephemera.kubelet.eviction.thresholds import (
    DEFAULT_EVICTION_HARD,
    Threshold,
    ThresholdError,
    node_conditions,
    observe,
    parse_eviction_hard,
    thresholds_met,
)

__all__ = [
    "DEFAULT_EVICTION_HARD",
    "REASON",
    "AdmitDecision",
    "Eviction",
    "PassDecision",
    "PressureConditions",
    "Threshold",
    "ThresholdError",
    "admit_under_pressure",
    "decide",
    "is_critical_pod",
    "local_storage_eviction",
    "node_conditions",
    "node_pressure_eviction",
    "observe",
    "parse_eviction_hard",
    "rank_for_disk_pressure",
    "thresholds_met",
]

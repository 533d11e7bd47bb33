"""The scheduler: places pending pods on nodes through the API, as kube-scheduler's default
profile does for the plugins ephemera needs (NodeUnschedulable, TaintToleration,
NodeAffinity, NodeResourcesFit with LeastAllocated scoring, NodeDeclaredFeatures), with
upstream's failure messages, `PodScheduled` condition and events.

- `nodeinfo`: resource accounting per node (pod-level aware requests);
- `plugins`: the filters and the score (pure);
- `algorithm`: one decision and the FitError message (pure);
- `queue`, `cache`: the scheduling queue and the assumed-pods cache;
- `scheduler`: the component (informers, binding, status, events).
"""

from ephemera.scheduler.algorithm import ScheduleResult, fit_error_message, schedule_pod
from ephemera.scheduler.nodeinfo import NodeInfo, Resources
from ephemera.scheduler.scheduler import (
    DEFAULT_SCHEDULER_NAME,
    Scheduler,
    is_pending_for,
    run_scheduler,
)

__all__ = [
    "DEFAULT_SCHEDULER_NAME",
    "NodeInfo",
    "Resources",
    "ScheduleResult",
    "Scheduler",
    "fit_error_message",
    "is_pending_for",
    "run_scheduler",
    "schedule_pod",
]

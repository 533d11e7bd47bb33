"""The Priority admission plugin, as upstream's (`plugin/pkg/admission/priority`), on pods
(the main resource):

- create: a pod without `priorityClassName` gets `priority: 0` and `preemptionPolicy:
  PreemptLowerPriority` (there is no PriorityClass API, so no global default class); the
  built-in classes `system-node-critical` (2000001000) and `system-cluster-critical`
  (2000000000) give their value; any other class is 403 `no PriorityClass with name X was
  found`. A pod that sets a different `priority` (or `preemptionPolicy`) itself is 403 with
  upstream's message.
- update: a pod sent without `priority` or `preemptionPolicy` keeps the stored ones (validation
  then rejects any other change, as these fields are immutable).
"""

from __future__ import annotations

from typing import Any

from ephemera.apiserver.admission import AdmissionPluginBase, AdmissionRequest, is_pod_request

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
DEFAULT_PRIORITY = 0
# The PriorityClasses upstream creates at startup: name -> value.
SYSTEM_PRIORITY_CLASSES = {
    "system-node-critical": 2000001000,
    "system-cluster-critical": 2000000000,
}


def _spec(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else None


class Priority(AdmissionPluginBase):
    name = "Priority"

    def handles(self, req: AdmissionRequest) -> bool:
        return req.operation in ("CREATE", "UPDATE") and is_pod_request(req)

    async def admit(self, req: AdmissionRequest) -> None:
        spec = _spec(req.obj)
        if spec is None:
            return
        if req.operation == "UPDATE":
            old = _spec(req.old) or {}
            for key in ("priority", "preemptionPolicy"):
                if spec.get(key) is None and old.get(key) is not None:
                    spec[key] = old[key]
            return
        class_name = spec.get("priorityClassName") or ""
        if not class_name:
            priority = DEFAULT_PRIORITY
        elif class_name in SYSTEM_PRIORITY_CLASSES:
            priority = SYSTEM_PRIORITY_CLASSES[class_name]
        else:
            raise req.forbidden(f"no PriorityClass with name {class_name} was found")
        given = spec.get("priority")
        if given is not None and given != priority:
            raise req.forbidden(
                f"the integer value of priority ({given}) must not be provided in pod spec; "
                f"priority admission controller computed {priority} from the given "
                "PriorityClass name")
        spec["priority"] = priority
        policy = spec.get("preemptionPolicy")
        if policy is not None and policy != PREEMPT_LOWER_PRIORITY:
            raise req.forbidden(
                f"the string value of PreemptionPolicy ({policy}) must not be provided in pod "
                f"spec; priority admission controller computed {PREEMPT_LOWER_PRIORITY} from "
                "the given PriorityClass name")
        spec["preemptionPolicy"] = PREEMPT_LOWER_PRIORITY

"""The DefaultTolerationSeconds admission plugin, as upstream's
(`plugin/pkg/admission/defaulttolerationseconds`): a pod (create or update of the main
resource) that does not tolerate the `node.kubernetes.io/not-ready` or
`node.kubernetes.io/unreachable` NoExecute taints gets a toleration of each for 300 seconds.
"""

from __future__ import annotations

from typing import Any

from ephemera.apiserver.admission import AdmissionPluginBase, AdmissionRequest, is_pod_request

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300


def _tolerates(tolerations: list[Any], key: str) -> bool:
    return any(isinstance(t, dict) and (t.get("key") in (key, None, ""))
               and (t.get("effect") in ("NoExecute", None, "")) for t in tolerations)


class DefaultTolerationSeconds(AdmissionPluginBase):
    name = "DefaultTolerationSeconds"

    def handles(self, req: AdmissionRequest) -> bool:
        return req.operation in ("CREATE", "UPDATE") and is_pod_request(req)

    async def admit(self, req: AdmissionRequest) -> None:
        spec = (req.obj or {}).get("spec")
        if not isinstance(spec, dict):
            return
        tolerations = spec.get("tolerations")
        if not isinstance(tolerations, list):
            tolerations = []
        added = [{"key": key, "operator": "Exists", "effect": "NoExecute",
                  "tolerationSeconds": DEFAULT_TOLERATION_SECONDS}
                 for key in (NOT_READY_TAINT, UNREACHABLE_TAINT)
                 if not _tolerates(tolerations, key)]
        if added:
            spec["tolerations"] = [*tolerations, *added]

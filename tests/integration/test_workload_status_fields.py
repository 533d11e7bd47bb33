"""The workload status fields upstream's JSON never omits (no `omitempty` on the Go field): a
StatefulSet's `replicas` and `availableReplicas` are 0 in a new object and after a `/status`
write that leaves them out, as upstream's decode-and-encode makes them (kr8s'
`test_wait_replicas` reads `.status.availableReplicas` of a StatefulSet just created)."""

from __future__ import annotations

import copy

from apiserver_fixtures import Api

STS = "/apis/apps/v1/namespaces/default/statefulsets"


async def test_statefulset_status_keeps_the_fields_never_omitted(api: Api) -> None:
    body = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
    status, created = await api.post(STS, body)
    assert status == 201, created
    assert created["status"] == {"replicas": 0, "availableReplicas": 0}
    written = copy.deepcopy(created)
    written["status"] = {"replicas": 2, "readyReplicas": 1, "currentRevision": "web-1"}
    status, updated = await api.put(f"{STS}/web/status", written)
    assert status == 200, updated
    assert updated["status"] == {"replicas": 2, "readyReplicas": 1, "currentRevision": "web-1",
                                 "availableReplicas": 0}
    status, read = await api.get(f"{STS}/web")
    assert read["status"]["availableReplicas"] == 0

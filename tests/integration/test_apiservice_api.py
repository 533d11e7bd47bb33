"""apiregistration.k8s.io/v1 APIService through the in-process apiserver (the Python
client's `test_create_apiservice_from_yaml_with_conflict`): stored with the port default and
an empty status, the name rule and validation messages, the status rules, the Table, the
`Warning` that ephemera aggregates nothing, and the 409 of a second create."""

from __future__ import annotations

import copy
from typing import Any

from apiserver_fixtures import TABLE_ACCEPT, Api, causes

APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"


def apiservice(name: str = "v1alpha1.wardle.k8s.io", **spec: Any) -> dict[str, Any]:
    base = {"group": "wardle.k8s.io", "version": "v1alpha1", "groupPriorityMinimum": 1000,
            "versionPriority": 15, "insecureSkipTLSVerify": True,
            "service": {"name": "api", "namespace": "wardle"}}
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": name}, "spec": {**base, **spec}}


async def test_create_conflict_status_and_table(api: Api) -> None:
    status, created, response = await api.request("POST", APISERVICES, apiservice())
    assert status == 201, created
    assert "API aggregation is not implemented in ephemera" in response.headers["Warning"]
    assert created["spec"]["service"]["port"] == 443
    assert created["status"] == {}
    status, again, _ = await api.request("POST", APISERVICES, apiservice())
    assert status == 409
    assert again["message"] == ('apiservices.apiregistration.k8s.io "v1alpha1.wardle.k8s.io" '
                                "already exists")
    assert again["details"] == {"name": "v1alpha1.wardle.k8s.io",
                                "group": "apiregistration.k8s.io", "kind": "apiservices"}
    reported = copy.deepcopy(created)
    reported["status"] = {"conditions": [{"type": "Available", "status": "Maybe"}]}
    status, refused = await api.put(f"{APISERVICES}/v1alpha1.wardle.k8s.io/status", reported)
    assert status == 422
    assert causes(refused) == [("status.conditions[0].status",
                                'Unsupported value: "Maybe": supported values: "True", '
                                '"False", "Unknown"')]
    reported["status"] = {"conditions": [{"type": "Available", "status": "False",
                                          "reason": "ServiceNotFound"}]}
    status, updated = await api.put(f"{APISERVICES}/v1alpha1.wardle.k8s.io/status", reported)
    assert status == 200, updated
    await api.post(APISERVICES, apiservice("v1.example.com", group="example.com", version="v1",
                                           service=None, insecureSkipTLSVerify=False))
    status, table = await api.get(APISERVICES, headers={"Accept": TABLE_ACCEPT})
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Service", "Available", "Age"]
    assert [r["cells"][:3] for r in table["rows"]] == [
        ["v1.example.com", "Local", "Unknown"],
        ["v1alpha1.wardle.k8s.io", "wardle/api", "False (ServiceNotFound)"]]
    status, deleted = await api.delete(f"{APISERVICES}/v1alpha1.wardle.k8s.io")
    assert status == 200 and deleted["kind"] == "Status"


async def test_validation_messages(api: Api) -> None:
    status, refused = await api.post(APISERVICES, apiservice(
        "v1.wardle.k8s.io", groupPriorityMinimum=0, versionPriority=1001, caBundle="AAEC",
        service={"name": "", "namespace": "", "port": 70000}))
    assert status == 422
    assert refused["message"].startswith(
        'APIService.apiregistration.k8s.io "v1.wardle.k8s.io" is invalid')
    assert causes(refused) == [
        ("metadata.name", 'Invalid value: "v1.wardle.k8s.io": must be '
         '`spec.version+"."+spec.group`: "v1alpha1.wardle.k8s.io"'),
        ("spec.groupPriorityMinimum", "Invalid value: 0: must be positive and less than 20000"),
        ("spec.versionPriority", "Invalid value: 1001: must be positive and less than 1000"),
        ("spec.service.namespace", "Required value"),
        ("spec.service.name", "Required value"),
        ("spec.service.port",
         "Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive"),
        ("spec.insecureSkipTLSVerify",
         "Invalid value: true: may not be true if caBundle is present"),
    ]
    status, refused = await api.post(APISERVICES, apiservice(
        "v2.", group="", version="v2", service=None, caBundle="AAEC"))
    assert status == 422
    assert causes(refused) == [
        ("spec.group",
         "Required value: only v1 may have an empty group and it better be legacy kube"),
        ("spec.caBundle",
         'Invalid value: "3 bytes": local APIServices may not have a caBundle'),
        ("spec.insecureSkipTLSVerify",
         "Invalid value: true: local APIServices may not have insecureSkipTLSVerify"),
    ]


async def test_a_status_write_keeps_the_stored_metadata(api: Api) -> None:
    """upstream's apiServerStatusStrategy: labels, annotations, finalizers and owner
    references stay as stored on a `/status` write."""
    await api.post(APISERVICES, apiservice())
    write = {"metadata": {"labels": {"via": "status"}, "annotations": {"a": "b"},
                          "finalizers": ["example.com/f"]},
             "status": {"conditions": [{"type": "Available", "status": "True"}]}}
    status, after = await api.patch(f"{APISERVICES}/v1alpha1.wardle.k8s.io/status", write,
                                    "application/merge-patch+json")
    assert status == 200, after
    assert after["status"]["conditions"][0]["status"] == "True"
    assert not {"labels", "annotations", "finalizers"} & set(after["metadata"])

"""batch/v1 Jobs and CronJobs through the in-process apiserver: upstream's defaults, the
generated selector and template labels, validation messages, immutable fields, the Table
columns, discovery, the status subresource and the Job DELETE's orphaning default."""

from __future__ import annotations

import copy
from typing import Any

from apiserver_fixtures import TABLE_ACCEPT, Api, causes

JOBS = "/apis/batch/v1/namespaces/default/jobs"
CRONJOBS = "/apis/batch/v1/namespaces/default/cronjobs"


def job(name: str = "pi", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox:1.36"}]}}, **spec}}


def cronjob(name: str = "tick", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
            "spec": {"schedule": "*/5 * * * *", "jobTemplate": job()["spec"] and {
                "spec": copy.deepcopy(job()["spec"])}, **spec}}


async def test_job_defaults_and_generated_selector(api: Api) -> None:
    status, created = await api.post(JOBS, job())
    assert status == 201, created
    uid = created["metadata"]["uid"]
    spec = created["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["completionMode"] == "NonIndexed"
    assert spec["suspend"] is False
    assert spec["podReplacementPolicy"] == "TerminatingOrFailed"
    assert "manualSelector" not in spec
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "pi",
        "controller-uid": uid, "job-name": "pi"}
    # pod template defaults, not the Pod-only ones
    pod_spec = spec["template"]["spec"]
    assert pod_spec["dnsPolicy"] == "ClusterFirst"
    assert pod_spec["terminationGracePeriodSeconds"] == 30
    assert "enableServiceLinks" not in pod_spec
    assert created["status"] == {}
    assert created["metadata"]["generation"] == 1


async def test_job_validation_messages(api: Api) -> None:
    body = job("bad", parallelism=-1, completionMode="Sometimes")
    del body["spec"]["template"]["spec"]["restartPolicy"]
    status, refused = await api.post(JOBS, body)
    assert status == 422
    assert refused["message"].startswith('Job.batch "bad" is invalid: ')
    found = causes(refused)
    assert ("spec.parallelism", "Invalid value: -1: must be greater than or equal to 0") in found
    assert ("spec.completionMode",
            'Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed"') in found
    assert ("spec.template.spec.restartPolicy",
            'Required value: valid values: "OnFailure", "Never"') in found
    # the pod rules apply to the template
    body = job("badpod")
    body["spec"]["template"]["spec"]["containers"][0]["name"] = "Not_A_Label"
    status, refused = await api.post(JOBS, body)
    assert status == 422
    assert any(f == "spec.template.spec.containers[0].name" for f, _ in causes(refused))
    # a manual selector must select the template
    body = job("manual", manualSelector=True, selector={"matchLabels": {"app": "x"}})
    body["spec"]["template"]["metadata"] = {"labels": {"app": "y"}}
    status, refused = await api.post(JOBS, body)
    assert status == 422
    assert ("spec.template.metadata.labels",
            'Invalid value: map[string]string{"app":"y"}: `selector` does not match template '
            "`labels`") in causes(refused)


async def test_job_immutable_fields_and_status(api: Api) -> None:
    status, created = await api.post(JOBS, job())
    assert status == 201
    changed = copy.deepcopy(created)
    changed["spec"]["completions"] = 3
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1.37"
    status, refused = await api.put(f"{JOBS}/pi", changed)
    assert status == 422
    fields = [f for f, _ in causes(refused)]
    assert "spec.completions" in fields and "spec.template" in fields
    assert ("spec.completions", "Invalid value: 3: field is immutable") in causes(refused)
    # status through its subresource; the main resource keeps it
    current = copy.deepcopy(created)
    current["status"] = {"active": 1, "startTime": "2026-01-01T00:00:00Z"}
    status, updated = await api.put(f"{JOBS}/pi/status", current)
    assert status == 200, updated
    assert updated["status"]["active"] == 1
    updated["status"] = {}
    updated["spec"]["parallelism"] = 2
    status, again = await api.put(f"{JOBS}/pi", updated)
    assert status == 200, again
    assert again["status"]["active"] == 1
    assert again["metadata"]["generation"] == 2


async def test_job_table_and_discovery(api: Api) -> None:
    await api.post(JOBS, job(completions=5, parallelism=2))
    status, table = await api.get(JOBS, headers={"Accept": TABLE_ACCEPT})
    assert status == 200
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == ["Name", "Status", "Completions", "Duration", "Age", "Containers",
                     "Images", "Selector"]
    cells = table["rows"][0]["cells"]
    assert cells[:4] == ["pi", "Running", "0/5", ""]
    assert cells[5:7] == ["c", "busybox:1.36"]
    assert cells[7].startswith("batch.kubernetes.io/controller-uid=")
    status, resources = await api.get("/apis/batch/v1")
    assert status == 200
    by_name = {r["name"]: r for r in resources["resources"]}
    assert {"jobs", "jobs/status", "cronjobs", "cronjobs/status"} <= set(by_name)
    assert by_name["cronjobs"]["shortNames"] == ["cj"]
    assert "all" in by_name["jobs"]["categories"]


async def test_job_delete_orphans_by_default_with_a_warning(api: Api) -> None:
    await api.post(JOBS, job())
    status, body, response = await api.request("DELETE", f"{JOBS}/pi")
    assert status == 200
    assert body["metadata"]["finalizers"] == ["orphan"]
    assert "child pods are preserved by default when jobs are deleted" in \
        response.headers["Warning"]
    await api.post(JOBS, job("other"))
    status, body, response = await api.request("DELETE", f"{JOBS}/other",
                                               {"propagationPolicy": "Background"})
    assert status == 200 and "Warning" not in response.headers


async def test_cronjob_defaults_validation_and_table(api: Api) -> None:
    status, created = await api.post(CRONJOBS, cronjob())
    assert status == 201, created
    spec = created["spec"]
    assert (spec["concurrencyPolicy"], spec["suspend"], spec["successfulJobsHistoryLimit"],
            spec["failedJobsHistoryLimit"]) == ("Allow", False, 3, 1)
    assert "backoffLimit" not in spec["jobTemplate"]["spec"]  # a Job's defaults come later
    status, refused = await api.post(CRONJOBS, cronjob(
        "bad", schedule="* * *", concurrencyPolicy="Sometimes", timeZone="Mars/Olympus"))
    assert status == 422
    found = causes(refused)
    assert ("spec.schedule",
            'Invalid value: "* * *": expected exactly 5 fields, found 3: [* * *]') in found
    assert ("spec.concurrencyPolicy", 'Unsupported value: "Sometimes": supported values: '
            '"Allow", "Forbid", "Replace"') in found
    assert ("spec.timeZone",
            'Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus') in found
    status, refused = await api.post(CRONJOBS, cronjob("tz", schedule="CRON_TZ=UTC 0 * * * *"))
    assert status == 422
    assert causes(refused) == [("spec.schedule", 'Invalid value: "CRON_TZ=UTC 0 * * * *": '
                                "cannot use TZ or CRON_TZ in schedule, use timeZone field "
                                "instead")]
    status, table = await api.get(CRONJOBS, headers={"Accept": TABLE_ACCEPT})
    assert [c["name"] for c in table["columnDefinitions"]][:7] == [
        "Name", "Schedule", "Timezone", "Suspend", "Active", "Last Schedule", "Age"]
    assert table["rows"][0]["cells"][:6] == ["tick", "*/5 * * * *", "<none>", "False", 0,
                                             "<none>"]


async def test_fields_without_effect_are_warned(api: Api) -> None:
    body = job("warned", completions=2, completionMode="Indexed", backoffLimitPerIndex=1)
    body["spec"]["template"]["spec"]["hostAliases"] = [{"ip": "10.0.0.1",
                                                        "hostnames": ["x"]}]
    status, created, response = await api.request("POST", JOBS, body)
    assert status == 201, created
    warnings = response.headers.getall("Warning")
    assert any("spec.backoffLimitPerIndex: per-index backoff limits have no effect in "
               "ephemera (not implemented)" in w for w in warnings)
    assert any("spec.template.spec.hostAliases:" in w for w in warnings)


async def test_server_side_apply_and_strategic_merge_patch(api: Api) -> None:
    applied = job("applied", completions=2)
    status, created = await api.patch(f"{JOBS}/applied?fieldManager=me", applied,
                                      "application/apply-patch+yaml")
    assert status == 201, created
    assert created["spec"]["completions"] == 2
    assert created["spec"]["selector"]["matchLabels"]
    managers = [m["manager"] for m in created["metadata"]["managedFields"]]
    assert managers == ["me"]
    # a strategic merge patch of the template's containers merges by name
    patch = {"spec": {"parallelism": 2, "template": {"spec": {"containers": [
        {"name": "c", "env": [{"name": "A", "value": "1"}]}]}}}}
    status, patched = await api.patch(f"{JOBS}/applied", patch,
                                      "application/strategic-merge-patch+json")
    assert status == 422  # the template is immutable...
    assert any(f == "spec.template" for f, _ in causes(patched))
    status, patched = await api.patch(f"{JOBS}/applied", {"spec": {"parallelism": 2}},
                                      "application/strategic-merge-patch+json")
    assert status == 200, patched  # ...parallelism is not
    assert patched["spec"]["parallelism"] == 2
    assert patched["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1.36"

"""batch/v1's pure rules: one Job sync's decisions (`ephemera.batch.jobsync`), the Job and
CronJob validation messages and schedules (`ephemera.batch.jobs`, `ephemera.batch.cronjobs`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ephemera.api.featuregates import FeatureGates
from ephemera.api.field import Path
from ephemera.batch.cronjobs import (
    ScheduleError,
    default_cronjob,
    job_name,
    most_recent_due,
    parse_schedule,
    validate_cronjob,
)
from ephemera.batch.jobs import default_job, generate_selector, validate_job_spec
from ephemera.batch.jobsync import compute, format_indexes, parse_indexes

NOW = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
F = "batch.kubernetes.io/job-tracking"


def job(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"},
                            "spec": {"template": {"spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "c", "image": "i"}]}}, **spec},
                            "status": {}}
    default_job(body, FeatureGates())
    return body


def pod(name: str, phase: str = "Running", *, tracked: bool = True, index: int | None = None,
        deleting: bool = False, code: int = 0) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                          "creationTimestamp": "2026-03-01T11:00:00Z"}
    if tracked:
        md["finalizers"] = [F]
    if index is not None:
        md["annotations"] = {"batch.kubernetes.io/job-completion-index": str(index)}
    if deleting:
        md["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if code:
        status["containerStatuses"] = [{"name": "c", "state": {"terminated": {
            "exitCode": code}}}]
    return {"metadata": md, "spec": {"nodeName": "n"}, "status": status}


def test_a_new_job_starts_parallelism_pods() -> None:
    plan = compute(job(completions=5, parallelism=2), [], NOW)
    assert plan.create == [None, None]
    assert plan.status["startTime"] == "2026-03-01T12:00:30Z"


def test_never_more_than_the_remaining_completions() -> None:
    j = job(completions=5, parallelism=3)
    j["status"] = {"succeeded": 4, "startTime": "2026-03-01T12:00:00Z"}
    assert compute(j, [], NOW).create == [None]
    # one running already: nothing more
    assert compute(j, [pod("a")], NOW).create == []


def test_finished_pods_are_recorded_then_released_then_counted() -> None:
    j = job(completions=2, parallelism=2)
    done = pod("a", "Succeeded")
    plan = compute(j, [done, pod("b")], NOW)
    assert plan.status["uncountedTerminatedPods"] == {"succeeded": ["uid-a"]}
    assert plan.release == ["a"]
    assert plan.status.get("succeeded", 0) == 0
    j["status"] = plan.status
    released = pod("a", "Succeeded", tracked=False)
    plan = compute(j, [released, pod("b")], NOW)
    assert plan.status["succeeded"] == 1
    assert plan.status["uncountedTerminatedPods"] == {}
    assert plan.create == []  # b still runs for the last completion


def test_success_criteria_then_complete() -> None:
    j = job(completions=1)
    j["status"] = {"succeeded": 1, "startTime": "2026-03-01T12:00:00Z"}
    plan = compute(j, [pod("a", "Succeeded", tracked=False)], NOW)
    types = [(c["type"], c["reason"]) for c in plan.status["conditions"]]
    assert types == [("SuccessCriteriaMet", "CompletionsReached"),
                     ("Complete", "CompletionsReached")]
    assert plan.status["completionTime"] == "2026-03-01T12:00:30Z"
    assert ("Normal", "Completed", "Job completed") in plan.events


def test_backoff_limit_makes_a_failure_target_then_failed() -> None:
    j = job(backoffLimit=1)
    j["status"] = {"failed": 2, "startTime": "2026-03-01T12:00:00Z"}
    plan = compute(j, [pod("c")], NOW)
    assert plan.delete == ["c"]
    assert [c["type"] for c in plan.status["conditions"]] == ["FailureTarget"]
    j["status"] = plan.status
    plan = compute(j, [pod("c", "Failed", tracked=False)], NOW)
    failed = plan.status["conditions"][-1]
    assert (failed["type"], failed["reason"], failed["message"]) == (
        "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert ("Warning", "BackoffLimitExceeded",
            "Job has reached the specified backoff limit") in plan.events


def test_active_deadline() -> None:
    j = job(activeDeadlineSeconds=10)
    j["status"] = {"startTime": "2026-03-01T12:00:25Z"}
    plan = compute(j, [pod("a")], NOW)
    assert plan.requeue_after == pytest.approx(5.0)
    j["status"] = {"startTime": "2026-03-01T11:00:00Z"}
    plan = compute(j, [pod("a")], NOW)
    assert plan.status["conditions"][0]["reason"] == "DeadlineExceeded"
    assert plan.delete == ["a"]


def test_pod_failure_policy_fail_job_and_ignore() -> None:
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In",
                                                              "values": [42]}},
                        {"action": "Ignore", "onExitCodes": {"operator": "In",
                                                             "values": [7]}}]}
    j = job(podFailurePolicy=policy)
    plan = compute(j, [pod("a", "Failed", code=42)], NOW)
    target = plan.status["conditions"][0]
    assert (target["type"], target["reason"], target["message"]) == (
        "FailureTarget", "PodFailurePolicy",
        "Container c for pod ns/a failed with exit code 42 matching FailJob rule at index 0")
    ignored = compute(job(podFailurePolicy=policy), [pod("b", "Failed", code=7)], NOW)
    assert ignored.release == ["b"]
    assert ignored.status["uncountedTerminatedPods"] == {}
    assert ignored.create == [None]  # replaced, not counted


def test_indexed_jobs_create_missing_indexes() -> None:
    j = job(completions=4, parallelism=2, completionMode="Indexed")
    j["status"] = {"completedIndexes": "0", "succeeded": 1,
                   "startTime": "2026-03-01T12:00:00Z"}
    plan = compute(j, [pod("p1", index=1)], NOW)
    assert plan.create == [2]
    assert parse_indexes("1,3-5") == {1, 3, 4, 5}
    assert format_indexes({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7"


def test_suspend_deletes_active_pods() -> None:
    j = job(suspend=True)
    plan = compute(j, [pod("a")], NOW)
    assert plan.delete == ["a"]
    assert plan.status["conditions"][0]["reason"] == "JobSuspended"
    assert ("Normal", "Suspended", "Job suspended") in plan.events


def test_a_deleted_running_pod_counts_as_failed_unless_only_failed_are_replaced() -> None:
    plan = compute(job(), [pod("a", deleting=True)], NOW)
    assert plan.status["uncountedTerminatedPods"] == {"failed": ["uid-a"]}
    plan = compute(job(podReplacementPolicy="Failed"), [pod("a", deleting=True)], NOW)
    assert plan.status["uncountedTerminatedPods"] == {}
    assert plan.create == []  # waits for the terminating pod


def test_job_spec_messages() -> None:
    spec = job(completionMode="Indexed", parallelism=200000)["spec"]
    spec.pop("completions", None)
    errs = [str(e) for e in validate_job_spec(spec, Path("spec"), FeatureGates())]
    assert "spec.completions: Required value: when completion mode is Indexed" in errs
    assert ("spec.parallelism: Invalid value: 200000: must be less than or equal to 100000 "
            "when completion mode is Indexed") in errs


def test_a_null_spec_or_template_is_an_empty_one_when_the_selector_is_generated() -> None:
    """JSON `null` is Go's zero value: the selector and the template's labels are made as
    for an absent spec (the fuzz suite's `{"spec": null}` Job was a 500)."""
    for job in ({"metadata": {"name": "x", "uid": "u"}, "spec": None},
                {"metadata": {"name": "x", "uid": "u"},
                 "spec": {"template": {"metadata": None}, "selector": None}}):
        generate_selector(job)
        assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid":
                                                           "u"}}
        assert job["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"] \
            == "x"


def test_a_null_template_is_defaulted_as_an_empty_one() -> None:
    """A JobSpec's template and a CronJob's jobTemplate, its spec and template are struct
    values in Go: a null (or missing) one gets the pod spec defaults as `{}` does."""
    gates = FeatureGates()
    job: dict[str, Any] = {"spec": {"template": None}}
    default_job(job, gates)
    assert job["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirst"
    for cronjob in ({"spec": {"jobTemplate": None}}, {"spec": {"jobTemplate": {"spec": {
            "template": {"spec": None}}}}}, {"spec": None}):
        default_cronjob(cronjob, gates)
        pod_spec = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert (pod_spec["restartPolicy"], cronjob["spec"]["concurrencyPolicy"]) == (
            "Always", "Allow")


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty spec string"),
    ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
    ("@fortnightly", "unrecognized descriptor: @fortnightly"),
])
def test_schedule_errors(text: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message.replace("[", r"\[").replace("*", r"\*")):
        parse_schedule(text)


def test_schedules_and_due_times() -> None:
    hourly = parse_schedule("@hourly")
    start = datetime(2026, 3, 1, 10, 30, tzinfo=UTC)
    due = most_recent_due(hourly, start, datetime(2026, 3, 1, 12, 5, tzinfo=UTC), None)
    assert due.scheduled == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert due.missed == 1
    assert due.next_time == datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
    every = parse_schedule("@every 90s")
    assert every.next_after(start) == start + timedelta(seconds=90)


def test_many_missed_start_times_give_the_latest_one() -> None:
    """After a long pause (more than 100 missed runs) the due time is the latest start time
    before now, however sparse the schedule, and a constant delay is not walked step by
    step."""
    now = datetime(2026, 3, 31, 12, 5, tzinfo=UTC)
    hourly = most_recent_due(parse_schedule("@hourly"), datetime(2026, 3, 1, tzinfo=UTC),
                             now, None)
    assert hourly.scheduled == datetime(2026, 3, 31, 12, 0, tzinfo=UTC)
    assert hourly.next_time == datetime(2026, 3, 31, 13, 0, tzinfo=UTC)
    daily = most_recent_due(parse_schedule("0 3 * * *"), datetime(2025, 6, 1, tzinfo=UTC),
                            now, None)
    assert daily.scheduled == datetime(2026, 3, 31, 3, 0, tzinfo=UTC)
    start = datetime(2026, 3, 31, 12, 0, 0, tzinfo=UTC) - timedelta(days=400)
    every = most_recent_due(parse_schedule("@every 1s"), start, now, None)
    assert every.scheduled is not None and now - timedelta(seconds=1) < every.scheduled <= now
    assert every.next_time > now
    assert job_name("tick", datetime(2026, 3, 1, 12, 0, tzinfo=UTC)) == "tick-29539440"


def test_cronjob_messages() -> None:
    cj = {"metadata": {"name": "x" * 53}, "spec": {
        "schedule": "0 * * * *", "concurrencyPolicy": "Allow", "timeZone": "Local",
        "jobTemplate": {"spec": {"selector": {"matchLabels": {"a": "b"}},
                                 "template": {"spec": {
                                     "restartPolicy": "OnFailure",
                                     "containers": [{"name": "c", "image": "i",
                                                     "terminationMessagePolicy": "File",
                                                     "imagePullPolicy": "Always"}],
                                     "dnsPolicy": "ClusterFirst"}}}}}}
    errs = [str(e) for e in validate_cronjob(cj, FeatureGates())]
    assert ('spec.timeZone: Invalid value: "Local": timeZone must be an explicit time zone '
            "as defined in https://www.iana.org/time-zones") in errs
    assert any(e.startswith("spec.jobTemplate.spec.selector: Invalid value: ") and
               e.endswith("`selector` will be auto-generated") for e in errs)
    assert f'metadata.name: Invalid value: "{"x" * 53}": must be no more than 52 characters' \
        in errs

"""CronJobs (`batch/v1`) as upstream's `pkg/apis/batch` (v1 defaults, validation) and the
schedules the CronJob controller runs on: pure functions over plain dicts.

Schedules are parsed by `cronsim` (a small, kept, dependency-free cron library with strict
five-field parsing and Vixie cron's day-of-month/day-of-week rule, the same rule as
upstream's robfig/cron); upstream's descriptors (`@yearly`, `@annually`, `@monthly`,
`@weekly`, `@daily`, `@midnight`, `@hourly`) are translated to their five fields here and
`@every DURATION` is a constant delay, as robfig's `ParseStandard` reads them. Errors of the
field count, an empty schedule and an unknown descriptor read as robfig's; an error inside a
field is cronsim's wording (`Bad minute`), where robfig's would name the range.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ephemera.api import field
from ephemera.api import validation as meta_validation
from ephemera.api.field import FieldError, Path
from ephemera.api.meta import child_object
from ephemera.batch.jobs import default_job_spec_template, validate_job_spec

__all__ = [
    "CONCURRENCY_POLICIES",
    "Due",
    "Schedule",
    "ScheduleError",
    "default_cronjob",
    "job_name",
    "most_recent_due",
    "parse_schedule",
    "time_zone",
    "validate_cronjob",
    "validate_cronjob_update",
]

CONCURRENCY_POLICIES = ["Allow", "Forbid", "Replace"]
# The controller names a Job `<cronjob>-<minutes since the epoch>`: 11 more characters.
MAX_NAME_LENGTH = 52
_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_GO_DURATION = re.compile(r"^(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$")
_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                 "h": 3600.0}
_TIME_ZONE_PART = re.compile(r"^[A-Za-z.\-_0-9+]{1,14}$")


class ScheduleError(ValueError):
    pass


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule: cron fields, or a constant delay (`@every`)."""

    expression: str = ""
    every: timedelta | None = None
    zone: str | None = None  # a `TZ=`/`CRON_TZ=` prefix (only in CronJobs of old)

    def next_after(self, after: datetime) -> datetime:
        """The first time strictly after `after` (an aware datetime, in the schedule's
        time zone)."""
        if self.every is not None:
            base = after.replace(microsecond=0)
            return base + self.every
        return next(CronSim(self.expression, after.replace(microsecond=0)))


def _go_slice(parts: list[str]) -> str:
    return "[" + " ".join(parts) + "]"


def parse_schedule(text: str) -> Schedule:
    """robfig/cron's `ParseStandard`, on cronsim."""
    spec = text.strip()
    if not spec:
        raise ScheduleError("empty spec string")
    zone: str | None = None
    if spec.startswith(("TZ=", "CRON_TZ=")) and " " in spec:
        zone, spec = spec[spec.index("=") + 1:spec.index(" ")], spec[spec.index(" "):].strip()
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ScheduleError(f"provided bad location {zone}: unknown time zone "
                                f"{zone}") from None
    if spec.startswith("@"):
        if spec.startswith("@every "):
            raw = spec[len("@every "):].strip()
            if not _GO_DURATION.match(raw):
                raise ScheduleError(f"failed to parse duration {spec}: time: invalid duration "
                                    f'"{raw}"')
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _GO_DURATION_PART.findall(raw))
            return Schedule(every=timedelta(seconds=max(1, int(seconds))), zone=zone)
        if spec not in _DESCRIPTORS:
            raise ScheduleError(f"unrecognized descriptor: {spec}")
        spec = _DESCRIPTORS[spec]
    fields = spec.split()
    if len(fields) != 5:
        raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: "
                            f"{_go_slice(fields)}")
    try:
        CronSim(spec, datetime(2000, 1, 1))
    except CronSimError as err:
        raise ScheduleError(str(err)) from None
    return Schedule(expression=spec, zone=zone)


def time_zone(name: str | None) -> ZoneInfo | None:
    """The zone of `spec.timeZone` (None: the controller's, UTC in ephemera)."""
    return ZoneInfo(name) if name else None


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def default_cronjob(cronjob: dict[str, Any], gates: Mapping[str, bool]) -> None:
    """upstream's `SetDefaults_CronJob` and the job template's pod defaults (not the Job's
    own defaults: those come when the controller creates a Job)."""
    spec = child_object(cronjob, "spec")  # struct values down to the pod spec: `{}` when
    if not spec.get("concurrencyPolicy"):  # missing or null, and defaulted
        spec["concurrencyPolicy"] = "Allow"
    if spec.get("suspend") is None:
        spec["suspend"] = False
    if spec.get("successfulJobsHistoryLimit") is None:
        spec["successfulJobsHistoryLimit"] = 3
    if spec.get("failedJobsHistoryLimit") is None:
        spec["failedJobsHistoryLimit"] = 1
    default_job_spec_template(child_object(child_object(spec, "jobTemplate"), "spec"), gates)


def _validate_time_zone(value: Any, path: Path) -> list[FieldError]:
    if value is None:
        return []
    name = str(value)
    if not name:
        return [field.invalid(path, name, "timeZone must be nil or non-empty string")]
    for part in name.split("/"):
        if part in (".", "..") or part.startswith("-") or not _TIME_ZONE_PART.match(part):
            return [field.invalid(path, name, f"unknown time zone {name}")]
    errs: list[FieldError] = []
    if name.lower() == "local":
        errs.append(field.invalid(path, name, "timeZone must be an explicit time zone as "
                                              "defined in https://www.iana.org/time-zones"))
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        errs.append(field.invalid(path, name, f"unknown time zone {name}"))
    return errs


def _validate_spec(spec: Mapping[str, Any], old_spec: Mapping[str, Any] | None,
                   gates: Mapping[str, bool]) -> list[FieldError]:
    """upstream's `validateCronJobSpec`."""
    path = Path("spec")
    errs: list[FieldError] = []
    schedule = str(spec.get("schedule") or "")
    if not schedule:
        errs.append(field.required(path.child("schedule")))
    else:
        try:
            parse_schedule(schedule)
        except ScheduleError as err:
            errs.append(field.invalid(path.child("schedule"), schedule, str(err)))
        allow_tz = old_spec is not None and "TZ" in str(old_spec.get("schedule") or "")
        if allow_tz and "TZ" in schedule and spec.get("timeZone") is not None:
            errs.append(field.invalid(path.child("schedule"), schedule,
                                      "cannot use both timeZone field and TZ or CRON_TZ in "
                                      "schedule"))
        elif not allow_tz and "TZ" in schedule:
            errs.append(field.invalid(path.child("schedule"), schedule,
                                      "cannot use TZ or CRON_TZ in schedule, use timeZone "
                                      "field instead"))
    deadline = spec.get("startingDeadlineSeconds")
    if isinstance(deadline, int):
        errs.extend(meta_validation.validate_nonnegative_field(
            deadline, path.child("startingDeadlineSeconds")))
    if old_spec is None or old_spec.get("timeZone") != spec.get("timeZone"):
        errs.extend(_validate_time_zone(spec.get("timeZone"), path.child("timeZone")))
    policy = spec.get("concurrencyPolicy") or ""
    if not policy:
        errs.append(field.required(path.child("concurrencyPolicy")))
    elif policy not in CONCURRENCY_POLICIES:
        errs.append(field.not_supported(path.child("concurrencyPolicy"), policy,
                                        CONCURRENCY_POLICIES))
    template_path = path.child("jobTemplate")
    job_spec = _d(_d(spec.get("jobTemplate")).get("spec"))
    errs.extend(validate_job_spec(job_spec, template_path.child("spec"), gates))
    if job_spec.get("selector") is not None:
        errs.append(field.invalid(template_path.child("spec", "selector"),
                                  job_spec["selector"], "`selector` will be auto-generated"))
    if job_spec.get("manualSelector"):
        errs.append(field.not_supported(template_path.child("spec", "manualSelector"),
                                        True, ["nil", "false"]))
    for name in ("successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        value = spec.get(name)
        if isinstance(value, int):
            errs.extend(meta_validation.validate_nonnegative_field(value, path.child(name)))
    return errs


def validate_cronjob(cronjob: Mapping[str, Any], gates: Mapping[str, bool]
                     ) -> list[FieldError]:
    """upstream's `ValidateCronJobCreate` beyond the object metadata."""
    errs = _validate_spec(_d(cronjob.get("spec")), None, gates)
    name = str(_d(cronjob.get("metadata")).get("name") or "")
    if len(name) > MAX_NAME_LENGTH:
        errs.append(field.invalid(Path("metadata", "name"), name,
                                  f"must be no more than {MAX_NAME_LENGTH} characters"))
    return errs


def validate_cronjob_update(new: Mapping[str, Any], old: Mapping[str, Any],
                            gates: Mapping[str, bool]) -> list[FieldError]:
    """upstream's `ValidateCronJobUpdate` beyond the object metadata (no name length limit,
    so that older long-named CronJobs can still be changed)."""
    return _validate_spec(_d(new.get("spec")), _d(old.get("spec")), gates)


# --- the controller's schedule arithmetic ---------------------------------------------------

MAX_MISSED = 100  # upstream counts missed start times up to this many, then warns


@dataclass(frozen=True)
class Due:
    """The most recent start time due (None: none since `earliest`), how many were missed
    before it, and the next one after now."""

    scheduled: datetime | None
    missed: int
    next_time: datetime


def _aware(t: datetime, zone: ZoneInfo | None) -> datetime:
    return t.astimezone(zone) if zone is not None else t


def most_recent_due(schedule: Schedule, earliest: datetime, now: datetime,
                    zone: ZoneInfo | None) -> Due:
    """upstream's `mostRecentScheduleTime`: walk the start times after `earliest` up to
    `now` (in the CronJob's zone)."""
    if schedule.zone:
        zone = ZoneInfo(schedule.zone)
    t = schedule.next_after(_aware(earliest, zone))
    scheduled: datetime | None = None
    count = 0
    if schedule.every is not None and t <= now:
        # a constant delay: the start times are t + k * every, the latest found at once
        steps = (now - t) // schedule.every
        t += steps * schedule.every
        count = steps
    while t <= now:
        scheduled = t
        count += 1
        if count > MAX_MISSED + 1:
            # Only the latest matters (the count is only for the warning): walk on from a
            # start time shortly before now, found in windows doubling back from now.
            window = timedelta(minutes=2)
            while True:
                t = schedule.next_after(_aware(now - window, zone))
                if t <= now or now - window <= scheduled:
                    break
                window *= 2
            while t <= now:
                scheduled = t
                t = schedule.next_after(t)
            break
        t = schedule.next_after(t)
    return Due(scheduled, max(0, count - 1), t)


def job_name(cronjob_name: str, scheduled: datetime) -> str:
    """upstream's `getJobName`: the name and the scheduled time in minutes since the epoch."""
    return f"{cronjob_name}-{int(scheduled.timestamp()) // 60}"

"""The shared pure helpers: stored times parsed and written one way (`ephemera.api.meta`),
conditions read one way (`ephemera.api.conditions`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from ephemera.api import conditions, meta


def test_a_stored_time_parses_leniently_to_an_aware_datetime() -> None:
    assert meta.parse_time("2026-12-01T10:00:00Z") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    micro = meta.parse_time("2026-12-01T10:00:00.123456Z")
    assert micro is not None and micro.microsecond == 123456
    offset = meta.parse_time("2026-12-01T11:00:00+01:00")
    assert offset == datetime(2026, 12, 1, 10, tzinfo=UTC)
    naive = meta.parse_time("2026-12-01T10:00:00")
    assert naive is not None and naive.tzinfo is UTC
    for unset in (None, "", 5, "yesterday"):
        assert meta.parse_time(unset) is None


def test_times_are_written_in_utc_or_in_their_own_zone() -> None:
    berlin = timezone(timedelta(hours=1))
    moment = datetime(2026, 12, 1, 11, 0, 5, 999, tzinfo=berlin)
    assert meta.rfc3339(moment) == "2026-12-01T10:00:05Z"
    assert meta.rfc3339_in_zone(moment) == "2026-12-01T11:00:05+01:00"
    assert meta.rfc3339_in_zone(moment.astimezone(UTC)) == "2026-12-01T10:00:05Z"


def test_conditions_are_found_by_type_and_true_only_when_status_is_true() -> None:
    status = {"conditions": [{"type": "Complete", "status": "True"},
                             {"type": "Failed", "status": "False"}, "junk"]}
    assert conditions.find(status, "Failed") == {"type": "Failed", "status": "False"}
    assert conditions.find(status, "Suspended") is None
    assert conditions.find(None, "Complete") is None
    assert conditions.is_true(status, "Complete")
    assert not conditions.is_true(status, "Failed")
    assert not conditions.is_true({}, "Complete")

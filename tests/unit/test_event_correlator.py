"""client-go's event correlator (`ephemera.client.eventcorrelator`): repeats counted, similar
events combined from the tenth message, and the per-object spam filter (25 at once, then one
every 5 minutes), with a clock the test moves."""

from __future__ import annotations

from typing import Any

from ephemera.client.eventcorrelator import AGGREGATED_PREFIX, Correlated, EventCorrelator


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def event(message: str, *, reason: str = "SuccessfulMountVolume", name: str = "p",
          uid: str = "u1", field_path: str = "", component: str = "kubelet",
          type_: str = "Normal") -> dict[str, Any]:
    involved = {"kind": "Pod", "namespace": "ns", "name": name, "uid": uid, "apiVersion": "v1"}
    if field_path:
        involved["fieldPath"] = field_path
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{len(message):x}", "namespace": "ns"},
            "involvedObject": involved, "reason": reason, "message": message,
            "type": type_, "source": {"component": component, "host": "n1"},
            "firstTimestamp": "2026-12-03T00:00:00Z", "lastTimestamp": "2026-12-03T00:00:00Z",
            "count": 1, "reportingComponent": component, "reportingInstance": "n1"}


def write(correlator: EventCorrelator, new: dict[str, Any]) -> Correlated | None:
    """Correlate and, as the apiserver would, store what is written."""
    correlated = correlator.correlate(new)
    if correlated is not None:
        correlator.written(correlated, correlated.event)
    return correlated


def test_a_repeat_patches_the_count_of_the_first_event() -> None:
    correlator = EventCorrelator(clock=Clock())
    first = write(correlator, event("Started container c"))
    assert first is not None and first.patch is None
    again = write(correlator, {**event("Started container c"),
                               "lastTimestamp": "2026-12-03T00:01:00Z"})
    assert again is not None and again.patch == {
        "count": 2, "lastTimestamp": "2026-12-03T00:01:00Z", "message": "Started container c"}
    assert again.event["metadata"]["name"] == first.event["metadata"]["name"]
    assert again.event["firstTimestamp"] == "2026-12-03T00:00:00Z"
    # another container's event (fieldPath) is not a repeat
    other = write(correlator, event("Started container c", field_path="spec.containers{d}"))
    assert other is not None and other.patch is None


def test_the_tenth_distinct_message_is_combined_and_counted_on() -> None:
    correlator = EventCorrelator(clock=Clock())
    for i in range(9):
        written = write(correlator, event(f'MountVolume.SetUp succeeded for volume "v{i}"'))
        assert written is not None and written.patch is None
        assert not written.event["message"].startswith(AGGREGATED_PREFIX)
    tenth = write(correlator, event('MountVolume.SetUp succeeded for volume "v9"'))
    assert tenth is not None and tenth.patch is None
    assert tenth.event["message"] == AGGREGATED_PREFIX + \
        'MountVolume.SetUp succeeded for volume "v9"'
    eleventh = write(correlator, event('MountVolume.SetUp succeeded for volume "v10"'))
    assert eleventh is not None
    assert eleventh.event["metadata"]["name"] == tenth.event["metadata"]["name"]
    assert eleventh.patch == {"count": 2, "lastTimestamp": "2026-12-03T00:00:00Z",
                              "message": AGGREGATED_PREFIX +
                              'MountVolume.SetUp succeeded for volume "v10"'}
    # another reason about the same object is not combined
    unmounted = write(correlator, event("UnmountVolume.TearDown succeeded for volume \"v0\"",
                                        reason="SuccessfulUnMountVolume"))
    assert unmounted is not None and not unmounted.event["message"].startswith(
        AGGREGATED_PREFIX)


def test_aggregation_starts_again_after_ten_quiet_minutes() -> None:
    clock = Clock()
    correlator = EventCorrelator(clock=clock, burst=100)
    for i in range(9):
        write(correlator, event(f"m{i}"))
    clock.now += 601
    written = write(correlator, event("m9"))
    assert written is not None and written.event["message"] == "m9"


def test_an_object_gets_25_events_then_one_every_5_minutes() -> None:
    clock = Clock()
    correlator = EventCorrelator(clock=clock)
    outcomes = [write(correlator, event(f"m{i}", reason=f"R{i}")) for i in range(30)]
    assert [o is not None for o in outcomes] == [True] * 25 + [False] * 5
    # other objects, and other components about the same object, have buckets of their own
    assert write(correlator, event("m", name="q", uid="u2")) is not None
    assert write(correlator, event("m", component="default-scheduler")) is not None
    # Warnings have their own budget: routine Normal events never use it up
    assert write(correlator, event("MountVolume.SetUp failed", reason="FailedMount",
                                   type_="Warning")) is not None
    clock.now += 299
    assert write(correlator, event("late", reason="Late")) is None
    clock.now += 2
    assert write(correlator, event("late", reason="Late")) is not None
    assert write(correlator, event("later", reason="Later")) is None


def test_repeats_take_tokens_and_count_on_while_dropped() -> None:
    clock = Clock()
    correlator = EventCorrelator(clock=clock, burst=3)
    outcomes = [write(correlator, event("Back-off restarting failed container", reason="BackOff"))
                for _ in range(5)]
    assert [o.patch["count"] if o and o.patch else (1 if o else None) for o in outcomes] == \
        [1, 2, 3, None, None]
    clock.now += 300
    resumed = write(correlator, event("Back-off restarting failed container", reason="BackOff"))
    # as upstream: the dropped repeats were counted too
    assert resumed is not None and resumed.patch is not None and resumed.patch["count"] == 6

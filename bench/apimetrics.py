"""The apiserver's own request latencies over a phase of a benchmark, read from two scrapes
of its `/metrics` (`ephemera.apiserver.metrics`): what upstream's scalability SLOs are
measured on, for every client's requests (the hollow nodes', the scheduler's, the
controllers'), not only the benchmark's own.

`latency_summary(before, after)` takes the two texts (or, for `ephemera apiserver --workers
N`, two lists of every worker's text, whose counts are summed) and returns, per class of
request, the count and the p50/p99 estimated from the histogram buckets as Prometheus'
`histogram_quantile` does (linear within the bucket the rank falls in; the last finite
bound when it falls beyond it):

- from `apiserver_request_sli_duration_seconds` (the priority queue's wait left out, as the
  SLO reads it): `mutating` (POST, PUT, PATCH, APPLY, DELETE), `get` (one object), `list`;
  and `mutating_by_resource` (`pods`, `pods/status`, `events`, `leases`, ...);
- from `apiserver_request_duration_seconds` (the wait included): `mutating_with_wait`;
- from `apiserver_flowcontrol_request_wait_duration_seconds`: `queue_wait` by priority
  level.

`request_rates(before, after, seconds)` says what load the apiserver served in between:
requests a second by verb and resource (`"PUT leases"`, `"WATCH pods"`), from the count of
`apiserver_request_duration_seconds`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["MUTATING_VERBS", "histogram_quantile", "latency_summary", "request_rates"]

MUTATING_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE"})
SLI = "apiserver_request_sli_duration_seconds"
DURATION = "apiserver_request_duration_seconds"
WAIT = "apiserver_flowcontrol_request_wait_duration_seconds"

Labels = Mapping[str, str]
# bucket upper bound -> cumulative count, for each series (its labels less `le`)
Buckets = dict[frozenset[tuple[str, str]], dict[float, float]]


def _buckets(texts: str | Sequence[str], name: str) -> Buckets:
    """The histogram `name`'s cumulative bucket counts, summed over the scrapes `texts` (one
    per apiserver process)."""
    series: Buckets = defaultdict(lambda: defaultdict(float))
    for text in [texts] if isinstance(texts, str) else texts:
        for family in text_string_to_metric_families(text):
            if family.name != name:
                continue
            for sample in family.samples:
                if sample.name != name + "_bucket":
                    continue
                labels = dict(sample.labels)
                bound = float(labels.pop("le"))
                series[frozenset(labels.items())][bound] += sample.value
    return series


def _delta(before: Buckets, after: Buckets, keep: Callable[[Labels], bool],
           key: Callable[[Labels], str]) -> dict[str, dict[float, float]]:
    """The cumulative bucket counts added between the scrapes, summed per `key(labels)` over
    the series `keep` accepts."""
    summed: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for labels_set, counts in after.items():
        labels = dict(labels_set)
        if not keep(labels):
            continue
        earlier = before.get(labels_set, {})
        for bound, count in counts.items():
            summed[key(labels)][bound] += count - earlier.get(bound, 0.0)
    return summed


def histogram_quantile(q: float, cumulative: Mapping[float, float]) -> float | None:
    """Prometheus' estimate of the `q` quantile from cumulative bucket counts (with `+Inf`);
    None when there are no observations."""
    bounds = sorted(cumulative)
    total = cumulative.get(math.inf, 0.0)
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return previous_bound  # beyond the last finite bucket
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (
                (rank - previous_count) / (count - previous_count))
        previous_bound, previous_count = bound, count
    return previous_bound


def _summary(cumulative: Mapping[float, float]) -> dict[str, Any]:
    p50, p99 = histogram_quantile(0.5, cumulative), histogram_quantile(0.99, cumulative)
    return {"count": int(cumulative.get(math.inf, 0.0)),
            "p50_ms": None if p50 is None else round(p50 * 1000, 1),
            "p99_ms": None if p99 is None else round(p99 * 1000, 1)}


def _resource(labels: Labels) -> str:
    resource = labels.get("resource", "")
    return f"{resource}/{labels['subresource']}" if labels.get("subresource") else resource


def _classes(buckets: Mapping[str, Mapping[float, float]]) -> dict[str, dict[str, Any]]:
    return {name: _summary(counts) for name, counts in sorted(buckets.items())}


def latency_summary(before: str | Sequence[str], after: str | Sequence[str]
                    ) -> dict[str, Any]:
    """The latencies of the requests answered between two scrapes, each of one process or of
    every worker (see the module docstring)."""
    sli_before, sli_after = _buckets(before, SLI), _buckets(after, SLI)
    duration_before, duration_after = _buckets(before, DURATION), _buckets(after, DURATION)

    def mutating(labels: Labels) -> bool:
        return labels.get("verb") in MUTATING_VERBS

    def by_class(labels: Labels) -> str:
        verb = labels.get("verb", "")
        if verb in MUTATING_VERBS:
            return "mutating"
        if verb == "GET" and labels.get("scope") == "resource":
            return "get"
        return "list" if verb == "LIST" else "other"

    classes = _delta(sli_before, sli_after, lambda labels: bool(labels.get("resource")),
                     by_class)
    result = {name: _summary(classes.get(name, {})) for name in ("mutating", "get", "list")}
    result["mutating_by_resource"] = _classes(
        _delta(sli_before, sli_after, mutating, _resource))
    result["mutating_with_wait"] = _summary(
        _delta(duration_before, duration_after, mutating, lambda _: "all").get("all", {}))
    result["queue_wait"] = _classes(_delta(
        _buckets(before, WAIT), _buckets(after, WAIT),
        lambda labels: labels.get("execute") == "true",
        lambda labels: labels.get("priority_level", "")))
    return result


def request_rates(before: str | Sequence[str], after: str | Sequence[str], seconds: float
                  ) -> dict[str, float]:
    """Requests a second answered between two scrapes, by `"VERB resource"`, busiest first
    (those under 0.05 a second left out)."""
    counts = _delta(_buckets(before, DURATION), _buckets(after, DURATION),
                    lambda labels: bool(labels.get("resource")),
                    lambda labels: f"{labels.get('verb', '')} {_resource(labels)}")
    rates = {name: round(buckets.get(math.inf, 0.0) / seconds, 2)
             for name, buckets in counts.items()}
    return dict(sorted(((name, rate) for name, rate in rates.items() if rate >= 0.05),
                       key=lambda item: -item[1]))

"""`same_value` (the status manager's comparison: null members count as absent) answers as
comparing the `normalized` copies would, without building them."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ephemera.kubelet.status import normalized, same_status, same_value, status_patch

KEYS = st.sampled_from(["phase", "ready", "name", "state", "restartCount"])
JSON: Any = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from(["", "a", "Running"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12)


@given(JSON, JSON)
def test_same_value_is_equality_of_the_normalized_values(a: Any, b: Any) -> None:
    assert same_value(a, b) == (normalized(a) == normalized(b))
    assert same_value(a, normalized(a))


def test_nulls_are_absent_members_at_any_depth_but_not_list_items() -> None:
    running = {"phase": "Running", "containerStatuses": [{"name": "c", "ready": True}]}
    assert same_status(running, {**running, "message": None})
    assert same_status({"containerStatuses": [{"name": "c", "ready": True, "started": None}],
                        "phase": "Running"}, running)
    assert not same_status(running, {**running, "phase": "Pending"})
    assert not same_status(running, {"phase": "Running", "containerStatuses": [None]})
    assert not same_status({"phase": "Running"}, running)
    assert same_status(None, {"reason": None})
    assert status_patch(running, {**running, "message": None, "reason": "Evicted"}) == {
        "reason": "Evicted"}

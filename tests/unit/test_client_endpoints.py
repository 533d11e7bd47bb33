"""`EndpointPicker`: the order servers are tried in, stickiness, failover and recovery."""

from __future__ import annotations

import pytest

from ephemera.client.endpoints import EndpointPicker

A, B, C = "https://127.0.0.1:6443", "https://127.0.0.1:6444", "https://lb.example:443"


def test_urls_are_normalized_deduplicated_and_kept_in_order() -> None:
    picker = EndpointPicker([A + "/", B, A])
    assert picker.urls == (A, B) and picker.current() == A
    assert picker.add([B, C + "/"]) == [C]
    assert picker.urls == (A, B, C)
    with pytest.raises(ValueError, match="no apiserver URL"):
        EndpointPicker(["", " "])


def test_a_failure_moves_to_the_next_healthy_server_and_sticks_there() -> None:
    picker = EndpointPicker([A, B, C])
    picker.failed(A)
    assert picker.current() == B
    assert picker.candidates() == [B, C, A]  # the failed one last
    picker.failed(B)
    assert picker.current() == C and picker.candidates() == [C, A, B]  # oldest failure first
    # A late answer from A (a request sent before the switch): A's mark is cleared, but the
    # client stays on C, which answers
    picker.succeeded(A)
    assert picker.current() == C and picker.candidates() == [C, A, B]
    # C fails: A, healthy again, is next; an answer from B now (C failed) makes B current
    picker.failed(C)
    assert picker.current() == A
    picker.failed(A)
    picker.succeeded(B)
    assert picker.current() == B and picker.candidates() == [B, C, A]


def test_a_failure_of_another_server_does_not_move_the_current_one() -> None:
    picker = EndpointPicker([A, B])
    picker.failed(B)
    assert picker.current() == A and picker.candidates() == [A, B]
    single = EndpointPicker([A])
    single.failed(A)
    assert single.current() == A and single.candidates() == [A]

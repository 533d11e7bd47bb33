"""The mount helper's openat2 is tried again when the kernel answers EAGAIN (a mount or rename
elsewhere on the host raced a `..` of a RESOLVE_IN_ROOT walk), and only then."""

from __future__ import annotations

import errno

import pytest

from ephemera.kubelet.runtime import mountns


def _answers(monkeypatch: pytest.MonkeyPatch, *answers: int) -> list[int]:
    """Make the raw syscall give `answers` in turn (an errno as a negative number)."""
    calls: list[int] = []

    def syscall(number: int, *args: object) -> int:
        calls.append(number)
        answer = answers[min(len(calls), len(answers)) - 1]
        if answer < 0:
            raise OSError(-answer, "injected")
        return answer

    monkeypatch.setattr(mountns, "_syscall", syscall)
    return calls


def test_eagain_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _answers(monkeypatch, -errno.EAGAIN, -errno.EAGAIN, 7)
    assert mountns._openat2(3, "up/inside", 0, 0) == 7
    assert calls == [mountns.SYS_OPENAT2] * 3


def test_other_errors_are_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _answers(monkeypatch, -errno.ELOOP, 7)
    with pytest.raises(OSError) as raised:
        mountns._openat2(3, "pr", 0, 0)
    assert raised.value.errno == errno.ELOOP
    assert len(calls) == 1


def test_eagain_that_lasts_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _answers(monkeypatch, -errno.EAGAIN)
    with pytest.raises(OSError) as raised:
        mountns._openat2(3, "up/inside", 0, 0)
    assert raised.value.errno == errno.EAGAIN
    assert len(calls) == mountns.OPENAT2_ATTEMPTS
